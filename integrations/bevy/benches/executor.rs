//! Frame time of the engine-tasks executor against bevy's multi-threaded and
//! single-threaded executors on the same schedules: 256 empty systems with
//! ordering edges, the 30-system example game, and 16 systems of 20 µs
//! busy work that access nothing, `chain_weak`ed (`weak_chain_16`: bevy's
//! multi-threaded executor drops those weak orderings and runs the systems
//! in parallel; this crate's keeps them as strict ones, see the crate docs;
//! `engine-tasks-unordered` is the same systems without the chain, what
//! dropping them would give).
//!
//! bevy_ecs is built with the tests' features (`debug`, `bevy_debug_stepping`:
//! each `Schedule::run` looks for a `Stepping` resource, for every executor
//! alike).
//!
//! `cargo bench -p engine-tasks-bevy --bench executor`

#[path = "../examples/small_game/empty.rs"]
mod empty;
#[path = "../examples/small_game/game.rs"]
#[allow(dead_code)]
mod game;

use bevy_ecs::prelude::*;
use bevy_ecs::schedule::{MultiThreadedExecutor, SingleThreadedExecutor};
use criterion::{criterion_group, criterion_main, Criterion};
use std::time::{Duration, Instant};

#[derive(Clone, Copy)]
enum Exec {
    Pool,
    Multi,
    Single,
}

fn prepare(exec: Exec, mut schedule: Schedule, world: &mut World) -> Schedule {
    match exec {
        Exec::Pool => {
            engine_tasks_bevy::install(&mut schedule, world, engine_tasks::default_pool().handle())
                .expect("schedule builds");
        }
        Exec::Multi => {
            schedule.set_executor(MultiThreadedExecutor::new());
        }
        Exec::Single => {
            schedule.set_executor(SingleThreadedExecutor::new());
        }
    }
    schedule
}

fn bench(c: &mut Criterion) {
    let execs = [
        ("engine-tasks", Exec::Pool),
        ("bevy-multi", Exec::Multi),
        ("bevy-single", Exec::Single),
    ];
    let mut group = c.benchmark_group("empty_256");
    for (name, exec) in execs {
        let mut world = World::new();
        let mut schedule = prepare(exec, empty::schedule(), &mut world);
        group.bench_function(name, |b| b.iter(|| schedule.run(&mut world)));
    }
    group.finish();
    let mut group = c.benchmark_group("small_game");
    for (name, exec) in execs {
        let mut world = game::world();
        let mut schedule = prepare(exec, game::schedule(), &mut world);
        group.bench_function(name, |b| b.iter(|| schedule.run(&mut world)));
    }
    group.finish();
}

/// A system that accesses nothing and spins for 20 µs.
fn busy() -> impl FnMut() {
    || {
        let start = Instant::now();
        while start.elapsed() < Duration::from_micros(20) {
            std::hint::spin_loop();
        }
    }
}

/// 16 [`busy`] systems, weakly chained or not ordered at all.
fn busy_16(weak_chain: bool) -> Schedule {
    let systems = (
        busy(),
        busy(),
        busy(),
        busy(),
        busy(),
        busy(),
        busy(),
        busy(),
        busy(),
        busy(),
        busy(),
        busy(),
        busy(),
        busy(),
        busy(),
        busy(),
    );
    let mut schedule = Schedule::default();
    if weak_chain {
        schedule.add_systems(systems.chain_weak());
    } else {
        schedule.add_systems(systems);
    }
    schedule
}

fn bench_weak_chain(c: &mut Criterion) {
    let cases = [
        ("engine-tasks", Exec::Pool, true),
        ("engine-tasks-unordered", Exec::Pool, false),
        ("bevy-multi", Exec::Multi, true),
        ("bevy-single", Exec::Single, true),
    ];
    let mut group = c.benchmark_group("weak_chain_16");
    for (name, exec, weak_chain) in cases {
        let mut world = World::new();
        let mut schedule = prepare(exec, busy_16(weak_chain), &mut world);
        group.bench_function(name, |b| b.iter(|| schedule.run(&mut world)));
    }
    group.finish();
}

criterion_group!(benches, bench, bench_weak_chain);
criterion_main!(benches);

//! Frame time of the engine-tasks executor against bevy's multi-threaded and
//! single-threaded executors on the same schedules: 256 empty systems with
//! ordering edges, and the 30-system example game.
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

criterion_group!(benches, bench);
criterion_main!(benches);

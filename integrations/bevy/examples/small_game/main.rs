//! Runs a small bevy_ecs game (10,000 entities, 30 systems) for many frames
//! on the engine-tasks pool executor and prints frame statistics, next to
//! bevy's multi-threaded and single-threaded executors on the same schedule;
//! then the same for a schedule of 256 empty systems with ordering edges.
//!
//! `cargo run --release -p engine-tasks-bevy --example small_game [frames] [game|empty]`

mod empty;
mod game;

use bevy_ecs::schedule::{MultiThreadedExecutor, Schedule, SingleThreadedExecutor};
use bevy_ecs::world::World;
use std::time::{Duration, Instant};

fn run(name: &str, mut schedule: Schedule, mut world: World, frames: usize) -> Duration {
    let mut times: Vec<Duration> = Vec::with_capacity(frames);
    for _ in 0..frames {
        let start = Instant::now();
        schedule.run(&mut world);
        times.push(start.elapsed());
    }
    times.sort();
    let mean = times.iter().sum::<Duration>() / frames as u32;
    let p = |q: f64| times[((frames - 1) as f64 * q) as usize];
    print!(
        "{name:<14} frames {frames}  mean {mean:>9.1?}  p50 {:>9.1?}  p99 {:>9.1?}  max {:>9.1?}",
        p(0.5),
        p(0.99),
        p(1.0),
    );
    match world.get_resource::<game::Stats>() {
        Some(s) => println!(
            "  (alive {}, spawned {}, despawned {})",
            s.alive, s.spawned, s.despawned
        ),
        None => println!(),
    }
    mean
}

fn compare(label: &str, make_world: fn() -> World, make_schedule: fn() -> Schedule, frames: usize) {
    println!("{label}:");
    let mut world = make_world();
    let mut schedule = make_schedule();
    let pool = engine_tasks::default_pool().handle();
    engine_tasks_bevy::install(&mut schedule, &mut world, pool).expect("schedule builds");
    let ours = run("engine-tasks", schedule, world, frames);

    let mut schedule = make_schedule();
    schedule.set_executor(MultiThreadedExecutor::new());
    let multi = run("bevy multi", schedule, make_world(), frames);

    let mut schedule = make_schedule();
    schedule.set_executor(SingleThreadedExecutor::new());
    let single = run("bevy single", schedule, make_world(), frames);
    println!(
        "mean frame time: bevy multi / engine-tasks = {:.2}x, bevy single / engine-tasks = {:.2}x",
        multi.as_secs_f64() / ours.as_secs_f64(),
        single.as_secs_f64() / ours.as_secs_f64()
    );
}

fn main() {
    let frames = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(1000usize);
    let pool = engine_tasks::default_pool();
    println!(
        "{} entities, {} threads in the engine-tasks pool",
        game::ENTITIES,
        pool.threads()
    );

    let which = std::env::args().nth(2).unwrap_or_default();
    if which != "empty" {
        compare("small game", game::world, game::schedule, frames);
    }
    if which != "game" {
        compare("256 empty systems", World::new, empty::schedule, frames);
    }
}

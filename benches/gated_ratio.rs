//! The graph benchmark's DAG with every task-graph feature in use, against
//! bevy_ecs's single-threaded executor, in interleaved rounds: criterion's
//! `gated` group times each runner for seconds on end, and this VM's speed
//! drifts between such stretches by more than the 10% the comparison asks
//! to tell apart.
//!
//! Each round runs a stretch of frames of each runner, one runner after the
//! other, on the same threads, in orders that balance who goes first and
//! who follows whom (`ORDERS`):
//! - `plain`: the DAG as an engine-tasks graph (default pool: one worker
//!   and this thread);
//! - `gated`: the same DAG with a run condition on every node and on each
//!   layer's set, and a declared read of a shared resource (taken through
//!   the node's context) and write of an id of its own on every node
//!   (`gated_graph` in lib.rs);
//! - `bevy single-threaded` and `bevy single-threaded, gated`: bevy_ecs's
//!   `SingleThreadedExecutor` running the same DAG, plain and with the same
//!   conditions and resource read (`bevy_gated_schedule`).
//!
//! Per round it takes each runner's median frame, and the ratios of those
//! medians; it prints the median over the rounds of each runner's frame
//! and of each ratio, with the ratio's quartiles (a median of ratios, so
//! not the ratio of the medians above it), and how many of each graph's
//! frames ran alone, handed over, shared or planned.
//!
//! Paced (`rate` above 0), every frame waits for the next tick first, as a
//! game loop does: with a plain sleep, or with `sleep-until` as the fourth
//! argument the two engine-tasks graphs wait with their own
//! `TaskGraph::sleep_until`, which warms the frame before the tick (bevy's
//! schedules still sleep plainly: they have no such wait).
//!
//! Usage: `cargo run --release -p engine-tasks-benches --bin gated_ratio --
//! [nanoseconds of work per node, default 0] [rounds, default 61] [rate in
//! Hz, 0 for back to back; default: 0 and 60 in turn] [sleep or
//! sleep-until, default sleep]`

use bevy_ecs::schedule::SingleThreadedExecutor;
use engine_tasks::graph::Resources;
use engine_tasks::{FrameSharing, NodeClock, Pool, ReadyOrder};
use engine_tasks_benches::{
    benchmark_dag, bevy_gated_schedule, bevy_schedule, gated_graph, graph_of, init_bevy_pool,
    median, sleep_to, static_names, threads, GatedShared, Pacer, Pacing, Wait, Work,
};
use std::time::Instant;

/// The runners, in the order of their columns.
const RUNNERS: [&str; 4] = [
    "plain",
    "gated",
    "bevy single-threaded",
    "bevy single-threaded, gated",
];

/// The runners' order in a round, by round, in turn: each runner goes
/// first once in four rounds, and directly after each other runner once
/// (a Williams square). Paced, it matters: a graph that follows the other
/// graph finds the workers' early wake-ups going, one that follows bevy
/// does not.
const ORDERS: [[usize; 4]; 4] = [[0, 1, 3, 2], [1, 2, 0, 3], [2, 3, 1, 0], [3, 0, 2, 1]];

/// Frames per runner and round: back to back, enough for a stable median
/// of a frame of a few µs; paced, a sixth of a second at 60 Hz.
const FRAMES_BACK_TO_BACK: usize = 400;
const FRAMES_PACED: usize = 10;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let arg = |i: usize| args.get(i).map(|a| a.parse::<f64>().expect("a number"));
    let nanos = arg(0).unwrap_or(0.0) as u64;
    let rounds = arg(1).map_or(61, |r| r as usize);
    let rates = arg(2).map_or(vec![0.0, 60.0], |r| vec![r]);
    let wait = match args.get(3).map(String::as_str) {
        None | Some("sleep") => Wait::Sleep,
        Some("sleep-until") => Wait::SleepUntil,
        Some(other) => panic!("the wait is `sleep` or `sleep-until`, not `{other}`"),
    };
    let deps = benchmark_dag();
    let names = static_names("n", deps.len());
    let work = vec![Work::nanos(nanos); deps.len()];
    init_bevy_pool(threads());
    let pool = Pool::builder().threads(threads() - 1).build().unwrap();
    let mut plain = graph_of(&deps, &work, ReadyOrder::default(), NodeClock::On);
    let mut gated = gated_graph(&deps, &work, names);
    let mut resources = Resources::new();
    resources.insert(GatedShared(7));
    let (mut world, mut single) = bevy_schedule(&deps, &work, SingleThreadedExecutor::new());
    let (mut gated_world, mut single_gated) =
        bevy_gated_schedule(&deps, &work, SingleThreadedExecutor::new());
    println!(
        "{nanos} ns per node, {rounds} rounds, engine-tasks waiting with {wait:?}; median frame \
         over the rounds, in µs"
    );
    for rate in rates {
        let pacing = Pacing::from_hz(rate);
        let frames = match pacing {
            Pacing::BackToBack => FRAMES_BACK_TO_BACK,
            Pacing::Hz(_) => FRAMES_PACED,
        };
        // Per runner, its median frame of each round, in µs.
        let mut medians: [Vec<f64>; 4] = Default::default();
        // Per graph, its frames by how they ran.
        let mut modes = [[0usize; 4]; 2];
        for round in 0..rounds {
            for &runner in &ORDERS[round % ORDERS.len()] {
                let mut pacer = Pacer::new(pacing);
                let mut times = Vec::with_capacity(frames);
                for _ in 0..frames {
                    if let Some(tick) = pacer.next_tick() {
                        match runner {
                            0 => wait.until(tick, &plain, &pool),
                            1 => wait.until(tick, &gated, &pool),
                            _ => sleep_to(tick),
                        }
                    }
                    let start = Instant::now();
                    let sharing = match runner {
                        0 => Some(plain.run(&pool, &()).unwrap().sharing()),
                        1 => Some(gated.run(&pool, &resources).unwrap().sharing()),
                        2 => {
                            single.run(&mut world);
                            None
                        }
                        _ => {
                            single_gated.run(&mut gated_world);
                            None
                        }
                    };
                    times.push(start.elapsed().as_secs_f64() * 1e6);
                    if let Some(sharing) = sharing {
                        let way = match sharing {
                            FrameSharing::Alone => 0,
                            FrameSharing::HandedOver => 1,
                            FrameSharing::Shared => 2,
                            FrameSharing::Planned => 3,
                        };
                        modes[runner][way] += 1;
                    }
                }
                medians[runner].push(median(times));
            }
        }
        println!("\n{}:", pacing.label());
        for (name, runs) in RUNNERS.iter().zip(&medians) {
            println!("  {name:<28} {:8.2}", median(runs.clone()));
        }
        let ratio = |a: usize, b: usize| {
            let mut ratios: Vec<f64> = medians[a]
                .iter()
                .zip(&medians[b])
                .map(|(x, y)| x / y)
                .collect();
            ratios.sort_by(f64::total_cmp);
            let at = |q: f64| ratios[((ratios.len() - 1) as f64 * q).round() as usize];
            format!("{:.3} (quartiles {:.3}-{:.3})", at(0.5), at(0.25), at(0.75))
        };
        for (name, [alone, handed_over, shared, planned]) in RUNNERS.iter().zip(modes) {
            println!(
                "  {name} frames: {alone} alone, {handed_over} handed over, {shared} shared, \
                 {planned} planned"
            );
        }
        println!("  gated / plain                {}", ratio(1, 0));
        println!("  gated / bevy single-threaded {}", ratio(1, 2));
        println!("  bevy gated / bevy            {}", ratio(3, 2));
        println!("  gated / bevy gated           {}", ratio(1, 3));
    }
}

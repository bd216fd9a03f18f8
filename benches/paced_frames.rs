//! Frames as a game loop runs them: the graph benchmark's DAG (256 nodes,
//! 16 layers of 16) back to back and paced at 30, 60 and 240 Hz, every peer
//! in the same run with the same thread budget (`threads()`).
//!
//! Per work size, per pacing, per runner: warm-up frames, then frames at
//! that pacing (a sleep until the next tick after each, see `Pacer`),
//! timing each frame alone. It prints the median frame and its ratio to the
//! bound max(critical path, work / threads), where a node's time is the
//! sequential loop's median frame over 256, measured in the same run at the
//! same pacing. The runners take turns in one order per pacing, and each
//! pacing starts from a pool that parked (a sleep of a few ticks).
//!
//! Runners: `sequential` (the work in a plain loop), `engine-tasks` (the
//! default pool size: one worker fewer than the machine's parallelism, plus
//! the frame's thread) timed and untimed, and timed again waiting for its
//! tick with `TaskGraph::sleep_until` (back to back the same as
//! `engine-tasks`: there is no wait), bevy_ecs's multi-threaded and
//! single-threaded executors, a rayon scope with atomic in-degree counters, and the same
//! runner on a global-queue pool (one mutex, one condition variable).
//!
//! Usage: `cargo run --release -p engine-tasks-benches --bin paced_frames
//! -- [nanoseconds of work per node, default: 0 1000 20000]`

use bevy_ecs::schedule::{MultiThreadedExecutor, SingleThreadedExecutor};
use engine_tasks::{NodeClock, Pool, ReadyOrder};
use engine_tasks_benches::{
    benchmark_dag, bevy_schedule, frame_bound, graph_of, init_bevy_pool, median_frame,
    median_frame_sleeping_until, threads, GlobalQueueDag, GlobalQueuePool, Pacing, RayonDag,
    Sampling, Work,
};
use std::time::Duration;

/// Frames per runner and pacing: about 1.5 s of ticks, at least 60 (and
/// 60 back to back), after 20 untimed.
const SAMPLING: Sampling = Sampling {
    seconds: 1.5,
    min: 60,
    warm_up: 20,
};

const RUNNERS: [&str; 8] = [
    "sequential",
    "engine-tasks",
    "engine-tasks-untimed",
    "engine-tasks-sleep-until",
    "bevy-multi-threaded",
    "bevy-single-threaded",
    "rayon-scope",
    "global-queue",
];

/// Runs `frame` at `pacing`: the median frame time in seconds.
fn frames(pacing: Pacing, frame: impl FnMut()) -> f64 {
    median_frame(pacing, SAMPLING, frame)
}

fn main() {
    let sizes: Vec<u64> = {
        let args: Vec<u64> = std::env::args()
            .skip(1)
            .map(|a| a.parse().expect("nanoseconds per node"))
            .collect();
        if args.is_empty() {
            vec![0, 1_000, 20_000]
        } else {
            args
        }
    };
    let deps = benchmark_dag();
    let n = deps.len();
    let threads = threads();
    init_bevy_pool(threads);
    let pool = Pool::builder().threads(threads - 1).build().unwrap();
    let rayon = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .unwrap();
    let global = GlobalQueuePool::new(threads);
    println!("{n}-node DAG, {threads} threads per runner; median frame, and frame / bound");
    println!("(bound: max(critical path, work / {threads}), node time from `sequential`)\n");
    for nanos in sizes {
        let works = vec![Work::nanos(nanos); n];
        let mut timed = graph_of(&deps, &works, ReadyOrder::CriticalPathFirst, NodeClock::On);
        let mut untimed = graph_of(&deps, &works, ReadyOrder::CriticalPathFirst, NodeClock::Off);
        let (mut world, mut schedule) = bevy_schedule(&deps, &works, MultiThreadedExecutor::new());
        let (mut single_world, mut single) =
            bevy_schedule(&deps, &works, SingleThreadedExecutor::new());
        let rayon_dag = RayonDag::new(&deps, &works);
        let global_dag = GlobalQueueDag::new(&deps, &works);
        println!("### {nanos} ns per node\n");
        println!(
            "| runner | {} |",
            Pacing::ALL.map(|p| p.label()).join(" | ")
        );
        println!("|---|{}", "---|".repeat(Pacing::ALL.len()));
        let mut table = vec![Vec::new(); RUNNERS.len()];
        for pacing in Pacing::ALL {
            // Let every pool park before the first paced frame.
            std::thread::sleep(Duration::from_millis(50));
            let mut medians = Vec::new();
            for runner in RUNNERS {
                let time = match runner {
                    "sequential" => frames(pacing, || works.iter().for_each(|w| w.run())),
                    "engine-tasks" => frames(pacing, || {
                        timed.run(&pool, &()).unwrap();
                    }),
                    "engine-tasks-untimed" => frames(pacing, || {
                        untimed.run(&pool, &()).unwrap();
                    }),
                    "engine-tasks-sleep-until" => {
                        median_frame_sleeping_until(pacing, SAMPLING, &mut timed, &pool)
                    }
                    "bevy-multi-threaded" => frames(pacing, || schedule.run(&mut world)),
                    "bevy-single-threaded" => frames(pacing, || single.run(&mut single_world)),
                    "rayon-scope" => frames(pacing, || rayon_dag.run(&rayon)),
                    "global-queue" => frames(pacing, || global_dag.run(&global)),
                    other => unreachable!("{other}"),
                };
                medians.push(time);
            }
            let bound = frame_bound(&deps, medians[0] / n as f64, threads);
            for (row, time) in table.iter_mut().zip(medians) {
                row.push(format!("{:.1} µs ({:.2}x)", time * 1e6, time / bound));
            }
        }
        for (runner, row) in RUNNERS.iter().zip(table) {
            println!("| {runner} | {} |", row.join(" | "));
        }
        println!();
    }
}

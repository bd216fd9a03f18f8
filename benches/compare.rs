//! The README's comparison table, from one run: engine-tasks against
//! rayon, bevy_ecs and tokio on what a frame loop does, each runner with
//! the same two threads (engine-tasks: one worker and the frame's thread).
//!
//! Rows, all on the 256-node DAG of `benches/graph.rs` (16 layers, 1-3
//! dependencies each on the layer before):
//!
//! - 20 µs of work per node, paced at 60 Hz (a game's frame of 5 ms of
//!   work);
//! - 1 µs per node, paced at 240 Hz and back to back (small systems,
//!   where scheduling overhead shows);
//! - empty nodes at 60 Hz (the cost of the scheduler alone).
//!
//! Each cell is the median frame over about 1.5 s of frames after a
//! warm-up, and its ratio to the frame's bound, max(critical path,
//! work / 2), with the node time of the sequential loop measured at the
//! same pacing in the same run. The runners: engine-tasks' `TaskGraph` on
//! the default-sized pool, waiting for each tick with a plain sleep as
//! every other runner does, and again waiting with the graph's own
//! `TaskGraph::sleep_until`, which warms the frame before the tick (as the
//! README's tour does; back to back there is no wait, and its cell is
//! "-"); a rayon scope and a tokio runtime, each with one
//! spawn per ready node and atomic in-degree counters (what a user of
//! either would write); bevy_ecs's multi-threaded executor, one system per
//! node ordered by the same edges.
//!
//! Usage: `cargo run --release -p engine-tasks-benches --bin compare`

use bevy_ecs::schedule::MultiThreadedExecutor;
use engine_tasks::{NodeClock, Pool, ReadyOrder};
use engine_tasks_benches::{
    benchmark_dag, bevy_schedule, frame_bound, graph_of, init_bevy_pool, median_frame,
    median_frame_sleeping_until, threads, tokio_runtime, Pacing, RayonDag, Sampling, TokioDag,
    Work,
};
use std::time::Duration;

const SAMPLING: Sampling = Sampling {
    seconds: 1.5,
    min: 60,
    warm_up: 30,
};
const RUNNERS: [&str; 5] = [
    "engine-tasks",
    "engine-tasks, `sleep_until`",
    "rayon",
    "bevy_ecs",
    "tokio",
];

fn main() {
    let deps = benchmark_dag();
    let n = deps.len();
    let threads = threads();
    init_bevy_pool(threads);
    let pool = Pool::builder().threads(threads - 1).build().unwrap();
    let rayon = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .unwrap();
    let tokio = tokio_runtime(threads);
    let rows: [(&str, u64, Pacing); 4] = [
        ("256 nodes of 20 µs, 60 Hz", 20_000, Pacing::Hz(60.0)),
        ("256 nodes of 1 µs, 240 Hz", 1_000, Pacing::Hz(240.0)),
        ("256 nodes of 1 µs, back to back", 1_000, Pacing::BackToBack),
        ("256 empty nodes, 60 Hz", 0, Pacing::Hz(60.0)),
    ];
    println!("{threads} threads per runner; median frame (frame / bound)\n");
    println!("| workload | {} |", RUNNERS.join(" | "));
    println!("|---|{}", "---|".repeat(RUNNERS.len()));
    for (label, nanos, pacing) in rows {
        let works = vec![Work::nanos(nanos); n];
        let mut graph = graph_of(&deps, &works, ReadyOrder::CriticalPathFirst, NodeClock::On);
        let (mut world, mut schedule) = bevy_schedule(&deps, &works, MultiThreadedExecutor::new());
        let rayon_dag = RayonDag::new(&deps, &works);
        let tokio_dag = TokioDag::new(&deps, &works);
        let frames = |frame: &mut dyn FnMut()| {
            // Every pool parks before the first frame, as between levels.
            std::thread::sleep(Duration::from_millis(50));
            median_frame(pacing, SAMPLING, frame)
        };
        let sequential = frames(&mut || works.iter().for_each(|w| w.run()));
        let bound = frame_bound(&deps, sequential / n as f64, threads);
        let cells: Vec<String> = RUNNERS
            .iter()
            .map(|runner| {
                let time = match *runner {
                    "engine-tasks" => frames(&mut || {
                        graph.run(&pool, &()).unwrap();
                    }),
                    "engine-tasks, `sleep_until`" if pacing == Pacing::BackToBack => {
                        return "-".to_string();
                    }
                    "engine-tasks, `sleep_until`" => {
                        // Every pool parks first, as in `frames`.
                        std::thread::sleep(Duration::from_millis(50));
                        median_frame_sleeping_until(pacing, SAMPLING, &mut graph, &pool)
                    }
                    "rayon" => frames(&mut || rayon_dag.run(&rayon)),
                    "bevy_ecs" => frames(&mut || schedule.run(&mut world)),
                    "tokio" => frames(&mut || tokio_dag.run(&tokio)),
                    other => unreachable!("{other}"),
                };
                if nanos == 0 {
                    format!("{:.1} µs", time * 1e6)
                } else {
                    format!("{:.0} µs ({:.2}x)", time * 1e6, time / bound)
                }
            })
            .collect();
        println!("| {label} | {} |", cells.join(" | "));
    }
}

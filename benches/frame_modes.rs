//! Whether planned frames earn their place beside queued ones: the graph
//! benchmark's DAG (256 nodes, 16 layers of 16) as two graphs that differ
//! only in `planning`, their frames interleaved (A B, then B A, ...) so
//! both see the same drift of this shared machine, back to back and paced
//! at 30, 60 and 240 Hz, at 1, 5 and 20 µs of work per node (frames light
//! enough to run alone are the same either way). Prints each one's median
//! and 90th percentile frame, how its frames ran, and the ratio of the
//! medians.
//!
//! Usage: `cargo run --release -p engine-tasks-benches --bin frame_modes`

use engine_tasks::{NodeClock, Planning, Pool, ReadyOrder, TaskGraph};
use engine_tasks_benches::{benchmark_dag, graph_builder_of, threads, Pacer, Pacing, Work};
use std::collections::BTreeMap;
use std::time::Instant;

/// Frames per graph: back to back, and paced.
const FRAMES: [usize; 2] = [3000, 400];
const WARM_UP: usize = 20;

fn percentile(sorted: &[f64], p: f64) -> f64 {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

fn main() {
    let deps = benchmark_dag();
    let pool = Pool::builder().threads(threads() - 1).build().unwrap();
    for nanos in [1_000u64, 5_000, 20_000] {
        let work = vec![Work::nanos(nanos); deps.len()];
        for pacing in Pacing::ALL {
            let graph = |planning: Planning| -> TaskGraph<()> {
                let mut builder =
                    graph_builder_of(&deps, &work, ReadyOrder::CriticalPathFirst, NodeClock::On);
                builder.planning(planning);
                builder.build().unwrap()
            };
            let mut graphs = [graph(Planning::Off), graph(Planning::Allowed)];
            let mut times: [Vec<f64>; 2] = Default::default();
            let mut ways: [BTreeMap<String, usize>; 2] = Default::default();
            let frames = FRAMES[usize::from(pacing != Pacing::BackToBack)];
            let mut pacer = Pacer::new(pacing);
            for frame in 0..frames + WARM_UP {
                for turn in 0..2 {
                    let k = if frame % 2 == 0 { turn } else { 1 - turn };
                    pacer.wait();
                    let start = Instant::now();
                    let stats = graphs[k].run(&pool, &()).unwrap();
                    let micros = start.elapsed().as_secs_f64() * 1e6;
                    *ways[k].entry(format!("{:?}", stats.sharing())).or_default() += 1;
                    if frame >= WARM_UP {
                        times[k].push(micros);
                    }
                }
            }
            for t in &mut times {
                t.sort_by(f64::total_cmp);
            }
            println!(
                "{nanos:>5} ns {:>12} | queued p50 {:8.1} µs p90 {:8.1} | planned p50 {:8.1} µs p90 {:8.1} | planned/queued {:.3} | {:?} {:?}",
                pacing.label(),
                percentile(&times[0], 0.5),
                percentile(&times[0], 0.9),
                percentile(&times[1], 0.5),
                percentile(&times[1], 0.9),
                percentile(&times[1], 0.5) / percentile(&times[0], 0.5),
                ways[0],
                ways[1],
            );
        }
    }
}

//! CPU time of a 60 Hz loop of light frames: does the scheduler keep cores
//! spinning between frames?
//!
//! Each peer runs in its own child process: 120 frames at 60 Hz (two
//! seconds) of the 256-node DAG of `benches/graph.rs` with 1 µs of work per
//! node, sleeping until the next frame's deadline in between. The child
//! reports its process CPU time (`getrusage`, user + system) per second of
//! wall time, in all and in the gaps between frames alone. The sequential
//! loop is the baseline: the work itself, with no scheduler.
//!
//! Usage: `cargo run --release -p engine-tasks-benches --bin frame_cpu`
//! (add a count, e.g. `-- 5`, to repeat each measurement; the median is
//! reported).

use bevy_ecs::prelude::*;
use bevy_ecs::schedule::MultiThreadedExecutor;
use engine_tasks::{Pool, ReadyOrder};
use engine_tasks_benches::{
    benchmark_dag, cpu_micros, graph_of, medians_from_children, threads, Work,
};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

const PEERS: [&str; 4] = [
    "sequential",
    "engine-tasks",
    "rayon-scope",
    "bevy-multi-threaded",
];
const FRAMES: u32 = 120;
const RATE: f64 = 60.0;

#[derive(SystemSet, Debug, Clone, PartialEq, Eq, Hash)]
struct NodeSet(usize);

/// Runs `frame` at 60 Hz; returns the process's CPU milliseconds per wall
/// second, in all and in the gaps between frames only (from the end of one
/// frame's call to the start of the next).
fn paced(mut frame: impl FnMut()) -> (f64, f64) {
    let period = Duration::from_secs_f64(1.0 / RATE);
    let wall = Instant::now();
    let before = cpu_micros();
    let mut between = 0;
    let mut next = Instant::now();
    for _ in 0..FRAMES {
        frame();
        let gap_start = cpu_micros();
        next += period;
        if let Some(wait) = next.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
        between += cpu_micros() - gap_start;
    }
    let seconds = wall.elapsed().as_secs_f64();
    let per_second = |micros: u64| micros as f64 / 1000.0 / seconds;
    (per_second(cpu_micros() - before), per_second(between))
}

fn measure(peer: &str) -> (f64, f64) {
    let deps = benchmark_dag();
    let work = Work::nanos(1_000);
    match peer {
        "sequential" => paced(|| deps.iter().for_each(|_| work.run())),
        "engine-tasks" => {
            let pool = Pool::builder().threads(threads() - 1).build().unwrap();
            let works = vec![work; deps.len()];
            let mut graph = graph_of(&deps, &works, ReadyOrder::CriticalPathFirst, true);
            paced(|| {
                graph.run(&pool, &()).unwrap();
            })
        }
        "rayon-scope" => {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(threads())
                .build()
                .unwrap();
            let mut successors = vec![Vec::new(); deps.len()];
            for (i, d) in deps.iter().enumerate() {
                for &d in d {
                    successors[d].push(i);
                }
            }
            let pending: Vec<AtomicUsize> = deps.iter().map(|_| AtomicUsize::new(0)).collect();
            fn node<'s>(
                s: &rayon::Scope<'s>,
                i: usize,
                succ: &'s [Vec<usize>],
                pending: &'s [AtomicUsize],
                work: Work,
            ) {
                work.run();
                for &j in &succ[i] {
                    if pending[j].fetch_sub(1, Ordering::AcqRel) == 1 {
                        s.spawn(move |s| node(s, j, succ, pending, work));
                    }
                }
            }
            paced(|| {
                for (p, d) in pending.iter().zip(&deps) {
                    p.store(d.len(), Ordering::Relaxed);
                }
                let (succ, pending) = (&successors[..], &pending[..]);
                pool.scope(|s| {
                    for i in (0..deps.len()).filter(|&i| deps[i].is_empty()) {
                        s.spawn(move |s| node(s, i, succ, pending, work));
                    }
                });
            })
        }
        "bevy-multi-threaded" => {
            bevy_tasks::ComputeTaskPool::get_or_init(|| {
                bevy_tasks::TaskPoolBuilder::new()
                    .num_threads(threads())
                    .build()
            });
            let mut schedule = Schedule::default();
            schedule.set_executor(MultiThreadedExecutor::new());
            for (i, d) in deps.iter().enumerate() {
                schedule.add_systems((move || work.run()).in_set(NodeSet(i)));
                for &d in d {
                    schedule.configure_sets(NodeSet(i).after(NodeSet(d)));
                }
            }
            let mut world = World::new();
            paced(|| schedule.run(&mut world))
        }
        other => panic!("unknown peer {other}"),
    }
}

fn main() {
    let Some((repeats, medians)) = medians_from_children(&PEERS, |peer| {
        let (all, between) = measure(peer);
        vec![all, between]
    }) else {
        return;
    };
    println!("CPU time of a 60 Hz loop of light frames (256 nodes x 1 us)");
    println!(
        "({} threads per pool, median of {repeats} runs)\n",
        threads()
    );
    println!("| runner | CPU, all (ms per second) | CPU between frames (ms per second) |");
    println!("|---|---|---|");
    for (peer, median) in PEERS.iter().zip(medians) {
        println!("| {peer} | {:.1} | {:.2} |", median[0], median[1]);
    }
}

//! CPU time of a loop of light frames: does the scheduler keep cores
//! spinning between frames, and what does a frame cost in CPU?
//!
//! Each peer runs in its own child process, once per pacing: about two
//! seconds of frames at 30, 60 and 240 Hz (sleeping until the next tick in
//! between), and 120 frames back to back, of the 256-node DAG of
//! `benches/graph.rs` with 1 µs of work per node (or as given), after 30
//! frames of warm-up that start every thread. The child reports the CPU
//! time of all its threads per frame, and per second of wall time in all
//! and in the gaps between frames alone. The sequential loop is the baseline: the work
//! itself, with no scheduler; `two-threads-condvar` is the least a second
//! thread costs without spinning; `engine-tasks-queued` is the graph with
//! `planning(Planning::Off)`.
//!
//! CPU time is read from each thread's own CPU clock (the clock id of its
//! thread id, as `clock_getcpuclockid` makes it), which includes the slice
//! the thread is running right now. The process total of `getrusage` does
//! not include that for threads other than the caller, so a worker still
//! running when a frame returned had its frame work counted in the gap
//! when it parked: with `getrusage` this benchmark charged engine-tasks
//! 3.8 ms per second between frames against the sequential loop's 2.7,
//! while the worker's own clock shows it used 0.3 µs per gap.
//!
//! In a gap the frame's thread reads the other threads' clocks outside the
//! window of its own two clock reads, so every runner pays the same
//! measuring cost (two reads) inside the gap, whatever its thread count.
//!
//! Usage: `cargo run --release -p engine-tasks-benches --bin frame_cpu --
//! [repeats, default 3] [nanoseconds of work per node, default 1000]`; each
//! figure is the median of the repeats.

use bevy_ecs::prelude::*;
use bevy_ecs::schedule::MultiThreadedExecutor;
use engine_tasks::{NodeClock, Planning, Pool, ReadyOrder};
use engine_tasks_benches::{
    benchmark_dag, graph_builder_of, medians_from_children, process_threads, thread_cpu_nanos_of,
    threads, Pacer, Pacing, Work,
};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

const PEERS: [&str; 6] = [
    "sequential",
    "two-threads-condvar",
    "engine-tasks",
    "engine-tasks-queued",
    "rayon-scope",
    "bevy-multi-threaded",
];
/// Seconds of frames per paced measurement, and frames back to back.
const SECONDS: f64 = 2.0;
const FRAMES: usize = 120;
const WARM_UP: u32 = 30;

#[derive(SystemSet, Debug, Clone, PartialEq, Eq, Hash)]
struct NodeSet(usize);

/// Runs `frame` at `pacing`; returns the CPU microseconds per frame of all
/// the process's threads, and the CPU milliseconds per wall second in all,
/// in the gaps between frames only (from the end of one frame's call to the
/// start of the next), and the part of that used by threads other than the
/// frame's.
fn paced(pacing: Pacing, mut frame: impl FnMut()) -> [f64; 4] {
    let mut pacer = Pacer::new(pacing);
    let mut sleep_until_next = || pacer.wait();
    let frames = pacing.frames_in(SECONDS, FRAMES);
    for _ in 0..WARM_UP {
        frame();
        sleep_until_next();
    }
    // SAFETY: gettid has no preconditions.
    let me = unsafe { libc::gettid() };
    let others: Vec<libc::pid_t> = process_threads().into_iter().filter(|&t| t != me).collect();
    let others_cpu = || others.iter().map(|&t| thread_cpu_nanos_of(t)).sum::<u64>();
    let own_cpu = || thread_cpu_nanos_of(me);
    let wall = Instant::now();
    let before = own_cpu() + others_cpu();
    let (mut own_gaps, mut others_gaps) = (0, 0);
    for _ in 0..frames {
        frame();
        let others_start = others_cpu();
        let own_start = own_cpu();
        sleep_until_next();
        own_gaps += own_cpu() - own_start;
        others_gaps += others_cpu() - others_start;
    }
    let seconds = wall.elapsed().as_secs_f64();
    let mut threads_after = process_threads();
    threads_after.retain(|&t| t != me);
    assert_eq!(
        threads_after, others,
        "threads started or ended while measuring: the CPU sums would miss them"
    );
    let per_second = |nanos: u64| nanos as f64 / 1e6 / seconds;
    let all = own_cpu() + others_cpu() - before;
    [
        all as f64 / 1e3 / frames as f64,
        per_second(all),
        per_second(own_gaps + others_gaps),
        per_second(others_gaps),
    ]
}

/// Runs a child's case: `peer@hz@nanos` (`hz` 0 for back to back).
fn measure(case: &str) -> [f64; 4] {
    let mut parts = case.split('@');
    let peer = parts.next().expect("a peer");
    let pacing = Pacing::from_hz(parts.next().and_then(|p| p.parse().ok()).expect("a rate"));
    let nanos: u64 = parts
        .next()
        .and_then(|p| p.parse().ok())
        .expect("a work size");
    let deps = benchmark_dag();
    let work = Work::nanos(nanos);
    let paced = |frame: &mut dyn FnMut()| paced(pacing, frame);
    match peer {
        "sequential" => paced(&mut || deps.iter().for_each(|_| work.run())),
        "two-threads-condvar" => two_threads_condvar(deps.len(), work, pacing),
        "engine-tasks" | "engine-tasks-queued" => {
            let pool = Pool::builder().threads(threads() - 1).build().unwrap();
            // Threads start lazily, and frames too light to share may not
            // start them in the warm-up: start them now, so that none starts
            // while CPU clocks are read.
            pool.scope(|s| {
                for _ in 0..4 * threads() {
                    s.spawn(|_| std::thread::sleep(Duration::from_millis(1)));
                }
            });
            let works = vec![work; deps.len()];
            // Queued: shared frames count releases and queue ready nodes
            // instead of walking a plan.
            let mut builder =
                graph_builder_of(&deps, &works, ReadyOrder::CriticalPathFirst, NodeClock::On);
            builder.planning(if peer == "engine-tasks" {
                Planning::Allowed
            } else {
                Planning::Off
            });
            let mut graph = builder.build().expect("a valid DAG");
            paced(&mut || {
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
            paced(&mut || {
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
            paced(&mut || schedule.run(&mut world))
        }
        other => panic!("unknown peer {other}"),
    }
}

/// The least a second thread can cost without spinning: each frame, a
/// helper sleeping on a condition variable is woken for half the nodes
/// (no dependencies, no queue) while this thread runs the other half, then
/// this thread waits for it, and it goes back to sleep.
fn two_threads_condvar(nodes: usize, work: Work, pacing: Pacing) -> [f64; 4] {
    use std::sync::{Arc, Condvar, Mutex};
    // (frames started, frames the helper finished), and a stop flag.
    let state = Arc::new((
        Mutex::new((0u64, 0u64, false)),
        Condvar::new(),
        Condvar::new(),
    ));
    let helper = {
        let state = state.clone();
        std::thread::spawn(move || {
            let (lock, start, done) = &*state;
            let mut seen = 0;
            loop {
                let mut s = lock.lock().unwrap();
                while s.0 == seen && !s.2 {
                    s = start.wait(s).unwrap();
                }
                if s.2 {
                    return;
                }
                seen = s.0;
                drop(s);
                (0..nodes / 2).for_each(|_| work.run());
                lock.lock().unwrap().1 = seen;
                done.notify_one();
            }
        })
    };
    let (lock, start, done) = &*state;
    let result = paced(pacing, || {
        let frame = {
            let mut s = lock.lock().unwrap();
            s.0 += 1;
            s.0
        };
        start.notify_one();
        (nodes / 2..nodes).for_each(|_| work.run());
        let mut s = lock.lock().unwrap();
        while s.1 != frame {
            s = done.wait(s).unwrap();
        }
    });
    lock.lock().unwrap().2 = true;
    start.notify_one();
    helper.join().unwrap();
    result
}

fn main() {
    // A child (`--child CASE`) finds its work size in its case.
    let args: Vec<String> = std::env::args().collect();
    let nanos: u64 = match args.get(1).map(String::as_str) {
        Some("--child") => 0,
        _ => args
            .get(2)
            .map_or(1_000, |a| a.parse().expect("nanoseconds per node")),
    };
    let cases: Vec<String> = Pacing::ALL
        .iter()
        .flat_map(|pacing| {
            let hz = match pacing {
                Pacing::BackToBack => 0.0,
                Pacing::Hz(hz) => *hz,
            };
            PEERS.iter().map(move |peer| format!("{peer}@{hz}@{nanos}"))
        })
        .collect();
    let case_names: Vec<&str> = cases.iter().map(String::as_str).collect();
    let Some((repeats, medians)) =
        medians_from_children(&case_names, |case| measure(case).to_vec())
    else {
        return;
    };
    println!("CPU time of a loop of light frames (256 nodes x {nanos} ns)");
    println!("({} threads per pool, median of {repeats} runs)", threads());
    for (pacing, medians) in Pacing::ALL.iter().zip(medians.chunks(PEERS.len())) {
        println!("\n{}\n", pacing.label());
        println!(
            "| runner | CPU per frame (µs) | CPU, all (ms per second) | CPU between frames (ms per second) | of it, other threads than the frame's |"
        );
        println!("|---|---|---|---|---|");
        for (peer, median) in PEERS.iter().zip(medians) {
            println!(
                "| {peer} | {:.1} | {:.1} | {:.2} | {:.3} |",
                median[0], median[1], median[2], median[3]
            );
        }
    }
}

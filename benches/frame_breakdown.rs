//! Where a frame's time goes beyond the work itself, from the graph's own
//! frame statistics: the 256-node DAG of `benches/graph.rs` (timed, critical
//! path first) on the default pool, frames back to back and paced at 30, 60
//! and 240 Hz (a sleep until the next tick before each frame, and before
//! each round of the sequential loop it is set beside).
//!
//! Per frame it reads every node's start, end and thread, and reports the
//! medians over the measured frames of:
//! - `wall`: the frame's wall time;
//! - `work / 2`: the nodes' measured time halved, the frame time two threads
//!   would need with no scheduling cost at all;
//! - `sequential / 2`: the same, for the work run in a plain loop on one
//!   thread (the benchmarks' bound); more than `work / 2` says a node body
//!   takes longer inside the graph (its clock reads, cache misses);
//! - `late start`: how long after the frame began the second thread started
//!   its first node (its wake-up), and when each thread started its first
//!   node (the frame's set-up on its thread);
//! - `gaps`: per thread, the time between the end of one of its nodes and
//!   the start of its next (finding, counting down and queueing), in all and
//!   per gap;
//! - `tail`: from the last node's end to the frame's return;
//! - `node body`: the mean time of a node on each thread, beside the same
//!   work's time per node in the plain loop.
//!
//! Last, it prints how many node times a greedy two-thread schedule of the
//! DAG takes with no scheduling cost, to show whether the DAG's shape alone
//! keeps a frame above half the sequential time.
//!
//! Back to back only every eighth frame is analysed, so that the analysis
//! (which takes longer than a frame) never sits in the gap before an
//! analysed frame; paced, every frame is, in the sleep after it.
//!
//! With `sleep-until` as a third argument (after a rate), the graph's
//! frames wait for their tick with the graph's own `TaskGraph::sleep_until`,
//! which warms the frame before the tick, instead of a plain sleep.
//!
//! Usage: `cargo run --release -p engine-tasks-benches --bin frame_breakdown
//! -- [nanoseconds of work per node, default 1000] [rate in Hz, 0 for back
//! to back; default: 0, 30, 60 and 240 in turn] [sleep or sleep-until,
//! default sleep]`

use engine_tasks::{FrameStats, NodeClock, Pool, ReadyOrder};
use engine_tasks_benches::{
    benchmark_dag, graph_of, greedy_two_thread_schedule, median, threads, Pacer, Pacing, Wait, Work,
};

const FRAMES: usize = 16_000;
const WARM_UP: usize = 500;
const ANALYSE_EVERY: usize = 8;
/// Paced frames per pacing, and of them the warm-up.
const PACED_FRAMES: usize = 300;
const PACED_WARM_UP: usize = 60;

/// What one analysed frame showed, in microseconds.
#[derive(Default)]
struct Breakdown {
    wall: f64,
    half_work: f64,
    late_start: f64,
    /// When each thread started its first node.
    first_start: [f64; 2],
    gaps: [f64; 2],
    gap_count: [f64; 2],
    /// Mean time of a node body on each thread, in nanoseconds.
    node: [f64; 2],
    tail: f64,
}

fn breakdown(stats: &FrameStats) -> Breakdown {
    let micros = |d: std::time::Duration| d.as_secs_f64() * 1e6;
    let wall = micros(stats.wall_time());
    // (start, end) of each node, per thread: the frame's thread and the
    // rest (one worker on this machine's default pool).
    let frame_thread = stats.nodes().next().and_then(|n| n.thread);
    let mut spans: [Vec<(f64, f64)>; 2] = [Vec::new(), Vec::new()];
    for node in stats.nodes() {
        let side = usize::from(node.thread != frame_thread);
        let start = micros(node.start);
        spans[side].push((start, start + micros(node.duration)));
    }
    let mut result = Breakdown {
        wall,
        half_work: micros(stats.total_work()) / 2.0,
        ..Breakdown::default()
    };
    let mut last_end: f64 = 0.0;
    for (side, spans) in spans.iter_mut().enumerate() {
        spans.sort_by(|a, b| a.0.total_cmp(&b.0));
        if let Some(&(first_start, _)) = spans.first() {
            result.late_start = result.late_start.max(first_start);
            result.first_start[side] = first_start;
        }
        for pair in spans.windows(2) {
            result.gaps[side] += pair[1].0 - pair[0].1;
        }
        result.gap_count[side] = spans.len().saturating_sub(1) as f64;
        if !spans.is_empty() {
            let busy: f64 = spans.iter().map(|(start, end)| end - start).sum();
            result.node[side] = busy * 1e3 / spans.len() as f64;
        }
        if let Some(&(_, end)) = spans.last() {
            last_end = last_end.max(end);
        }
    }
    result.tail = wall - last_end;
    result
}

fn main() {
    let mut args = std::env::args().skip(1);
    let nanos: u64 = args
        .next()
        .map_or(1_000, |arg| arg.parse().expect("nanoseconds per node"));
    let pacings: Vec<Pacing> = match args.next() {
        Some(rate) => vec![Pacing::from_hz(rate.parse().expect("a rate in Hz"))],
        None => Pacing::ALL.to_vec(),
    };
    let wait = match args.next().as_deref() {
        None | Some("sleep") => Wait::Sleep,
        Some("sleep-until") => Wait::SleepUntil,
        Some(other) => panic!("the wait is `sleep` or `sleep-until`, not `{other}`"),
    };
    for pacing in pacings {
        run(nanos, pacing, wait);
    }
}

/// Runs and analyses the frames at `pacing`: back to back, every eighth of
/// 16,000 frames; paced, every frame of 300 (the analysis fits in the
/// sleep before the next).
fn run(nanos: u64, pacing: Pacing, wait: Wait) {
    let deps = benchmark_dag();
    let work = Work::nanos(nanos);
    let works = vec![work; deps.len()];
    let mut graph = graph_of(&deps, &works, ReadyOrder::CriticalPathFirst, NodeClock::On);
    let pool = Pool::builder().threads(threads() - 1).build().unwrap();
    let (total, warm_up, every) = match pacing {
        Pacing::BackToBack => (FRAMES, WARM_UP, ANALYSE_EVERY),
        Pacing::Hz(_) => (PACED_FRAMES, PACED_WARM_UP, 1),
    };
    let mut pacer = Pacer::new(pacing);
    let mut frames = Vec::new();
    for frame in 0..total {
        if let Some(tick) = pacer.next_tick() {
            wait.until(tick, &graph, &pool);
        }
        let stats = graph.run(&pool.handle(), &()).expect("no node panics");
        if frame >= warm_up && frame % every == every - 1 {
            frames.push(breakdown(stats));
        }
    }
    let sequential = median(
        (0..frames.len())
            .map(|_| {
                pacer.wait();
                let start = std::time::Instant::now();
                deps.iter().for_each(|_| work.run());
                start.elapsed().as_secs_f64() * 1e6
            })
            .collect(),
    );
    let of = |f: fn(&Breakdown) -> f64| median(frames.iter().map(f).collect());
    let gaps = [of(|b| b.gaps[0]), of(|b| b.gaps[1])];
    let counts = [of(|b| b.gap_count[0]), of(|b| b.gap_count[1])];
    println!(
        "\n{} nodes x {nanos} ns, {}{}, medians of {} frames (µs)",
        deps.len(),
        pacing.label(),
        if wait == Wait::SleepUntil && pacing != Pacing::BackToBack {
            ", sleep_until"
        } else {
            ""
        },
        frames.len()
    );
    println!("wall        {:8.1}", of(|b| b.wall));
    println!("work / 2    {:8.1}", of(|b| b.half_work));
    println!(
        "sequential / 2 {:5.1} (the same work in a plain loop)",
        sequential / 2.0
    );
    println!(
        "late start  {:8.1} (first node: frame thread {:.1}, worker {:.1})",
        of(|b| b.late_start),
        of(|b| b.first_start[0]),
        of(|b| b.first_start[1])
    );
    for side in 0..2 {
        let who = ["frame thread", "worker      "][side];
        println!(
            "gaps, {who} {:8.1} ({:.0} ns per gap)",
            gaps[side],
            gaps[side] * 1e3 / counts[side].max(1.0)
        );
    }
    println!("tail        {:8.1}", of(|b| b.tail));
    println!(
        "node body, ns: frame thread {:.0}, worker {:.0}, plain loop {:.0}",
        of(|b| b.node[0]),
        of(|b| b.node[1]),
        sequential * 1e3 / deps.len() as f64
    );
    println!(
        "a greedy two-thread schedule with no cost takes {} node times for {} nodes",
        greedy_two_thread_schedule(&deps)[0].len(),
        deps.len()
    );
}

//! A paced loop of two graphs a tick: a first graph, some code of the
//! game's own on the frame's thread, a second graph, then the sleep until
//! the next tick. Both graphs are the 256-node DAG of `benches/graph.rs`
//! (timed, critical path first) on the default pool.
//!
//! Prints the median frame of each graph, and per tick the worker's parks,
//! its early wake-ups and how many of those found the frame's work
//! (`ThreadStats`). The second graph's frame is the one that pays when the
//! pool's threads park between the two graphs (`pool/frame_gaps.rs`,
//! `NextFrame::expect_soon` in `pool/early_wake.rs`).
//!
//! Usage: `cargo run --release -p engine-tasks-benches --bin two_graphs --
//! [µs of game code between the graphs, default 0] [rate in Hz, default 60]
//! [nanoseconds of work per node, default 1000] [ticks, default 400]`.

use engine_tasks::{NodeClock, Pool, ReadyOrder, ThreadStats};
use engine_tasks_benches::{benchmark_dag, graph_of, median, threads, Pacer, Pacing, Work};
use std::time::{Duration, Instant};

/// Ticks run before the measured ones: the loop's forecasts need a few.
const WARM_UP: usize = 60;

fn arg<T: std::str::FromStr>(args: &mut impl Iterator<Item = String>, default: T) -> T {
    args.next()
        .map_or(default, |a| a.parse().ok().expect("a number"))
}

/// The worker threads' parks, early wake-ups and early finds, summed.
fn counts(pool: &Pool) -> [u64; 3] {
    let threads: Vec<ThreadStats> = pool.stats().threads;
    let workers = &threads[..threads.len().min(pool.threads())];
    [
        workers.iter().map(|t| t.parks).sum(),
        workers.iter().map(|t| t.early_wakes).sum(),
        workers.iter().map(|t| t.early_finds).sum(),
    ]
}

fn main() {
    let mut args = std::env::args().skip(1);
    let between = Duration::from_micros(arg(&mut args, 0));
    let hz: f64 = arg(&mut args, 60.0);
    let nanos: u64 = arg(&mut args, 1_000);
    let ticks: usize = arg(&mut args, 400);
    let pacing = Pacing::from_hz(hz);
    let Pacing::Hz(_) = pacing else {
        panic!("two_graphs measures paced ticks: give a rate above 0");
    };
    let deps = benchmark_dag();
    let works = vec![Work::nanos(nanos); deps.len()];
    let mut first = graph_of(&deps, &works, ReadyOrder::CriticalPathFirst, NodeClock::On);
    let mut second = graph_of(&deps, &works, ReadyOrder::CriticalPathFirst, NodeClock::On);
    let pool = Pool::builder().threads(threads() - 1).build().unwrap();
    let mut pacer = Pacer::new(pacing);
    let (mut first_walls, mut second_walls) = (Vec::new(), Vec::new());
    let mut before = [0; 3];
    for tick in 0..WARM_UP + ticks {
        if tick == WARM_UP {
            before = counts(&pool);
        }
        pacer.wait();
        let start = Instant::now();
        first.run(&pool, &()).expect("no node panics");
        let first_wall = start.elapsed();
        let code = Instant::now();
        while code.elapsed() < between {
            std::hint::spin_loop();
        }
        let start = Instant::now();
        second.run(&pool, &()).expect("no node panics");
        let second_wall = start.elapsed();
        if tick >= WARM_UP {
            first_walls.push(first_wall.as_secs_f64() * 1e6);
            second_walls.push(second_wall.as_secs_f64() * 1e6);
        }
    }
    let after = counts(&pool);
    let per_tick = |i: usize| (after[i] - before[i]) as f64 / ticks as f64;
    println!(
        "{} nodes x {nanos} ns, two graphs a tick at {hz} Hz, {} µs of game code between \
         them, medians of {ticks} ticks",
        deps.len(),
        between.as_micros()
    );
    println!("first graph    {:8.1} µs", median(first_walls));
    println!("second graph   {:8.1} µs", median(second_walls));
    println!(
        "worker, a tick: {:.2} parks, {:.2} early wake-ups, {:.2} of them found work",
        per_tick(0),
        per_tick(1),
        per_tick(2)
    );
}

//! What `TaskGraph::sleep_until` gains a paced frame over a plain sleep,
//! measured in one process: each frame's wait is chosen at random, so that
//! the machine's slow and quick stretches weigh on every kind alike.
//!
//! The three waits for the next tick of a fixed grid:
//! - `plain sleep`: `std::thread::sleep` until the tick, as a frame limiter
//!   does;
//! - `two sleeps`: a sleep until 300 µs before the tick, then one until the
//!   tick, with nothing between them: what `sleep_until` does without its
//!   warming, to tell the warming's gain from the shorter last sleep's;
//! - `sleep_until`: the graph's own wait, which warms the frame's code and
//!   data in the gap between its two sleeps.
//!
//! The graph is the benchmark DAG of `benches/graph.rs` (256 nodes, timed,
//! critical path first) on the default pool's size. Each case prints the
//! median frame time per wait, how late each kind of wait woke past its
//! tick, and the CPU time the wait itself took on the frame's thread
//! (`cpu`: the warming's cost, with the system's cost of a sleep; read
//! with a system call after the wait, before the frame, in every kind).
//! Back to back every wait returns at once (its tick is now), which shows
//! that `sleep_until` costs nothing when there is no gap.
//!
//! Usage: `cargo run --release -p engine-tasks-benches --bin warm_ahead --
//! [ns of work per node, comma-separated; default 0,1000] [rates in Hz,
//! comma-separated, 0 for back to back; default 0,30,60,240] [frames per
//! case, default 900]`

use engine_tasks::{NodeClock, Pool, ReadyOrder};
use engine_tasks_benches::{
    benchmark_dag, graph_of, median, thread_cpu_nanos_of, threads, Wait, Work,
};
use std::time::{Duration, Instant};

/// Frames run before a case's frames are timed: the graph's forecasts and
/// plan settle, and the pool learns the loop's rate.
const WARM_UP: usize = 60;
/// The waits compared, in the order they are printed.
const WAITS: [Wait; 3] = [Wait::Sleep, Wait::TwoSleeps, Wait::SleepUntil];

fn list<T: std::str::FromStr>(arg: Option<String>, default: &str) -> Vec<T> {
    arg.as_deref()
        .unwrap_or(default)
        .split(',')
        .map(|v| v.parse().ok().expect("a comma-separated list of numbers"))
        .collect()
}

fn main() {
    let mut args = std::env::args().skip(1);
    let works: Vec<u64> = list(args.next(), "0,1000");
    let rates: Vec<f64> = list(args.next(), "0,30,60,240");
    let frames: usize = args
        .next()
        .map_or(900, |a| a.parse().expect("frames per case"));
    let deps = benchmark_dag();
    let pool = Pool::builder().threads(threads() - 1).build().unwrap();
    // SAFETY: `gettid` has no preconditions.
    let me = unsafe { libc::gettid() };
    // A fixed xorshift seed: every run draws the same sequence of waits.
    let mut seed = 0x9E37_79B9_7F4A_7C15u64;
    println!("256 nodes, {frames} frames a case, the wait drawn at random per frame; medians (µs)");
    for &nanos in &works {
        let mut graph = graph_of(
            &deps,
            &vec![Work::nanos(nanos); deps.len()],
            ReadyOrder::CriticalPathFirst,
            NodeClock::On,
        );
        for &hz in &rates {
            let period = (hz > 0.0).then(|| Duration::from_secs_f64(1.0 / hz));
            let mut times: [Vec<f64>; 3] = Default::default();
            let mut late: [Vec<f64>; 3] = Default::default();
            let mut cpu: [Vec<f64>; 3] = Default::default();
            let mut tick = Instant::now();
            for frame in 0..WARM_UP + frames {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                let which = (seed % 3) as usize;
                let now = Instant::now();
                // A frame that overran its tick is followed at once.
                tick = period.map_or(now, |period| (tick + period).max(now));
                let cpu_before = thread_cpu_nanos_of(me);
                WAITS[which].until(tick, &graph, &pool);
                let waited = thread_cpu_nanos_of(me) - cpu_before;
                let start = Instant::now();
                graph.run(&pool, &()).expect("no node panics");
                let time = start.elapsed();
                if frame >= WARM_UP {
                    times[which].push(time.as_secs_f64() * 1e6);
                    late[which].push((start - tick).as_secs_f64() * 1e6);
                    cpu[which].push(waited as f64 / 1e3);
                }
            }
            let rate = if hz > 0.0 {
                format!("{hz} Hz")
            } else {
                "back to back".to_string()
            };
            let [plain, two, warmed] = times.map(median);
            let [plain_late, two_late, warmed_late] = late.map(median);
            let [plain_cpu, two_cpu, warmed_cpu] = cpu.map(median);
            println!(
                "{nanos:5} ns, {rate:>12}: plain sleep {plain:7.1} (late {plain_late:5.1}, cpu {plain_cpu:4.1}), \
                 two sleeps {two:7.1} (late {two_late:5.1}, cpu {two_cpu:4.1}), \
                 sleep_until {warmed:7.1} (late {warmed_late:5.1}, cpu {warmed_cpu:4.1}); \
                 sleep_until - plain {:+.1}, - two sleeps {:+.1}",
                warmed - plain,
                warmed - two
            );
        }
    }
}

//! How much faster two threads run independent work than one, on this
//! machine: the ceiling every parallel frame is measured against.
//!
//! The graph benchmarks compare frame times with max(critical path, total
//! work / threads). That bound assumes `threads` threads each run the work at
//! full speed. On a shared VM two vCPUs may be hyper-threads of one core, or
//! be descheduled by the host, so this binary measures the speed-up with no
//! scheduler at all: the 256 nodes' worth of the graph benchmark's busy work
//! run once on one thread, then split 128 + 128 over two plain threads that
//! start together at a barrier. Nothing is shared but the barrier.
//!
//! Usage: `cargo run --release -p engine-tasks-benches --bin parallel_ceiling`
//! Prints, per work size, the medians over 201 rounds and their ratio.

use engine_tasks_benches::{median, Work};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

const NODES: usize = 256;
const ROUNDS: usize = 201;

fn micros(time: Duration) -> f64 {
    time.as_secs_f64() * 1e6
}

/// Median microseconds per round.
fn one_thread(work: Work) -> f64 {
    median(
        (0..ROUNDS)
            .map(|_| {
                let start = Instant::now();
                (0..NODES).for_each(|_| work.run());
                micros(start.elapsed())
            })
            .collect(),
    )
}

/// Two threads, each running half the nodes per round; a round's time is
/// from the common start to the later thread's end. Median microseconds.
fn two_threads(work: Work) -> f64 {
    let start_line = Arc::new(Barrier::new(2));
    let helper = {
        let start_line = start_line.clone();
        std::thread::spawn(move || {
            (0..ROUNDS)
                .map(|_| {
                    start_line.wait();
                    (0..NODES / 2).for_each(|_| work.run());
                    Instant::now()
                })
                .collect::<Vec<_>>()
        })
    };
    let mut rounds = Vec::with_capacity(ROUNDS);
    for _ in 0..ROUNDS {
        start_line.wait();
        let start = Instant::now();
        (0..NODES / 2).for_each(|_| work.run());
        rounds.push((start, Instant::now()));
    }
    let helper_ends = helper.join().unwrap();
    median(
        rounds
            .into_iter()
            .zip(helper_ends)
            .map(|((start, end), helper_end)| micros(end.max(helper_end) - start))
            .collect(),
    )
}

fn main() {
    println!("{NODES} nodes of busy work, medians of {ROUNDS} rounds");
    println!(
        "{:>10} {:>12} {:>12} {:>9}",
        "per node", "one thread", "two threads", "speed-up"
    );
    for nanos in [1_000, 20_000] {
        let work = Work::nanos(nanos);
        let one = one_thread(work);
        let two = two_threads(work);
        println!(
            "{:>7} ns {:>9.1} µs {:>9.1} µs {:>8.2}x",
            nanos,
            one,
            two,
            one / two
        );
    }
}

//! Where the time of `spawn_wait` (200,000 empty tasks spawned from the main
//! thread, then joined) goes: the spawn loop and the join loop timed apart.
//!
//! Rows:
//! - `boxed closures, one thread`: allocate 200,000 boxed closures of 112
//!   bytes (the size of the pool's cell for an empty task), then run and
//!   free them. The allocator's share of any design that allocates a
//!   cell per spawned task, with nothing shared between threads.
//! - `engine-tasks, no workers`: the pool's own spawn path (cell, gate,
//!   injector push, wake-up check, statistics) with no thread taking the
//!   tasks away, then the main thread runs them all while it joins.
//! - `engine-tasks, default size`: the benchmark as `pool.rs` runs it (one
//!   worker on a 2-core machine), where the worker takes each task as soon as
//!   it is pushed.
//!
//! Each row reports the median over 40 rounds of nanoseconds per task.
//!
//! Usage: `cargo run --release -p engine-tasks-benches --bin spawn_phases`

use engine_tasks::{Lane, Pool};
use engine_tasks_benches::{median, threads};
use std::hint::black_box;
use std::time::Instant;

const TASKS: usize = 200_000;
const ROUNDS: usize = 40;

/// Runs `round` (which returns the spawn and join durations) `ROUNDS` times
/// and returns the median nanoseconds per task of each phase.
fn medians(mut round: impl FnMut() -> (f64, f64)) -> (f64, f64) {
    let (spawns, joins): (Vec<f64>, Vec<f64>) = (0..ROUNDS).map(|_| round()).unzip();
    (median(spawns), median(joins))
}

fn per_task(from: Instant, to: Instant) -> f64 {
    (to - from).as_nanos() as f64 / TASKS as f64
}

fn boxed_closures() -> (f64, f64) {
    medians(|| {
        let start = Instant::now();
        let cells: Vec<Box<dyn FnOnce() -> u64>> = (0..TASKS)
            .map(|i| {
                // 112 bytes, the size of the pool's cell for an empty task.
                let payload = [i as u64; 14];
                Box::new(move || black_box(payload)[0]) as Box<dyn FnOnce() -> u64>
            })
            .collect();
        let spawned = Instant::now();
        for cell in cells {
            black_box(cell());
        }
        (per_task(start, spawned), per_task(spawned, Instant::now()))
    })
}

fn engine_tasks(workers: usize) -> (f64, f64) {
    let pool = Pool::builder().threads(workers).build().unwrap();
    medians(|| {
        let start = Instant::now();
        let handles: Vec<_> = (0..TASKS)
            .map(|_| pool.spawn(Lane::Normal, || ()).unwrap())
            .collect();
        let spawned = Instant::now();
        for handle in handles {
            handle.join().unwrap();
        }
        (per_task(start, spawned), per_task(spawned, Instant::now()))
    })
}

/// The same tasks submitted with one `spawn_batch` call: one queue
/// operation and one wake-up for all of them.
fn engine_tasks_batch(workers: usize) -> (f64, f64) {
    let pool = Pool::builder().threads(workers).build().unwrap();
    medians(|| {
        let start = Instant::now();
        let handles = pool
            .spawn_batch(Lane::Normal, (0..TASKS).map(|_| || ()))
            .unwrap();
        let spawned = Instant::now();
        for handle in handles {
            handle.join().unwrap();
        }
        (per_task(start, spawned), per_task(spawned, Instant::now()))
    })
}

fn main() {
    let default_workers = threads() - 1;
    println!("ns per task, median of {ROUNDS} rounds of {TASKS} tasks");
    println!("{:<36} {:>8} {:>8} {:>8}", "", "spawn", "join", "total");
    let rows = [
        ("boxed closures, one thread", boxed_closures()),
        ("engine-tasks, no workers", engine_tasks(0)),
        (
            &*format!("engine-tasks, {default_workers} worker(s)"),
            engine_tasks(default_workers),
        ),
        (
            &*format!("engine-tasks spawn_batch, {default_workers} worker(s)"),
            engine_tasks_batch(default_workers),
        ),
    ];
    for (name, (spawn, join)) in rows {
        println!("{name:<36} {spawn:>8.0} {join:>8.0} {:>8.0}", spawn + join);
    }
}

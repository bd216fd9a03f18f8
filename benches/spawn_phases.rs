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
//! - `hand-off floor`: the least any pool can spend when another thread
//!   runs each task as it is spawned: 200,000 slots allocated once (each
//!   padded to 128 bytes, a line and its prefetch neighbour on x86-64), a
//!   thread that never sleeps and takes each slot as soon as it is
//!   published (a release store of a shared counter per task), runs it and
//!   marks it done in the slot; then the join loop reads each mark. No
//!   allocation, no queue, no wake-up: only each task's slot crossing to
//!   the other core and back, and the counter's line.
//!
//! Each row reports the median over 40 rounds of nanoseconds per task.
//!
//! Usage: `cargo run --release -p engine-tasks-benches --bin spawn_phases`

use crossbeam_utils::CachePadded;
use engine_tasks::{Lane, Pool};
use engine_tasks_benches::{median, threads};
use std::hint::black_box;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
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

/// One task's line: its input, and the mark and result its runner writes.
#[derive(Default)]
struct Slot {
    input: AtomicU64,
    output: AtomicU64,
    done: AtomicU64,
}

/// See the module docs (`hand-off floor`).
fn hand_off_floor() -> (f64, f64) {
    let slots: Arc<Vec<CachePadded<Slot>>> =
        Arc::new((0..TASKS).map(|_| Default::default()).collect());
    let published = Arc::new(CachePadded::new(AtomicUsize::new(0)));
    let stop = Arc::new(AtomicBool::new(false));
    let runner = {
        let (slots, published, stop) = (slots.clone(), published.clone(), stop.clone());
        std::thread::spawn(move || {
            // Slots published over all rounds so far, and taken.
            let mut taken = 0;
            // Relaxed: only ends the loop; the join below orders the rest.
            while !stop.load(Ordering::Relaxed) {
                // Acquire: pairs with the publisher's Release store.
                let upto = published.load(Ordering::Acquire);
                while taken < upto {
                    let slot = &slots[taken % TASKS];
                    // Relaxed: ordered by `published`.
                    let input = slot.input.load(Ordering::Relaxed);
                    // Relaxed: published by the Release store of `done`.
                    slot.output.store(black_box(input) + 1, Ordering::Relaxed);
                    // Release: pairs with the join loop's Acquire load.
                    slot.done
                        .store((taken / TASKS + 1) as u64, Ordering::Release);
                    taken += 1;
                }
                std::hint::spin_loop();
            }
        })
    };
    let mut round = 0u64;
    let result = medians(|| {
        round += 1;
        let before = (round as usize - 1) * TASKS;
        let start = Instant::now();
        for (i, slot) in slots.iter().enumerate() {
            // Relaxed: published by the Release store of `published`.
            slot.input.store(i as u64, Ordering::Relaxed);
            published.store(before + i + 1, Ordering::Release);
        }
        let spawned = Instant::now();
        let mut sum = 0;
        for slot in slots.iter() {
            // Acquire: pairs with the runner's Release store.
            while slot.done.load(Ordering::Acquire) != round {
                std::hint::spin_loop();
            }
            // Relaxed: ordered by the Acquire load of `done` above.
            sum += slot.output.load(Ordering::Relaxed);
        }
        black_box(sum);
        (per_task(start, spawned), per_task(spawned, Instant::now()))
    });
    // Relaxed: the runner only needs to see it eventually.
    stop.store(true, Ordering::Relaxed);
    runner.join().unwrap();
    result
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
        ("hand-off floor, 1 spinning thread", hand_off_floor()),
    ];
    for (name, (spawn, join)) in rows {
        println!("{name:<36} {spawn:>8.0} {join:>8.0} {:>8.0}", spawn + join);
    }
}

//! Where the kernel puts a thread woken by a paced frame loop.
//!
//! Each frame, after a sleep until the next tick (60 Hz by default), the
//! main thread wakes a second thread and both spin for 3 ms; each records
//! the CPU it started on. A frame where both started on the same CPU ran
//! on one core, the two taking turns. Two runners, in turn:
//!
//! - `plain`: a std thread parked with `thread::park`, woken by `unpark`;
//! - `engine-tasks`: a pool of one worker, the frame's work spawned as a
//!   task that the parked worker runs (its wake-up is steered off the
//!   waker's CPU, `engine-tasks/src/sync/placement.rs`).
//!
//! It prints, per runner, in how many frames the two shared a CPU and the
//! median delay from the wake-up to the woken thread's start.
//!
//! Usage: `cargo run --release -p engine-tasks-benches --bin wake_placement
//! -- [frames, default 100] [rate in Hz, default 60]`

use engine_tasks::{Lane, Pool};
use engine_tasks_benches::{median, Pacer, Pacing};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const SPIN: Duration = Duration::from_millis(3);

fn current_cpu() -> i32 {
    // SAFETY: `sched_getcpu` has no preconditions.
    unsafe { libc::sched_getcpu() }
}

fn spin(time: Duration) {
    let start = Instant::now();
    while start.elapsed() < time {
        std::hint::spin_loop();
    }
}

/// What one frame's woken thread reports: its first CPU and when it
/// started (nanoseconds since `epoch`).
#[derive(Default)]
struct Report {
    cpu: AtomicI32,
    started: AtomicU64,
}

impl Report {
    fn record(&self, epoch: Instant) {
        // Relaxed (both): read after the frame's join or handshake.
        self.cpu.store(current_cpu(), Ordering::Relaxed);
        self.started
            .store(epoch.elapsed().as_nanos() as u64, Ordering::Relaxed);
    }
}

/// Frames where both threads started on one CPU, and the median wake-up
/// delay in microseconds.
struct Outcome {
    shared_cpu: usize,
    delay_micros: f64,
}

/// `wake` wakes the other thread for one frame (which records into the
/// report and spins); `finish` waits for it.
fn frames(
    count: usize,
    pacing: Pacing,
    epoch: Instant,
    report: &Report,
    mut wake: impl FnMut(),
    mut finish: impl FnMut(),
) -> Outcome {
    let mut pacer = Pacer::new(pacing);
    let (mut shared_cpu, mut delays) = (0, Vec::new());
    for _ in 0..count {
        pacer.wait();
        let woken_at = epoch.elapsed().as_nanos() as u64;
        let mine = current_cpu();
        wake();
        spin(SPIN);
        finish();
        // Relaxed: `finish` ordered the report's stores before this.
        if report.cpu.load(Ordering::Relaxed) == mine {
            shared_cpu += 1;
        }
        let started = report.started.load(Ordering::Relaxed);
        delays.push(started.saturating_sub(woken_at) as f64 / 1e3);
    }
    Outcome {
        shared_cpu,
        delay_micros: median(delays),
    }
}

fn plain(count: usize, pacing: Pacing) -> Outcome {
    let epoch = Instant::now();
    let report = Arc::new(Report::default());
    let frame = Arc::new(AtomicU64::new(0));
    let done = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let thread = {
        let (report, frame, done, stop) =
            (report.clone(), frame.clone(), done.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut seen = 0;
            loop {
                // Acquire: pairs with the Release increment of the frame.
                while frame.load(Ordering::Acquire) == seen {
                    if stop.load(Ordering::Acquire) {
                        return;
                    }
                    std::thread::park();
                }
                seen += 1;
                report.record(epoch);
                spin(SPIN);
                // Release: publishes the report to the waiting thread.
                done.store(seen, Ordering::Release);
            }
        })
    };
    let mut issued = 0;
    let outcome = frames(
        count,
        pacing,
        epoch,
        &report,
        || {
            issued += 1;
            // Release: pairs with the Acquire load in the thread.
            frame.store(issued, Ordering::Release);
            thread.thread().unpark();
        },
        || {
            // Acquire: pairs with the Release store of `done`.
            while done.load(Ordering::Acquire) != frame.load(Ordering::Relaxed) {
                std::thread::yield_now();
            }
        },
    );
    // Release: pairs with the Acquire load in the thread.
    stop.store(true, Ordering::Release);
    thread.thread().unpark();
    thread.join().expect("the woken thread does not panic");
    outcome
}

fn engine_tasks(count: usize, pacing: Pacing) -> Outcome {
    let epoch = Instant::now();
    let pool = Pool::builder().threads(1).build().unwrap();
    let report = Arc::new(Report::default());
    let pending = std::cell::RefCell::new(None);
    frames(
        count,
        pacing,
        epoch,
        &report,
        || {
            let report = report.clone();
            *pending.borrow_mut() = Some(
                pool.spawn(Lane::FrameCritical, move || {
                    report.record(epoch);
                    spin(SPIN);
                })
                .expect("the pool runs"),
            );
        },
        || {
            pending
                .borrow_mut()
                .take()
                .expect("woken this frame")
                .join()
                .expect("the task does not panic");
        },
    )
}

fn main() {
    let mut args = std::env::args().skip(1);
    let count: usize = args.next().map_or(100, |a| a.parse().expect("frames"));
    let pacing = Pacing::from_hz(args.next().map_or(60.0, |a| a.parse().expect("a rate")));
    println!(
        "{count} frames at {}: the main thread wakes a parked thread, both spin 3 ms",
        pacing.label()
    );
    println!("| runner | frames on one CPU | wake-up to start, median |");
    println!("|---|---|---|");
    for (name, run) in [
        ("plain", plain as fn(usize, Pacing) -> Outcome),
        ("engine-tasks", engine_tasks),
    ] {
        let outcome = run(count, pacing);
        println!(
            "| {name} | {} of {count} | {:.0} µs |",
            outcome.shared_cpu, outcome.delay_micros
        );
    }
}

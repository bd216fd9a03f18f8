//! How much of a thread's data is still in the caches when it comes back
//! from a frame loop's sleep, on this machine.
//!
//! A paced frame starts after a sleep of a tick less the frame. What its
//! code and data cost then depends on where their lines went meanwhile: a
//! core of its own keeps them in its L1/L2; a core shared with other work
//! (another process, another guest on a virtual machine's host) loses
//! them. This binary reads one working set in a random order, each read's
//! address taken from the one before (so the reads cannot overlap and the
//! hardware prefetchers cannot guess the next line), right after reading
//! it once (warm), and again after a pause, and prints the median time per
//! line of each. Lines are 128 bytes apart, so the adjacent-line
//! prefetcher brings in nothing that a later read uses.
//!
//! The pauses: sleeps as long as the gap before a paced frame at 240, 60
//! and 30 Hz, shorter sleeps, and a 16 ms busy wait, which keeps the
//! thread running (the scheduler may still move it, or the host run
//! something else on its core): lines gone after the busy wait too were
//! evicted by other work, not by the sleep's idle state. The thread is not
//! pinned, so a sleep may also end on the other core.
//!
//! The working set's size is the span its lines are spread over: half of
//! it is read (one 64-byte line in every 128 bytes).
//!
//! Usage: `cargo run --release -p engine-tasks-benches --bin
//! cache_after_sleep -- [working set in KiB, default 64] [rounds, default
//! 40]`.

use engine_tasks_benches::median;
use std::time::{Duration, Instant};

/// Bytes between two lines of the working set: two 64-byte lines, so the
/// adjacent-line prefetcher's partner line is never one that is read.
const STRIDE_BYTES: usize = 128;

/// A random cycle through the working set's lines: `next[i]` is the
/// index (in words) of the line read after the one at word `i`.
struct Chase {
    next: Vec<usize>,
    lines: usize,
    first: usize,
}

impl Chase {
    fn new(bytes: usize) -> Chase {
        let words_per_line = STRIDE_BYTES / std::mem::size_of::<usize>();
        let lines = (bytes / STRIDE_BYTES).max(2);
        let mut order: Vec<usize> = (0..lines).collect();
        // Fisher-Yates with a fixed xorshift: the same cycle every run.
        let mut state = 0x9E37_79B9_7F4A_7C15u64;
        for i in (1..lines).rev() {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            order.swap(i, (state % (i as u64 + 1)) as usize);
        }
        let mut next = vec![0; lines * words_per_line];
        for k in 0..lines {
            next[order[k] * words_per_line] = order[(k + 1) % lines] * words_per_line;
        }
        Chase {
            next,
            lines,
            first: order[0] * words_per_line,
        }
    }

    /// Reads every line once, in the cycle's order; nanoseconds per line.
    fn read(&self) -> f64 {
        let start = Instant::now();
        let mut at = self.first;
        for _ in 0..self.lines {
            at = self.next[at];
        }
        std::hint::black_box(at);
        start.elapsed().as_secs_f64() * 1e9 / self.lines as f64
    }
}

/// What the thread does between the two reads.
#[derive(Clone, Copy)]
enum Pause {
    None,
    Sleep(Duration),
    BusyWait(Duration),
}

impl Pause {
    fn name(self) -> String {
        match self {
            Pause::None => "none (warm)".to_string(),
            Pause::Sleep(d) => format!("sleep {d:?}"),
            Pause::BusyWait(d) => format!("busy wait {d:?}"),
        }
    }

    fn take(self) {
        match self {
            Pause::None => {}
            Pause::Sleep(d) => std::thread::sleep(d),
            Pause::BusyWait(d) => {
                let start = Instant::now();
                while start.elapsed() < d {
                    std::hint::spin_loop();
                }
            }
        }
    }
}

fn main() {
    let mut args = std::env::args().skip(1);
    let kib: usize = args
        .next()
        .map_or(64, |a| a.parse().expect("working set in KiB"));
    let rounds: usize = args.next().map_or(40, |a| a.parse().expect("rounds"));
    let chase = Chase::new(kib * 1024);
    let pauses = [
        Pause::None,
        Pause::Sleep(Duration::from_micros(100)),
        Pause::Sleep(Duration::from_millis(1)),
        Pause::Sleep(Duration::from_micros(4_000)),
        Pause::Sleep(Duration::from_micros(16_000)),
        Pause::Sleep(Duration::from_micros(33_000)),
        Pause::BusyWait(Duration::from_micros(16_000)),
    ];
    println!(
        "{kib} KiB spanned by {} lines read in a random order, {STRIDE_BYTES} bytes apart; median of {rounds} rounds",
        chase.lines
    );
    println!("| pause before the read | ns per line |");
    println!("|---|---|");
    for pause in pauses {
        let times: Vec<f64> = (0..rounds)
            .map(|_| {
                chase.read();
                pause.take();
                chase.read()
            })
            .collect();
        println!("| {} | {:.1} |", pause.name(), median(times));
    }
}

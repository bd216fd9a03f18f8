//! Waiting for a paced loop's next tick with the frame's code and data
//! brought back before it ([`TaskGraph::sleep_until`](crate::TaskGraph::sleep_until)).
//!
//! A game loop that sleeps until its next tick (a frame limiter) hands its
//! core to other work for most of a period: after a 60 Hz sleep the
//! development VM's caches keep little of what the frame touched, and a
//! line of code or data costs about twenty times a warm read
//! (`docs/performance/paced-cold-start.md`). A frame then spends its first
//! microseconds fetching the engine's code and its own graph line after
//! line. The frame's thread warming that code at the frame's start helps
//! only a little (`sync/prefetch.rs`), and an early-woken worker warms its
//! own core, not the frame thread's.
//!
//! So the wait comes in two sleeps:
//!
//! 1. a sleep until [`WARM_LEAD`] before the deadline;
//! 2. the warming: every line of the frame's code section, then the spans
//!    the graph publishes for its early-woken workers (the pool's shared
//!    state and guest slot, the graph's runtime and frame state, its
//!    lists, dependency and successor rows, nodes and closure addresses,
//!    then the shared frames' code), then the nodes' states and run
//!    records, for a write, since this thread writes them when it runs
//!    their nodes. All of these are prefetch hints: nothing is read into
//!    the program, and a stale address costs one wasted load;
//! 3. a sleep for the rest, short enough that the caches keep what was
//!    warmed.
//!
//! A deadline already reached returns at once, without warming: the frame
//! overran its tick and the next one starts with its code still warm. A
//! deadline less than [`WARM_LEAD`] ahead warms at once, then sleeps.
//!
//! The frame that follows sees its thread's code as recently used and does
//! not warm the frame section again (`FRAME_CODE_USED` in `runtime.rs`).
//! What it prefetches node by node after the pool's idle gap (`alone.rs`,
//! `planned.rs`) finds its lines present and costs little.

use super::{Runtime, FRAME_CODE_USED};
use crate::clock;
use crate::pool::PoolHandle;
use crate::sync::prefetch::{self, CodeSection, Span, Warming, MAX_DATA_LINES};
use std::time::{Duration, Instant};

/// How long before the deadline the wait wakes to warm: more than a short
/// sleep's usual lateness on the development VM (60-70 µs) plus the
/// warming, short enough that the sleep after it keeps the caches (a 100
/// µs sleep kept them there, `cache_after_sleep`). 150, 300 and 1000 µs
/// gained alike in `warm_ahead` runs.
pub(super) const WARM_LEAD: Duration = Duration::from_micros(300);

impl Runtime {
    /// Sleeps until `deadline`, warming this graph's frame in the calling
    /// thread's caches [`WARM_LEAD`] before it (module docs).
    pub(in crate::graph) fn sleep_until(&self, pool: &PoolHandle, deadline: Instant) {
        let now = Instant::now();
        if deadline <= now {
            return;
        }
        if let Some(wake) = deadline.checked_sub(WARM_LEAD) {
            if wake > now {
                std::thread::sleep(wake - now);
            }
        }
        self.warm_ahead(pool);
        let now = Instant::now();
        if deadline > now {
            std::thread::sleep(deadline - now);
        }
    }

    /// Asks for this graph's frame code and data in this thread's caches
    /// (module docs, step 2).
    fn warm_ahead(&self, pool: &PoolHandle) {
        CodeSection::Frame.warm();
        // The spans may be stale if the graph moved since they were worked
        // out (`run_frame` works them out again): a stale address is a
        // wasted hint, never a fault.
        Warming::new(pool.shared().frame_thread_spans(), self.warm).step(usize::MAX);
        // SAFETY: `&self` means no frame runs (`run_frame` borrows the
        // runtime mutably), and this only reads the arrays' addresses and
        // lengths.
        let shared = unsafe { self.shared.as_ref() };
        for span in [
            Span::of(&shared.states, MAX_DATA_LINES),
            Span::of(&shared.runs, MAX_DATA_LINES),
        ] {
            for line in 0..span.lines {
                prefetch::line_for_write(span.start + line * prefetch::LINE_BYTES);
            }
        }
        FRAME_CODE_USED.set(clock::ticks());
    }
}

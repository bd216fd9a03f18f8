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
//! 2. unless that sleep woke past the deadline, the warming: the spans the
//!    graph publishes for its early-woken workers (`Runtime::warm_spans`:
//!    the pool's shared state and guest slot, the graph's runtime and frame
//!    state, its lists, dependency and successor rows, nodes and closure
//!    addresses, then the engine's frame code: on Linux the shared frames'
//!    section and the frame section). These are prefetch hints (x86-64 only; a split
//!    sleep elsewhere): nothing is read into the program, and a stale
//!    address costs one wasted load. The lines nodes write (their states
//!    and run records) are left out, as the workers' warming leaves them:
//!    in a shared frame a worker would take each back from this core, and
//!    warming them too showed no gain (`paced-cold-start.md`);
//! 3. sleeps until the deadline, short enough that the caches keep what was
//!    warmed.
//!
//! A deadline already reached returns at once, without warming: the frame
//! before overran its tick, so there was no gap to go cold in. A deadline
//! less than [`WARM_LEAD`] ahead warms at once, then sleeps.
//!
//! The frame that follows still asks for its code section at its start
//! (`COLD_CODE_NANOS` have passed since its thread's last frame), which
//! costs little once the lines are in the cache.

use super::Runtime;
use crate::pool::PoolHandle;
use crate::sync::prefetch::{Span, Warming, MAX_SPANS};
use std::time::{Duration, Instant};

/// How long before the deadline the wait wakes to warm: more than a long
/// sleep's lateness plus the warming (about 125 + 14 µs on the
/// development VM); 150, 300 and 1000 µs gained alike there.
pub(super) const WARM_LEAD: Duration = Duration::from_micros(300);

impl Runtime {
    /// Sleeps until `deadline`, warming this graph's frame in the calling
    /// thread's caches [`WARM_LEAD`] before it (module docs). Returns how
    /// many lines it asked for: 0 if it did not warm.
    pub(in crate::graph) fn sleep_until(&self, pool: &PoolHandle, deadline: Instant) -> usize {
        let now = Instant::now();
        if deadline <= now {
            return 0;
        }
        if let Some(early) = (deadline - now).checked_sub(WARM_LEAD) {
            std::thread::sleep(early);
        }
        let warmed = if Instant::now() < deadline {
            self.warm_ahead(pool)
        } else {
            0
        };
        // A loop: the platform's sleep may return early.
        loop {
            let now = Instant::now();
            if now >= deadline {
                break;
            }
            std::thread::sleep(deadline - now);
        }
        warmed
    }

    /// Asks for this graph's frame code and data in this thread's caches
    /// (module docs, step 2); how many lines.
    pub(super) fn warm_ahead(&self, pool: &PoolHandle) -> usize {
        Warming::new(pool.shared().frame_thread_spans(), self.spans_to_warm()).step(usize::MAX)
    }

    /// The spans [`Runtime::warm_ahead`] warms after the pool's: the
    /// published ones, whose first holds the runtime's own address, worked
    /// out again if the owner moved the graph since (`run_frame` would at
    /// its start).
    pub(super) fn spans_to_warm(&self) -> [Span; MAX_SPANS] {
        if self.moved_since_warm_spans() {
            self.warm_spans()
        } else {
            self.warm
        }
    }
}

//! The submission gate that makes shutdown lose no task: a submitter either
//! sees the pool closed (and gets its task back) or its task is queued
//! before shutdown stops waiting for submitters, so the final drain finds
//! it.
//!
//! # Protocol
//!
//! A submitter announces itself (`submitting += 1`), issues a SeqCst fence,
//! then looks at `closed`; shutdown sets `closed`, issues a SeqCst fence,
//! then waits until `submitting` is 0 (a Dekker pair). The two fences are
//! ordered in the single total order of SeqCst operations: if the
//! submitter's comes first, shutdown's look at `submitting` sees the
//! submitter counted and waits for it to count itself out, which it does
//! (Release) after its queue push, so the drain that follows the wait
//! (Acquire) finds the task; if shutdown's comes first, the submitter sees
//! `closed` and backs out with its task.

use crate::loom::atomic::{fence, AtomicBool, AtomicUsize, Ordering};
use crate::loom::thread;
use crossbeam_utils::CachePadded;

/// See the module docs. The two words sit on separate cache lines: workers
/// read `closed` in their loops, and a submitter writes `submitting` twice
/// per submission; sharing a line made every submission from outside the
/// pool miss on it (about a quarter of the main thread's time in the
/// `spawn_wait` benchmark, by perf).
#[derive(Default)]
pub(crate) struct Gate {
    closed: CachePadded<AtomicBool>,
    submitting: CachePadded<AtomicUsize>,
}

/// A submitter inside the gate; leaving (drop) counts it out.
pub(crate) struct Pass<'a>(&'a Gate);

impl Drop for Pass<'_> {
    fn drop(&mut self) {
        // Release: publishes the submitter's push to `wait_empty`'s Acquire.
        self.0.submitting.fetch_sub(1, Ordering::Release);
    }
}

impl Gate {
    /// Enters the gate, or `None` if it is closed.
    pub(crate) fn enter(&self) -> Option<Pass<'_>> {
        // Relaxed: ordered by the fence below.
        self.submitting.fetch_add(1, Ordering::Relaxed);
        let pass = Pass(self);
        // SeqCst: the submitter's half of the Dekker pair (module docs).
        fence(Ordering::SeqCst);
        // Relaxed: ordered by the fence above.
        if self.closed.load(Ordering::Relaxed) {
            return None;
        }
        Some(pass)
    }

    /// Whether the gate is closed (a hint for fast paths; `enter` decides).
    #[inline]
    pub(crate) fn is_closed(&self) -> bool {
        // Acquire: pairs with the Release store in `close`.
        self.closed.load(Ordering::Acquire)
    }

    /// Closes the gate; later `enter`s fail.
    pub(crate) fn close(&self) {
        // Release: pairs with `is_closed`'s Acquire; the fence below orders
        // it for `enter`.
        self.closed.store(true, Ordering::Release);
        // SeqCst: shutdown's half of the Dekker pair (module docs).
        fence(Ordering::SeqCst);
    }

    /// Waits until no submitter is inside (they only push one list, so this
    /// is short).
    pub(crate) fn wait_empty(&self) {
        // Acquire: pairs with the Release decrement in `Pass::drop`.
        while self.submitting.load(Ordering::Acquire) != 0 {
            thread::yield_now();
        }
    }
}

#[cfg(all(test, loom))]
mod loom_models {
    use super::*;
    use crate::loom::Arc;

    /// A submission racing shutdown is either refused or seen by the drain
    /// that follows the wait, never lost.
    #[test]
    fn a_racing_submission_is_refused_or_drained() {
        loom::model(|| {
            let gate = Arc::new(Gate::default());
            let queued = Arc::new(AtomicUsize::new(0));
            let submitter = {
                let (gate, queued) = (gate.clone(), queued.clone());
                thread::spawn(move || match gate.enter() {
                    Some(_pass) => {
                        // Relaxed: the gate's SeqCst operations order it.
                        queued.store(1, Ordering::Relaxed);
                        true
                    }
                    None => false,
                })
            };
            gate.close();
            gate.wait_empty();
            // Relaxed: ordered by `wait_empty`.
            let drained = queued.load(Ordering::Relaxed) == 1;
            let accepted = submitter.join().unwrap();
            assert_eq!(
                accepted, drained,
                "accepted tasks are drained, refused ones are not"
            );
        });
    }
}

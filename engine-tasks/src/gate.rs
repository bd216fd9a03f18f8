//! The submission gate that makes shutdown lose no task: a submitter either
//! sees the pool closed (and gets its task back) or its task is queued
//! before shutdown stops waiting for submitters, so the final drain finds
//! it.
//!
//! # Protocol
//!
//! A submitter announces itself (`submitting += 1`), then looks at `closed`;
//! shutdown sets `closed`, then waits until `submitting` is 0. All four
//! operations are SeqCst, so in their single total order either the
//! submitter's look comes after `closed = true` (it backs out), or
//! shutdown's wait reads a count that includes the submitter and waits for
//! its queue push, which the submitter makes before counting itself out
//! (SeqCst decrement, released to shutdown's SeqCst load).

use crate::loom::atomic::{AtomicBool, AtomicUsize, Ordering};
use crate::loom::thread;

/// See the module docs.
#[derive(Default)]
pub(crate) struct Gate {
    closed: AtomicBool,
    submitting: AtomicUsize,
}

/// A submitter inside the gate; leaving (drop) counts it out.
pub(crate) struct Pass<'a>(&'a Gate);

impl Drop for Pass<'_> {
    fn drop(&mut self) {
        // SeqCst: see the module docs; publishes the submitter's push.
        self.0.submitting.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Gate {
    /// Enters the gate, or `None` if it is closed.
    pub(crate) fn enter(&self) -> Option<Pass<'_>> {
        // SeqCst: see the module docs.
        self.submitting.fetch_add(1, Ordering::SeqCst);
        let pass = Pass(self);
        // SeqCst: see the module docs.
        if self.closed.load(Ordering::SeqCst) {
            return None;
        }
        Some(pass)
    }

    /// Whether the gate is closed (a hint for fast paths; `enter` decides).
    pub(crate) fn is_closed(&self) -> bool {
        // Acquire: pairs with the SeqCst store in `close`.
        self.closed.load(Ordering::Acquire)
    }

    /// Closes the gate; later `enter`s fail.
    pub(crate) fn close(&self) {
        // SeqCst: see the module docs.
        self.closed.store(true, Ordering::SeqCst);
    }

    /// Waits until no submitter is inside (they only push one list, so this
    /// is short).
    pub(crate) fn wait_empty(&self) {
        // SeqCst: see the module docs.
        while self.submitting.load(Ordering::SeqCst) != 0 {
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

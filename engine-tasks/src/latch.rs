//! Completion latch: a counter that wakes one registered waiter at zero.
//!
//! Used for spawned tasks (count 1), `join`'s stack task (count 1) and scopes
//! (one count per live task plus one for the scope body).
//!
//! # States
//!
//! `state = pending << 1 | WAITER`. The waiter writes its [`Waiter`] into the
//! cell once, then sets `WAITER` with a release RMW; from then on the cell is
//! read-only. The last `count_down` copies the waiter out *before* its CAS
//! makes the count zero, because after that CAS the latch's owner may return
//! and free the memory the latch lives in (a stack frame in `join`).

use crate::loom::atomic::{AtomicUsize, Ordering};
use crate::loom::{thread, UnsafeCell};
use crate::park::Parker;

const WAITER: usize = 1;
const ONE: usize = 2;

/// Who to wake when a latch reaches zero.
pub(crate) enum Waiter {
    /// A pool slot's parker; the pool outlives every task that can set the
    /// latch, so the pointer stays valid.
    Slot(*const Parker),
    /// A thread outside the pool.
    Thread(thread::Thread),
}

impl Waiter {
    fn wake(self) {
        match self {
            // SAFETY: see the variant's doc: the parker lives in the pool's
            // shared state, which outlives the tasks that set latches.
            Waiter::Slot(parker) => unsafe { (*parker).unpark() },
            Waiter::Thread(thread) => thread.unpark(),
        }
    }

    fn duplicate(&self) -> Waiter {
        match self {
            Waiter::Slot(parker) => Waiter::Slot(*parker),
            Waiter::Thread(thread) => Waiter::Thread(thread.clone()),
        }
    }
}

/// See the module docs.
pub(crate) struct Latch {
    state: AtomicUsize,
    waiter: UnsafeCell<Option<Waiter>>,
}

// SAFETY: the waiter cell is written once by the single waiter before it
// publishes WAITER with release, and only read after an acquire that saw
// WAITER; everything else is atomic.
unsafe impl Sync for Latch {}
// SAFETY: as above; `Waiter::Slot` points into the pool, valid on any thread.
unsafe impl Send for Latch {}

impl Latch {
    pub(crate) fn new(count: usize) -> Self {
        Latch {
            state: AtomicUsize::new(count * ONE),
            waiter: UnsafeCell::new(None),
        }
    }

    /// `true` once the count is zero. Acquire: everything the setters did
    /// before counting down is visible to the caller.
    #[inline]
    pub(crate) fn is_set(&self) -> bool {
        // Acquire: pairs with the AcqRel CAS in `count_down`.
        self.state.load(Ordering::Acquire) < ONE
    }

    /// Adds one pending count; only while the count is non-zero (the scope
    /// body holds one until it waits).
    pub(crate) fn increment(&self) {
        // Relaxed: the caller already holds a count, so the latch cannot
        // reach zero concurrently; the task is published by its queue.
        self.state.fetch_add(ONE, Ordering::Relaxed);
    }

    /// Counts one completion. After this returns `self` may be dangling.
    pub(crate) fn count_down(&self) {
        // Acquire: pairs with the AcqRel fetch_or in `register`, so the waiter
        // cell's contents are visible if WAITER is set.
        let mut state = self.state.load(Ordering::Acquire);
        loop {
            debug_assert!(state >= ONE, "latch counted below zero");
            let waiter = if state & WAITER != 0 && state < 2 * ONE {
                // SAFETY: WAITER is set, so the cell is initialised and no
                // longer written (module docs).
                self.waiter
                    .with(|w| unsafe { (*w).as_ref().map(Waiter::duplicate) })
            } else {
                None
            };
            // AcqRel: release publishes the task's result to whoever sees
            // the count reach zero; acquire orders our waiter read.
            match self.state.compare_exchange_weak(
                state,
                state - ONE,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => {
                    if let Some(waiter) = waiter {
                        waiter.wake();
                    }
                    return;
                }
                Err(actual) => state = actual,
            }
        }
    }

    /// Registers the single waiter. Returns `false` if the latch is already
    /// set (do not sleep). Call at most once per latch.
    pub(crate) fn register(&self, waiter: Waiter) -> bool {
        // SAFETY: only the single waiter writes the cell, once, before WAITER
        // is published; no reader looks at it until then.
        self.waiter.with_mut(|w| unsafe { *w = Some(waiter) });
        // AcqRel: release publishes the cell to `count_down`; acquire pairs
        // with its CAS when the latch is already set.
        let prev = self.state.fetch_or(WAITER, Ordering::AcqRel);
        prev >= ONE
    }
}

#[cfg(all(test, loom))]
mod loom_models {
    use super::*;
    use crate::loom::Arc;

    /// The waiter registers while the last count goes down: it is woken or
    /// sees the latch set, never sleeps forever.
    #[test]
    fn wake_is_never_lost() {
        loom::model(|| {
            let latch = Arc::new(Latch::new(2));
            let setters: Vec<_> = (0..2)
                .map(|_| {
                    let latch = latch.clone();
                    thread::spawn(move || latch.count_down())
                })
                .collect();
            if latch.register(Waiter::Thread(thread::current())) {
                while !latch.is_set() {
                    thread::park();
                }
            }
            assert!(latch.is_set());
            for s in setters {
                s.join().unwrap();
            }
        });
    }
}

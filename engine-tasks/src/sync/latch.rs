//! Completion latch: a counter that wakes one registered waiter at zero.
//!
//! Used for spawned tasks (count 1), `join`'s stack task (count 1) and scopes
//! (one count per live task plus one for the scope body).
//!
//! # States
//!
//! `pending` counts what is outstanding; every completion is one
//! `fetch_sub`, so tasks finishing on several threads contend on a single
//! read-modify-write each. The one that brings it to zero then moves `state`
//! to `SET` with a CAS. `state` is `EMPTY`, `WAITER` (the waiter wrote its
//! [`Waiter`] into the cell, then published it with a CAS), or `SET`. The
//! setter copies the waiter out *before* its CAS makes the latch observably
//! set, because after that CAS the owner may return and free the memory the
//! latch lives in (a stack frame in `join` or `scope`). Waiters look at
//! `state`, never at `pending`, so a count of zero alone frees nothing.
//!
//! For the same reason the count-down takes a raw pointer, not `&self`
//! (as rayon's latches do): a reference passed to a function must stay
//! valid until the function returns, while a setter's call is still
//! running when the owner sees `SET` and frees the latch. Miri flagged
//! the `&self` version in `join` ("deallocating while item is strongly
//! protected"). Inside, only references to the atomics and the waiter's
//! cell are made, each used before the `SET` store and never after. A
//! test can hold a thread in that window (`faults::Site::LastTouch`), after
//! a count that was not the last and after the `SET` and its wake-up, so
//! that the owner frees the latch meanwhile.

use crate::loom::atomic::{AtomicU8, AtomicUsize, Ordering};
use crate::loom::{thread, UnsafeCell};
use crate::sync::park::Parker;

const EMPTY: u8 = 0;
const WAITER: u8 = 1;
const SET: u8 = 2;

/// Who to wake when a latch reaches zero.
pub(crate) enum Waiter {
    /// A pool slot's parker. Only used by a thread waiting in the same pool
    /// as the task it waits for (`join`, `scope`, and `JoinHandle::join`,
    /// which holds a reference to its task's pool), so the pool, and the
    /// parker, outlive the task that sets the latch.
    Slot(*const Parker),
    /// A slot's parker in another pool than the one whose task sets the
    /// latch (a worker waiting on another pool keeps working in its own).
    /// The setter's pool does not keep the waiter's alive: once the latch
    /// is set the waiter may return and its pool shut down before the
    /// setter calls `unpark`. So the waiter also holds `owner`, a reference
    /// to what `parker` lives in, and each copy the setter takes keeps it
    /// alive until the wake is delivered.
    Owned {
        /// The parker to unpark; it lives inside `owner`.
        parker: *const Parker,
        /// Keeps `parker` alive.
        owner: std::sync::Arc<dyn Send + Sync>,
    },
    /// A thread outside the pool.
    Thread(thread::Thread),
}

impl Clone for Waiter {
    fn clone(&self) -> Waiter {
        self.duplicate()
    }
}

impl Waiter {
    /// Wakes the waiter (consumes this copy).
    pub(crate) fn wake(self) {
        match self {
            // SAFETY: see the variant's doc: the parker lives in the pool's
            // shared state, which outlives the tasks that set latches.
            Waiter::Slot(parker) => unsafe { (*parker).unpark() },
            Waiter::Owned { parker, owner } => {
                // SAFETY: `parker` lives inside `owner` (the variant's doc),
                // which this copy keeps alive until after the call.
                unsafe { (*parker).unpark() };
                drop(owner);
            }
            Waiter::Thread(thread) => thread.unpark(),
        }
    }

    fn duplicate(&self) -> Waiter {
        match self {
            Waiter::Slot(parker) => Waiter::Slot(*parker),
            Waiter::Owned { parker, owner } => Waiter::Owned {
                parker: *parker,
                owner: owner.clone(),
            },
            Waiter::Thread(thread) => Waiter::Thread(thread.clone()),
        }
    }
}

/// See the module docs.
pub(crate) struct Latch {
    pending: AtomicUsize,
    state: AtomicU8,
    waiter: UnsafeCell<Option<Waiter>>,
}

// SAFETY: the waiter cell is written once by the single waiter before it
// publishes WAITER with a release CAS, and only read after an acquire that
// saw WAITER; everything else is atomic.
unsafe impl Sync for Latch {}
// SAFETY: as above; `Waiter::Slot` and `Waiter::Owned` point at a parker,
// which is `Sync` and valid on any thread while its owner lives.
unsafe impl Send for Latch {}

impl Latch {
    pub(crate) fn new(count: usize) -> Self {
        Latch {
            pending: AtomicUsize::new(count),
            state: AtomicU8::new(EMPTY),
            waiter: UnsafeCell::new(None),
        }
    }

    /// `true` once the count reached zero. Acquire: everything the setters
    /// did before counting down is visible to the caller.
    #[inline]
    pub(crate) fn is_set(&self) -> bool {
        // Acquire: pairs with the AcqRel CAS in `set`.
        self.state.load(Ordering::Acquire) == SET
    }

    /// Adds one pending count; only while the count is non-zero (the scope
    /// body holds one until it waits).
    pub(crate) fn increment(&self) {
        // Relaxed: the caller already holds a count, so the latch cannot
        // reach zero concurrently; the task is published by its queue.
        self.pending.fetch_add(1, Ordering::Relaxed);
    }

    /// `true` if exactly `n` counts are outstanding: a holder of `n` counts
    /// then knows that giving them back sets the latch.
    #[inline]
    pub(crate) fn outstanding_is(&self, n: usize) -> bool {
        // Relaxed: a hint for when to give counts back; `count_down_by`
        // re-reads it with the ordering that matters.
        self.pending.load(Ordering::Relaxed) == n
    }

    /// Counts one completion; `true` if it set the latch.
    ///
    /// # Safety
    ///
    /// `this` points to a live latch of which the caller holds a count. Once
    /// the latch is set its owner may free it, even before this returns:
    /// the caller must not touch it after the call (module docs).
    #[inline]
    pub(crate) unsafe fn count_down(this: *const Self) -> bool {
        // SAFETY: forwarded to the caller.
        unsafe { Self::count_down_by(this, 1) }
    }

    /// Counts `n` completions at once (one, or a thread's deferred ones,
    /// see credit.rs); `true` if they set the latch.
    ///
    /// # Safety
    ///
    /// As [`Latch::count_down`], with `n` counts held.
    #[inline]
    pub(crate) unsafe fn count_down_by(this: *const Self, n: usize) -> bool {
        debug_assert!(n > 0);
        // SAFETY: the caller's count keeps the latch alive until `set`
        // below; the reference is to the atomic alone, last used before it.
        let pending = unsafe { &(*this).pending };
        // Holding all `n` outstanding counts means no one else can count
        // down, and every increment happens before any count-down that
        // could see `pending == n` (a holder adds one, or a frame adds
        // counts for pinned nodes and helpers before handing them over,
        // while its sinks' count is held). Then skip the decrement (the
        // common case: spawned tasks and join halves have a count of 1).
        // Acquire: pairs with the AcqRel decrements of earlier holders.
        if pending.load(Ordering::Acquire) == n {
            // SAFETY: as above; the counts are still held.
            unsafe { Self::set(this) };
            return true;
        }
        // AcqRel: release publishes this holder's effects; the last one
        // acquires everyone's before it sets the latch.
        let last = pending.fetch_sub(n, Ordering::AcqRel) == n;
        if last {
            // SAFETY: the latch is not set before `set` does it, so no
            // owner frees it until then.
            unsafe { Self::set(this) };
        } else {
            // The last holder may set the latch, and its owner free it,
            // from here on.
            pause_after_last_touch();
        }
        last
    }

    /// Moves `state` to `SET` and wakes the waiter, if any.
    ///
    /// # Safety
    ///
    /// `this` points to a live latch whose count has reached zero, and no
    /// one else sets it; it may be freed as soon as the CAS succeeds.
    #[cfg_attr(target_os = "linux", link_section = "engine_tasks_shared")]
    unsafe fn set(this: *const Self) {
        // SAFETY: alive until the CAS below sets it (caller's contract);
        // references to the atomic and the cell only, neither used after it.
        let (state_cell, waiter_cell) = unsafe { (&(*this).state, &(*this).waiter) };
        // Acquire: pairs with the AcqRel CAS in `register`, so the waiter
        // cell's contents are visible if WAITER is set.
        let mut state = state_cell.load(Ordering::Acquire);
        loop {
            debug_assert_ne!(state, SET, "latch set twice");
            let waiter = if state == WAITER {
                // SAFETY: WAITER is set, so the cell is initialised and no
                // longer written (module docs).
                waiter_cell.with(|w| unsafe { (*w).as_ref().map(Waiter::duplicate) })
            } else {
                None
            };
            // AcqRel: release publishes the results to whoever sees SET;
            // acquire pairs with `register` if it races us.
            match state_cell.compare_exchange(state, SET, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => {
                    // The latch may be gone now: only the copy is used.
                    if let Some(waiter) = waiter {
                        waiter.wake();
                    }
                    // A parked owner returns (and frees the latch) only once
                    // woken: the window is after the wake-up.
                    pause_after_last_touch();
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
        // AcqRel: release publishes the cell to `set`; acquire pairs with
        // `set` when the latch is already set.
        self.state
            .compare_exchange(EMPTY, WAITER, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }
}

/// The fault point after a last touch (`faults::Site::LastTouch`). None
/// under loom, whose models explore the orderings themselves.
#[inline]
fn pause_after_last_touch() {
    #[cfg(not(loom))]
    crate::faults::maybe_pause_after_last_touch();
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
                    // SAFETY: the `Arc` keeps the latch alive.
                    thread::spawn(move || unsafe { Latch::count_down(&*latch) })
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

    /// A waiter from another pool sleeps on its own slot's parker (the
    /// cross-pool wait in worker.rs) and lets go of that pool as soon as it
    /// sees the latch set, racing the setter's `unpark`. Every interleaving
    /// wakes it or lets it see the latch set; the setter's copy of the
    /// owner keeps the parker alive through its `unpark` (without it the
    /// last reference could go in between), and loom checks that every
    /// copy is released.
    #[test]
    fn a_waiter_from_another_pool_is_woken_on_its_own_parker() {
        struct Home {
            parker: Parker,
        }
        loom::model(|| {
            let latch = Arc::new(Latch::new(1));
            let setter = {
                let latch = latch.clone();
                // SAFETY: the `Arc` keeps the latch alive.
                thread::spawn(move || unsafe { Latch::count_down(&*latch) })
            };
            let home = std::sync::Arc::new(Home {
                parker: Parker::new(),
            });
            let waiter = Waiter::Owned {
                parker: &home.parker,
                owner: home.clone(),
            };
            if latch.register(waiter) {
                while !latch.is_set() {
                    home.parker.park();
                }
            }
            // The waiter's pool may now shut down.
            drop(home);
            assert!(latch.is_set());
            setter.join().unwrap();
        });
    }
}

//! Deferred scope completions: a thread's private credit against one scope's
//! latch.
//!
//! A scope's latch counts the body plus every live task, so a fan-out in
//! which each task spawns children would cost two read-modify-writes on the
//! one shared counter per task (+1 at spawn, -1 at completion), and with
//! tasks finishing on several cores that line ping-pongs between them. The
//! first version of the fan-out benchmark spent most of its time there: the
//! same tree ran 2.5 times slower on two threads than on one.
//!
//! Instead, a thread that finishes a scope task keeps the count it held
//! (*credit*) rather than giving it back. Credit is spent in two ways:
//!
//! - **a spawn into the same scope** takes one unit of credit as the new
//!   task's count, with no atomic operation at all;
//! - **settling** gives all remaining units back with one `fetch_sub`.
//!
//! # Invariant
//!
//! `pending = live tasks + body + the credit every thread holds`. A spawn
//! paid from credit moves a unit from "credit" to "live task"; settling
//! subtracts exactly the units held. So `pending` never drops below the true
//! outstanding count, and reaches zero only once every task has finished and
//! every thread has settled: no scope ends early. Credit also keeps the scope
//! (and the latch it points to) alive, which is why holding a raw pointer to
//! the latch is sound while the count is non-zero.
//!
//! # When a thread settles
//!
//! Credit delays the scope's end, so a thread must never hold it while it
//! could block on something the scope's owner would do afterwards. It
//! settles:
//!
//! - before it runs a task that belongs to another scope or to none
//!   (`Local::run_task`), or a task of another pool inside a wait on that
//!   pool (`Local::wait_for_other_pool`), since that task may block for any
//!   reason;
//! - when it finds no work (before the idle spin and before it parks);
//! - when a wait ends (`Local::wait_loop`), before it returns to the code
//!   that waited; and while it waits for the credited scope itself, as soon
//!   as its credit is all that is outstanding;
//! - when its slot context is dropped (worker exit, guest slot released);
//! - before it starts crediting a different scope.
//!
//! Between those points the thread only runs tasks of the credited scope, or
//! waits inside one, and the scope cannot end before those finish anyway.

use crate::sync::latch::Latch;
use crate::sync::task::scope_key;
use std::cell::Cell;
use std::ptr;

/// One thread's credit; lives in its `Local` (`!Sync` through `Cell`).
pub(crate) struct ScopeCredit {
    latch: Cell<*const Latch>,
    units: Cell<usize>,
}

impl ScopeCredit {
    pub(crate) const fn new() -> Self {
        ScopeCredit {
            latch: Cell::new(ptr::null()),
            units: Cell::new(0),
        }
    }

    /// Records the completion of a task of the scope whose latch is `latch`,
    /// keeping its count as credit.
    #[inline]
    pub(crate) fn defer(&self, latch: &Latch) {
        let latch_ptr: *const Latch = latch;
        if self.units.get() > 0 && self.latch.get() != latch_ptr {
            self.settle();
        }
        self.latch.set(latch_ptr);
        self.units.set(self.units.get() + 1);
    }

    /// Spends a unit of credit on a new task of `latch`'s scope. `false` if
    /// there was none: the caller must add the count to the latch itself.
    #[inline]
    pub(crate) fn take(&self, latch: &Latch) -> bool {
        let units = self.units.get();
        if units > 0 && ptr::eq(self.latch.get(), latch) {
            self.units.set(units - 1);
            true
        } else {
            false
        }
    }

    /// Settles unless the thread is about to run a task of the credited
    /// scope (`task_scope`: the task's scope key, `TaskRef::scope`).
    #[inline]
    pub(crate) fn settle_unless(&self, task_scope: usize) {
        if self.units.get() > 0 && scope_key(self.latch.get()) != task_scope {
            self.settle();
        }
    }

    /// Settles if the credit is all that keeps `latch` from being set: a
    /// thread waiting for a scope must not run unrelated work (which may
    /// nest further waits) once the scope is done but for its own credit.
    /// `true` if it settled.
    #[inline]
    pub(crate) fn settle_if_last(&self, latch: &Latch) -> bool {
        let units = self.units.get();
        units > 0
            && ptr::eq(self.latch.get(), latch)
            && latch.outstanding_is(units)
            && self.settle()
    }

    /// Gives all credit back to the latch. `true` if there was any (the
    /// latch may have been set by it).
    #[inline]
    pub(crate) fn settle(&self) -> bool {
        let units = self.units.replace(0);
        if units == 0 {
            return false;
        }
        // SAFETY: while `units` was non-zero the latch could not reach zero
        // (module docs), so the scope owning it was still waiting and the
        // latch alive. After this call it may be freed; the stale pointer is
        // only ever compared, never read, until `defer` replaces it.
        unsafe { Latch::count_down_by(self.latch.get(), units) };
        true
    }
}

impl Drop for ScopeCredit {
    fn drop(&mut self) {
        self.settle();
    }
}

#[cfg(all(test, loom))]
mod loom_models {
    use super::*;
    use crate::loom::atomic::{AtomicUsize, Ordering};
    use crate::loom::{thread, Arc};
    use crate::sync::latch::Waiter;

    /// The owner of a scope spawns two tasks; two threads each run one,
    /// keeping its count as credit, and one of them spends that credit on a
    /// child before settling. The owner, woken by the latch, sees all three
    /// tasks' effects: the latch never opens before the last one finished.
    #[test]
    fn credit_never_ends_a_scope_early() {
        loom::model(|| {
            // Body plus two tasks.
            let latch = Arc::new(Latch::new(3));
            let ran = Arc::new(AtomicUsize::new(0));
            let runners: Vec<_> = (0..2)
                .map(|i| {
                    let (latch, ran) = (latch.clone(), ran.clone());
                    thread::spawn(move || {
                        let credit = ScopeCredit::new();
                        // Relaxed: published by the latch's AcqRel.
                        ran.fetch_add(1, Ordering::Relaxed);
                        credit.defer(&latch);
                        if i == 0 {
                            // A child paid for by the credit, run here.
                            assert!(credit.take(&latch));
                            ran.fetch_add(1, Ordering::Relaxed);
                            credit.defer(&latch);
                        }
                        credit.settle();
                    })
                })
                .collect();
            // The body ends.
            // SAFETY: the `Arc` keeps the latch alive.
            unsafe { Latch::count_down(&*latch) };
            if latch.register(Waiter::Thread(thread::current())) {
                while !latch.is_set() {
                    thread::park();
                }
            }
            assert_eq!(ran.load(Ordering::Relaxed), 3);
            for r in runners {
                r.join().unwrap();
            }
        });
    }
}

//! A one-permit parker for one thread slot.
//!
//! `unpark` leaves a permit; `park` consumes it or sleeps until one arrives.
//! Sleeping is a condition-variable wait (a futex wait on Linux): no spinning
//! and no timeout (but in `park_timeout`, for an early wake-up before a
//! paced loop's next frame), so a parked thread costs no CPU. The parker belongs to a
//! slot, not to an OS thread, so a waker can hold on to it while the slot is
//! handed from one thread to another (the pool's guest slot).
//!
//! A parker also carries its slot's [`Placement`]: a waker that finds the
//! owner asleep first steers it off the waker's CPU (`placement.rs`), and
//! the owner restores its affinity when it wakes.
//!
//! # States
//!
//! `EMPTY` (no permit, nobody asleep), `PARKED` (the owner is asleep or about
//! to be, under the mutex), `NOTIFIED` (a permit is waiting).
//!
//! A timed park ([`Parker::park_timeout`]) that runs out leaves `PARKED`
//! for `EMPTY` by a compare-exchange under the mutex; if a waker swapped in
//! `NOTIFIED` first, that fails and the park consumes the permit instead,
//! so a permit is never lost to a timeout. The owner restores its mask
//! (`placement.rs`) after every park in which it slept, timed out or not: a
//! waker may have steered it and then lost the race to the timeout, leaving
//! a permit that the next park consumes.

use crate::loom::atomic::{AtomicU32, Ordering};
use crate::loom::{Condvar, Mutex};
use crate::sync::placement::Placement;
use std::time::Duration;

const EMPTY: u32 = 0;
const PARKED: u32 = 1;
const NOTIFIED: u32 = 2;

/// How a [`Parker::park_timeout`] ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Woken {
    /// A permit was consumed (an `unpark` before or during the park).
    Permit,
    /// The timeout passed with no permit.
    TimedOut,
}

/// See the module docs.
pub(crate) struct Parker {
    state: AtomicU32,
    lock: Mutex<()>,
    cvar: Condvar,
    placement: Placement,
}

impl Parker {
    pub(crate) fn new() -> Self {
        Parker {
            state: AtomicU32::new(EMPTY),
            lock: Mutex::new(()),
            cvar: Condvar::new(),
            placement: Placement::new(),
        }
    }

    /// Sleeps until a permit is available, then consumes it. Only the slot's
    /// current owner calls this.
    pub(crate) fn park(&self) {
        // Acquire: pairs with the Release swap in `unpark`, so whatever the
        // waker did before unparking is visible after we return.
        if self
            .state
            .compare_exchange(NOTIFIED, EMPTY, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
        {
            return;
        }
        let mut guard = self.lock.lock().unwrap_or_else(|e| e.into_inner());
        // Relaxed on success: the mutex orders us with `unpark`'s lock/notify.
        // Acquire on failure: the state is NOTIFIED; as above.
        match self
            .state
            .compare_exchange(EMPTY, PARKED, Ordering::Relaxed, Ordering::Acquire)
        {
            Ok(_) => {}
            Err(NOTIFIED) => {
                // Relaxed: the failed CAS above already acquired.
                self.state.store(EMPTY, Ordering::Relaxed);
                return;
            }
            Err(other) => unreachable!("parker in state {other} at park"),
        }
        loop {
            guard = self.cvar.wait(guard).unwrap_or_else(|e| e.into_inner());
            // Acquire: pairs with the Release swap in `unpark`.
            if self
                .state
                .compare_exchange(NOTIFIED, EMPTY, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
            {
                drop(guard);
                self.placement.restore();
                return;
            }
            // A spurious wake-up: still PARKED, wait again.
        }
    }

    /// Like [`Parker::park`], but returns [`Woken::TimedOut`] once `timeout`
    /// has passed with no permit. Only the slot's current owner calls this.
    pub(crate) fn park_timeout(&self, timeout: Duration) -> Woken {
        // Acquire: as in `park`.
        if self
            .state
            .compare_exchange(NOTIFIED, EMPTY, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
        {
            return Woken::Permit;
        }
        let guard = self.lock.lock().unwrap_or_else(|e| e.into_inner());
        // Orderings as in `park`.
        match self
            .state
            .compare_exchange(EMPTY, PARKED, Ordering::Relaxed, Ordering::Acquire)
        {
            Ok(_) => {}
            Err(NOTIFIED) => {
                // Relaxed: the failed CAS above already acquired.
                self.state.store(EMPTY, Ordering::Relaxed);
                return Woken::Permit;
            }
            Err(other) => unreachable!("parker in state {other} at park"),
        }
        let guard = self.sleep_while_parked(guard, timeout);
        // Still under the lock. Relaxed on success: no permit came, so there
        // is nothing to acquire. Acquire on failure: a waker swapped in
        // `NOTIFIED`; pairs with its Release swap, and we consume the permit.
        let woken =
            match self
                .state
                .compare_exchange(PARKED, EMPTY, Ordering::Relaxed, Ordering::Acquire)
            {
                Ok(_) => Woken::TimedOut,
                Err(NOTIFIED) => {
                    // Relaxed: the failed CAS acquired.
                    self.state.store(EMPTY, Ordering::Relaxed);
                    Woken::Permit
                }
                Err(other) => unreachable!("parker in state {other} after a timed park"),
            };
        drop(guard);
        self.placement.restore();
        woken
    }

    /// Waits on the condition variable until the state leaves `PARKED` or
    /// `timeout` has passed; returns the lock still held.
    #[cfg(not(loom))]
    fn sleep_while_parked<'a>(
        &'a self,
        mut guard: crate::loom::MutexGuard<'a, ()>,
        timeout: Duration,
    ) -> crate::loom::MutexGuard<'a, ()> {
        use std::time::Instant;
        // `None`: a timeout past the end of time, which never passes.
        let deadline = Instant::now().checked_add(timeout);
        // Relaxed: the mutex orders this read with `unpark`'s swap (which
        // is followed by a lock and notify); the caller's CAS acquires.
        while self.state.load(Ordering::Relaxed) == PARKED {
            let left = match deadline {
                Some(deadline) => match deadline.checked_duration_since(Instant::now()) {
                    Some(left) if !left.is_zero() => left,
                    _ => break,
                },
                None => Duration::MAX,
            };
            guard = self
                .cvar
                .wait_timeout(guard, left)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        guard
    }

    /// Under loom the timeout passes as soon as the lock is released once:
    /// the model explores a waker's swap before, during and after the park.
    #[cfg(loom)]
    fn sleep_while_parked<'a>(
        &'a self,
        guard: crate::loom::MutexGuard<'a, ()>,
        _timeout: Duration,
    ) -> crate::loom::MutexGuard<'a, ()> {
        drop(guard);
        self.lock.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Leaves a permit and wakes the owner if it sleeps.
    pub(crate) fn unpark(&self) {
        // The owner sleeps, so this wake-up decides its CPU: steer it first
        // (placement.rs), while it cannot leave `PARKED` but through a swap.
        // Relaxed: `steer_away_from_caller` checks again under its lock.
        let parked = || self.state.load(Ordering::Relaxed) == PARKED;
        if parked() {
            self.placement.steer_away_from_caller(parked);
        }
        // Release: pairs with the Acquire in `park`.
        match self.state.swap(NOTIFIED, Ordering::Release) {
            EMPTY | NOTIFIED => {}
            PARKED => {
                // Taking the lock orders our notify after the owner's wait
                // began (it holds the lock from its CAS to the wait), so the
                // notification cannot fall between its check and its sleep.
                drop(self.lock.lock().unwrap_or_else(|e| e.into_inner()));
                self.cvar.notify_one();
            }
            other => unreachable!("parker in state {other} at unpark"),
        }
    }

    /// The slot's steering state (`placement.rs`).
    pub(crate) fn placement(&self) -> &Placement {
        &self.placement
    }

    /// Whether the owner is asleep (or about to be). For the placement
    /// tests, which need Linux's affinity calls.
    #[cfg(all(test, target_os = "linux", not(any(loom, miri))))]
    pub(crate) fn is_parked(&self) -> bool {
        // Relaxed: a test's polling hint.
        self.state.load(Ordering::Relaxed) == PARKED
    }
}

#[cfg(all(test, loom))]
mod loom_models {
    use super::*;
    use crate::loom::{atomic::AtomicBool, thread, Arc};

    /// A permit given before, during or after park is never lost.
    #[test]
    fn unpark_is_never_lost() {
        loom::model(|| {
            let parker = Arc::new(Parker::new());
            let flag = Arc::new(AtomicBool::new(false));
            let waker = {
                let parker = parker.clone();
                let flag = flag.clone();
                thread::spawn(move || {
                    flag.store(true, Ordering::Relaxed);
                    parker.unpark();
                })
            };
            while !flag.load(Ordering::Relaxed) {
                parker.park();
            }
            waker.join().unwrap();
        });
    }

    /// A timed park that runs out never swallows a permit: whether the
    /// waker's swap lands before, during or after it, a permit it returns
    /// came from the waker, and one it misses is left for the next park.
    #[test]
    fn a_timeout_never_loses_a_permit() {
        loom::model(|| {
            let parker = Arc::new(Parker::new());
            let flag = Arc::new(AtomicBool::new(false));
            let waker = {
                let parker = parker.clone();
                let flag = flag.clone();
                thread::spawn(move || {
                    // Relaxed: the parker's Release/Acquire pair publishes it.
                    flag.store(true, Ordering::Relaxed);
                    parker.unpark();
                })
            };
            if parker.park_timeout(std::time::Duration::from_millis(1)) == Woken::Permit {
                // Relaxed: as above.
                assert!(flag.load(Ordering::Relaxed), "a permit nobody gave");
            }
            // Relaxed: as above.
            while !flag.load(Ordering::Relaxed) {
                parker.park();
            }
            waker.join().unwrap();
        });
    }
}

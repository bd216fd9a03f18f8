//! Taking back a blocking thread that was counted and will never run,
//! without waiting on the pool's lock where that could deadlock.
//!
//! A spawn function may keep a thread's function, answer `Ok`, and drop the
//! function unrun later (`pool/start.rs`). The pool must then take the
//! thread's count back under its lock. But the function can be dropped
//! on a thread that must not wait for that lock: the thread inside the
//! spawn function's call, which holds the lock (a spawn function that drops
//! its previous function as it keeps the next), a thread that call waits
//! for (a thread factory), or a thread holding another pool's lock in the
//! same way (two pools sharing a spawn function).
//!
//! # Protocol
//!
//! One word, `call`: [`IN_CALL`] while a thread is inside the spawn
//! function under the lock, plus [`ONE_LOST`] for each start lost
//! meanwhile.
//!
//! ```text
//! starter (holds the lock):  enter: store IN_CALL   ... the call ...   leave: swap(0) -> lost
//! dropper:                   loop { try_lock -> take back under the lock, done
//!                                   | word has IN_CALL -> CAS word + ONE_LOST, done (else look again)
//!                                   | neither -> yield, look again }
//! ```
//!
//! A dropper that adds to the word while the call is on hands its start to
//! the starter, which takes it back after the call under the lock it still
//! holds. The starter's swap and the dropper's compare-and-swap are
//! read-modify-writes of one word, so one comes first: a swap first clears
//! `IN_CALL`, and the compare-and-swap, which expected it set, fails and
//! the dropper looks again; a compare-and-swap first is in what the swap
//! returns. No start is taken back twice or never. The dropper waits only
//! for the lock's short holds outside a spawn call (no user code runs in
//! them), yielding between looks.

use crate::loom::atomic::{AtomicUsize, Ordering};

/// Set in the word while a thread is inside the spawn function's call.
const IN_CALL: usize = 1;
/// One start lost during that call, counted above `IN_CALL`.
const ONE_LOST: usize = 2;

/// See the module docs.
#[derive(Default)]
pub(crate) struct SpawnCall {
    call: AtomicUsize,
}

impl SpawnCall {
    /// The starter, under the lock, is about to call the spawn function.
    pub(crate) fn enter(&self) {
        // Relaxed: only the count travels through this word, and every
        // change of it is a read-modify-write (`defer`, `leave`) or this
        // store, made under the lock before any dropper can see the call.
        self.call.store(IN_CALL, Ordering::Relaxed);
    }

    /// The call returned: how many starts were lost during it, which the
    /// starter takes back under the lock it still holds.
    pub(crate) fn leave(&self) -> usize {
        // Relaxed: a read-modify-write, ordered against `defer`'s by the
        // word's own modification order; no other data rides on it.
        self.call.swap(0, Ordering::Relaxed) / ONE_LOST
    }

    /// Hands one lost start to the thread inside the spawn call, if one is.
    /// `false`: no call is on; take the lock instead.
    pub(crate) fn defer(&self) -> bool {
        // Relaxed: the compare-and-swap below decides.
        let mut word = self.call.load(Ordering::Relaxed);
        while word & IN_CALL != 0 {
            // Relaxed: pairs with `leave`'s swap through the word's
            // modification order (module docs).
            match self.call.compare_exchange_weak(
                word,
                word + ONE_LOST,
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => return true,
                Err(actual) => word = actual,
            }
        }
        false
    }
}

#[cfg(all(test, loom))]
mod loom_models {
    use super::*;
    use crate::loom::{thread, Arc, Mutex};

    /// A starter holds the lock across a spawn call while a dropper loses
    /// one start: it is taken back exactly once, by the starter after the
    /// call or by the dropper under the lock, and the dropper never waits
    /// for the lock while the call is on.
    #[test]
    fn a_lost_start_is_taken_back_exactly_once() {
        loom::model(|| {
            let lock = Arc::new(Mutex::new(0usize));
            let call = Arc::new(SpawnCall::default());
            let dropper = {
                let (lock, call) = (lock.clone(), call.clone());
                thread::spawn(move || loop {
                    if let Ok(mut taken) = lock.try_lock() {
                        *taken += 1;
                        return;
                    }
                    if call.defer() {
                        return;
                    }
                    thread::yield_now();
                })
            };
            {
                let mut taken = lock.lock().unwrap();
                call.enter();
                thread::yield_now();
                *taken += call.leave();
            }
            dropper.join().unwrap();
            assert_eq!(*lock.lock().unwrap(), 1);
        });
    }
}

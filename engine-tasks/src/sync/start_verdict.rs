//! A thread's start verdict: whether a thread that a spawn function
//! started may run its pool's loop. Used by `pool/start.rs`; the reason is
//! there.
//!
//! # States
//!
//! Each start has a `Verdict`, shared by the starting call and the
//! thread's function, under a mutex:
//!
//! ```text
//! Pending --the function returned a handle--> Counted  (the thread runs the body)
//! Pending --an error or a panic------------> Refused  (the thread returns at once)
//! Pending --the thread's function dropped--> Dropped  (the start then counts as failed)
//! ```
//!
//! A function dropped unrun after the verdict was `Counted` (a spawn
//! function that kept it to run later, then dropped it) leaves the state as
//! it is, but [`Ticket::abandon`] tells the dropper so: the pool counted a
//! thread that will never run, and must take it back (`pool/start.rs`).
//! A function run on the starting call's own thread, before the verdict,
//! panics instead of waiting for itself.
//!
//! The thread's function first waits while the verdict is `Pending`, then
//! runs the pool's body only if it reads `Counted`. The starting call
//! decides once the spawn function has returned, so a thread can never see
//! a verdict its pool then changes. The wait is short (the rest of the
//! spawn function) and happens on the new thread, never on the caller.

use crate::loom::{Arc, Condvar, Mutex};
use std::io;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum State {
    Pending,
    Counted,
    Refused,
    Dropped,
}

/// The starting call's share.
pub(crate) struct Verdict {
    state: Mutex<State>,
    decided: Condvar,
    /// The thread of the starting call.
    #[cfg(not(loom))]
    starter: std::thread::ThreadId,
}

/// A verdict for one start, `Pending`, and the ticket for the thread's
/// function.
pub(crate) fn new() -> (Arc<Verdict>, Ticket) {
    let verdict = Arc::new(Verdict {
        state: Mutex::new(State::Pending),
        decided: Condvar::new(),
        #[cfg(not(loom))]
        starter: std::thread::current().id(),
    });
    let ticket = Ticket(verdict.clone());
    (verdict, ticket)
}

impl Verdict {
    fn lock(&self) -> crate::loom::MutexGuard<'_, State> {
        // Nothing panics under this lock.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The starting call's side: `started` is what the spawn function
    /// answered; what is returned is what the pool must believe.
    pub(crate) fn decide<H>(&self, started: io::Result<H>) -> io::Result<H> {
        let mut state = self.lock();
        let dropped = *state == State::Dropped;
        *state = match &started {
            // A failed `std::thread::Builder::spawn` drops the function
            // too: its own error says more.
            Err(_) => State::Refused,
            Ok(_) if dropped => State::Dropped,
            Ok(_) => State::Counted,
        };
        if dropped && started.is_ok() {
            // Dropping the handle detaches a thread that, if it exists, no
            // longer has the pool's function to run.
            drop(started);
            return Err(io::Error::other(
                "the thread spawn function dropped the thread's function without running it",
            ));
        }
        drop(state);
        self.decided.notify_all();
        started
    }
}

/// The thread function's share of a verdict.
pub(crate) struct Ticket(Arc<Verdict>);

impl Ticket {
    /// Waits for the starting call's verdict: whether to run the body.
    ///
    /// # Panics
    ///
    /// On the starting call's own thread while the verdict is pending: the
    /// spawn function ran the thread's function in the call instead of on
    /// a new thread, and would wait for itself. The panic reaches the
    /// starting call, which counts it as a failed start.
    pub(crate) fn counted(&self) -> bool {
        let mut state = self.0.lock();
        #[cfg(not(loom))]
        if *state == State::Pending && std::thread::current().id() == self.0.starter {
            drop(state);
            panic!("the thread spawn function ran the thread's function in the call, not on a new thread");
        }
        while *state == State::Pending {
            state = self
                .0
                .decided
                .wait(state)
                .unwrap_or_else(|e| e.into_inner());
        }
        *state == State::Counted
    }
}

/// What became of a start whose thread's function was dropped unrun.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Abandoned {
    /// Before the verdict: the start fails (`Verdict::decide`).
    BeforeTheVerdict,
    /// After the pool counted the thread: it will never run.
    Counted,
    /// After the start was refused: the pool counted nothing.
    Refused,
}

impl Ticket {
    /// The thread's function is being dropped without having run: settles
    /// the verdict (`Pending` becomes `Dropped`) and says what the pool
    /// believed, in one hold of the lock, so a verdict given meanwhile is
    /// either seen here or sees the drop.
    pub(crate) fn abandon(self) -> Abandoned {
        let mut state = self.0.lock();
        let abandoned = match *state {
            State::Pending => {
                *state = State::Dropped;
                Abandoned::BeforeTheVerdict
            }
            State::Counted => Abandoned::Counted,
            State::Refused | State::Dropped => Abandoned::Refused,
        };
        // Released before `self` drops, whose `Drop` finds the state
        // settled.
        drop(state);
        abandoned
    }
}

impl Drop for Ticket {
    /// Dropped before the verdict (the function was never run): tell the
    /// starting call, which then refuses the start. After it: nothing.
    fn drop(&mut self) {
        let mut state = self.0.lock();
        if *state == State::Pending {
            *state = State::Dropped;
        }
    }
}

#[cfg(all(test, loom))]
mod loom_models {
    use super::*;
    use crate::loom::thread;
    use loom::sync::atomic::{AtomicUsize, Ordering};

    /// The spawn function starts the thread, then answers `answer_ok`:
    /// the body runs exactly when the answer was a success.
    fn model(answer_ok: bool) {
        loom::model(move || {
            let runs = Arc::new(AtomicUsize::new(0));
            let counter = runs.clone();
            let (verdict, ticket) = new();
            let thread = thread::spawn(move || {
                if ticket.counted() {
                    // Relaxed: read after the join, which orders it.
                    counter.fetch_add(1, Ordering::Relaxed);
                }
            });
            let answer = if answer_ok {
                Ok(())
            } else {
                Err(io::Error::other("failed after starting"))
            };
            assert_eq!(verdict.decide(answer).is_ok(), answer_ok);
            thread.join().unwrap();
            // Relaxed: after the join.
            assert_eq!(runs.load(Ordering::Relaxed), usize::from(answer_ok));
        });
    }

    #[test]
    fn a_thread_runs_the_body_only_when_its_start_was_counted() {
        model(true);
        model(false);
    }

    /// The function is abandoned unrun on another thread while the spawn
    /// function answers `Ok`: either the start fails (dropped before the
    /// verdict) or the dropper learns the pool counted it, never both,
    /// never neither. A counted thread is never silently lost.
    #[test]
    fn an_abandoned_function_either_fails_the_start_or_is_reported_counted() {
        loom::model(|| {
            let (verdict, ticket) = new();
            let dropper = thread::spawn(move || ticket.abandon());
            let counted = verdict.decide(Ok(())).is_ok();
            let abandoned = dropper.join().unwrap();
            if counted {
                assert_eq!(abandoned, Abandoned::Counted);
            } else {
                assert_eq!(abandoned, Abandoned::BeforeTheVerdict);
            }
        });
    }

    /// The function is dropped unrun while the spawn function still runs:
    /// the start fails whatever the function answers.
    #[test]
    fn a_function_dropped_unrun_fails_the_start() {
        loom::model(|| {
            let (verdict, ticket) = new();
            let dropper = thread::spawn(move || drop(ticket));
            dropper.join().unwrap();
            assert!(verdict.decide(Ok(())).is_err());
        });
    }
}

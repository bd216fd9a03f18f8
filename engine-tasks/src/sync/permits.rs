//! Background permits: at most `cap` participants run background tasks at
//! once, so that a worker stays free for frame work.
//!
//! # Protocol
//!
//! `running` counts permits taken. [`Permits::try_acquire`] takes one if
//! fewer than `cap` are out; [`Permits::release`] gives permits back.
//!
//! A thread that blocks in a wait *lends* the permits of the background
//! tasks below it on its stack: it releases them when the wait begins and
//! takes them back with [`Permits::force_acquire`] when it ends, whether or
//! not the cap allows, because the task it resumes cannot be put off. A
//! blocked task runs nothing of its own (its thread runs other work in the
//! wait), and a permit kept through the wait would stall every background
//! task that the awaited work needs in turn. So the cap bounds background
//! tasks that are running, not blocked ones.
//!
//! # No lost wake-up
//!
//! A thread that finds queued background work but no free permit is
//! *turned away*: it parks like a thread that found nothing. So whoever
//! frees a permit may have to wake it: the thread that ends a background
//! task, and a lender. Only a release that starts at or above the cap can
//! follow a turn-away (a thread is turned away only while `running` is at
//! the cap, and the first release after that starts there), so
//! [`Permits::release`] says which it was, and after a [`Released::FromCap`]
//! the releaser at once issues a SeqCst fence and looks for queued
//! background work, waking a thread if it sees some. Every thread issues a
//! SeqCst fence before its last look ahead of parking (idle.rs), which
//! retries the permit, and every pusher one after its push (`Sleep::notify`). If the
//! releaser's fence comes first in the SeqCst order, the parking thread's
//! last look sees the permit free; otherwise the releaser's look sees the
//! task and the parking thread's idle bit. The loom models below check
//! this, for one releaser and for two where only the first starts at the
//! cap.
//!
//! All operations on `running` are Relaxed: the tasks themselves are handed
//! over by the queues, and the fences above order the look-ups that matter.

use crate::loom::atomic::{AtomicUsize, Ordering};
use crossbeam_utils::CachePadded;

/// What a [`Permits::release`] found.
#[must_use = "a release from the cap must look for work turned away (see the module docs)"]
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Released {
    /// Fewer than the cap were out before: no thread can be waiting for
    /// this permit that an earlier release did not already look for.
    BelowCap,
    /// The cap was reached before: a thread may have been turned away.
    FromCap,
}

/// See the module docs.
pub(crate) struct Permits {
    running: CachePadded<AtomicUsize>,
    cap: usize,
}

impl Permits {
    pub(crate) fn new(cap: usize) -> Self {
        Permits {
            running: CachePadded::new(AtomicUsize::new(0)),
            cap,
        }
    }

    /// Takes a permit if fewer than the cap are out.
    pub(crate) fn try_acquire(&self) -> bool {
        // Relaxed: see the module docs.
        let mut running = self.running.load(Ordering::Relaxed);
        while running < self.cap {
            match self.running.compare_exchange_weak(
                running,
                running + 1,
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => return true,
                Err(actual) => running = actual,
            }
        }
        false
    }

    /// Gives back `n` permits. After [`Released::FromCap`] the caller must
    /// fence and look for queued background work (see the module docs).
    pub(crate) fn release(&self, n: u32) -> Released {
        // Relaxed: see the module docs; the caller's fence orders the look.
        let before = self.running.fetch_sub(n as usize, Ordering::Relaxed);
        if before >= self.cap {
            Released::FromCap
        } else {
            Released::BelowCap
        }
    }

    /// Takes back `n` lent permits, whether or not the cap allows.
    pub(crate) fn force_acquire(&self, n: u32) {
        // Relaxed: see the module docs.
        self.running.fetch_add(n as usize, Ordering::Relaxed);
    }
}

#[cfg(all(test, loom))]
mod loom_models {
    use super::*;
    use crate::lane::Lane;
    use crate::loom::atomic::fence;
    use crate::loom::{thread, Arc};
    use crate::sync::idle::{Notify, Sleep};

    /// Gives back a permit as the pool does (`Shared::release_background`):
    /// after a release from the cap, look for queued work at once.
    fn release(sleep: &Sleep, permits: &Permits, work: &AtomicUsize) {
        if permits.release(1) == Released::FromCap {
            look(sleep, work);
        }
    }

    /// A worker that runs one background task, under a permit, by the
    /// idle protocol (slot 0; `work` stands for the queue).
    fn worker(sleep: &Sleep, permits: &Permits, work: &AtomicUsize) {
        let take = || {
            // Relaxed: the queue stand-in; the protocol orders it.
            if work.load(Ordering::Relaxed) == 0 || !permits.try_acquire() {
                return false;
            }
            work.fetch_sub(1, Ordering::Relaxed);
            release(sleep, permits, work);
            true
        };
        // Whether this thread holds the searcher token (idle.rs).
        let mut searching = false;
        loop {
            if take() {
                break;
            }
            sleep.prepare_park(0, Lane::Background, searching);
            if take() {
                searching = sleep.unidle(0, Lane::Background);
                break;
            }
            sleep.park(0);
            searching = sleep.unidle(0, Lane::Background);
        }
        if searching && sleep.end_search() {
            let _ = sleep.notify(Lane::Background, false);
        }
    }

    /// The look a release from the cap owes (in `Shared::release_background`).
    fn look(sleep: &Sleep, work: &AtomicUsize) {
        fence(Ordering::SeqCst);
        // Relaxed: the queue stand-in; the fence orders it.
        if work.load(Ordering::Relaxed) > 0
            && sleep.notify(Lane::Background, false) == Notify::NeedThread
        {
            sleep.give_up_token();
        }
    }

    /// Pushes one background task and notifies, as a spawn does.
    fn push(sleep: &Sleep, work: &AtomicUsize) {
        // Relaxed: the queue stand-in; `notify`'s fence orders it.
        work.fetch_add(1, Ordering::Relaxed);
        if sleep.notify(Lane::Background, false) == Notify::NeedThread {
            sleep.give_up_token();
        }
    }

    /// Starts the worker and a thread that pushes one background task.
    fn worker_and_pusher(
        sleep: &Arc<Sleep>,
        permits: &Arc<Permits>,
        work: &Arc<AtomicUsize>,
    ) -> (thread::JoinHandle<()>, thread::JoinHandle<()>) {
        let w = {
            let (sleep, permits, work) = (sleep.clone(), permits.clone(), work.clone());
            thread::spawn(move || worker(&sleep, &permits, &work))
        };
        let pusher = {
            let (sleep, work) = (sleep.clone(), work.clone());
            thread::spawn(move || push(&sleep, &work))
        };
        (w, pusher)
    }

    /// The cap is 1 and another participant holds the permit: a task that
    /// runs, or one blocked in a wait that lends it (the same release). A
    /// background task is pushed and the worker, turned away, goes to
    /// sleep; the holder releases. In every interleaving the worker runs
    /// the task (a lost wake-up deadlocks, which loom reports).
    #[test]
    fn a_released_permit_reaches_a_worker_turned_away() {
        loom::model(|| {
            let sleep = Arc::new(Sleep::new(2));
            let permits = Arc::new(Permits::new(1));
            let work = Arc::new(AtomicUsize::new(0));
            assert!(permits.try_acquire());
            let (w, pusher) = worker_and_pusher(&sleep, &permits, &work);
            release(&sleep, &permits, &work);
            pusher.join().unwrap();
            w.join().unwrap();
            assert_eq!(work.load(Ordering::Relaxed), 0);
        });
    }

    /// The cap is 2 and two holders release in turn: only the first release
    /// starts at the cap and looks for work, the second skips the look. The
    /// worker still runs the pushed task in every interleaving: it was
    /// turned away only while both permits were out.
    #[test]
    fn only_a_release_from_the_cap_needs_to_look() {
        let mut builder = loom::model::Builder::new();
        // Four threads: two preemptions keep the run within CI's budget.
        builder.preemption_bound = Some(2);
        builder.check(|| {
            let sleep = Arc::new(Sleep::new(2));
            let permits = Arc::new(Permits::new(2));
            let work = Arc::new(AtomicUsize::new(0));
            assert!(permits.try_acquire());
            assert!(permits.try_acquire());
            let (w, pusher) = worker_and_pusher(&sleep, &permits, &work);
            let second = {
                let (sleep, permits, work) = (sleep.clone(), permits.clone(), work.clone());
                thread::spawn(move || release(&sleep, &permits, &work))
            };
            release(&sleep, &permits, &work);
            second.join().unwrap();
            pusher.join().unwrap();
            w.join().unwrap();
            assert_eq!(work.load(Ordering::Relaxed), 0);
        });
    }
}

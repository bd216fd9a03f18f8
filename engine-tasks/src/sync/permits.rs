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
//! A lender may release a permit after another thread was turned away from
//! a queued background task for want of one, and that thread may be asleep
//! by now. So after releasing, the lender issues a SeqCst fence and looks
//! for queued background work, waking a thread if it sees some. Every
//! thread issues a SeqCst fence before its last look ahead of parking
//! (idle.rs), and every pusher one after its push (`Sleep::notify`). If the
//! lender's fence comes first in the SeqCst order, those later looks see the
//! permit free; if a pusher's comes first, the lender's look sees its task.
//! The loom model below checks this.
//!
//! All operations on `running` are Relaxed: the tasks themselves are handed
//! over by the queues, and the fences above order the look-ups that matter.

use crate::loom::atomic::{AtomicUsize, Ordering};
use crossbeam_utils::CachePadded;

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

    /// Gives back `n` permits.
    pub(crate) fn release(&self, n: u32) {
        // Relaxed: see the module docs.
        self.running.fetch_sub(n as usize, Ordering::Relaxed);
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

    /// A worker that runs one background task, under a permit, by the
    /// idle protocol (slot 0; `work` stands for the queue).
    fn worker(sleep: &Sleep, permits: &Permits, work: &AtomicUsize) {
        let take = || {
            // Relaxed: the queue stand-in; the protocol orders it.
            if work.load(Ordering::Relaxed) == 0 || !permits.try_acquire() {
                return false;
            }
            work.fetch_sub(1, Ordering::Relaxed);
            permits.release(1);
            true
        };
        let mut searching = false;
        loop {
            if take() {
                break;
            }
            sleep.prepare_park(0, Lane::Background, searching);
            if take() {
                sleep.unidle(0, Lane::Background);
                break;
            }
            sleep.park(0);
            searching = sleep.unidle(0, Lane::Background);
        }
        if sleep.end_search() {
            let _ = sleep.notify(Lane::Background, false);
        }
    }

    /// The cap is 1 and a task blocked in a wait holds the permit. A
    /// background task is pushed and the worker, turned away, goes to
    /// sleep; the waiting thread lends its permit. In every interleaving
    /// the worker runs the task (a lost wake-up deadlocks, which loom
    /// reports).
    #[test]
    fn a_lent_permit_reaches_a_worker_turned_away() {
        loom::model(|| {
            let sleep = Arc::new(Sleep::new(2));
            let permits = Arc::new(Permits::new(1));
            let work = Arc::new(AtomicUsize::new(0));
            // The blocked task's permit.
            assert!(permits.try_acquire());
            let w = {
                let (sleep, permits, work) = (sleep.clone(), permits.clone(), work.clone());
                thread::spawn(move || worker(&sleep, &permits, &work))
            };
            let pusher = {
                let (sleep, work) = (sleep.clone(), work.clone());
                thread::spawn(move || {
                    work.fetch_add(1, Ordering::Relaxed);
                    if sleep.notify(Lane::Background, false) == Notify::NeedThread {
                        sleep.give_up_token();
                    }
                })
            };
            // The wait begins: lend the permit, then look (the worker in
            // `Local::lend_background_permits`).
            permits.release(1);
            fence(Ordering::SeqCst);
            if work.load(Ordering::Relaxed) > 0
                && sleep.notify(Lane::Background, false) == Notify::NeedThread
            {
                sleep.give_up_token();
            }
            pusher.join().unwrap();
            w.join().unwrap();
            assert_eq!(work.load(Ordering::Relaxed), 0);
        });
    }
}

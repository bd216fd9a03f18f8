//! Sleeping and waking: at most one searching thread, no lost wake-ups.
//!
//! # Protocol
//!
//! Every pool thread (worker, or a joining thread holding a slot) runs the
//! same loop: find a task; if there is none, announce itself idle, look once
//! more, and park. Whoever makes work visible calls [`Sleep::notify`].
//!
//! * **Searcher token.** `searching` counts threads that were woken to look
//!   for work and have not found any yet. `notify` only wakes a thread if it
//!   can move `searching` from 0 to 1, so at most one woken thread searches at
//!   a time and a burst of pushes wakes one thread, not a herd. The woken
//!   thread owns the token: when it finds a task it releases the token and, if
//!   it was the last searcher, calls `notify` itself, so wake-ups spread one
//!   at a time exactly while there is work (the hand-off of the zap pool's
//!   `waking` state, and of Go's and Tokio's `nmspinning`). It notifies for
//!   the lane it found and for the most urgent lane above it with queued
//!   work: a push of that lane it turned away may have only a thread
//!   restricted to urgent lanes to wake (which searches every lane it may
//!   run, most urgent first).
//! * **Idle masks.** A thread about to park sets its bit in the mask of the
//!   least urgent lane it may run (`idle[lane]`): workers may run everything,
//!   a thread blocked in `join` only work as urgent as what it waits for
//!   (every lane, in a pool without workers).
//!   `notify(lane)` claims a thread only from the masks whose threads may run
//!   `lane`, by clearing its bit, so a thread is claimed at most once.
//! * **No lost wake-up.** A parking thread does `set idle bit; release token;
//!   SeqCst fence; re-check every queue`. A pusher does `publish task; SeqCst
//!   fence; read token and masks`. In the single total order of SeqCst
//!   operations either the pusher reads the idle bit (and wakes the thread,
//!   or finds the token taken by a searcher that has not yet released it, and
//!   whose own re-check then follows the push), or the re-check follows the
//!   push and finds the task. A token holder that cannot use it (no thread to
//!   wake or spawn) releases it and looks at the masks once more, because it
//!   may have turned other pushers away meanwhile.
//! * **Claimed while leaving.** A thread that finds work in its re-check, or
//!   is woken for another reason (its join target finished, shutdown), clears
//!   its own bit. If the bit was already clear, a notifier claimed it and gave
//!   it the token, which it must now use or pass on.
//!
//! Parking itself is [`Parker`]: a futex-backed wait with no timeout
//! (unless a paced loop's forecast asks for an early wake-up,
//! `Sleep::park_timeout`), so an idle pool is silent.

use crate::lane::Lane;
use crate::loom::atomic::{fence, AtomicU32, AtomicU64, Ordering};
use crate::sync::park::{Parker, Woken};
use crossbeam_utils::CachePadded;
use std::time::Duration;

/// Most thread slots a pool can have: one bit each in a `u64` mask.
pub(crate) const MAX_SLOTS: usize = 64;

/// What `notify` did.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Notify {
    /// A searcher is active (or no one could be woken); it will find the work.
    Busy,
    /// Woke the thread in this slot and gave it the token.
    Woke(usize),
    /// The caller holds the token but no idle thread may run the work: spawn
    /// a thread and hand it the token, or call [`Sleep::give_up_token`].
    NeedThread,
}

/// See the module docs.
pub(crate) struct Sleep {
    /// `idle[l]`: slots parked (or about to park) whose least urgent runnable
    /// lane is `l`.
    idle: [CachePadded<AtomicU64>; Lane::COUNT],
    searching: CachePadded<AtomicU32>,
    parkers: Box<[CachePadded<Parker>]>,
}

impl Sleep {
    pub(crate) fn new(slots: usize) -> Self {
        assert!(slots <= MAX_SLOTS, "at most {MAX_SLOTS} slots");
        Sleep {
            idle: std::array::from_fn(|_| CachePadded::new(AtomicU64::new(0))),
            searching: CachePadded::new(AtomicU32::new(0)),
            parkers: (0..slots)
                .map(|_| CachePadded::new(Parker::new()))
                .collect(),
        }
    }

    /// Called after work of `lane` was made visible; `can_spawn` says whether
    /// a new thread could be started for it. See the module docs.
    pub(crate) fn notify(&self, lane: Lane, can_spawn: bool) -> Notify {
        // SeqCst: pairs with the fence in `prepare_park` (the Dekker pair in
        // the module docs): our task is published before this fence.
        fence(Ordering::SeqCst);
        // Relaxed: a fast check ordered by the fence; the CAS decides.
        if self.searching.load(Ordering::Relaxed) != 0 {
            return Notify::Busy;
        }
        // The common case when every thread is busy: nobody to wake, so skip
        // the token's two read-modify-writes. Safe by the same Dekker pair: a
        // thread whose idle bit we miss re-checks after our fence.
        if !can_spawn && !self.idle_eligible(lane) {
            return Notify::Busy;
        }
        // SeqCst: part of the total order the protocol argues about; pairs
        // with the SeqCst decrements in `prepare_park` and `end_search`.
        if self
            .searching
            .compare_exchange(0, 1, Ordering::SeqCst, Ordering::Relaxed)
            .is_err()
        {
            return Notify::Busy;
        }
        self.wake_with_token(lane)
    }

    fn wake_with_token(&self, lane: Lane) -> Notify {
        // Prefer threads that may run every lane: a thread restricted to
        // urgent lanes that finds the work already taken cannot pass the
        // search on to less urgent work as well.
        for &class in Lane::ALL[lane.index()..].iter().rev() {
            if let Some(slot) = self.claim(class) {
                self.parkers[slot].unpark();
                return Notify::Woke(slot);
            }
        }
        Notify::NeedThread
    }

    fn claim(&self, class: Lane) -> Option<usize> {
        let mask = &self.idle[class.index()];
        // SeqCst: ordered after the fence in `notify` (see module docs).
        let mut bits = mask.load(Ordering::SeqCst);
        while bits != 0 {
            let slot = bits.trailing_zeros() as usize;
            let bit = 1u64 << slot;
            // SeqCst: claims the slot; pairs with `unidle`'s fetch_and, which
            // tells the slot whether it was claimed.
            match mask.compare_exchange_weak(bits, bits & !bit, Ordering::SeqCst, Ordering::SeqCst)
            {
                Ok(_) => return Some(slot),
                Err(actual) => bits = actual,
            }
        }
        None
    }

    /// The token holder found no use for it (see [`Notify::NeedThread`]).
    pub(crate) fn give_up_token(&self) {
        // SeqCst: pairs with the loads in `notify` (see module docs).
        self.searching.fetch_sub(1, Ordering::SeqCst);
        // While we held the token, other pushers were turned away; a thread
        // may have gone idle since our claim failed. Look again, broadest
        // class first so the thread we wake can run whatever was pushed.
        for class in Lane::ALL.iter().rev() {
            // SeqCst: as in `claim`.
            if self.idle[class.index()].load(Ordering::SeqCst) != 0 {
                if let Notify::NeedThread = self.notify(*class, false) {
                    // The thread we saw was claimed by someone else.
                    self.give_up_token();
                }
                return;
            }
        }
    }

    /// Whether a thread that may run `lane` is idle.
    fn idle_eligible(&self, lane: Lane) -> bool {
        // SeqCst: as in `claim`.
        self.idle[lane.index()..]
            .iter()
            .any(|mask| mask.load(Ordering::SeqCst) != 0)
    }

    /// An unfenced guess whether `notify(lane)` would wake anyone: a searcher
    /// is not active and some thread that may run `lane` is idle. It may be
    /// stale (a thread that just went idle can be missed), so it is only
    /// used where a missed wake-up costs parallelism but never progress: see
    /// `Shared::notify_join`.
    #[inline]
    pub(crate) fn may_wake(&self, lane: Lane) -> bool {
        // Relaxed: a hint, see above.
        self.searching.load(Ordering::Relaxed) == 0
            && self.idle[lane.index()..]
                .iter()
                .any(|mask| mask.load(Ordering::Relaxed) != 0)
    }

    /// Slot `slot` is about to park; it may run lanes down to `floor`. The
    /// caller must re-check every queue it may run after this returns, then
    /// either park or call [`Sleep::unidle`].
    pub(crate) fn prepare_park(&self, slot: usize, floor: Lane, was_searching: bool) {
        // SeqCst: the idle bit must precede the re-check in the total order.
        self.idle[floor.index()].fetch_or(1 << slot, Ordering::SeqCst);
        if was_searching {
            // SeqCst: pairs with the CAS in `notify`.
            self.searching.fetch_sub(1, Ordering::SeqCst);
        }
        // SeqCst: pairs with the fence in `notify` (see module docs).
        fence(Ordering::SeqCst);
    }

    /// Leaves the idle set. Returns `true` if a notifier had already claimed
    /// the slot: the caller now holds the searcher token.
    pub(crate) fn unidle(&self, slot: usize, floor: Lane) -> bool {
        let bit = 1u64 << slot;
        // SeqCst: pairs with the claiming CAS in `claim`.
        self.idle[floor.index()].fetch_and(!bit, Ordering::SeqCst) & bit == 0
    }

    /// A searcher found work. Returns `true` if it was the last one: the
    /// caller should `notify` so that another thread looks for more.
    pub(crate) fn end_search(&self) -> bool {
        // SeqCst: pairs with the CAS in `notify`.
        self.searching.fetch_sub(1, Ordering::SeqCst) == 1
    }

    pub(crate) fn park(&self, slot: usize) {
        self.parkers[slot].park();
    }

    /// Parks for at most `timeout`. A timed-out park is followed by
    /// [`Sleep::unidle`] as a woken one is: the slot may have been claimed
    /// meanwhile.
    pub(crate) fn park_timeout(&self, slot: usize, timeout: Duration) -> Woken {
        self.parkers[slot].park_timeout(timeout)
    }

    /// Wakes a slot without giving it the token (join target finished,
    /// shutdown). The slot re-checks why it woke.
    pub(crate) fn unpark(&self, slot: usize) {
        self.parkers[slot].unpark();
    }

    pub(crate) fn parker(&self, slot: usize) -> &Parker {
        &self.parkers[slot]
    }

    pub(crate) fn slots(&self) -> usize {
        self.parkers.len()
    }
}

#[cfg(all(test, loom))]
mod loom_models {
    use super::*;
    use crate::loom::atomic::AtomicUsize;
    use crate::loom::{thread, Arc};

    /// A worker's loop reduced to the protocol: `work` stands for a queue.
    fn worker(sleep: &Sleep, work: &AtomicUsize, slot: usize, mut searching: bool, rounds: usize) {
        let take = || {
            // Relaxed: the queue stand-in; ordering comes from the protocol.
            let mut n = work.load(Ordering::Relaxed);
            while n > 0 {
                match work.compare_exchange(n, n - 1, Ordering::Relaxed, Ordering::Relaxed) {
                    Ok(_) => return true,
                    Err(actual) => n = actual,
                }
            }
            false
        };
        let mut done = 0;
        while done < rounds {
            if take() {
                done += 1;
                if searching {
                    searching = false;
                    if sleep.end_search() {
                        let _ = sleep.notify(Lane::Normal, false);
                    }
                }
                continue;
            }
            sleep.prepare_park(slot, Lane::Background, searching);
            if take() {
                done += 1;
                searching = sleep.unidle(slot, Lane::Background);
                continue;
            }
            sleep.park(slot);
            searching = sleep.unidle(slot, Lane::Background);
        }
        if searching && sleep.end_search() {
            let _ = sleep.notify(Lane::Normal, false);
        }
    }

    /// Takes one task of the queue stand-in `work`, if it has one; one try
    /// (a failed exchange counts as empty: the caller looks again later).
    fn take_one(work: &AtomicUsize) -> bool {
        // Relaxed: the queue stand-in; ordering comes from the protocol.
        let n = work.load(Ordering::Relaxed);
        n > 0
            && work
                .compare_exchange(n, n - 1, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
    }

    /// A worker that first parks with a timeout (an early wake-up for a
    /// forecast frame, early_wake.rs), which under loom may run out at any
    /// point, and then as usual: one task, no lost wake-up.
    fn worker_with_timed_park(sleep: &Sleep, work: &AtomicUsize) {
        let take = || take_one(work);
        let mut searching = false;
        let mut timed = true;
        loop {
            if take() {
                break;
            }
            sleep.prepare_park(0, Lane::Background, searching);
            if take() {
                searching = sleep.unidle(0, Lane::Background);
                break;
            }
            if timed {
                timed = false;
                sleep.park_timeout(0, std::time::Duration::from_millis(1));
            } else {
                sleep.park(0);
            }
            searching = sleep.unidle(0, Lane::Background);
        }
        if searching && sleep.end_search() {
            let _ = sleep.notify(Lane::Normal, false);
        }
    }

    /// One push, one worker whose first park is timed: the worker runs the
    /// task whether the push lands before, during or after the timeout.
    #[test]
    fn no_lost_wakeup_around_a_timed_park() {
        loom::model(|| {
            let sleep = Arc::new(Sleep::new(1));
            let work = Arc::new(AtomicUsize::new(0));
            let w = {
                let (sleep, work) = (sleep.clone(), work.clone());
                thread::spawn(move || worker_with_timed_park(&sleep, &work))
            };
            push(&sleep, &work);
            w.join().unwrap();
        });
    }

    fn push(sleep: &Sleep, work: &AtomicUsize) {
        // Relaxed: published to parkers by the SeqCst fence in `notify`.
        work.fetch_add(1, Ordering::Relaxed);
        if sleep.notify(Lane::Normal, false) == Notify::NeedThread {
            sleep.give_up_token();
        }
    }

    /// Two pushes from outside, one idle worker: the worker runs both (the
    /// model would deadlock, which loom reports, if a wake-up were lost).
    #[test]
    fn no_lost_wakeup_one_worker() {
        loom::model(|| {
            let sleep = Arc::new(Sleep::new(1));
            let work = Arc::new(AtomicUsize::new(0));
            let w = {
                let (sleep, work) = (sleep.clone(), work.clone());
                thread::spawn(move || worker(&sleep, &work, 0, false, 2))
            };
            push(&sleep, &work);
            push(&sleep, &work);
            w.join().unwrap();
        });
    }

    /// Two workers, two pushes: with the token handed between them, both
    /// tasks run and nobody sleeps on queued work.
    #[test]
    fn no_lost_wakeup_two_workers() {
        loom::model(|| {
            let sleep = Arc::new(Sleep::new(2));
            let work = Arc::new(AtomicUsize::new(0));
            let workers: Vec<_> = (0..2)
                .map(|slot| {
                    let (sleep, work) = (sleep.clone(), work.clone());
                    // Each worker runs one task; together they must run both,
                    // whichever one is woken.
                    thread::spawn(move || worker(&sleep, &work, slot, false, 1))
                })
                .collect();
            push(&sleep, &work);
            push(&sleep, &work);
            for w in workers {
                w.join().unwrap();
            }
        });
    }

    /// Two workers, two pushers on their own threads (so the pushes race
    /// each other as well as the workers), explored with at most two
    /// preemptions. At three, loom reports a deadlock in which the second
    /// worker, woken by the first worker's hand-off notify, misses the second
    /// push. By the C++20 fence rules that cannot happen: the waker's fence
    /// follows the pusher's fence in the SC order (the pusher read the token
    /// before the waker released it), and the woken worker's first look
    /// after waking happens after the waker's fence (the unpark releases,
    /// the park acquires). That look has no fence of its own, so it is the
    /// happens-before form of the rule (P0668) that makes it see the push:
    /// a load that happens after an SC fence which follows the pushing
    /// thread's fence reads the push or later. Loom treats SeqCst accesses
    /// as AcqRel and does not claim to model every SC-fence rule. This is
    /// recorded as open rather than waved away.
    #[test]
    fn no_lost_wakeup_two_workers_two_pushers() {
        let mut builder = loom::model::Builder::new();
        builder.preemption_bound = Some(2);
        builder.check(|| {
            let sleep = Arc::new(Sleep::new(2));
            let work = Arc::new(AtomicUsize::new(0));
            let workers: Vec<_> = (0..2)
                .map(|slot| {
                    let (sleep, work) = (sleep.clone(), work.clone());
                    thread::spawn(move || worker(&sleep, &work, slot, false, 1))
                })
                .collect();
            let pusher = {
                let (sleep, work) = (sleep.clone(), work.clone());
                thread::spawn(move || push(&sleep, &work))
            };
            push(&sleep, &work);
            pusher.join().unwrap();
            for w in workers {
                w.join().unwrap();
            }
        });
    }

    /// `notify`, giving the token back if it took it but found no thread.
    fn notify_or_give_up(sleep: &Sleep, lane: Lane) {
        if sleep.notify(lane, false) == Notify::NeedThread {
            sleep.give_up_token();
        }
    }

    /// A thread that may run only frame-critical work (one waiting in a
    /// frame) in `slot`: it returns once it ran one task of `urgent`.
    fn urgent_waiter(sleep: &Sleep, urgent: &AtomicUsize, slot: usize) {
        let take = || take_one(urgent);
        let mut searching = false;
        loop {
            if take() {
                break;
            }
            sleep.prepare_park(slot, Lane::FrameCritical, searching);
            if take() {
                searching = sleep.unidle(slot, Lane::FrameCritical);
                break;
            }
            sleep.park(slot);
            searching = sleep.unidle(slot, Lane::FrameCritical);
        }
        if searching && sleep.end_search() {
            notify_or_give_up(sleep, Lane::FrameCritical);
        }
    }

    /// Lanes: a searcher that finds background work (it looked at the
    /// frame-critical queue before a push there) hands the search on for
    /// that lane and for the frame-critical push it turned away meanwhile
    /// (`Local::hand_on_search`), so the thread waiting for frame-critical
    /// work, which a notify for the background lane cannot reach, runs it.
    /// Handing on for the found lane alone, the waiter can sleep on beside
    /// the queued task (loom reports the deadlock).
    #[test]
    fn an_urgent_push_turned_away_by_a_background_searcher_is_passed_on() {
        loom::model(|| {
            let sleep = Arc::new(Sleep::new(2));
            let urgent = Arc::new(AtomicUsize::new(0));
            // The searcher starts with the token, as a thread started for a
            // push does.
            assert_eq!(sleep.notify(Lane::Background, true), Notify::NeedThread);
            let searcher = {
                let (sleep, urgent) = (sleep.clone(), urgent.clone());
                thread::spawn(move || {
                    // It found its background task; hand the search on.
                    if sleep.end_search() {
                        notify_or_give_up(&sleep, Lane::Background);
                        // Relaxed: ordered after the pusher's by `notify`'s
                        // SeqCst fence (the module docs' pair).
                        if urgent.load(Ordering::Relaxed) > 0 {
                            notify_or_give_up(&sleep, Lane::FrameCritical);
                        }
                    }
                })
            };
            let waiter = {
                let (sleep, urgent) = (sleep.clone(), urgent.clone());
                thread::spawn(move || urgent_waiter(&sleep, &urgent, 1))
            };
            // Relaxed: published by the SeqCst fence in `notify`.
            urgent.fetch_add(1, Ordering::Relaxed);
            notify_or_give_up(&sleep, Lane::FrameCritical);
            searcher.join().unwrap();
            waiter.join().unwrap();
        });
    }

    /// A thread that may run only frame-critical work, woken with the
    /// token, finds none and sees its wait's stop condition as it parks
    /// (`Local::park`'s stop path): it returns without parking, and passes
    /// the search on for less urgent work that a push made while it held
    /// the token (and was turned away), as its parking path does. Without
    /// that hand-on, the background worker sleeps beside the queued task
    /// (loom reports the deadlock).
    #[test]
    fn a_searcher_that_stops_as_it_parks_passes_the_search_on() {
        loom::model(|| {
            let sleep = Arc::new(Sleep::new(2));
            let background = Arc::new(AtomicUsize::new(0));
            // The waiter starts with the token, as a thread woken for a
            // frame-critical push does.
            assert_eq!(sleep.notify(Lane::FrameCritical, true), Notify::NeedThread);
            let worker = {
                let (sleep, background) = (sleep.clone(), background.clone());
                thread::spawn(move || worker(&sleep, &background, 0, false, 1))
            };
            let waiter = {
                let (sleep, background) = (sleep.clone(), background.clone());
                thread::spawn(move || {
                    sleep.prepare_park(1, Lane::FrameCritical, true);
                    // Its frame-critical look finds nothing; its stop
                    // condition holds.
                    let searching = sleep.unidle(1, Lane::FrameCritical);
                    // Relaxed: ordered after the pusher's by the SeqCst
                    // token release and fence in `prepare_park`.
                    let visible = || background.load(Ordering::Relaxed) > 0;
                    if !searching && visible() {
                        notify_or_give_up(&sleep, Lane::Background);
                    }
                    // `leave_search`.
                    if searching && sleep.end_search() && visible() {
                        notify_or_give_up(&sleep, Lane::Background);
                    }
                })
            };
            // Relaxed: published by the SeqCst fence in `notify`.
            background.fetch_add(1, Ordering::Relaxed);
            notify_or_give_up(&sleep, Lane::Background);
            waiter.join().unwrap();
            worker.join().unwrap();
        });
    }

    /// Lazy spawning: the pusher may start a thread (`can_spawn`); if it gets
    /// the token for that, it either starts the thread, which begins as the
    /// searcher, or the spawn fails and it gives the token back. Either way
    /// the idle worker, or the new thread, runs the task.
    #[test]
    fn lazy_spawn_and_spawn_failure_lose_no_wakeup() {
        for spawn_succeeds in [true, false] {
            loom::model(move || {
                let sleep = Arc::new(Sleep::new(2));
                let work = Arc::new(AtomicUsize::new(0));
                let existing = {
                    let (sleep, work) = (sleep.clone(), work.clone());
                    thread::spawn(move || worker(&sleep, &work, 0, false, 1))
                };
                // Relaxed: published by the SeqCst fence in `notify`.
                work.fetch_add(1, Ordering::Relaxed);
                let mut spawned = None;
                if sleep.notify(Lane::Normal, true) == Notify::NeedThread {
                    if spawn_succeeds {
                        let (sleep, work) = (sleep.clone(), work.clone());
                        // The new thread starts holding the token; it runs
                        // the task if the existing worker has not.
                        spawned = Some(thread::spawn(move || {
                            // Relaxed: the queue stand-in.
                            let mut n = work.load(Ordering::Relaxed);
                            while n > 0 {
                                let next = n - 1;
                                match work.compare_exchange(
                                    n,
                                    next,
                                    Ordering::Relaxed,
                                    Ordering::Relaxed,
                                ) {
                                    Ok(_) => break,
                                    Err(actual) => n = actual,
                                }
                            }
                            // Done searching: pass the search on, as a worker
                            // that found work does.
                            if sleep.end_search() {
                                let _ = sleep.notify(Lane::Normal, false);
                            }
                        }));
                    } else {
                        sleep.give_up_token();
                    }
                }
                // One more push so the existing worker, which needs a task to
                // finish, gets one even when the new thread took the first.
                if spawned.is_some() {
                    push(&sleep, &work);
                }
                existing.join().unwrap();
                if let Some(t) = spawned {
                    t.join().unwrap();
                }
            });
        }
    }
}

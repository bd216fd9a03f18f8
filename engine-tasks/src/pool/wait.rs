//! How a thread waits.
//!
//!
//! A thread that waits for a latch (`join`, `scope`, `JoinHandle::join`)
//! keeps running tasks until the latch is set, and sleeps in the same idle
//! protocol as workers when it finds none, so new work wakes it too. It only
//! runs tasks **at least as urgent** as the one it waits for (waiting on a
//! frame-critical task runs only frame-critical tasks), and the tasks it runs
//! may be any task of those lanes in the pool, not only descendants of its
//! target: do not wait while holding a lock that other tasks take (code
//! that must not wait runs inside `forbid_waits.rs`'s regions). In a
//! pool with no worker (none configured, every start failed, or shut
//! down) it runs every lane: nothing else would. An outside thread whose
//! call on a pool (a wait, or a graph frame) used the pool's guest slot,
//! and found the pool shut down meanwhile, runs the tasks left in that
//! slot's own queues before its call returns (`worker::in_guest_slot`).
//!
//! A thread of one pool that waits on a task of another (a worker of pool A
//! joins a task of pool B) waits without a slot in B and keeps running A's
//! tasks of every lane, as its own pool's worker: B's task may wait on work
//! of A in turn, and A's only worker may be the thread that is waiting. B's
//! setter wakes it through A's parker, holding a reference to A until the
//! wake is delivered (`Waiter::Owned` in latch.rs). If B has no worker, the
//! waiting thread also runs B's queued tasks, as one of B's helpers: B
//! lists it, and every push onto B wakes it (helpers.rs).

use super::worker::{with_current, Found, Local};
use crate::clock;
use crate::lane::Lane;
use crate::pool::early_wake::{Forecasts, LookFor};
use crate::pool::registry::{HelperWaker, Shared};
use crate::sync::helpers::HelperId;
use crate::sync::latch::{Latch, Waiter};
use crate::sync::park::Woken;
use crate::sync::prefetch::Warming;
use crate::sync::queue::TaskQueue;
use crate::trace::instrument;
use crossbeam_utils::Backoff;
use std::cell::OnceCell;
use std::sync::atomic::{fence, Ordering};
use std::time::Duration;

/// Pause instructions between two looks of a spinning wait (a worker's
/// look for work, a planned frame's walker's look for a ready node): about
/// 0.1 µs on the development VM (25–28 ns a pause). With 32 (0.8 µs) a
/// worker found a back-to-back frame's helper task, and a walker its
/// next node, up to 0.8 µs late: in three in-process A/B runs (30,000
/// frames of 1 µs nodes, the count chosen at random per frame) looking
/// every 4 pauses ended frames 0.36–0.44 µs sooner; at 60 Hz (600 frames
/// an arm) 4.5 µs sooner and 0.4 µs later in two runs
/// (`docs/performance/w4-runs.md`). The wait's length is a time, not a
/// count: `frame_cpu` showed no change in CPU between frames beyond its
/// run-to-run spread, and `paced_frames` none in paced frames (same
/// file). Looking more often costs more moves of
/// the lines a look reads (at most one per write to them between two
/// looks) and more steal attempts on a peer whose advertised work is gone;
/// and a spinning thread leaves less time to an SMT sibling. Measured on
/// the 2-core VM only.
pub(crate) const PAUSES_BETWEEN_LOOKS: usize = 4;

/// Lines an early-woken worker prefetches between two looks for the
/// frame's work, in place of [`PAUSES_BETWEEN_LOOKS`]: on the development
/// VM 32 prefetches from memory took about 0.65 µs (2,900 lines in a look
/// of about 60 µs). Fewer lines a step would warm fewer lines before the
/// frame, in looks that find nothing until it starts; so while it warms, a
/// worker finds the frame's work up to 0.65 µs late. (The pauses also let
/// an SMT sibling run; while it warms, the worker does not.)
pub(crate) const WARM_STEP_LINES: usize = 32;

/// What a park does once its pool has shut down ([`Local::park`]).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum AtShutdown {
    /// Parks as asked: the caller's stop condition (a wait's latch, set by
    /// a thread that then wakes it) ends the park.
    Park,
    /// Parks for at most [`SHUTDOWN_LOOK_AGAIN`] (a worker's park, with or
    /// without a forecast's timeout): a worker that has not stopped has
    /// work in sight.
    LookAgain,
}

/// How long a thread of a pool that shut down sleeps before it looks again
/// for work it saw but could not take (another thread was moving it):
/// short against a shutdown, long against a look's cost.
pub(crate) const SHUTDOWN_LOOK_AGAIN: Duration = Duration::from_micros(200);

/// Why [`Local::idle`] returned.
pub(super) enum Idle {
    Found(Found),
    Woke,
    Stopped,
}

/// How [`Local::park`] ended.
pub(super) enum Parked {
    /// As [`Local::idle`] would return.
    Idle(Idle),
    /// A timed park ran out; the thread left the idle set (and may hold the
    /// searcher token, see `searching`).
    TimedOut,
}

impl Local<'_> {
    /// Nothing to run: spin briefly, announce idle, look once more, park.
    ///
    /// A thread that runs out of work while a shared task-graph frame runs
    /// first keeps looking for the frame's next nodes, or for its target if
    /// it waits for one (`join`, `scope`, the frame), for up to
    /// `Shared::in_frame_wait_ticks`. A free worker (`waiting` false) that
    /// runs out between two frames of a frame loop instead waits for the
    /// next frame as long as the loop asked (`Shared::linger_ticks_at`,
    /// zero for a paced loop and soon after a loop stops), then parks.
    /// Outside frames a waiting thread keeps the short spin: its target may
    /// finish on another thread any moment.
    /// A free worker that expects a paced loop's next frame parks with a
    /// timeout instead, until just before the frame, then looks for its
    /// work for a bounded while, warming the frame's lines (early_wake.rs).
    #[cfg_attr(target_os = "linux", link_section = "engine_tasks_shared")]
    pub(super) fn idle(&self, floor: Lane, waiting: bool, stop: impl Fn() -> bool) -> Idle {
        self.credit.settle();
        let ended_frame = self.ended_frame.replace(false);
        let look = || match self.find_task(floor, false) {
            Some(found) => Some(Idle::Found(found)),
            None => stop().then_some(Idle::Stopped),
        };
        // Looks every `PAUSES_BETWEEN_LOOKS` pause instructions, or every
        // `WARM_STEP_LINES` lines of `warming` while it lasts, until
        // `ticks` passed or `going_on` says no.
        let poll = |ticks: u64, going_on: &dyn Fn() -> bool, warming: &mut Warming| {
            let deadline = clock::ticks().saturating_add(ticks);
            while clock::ticks() < deadline && going_on() {
                if warming.step(WARM_STEP_LINES) == 0 {
                    for _ in 0..PAUSES_BETWEEN_LOOKS {
                        std::hint::spin_loop();
                    }
                }
                if let Some(idle) = look() {
                    return Some(idle);
                }
            }
            None
        };
        let in_frame_wait = self.shared.in_frame_wait_ticks();
        if (waiting || !ended_frame) && in_frame_wait > 0 {
            // During a shared frame the frame's next nodes are usually
            // microseconds away (a layer boundary of the graph), and a
            // waiting thread's target (a node's `parallel_for` piece on the
            // other thread, the frame's last node) about as close, while a
            // park costs about 10 µs of CPU and its wake-up 30-150 µs of
            // latency on a busy virtual machine; so keep looking, for a
            // bounded time, while the frame runs. Then go on as below.
            let in_frame = || self.shared.in_shared_frame();
            if let Some(idle) = poll(in_frame_wait, &in_frame, &mut Warming::none()) {
                return idle;
            }
        }
        if !waiting && (ended_frame || self.shared.between_frames()) {
            // Between frames: wait for the next one only as long as the frame
            // loop asked, and not long after the last frame (registry.rs).
            let linger = self.shared.linger_ticks_at(clock::ticks());
            if let Some(idle) = poll(linger, &|| true, &mut Warming::none()) {
                return idle;
            }
        } else {
            // A short bounded spin (at most 63 pause instructions in all) so
            // that a task pushed a moment later is taken without a sleep/wake
            // round trip. Beyond it and the waits above, the only spin is an
            // early wake-up's look before a forecast frame, below (bounded
            // by early_wake.rs's `MAX_LOOK_NANOS`, counted in
            // `ThreadStats::early_wait`).
            let backoff = Backoff::new();
            for _ in 0..6 {
                backoff.spin();
                if let Some(idle) = look() {
                    return idle;
                }
            }
        }
        if !waiting {
            // A paced frame loop expects its next frame: sleep until just
            // before it, then look for its work (early_wake.rs). Twice at
            // most: a look for the next graph's frame within the tick that
            // found nothing passes on to the next tick's.
            for forecasts in [Forecasts::Any, Forecasts::TickOnly] {
                let Some(plan) = self
                    .shared
                    .next_frame
                    .plan(self.index, clock::ticks(), forecasts)
                else {
                    break;
                };
                if let Some(timeout) = plan.sleep {
                    // Not on the CPU where the frame's thread sleeps until
                    // about then (early_wake.rs).
                    let placement = self.shared.sleep.parker(self.index).placement();
                    if let Some(cpu) = self.shared.next_frame.frame_cpu() {
                        placement.steer_self_off(cpu);
                    }
                    let parked = self.park(floor, &stop, Some(timeout), AtShutdown::LookAgain);
                    placement.restore();
                    match parked {
                        Parked::TimedOut => self
                            .shared
                            .next_frame
                            .record_oversleep(plan.wake_at, clock::ticks()),
                        Parked::Idle(idle) => return idle,
                    }
                }
                // The look lasts at most its planned length, however far the
                // tick clock says the frame is: a clock that went back (a
                // resume, a migrated VM) or a tick rate gone wrong would
                // otherwise stretch the look (a spin) to the stale forecast.
                // If the park ended long before its planned end by the tick
                // clock, the clock and the forecast disagree: park for good,
                // and let the frame's push wake this thread.
                let planned_look = plan.look_until.saturating_sub(plan.wake_at);
                let now = clock::ticks();
                if plan.wake_at.saturating_sub(now) > planned_look {
                    break;
                }
                let started = std::time::Instant::now();
                // A look for a tick warms the frame's data and code
                // meanwhile (early_wake.rs).
                let mut warming = match plan.looking_for {
                    LookFor::Tick => self
                        .shared
                        .next_frame
                        .warming(self.shared.frame_thread_spans()),
                    LookFor::NextGraph => Warming::none(),
                };
                let look_for = plan
                    .look_until
                    .saturating_sub(clock::ticks())
                    .min(planned_look);
                let found = poll(look_for, &|| true, &mut warming);
                self.slot
                    .counters
                    .early_wake(started.elapsed(), warming.warmed(), found.is_some());
                if let Some(idle) = found {
                    return idle;
                }
            }
        }
        let at_shutdown = if waiting {
            AtShutdown::Park
        } else {
            AtShutdown::LookAgain
        };
        match self.park(floor, &stop, None, at_shutdown) {
            Parked::Idle(idle) => idle,
            Parked::TimedOut => Idle::Woke,
        }
    }

    /// Announces this thread idle, looks once more, and parks (for at most
    /// `timeout`): the idle protocol of idle.rs.
    pub(super) fn park(
        &self,
        floor: Lane,
        stop: &impl Fn() -> bool,
        timeout: Option<Duration>,
        at_shutdown: AtShutdown,
    ) -> Parked {
        let sleep = &self.shared.sleep;
        let was_searching = self.searching.replace(false);
        sleep.prepare_park(self.index, floor, was_searching);
        if let Some(found) = self.find_task(floor, true) {
            if sleep.unidle(self.index, floor) {
                self.searching.set(true);
            } else {
                // Others may be asleep while more work is queued.
                self.shared.notify(found.lane);
            }
            return Parked::Idle(Idle::Found(found));
        }
        if stop() {
            let searching = sleep.unidle(self.index, floor);
            self.searching.set(searching);
            // Given the token back, and no notifier gave it again (if one
            // did, `leave_search` looks at every lane): hand on as below.
            if was_searching && !searching {
                self.pass_search_below(floor);
            }
            return Parked::Idle(Idle::Stopped);
        }
        // A worker that did not stop once its pool shut down saw work its
        // looks could not take (another thread moving it; `run_worker`),
        // and shutdown's wake-ups are spent: look again soon instead of
        // parking for good. Decided here, after `stop`, so that work that
        // came into sight since the caller's last look counts. A gate that
        // closes after this check unparks every slot (`shutdown_and_join`).
        let timeout = match at_shutdown {
            AtShutdown::LookAgain if self.shared.is_shutdown() => {
                Some(timeout.map_or(SHUTDOWN_LOOK_AGAIN, |t| t.min(SHUTDOWN_LOOK_AGAIN)))
            }
            _ => timeout,
        };
        if was_searching {
            self.pass_search_below(floor);
        }
        self.search.end();
        self.slot.counters.begin_park();
        let woken = {
            let _span = instrument::park(self.index);
            match timeout {
                Some(timeout) => sleep.park_timeout(self.index, timeout),
                None => {
                    sleep.park(self.index);
                    Woken::Permit
                }
            }
        };
        self.slot.counters.end_park();
        // A timed-out park leaves the idle set like a woken one: if a
        // notifier claimed the slot meanwhile, we hold the searcher token.
        self.searching.set(sleep.unidle(self.index, floor));
        match woken {
            Woken::Permit => Parked::Idle(Idle::Woke),
            Woken::TimedOut => Parked::TimedOut,
        }
    }

    /// After giving the searcher token back with nothing found: this thread
    /// was woken to search but may only run lanes down to `floor`; if less
    /// urgent work is waiting, pass the search to a thread that can run it,
    /// since whoever pushed it may have been turned away while the token
    /// was ours. The look comes after the release and its fence (in
    /// `prepare_park`), so it sees every task whose push was turned away
    /// (the pair in idle.rs).
    fn pass_search_below(&self, floor: Lane) {
        if let Some(lane) = self.visible_lane_below(floor) {
            self.shared.notify(lane);
        }
    }

    /// Block-on-complete: runs tasks of lanes down to `floor` until `latch`
    /// is set. See the module docs.
    pub(crate) fn wait_until(&self, latch: &Latch, floor: impl Fn() -> Lane) {
        if latch.is_set() {
            return;
        }
        let _span = instrument::wait();
        self.wait_helping(latch, floor);
    }

    pub(super) fn wait_helping(&self, latch: &Latch, floor: impl Fn() -> Lane) {
        self.wait_loop(
            latch,
            floor,
            |floor| self.run_newest(floor),
            || false,
            || self.slot_waiter(),
        );
    }

    /// Depth first: what the waiting task pushed last is most likely what it
    /// waits for, and running it keeps nesting shallow. Whether it ran one.
    fn run_newest(&self, floor: Lane) -> bool {
        match self.take_newest(floor) {
            Some(found) => {
                self.run_found(found);
                true
            }
            None => false,
        }
    }

    /// Runs the next task of `inbox` (tasks only this thread may run) as a
    /// task of `lane`. Whether it ran one.
    #[cfg_attr(target_os = "linux", link_section = "engine_tasks_shared")]
    fn run_from_inbox(&self, inbox: &TaskQueue, lane: Lane) -> bool {
        if inbox.is_empty() {
            return false;
        }
        match inbox.try_lock().and_then(|mut consumer| consumer.pop()) {
            Some(task) => {
                // Found work: hand the search on first, as `run_found` does,
                // so pushes during a long inbox task still wake threads.
                self.hand_on_search(lane);
                self.run_task(task, lane);
                true
            }
            None => false,
        }
    }

    /// Block-on-complete for a frame: like [`Local::wait_until`], and also
    /// runs the tasks that only this thread may run (`inbox`: the frame's
    /// pinned nodes), first. Whoever pushes to the inbox unparks this slot
    /// afterwards.
    #[cfg_attr(target_os = "linux", link_section = "engine_tasks_shared")]
    pub(crate) fn wait_frame(&self, latch: &Latch, floor: Lane, inbox: &TaskQueue) {
        let _span = instrument::wait();
        self.wait_loop(
            latch,
            || floor,
            |_| self.run_from_inbox(inbox, Lane::FrameCritical),
            || !inbox.is_empty(),
            || self.slot_waiter(),
        );
    }

    /// Block-on-complete for a scope: like [`Local::wait_until`], and first
    /// runs the tasks spawned for this thread (`inbox`,
    /// `Scope::spawn_on_caller`) as tasks of `inbox_lane`. Whoever pushes to
    /// the inbox unparks this slot afterwards.
    pub(crate) fn wait_scope(
        &self,
        latch: &Latch,
        floor: impl Fn() -> Lane,
        inbox: &TaskQueue,
        inbox_lane: Lane,
    ) {
        if latch.is_set() {
            return;
        }
        let _span = instrument::wait();
        self.wait_loop(
            latch,
            floor,
            |floor| self.run_from_inbox(inbox, inbox_lane) || self.run_newest(floor),
            || !inbox.is_empty(),
            || self.slot_waiter(),
        );
    }

    /// How a task of this pool wakes this thread: through its slot's
    /// parker, which the pool keeps alive.
    pub(super) fn slot_waiter(&self) -> Waiter {
        Waiter::Slot(self.shared.sleep.parker(self.index))
    }

    /// How a pool without threads wakes this thread when it helps there
    /// (helpers.rs): through its slot's parker here.
    fn helper_waker(&self) -> HelperWaker {
        HelperWaker::Pool {
            pool: self.shared.arc(),
            slot: self.index,
        }
    }

    /// How a task of *another* pool wakes this thread: through its slot's
    /// parker, with a reference that keeps this pool alive until the wake
    /// is delivered (latch.rs).
    pub(crate) fn waiter_from_other_pool(&self) -> Waiter {
        Waiter::Owned {
            parker: self.shared.sleep.parker(self.index),
            owner: self.shared.arc(),
        }
    }

    /// Before this thread runs a task of another pool inside a wait: gives
    /// back this pool's searcher token, if a push gave it to this thread,
    /// so that pushes to this pool still wake its threads; and scope
    /// credit, since the task may run long or block and must not hold up a
    /// scope of this pool (credit.rs).
    fn before_another_pools_task(&self) {
        self.leave_search();
        self.credit.settle();
    }

    /// Block-on-complete for a latch that a task of `other`, another pool,
    /// sets (or, with `None`, a blocking thread of no pool): this thread
    /// keeps working for its own pool (every lane) while
    /// it waits, so work of its own pool that the awaited task waits for in
    /// turn still runs (a worker of pool A waits on pool B, whose task waits
    /// on a task of A). First, each round: `inbox` (the pinned nodes of a
    /// frame of `other` that this thread runs), then, if `other` has no
    /// thread to run its work (none started, or shutting down), one of
    /// `other`'s tasks, then this thread's own newest task.
    pub(super) fn wait_for_other_pool(
        &self,
        other: Option<&Shared>,
        latch: &Latch,
        inbox: Option<&TaskQueue>,
    ) {
        let _span = instrument::wait();
        let helping = OnceCell::new();
        let first_look = |floor| {
            if let Some(task) = inbox.and_then(|q| q.try_lock().and_then(|mut c| c.pop())) {
                // Work of the other pool.
                self.before_another_pools_task();
                let _span = instrument::task(Lane::FrameCritical, task.site());
                task.run();
                return true;
            }
            if let Some(other) = other.filter(|other| other.needs_helpers()) {
                // Listed before the look, so a later push wakes this thread.
                helping.get_or_init(|| Helping::new(other, self.helper_waker()));
                // As above, before a task of the other pool may run.
                self.before_another_pools_task();
                if run_one_unowned(other) {
                    return true;
                }
            }
            match self.take_newest(floor) {
                Some(found) => {
                    self.run_found(found);
                    true
                }
                None => false,
            }
        };
        self.wait_loop(
            latch,
            || Lane::Background,
            first_look,
            || inbox.is_some_and(|q| !q.is_empty()),
            || self.waiter_from_other_pool(),
        );
    }

    /// The loop of every wait: `first_look` (which runs one task and says
    /// whether it did), then the ordinary search, then the idle protocol,
    /// until `latch` is set. `more_work` wakes the idle protocol early for
    /// work `first_look` would find that the search does not see.
    #[cfg_attr(target_os = "linux", link_section = "engine_tasks_shared")]
    pub(super) fn wait_loop(
        &self,
        latch: &Latch,
        floor: impl Fn() -> Lane,
        mut first_look: impl FnMut(Lane) -> bool,
        more_work: impl Fn() -> bool,
        waiter: impl Fn() -> Waiter,
    ) {
        let mut registered = false;
        self.wait_depth.set(self.wait_depth.get() + 1);
        let lent = self.lend_background_permits();
        while !latch.is_set() {
            if self.credit.settle_if_last(latch) {
                continue;
            }
            // With no worker to run less urgent work, this thread must, or
            // work that its target needs in turn would never run.
            let floor = if self.shared.needs_helpers() {
                Lane::Background
            } else {
                floor()
            };
            if first_look(floor) {
                continue;
            }
            if let Some(found) = self.find_task(floor, false) {
                self.run_found(found);
                continue;
            }
            // Found nothing: give scope credit back first, which may set
            // the latch we wait for.
            if self.credit.settle() {
                continue;
            }
            if !registered {
                registered = true;
                if !latch.register(waiter()) {
                    break;
                }
            }
            if let Idle::Found(found) = self.idle(floor, true, || latch.is_set() || more_work()) {
                self.run_found(found);
            }
        }
        self.search.end();
        self.take_back_background_permits(lent);
        self.wait_depth.set(self.wait_depth.get() - 1);
        // Back to the code that waited, which may block on anything.
        self.credit.settle();
        self.leave_search();
    }

    /// A wait ended while this thread held the searcher token (it was woken
    /// to look for work, then its own target finished). Gives the token back
    /// and wakes a thread only if work is visible: waking one for nothing
    /// after every frame cost a worker a futex round trip, a spin and a park
    /// per frame. No wake-up is lost: a pusher turned away while we held the
    /// token published its task before its fence; our release of the token
    /// and the fence after it come later in the SeqCst order, so the look
    /// below sees that task (the same pair as in idle.rs).
    #[cfg_attr(target_os = "linux", link_section = "engine_tasks_shared")]
    pub(super) fn leave_search(&self) {
        if !self.searching.replace(false) || !self.shared.sleep.end_search() {
            return;
        }
        fence(Ordering::SeqCst);
        if let Some(lane) = self.visible_lane(&Lane::ALL) {
            self.shared.notify(lane);
        }
    }

    /// This thread's newest task of the most urgent lane down to `floor`,
    /// for a wait: per lane its LIFO slot, its ring, then its join deque.
    ///
    /// That order keeps nesting shallow: a scope's body pushes to the LIFO
    /// slot and ring, while the join deque may hold halves of an enclosing
    /// scope or join, whose tasks would open further waits on this stack.
    ///
    /// The LIFO slot and the join deque hold only tasks this thread pushed
    /// itself (refills and steals go to the ring), so a background task
    /// from them needs no permit: it may be what this thread waits for, and
    /// the thread is blocked in the wait anyway, so running it takes no free
    /// worker from the pool. Requiring one deadlocked a wait whose permit
    /// was held further up its chain of joins (a background task joins a
    /// normal one that joins a background one). The ring's tasks need a
    /// permit like any other start of background work.
    #[cfg_attr(target_os = "linux", link_section = "engine_tasks_shared")]
    pub(super) fn take_newest(&self, floor: Lane) -> Option<Found> {
        let own = |task, lane| Found {
            task,
            lane,
            background_permit: false,
        };
        for &lane in floor.and_above() {
            if let Some(task) = Self::take_lifo(self.queues(lane)) {
                return Some(own(task, lane));
            }
            if let Some(found) = self.take_newest_from_ring(lane) {
                return Some(found);
            }
            if let Some(task) = self.joins[lane.index()].pop() {
                return Some(own(task, lane));
            }
        }
        None
    }

    /// The newest task of `lane` in this thread's ring, with a background
    /// permit if the lane needs one (`None` also when none is free).
    #[cfg_attr(target_os = "linux", link_section = "engine_tasks_shared")]
    pub(super) fn take_newest_from_ring(&self, lane: Lane) -> Option<Found> {
        if self.queues(lane).ring.is_empty() {
            return None;
        }
        let background_permit = match lane {
            Lane::Background => self.acquire_background()?,
            _ => false,
        };
        let task = self.rings[lane.index()].pop_newest();
        if task.is_none() && background_permit {
            self.shared.release_background(1);
        }
        task.map(|task| Found {
            task,
            lane,
            background_permit,
        })
    }
}

/// Waiting for a thread that holds no slot in `shared`. A worker or guest
/// of another pool waits in its own pool, running that pool's work
/// (`Local::wait_for_other_pool`). Otherwise (another outside thread holds
/// the guest slot), with worker threads running it only sleeps until the
/// latch is set: without queues of its own it could only pick up the oldest
/// injected tasks, each of which may wait in turn, nesting without bound.
/// With no worker thread at all, or once shutdown has begun (the workers may
/// be gone), it must help or nothing would run: then it runs the tasks it
/// can reach (`run_one_unowned`), listed as one of the pool's helpers so
/// that every push wakes it (helpers.rs).
///
/// `inbox` holds tasks that only this thread may run (a frame's pinned
/// nodes); whoever pushes to it unparks this thread afterwards.
#[cfg_attr(target_os = "linux", link_section = "engine_tasks_shared")]
pub(crate) fn wait_without_slot(shared: &Shared, latch: &Latch, inbox: Option<&TaskQueue>) {
    if latch.is_set() {
        return;
    }
    // A thread of another pool keeps working for it while it waits.
    let waited_at_home =
        with_current(|home| home.map(|home| home.wait_for_other_pool(Some(shared), latch, inbox)));
    if waited_at_home.is_some() {
        return;
    }
    let _span = instrument::wait();
    let mut registered = false;
    let helping = OnceCell::new();
    while !latch.is_set() {
        let pinned = inbox.and_then(|q| q.try_lock().and_then(|mut consumer| consumer.pop()));
        if let Some(task) = pinned {
            let _span = instrument::task(Lane::FrameCritical, task.site());
            task.run();
            continue;
        }
        if shared.needs_helpers() {
            // Listed before the look, so a later push wakes this thread.
            helping
                .get_or_init(|| Helping::new(shared, HelperWaker::Thread(std::thread::current())));
            if run_one_unowned(shared) {
                continue;
            }
        }
        if !registered {
            registered = true;
            if !latch.register(Waiter::Thread(std::thread::current())) {
                break;
            }
            continue;
        }
        if inbox.is_none_or(TaskQueue::is_empty) {
            std::thread::park();
        }
    }
}

/// A thread listed as a helper of a pool without threads (helpers.rs),
/// until its wait ends.
struct Helping<'a> {
    pool: &'a Shared,
    id: HelperId,
}

impl<'a> Helping<'a> {
    fn new(pool: &'a Shared, waker: HelperWaker) -> Self {
        Helping {
            id: pool.add_helper(waker),
            pool,
        }
    }
}

impl Drop for Helping<'_> {
    fn drop(&mut self) {
        self.pool.remove_helper(self.id);
    }
}

/// Waits for `latch`, which a thread outside every pool sets (a blocking
/// thread), running the work of the pool this thread works in meanwhile
/// (`Local::wait_for_other_pool`). Returns at once, without waiting, on a
/// thread that works in no pool.
pub(crate) fn wait_working_for_own_pool(latch: &Latch) {
    with_current(|home| {
        if let Some(home) = home {
            home.wait_for_other_pool(None, latch, None);
        }
    });
}

/// How a thread without a slot in the pool it waits in is woken: through
/// its own pool's parker if it works in another pool (it waits there, see
/// `wait_without_slot`), else as a thread.
pub(crate) fn waiter_without_slot() -> Waiter {
    with_current(|home| match home {
        Some(home) => home.waiter_from_other_pool(),
        None => Waiter::Thread(std::thread::current()),
    })
}

/// Runs one queued task of `shared` that no slot owner would run, on a
/// thread without a slot there: only when `shared` has no thread to run it
/// (none started, or shutting down). It takes from the injector, the LIFO
/// slots and the join deques (a scope task that a guest queued for a scope
/// of this thread); a guest leaving such a pool hands the rest of its
/// queues to the injector (`Local::hand_queued_to_helpers`). Background
/// tasks need no permit here: the cap keeps workers free for frame work,
/// and there are none to keep;
/// a permit would also be held while the task blocks, and the thread's own
/// wait further down might need it (a background task of a pool without
/// threads that waits on another pool whose task queues a background task
/// back into it).
///
/// It looks at every lane, most urgent first, whatever the waiting thread
/// waits for: the floor that keeps a waiting thread on work as urgent as
/// its own (module docs) presumes workers that run the rest, and here
/// there are none, so less urgent work that the awaited task needs would
/// never run.
pub(super) fn run_one_unowned(shared: &Shared) -> bool {
    for lane in Lane::ALL {
        let injector = &shared.injector[lane.index()];
        let task = injector
            .try_lock()
            .and_then(|mut consumer| consumer.pop())
            .inspect(|_| {
                // Leave nothing behind without a wake-up (see queue.rs).
                if !injector.is_empty() {
                    shared.notify(lane);
                }
            })
            .or_else(|| {
                shared.slots.iter().find_map(|slot| {
                    let queues = &slot.lanes[lane.index()];
                    Local::take_lifo(queues).or_else(|| queues.joins.steal())
                })
            });
        if let Some(task) = task {
            shared.external.lanes[lane.index()].executed.add_shared(1);
            {
                let _span = instrument::task(lane, task.site());
                task.run();
            }
            return true;
        }
    }
    false
}

//! A thread's view of the pool: where it looks for work, how it runs it, how
//! it waits.
//!
//! # The search
//!
//! [`Local::find_task`] walks the lanes from frame-critical down to the
//! least urgent lane the caller may run, and in each lane looks at:
//!
//! 1. its own LIFO slot (skipped after [`LIFO_STREAK_CAP`] LIFO runs in a row,
//!    so the ring is not starved), its own ring, its own overflow queue, its
//!    own join deque (`join` halves and scope tasks, newest first);
//! 2. the injector (fetching a fair share of up to [`INJECTOR_BATCH`] tasks
//!    into its ring);
//! 3. peers that advertise work in that lane, in random order: steal half of
//!    the ring, else the oldest join-deque task, else the LIFO slot, else a
//!    batch from the overflow queue.
//!
//! So a thread never starts a lower-lane task while it can see a higher-lane
//! one: if a lane's search comes back empty while the lane still shows work
//! (another thread is in the middle of moving it), the thread retries that
//! lane, pausing and then yielding, until it gets a task or the lane shows
//! none (`Local::wait_for_mover`), before it looks lower. Background work
//! additionally needs one of the pool's `background_cap` permits, except a
//! task that a waiting thread takes back from its own LIFO slot or join
//! deque (tasks it pushed itself): a join never waits for a task that it
//! could run itself.
//!
//! # Waiting (block-on-complete)
//!
//! A thread that waits for a latch (`join`, `scope`, `JoinHandle::join`)
//! keeps running tasks until the latch is set, and sleeps in the same idle
//! protocol as workers when it finds none, so new work wakes it too. It only
//! runs tasks **at least as urgent** as the one it waits for (waiting on a
//! frame-critical task runs only frame-critical tasks), and the tasks it runs
//! may be any task of those lanes in the pool, not only descendants of its
//! target: do not wait while holding a lock that other tasks take.
//!
//! A thread of one pool that waits on a task of another (a worker of pool A
//! joins a task of pool B) waits without a slot in B and keeps running A's
//! tasks of every lane, as its own pool's worker: B's task may wait on work
//! of A in turn, and A's only worker may be the thread that is waiting. B's
//! setter wakes it through A's parker, holding a reference to A until the
//! wake is delivered (`Waiter::Owned` in latch.rs).

use crate::clock;
use crate::credit::ScopeCredit;
use crate::deque::DequeOwner;
use crate::idle::MAX_SLOTS;
use crate::instrument;
use crate::lane::Lane;
use crate::latch::{Latch, Waiter};
use crate::park::Woken;
use crate::placement::Placement;
use crate::queue::{TaskList, TaskQueue};
use crate::registry::{Shared, Slot, SlotLane};
use crate::ring::{RingOwner, CAPACITY};
use crate::task::TaskRef;
use crossbeam_utils::Backoff;
use std::cell::Cell;
use std::ptr;
use std::sync::atomic::{fence, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Consecutive LIFO-slot runs before the ring gets a turn (volt uses 3).
const LIFO_STREAK_CAP: u32 = 3;
/// Most tasks moved from the injector per fetch (volt's default batch).
const INJECTOR_BATCH: usize = 32;

thread_local! {
    static CURRENT: Cell<*const Local<'static>> = const { Cell::new(ptr::null()) };
}

/// A task found by the search, with what running it requires.
pub(crate) struct Found {
    task: TaskRef,
    lane: Lane,
    background_permit: bool,
}

/// Why [`Local::idle`] returned.
enum Idle {
    Found(Found),
    Woke,
    Stopped,
}

/// How [`Local::park`] ended.
enum Parked {
    /// As [`Local::idle`] would return.
    Idle(Idle),
    /// A timed park ran out; the thread left the idle set (and may hold the
    /// searcher token, see `searching`).
    TimedOut,
}

/// Background permits lent by a wait, and the background depth it hid.
struct Lent {
    permits: u32,
    depth: u32,
}

/// The owner's context of one slot: `!Send`, `!Sync`, one per thread.
pub(crate) struct Local<'a> {
    pub(crate) shared: &'a Shared,
    index: usize,
    slot: &'a Slot,
    rings: [RingOwner<'a>; Lane::COUNT],
    joins: [DequeOwner<'a>; Lane::COUNT],
    rng: Cell<u64>,
    lifo_streak: Cell<u32>,
    advertised: Cell<u8>,
    searching: Cell<bool>,
    lane: Cell<Lane>,
    /// Background tasks running on this thread's stack since its innermost
    /// wait began (a wait lends the permits of those below it and counts
    /// from zero again, see `Local::lend_background_permits`).
    background_depth: Cell<u32>,
    /// Background permits held for tasks on this thread's stack since its
    /// innermost wait began.
    held_permits: Cell<u32>,
    /// Waits on this thread's stack (a thread that waits runs other tasks
    /// inside the wait, on top of what it waits in).
    wait_depth: Cell<u32>,
    /// Completed scope tasks' counts not yet given back (credit.rs).
    pub(crate) credit: ScopeCredit,
    /// The scope key (`TaskRef::scope`) of the task running on this thread.
    running_scope: Cell<usize>,
    /// This thread finished the last node of a frame: if it is a free worker,
    /// its next idle period is between frames (see [`Local::idle`]), even
    /// before the frame's thread has noticed that the frame ended.
    ended_frame: Cell<bool>,
    /// The profiler's view of the current search for work (instrument.rs).
    search: instrument::Search,
}

impl<'a> Local<'a> {
    /// # Safety
    ///
    /// The caller owns slot `index` until the `Local` is dropped: worker
    /// `index`'s thread, or the holder of the guest slot.
    unsafe fn new(shared: &'a Shared, index: usize, searching: bool) -> Self {
        let slot = &shared.slots[index];
        let bit = 1u64 << index;
        let advertised = Lane::ALL.iter().fold(0u8, |acc, lane| {
            // Relaxed: the slot hand-over (Acquire) already ordered us after
            // the previous owner's updates.
            let set = shared.advertised[lane.index()].load(Ordering::Relaxed) & bit != 0;
            acc | (u8::from(set) << lane.index())
        });
        Local {
            shared,
            index,
            slot,
            // SAFETY: the caller owns the slot, hence its rings.
            rings: std::array::from_fn(|i| unsafe { slot.lanes[i].ring.owner() }),
            // SAFETY: as above, for the join deques.
            joins: std::array::from_fn(|i| unsafe { slot.lanes[i].joins.owner() }),
            rng: Cell::new(0x9E37_79B9_7F4A_7C15 ^ ((index as u64 + 1) << 17)),
            lifo_streak: Cell::new(0),
            advertised: Cell::new(advertised),
            searching: Cell::new(searching),
            lane: Cell::new(Lane::Normal),
            background_depth: Cell::new(0),
            held_permits: Cell::new(0),
            wait_depth: Cell::new(0),
            credit: ScopeCredit::new(),
            running_scope: Cell::new(0),
            ended_frame: Cell::new(false),
            search: instrument::Search::default(),
        }
    }

    /// The lane of the task this thread is running (`Normal` outside tasks).
    pub(crate) fn current_lane(&self) -> Lane {
        self.lane.get()
    }

    /// Sets the lane of the task this thread runs (a graph node run inline
    /// after another) and returns the previous one.
    pub(crate) fn set_lane(&self, lane: Lane) -> Lane {
        self.lane.replace(lane)
    }

    /// This thread's slot in the pool.
    pub(crate) fn index(&self) -> usize {
        self.index
    }

    /// Makes `self` the thread's current context while `f` runs.
    fn enter<R>(&self, f: impl FnOnce() -> R) -> R {
        struct Restore(*const Local<'static>);
        impl Drop for Restore {
            fn drop(&mut self) {
                CURRENT.with(|c| c.set(self.0));
            }
        }
        let erased = (self as *const Local<'_>).cast::<Local<'static>>();
        let _restore = Restore(CURRENT.with(|c| c.replace(erased)));
        f()
    }

    fn next_random(&self) -> u64 {
        // xorshift64 (Marsaglia 2003): victim order only needs to differ
        // between threads and rounds.
        let mut x = self.rng.get();
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.rng.set(x);
        x
    }

    fn queues(&self, lane: Lane) -> &'a SlotLane {
        &self.slot.lanes[lane.index()]
    }

    // ----- pushing -----

    /// Queues a task on this thread: into the LIFO slot, the previous
    /// occupant to the ring, and half the ring to overflow when full.
    pub(crate) fn push(&self, lane: Lane, task: TaskRef) {
        if let Some(evicted) = self.queues(lane).lifo.put(task) {
            self.push_ring(lane, evicted);
        }
        self.slot.counters.lanes[lane.index()].spawned.bump();
        self.advertise(lane);
        self.shared.notify(lane);
    }

    /// Queues the second half of a `join` (or a scope task) in the join
    /// deque, where thieves can take it and the owner can pop it back
    /// cheaply. The submitter waits for it, and this thread drains its own
    /// deque before it parks, so the wake-up may be a hint (see
    /// `Shared::notify_join`). Hands the task back if the deque is full.
    #[inline]
    pub(crate) fn push_join(&self, lane: Lane, task: TaskRef) -> Result<(), TaskRef> {
        self.joins[lane.index()].push(task)?;
        self.slot.counters.lanes[lane.index()].spawned.bump();
        self.advertise(lane);
        self.shared.notify_join(lane);
        Ok(())
    }

    /// Pops this thread's newest pending join half of `lane`.
    #[inline]
    pub(crate) fn pop_join(&self, lane: Lane) -> Option<TaskRef> {
        self.joins[lane.index()].pop()
    }

    /// Counts a task run inline by its owner (a join half taken back).
    #[inline]
    pub(crate) fn count_inline_run(&self, lane: Lane) {
        self.slot.counters.lanes[lane.index()].executed.bump();
    }

    /// Counts `runs` tasks of `lane` run inline: the nodes of a frame run
    /// alone, counted once at its end (unlike `run_task`, which counts a
    /// task before it runs), so a node reading the pool's statistics sees
    /// the frame's earlier nodes only from the next frame on.
    #[inline]
    pub(crate) fn count_inline_runs(&self, lane: Lane, runs: u64) {
        if runs > 0 {
            self.slot.counters.lanes[lane.index()].executed.add(runs);
        }
    }

    /// Queues several tasks with one wake-up: into the ring (oldest first, so
    /// they run in order), not the LIFO slot.
    pub(crate) fn push_batch(&self, lane: Lane, tasks: impl IntoIterator<Item = TaskRef>) {
        let mut count = 0;
        for task in tasks {
            self.push_ring(lane, task);
            count += 1;
        }
        if count > 0 {
            self.slot.counters.lanes[lane.index()].spawned.add(count);
            self.advertise(lane);
            self.shared.notify(lane);
        }
    }

    /// Queues a task in the ring without a wake-up; the caller calls
    /// [`Local::notify_pushed`] once its batch is queued.
    pub(crate) fn push_quiet(&self, lane: Lane, task: TaskRef) {
        self.push_ring(lane, task);
        self.slot.counters.lanes[lane.index()].spawned.bump();
    }

    /// Advertises the tasks of `lane` that `push_quiet` queued to thieves,
    /// and with `wake` also wakes a sleeping thread for them. Without `wake`
    /// the caller must run a search that reaches `lane` before this thread
    /// parks (then nothing is stranded).
    pub(crate) fn notify_pushed(&self, lane: Lane, wake: bool) {
        self.advertise(lane);
        if wake {
            self.shared.notify(lane);
        }
    }

    fn push_ring(&self, lane: Lane, task: TaskRef) {
        if let Err(full) = self.rings[lane.index()].push(task) {
            let mut list = TaskList::new();
            self.rings[lane.index()].drain_half(|t| list.push_back(t));
            list.push_back(full.task);
            self.queues(lane).overflow.push_list(list);
        }
    }

    #[inline]
    fn advertise(&self, lane: Lane) {
        let bit = 1u8 << lane.index();
        if self.advertised.get() & bit == 0 {
            self.advertised.set(self.advertised.get() | bit);
            // Release: pairs with the Acquire mask load in `steal`, after the
            // task itself was published by its queue.
            self.shared.advertised[lane.index()].fetch_or(1 << self.index, Ordering::Release);
        }
    }

    fn unadvertise(&self, lane: Lane) {
        let bit = 1u8 << lane.index();
        if self.advertised.get() & bit != 0 {
            self.advertised.set(self.advertised.get() & !bit);
            // Relaxed: clearing a hint; a stale set bit costs a failed steal,
            // and only this thread sets it again, after its next push.
            self.shared.advertised[lane.index()].fetch_and(!(1 << self.index), Ordering::Relaxed);
        }
    }

    // ----- finding -----

    /// See the module docs. `thorough` ignores the advertisement masks and
    /// looks at every slot: the last look before parking.
    pub(crate) fn find_task(&self, floor: Lane, thorough: bool) -> Option<Found> {
        self.first_in_lanes(
            floor,
            |lane| {
                self.find_in_lane(lane, thorough).or_else(|| {
                    if lane == floor {
                        None // nothing lower to protect
                    } else {
                        self.wait_for_mover(lane)
                    }
                })
            },
            || self.background_visible(thorough),
        )
    }

    /// A search of `lane` can come back empty while the lane still holds
    /// work: another thread is moving it (an injector fetch holds the
    /// consumer lock; a steal in progress makes other steals from that ring
    /// give up). Descending to a lower lane then would start less urgent
    /// work while more urgent work is in sight: under saturation on a loaded
    /// machine, a mover preempted by the OS let dozens of background tasks
    /// start before queued normal ones. So while the lane shows such work,
    /// retry it: pause first (a move takes well under a microsecond), then
    /// yield, so that a preempted mover gets the CPU back.
    ///
    /// The wait ends: every move completes once its thread runs, and then
    /// either this thread takes a task or the lane shows no more work.
    #[cold]
    fn wait_for_mover(&self, lane: Lane) -> Option<TaskRef> {
        let backoff = Backoff::new();
        while self.lane_shows_batch_work(lane) {
            backoff.snooze();
            if let Some(task) = self.find_in_lane(lane, true) {
                return Some(task);
            }
        }
        None
    }

    /// Whether `lane` holds work in the injector or in the ring or overflow
    /// queue of a peer that advertises it. Two loads when the lane is empty;
    /// a stale advertisement is checked against the peer's queues.
    fn lane_shows_batch_work(&self, lane: Lane) -> bool {
        let shared = self.shared;
        if !shared.injector[lane.index()].is_empty() {
            return true;
        }
        // Relaxed: a hint; the retried search decides.
        let mut peers =
            shared.advertised[lane.index()].load(Ordering::Relaxed) & !(1 << self.index);
        while peers != 0 {
            let peer = peers.trailing_zeros() as usize;
            peers &= peers - 1;
            if shared.slots[peer].has_batch_work(lane) {
                return true;
            }
        }
        false
    }

    /// Walks the lanes from frame-critical down to `floor` and returns the
    /// first task `take` yields. Background work needs a permit, taken only
    /// if `background_worth_trying` says there may be some.
    fn first_in_lanes(
        &self,
        floor: Lane,
        mut take: impl FnMut(Lane) -> Option<TaskRef>,
        background_worth_trying: impl Fn() -> bool,
    ) -> Option<Found> {
        for &lane in floor.and_above() {
            let mut background_permit = false;
            if lane == Lane::Background {
                if !background_worth_trying() {
                    continue;
                }
                match self.acquire_background() {
                    Some(acquired) => background_permit = acquired,
                    None => continue,
                }
            }
            if let Some(task) = take(lane) {
                return Some(Found {
                    task,
                    lane,
                    background_permit,
                });
            }
            if background_permit {
                self.shared.release_background();
            }
        }
        None
    }

    /// May this thread start a background task? `Some(true)`: it took one
    /// of the pool's permits (release it after the task). `Some(false)`: it
    /// already runs background work further up its stack, so a nested one
    /// does not add concurrency and needs no permit (requiring one would
    /// deadlock a background task waiting for its own children at the cap).
    /// `None`: the cap is reached.
    fn acquire_background(&self) -> Option<bool> {
        if self.background_depth.get() > 0 {
            Some(false)
        } else if self.shared.try_acquire_background() {
            Some(true)
        } else {
            None
        }
    }

    /// The most urgent lane less urgent than `floor` with queued work
    /// anywhere in the pool (a thorough look, for the parking path).
    fn visible_lane_below(&self, floor: Lane) -> Option<Lane> {
        let shared = self.shared;
        Lane::ALL[floor.index() + 1..]
            .iter()
            .copied()
            .find(|&lane| {
                !shared.injector[lane.index()].is_empty()
                    || shared.slots.iter().any(|slot| slot.has_work(lane))
            })
    }

    fn background_visible(&self, thorough: bool) -> bool {
        let lane = Lane::Background;
        let shared = self.shared;
        self.slot.has_work(lane)
            || !shared.injector[lane.index()].is_empty()
            // Relaxed: a hint; see `advertise`.
            || shared.advertised[lane.index()].load(Ordering::Relaxed) & !(1 << self.index) != 0
            || (thorough && shared.slots.iter().any(|s| s.has_work(lane)))
    }

    fn find_in_lane(&self, lane: Lane, thorough: bool) -> Option<TaskRef> {
        self.pop_local(lane)
            .or_else(|| self.pop_injector(lane))
            .or_else(|| self.steal(lane, thorough))
    }

    fn take_lifo(q: &SlotLane) -> Option<TaskRef> {
        q.lifo.take()
    }

    fn pop_local(&self, lane: Lane) -> Option<TaskRef> {
        let q = self.queues(lane);
        let counters = &self.slot.counters.lanes[lane.index()];
        let lifo_turn = self.lifo_streak.get() < LIFO_STREAK_CAP;
        if lifo_turn {
            if let Some(task) = Self::take_lifo(q) {
                self.lifo_streak.set(self.lifo_streak.get() + 1);
                counters.lifo_hits.bump();
                return Some(task);
            }
        }
        if let Some(task) = self.rings[lane.index()].pop() {
            self.lifo_streak.set(0);
            return Some(task);
        }
        if !lifo_turn {
            if let Some(task) = Self::take_lifo(q) {
                self.lifo_streak.set(1);
                counters.lifo_hits.bump();
                return Some(task);
            }
        }
        if let Some(task) = self.refill(&q.overflow, lane, CAPACITY / 2) {
            self.lifo_streak.set(0);
            return Some(task);
        }
        if let Some(task) = self.joins[lane.index()].pop() {
            return Some(task);
        }
        self.unadvertise(lane);
        None
    }

    /// Takes one task from `queue` and moves up to `limit` more into our ring.
    fn refill(&self, queue: &TaskQueue, lane: Lane, limit: usize) -> Option<TaskRef> {
        self.refill_counted(queue, lane, limit)
            .map(|(task, _)| task)
    }

    /// [`Local::refill`], also returning how many tasks moved to the ring.
    fn refill_counted(
        &self,
        queue: &TaskQueue,
        lane: Lane,
        limit: usize,
    ) -> Option<(TaskRef, usize)> {
        let mut consumer = queue.try_lock()?;
        let first = consumer.pop()?;
        let mut moved = 0;
        while moved < limit {
            let Some(task) = consumer.pop() else { break };
            self.push_ring(lane, task);
            moved += 1;
        }
        drop(consumer);
        if moved > 0 {
            self.advertise(lane);
        }
        if moved > 0 || !queue.is_empty() {
            // Leave nothing behind without a wake-up (see queue.rs).
            self.shared.notify(lane);
        }
        Some((first, moved))
    }

    fn pop_injector(&self, lane: Lane) -> Option<TaskRef> {
        let injector = &self.shared.injector[lane.index()];
        if injector.is_empty() {
            return None;
        }
        // A fair share, so one thread does not drain a burst alone.
        let share = (injector.len() / (self.shared.worker_count() + 1)).min(INJECTOR_BATCH);
        let task = self.refill(injector, lane, share);
        instrument::steal(None, lane, u32::from(task.is_some()), &self.search);
        task
    }

    fn steal(&self, lane: Lane, thorough: bool) -> Option<TaskRef> {
        let shared = self.shared;
        let count = shared.slots.len();
        let me = 1u64 << self.index;
        let mask = if thorough {
            !0
        } else {
            // Acquire: pairs with the Release fetch_or in `advertise`.
            shared.advertised[lane.index()].load(Ordering::Acquire)
        } & !me;
        if mask == 0 {
            return None;
        }
        debug_assert!(count <= MAX_SLOTS);
        let counters = &self.slot.counters.lanes[lane.index()];
        let start = (self.next_random() % count as u64) as usize;
        for k in 0..count {
            let victim = (start + k) % count;
            if mask & (1 << victim) == 0 {
                continue;
            }
            let slot = &shared.slots[victim];
            if thorough && !slot.has_work(lane) {
                continue;
            }
            counters.steal_operations.bump();
            if let Some((task, taken)) = self.steal_from(slot, lane) {
                counters.stolen_tasks.add(u64::from(taken));
                instrument::steal(Some(victim), lane, taken, &self.search);
                return Some(task);
            }
            counters.failed_steals.bump();
            instrument::steal(Some(victim), lane, 0, &self.search);
        }
        None
    }

    fn steal_from(&self, victim: &Slot, lane: Lane) -> Option<(TaskRef, u32)> {
        let q = &victim.lanes[lane.index()];
        if let Some((task, taken)) = q.ring.steal_into(&self.rings[lane.index()]) {
            if taken > 1 {
                // The rest now sit in our ring, where others may steal them.
                self.advertise(lane);
                self.shared.notify(lane);
            }
            return Some((task, taken));
        }
        if let Some(task) = q.joins.steal() {
            return Some((task, 1));
        }
        if let Some(task) = Self::take_lifo(q) {
            return Some((task, 1));
        }
        let (task, moved) = self.refill_counted(&q.overflow, lane, CAPACITY / 2)?;
        Some((task, moved as u32 + 1))
    }

    // ----- running -----

    pub(crate) fn run_found(&self, found: Found) {
        self.hand_on_search(found.lane);
        let permit = u32::from(found.background_permit);
        self.held_permits.set(self.held_permits.get() + permit);
        self.run_task(found.task, found.lane);
        self.held_permits.set(self.held_permits.get() - permit);
        if found.background_permit {
            self.shared.release_background();
        }
    }

    /// A thread that blocks in a wait lends the pool the background permits
    /// of the tasks below it on its stack until the wait ends (permits.rs
    /// says why, and why no wake-up is lost). In the wait it runs
    /// background work under the same permits as everyone else.
    fn lend_background_permits(&self) -> Lent {
        let lent = Lent {
            permits: self.held_permits.replace(0),
            depth: self.background_depth.replace(0),
        };
        if lent.permits > 0 {
            self.shared.release_background_permits(lent.permits);
            // A thread may have been turned away from background work for
            // want of a permit: wake one for it. SeqCst: pairs with the
            // pusher's fence in `notify` and the fence before every thread's
            // last look ahead of parking (permits.rs).
            fence(Ordering::SeqCst);
            if self.shared.has_visible_work(Lane::Background) {
                self.shared.notify(Lane::Background);
            }
        }
        lent
    }

    /// Ends a wait's loan (`lend_background_permits`).
    fn take_back_background_permits(&self, lent: Lent) {
        if lent.permits > 0 {
            self.shared.force_acquire_background_permits(lent.permits);
        }
        self.held_permits.set(lent.permits);
        self.background_depth.set(lent.depth);
    }

    /// This thread found work of `lane`. If it was the last searcher, there
    /// may be more, so it passes the search on (see idle.rs).
    fn hand_on_search(&self, lane: Lane) {
        if self.searching.replace(false) && self.shared.sleep.end_search() {
            self.shared.notify(lane);
        }
    }

    pub(crate) fn run_task(&self, task: TaskRef, lane: Lane) {
        self.search.end();
        let scope = task.scope();
        self.credit.settle_unless(scope);
        let outer_scope = self.running_scope.replace(scope);
        let outer = self.lane.replace(lane);
        let background = u32::from(lane == Lane::Background);
        self.background_depth
            .set(self.background_depth.get() + background);
        // Counted before the body, whose completion a joiner may observe:
        // the joiner's acquire then also sees the count.
        self.slot.counters.lanes[lane.index()].executed.bump();
        {
            let _span = instrument::task(lane, task.site());
            task.run();
        }
        self.background_depth
            .set(self.background_depth.get() - background);
        self.lane.set(outer);
        self.running_scope.set(outer_scope);
    }

    /// Sleeps by the idle protocol (so a push of work at least as urgent as
    /// `floor` wakes it, as does an unpark of its slot) unless `stop`
    /// holds when checked after announcing idle; runs a task found on the
    /// way. For the walkers of a planned frame (`graph/runtime/planned.rs`).
    pub(crate) fn sleep_unless(&self, floor: Lane, stop: impl Fn() -> bool) {
        match self.idle(floor, true, stop) {
            Idle::Found(found) => self.run_found(found),
            Idle::Woke | Idle::Stopped => self.leave_search(),
        }
    }

    /// Whether this thread runs inside a wait (a `join`, `scope`,
    /// `parallel_for` or frame's): below, on its stack, is a task or node
    /// that cannot finish until the running code returns.
    pub(crate) fn in_a_wait(&self) -> bool {
        self.wait_depth.get() > 0
    }

    /// The thread stopped looking for work without running a task or
    /// parking (a planned frame's walker found its next node ready).
    pub(crate) fn end_search(&self) {
        self.search.end();
    }

    /// Runs `f` as a wait: [`Local::in_a_wait`] holds inside it. For a
    /// planned frame's walk, which runs other tasks while it waits too.
    pub(crate) fn as_a_wait<R>(&self, f: impl FnOnce() -> R) -> R {
        self.wait_depth.set(self.wait_depth.get() + 1);
        let result = f();
        self.wait_depth.set(self.wait_depth.get() - 1);
        result
    }

    /// Records that this thread finished a frame's last node.
    pub(crate) fn note_frame_ended(&self) {
        self.ended_frame.set(true);
    }

    /// The scope key (`TaskRef::scope`) of the running task: 0 outside
    /// scope tasks.
    #[inline]
    pub(crate) fn running_scope(&self) -> usize {
        self.running_scope.get()
    }

    // ----- waiting -----

    /// Nothing to run: spin briefly, announce idle, look once more, park.
    ///
    /// A free worker (`waiting` false) that runs out of work while a shared
    /// task-graph frame runs first keeps looking for the frame's next nodes,
    /// for up to `Shared::in_frame_wait_ticks`. One that runs out between
    /// two frames of a frame loop instead waits for the next frame as long
    /// as the loop asked (`Shared::linger_ticks`, zero for a paced loop),
    /// then parks. A thread waiting for a target (`join`, `scope`, a frame)
    /// keeps the short spin: its target may finish on another thread any
    /// moment.
    fn idle(&self, floor: Lane, waiting: bool, stop: impl Fn() -> bool) -> Idle {
        self.credit.settle();
        let ended_frame = self.ended_frame.replace(false);
        let look = || match self.find_task(floor, false) {
            Some(found) => Some(Idle::Found(found)),
            None => stop().then_some(Idle::Stopped),
        };
        // Looks every 32 pause instructions until `ticks` passed or
        // `going_on` says no.
        let poll = |ticks: u64, going_on: &dyn Fn() -> bool| {
            let deadline = clock::ticks().saturating_add(ticks);
            while clock::ticks() < deadline && going_on() {
                for _ in 0..32 {
                    std::hint::spin_loop();
                }
                if let Some(idle) = look() {
                    return Some(idle);
                }
            }
            None
        };
        let in_frame_wait = self.shared.in_frame_wait_ticks();
        if !waiting && !ended_frame && in_frame_wait > 0 {
            // During a shared frame the frame's next nodes are usually
            // microseconds away (a layer boundary of the graph), while a park
            // and its wake-up cost about 10 µs of CPU and 5 µs of latency
            // here; so keep looking, for a bounded time, while the frame
            // runs. Then go on as below.
            if let Some(idle) = poll(in_frame_wait, &|| self.shared.in_shared_frame()) {
                return idle;
            }
        }
        if !waiting && (ended_frame || self.shared.between_frames()) {
            // Between frames: wait for the next one only as long as the frame
            // loop asked (registry.rs).
            if let Some(idle) = poll(self.shared.linger_ticks(), &|| true) {
                return idle;
            }
        } else {
            // A short bounded spin (at most 63 pause instructions in all) so
            // that a task pushed a moment later is taken without a sleep/wake
            // round trip; beyond the waits above, never yields or spins
            // longer.
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
            // before it, then look for its work (early_wake.rs).
            if let Some(plan) = self.shared.next_frame.plan(self.index, clock::ticks()) {
                if let Some(timeout) = plan.sleep {
                    match self.park(floor, &stop, Some(timeout)) {
                        Parked::TimedOut => self
                            .shared
                            .next_frame
                            .record_oversleep(plan.wake_at, clock::ticks()),
                        Parked::Idle(idle) => return idle,
                    }
                }
                let started = std::time::Instant::now();
                let found = poll(plan.look_until.saturating_sub(clock::ticks()), &|| true);
                self.slot.counters.early_wake(started.elapsed());
                if let Some(idle) = found {
                    return idle;
                }
            }
        }
        match self.park(floor, &stop, None) {
            Parked::Idle(idle) => idle,
            Parked::TimedOut => unreachable!("a park without a timeout timed out"),
        }
    }

    /// Announces this thread idle, looks once more, and parks (for at most
    /// `timeout`): the idle protocol of idle.rs.
    fn park(&self, floor: Lane, stop: &impl Fn() -> bool, timeout: Option<Duration>) -> Parked {
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
            self.searching.set(sleep.unidle(self.index, floor));
            return Parked::Idle(Idle::Stopped);
        }
        if was_searching {
            // We were woken to search but may only run urgent lanes; if less
            // urgent work is waiting, pass the search to a thread that can
            // run it, since whoever pushed it may have been turned away.
            if let Some(lane) = self.visible_lane_below(floor) {
                self.shared.notify(lane);
            }
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

    /// Block-on-complete: runs tasks of lanes down to `floor` until `latch`
    /// is set. See the module docs.
    pub(crate) fn wait_until(&self, latch: &Latch, floor: impl Fn() -> Lane) {
        if latch.is_set() {
            return;
        }
        let _span = instrument::wait();
        self.wait_helping(latch, floor);
    }

    fn wait_helping(&self, latch: &Latch, floor: impl Fn() -> Lane) {
        // Depth first: what the waiting task pushed last is most likely what
        // it waits for, and running it keeps nesting shallow.
        let newest_first = |floor| match self.take_newest(floor) {
            Some(found) => {
                self.run_found(found);
                true
            }
            None => false,
        };
        self.wait_loop(latch, floor, newest_first, || false, || self.slot_waiter());
    }

    /// Block-on-complete for a frame: like [`Local::wait_until`], and also
    /// runs the tasks that only this thread may run (`inbox`), first. Whoever
    /// pushes to the inbox unparks this slot afterwards.
    pub(crate) fn wait_frame(&self, latch: &Latch, floor: Lane, inbox: &TaskQueue) {
        let _span = instrument::wait();
        let pinned_first = |_| match inbox.try_lock().and_then(|mut consumer| consumer.pop()) {
            Some(task) => {
                // Found work: hand the search on first, as `run_found` does,
                // so pushes during a long pinned node still wake threads.
                self.hand_on_search(Lane::FrameCritical);
                self.run_task(task, Lane::FrameCritical);
                true
            }
            None => false,
        };
        self.wait_loop(
            latch,
            || floor,
            pinned_first,
            || !inbox.is_empty(),
            || self.slot_waiter(),
        );
    }

    /// How a task of this pool wakes this thread: through its slot's
    /// parker, which the pool keeps alive.
    fn slot_waiter(&self) -> Waiter {
        Waiter::Slot(self.shared.sleep.parker(self.index))
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

    /// Block-on-complete for a latch that a task of `other`, another pool,
    /// sets (or, with `None`, a blocking thread of no pool): this thread
    /// keeps working for its own pool (every lane) while
    /// it waits, so work of its own pool that the awaited task waits for in
    /// turn still runs (a worker of pool A waits on pool B, whose task waits
    /// on a task of A). First, each round: `inbox` (the pinned nodes of a
    /// frame of `other` that this thread runs), then, if `other` has no
    /// thread to run its work (none started, or shutting down), one of
    /// `other`'s tasks, then this thread's own newest task.
    fn wait_for_other_pool(
        &self,
        other: Option<&Shared>,
        latch: &Latch,
        other_floor: impl Fn() -> Lane,
        inbox: Option<&TaskQueue>,
    ) {
        let _span = instrument::wait();
        let first_look = |floor| {
            if let Some(task) = inbox.and_then(|q| q.try_lock().and_then(|mut c| c.pop())) {
                let _span = instrument::task(Lane::FrameCritical, task.site());
                task.run();
                return true;
            }
            if let Some(other) = other {
                let must_help = other.threads_started() == 0 || other.is_shutdown();
                if must_help && run_one_unowned(other, other_floor()) {
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
    fn wait_loop(
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
            let floor = floor();
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
    fn leave_search(&self) {
        if !self.searching.replace(false) || !self.shared.sleep.end_search() {
            return;
        }
        fence(Ordering::SeqCst);
        let shared = self.shared;
        let visible = Lane::ALL.iter().copied().find(|&lane| {
            !shared.injector[lane.index()].is_empty()
                || shared.slots.iter().any(|slot| slot.has_work(lane))
        });
        if let Some(lane) = visible {
            shared.notify(lane);
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
    fn take_newest(&self, floor: Lane) -> Option<Found> {
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
    fn take_newest_from_ring(&self, lane: Lane) -> Option<Found> {
        let background_permit = match lane {
            Lane::Background => self.acquire_background()?,
            _ => false,
        };
        let task = self.rings[lane.index()].pop_newest();
        if task.is_none() && background_permit {
            self.shared.release_background();
        }
        task.map(|task| Found {
            task,
            lane,
            background_permit,
        })
    }
}

/// Runs `f` with this thread's context in `shared`: its own slot if it is a
/// worker (or already a guest) of `shared`; no slot (`None`) if it is a
/// worker or guest of another pool; else the guest slot if free, else no
/// slot.
///
/// Inlined: on the hot path (a worker's `join`) the closure's captures then
/// stay in registers instead of being stored to memory and reloaded, which
/// cost a store-forwarding stall per `join` in the fib benchmark.
#[inline(always)]
pub(crate) fn with_slot<R>(shared: &Shared, f: impl FnOnce(Option<&Local<'_>>) -> R) -> R {
    let current = CURRENT.with(Cell::get);
    // SAFETY: CURRENT is only non-null inside `Local::enter` on this thread,
    // which outlives this call; the reference does not escape `f`.
    if let Some(local) = unsafe { current.as_ref() } {
        if ptr::eq(local.shared, shared) {
            return f(Some(local));
        }
        // A thread of another pool stays in it: it works there while it
        // waits on `shared` (`wait_without_slot`), never as `shared`'s guest,
        // whose waits would run only `shared`'s work.
        return f(None);
    }
    with_guest_slot(shared, f)
}

/// Whether the calling thread is one of `shared`'s worker threads (not
/// the guest slot of an outside thread).
pub(crate) fn is_worker_of(shared: &Shared) -> bool {
    with_current(|local| {
        local.is_some_and(|l| ptr::eq(l.shared, shared) && l.index < shared.worker_count())
    })
}

/// `with_slot` for a thread that is not in `shared`.
#[cold]
#[inline(never)]
fn with_guest_slot<R>(shared: &Shared, f: impl FnOnce(Option<&Local<'_>>) -> R) -> R {
    if shared.try_take_guest() {
        struct ReleaseGuest<'a>(&'a Shared);
        impl Drop for ReleaseGuest<'_> {
            fn drop(&mut self) {
                let shared = self.0;
                shared.release_guest();
                // Work left in the guest's queues (tasks it spawned, or scope
                // tasks of another scope that a task it ran pushed) has no
                // owner to drain it now: make sure a thread hears of it.
                let slot = &shared.slots[shared.guest_index()];
                if let Some(&lane) = Lane::ALL.iter().find(|&&lane| slot.has_work(lane)) {
                    shared.notify(lane);
                }
            }
        }
        /// Wake-ups steer the guest's thread while it holds the slot
        /// (placement.rs), and never after.
        struct Steered<'a>(&'a Placement);
        impl Drop for Steered<'_> {
            fn drop(&mut self) {
                self.0.unregister_current_thread();
            }
        }
        let _release = ReleaseGuest(shared);
        let placement = shared.sleep.parker(shared.guest_index()).placement();
        placement.register_current_thread();
        let _steered = Steered(placement);
        // SAFETY: `try_take_guest` made this thread the guest slot's only
        // owner until `_release` drops, after `local`.
        let local = unsafe { Local::new(shared, shared.guest_index(), false) };
        return local.enter(|| f(Some(&local)));
    }
    f(None)
}

/// Runs `f` with the thread's current context in whatever pool it is in.
pub(crate) fn with_current<R>(f: impl FnOnce(Option<&Local<'_>>) -> R) -> R {
    let current = CURRENT.with(Cell::get);
    // SAFETY: as in `with_slot`.
    f(unsafe { current.as_ref() })
}

/// Waiting for a thread that holds no slot in `shared`. A worker or guest
/// of another pool waits in its own pool, running that pool's work
/// (`Local::wait_for_other_pool`). Otherwise (another outside thread holds
/// the guest slot), with worker threads running it only sleeps until the
/// latch is set: without queues of its own it could only pick up the oldest
/// injected tasks, each of which may wait in turn, nesting without bound.
/// With no worker thread at all, or once shutdown has begun (the workers may
/// be gone), it must help or nothing would run: then it runs injector tasks
/// and LIFO slots it can reach.
///
/// `inbox` holds tasks that only this thread may run (a frame's pinned
/// nodes); whoever pushes to it unparks this thread afterwards.
pub(crate) fn wait_without_slot(
    shared: &Shared,
    latch: &Latch,
    floor: impl Fn() -> Lane,
    inbox: Option<&TaskQueue>,
) {
    if latch.is_set() {
        return;
    }
    // A thread of another pool keeps working for it while it waits.
    let waited_at_home = with_current(|home| {
        home.map(|home| home.wait_for_other_pool(Some(shared), latch, &floor, inbox))
    });
    if waited_at_home.is_some() {
        return;
    }
    let _span = instrument::wait();
    let mut registered = false;
    while !latch.is_set() {
        let pinned = inbox.and_then(|q| q.try_lock().and_then(|mut consumer| consumer.pop()));
        if let Some(task) = pinned {
            let _span = instrument::task(Lane::FrameCritical, task.site());
            task.run();
            continue;
        }
        let must_help = shared.threads_started() == 0 || shared.is_shutdown();
        if must_help && run_one_unowned(shared, floor()) {
            continue;
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

/// Waits for `latch`, which a thread outside every pool sets (a blocking
/// thread), running the work of the pool this thread works in meanwhile
/// (`Local::wait_for_other_pool`). Returns at once, without waiting, on a
/// thread that works in no pool.
pub(crate) fn wait_working_for_own_pool(latch: &Latch) {
    with_current(|home| {
        if let Some(home) = home {
            home.wait_for_other_pool(None, latch, || Lane::Background, None);
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
/// (none started, or shutting down). Background tasks need no permit here:
/// the cap keeps workers free for frame work, and there are none to keep;
/// a permit would also be held while the task blocks, and the thread's own
/// wait further down might need it (a background task of a pool without
/// threads that waits on another pool whose task queues a background task
/// back into it).
fn run_one_unowned(shared: &Shared, floor: Lane) -> bool {
    for &lane in floor.and_above() {
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
                shared
                    .slots
                    .iter()
                    .find_map(|slot| Local::take_lifo(&slot.lanes[lane.index()]))
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

/// Aborts the process if it is dropped during a panic. Guards code in which
/// unwinding would be unsound or would lose tasks: a worker's loop, and the
/// span in which a `join` half or scope task on the caller's stack may still
/// be queued. User closures run inside `catch_unwind`, so only a panic from
/// the scheduler itself (or a user destructor it cannot report) gets here.
pub(crate) struct AbortOnUnwind(pub(crate) &'static str);

impl Drop for AbortOnUnwind {
    #[inline]
    fn drop(&mut self) {
        if std::thread::panicking() {
            abort_with(self.0);
        }
    }
}

#[cold]
#[inline(never)]
fn abort_with(reason: &str) -> ! {
    eprintln!("engine-tasks: panic {reason}; aborting");
    std::process::abort();
}

/// Body of worker thread `index`; it starts as the searcher (the notifier
/// that spawned it handed over its token).
pub(crate) fn run_worker(shared: Arc<Shared>, index: usize) {
    let _abort = AbortOnUnwind("inside a worker thread's scheduler loop");
    instrument::thread_started(std::thread::current().name().unwrap_or("engine-worker"));
    // Wake-ups of this thread are steered off their waker's CPU
    // (placement.rs).
    let placement = shared.sleep.parker(index).placement();
    placement.register_current_thread();
    // SAFETY: worker `index` is spawned once, and this thread is it.
    let local = unsafe { Local::new(&shared, index, true) };
    local.enter(|| loop {
        if let Some(found) = local.find_task(Lane::Background, false) {
            local.run_found(found);
            continue;
        }
        match local.idle(Lane::Background, false, || shared.is_shutdown()) {
            Idle::Found(found) => local.run_found(found),
            Idle::Woke => {}
            Idle::Stopped => break,
        }
    });
    if local.searching.get() {
        shared.sleep.end_search();
    }
    placement.unregister_current_thread();
}

/// Runs every task still queued anywhere in the pool on this thread; used by
/// shutdown once the workers are gone. If another thread holds the guest slot
/// it is inside a wait and runs tasks itself; we take the slot once it leaves.
pub(crate) fn drain(shared: &Shared) {
    loop {
        let drained = with_slot(shared, |local| {
            let local = local?;
            while let Some(found) = local.find_task(Lane::Background, true) {
                local.run_found(found);
            }
            Some(())
        });
        if drained.is_some() {
            return;
        }
        if !run_one_unowned(shared, Lane::Background) {
            std::thread::yield_now();
        }
    }
}

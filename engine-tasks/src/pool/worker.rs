//! A thread's view of the pool: its queues, how it pushes and runs tasks,
//! its slot (a worker's own, or the guest slot an outside thread borrows
//! while it waits), and a worker thread's loop. Where it looks for work is
//! in `search.rs`; how it waits, in `wait.rs`.

use super::wait::{self, run_one_unowned, Idle};
use crate::lane::Lane;
use crate::pool::registry::{Shared, Slot, SlotLane};
use crate::sync::credit::ScopeCredit;
use crate::sync::deque::DequeOwner;
use crate::sync::placement::Placement;
use crate::sync::queue::TaskList;
use crate::sync::ring::RingOwner;
use crate::sync::task::TaskRef;
use crate::trace::instrument;
use crossbeam_utils::Backoff;
use std::cell::Cell;
use std::panic::{self, AssertUnwindSafe};
use std::ptr;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// Consecutive LIFO-slot runs before the ring gets a turn (volt uses 3).
pub(super) const LIFO_STREAK_CAP: u32 = 3;
/// Most tasks moved from the injector per fetch (volt's default batch).
pub(super) const INJECTOR_BATCH: usize = 32;

thread_local! {
    static CURRENT: Cell<*const Local<'static>> = const { Cell::new(ptr::null()) };
}

/// A task found by the search, with what running it requires.
pub(crate) struct Found {
    pub(super) task: TaskRef,
    pub(super) lane: Lane,
    pub(super) background_permit: bool,
}

/// Background permits lent by a wait, and the background depth it hid.
pub(super) struct Lent {
    pub(super) permits: u32,
    pub(super) depth: u32,
}

/// The owner's context of one slot: `!Send`, `!Sync`, one per thread.
pub(crate) struct Local<'a> {
    pub(crate) shared: &'a Shared,
    pub(super) index: usize,
    pub(super) slot: &'a Slot,
    pub(super) rings: [RingOwner<'a>; Lane::COUNT],
    pub(super) joins: [DequeOwner<'a>; Lane::COUNT],
    pub(super) rng: Cell<u64>,
    pub(super) lifo_streak: Cell<u32>,
    pub(super) advertised: Cell<u8>,
    pub(super) searching: Cell<bool>,
    pub(super) lane: Cell<Lane>,
    /// Background tasks running on this thread's stack since its innermost
    /// wait began (a wait lends the permits of those below it and counts
    /// from zero again, see `Local::lend_background_permits`).
    pub(super) background_depth: Cell<u32>,
    /// Background permits held for tasks on this thread's stack since its
    /// innermost wait began.
    pub(super) held_permits: Cell<u32>,
    /// Waits on this thread's stack (a thread that waits runs other tasks
    /// inside the wait, on top of what it waits in).
    pub(super) wait_depth: Cell<u32>,
    /// Completed scope tasks' counts not yet given back (credit.rs).
    pub(crate) credit: ScopeCredit,
    /// The scope key (`TaskRef::scope`) of the task running on this thread.
    pub(super) running_scope: Cell<usize>,
    /// This thread finished the last node of a frame: if it is a free worker,
    /// its next idle period is between frames (see [`Local::idle`]), even
    /// before the frame's thread has noticed that the frame ended.
    pub(super) ended_frame: Cell<bool>,
    /// The profiler's view of the current search for work (instrument.rs).
    pub(super) search: instrument::Search,
}

impl<'a> Local<'a> {
    /// # Safety
    ///
    /// The caller owns slot `index` until the `Local` is dropped: worker
    /// `index`'s thread, or the holder of the guest slot.
    #[cfg_attr(target_os = "linux", link_section = "engine_tasks_frame")]
    pub(super) unsafe fn new(shared: &'a Shared, index: usize, searching: bool) -> Self {
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
    #[cfg_attr(target_os = "linux", link_section = "engine_tasks_frame")]
    pub(super) fn enter<R>(&self, f: impl FnOnce() -> R) -> R {
        struct Restore(*const Local<'static>);
        impl Drop for Restore {
            #[cfg_attr(target_os = "linux", link_section = "engine_tasks_frame")]
            fn drop(&mut self) {
                CURRENT.with(|c| c.set(self.0));
            }
        }
        let erased = (self as *const Local<'_>).cast::<Local<'static>>();
        let _restore = Restore(CURRENT.with(|c| c.replace(erased)));
        f()
    }

    pub(super) fn next_random(&self) -> u64 {
        // xorshift64 (Marsaglia 2003): victim order only needs to differ
        // between threads and rounds.
        let mut x = self.rng.get();
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.rng.set(x);
        x
    }

    pub(super) fn queues(&self, lane: Lane) -> &'a SlotLane {
        &self.slot.lanes[lane.index()]
    }

    // ----- pushing -----

    /// Counts a task of `lane` that this thread submitted to a queue of
    /// another thread's (`Scope::spawn_on_caller`).
    pub(crate) fn count_spawned(&self, lane: Lane) {
        self.slot.counters.lanes[lane.index()].spawned.bump();
    }

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

    /// Counts a join half that found the join deque full as spawned and
    /// run: it runs inline at once, never queued.
    #[cold]
    pub(crate) fn count_unqueued_run(&self, lane: Lane) {
        let counters = &self.slot.counters.lanes[lane.index()];
        counters.spawned.bump();
        counters.executed.bump();
    }

    /// Counts `runs` tasks of `lane` run inline: the nodes of a frame run
    /// alone, or of one thread's walk of a planned frame, counted once at
    /// its end (unlike `run_task`, which counts a task before it runs), so
    /// a node reading the pool's statistics sees the frame's earlier nodes
    /// only once that walk has ended (by the frame's end at the latest).
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

    pub(super) fn push_ring(&self, lane: Lane, task: TaskRef) {
        if let Err(full) = self.rings[lane.index()].push(task) {
            let mut list = TaskList::new();
            self.rings[lane.index()].drain_half(|t| list.push_back(t));
            list.push_back(full.task);
            self.queues(lane).overflow.push_list(list);
        }
    }

    #[inline]
    pub(super) fn advertise(&self, lane: Lane) {
        let bit = 1u8 << lane.index();
        if self.advertised.get() & bit == 0 {
            self.advertised.set(self.advertised.get() | bit);
            // Release: pairs with the Acquire mask load in `steal`, after the
            // task itself was published by its queue.
            self.shared.advertised[lane.index()].fetch_or(1 << self.index, Ordering::Release);
        }
    }

    pub(super) fn unadvertise(&self, lane: Lane) {
        let bit = 1u8 << lane.index();
        if self.advertised.get() & bit != 0 {
            self.advertised.set(self.advertised.get() & !bit);
            // Relaxed: clearing a hint; a stale set bit costs a failed steal,
            // and only this thread sets it again, after its next push.
            self.shared.advertised[lane.index()].fetch_and(!(1 << self.index), Ordering::Relaxed);
        }
    }

    // ----- running -----

    /// Runs tasks from anywhere in the pool, every lane, until none is
    /// queued: a shut-down pool's last runs (`drain`).
    fn run_until_empty(&self) {
        let backoff = Backoff::new();
        loop {
            if let Some(found) = self.find_task(Lane::Background, true) {
                self.run_found(found);
                backoff.reset();
            } else if !self.shared.has_queued_work() {
                return;
            } else {
                // Another thread is moving the work in sight (a steal, a
                // held consumer lock): it lets go within a microsecond
                // unless preempted.
                pause_between_looks(&backoff);
            }
        }
    }

    /// Runs the tasks in this slot's own queues, every lane, until they are
    /// empty, with the slot entered: the guest leaving a pool that shut
    /// down (`in_guest_slot`). A thief moving tasks out of the ring runs
    /// them. One that holds an overflow queue's lock takes at most half a
    /// ring's worth and one more, and this thread's `try_lock` fails
    /// meanwhile, so it yields until that queue is empty or its own again.
    /// That ends: only this slot's owner, this thread, pushes to its
    /// overflow queues, and a thief lets go once it has taken its share.
    #[cold]
    #[inline(never)]
    fn run_own_queues(&self) {
        self.enter(|| 'next: loop {
            for lane in Lane::ALL {
                if let Some(task) = self.pop_local(lane) {
                    self.run_task(task, lane);
                    continue 'next;
                }
            }
            // `len` is never below the true count, and is exact once no
            // consumer holds the lock (`sync/queue.rs`).
            if Lane::ALL
                .iter()
                .all(|&lane| self.queues(lane).overflow.is_empty())
            {
                return;
            }
            std::thread::yield_now();
        });
    }

    #[cfg_attr(target_os = "linux", link_section = "engine_tasks_shared")]
    pub(crate) fn run_found(&self, found: Found) {
        self.hand_on_search(found.lane);
        let permit = u32::from(found.background_permit);
        self.held_permits.set(self.held_permits.get() + permit);
        self.run_task(found.task, found.lane);
        self.held_permits.set(self.held_permits.get() - permit);
        if found.background_permit {
            self.shared.release_background(1);
        }
    }

    /// A thread that blocks in a wait lends the pool the background permits
    /// of the tasks below it on its stack until the wait ends (permits.rs
    /// says why, and why no wake-up is lost). In the wait it runs
    /// background work under the same permits as everyone else.
    pub(super) fn lend_background_permits(&self) -> Lent {
        let lent = Lent {
            permits: self.held_permits.replace(0),
            depth: self.background_depth.replace(0),
        };
        if lent.permits > 0 {
            self.shared.release_background(lent.permits);
        }
        lent
    }

    /// Ends a wait's loan (`lend_background_permits`).
    pub(super) fn take_back_background_permits(&self, lent: Lent) {
        if lent.permits > 0 {
            self.shared.force_acquire_background_permits(lent.permits);
        }
        self.held_permits.set(lent.permits);
        self.background_depth.set(lent.depth);
    }

    /// The guest of a pool without workers is leaving. The pool's helpers
    /// (threads waiting on it from outside, helpers.rs) take only from the
    /// injector, the LIFO slots and the join deques, so tasks left in this
    /// slot's ring and overflow queue would wait for the next guest, which
    /// may never come: move them to the injector and wake the helpers. With
    /// workers running, they steal the tasks.
    #[cfg_attr(target_os = "linux", link_section = "engine_tasks_frame")]
    pub(super) fn hand_queued_to_helpers(&self) {
        if !self.shared.needs_helpers() {
            return;
        }
        for lane in Lane::ALL {
            let mut list = TaskList::new();
            while let Some(task) = self.rings[lane.index()].pop() {
                list.push_back(task);
            }
            if let Some(mut overflow) = self.queues(lane).overflow.try_lock() {
                while let Some(task) = overflow.pop() {
                    list.push_back(task);
                }
            }
            if list.len() > 0 {
                self.shared.injector[lane.index()].push_list(list);
                self.shared.notify(lane);
            }
        }
    }

    /// This thread found work of `lane`. If it was the last searcher, there
    /// may be more, so it passes the search on (see idle.rs): for `lane`,
    /// and for the most urgent lane above it with queued work. While this
    /// thread held the token, a push of a more urgent lane may have been
    /// turned away (idle.rs), and `notify(lane)` reaches only threads that
    /// may run `lane`: a thread waiting for frame-critical work would sleep
    /// on beside that push while this one runs, say, a long background
    /// task.
    pub(super) fn hand_on_search(&self, lane: Lane) {
        if self.searching.replace(false) && self.shared.sleep.end_search() {
            self.shared.notify(lane);
            // No lost push: the push turned away published its task before
            // its SeqCst fence, which read the token we held; `notify`'s
            // SeqCst fence above comes after our release of the token, so
            // the look below sees the task (the pair in idle.rs). If that
            // `notify` woke a thread, this one finds the token taken: a
            // thread that may run `lane` may run every more urgent lane,
            // and searches those first.
            if let Some(urgent) = self.visible_lane(&Lane::ALL[..lane.index()]) {
                self.shared.notify(urgent);
            }
        }
    }

    #[cfg_attr(target_os = "linux", link_section = "engine_tasks_shared")]
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
    #[cfg_attr(target_os = "linux", link_section = "engine_tasks_shared")]
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
    #[cfg_attr(target_os = "linux", link_section = "engine_tasks_shared")]
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

/// Addresses of pool functions a shared frame runs (a worker's loop, a
/// frame thread's wait, the wake-up), as anchors for warming the frame's
/// code (`sync/prefetch.rs`).
pub(crate) fn code_anchors() -> [usize; 3] {
    [
        run_worker as *const () as usize,
        Local::wait_frame as *const () as usize,
        Shared::notify as *const () as usize,
    ]
}

/// Whether the calling thread is one of `shared`'s worker threads (not
/// the guest slot of an outside thread).
#[cfg_attr(target_os = "linux", link_section = "engine_tasks_frame")]
pub(crate) fn is_worker_of(shared: &Shared) -> bool {
    with_current(|local| {
        local.is_some_and(|l| ptr::eq(l.shared, shared) && l.index < shared.worker_count())
    })
}

/// The slot a thread will run in, claimed ahead of running there
/// ([`claim_slot`]), for a caller that must know before (a planned frame
/// queues its helper tasks only if its thread will walk a list).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum SlotClaim {
    /// The thread is a worker or the guest of the pool already.
    Own,
    /// The pool's guest slot, taken for this thread: pass the claim to
    /// [`with_claimed_slot`], which enters and gives it back.
    Guest,
    /// No slot: the thread is in another pool, or the guest slot is held.
    None,
}

/// Claims the slot [`with_slot`] would run in, to run there later with
/// [`with_claimed_slot`], which must follow (a [`SlotClaim::Guest`] holds
/// the pool's guest slot until then).
#[cfg_attr(target_os = "linux", link_section = "engine_tasks_frame")]
pub(crate) fn claim_slot(shared: &Shared) -> SlotClaim {
    let current = CURRENT.with(Cell::get);
    // SAFETY: as in `with_slot`.
    match unsafe { current.as_ref() } {
        Some(local) if ptr::eq(local.shared, shared) => SlotClaim::Own,
        Some(_) => SlotClaim::None,
        None if shared.try_take_guest() => SlotClaim::Guest,
        None => SlotClaim::None,
    }
}

/// [`with_slot`] in the slot that `claim` ([`claim_slot`], on this thread)
/// holds.
#[cfg_attr(target_os = "linux", link_section = "engine_tasks_frame")]
pub(crate) fn with_claimed_slot<R>(
    shared: &Shared,
    claim: SlotClaim,
    f: impl FnOnce(Option<&Local<'_>>) -> R,
) -> R {
    match claim {
        SlotClaim::Own => with_current(|local| f(local)),
        SlotClaim::Guest => in_guest_slot(shared, f),
        SlotClaim::None => f(None),
    }
}

/// `with_slot` for a thread that is not in `shared`.
#[cold]
#[inline(never)]
#[cfg_attr(target_os = "linux", link_section = "engine_tasks_frame")]
fn with_guest_slot<R>(shared: &Shared, f: impl FnOnce(Option<&Local<'_>>) -> R) -> R {
    if shared.try_take_guest() {
        return in_guest_slot(shared, f);
    }
    f(None)
}

/// Runs `f` in the guest slot, which this thread took (`try_take_guest`),
/// and gives the slot back after.
#[cfg_attr(target_os = "linux", link_section = "engine_tasks_frame")]
fn in_guest_slot<R>(shared: &Shared, f: impl FnOnce(Option<&Local<'_>>) -> R) -> R {
    struct ReleaseGuest<'a>(&'a Shared);
    impl Drop for ReleaseGuest<'_> {
        #[cfg_attr(target_os = "linux", link_section = "engine_tasks_frame")]
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
        #[cfg_attr(target_os = "linux", link_section = "engine_tasks_frame")]
        fn drop(&mut self) {
            self.0.unregister_current_thread();
        }
    }
    /// Runs while this thread still owns the slot: see
    /// `Local::hand_queued_to_helpers`.
    struct HandOver<'a, 'b>(&'a Local<'b>);
    impl Drop for HandOver<'_, '_> {
        #[cfg_attr(target_os = "linux", link_section = "engine_tasks_frame")]
        fn drop(&mut self) {
            self.0.hand_queued_to_helpers();
        }
    }
    let _release = ReleaseGuest(shared);
    let placement = shared.sleep.parker(shared.guest_index()).placement();
    placement.register_current_thread();
    let _steered = Steered(placement);
    // SAFETY: `try_take_guest` made this thread the guest slot's only
    // owner until `_release` drops, after `local`.
    let local = unsafe { Local::new(shared, shared.guest_index(), false) };
    let _hand_over = HandOver(&local);
    let result = panic::catch_unwind(AssertUnwindSafe(|| local.enter(|| f(Some(&local)))));
    if shared.is_shutdown() {
        // A spawn from this slot that found the pool open may have pushed
        // after the pool's drop ran the queues and its workers left (a drop
        // inside one of the pool's own tasks waits for no guest): no other
        // thread would run that task. So the guest of a shut-down pool runs
        // what is left in its own queues, as the drop would have, before it
        // gives the slot back; outside the caught panic, so that the tasks'
        // own waits do not run while this thread unwinds. (Ordering: the
        // push, then `notify`'s SeqCst fence, then this load; `close`'s
        // fence pairs with it, so either this sees the shutdown or the
        // drop's drain sees the push.)
        local.run_own_queues();
    }
    match result {
        Ok(value) => value,
        Err(payload) => panic::resume_unwind(payload),
    }
}

/// Whether this thread holds a slot of `shared` now (a worker of it, or its
/// guest inside a wait): it may be running one of `shared`'s tasks.
pub(crate) fn holds_a_slot_of(shared: &Shared) -> bool {
    with_current(|local| local.is_some_and(|local| ptr::eq(local.shared, shared)))
}

/// Whether the calling thread works in a pool other than `shared` (its
/// worker, or a guest there).
pub(crate) fn in_another_pool(shared: &Shared) -> bool {
    with_current(|local| local.is_some_and(|local| !ptr::eq(local.shared, shared)))
}

/// Runs `f` with the thread's current context in whatever pool it is in.
#[cfg_attr(target_os = "linux", link_section = "engine_tasks_frame")]
pub(crate) fn with_current<R>(f: impl FnOnce(Option<&Local<'_>>) -> R) -> R {
    let current = CURRENT.with(Cell::get);
    // SAFETY: as in `with_slot`.
    f(unsafe { current.as_ref() })
}

/// Aborts the process if it is dropped: every normal way out of the region
/// it guards ends with [`done`](Self::done), so only an unwind drops it.
/// Guards code in which unwinding would be unsound or would lose tasks: a
/// worker's loop, and the span in which a `join` half, a scope task or a
/// frame's nodes on the caller's stack may still be queued. User closures
/// run inside `catch_unwind`, so only a panic from the scheduler itself (or
/// a user destructor it cannot report) gets here.
///
/// It does not ask `std::thread::panicking()`: a wait made while the thread
/// already unwinds (a `join` or `scope` in a destructor that runs during a
/// panic, or a pool dropped then, whose queued tasks wait in turn) sees
/// `true` all along and ends normally, while a scheduler panic there may
/// still be caught further down (every task body runs in a
/// `catch_unwind`, and so does a guest's call), freeing a queued half
/// under a thief.
#[must_use = "a guard dropped at once aborts; end its region with `done`"]
pub(crate) struct AbortOnUnwind(&'static str);

impl AbortOnUnwind {
    /// A guard that aborts with `what` in its message.
    #[inline]
    #[cfg_attr(target_os = "linux", link_section = "engine_tasks_frame")]
    pub(crate) fn new(what: &'static str) -> Self {
        AbortOnUnwind(what)
    }

    /// The guarded region ended normally.
    #[inline]
    #[cfg_attr(target_os = "linux", link_section = "engine_tasks_frame")]
    pub(crate) fn done(self) {
        std::mem::forget(self);
    }
}

impl Drop for AbortOnUnwind {
    #[inline]
    fn drop(&mut self) {
        abort_with(self.0);
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
    let abort = AbortOnUnwind::new("inside a worker thread's scheduler loop");
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
        // Leaves once shutdown began and nothing is queued: a look that
        // came back empty while work is still in sight (another thread
        // moving it) looks again (`Local::idle`).
        let stop = || shared.is_shutdown() && !shared.has_queued_work();
        match local.idle(Lane::Background, false, stop) {
            Idle::Found(found) => local.run_found(found),
            Idle::Woke => {}
            Idle::Stopped => break,
        }
    });
    // A push turned away while this thread held the token is passed on.
    local.leave_search();
    placement.unregister_current_thread();
    abort.done();
}

/// Runs every task still queued anywhere in the pool on this thread; used by
/// shutdown once the workers are gone. If another thread holds the guest slot
/// it is inside a wait and runs tasks itself; we take the slot once it leaves,
/// and meanwhile run what no slot owner will, backing off (spins, yields, then
/// sleeps) between looks that find nothing.
pub(crate) fn drain(shared: &Shared) {
    if in_another_pool(shared) {
        // Never `shared`'s guest (`with_slot`): run what no slot owner
        // will. The guest, if any, runs its own queues in its wait. Scope
        // credit this thread may hold is for the scope of the task it runs
        // now (a task settles others as it starts, a wait as it ends),
        // which cannot end before this drop returns anyway: no settle.
        while run_one_unowned(shared) {}
        return;
    }
    // The guest may wait for long (on a blocking task, say): once the
    // backoff's spins and yields are spent, sleep between looks instead of
    // taking a core for the wait.
    let backoff = Backoff::new();
    loop {
        let drained = with_slot(shared, |local| {
            local?.run_until_empty();
            Some(())
        });
        if drained.is_some() {
            return;
        }
        if run_one_unowned(shared) {
            backoff.reset();
        } else {
            pause_between_looks(&backoff);
        }
    }
}

/// Between two looks of a shut-down pool's last runs that found nothing to
/// take: spins, then yields (`backoff`), then sleeps
/// [`SHUTDOWN_LOOK_AGAIN`](wait::SHUTDOWN_LOOK_AGAIN), so that a long wait
/// does not take a core.
fn pause_between_looks(backoff: &Backoff) {
    if backoff.is_completed() {
        std::thread::sleep(wait::SHUTDOWN_LOOK_AGAIN);
    } else {
        backoff.snooze();
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::Pool;
    use std::sync::atomic::AtomicUsize;
    use std::sync::mpsc;

    /// The guest of a pool that shut down runs every task left in its own
    /// queues before it leaves, also those in an overflow queue whose lock
    /// a thief holds at that moment. Before, it left them there, and with
    /// the workers gone nobody ran them.
    #[test]
    fn a_guest_leaving_a_shut_down_pool_waits_out_a_thief_on_its_overflow() {
        const TASKS: usize = 3 * crate::sync::ring::CAPACITY;
        let pool = Pool::builder().threads(0).build().unwrap();
        let shared = pool.shared();
        let ran = Arc::new(AtomicUsize::new(0));
        std::thread::scope(|s| {
            assert!(shared.try_take_guest());
            in_guest_slot(shared, |local| {
                assert!(local.is_some(), "the guest slot");
                for _ in 0..TASKS {
                    let ran = ran.clone();
                    drop(pool.spawn(Lane::Normal, move || {
                        // Relaxed: read after the scope joined every thread.
                        ran.fetch_add(1, Ordering::Relaxed);
                    }));
                }
                let guest = &shared.slots[shared.guest_index()];
                let overflow = &guest.lanes[Lane::Normal.index()].overflow;
                assert!(!overflow.is_empty(), "the ring overflowed");
                let (locked, held) = mpsc::channel();
                let ran_here = &ran;
                s.spawn(move || {
                    let thief = overflow.try_lock().expect("nobody else takes it");
                    let outside = TASKS - overflow.len();
                    locked.send(()).unwrap();
                    // Hold the lock until the guest has run every task
                    // outside the overflow queue, so that it meets the lock
                    // (or, should that never happen, for ten seconds: the
                    // count below then fails the test, not a hang).
                    let give_up = std::time::Instant::now() + std::time::Duration::from_secs(10);
                    // Relaxed: a progress check; the count is exact later.
                    while ran_here.load(Ordering::Relaxed) < outside
                        && std::time::Instant::now() < give_up
                    {
                        std::thread::yield_now();
                    }
                    drop(thief);
                });
                held.recv().unwrap();
                shared.shutdown_and_join();
            });
        });
        // Relaxed: the tasks ran on this thread.
        assert_eq!(ran.load(Ordering::Relaxed), TASKS);
    }
}

//! Where a thread looks for work.
//!
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
//! could run itself; and except once the pool has shut down, when no frame
//! is left to keep threads for (`Local::acquire_background`).
//!

use super::worker::{Found, Local, INJECTOR_BATCH, LIFO_STREAK_CAP};
use crate::lane::Lane;
use crate::pool::registry::{Slot, SlotLane};
use crate::sync::idle::MAX_SLOTS;
use crate::sync::queue::TaskQueue;
use crate::sync::ring::CAPACITY;
use crate::sync::task::TaskRef;
use crate::trace::instrument;
use crossbeam_utils::Backoff;
use std::sync::atomic::Ordering;

impl Local<'_> {
    /// See the module docs. `thorough` ignores the advertisement masks and
    /// looks at every slot: the last look before parking.
    #[cfg_attr(target_os = "linux", link_section = "engine_tasks_shared")]
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
    pub(super) fn wait_for_mover(&self, lane: Lane) -> Option<TaskRef> {
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
    pub(super) fn lane_shows_batch_work(&self, lane: Lane) -> bool {
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
    pub(super) fn first_in_lanes(
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
                self.shared.release_background(1);
            }
        }
        None
    }

    /// May this thread start a background task? `Some(true)`: it took one
    /// of the pool's permits (release it after the task). `Some(false)`: it
    /// already runs background work further up its stack, so a nested one
    /// does not add concurrency and needs no permit (requiring one would
    /// deadlock a background task waiting for its own children at the cap),
    /// or the pool is shutting down: no frame is left for the cap to keep
    /// threads for, and a thread turned away then would leave the pool
    /// (`run_worker`) with the work still queued. `None`: the cap is
    /// reached.
    pub(super) fn acquire_background(&self) -> Option<bool> {
        if self.background_depth.get() > 0 {
            Some(false)
        } else if self.shared.try_acquire_background() {
            Some(true)
        } else if self.shared.is_shutdown() {
            Some(false)
        } else {
            None
        }
    }

    /// The most urgent lane less urgent than `floor` with queued work
    /// anywhere in the pool (a thorough look, for the parking path).
    #[cfg_attr(target_os = "linux", link_section = "engine_tasks_shared")]
    pub(super) fn visible_lane_below(&self, floor: Lane) -> Option<Lane> {
        self.visible_lane(&Lane::ALL[floor.index() + 1..])
    }

    /// The first of `lanes` with queued work anywhere in the pool: its
    /// injector or any thread's queues (a thorough look).
    pub(super) fn visible_lane(&self, lanes: &[Lane]) -> Option<Lane> {
        lanes
            .iter()
            .copied()
            .find(|&lane| self.shared.has_visible_work(lane))
    }

    pub(super) fn background_visible(&self, thorough: bool) -> bool {
        let lane = Lane::Background;
        let shared = self.shared;
        self.slot.has_work(lane)
            || !shared.injector[lane.index()].is_empty()
            // Relaxed: a hint; see `advertise`.
            || shared.advertised[lane.index()].load(Ordering::Relaxed) & !(1 << self.index) != 0
            || (thorough && shared.slots.iter().any(|s| s.has_work(lane)))
    }

    #[cfg_attr(target_os = "linux", link_section = "engine_tasks_shared")]
    pub(super) fn find_in_lane(&self, lane: Lane, thorough: bool) -> Option<TaskRef> {
        self.pop_local(lane)
            .or_else(|| self.pop_injector(lane))
            .or_else(|| self.steal(lane, thorough))
    }

    pub(super) fn take_lifo(q: &SlotLane) -> Option<TaskRef> {
        q.lifo.take()
    }

    pub(super) fn pop_local(&self, lane: Lane) -> Option<TaskRef> {
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
    pub(super) fn refill(&self, queue: &TaskQueue, lane: Lane, limit: usize) -> Option<TaskRef> {
        self.refill_counted(queue, lane, limit)
            .map(|(task, _)| task)
    }

    /// [`Local::refill`], also returning how many tasks moved to the ring.
    #[cfg_attr(target_os = "linux", link_section = "engine_tasks_shared")]
    pub(super) fn refill_counted(
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

    pub(super) fn pop_injector(&self, lane: Lane) -> Option<TaskRef> {
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

    pub(super) fn steal(&self, lane: Lane, thorough: bool) -> Option<TaskRef> {
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

    pub(super) fn steal_from(&self, victim: &Slot, lane: Lane) -> Option<(TaskRef, u32)> {
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
}

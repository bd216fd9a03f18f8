//! Scheduler counters, written without locks and read without locks.
//!
//! Each slot's counters have a single writer (the slot's current owner), so a
//! bump is a relaxed load and store, not a read-modify-write: no contention
//! and no lock prefix on the hot path. Readers see each counter atomically;
//! a snapshot is not one instant across counters.

use crate::clock;
use crate::lane::Lane;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// A counter with one writer at a time.
#[derive(Default)]
pub(crate) struct Counter(AtomicU64);

impl Counter {
    #[inline(always)]
    pub(crate) fn bump(&self) {
        self.add(1);
    }

    #[inline(always)]
    pub(crate) fn add(&self, n: u64) {
        // Relaxed: single writer; readers only need an untorn value.
        self.0
            .store(self.0.load(Ordering::Relaxed) + n, Ordering::Relaxed);
    }

    /// For counters with many writers (threads outside the pool).
    #[inline(always)]
    pub(crate) fn add_shared(&self, n: u64) {
        // Relaxed: a statistic.
        self.0.fetch_add(n, Ordering::Relaxed);
    }

    pub(crate) fn get(&self) -> u64 {
        // Relaxed: a statistic.
        self.0.load(Ordering::Relaxed)
    }
}

#[derive(Default)]
pub(crate) struct LaneCounters {
    pub(crate) spawned: Counter,
    pub(crate) executed: Counter,
    pub(crate) stolen_tasks: Counter,
    pub(crate) steal_operations: Counter,
    pub(crate) failed_steals: Counter,
    pub(crate) lifo_hits: Counter,
}

impl LaneCounters {
    fn snapshot(&self) -> LaneStats {
        LaneStats {
            spawned: self.spawned.get(),
            executed: self.executed.get(),
            stolen_tasks: self.stolen_tasks.get(),
            steal_operations: self.steal_operations.get(),
            failed_steals: self.failed_steals.get(),
            lifo_hits: self.lifo_hits.get(),
        }
    }
}

#[derive(Default)]
pub(crate) struct SlotCounters {
    pub(crate) lanes: [LaneCounters; Lane::COUNT],
    pub(crate) parks: Counter,
    pub(crate) unparks: Counter,
    /// Clock ticks spent parked, over finished parks.
    parked_ticks: Counter,
    /// When the current park began (`0`: not parked).
    parked_since: AtomicU64,
    /// Early wake-ups before a forecast frame (early_wake.rs), and the
    /// nanoseconds spent looking for its work.
    early_wakes: Counter,
    early_finds: Counter,
    early_wait_nanos: Counter,
    /// Cache lines of the frame's data and code prefetched during those
    /// looks.
    warmed_lines: Counter,
}

impl SlotCounters {
    /// The slot's owner is about to park.
    pub(crate) fn begin_park(&self) {
        self.parks.bump();
        // Relaxed: a statistic; `max(1)` keeps 0 meaning "awake".
        self.parked_since
            .store(clock::ticks().max(1), Ordering::Relaxed);
    }

    /// The slot's owner woke up.
    pub(crate) fn end_park(&self) {
        self.unparks.bump();
        // Relaxed: a statistic.
        let since = self.parked_since.swap(0, Ordering::Relaxed);
        self.parked_ticks.add(clock::ticks().saturating_sub(since));
    }

    /// Whether the slot's owner is parked now (a hint).
    #[cfg(test)]
    pub(crate) fn is_parked(&self) -> bool {
        // Relaxed: a statistic.
        self.parked_since.load(Ordering::Relaxed) != 0
    }

    /// Ticks parked up to `now`, including a park still going on. Racy by
    /// one park's worth at most, which is fine for statistics.
    #[cfg_attr(target_os = "linux", link_section = "engine_tasks_frame")]
    pub(crate) fn parked_ticks_at(&self, now: u64) -> u64 {
        // Relaxed: a statistic.
        let since = self.parked_since.load(Ordering::Relaxed);
        let current = if since == 0 {
            0
        } else {
            now.saturating_sub(since)
        };
        self.parked_ticks.get() + current
    }

    /// The slot's owner woke early for a forecast frame, looked for its
    /// work for `looked` and warmed `warmed_lines` lines of its data and
    /// code.
    pub(crate) fn early_wake(&self, looked: Duration, warmed_lines: usize, found: bool) {
        self.early_wakes.bump();
        if found {
            self.early_finds.bump();
        }
        self.early_wait_nanos.add(looked.as_nanos() as u64);
        self.warmed_lines.add(warmed_lines as u64);
    }

    pub(crate) fn snapshot(&self) -> ThreadStats {
        ThreadStats {
            lanes: std::array::from_fn(|i| self.lanes[i].snapshot()),
            parks: self.parks.get(),
            unparks: self.unparks.get(),
            early_wakes: self.early_wakes.get(),
            early_finds: self.early_finds.get(),
            early_wait: Duration::from_nanos(self.early_wait_nanos.get()),
            warmed_lines: self.warmed_lines.get(),
        }
    }
}

/// Counters for one lane.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct LaneStats {
    /// Tasks submitted.
    pub spawned: u64,
    /// Tasks started (each then runs to completion or panics). Counted
    /// before the task body, so a thread that saw a task finish sees it.
    /// A task cancelled before it started counts too, when a thread takes
    /// it and ends it as cancelled. The nodes of a task-graph frame that
    /// runs alone on its own thread count at the frame's end, on that
    /// thread's slot, and not at all when the thread has no slot in the
    /// pool (another pool's thread, or the guest slot was taken); those of
    /// a planned frame count on the slot of each thread that walked the
    /// plan, as it leaves its walk.
    pub executed: u64,
    /// Tasks taken from another thread's queues.
    pub stolen_tasks: u64,
    /// Steal attempts on a peer that advertised work.
    pub steal_operations: u64,
    /// Steal attempts that came back empty.
    pub failed_steals: u64,
    /// Tasks taken from the thread's own LIFO slot.
    pub lifo_hits: u64,
}

impl LaneStats {
    fn add(&mut self, other: &LaneStats) {
        self.spawned += other.spawned;
        self.executed += other.executed;
        self.stolen_tasks += other.stolen_tasks;
        self.steal_operations += other.steal_operations;
        self.failed_steals += other.failed_steals;
        self.lifo_hits += other.lifo_hits;
    }
}

/// Counters for one thread slot of the pool.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct ThreadStats {
    /// Per-lane counters, indexed by [`Lane::index`].
    pub lanes: [LaneStats; Lane::COUNT],
    /// Times the thread went to sleep.
    pub parks: u64,
    /// Times the thread woke from sleep.
    pub unparks: u64,
    /// Times the thread woke on its own just before a frame that a paced
    /// frame loop was expected to start (see [`crate::EarlyWake`]).
    pub early_wakes: u64,
    /// Of those, the ones whose look found the frame's work: a low share
    /// says the forecasts miss (the frame came later than the look, or
    /// not at all).
    pub early_finds: u64,
    /// Time spent looking for the expected frame's work after those
    /// wake-ups: the CPU that waking early costs.
    pub early_wait: Duration,
    /// Cache lines of the expected frame's data and code (the pool's and
    /// the graph's state, the graph's arrays, the engine's code) that the
    /// thread prefetched during those looks, so that the frame starts on
    /// lines already in a cache.
    pub warmed_lines: u64,
}

impl ThreadStats {
    /// The lanes added up.
    pub fn total(&self) -> LaneStats {
        let mut sum = LaneStats::default();
        for lane in &self.lanes {
            sum.add(lane);
        }
        sum
    }
}

/// A lock-free snapshot of the pool's counters ([`crate::PoolHandle::stats`]).
///
/// For a debug overlay, per thread:
///
/// ```
/// use engine_tasks::Pool;
///
/// let pool = Pool::builder().threads(2).build().unwrap();
/// pool.parallel_for(0..10_000, 100, |_| {});
///
/// let stats = pool.stats();
/// // The workers, then the guest slot this thread used while it waited.
/// assert_eq!(stats.threads.len(), pool.threads() + 1);
/// for (slot, thread) in stats.threads.iter().enumerate() {
///     let work = thread.total();
///     println!("slot {slot}: ran {} tasks, stole {}", work.executed, work.stolen_tasks);
/// }
/// assert!(stats.threads_started <= 2);
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PoolStats {
    /// One entry per worker slot, then one for the guest slot that a thread
    /// outside the pool uses while it waits in `join`/`scope`.
    pub threads: Vec<ThreadStats>,
    /// Tasks submitted and run by threads that held no slot.
    pub external: ThreadStats,
    /// Worker threads started so far.
    pub threads_started: usize,
    /// Thread spawns that failed.
    pub spawn_failures: u64,
}

impl PoolStats {
    /// Counters of one lane over every thread.
    pub fn lane(&self, lane: Lane) -> LaneStats {
        let mut sum = self.external.lanes[lane.index()];
        for thread in &self.threads {
            sum.add(&thread.lanes[lane.index()]);
        }
        sum
    }

    /// Counters over every lane and thread.
    pub fn total(&self) -> LaneStats {
        let mut sum = LaneStats::default();
        for lane in Lane::ALL {
            sum.add(&self.lane(lane));
        }
        sum
    }

    /// Total parks over every thread.
    pub fn parks(&self) -> u64 {
        self.threads.iter().map(|t| t.parks).sum()
    }

    /// Total wake-ups over every thread.
    pub fn unparks(&self) -> u64 {
        self.threads.iter().map(|t| t.unparks).sum()
    }
}

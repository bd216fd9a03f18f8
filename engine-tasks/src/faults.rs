//! Fault injection for tests and the soak tool (cargo feature
//! `fault-injection`; without it every hook is a constant `false`).
//!
//! A [`FaultPlan`] gives, per injection point, the chance in a million that
//! a call fails. The points: a worker or blocking thread failing to start,
//! a spawned task's or blocking task's body panicking before it runs, a
//! graph node's closure panicking, (consulted by the caller's own types through
//! [`should_fail`]) a captured value panicking in its destructor, a
//! thread pausing just after what may be its last touch of a frame or a
//! join, and a spawn pausing between its shutdown check and its push. Each
//! point counts how often it fired.
//!
//! # The last-touch pause
//!
//! A thread's last touch of a frame, a join or a scope is the step after
//! which another thread may end it, and its owner reset or free what it
//! lives in: a release of a node or a count of a sink that was not the
//! last, the push of the last node it held, a latch's count that was not
//! the last, or the setting of a latch and the wake-up after it. Between
//! that step and the return of the call that made it lies a window of a
//! few instructions, which a test or Miri's scheduler seldom stops a
//! thread in. The pause holds the thread there, inside that call, long
//! enough for the others to end the frame and move on: code that touched
//! the freed memory after its last touch, or a call that took a reference
//! to it (valid until the call returns), would then overlap its freeing,
//! which Miri reports.
//!
//! The points sit in the calls that make these steps (`Latch`'s count-down,
//! the frame's releases, sink counts and node tasks), so some pauses fall
//! where the step was not the last (a release with more to follow, the
//! owner counting its own latch, a latch held by an `Arc`): those only
//! delay the thread, by at most [`LAST_TOUCH_PAUSE`]; no point is reached
//! with a lock held. The frame's thread and a planned frame's helpers
//! count their sinks with no pause: they hold the frame while they count.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

/// Where a fault can be injected.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Site {
    /// Starting a worker or blocking-pool thread fails.
    ThreadSpawn = 0,
    /// A spawned task panics before its body runs.
    TaskBody = 1,
    /// A task-graph node panics before its closure runs.
    NodeBody = 2,
    /// A value captured by a task panics when dropped (the value's own
    /// `Drop` asks [`should_fail`]).
    CapturedDrop = 3,
    /// A blocking-pool task panics before its body runs.
    BlockingBody = 4,
    /// A thread pauses for [`LAST_TOUCH_PAUSE`] just after what may be its
    /// last touch of a frame or a join, before the call that made it
    /// returns (module docs).
    LastTouch = 5,
    /// A spawn from a thread that holds a slot of the pool (a worker, or a
    /// thread waiting as its guest) pauses for [`SPAWN_PUSH_PAUSE`] after
    /// it found the pool open and before it pushes the task: the window in
    /// which the pool's drop may run and return.
    SpawnPush = 6,
}

const SITES: usize = 7;

/// How long a [`Site::LastTouch`] pause lasts: far longer than another
/// thread takes to end a frame and return from `run` (a few µs), short
/// enough that a test may pause hundreds of times.
pub const LAST_TOUCH_PAUSE: Duration = if cfg!(miri) {
    Duration::from_millis(50)
} else {
    Duration::from_micros(200)
};

/// How long a [`Site::SpawnPush`] pause lasts: long enough for another
/// thread to shut the pool down and its workers to exit, even on a busy
/// host that holds a thread up for a millisecond now and then.
pub const SPAWN_PUSH_PAUSE: Duration = if cfg!(miri) {
    Duration::from_millis(50)
} else {
    Duration::from_millis(2)
};

/// Chances, in a million calls, that each site fails.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct FaultPlan {
    /// See [`Site::ThreadSpawn`].
    pub thread_spawn: u32,
    /// See [`Site::TaskBody`].
    pub task_body: u32,
    /// See [`Site::NodeBody`].
    pub node_body: u32,
    /// See [`Site::CapturedDrop`].
    pub captured_drop: u32,
    /// See [`Site::BlockingBody`].
    pub blocking_body: u32,
    /// See [`Site::LastTouch`].
    pub last_touch: u32,
    /// See [`Site::SpawnPush`].
    pub spawn_push: u32,
}

static CHANCE: [AtomicU32; SITES] = [const { AtomicU32::new(0) }; SITES];
static FIRED: [AtomicU64; SITES] = [const { AtomicU64::new(0) }; SITES];

/// Installs `plan` for the whole process (replacing the previous one).
pub fn set_plan(plan: FaultPlan) {
    let chances = [
        plan.thread_spawn,
        plan.task_body,
        plan.node_body,
        plan.captured_drop,
        plan.blocking_body,
        plan.last_touch,
        plan.spawn_push,
    ];
    for (slot, chance) in CHANCE.iter().zip(chances) {
        // Relaxed: a test knob; threads see it soon enough.
        slot.store(chance.min(1_000_000), Ordering::Relaxed);
    }
}

/// How often `site` has fired so far.
pub fn fired(site: Site) -> u64 {
    // Relaxed: a statistic.
    FIRED[site as usize].load(Ordering::Relaxed)
}

/// Whether this call at `site` should fail, by the installed plan.
#[inline]
pub fn should_fail(site: Site) -> bool {
    if !cfg!(feature = "fault-injection") {
        return false;
    }
    // Relaxed: a test knob.
    let chance = CHANCE[site as usize].load(Ordering::Relaxed);
    if chance == 0 || next_random() % 1_000_000 >= u64::from(chance) {
        return false;
    }
    // Relaxed: a statistic.
    FIRED[site as usize].fetch_add(1, Ordering::Relaxed);
    true
}

/// Panics with an "injected fault" message if `site` should fail.
#[inline]
pub(crate) fn maybe_panic(site: Site) {
    if should_fail(site) {
        panic!("injected fault at {site:?}");
    }
}

/// Pauses the thread for [`LAST_TOUCH_PAUSE`] if [`Site::LastTouch`] should
/// fail, by the installed plan: call it just after a step that may be the
/// thread's last touch of a frame or a join (module docs), with no lock
/// held.
#[inline]
pub(crate) fn maybe_pause_after_last_touch() {
    if should_fail(Site::LastTouch) {
        std::thread::sleep(LAST_TOUCH_PAUSE);
    }
}

/// Pauses the thread for [`SPAWN_PUSH_PAUSE`] if [`Site::SpawnPush`] should
/// fail, by the installed plan: call it between a spawn's shutdown check
/// and its push.
#[inline]
pub(crate) fn maybe_pause_before_push() {
    if should_fail(Site::SpawnPush) {
        std::thread::sleep(SPAWN_PUSH_PAUSE);
    }
}

fn next_random() -> u64 {
    use std::cell::Cell;
    thread_local! {
        static STATE: Cell<u64> = Cell::new({
            let local = 0u8;
            (&local as *const u8 as u64) ^ 0x9E37_79B9_7F4A_7C15
        });
    }
    STATE.with(|s| {
        let mut x = s.get() | 1;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        s.set(x);
        x
    })
}

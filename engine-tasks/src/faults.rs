//! Fault injection for tests and the soak tool (cargo feature
//! `fault-injection`; without it every hook is a constant `false`).
//!
//! A [`FaultPlan`] gives, per injection point, the chance in a million that
//! a call fails. The points: a worker or blocking thread failing to start,
//! a spawned task's or blocking task's body panicking before it runs, a
//! graph node's closure panicking, (consulted by the caller's own types through
//! [`should_fail`]) a captured value panicking in its destructor, and a
//! thread pausing just after it handed over the last it held of a frame or
//! a join. Each point counts how often it fired.
//!
//! The pause is for the windows between a hand-over and the return of the
//! call that made it, where another thread may end the frame (or the join)
//! and free what the pausing thread used: rare by nature, so a test or
//! Miri seldom sees a thread stopped there. A pause holds the thread there
//! long enough for the others to end the frame and move on, and code that
//! touched the freed memory after the hand-over would then do so after it
//! was freed, which Miri reports.

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
    /// A thread pauses for [`HAND_OFF_PAUSE`] just after it handed over
    /// what kept a frame or a join from ending (a release or a sink's
    /// count that was not the last, a latch's count or its setting), before
    /// the call that did so returns.
    HandOff = 5,
}

const SITES: usize = 6;

/// How long a [`Site::HandOff`] pause lasts: far longer than another
/// thread takes to end a frame and return from `run` (a few µs), short
/// enough that a test may pause hundreds of times.
pub const HAND_OFF_PAUSE: Duration = if cfg!(miri) {
    Duration::from_millis(50)
} else {
    Duration::from_micros(200)
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
    /// See [`Site::HandOff`].
    pub hand_off: u32,
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
        plan.hand_off,
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

/// Pauses the thread for [`HAND_OFF_PAUSE`] if [`Site::HandOff`] should
/// fail, by the installed plan (module docs). Call it only where the
/// thread holds nothing another thread waits for: right after a hand-over.
#[inline]
pub(crate) fn maybe_pause_after_hand_off() {
    if should_fail(Site::HandOff) {
        std::thread::sleep(HAND_OFF_PAUSE);
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

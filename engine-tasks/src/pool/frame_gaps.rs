//! How soon the pool's next task-graph frame began after each frame's end.
//!
//! A pool's threads that run out of work at a frame's end wait a while for
//! the next frame before they park, when the next frame is expected within
//! microseconds (`LINGER_GAP_NANOS` in `graph/runtime/policy.rs`). The gap
//! that decides it is the one *after the frame*, until whichever frame the
//! pool runs next, not the one between two frames of the same graph. A
//! game that runs two graphs a tick (a simulation graph, then a render
//! graph built from its results) and sleeps after the second sees 16 ms
//! between two frames of either graph at 60 Hz. Its first graph's frames
//! are followed within microseconds by the second's, so threads that
//! park after the first are woken by the second at once. In-process runs
//! on the 2-core development VM (the 256-node benchmark graph, 1 µs a node,
//! 60 Hz) found that wake-up paid by the second graph's thread (9–46 µs
//! to queue its helper, the steering and the futex wake included) and its
//! worker starting 20–80 µs late: frames 44 µs longer than the first
//! graph's (`docs/performance/paced-ticks-and-nodes.md`).
//!
//! So the pool numbers the frames' ends and keeps, for each of the last
//! [`GAP_SLOTS`] ends, the gap until the next frame began (of any graph).
//! A graph remembers the number of its own last end and, when its next
//! frame starts, asks for the gap after it ([`FrameGaps::gap_after`]); if
//! no frame began since (the usual single-graph loop), the gap is its own.
//! A steady gap too long to linger through (game code between the
//! graphs) is forecast instead (`NextFrame::expect_soon` in
//! `early_wake.rs`).
//!
//! The same game's second graph also finds its data cold, though the pool
//! was busy just before its frame: its nodes last ran a tick ago, before
//! the loop's sleep. So the pool also counts the frames that begin after
//! an idle gap ([`FrameGaps::idle_starts`]), and a graph whose frame sees
//! the count moved since its last frame prefetches as after an idle gap.
//! With both, and the early wake-ups fixed for such loops
//! (`early_wake.rs`), the second graph's frames took 141–147 µs against
//! 177–183 µs before, in three alternating runs of each build (the first
//! graph's 154–166 µs against 149–231), and the worker parked 1.04–1.14
//! times a tick instead of 2.1 (`docs/performance/paced-ticks-and-nodes.md`).
//!
//! Everything here is a hint in relaxed atomics: a gap lost to a race, or
//! to more than [`GAP_SLOTS`] ends since, costs one frame's choice of
//! lingering or parking, never a task.

use std::sync::atomic::{AtomicU64, Ordering};

/// Ends whose following gaps are kept: more than the graphs a game runs
/// per tick, so that each finds its own gap a tick later.
pub(crate) const GAP_SLOTS: usize = 8;
/// Bits of a slot that hold the gap; the rest hold the end's number. 48
/// bits of ticks are about 16 hours at 5 GHz (a longer gap is clamped);
/// the 16 left tell 65,535 ends apart, far more than the slots.
const GAP_BITS: u32 = 48;
const GAP_MASK: u64 = (1 << GAP_BITS) - 1;

/// See the module docs.
pub(crate) struct FrameGaps {
    /// Task-graph frames ended so far: the number of the latest end.
    ended: AtomicU64,
    /// When the latest frame ended (ticks; 0: none yet).
    last_end: AtomicU64,
    /// For end `n`, slot `n % GAP_SLOTS`: `n`'s low bits above the gap in
    /// ticks until the next frame began. A slot whose number is not `n`'s
    /// has no gap for it yet (or lost it to a later end).
    gaps: [AtomicU64; GAP_SLOTS],
    /// Frames that began after an idle gap of the pool (a paced loop's
    /// sleep), so far.
    idle_starts: AtomicU64,
}

impl FrameGaps {
    pub(crate) fn new() -> Self {
        FrameGaps {
            ended: AtomicU64::new(0),
            last_end: AtomicU64::new(0),
            gaps: std::array::from_fn(|_| AtomicU64::new(0)),
            idle_starts: AtomicU64::new(0),
        }
    }

    /// A frame ended at `end_tick`: returns the end's number, for
    /// [`gap_after`](Self::gap_after).
    #[cfg_attr(target_os = "linux", link_section = "engine_tasks_frame")]
    pub(crate) fn frame_ended(&self, end_tick: u64) -> u64 {
        // Relaxed: published by the Release below. The tick goes first,
        // and the number's Release pairs with the Acquire load in
        // `frame_began`: a frame that sees this end's number sees its tick,
        // and one that begins between the two pairs the new tick with the
        // end before this one, whose gap is taken already.
        self.last_end.store(end_tick, Ordering::Relaxed);
        self.ended.fetch_add(1, Ordering::Release) + 1
    }

    /// A frame began at `start_tick`: the first to begin after the latest
    /// end records the gap since.
    #[cfg_attr(target_os = "linux", link_section = "engine_tasks_frame")]
    pub(crate) fn frame_began(&self, start_tick: u64) {
        // Acquire: pairs with the Release in `frame_ended`, so the tick read
        // below is this end's or a later one's. Relaxed, the rest: a hint
        // (module docs).
        let end = self.ended.load(Ordering::Acquire);
        if end == 0 {
            return;
        }
        let slot = &self.gaps[end as usize % GAP_SLOTS];
        if slot.load(Ordering::Relaxed) >> GAP_BITS == tag(end) {
            return;
        }
        let gap = start_tick.saturating_sub(self.last_end.load(Ordering::Relaxed));
        slot.store(tag(end) << GAP_BITS | gap.min(GAP_MASK), Ordering::Relaxed);
    }

    /// The gap after end `end` until the pool's next frame began, in ticks,
    /// if one began since and the gap is still kept.
    #[cfg_attr(target_os = "linux", link_section = "engine_tasks_frame")]
    pub(crate) fn gap_after(&self, end: u64) -> Option<u64> {
        // Relaxed: a hint (module docs).
        let slot = self.gaps[end as usize % GAP_SLOTS].load(Ordering::Relaxed);
        (end != 0 && slot >> GAP_BITS == tag(end)).then_some(slot & GAP_MASK)
    }

    /// Counts a frame that begins after an idle gap of the pool; returns
    /// [`idle_starts`](Self::idle_starts) with it.
    pub(crate) fn idle_start(&self) -> u64 {
        // Relaxed: a hint (module docs).
        self.idle_starts.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// How many frames began after an idle gap of the pool so far: a graph
    /// whose frames saw this change since its last frame had its data left
    /// in the caches through an idle gap (`Caches` in
    /// `graph/runtime/frame.rs`).
    #[cfg_attr(target_os = "linux", link_section = "engine_tasks_frame")]
    pub(crate) fn idle_starts(&self) -> u64 {
        // Relaxed: a hint (module docs).
        self.idle_starts.load(Ordering::Relaxed)
    }

    /// When the latest frame ended (ticks; 0: none yet).
    pub(crate) fn last_end(&self) -> u64 {
        // Relaxed: a hint (module docs).
        self.last_end.load(Ordering::Relaxed)
    }
}

/// End `end`'s tag: its low bits, never 0 for an end (ends count from 1,
/// and a tag of 0 would match an empty slot after 2^16 ends).
fn tag(end: u64) -> u64 {
    (end - 1) % ((1 << (64 - GAP_BITS)) - 1) + 1
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn the_gap_after_an_end_is_the_next_begin_of_any_frame() {
        let gaps = FrameGaps::new();
        gaps.frame_began(100);
        let first = gaps.frame_ended(1_000);
        assert_eq!(gaps.gap_after(first), None, "no frame began since");
        // Another graph's frame begins 30 ticks after; its end is followed
        // by the first graph's next frame, 16,000 ticks later.
        gaps.frame_began(1_030);
        let second = gaps.frame_ended(2_000);
        gaps.frame_began(18_000);
        // A third frame beginning later leaves the gap as it was.
        gaps.frame_began(19_000);
        assert_eq!(gaps.gap_after(first), Some(30));
        assert_eq!(gaps.gap_after(second), Some(16_000));
        assert_eq!(gaps.last_end(), 2_000);
    }

    #[test]
    fn a_gap_is_kept_for_the_last_slots_ends_only() {
        let gaps = FrameGaps::new();
        let mut ends = Vec::new();
        for frame in 0..GAP_SLOTS as u64 + 3 {
            gaps.frame_began(frame * 100);
            ends.push(gaps.frame_ended(frame * 100 + 90));
        }
        gaps.frame_began(10_000);
        let kept: Vec<bool> = ends.iter().map(|&e| gaps.gap_after(e).is_some()).collect();
        // The ends before the last `GAP_SLOTS` lost their slots; the very
        // last has its gap from the begin just now.
        let lost = ends.len() - GAP_SLOTS;
        assert!(kept[..lost].iter().all(|&k| !k), "{kept:?}");
        assert!(kept[lost..].iter().all(|&k| k), "{kept:?}");
        assert_eq!(gaps.gap_after(*ends.last().unwrap()), Some(10_000 - 1_090));
        assert_eq!(gaps.gap_after(0), None, "0 is no end");
    }

    #[test]
    fn tags_wrap_without_matching_an_empty_slot() {
        let limit = (1u64 << (64 - GAP_BITS)) - 1;
        assert_eq!(tag(1), 1);
        assert_eq!(tag(limit), limit);
        assert_eq!(tag(limit + 1), 1);
        assert!((1..3 * limit).all(|end| tag(end) != 0));
    }
}

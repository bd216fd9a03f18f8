//! Frames that the frame's thread runs alone.
//!
//! When the last frames were too light to be worth a second thread
//! ([`ShareThreshold`]), the frame's thread runs the next frame by
//! itself: ready nodes wait in [`ReadyAlone`], a private list per lane,
//! instead of the pool's queues, and dependencies are counted without
//! read-modify-writes (`Countdown::release_alone`). No other thread can
//! take part, so none has to be told about anything. On the 256-node
//! benchmark graph with empty nodes this halves the frame (see the README).
//!
//! A frame can turn out heavier than the ones before it, and a graph's
//! first frame has nothing before it (so it starts alone too). After every
//! node of a timed graph or of a first frame, and every [`CHECK_EVERY`]
//! nodes otherwise, the thread checks the time the frame has taken so far
//! against the same rule; once it says yes, the thread *hands over*: it
//! counts down the frame's latch for the sinks that already ran, queues
//! every ready node in the pool (most urgent first, waking a thread per
//! lane), and then waits for the frame like any shared frame. From there on
//! every thread counts with `release`; the queues' release/acquire pairs
//! order this thread's plain counts before them. The nodes released later
//! in a handed-over frame wake threads by their `wakes` flags, which change
//! only between frames (a woken thread that finds more work still hands the
//! search on); the next frame decides anew.
//!
//! States: *alone* (a node runs or the lists hold ready nodes) → either
//! *done* (the lists are empty: every node ran, as the graph is a DAG and
//! only this thread releases nodes) or *handed over* (the lists are empty
//! and their nodes are queued).

use super::{ShareThreshold, Shared};
use crate::clock;
use crate::graph::{FrameSharing, ReadyOrder};
use crate::lane::Lane;
use crate::registry;
use crate::worker::Local;
use std::collections::VecDeque;

/// How many nodes of an untimed graph run between two looks at the clock
/// (a timed graph reads it after every node anyway): a tick read costs
/// about 17 ns on the development VM, so a look every 32 nodes costs under
/// 1 ns per node, and a frame that turns heavy is handed over within 32
/// node times. An untimed graph of fewer nodes never hands over; its next
/// frame is shared if this one's wall time says so.
pub(super) const CHECK_EVERY: u32 = 32;

/// When a frame run alone hands over: once the time since `start_tick`
/// passes `share_above` for the nodes run so far.
pub(super) struct HandOverRule {
    start_tick: u64,
    /// The [`ShareThreshold`] in ticks: the frame's work, and a node's.
    frame_ticks: u64,
    node_ticks: u64,
    /// Look after every this many nodes (1, or [`CHECK_EVERY`]).
    check_every: u32,
}

impl HandOverRule {
    pub(super) fn new(
        share_above: ShareThreshold,
        start_tick: u64,
        nanos_per_tick: f64,
        check_every: u32,
    ) -> Self {
        // Float to integer casts saturate: `Duration::MAX` stays out of
        // reach.
        let ticks = |nanos: f64| (nanos / nanos_per_tick).ceil() as u64;
        HandOverRule {
            start_tick,
            frame_ticks: ticks(share_above.frame_nanos),
            node_ticks: ticks(share_above.node_nanos),
            check_every,
        }
    }

    /// [`ShareThreshold::worth_a_second_thread`] for the frame so far, at
    /// tick `now` after `ran` nodes, in integers.
    fn says_hand_over(&self, now: u64, ran: u32) -> bool {
        let elapsed = now.wrapping_sub(self.start_tick);
        elapsed >= self.frame_ticks && elapsed >= self.node_ticks.saturating_mul(u64::from(ran))
    }
}

/// The ready nodes of a frame run alone, per lane. Each list has room for
/// every node of the graph, and a node is ready at most once per frame, so
/// pushing never allocates.
pub(super) struct ReadyAlone {
    lanes: [VecDeque<u32>; Lane::COUNT],
    /// Each node's lane, apart from the nodes' larger records: the lists
    /// are filled without touching them.
    lane_of: Box<[Lane]>,
    /// Critical path first pushes every batch least urgent first and pops
    /// the newest; FIFO pops the oldest.
    newest_first: bool,
}

impl ReadyAlone {
    pub(super) fn new(lane_of: Box<[Lane]>, order: ReadyOrder) -> Self {
        let nodes = lane_of.len();
        ReadyAlone {
            lanes: std::array::from_fn(|_| VecDeque::with_capacity(nodes)),
            lane_of,
            newest_first: order == ReadyOrder::CriticalPathFirst,
        }
    }

    /// Pushes `batch`, given most urgent first, so that its most urgent
    /// node is the next one popped from its lane.
    fn push_batch(&mut self, batch: impl DoubleEndedIterator<Item = u32>) {
        let mut push = |index: u32| {
            let lane = self.lane_of[index as usize];
            self.lanes[lane.index()].push_back(index);
        };
        if self.newest_first {
            batch.rev().for_each(&mut push);
        } else {
            batch.for_each(&mut push);
        }
    }

    fn pop_in(&mut self, lane: Lane) -> Option<u32> {
        let list = &mut self.lanes[lane.index()];
        if self.newest_first {
            list.pop_back()
        } else {
            list.pop_front()
        }
    }

    /// The next node to run and its lane: from the most urgent lane that
    /// has one.
    fn pop(&mut self) -> Option<(u32, Lane)> {
        Lane::ALL
            .into_iter()
            .find_map(|lane| Some((self.pop_in(lane)?, lane)))
    }

    fn is_empty(&self) -> bool {
        self.lanes.iter().all(VecDeque::is_empty)
    }

    /// Empties the lists, most urgent lane first, each most urgent first.
    fn drain(&mut self) -> impl Iterator<Item = u32> + '_ {
        std::iter::from_fn(move || self.pop().map(|(index, _)| index))
    }
}

impl<C: ?Sized + Sync> Shared<C> {
    /// Runs the frame from `roots` on this thread alone (module docs):
    /// [`FrameSharing::Alone`] once every node ran, or
    /// [`FrameSharing::HandedOver`] once the rest is queued in the pool
    /// (then wait for the frame's latch).
    /// Without a `hand_over` rule (no other thread could help) it never
    /// hands over.
    ///
    /// Call only from `run_frame`, before anything of the frame is queued.
    pub(super) fn run_alone(
        &self,
        roots: &[u32],
        ready: &mut ReadyAlone,
        local: Option<&Local<'_>>,
        hand_over: Option<HandOverRule>,
    ) -> FrameSharing {
        debug_assert!(ready.is_empty(), "every frame empties the lists");
        // SAFETY: called by `run_frame` while its frame runs.
        let frame = unsafe { self.frame_view(local) };
        let timed = self.timed;
        let now = || if timed { clock::ticks() } else { 0 };
        let thread_lane = local.map(|l| l.current_lane());
        ready.push_batch(roots.iter().copied());
        let mut ran: u32 = 0;
        let mut sinks_done = 0;
        let mut start = now();
        let mut sharing = FrameSharing::Alone;
        // The node count at which to look at the clock next.
        let mut next_check = hand_over.as_ref().map_or(u32::MAX, |rule| rule.check_every);
        while let Some((index, lane)) = ready.pop() {
            if let Some(local) = local {
                // The node's lane bounds what a wait inside it may run.
                local.set_lane(lane);
                local.count_inline_run(lane);
            }
            let ok = self.run_body(index, &frame);
            let end = now();
            self.record_span(index, start, end, frame.thread);
            start = end;
            let successors = self.successors_of(index);
            sinks_done += usize::from(successors.is_empty());
            let released = successors
                .iter()
                .copied()
                .filter(|&s| self.release(index, s, ok, frame.epoch, true));
            ready.push_batch(released);
            ran += 1;
            if ran < next_check {
                continue;
            }
            let Some(rule) = hand_over.as_ref() else {
                continue;
            };
            next_check = ran.saturating_add(rule.check_every);
            let now = if timed { end } else { clock::ticks() };
            if !ready.is_empty() && rule.says_hand_over(now, ran) {
                self.hand_over(ready, sinks_done, local, frame.pool.shared());
                sharing = FrameSharing::HandedOver;
                break;
            }
        }
        if let (Some(local), Some(lane)) = (local, thread_lane) {
            local.set_lane(lane);
        }
        sharing
    }

    /// Queues every node in `ready` in the pool, after counting the frame's
    /// latch down for the `sinks_done` sinks that already ran.
    fn hand_over(
        &self,
        ready: &mut ReadyAlone,
        sinks_done: usize,
        local: Option<&Local<'_>>,
        pool: &registry::Shared,
    ) {
        if sinks_done > 0 {
            // Cannot set the latch: the nodes in `ready` have not run, and
            // each reaches a sink.
            self.done.count_down_by(sinks_done);
        }
        self.queue_ready(ready.drain(), local, pool, true);
    }
}

#[cfg(test)]
mod tests {
    use super::{HandOverRule, ShareThreshold};
    use std::time::Duration;

    #[test]
    fn the_hand_over_rule_is_the_share_threshold_in_ticks() {
        let default = ShareThreshold::default();
        // 1 ns per tick; the frame started at tick 1,000.
        let rule = HandOverRule::new(default, 1_000, 1.0, 1);
        for (elapsed, ran) in [(19_999, 10), (20_000, 100), (20_000, 101), (50_000, 250)] {
            assert_eq!(
                rule.says_hand_over(1_000 + elapsed, ran),
                default.worth_a_second_thread(elapsed as f64, ran as usize),
                "{elapsed} ns after {ran} nodes"
            );
        }
        assert!(rule.says_hand_over(21_000, 100));
        assert!(!rule.says_hand_over(21_000, 101));
        // 3 ticks per ns.
        let rule = HandOverRule::new(default, 0, 1.0 / 3.0, 1);
        assert!(!rule.says_hand_over(59_999, 1));
        assert!(rule.says_hand_over(60_000, 1));
        let never = ShareThreshold::new(Duration::MAX, Duration::ZERO);
        assert!(!HandOverRule::new(never, 0, 1.0, 1).says_hand_over(1 << 62, 1));
    }
}

//! Frames that the frame's thread runs alone.
//!
//! When the last frames were too light to be worth a second thread
//! ([`ShareThreshold`]), the frame's thread runs the next frame by
//! itself, in an order planned between frames: an [`AlonePlan`]. The plan
//! is the order in which the ready lists of the graph's [`ReadyOrder`]
//! (most urgent lane first, then critical path first or FIFO) would have
//! run the nodes on one thread, worked out once whenever the priorities
//! change. Running it needs no ready list and no dependency count: every
//! node comes after its dependencies, so a frame run alone only walks the
//! plan, touching each node's run record (and poison flag) but not its
//! countdown; a frame that ends alone takes no count epoch (`countdown.rs`).
//! No other thread can take part, so none has to be told about anything.
//! On the 256-node benchmark graph with empty nodes, frames run alone
//! back to back are 7–10x faster than shared ones
//! (`docs/performance/frame-modes.md`); walking the plan instead of ready
//! lists that counted every edge took the untimed frame from about 6.5 to
//! 3.5 µs.
//!
//! A frame can turn out heavier than the ones before it, and a graph's
//! first frame has nothing before it (so it starts alone too). After every
//! node of a timed graph or of a first frame, and every [`CHECK_EVERY`]
//! nodes otherwise, the thread checks the time since the frame's first
//! node against the same rule. Once it says yes, the thread looks again
//! after the next node (or run of light nodes), and from then on after
//! every one while the rule says yes: if the nodes since its last yes ran
//! slow too (the margin on the node threshold each), and the nodes still
//! to run would, at their pace, pass the frame threshold, the frame is
//! heavier than the ones before. If not, the thread was held up once
//! (preempted, say), and handing over would add a wake-up's system calls
//! to the delay (20 to 40 µs on the development VM, where such a frame of
//! 256 empty nodes took 60 to 180 µs against 4), so it runs on alone.
//! (So does a frame whose one long node is followed by nodes too light
//! or too few for the rest at their pace to pass the frame threshold;
//! later frames share once the estimates say so.)
//! A frame run alone whose rule said yes and was never confirmed is *held
//! up* ([`AlonePlan::held_up`]): in a timed graph its times go into the
//! node estimates only if the frame before was held up too (a node that
//! stays that slow) or another was left out within the last
//! `ESTIMATE_SETTLED_EVERY` frames (work that comes back), so one stall
//! does not make the next frames share. (An untimed graph's next frame
//! follows this one's wall time, stall and all.)
//! Once confirmed, the thread *hands over*: it counts down the frame's
//! latch for the sinks that already ran, completes the countdowns of the
//! nodes that ran and counts their releases of those that did not (plain
//! stores, `Countdown::complete_alone` and `release_alone`), queues every
//! node that is now ready in the pool (in plan order: what the ready lists
//! would have run next, most urgent lane first; waking a thread per lane),
//! and then waits
//! for the frame like any shared frame. From there on every thread counts
//! with `release`; the queues' release/acquire pairs order this thread's
//! plain counts before them. The nodes released later in a handed-over
//! frame wake threads by their `wakes` flags, which change only between
//! frames (a woken thread that finds more work still hands the search on);
//! the next frame decides anew.
//!
//! A timed graph reads the clock after each node, except (after its first
//! frame) in a run of
//! light nodes (each [`AlonePlan::light`]: under [`BATCH_BELOW_NANOS`]
//! lately): those are timed together, up to [`BATCH`] at a time, and each
//! is recorded with an equal share of the run's time. A clock read costs
//! as much as an empty node, so this nearly halves a frame of empty nodes;
//! a light node that turns heavy is smeared over its run for one frame,
//! then, its estimate no longer light, timed alone. The hand-over check
//! follows the clock reads.
//!
//! A frame whose graph has not run since an idle gap of the pool (a paced
//! game loop's sleep, in which other work may have taken the caches)
//! prefetches as it walks:
//! the lines of the node [`PREFETCH_AHEAD`] places ahead in the plan (its
//! node, run record, poison mark and gate span) and the closure and rules
//! (`gates.rs`) of the node half as far ahead. The plan's order is not the nodes' order in memory, so the
//! hardware prefetcher cannot guess it; without this, 256 empty nodes of
//! the benchmark graph paced at 60 Hz cost about 140 ns each (criterion,
//! `dag256-paced/0ns/60Hz`: 36 µs a frame, 25–27 µs with it), waiting for
//! memory node after node. Frames back to back skip it: their lines are
//! in the cache, and the prefetches would cost a fifth of an empty node.
//!
//! States: *alone* (walking the plan) → either *done* (the plan's end:
//! every node ran) or *handed over* (the ready rest of the plan is
//! queued).

use super::frame::{Caches, PREFETCH_AHEAD};
use super::{FrameView, ShareThreshold, Shared, NONE};
use crate::clock;
use crate::graph::run_record::NodeOutcome;
use crate::graph::{FrameSharing, ReadyOrder};
use crate::lane::Lane;
use crate::pool::worker::Local;
use crate::sync::frame_gate::Askers;
use std::collections::VecDeque;

/// How many nodes of an untimed graph run between two looks at the clock
/// (a timed graph reads it after every node anyway): a tick read costs
/// about 17 ns on the development VM, so a look every 32 nodes costs under
/// 1 ns per node, and a frame that turns heavy is handed over within 33
/// node times (the look that confirms it comes after the next node). An
/// untimed graph of 33 nodes or fewer never hands over; its next frame is
/// shared if this one's wall time says so.
pub(super) const CHECK_EVERY: u32 = 32;

/// Most light nodes timed as one run: the run's share per node stays
/// under [`BATCH_BELOW_NANOS`], and its total under 16 times that, which
/// bounds how late a hand-over check can come (and the look that confirms
/// it, one run later).
const BATCH: usize = 16;

/// A node whose estimate is under this is light: timed with its
/// neighbours in a frame run alone (module docs). A clock read costs 10 to
/// 25 ns, so such a node's own read would add up to a tenth of it.
pub(super) const BATCH_BELOW_NANOS: f64 = 250.0;

/// A frame run alone hands over only once its wall time per node passes
/// this many times the node threshold of `share_above`. Wall time counts
/// what node times do not: the walk between nodes and, in a paced loop,
/// the cache misses of a thread that slept since the last frame. 256 empty
/// nodes paced at 60 Hz measured 130 ns per node but took 150 ns each of
/// wall time, more in their first nodes, and a rule of 1x handed a quarter
/// of those frames over, which then took 100-130 µs instead of 40. A node
/// that really turns heavy (a millisecond where a microsecond was
/// expected) passes twice the threshold as easily as once.
pub(super) const HAND_OVER_MARGIN: u64 = 2;

/// When a frame run alone hands over: once the time since `start_tick`
/// passes the frame threshold of `share_above`, and a margin
/// ([`HAND_OVER_MARGIN`], or more for a frame held alone by trial:
/// `SharingTrial::hand_over_margin`) times its node threshold for the
/// nodes run so far ([`says_hand_over`](Self::says_hand_over)), and the
/// nodes run after it said so [`confirm`](Self::confirms) it
/// (module docs).
pub(super) struct HandOverRule {
    start_tick: u64,
    /// The [`ShareThreshold`] in ticks: the frame's work, and a node's.
    frame_ticks: u64,
    node_ticks: u64,
    /// Look after every this many nodes (1, or [`CHECK_EVERY`]).
    check_every: u32,
}

impl HandOverRule {
    /// The rule for `share_above` with `margin`, its clock not started
    /// yet (`starting_at`).
    pub(super) fn new(
        share_above: ShareThreshold,
        nanos_per_tick: f64,
        check_every: u32,
        margin: u64,
    ) -> Self {
        // Float to integer casts saturate: `Duration::MAX` stays out of
        // reach.
        // Rounded up by hand: `f64::ceil` is a library call here.
        let ticks = |nanos: f64| {
            let exact = nanos / nanos_per_tick;
            let down = exact as u64;
            down.saturating_add(u64::from((down as f64) < exact))
        };
        HandOverRule {
            start_tick: 0,
            frame_ticks: ticks(share_above.frame_nanos),
            node_ticks: ticks(share_above.node_nanos).saturating_mul(margin),
            check_every,
        }
    }

    /// The rule with its clock started at `start_tick`: run by a frame
    /// from its first node, since what the frame did before (its
    /// preparation, slow in a frame that starts cold) is no node's work.
    fn starting_at(self, start_tick: u64) -> Self {
        HandOverRule { start_tick, ..self }
    }

    /// [`ShareThreshold::worth_a_second_thread`] for the frame so far, with
    /// the rule's margin on its node threshold, at tick `now` after `ran`
    /// nodes, in integers.
    fn says_hand_over(&self, now: u64, ran: u32) -> bool {
        let elapsed = now.saturating_sub(self.start_tick);
        elapsed >= self.frame_ticks && elapsed >= self.node_ticks.saturating_mul(u64::from(ran))
    }

    /// Whether the nodes run from tick `at` (after `ran_then` nodes) to
    /// `now` (after `ran`, of `total`) confirm the hand-over the rule said
    /// at `at`: they took the rule's margin on the node threshold or more
    /// each, and at their pace the nodes still to run would pass the frame
    /// threshold.
    fn confirms(&self, at: u64, ran_then: u32, now: u64, ran: u32, total: u32) -> bool {
        let nodes = u64::from(ran.saturating_sub(ran_then));
        // A clock that went back (ticks of two cores out of step) took
        // nothing.
        let took = now.saturating_sub(at);
        let rest = u64::from(total.saturating_sub(ran));
        nodes > 0
            && took >= self.node_ticks.saturating_mul(nodes)
            && took.saturating_mul(rest) / nodes >= self.frame_ticks
    }
}

/// The ready nodes of one thread running the graph, per lane: what
/// [`AlonePlan::replan`] follows. Each list has room for every node of the
/// graph, and a node is ready at most once per run, so pushing never
/// allocates.
struct ReadyAlone {
    lanes: [VecDeque<u32>; Lane::COUNT],
    /// Each node's lane, apart from the nodes' larger records: the lists
    /// are filled without touching them.
    lane_of: Vec<Lane>,
    /// Critical path first pushes every batch least urgent first and pops
    /// the newest; FIFO pops the oldest.
    newest_first: bool,
}

impl ReadyAlone {
    fn new() -> Self {
        ReadyAlone {
            lanes: std::array::from_fn(|_| VecDeque::new()),
            lane_of: Vec::new(),
            newest_first: true,
        }
    }

    /// Sets up the lists for nodes of these lanes, in the memory held.
    fn rebuild(&mut self, lanes: impl Iterator<Item = Lane>, order: ReadyOrder) {
        self.lane_of.clear();
        self.lane_of.extend(lanes);
        for list in &mut self.lanes {
            list.clear();
            list.reserve(self.lane_of.len());
        }
        self.newest_first = order == ReadyOrder::CriticalPathFirst;
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

    /// The next node to run: from the most urgent lane that
    /// has one.
    fn pop(&mut self) -> Option<u32> {
        Lane::ALL.into_iter().find_map(|lane| self.pop_in(lane))
    }
}

/// The order of a frame run alone (module docs), and what a hand-over
/// needs to know about it. Everything is allocated when the graph is
/// built.
pub(super) struct AlonePlan {
    /// Every node once, each after its dependencies.
    order: Vec<u32>,
    /// Each node's place in `order`.
    position: Vec<u32>,
    /// Each node's dependency that comes last in `order` ([`NONE`] for a
    /// root): the one that released it in a frame run alone, for the
    /// frame statistics' critical path.
    last_dependency: Vec<u32>,
    /// Whether the priorities changed since `order` was worked out.
    stale: bool,
    /// Scratch of `replan`: the ready lists and dependencies not yet run.
    ready: ReadyAlone,
    remaining: Vec<u32>,
    /// Scratch of a hand-over: the nodes whose last release it counted.
    released: Vec<bool>,
    /// Per node: light enough to be timed in a run with others (module
    /// docs); set between frames from the estimates.
    light: Vec<bool>,
    /// The node time under which a node is light, in ticks
    /// ([`BATCH_BELOW_NANOS`]; `u64::MAX` until the estimates first set it).
    light_below: u64,
    /// Whether a run of light nodes in the last frame run alone took a
    /// light node's time or more per node: one of them turned heavy.
    light_ran_heavy: bool,
    /// Whether the hand-over rule said yes in the last frame run alone and
    /// the nodes after never confirmed it: the frame was held up.
    held_up: bool,
}

impl AlonePlan {
    /// A plan of no nodes.
    pub(super) fn new() -> Self {
        AlonePlan {
            order: Vec::new(),
            position: Vec::new(),
            last_dependency: Vec::new(),
            stale: true,
            ready: ReadyAlone::new(),
            remaining: Vec::new(),
            released: Vec::new(),
            light: Vec::new(),
            light_below: u64::MAX,
            light_ran_heavy: false,
            held_up: false,
        }
    }

    /// Per node, by index: whether it is light (module docs). Sized by
    /// [`rebuild`](Self::rebuild), one entry per node.
    pub(super) fn light_mut(&mut self) -> &mut [bool] {
        &mut self.light
    }

    /// The node time under which a node is light, in ticks (`u64::MAX`
    /// until the estimates first set it).
    pub(super) fn light_below(&self) -> u64 {
        self.light_below
    }

    /// Sets the node time under which a node is light, in ticks, as the
    /// flags of [`light_mut`](Self::light_mut) were set.
    pub(super) fn set_light_below(&mut self, ticks: u64) {
        self.light_below = ticks;
    }

    /// Whether, in the last frame run alone, a run of light nodes took a
    /// light node's time or more per node: a node it holds turned heavy,
    /// and the estimates should say so before the next frame batches it
    /// again (`Runtime::estimates_due`).
    pub(super) fn light_ran_heavy(&self) -> bool {
        self.light_ran_heavy
    }

    /// Whether the last frame run alone was held up: the hand-over rule
    /// said yes and the nodes after it never confirmed it (module docs).
    pub(super) fn held_up(&self) -> bool {
        self.held_up
    }

    /// An empty plan for nodes of these lanes, in the memory this one
    /// holds, to be worked out by [`replan`](Self::replan) before its
    /// first use.
    pub(super) fn rebuild(&mut self, lanes: impl Iterator<Item = Lane>, order: ReadyOrder) {
        self.ready.rebuild(lanes, order);
        let n = self.ready.lane_of.len();
        for list in [&mut self.order, &mut self.position, &mut self.remaining] {
            list.clear();
            list.resize(n, 0);
        }
        self.last_dependency.clear();
        self.last_dependency.resize(n, NONE);
        self.released.clear();
        self.released.resize(n, false);
        // Unknown nodes start light: a heavy one shows in its run's time.
        // (A rebuild then marks the nodes whose names it knows by their
        // estimates: `Runtime::recall_estimates`.)
        self.light.clear();
        self.light.resize(n, true);
        self.light_ran_heavy = false;
        self.held_up = false;
        self.stale = true;
    }

    /// Marks the plan as out of date: the roots' or successors' order
    /// changed.
    pub(super) fn invalidate(&mut self) {
        self.stale = true;
    }

    pub(super) fn is_stale(&self) -> bool {
        self.stale
    }

    /// Works the plan out: runs the ready lists on one thread without
    /// running any node, from `roots` (most urgent first), with the
    /// graph's successor lists (each most urgent first) and dependency
    /// counts. Allocates nothing.
    pub(super) fn replan<'g>(
        &mut self,
        roots: &[u32],
        dependencies: &[u32],
        successors_of: impl Fn(u32) -> &'g [u32],
    ) {
        let AlonePlan {
            order,
            position,
            last_dependency,
            ready,
            remaining,
            ..
        } = self;
        remaining.copy_from_slice(dependencies);
        ready.push_batch(roots.iter().copied());
        let mut planned = 0;
        while let Some(index) = ready.pop() {
            order[planned] = index;
            position[index as usize] = planned as u32;
            planned += 1;
            let released = successors_of(index).iter().copied().filter(|&s| {
                remaining[s as usize] -= 1;
                last_dependency[s as usize] = index;
                remaining[s as usize] == 0
            });
            ready.push_batch(released);
        }
        // Every node is reached: the graph is a DAG (checked when built).
        assert_eq!(planned, order.len(), "a task graph has a cycle");
        self.stale = false;
    }

    /// Who released node `index` in a frame that ran the first
    /// `ran_alone` nodes of the plan alone, if it was one of them: its
    /// dependency that came last, or [`NONE`] for a root. `None` for a node
    /// of the shared part, whose releaser recorded itself.
    pub(super) fn released_by(&self, index: usize, ran_alone: usize) -> Option<u32> {
        ((self.position[index] as usize) < ran_alone).then(|| self.last_dependency[index])
    }
}

impl Shared {
    /// Runs the frame by `plan` on this thread alone (module docs), and
    /// returns how it ended and how many nodes of the plan this thread ran:
    /// all of them, [`FrameSharing::Alone`]; or fewer,
    /// [`FrameSharing::HandedOver`], once the ready rest is queued in the
    /// pool (then wait for the frame's latch). Without a `hand_over` rule
    /// (no other thread could help, or the frame is a trial of running
    /// alone: `SharingTrial`) it never hands over; the rule's clock starts
    /// at the first node. With the frame's
    /// caches cold, it prefetches what the nodes ahead of it read
    /// (`Shared::prefetch_ahead`).
    ///
    /// Call only from `run_frame`, with a plan that is not stale, before
    /// anything of the frame is queued.
    ///
    /// One function, longer than most, because it is the loop of a light
    /// frame: its clock reads, lane switches and hand-over checks share
    /// locals the compiler keeps in registers across nodes.
    #[cfg_attr(target_os = "linux", link_section = "engine_tasks_frame")]
    pub(super) fn run_alone(
        &self,
        plan: &mut AlonePlan,
        local: Option<&Local<'_>>,
        hand_over: Option<HandOverRule>,
    ) -> (FrameSharing, usize) {
        debug_assert!(!plan.is_stale(), "a frame run alone follows a current plan");
        // SAFETY: called by `run_frame` while its frame runs.
        let mut frame = unsafe { self.frame_view(local) };
        // No other thread runs a node of the frame before the hand-over,
        // whose queue pushes publish the sets' answers (`frame_gate.rs`).
        frame.askers = Askers::OnlyThis;
        let timed = self.timed;
        let now = || if timed { clock::ticks() } else { 0 };
        let thread_lane = local.map(|l| l.current_lane());
        let mut lane = thread_lane;
        let mut ran_in_lane = [0; Lane::COUNT];
        let mut start = now();
        // The node count at which to look at the clock next.
        let mut next_check = hand_over.as_ref().map_or(u32::MAX, |rule| rule.check_every);
        let hand_over =
            hand_over.map(|rule| rule.starting_at(if timed { start } else { clock::ticks() }));
        let mut ended = (FrameSharing::Alone, plan.order.len());
        // Where the rule last said hand over, not yet confirmed: (tick,
        // nodes run).
        let mut suspected: Option<(u64, u32)> = None;
        let mut held_up = false;
        // The light nodes run since the clock was last read (module docs).
        let mut batch = [(0u32, NodeOutcome::Ran); BATCH];
        let mut batched = 0;
        // The longest share per node of a run of light nodes.
        let mut heaviest_share = 0;
        let last = plan.order.len() as u32;
        // Not in a graph's first frame: nothing is known to be light yet,
        // and that frame checks for a hand-over after every node.
        let batching = timed && frame.number > 0;
        let order = &plan.order;
        let prefetch = self.inputs.caches == Caches::Cold;
        if prefetch {
            for &index in order.iter().take(PREFETCH_AHEAD) {
                self.prefetch_node(index);
            }
            for &index in order.iter().take(PREFETCH_AHEAD / 2) {
                self.prefetch_body(index);
            }
        }
        for (ran, &index) in (1..).zip(order.iter()) {
            if prefetch {
                self.prefetch_ahead(order, ran as usize - 1);
            }
            let node_lane = self.nodes[index as usize].lane;
            if lane != Some(node_lane) {
                // The node's lane bounds what a wait inside it may run.
                if let Some(local) = local {
                    local.set_lane(node_lane);
                }
                lane = Some(node_lane);
            }
            ran_in_lane[node_lane.index()] += 1;
            let light = batching && plan.light[index as usize];
            if !light && batched > 0 {
                // A node timed alone: the run before it ends here.
                let end = clock::ticks();
                let share = self.record_batch(&batch[..batched], start, end, frame.thread);
                heaviest_share = heaviest_share.max(share);
                (batched, start) = (0, end);
            }
            let outcome = self.run_body(index, &frame);
            if outcome.fails_dependents() {
                for &s in self.successors_of(index) {
                    self.poison(s, frame.epoch);
                }
            }
            if light {
                batch[batched] = (index, outcome);
                batched += 1;
                if batched < BATCH && ran < last {
                    continue;
                }
            }
            let end = now();
            if batched > 0 {
                let share = self.record_batch(&batch[..batched], start, end, frame.thread);
                heaviest_share = heaviest_share.max(share);
                batched = 0;
            } else {
                self.runs[index as usize].write(start, end, frame.thread, outcome);
            }
            start = end;
            if ran < next_check {
                continue;
            }
            let Some(rule) = hand_over.as_ref() else {
                continue;
            };
            next_check = ran.saturating_add(rule.check_every);
            let now = if timed { end } else { clock::ticks() };
            if (ran as usize) < plan.order.len() && rule.says_hand_over(now, ran) {
                // Only if the nodes since it last said so ran slow too,
                // and the rest at their pace is worth a second thread: a
                // frame held up once (its thread preempted) runs on alone
                // (module docs).
                if suspected
                    .is_some_and(|(at, ran_then)| rule.confirms(at, ran_then, now, ran, last))
                {
                    self.hand_over(plan, ran as usize, &frame, local);
                    ended = (FrameSharing::HandedOver, ran as usize);
                    break;
                }
                suspected = Some((now, ran));
                held_up = true;
                next_check = ran + 1;
            } else {
                suspected = None;
            }
        }
        plan.light_ran_heavy = heaviest_share >= plan.light_below;
        plan.held_up = held_up && ended.0 == FrameSharing::Alone;
        if let Some(local) = local {
            for lane in Lane::ALL {
                local.count_inline_runs(lane, ran_in_lane[lane.index()]);
            }
            if let Some(lane) = thread_lane {
                local.set_lane(lane);
            }
        }
        ended
    }

    /// Records a run of light nodes that took from tick `start` to `end`,
    /// each with an equal share, in order (module docs); the share.
    fn record_batch(&self, batch: &[(u32, NodeOutcome)], start: u64, end: u64, thread: u32) -> u64 {
        let share = end.saturating_sub(start) / batch.len() as u64;
        for (k, &(index, outcome)) in batch.iter().enumerate() {
            let from = start + share * k as u64;
            self.runs[index as usize].write(from, from + share, thread, outcome);
        }
        share
    }

    /// Hands the frame over after the first `ran` nodes of `plan` ran
    /// (module docs): completes their countdowns, counts their releases of
    /// the nodes that did not run, counts the sinks among them as finished,
    /// and queues the nodes that are ready now, in plan order.
    fn hand_over(
        &self,
        plan: &mut AlonePlan,
        ran: usize,
        frame: &FrameView<'_>,
        local: Option<&Local<'_>>,
    ) {
        debug_assert_eq!(frame.askers, Askers::OnlyThis, "a hand-over counts alone");
        let (done, rest) = plan.order.split_at(ran);
        let mut sinks_done = 0;
        for &from in done {
            let dependencies = self.dependencies[from as usize];
            self.states[from as usize]
                .pending
                .complete_alone(dependencies, frame.count_epoch);
            let successors = self.successors_of(from);
            sinks_done += usize::from(successors.is_empty());
            for &to in successors {
                if (plan.position[to as usize] as usize) < ran {
                    continue;
                }
                // `Ran`: the loop in `run_alone` poisoned what it had to.
                // SAFETY: this thread runs the frame and has not queued a
                // node yet; `from` ran and releases each successor once.
                if unsafe { Self::release(self, from, to, NodeOutcome::Ran, frame) } {
                    plan.released[to as usize] = true;
                }
            }
        }
        if sinks_done > 0 {
            // Cannot be the last: the nodes after `ran` have not run, and
            // each reaches a sink.
            // SAFETY: the sinks that ran here, counted once, on the frame's
            // thread.
            let last = unsafe { self.finish_sinks(sinks_done) };
            debug_assert!(!last, "a hand-over leaves sinks to run");
        }
        let released = &mut plan.released;
        let ready = rest.iter().copied().filter(|&index| {
            let index = index as usize;
            std::mem::take(&mut released[index]) || self.dependencies[index] == 0
        });
        self.queue_ready(ready, local, frame.pool.shared(), true);
    }
}

#[cfg(test)]
mod tests {
    use super::{AlonePlan, HandOverRule, ShareThreshold, HAND_OVER_MARGIN, NONE};
    use crate::graph::ReadyOrder;
    use crate::lane::Lane;
    use std::time::Duration;

    /// A plan for nodes of `lanes` and `edges` (from, to), with successor
    /// lists and roots in index order (their urgency order here).
    fn plan(lanes: &[Lane], edges: &[(u32, u32)], order: ReadyOrder) -> AlonePlan {
        let n = lanes.len();
        let mut successors = vec![Vec::new(); n];
        let mut dependencies = vec![0; n];
        for &(from, to) in edges {
            successors[from as usize].push(to);
            dependencies[to as usize] += 1;
        }
        let roots: Vec<u32> = (0..n as u32)
            .filter(|&i| dependencies[i as usize] == 0)
            .collect();
        let mut plan = AlonePlan::new();
        plan.rebuild(lanes.iter().copied(), order);
        assert!(plan.is_stale());
        plan.replan(&roots, &dependencies, |i| &successors[i as usize]);
        assert!(!plan.is_stale());
        // Every node once, each after its dependencies, and the position
        // map and last dependencies agree with the order.
        let mut seen = vec![false; n];
        for (place, &node) in plan.order.iter().enumerate() {
            assert!(!std::mem::replace(&mut seen[node as usize], true));
            assert_eq!(plan.position[node as usize] as usize, place);
        }
        for node in 0..n {
            let deps: Vec<u32> = edges
                .iter()
                .filter(|e| e.1 == node as u32)
                .map(|e| e.0)
                .collect();
            let last = deps
                .iter()
                .copied()
                .max_by_key(|&d| plan.position[d as usize]);
            assert_eq!(
                plan.last_dependency[node],
                last.unwrap_or(NONE),
                "node {node}"
            );
            for d in deps {
                assert!(plan.position[d as usize] < plan.position[node]);
            }
        }
        plan
    }

    #[test]
    fn the_plan_is_the_order_of_the_ready_lists() {
        use Lane::*;
        // 0 -> {1, 2}, 1 -> 3, 2 -> 3; 4 is a root in a lower lane;
        // 5 (frame-critical) waits for 4.
        let lanes = [Normal, Normal, Normal, Normal, Background, FrameCritical];
        let edges = [(0, 1), (0, 2), (1, 3), (2, 3), (4, 5)];
        // Critical path first: the most urgent lane first, and in a lane
        // the newest batch's most urgent node (depth first).
        let cpf = plan(&lanes, &edges, ReadyOrder::CriticalPathFirst);
        assert_eq!(&*cpf.order, [0, 1, 2, 3, 4, 5]);
        // FIFO: in a lane, the oldest first.
        let fifo = plan(&lanes, &edges, ReadyOrder::Fifo);
        assert_eq!(&*fifo.order, [0, 1, 2, 3, 4, 5]);
        // Where they differ: 0 -> {1, 2}, 1 -> 3; CPF runs 3 before 2.
        let lanes = [Normal; 4];
        let edges = [(0, 1), (0, 2), (1, 3)];
        assert_eq!(
            &*plan(&lanes, &edges, ReadyOrder::CriticalPathFirst).order,
            [0, 1, 3, 2]
        );
        assert_eq!(&*plan(&lanes, &edges, ReadyOrder::Fifo).order, [0, 1, 2, 3]);
        // A frame-critical node runs as soon as it is released, before
        // what is left of a lower lane.
        let lanes = [Normal, Normal, FrameCritical, Normal];
        let edges = [(0, 1), (1, 2)];
        assert_eq!(&*plan(&lanes, &edges, ReadyOrder::Fifo).order, [0, 3, 1, 2]);
        assert_eq!(
            &*plan(&lanes, &edges, ReadyOrder::CriticalPathFirst).order,
            [0, 1, 2, 3]
        );
    }

    #[test]
    fn a_plan_records_who_released_each_node() {
        let lanes = [Lane::Normal; 4];
        let plan = plan(&lanes, &[(0, 2), (1, 2), (2, 3)], ReadyOrder::Fifo);
        assert_eq!(&*plan.order, [0, 1, 2, 3]);
        // All four ran alone; after a hand-over at 2, only 0 and 1 did.
        assert_eq!(plan.released_by(2, 4), Some(1));
        assert_eq!(plan.released_by(0, 4), Some(NONE));
        assert_eq!(plan.released_by(3, 2), None);
    }

    /// A frame's rule counts from its first node: the frame's preparation
    /// before it is no node's work.
    #[test]
    fn the_hand_over_rule_counts_from_the_first_node() {
        let default = ShareThreshold::default();
        let rule = HandOverRule::new(default, 1.0, 1, HAND_OVER_MARGIN);
        assert!(rule.says_hand_over(49_999, 1));
        let rule = rule.starting_at(30_000);
        assert!(!rule.says_hand_over(49_999, 1));
        assert!(rule.says_hand_over(50_000, 1));
    }

    #[test]
    fn the_hand_over_rule_is_the_share_threshold_in_ticks() {
        let default = ShareThreshold::default();
        let margin = HAND_OVER_MARGIN as usize;
        // 1 ns per tick; the frame started at tick 1,000.
        let rule = HandOverRule::new(default, 1.0, 1, HAND_OVER_MARGIN).starting_at(1_000);
        for (elapsed, ran) in [(19_999, 10), (20_000, 50), (20_000, 51), (50_000, 125)] {
            assert_eq!(
                rule.says_hand_over(1_000 + elapsed, ran),
                default.worth_a_second_thread(elapsed as f64, ran as usize * margin),
                "{elapsed} ns after {ran} nodes"
            );
        }
        // 200 ns of wall time per node is not enough: 400 is.
        assert!(!rule.says_hand_over(21_000, 100));
        assert!(rule.says_hand_over(41_000, 100));
        assert!(!rule.says_hand_over(41_000, 101));
        // 3 ticks per ns.
        let rule = HandOverRule::new(default, 1.0 / 3.0, 1, HAND_OVER_MARGIN);
        assert!(!rule.says_hand_over(59_999, 1));
        assert!(rule.says_hand_over(60_000, 1));
        let never = ShareThreshold::new(Duration::MAX, Duration::ZERO);
        assert!(!HandOverRule::new(never, 1.0, 1, HAND_OVER_MARGIN).says_hand_over(1 << 62, 1));
    }

    /// A hand-over is confirmed by nodes that ran at the margin each, with
    /// a rest that at their pace passes the frame threshold; a clock that
    /// went back confirms nothing.
    #[test]
    fn the_confirming_nodes_run_slow_and_leave_a_heavy_rest() {
        // 1 ns per tick: 20 µs a frame, 400 ns a node with the margin.
        let rule = HandOverRule::new(ShareThreshold::default(), 1.0, 1, HAND_OVER_MARGIN);
        // After 10 of 100 nodes, one more node.
        assert!(!rule.confirms(1_000, 10, 1_000, 10, 100), "no node since");
        assert!(
            !rule.confirms(1_000, 10, 1_399, 11, 100),
            "under the margin"
        );
        assert!(rule.confirms(1_000, 10, 1_400, 11, 100), "at the margin");
        // 400 ns a node over the 89 nodes left: 35.6 µs, over 20 µs; over
        // 49 left, 19.6 µs is not; over 50, 20 µs is.
        assert!(!rule.confirms(1_000, 50, 1_400, 51, 100), "a light rest");
        assert!(
            rule.confirms(1_000, 49, 1_400, 50, 100),
            "just heavy enough"
        );
        assert!(!rule.confirms(1_000, 99, 11_000, 100, 100), "nothing left");
        assert!(
            !rule.confirms(5_000, 10, 1_000, 11, 100),
            "the clock went back"
        );
        // Zero thresholds: any node after the first yes confirms it, while
        // a node is left.
        let zero = ShareThreshold::new(Duration::ZERO, Duration::ZERO);
        let rule = HandOverRule::new(zero, 1.0, 1, HAND_OVER_MARGIN);
        assert!(rule.confirms(1_000, 1, 1_000, 2, 4));
        assert!(!rule.confirms(1_000, 1, 1_000, 1, 4));
    }
}

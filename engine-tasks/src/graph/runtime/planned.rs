//! Frames shared by a plan: each thread walks a list of nodes worked out
//! between frames, instead of counting releases and queueing ready nodes.
//!
//! A shared frame's nodes cost most of their overhead in moving between
//! cores: every release is a read-modify-write of a countdown that the
//! other core wrote last, every hand-off a queue push and a steal. When
//! the frames before were worth a second thread, and the graph allows it
//! (critical-path-first, no pinned nodes, one lane), the frame instead
//! runs a [`Schedule`]: the nodes split into one list per thread by list
//! scheduling on the smoothed node times, most urgent first, each node on
//! the list where it would start soonest (a dependency on another list
//! counts [`CROSS_NANOS`] later). The frame's thread queues one helper
//! task per other list in the pool's injector once the frame's inputs are
//! set and the pool has been told of the frame (its start, the
//! forecasts), but before it enters its own slot in the pool; then it
//! walks list 0. A pool thread that takes a helper task walks that list.
//! After a paced loop's sleep the frame's thread finds its own code and
//! data cold, while an early-woken worker does not: in `paced_floor` runs
//! (60 Hz, 1 µs a node, taking turns with the build before) the engine's
//! median distance from the fixed schedule fell from 124 to 108 ns a node
//! (`docs/performance/paced-cold-start.md`).
//! The frame's thread claims its slot in the pool before it queues the
//! helpers (`worker::claim_slot`), and a thread that would get none (the pool's
//! guest slot held by another outside thread) runs its frame queued
//! instead: every node runs only because the frame's thread walks to the
//! end, while a helper that another thread runs inside a wait leaves as
//! soon as nothing is ready. (Without that rule, a stress test of two
//! outside threads' graphs hung: every helper of the slotless thread's
//! frame ran inside the other frame's waits and left.)
//!
//! Per node a walker checks its dependencies' finish marks, claims the
//! node (one swap of its claim mark, kept in plan order on lines of the
//! walker's list alone), runs it and marks it finished (`node_marks.rs`).
//!
//! When the next node of the walker's own list is ready but for the node
//! that just ran (or ready outright), the walker claims it before it marks
//! the node that ran finished (`Shared::claim_next`). In-process A/B runs
//! on the 2-core development VM (the 256-node graph of `benches/graph.rs`,
//! 1 µs a node, 60 Hz, the order chosen at random per frame) ended frames
//! a median of 0.8 µs sooner over eight runs, seven of them sooner
//! (`docs/performance/paced-frames.md`). Why is not settled. On x86 the claim's
//! swap is a locked instruction, which waits until the core's earlier stores
//! are out, and the finish mark's line is often held by the other core; but an
//! earlier probe that replaced the swap with a plain load and store, in
//! the old order, gained nothing that separate processes could show. The
//! price: the finish mark, and with it a successor on another list or a
//! sleeping walker's wake-up, comes one dependency check and one swap
//! later; and a head that waits for another node has its dependencies
//! checked twice (in `claim_next`, then in `next_step`).
//!
//! When the walker's next node is not ready it looks at the first
//! unclaimed node of every other list and claims that if it is ready, so
//! a late or busy helper only costs parallelism. Every list
//! keeps the order of one global topological order (the order nodes were
//! placed in), so the first unclaimed node of the whole plan always has
//! every dependency claimed, and it becomes ready once they finish: with
//! the frame's thread always walking, every node runs.
//!
//! A helper task that a thread runs inside a wait (a node's `join` or
//! `scope`, say, even a node of this frame on the frame's thread) only
//! runs ready nodes and leaves when none is: waiting there could wait for
//! the very node, or a task it joins, whose wait it runs in.
//!
//! A frame whose graph has not run since an idle gap of the pool (a paced
//! loop's sleep) finds the nodes' lines cold, in an order (the list's) that is not their
//! order in memory: each walker then prefetches the lines of the node
//! [`PREFETCH_AHEAD`] places on in its list (node, run record, poison mark,
//! gate span, and its state for a write, since the walker will mark it
//! finished) and the closure and the node's rules half as far,
//! as a frame run alone does. In every frame, cold or not, a walker
//! prefetches one node ahead what its next node is checked with when the
//! running one ends (its dependencies' states and its successor row:
//! `Shared::prefetch_turn`); back to back, that ended frames 2.1 and 3.6
//! µs sooner in two in-process A/B runs
//! (`docs/performance/paced-cold-start.md`). In cold frames, in in-process A/B
//! runs on the 2-core development VM (set up as for `claim_next` above; figures
//! in `docs/performance/paced-frames.md`) this ended frames 2.4–6.8 µs sooner
//! in each of ten runs in which frames took over 160 µs, when the machine was
//! slow, and changed nothing that ten runs of quicker frames could show. The
//! states' write prefetch, against a read prefetch, ended frames a median
//! of 0.5 µs sooner over eight runs (3.4 and 4.3 µs in the two slowest),
//! measured when the claim mark still shared the state's line.
//!
//! States of a walker: *walking* (it found a node to claim) → *waiting* (none
//! ready; it looks for 20 µs, as threads do in shared frames, running pool
//! tasks of the graph's lane meanwhile, the frame's thread once every helper
//! task has started) → *asleep* until another walker finishes a node
//! (`node_marks.rs`) or work of the lane is pushed → *walking* again; → *done*
//! when every node is claimed. The frame's thread then waits for the frame's
//! latch, counted down once every sink is counted and by each helper task as
//! its last touch of the graph, as in any shared frame. A walker counts the
//! sinks it ran as it leaves, all at once: one read-modify-write of the shared
//! count per walker, not one per sink on a line both cores write (in-process
//! A/B runs: frames 0.4–2.8 µs sooner; `docs/performance/paced-cold-start.md`).
//! No frame ends sooner for counting earlier: the latch waits for every helper
//! to leave. A walker also counts the nodes it ran in the pool's statistics
//! as it leaves, as a frame run alone does, and `claim_next` is inlined into
//! the walk: the two ended 1 µs frames 0.6–0.8 µs sooner in four in-process
//! A/B runs (30,000 frames each, the variant chosen at random per frame),
//! where the same harness with nothing to choose between differed by at
//! most 0.1 µs (`docs/performance/w4-runs.md`). A helper that ran a node
//! marks its pool slot first
//! (`helper_slots`), so the frame's end knows who took part (for the early
//! wake-ups of a paced loop) without reading every node's run record.

use super::frame::{Caches, PREFETCH_AHEAD};
use super::{FrameView, Shared};
use crate::clock;
use crate::pool::wait::PAUSES_BETWEEN_LOOKS;
use crate::pool::worker::Local;
use crate::sync::node_marks::ClaimMarks;
use crate::sync::prefetch::{Span, MAX_DATA_LINES};
use std::collections::BinaryHeap;
use std::sync::atomic::Ordering;

/// The most lists a plan has (threads walking it). A pool of more threads
/// uses this many; the rest run what the lists' walkers push (nested
/// `parallel_for` pieces).
pub(super) const MAX_LISTS: usize = 8;

/// What a dependency on another list costs the plan, in nanoseconds: the
/// `finished` mark's line moving between the cores. A node hand-off
/// between threads costs 80-130 ns on the development VM (see
/// `LIGHT_NODE_NANOS`); the mark alone is one line, so less.
pub(super) const CROSS_NANOS: f64 = 60.0;

/// One list of nodes per thread; see the module docs.
pub(super) struct Schedule {
    /// Every list's nodes, list after list.
    nodes: Vec<u32>,
    /// List `t` is `nodes[start[t]..start[t + 1]]`.
    start: [u32; MAX_LISTS + 1],
    lists: usize,
    /// Each node's place in the global order the lists keep.
    placed_at: Vec<u32>,
    /// Each list's claim marks, in list order.
    claims: ClaimMarks,
    stale: bool,
    scratch: Scratch,
}

/// What [`Schedule::replan`] weighs, in ticks where a time.
pub(super) struct Costs<'a> {
    /// Ranks ready nodes: the higher goes first.
    pub(super) priority: &'a [u64],
    /// Each node's expected time.
    pub(super) estimate: &'a [u64],
    /// A dependency on another list's node ([`CROSS_NANOS`]).
    pub(super) cross: u64,
}

/// Buffers of `replan`, kept so that a re-plan allocates nothing.
struct Scratch {
    heap: BinaryHeap<(u64, std::cmp::Reverse<u32>)>,
    waiting_for: Vec<u32>,
    finish: Vec<u64>,
    list_of: Vec<u8>,
    placed: Vec<u32>,
}

impl Schedule {
    pub(super) fn new(nodes: usize) -> Self {
        let mut schedule = Schedule {
            nodes: Vec::new(),
            start: [0; MAX_LISTS + 1],
            lists: 0,
            placed_at: Vec::new(),
            claims: ClaimMarks::new(),
            stale: true,
            scratch: Scratch {
                heap: BinaryHeap::new(),
                waiting_for: Vec::new(),
                finish: Vec::new(),
                list_of: Vec::new(),
                placed: Vec::new(),
            },
        };
        schedule.resize(nodes);
        schedule
    }

    /// An empty, stale schedule for `nodes` nodes, in the memory held.
    pub(super) fn resize(&mut self, nodes: usize) {
        let scratch = &mut self.scratch;
        for list in [
            &mut self.nodes,
            &mut self.placed_at,
            &mut scratch.waiting_for,
        ] {
            list.clear();
            list.resize(nodes, 0);
        }
        scratch.finish.clear();
        scratch.finish.resize(nodes, 0);
        scratch.list_of.clear();
        scratch.list_of.resize(nodes, 0);
        scratch.heap.clear();
        scratch.heap.reserve(nodes);
        scratch.placed.clear();
        scratch.placed.reserve(nodes);
        self.claims.resize(nodes, MAX_LISTS);
        self.start = [0; MAX_LISTS + 1];
        self.lists = 0;
        self.stale = true;
    }

    pub(super) fn invalidate(&mut self) {
        self.stale = true;
    }

    /// Every list's nodes, as one span for the early-woken workers to
    /// warm (`sync/prefetch.rs`).
    pub(super) fn all_lists(&self) -> Span {
        Span::of(&self.nodes, MAX_DATA_LINES)
    }

    /// Whether the plan must be worked out again for `lists` lists.
    pub(super) fn is_stale(&self, lists: usize) -> bool {
        self.stale || self.lists != lists
    }

    #[inline]
    pub(super) fn lists(&self) -> usize {
        self.lists
    }

    #[inline]
    pub(super) fn list(&self, t: usize) -> &[u32] {
        &self.nodes[self.start[t] as usize..self.start[t + 1] as usize]
    }

    /// The claim mark of the node at place `at` of list `t`.
    #[inline]
    fn claim_mark(&self, t: usize, at: usize) -> &crate::sync::node_marks::ClaimMark {
        self.claims.get(t, at)
    }

    /// Node `index`'s place in the order every list keeps.
    pub(super) fn placed_at(&self, index: usize) -> u32 {
        self.placed_at[index]
    }

    /// Works out the lists (module docs). `dependencies` counts each
    /// node's dependencies.
    pub(super) fn replan<'g>(
        &mut self,
        lists: usize,
        costs: Costs<'_>,
        dependencies: &[u32],
        successors_of: impl Fn(u32) -> &'g [u32],
        dependencies_of: impl Fn(u32) -> &'g [u32],
    ) {
        let lists = lists.clamp(1, MAX_LISTS);
        let s = &mut self.scratch;
        s.heap.clear();
        s.placed.clear();
        s.waiting_for.copy_from_slice(dependencies);
        for (i, &d) in dependencies.iter().enumerate() {
            if d == 0 {
                s.heap
                    .push((costs.priority[i], std::cmp::Reverse(i as u32)));
            }
        }
        let mut free = [0u64; MAX_LISTS];
        while let Some((_, std::cmp::Reverse(i))) = s.heap.pop() {
            let (list, begins) = (0..lists)
                .map(|t| {
                    let ready = dependencies_of(i)
                        .iter()
                        .map(|&d| {
                            let d = d as usize;
                            s.finish[d]
                                + if s.list_of[d] as usize == t {
                                    0
                                } else {
                                    costs.cross
                                }
                        })
                        .max()
                        .unwrap_or(0);
                    (t, free[t].max(ready))
                })
                .min_by_key(|&(t, begins)| (begins, t))
                .expect("at least one list");
            let i = i as usize;
            s.finish[i] = begins + costs.estimate[i].max(1);
            free[list] = s.finish[i];
            s.list_of[i] = list as u8;
            self.placed_at[i] = s.placed.len() as u32;
            s.placed.push(i as u32);
            for &next in successors_of(i as u32) {
                let waiting = &mut s.waiting_for[next as usize];
                *waiting -= 1;
                if *waiting == 0 {
                    s.heap
                        .push((costs.priority[next as usize], std::cmp::Reverse(next)));
                }
            }
        }
        debug_assert_eq!(s.placed.len(), self.nodes.len(), "the graph is a DAG");
        // Counting sort by list, keeping the placement order in each.
        let mut counts = [0u32; MAX_LISTS + 1];
        for &i in &s.placed {
            counts[s.list_of[i as usize] as usize + 1] += 1;
        }
        for t in 0..lists {
            counts[t + 1] += counts[t];
        }
        self.start = [counts[lists]; MAX_LISTS + 1];
        self.start[..=lists].copy_from_slice(&counts[..=lists]);
        let mut next = counts;
        for &i in &s.placed {
            let t = s.list_of[i as usize] as usize;
            self.nodes[next[t] as usize] = i;
            next[t] += 1;
        }
        self.claims
            .lay_out((0..lists).map(|t| (self.start[t + 1] - self.start[t]) as usize));
        self.lists = lists;
        self.stale = false;
    }
}

/// What a walker found.
enum Step {
    /// A node it claimed.
    Run(u32),
    /// Unclaimed nodes remain, none of them ready at a list's head.
    Blocked,
    /// Every node is claimed.
    Done,
}

/// Per walker: where each list's unclaimed part begins, as far as it
/// knows (claimed nodes only ever grow).
struct Heads([usize; MAX_LISTS]);

impl Shared {
    /// Walks list `me` of the plan for the running frame (module docs).
    /// `frame_thread`: the caller is the frame's thread. A helper that runs
    /// inside a wait on its thread walks only while it finds a ready node
    /// (see [`Local::in_a_wait`]).
    #[cfg_attr(target_os = "linux", link_section = "engine_tasks_shared")]
    pub(super) fn walk_plan(
        &self,
        me: usize,
        local: &Local<'_>,
        frame: &FrameView<'_>,
        frame_thread: bool,
    ) {
        // A helper inside a wait that waited could wait for the very node
        // (or a task a node joins) whose wait it runs in: a deadlock. A walk
        // is a wait too: a node of it may run a planned graph, whose walker
        // may run a helper of this frame.
        let may_wait = frame_thread || !local.in_a_wait();
        let schedule = &self.schedule;
        let lane = self.inputs.lane;
        let outer_lane = local.set_lane(lane);
        let mut heads = Heads([0; MAX_LISTS]);
        let timed = self.timed;
        let now = || if timed { clock::ticks() } else { 0 };
        // The last node's end, while this thread goes straight on to the
        // next node (one clock read per node).
        let mut straight_on: Option<u64> = None;
        let mut ran = 0u32;
        let mut busy = 0u64;
        // After an idle gap, the lines of this list's next nodes, which the
        // hardware prefetcher cannot guess (module docs).
        let mine = schedule.list(me);
        let prefetch = self.inputs.caches == Caches::Cold;
        if prefetch {
            for &index in mine.iter().take(PREFETCH_AHEAD) {
                self.prefetch_node(index);
                self.prefetch_state(index);
            }
            for &index in mine.iter().take(PREFETCH_AHEAD / 2) {
                self.prefetch_body(index);
            }
        }
        // A node of this walker's list claimed before the last one was
        // marked finished (`claim_next`).
        let mut claimed_next: Option<u32> = None;
        // The sinks this walker ran, counted down as it leaves (module docs).
        let mut sinks = 0;
        local.as_a_wait(|| loop {
            let step = match claimed_next.take() {
                Some(index) => Step::Run(index),
                None => self.next_step(schedule, me, &mut heads, frame.epoch),
            };
            let index = match step {
                Step::Run(index) => {
                    if prefetch {
                        self.prefetch_walk(mine, heads.0[me]);
                    }
                    if let Some(&next) = mine.get(heads.0[me]) {
                        self.prefetch_turn(next);
                    }
                    index
                }
                Step::Done => break,
                Step::Blocked if !may_wait => break,
                Step::Blocked => {
                    straight_on = None;
                    self.wait_for_progress(schedule, me, &mut heads, local, frame, frame_thread);
                    continue;
                }
            };
            let start = straight_on.unwrap_or_else(now);
            let outcome = self.run_body(index, frame);
            let end = now();
            straight_on = Some(end);
            ran += 1;
            // Saturating: ticks of two cores out of step may go back.
            busy = busy.saturating_add(end.saturating_sub(start));
            claimed_next = self.claim_next(me, &mut heads.0[me], index, frame.epoch);
            self.runs[index as usize].write(start, end, frame.thread, outcome);
            let successors = self.successors_of(index);
            if outcome.fails_dependents() {
                for &s in successors {
                    self.poison(s, frame.epoch);
                }
            }
            let sleeping = self.states[index as usize]
                .finished
                .finish(frame.epoch, &self.sleepers)
                & !(1 << me);
            if sleeping != 0 {
                self.wake_walkers(sleeping, frame);
            }
            if successors.is_empty() {
                sinks += 1;
            }
        });
        // The frame's latch also waits for every helper to leave, so the
        // graph outlives this walk.
        if sinks > 0 {
            // SAFETY: this walker's sinks; a helper's own count keeps the
            // latch from being set here, and the frame's thread owns it.
            unsafe { self.finish_sinks(sinks) };
        }
        // Counted once, as a frame run alone counts its nodes (module docs).
        local.count_inline_runs(lane, u64::from(ran));
        local.set_lane(outer_lane);
        // Relaxed, both: a helper's count-down of the frame's latch, after
        // this, publishes them to the frame's thread, which adds its own
        // before it reads them. (A helper run inside a node's wait counts
        // its nodes here and in that node's time, as the run records do.)
        if busy > 0 {
            self.walked_ticks.fetch_add(busy, Ordering::Relaxed);
        }
        if ran > 0 && !frame_thread {
            self.helper_slots
                .fetch_or(super::bit_of(local.index() as u32), Ordering::Relaxed);
        }
    }

    /// Claims the head of `list` (this walker's own, `head` its place) if
    /// every dependency but `ran` finished (the head need not depend on
    /// `ran`): `ran` just ran on this thread and is not marked finished
    /// yet (module docs). Only the walker's own list: a node of another
    /// list is left to its walker. `None` in three cases: the head waits
    /// for another node; it is claimed already (`next_step` moves past
    /// it); another thread won the swap (`head` moved past it here, as in
    /// `next_step`).
    #[inline(always)]
    #[cfg_attr(target_os = "linux", link_section = "engine_tasks_shared")]
    fn claim_next(&self, me: usize, head: &mut usize, ran: u32, epoch: u64) -> Option<u32> {
        let schedule = &self.schedule;
        let &index = schedule.list(me).get(*head)?;
        let mark = schedule.claim_mark(me, *head);
        let ready = !mark.is_claimed(epoch)
            && self
                .dependencies_of(index)
                .iter()
                .all(|&d| d == ran || self.states[d as usize].finished.is_finished(epoch));
        if !ready {
            return None;
        }
        *head += 1;
        mark.claim(epoch).then_some(index)
    }

    /// Claims the next node: the head of list `me` if it is ready, else
    /// the first ready head of another list.
    #[cfg_attr(target_os = "linux", link_section = "engine_tasks_shared")]
    fn next_step(&self, schedule: &Schedule, me: usize, heads: &mut Heads, epoch: u64) -> Step {
        let lists = schedule.lists();
        let mut blocked = false;
        for t in (me..lists).chain(0..me) {
            let list = schedule.list(t);
            let head = &mut heads.0[t];
            while let Some(&index) = list.get(*head) {
                let mark = schedule.claim_mark(t, *head);
                if mark.is_claimed(epoch) {
                    *head += 1;
                    continue;
                }
                if !self.dependencies_finished(index, epoch) {
                    blocked = true;
                    break;
                }
                *head += 1;
                if mark.claim(epoch) {
                    return Step::Run(index);
                }
            }
        }
        if blocked {
            Step::Blocked
        } else {
            Step::Done
        }
    }

    #[inline]
    fn dependencies_finished(&self, index: u32, epoch: u64) -> bool {
        self.dependencies_of(index)
            .iter()
            .all(|&d| self.states[d as usize].finished.is_finished(epoch))
    }

    /// Whether a head is ready or every node claimed (claims nothing):
    /// moves every list's head past claimed nodes, then looks at the heads.
    fn can_progress(&self, schedule: &Schedule, heads: &mut Heads, epoch: u64) -> bool {
        let mut all_claimed = true;
        for t in 0..schedule.lists() {
            let list = schedule.list(t);
            let head = &mut heads.0[t];
            while *head < list.len() && schedule.claim_mark(t, *head).is_claimed(epoch) {
                *head += 1;
            }
            if let Some(&i) = list.get(*head) {
                if self.dependencies_finished(i, epoch) {
                    return true;
                }
                all_claimed = false;
            }
        }
        all_claimed
    }

    /// Wakes the walkers of `bits` (`node_marks.rs`).
    #[cold]
    fn wake_walkers(&self, mut bits: u32, frame: &FrameView<'_>) {
        let sleep = &frame.pool.shared().sleep;
        while bits != 0 {
            let walker = bits.trailing_zeros();
            bits &= bits - 1;
            // Relaxed: `finish`'s Acquire load of the bits ordered the
            // walker's store before its `announce`.
            sleep.unpark(self.walker_slots[walker as usize].load(Ordering::Relaxed) as usize);
        }
    }

    /// Waits until a head is ready or every node is claimed: looks for
    /// [`IN_FRAME_WAIT_NANOS`](super::IN_FRAME_WAIT_NANOS), running pool
    /// tasks of the graph's lane meanwhile, then sleeps until a walker
    /// finishes a node or such a task is pushed, and so on.
    #[cfg_attr(target_os = "linux", link_section = "engine_tasks_shared")]
    fn wait_for_progress(
        &self,
        schedule: &Schedule,
        me: usize,
        heads: &mut Heads,
        local: &Local<'_>,
        frame: &FrameView<'_>,
        frame_thread: bool,
    ) {
        let lane = self.inputs.lane;
        let mut deadline = clock::ticks().saturating_add(self.inputs.plan_wait_ticks);
        loop {
            for _ in 0..PAUSES_BETWEEN_LOOKS {
                std::hint::spin_loop();
            }
            if self.can_progress(schedule, heads, frame.epoch) {
                local.end_search();
                return;
            }
            // The frame's thread leaves its helper tasks in the injector
            // for the pool's threads until they all started (it would run
            // them itself, as walkers of nothing). Its sleep below may still
            // run one; inside this walk (a wait), such a helper only runs
            // ready nodes.
            if !frame_thread || self.helpers_started() {
                if let Some(found) = local.find_task(lane, false) {
                    local.run_found(found);
                    continue;
                }
            }
            if clock::ticks() < deadline {
                continue;
            }
            // Relaxed: published by `announce`'s Release (see `wake_walkers`).
            self.walker_slots[me].store(local.index() as u32, Ordering::Relaxed);
            self.sleepers.announce(me as u32);
            local.sleep_unless(lane, || {
                self.can_progress(schedule, &mut Heads(heads.0), frame.epoch)
            });
            self.sleepers.withdraw(me as u32);
            deadline = clock::ticks().saturating_add(self.inputs.plan_wait_ticks);
        }
    }
}

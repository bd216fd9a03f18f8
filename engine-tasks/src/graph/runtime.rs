//! Running a compiled graph: the per-node tasks and the per-frame protocol.
//!
//! # Per-frame states of a node
//!
//! Each finishing dependency counts the node's `pending` countdown once
//! (`countdown.rs`); the last one owns the node's single [`TaskRef`] for the
//! frame and either runs it next on its own thread or queues it. So every
//! node runs once per frame, after all of its dependencies, and its body (an
//! `FnMut`) is never entered by two threads at once. A frame run alone
//! (`alone.rs`) instead walks a plan that puts every node after its
//! dependencies, and counts nothing unless it hands over; a planned frame
//! (`planned.rs`) has each thread walk its own list of a plan and claim
//! each node with its marks, counting nothing either.
//!
//! The thread that owns a node writes how its run went to the node's
//! [`RunRecord`] (`run_record.rs`), apart from the countdown's line, which
//! only the dependencies touch.
//!
//! Nothing of a node's state is reset between frames: the frame's thread
//! writing 256 nodes' lines at frame start made every other thread miss on
//! each node it touched. Instead the countdown counts across the frames
//! that count (`FrameInputs::count_epoch`), every frame rewrites every run
//! record, and the poison flag carries the number of the frame that set
//! it; a stale tag reads as unset. Frames are numbered from 1 (`epoch`),
//! so 0 is never current.
//!
//! # Lifetime
//!
//! Nodes without successors count down the frame's sinks, and the last
//! sets the frame's [`Latch`], which [`Runtime::run_frame`] waits for.
//! Every node reaches such a sink, so the latch is set only after every
//! node has released its successors; and a
//! node touches the graph only before its last release, or while it holds a
//! node it released (unfinished, so the latch cannot be set). Hence the
//! borrowed frame data, the pool handle and the graph itself outlive every
//! access a task makes to them. A frame run alone (`alone.rs`) touches the
//! latch only if it hands over, and then first counts down the sinks that
//! already ran. In a planned frame the latch also holds one count per
//! helper task, which each gives back as its last touch of the graph; the
//! frame's thread runs any helper task still queued once its own walk is
//! over, so the frame never waits for a worker that did not start its
//! helper. A helper that started holds the frame until it leaves: while it
//! waits for a node it may run tasks of the graph's lane, as any waiting
//! thread does (see "What the frame's thread runs while it waits" in
//! `graph/mod.rs`), and the frame ends once such a task returns.

mod alone;
mod planned;

use super::build::Topology;
use super::run_record::NodeOutcome;
use super::run_record::RunRecord;
use super::stats::FrameStats;
use super::FrameSharing;
use super::{Body, FrameError, NodeContext, NodePanic, NodeSpec, ReadyOrder};
use crate::clock::{self, TickRate};
use crate::faults::{self, Site};
use crate::lane::Lane;
use crate::pool::spawn::panic_message;
use crate::pool::worker::{self, AbortOnUnwind, Local};
use crate::pool::PoolHandle;
use crate::sync::countdown::Countdown;
use crate::sync::latch::{Latch, Waiter};
use crate::sync::node_marks::{NodeMarks, Sleepers};
use crate::sync::queue::TaskQueue;
use crate::sync::task::{Header, TaskRef};
use crate::trace::instrument;
use alone::{AlonePlan, HandOverRule};
use crossbeam_utils::CachePadded;
use planned::Schedule;
use std::any::Any;
use std::cell::UnsafeCell;
use std::panic::{self, AssertUnwindSafe};
use std::ptr::{self, NonNull};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// "No slot" for thread indices, and "no node" for `released_by`.
const NONE: u32 = u32::MAX;

/// Priorities are recomputed from the smoothed node times every this many
/// frames. Times are smoothed over about four frames anyway (see
/// `update_estimates`), and skipping the sort on most frames keeps its cost
/// (a few ns per node) out of the per-node overhead.
const REPRIORITIZE_EVERY: u64 = 8;

/// While frames run alone, priorities only order the plan of the next one
/// (`alone.rs`), which on one thread takes as long in any order: they
/// decide no more than what a hand-over queues first and how the shared
/// rest of that frame goes. So they are recomputed only every this many
/// frames (and, once frames are shared, as soon as [`REPRIORITIZE_EVERY`]
/// frames passed). On the benchmark graph of 256 empty nodes, timed, this
/// took the frame from a median of 12.4 to 11.2 µs in three paired runs.
const REPRIORITIZE_ALONE_EVERY: u64 = 64;

/// Planned frames (`planned.rs`) walk lists worked out from the
/// priorities, and a walker whose list runs late claims the ready nodes of
/// other lists, so the plan need not follow every frame's noise; while
/// working it out again costs about 25 µs on the benchmark graph of 256
/// nodes (8 µs of re-sort, 14-35 µs of list scheduling, all on the frame's
/// thread). So graphs that run planned frames re-plan every this many
/// frames. On that graph with 1 µs nodes, frames back to back, timed
/// against untimed frames interleaved, this took the timed frame from
/// 1.09-1.10 to 1.03-1.04 times the untimed one (three runs each).
const REPRIORITIZE_PLANNED_EVERY: u64 = 64;

/// By default ([`ShareThreshold`]) a frame is shared with other threads
/// (its nodes queued, waking a sleeping thread) only if it is expected to
/// take at least this much work (the sum of the smoothed node times; for an
/// untimed graph, the last frame's wall time); otherwise its thread runs it
/// alone (`alone.rs`). A woken worker
/// starts its first node about 6.5 µs after the wake-up on this VM (p50,
/// measured at frame start on the 256-node benchmark graph), and the
/// wake-up's syscall is paid by the thread running the frame; below this
/// much work the frame ends sooner on one thread (the 0 ns case of
/// `benches/graph.rs`: 35 ns per node without wake-ups against 91 with
/// them, before frames ran alone).
const WAKE_WORTH_NANOS: f64 = 20_000.0;

/// Threads that run out of work at the end of a frame keep looking for the
/// next one (instead of parking) when the smoothed gap between frames is
/// below this. A park and its wake-up cost the parked thread about 10 µs of
/// CPU and the next frame about 6.5 µs of latency on this VM, so a loop that
/// starts its next frame within microseconds (a frame-rate-unlimited loop, a
/// benchmark) is served better awake; a paced game loop, with gaps of
/// milliseconds, parks at once and spends no CPU between frames.
const LINGER_GAP_NANOS: f64 = 20_000.0;

/// How long a thread that runs out of work during a shared frame looks for
/// the frame's next nodes before it parks (`registry::Shared::frame_shared`).
/// Within a frame the next nodes are usually microseconds away; a park and
/// its wake-up cost about 10 µs of CPU and 5 µs of latency here. Before
/// this, the worker parked in about half the frames of the 1 µs benchmark
/// graph, run back to back.
const IN_FRAME_WAIT_NANOS: f64 = 20_000.0;

/// By default a frame is shared, and threads linger between frames, only
/// if besides [`WAKE_WORTH_NANOS`] the nodes average at least this much
/// (measured, or for an untimed graph the frame's wall time per node). Lighter nodes cost about as much to hand between cores as to run:
/// a node hand-off between threads costs 80-130 ns here, and the 0 ns case
/// of `benches/graph.rs` took 9-14 µs on one thread and 19-37 µs with a
/// worker in it.
///
/// Without this condition the choice was bistable: with a worker in the
/// frame, 0 ns nodes measure about 140 ns each (their spans include the
/// cross-core hand-offs), the frame's total passes `WAKE_WORTH_NANOS`, and
/// every frame woke the worker again. 200 ns is above that, so such a
/// frame falls back to one thread and stays there.
const LIGHT_NODE_NANOS: f64 = 200.0;

struct Node<C: ?Sized> {
    name: Box<str>,
    /// The name as the timeline recorder and the profiler know it.
    label: instrument::NodeLabel,
    lane: Lane,
    pinned: bool,
    /// Whether queueing this node wakes a sleeping thread (see
    /// [`WAKE_WORTH_NANOS`]); set between frames. Per node, so that a
    /// finer rule needs no new field.
    wakes: bool,
    body: UnsafeCell<Body<C>>,
    panic: Mutex<Option<Box<dyn Any + Send>>>,
}

/// What a node's dependencies write when they release it: only they touch
/// this line (the node's own thread writes its [`RunRecord`]). Padded:
/// nodes released by different threads have neighbouring states.
struct NodeState {
    pending: Countdown,
    /// The node that released it, written in frames that count. Needs no
    /// tag: such a frame releases every node that has dependencies, except
    /// those that ran before a hand-over, and for those (as for every node
    /// of a frame that ran alone) `record` asks the plan instead
    /// (`AlonePlan::released_by`); roots keep `NONE`.
    released_by: AtomicU32,
    /// Claimed and finished in planned frames (`planned.rs`), which do not
    /// touch the countdown.
    marks: NodeMarks,
}

impl NodeState {
    fn new() -> Self {
        NodeState {
            pending: Countdown::new(),
            released_by: AtomicU32::new(NONE),
            marks: NodeMarks::new(),
        }
    }
}

/// A node's intrusive task; `header` first so a header pointer is a task
/// pointer.
#[repr(C)]
struct NodeTask<C: ?Sized> {
    header: Header,
    graph: *const Shared<C>,
    index: u32,
}

/// The task that has a pool thread walk list `list` of a planned frame
/// (`planned.rs`); `header` first so a header pointer is a task pointer.
#[repr(C)]
struct HelperTask<C: ?Sized> {
    header: Header,
    graph: *const Shared<C>,
    list: u32,
}

/// Set by the frame's thread before it queues the roots; read-only while
/// the frame runs.
struct FrameInputs<C: ?Sized> {
    data: Option<NonNull<C>>,
    pool: *const PoolHandle,
    number: u64,
    /// The epoch of the dependency countdowns (`countdown.rs`): frames
    /// that count, numbered from 1. A frame run alone to its end counts
    /// nothing, so it does not take one.
    count_epoch: u64,
    thread_slot: u32,
    waker: Option<Waiter>,
    /// The lane of every node, for planned frames (which need one).
    lane: Lane,
    /// How long a walker of a planned frame looks for a ready node before
    /// it sleeps ([`IN_FRAME_WAIT_NANOS`]).
    plan_wait_ticks: u64,
}

/// Everything tasks reach while a frame runs.
struct Shared<C: ?Sized> {
    nodes: Box<[Node<C>]>,
    states: Box<[CachePadded<NodeState>]>,
    runs: Box<[RunRecord]>,
    /// Per node, the frame epoch in which a dependency failed. Written only
    /// then, so in the usual frame both cores keep these lines.
    poisoned_in: Box<[AtomicU64]>,
    tasks: Box<[NodeTask<C>]>,
    /// One per list of the plan but the frame's own.
    helper_tasks: Box<[HelperTask<C>]>,
    /// Helper tasks of the running planned frame not yet started.
    helpers_pending: CachePadded<AtomicUsize>,
    /// The plan of planned frames; written between frames only.
    schedule: Schedule,
    /// The walkers of a planned frame that may be asleep, and the pool
    /// slot of each walker (list) that went to sleep.
    sleepers: CachePadded<Sleepers>,
    walker_slots: [AtomicU32; planned::MAX_LISTS],
    successor_start: Box<[u32]>,
    /// Reordered by priority between frames only.
    successors: Box<[u32]>,
    /// Each node's number of dependencies: read-only, and kept off the
    /// countdowns' lines, which every release writes (`countdown.rs`).
    dependencies: Box<[u32]>,
    /// Each node's dependencies: those of node `i` are
    /// `dependency_list[dependency_start[i]..dependency_start[i + 1]]`.
    dependency_start: Box<[u32]>,
    dependency_list: Box<[u32]>,
    inline_successors: bool,
    /// Read the clock around every node.
    timed: bool,
    /// Sinks still to finish in the frame; the last sets `done`. Each on
    /// its own line: sinks count on the first, the frame's thread polls the
    /// second while it waits, and the rest of this struct is read by every
    /// node.
    sinks_left: CachePadded<AtomicUsize>,
    done: CachePadded<Latch>,
    inbox: TaskQueue,
    failed: AtomicBool,
    inputs: FrameInputs<C>,
}

// SAFETY: while a frame runs, threads share `&Shared`: its atomics, the
// queue and latch (thread-safe), fields written only between frames, and
// node bodies, each entered by one thread at a time (module docs; bodies are
// `Send`). `inputs.data` is only turned into a `&C`, hence `C: Sync`.
unsafe impl<C: ?Sized + Sync> Sync for Shared<C> {}
// SAFETY: as above; the raw pointers are only followed during a frame.
unsafe impl<C: ?Sized + Sync> Send for Shared<C> {}

/// A compiled graph; owns [`Shared`] through a raw pointer because tasks
/// point into it while a frame runs.
pub(super) struct Runtime<C: ?Sized> {
    shared: NonNull<Shared<C>>,
    order: ReadyOrder,
    topological: Box<[u32]>,
    roots: Box<[u32]>,
    /// The nodes without successors.
    sinks: Box<[u32]>,
    /// The least urgent lane among the nodes that any thread may run.
    floor: Lane,
    /// Smoothed node times in clock ticks, and the priorities made of them.
    estimate: Box<[u64]>,
    /// The sum of `estimate`.
    estimate_total: u64,
    priority: Box<[u64]>,
    /// The frame after which priorities were last recomputed from measured
    /// times (`None` before the first).
    reprioritized_after: Option<u64>,
    frames: u64,
    /// Frames that counted dependencies (see `FrameInputs::count_epoch`).
    counted_frames: u64,
    rate: TickRate,
    stats: FrameStats,
    /// Each pool slot's parked ticks when the frame began.
    parked_before: Vec<u64>,
    /// Whether nodes currently wake sleeping threads, and idle threads wait
    /// for the next frame (see `update_wakes`); if not, the frame's thread
    /// runs frames alone (`alone.rs`).
    waking: bool,
    share_above: ShareThreshold,
    plan: AlonePlan,
    /// The lane of planned frames, if this graph may run them
    /// (`planned.rs`).
    plan_lane: Option<Lane>,
    /// How many nodes of `plan` the last frame ran alone (all of them,
    /// some before a hand-over, or none).
    ran_alone: usize,
    /// When the last frame ended, and the smoothed gap before the next one
    /// (ticks), for [`LINGER_GAP_NANOS`].
    last_end_tick: Option<u64>,
    gap_estimate: f64,
}

// SAFETY: `Shared` is `Send + Sync` for these `C`, and nothing else in the
// runtime is thread-bound; between frames only the owner touches it.
unsafe impl<C: ?Sized + Sync> Send for Runtime<C> {}
// SAFETY: `&Runtime` only reads names and statistics.
unsafe impl<C: ?Sized + Sync> Sync for Runtime<C> {}

impl<C: ?Sized> Drop for Runtime<C> {
    fn drop(&mut self) {
        // SAFETY: made by `Box::into_raw` in `new`; no frame runs (that would
        // borrow `self`), so no task points into it.
        drop(unsafe { Box::from_raw(self.shared.as_ptr()) });
    }
}

impl<C: ?Sized + Sync> Runtime<C> {
    pub(super) fn new(
        specs: Vec<NodeSpec<C>>,
        topology: Topology,
        order: ReadyOrder,
        timed: bool,
        share_above: ShareThreshold,
        plan_frames: bool,
    ) -> Self {
        let n = specs.len();
        // Planned frames need one lane for every node, none pinned, and
        // priorities to plan by.
        let first_lane = specs.first().map_or(Lane::FrameCritical, |s| s.lane);
        let plan_lane = (plan_frames
            && order == ReadyOrder::CriticalPathFirst
            && specs.iter().all(|s| !s.pinned && s.lane == first_lane))
        .then_some(first_lane);
        let (dependency_start, dependency_list) = dependency_lists(
            &topology.successor_start,
            &topology.successors,
            &topology.in_degree,
        );
        let floor = specs
            .iter()
            .filter(|s| !s.pinned)
            .map(|s| s.lane)
            .max()
            .unwrap_or(Lane::FrameCritical);
        let lane_of = specs.iter().map(|s| s.lane).collect();
        let nodes: Box<[Node<C>]> = specs
            .into_iter()
            .map(|s| Node {
                label: instrument::intern_node_name(&s.name),
                name: s.name.into(),
                lane: s.lane,
                pinned: s.pinned,
                wakes: true,
                body: UnsafeCell::new(s.body),
                panic: Mutex::new(None),
            })
            .collect();
        let roots: Box<[u32]> = (0..n as u32)
            .filter(|&i| topology.in_degree[i as usize] == 0)
            .collect();
        let sinks = (0..n as u32)
            .filter(|&i| {
                let i = i as usize;
                topology.successor_start[i] == topology.successor_start[i + 1]
            })
            .collect();
        let shared = Box::new(Shared {
            nodes,
            states: (0..n).map(|_| CachePadded::new(NodeState::new())).collect(),
            runs: (0..n).map(|_| RunRecord::new()).collect(),
            poisoned_in: (0..n).map(|_| AtomicU64::new(0)).collect(),
            tasks: Box::new([]),
            helper_tasks: Box::new([]),
            helpers_pending: CachePadded::new(AtomicUsize::new(0)),
            schedule: Schedule::new(n),
            sleepers: CachePadded::new(Sleepers::new()),
            walker_slots: Default::default(),
            successor_start: topology.successor_start,
            successors: topology.successors,
            dependencies: topology.in_degree,
            dependency_start,
            dependency_list,
            inline_successors: order == ReadyOrder::CriticalPathFirst,
            timed,
            sinks_left: CachePadded::new(AtomicUsize::new(0)),
            done: CachePadded::new(Latch::new(1)),
            inbox: TaskQueue::new(),
            failed: AtomicBool::new(false),
            inputs: FrameInputs {
                data: None,
                pool: ptr::null(),
                number: 0,
                count_epoch: 0,
                thread_slot: NONE,
                waker: None,
                lane: first_lane,
                plan_wait_ticks: 0,
            },
        });
        let shared = NonNull::from(Box::leak(shared));
        let graph = shared.as_ptr().cast_const();
        let tasks = (0..n as u32)
            .map(|index| NodeTask {
                header: Header::new(run_node::<C>),
                graph,
                index,
            })
            .collect();
        let helper_tasks = (1..planned::MAX_LISTS as u32)
            .map(|list| HelperTask {
                header: Header::new(run_helper::<C>),
                graph,
                list,
            })
            .collect();
        // SAFETY: just allocated; no task exists yet.
        unsafe {
            (*shared.as_ptr()).tasks = tasks;
            (*shared.as_ptr()).helper_tasks = helper_tasks;
        }
        let mut runtime = Runtime {
            shared,
            order,
            topological: topology.topological,
            roots,
            sinks,
            floor,
            estimate: vec![0; n].into(),
            estimate_total: 0,
            priority: vec![0; n].into(),
            reprioritized_after: None,
            frames: 0,
            counted_frames: 0,
            rate: TickRate::new(),
            stats: FrameStats::with_nodes(n),
            parked_before: Vec::new(),
            // The first frame starts alone, and hands over after its first
            // node if that shows the frame is worth a second thread.
            waking: false,
            share_above,
            plan: AlonePlan::new(lane_of, order),
            plan_lane,
            ran_alone: 0,
            last_end_tick: None,
            gap_estimate: f64::INFINITY,
        };
        runtime.reprioritize();
        runtime.replan_if_stale();
        runtime
    }

    pub(super) fn len(&self) -> usize {
        self.estimate.len()
    }

    pub(super) fn name(&self, index: usize) -> &str {
        // SAFETY: names never change after `new`.
        unsafe { &self.shared.as_ref().nodes[index].name }
    }

    pub(super) fn stats(&self) -> &FrameStats {
        &self.stats
    }

    /// Exclusive access between frames.
    fn shared_mut(&mut self) -> &mut Shared<C> {
        // SAFETY: `&mut self` means no frame is running, and a frame ends
        // only once no task of it can touch `Shared` again (module docs).
        unsafe { self.shared.as_mut() }
    }

    pub(super) fn run_frame(
        &mut self,
        pool: &PoolHandle,
        data: &C,
    ) -> Result<&FrameStats, FrameError> {
        let number = self.frames;
        self.frames += 1;
        let pool_shared = pool.shared();
        let sinks = self.sinks.len();
        // Planned (`planned.rs`) when shared, allowed, and another thread
        // of the pool could walk a list: one list per worker, and one for
        // this thread unless it is one of them (a graph run in a task).
        let other_workers =
            pool_shared.worker_count() - usize::from(worker::is_worker_of(pool_shared));
        let lists = (other_workers + 1).min(planned::MAX_LISTS);
        let planned = self.waking && self.plan_lane.is_some() && lists > 1;
        if planned {
            self.replan_schedule(lists);
        }
        let plan_wait_ticks = (IN_FRAME_WAIT_NANOS / self.rate.nanos_per_tick()) as u64;
        // SAFETY: as in `shared_mut`.
        let shared = unsafe { self.shared.as_mut() };
        shared.reset(sinks);
        shared.inputs.plan_wait_ticks = plan_wait_ticks;
        shared.inputs.data = Some(NonNull::from(data));
        shared.inputs.pool = pool;
        shared.inputs.number = number;
        shared.inputs.count_epoch = self.counted_frames + 1;

        let steals_before = pool_shared.stolen_tasks_total();
        let slots = pool_shared.slots.len();
        if self.parked_before.len() != slots {
            self.parked_before.resize(slots, 0);
        }
        let started = Instant::now();
        let start_tick = clock::ticks();
        self.update_linger(pool_shared, start_tick);
        let idle_gap = (LINGER_GAP_NANOS / self.rate.nanos_per_tick()) as u64;
        // The first frame after an idle gap of the pool (the first graph of
        // a game's frame) times the loop (early_wake.rs). Frames back to back
        // skip this, and the helper count below.
        let after_idle_gap = pool_shared.idle_before(start_tick, idle_gap);
        if after_idle_gap {
            pool_shared
                .next_frame
                .frame_started(start_tick, self.rate.nanos_per_tick());
        }
        for (before, slot) in self.parked_before.iter_mut().zip(pool_shared.slots.iter()) {
            *before = slot.counters.parked_ticks_at(start_tick);
        }
        let (roots, floor, graph) = (&self.roots, self.floor, self.shared);
        let alone = (!self.waking).then_some(&mut self.plan);
        let mut ran_alone = 0;
        let (nanos_per_tick, share_above) = (self.rate.nanos_per_tick(), self.share_above);
        let in_frame_wait_ticks = (IN_FRAME_WAIT_NANOS / nanos_per_tick) as u64;
        let (timed, first_frame) = (shared.timed, number == 0);
        let frame_span = instrument::frame(number);
        pool_shared.frame_began();
        let mut sharing = FrameSharing::Alone;
        if !roots.is_empty() {
            sharing = worker::with_slot(pool_shared, |local| {
                // SAFETY: no task of this frame is queued yet.
                let inputs = unsafe { &mut (*graph.as_ptr()).inputs };
                inputs.thread_slot = local.map_or(NONE, |l| l.index() as u32);
                // Who to wake when a pinned node is ready. A slot's parker
                // lives in the pool's shared state, which outlives every
                // node: the pool's threads hold it through their `Arc`, and
                // the frame's thread waits in the pool, its caller borrowing
                // a handle.
                inputs.waker = Some(match local {
                    Some(l) => Waiter::Slot(pool_shared.sleep.parker(l.index())),
                    None => crate::pool::wait::waiter_without_slot(),
                });
                // SAFETY: from here on the frame only shares the graph.
                let shared = unsafe { graph.as_ref() };
                let _guard = AbortOnUnwind("while task-graph nodes were queued");
                let sharing = if let (true, Some(local)) = (planned, local) {
                    shared.start_helpers(lists - 1, local);
                    pool_shared.frame_shared(in_frame_wait_ticks);
                    // SAFETY: the frame runs until `wait_frame` returns.
                    let frame = unsafe { shared.frame_view(Some(local)) };
                    shared.walk_plan(0, local, &frame, true);
                    local.wait_frame(&shared.done, floor, &shared.inbox);
                    return FrameSharing::Planned;
                } else if let Some(plan) = alone {
                    let check_every = if timed || first_frame {
                        1
                    } else {
                        alone::CHECK_EVERY
                    };
                    // Only if a worker other than this thread could help.
                    let workers = pool_shared.worker_count();
                    let this_is_a_worker = local.is_some_and(|l| l.index() < workers);
                    let others = workers - usize::from(this_is_a_worker);
                    let hand_over = (others > 0).then(|| {
                        HandOverRule::new(share_above, start_tick, nanos_per_tick, check_every)
                    });
                    let sharing;
                    (sharing, ran_alone) = shared.run_alone(plan, local, hand_over);
                    if sharing == FrameSharing::Alone {
                        return sharing;
                    }
                    sharing
                } else {
                    shared.queue_ready(roots.iter().copied(), local, pool_shared, false);
                    FrameSharing::Shared
                };
                // Announced once its nodes are queued; `frame_unshared` below.
                pool_shared.frame_shared(in_frame_wait_ticks);
                if let Some(local) = local {
                    local.wait_frame(&shared.done, floor, &shared.inbox);
                } else {
                    crate::pool::wait::wait_without_slot(
                        pool_shared,
                        &shared.done,
                        || floor,
                        Some(&shared.inbox),
                    );
                }
                sharing
            });
        }
        self.ran_alone = ran_alone;
        if sharing != FrameSharing::Alone {
            pool_shared.frame_unshared();
        }
        if matches!(sharing, FrameSharing::HandedOver | FrameSharing::Shared) {
            self.counted_frames += 1;
        }
        pool_shared.frame_ended(clock::ticks());
        drop(frame_span);
        let end_tick = clock::ticks();
        let ended = Instant::now();
        self.rate.observe(started, start_tick);
        self.rate.observe(ended, end_tick);
        let steals = pool_shared.stolen_tasks_total() - steals_before;
        self.stats.set_sharing(sharing);
        self.record(number, ended - started, start_tick, steals, slots);
        if after_idle_gap {
            // The workers that took part wake early for the next frames.
            let helpers = if sharing == FrameSharing::Alone {
                0
            } else {
                let frame_slot = self.shared_mut().inputs.thread_slot;
                self.stats.slots_that_ran() & !bit_of(frame_slot)
            };
            pool_shared.next_frame.frame_ended(helpers);
        }
        let frame_slot = self.shared_mut().inputs.thread_slot as usize;
        instrument::frame_plots(
            |lane| pool_shared.queued(lane),
            || {
                let stats = &self.stats;
                stats
                    .nodes()
                    .filter(|node| node.thread.is_some_and(|t| t != frame_slot))
                    .count()
            },
        );
        // Parked time per slot, for the slots that ran: started workers and
        // the frame's thread.
        let workers = pool_shared.threads_started();
        let frame_slot = self.shared_mut().inputs.thread_slot as usize;
        let before = &self.parked_before;
        self.stats.record_parked(|slot| {
            let active = slot < workers || slot == frame_slot;
            let parked = pool_shared.slots[slot].counters.parked_ticks_at(end_tick);
            active.then(|| parked.saturating_sub(before[slot]))
        });
        // Estimates feed the wake-up decision in any order, and the
        // priorities of critical-path-first.
        if self.shared_mut().timed {
            self.update_estimates();
        }
        self.update_wakes(ended - started);
        if self.order == ReadyOrder::CriticalPathFirst && self.shared_mut().timed {
            // Every eighth frame while frames are shared and queued, every
            // 64th while they run alone or planned (the constants say why).
            // The interval is the current one, so a re-sort long due comes
            // at once when frames turn queued.
            let every = if !self.waking {
                REPRIORITIZE_ALONE_EVERY
            } else if self.plan_lane.is_some() {
                REPRIORITIZE_PLANNED_EVERY
            } else {
                REPRIORITIZE_EVERY
            };
            if self
                .reprioritized_after
                .is_none_or(|after| number >= after + every)
            {
                self.reprioritized_after = Some(number);
                self.reprioritize();
            }
        }
        self.replan_if_stale();
        // The gap starts where idle threads start waiting for the next frame
        // (`frame_ended`), before this thread's bookkeeping above.
        self.last_end_tick = Some(end_tick);
        // Relaxed: the frame latch's acquire ordered every node's writes.
        if self.shared_mut().failed.load(Ordering::Relaxed) {
            return Err(self.frame_error(number));
        }
        Ok(&self.stats)
    }

    /// Smooths the gap since the last frame and tells the pool how long its
    /// idle threads should wait for the next frame before they park (see
    /// [`LINGER_GAP_NANOS`]).
    fn update_linger(&mut self, pool: &crate::pool::registry::Shared, start_tick: u64) {
        let Some(last_end) = self.last_end_tick else {
            return;
        };
        let gap = start_tick.saturating_sub(last_end) as f64;
        // Falls at once, rises smoothly: a loop that resumes back-to-back
        // frames after a pause (a loading screen) lingers from its next
        // frame on, and one long gap does not end lingering.
        self.gap_estimate = if gap < self.gap_estimate {
            gap
        } else {
            0.75 * self.gap_estimate + 0.25 * gap
        };
        // Only for frames worth a second thread (`update_wakes`).
        let linger = if self.waking {
            linger_ticks(self.gap_estimate, self.rate.nanos_per_tick())
        } else {
            0
        };
        pool.set_linger_ticks(linger);
    }

    fn record(&mut self, number: u64, wall: Duration, start_tick: u64, steals: u64, slots: usize) {
        // SAFETY: between frames (see `shared_mut`); borrowed alongside the
        // statistics.
        let shared = unsafe { self.shared.as_mut() };
        let (plan, ran_alone) = (&self.plan, self.ran_alone);
        let planned = self.stats.sharing() == FrameSharing::Planned;
        let (dependency_start, dependency_list) =
            (&shared.dependency_start, &shared.dependency_list);
        let (schedule, states) = (&shared.schedule, &shared.states);
        let released_by = |i: usize, runs: &[RunRecord]| {
            if planned {
                // The dependency that finished last (the one placed last,
                // untimed).
                let range = dependency_start[i] as usize..dependency_start[i + 1] as usize;
                return dependency_list[range]
                    .iter()
                    .copied()
                    .max_by_key(|&d| (runs[d as usize].read().end, schedule.placed_at(d as usize)))
                    .unwrap_or(NONE);
            }
            plan.released_by(i, ran_alone).unwrap_or_else(|| {
                // Relaxed: the frame latch's acquire ordered these writes.
                states[i].released_by.load(Ordering::Relaxed)
            })
        };
        let nanos_per_tick = self.rate.nanos_per_tick();
        self.stats.record(
            number,
            wall,
            start_tick,
            nanos_per_tick,
            steals,
            slots,
            &mut shared.runs,
            &self.sinks,
            released_by,
        );
    }

    /// Folds this frame's node times into the smoothed estimates
    /// (exponential average, weight 1/4 for the newest frame) and their sum.
    /// A node that panicked or was skipped keeps its estimate. An estimate
    /// of 0 has not been measured yet and takes the first time as it is (a
    /// smoothed one never decays to 0: `e - e / 4` stays above 0).
    fn update_estimates(&mut self) {
        let mut total = 0;
        for (i, estimate) in self.estimate.iter_mut().enumerate() {
            if let Some(ticks) = self.stats.ran_ticks(i) {
                *estimate = if *estimate == 0 {
                    ticks
                } else {
                    *estimate - *estimate / 4 + ticks / 4
                };
            }
            total += *estimate;
        }
        self.estimate_total = total;
    }

    /// Decides whether the next frame is shared (its nodes queued, waking
    /// sleeping threads) or runs alone (see [`ShareThreshold`]): by the
    /// smoothed total node time of a timed graph (already updated with this
    /// frame's, the first frame's included: its wall time also holds one-off
    /// costs, such as first touches of memory, that made a graph of a few
    /// empty nodes look worth a second thread), or by this frame's wall time
    /// for an untimed one.
    fn update_wakes(&mut self, wall: Duration) {
        let nanos = if self.shared_mut().timed {
            self.estimate_total as f64 * self.rate.nanos_per_tick()
        } else {
            wall.as_nanos() as f64
        };
        let worth = self
            .share_above
            .worth_a_second_thread(nanos, self.estimate.len());
        if worth != self.waking {
            self.waking = worth;
            for node in self.shared_mut().nodes.iter_mut() {
                node.wakes = worth;
            }
        }
    }

    /// Priority = own estimate + 1 + the largest successor priority (the `+1`
    /// makes longer chains win when times are equal); then roots and every
    /// successor list are sorted by it, most urgent first.
    fn reprioritize(&mut self) {
        if self.order != ReadyOrder::CriticalPathFirst {
            return;
        }
        // SAFETY: between frames, borrowed apart from the other fields.
        let shared = unsafe { self.shared.as_mut() };
        let priority = &mut self.priority;
        for &i in self.topological.iter().rev() {
            let i = i as usize;
            let range = shared.successor_start[i] as usize..shared.successor_start[i + 1] as usize;
            let after = shared.successors[range]
                .iter()
                .map(|&s| priority[s as usize])
                .max();
            priority[i] = self.estimate[i] + 1 + after.unwrap_or(0);
        }
        let key = |&i: &u32| (std::cmp::Reverse(priority[i as usize]), i);
        for i in 0..shared.nodes.len() {
            let range = shared.successor_start[i] as usize..shared.successor_start[i + 1] as usize;
            shared.successors[range].sort_unstable_by_key(key);
        }
        self.roots.sort_unstable_by_key(key);
        self.plan.invalidate();
        shared.schedule.invalidate();
    }

    /// Works out the plan of frames run alone again if the priorities
    /// changed since, and the next frame runs alone.
    fn replan_if_stale(&mut self) {
        if !self.waking && self.plan.is_stale() {
            // SAFETY: between frames (see `shared_mut`); a shared borrow of
            // the graph alongside the plan.
            let shared = unsafe { self.shared.as_ref() };
            self.plan.replan(&self.roots, &shared.dependencies, |i| {
                shared.successors_of(i)
            });
        }
    }

    /// Works out the plan of planned frames for `lists` threads again if
    /// the priorities changed since (allocates nothing).
    fn replan_schedule(&mut self, lists: usize) {
        // SAFETY: between frames (see `shared_mut`), borrowed apart from
        // the estimates and priorities.
        let shared = unsafe { self.shared.as_mut() };
        if !shared.schedule.is_stale(lists) {
            return;
        }
        let cross = (planned::CROSS_NANOS / self.rate.nanos_per_tick()) as u64;
        // Out of the graph while it is worked out (an empty schedule
        // allocates nothing).
        let mut schedule = std::mem::replace(&mut shared.schedule, Schedule::new(0));
        let graph = &*shared;
        let costs = planned::Costs {
            priority: &self.priority,
            estimate: &self.estimate,
            cross,
        };
        schedule.replan(
            lists,
            costs,
            &graph.dependencies,
            |i| graph.successors_of(i),
            |i| graph.dependencies_of(i),
        );
        shared.schedule = schedule;
    }

    /// The error of a frame in which nodes panicked (allocates).
    fn frame_error(&mut self, number: u64) -> FrameError {
        // SAFETY: between frames (see `shared_mut`); a shared borrow of the
        // graph alongside the statistics.
        let shared = unsafe { self.shared.as_ref() };
        let mut error = FrameError {
            frame: number,
            panicked: Vec::new(),
            skipped: Vec::new(),
        };
        for (node, run) in shared.nodes.iter().zip(self.stats.nodes()) {
            match run.outcome {
                NodeOutcome::Panicked => {
                    let payload = node.panic.lock().unwrap_or_else(|e| e.into_inner()).take();
                    let message = payload
                        .as_deref()
                        .and_then(panic_message)
                        .unwrap_or("<non-string panic payload>")
                        .to_owned();
                    // A panicked node always leaves its payload; a message
                    // stands in should that ever change.
                    let payload = payload.unwrap_or_else(|| Box::new(message.clone()));
                    error.panicked.push(NodePanic {
                        node: node.name.to_string(),
                        message,
                        payload,
                    });
                }
                NodeOutcome::Skipped => error.skipped.push(node.name.to_string()),
                NodeOutcome::Ran => {}
            }
        }
        error
    }
}

impl<C: ?Sized> Shared<C> {
    fn task(&self, index: u32) -> TaskRef {
        let header = NonNull::from(&self.tasks[index as usize].header);
        // SAFETY: the node's task lives as long as the graph, and the caller
        // owns the node for this frame (its release was the last one the
        // countdown counted, or it is a root, or a node a hand-over found
        // ready, queued once by the frame's thread).
        unsafe { TaskRef::from_raw(header) }
    }

    /// Prepares a frame; needs `&mut`, so no task of an earlier frame runs.
    /// Node states need nothing (module docs).
    fn reset(&mut self, sinks: usize) {
        *self.failed.get_mut() = false;
        *self.sinks_left.get_mut() = sinks;
        self.done = CachePadded::new(Latch::new(1));
    }

    /// Queues the tasks of `helpers` helpers, one per list after the
    /// frame's own, on the frame's thread (`planned.rs`); the frame's
    /// latch counts each.
    fn start_helpers(&self, helpers: usize, local: &Local<'_>) {
        // Relaxed: the pushes below publish it.
        self.helpers_pending.store(helpers, Ordering::Relaxed);
        for _ in 0..helpers {
            // No node runs yet, so the latch's one count (the sinks') is
            // held and it cannot be set meanwhile.
            self.done.increment();
        }
        let lane = self.inputs.lane;
        for task in &self.helper_tasks[..helpers] {
            let header = NonNull::from(&task.header);
            // SAFETY: the helper task lives as long as the graph, and each
            // is queued once per planned frame, which waits for it.
            local.push_quiet(lane, unsafe { TaskRef::from_raw(header) });
        }
        local.notify_pushed(lane, true);
    }
}

/// What every node of the running frame sees.
struct FrameView<'f, C: ?Sized> {
    data: &'f C,
    pool: &'f PoolHandle,
    number: u64,
    /// The frame's epoch for `poisoned_in`.
    epoch: u64,
    /// See `FrameInputs::count_epoch`.
    count_epoch: u64,
    /// The running thread's slot, or [`NONE`].
    thread: u32,
}

impl<C: ?Sized + Sync> Shared<C> {
    /// Queues ready nodes (a shared frame's roots, or what a frame run
    /// alone hands over) for any thread, in the order given, with one
    /// wake-up per lane: by the nodes' `wakes` flags, or for every lane
    /// with `wake_all`. Pinned nodes go to the inbox, which the frame's
    /// thread (the caller) drains while it waits.
    fn queue_ready(
        &self,
        nodes: impl Iterator<Item = u32>,
        local: Option<&Local<'_>>,
        pool: &crate::pool::registry::Shared,
        wake_all: bool,
    ) {
        let mut pushed = Pushed::default();
        for index in nodes {
            let node = &self.nodes[index as usize];
            let task = self.task(index);
            if node.pinned {
                self.inbox.push(task);
            } else if let Some(local) = local {
                local.push_quiet(node.lane, task);
                if wake_all {
                    pushed.add_waking(node.lane);
                } else {
                    pushed.add(node);
                }
            } else {
                pool.inject_structured(node.lane, task);
            }
        }
        if let Some(local) = local {
            pushed.notify(local);
        }
    }

    /// The running frame's inputs, seen from the thread of `local`.
    ///
    /// # Safety
    ///
    /// A frame of this graph is running: `run_frame` set the inputs and has
    /// not returned, which it does only after the caller's last access.
    unsafe fn frame_view(&self, local: Option<&Local<'_>>) -> FrameView<'_, C> {
        let inputs = &self.inputs;
        let data = inputs.data.expect("set before the roots are queued");
        FrameView {
            // SAFETY: `run_frame` borrows the data for the frame (caller's
            // contract).
            data: unsafe { data.as_ref() },
            // SAFETY: as above, for the pool handle.
            pool: unsafe { &*inputs.pool },
            number: inputs.number,
            epoch: epoch(inputs.number),
            count_epoch: inputs.count_epoch,
            thread: local.map_or(NONE, |l| l.index() as u32),
        }
    }

    /// Runs node `index`'s body unless a dependency failed in this frame.
    #[inline]
    fn run_body(&self, index: u32, frame: &FrameView<'_, C>) -> NodeOutcome {
        let node = &self.nodes[index as usize];
        // Relaxed: set before a dependency's AcqRel count, which the last
        // count acquired; with a single dependency, set before it handed
        // the node over (run inline, or queued); in a frame run alone, set
        // by this thread, or before the hand-over's queue push; in a
        // planned frame, set before the dependency's Release `finish`,
        // which the walker's `is_finished` acquired.
        if self.poisoned_in[index as usize].load(Ordering::Relaxed) == frame.epoch {
            return NodeOutcome::Skipped;
        }
        let cx = NodeContext {
            data: frame.data,
            pool: frame.pool,
            frame: frame.number,
            name: &node.name,
        };
        let _span = instrument::node(node.label, node.lane);
        // SAFETY: this thread owns the node for this frame (module docs), so
        // nobody else is in its body.
        let body = unsafe { &mut *node.body.get() };
        let run = || {
            faults::maybe_panic(Site::NodeBody);
            body(&cx)
        };
        match panic::catch_unwind(AssertUnwindSafe(run)) {
            Ok(()) => NodeOutcome::Ran,
            Err(payload) => {
                *node.panic.lock().unwrap_or_else(|e| e.into_inner()) = Some(payload);
                // Relaxed: read after the frame latch.
                self.failed.store(true, Ordering::Relaxed);
                NodeOutcome::Panicked
            }
        }
    }

    /// Counts `n` sinks as finished; the last one sets the frame's latch
    /// and gets `true`. One read-modify-write, with no read before it: the
    /// latch's own count (which reads first, for the common latch of one
    /// count) moved its line between the cores about twice per sink, also
    /// through the frame's thread polling it. After this returns the graph
    /// may be gone (module docs).
    #[inline]
    fn finish_sinks(&self, n: usize) -> bool {
        // AcqRel: release publishes this sink's work (and, through the
        // countdowns' release chain, all it depends on); the last one
        // acquires every sink's before it sets the latch, whose own
        // release/acquire hands them to the frame's thread.
        let last = self.sinks_left.fetch_sub(n, Ordering::AcqRel) == n;
        if last {
            self.done.count_down();
        }
        last
    }

    fn dependencies_of(&self, index: u32) -> &[u32] {
        let range = self.dependency_start[index as usize] as usize
            ..self.dependency_start[index as usize + 1] as usize;
        &self.dependency_list[range]
    }

    /// Whether every helper task of the running planned frame started.
    fn helpers_started(&self) -> bool {
        // Relaxed: a hint (`planned.rs`).
        self.helpers_pending.load(Ordering::Relaxed) == 0
    }

    fn successors_of(&self, index: u32) -> &[u32] {
        let range = self.successor_start[index as usize] as usize
            ..self.successor_start[index as usize + 1] as usize;
        &self.successors[range]
    }

    /// Poisons node `index` for frame `epoch`: a dependency did not run
    /// or panicked, so it is skipped.
    #[inline]
    fn poison(&self, index: u32, epoch: u64) {
        // Relaxed: published by the count that follows in `release` (or,
        // for a single dependency, by handing the node over; in a frame run
        // alone, read by this thread or after the hand-over's queue push;
        // in a planned frame, by the node's Release `finish` after it).
        self.poisoned_in[index as usize].store(epoch, Ordering::Relaxed);
    }

    /// Counts node `from`'s release of its successor `to` in the frame,
    /// poisoning `to` unless `from` ran; `true` if this was the last
    /// release, and the caller now owns `to`. `alone`: the frame runs on
    /// this thread alone (a hand-over, `alone.rs`).
    #[inline]
    fn release(
        &self,
        from: u32,
        to: u32,
        outcome: NodeOutcome,
        frame: &FrameView<'_, C>,
        alone: bool,
    ) -> bool {
        if outcome != NodeOutcome::Ran {
            self.poison(to, frame.epoch);
        }
        let state = &self.states[to as usize];
        let (dependencies, epoch) = (self.dependencies[to as usize], frame.count_epoch);
        let last = if alone {
            state.pending.release_alone(dependencies, epoch)
        } else {
            state.pending.release(dependencies, epoch)
        };
        if last {
            // Relaxed: read after the frame latch.
            state.released_by.store(from, Ordering::Relaxed);
        }
        last
    }

    /// Runs node `first`, then, as long as it released one, the most urgent
    /// node it released; see the module docs.
    fn execute(&self, first: u32, local: Option<&Local<'_>>) {
        // SAFETY: nodes run only while their frame runs (module docs).
        let frame = unsafe { self.frame_view(local) };
        let on_frame_thread = frame.thread != NONE && frame.thread == self.inputs.thread_slot;
        let task_lane = local.map_or(Lane::FrameCritical, |l| l.current_lane());
        let timed = self.timed;
        let now = || if timed { clock::ticks() } else { 0 };
        let mut index = first;
        let mut lane = task_lane;
        let mut start = now();
        loop {
            let outcome = self.run_body(index, &frame);
            let end = now();
            self.runs[index as usize].write(start, end, frame.thread, outcome);

            let successors = self.successors_of(index);
            if successors.is_empty() {
                // The last touch of the graph (module docs).
                if self.finish_sinks(1) {
                    if let Some(local) = local {
                        local.note_frame_ended();
                    }
                }
                break;
            }
            let mut next = None;
            let mut pushed = Pushed::default();
            for &s in successors {
                if !self.release(index, s, outcome, &frame, false) {
                    continue;
                }
                // We own `s` now: it cannot finish before we queue it, so the
                // graph stays alive for the rest of this iteration.
                let succ = &self.nodes[s as usize];
                let task = self.task(s);
                let inline = self.inline_successors && next.is_none();
                if succ.pinned {
                    if inline && on_frame_thread {
                        next = Some(s);
                    } else {
                        let waker = self.inputs.waker.clone().expect("set before the roots");
                        self.inbox.push(task);
                        waker.wake();
                    }
                } else if inline && succ.lane <= lane {
                    next = Some(s);
                } else if let Some(local) = local {
                    local.push_quiet(succ.lane, task);
                    // A node at least as urgent as this task's lane may skip
                    // the wake-up: this thread's own search (or the wait it
                    // runs in, whose floor is at least this lane) reaches it
                    // before the thread parks. A less urgent one always
                    // wakes someone.
                    if succ.lane > lane {
                        pushed.add_waking(succ.lane);
                    } else {
                        pushed.add(succ);
                    }
                } else {
                    frame.pool.shared().inject_structured(succ.lane, task);
                }
            }
            if let Some(local) = local {
                pushed.notify(local);
            }
            let Some(s) = next else { break };
            index = s;
            start = end;
            let next_lane = self.nodes[s as usize].lane;
            if let Some(local) = local {
                local.count_inline_run(next_lane);
                local.set_lane(next_lane.min(lane));
            }
            lane = next_lane.min(lane);
        }
        if let Some(local) = local {
            local.set_lane(task_lane);
        }
    }
}

/// Every node's dependencies, as start offsets and one list, from the
/// successor lists.
fn dependency_lists(
    successor_start: &[u32],
    successors: &[u32],
    in_degree: &[u32],
) -> (Box<[u32]>, Box<[u32]>) {
    let mut start = Vec::with_capacity(in_degree.len() + 1);
    start.push(0u32);
    for &d in in_degree {
        start.push(start.last().copied().unwrap_or(0) + d);
    }
    let mut next = start.clone();
    let mut list = vec![0u32; successors.len()];
    for from in 0..in_degree.len() {
        for &to in &successors[successor_start[from] as usize..successor_start[from + 1] as usize] {
            list[next[to as usize] as usize] = from as u32;
            next[to as usize] += 1;
        }
    }
    (start.into(), list.into())
}

/// Frame `number` (counted from 0) as the poison flags tag it: from 1, so
/// that a flag's initial 0 never matches (module docs).
/// `slot`'s bit in a mask of slots; none for `NONE` or a slot past 63.
fn bit_of(slot: u32) -> u64 {
    1u64.checked_shl(slot).unwrap_or(0)
}

fn epoch(number: u64) -> u64 {
    number + 1
}

/// When a frame is worth a second thread: enough work in all, in nodes
/// heavy enough on average (`TaskGraphBuilder::share_above`).
#[derive(Copy, Clone, Debug)]
pub(crate) struct ShareThreshold {
    frame_nanos: f64,
    node_nanos: f64,
}

impl Default for ShareThreshold {
    /// [`WAKE_WORTH_NANOS`] and [`LIGHT_NODE_NANOS`].
    fn default() -> Self {
        ShareThreshold {
            frame_nanos: WAKE_WORTH_NANOS,
            node_nanos: LIGHT_NODE_NANOS,
        }
    }
}

impl ShareThreshold {
    pub(crate) fn new(frame_work: Duration, node_work: Duration) -> Self {
        ShareThreshold {
            frame_nanos: frame_work.as_nanos() as f64,
            node_nanos: node_work.as_nanos() as f64,
        }
    }

    /// Whether a frame of `nanos` of work (or wall time, untimed) over
    /// `nodes` nodes is worth waking and keeping a second thread for.
    fn worth_a_second_thread(&self, nanos: f64, nodes: usize) -> bool {
        nanos >= self.frame_nanos && nanos / nodes.max(1) as f64 >= self.node_nanos
    }
}

/// How long idle threads wait for the next frame, in ticks, given the
/// smoothed gap between frames: [`LINGER_GAP_NANOS`] for gaps under it,
/// otherwise not at all. (Twice the gap, as before, made the worker park
/// after every eighth frame of the benchmark graph run back to back: the
/// frame that re-sorts priorities leaves a longer gap than the average.)
fn linger_ticks(gap_ticks: f64, nanos_per_tick: f64) -> u64 {
    let limit = LINGER_GAP_NANOS / nanos_per_tick;
    if gap_ticks < limit {
        limit as u64
    } else {
        0
    }
}

/// Lanes that got tasks in one release, and which of them need a wake-up.
#[derive(Default)]
struct Pushed {
    lanes: u8,
    waking: u8,
}

impl Pushed {
    fn add<C: ?Sized>(&mut self, node: &Node<C>) {
        self.lanes |= 1 << node.lane.index();
        if node.wakes {
            self.waking |= 1 << node.lane.index();
        }
    }

    fn add_waking(&mut self, lane: Lane) {
        self.lanes |= 1 << lane.index();
        self.waking |= 1 << lane.index();
    }

    fn notify(&self, local: &Local<'_>) {
        for lane in Lane::ALL {
            let bit = 1 << lane.index();
            if self.lanes & bit != 0 {
                local.notify_pushed(lane, self.waking & bit != 0);
            }
        }
    }
}

/// The `RunFn` of every node task.
///
/// # Safety
///
/// `header` is the header of a `NodeTask<C>` queued by `run_frame` or
/// `execute` for the running frame.
unsafe fn run_node<C: ?Sized + Sync>(header: NonNull<Header>) {
    // SAFETY: `NodeTask` is `repr(C)` with the header first, and the graph
    // outlives the frame's unfinished nodes (module docs).
    let task = unsafe { header.cast::<NodeTask<C>>().as_ref() };
    // SAFETY: as above.
    let graph = unsafe { &*task.graph };
    let index = task.index;
    // SAFETY: the pool handle is set for the frame, which is still running.
    let pool = unsafe { &*graph.inputs.pool };
    worker::with_current(|local| {
        let local = local.filter(|l| ptr::eq(l.shared, pool.shared()));
        graph.execute(index, local);
    });
}

/// The `RunFn` of helper tasks: walks the task's list of the running
/// planned frame, then counts down the frame's latch, its last touch of
/// the graph (`planned.rs`).
///
/// # Safety
///
/// `header` is the header of a `HelperTask<C>` queued by `run_frame` for
/// the running frame.
unsafe fn run_helper<C: ?Sized + Sync>(header: NonNull<Header>) {
    // SAFETY: `HelperTask` is `repr(C)` with the header first, and the
    // frame waits for this task's count-down, so the graph is alive.
    let task = unsafe { header.cast::<HelperTask<C>>().as_ref() };
    // SAFETY: as above.
    let graph = unsafe { &*task.graph };
    // SAFETY: the pool handle is set for the frame, which is still running.
    let pool = unsafe { &*graph.inputs.pool };
    worker::with_current(|local| {
        // Relaxed: a hint for the frame's thread (`planned.rs`).
        graph.helpers_pending.fetch_sub(1, Ordering::Relaxed);
        if let Some(local) = local.filter(|l| ptr::eq(l.shared, pool.shared())) {
            // SAFETY: the frame is running (see above).
            let frame = unsafe { graph.frame_view(Some(local)) };
            graph.walk_plan(task.list as usize, local, &frame, false);
            if graph.done.count_down() {
                local.note_frame_ended();
            }
        } else {
            graph.done.count_down();
        }
    });
}

#[cfg(test)]
mod tests {
    use super::{linger_ticks, ShareThreshold};
    use crate::{FrameSharing, Lane, Pool, TaskGraph};
    use std::time::Duration;

    /// Whether the next frame is shared follows the times of the nodes that
    /// ran: not the frame's wall time (which held a panicking node's 50 ms
    /// here), also after the first frame, and not a panicked node's time.
    #[test]
    fn a_light_frame_after_a_slow_panic_runs_alone() {
        let pool = Pool::builder().threads(1).build().unwrap();
        let mut b = TaskGraph::<()>::builder();
        // Far above the light frames, so that a preempted one stays alone.
        b.share_above(Duration::from_millis(10), Duration::ZERO);
        b.node("slow_panic", Lane::FrameCritical, |cx| {
            if cx.frame() == 0 {
                std::thread::sleep(Duration::from_millis(50));
                panic!("the first frame panics after 50 ms");
            }
        });
        b.node("after", Lane::FrameCritical, |_| {})
            .after(["slow_panic"]);
        let mut graph = b.build().unwrap();
        assert!(graph.run(&pool, &()).is_err());
        for _ in 0..3 {
            let stats = graph.run(&pool, &()).unwrap();
            assert_eq!(stats.sharing(), FrameSharing::Alone);
        }
    }

    /// With zero thresholds every frame is shared (queued, or planned), the
    /// first one handed over after its first node; a shared frame is
    /// announced to idle threads (they wait in it before parking) only
    /// while it runs, also when a node panics.
    #[test]
    fn shared_frames_are_announced_only_while_they_run() {
        let pool = Pool::builder().threads(1).build().unwrap();
        let handle = pool.handle();
        for plan in [false, true] {
            let mut b = TaskGraph::<()>::builder();
            b.share_above(Duration::ZERO, Duration::ZERO)
                .plan_frames(plan);
            b.node("a", Lane::FrameCritical, |_| {});
            b.node("b", Lane::FrameCritical, |cx| {
                assert!(cx.frame() != 2, "a node panics in frame 2");
            })
            .after(["a"]);
            b.node("c", Lane::FrameCritical, |_| {}).after(["a"]);
            let mut graph = b.build().unwrap();
            for frame in 0..5 {
                let sharing = match graph.run(&handle, &()) {
                    Ok(stats) => stats.sharing(),
                    Err(error) => {
                        assert_eq!(frame, 2, "{error}");
                        graph.last_frame().sharing()
                    }
                };
                let expected = match (frame, plan) {
                    (0, _) => FrameSharing::HandedOver,
                    (_, false) => FrameSharing::Shared,
                    (_, true) => FrameSharing::Planned,
                };
                assert_eq!(sharing, expected, "frame {frame}");
                assert!(!handle.shared().in_shared_frame(), "frame {frame}");
            }
        }
    }

    #[test]
    fn only_frames_of_enough_work_in_heavy_enough_nodes_wake_a_thread() {
        let worth_a_second_thread =
            |nanos, nodes| ShareThreshold::default().worth_a_second_thread(nanos, nodes);
        // 256 nodes of 1 µs.
        assert!(worth_a_second_thread(256_000.0, 256));
        // 256 empty nodes: 42 ns each on one thread, about 140 ns each when
        // a worker took part (the frame that used to keep waking it).
        assert!(!worth_a_second_thread(10_800.0, 256));
        assert!(!worth_a_second_thread(36_000.0, 256));
        // A few heavy nodes, and too little work in all.
        assert!(worth_a_second_thread(50_000.0, 10));
        assert!(!worth_a_second_thread(19_000.0, 10));
        assert!(!worth_a_second_thread(0.0, 0));
    }

    #[test]
    fn zero_thresholds_share_every_frame_and_max_ones_none() {
        let always = ShareThreshold::new(Duration::ZERO, Duration::ZERO);
        assert!(always.worth_a_second_thread(0.0, 0));
        assert!(always.worth_a_second_thread(0.0, 256));
        let never = ShareThreshold::new(Duration::MAX, Duration::ZERO);
        assert!(!never.worth_a_second_thread(1e18, 1));
        let never = ShareThreshold::new(Duration::ZERO, Duration::MAX);
        assert!(!never.worth_a_second_thread(1e18, 1));
    }

    #[test]
    fn threads_linger_only_for_short_gaps_between_frames() {
        // 1 tick = 1 ns here.
        assert_eq!(linger_ticks(3_000.0, 1.0), 20_000, "a short gap");
        assert_eq!(linger_ticks(15_000.0, 1.0), 20_000, "a longer one");
        assert_eq!(
            linger_ticks(20_000.0, 1.0),
            0,
            "no lingering from the limit on"
        );
        assert_eq!(
            linger_ticks(16_000_000.0, 1.0),
            0,
            "a 60 Hz loop parks at once"
        );
        // 3 ticks per ns: the limit scales with the tick rate.
        assert_eq!(linger_ticks(30_000.0, 1.0 / 3.0), 60_000);
        assert_eq!(linger_ticks(60_000.0, 1.0 / 3.0), 0);
    }
}

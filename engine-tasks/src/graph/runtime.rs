//! Running a compiled graph: the per-node tasks and the per-frame protocol.
//!
//! # Per-frame states of a node
//!
//! Each finishing dependency counts the node's `pending` countdown once
//! (`countdown.rs`); the last one owns the node's single [`TaskRef`](crate::sync::task::TaskRef) for the
//! frame and either runs it next on its own thread or queues it. So every
//! node runs once per frame, after all of its dependencies, and its body (an
//! `FnMut`) is never entered by two threads at once. A frame run alone
//! (`alone.rs`) instead walks a plan that puts every node after its
//! dependencies, and counts nothing unless it hands over; a planned frame
//! (`planned.rs`) has each thread walk its own list of a plan and claim
//! each node with its marks, counting nothing either.
//!
//! The thread that owns a node writes how its run went to the node's
//! [`RunRecord`](super::run_record::RunRecord) (`run_record.rs`), apart
//! from the countdown's line, which only the dependencies touch.
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
//! Nodes without successors count down the frame's sinks, and the thread
//! that counts the last gives their count back to the frame's
//! [`Latch`](crate::sync::latch::Latch), which [`Runtime::run_frame`] waits
//! for. Every node reaches such a sink, so the latch is set only after
//! every node has released its successors; and a node touches the graph
//! only before its last release, or while it holds a node it released
//! (unfinished, so the latch cannot be set). The one exception, a pinned
//! node pushed into the frame's inbox by another thread, holds a latch
//! count of its own while the push runs (`Shared::push_pinned`). Hence the borrowed frame data, the pool handle
//! and the graph itself outlive every access a task makes to them. The
//! calls that may make a task's last touch of a frame (the release, push
//! or sink count of its last node) take raw pointers, not
//! references, since a reference passed to a function must stay valid
//! until it returns (`Shared::execute`, `sync/latch.rs`).
//!
//! A frame run alone (`alone.rs`) touches the latch only if it hands over,
//! and then first counts down the sinks that already ran. In a planned frame each walker counts down the sinks it
//! ran as it leaves its walk, and the latch also holds one count per
//! helper task, which each gives back as its last touch of the graph; the
//! frame's thread runs any helper task still queued once its own walk is
//! over, so the frame never waits for a worker that did not start its
//! helper (a frame's thread that would find no slot in the pool runs its
//! frame queued, never planned). A helper that started holds the frame until it leaves: while it
//! waits for a node it may run tasks of the graph's lane, as any waiting
//! thread does (see "What the frame's thread runs while it waits" in
//! `graph/mod.rs`), and the frame ends once such a task returns.

mod alone;
mod frame;
mod gates;
mod memory;
mod planned;
mod policy;
mod rebuild;
mod warm_ahead;

use frame::{Caches, FrameView, Shared, NONE};
pub(crate) use policy::ShareThreshold;
use policy::{
    Clarity, SharingTrial, ESTIMATE_SETTLED_EVERY, IN_FRAME_WAIT_NANOS, LINGER_GAP_NANOS,
    REPRIORITIZE_ALONE_EVERY, REPRIORITIZE_EVERY, REPRIORITIZE_PLANNED_EVERY,
};

use super::access::Resources;
use super::builder::{Body, Condition, Name, TaskGraphBuilder};
use super::compile::Compiled;
use super::run_record::NodeOutcome;
use super::shape::BuildId;
use super::stats::{FrameStats, PathWalk};
use super::FrameSharing;
use super::{FrameError, NodePanic, ReadyOrder};
use crate::clock::{self, TickRate};
use crate::lane::Lane;
use crate::pool::registry::Shared as PoolShared;
use crate::pool::spawn::panic_message;
use crate::pool::worker::{self, AbortOnUnwind, Local, SlotClaim};
use crate::pool::PoolHandle;
use crate::sync::latch::Waiter;
use crate::sync::prefetch::{self, CodeSection, Span, MAX_CODE_SPANS, MAX_DATA_LINES, MAX_SPANS};
use crate::trace::instrument;
use alone::{AlonePlan, HandOverRule};
use std::cell::Cell;
use std::ptr::NonNull;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

thread_local! {
    /// When this thread last ended a frame of any graph, in ticks (0:
    /// never): a frame that starts `COLD_CODE_NANOS` after it warms the
    /// engine's code, which the frames of any graph share.
    static LAST_FRAME_END: Cell<u64> = const { Cell::new(0) };
}

/// What `prepare_frame` decided and measured, for the rest of the frame.
struct FrameStart {
    number: u64,
    /// `Some(lists)` if the frame runs planned (`planned.rs`).
    lists: Option<usize>,
    /// In a planned frame, the pool slot claimed for this thread.
    slot: Option<SlotClaim>,
    /// In a planned frame, aborts on a panic until its helpers have left
    /// (`run_frame` ends it with `done` after `run_nodes`).
    queued: Option<AbortOnUnwind>,
    /// Read only when the tick rate wants a reading (`TickRate`).
    started: Option<Instant>,
    start_tick: u64,
    /// How long a thread of the frame looks for work before it sleeps
    /// ([`IN_FRAME_WAIT_NANOS`], in ticks).
    in_frame_wait_ticks: u64,
    steals_before: u64,
    /// Whether the pool was idle before the frame (`early_wake.rs`).
    after_idle_gap: bool,
}

/// A compiled graph; owns [`Shared`] through a raw pointer because tasks
/// point into it while a frame runs.
pub(super) struct Runtime {
    shared: NonNull<Shared>,
    order: ReadyOrder,
    topological: Vec<u32>,
    roots: Vec<u32>,
    /// The least urgent lane among the nodes that any thread may run.
    floor: Lane,
    /// Smoothed node times in clock ticks, and the priorities made of them.
    estimate: Vec<u64>,
    /// The sum of `estimate`.
    estimate_total: u64,
    /// The frame after which `estimate` was last brought up to date (`None`
    /// before the first, and after a rebuild): see `estimates_due`.
    estimated_after: Option<u64>,
    /// The last frame whose verdict on sharing was not clear (`clarity`).
    unclear_at: Option<u64>,
    /// Whether the last frame was run alone and held up
    /// (`AlonePlan::held_up`).
    held_up_before: bool,
    /// The last frame held up whose times were left out of the estimates.
    stall_left_out_at: Option<u64>,
    priority: Vec<u64>,
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
    /// Whether sharing pays, by trial (default threshold only).
    trial: SharingTrial,
    plan: AlonePlan,
    /// The lane of planned frames, if this graph may run them
    /// (`planned.rs`).
    plan_lane: Option<Lane>,
    /// How many nodes of `plan` the last frame ran alone (all of them,
    /// some before a hand-over, or none).
    ran_alone: usize,
    /// When the last frame ended, the pool's number for that end
    /// (`pool/frame_gaps.rs`), and the smoothed gap after a frame until the
    /// pool's next one (ticks), for [`LINGER_GAP_NANOS`].
    last_end_tick: Option<u64>,
    last_end_number: u64,
    /// The smoothed deviation of that gap from its estimate (ticks).
    gap_jitter: f64,
    /// Gaps measured (for the jitter's plain averages at first), and the
    /// pool they were measured on (its address).
    gap_count: u32,
    gap_pool: usize,
    /// The pool's count of frames begun after an idle gap, as this graph's
    /// last frame saw it (`FrameGaps::idle_starts`).
    idle_starts_seen: u64,
    /// The pool slot of the thread that ran the last frame, or `NONE`.
    frame_slot: u32,
    gap_estimate: f64,
    /// What the graph was compiled into: names, sets, ambiguities (kept for
    /// toggles and for the next build into this graph).
    compiled: Compiled,
    /// The set names, and each node's and set's own toggle.
    set_names: Vec<Name>,
    node_on: Vec<bool>,
    set_on: Vec<bool>,
    /// Buffers of `rebuild`: estimates by label number ([`UNKNOWN`] where
    /// none), the labels of the graph being replaced, and its bodies and
    /// conditions (given to the builder's memory once the new graph is in).
    by_label: Vec<u64>,
    old_labels: Vec<u32>,
    retired_bodies: Vec<Body>,
    retired_conditions: Vec<Condition>,
    /// The build this graph holds, for a builder to tell that it repeats
    /// it (`shape.rs`).
    built: Option<BuildId>,
    /// Whether the graph declared resource types: then every frame is
    /// given the frame's `Resources` (`run_frame`).
    declares_resources: bool,
    /// What the workers that wake early for this graph's next frame warm
    /// (`warm_spans`), and its key (`sync/prefetch.rs`); worked out when
    /// the arrays may move (a rebuild, a new plan) or the graph did, not
    /// every frame.
    warm: [Span; MAX_SPANS],
    warm_key: u64,
    /// This runtime's address when `warm` was worked out: the graph's
    /// owner may move it between frames.
    warm_home: usize,
}

/// No estimate in `Runtime::by_label`.
const UNKNOWN: u64 = u64::MAX;

// SAFETY: `Shared` is `Send + Sync`, and nothing else in the runtime is
// thread-bound; between frames only the owner touches it.
unsafe impl Send for Runtime {}
// SAFETY: `&Runtime` only reads names, statistics (the statistics' lazy
// critical path synchronises itself: `FrameStats::critical_path`) and, to
// warm them (`warm_ahead.rs`), the addresses and lengths of the runtime's
// arrays and spans, which change only through `&mut Runtime`.
unsafe impl Sync for Runtime {}

impl Drop for Runtime {
    fn drop(&mut self) {
        // SAFETY: made by `Box::into_raw` in `new`; no frame runs (that would
        // borrow `self`), so no task points into it.
        drop(unsafe { Box::from_raw(self.shared.as_ptr()) });
    }
}

impl Runtime {
    /// The graph `builder` describes (compiled into `builder.compiled`).
    pub(super) fn new<C: ?Sized + Sync>(mut builder: TaskGraphBuilder<C>, id: BuildId) -> Self {
        let mut runtime = Runtime::empty();
        runtime.rebuild(&mut builder, id);
        runtime
    }

    /// A graph of no nodes, to be filled by `rebuild`.
    fn empty() -> Self {
        Runtime {
            shared: Shared::leak_empty(),
            order: ReadyOrder::default(),
            topological: Vec::new(),
            roots: Vec::new(),
            floor: Lane::FrameCritical,
            estimate: Vec::new(),
            estimate_total: 0,
            estimated_after: None,
            unclear_at: None,
            held_up_before: false,
            stall_left_out_at: None,
            priority: Vec::new(),
            reprioritized_after: None,
            frames: 0,
            counted_frames: 0,
            rate: TickRate::new(),
            stats: FrameStats::new(),
            parked_before: Vec::new(),
            // The first frame starts alone, and hands over after its second
            // node at the earliest, if the first shows the frame is worth a
            // second thread and the second confirms it.
            waking: false,
            share_above: ShareThreshold::default(),
            trial: SharingTrial::default(),
            plan: AlonePlan::new(),
            plan_lane: None,
            ran_alone: 0,
            last_end_tick: None,
            last_end_number: 0,
            gap_jitter: 0.0,
            gap_count: 0,
            gap_pool: 0,
            idle_starts_seen: 0,
            frame_slot: NONE,
            gap_estimate: f64::INFINITY,
            compiled: Compiled::default(),
            set_names: Vec::new(),
            node_on: Vec::new(),
            set_on: Vec::new(),
            by_label: Vec::new(),
            old_labels: Vec::new(),
            retired_bodies: Vec::new(),
            retired_conditions: Vec::new(),
            built: None,
            declares_resources: false,
            warm: [Span::default(); MAX_SPANS],
            warm_key: 0,
            warm_home: 0,
        }
    }

    /// The code a frame of this graph runs: on Linux the two sections of
    /// the engine's frame code, the shared frames' first (what an
    /// early-woken worker runs first), within `MAX_LINES`; elsewhere the
    /// code around the addresses of a few functions: a graph's frame,
    /// the planned walk, a helper's and a queued node's task functions
    /// and the pool's (`sync/prefetch.rs`).
    fn code_spans() -> [Span; MAX_CODE_SPANS] {
        let sections = [CodeSection::Shared.span(), CodeSection::Frame.span()];
        if sections.iter().all(|section| section.lines > 0) {
            // In the line budget, the first section first.
            let mut budget = prefetch::MAX_LINES;
            std::array::from_fn(|i| {
                let mut span = sections.get(i).copied().unwrap_or_default();
                span.lines = span.lines.min(budget);
                budget -= span.lines;
                span
            })
        } else {
            prefetch::code_spans(&Self::code_anchors())
        }
    }

    /// What the workers that wake early for the next frame warm (and the
    /// frame's thread, ahead of its tick, in `sleep_until`): this
    /// runtime and the frame state it shares with its nodes (which the
    /// frame's thread works through before the first node), the read-only
    /// arrays a planned frame's walk reads first (its lists, the
    /// dependency and successor rows, the nodes and their closures'
    /// addresses), then the code. The arrays' addresses change only at a
    /// rebuild, between frames; the runtime's when its owner moves the
    /// graph. Lines that nodes write (node states, run records) are left
    /// out (`sync/prefetch.rs`).
    fn warm_spans(&self) -> [Span; MAX_SPANS] {
        // SAFETY: a frame borrows the runtime mutably (`run_frame`), so
        // with `&self` none runs; this only reads addresses and lengths.
        let shared = unsafe { self.shared.as_ref() };
        let arrays = [
            Span::of_value(self),
            Span::of_value(shared),
            shared.schedule.all_lists(),
            Span::of(&shared.dependency_start, MAX_DATA_LINES),
            Span::of(&shared.dependency_list, MAX_DATA_LINES),
            Span::of(&shared.dependencies, MAX_DATA_LINES),
            Span::of(&shared.successor_start, MAX_DATA_LINES),
            Span::of(&shared.successors, MAX_DATA_LINES),
            Span::of(&shared.nodes, MAX_DATA_LINES),
            Span::of(&shared.closures, MAX_DATA_LINES),
        ];
        prefetch::warm_spans(&prefetch::data_spans(&arrays), &Self::code_spans())
    }

    /// Works out [`Runtime::warm_spans`] and its key again: after a
    /// rebuild or a new plan, whose arrays may have moved, and before a
    /// frame that finds the graph moved.
    pub(super) fn refresh_warm_spans(&mut self) {
        self.warm = self.warm_spans();
        self.warm_key = prefetch::spans_key(&self.warm);
        self.warm_home = self as *const Self as usize;
    }

    /// Whether the owner moved the graph since [`Runtime::warm_spans`]
    /// were last worked out: the first span then holds its old address.
    fn moved_since_warm_spans(&self) -> bool {
        self.warm_home != self as *const Self as usize
    }

    /// The anchors of [`Runtime::code_spans`].
    fn code_anchors() -> [usize; 7] {
        let [worker, wait, notify] = worker::code_anchors();
        [
            Self::run_frame as *const () as usize,
            Shared::walk_plan as *const () as usize,
            frame::run_helper as *const () as usize,
            frame::run_node as *const () as usize,
            worker,
            wait,
            notify,
        ]
    }

    /// The ambiguities the build ordered (see `TaskGraph::ambiguities`).
    pub(super) fn ambiguities(&self) -> impl Iterator<Item = (&str, &str, &'static str)> + '_ {
        self.compiled
            .ambiguities
            .iter()
            .map(|&(a, b, what)| (self.name(a as usize), self.name(b as usize), what))
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
    fn shared_mut(&mut self) -> &mut Shared {
        // SAFETY: `&mut self` means no frame is running, and a frame ends
        // only once no task of it can touch `Shared` again (module docs).
        unsafe { self.shared.as_mut() }
    }

    /// Runs one frame: prepares it, runs its nodes (alone, planned or
    /// queued, see the module docs), then records it and learns from it.
    /// `data` is where the frame's `&C` is, which the nodes' bodies and
    /// conditions see (`Context`), and `resources` the frame's resources
    /// if the graph declared any.
    ///
    /// # Safety
    ///
    /// `data` points to a `&C` readable until this returns, `C` being the
    /// type the graph's closures were built for (`builder.rs`); the `C`
    /// is `Sync`. `resources` is `Some` if the last build declared
    /// resource types (else nodes would borrow the last frame's values).
    #[cfg_attr(target_os = "linux", link_section = "engine_tasks_frame")]
    pub(super) unsafe fn run_frame(
        &mut self,
        pool: &PoolHandle,
        data: NonNull<()>,
        resources: Option<&Resources>,
    ) -> Result<&FrameStats, FrameError> {
        // After a gap since this thread's last frame of any graph (a paced
        // loop's sleep) the engine's code has likely left this core's
        // caches: ask for all of it at once, before the frame misses on it
        // line by line (`sync/prefetch.rs`).
        let cold_code_ticks = (prefetch::COLD_CODE_NANOS / self.rate.nanos_per_tick()) as u64;
        if clock::ticks().saturating_sub(LAST_FRAME_END.get()) >= cold_code_ticks {
            CodeSection::Frame.warm();
        }
        let pool_shared = pool.shared();
        debug_assert_eq!(
            resources.is_some(),
            self.declares_resources,
            "a frame's resources as its graph declared"
        );
        let claim = match resources.map(Resources::claim) {
            Some(None) => {
                return Err(FrameError {
                    frame: self.frames,
                    panicked: Vec::new(),
                    skipped: Vec::new(),
                    resources_in_use: true,
                })
            }
            claim => claim.flatten(),
        };
        if let Some(resources) = resources {
            self.shared_mut().gates.resolve(resources);
        }
        let mut start = self.prepare_frame(pool, data);
        let frame_span = instrument::frame(start.number);
        let (sharing, ran_alone) = if self.roots.is_empty() {
            self.frame_slot = NONE;
            (FrameSharing::Alone, 0)
        } else {
            self.run_nodes(pool_shared, &start)
        };
        // The helpers left and the slot was given back.
        if let Some(queued) = start.queued.take() {
            queued.done();
        }
        self.ran_alone = ran_alone;
        // A forecast of the next graph's frame counts from here on.
        pool_shared.next_frame.frame_ending(clock::ticks());
        if sharing != FrameSharing::Alone {
            pool_shared.frame_unshared();
        }
        if matches!(sharing, FrameSharing::HandedOver | FrameSharing::Shared) {
            self.counted_frames += 1;
        }
        self.last_end_number = pool_shared.frame_ended(clock::ticks());
        if sharing != FrameSharing::Alone {
            // Where this thread likely sleeps until the next frame, for the
            // workers that wake early for it (only frames that shared
            // wake them).
            pool_shared
                .next_frame
                .frame_ended_on(crate::sync::placement::current_cpu());
        }
        drop(frame_span);
        drop(claim);
        self.finish_frame(pool_shared, &start, sharing)
    }

    /// Between frames, before the next: decides whether it runs planned,
    /// sets the frame's inputs, reads the clocks and counters it is
    /// measured against, and tells the pool the frame began (with the
    /// forecasts its workers plan their next wake-ups by). Then a planned
    /// frame claims this thread's slot in the pool and queues its helper
    /// tasks, before the parked-time snapshot and before the thread enters
    /// the slot: after a paced loop's sleep those are cold, while an
    /// early-woken worker is not (`planned.rs`).
    #[cfg_attr(target_os = "linux", link_section = "engine_tasks_frame")]
    fn prepare_frame(&mut self, pool: &PoolHandle, data: NonNull<()>) -> FrameStart {
        let number = self.frames;
        self.frames += 1;
        let pool_shared = pool.shared();
        // Planned (`planned.rs`) when shared, allowed, and another thread
        // of the pool could walk a list: one list per worker, and one for
        // this thread unless it is one of them (a graph run in a task).
        let other_workers =
            pool_shared.worker_count() - usize::from(worker::is_worker_of(pool_shared));
        let lists = (other_workers + 1).min(planned::MAX_LISTS);
        let planned =
            self.waking && self.plan_lane.is_some() && lists > 1 && !self.roots.is_empty();
        if planned {
            self.replan_schedule(lists);
        }
        let nanos_per_tick = self.rate.nanos_per_tick();
        let sinks = self.stats.sink_count();
        let count_epoch = self.counted_frames + 1;
        let in_frame_wait_ticks = (IN_FRAME_WAIT_NANOS / nanos_per_tick) as u64;
        let shared = self.shared_mut();
        shared.reset(sinks);
        shared.inputs.plan_wait_ticks = in_frame_wait_ticks;
        shared.inputs.data = Some(data);
        shared.inputs.pool = pool;
        shared.inputs.number = number;
        shared.inputs.count_epoch = count_epoch;
        let steals_before = pool_shared.stolen_tasks_total();
        let slots = pool_shared.slots.len();
        if self.parked_before.len() != slots {
            self.parked_before.resize(slots, 0);
        }
        let start_tick = clock::ticks();
        let started = self.rate.wants_reading(start_tick).then(Instant::now);
        let followed_by_other = self.update_linger(pool_shared, start_tick);
        self.forecast_next_graph(pool_shared, followed_by_other);
        let after_idle_gap = self.note_idle_gap(pool_shared, start_tick, nanos_per_tick);
        pool_shared.frame_began(start_tick);
        // From the claim on, the graph must outlive the queued helpers, and
        // a claimed guest slot be entered and given back: a panic until
        // `run_nodes` returns aborts (module docs).
        let queued =
            planned.then(|| AbortOnUnwind::new("while a planned frame's helpers were queued"));
        // Planned only if this thread will walk list 0: every node runs
        // because the frame's thread walks to the end (`planned.rs`). A
        // failed claim (the guest slot held) runs the frame queued, its
        // plan worked out above for nothing.
        let slot = planned.then(|| worker::claim_slot(pool_shared));
        let planned = slot.is_some_and(|slot| slot != SlotClaim::None);
        if planned {
            // SAFETY: the inputs are set; from here on the frame only
            // shares the graph, until its latch is set.
            let shared = unsafe { self.shared.as_ref() };
            shared.queue_helpers(lists - 1, pool_shared);
            // Announced once its helpers are queued; `frame_unshared` after.
            pool_shared.frame_shared(in_frame_wait_ticks);
        }
        // After any push: a worker woken by it counts as parked until it
        // woke, not until `start_tick` (a wake-up's latency of a statistic).
        let counters = pool_shared.slots.iter().map(|s| &s.counters);
        for (before, counters) in self.parked_before.iter_mut().zip(counters) {
            *before = counters.parked_ticks_at(start_tick);
        }
        FrameStart {
            number,
            lists: planned.then_some(lists),
            slot: slot.filter(|_| planned),
            queued: match queued {
                // Not planned after all: nothing was queued.
                Some(guard) if !planned => {
                    guard.done();
                    None
                }
                queued => queued,
            },
            started,
            start_tick,
            in_frame_wait_ticks,
            steals_before,
            after_idle_gap,
        }
    }

    /// Whether the frame starting at `start_tick` follows an idle gap of
    /// the pool. The first frame after one (the first graph of a game's
    /// frame) times the loop (early_wake.rs); frames back to back skip this,
    /// and the helper count after the frame. Also sets whether the frame
    /// prefetches: if the pool had an idle gap since this graph's last
    /// frame, even if another graph's frame ran just before this one
    /// (`pool/frame_gaps.rs`).
    #[cfg_attr(target_os = "linux", link_section = "engine_tasks_frame")]
    fn note_idle_gap(
        &mut self,
        pool_shared: &PoolShared,
        start_tick: u64,
        nanos_per_tick: f64,
    ) -> bool {
        let gap = pool_shared.idle_gap_before(start_tick);
        let idle_ticks = (LINGER_GAP_NANOS / nanos_per_tick) as u64;
        let after_idle_gap = gap.is_some_and(|gap| gap.is_none_or(|gap| gap >= idle_ticks));
        let gaps = &pool_shared.frame_gaps;
        let idle_starts = if after_idle_gap {
            gaps.idle_start()
        } else {
            gaps.idle_starts()
        };
        self.shared_mut().inputs.caches = if idle_starts != self.idle_starts_seen {
            Caches::Cold
        } else {
            Caches::Warm
        };
        self.idle_starts_seen = idle_starts;
        if after_idle_gap {
            if self.moved_since_warm_spans() {
                self.refresh_warm_spans();
            }
            pool_shared.next_frame.frame_started(
                start_tick,
                gap.flatten(),
                nanos_per_tick,
                &self.warm,
                self.warm_key,
            );
        }
        after_idle_gap
    }

    /// Runs the frame's nodes on this thread and the pool, and waits for
    /// them: how the frame ran, and how many nodes it ran alone. Sets
    /// `frame_slot`.
    #[cfg_attr(target_os = "linux", link_section = "engine_tasks_frame")]
    fn run_nodes(&mut self, pool_shared: &PoolShared, start: &FrameStart) -> (FrameSharing, usize) {
        // A method, not a closure's body, so that it lands with the
        // frame's code (`sync/prefetch.rs`).
        let run = |local: Option<&Local<'_>>| self.run_nodes_in(pool_shared, start, local);
        match start.slot {
            Some(slot) => worker::with_claimed_slot(pool_shared, slot, run),
            None => worker::with_slot(pool_shared, run),
        }
    }

    /// [`Runtime::run_nodes`] in this thread's slot of the pool, `local`
    /// (none if it has none).
    #[cfg_attr(target_os = "linux", link_section = "engine_tasks_frame")]
    fn run_nodes_in(
        &mut self,
        pool_shared: &PoolShared,
        start: &FrameStart,
        local: Option<&Local<'_>>,
    ) -> (FrameSharing, usize) {
        self.frame_slot = local.map_or(NONE, |l| l.index() as u32);
        let (roots, floor, graph) = (&self.roots, self.floor, self.shared);
        let alone = (!self.waking).then_some(&mut self.plan);
        let margin = self.share_above.hand_over_margin(&self.trial);
        let nanos_per_tick = self.rate.nanos_per_tick();
        let hand_over = |local: Option<&Local<'_>>, timed: bool| {
            let check_every = if timed || start.number == 0 {
                1
            } else {
                alone::CHECK_EVERY
            };
            // Only if a worker other than this thread could help, and not
            // in a trial of running alone (`SharingTrial`).
            let workers = pool_shared.worker_count();
            let this_is_a_worker = local.is_some_and(|l| l.index() < workers);
            let others = workers - usize::from(this_is_a_worker);
            let margin = margin.filter(|_| others > 0)?;
            Some(HandOverRule::new(
                self.share_above,
                nanos_per_tick,
                check_every,
                margin,
            ))
        };
        if start.lists.is_some() {
            // Its helpers were queued in `prepare_frame`, and this
            // thread has the slot claimed there: it walks list 0.
            let local = local.expect("a planned frame's thread has a slot");
            // SAFETY: the frame only shares the graph.
            let shared = unsafe { graph.as_ref() };
            // SAFETY: the frame runs until `wait_frame` returns.
            let frame = unsafe { shared.frame_view(Some(local)) };
            shared.walk_plan(0, local, &frame, true);
            local.wait_frame(&shared.done, floor, &shared.inbox);
            return (FrameSharing::Planned, 0);
        }
        // SAFETY: no task of this frame is queued yet.
        let inputs = unsafe { &mut (*graph.as_ptr()).inputs };
        inputs.thread_slot = local.map_or(NONE, |l| l.index() as u32);
        // Who to wake when a pinned node is ready. A slot's parker
        // lives in the pool's shared state, which outlives every node:
        // the pool's threads hold it through their `Arc`, and the
        // frame's thread waits in the pool, its caller borrowing a
        // handle.
        inputs.waker = Some(match local {
            Some(l) => Waiter::Slot(pool_shared.sleep.parker(l.index())),
            None => crate::pool::wait::waiter_without_slot(),
        });
        // SAFETY: from here on the frame only shares the graph.
        let shared = unsafe { graph.as_ref() };
        let guard = AbortOnUnwind::new("while task-graph nodes were queued");
        let (sharing, ran_alone) = match alone {
            Some(plan) => {
                let rule = hand_over(local, shared.timed);
                let ran = shared.run_alone(plan, local, rule);
                if ran.0 == FrameSharing::Alone {
                    // It ran to its end here: nothing to announce or wait for.
                    guard.done();
                    return ran;
                }
                ran
            }
            None => {
                shared.queue_ready(roots.iter().copied(), local, pool_shared, false);
                (FrameSharing::Shared, 0)
            }
        };
        // Announced once its nodes are queued; `frame_unshared` after.
        pool_shared.frame_shared(start.in_frame_wait_ticks);
        match local {
            Some(local) => local.wait_frame(&shared.done, floor, &shared.inbox),
            None => {
                crate::pool::wait::wait_without_slot(pool_shared, &shared.done, Some(&shared.inbox))
            }
        }
        guard.done();
        (sharing, ran_alone)
    }

    /// After the frame: records its statistics, tells the pool who took
    /// part, learns node times and priorities, and reports panics.
    #[cfg_attr(target_os = "linux", link_section = "engine_tasks_frame")]
    fn finish_frame(
        &mut self,
        pool_shared: &PoolShared,
        start: &FrameStart,
        sharing: FrameSharing,
    ) -> Result<&FrameStats, FrameError> {
        let end_tick = clock::ticks();
        let ended = self.rate.wants_reading(end_tick).then(Instant::now);
        if let Some(started) = start.started {
            self.rate.observe(started, start.start_tick);
        }
        if let Some(ended) = ended {
            self.rate.observe(ended, end_tick);
        }
        // From the clock until the rate is measured (the first frames; then
        // every reading is taken), and whenever both readings were taken;
        // from the ticks otherwise (none, if they went back).
        let wall = match (start.started, ended) {
            (Some(started), Some(ended)) => ended - started,
            _ => self
                .rate
                .duration(end_tick.saturating_sub(start.start_tick)),
        };
        let steals = pool_shared.stolen_tasks_total() - start.steals_before;
        let slots = pool_shared.slots.len();
        self.stats.set_sharing(sharing);
        self.record(start.number, wall, start.start_tick, steals, slots);
        let frame_slot = self.frame_slot;
        if start.after_idle_gap {
            // The workers that took part wake early for the next frames.
            let helpers = match sharing {
                FrameSharing::Alone => 0,
                // Set only in planned frames; the frame latch's acquire
                // ordered the helpers' marks (`walk_plan`), and `&mut self`
                // holds the graph.
                FrameSharing::Planned => {
                    *self.shared_mut().helper_slots.get_mut() & !bit_of(frame_slot)
                }
                FrameSharing::HandedOver | FrameSharing::Shared => {
                    self.stats.slots_that_ran() & !bit_of(frame_slot)
                }
            };
            pool_shared.next_frame.frame_ended(helpers);
        }
        let stats = &self.stats;
        instrument::frame_plots(
            |lane| pool_shared.queued(lane),
            || {
                stats
                    .nodes()
                    .filter(|node| node.thread.is_some_and(|t| t != frame_slot as usize))
                    .count()
            },
        );
        // Parked time per slot, for the slots that ran: started workers and
        // the frame's thread.
        let workers = pool_shared.threads_started();
        let before = &self.parked_before;
        self.stats.record_parked(|slot| {
            let active = slot < workers || slot == frame_slot as usize;
            let parked = pool_shared.slots[slot].counters.parked_ticks_at(end_tick);
            active.then(|| parked.saturating_sub(before[slot]))
        });
        // Set only in planned frames, as `helper_slots`.
        let walked = *self.shared_mut().walked_ticks.get_mut();
        self.learn(start.number, wall, walked);
        // The gap starts where idle threads start waiting for the next frame
        // (`frame_ended`), before this thread's bookkeeping above.
        self.last_end_tick = Some(end_tick);
        LAST_FRAME_END.set(end_tick);
        // Relaxed: the frame latch's acquire ordered every node's writes.
        if self.shared_mut().failed.load(Ordering::Relaxed) {
            return Err(self.frame_error(start.number));
        }
        Ok(&self.stats)
    }

    /// What the frame teaches the next ones: node estimates (which feed
    /// the wake-up decision in any order), priorities and the plan.
    /// `walked`: if it was planned, its nodes' summed time in ticks.
    #[cfg_attr(target_os = "linux", link_section = "engine_tasks_frame")]
    fn learn(&mut self, number: u64, wall: Duration, walked: u64) {
        let timed = self.shared_mut().timed;
        let clarity = self.clarity(wall, walked);
        // A frame run alone that was held up once (a stall the nodes after
        // it did not confirm: a preempted thread) says nothing of its
        // nodes; two in a row do (a node that stays that slow), and so does
        // one within `ESTIMATE_SETTLED_EVERY` frames of the last one left
        // out (work that comes back every few frames, not a stall).
        let held_up = self.stats.sharing() == FrameSharing::Alone && self.plan.held_up();
        let stalled_once = held_up
            && !self.held_up_before
            && self
                .stall_left_out_at
                .is_none_or(|at| number > at + ESTIMATE_SETTLED_EVERY);
        self.held_up_before = held_up;
        if stalled_once {
            self.stall_left_out_at = Some(number);
        } else if clarity == Clarity::Unclear {
            self.unclear_at = Some(number);
        }
        if timed && !stalled_once && self.estimates_due(number, clarity) {
            self.estimated_after = Some(number);
            self.update_estimates();
        }
        let was_waking = self.waking;
        self.update_wakes(wall);
        // A verdict that just turned (a trial, say) re-sorts as due even
        // after a frame that was clearly alone.
        let turned = self.waking != was_waking;
        // Never while frames run clearly alone, every 64th while they run
        // alone or planned, every eighth while they are shared and queued
        // (the constants say why). The interval is the current one, so a
        // re-sort long due comes at once when frames turn queued.
        if self.order == ReadyOrder::CriticalPathFirst
            && timed
            && (clarity != Clarity::ClearlyAlone || turned)
        {
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
    }

    #[cfg_attr(target_os = "linux", link_section = "engine_tasks_frame")]
    fn record(&mut self, number: u64, wall: Duration, start_tick: u64, steals: u64, slots: usize) {
        // SAFETY: between frames (see `shared_mut`); borrowed alongside the
        // statistics.
        let shared = unsafe { self.shared.as_mut() };
        let (plan, ran_alone) = (&self.plan, self.ran_alone);
        let planned = self.stats.sharing() == FrameSharing::Planned;
        let (dependency_start, dependency_list) =
            (&shared.dependency_start, &shared.dependency_list);
        let (schedule, states) = (&shared.schedule, &shared.states);
        let released_by = |i: usize| {
            let by = if planned {
                // Untimed: the dependency placed last.
                let range = dependency_start[i] as usize..dependency_start[i + 1] as usize;
                dependency_list[range]
                    .iter()
                    .copied()
                    .max_by_key(|&d| schedule.placed_at(d as usize))
                    .unwrap_or(NONE)
            } else {
                plan.released_by(i, ran_alone).unwrap_or_else(|| {
                    // Relaxed: the frame latch's acquire ordered these writes.
                    states[i].released_by.load(Ordering::Relaxed)
                })
            };
            (by != NONE).then_some(by as usize)
        };
        // A timed planned frame's walk reads run records the other walkers
        // wrote (lines their cores hold), and the dependency that ended last
        // released each node, which the statistics can find on their own:
        // it waits until the path is asked for. Untimed, the rule reads the
        // plan, which may change before then: walked now.
        let walk = if planned && shared.timed {
            PathWalk::WhenAsked
        } else {
            PathWalk::Now(released_by)
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
            walk,
        );
    }

    /// The error of a frame in which nodes panicked (allocates).
    fn frame_error(&mut self, number: u64) -> FrameError {
        // SAFETY: between frames (see `shared_mut`); a shared borrow of the
        // graph alongside the statistics.
        let shared = unsafe { self.shared.as_ref() };
        let mut error = FrameError {
            resources_in_use: false,
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
                NodeOutcome::Ran | NodeOutcome::Off => {}
            }
        }
        error
    }
}

/// `slot`'s bit in a mask of slots; none for `NONE` or a slot past 63.
fn bit_of(slot: u32) -> u64 {
    1u64.checked_shl(slot).unwrap_or(0)
}

#[cfg(test)]
mod tests;

//! What a frame's tasks share: the nodes, their per-frame state and run
//! records, the frame's inputs and latch, the node and helper tasks, and
//! how a node runs and releases its successors (see the parent module for
//! the per-frame protocol and why the borrowed frame data outlives every
//! task).

use super::gates::Gates;
use super::planned::{self, Schedule};
use crate::clock;
use crate::faults::{self, Site};
use crate::graph::builder::{Body, Name};
use crate::graph::context::{BorrowLine, Context, InlineBorrows, NodeAccess};
use crate::graph::run_record::{NodeOutcome, RunRecord};
use crate::lane::Lane;
use crate::pool::registry::Shared as PoolShared;
use crate::pool::worker::{self, Local};
use crate::pool::PoolHandle;
use crate::sync::countdown::Countdown;
use crate::sync::frame_gate::Askers;
use crate::sync::latch::{Latch, Waiter};
use crate::sync::node_marks::{FinishMark, Sleepers};
use crate::sync::prefetch;
use crate::sync::queue::TaskQueue;
use crate::sync::task::{Header, TaskRef};
use crate::trace::instrument;
use crossbeam_utils::CachePadded;
use std::any::Any;
use std::cell::UnsafeCell;
use std::panic::{self, AssertUnwindSafe};
use std::ptr::{self, NonNull};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;

/// "No slot" for thread indices, and "no node" for `released_by`.
pub(super) const NONE: u32 = u32::MAX;

/// How many nodes ahead of the one it runs a frame run alone with cold
/// caches prefetches each node's own lines (its node, run record, poison
/// mark and gate span); the closures, and what the span points to (its
/// checks, resource types, set gate and own condition), are prefetched
/// half as far ahead (`alone.rs`).
/// A walker of a planned frame does the same along its list, with each
/// node's state line too, and one node ahead what its next node is checked
/// with (`planned.rs`).
/// The plan's order is not the nodes' order in memory, so the hardware
/// prefetcher cannot guess it. Not tuned: sixteen (closures at eight) is
/// what was measured, against no prefetch; eight for the nodes' own lines
/// without the closures gained nothing measurable.
pub(super) const PREFETCH_AHEAD: usize = 16;

/// How many of its next node's dependencies' states a walker of a planned
/// frame prefetches one node ahead (`Shared::prefetch_turn`): a bound on
/// the prefetches per node, above the one to three dependencies of the
/// benchmark DAG's nodes (`benches/lib.rs`).
const TURN_DEPENDENCIES: usize = 4;

/// Whether a frame's node data is likely in this core's caches.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(super) enum Caches {
    /// Frames back to back: the last frame left it there, and prefetching
    /// would only cost instructions (a fifth of an empty node's time);
    /// walkers of a planned frame still prefetch their next node's
    /// dependencies' states, which the other core may have just written
    /// (`Shared::prefetch_turn`).
    Warm,
    /// The pool had an idle gap (a paced loop's sleep) since the graph's
    /// last frame, in which other work may have evicted it: a frame run
    /// alone, and each walker of a planned one, prefetches. So does the
    /// frame of a second graph that follows another closely after the
    /// sleep (`pool/frame_gaps.rs`).
    Cold,
}

pub(super) struct Node {
    pub(super) name: Name,
    /// The name as the timeline recorder and the profiler know it.
    pub(super) label: instrument::NodeLabel,
    pub(super) lane: Lane,
    pub(super) pinned: bool,
    /// Whether queueing this node wakes a sleeping thread (see
    /// [`WAKE_WORTH_NANOS`](super::policy::WAKE_WORTH_NANOS)); set between frames. Per node, so that a
    /// finer rule needs no new field.
    pub(super) wakes: bool,
    pub(super) body: UnsafeCell<Body>,
    pub(super) panic: Mutex<Option<Box<dyn Any + Send>>>,
}

/// What a node's dependencies write when they release it: only they touch
/// this line (the node's own thread writes its [`RunRecord`]). Padded:
/// nodes released by different threads have neighbouring states.
pub(super) struct NodeState {
    pub(super) pending: Countdown,
    /// The node that released it, written in frames that count. Needs no
    /// tag: such a frame releases every node that has dependencies, except
    /// those that ran before a hand-over, and for those (as for every node
    /// of a frame that ran alone) `record` asks the plan instead
    /// (`AlonePlan::released_by`); roots keep `NONE`.
    pub(super) released_by: AtomicU32,
    /// Set when the node finished in a planned frame (`planned.rs`), which
    /// does not touch the countdown; its claim mark is the plan's.
    pub(super) finished: FinishMark,
}

impl NodeState {
    pub(super) fn new() -> Self {
        NodeState {
            pending: Countdown::new(),
            released_by: AtomicU32::new(NONE),
            finished: FinishMark::new(),
        }
    }
}

/// A node's intrusive task; `header` first so a header pointer is a task
/// pointer.
#[repr(C)]
pub(super) struct NodeTask {
    pub(super) header: Header,
    pub(super) graph: *const Shared,
    pub(super) index: u32,
}

/// The task that has a pool thread walk list `list` of a planned frame
/// (`planned.rs`); `header` first so a header pointer is a task pointer.
#[repr(C)]
pub(super) struct HelperTask {
    pub(super) header: Header,
    pub(super) graph: *const Shared,
    pub(super) list: u32,
}

/// Set by the frame's thread before it queues the roots; read-only while
/// the frame runs.
pub(super) struct FrameInputs {
    /// Where the frame's `&C` is (`Context::data`).
    pub(super) data: Option<NonNull<()>>,
    pub(super) pool: *const PoolHandle,
    pub(super) number: u64,
    /// The epoch of the dependency countdowns (`countdown.rs`): frames
    /// that count, numbered from 1. A frame run alone to its end counts
    /// nothing, so it does not take one.
    pub(super) count_epoch: u64,
    pub(super) thread_slot: u32,
    pub(super) waker: Option<Waiter>,
    /// The lane of every node, for planned frames (which need one).
    pub(super) lane: Lane,
    /// How long a walker of a planned frame looks for a ready node before
    /// it sleeps ([`IN_FRAME_WAIT_NANOS`](super::policy::IN_FRAME_WAIT_NANOS)).
    pub(super) plan_wait_ticks: u64,
    /// Whether the pool had an idle gap since the graph's last frame (see
    /// [`Caches`]): then a frame run alone, and each walker of a planned
    /// frame, prefetches.
    pub(super) caches: Caches,
}

/// Everything tasks reach while a frame runs.
///
/// Its address never changes while the graph lives, since every task
/// points to it: a new build of the graph replaces its contents in place
/// (`rebuild`), between frames.
pub(super) struct Shared {
    pub(super) nodes: Vec<Node>,
    pub(super) states: Vec<CachePadded<NodeState>>,
    pub(super) runs: Vec<RunRecord>,
    /// Per node, the frame epoch in which a dependency failed. Written only
    /// then, so in the usual frame both cores keep these lines.
    pub(super) poisoned_in: Vec<AtomicU64>,
    /// Each node's closure's address, for prefetching only (never
    /// dereferenced); set between frames, with the bodies.
    pub(super) closures: Vec<usize>,
    pub(super) tasks: Vec<NodeTask>,
    /// One per list of the plan but the frame's own.
    pub(super) helper_tasks: Box<[HelperTask]>,
    /// Helper tasks of the running planned frame not yet started.
    pub(super) helpers_pending: CachePadded<AtomicUsize>,
    /// The plan of planned frames; written between frames only.
    pub(super) schedule: Schedule,
    /// The walkers of a planned frame that may be asleep, and the pool
    /// slot of each walker (list) that went to sleep.
    pub(super) sleepers: CachePadded<Sleepers>,
    pub(super) walker_slots: [AtomicU32; planned::MAX_LISTS],
    /// The pool slots (below 64) of the helpers that ran a node of the
    /// running planned frame, a bit each: who took part, without a walk of
    /// the run records (`Runtime::finish_frame`).
    pub(super) helper_slots: AtomicU64,
    /// The summed node times (ticks) of the running planned frame, each
    /// walker adding its own once: what its work was, without a walk of
    /// the run records (`Runtime::clarity`).
    pub(super) walked_ticks: AtomicU64,
    pub(super) successor_start: Vec<u32>,
    /// Reordered by priority between frames only.
    pub(super) successors: Vec<u32>,
    /// Each node's number of dependencies: read-only, and kept off the
    /// countdowns' lines, which every release writes (`countdown.rs`).
    pub(super) dependencies: Vec<u32>,
    /// Each node's dependencies: those of node `i` are
    /// `dependency_list[dependency_start[i]..dependency_start[i + 1]]`.
    pub(super) dependency_start: Vec<u32>,
    pub(super) dependency_list: Vec<u32>,
    pub(super) inline_successors: bool,
    /// Read the clock around every node.
    pub(super) timed: bool,
    /// Sinks still to finish in the frame; the thread that counts the last
    /// gives their count back to `done` (`Shared::count_sinks`). Each on
    /// its own line: sinks count on the first, the frame's thread polls the
    /// second while it waits, and the rest of this struct is read by every
    /// node.
    pub(super) sinks_left: CachePadded<AtomicUsize>,
    pub(super) done: CachePadded<Latch>,
    pub(super) inbox: TaskQueue,
    pub(super) failed: AtomicBool,
    pub(super) inputs: FrameInputs,
    pub(super) gates: Gates,
}

// SAFETY: while a frame runs, threads share `&Shared`: its atomics, the
// queue and latch (thread-safe), fields written only between frames, and
// node bodies, each entered by one thread at a time (module docs; bodies are
// `Send`). `inputs.data` is only turned into a `&C` by the bodies and
// conditions, and only `TaskGraph<C: Sync>` runs frames (`run_frame`'s
// contract).
unsafe impl Sync for Shared {}
// SAFETY: as above; the raw pointers are only followed during a frame.
unsafe impl Send for Shared {}

impl Shared {
    pub(super) fn task(&self, index: u32) -> TaskRef {
        // From the whole task, not its `header` field: `run_node` reaches
        // the rest of the task through this pointer (a pointer made from a
        // field's reference may only reach that field; Miri's Stacked
        // Borrows check found it). The header is at offset 0 (`repr(C)`).
        let header = NonNull::from(&self.tasks[index as usize]).cast::<Header>();
        // SAFETY: the node's task lives as long as the graph, and the caller
        // owns the node for this frame (its release was the last one the
        // countdown counted, or it is a root, or a node a hand-over found
        // ready, queued once by the frame's thread).
        unsafe { TaskRef::from_raw(header) }
    }

    /// Prepares a frame; needs `&mut`, so no task of an earlier frame runs.
    /// Node states need nothing (module docs).
    #[cfg_attr(target_os = "linux", link_section = "engine_tasks_frame")]
    pub(super) fn reset(&mut self, sinks: usize) {
        *self.failed.get_mut() = false;
        *self.helper_slots.get_mut() = 0;
        *self.walked_ticks.get_mut() = 0;
        *self.sinks_left.get_mut() = sinks;
        self.done = CachePadded::new(Latch::new(1));
    }

    /// Queues the tasks of `helpers` helpers, one per list after the
    /// frame's own, in the pool's injector (`planned.rs`), before the
    /// frame's thread enters its slot in the pool; the frame's latch counts
    /// each. Queued as tasks that run even during the pool's shutdown: the
    /// frame waits for them.
    #[cfg_attr(target_os = "linux", link_section = "engine_tasks_shared")]
    pub(super) fn queue_helpers(&self, helpers: usize, pool: &PoolShared) {
        // Relaxed: the pushes below publish it.
        self.helpers_pending.store(helpers, Ordering::Relaxed);
        for _ in 0..helpers {
            // No node runs yet, so the latch's one count (the sinks') is
            // held and it cannot be set meanwhile.
            self.done.increment();
        }
        let lane = self.inputs.lane;
        for task in &self.helper_tasks[..helpers] {
            // From the whole task, as in `task`.
            let header = NonNull::from(task).cast::<Header>();
            // SAFETY: the helper task lives as long as the graph, and each
            // is queued once per planned frame, which waits for it.
            pool.inject_structured(lane, unsafe { TaskRef::from_raw(header) });
        }
    }
}

/// What every node of the running frame sees.
pub(super) struct FrameView<'f> {
    /// Where the frame's `&C` is, readable until `run_frame` returns
    /// (`Context::new`).
    pub(super) data: NonNull<()>,
    pub(super) pool: &'f PoolHandle,
    pub(super) number: u64,
    /// The frame's epoch for `poisoned_in`.
    pub(super) epoch: u64,
    /// See `FrameInputs::count_epoch`.
    pub(super) count_epoch: u64,
    /// The running thread's slot, or [`NONE`].
    pub(super) thread: u32,
    /// Whether other threads may be running nodes of the frame now, and
    /// so asking its sets' gates and counting its releases: `OnlyThis` in
    /// a frame run alone, until its hand-over's queue pushes (`alone.rs`).
    pub(super) askers: Askers,
}

impl Shared {
    /// Queues ready nodes (a shared frame's roots, or what a frame run
    /// alone hands over) for any thread, in the order given, with one
    /// wake-up per lane: by the nodes' `wakes` flags, or for every lane
    /// with `wake_all`. Pinned nodes go to the inbox, which the frame's
    /// thread (the caller) drains while it waits.
    #[cfg_attr(target_os = "linux", link_section = "engine_tasks_shared")]
    pub(super) fn queue_ready(
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
    #[cfg_attr(target_os = "linux", link_section = "engine_tasks_shared")]
    pub(super) unsafe fn frame_view(&self, local: Option<&Local<'_>>) -> FrameView<'_> {
        let inputs = &self.inputs;
        FrameView {
            // `run_frame`'s caller keeps it readable for the frame.
            data: inputs.data.expect("set before the roots are queued"),
            // SAFETY: `run_frame` borrows the pool handle for the frame
            // (caller's contract).
            pool: unsafe { &*inputs.pool },
            number: inputs.number,
            epoch: epoch(inputs.number),
            count_epoch: inputs.count_epoch,
            thread: local.map_or(NONE, |l| l.index() as u32),
            askers: Askers::Many,
        }
    }

    /// Runs node `index`'s body unless a dependency failed in this frame,
    /// the node is disabled, or a run condition of one of its sets or of
    /// the node does not hold: the rules every way of running a frame
    /// (alone, queued, planned) applies through this one function.
    #[inline]
    #[cfg_attr(target_os = "linux", link_section = "engine_tasks_frame")]
    pub(super) fn run_body(&self, index: u32, frame: &FrameView<'_>) -> NodeOutcome {
        let node = &self.nodes[index as usize];
        // Relaxed: set before a dependency's AcqRel count, which the last
        // count acquired; with a single dependency, set before it handed
        // the node over (run inline, or queued); in a frame run alone, set
        // by this thread, or before the hand-over's queue push; in a
        // planned frame, set before the dependency's Release `finish`,
        // which the walker's `is_finished` acquired, or by this thread,
        // for a dependency it ran just before (`claim_next`).
        if self.poisoned_in[index as usize].load(Ordering::Relaxed) == frame.epoch {
            return NodeOutcome::Skipped;
        }
        let gates = &self.gates;
        if gates.any_disabled && gates.disabled[index as usize] {
            return NodeOutcome::Off;
        }
        let rules = gates.rules_of(index);
        if !rules.overflow.is_empty() {
            zero_counts(rules.overflow);
        }
        let inline: InlineBorrows;
        let borrows: &[AtomicI32] = if rules.counts() {
            inline = Default::default();
            &inline
        } else {
            &[]
        };
        // SAFETY: `frame.data` is where the running frame's `&C` is, for
        // this graph's `C`, readable until `run_frame` returns, after this
        // node's run (`run_frame`'s contract).
        let cx = unsafe {
            Context::new(
                frame.data,
                frame.pool,
                frame.number,
                &node.name,
                NodeAccess {
                    typed: rules.typed,
                    borrows,
                    overflow: rules.overflow,
                },
            )
        };
        let _span = instrument::node(node.label, node.lane);
        // SAFETY: this thread owns the node for this frame (module docs), so
        // nobody else is in its body.
        let body = unsafe { &mut *node.body.get() };
        let run = || {
            faults::maybe_panic(Site::NodeBody);
            if !gates.conditions_hold(&rules, &cx, frame) {
                return NodeOutcome::Off;
            }
            body(&cx);
            NodeOutcome::Ran
        };
        match panic::catch_unwind(AssertUnwindSafe(run)) {
            Ok(outcome) => outcome,
            Err(payload) => {
                *node.panic.lock().unwrap_or_else(|e| e.into_inner()) = Some(payload);
                // Relaxed: read after the frame latch.
                self.failed.store(true, Ordering::Relaxed);
                NodeOutcome::Panicked
            }
        }
    }

    /// Counts `n` sinks as finished; `true` for the call that counted the
    /// last of them, whose caller then gives the sinks' count back to the
    /// frame's latch. One read-modify-write, with no read before it: the
    /// latch's own count (which reads first, for the common latch of one
    /// count) moved its line between the cores about twice per sink, also
    /// through the frame's thread polling it.
    ///
    /// A raw pointer, not `&self`, as [`Shared::execute`] explains: a count
    /// that is not the last may let another thread end the frame before
    /// this returns.
    ///
    /// # Safety
    ///
    /// `this` is the running frame's graph, and the `n` sinks are the
    /// caller's to count.
    #[inline]
    #[cfg_attr(target_os = "linux", link_section = "engine_tasks_shared")]
    pub(super) unsafe fn count_sinks(this: *const Self, n: usize) -> bool {
        // SAFETY: forwarded from the caller.
        let last = unsafe { Self::count_sinks_quietly(this, n) };
        if !last {
            // A node task's last touch: the last sink's thread may end the
            // frame from here on (`faults.rs`).
            faults::maybe_pause_after_last_touch();
        }
        last
    }

    /// [`Shared::count_sinks`] without its fault point: for a caller that
    /// holds the frame while it counts ([`Shared::finish_sinks`]).
    ///
    /// # Safety
    ///
    /// As [`Shared::count_sinks`].
    #[inline]
    #[cfg_attr(target_os = "linux", link_section = "engine_tasks_shared")]
    unsafe fn count_sinks_quietly(this: *const Self, n: usize) -> bool {
        // SAFETY: the uncounted sinks keep the frame, and the graph, alive
        // until the count below; a reference to the atomic alone.
        let sinks_left = unsafe { &(*this).sinks_left };
        // AcqRel: release publishes the work of the `n` sinks counted
        // (and, through the countdowns' release chain, or in a planned
        // frame the finish marks' and this walker's program order, all
        // they depend on); the last one acquires every sink's before its
        // caller counts the latch down, whose own release/acquire hands
        // them to the frame's thread.
        sinks_left.fetch_sub(n, Ordering::AcqRel) == n
    }

    /// [`Shared::count_sinks`] (with no fault point: the caller holds the
    /// frame), then the latch's count-down for the last.
    /// Only for a caller whose count-down cannot set the latch (a helper
    /// task's walk: its own count is still held) or that owns the frame
    /// (the frame's thread): `&self` is valid until a function returns,
    /// and once the latch is set the frame's thread may reset or free the
    /// graph. A node task counts with `count_sinks` and leaves the
    /// count-down to `run_node`, after its last reference to the graph.
    ///
    /// # Safety
    ///
    /// The `n` sinks are the caller's, of the running frame, and the caller
    /// is a helper task's walk or the frame's thread (see above).
    #[inline]
    #[cfg_attr(target_os = "linux", link_section = "engine_tasks_shared")]
    pub(super) unsafe fn finish_sinks(&self, n: usize) -> bool {
        // SAFETY: forwarded from the caller.
        let last = unsafe { Self::count_sinks_quietly(self, n) };
        if last {
            // SAFETY: the sinks' count is held until now, so the latch is
            // alive; by this method's contract no one frees it during the
            // call.
            unsafe { Latch::count_down(&*self.done) };
        }
        last
    }

    #[inline]
    pub(super) fn dependencies_of(&self, index: u32) -> &[u32] {
        let range = self.dependency_start[index as usize] as usize
            ..self.dependency_start[index as usize + 1] as usize;
        &self.dependency_list[range]
    }

    /// Whether every helper task of the running planned frame started.
    pub(super) fn helpers_started(&self) -> bool {
        // Relaxed: a hint (`planned.rs`).
        self.helpers_pending.load(Ordering::Relaxed) == 0
    }

    /// Prefetches for the nodes [`PREFETCH_AHEAD`] places after place `at`
    /// of `order` (their own lines) and half as far (their closures).
    #[inline]
    pub(super) fn prefetch_ahead(&self, order: &[u32], at: usize) {
        if let Some(&ahead) = order.get(at + PREFETCH_AHEAD) {
            self.prefetch_node(ahead);
        }
        if let Some(&ahead) = order.get(at + PREFETCH_AHEAD / 2) {
            self.prefetch_body(ahead);
        }
    }

    /// Asks the CPU to bring node `index`'s own lines into the cache:
    /// its node, run record, poison mark and gate span (see `prefetch`).
    #[inline]
    pub(super) fn prefetch_node(&self, index: u32) {
        let i = index as usize;
        if let (Some(node), Some(run), Some(mark)) =
            (self.nodes.get(i), self.runs.get(i), self.poisoned_in.get(i))
        {
            prefetch::value(node);
            prefetch::value(run);
            prefetch::value(mark);
        }
        self.gates.prefetch_span(index);
    }

    /// Prefetches for a walker of a planned frame at place `at` of its
    /// list after an idle gap: as [`prefetch_ahead`](Self::prefetch_ahead),
    /// and the state of the node [`PREFETCH_AHEAD`] places on.
    #[inline]
    pub(super) fn prefetch_walk(&self, list: &[u32], at: usize) {
        self.prefetch_ahead(list, at);
        if let Some(&ahead) = list.get(at + PREFETCH_AHEAD) {
            self.prefetch_state(ahead);
        }
    }

    /// Readies what a walker reads when node `index`'s turn comes, one
    /// node ahead, in every planned frame: reads the node's dependency and
    /// successor starts and its dependency row (read-only arrays), and
    /// prefetches the states of its first [`TURN_DEPENDENCIES`]
    /// dependencies (whether it is ready) and the first line of its
    /// successor row (whom it releases). The prefetches sixteen places
    /// ahead (`prefetch_ahead`) do not cover these: a dependency's state is
    /// written late, by whichever thread runs it, and in the development
    /// VM's slow stretches lines fetched that early seemed lost again
    /// before use (`docs/performance/paced-frames.md`). Frames back to back
    /// need it too: a dependency that ran on the other core left its finish
    /// mark's line there, in this frame, and the check after the running node
    /// then waits for it.
    #[inline]
    #[cfg_attr(target_os = "linux", link_section = "engine_tasks_shared")]
    pub(super) fn prefetch_turn(&self, index: u32) {
        for &dependency in self.dependencies_of(index).iter().take(TURN_DEPENDENCIES) {
            // For reading: the thread that runs the dependency may still
            // have its finish mark to write.
            if let Some(state) = self.states.get(dependency as usize) {
                prefetch::value(state);
            }
        }
        prefetch::line(self.successors_of(index).as_ptr() as usize);
    }

    /// Asks the CPU to bring node `index`'s state into the cache for a
    /// write, since a planned walk marks it finished: a line the other core
    /// read in the frame before (the finish mark, for a successor) is then
    /// invalidated before the mark's store.
    #[inline]
    pub(super) fn prefetch_state(&self, index: u32) {
        if let Some(state) = self.states.get(index as usize) {
            prefetch::line_for_write(&**state as *const NodeState as usize);
        }
    }

    /// Asks the CPU to bring node `index`'s closure into the cache, and
    /// the rules its gate span points to (its span was prefetched before).
    #[inline]
    pub(super) fn prefetch_body(&self, index: u32) {
        if let Some(&address) = self.closures.get(index as usize) {
            prefetch::line(address);
        }
        self.gates.prefetch_rules(index);
    }

    #[inline]
    pub(super) fn successors_of(&self, index: u32) -> &[u32] {
        let range = self.successor_start[index as usize] as usize
            ..self.successor_start[index as usize + 1] as usize;
        &self.successors[range]
    }

    /// Poisons node `index` for frame `epoch`: a dependency did not run
    /// or panicked, so it is skipped.
    #[inline]
    pub(super) fn poison(&self, index: u32, epoch: u64) {
        // Relaxed: published by the count that follows in `release` (or,
        // for a single dependency, by handing the node over; in a frame run
        // alone, read by this thread or after the hand-over's queue push;
        // in a planned frame, by the node's Release `finish` after it, or
        // read by this thread, which claimed `index` first: `claim_next`).
        self.poisoned_in[index as usize].store(epoch, Ordering::Relaxed);
    }

    /// Counts node `from`'s release of its successor `to` in the frame,
    /// poisoning `to` unless `from` ran; `true` if this was the last
    /// release, and the caller now owns `to`. In a frame that runs on this
    /// thread alone (`frame.askers` is `OnlyThis`: a hand-over counting
    /// before it pushes, `alone.rs`), the count is a plain store.
    ///
    /// A raw pointer, not `&self`, as [`Shared::execute`] explains: a
    /// release that is not the last may let other threads run `to` and end
    /// the frame before this returns.
    ///
    /// # Safety
    ///
    /// `this` is the running frame's graph, and `from` a node of the
    /// caller's that has not released `to` yet in this frame.
    #[inline]
    pub(super) unsafe fn release(
        this: *const Self,
        from: u32,
        to: u32,
        outcome: NodeOutcome,
        frame: &FrameView<'_>,
    ) -> bool {
        // SAFETY: `to` waits for this release, so the frame, and the graph,
        // are alive until the count below; `graph` and `state` are not used
        // after it unless it was the last.
        let graph = unsafe { &*this };
        if outcome.fails_dependents() {
            graph.poison(to, frame.epoch);
        }
        let state = &graph.states[to as usize];
        let (dependencies, epoch) = (graph.dependencies[to as usize], frame.count_epoch);
        let alone = frame.askers == Askers::OnlyThis;
        let last = if alone {
            state.pending.release_alone(dependencies, epoch)
        } else {
            state.pending.release(dependencies, epoch)
        };
        if last {
            // Relaxed: read after the frame latch.
            state.released_by.store(from, Ordering::Relaxed);
        } else if !alone {
            // Others may run `to` and end the frame from here on, if this
            // was the caller's last release (`faults.rs`).
            faults::maybe_pause_after_last_touch();
        }
        last
    }

    /// Runs node `first`, then, as long as it released one, the most urgent
    /// node it released; see the module docs. `true` if it counted the
    /// frame's last sink: the caller must then count the frame's latch
    /// down, once it holds no reference to the graph (`run_node`).
    ///
    /// A raw pointer, not `&self`: a reference passed to a function must
    /// stay valid until the function returns, while the frame may end (and
    /// its thread reset or free the graph) as soon as this call has made
    /// its last touch of the frame (released, pushed or counted as a sink
    /// its last node), before it returns (`sync/latch.rs`). `graph` below
    /// is a local reference, used only while this thread owns a node of
    /// the frame; the calls that may make the last touch take raw pointers
    /// too
    /// ([`Shared::release`], [`Shared::count_sinks`],
    /// [`Shared::push_pinned`]).
    ///
    /// # Safety
    ///
    /// `this` is the running frame's graph, and this thread owns node
    /// `first` for the frame (module docs).
    pub(super) unsafe fn execute(this: *const Self, first: u32, local: Option<&Local<'_>>) -> bool {
        // SAFETY: `first` is this thread's, so the frame runs (see above).
        let graph = unsafe { &*this };
        // SAFETY: nodes run only while their frame runs (module docs).
        let frame = unsafe { graph.frame_view(local) };
        let on_frame_thread = frame.thread != NONE && frame.thread == graph.inputs.thread_slot;
        let task_lane = local.map_or(Lane::FrameCritical, |l| l.current_lane());
        let timed = graph.timed;
        let now = || if timed { clock::ticks() } else { 0 };
        let mut index = first;
        let mut lane = task_lane;
        let mut start = now();
        let mut last_sink = false;
        loop {
            let outcome = graph.run_body(index, &frame);
            let end = now();
            graph.runs[index as usize].write(start, end, frame.thread, outcome);

            let successors = graph.successors_of(index);
            if successors.is_empty() {
                // The last touch of the graph (module docs) but for the
                // latch's count-down, which `run_node` makes if this was the
                // last sink.
                // SAFETY: `index` is this thread's sink, counted once.
                last_sink = unsafe { Self::count_sinks(this, 1) };
                break;
            }
            let mut next = None;
            let mut pushed = Pushed::default();
            for &s in successors {
                // SAFETY: `index` ran on this thread and releases each of
                // its successors once.
                if !unsafe { Self::release(this, index, s, outcome, &frame) } {
                    continue;
                }
                // We own `s` now: it cannot finish before we queue it, so the
                // graph stays alive until the push. Everything read of it
                // is read before.
                let succ = &graph.nodes[s as usize];
                let task = graph.task(s);
                let inline = graph.inline_successors && next.is_none();
                if succ.pinned {
                    if inline && on_frame_thread {
                        next = Some(s);
                    } else {
                        // SAFETY: this thread owns the pinned node `s`.
                        if unsafe { Self::push_pinned(this, task) } {
                            // It set the latch: nothing of the graph is
                            // touched after; `local` is the pool's.
                            if let Some(local) = local {
                                local.note_frame_ended();
                            }
                        }
                    }
                } else if inline && succ.lane <= lane {
                    next = Some(s);
                } else if let Some(local) = local {
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
                    local.push_quiet(succ.lane, task);
                } else {
                    frame.pool.shared().inject_structured(succ.lane, task);
                }
            }
            if let Some(local) = local {
                pushed.notify(local);
            }
            if next.is_none() {
                // The successors pushed may end the frame from here on
                // (`faults.rs`).
                faults::maybe_pause_after_last_touch();
            }
            let Some(s) = next else { break };
            index = s;
            start = end;
            let next_lane = graph.nodes[s as usize].lane;
            if let Some(local) = local {
                local.count_inline_run(next_lane);
                local.set_lane(next_lane.min(lane));
            }
            lane = next_lane.min(lane);
        }
        if let Some(local) = local {
            local.set_lane(task_lane);
            if last_sink {
                local.note_frame_ended();
            }
        }
        last_sink
    }

    /// Pushes the task of a pinned node into the inbox, which the frame's
    /// thread drains, and wakes that thread. Once the task is in the inbox
    /// the frame's thread may run it and end the frame while this call is
    /// still under way, so the push holds a count of the frame's latch of
    /// its own: taken while the node it pushes keeps the sinks' count
    /// held, given back (raw, after the last touch) once the push is done.
    /// Rare (only pinned nodes released on other threads), so the two
    /// read-modify-writes cost little. `true` if giving the count back set
    /// the latch. A raw pointer, as for [`Shared::execute`].
    ///
    /// # Safety
    ///
    /// `this` is the running frame's graph, and `task` the task of a
    /// pinned node this thread owns.
    #[cold]
    unsafe fn push_pinned(this: *const Self, task: TaskRef) -> bool {
        // SAFETY: this thread owns the node, so the frame runs until the
        // push; after it, the push's own latch count keeps the graph.
        let graph = unsafe { &*this };
        let waker = graph.inputs.waker.clone().expect("set before the roots");
        // The node is unfinished, so a sink is, and the latch holds the
        // sinks' count: it cannot be set meanwhile.
        graph.done.increment();
        graph.inbox.push(task);
        waker.wake();
        // The last touch of the graph.
        // SAFETY: the count taken above keeps the latch alive until now.
        unsafe { Latch::count_down(&*graph.done) }
    }
}

/// Frame `number` (counted from 0) as the poison flags tag it: from 1, so
/// that a flag's initial 0 never matches (module docs).
fn epoch(number: u64) -> u64 {
    number + 1
}

/// Lanes that got tasks in one release, and which of them need a wake-up.
#[derive(Default)]
pub(super) struct Pushed {
    pub(super) lanes: u8,
    pub(super) waking: u8,
}

impl Pushed {
    pub(super) fn add(&mut self, node: &Node) {
        self.lanes |= 1 << node.lane.index();
        if node.wakes {
            self.waking |= 1 << node.lane.index();
        }
    }

    pub(super) fn add_waking(&mut self, lane: Lane) {
        self.lanes |= 1 << lane.index();
        self.waking |= 1 << lane.index();
    }

    pub(super) fn notify(&self, local: &Local<'_>) {
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
/// `header` is the header of a `NodeTask` queued by `run_frame` or
/// `execute` for the running frame.
#[cfg_attr(target_os = "linux", link_section = "engine_tasks_shared")]
pub(super) unsafe fn run_node(header: NonNull<Header>) {
    // Raw pointers and copies only: the closure below is an argument of a
    // call that lasts as long as `execute`, and a reference it captured (to
    // the task, in the graph; to the caller's pool handle) would have to
    // stay valid that long, while the frame may end, and the graph and the
    // handle go, once `execute` has made its last touch of the frame.
    // SAFETY: `NodeTask` is `repr(C)` with the header first, and the graph
    // outlives the frame's unfinished nodes (module docs), this one among
    // them.
    let (graph, index) = unsafe {
        let task = header.cast::<NodeTask>().as_ptr();
        ((*task).graph, (*task).index)
    };
    // SAFETY: the pool handle is set for the frame, which is still running.
    let pool: *const PoolShared = unsafe { (*(*graph).inputs.pool).shared() };
    let last_sink = worker::with_current(move |local| {
        let local = local.filter(|l| ptr::eq(l.shared, pool));
        // SAFETY: the task was queued once for the running frame, so this
        // thread owns node `index`.
        unsafe { Shared::execute(graph, index, local) }
    });
    if last_sink {
        // Out here, where no call holds a reference to the graph: once the
        // latch is set the frame's thread may reset or free it, which a
        // reference passed to a running call forbids.
        // SAFETY: the sinks' count is held until this call gives it back,
        // so the latch is alive; nothing of the graph is touched after.
        unsafe { Latch::count_down(&*(*graph).done) };
    }
}

/// The `RunFn` of helper tasks: walks the task's list of the running
/// planned frame, then counts down the frame's latch, its last touch of
/// the graph (`planned.rs`).
///
/// # Safety
///
/// `header` is the header of a `HelperTask` queued by `prepare_frame`
/// for the running frame.
#[cfg_attr(target_os = "linux", link_section = "engine_tasks_shared")]
pub(super) unsafe fn run_helper(header: NonNull<Header>) {
    // SAFETY: `HelperTask` is `repr(C)` with the header first, and the
    // frame waits for this task's count-down, so the graph is alive.
    let task = unsafe { header.cast::<HelperTask>().as_ref() };
    // SAFETY: as above.
    let graph = unsafe { &*task.graph };
    // SAFETY: the pool handle is set for the frame, which is still running.
    let pool = unsafe { &*graph.inputs.pool };
    let walked = worker::with_current(|local| {
        // Relaxed: a hint for the frame's thread (`planned.rs`).
        graph.helpers_pending.fetch_sub(1, Ordering::Relaxed);
        let local = local.filter(|l| ptr::eq(l.shared, pool.shared()));
        if let Some(local) = local {
            // SAFETY: the frame is running (see above).
            let frame = unsafe { graph.frame_view(Some(local)) };
            graph.walk_plan(task.list as usize, local, &frame, false);
        }
        local.is_some()
    });
    // Out of the closure, as in `run_node`.
    // SAFETY: this task's count is held until this call gives it back, so
    // the latch is alive; nothing of the graph is touched after.
    let ended = unsafe { Latch::count_down(&*graph.done) };
    if ended && walked {
        // The context the walk ran in: this thread's, unchanged since.
        worker::with_current(|local| {
            if let Some(local) = local {
                local.note_frame_ended();
            }
        });
    }
}

/// Zeroes the borrow counts of a node past its first `INLINE_BORROWS`
/// types, before it runs (`context.rs`). Out of line: few nodes have any.
#[cold]
#[inline(never)]
fn zero_counts(lines: &[BorrowLine]) {
    for count in lines.iter().flat_map(|line| line.iter()) {
        // Relaxed: only this thread counts while the node runs; the frame
        // orders this run after the last (`context.rs`).
        count.store(0, Ordering::Relaxed);
    }
}

/// The address of a body's closure, for [`Shared::closures`].
pub(super) fn closure_address(body: &Body) -> usize {
    &**body as *const (dyn FnMut(&Context<'_>) + Send) as *const u8 as usize
}

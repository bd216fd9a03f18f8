//! A graph's shared state in memory: made once, empty, when the graph is
//! made ([`Shared::leak_empty`]), and refilled in place by every build
//! ([`Shared::rebuild`]), so that its address, which every task holds,
//! never changes, and a build of the same size allocates nothing.

use super::frame::{
    closure_address, run_helper, run_node, Caches, FrameInputs, HelperTask, Node, NodeState,
    NodeTask, Shared, NONE,
};
use super::gates::Gates;
use super::planned::{self, Schedule};
use crate::graph::builder::{Body, Name, NodeSpec};
use crate::graph::compile::Compiled;
use crate::graph::run_record::RunRecord;
use crate::lane::Lane;
use crate::sync::latch::Latch;
use crate::sync::node_marks::Sleepers;
use crate::sync::queue::TaskQueue;
use crate::sync::task::Header;
use crate::trace::instrument;
use crossbeam_utils::CachePadded;
use std::cell::UnsafeCell;
use std::ptr::{self, NonNull};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize};
use std::sync::Mutex;

impl Shared {
    /// Builds a graph's shared state and its node and helper tasks, on the
    /// heap and leaked: the runtime owns it through the returned pointer
    /// (tasks point into it while a frame runs) and frees it when dropped.
    /// A graph of no nodes, leaked (the runtime frees it), to be filled by
    /// [`rebuild`](Self::rebuild).
    pub(super) fn leak_empty() -> NonNull<Shared> {
        let shared = Box::new(Shared {
            nodes: Vec::new(),
            states: Vec::new(),
            runs: Vec::new(),
            poisoned_in: Vec::new(),
            closures: Vec::new(),
            tasks: Vec::new(),
            helper_tasks: Box::new([]),
            helpers_pending: CachePadded::new(AtomicUsize::new(0)),
            schedule: Schedule::new(0),
            sleepers: CachePadded::new(Sleepers::new()),
            walker_slots: Default::default(),
            helper_slots: AtomicU64::new(0),
            walked_ticks: AtomicU64::new(0),
            successor_start: Vec::new(),
            successors: Vec::new(),
            dependencies: Vec::new(),
            dependency_start: Vec::new(),
            dependency_list: Vec::new(),
            inline_successors: false,
            timed: false,
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
                lane: Lane::FrameCritical,
                plan_wait_ticks: 0,
                caches: Caches::Warm,
            },
            gates: Gates::new(),
        });
        let shared = NonNull::from(Box::leak(shared));
        let graph = shared.as_ptr().cast_const();
        let helper_tasks = (1..planned::MAX_LISTS as u32)
            .map(|list| HelperTask {
                header: Header::new(run_helper),
                graph,
                list,
            })
            .collect();
        // SAFETY: just allocated; no task exists yet.
        unsafe { (*shared.as_ptr()).helper_tasks = helper_tasks };
        shared
    }

    /// Replaces the nodes and edges by those of a new build, in place and
    /// in the memory already held; the bodies replaced go to `retired`.
    /// Every node's state starts afresh (a new countdown epoch, no poison).
    /// Needs `&mut`: no frame runs, so no task points into the graph.
    pub(super) fn rebuild(
        &mut self,
        specs: impl Iterator<Item = (NodeSpec, Name)>,
        compiled: &Compiled,
        how: Rebuild,
        retired: &mut Vec<Body>,
    ) {
        let mut n = 0;
        for (spec, name) in specs {
            match self.nodes.get_mut(n) {
                Some(node) => {
                    // A graph built every frame mostly keeps its names:
                    // no need to look the label up again.
                    if *node.name != *name {
                        node.label = instrument::intern_node_name(&name);
                    }
                    node.name = name;
                    node.lane = spec.lane;
                    node.pinned = spec.pinned;
                    node.wakes = how.wakes;
                    retired.push(std::mem::replace(node.body.get_mut(), spec.body));
                    *node.panic.get_mut().unwrap_or_else(|e| e.into_inner()) = None;
                }
                None => self.nodes.push(Node {
                    label: instrument::intern_node_name(&name),
                    name,
                    lane: spec.lane,
                    pinned: spec.pinned,
                    wakes: how.wakes,
                    body: UnsafeCell::new(spec.body),
                    panic: Mutex::new(None),
                }),
            }
            n += 1;
        }
        retired.extend(self.nodes.drain(n..).map(|node| node.body.into_inner()));
        for state in &mut self.states {
            **state = NodeState::new();
        }
        self.states
            .resize_with(n, || CachePadded::new(NodeState::new()));
        self.runs.clear();
        self.runs.resize_with(n, RunRecord::new);
        for poisoned in &mut self.poisoned_in {
            *poisoned.get_mut() = 0;
        }
        self.poisoned_in.resize_with(n, || AtomicU64::new(0));
        self.closures.clear();
        self.closures.extend(
            self.nodes
                .iter_mut()
                .map(|node| closure_address(node.body.get_mut())),
        );
        // Each node's task points here and holds its index, so those of
        // the nodes kept stay as they are.
        self.tasks.truncate(n);
        let graph = how.graph;
        self.tasks
            .extend((self.tasks.len() as u32..n as u32).map(|index| NodeTask {
                header: Header::new(run_node),
                graph,
                index,
            }));
        self.schedule.resize(n);
        let (successors, dependencies) = (&compiled.successors, &compiled.dependencies);
        self.successor_start.clone_from(&successors.start);
        self.successors.clone_from(&successors.items);
        self.dependency_start.clone_from(&dependencies.start);
        self.dependency_list.clone_from(&dependencies.items);
        self.dependencies.clear();
        self.dependencies
            .extend((0..n).map(|i| dependencies.row(i).len() as u32));
        self.inline_successors = how.inline_successors;
        self.timed = how.timed;
        self.inputs.lane = how.lane;
    }
}

/// How [`Shared::rebuild`] sets up the new graph.
pub(super) struct Rebuild {
    /// The graph's address, which its tasks point to.
    pub(super) graph: *const Shared,
    pub(super) inline_successors: bool,
    pub(super) timed: bool,
    /// The lane of planned frames.
    pub(super) lane: Lane,
    /// Whether queueing a node wakes a sleeping thread (see `Node::wakes`).
    pub(super) wakes: bool,
}

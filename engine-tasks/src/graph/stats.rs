//! Per-frame statistics of a task graph, rewritten in place every frame.

use crate::clock::TickRate;
use std::time::Duration;

/// How a node's frame went.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum NodeOutcome {
    /// The body ran and returned.
    Ran = 0,
    /// The body panicked.
    Panicked = 1,
    /// Not run: a node it depends on panicked or was skipped.
    Skipped = 2,
}

impl NodeOutcome {
    pub(super) fn from_u8(value: u8) -> Self {
        match value {
            0 => NodeOutcome::Ran,
            1 => NodeOutcome::Panicked,
            _ => NodeOutcome::Skipped,
        }
    }
}

/// One node in one frame.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct NodeTiming {
    /// When the node started, from the start of the frame.
    pub start: Duration,
    /// How long its body ran (including work it waited for inside, such as
    /// a `parallel_for`, and tasks its thread ran during such a wait).
    pub duration: Duration,
    /// The pool slot of the thread that ran it (see
    /// [`FrameStats::thread_busy`]), or `None` for a thread outside the pool.
    pub thread: Option<usize>,
    /// Whether it ran.
    pub outcome: NodeOutcome,
}

/// What the runtime read about a node after a frame.
pub(super) struct RawNode {
    pub(super) start: u64,
    pub(super) end: u64,
    pub(super) thread: u32,
    pub(super) released_by: u32,
    pub(super) outcome: NodeOutcome,
    pub(super) sink: bool,
}

/// Statistics of the last frame of a graph; see
/// [`TaskGraph::last_frame`](super::TaskGraph::last_frame). Reading them
/// allocates nothing, and neither does recording them after the first frame.
#[derive(Clone, Debug)]
pub struct FrameStats {
    frame: u64,
    wall: Duration,
    nodes: Vec<NodeTiming>,
    critical_path: Vec<usize>,
    critical_path_work: Duration,
    busy: Vec<Duration>,
    steals: u64,
}

impl FrameStats {
    pub(super) fn with_nodes(n: usize) -> Self {
        FrameStats {
            frame: 0,
            wall: Duration::ZERO,
            nodes: vec![
                NodeTiming {
                    start: Duration::ZERO,
                    duration: Duration::ZERO,
                    thread: None,
                    outcome: NodeOutcome::Skipped,
                };
                n
            ],
            critical_path: Vec::with_capacity(n),
            critical_path_work: Duration::ZERO,
            busy: Vec::new(),
            steals: 0,
        }
    }

    /// The frame's number.
    pub fn frame(&self) -> u64 {
        self.frame
    }

    /// Wall time from queueing the roots to the last node's end.
    pub fn wall_time(&self) -> Duration {
        self.wall
    }

    /// Per node, in declaration order.
    pub fn nodes(&self) -> &[NodeTiming] {
        &self.nodes
    }

    /// The chain of nodes that decided when the frame ended, first to last:
    /// the node that finished last, the dependency that released it, and so
    /// on back to a root.
    pub fn critical_path(&self) -> &[usize] {
        &self.critical_path
    }

    /// The summed run time of the nodes on the critical path.
    pub fn critical_path_work(&self) -> Duration {
        self.critical_path_work
    }

    /// The summed run time of every node.
    pub fn total_work(&self) -> Duration {
        self.nodes.iter().map(|n| n.duration).sum()
    }

    /// Time each pool slot spent running nodes, indexed by slot: slots
    /// `0..threads` are the pool's workers, the last one is the pool's guest
    /// slot, which the frame's thread uses when it is not a worker.
    pub fn thread_busy(&self) -> &[Duration] {
        &self.busy
    }

    /// `thread_busy` as a fraction of the frame's wall time.
    pub fn utilisation(&self, slot: usize) -> f64 {
        let wall = self.wall.as_secs_f64();
        if wall == 0.0 {
            return 0.0;
        }
        self.busy.get(slot).map_or(0.0, |b| b.as_secs_f64() / wall)
    }

    /// Tasks stolen in the pool during the frame (by any thread, for any
    /// work: a hint if other work shares the pool).
    pub fn steals(&self) -> u64 {
        self.steals
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn record(
        &mut self,
        frame: u64,
        wall: Duration,
        frame_start: u64,
        steals: u64,
        slots: usize,
        rate: &TickRate,
        raw: impl Fn(usize) -> RawNode,
    ) {
        self.frame = frame;
        self.wall = wall;
        self.steals = steals;
        if self.busy.len() != slots {
            self.busy.resize(slots, Duration::ZERO);
        }
        self.busy.fill(Duration::ZERO);
        let mut last: Option<(usize, u64)> = None;
        for i in 0..self.nodes.len() {
            let node = raw(i);
            let duration = rate.to_duration(node.end.saturating_sub(node.start));
            let thread = (node.thread != u32::MAX).then_some(node.thread as usize);
            self.nodes[i] = NodeTiming {
                start: rate.to_duration(node.start.saturating_sub(frame_start)),
                duration,
                thread,
                outcome: node.outcome,
            };
            if let Some(busy) = thread.and_then(|t| self.busy.get_mut(t)) {
                *busy += duration;
            }
            if node.sink && last.is_none_or(|(_, end)| node.end > end) {
                last = Some((i, node.end));
            }
        }
        self.critical_path.clear();
        self.critical_path_work = Duration::ZERO;
        let mut at = last.map(|(i, _)| i);
        while let Some(i) = at {
            self.critical_path.push(i);
            self.critical_path_work += self.nodes[i].duration;
            let by = raw(i).released_by;
            at = (by != u32::MAX).then_some(by as usize);
        }
        self.critical_path.reverse();
    }
}

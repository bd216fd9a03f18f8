//! Per-frame statistics of a task graph: the frame's run records, swapped
//! in after every frame, and what is derived from them.

use super::compile::Rows;
use super::run_record::{NodeOutcome, RunRecord};
use std::fmt;
use std::sync::{Mutex, OnceLock, PoisonError};
use std::time::Duration;

/// Which threads a frame could use; see the module docs of
/// [`graph`](super) ("Frames run alone").
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum FrameSharing {
    /// The frame's thread ran every node: the frames before were too light
    /// to be worth a second thread (or it was the graph's first frame), and
    /// this one stayed so.
    Alone,
    /// Started alone, turned out heavy, and queued the rest of its nodes in
    /// the pool for any thread.
    HandedOver,
    /// Its nodes were queued in the pool from the start (other threads may
    /// or may not have taken any).
    Shared,
    /// Its threads walked lists of nodes planned between frames (other
    /// threads may or may not have taken part).
    Planned,
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
    /// [`FrameStats::thread_busy`]), or `None` for a thread that held no
    /// slot in the pool: a thread of another pool, or one outside any pool
    /// while another such thread held the pool's guest slot.
    pub thread: Option<usize>,
    /// Whether it ran.
    pub outcome: NodeOutcome,
}

/// Statistics of the last frame of a graph; see
/// [`TaskGraph::last_frame`](super::TaskGraph::last_frame). Recording them
/// after a frame allocates nothing and copies nothing (the frame's run
/// records are swapped in); times are converted when read. The critical
/// path of a [`Planned`](FrameSharing::Planned) frame of a graph that
/// measures its nodes (the default; see
/// [`node_clock`](super::TaskGraphBuilder::node_clock)) is walked
/// when first asked for; of any other frame, when the frame is recorded.
///
/// For a frame-time overlay:
///
/// ```
/// use engine_tasks::graph::NodeOutcome;
/// use engine_tasks::{Lane, Pool, TaskGraph};
///
/// let mut builder = TaskGraph::<()>::builder();
/// builder.node("input", Lane::FrameCritical, |_| {});
/// builder.node("ai", Lane::Normal, |_| {}).after(["input"]);
/// let mut graph = builder.build().unwrap();
///
/// let pool = Pool::builder().threads(1).build().unwrap();
/// graph.run(&pool, &()).unwrap();
/// let stats = graph.last_frame();
/// let ai = stats.node(graph.node_index("ai").unwrap());
/// assert_eq!(ai.outcome, NodeOutcome::Ran);
/// println!("ai: {:?} into the frame, for {:?}", ai.start, ai.duration);
/// assert!(stats.critical_path_work() <= stats.total_work());
/// ```
pub struct FrameStats {
    frame: u64,
    wall: Duration,
    frame_start: u64,
    nanos_per_tick: f64,
    runs: Vec<RunRecord>,
    /// Set when recorded or reset, or by the first `critical_path` call.
    critical_path: OnceLock<Vec<usize>>,
    /// The memory of an earlier frame's path, for a walk when asked.
    spare_path: Mutex<Vec<usize>>,
    /// What a walk reads besides the run records.
    topology: PathTopology,
    slots: usize,
    /// Ticks each slot spent parked during the frame; `None` for slots
    /// without a thread in the frame.
    parked: Vec<Option<u64>>,
    steals: u64,
    sharing: FrameSharing,
}

/// The graph's shape as far as walking a critical path back needs it:
/// each node's dependencies, and the nodes without successors. Copied in
/// at each rebuild, in the memory held.
#[derive(Clone, Debug, Default)]
struct PathTopology {
    dependencies: Rows<u32>,
    sinks: Vec<u32>,
}

/// How [`FrameStats::record`] finds the critical path.
pub(super) enum PathWalk<F> {
    /// Now, through the node that released each (`F(node)`, `None` for a
    /// root).
    Now(F),
    /// When first asked for, through each node's dependency that ended
    /// last (ties to the higher index): for timed frames, in which that is
    /// the node that released it.
    WhenAsked,
}

impl FrameStats {
    /// Statistics of no frame of a graph of no nodes.
    pub(super) fn new() -> Self {
        FrameStats {
            frame: 0,
            wall: Duration::ZERO,
            frame_start: 0,
            nanos_per_tick: 0.0,
            runs: Vec::new(),
            critical_path: OnceLock::from(Vec::new()),
            spare_path: Mutex::new(Vec::new()),
            topology: PathTopology::default(),
            slots: 0,
            parked: Vec::new(),
            steals: 0,
            sharing: FrameSharing::Shared,
        }
    }

    /// Statistics of no frame yet, for a graph of `n` nodes, in the memory
    /// held.
    #[cfg_attr(target_os = "linux", link_section = "engine_tasks_frame")]
    pub(super) fn reset(&mut self, n: usize) {
        self.frame = 0;
        self.wall = Duration::ZERO;
        self.frame_start = 0;
        self.nanos_per_tick = 0.0;
        self.runs.clear();
        self.runs.resize_with(n, RunRecord::new);
        let path = self.take_path();
        path.reserve(n);
        self.critical_path = OnceLock::from(std::mem::take(path));
        self.slots = 0;
        self.parked.clear();
        self.steals = 0;
        self.sharing = FrameSharing::Shared;
    }

    /// The frame's number.
    pub fn frame(&self) -> u64 {
        self.frame
    }

    /// Whether the frame ran on its thread alone, was handed over to the
    /// pool on the way, was shared from the start, or ran by a plan.
    ///
    /// ```
    /// use engine_tasks::{FrameSharing, Lane, Pool, TaskGraph};
    ///
    /// let mut builder = TaskGraph::<()>::builder();
    /// builder.node("hud", Lane::Normal, |_| {});
    /// let mut graph = builder.build().unwrap();
    ///
    /// let pool = Pool::builder().threads(1).build().unwrap();
    /// // A graph's first frame starts on its thread alone; this one stays
    /// // alone, being far too light to be worth a second thread.
    /// assert_eq!(graph.run(&pool, &()).unwrap().sharing(), FrameSharing::Alone);
    /// ```
    pub fn sharing(&self) -> FrameSharing {
        self.sharing
    }

    #[cfg_attr(target_os = "linux", link_section = "engine_tasks_frame")]
    pub(super) fn set_sharing(&mut self, sharing: FrameSharing) {
        self.sharing = sharing;
    }

    /// Wall time of the frame on its thread: from just before the first
    /// node was queued or run to just after that thread saw the last one
    /// end.
    pub fn wall_time(&self) -> Duration {
        self.wall
    }

    fn ticks(&self, ticks: u64) -> Duration {
        Duration::from_nanos((ticks as f64 * self.nanos_per_tick) as u64)
    }

    /// Node `index` (declaration order). Panics if out of range.
    pub fn node(&self, index: usize) -> NodeTiming {
        let raw = self.runs[index].read();
        NodeTiming {
            start: self.ticks(raw.start.saturating_sub(self.frame_start)),
            duration: self.ticks(raw.end.saturating_sub(raw.start)),
            thread: (raw.thread != u32::MAX).then_some(raw.thread as usize),
            outcome: raw.outcome,
        }
    }

    /// Every node, in declaration order.
    pub fn nodes(&self) -> impl ExactSizeIterator<Item = NodeTiming> + '_ {
        (0..self.runs.len()).map(|i| self.node(i))
    }

    /// The chain of nodes that decided when the frame ended, as node
    /// indices from a root to the node that finished last: each entry is
    /// the dependency whose end released the next one.
    ///
    /// The first call after a planned frame may walk the path (a few steps
    /// per node on it; see the type's docs), and callers on other threads
    /// wait for that walk; later calls only read it.
    ///
    /// ```
    /// use engine_tasks::{Lane, Pool, TaskGraph};
    ///
    /// let mut builder = TaskGraph::<()>::builder();
    /// builder.node("input", Lane::FrameCritical, |_| {});
    /// builder.node("physics", Lane::FrameCritical, |_| {}).after(["input"]);
    /// builder.node("render", Lane::FrameCritical, |_| {}).after(["physics"]);
    /// let mut graph = builder.build().unwrap();
    ///
    /// let pool = Pool::builder().threads(1).build().unwrap();
    /// graph.run(&pool, &()).unwrap();
    /// let path: Vec<&str> = graph
    ///     .last_frame()
    ///     .critical_path()
    ///     .iter()
    ///     .map(|&node| graph.node_name(node))
    ///     .collect();
    /// assert_eq!(path, ["input", "physics", "render"]);
    /// ```
    pub fn critical_path(&self) -> &[usize] {
        self.critical_path.get_or_init(|| {
            let mut path = std::mem::take(
                &mut *self
                    .spare_path
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner),
            );
            let (topology, runs) = (&self.topology, &self.runs);
            walk_back(runs, &topology.sinks, &mut path, |i| {
                topology
                    .dependencies
                    .row(i)
                    .iter()
                    .copied()
                    .max_by_key(|&d| (runs[d as usize].read().end, d))
                    .map(|d| d as usize)
            });
            path
        })
    }

    /// The summed run time of the nodes on the critical path.
    pub fn critical_path_work(&self) -> Duration {
        self.critical_path()
            .iter()
            .map(|&i| self.node(i).duration)
            .sum()
    }

    /// The summed run time of every node.
    pub fn total_work(&self) -> Duration {
        self.nodes().map(|n| n.duration).sum()
    }

    /// Number of pool slots: the pool's workers, then its guest slot, which
    /// the frame's thread uses when it is not a worker.
    pub fn slots(&self) -> usize {
        self.slots
    }

    /// Time pool slot `slot` spent running nodes in the frame (node bodies,
    /// so a node that waits for its `parallel_for` counts the whole wait
    /// while the pieces other threads ran count for none of them; see
    /// [`awake`](Self::awake) for how busy a thread was).
    ///
    /// ```
    /// use engine_tasks::{Lane, Pool, TaskGraph};
    /// use std::hint::black_box;
    ///
    /// let mut builder = TaskGraph::<()>::builder();
    /// builder.node("skinning", Lane::Normal, |_| {
    ///     black_box((0..20_000u64).map(|i| i * i).sum::<u64>());
    /// });
    /// let mut graph = builder.build().unwrap();
    ///
    /// let pool = Pool::builder().threads(1).build().unwrap();
    /// let stats = graph.run(&pool, &()).unwrap();
    /// for slot in 0..stats.slots() {
    ///     let share = stats.thread_busy(slot).as_secs_f64() / stats.wall_time().as_secs_f64();
    ///     println!("slot {slot}: {:.0}% in nodes", share * 100.0);
    /// }
    /// let busy: std::time::Duration = (0..stats.slots()).map(|s| stats.thread_busy(s)).sum();
    /// assert!(busy > std::time::Duration::ZERO);
    /// ```
    pub fn thread_busy(&self, slot: usize) -> Duration {
        let ticks: u64 = self
            .runs
            .iter()
            .map(RunRecord::read)
            .filter(|r| r.thread as usize == slot)
            .map(|r| r.end.saturating_sub(r.start))
            .sum();
        self.ticks(ticks)
    }

    /// Time pool slot `slot` was not parked during the frame: running
    /// nodes, tasks they spawned, other work, or searching for work. `None`
    /// if no thread used the slot (a worker not started, or the guest slot
    /// when a worker ran the frame).
    pub fn awake(&self, slot: usize) -> Option<Duration> {
        let parked = (*self.parked.get(slot)?)?;
        Some(self.wall.saturating_sub(self.ticks(parked)))
    }

    /// [`awake`](Self::awake) as a fraction of the frame's wall time (0 for
    /// unused slots).
    pub fn utilisation(&self, slot: usize) -> f64 {
        let wall = self.wall.as_secs_f64();
        match self.awake(slot) {
            Some(awake) if wall > 0.0 => awake.as_secs_f64() / wall,
            _ => 0.0,
        }
    }

    /// Tasks stolen in the pool during the frame (by any thread, for any
    /// work: a hint if other work shares the pool).
    pub fn steals(&self) -> u64 {
        self.steals
    }

    /// Takes the frame's run records (swapping in the previous ones, for
    /// the next frame to rewrite); the critical path back from the sink
    /// that finished last is walked as `walk` says.
    #[allow(clippy::too_many_arguments)]
    #[cfg_attr(target_os = "linux", link_section = "engine_tasks_frame")]
    pub(super) fn record(
        &mut self,
        frame: u64,
        wall: Duration,
        frame_start: u64,
        nanos_per_tick: f64,
        steals: u64,
        slots: usize,
        runs: &mut Vec<RunRecord>,
        walk: PathWalk<impl Fn(usize) -> Option<usize>>,
    ) {
        self.frame = frame;
        self.wall = wall;
        self.frame_start = frame_start;
        self.nanos_per_tick = nanos_per_tick;
        self.steals = steals;
        self.slots = slots;
        std::mem::swap(&mut self.runs, runs);
        match walk {
            // Walked again in the last path's memory if it was walked: a
            // new `OnceLock` costs a call into the standard library's
            // `Once`, whose code a paced frame finds cold.
            PathWalk::Now(released_by) => match self.critical_path.get_mut() {
                Some(path) => walk_back(&self.runs, &self.topology.sinks, path, released_by),
                None => {
                    let mut path = std::mem::take(self.take_path());
                    walk_back(&self.runs, &self.topology.sinks, &mut path, released_by);
                    self.critical_path = OnceLock::from(path);
                }
            },
            // The buffer stays the spare until the path is asked for.
            PathWalk::WhenAsked => {
                self.take_path();
            }
        }
    }

    /// The memory of the last path walked (or of the spare), cleared.
    #[cfg_attr(target_os = "linux", link_section = "engine_tasks_frame")]
    fn take_path(&mut self) -> &mut Vec<usize> {
        let spare = self
            .spare_path
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(path) = self.critical_path.take() {
            if path.capacity() > spare.capacity() {
                *spare = path;
            }
        }
        spare.clear();
        spare
    }

    /// Copies the graph's shape for the walks, in the memory held: each
    /// node's `dependencies`, and as sinks the nodes whose row of
    /// `successors` is empty.
    pub(super) fn set_topology(&mut self, dependencies: &Rows<u32>, successors: &Rows<u32>) {
        let topology = &mut self.topology;
        topology.dependencies.copy_from(dependencies);
        let nodes = successors.start.len().saturating_sub(1) as u32;
        topology.sinks.clear();
        topology
            .sinks
            .extend((0..nodes).filter(|&i| successors.row(i as usize).is_empty()));
    }

    /// How many nodes of the graph have no successors.
    #[cfg_attr(target_os = "linux", link_section = "engine_tasks_frame")]
    pub(super) fn sink_count(&self) -> usize {
        self.topology.sinks.len()
    }

    /// The pool slots (below 64) that ran or skipped a node in the frame,
    /// a bit each.
    #[cfg_attr(target_os = "linux", link_section = "engine_tasks_frame")]
    pub(super) fn slots_that_ran(&self) -> u64 {
        self.runs
            .iter()
            .map(|r| 1u64.checked_shl(r.read().thread).unwrap_or(0))
            .fold(0, |mask, bit| mask | bit)
    }

    /// Stores each slot's parked ticks (`parked(slot)`) for the frame.
    #[cfg_attr(target_os = "linux", link_section = "engine_tasks_frame")]
    pub(super) fn record_parked(&mut self, parked: impl Fn(usize) -> Option<u64>) {
        if self.parked.len() != self.slots {
            self.parked.resize(self.slots, None);
        }
        for (slot, p) in self.parked.iter_mut().enumerate() {
            *p = parked(slot);
        }
    }

    /// What each node's run says of its time, in node order.
    pub(super) fn node_times(&self) -> impl ExactSizeIterator<Item = NodeTime> + '_ {
        self.runs.iter().map(|run| {
            let raw = run.read();
            match raw.outcome {
                NodeOutcome::Ran => NodeTime::Ran(raw.end.saturating_sub(raw.start)),
                NodeOutcome::Off => NodeTime::Off,
                NodeOutcome::Panicked | NodeOutcome::Skipped => NodeTime::Failed,
            }
        })
    }
}

/// What a node's last run says of its time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum NodeTime {
    /// Its body ran and returned, in this many ticks.
    Ran(u64),
    /// Disabled, or a run condition did not hold: it cost nothing.
    Off,
    /// It panicked (its time holds the unwinding), or was skipped after a
    /// panic: no measure.
    Failed,
}

/// Writes into `path` the chain from a root to the sink (of `sinks`) that
/// ended last (ties to the first), each node's predecessor in it being
/// `predecessor(node)` (`None` for a root).
fn walk_back(
    runs: &[RunRecord],
    sinks: &[u32],
    path: &mut Vec<usize>,
    predecessor: impl Fn(usize) -> Option<usize>,
) {
    path.clear();
    let mut last: Option<(usize, u64)> = None;
    for &i in sinks {
        let end = runs[i as usize].read().end;
        if last.is_none_or(|(_, last_end)| end > last_end) {
            last = Some((i as usize, end));
        }
    }
    let mut at = last.map(|(i, _)| i);
    while let Some(i) = at {
        path.push(i);
        at = predecessor(i);
    }
    path.reverse();
}

impl Clone for FrameStats {
    fn clone(&self) -> Self {
        FrameStats {
            frame: self.frame,
            wall: self.wall,
            frame_start: self.frame_start,
            nanos_per_tick: self.nanos_per_tick,
            runs: self.runs.clone(),
            critical_path: self.critical_path.clone(),
            spare_path: Mutex::new(Vec::new()),
            topology: self.topology.clone(),
            slots: self.slots,
            parked: self.parked.clone(),
            steals: self.steals,
            sharing: self.sharing,
        }
    }
}

impl fmt::Debug for FrameStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FrameStats")
            .field("frame", &self.frame)
            .field("wall", &self.wall)
            .field("sharing", &self.sharing)
            .field("runs", &self.runs)
            .field("critical_path", &self.critical_path())
            .field("slots", &self.slots)
            .field("parked", &self.parked)
            .field("steals", &self.steals)
            .finish_non_exhaustive()
    }
}

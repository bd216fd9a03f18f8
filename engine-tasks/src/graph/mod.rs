//! Task graphs: a DAG of named systems built once and run every frame.
//!
//! ```
//! use engine_tasks::{Lane, Pool, TaskGraph};
//! use std::sync::atomic::{AtomicU64, Ordering};
//!
//! struct World { ticks: AtomicU64, score: AtomicU64 }
//!
//! let mut builder = TaskGraph::<World>::builder();
//! builder.node("input", Lane::FrameCritical, |cx| {
//!     cx.data().ticks.fetch_add(1, Ordering::Relaxed);
//! });
//! builder.node("score", Lane::FrameCritical, |cx| {
//!     let ticks = cx.data().ticks.load(Ordering::Relaxed);
//!     cx.data().score.store(ticks * 10, Ordering::Relaxed);
//! }).after(["input"]);
//! let mut graph = builder.build().unwrap();
//!
//! let pool = Pool::builder().threads(1).build().unwrap();
//! let world = World { ticks: AtomicU64::new(0), score: AtomicU64::new(0) };
//! for _ in 0..3 {
//!     graph.run(&pool, &world).unwrap();
//! }
//! assert_eq!(world.score.load(Ordering::Relaxed), 30);
//! ```
//!
//! # A frame
//!
//! [`TaskGraph::run`] runs a frame on the calling thread and returns when
//! its last node finished; it runs nodes and tasks while it waits
//! (block-on-complete). A frame shared through the pool's queues queues the
//! roots on the calling thread as one batch. A node that finishes counts down its
//! successors (counts are never reset: each counts releases across the
//! frames that count);
//! it runs the most urgent successor it released itself, next (no queue,
//! warm cache), and queues the rest on its own thread for others to steal.
//! Nodes [pinned to the frame's thread](TaskGraphBuilder::main_thread_node)
//! go to an inbox that only that thread drains. Nothing is allocated: the
//! nodes are intrusive tasks made when the graph is built.
//!
//! # Frames run alone
//!
//! Handing a node to another thread costs a queue operation and often a
//! wake-up and a cache miss, so a frame of light nodes ends sooner on one
//! thread. When the frames before were not worth a second thread (by
//! default under 20 µs of work, or nodes under 200 ns on average; see
//! [`TaskGraphBuilder::share_above`]), and for a graph's first frame, the
//! frame's thread runs the frame alone: it walks a plan, worked out between
//! frames, that puts every node after its dependencies, so nothing is
//! queued or counted. If such a frame turns out heavy by the same rule,
//! checked after every node (every 32 nodes of an untimed graph after its
//! first frame), the thread queues the rest in the pool and waits like any
//! shared frame.
//! [`FrameStats::sharing`] says which way a frame ran.
//!
//! # Planned frames
//!
//! A shared frame of a graph whose nodes all share one lane, none pinned,
//! in critical-path-first order, runs by a plan instead of queues (unless
//! [`TaskGraphBuilder::plan_frames`] turned that off). Between frames,
//! whenever priorities change (every 64 frames), the nodes are split into one list per
//! thread (the frame's thread and each worker, at most eight) by list
//! scheduling on the measured node times: most urgent first, each on the
//! list where it would start soonest. The frame's thread walks its list
//! and queues one helper task per other list; a worker that takes one
//! walks that list. Before a node runs, its walker checks that its
//! dependencies finished in this frame and claims it; a walker whose next
//! node is not ready may claim the first ready node of another list, so a
//! late or busy worker costs parallelism, never a node. Nothing is counted
//! or queued per node. A helper that a thread runs inside a wait (a node's
//! `join`, say) only runs ready nodes, since waiting there could wait for
//! the node below it on its own stack. A walker that finds nothing ready
//! looks for 20 µs, running pool tasks of the graph's lane (such as a
//! node's `parallel_for` pieces; the frame's thread once every helper task
//! has started), then sleeps until another walker finishes a node or such
//! a task is pushed.
//!
//! # What the frame's thread runs while it waits
//!
//! Its pinned nodes first (a planned frame has none), then any task of the
//! pool in lanes at least as urgent as the least urgent lane of the graph's
//! nodes (with every node frame-critical, only frame-critical tasks): graph
//! nodes, the pieces of a node's `parallel_for`, or frame-critical tasks
//! from elsewhere. It never starts background work unless the graph has
//! background nodes. A node that
//! waits (`parallel_for`, `scope`, a join) may likewise run other ready nodes
//! on its stack, so a node must not hold a lock that other nodes take
//! across such a wait.
//!
//! One exception: a thread outside the pool runs tasks while it waits
//! through the pool's one guest slot. If another outside thread holds that
//! slot at the frame's start (two outside threads run frames or join pool
//! work at once), a frame run alone still runs on the frame's thread; a
//! shared one (or one handed over) puts its nodes in the pool's shared
//! queue for the workers, and the frame's thread runs only its pinned
//! nodes, sleeping otherwise until the frame ends. (It could only take the
//! oldest shared tasks, each of which may wait in turn without bound.)
//! With no worker thread at all it runs the shared queue too, so the frame
//! still ends.
//!
//! # Critical path first
//!
//! With [`ReadyOrder::CriticalPathFirst`] (the default), every node gets a
//! priority: its expected time plus the longest chain of expected times
//! after it. Expected times are smoothed measurements of earlier frames.
//! Roots are queued, and each node's successors are released, in priority
//! order, so the most urgent ready node runs first on the thread that
//! released it and the next ones are the first to be stolen.

mod build;
mod run_record;
mod runtime;
mod stats;

pub use build::MAX_NODES;
pub use run_record::NodeOutcome;
pub use stats::{FrameSharing, FrameStats, NodeTiming};

use crate::lane::Lane;
use crate::pool::PoolHandle;
use runtime::{Runtime, ShareThreshold};
use std::any::Any;
use std::fmt;
use std::time::Duration;

/// A node's body: called once per frame with the frame's context.
type Body<C> = Box<dyn FnMut(&NodeContext<'_, C>) + Send>;

/// The order in which ready nodes are queued.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub enum ReadyOrder {
    /// Longest remaining path (by measured node time) first; see the module
    /// docs.
    #[default]
    CriticalPathFirst,
    /// First in, first out: roots and successors in declaration order, and
    /// every ready node goes through the queue, or in a frame run alone
    /// the plan is the order a first-in-first-out list gives (for
    /// comparison).
    Fifo,
}

/// What a node sees while it runs.
///
/// ```
/// use engine_tasks::{Lane, Pool, TaskGraph};
/// use std::sync::atomic::{AtomicU32, Ordering::Relaxed};
///
/// let mut builder = TaskGraph::<Vec<u32>>::builder();
/// builder.node("damage", Lane::Normal, |cx| {
///     assert_eq!(cx.name(), "damage");
///     let hits = cx.data(); // borrowed from the caller of `run`
///     // Split the node's own work across the frame's pool.
///     let total = AtomicU32::new(0);
///     cx.pool().parallel_for(0..hits.len(), 16, |i| {
///         total.fetch_add(hits[i], Relaxed);
///     });
///     assert_eq!(total.into_inner(), 100 * (cx.frame() as u32 + 1));
/// });
/// let mut graph = builder.build().unwrap();
///
/// let pool = Pool::builder().threads(1).build().unwrap();
/// for frame in 0..3 {
///     let hits = vec![frame + 1; 100]; // this frame's hits
///     graph.run(&pool, &hits).unwrap();
/// }
/// ```
pub struct NodeContext<'f, C: ?Sized> {
    data: &'f C,
    pool: &'f PoolHandle,
    frame: u64,
    name: &'f str,
}

impl<'f, C: ?Sized> NodeContext<'f, C> {
    /// The frame's data, borrowed from the caller of [`TaskGraph::run`].
    pub fn data(&self) -> &'f C {
        self.data
    }

    /// The pool the frame runs on: for `parallel_for`, `scope`, `join` inside
    /// the node, or background work that outlives the frame.
    pub fn pool(&self) -> &'f PoolHandle {
        self.pool
    }

    /// The frame's number, counting from 0 for the graph's first frame.
    pub fn frame(&self) -> u64 {
        self.frame
    }

    /// The node's name.
    pub fn name(&self) -> &'f str {
        self.name
    }
}

/// A graph that cannot be built.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum GraphError {
    /// Two nodes have this name.
    DuplicateNode(String),
    /// `node` runs after `dependency`, which no node is called.
    UnknownDependency {
        /// The node with the bad `after`.
        node: String,
        /// The missing name.
        dependency: String,
    },
    /// These nodes depend on each other in a circle, each after the one
    /// before it and the first after the last.
    Cycle(Vec<String>),
    /// More than [`MAX_NODES`] nodes.
    TooManyNodes(usize),
}

impl fmt::Display for GraphError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GraphError::DuplicateNode(name) => write!(f, "two nodes are named {name:?}"),
            GraphError::UnknownDependency { node, dependency } => {
                write!(
                    f,
                    "node {node:?} runs after {dependency:?}, which does not exist"
                )
            }
            GraphError::Cycle(names) => {
                write!(f, "dependency cycle: ")?;
                // Around the cycle and back to its first node (the builder
                // names at least one; a hand-made empty one still displays).
                let mut around = names.iter().chain(names.first());
                if let Some(first) = around.next() {
                    write!(f, "{first:?}")?;
                }
                around.try_for_each(|name| write!(f, " -> {name:?}"))
            }
            GraphError::TooManyNodes(n) => write!(f, "{n} nodes; at most {MAX_NODES} allowed"),
        }
    }
}

impl std::error::Error for GraphError {}

/// A node that panicked in a frame.
#[non_exhaustive]
pub struct NodePanic {
    /// The node's name.
    pub node: String,
    /// The panic message (`"<non-string panic payload>"` if it had none).
    pub message: String,
    /// The value the node panicked with, as `catch_unwind` returns it.
    pub payload: Box<dyn Any + Send>,
}

impl NodePanic {
    /// Re-raises the node's panic on the calling thread, with its own
    /// payload (`std::panic::resume_unwind`).
    pub fn resume_unwind(self) -> ! {
        std::panic::resume_unwind(self.payload)
    }
}

impl fmt::Display for NodePanic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "node {:?} panicked: {}", self.node, self.message)
    }
}

impl std::error::Error for NodePanic {}

impl fmt::Debug for NodePanic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NodePanic")
            .field("node", &self.node)
            .field("message", &self.message)
            .finish_non_exhaustive()
    }
}

/// A frame in which nodes panicked. Every other node that did not depend on
/// them ran; the next frame runs normally.
///
/// A game may log the frame's failures and carry on:
///
/// ```
/// use engine_tasks::{Lane, Pool, TaskGraph};
///
/// let pool = Pool::builder().threads(1).build().unwrap();
/// let mut builder = TaskGraph::<u64>::builder();
/// builder.node("physics", Lane::FrameCritical, |cx| {
///     if *cx.data() == 13 {
///         panic!("NaN in rigid body 7");
///     }
/// });
/// builder.node("render", Lane::FrameCritical, |_| {}).after(["physics"]);
/// builder.node("audio", Lane::Normal, |_| {});
/// let mut graph = builder.build().unwrap();
///
/// let error = graph.run(&pool, &13).unwrap_err();
/// assert_eq!(error.panicked[0].node, "physics");
/// assert_eq!(error.panicked[0].message, "NaN in rigid body 7");
/// assert_eq!(error.skipped, ["render"]); // "audio" ran
/// assert!(graph.run(&pool, &14).is_ok()); // the next frame runs normally
/// ```
///
/// To treat a node's panic as the caller's own, re-raise it:
///
/// ```should_panic
/// use engine_tasks::{Lane, Pool, TaskGraph};
///
/// let pool = Pool::builder().threads(1).build().unwrap();
/// let mut builder = TaskGraph::<()>::builder();
/// builder.node("physics", Lane::FrameCritical, |_| panic!("exploded"));
/// let mut graph = builder.build().unwrap();
/// if let Err(error) = graph.run(&pool, &()) {
///     error.resume_unwind(); // panics with "exploded"
/// }
/// ```
#[derive(Debug)]
#[non_exhaustive]
pub struct FrameError {
    /// The frame's number.
    pub frame: u64,
    /// The nodes that panicked, in declaration order.
    pub panicked: Vec<NodePanic>,
    /// The nodes skipped because something they depend on panicked, in
    /// declaration order.
    pub skipped: Vec<String>,
}

impl FrameError {
    /// Re-raises the first panicked node's panic (in declaration order) on
    /// the calling thread, with its own payload.
    pub fn resume_unwind(mut self) -> ! {
        if self.panicked.is_empty() {
            std::panic::resume_unwind(Box::new(self.to_string()));
        }
        self.panicked.swap_remove(0).resume_unwind()
    }
}

impl fmt::Display for FrameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "frame {}: ", self.frame)?;
        for (i, p) in self.panicked.iter().enumerate() {
            let sep = if i == 0 { "" } else { "; " };
            write!(f, "{sep}{p}")?;
        }
        if !self.skipped.is_empty() {
            write!(f, "; skipped: {}", self.skipped.join(", "))?;
        }
        Ok(())
    }
}

impl std::error::Error for FrameError {}

struct NodeSpec<C: ?Sized> {
    name: String,
    lane: Lane,
    pinned: bool,
    after: Vec<String>,
    body: Body<C>,
}

/// Collects nodes for a [`TaskGraph`]; see [`TaskGraph::builder`].
pub struct TaskGraphBuilder<C: ?Sized> {
    nodes: Vec<NodeSpec<C>>,
    order: ReadyOrder,
    timed: bool,
    share_above: ShareThreshold,
    plan_frames: bool,
}

impl<C: ?Sized + Sync> Default for TaskGraphBuilder<C> {
    fn default() -> Self {
        TaskGraphBuilder {
            nodes: Vec::new(),
            order: ReadyOrder::default(),
            timed: true,
            share_above: ShareThreshold::default(),
            plan_frames: true,
        }
    }
}

/// Adds dependencies to the node just added.
pub struct NodeBuilder<'b, C: ?Sized> {
    spec: &'b mut NodeSpec<C>,
}

impl<C: ?Sized> NodeBuilder<'_, C> {
    /// The node runs after each named node has finished (and after
    /// everything those started with `parallel_for` or `scope`).
    ///
    /// ```
    /// use engine_tasks::{Lane, Pool, TaskGraph};
    /// use std::sync::atomic::{AtomicU32, Ordering::Relaxed};
    ///
    /// let mut builder = TaskGraph::<AtomicU32>::builder();
    /// builder.node("shadow_maps", Lane::FrameCritical, |cx| { cx.data().fetch_add(1, Relaxed); });
    /// builder.node("gbuffer", Lane::FrameCritical, |cx| { cx.data().fetch_add(1, Relaxed); });
    /// builder
    ///     .node("lighting", Lane::FrameCritical, |cx| {
    ///         assert_eq!(cx.data().load(Relaxed), 2, "both passes are done");
    ///     })
    ///     .after(["shadow_maps", "gbuffer"]);
    /// let mut graph = builder.build().unwrap();
    ///
    /// let pool = Pool::builder().threads(2).build().unwrap();
    /// let passes_done = AtomicU32::new(0);
    /// assert!(graph.run(&pool, &passes_done).is_ok());
    /// ```
    pub fn after<I, S>(self, dependencies: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.spec
            .after
            .extend(dependencies.into_iter().map(Into::into));
        self
    }
}

impl<C: ?Sized + Sync> TaskGraphBuilder<C> {
    /// An empty builder.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a node that runs `body` in `lane` once per frame, on any thread.
    ///
    /// A node's closure is `FnMut` and lives as long as the graph, so it may
    /// keep state from frame to frame:
    ///
    /// ```
    /// use engine_tasks::{Lane, Pool, TaskGraph};
    /// use std::sync::Mutex;
    ///
    /// let mut builder = TaskGraph::<Mutex<Vec<u32>>>::builder();
    /// let mut checkpoints = 0;
    /// builder.node("autosave", Lane::Background, move |cx| {
    ///     checkpoints += 1;
    ///     cx.data().lock().unwrap().push(checkpoints);
    /// });
    /// let mut graph = builder.build().unwrap();
    ///
    /// let pool = Pool::builder().threads(1).build().unwrap();
    /// let log = Mutex::new(Vec::new());
    /// for _ in 0..3 {
    ///     graph.run(&pool, &log).unwrap();
    /// }
    /// assert_eq!(*log.lock().unwrap(), [1, 2, 3]);
    /// ```
    pub fn node<F>(&mut self, name: impl Into<String>, lane: Lane, body: F) -> NodeBuilder<'_, C>
    where
        F: FnMut(&NodeContext<'_, C>) + Send + 'static,
    {
        self.push(name.into(), lane, false, Box::new(body))
    }

    /// Adds a node that runs only on the thread that calls
    /// [`TaskGraph::run`] (window events, GPU submission). It counts as
    /// frame-critical: the frame's thread runs it as soon as it is ready.
    ///
    /// ```
    /// use engine_tasks::{Lane, Pool, TaskGraph};
    /// use std::thread::{self, ThreadId};
    ///
    /// // The frame data: the thread that owns the window and the GPU queue.
    /// let mut builder = TaskGraph::<ThreadId>::builder();
    /// builder.node("record_commands", Lane::FrameCritical, |_| {});
    /// builder
    ///     .main_thread_node("submit", |cx| {
    ///         assert_eq!(thread::current().id(), *cx.data());
    ///     })
    ///     .after(["record_commands"]);
    /// let mut graph = builder.build().unwrap();
    ///
    /// let pool = Pool::builder().threads(2).build().unwrap();
    /// for _ in 0..3 {
    ///     graph.run(&pool, &thread::current().id()).unwrap();
    /// }
    /// ```
    pub fn main_thread_node<F>(&mut self, name: impl Into<String>, body: F) -> NodeBuilder<'_, C>
    where
        F: FnMut(&NodeContext<'_, C>) + Send + 'static,
    {
        self.push(name.into(), Lane::FrameCritical, true, Box::new(body))
    }

    /// How ready nodes are ordered (default: critical path first).
    ///
    /// ```
    /// use engine_tasks::{Lane, Pool, ReadyOrder, TaskGraph};
    /// use std::sync::Mutex;
    ///
    /// let mut builder = TaskGraph::<Mutex<Vec<&str>>>::builder();
    /// for system in ["input", "ai", "physics", "audio"] {
    ///     builder.node(system, Lane::Normal, move |cx| cx.data().lock().unwrap().push(system));
    /// }
    /// builder.ready_order(ReadyOrder::Fifo);
    /// let mut graph = builder.build().unwrap();
    ///
    /// // No workers: one thread runs the independent nodes in declaration order.
    /// let pool = Pool::builder().threads(0).build().unwrap();
    /// let order = Mutex::new(Vec::new());
    /// graph.run(&pool, &order).unwrap();
    /// assert_eq!(*order.lock().unwrap(), ["input", "ai", "physics", "audio"]);
    /// ```
    pub fn ready_order(&mut self, order: ReadyOrder) -> &mut Self {
        self.order = order;
        self
    }

    /// Whether to time every node (default: yes). Timing costs one clock
    /// read per node, two for a node taken from a queue; without it,
    /// [`FrameStats`] has no node durations or thread busy times, and
    /// critical-path-first ranks nodes by the number of nodes after them.
    ///
    /// ```
    /// use engine_tasks::{Lane, Pool, TaskGraph};
    /// use std::time::Duration;
    ///
    /// let mut builder = TaskGraph::<()>::builder();
    /// builder.node("particles", Lane::Normal, |_| {});
    /// builder.measure_nodes(false); // a shipping build without the profiler
    /// let mut graph = builder.build().unwrap();
    ///
    /// let pool = Pool::builder().threads(1).build().unwrap();
    /// let stats = graph.run(&pool, &()).unwrap();
    /// assert_eq!(stats.total_work(), Duration::ZERO);
    /// assert_eq!(stats.nodes().len(), 1);
    /// ```
    pub fn measure_nodes(&mut self, timed: bool) -> &mut Self {
        self.timed = timed;
        self
    }

    /// When frames share their nodes with other threads (see "Frames run
    /// alone" above): a frame is shared when the frames before it took at
    /// least `frame_work` of node time (of wall time, untimed) and their
    /// nodes averaged at least `node_work`; otherwise (and in the first
    /// frame) the frame's thread runs it alone, and hands the rest over
    /// once the frame passes both. Default: 20 µs and 200 ns. Zero for both
    /// shares every frame (the first from its second node on);
    /// [`Duration::MAX`] for either runs every frame alone.
    ///
    /// ```
    /// use engine_tasks::{FrameSharing, Lane, Pool, TaskGraph};
    /// use std::time::Duration;
    ///
    /// let mut builder = TaskGraph::<()>::builder();
    /// builder.node("input", Lane::FrameCritical, |_| {});
    /// builder.node("camera", Lane::FrameCritical, |_| {}).after(["input"]);
    /// // Keep this small graph on the frame's thread, however heavy.
    /// builder.share_above(Duration::MAX, Duration::MAX);
    /// let mut graph = builder.build().unwrap();
    ///
    /// let pool = Pool::builder().threads(2).build().unwrap();
    /// for _ in 0..5 {
    ///     let stats = graph.run(&pool, &()).unwrap();
    ///     assert_eq!(stats.sharing(), FrameSharing::Alone);
    /// }
    /// ```
    pub fn share_above(&mut self, frame_work: Duration, node_work: Duration) -> &mut Self {
        self.share_above = ShareThreshold::new(frame_work, node_work);
        self
    }

    /// Whether shared frames may run by a plan (default: yes; see "Planned
    /// frames" above). Only graphs with critical-path-first order, no
    /// pinned nodes and one lane for every node run planned frames; others
    /// always queue their nodes.
    ///
    /// ```
    /// use engine_tasks::{FrameSharing, Lane, Pool, TaskGraph};
    /// use std::time::Duration;
    ///
    /// let mut builder = TaskGraph::<()>::builder();
    /// for i in 0..8 {
    ///     builder.node(format!("chunk_{i}"), Lane::Normal, |_| {});
    /// }
    /// builder.share_above(Duration::ZERO, Duration::ZERO).plan_frames(false);
    /// let mut graph = builder.build().unwrap();
    ///
    /// let pool = Pool::builder().threads(1).build().unwrap();
    /// for _ in 0..100 {
    ///     let stats = graph.run(&pool, &()).unwrap();
    ///     assert_ne!(stats.sharing(), FrameSharing::Planned);
    /// }
    /// ```
    pub fn plan_frames(&mut self, enabled: bool) -> &mut Self {
        self.plan_frames = enabled;
        self
    }

    fn push(
        &mut self,
        name: String,
        lane: Lane,
        pinned: bool,
        body: Body<C>,
    ) -> NodeBuilder<'_, C> {
        self.nodes.push(NodeSpec {
            name,
            lane,
            pinned,
            after: Vec::new(),
            body,
        });
        let spec = self.nodes.last_mut().expect("just pushed");
        NodeBuilder { spec }
    }

    /// Validates the nodes and compiles the graph.
    ///
    /// ```
    /// use engine_tasks::{GraphError, Lane, TaskGraph};
    ///
    /// let mut builder = TaskGraph::<()>::builder();
    /// builder.node("animation", Lane::Normal, |_| {}).after(["physics"]);
    /// builder.node("physics", Lane::Normal, |_| {}).after(["animation"]);
    /// let error = builder.build().unwrap_err();
    /// assert!(matches!(error, GraphError::Cycle(_)));
    /// assert_eq!(
    ///     error.to_string(),
    ///     r#"dependency cycle: "physics" -> "animation" -> "physics""#
    /// );
    /// ```
    pub fn build(self) -> Result<TaskGraph<C>, GraphError> {
        let names: Vec<&str> = self.nodes.iter().map(|n| n.name.as_str()).collect();
        let after: Vec<&[String]> = self.nodes.iter().map(|n| n.after.as_slice()).collect();
        let topology = build::topology(&names, &after)?;
        Ok(TaskGraph {
            runtime: Runtime::new(
                self.nodes,
                topology,
                self.order,
                self.timed,
                self.share_above,
                self.plan_frames,
            ),
        })
    }
}

/// A compiled DAG of nodes, run once per [`TaskGraph::run`]. See the module
/// docs.
pub struct TaskGraph<C: ?Sized> {
    runtime: Runtime<C>,
}

impl<C: ?Sized + Sync> TaskGraph<C> {
    /// A builder for a graph whose nodes see a `&C` each frame.
    pub fn builder() -> TaskGraphBuilder<C> {
        TaskGraphBuilder::new()
    }

    /// Runs one frame on `pool` with `data`, which the nodes borrow for the
    /// frame, and returns when every node has finished (or been skipped).
    /// The calling thread takes part (see the module docs).
    ///
    /// Allocates nothing once the first frame has run, unless a node
    /// panics: then the error lists the panicked and skipped nodes.
    ///
    /// The data is borrowed only for the frame, so the game owns it again
    /// between frames:
    ///
    /// ```
    /// use engine_tasks::{Lane, Pool, TaskGraph};
    /// use std::sync::Mutex;
    ///
    /// struct Frame { dt: f32, x: Mutex<f32> }
    ///
    /// let mut builder = TaskGraph::<Frame>::builder();
    /// builder.node("integrate", Lane::FrameCritical, |cx| {
    ///     let frame = cx.data();
    ///     *frame.x.lock().unwrap() += 3.0 * frame.dt; // 3 units a second
    /// });
    /// let mut graph = builder.build().unwrap();
    ///
    /// let pool = Pool::builder().threads(1).build().unwrap();
    /// let mut frame = Frame { dt: 0.0, x: Mutex::new(0.0) };
    /// for _ in 0..4 {
    ///     frame.dt = 0.25; // read from the clock in a real loop
    ///     graph.run(&pool, &frame).unwrap();
    /// }
    /// assert_eq!(*frame.x.lock().unwrap(), 3.0);
    /// ```
    pub fn run(&mut self, pool: &PoolHandle, data: &C) -> Result<&FrameStats, FrameError> {
        self.runtime.run_frame(pool, data)
    }

    /// The statistics of the last frame run.
    pub fn last_frame(&self) -> &FrameStats {
        self.runtime.stats()
    }

    /// Number of nodes.
    pub fn len(&self) -> usize {
        self.runtime.len()
    }

    /// `true` if the graph has no nodes.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The name of node `index` (declaration order).
    pub fn node_name(&self, index: usize) -> &str {
        self.runtime.name(index)
    }

    /// The index of the node called `name`.
    pub fn node_index(&self, name: &str) -> Option<usize> {
        (0..self.len()).find(|&i| self.node_name(i) == name)
    }
}

impl<C: ?Sized + Sync> fmt::Debug for TaskGraph<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TaskGraph")
            .field("nodes", &self.runtime.len())
            .finish()
    }
}

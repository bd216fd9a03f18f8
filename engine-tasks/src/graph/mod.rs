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
//! with [`ReadyOrder::CriticalPathFirst`] it runs the most urgent successor
//! it released itself, next (no queue, warm cache), and queues the rest on
//! its own thread for others to steal; with [`ReadyOrder::Fifo`] it queues
//! them all. Nodes [pinned to the frame's
//! thread](TaskGraphBuilder::main_thread_node) go to an inbox that only
//! that thread drains, whoever released them. Nothing is allocated: the
//! nodes are intrusive tasks made when the graph is built.
//!
//! # Frames run alone
//!
//! Handing a node to another thread costs a queue operation and often a wake-up
//! and a cache miss, so a frame of light nodes ends sooner on one thread. When
//! the frames before were not worth a second thread (by default under 20 µs of
//! work, or nodes under 200 ns on average; see
//! [`TaskGraphBuilder::share_above`]), and for a graph's first frame, the
//! frame's thread runs the frame alone: it walks a plan, worked out between
//! frames, that puts every node after its dependencies, so nothing is queued or
//! counted. If such a frame turns out heavy by the same rule, checked after
//! every node that is not light, and after each run of up to 16 light nodes
//! (every 32 nodes of an untimed graph), all but in the graph's first frame
//! ever (frame numbers carry over a
//! [`build_into`](TaskGraphBuilder::build_into), whose new nodes count as light
//! until measured), and the nodes after that confirm it (a frame held up once
//! runs on alone), the thread queues the rest in the pool and waits like any
//! shared frame.
//!
//! A node measured in a shared frame also pays for the sharing (lines that
//! cross cores, caches that other work emptied), so a graph of light nodes
//! can look worth a second thread only because it is shared. So with the
//! default threshold, while frames are worth a second thread, one frame
//! in 64 runs the other way: alone while frames are shared (one in 512
//! for nodes over twice the node threshold), or shared while a trial
//! holds them alone. A trial frame faster than the other way's smoothed
//! frame time decides the frames up to the next trial. A trial alone of
//! nodes under twice the node threshold does not hand over, and a frame
//! of such nodes held alone hands over only once they are many times
//! heavier. [`FrameStats::sharing`] says which way a frame ran.
//!
//! # Planned frames
//!
//! A shared frame of a graph whose nodes all share one lane, none pinned, in
//! critical-path-first order, runs by a plan instead of queues (unless
//! [`TaskGraphBuilder::planning`] turned that off). Between frames, whenever
//! priorities change (every 64 frames), the nodes are split into one list per
//! thread (the frame's thread and each worker, at most eight) by list
//! scheduling on the measured node times: most urgent first, each on the list
//! where it would start soonest. The frame's thread queues one helper task per
//! other list once the frame is prepared, before it enters its own slot in the
//! pool, then walks its own list; a worker that takes a helper task walks that
//! list. Before a node runs, its
//! walker checks that its dependencies finished in this frame and claims it; a
//! walker whose next node is not ready may claim the first ready node of
//! another list, so a late or busy worker costs parallelism, never a node.
//! Nothing is counted or queued per node. A helper that a thread runs inside a
//! wait (a node's `join`, say) only runs ready nodes, since waiting there could
//! wait for the node below it on its own stack. A walker that finds nothing
//! ready looks for 20 µs, running pool tasks of the graph's lane (such as a
//! node's `parallel_for` pieces; the frame's thread once every helper task has
//! started), then sleeps until another walker finishes a node or such a task is
//! pushed.
//!
//! # Paced loops
//!
//! A game that sleeps until its next tick between frames finds the engine's
//! code and the graph's data cold when it wakes. The pool's workers wake
//! just before a forecast frame and warm their own cores;
//! [`TaskGraph::sleep_until`], used in place of the loop's own sleep, wakes
//! the frame's thread shortly before the tick and warms its core too.
//!
//! # What the frame's thread runs while it waits
//!
//! Its pinned nodes first (a planned frame has none), then any task of the
//! pool in lanes at least as urgent as the least urgent lane of the graph's
//! nodes (with every node frame-critical, only frame-critical tasks): graph
//! nodes, the pieces of a node's `parallel_for`, or frame-critical tasks
//! from elsewhere. It never starts background work unless the graph has
//! background nodes, or the pool has no worker thread to run it. A node that
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
//! # Sets, run conditions and declared access
//!
//! Nodes can be grouped in named sets ([`TaskGraphBuilder::set`]), ordered by
//! node or by set, run only in frames where a condition holds
//! ([`NodeBuilder::run_if`], evaluated once per frame when the node, or
//! whichever node of the set asks first, is about to run), and enabled or
//! disabled between frames by name ([`TaskGraph::set_enabled`]). A node that
//! does not run for those reasons releases its dependents as if it had
//! ([`NodeOutcome::Off`]). A node that declares what it reads and writes
//! ([`NodeBuilder::reads`], [`NodeBuilder::writes`], or plain ids for an ECS's
//! components) never runs at the same time as a node whose access conflicts
//! with it: the build orders such pairs that no ordering orders (see
//! [`TaskGraph::ambiguities`]), and [`NodeContext::res`] and
//! [`NodeContext::res_mut`] then hand out the [`Resources`] without a lock.
//!
//! ```
//! use engine_tasks::graph::Resources;
//! use engine_tasks::{Lane, Pool, TaskGraph};
//!
//! struct Positions(Vec<f32>);
//! struct Paused(bool);
//!
//! let mut builder = TaskGraph::<Resources>::builder();
//! builder.set("simulation").run_if(|cx| !cx.res::<Paused>().0).reads::<Paused>();
//! builder.node("integrate", Lane::FrameCritical, |cx| {
//!     cx.res_mut::<Positions>().0.iter_mut().for_each(|x| *x += 1.0);
//! }).in_set("simulation").writes::<Positions>();
//! builder.node("draw", Lane::FrameCritical, |cx| {
//!     assert!(cx.res::<Positions>().0.iter().all(|&x| x >= 0.0));
//! }).reads::<Positions>().after(["simulation"]);
//! let mut graph = builder.build().unwrap();
//!
//! let mut world = Resources::new();
//! world.insert(Positions(vec![0.0; 100]));
//! world.insert(Paused(false));
//! let pool = Pool::builder().threads(1).build().unwrap();
//! graph.run(&pool, &world).unwrap();
//! world.get_mut::<Paused>().unwrap().0 = true;
//! graph.run(&pool, &world).unwrap(); // "integrate" does not run
//! assert_eq!(world.get_mut::<Positions>().unwrap().0[0], 1.0);
//! ```
//!
//! # Critical path first
//!
//! With [`ReadyOrder::CriticalPathFirst`] (the default), every node gets a
//! priority: its expected time plus the longest chain of expected times
//! after it. Expected times are smoothed measurements of earlier frames.
//! Roots are queued, and each node's successors are released, in priority
//! order, so the most urgent ready node runs first on the thread that
//! released it and the next ones are the first to be stolen.

mod access;
mod builder;
mod compile;
mod context;
mod error;
mod recycle;
mod run_record;
mod runtime;
mod shape;
mod stats;

pub use access::{AccessId, AccessMode, Resources};
pub use builder::{Ambiguities, NodeBuilder, SetBuilder, TaskGraphBuilder};
pub use compile::MAX_NODES;
pub use context::{NodeContext, Res, ResMut};
pub use error::{FrameError, GraphError, NodePanic};
pub use run_record::NodeOutcome;
pub use stats::{FrameSharing, FrameStats, NodeTiming};

use crate::pool::PoolHandle;
use runtime::Runtime;
use std::fmt;
use std::marker::PhantomData;
use std::ptr::NonNull;
use std::time::Instant;

/// The order in which ready nodes are queued.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub enum ReadyOrder {
    /// The node with the longest measured chain of work after it first
    /// (see the module docs).
    #[default]
    CriticalPathFirst,
    /// In declaration order.
    Fifo,
}

/// Whether a graph reads the clock around its nodes
/// ([`TaskGraphBuilder::node_clock`]).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub enum NodeClock {
    /// Every node is timed: each [`NodeTiming`] in [`FrameStats`] has the
    /// node's start and duration (a light node in a frame run alone, timed
    /// with the light nodes run next to it, gets an equal share of their
    /// time), the statistics have each thread's busy time, and
    /// critical-path-first ranks nodes by their measured chains of work.
    #[default]
    On,
    /// No clock read per node: every [`NodeTiming`]'s start and duration
    /// are zero, the statistics have no busy times, and critical-path-first
    /// ranks nodes by the longest chain of nodes after them. A frame run
    /// alone still reads the clock every 32 nodes (after every node in the
    /// graph's first frame), to decide whether to hand the rest over.
    Off,
}

/// Whether shared frames may run by a plan worked out between frames
/// ([`TaskGraphBuilder::planning`]; see "Planned frames" in the module
/// docs).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub enum Planning {
    /// Shared frames run by a plan when the graph allows it
    /// (critical-path-first order, no pinned nodes, one lane for every
    /// node) and another thread of the pool can walk a list; others queue
    /// their nodes.
    #[default]
    Allowed,
    /// Shared frames always queue their nodes.
    Off,
}

/// A compiled DAG of nodes, run once per [`TaskGraph::run`]. See the module
/// docs.
///
/// Its nodes may keep what they see of the frame's data, so a graph of
/// data that borrows for one lifetime cannot pass for a graph of another:
///
/// ```compile_fail
/// use engine_tasks::TaskGraph;
/// struct View<'a>(&'a str);
/// fn shorten<'a>(graph: TaskGraph<View<'static>>) -> TaskGraph<View<'a>> {
///     graph // does not compile: a graph is invariant in its data type
/// }
/// ```
pub struct TaskGraph<C: ?Sized> {
    /// The graph's frames, compiled once whatever the data type: what is
    /// typed by `C` is erased in the closures (`builder.rs`).
    runtime: Runtime,
    /// How a frame finds its resources, if the graph declared any.
    resources_of: Option<fn(&C) -> &Resources>,
    /// Invariant in `C`, as the closures it holds are: were it covariant,
    /// a graph of `View<'static>` whose nodes keep what they see could
    /// become a graph of `View<'short>`.
    data: PhantomData<fn(&C) -> &C>,
}

impl<C: ?Sized + Sync> TaskGraph<C> {
    /// A builder for a graph whose nodes see a `&C` each frame.
    pub fn builder() -> TaskGraphBuilder<C> {
        TaskGraphBuilder::new()
    }

    /// Runs one frame on `pool` with `data`, which the nodes borrow for the
    /// frame, and returns when every node has finished (or been skipped).
    /// The calling thread takes part (see the module docs), so this is a
    /// wait on the pool: it panics inside
    /// [`forbid_waits`](crate::forbid_waits), and, like
    /// [`JoinHandle::join`](crate::JoinHandle::join), may run other tasks of
    /// the pool.
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
        crate::pool::forbid_waits::check("`TaskGraph::run`");
        let resources = self.resources_of.map(|of| of(data));
        // The runtime hands the nodes where `data` is, as a thin pointer
        // whatever `C` (`context.rs`).
        let data = NonNull::from(&data).cast::<()>();
        // SAFETY: `data` points to this call's `&C`, readable until
        // `run_frame` returns; the graph's closures were built for this `C`
        // (a `TaskGraphBuilder<C>` built it, and both types are invariant
        // in `C`), which is `Sync`; `resources` is found as the last build
        // declared (`TaskGraphBuilder::build_into`).
        unsafe { self.runtime.run_frame(pool, data, resources) }
    }

    /// Sleeps until `deadline`, the next tick of a paced loop (a frame
    /// limiter), and brings this graph's frame back into the calling
    /// thread's caches shortly before it: use it in place of
    /// [`std::thread::sleep`] before [`run`](Self::run).
    ///
    /// A core that sleeps for a frame's period may lose what the frame
    /// touched, and a frame that starts cold fetches the engine's code and
    /// the graph's data one line after another. This wakes shortly before
    /// `deadline`, asks for those lines all at once, and sleeps the rest.
    /// The requests are prefetch hints, which change nothing in memory, on
    /// x86-64; elsewhere this is a plain sleep in two parts. What it gains
    /// depends on how much the machine's caches lose across a sleep;
    /// `docs/performance/paced-cold-start.md` measures it, and the
    /// `warm_ahead` benchmark measures it on yours.
    ///
    /// Returns at once, without warming, if `deadline` has passed (the
    /// frame before overran its tick), and never before `deadline`
    /// otherwise; it skips the warming if its first sleep woke past
    /// `deadline`. Nothing else runs on this thread meanwhile, and it allocates
    /// nothing. Warming one graph warms the engine's code for every graph;
    /// the data is this graph's.
    ///
    /// ```
    /// use engine_tasks::{Lane, Pool, TaskGraph};
    /// use std::time::{Duration, Instant};
    ///
    /// let mut builder = TaskGraph::<()>::builder();
    /// builder.node("simulate", Lane::FrameCritical, |_| {});
    /// let mut graph = builder.build().unwrap();
    /// let pool = Pool::builder().threads(1).build().unwrap();
    ///
    /// let period = Duration::from_secs_f64(1.0 / 240.0);
    /// let mut tick = Instant::now();
    /// for _ in 0..3 {
    ///     // After an overrun, the next tick is a period from now: no burst.
    ///     tick = (tick + period).max(Instant::now());
    ///     graph.sleep_until(&pool, tick);
    ///     assert!(Instant::now() >= tick);
    ///     graph.run(&pool, &()).unwrap();
    /// }
    /// ```
    pub fn sleep_until(&self, pool: &PoolHandle, deadline: Instant) {
        self.runtime.sleep_until(pool, deadline);
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

    /// Enables or disables the node or set called `name` from the next
    /// frame on; a disabled node (or a node in a disabled set) does not
    /// run, and its dependents run as if it had
    /// ([`NodeOutcome::Off`]). Allocates nothing and rebuilds nothing.
    /// Returns `false` if no node or set has that name. A toggle lasts
    /// until the next build into the graph
    /// ([`TaskGraphBuilder::build_into`](crate::TaskGraphBuilder::build_into)),
    /// which turns every node and set on again.
    ///
    /// ```
    /// use engine_tasks::{Lane, Pool, TaskGraph};
    /// use std::sync::atomic::{AtomicU32, Ordering};
    ///
    /// let mut builder = TaskGraph::<AtomicU32>::builder();
    /// builder.set("debug");
    /// builder.node("debug_draw", Lane::Normal, |cx| {
    ///     cx.data().fetch_add(1, Ordering::Relaxed);
    /// }).in_set("debug");
    /// let mut graph = builder.build().unwrap();
    /// let pool = Pool::builder().threads(1).build().unwrap();
    /// let drawn = AtomicU32::new(0);
    /// assert!(graph.set_enabled("debug", false));
    /// graph.run(&pool, &drawn).unwrap();
    /// assert_eq!(drawn.load(Ordering::Relaxed), 0);
    /// assert!(graph.set_enabled("debug", true));
    /// graph.run(&pool, &drawn).unwrap();
    /// assert_eq!(drawn.load(Ordering::Relaxed), 1);
    /// assert!(!graph.set_enabled("no such node", true));
    /// ```
    pub fn set_enabled(&mut self, name: &str, enabled: bool) -> bool {
        self.runtime.set_enabled(name, enabled)
    }

    /// The pairs of nodes whose accesses conflict and that no ordering
    /// ordered: each pair `(first, second, what)`, where the first runs
    /// first, as node names and the name of what they both access. The
    /// order derived for a pair is their declaration order, unless the
    /// orders derived for other pairs already ordered them the other way.
    /// Empty for a graph whose conflicts are all ordered.
    ///
    /// ```
    /// use engine_tasks::graph::Resources;
    /// use engine_tasks::{Lane, TaskGraph};
    ///
    /// struct Score(u32);
    /// let mut builder = TaskGraph::<Resources>::builder();
    /// builder.node("award", Lane::Normal, |_| {}).writes::<Score>();
    /// builder.node("show", Lane::Normal, |_| {}).reads::<Score>();
    /// let graph = builder.build().unwrap();
    /// let ambiguities: Vec<_> = graph.ambiguities().collect();
    /// assert_eq!(ambiguities.len(), 1);
    /// assert_eq!((ambiguities[0].0, ambiguities[0].1), ("award", "show"));
    /// ```
    pub fn ambiguities(&self) -> impl Iterator<Item = (&str, &str, &'static str)> + '_ {
        self.runtime.ambiguities()
    }
}

impl<C: ?Sized + Sync> fmt::Debug for TaskGraph<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TaskGraph")
            .field("nodes", &self.runtime.len())
            .finish()
    }
}

//! Building a graph: nodes, sets, orderings, run conditions and declared
//! accesses, collected by a [`TaskGraphBuilder`] and compiled by
//! `compile.rs`. A builder can be reused: cleared and filled again each
//! frame, it compiles a graph of the same shape into the same graph without
//! allocating ([`TaskGraphBuilder::build_into`]).

use super::access::{Access, AccessId, AccessMode, Resources};
use super::compile::{self, Compiled, Scratch};
use super::context::Context;
use super::recycle::BoxMemory;
use super::runtime::{Runtime, ShareThreshold};
use super::shape::{BuildId, Inputs, Options, Replay};
use super::{GraphError, NodeClock, NodeContext, Planning, ReadyOrder, TaskGraph};
use crate::lane::Lane;
use std::any::{type_name, TypeId};
use std::borrow::Cow;
use std::marker::PhantomData;
use std::time::Duration;

/// A node's or set's name: borrowed for the life of the program (no
/// allocation), or owned.
pub(super) type Name = Cow<'static, str>;

/// A node's body: called once per frame with the frame's context, the
/// type of its data erased (`Context`), so that the runtime is compiled
/// once, whatever the graphs' data types. It wraps the closure the node
/// was given (`erase_body`), which reads the data as the graph's `C`: a
/// call is sound only with a context of a frame of that graph
/// (`Context::new`).
pub(super) type Body = Box<dyn FnMut(&Context<'_>) + Send>;

/// A run condition: evaluated once per frame, when its node (or the first
/// node of its set) is about to run. Erased as a [`Body`] is.
pub(super) type Condition = Box<dyn Fn(&Context<'_>) -> bool + Send + Sync>;

/// `body`, called with the erased context of a frame of a graph of `C`.
fn erase_body<C, F>(mut body: F) -> impl FnMut(&Context<'_>) + Send + 'static
where
    C: ?Sized,
    F: FnMut(&NodeContext<'_, C>) + Send + 'static,
{
    // SAFETY: the runtime calls a graph's bodies only with contexts of its
    // frames, whose data is the `&C` that `TaskGraph::run` was given
    // (`Context::new`); `body` takes a context of any lifetime, so it
    // cannot keep what the context lends.
    move |cx| body(unsafe { cx.typed::<C>() })
}

/// `condition`, called as [`erase_body`]'s bodies are.
fn erase_condition<C, F>(condition: F) -> impl Fn(&Context<'_>) -> bool + Send + Sync + 'static
where
    C: ?Sized,
    F: Fn(&NodeContext<'_, C>) -> bool + Send + Sync + 'static,
{
    // SAFETY: as in `erase_body`.
    move |cx| condition(unsafe { cx.typed::<C>() })
}

/// A node or a set, by its index among the builder's nodes or sets.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(super) enum Owner {
    Node(u32),
    Set(u32),
}

/// Which way an ordering goes.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(super) enum Relation {
    /// The owner runs after the named node or set.
    After,
    /// The owner runs before it.
    Before,
}

/// What the builder does with conflicting accesses that no ordering orders
/// ([`TaskGraphBuilder::ambiguities`]).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub enum Ambiguities {
    /// Order each pair: the node added to the builder first runs first,
    /// unless the orders derived for other pairs already ordered the two
    /// the other way. The pairs are listed by [`TaskGraph::ambiguities`],
    /// each pair's two nodes in the order they run.
    #[default]
    OrderByDeclaration,
    /// Refuse to build: [`GraphError::Ambiguous`] lists the pairs.
    Error,
}

pub(super) struct NodeSpec {
    pub(super) lane: Lane,
    pub(super) pinned: bool,
    pub(super) body: Body,
}

/// Collects nodes and sets for a [`TaskGraph`]; see [`TaskGraph::builder`].
pub struct TaskGraphBuilder<C: ?Sized> {
    pub(super) nodes: Vec<NodeSpec>,
    pub(super) sets: Vec<Name>,
    /// The run conditions, in order (their owners are in `inputs`).
    pub(super) conditions: Vec<Condition>,
    /// The names, orderings, memberships, accesses and condition owners,
    /// once they stopped repeating the last build (`shape.rs`).
    pub(super) inputs: Inputs,
    /// The last build, and how far this fill repeats it.
    replay: Replay,
    /// How a frame finds its [`Resources`], once a resource access was
    /// declared.
    pub(super) resources_of: Option<fn(&C) -> &Resources>,
    /// Invariant in `C`, as the graph it builds ([`TaskGraph`]'s field).
    data: PhantomData<fn(&C) -> &C>,
    pub(super) order: ReadyOrder,
    pub(super) node_clock: NodeClock,
    pub(super) share_above: ShareThreshold,
    pub(super) planning: Planning,
    pub(super) ambiguities: Ambiguities,
    /// The compiler's buffers, kept for the next build.
    pub(super) scratch: Scratch,
    /// What the last build compiled (given to the graph it builds, which
    /// gives back its old one for the next build).
    pub(super) compiled: Compiled,
    /// The memory of bodies and of conditions of graphs this builder
    /// replaced (`recycle.rs`), for the closures of the next.
    pub(super) memory: BoxMemory,
    pub(super) condition_memory: BoxMemory,
}

impl<C: ?Sized + Sync> Default for TaskGraphBuilder<C> {
    fn default() -> Self {
        TaskGraphBuilder {
            nodes: Vec::new(),
            sets: Vec::new(),
            conditions: Vec::new(),
            inputs: Inputs::default(),
            replay: Replay::default(),
            resources_of: None,
            data: PhantomData,
            order: ReadyOrder::default(),
            node_clock: NodeClock::On,
            share_above: ShareThreshold::default(),
            planning: Planning::Allowed,
            ambiguities: Ambiguities::default(),
            scratch: Scratch::default(),
            compiled: Compiled::default(),
            memory: BoxMemory::default(),
            condition_memory: BoxMemory::default(),
        }
    }
}

/// Orders, groups, conditions and declares the accesses of the node just
/// added.
pub struct NodeBuilder<'b, C: ?Sized> {
    builder: &'b mut TaskGraphBuilder<C>,
    owner: Owner,
}

/// Orders, groups, conditions and declares the accesses of a set; see
/// [`TaskGraphBuilder::set`].
pub struct SetBuilder<'b, C: ?Sized> {
    builder: &'b mut TaskGraphBuilder<C>,
    owner: Owner,
}

impl<C: ?Sized> NodeBuilder<'_, C> {
    /// The node runs after each named node or set has finished (and after
    /// everything those started with `parallel_for` or `scope`); a set
    /// has finished when every node in it has.
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
        S: Into<Name>,
    {
        self.builder
            .order(self.owner, dependencies, Relation::After);
        self
    }
}

/// The methods nodes and sets share: orderings, sets, run conditions and
/// accesses.
macro_rules! common_methods {
    ($who:literal) => {
        #[doc = concat!("The ", $who, " runs before each named node or set.")]
        pub fn before<I, S>(self, dependents: I) -> Self
        where
            I: IntoIterator<Item = S>,
            S: Into<Name>,
        {
            self.builder.order(self.owner, dependents, Relation::Before);
            self
        }

        #[doc = concat!("Puts the ", $who, " in set `set` (see [`TaskGraphBuilder::set`]); it")]
        /// may be in several sets. Orderings, run conditions and accesses of
        /// the set apply to it.
        pub fn in_set(self, set: impl Into<Name>) -> Self {
            self.builder.membership(self.owner, set.into());
            self
        }

        #[doc = concat!("The ", $who, " runs only in frames where `condition` holds. The")]
        /// condition is evaluated once per frame, when the node (or the
        /// first node of the set) is about to run, not before the frame;
        /// with several conditions, all must hold. A node whose conditions
        /// (or one of its sets') fail does not run, and its dependents run
        /// as if it had ([`NodeOutcome::Off`](super::NodeOutcome::Off)).
        ///
        /// The condition gets the context of the node it is evaluated for:
        /// it may read [resources](NodeContext::res) that node declared. A
        /// set's condition is evaluated for whichever of its nodes asks
        /// first, which changes from frame to frame: let it read only
        /// resources the set itself declares (every node of the set
        /// inherits them), or it panics in the frames in which a node that
        /// did not declare them asks.
        ///
        /// A set's condition runs inside [`forbid_waits`](crate::forbid_waits):
        /// a wait on a pool there (a `join`, `scope`, `parallel_for`, a
        /// task's `join`, a blocking task's `wait`, a frame) panics at its
        /// start. Such a wait could run another node of the set, on this
        /// thread or, through a stolen half, on another, and that node waits
        /// for the answer being worked out. If a set's condition panics,
        /// every node of the set that asks for it in the frame fails
        /// ([`NodeOutcome::Panicked`](super::NodeOutcome::Panicked)), and
        /// their dependents are skipped. A node's own condition runs as part
        /// of the node, and may wait.
        pub fn run_if<F>(self, condition: F) -> Self
        where
            F: Fn(&NodeContext<'_, C>) -> bool + Send + Sync + 'static,
        {
            self.builder.condition(self.owner, condition);
            self
        }

        /// Declares that the nodes read the plain id `id` (an ECS's component
        /// or resource id): they never run at the same time as a node that
        /// writes it (see [`AccessId`]). `name` names it in messages.
        pub fn reads_id(self, id: AccessId, name: &'static str) -> Self {
            self.builder
                .access(self.owner, id, AccessMode::Read, name, None);
            self
        }

        /// Declares that the nodes write the plain id `id`: they never run at
        /// the same time as another node that reads or writes it.
        pub fn writes_id(self, id: AccessId, name: &'static str) -> Self {
            self.builder
                .access(self.owner, id, AccessMode::Write, name, None);
            self
        }
    };
}

/// Resource accesses: need frame data that holds the [`Resources`].
macro_rules! resource_methods {
    () => {
        /// Declares that the nodes read the resource `T`, which they get
        /// with [`NodeContext::res`]. They never run at the same time as a
        /// node that writes `T`: conflicting nodes that no ordering orders
        /// are ordered by declaration ([`Ambiguities`]).
        pub fn reads<T: Send + Sync + 'static>(self) -> Self {
            self.builder.resource::<T>(self.owner, AccessMode::Read);
            self
        }

        /// Declares that the nodes write the resource `T`, which they get
        /// with [`NodeContext::res_mut`]. They never run at the same time
        /// as another node that reads or writes `T`.
        pub fn writes<T: Send + Sync + 'static>(self) -> Self {
            self.builder.resource::<T>(self.owner, AccessMode::Write);
            self
        }
    };
}

impl<C: ?Sized> NodeBuilder<'_, C> {
    common_methods!("node");
}

impl<C: ?Sized + AsRef<Resources>> NodeBuilder<'_, C> {
    resource_methods!();
}

impl<C: ?Sized> SetBuilder<'_, C> {
    /// Every node of the set runs after each named node or set.
    pub fn after<I, S>(self, dependencies: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<Name>,
    {
        self.builder
            .order(self.owner, dependencies, Relation::After);
        self
    }

    common_methods!("set");
}

impl<C: ?Sized + AsRef<Resources>> SetBuilder<'_, C> {
    resource_methods!();
}

impl<C: ?Sized> TaskGraphBuilder<C> {
    /// The options that shape the compiled graph (`shape.rs`).
    pub(super) fn options(&self) -> Options {
        Options {
            order: self.order,
            node_clock: self.node_clock,
            share_above: self.share_above,
            planning: self.planning,
            ambiguities: self.ambiguities,
            resources: self.resources_of.is_some(),
        }
    }

    #[inline]
    fn order<I, S>(&mut self, owner: Owner, names: I, relation: Relation)
    where
        I: IntoIterator<Item = S>,
        S: Into<Name>,
    {
        let nodes = self.nodes.len();
        for name in names {
            let item = (owner, name.into(), relation);
            self.replay.order(&mut self.inputs, nodes, item);
        }
    }

    fn membership(&mut self, owner: Owner, set: Name) {
        let nodes = self.nodes.len();
        self.replay
            .membership(&mut self.inputs, nodes, (owner, set));
    }

    fn condition<F>(&mut self, owner: Owner, condition: F)
    where
        F: Fn(&NodeContext<'_, C>) -> bool + Send + Sync + 'static,
    {
        let nodes = self.nodes.len();
        self.replay.condition(&mut self.inputs, nodes, owner);
        let condition: Condition = self.condition_memory.boxed(erase_condition(condition));
        self.conditions.push(condition);
    }

    fn access(
        &mut self,
        owner: Owner,
        id: AccessId,
        mode: AccessMode,
        name: &'static str,
        type_id: Option<TypeId>,
    ) {
        let access = Access {
            id,
            mode,
            name,
            type_id,
        };
        let nodes = self.nodes.len();
        self.replay.access(&mut self.inputs, nodes, (owner, access));
    }
}

impl<C: ?Sized + AsRef<Resources>> TaskGraphBuilder<C> {
    fn resource<T: Send + Sync + 'static>(&mut self, owner: Owner, mode: AccessMode) {
        self.resources_of = Some(|data: &C| data.as_ref());
        let (id, name) = (AccessId::of::<T>(), type_name::<T>());
        self.access(owner, id, mode, name, Some(TypeId::of::<T>()));
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
    #[inline]
    pub fn node<F>(&mut self, name: impl Into<Name>, lane: Lane, body: F) -> NodeBuilder<'_, C>
    where
        F: FnMut(&NodeContext<'_, C>) + Send + 'static,
    {
        let body: Body = self.memory.boxed(erase_body(body));
        self.push(name.into(), lane, false, body)
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
    pub fn main_thread_node<F>(&mut self, name: impl Into<Name>, body: F) -> NodeBuilder<'_, C>
    where
        F: FnMut(&NodeContext<'_, C>) + Send + 'static,
    {
        let body: Body = self.memory.boxed(erase_body(body));
        self.push(name.into(), Lane::FrameCritical, true, body)
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

    /// Whether to time every node (default: [`NodeClock::On`]). Timing
    /// costs up to one clock read per node, two for a node taken from a
    /// queue; with [`NodeClock::Off`], [`FrameStats`](super::FrameStats) has
    /// no node durations or thread busy times, and critical-path-first ranks
    /// nodes by the longest chain of nodes after them (see [`NodeClock`]).
    ///
    /// ```
    /// use engine_tasks::{Lane, NodeClock, Pool, TaskGraph};
    /// use std::time::Duration;
    ///
    /// let mut builder = TaskGraph::<()>::builder();
    /// builder.node("particles", Lane::Normal, |_| {});
    /// builder.node_clock(NodeClock::Off); // a shipping build without the profiler
    /// let mut graph = builder.build().unwrap();
    ///
    /// let pool = Pool::builder().threads(1).build().unwrap();
    /// let stats = graph.run(&pool, &()).unwrap();
    /// assert_eq!(stats.total_work(), Duration::ZERO);
    /// assert_eq!(stats.nodes().len(), 1);
    /// ```
    pub fn node_clock(&mut self, clock: NodeClock) -> &mut Self {
        self.node_clock = clock;
        self
    }

    /// When frames share their nodes with other threads (see "Frames run
    /// alone" above): a frame is shared when the frames before it took at
    /// least `frame_work` of node time (of wall time, untimed) and their
    /// nodes averaged at least `node_work`; otherwise (and in the first
    /// frame) the frame's thread runs it alone, and hands the rest over
    /// once the wall time since its first node passes `frame_work` and
    /// twice `node_work` per node run (wall time also counts the walk
    /// between nodes and the cache misses of a thread that slept; under
    /// the default, a trial may set that margin higher, or run a frame
    /// alone with no hand-over), if the nodes run after that ran as slow
    /// and the rest at their pace would pass `frame_work` (a frame held up
    /// once, its thread preempted, runs on alone). Default: 20 µs and 200
    /// ns, checked by trial frames run the other way (see "Frames run
    /// alone" above); a threshold set here, even to those values, is
    /// followed as it is, with no trials. Zero for both shares every frame
    /// (the first from its third node on); [`Duration::MAX`] for either
    /// runs every frame alone.
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

    /// Whether shared frames may run by a plan (default:
    /// [`Planning::Allowed`]; see "Planned frames" above). Only graphs with
    /// critical-path-first order, no pinned nodes and one lane for every
    /// node run planned frames; others always queue their nodes.
    ///
    /// ```
    /// use engine_tasks::{FrameSharing, Lane, Planning, Pool, TaskGraph};
    /// use std::time::Duration;
    ///
    /// let mut builder = TaskGraph::<()>::builder();
    /// for i in 0..8 {
    ///     builder.node(format!("chunk_{i}"), Lane::Normal, |_| {});
    /// }
    /// builder
    ///     .share_above(Duration::ZERO, Duration::ZERO)
    ///     .planning(Planning::Off);
    /// let mut graph = builder.build().unwrap();
    ///
    /// let pool = Pool::builder().threads(1).build().unwrap();
    /// for _ in 0..100 {
    ///     let stats = graph.run(&pool, &()).unwrap();
    ///     assert_ne!(stats.sharing(), FrameSharing::Planned);
    /// }
    /// ```
    pub fn planning(&mut self, planning: Planning) -> &mut Self {
        self.planning = planning;
        self
    }

    #[inline]
    fn push(&mut self, name: Name, lane: Lane, pinned: bool, body: Body) -> NodeBuilder<'_, C> {
        let index = self.nodes.len();
        let owner = Owner::Node(index as u32);
        self.replay
            .node(&mut self.inputs, index, name, lane, pinned);
        self.nodes.push(NodeSpec { lane, pinned, body });
        NodeBuilder {
            builder: self,
            owner,
        }
    }

    /// The set called `name`, made empty the first time: a named group of
    /// nodes (and of other sets) that may be ordered, conditioned and
    /// given accesses as a whole. Nodes join it with
    /// [`NodeBuilder::in_set`]. An ordering through a set without nodes
    /// still holds (`a` before the empty set, `b` after it: `a` before
    /// `b`).
    ///
    /// ```
    /// use engine_tasks::{Lane, Pool, TaskGraph};
    /// use std::sync::Mutex;
    ///
    /// let mut builder = TaskGraph::<Mutex<Vec<&str>>>::builder();
    /// builder.set("physics").after(["input"]);
    /// builder.set("render").after(["physics"]);
    /// builder.set("input");
    /// let log = |name: &'static str| move |cx: &engine_tasks::NodeContext<'_, Mutex<Vec<&str>>>| {
    ///     cx.data().lock().unwrap().push(name)
    /// };
    /// builder.node("draw", Lane::FrameCritical, log("draw")).in_set("render");
    /// builder.node("collide", Lane::FrameCritical, log("collide")).in_set("physics");
    /// builder.node("read_pad", Lane::FrameCritical, log("read_pad")).in_set("input");
    /// let mut graph = builder.build().unwrap();
    ///
    /// let pool = Pool::builder().threads(1).build().unwrap();
    /// let order = Mutex::new(Vec::new());
    /// graph.run(&pool, &order).unwrap();
    /// assert_eq!(*order.lock().unwrap(), ["read_pad", "collide", "draw"]);
    /// ```
    pub fn set(&mut self, name: impl Into<Name>) -> SetBuilder<'_, C> {
        let name = name.into();
        let index = match self.sets.iter().position(|set| *set == name) {
            Some(index) => index,
            None => {
                self.sets.push(name);
                self.sets.len() - 1
            }
        };
        SetBuilder {
            builder: self,
            owner: Owner::Set(index as u32),
        }
    }

    /// What to do with conflicting accesses that no ordering orders
    /// (default: order them by declaration; see [`Ambiguities`]).
    ///
    /// ```
    /// use engine_tasks::graph::{Ambiguities, Resources};
    /// use engine_tasks::{GraphError, Lane, TaskGraph};
    ///
    /// struct Health(u32);
    /// let mut builder = TaskGraph::<Resources>::builder();
    /// builder.node("damage", Lane::Normal, |_| {}).writes::<Health>();
    /// builder.node("heal", Lane::Normal, |_| {}).writes::<Health>();
    /// builder.ambiguities(Ambiguities::Error);
    /// assert!(matches!(builder.build(), Err(GraphError::Ambiguous(_))));
    /// ```
    pub fn ambiguities(&mut self, ambiguities: Ambiguities) -> &mut Self {
        self.ambiguities = ambiguities;
        self
    }

    /// Empties the builder for the next graph, keeping its options and the
    /// memory it holds: a builder filled again with a graph of the same
    /// shape, and compiled with [`build_into`](Self::build_into), allocates
    /// nothing.
    pub fn clear(&mut self) {
        self.sets.clear();
        self.resources_of = None;
        self.replay.restart(&mut self.inputs);
        // The closures last, taken out of the builder first: their drops
        // are user code, which may panic, and the builder is empty all the
        // same (it only loses the two lists' memory then).
        let mut nodes = std::mem::take(&mut self.nodes);
        let mut conditions = std::mem::take(&mut self.conditions);
        for node in nodes.drain(..) {
            self.memory.keep(node.body);
        }
        for condition in conditions.drain(..) {
            self.condition_memory.keep(condition);
        }
        self.nodes = nodes;
        self.conditions = conditions;
    }

    /// Validates and compiles into `self.compiled` (the nodes stay here).
    /// On success, the inputs are kept as the last build (`shape.rs`),
    /// whose id is returned for the graph built from them.
    fn compile(&mut self) -> Result<BuildId, GraphError> {
        self.replay.complete(&mut self.inputs, self.nodes.len());
        let inputs = &self.inputs;
        let input = compile::Input {
            nodes: &inputs.names,
            sets: &self.sets,
            orders: &inputs.orders,
            memberships: &inputs.memberships,
            accesses: &inputs.accesses,
            condition_owners: &inputs.condition_owners,
            ambiguities_are_errors: self.ambiguities == Ambiguities::Error,
        };
        compile::compile(&input, &mut self.compiled, &mut self.scratch)?;
        let options = self.options();
        Ok(self
            .replay
            .record(&mut self.inputs, &self.nodes, &self.sets, options))
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
    ///     r#"dependency cycle: "animation" -> "physics" -> "animation""#
    /// );
    /// ```
    pub fn build(mut self) -> Result<TaskGraph<C>, GraphError> {
        let id = self.compile()?;
        let resources_of = self.resources_of;
        Ok(TaskGraph {
            runtime: Runtime::new(self, id),
            resources_of,
            data: PhantomData,
        })
    }

    /// Compiles the builder's graph into `graph`, reusing its memory and
    /// the builder's, and empties the builder (as [`clear`](Self::clear))
    /// for the next one. For graphs built every frame (a render graph
    /// whose passes change): once a graph of the same shape was built, this
    /// allocates nothing, as long as node and set names are `&'static str`
    /// (an owned name is the caller's allocation, and a build that compiles
    /// keeps a copy of it). Each distinct node name is also registered for
    /// the process's life (profiles and estimates refer to it by number):
    /// names made afresh without end, such as one with a counter in it,
    /// grow memory by a few dozen bytes each. The bodies and conditions of
    /// the graph it replaces leave their memory to those of the next graph
    /// of the same closure types. A node whose name was in the last graph
    /// keeps its measured time, so critical-path-first ordering and the
    /// decision to share a frame carry over. On an error `graph` is left as
    /// it was, and the builder is emptied all the same.
    ///
    /// A build that repeats this builder's last build (the same names,
    /// lanes, orderings, sets, memberships, conditions' owners, accesses
    /// and options, given in the same order) into the graph that build went
    /// into skips the compiler: the new closures are swapped in and the
    /// graph keeps its compiled form and plans. While the builder is being
    /// filled, it compares each input with its last build's and stores
    /// only the closures until one differs.
    ///
    /// Every build, a repeated one too, turns every node and set of
    /// `graph` on again ([`TaskGraph::set_enabled`]): a graph built every
    /// frame sets its toggles after each build.
    ///
    /// ```
    /// use engine_tasks::{Lane, Pool, TaskGraph};
    /// use std::sync::atomic::{AtomicU32, Ordering};
    ///
    /// let pool = Pool::builder().threads(1).build().unwrap();
    /// let mut builder = TaskGraph::<AtomicU32>::builder();
    /// let mut graph = TaskGraph::<AtomicU32>::builder().build().unwrap();
    /// let passes = AtomicU32::new(0);
    /// for frame in 0..4 {
    ///     builder.node("shadows", Lane::FrameCritical, |cx| {
    ///         cx.data().fetch_add(1, Ordering::Relaxed);
    ///     });
    ///     if frame % 2 == 0 {
    ///         // A pass only in even frames.
    ///         builder.node("bloom", Lane::FrameCritical, |cx| {
    ///             cx.data().fetch_add(1, Ordering::Relaxed);
    ///         }).after(["shadows"]);
    ///     }
    ///     builder.build_into(&mut graph).unwrap();
    ///     graph.run(&pool, &passes).unwrap();
    /// }
    /// assert_eq!(passes.load(Ordering::Relaxed), 6);
    /// ```
    pub fn build_into(&mut self, graph: &mut TaskGraph<C>) -> Result<(), GraphError> {
        // The same inputs as the last build, which went into this graph:
        // only the closures are new, and the last build validated the rest
        // (`shape.rs`).
        let (nodes, options) = (self.nodes.len(), self.options());
        let built = graph.runtime.built();
        if self.replay.repeats(nodes, &self.sets, options, built) {
            // Should a replaced closure's drop panic, the builder is left
            // empty all the same, for the caller's next fill.
            // It declared resources as the last build did (`Options`), so
            // the graph's `resources_of` stands.
            let builder = ClearOnUnwind(self);
            graph.runtime.refill(builder.0);
            return Ok(());
        }
        match self.compile() {
            Ok(id) => {
                graph.resources_of = self.resources_of;
                graph.runtime.rebuild(self, id);
                Ok(())
            }
            Err(error) => {
                self.clear();
                Err(error)
            }
        }
    }
}

/// Empties the builder it holds if dropped while a panic unwinds.
struct ClearOnUnwind<'b, C: ?Sized + Sync>(&'b mut TaskGraphBuilder<C>);

impl<C: ?Sized + Sync> Drop for ClearOnUnwind<'_, C> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.clear();
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::TaskGraphBuilder;
    use crate::Lane;

    /// The node edges a builder compiles into, as (from, to) names.
    fn edges(b: &mut TaskGraphBuilder<()>) -> Vec<(String, String)> {
        b.compile().unwrap();
        let (names, successors) = (&b.inputs.names, &b.compiled.successors);
        let mut edges = Vec::new();
        for from in 0..names.len() {
            for &to in successors.row(from) {
                edges.push((names[from].to_string(), names[to as usize].to_string()));
            }
        }
        edges.sort();
        edges
    }

    fn pair(a: &str, b: &str) -> (String, String) {
        (a.to_owned(), b.to_owned())
    }

    /// Empty sets as stage labels, each after the one before, a node
    /// between each two: the nodes form a chain of k - 1 edges. Before,
    /// each node had an edge to every later one, k(k - 1)/2 in all, each a
    /// count in every frame.
    #[test]
    fn a_chain_of_empty_sets_orders_its_nodes_by_a_chain_of_edges() {
        let k = 40;
        let mut b = TaskGraphBuilder::<()>::new();
        for i in 0..k {
            let set = b.set(format!("stage{i}"));
            if i > 0 {
                set.after([format!("stage{}", i - 1)]);
            }
        }
        for i in 0..k {
            let node = b
                .node(format!("n{i}"), Lane::Normal, |_| {})
                .before([format!("stage{i}")]);
            if i > 0 {
                node.after([format!("stage{}", i - 1)]);
            }
        }
        let mut expected: Vec<_> = (1..k)
            .map(|i| pair(&format!("n{}", i - 1), &format!("n{i}")))
            .collect();
        expected.sort();
        assert_eq!(edges(&mut b), expected);
    }

    /// An empty set nested in a set with members: a node before the outer
    /// set gets edges to its members only, not past them to the nodes
    /// after the set, which the members order already. Where no node
    /// stands between, an ordering through empty sets still holds.
    #[test]
    fn empty_sets_add_no_edges_past_the_nodes_that_order_them() {
        let mut b = TaskGraphBuilder::<()>::new();
        b.set("outer");
        b.set("marker").in_set("outer");
        b.node("m", Lane::Normal, |_| {}).in_set("outer");
        b.node("before", Lane::Normal, |_| {}).before(["outer"]);
        b.node("after", Lane::Normal, |_| {}).after(["outer"]);
        assert_eq!(
            edges(&mut b),
            [pair("before", "m"), pair("m", "after")].to_vec()
        );

        let mut b = TaskGraphBuilder::<()>::new();
        b.set("a");
        b.set("b").after(["a"]);
        b.set("c").after(["b"]);
        b.node("first", Lane::Normal, |_| {}).before(["a"]);
        b.node("last", Lane::Normal, |_| {}).after(["c"]);
        assert_eq!(edges(&mut b), [pair("first", "last")].to_vec());
    }
}

//! The errors of building and running a graph.

#[allow(unused_imports)] // for doc links
use super::TaskGraphBuilder;
use super::MAX_NODES;
use std::any::Any;
use std::fmt;

/// A graph that cannot be built.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum GraphError {
    /// Two nodes or sets have this name.
    DuplicateNode(String),
    /// `node` (a node or a set) is ordered after or before `dependency`,
    /// which no node or set is called.
    UnknownDependency {
        /// The node or set with the bad `after` or `before`.
        node: String,
        /// The missing name.
        dependency: String,
    },
    /// These nodes depend on each other in a circle, each after the one
    /// before it and the first after the last.
    Cycle(Vec<String>),
    /// More than [`MAX_NODES`] nodes.
    TooManyNodes(usize),
    /// `member` (a node or a set) is put in `set`, which no set is called
    /// (a name of a node is not a set either).
    UnknownSet {
        /// The node or set put in the set.
        member: String,
        /// The missing set's name.
        set: String,
    },
    /// Conflicting accesses with no declared order, as `(first, second,
    /// what they both access)`, when the builder makes ambiguities an error
    /// ([`TaskGraphBuilder::ambiguities`]).
    Ambiguous(Vec<(String, String, String)>),
}

impl fmt::Display for GraphError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GraphError::DuplicateNode(name) => write!(f, "two nodes or sets are named {name:?}"),
            GraphError::UnknownDependency { node, dependency } => {
                write!(
                    f,
                    "{node:?} is ordered after or before {dependency:?}, \
                     which no node or set is called"
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
            GraphError::UnknownSet { member, set } => {
                write!(
                    f,
                    "{member:?} is put in set {set:?}, which no set is called"
                )
            }
            GraphError::Ambiguous(pairs) => {
                write!(f, "conflicting nodes with no declared order: ")?;
                for (i, (a, b, what)) in pairs.iter().enumerate() {
                    let sep = if i == 0 { "" } else { "; " };
                    write!(f, "{sep}{a:?} and {b:?} (both use {what})")?;
                }
                Ok(())
            }
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

/// A frame in which nodes panicked. A node whose body or run condition
/// panicked is reported [`Panicked`](crate::graph::NodeOutcome::Panicked), and so
/// is every node of a set whose run condition panicked; nodes that depend
/// on any of them are skipped, and every other node ran. The next frame
/// runs normally.
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
    /// The frame did not run at all, because another frame (of another
    /// graph, or of a graph run inside a node) was using the same
    /// [`Resources`](super::Resources): two frames must not hand out the
    /// same values at once. No node ran.
    pub resources_in_use: bool,
}

impl FrameError {
    /// Re-raises the first panicked node's panic (in declaration order) on
    /// the calling thread, with its own payload.
    /// The other nodes' payloads are dropped before the unwind starts, where
    /// a panic of a payload's destructor is caught.
    pub fn resume_unwind(mut self) -> ! {
        if self.panicked.is_empty() {
            std::panic::resume_unwind(Box::new(self.to_string()));
        }
        let first = self.panicked.swap_remove(0);
        crate::pool::spawn::drop_quietly(self);
        first.resume_unwind()
    }
}

impl fmt::Display for FrameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "frame {}: ", self.frame)?;
        if self.resources_in_use {
            return write!(f, "not run: another frame was using its Resources");
        }
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

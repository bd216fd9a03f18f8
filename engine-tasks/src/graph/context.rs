//! What a node (or a run condition) sees while it runs: the frame's data,
//! the pool, the frame's number, and the resources it declared.

use super::access::{Access, AccessMode, Resources};
use crate::pool::PoolHandle;
use std::any::{type_name, TypeId};

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
    pub(super) data: &'f C,
    pub(super) pool: &'f PoolHandle,
    pub(super) frame: u64,
    pub(super) name: &'f str,
    /// What the node declared it reads and writes (its own and its sets').
    pub(super) access: &'f [Access],
    /// The frame's resources, if the graph declared resource accesses.
    pub(super) resources: Option<&'f Resources>,
}

impl<'f, C: ?Sized> NodeContext<'f, C> {
    /// The frame's data, borrowed from the caller of [`TaskGraph::run`](super::TaskGraph::run).
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

    /// The resource of type `T`, which this node declared it reads (or
    /// writes): see [`NodeBuilder::reads`](super::NodeBuilder::reads).
    ///
    /// # Panics
    ///
    /// If the node did not declare `T`, or the frame's [`Resources`] hold
    /// no `T`; the message names the node and the type. The panic fails
    /// the node like any other (see [`FrameError`](super::FrameError)).
    pub fn res<T: Send + Sync + 'static>(&self) -> &'f T {
        let value = self.resource::<T>(AccessMode::Read);
        // SAFETY: the node declared reading (or writing) `T`, so while it
        // runs no node that writes `T` runs (access.rs), and the frame holds
        // the container's claim; so the value is not mutably borrowed. The
        // borrow lasts at most the frame ('f): nodes end within it.
        unsafe { &*value }
    }

    /// The resource of type `T`, which this node declared it writes: see
    /// [`NodeBuilder::writes`](super::NodeBuilder::writes).
    ///
    /// ```
    /// use engine_tasks::graph::Resources;
    /// use engine_tasks::{Lane, Pool, TaskGraph};
    ///
    /// struct Score(u32);
    /// let mut builder = TaskGraph::<Resources>::builder();
    /// builder.node("score", Lane::FrameCritical, |cx| cx.res_mut::<Score>().0 += 10)
    ///     .writes::<Score>();
    /// let mut graph = builder.build().unwrap();
    /// let mut resources = Resources::new();
    /// resources.insert(Score(0));
    /// let pool = Pool::builder().threads(1).build().unwrap();
    /// graph.run(&pool, &resources).unwrap();
    /// assert_eq!(resources.get_mut::<Score>().unwrap().0, 10);
    /// ```
    ///
    /// # Panics
    ///
    /// As [`res`](Self::res), if the node did not declare writing `T`.
    #[allow(clippy::mut_from_ref)] // exclusive by the graph's ordering
    pub fn res_mut<T: Send + Sync + 'static>(&self) -> &'f mut T {
        let value = self.resource::<T>(AccessMode::Write);
        // SAFETY: the node declared writing `T`, so while it runs no other
        // node that declared `T` runs (access.rs), and the frame holds the
        // container's claim: nothing else borrows the value. One node calls
        // this on one thread at a time; a second call in the same node
        // would alias, which the `&self` borrow does not prevent, so a node
        // must keep one `&mut` at a time (as with `RefCell`, minus the
        // check).
        unsafe { &mut *value }
    }

    /// The value of `T` after checking the node declared `mode` on it.
    fn resource<T: Send + Sync + 'static>(&self, mode: AccessMode) -> *mut T {
        let type_id = TypeId::of::<T>();
        let declared = self
            .access
            .iter()
            .filter(|a| a.type_id == Some(type_id))
            .any(|a| mode == AccessMode::Read || a.mode == AccessMode::Write);
        if !declared {
            let how = match mode {
                AccessMode::Read => "reads",
                AccessMode::Write => "writes",
            };
            panic!(
                "node {:?} did not declare that it {how} {}",
                self.name,
                type_name::<T>()
            );
        }
        let value = self
            .resources
            .and_then(|resources| resources.value(type_id))
            .unwrap_or_else(|| {
                panic!(
                    "node {:?}: resource {} is declared but not in the frame's Resources",
                    self.name,
                    type_name::<T>()
                )
            });
        // The box holds a `T`: `Resources` files values under their type.
        value.as_ptr() as *mut T
    }
}

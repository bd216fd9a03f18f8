//! What a node (or a run condition) sees while it runs: the frame's data,
//! the pool, the frame's number, and the resources it declared.
//!
//! # Borrowing resources
//!
//! The graph keeps nodes that conflict on a resource apart (`access.rs`),
//! so no other node borrows what a node declared. Within the node, borrows
//! follow `RefCell`'s rule: a [`ResMut`] guard excludes every other guard
//! of its type, a [`Res`] guard excludes `ResMut`s; a borrow that breaks it
//! panics, naming the node and the type. Each of the node's declared types
//! has a borrow count (0 free, `n > 0` shared `n` times, -1 borrowed
//! mutably), kept with the graph and touched only by the thread that runs
//! the node, so `Relaxed` suffices: the frame's own synchronisation orders
//! one run of the node before the next, on whatever thread.

use super::access::{Access, AccessMode};
use super::runtime::{BorrowLine, BORROWS_PER_LINE};
use crate::pool::PoolHandle;
use std::any::{type_name, TypeId};
use std::ops::{Deref, DerefMut};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicI32, Ordering};

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
    /// A borrow count for each entry of `access` (module docs), by line;
    /// the first entry of a type counts for the type.
    pub(super) borrows: &'f [BorrowLine],
    /// Beside each entry of `access`: its resource's value in the frame's
    /// container, if it has one (looked up between frames).
    pub(super) resolved: &'f [Resolved],
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
    /// If the node did not declare `T`, the frame's [`Resources`](super::Resources) hold no
    /// `T`, or the node holds a [`ResMut`] of `T`; the message names the
    /// node and the type. The panic fails the node like any other (see
    /// [`FrameError`](super::FrameError)).
    pub fn res<T: Send + Sync + 'static>(&self) -> Res<'_, T> {
        let (value, borrow) = self.resource::<T>(AccessMode::Read);
        // Relaxed: only this node's thread touches the count (module docs).
        let count = borrow.load(Ordering::Relaxed);
        if count < 0 {
            self.already_borrowed::<T>(" mutably");
        }
        borrow.store(count + 1, Ordering::Relaxed);
        Res {
            // SAFETY: the node declared reading (or writing) `T`, so while
            // it runs no node that writes `T` runs (access.rs) and the frame
            // holds the container's claim; within the node no `ResMut` of
            // `T` is alive (the count was not negative) and none can be
            // made while this guard keeps the count above zero. The guard
            // borrows the context, which lives only while the node runs.
            value: unsafe { &*value },
            borrow,
        }
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
    /// As [`res`](Self::res), if the node did not declare writing `T`, or
    /// if it holds another guard of `T`.
    pub fn res_mut<T: Send + Sync + 'static>(&self) -> ResMut<'_, T> {
        let (value, borrow) = self.resource::<T>(AccessMode::Write);
        // Relaxed: as in `res`.
        if borrow.load(Ordering::Relaxed) != 0 {
            self.already_borrowed::<T>("");
        }
        borrow.store(-1, Ordering::Relaxed);
        ResMut {
            // SAFETY: the node declared writing `T`, so while it runs no
            // other node that declared `T` runs (access.rs) and the frame
            // holds the container's claim; within the node no other guard
            // of `T` is alive (the count was zero) and none can be made
            // while this one keeps it at -1.
            value: unsafe { &mut *value },
            borrow,
        }
    }

    /// Panics for a borrow of `T` that another guard of the node excludes
    /// (`how`: " mutably" if that guard is a `ResMut`).
    #[cold]
    fn already_borrowed<T>(&self, how: &str) -> ! {
        panic!(
            "node {:?}: {} is already borrowed{how} in this node",
            self.name,
            type_name::<T>()
        );
    }

    /// The value of `T` and its borrow count, after checking the node
    /// declared `mode` on it.
    fn resource<T: Send + Sync + 'static>(&self, mode: AccessMode) -> (*mut T, &AtomicI32) {
        let type_id = TypeId::of::<T>();
        let mut entries = self
            .access
            .iter()
            .enumerate()
            .filter(|(_, a)| a.type_id == Some(type_id));
        let first = entries.clone().next().map(|(i, _)| i);
        let declared =
            entries.any(|(_, a)| mode == AccessMode::Read || a.mode == AccessMode::Write);
        let Some(first) = first.filter(|_| declared) else {
            let how = match mode {
                AccessMode::Read => "reads",
                AccessMode::Write => "writes",
            };
            panic!(
                "node {:?} did not declare that it {how} {}",
                self.name,
                type_name::<T>()
            );
        };
        let value = self.resolved[first].0.unwrap_or_else(|| {
            panic!(
                "node {:?}: resource {} is declared but not in the frame's Resources",
                self.name,
                type_name::<T>()
            )
        });
        // The box holds a `T`: `Resources` files values under their type,
        // and the entry was looked up under `T`'s.
        let line = &self.borrows[first / BORROWS_PER_LINE];
        (value.as_ptr().cast::<T>(), &line[first % BORROWS_PER_LINE])
    }
}

/// Where a declared resource's value is, looked up between frames; `None`
/// for a raw id or a value the container lacks.
#[derive(Copy, Clone)]
pub(super) struct Resolved(pub(super) Option<NonNull<()>>);

// SAFETY: it points to a `Send + Sync` value of a `Resources` (values must
// be both to be stored), and is only dereferenced through `res`/`res_mut`,
// under the access rules of the module docs.
unsafe impl Send for Resolved {}
// SAFETY: as above.
unsafe impl Sync for Resolved {}

/// A shared borrow of a resource inside a node ([`NodeContext::res`]).
pub struct Res<'a, T> {
    value: &'a T,
    borrow: &'a AtomicI32,
}

impl<T> Deref for Res<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        self.value
    }
}

impl<T> Drop for Res<'_, T> {
    fn drop(&mut self) {
        // Relaxed, and a load and a store rather than one read-modify-write:
        // only the node's thread counts (module docs).
        let count = self.borrow.load(Ordering::Relaxed);
        self.borrow.store(count - 1, Ordering::Relaxed);
    }
}

/// An exclusive borrow of a resource inside a node
/// ([`NodeContext::res_mut`]).
pub struct ResMut<'a, T> {
    value: &'a mut T,
    borrow: &'a AtomicI32,
}

impl<T> Deref for ResMut<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        self.value
    }
}

impl<T> DerefMut for ResMut<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        self.value
    }
}

impl<T> Drop for ResMut<'_, T> {
    fn drop(&mut self) {
        // Relaxed: as above.
        self.borrow.store(0, Ordering::Relaxed);
    }
}

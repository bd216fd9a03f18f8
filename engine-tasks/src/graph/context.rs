//! What a node (or a run condition) sees while it runs: the frame's data,
//! the pool, the frame's number, and the resources it declared.
//!
//! # Borrowing resources
//!
//! The graph keeps nodes that conflict on a resource apart (`access.rs`),
//! so no other node borrows what a node declared. Within the node, borrows
//! follow `RefCell`'s rule: a [`ResMut`] guard excludes every other guard
//! of its type, a [`Res`] guard excludes `ResMut`s; a borrow that breaks it
//! panics, naming the node and the type. A type the node declared only
//! reading needs no count: the node cannot make a `ResMut` of it (that
//! panics as undeclared), so its `Res` guards can never conflict. A node
//! that declared writing any type has a borrow count per declared type, by
//! its place among them (0 free, `n > 0` shared `n` times, -1 borrowed
//! mutably; only a written type's is used), that starts at 0 in each run
//! of the node: the first [`INLINE_BORROWS`] on the stack of the thread
//! that runs it, any more in lines the graph keeps for the node, which that
//! thread zeroes first; a node that writes no type has none. A context is not `Sync`, so only
//! that thread touches them and `Relaxed` suffices; the frame's own
//! synchronisation orders one run of the node before the next, on whatever
//! thread. Since the counts start at 0 in every run, a guard leaked with
//! `mem::forget` cannot fail a later frame.

use super::access::AccessMode;
use crate::pool::PoolHandle;
use crossbeam_utils::CachePadded;
use std::any::{type_name, TypeId};
use std::cell::Cell;
use std::marker::PhantomData;
use std::ops::{Deref, DerefMut};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicI32, Ordering};

/// How many of a node's resource types count their borrows on the stack
/// of the thread that runs it: more than nodes usually declare.
pub(in crate::graph) const INLINE_BORROWS: usize = 16;

/// Borrow counts per cache line, for a node's types past the first
/// [`INLINE_BORROWS`].
pub(in crate::graph) const BORROWS_PER_LINE: usize = 16;

/// Borrow counts of one node's types past its first [`INLINE_BORROWS`], or
/// some of them.
pub(in crate::graph) type BorrowLine = CachePadded<[AtomicI32; BORROWS_PER_LINE]>;

/// The borrow counts a node's run starts with on its stack.
pub(in crate::graph) type InlineBorrows = [AtomicI32; INLINE_BORROWS];

/// One resource type a node declared, with the strongest mode it declared
/// for it (its own declarations and its sets' together), and where the
/// frame's value of it is.
#[derive(Copy, Clone)]
pub(in crate::graph) struct TypedAccess {
    pub(in crate::graph) type_id: TypeId,
    pub(in crate::graph) mode: AccessMode,
    /// The value in the frame's container, looked up between frames;
    /// `None` if the container lacks it.
    pub(in crate::graph) value: Option<NonNull<()>>,
}

// SAFETY: `value` points to a `Send + Sync` value of a `Resources` (values
// must be both to be stored), and is only dereferenced through
// `res`/`res_mut`, under the access rules of the module docs.
unsafe impl Send for TypedAccess {}
// SAFETY: as above.
unsafe impl Sync for TypedAccess {}

/// What a node sees while it runs.
///
/// It belongs to the thread that runs the node (it is not `Sync`): to use
/// the frame's number, data or a resource inside work the node splits
/// across the pool, take them out first, as `hits` below.
///
/// ```compile_fail
/// # use engine_tasks::graph::NodeContext;
/// fn share<T: Sync>(_: &T) {}
/// fn node(cx: &NodeContext<'_, ()>) {
///     share(cx); // does not compile: the context is not `Sync`
/// }
/// ```
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
#[repr(transparent)]
pub struct NodeContext<'f, C: ?Sized> {
    cx: Context<'f>,
    /// The type of the frame's data, which `cx` erases.
    data: PhantomData<&'f C>,
}

/// A [`NodeContext`] with the type of the frame's data erased: what the
/// runtime builds and hands to a node's body or condition, which the
/// builder wrapped to see it as the graph's `NodeContext` (`typed`). So the
/// runtime's code exists once, whatever the graphs' data types.
pub(in crate::graph) struct Context<'f> {
    /// Where the frame's `&'f C` is (a thin pointer, whatever `C`).
    data: NonNull<()>,
    pool: &'f PoolHandle,
    frame: u64,
    name: &'f str,
    access: NodeAccess<'f>,
    /// Not `Sync`: only the thread that runs the node counts its borrows.
    not_sync: PhantomData<Cell<()>>,
}

/// The resources a node declared, and the counts of its borrows of them,
/// for one run of the node (module docs).
#[derive(Copy, Clone)]
pub(in crate::graph) struct NodeAccess<'f> {
    /// The resource types the node declared (its own and its sets').
    pub(in crate::graph) typed: &'f [TypedAccess],
    /// A borrow count for each entry of `typed`, if any entry is a write
    /// (module docs), else none: the first [`INLINE_BORROWS`] here, the
    /// rest in `overflow`, by line.
    pub(in crate::graph) borrows: &'f [AtomicI32],
    /// The lines of its borrow counts past the first [`INLINE_BORROWS`].
    pub(in crate::graph) overflow: &'f [BorrowLine],
}

impl<'f> Context<'f> {
    /// The context of a run of node `name` in frame `frame` on `pool`,
    /// with the node's resource types and borrow counts.
    ///
    /// # Safety
    ///
    /// `data` points to the running frame's `&C`, `C` being the data type
    /// of the graph the node belongs to, and stays readable while the
    /// context lives: the node's body and conditions read it as such
    /// (`builder.rs`).
    #[inline]
    pub(in crate::graph) unsafe fn new(
        data: NonNull<()>,
        pool: &'f PoolHandle,
        frame: u64,
        name: &'f str,
        access: NodeAccess<'f>,
    ) -> Self {
        Context {
            data,
            pool,
            frame,
            name,
            access,
            not_sync: PhantomData,
        }
    }

    /// This context as a graph's, whose frame data is a `C`.
    ///
    /// # Safety
    ///
    /// `C` is the data type `self` was made for (`Context::new`). The
    /// reference `data` gives out lives for `'f`, which may outlast the
    /// frame: only closures generic over `'f` (a node's body or
    /// condition) may see the result.
    #[inline]
    pub(in crate::graph) unsafe fn typed<C: ?Sized>(&self) -> &NodeContext<'f, C> {
        let typed: *const Context<'f> = self;
        // SAFETY: `NodeContext` is `repr(transparent)` over a `Context`
        // (its other field is a zero-sized `PhantomData` of alignment 1),
        // and the frame data's type is the caller's to vouch for.
        unsafe { &*typed.cast::<NodeContext<'f, C>>() }
    }
}

impl<'f, C: ?Sized> NodeContext<'f, C> {
    /// The frame's data, borrowed from the caller of [`TaskGraph::run`](super::TaskGraph::run).
    pub fn data(&self) -> &'f C {
        // SAFETY: a `NodeContext<C>` is made only by `Context::typed`,
        // whose caller vouched that `data` points to the frame's `&'f C`.
        unsafe { self.cx.data.cast::<&'f C>().read() }
    }

    /// The pool the frame runs on: for `parallel_for`, `scope`, `join` inside
    /// the node, or background work that outlives the frame.
    pub fn pool(&self) -> &'f PoolHandle {
        self.cx.pool
    }

    /// The frame's number, counting from 0 for the graph's first frame.
    pub fn frame(&self) -> u64 {
        self.cx.frame
    }

    /// The node's name.
    pub fn name(&self) -> &'f str {
        self.cx.name
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
    #[inline]
    pub fn res<T: Send + Sync + 'static>(&self) -> Res<'_, T> {
        let (value, entry, at) = self.resource::<T>(AccessMode::Read);
        // A type declared only read has no count (module docs).
        let borrow = (entry.mode == AccessMode::Write).then(|| {
            let borrow = self.count_of(at);
            // Relaxed: only this node's thread touches the count (module
            // docs).
            let count = borrow.load(Ordering::Relaxed);
            if count < 0 {
                self.already_borrowed::<T>(" mutably");
            }
            borrow.store(count + 1, Ordering::Relaxed);
            borrow
        });
        Res {
            // SAFETY: the node declared reading (or writing) `T`, so while
            // it runs no node that writes `T` runs (access.rs) and the frame
            // holds the container's claim. Within the node no `ResMut` of
            // `T` is alive and none can be made while this guard lives:
            // if the node declared writing `T`, the count was not negative
            // and this guard keeps it above zero; if only reading, `res_mut`
            // refuses `T`. The guard borrows the context, which lives only
            // while the node runs.
            value: unsafe { &*value },
            borrow,
            on_node_thread: PhantomData,
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
    #[inline]
    pub fn res_mut<T: Send + Sync + 'static>(&self) -> ResMut<'_, T> {
        let (value, _, at) = self.resource::<T>(AccessMode::Write);
        let borrow = self.count_of(at);
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
            on_node_thread: PhantomData,
        }
    }

    /// Panics for a borrow of `T` that another guard of the node excludes
    /// (`how`: " mutably" if that guard is a `ResMut`).
    #[cold]
    fn already_borrowed<T>(&self, how: &str) -> ! {
        panic!(
            "node {:?}: {} is already borrowed{how} in this node",
            self.cx.name,
            type_name::<T>()
        );
    }

    /// The value of `T`, its entry and the entry's place, after checking
    /// the node declared `mode` on it.
    #[inline]
    fn resource<T: Send + Sync + 'static>(
        &self,
        mode: AccessMode,
    ) -> (*mut T, &TypedAccess, usize) {
        let type_id = TypeId::of::<T>();
        // Most nodes declare one type, or use their first one most; a
        // node's types are unique, so a match at 0 is the only one.
        let at = match self.cx.access.typed.first() {
            Some(first) if first.type_id == type_id => 0,
            _ => match self
                .cx
                .access
                .typed
                .iter()
                .position(|t| t.type_id == type_id)
            {
                Some(at) => at,
                None => self.undeclared::<T>(mode),
            },
        };
        let entry = &self.cx.access.typed[at];
        if mode == AccessMode::Write && entry.mode == AccessMode::Read {
            self.undeclared::<T>(mode)
        }
        let Some(value) = entry.value else {
            self.missing::<T>()
        };
        // The value is a `T`: `Resources` files values under their type,
        // and the entry was looked up under `T`'s.
        (value.as_ptr().cast::<T>(), entry, at)
    }

    /// The borrow count of the node's type at place `at`, which it
    /// declared writing (so the node has counts: `run_body`).
    #[inline]
    fn count_of(&self, at: usize) -> &AtomicI32 {
        match self.cx.access.borrows.get(at) {
            Some(borrow) => borrow,
            None => {
                debug_assert_eq!(self.cx.access.borrows.len(), INLINE_BORROWS);
                let past = at - INLINE_BORROWS;
                &self.cx.access.overflow[past / BORROWS_PER_LINE][past % BORROWS_PER_LINE]
            }
        }
    }

    /// Panics for an access of `T` in `mode` the node did not declare.
    #[cold]
    fn undeclared<T>(&self, mode: AccessMode) -> ! {
        let how = match mode {
            AccessMode::Read => "reads",
            AccessMode::Write => "writes",
        };
        panic!(
            "node {:?} did not declare that it {how} {}",
            self.cx.name,
            type_name::<T>()
        );
    }

    /// Panics for a declared `T` the frame's container does not hold.
    #[cold]
    fn missing<T>(&self) -> ! {
        panic!(
            "node {:?}: resource {} is declared but not in the frame's Resources",
            self.cx.name,
            type_name::<T>()
        )
    }
}

/// Keeps a guard on the node's thread (not `Send`, since its drop counts
/// there) while letting `&guard` be shared (`Sync`, since it only derefs):
/// a `MutexGuard` is exactly that.
type OnNodeThread = PhantomData<std::sync::MutexGuard<'static, ()>>;

/// A shared borrow of a resource inside a node ([`NodeContext::res`]).
///
/// It is dropped on the node's thread, like the context, but a reference
/// to it can be shared with work the node splits across the pool.
///
/// ```compile_fail
/// # use engine_tasks::graph::NodeContext;
/// # use engine_tasks::graph::Resources;
/// fn send<T: Send>(_: T) {}
/// fn node(cx: &NodeContext<'_, Resources>) {
///     send(cx.res::<u32>()); // does not compile: a guard is not `Send`
/// }
/// ```
pub struct Res<'a, T> {
    value: &'a T,
    /// `None` for a type the node declared only reading (module docs).
    borrow: Option<&'a AtomicI32>,
    on_node_thread: OnNodeThread,
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
        if let Some(borrow) = self.borrow {
            let count = borrow.load(Ordering::Relaxed);
            borrow.store(count - 1, Ordering::Relaxed);
        }
    }
}

/// An exclusive borrow of a resource inside a node
/// ([`NodeContext::res_mut`]). Like [`Res`], it stays on the node's thread.
pub struct ResMut<'a, T> {
    value: &'a mut T,
    borrow: &'a AtomicI32,
    on_node_thread: OnNodeThread,
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

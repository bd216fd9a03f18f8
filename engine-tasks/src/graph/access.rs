//! Declared access: what a node reads and writes, the conflicts between
//! nodes that follow from it, and the [`Resources`] container whose values
//! nodes borrow without a lock.
//!
//! # Access and conflicts
//!
//! A node declares accesses to [`AccessId`]s: one per resource type
//! (`reads::<T>()`, `writes::<T>()`), or plain ids from anywhere else (an
//! ECS's component ids, say; [`AccessId::from_raw`]). Two nodes conflict if
//! one writes an id the other reads or writes. Conflicting nodes never run
//! at the same time: when the graph is built, every conflicting pair that no
//! declared ordering (direct, through sets, or transitive) orders gets an
//! ordering edge, the node added to the builder first running first. Such
//! pairs are the graph's *ambiguities*: [`TaskGraph::ambiguities`] lists
//! them, and [`TaskGraphBuilder::ambiguities`] can make them an error.
//!
//! Ordering edges were chosen over exclusion at run time (each node taking
//! the locks of what it touches as it starts): they cost nothing per node
//! in a frame, keep every frame's order the same (a frame's result does not
//! depend on which thread came first), and leave the scheduling, and its
//! critical-path-first priorities, exactly as for explicit edges.
//! `benches/graph_features.rs` measures them against nodes that lock what
//! they touch, and against bevy's executor, which keeps conflicting
//! systems apart at run time (its `access` groups).
//!
//! # Resources
//!
//! A [`Resources`] container holds one value per type. Inside a frame, a
//! node that declared reading `T` gets `&T` from [`NodeContext::res`], and
//! one that declared writing `T` gets `&mut T` from
//! [`NodeContext::res_mut`]: the ordering edges above make those borrows
//! exclusive, so no lock is needed. An access the node did not declare
//! panics with the node's and the type's names. A frame claims the
//! container for its whole run, so two frames (of two graphs, or one graph
//! inside another's node) cannot use it at once: the second one's
//! `TaskGraph::run` returns an error instead.
//!
//! [`TaskGraph::ambiguities`]: super::TaskGraph::ambiguities
//! [`TaskGraphBuilder::ambiguities`]: super::TaskGraphBuilder::ambiguities
//! [`NodeContext::res`]: super::NodeContext::res
//! [`NodeContext::res_mut`]: super::NodeContext::res_mut

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::fmt;
use std::hash::{BuildHasher, Hasher};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// Something a node reads or writes, for the conflict rules (see the module
/// docs). Resource types get one from their `TypeId`; an ECS can use its
/// own component ids through [`AccessId::from_raw`].
///
/// ```
/// use engine_tasks::graph::AccessId;
///
/// struct Positions;
/// assert_eq!(AccessId::of::<Positions>(), AccessId::of::<Positions>());
/// assert_ne!(AccessId::of::<Positions>(), AccessId::from_raw(7));
/// ```
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct AccessId(u64);

impl AccessId {
    /// The id of resource type `T`.
    pub fn of<T: 'static>() -> AccessId {
        // The hash of the `TypeId`, with the top bit set so that it cannot
        // equal a raw id below 2^63.
        let mut hasher = std::hash::BuildHasherDefault::<TypeIdHasher>::default().build_hasher();
        std::hash::Hash::hash(&TypeId::of::<T>(), &mut hasher);
        AccessId(hasher.finish() | 1 << 63)
    }

    /// An id from elsewhere (an ECS's component or resource ids). Ids of
    /// resource types have the top bit set; raw ids should stay below 2^63
    /// so the two never meet.
    pub const fn from_raw(raw: u64) -> AccessId {
        AccessId(raw)
    }

    /// The id's number.
    pub const fn raw(self) -> u64 {
        self.0
    }
}

/// Folds a `TypeId`'s hash input into 64 bits (FNV-1a), the same in every
/// run of one build of the program.
#[derive(Default)]
struct TypeIdHasher(u64);

impl Hasher for TypeIdHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        let mut hash = if self.0 == 0 {
            0xcbf2_9ce4_8422_2325
        } else {
            self.0
        };
        for &byte in bytes {
            hash = (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3);
        }
        self.0 = hash;
    }
}

/// Whether an access reads or writes.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum AccessMode {
    /// Shared: any number of readers at once.
    Read,
    /// Exclusive: no other reader or writer at the same time.
    Write,
}

/// One declared access of a node: the id, how, and a name for messages
/// (the type's name, or what the caller gave with a raw id).
#[derive(Copy, Clone, Debug, PartialEq)]
pub(super) struct Access {
    pub(super) id: AccessId,
    pub(super) mode: AccessMode,
    pub(super) name: &'static str,
    /// The type, for accesses declared as resource types.
    pub(super) type_id: Option<TypeId>,
}

/// Whether two accesses of different nodes conflict.
pub(super) fn conflict(a: &Access, b: &Access) -> bool {
    a.id == b.id && (a.mode == AccessMode::Write || b.mode == AccessMode::Write)
}

/// Whether two nodes' access lists conflict, and on what (the first id).
pub(super) fn conflict_between(a: &[Access], b: &[Access]) -> Option<&'static str> {
    a.iter()
        .find_map(|x| b.iter().find(|y| conflict(x, y)).map(|_| x.name))
}

/// One value per type, borrowed by nodes through their declared access;
/// see the module docs.
///
/// ```
/// use engine_tasks::graph::Resources;
///
/// struct Gravity(f32);
/// let mut resources = Resources::new();
/// resources.insert(Gravity(-9.8));
/// resources.get_mut::<Gravity>().unwrap().0 = -1.6; // the moon
/// assert_eq!(resources.get_mut::<Gravity>().unwrap().0, -1.6);
/// assert!(resources.contains::<Gravity>());
/// assert!(resources.remove::<Gravity>().is_some());
/// ```
pub struct Resources {
    values: HashMap<TypeId, Slot>,
    /// Claimed by the frame that uses the container (module docs).
    in_frame: AtomicBool,
    /// Unique to this container, and bumped by every insert and removal:
    /// a graph that looked its nodes' values up keeps them while both
    /// stay the same (`Resources::key`).
    id: u64,
    generation: u64,
}

impl Default for Resources {
    fn default() -> Self {
        /// The next container's id.
        static NEXT_ID: AtomicU64 = AtomicU64::new(0);
        Resources {
            values: HashMap::default(),
            in_frame: AtomicBool::new(false),
            // Relaxed: only uniqueness matters.
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            generation: 0,
        }
    }
}

/// A stored value: owned through a raw pointer (made by `Box::into_raw`,
/// freed on drop), so that handing out borrows never goes through a
/// reference to the box while another thread borrows the value.
struct Slot {
    value: NonNull<dyn Any + Send + Sync>,
    name: &'static str,
}

impl Slot {
    fn new<T: Send + Sync + 'static>(value: T) -> Slot {
        let boxed: Box<dyn Any + Send + Sync> = Box::new(value);
        Slot {
            value: NonNull::from(Box::leak(boxed)),
            name: std::any::type_name::<T>(),
        }
    }

    /// The value, out of the slot.
    fn into_inner<T: 'static>(self) -> Option<T> {
        let slot = std::mem::ManuallyDrop::new(self);
        // SAFETY: `value` came from `Box::leak` in `new` and is freed only
        // here or in `drop`, which `ManuallyDrop` skips.
        let boxed = unsafe { Box::from_raw(slot.value.as_ptr()) };
        boxed.downcast().ok().map(|b| *b)
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        // SAFETY: as in `into_inner`; the slot is dropped once.
        drop(unsafe { Box::from_raw(self.value.as_ptr()) });
    }
}

// SAFETY: the slot owns a `Send + Sync` value.
unsafe impl Send for Slot {}
// SAFETY: the value is `Send + Sync`. A shared slot hands out borrows of its
// value only through `NodeContext::res`/`res_mut`, inside a frame that
// claimed the container (`Resources::claim`), whose graph orders every
// writer of a value apart from every other node that declared it (module
// docs); so a `&mut` never coexists with another borrow of the same value.
// Everything else needs `&mut Resources`.
unsafe impl Sync for Slot {}

impl fmt::Debug for Resources {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut names: Vec<&str> = self.values.values().map(|slot| slot.name).collect();
        names.sort_unstable();
        f.debug_struct("Resources").field("types", &names).finish()
    }
}

/// A frame's hold on its [`Resources`]: dropping it gives the container
/// back, also when a panic unwinds out of the frame (else every later frame
/// on the container would find it in use for good).
pub(super) struct FrameClaim<'r>(&'r Resources);

impl Drop for FrameClaim<'_> {
    fn drop(&mut self) {
        // Release: pairs with the Acquire in `Resources::claim`.
        self.0.in_frame.store(false, Ordering::Release);
    }
}

impl Resources {
    /// An empty container.
    pub fn new() -> Resources {
        Resources::default()
    }

    /// Stores `value`, returning the one it replaces.
    pub fn insert<T: Send + Sync + 'static>(&mut self, value: T) -> Option<T> {
        self.generation += 1;
        let old = self.values.insert(TypeId::of::<T>(), Slot::new(value))?;
        old.into_inner()
    }

    /// Takes the value of type `T` out.
    pub fn remove<T: 'static>(&mut self) -> Option<T> {
        self.generation += 1;
        self.values.remove(&TypeId::of::<T>())?.into_inner()
    }

    /// The value of type `T`, between frames.
    pub fn get_mut<T: 'static>(&mut self) -> Option<&mut T> {
        let slot = self.values.get(&TypeId::of::<T>())?;
        // SAFETY: `&mut self`: no frame uses the container (a frame borrows
        // it shared), so nothing else borrows the value.
        unsafe { &mut *slot.value.as_ptr() }.downcast_mut()
    }

    /// Whether a value of type `T` is stored.
    pub fn contains<T: 'static>(&self) -> bool {
        self.values.contains_key(&TypeId::of::<T>())
    }

    /// Claims the container for a frame, until the claim is dropped (at
    /// the frame's end, or as an unwind leaves it); `None` if another
    /// frame has it.
    pub(super) fn claim(&self) -> Option<FrameClaim<'_>> {
        // Acquire: pairs with the Release in `FrameClaim::drop`, so this
        // frame sees what the previous one wrote through its borrows.
        self.in_frame
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
            .then_some(FrameClaim(self))
    }

    /// Which container this is, and which of its contents: values looked
    /// up under one key stay where they are until the key changes (their
    /// boxes move only on insert and removal).
    pub(super) fn key(&self) -> (u64, u64) {
        (self.id, self.generation)
    }

    /// The value of type `type_id` and its type's name, or `None`. The
    /// caller decides by the module's rules whether it may be dereferenced,
    /// and how.
    pub(super) fn value(&self, type_id: TypeId) -> Option<NonNull<dyn Any + Send + Sync>> {
        self.values.get(&type_id).map(|slot| slot.value)
    }
}

impl AsRef<Resources> for Resources {
    fn as_ref(&self) -> &Resources {
        self
    }
}

//! Typed handles and the slots behind them.
//!
//! A slot is one load of one path as one type: its bookkeeping
//! ([`SlotCore`], under a mutex that only loaders, readers and requests
//! take) and its published value (an `ArcSwapOption`, written only by
//! [`AssetStreamer::update`](super::AssetStreamer::update) and read without
//! a lock by [`Handle::get`]). A [`Handle`] is an `Arc` to its slot, so the
//! slot and its value are freed with the last handle (and the last load
//! job, which holds the slot while it runs).

use super::loader::ErasedLoader;
use super::{AssetError, AssetErrorKind, AssetId};
use arc_swap::ArcSwapOption;
use std::any::Any;
use std::fmt;
use std::marker::PhantomData;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};

/// A decoded value before its type is known again.
pub(super) type ErasedValue = Arc<dyn Any + Send + Sync>;

/// Where a handle's load stands, as of the last
/// [`update`](super::AssetStreamer::update).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum LoadStatus {
    /// Not loaded yet.
    Loading,
    /// A value is there ([`Handle::get`]); a reload may be under way.
    Loaded,
    /// The load failed ([`Handle::error`]).
    Failed,
    /// Every request of the load was cancelled before it ended.
    Cancelled,
}

impl LoadStatus {
    fn from_u8(v: u8) -> LoadStatus {
        match v {
            1 => LoadStatus::Loaded,
            2 => LoadStatus::Failed,
            3 => LoadStatus::Cancelled,
            _ => LoadStatus::Loading,
        }
    }

    pub(super) fn as_u8(self) -> u8 {
        match self {
            LoadStatus::Loading => 0,
            LoadStatus::Loaded => 1,
            LoadStatus::Failed => 2,
            LoadStatus::Cancelled => 3,
        }
    }
}

/// What [`update`](super::AssetStreamer::update) reports.
#[derive(Debug)]
#[non_exhaustive]
pub enum LoadEvent {
    /// A request ended with a value, readable through its handle from this
    /// frame on.
    Loaded {
        /// The request.
        id: AssetId,
        /// The path as requested.
        path: PathBuf,
    },
    /// A request ended without a value (cancelled, or failed: the reason).
    Failed(AssetError),
    /// A reload swapped a new value in, readable from this frame on.
    Reloaded {
        /// The path, relative to the root.
        path: PathBuf,
        /// The value's version: 1 for the first load, one more per reload.
        generation: u64,
    },
    /// A reload failed; the old value stays.
    ReloadFailed {
        /// The path, relative to the root.
        path: PathBuf,
        /// Why.
        kind: AssetErrorKind,
    },
}

/// One request of a slot that has not ended.
pub(super) struct Req {
    pub(super) id: AssetId,
    pub(super) priority: i32,
}

/// A decoded value waiting for its dependencies.
pub(super) struct Waiting {
    pub(super) value: ErasedValue,
    pub(super) pending: usize,
    pub(super) failed: Option<AssetErrorKind>,
}

/// A slot's bookkeeping; see the module docs of `assets`.
#[derive(Default)]
pub(super) struct SlotState {
    /// A load job is queued, reading, decoding or waiting on dependencies.
    pub(super) loading: bool,
    /// That job is a reload (it has no requests; its end is a
    /// `Reloaded`/`ReloadFailed` event).
    pub(super) reload: bool,
    /// Load again once the running job ends (the file changed under it).
    pub(super) dirty: bool,
    /// Requests not yet ended.
    pub(super) requests: Vec<Req>,
    /// The last ended load: `Ok` once a value was committed (a failed
    /// reload keeps it), the error of a failed first load.
    pub(super) outcome: Option<Result<(), Arc<AssetErrorKind>>>,
    /// Slots waiting for this load to end.
    pub(super) dependents: Vec<Arc<dyn AnySlot>>,
    /// Slots whose last load depended on this one (reloaded with it).
    pub(super) reverse_deps: Vec<Weak<dyn AnySlot>>,
    /// The slots this one's last decoded load depended on (the other
    /// direction of `reverse_deps`, rewritten by every load).
    pub(super) deps: Vec<Weak<dyn AnySlot>>,
    /// The reload cascade this slot last reloaded in (0: none); a slot
    /// reloads at most once per cascade, so a cycle made by reloads ends.
    pub(super) cascade: u64,
    /// This slot's value while its dependencies load.
    pub(super) waiting: Option<Waiting>,
    /// The priority of the load (the highest of its requests').
    pub(super) priority: i32,
    /// Values committed (the next generation is one more).
    pub(super) committed: u64,
}

/// The type-independent part of a slot.
pub(super) struct SlotCore {
    pub(super) id: u64,
    /// Normalised, relative to the root.
    pub(super) path: PathBuf,
    pub(super) loader: Option<Arc<dyn ErasedLoader>>,
    state: Mutex<SlotState>,
    /// Loads that asked for this one and have not yet registered as waiting.
    pins: AtomicUsize,
    status: AtomicU8,
    generation: AtomicU64,
    error: ArcSwapOption<AssetErrorKind>,
}

impl SlotCore {
    pub(super) fn new(id: u64, path: PathBuf, loader: Option<Arc<dyn ErasedLoader>>) -> Self {
        SlotCore {
            id,
            path,
            loader,
            state: Mutex::new(SlotState::default()),
            pins: AtomicUsize::new(0),
            status: AtomicU8::new(0),
            generation: AtomicU64::new(0),
            error: ArcSwapOption::empty(),
        }
    }

    pub(super) fn lock(&self) -> MutexGuard<'_, SlotState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(super) fn pin(&self) {
        // AcqRel with `unpin`/`wanted`: a count, read under the state lock.
        self.pins.fetch_add(1, Ordering::AcqRel);
    }

    pub(super) fn unpin(&self) {
        let before = self.pins.fetch_sub(1, Ordering::AcqRel);
        debug_assert!(before > 0, "a dependency pin given back twice");
    }

    /// Someone still wants the running load.
    pub(super) fn wanted(&self, state: &SlotState) -> bool {
        !state.requests.is_empty()
            || !state.dependents.is_empty()
            || state.reload
            || self.pins.load(Ordering::Acquire) > 0
    }
}

/// A slot of some value type.
pub(super) trait AnySlot: Send + Sync {
    fn core(&self) -> &SlotCore;
    /// The slot as `Any`, to get its type back.
    fn as_any(self: Arc<Self>) -> Arc<dyn Any + Send + Sync>;
    /// Swaps in a value (on the frame thread, in `update`); returns the
    /// one it replaced, for the caller to free elsewhere.
    fn publish(&self, value: ErasedValue) -> Option<ErasedValue>;
}

/// A slot for values of type `T`.
pub(super) struct Slot<T> {
    pub(super) core: SlotCore,
    value: ArcSwapOption<T>,
}

impl<T: Send + Sync + 'static> Slot<T> {
    pub(super) fn new(core: SlotCore) -> Arc<Slot<T>> {
        Arc::new(Slot {
            core,
            value: ArcSwapOption::empty(),
        })
    }
}

impl<T: Send + Sync + 'static> AnySlot for Slot<T> {
    fn core(&self) -> &SlotCore {
        &self.core
    }

    fn as_any(self: Arc<Self>) -> Arc<dyn Any + Send + Sync> {
        self
    }

    fn publish(&self, value: ErasedValue) -> Option<ErasedValue> {
        let value = value.downcast::<T>().ok()?;
        let old = self.value.swap(Some(value))?;
        Some(old)
    }
}

/// One commit queued for the next `update`: what changes in a slot, and the
/// events that go with it.
pub(super) struct Commit {
    pub(super) slot: Arc<dyn AnySlot>,
    pub(super) value: Option<ErasedValue>,
    pub(super) status: Option<LoadStatus>,
    pub(super) error: Option<Arc<AssetErrorKind>>,
    pub(super) events: Vec<LoadEvent>,
}

impl Commit {
    pub(super) fn events(slot: Arc<dyn AnySlot>, events: Vec<LoadEvent>) -> Commit {
        Commit {
            slot,
            value: None,
            status: None,
            error: None,
            events,
        }
    }

    /// Applies it (on the frame thread; no lock). Returns what it leaves to
    /// free: the slot, and the value it replaced, for the caller to drop off
    /// the frame thread (the commit may hold the slot's last `Arc`).
    pub(super) fn apply(self, out: &mut Vec<LoadEvent>) -> Leftover {
        let core = self.slot.core();
        let mut replaced = None;
        // Release: a handle that sees the new generation or status (Acquire)
        // sees the value stored before it.
        let replaced_any = self.value.is_some();
        if let Some(value) = self.value {
            replaced = self.slot.publish(value);
            core.generation.fetch_add(1, Ordering::Release);
        }
        // An error stands until a value is committed or the load restarts.
        match self.error {
            Some(error) => core.error.store(Some(error)),
            None if replaced_any || self.status == Some(LoadStatus::Loading) => {
                core.error.store(None)
            }
            None => {}
        }
        if let Some(status) = self.status {
            core.status.store(status.as_u8(), Ordering::Release);
        }
        out.extend(self.events);
        (self.slot, replaced)
    }
}

/// What an applied commit leaves to free: its slot, and the value it
/// replaced.
pub(super) type Leftover = (Arc<dyn AnySlot>, Option<ErasedValue>);

/// A typed handle to an asset, from
/// [`AssetStreamer::load`](super::AssetStreamer::load). Reading it takes no
/// lock; its value changes only inside
/// [`AssetStreamer::update`](super::AssetStreamer::update). Clones share
/// the request; the value is freed when the last handle to it is dropped.
///
/// ```
/// use engine_tasks::assets::{AssetStreamer, LoadStatus};
/// use engine_tasks::{BlockingPool, Pool};
///
/// let root = std::env::temp_dir().join(format!("handle-doc-{}", std::process::id()));
/// std::fs::create_dir_all(&root).unwrap();
/// std::fs::write(root.join("names.bin"), b"ada grace").unwrap();
///
/// let pool = Pool::builder().threads(1).build().unwrap();
/// let blocking = BlockingPool::new();
/// let streamer = AssetStreamer::new(&root, &pool, &blocking, 2).unwrap();
/// let names = streamer.load::<Vec<u8>>("names.bin", 0);
/// let same = streamer.load::<Vec<u8>>("names.bin", 0); // shares the load
///
/// let mut events = Vec::new();
/// while names.status() == LoadStatus::Loading {
///     streamer.update(&mut events); // once per frame
///     std::thread::yield_now();
/// }
/// assert_eq!(names.get().unwrap().as_slice(), b"ada grace");
/// assert!(std::sync::Arc::ptr_eq(&names.get().unwrap(), &same.get().unwrap()));
/// std::fs::remove_dir_all(&root).unwrap();
/// ```
pub struct Handle<T> {
    id: AssetId,
    slot: Arc<Slot<T>>,
    _type: PhantomData<fn() -> T>,
}

impl<T: Send + Sync + 'static> Handle<T> {
    pub(super) fn new(id: AssetId, slot: Arc<Slot<T>>) -> Handle<T> {
        Handle {
            id,
            slot,
            _type: PhantomData,
        }
    }

    /// The request that made this handle (for
    /// [`cancel`](super::AssetStreamer::cancel) and
    /// [`set_priority`](super::AssetStreamer::set_priority)). A dependency's
    /// handle has an id of its own that no event names.
    pub fn id(&self) -> AssetId {
        self.id
    }

    /// The asset's path, relative to the root.
    pub fn path(&self) -> &Path {
        &self.slot.core.path
    }

    /// The value, if loaded. Lock-free.
    pub fn get(&self) -> Option<Arc<T>> {
        self.slot.value.load_full()
    }

    /// Where the load stands. Lock-free.
    pub fn status(&self) -> LoadStatus {
        // Acquire: pairs with the Release in `Commit::apply`.
        LoadStatus::from_u8(self.slot.core.status.load(Ordering::Acquire))
    }

    /// Values published so far: 1 after the first load, one more per
    /// reload. Lock-free.
    pub fn generation(&self) -> u64 {
        // Acquire: pairs with the Release in `Commit::apply`.
        self.slot.core.generation.load(Ordering::Acquire)
    }

    /// Why the load failed (or the last reload), if it did. Lock-free.
    pub fn error(&self) -> Option<Arc<AssetErrorKind>> {
        self.slot.core.error.load_full()
    }

    /// Whether two handles share one load.
    pub fn same_load(&self, other: &Handle<T>) -> bool {
        Arc::ptr_eq(&self.slot, &other.slot)
    }
}

impl<T> Clone for Handle<T> {
    fn clone(&self) -> Self {
        Handle {
            id: self.id,
            slot: self.slot.clone(),
            _type: PhantomData,
        }
    }
}

impl<T> fmt::Debug for Handle<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Handle")
            .field("id", &self.id)
            .field("path", &self.slot.core.path)
            .field("type", &std::any::type_name::<T>())
            .finish()
    }
}

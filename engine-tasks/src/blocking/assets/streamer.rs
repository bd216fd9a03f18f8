//! The streamer itself: requests by priority, reader jobs on the blocking
//! pool, decoding on the background lane, one event per request (see the
//! parent module for the pipeline). Typed loads (`typed.rs`) share the
//! queue, the readers and the byte budget.

use super::budget::{Budget, Ticket};
use super::codec::{AssetDecoder, DECODE_STEP, MAX_ASSET_SIZE};
use super::handle::{AnySlot, Commit};
use super::loader::ErasedLoader;
use super::waits::WaitGraph;
use super::{Asset, AssetError, AssetErrorKind, AssetEvent, AssetId, StreamProgress};
use crate::blocking::{BlockingError, BlockingPoolHandle};
use crate::lane::Lane;
use crate::pool::PoolHandle;
use std::any::TypeId;
use std::cell::Cell;
use std::cmp::Reverse;
use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::fmt;
use std::io::{self, Read};
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock, TryLockError, Weak};

/// What a queued request loads.
pub(super) enum Job {
    /// A request of [`AssetStreamer::request`]: ETA1 bytes, one event.
    Legacy(AssetId),
    /// A typed load (`typed.rs`).
    Slot(Arc<dyn AnySlot>),
}

pub(super) struct Pending {
    pub(super) path: PathBuf,
    pub(super) job: Job,
}

/// Identifies a queued job, to change its priority.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub(super) enum QueueKey {
    Legacy(AssetId),
    Slot(u64),
}

impl Pending {
    fn key(&self) -> QueueKey {
        match &self.job {
            Job::Legacy(id) => QueueKey::Legacy(*id),
            Job::Slot(slot) => QueueKey::Slot(slot.core().id),
        }
    }
}

/// A slot's identity: path, value type, and the loader type of a
/// `load_with` (registered loaders: `None`).
pub(super) type SlotKey = (PathBuf, TypeId, Option<TypeId>);

#[derive(Default)]
pub(super) struct Requests {
    /// Waiting jobs, the most urgent last: (priority, earlier first).
    pending: BTreeMap<(i32, Reverse<u64>), Pending>,
    /// Where each waiting job is in `pending`.
    queued: HashMap<QueueKey, (i32, Reverse<u64>)>,
    next_seq: u64,
    /// Requests not yet ended.
    live: HashSet<AssetId>,
    cancelled: HashSet<AssetId>,
    /// Reader jobs queued or running on the blocking pool.
    readers: usize,
    pub(super) next_id: u64,
    /// Live typed loads, to share them.
    pub(super) slots: HashMap<SlotKey, Weak<dyn AnySlot>>,
    /// Typed requests (for `cancel` and `set_priority`); an entry may
    /// outlive its request (checked against the slot).
    pub(super) typed: HashMap<AssetId, Weak<dyn AnySlot>>,
    pub(super) next_slot: u64,
}

impl Requests {
    /// Whether `job` is a byte request that was cancelled (a typed load's
    /// cancellation is kept with its slot).
    fn is_cancelled(&self, job: &Job) -> bool {
        match job {
            Job::Legacy(id) => self.cancelled.contains(id),
            Job::Slot(_) => false,
        }
    }

    pub(super) fn push(&mut self, priority: i32, pending: Pending) {
        let key = (priority, Reverse(self.next_seq));
        self.next_seq += 1;
        self.queued.insert(pending.key(), key);
        self.pending.insert(key, pending);
    }

    fn pop(&mut self) -> Option<Pending> {
        let (_, pending) = self.pending.pop_last()?;
        self.queued.remove(&pending.key());
        Some(pending)
    }

    /// Takes a waiting job out of the queue.
    pub(super) fn remove(&mut self, key: QueueKey) -> Option<Pending> {
        let at = self.queued.remove(&key)?;
        self.pending.remove(&at)
    }

    /// Moves a waiting job to `priority` (keeping its place among equals).
    /// `false` if it is not waiting.
    pub(super) fn reprioritise(&mut self, key: QueueKey, priority: i32) -> bool {
        let Some(at) = self.queued.get_mut(&key) else {
            return false;
        };
        let old = *at;
        at.0 = priority;
        let new = *at;
        let pending = self.pending.remove(&old).expect("queued jobs are pending");
        self.pending.insert(new, pending);
        true
    }

    /// A fresh request id.
    pub(super) fn new_id(&mut self) -> AssetId {
        let id = AssetId(self.next_id);
        self.next_id += 1;
        id
    }
}

#[derive(Default)]
pub(super) struct Counters {
    pub(super) requested: AtomicU64,
    pub(super) loaded: AtomicU64,
    pub(super) failed: AtomicU64,
    pub(super) cancelled: AtomicU64,
    bytes_read: AtomicU64,
    bytes_decoded: AtomicU64,
    reads_in_flight: AtomicUsize,
    pub(super) undecoded: AtomicU64,
}

/// How an [`AssetStreamer`] reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct StreamerConfig {
    /// Reads at once on the blocking pool, at least 1. Default: 2.
    pub max_reads_in_flight: usize,
    /// Largest file read, in bytes: a larger file ends its request with
    /// [`AssetErrorKind::TooLarge`], checked from its metadata before any
    /// byte is read and again while reading (a file can grow). Default:
    /// [`MAX_ASSET_SIZE`] (1 GiB).
    pub max_file_size: u64,
    /// Most file bytes read but not yet decoded: a read waits (on its
    /// blocking thread) until decoders catch up, so a burst of requests
    /// cannot hold gigabytes of undecoded files. A file larger than this
    /// is read once nothing is held (every byte admitted before it has been
    /// decoded): under steady streaming it waits until the budget drains,
    /// and reads that ask after it wait behind it (reads are admitted in
    /// order). Default: 256 MiB.
    pub max_undecoded_bytes: u64,
}

impl Default for StreamerConfig {
    fn default() -> Self {
        StreamerConfig {
            max_reads_in_flight: 2,
            max_file_size: MAX_ASSET_SIZE,
            max_undecoded_bytes: 256 << 20,
        }
    }
}

impl StreamerConfig {
    /// Sets [`max_reads_in_flight`](Self::max_reads_in_flight).
    pub fn max_reads_in_flight(mut self, reads: usize) -> Self {
        self.max_reads_in_flight = reads;
        self
    }

    /// Sets [`max_file_size`](Self::max_file_size).
    pub fn max_file_size(mut self, bytes: u64) -> Self {
        self.max_file_size = bytes;
        self
    }

    /// Sets [`max_undecoded_bytes`](Self::max_undecoded_bytes).
    pub fn max_undecoded_bytes(mut self, bytes: u64) -> Self {
        self.max_undecoded_bytes = bytes;
        self
    }
}

/// Registered loaders: by extension, each extension's loaders by the type
/// they produce.
pub(super) type Registry = HashMap<String, Vec<Arc<dyn ErasedLoader>>>;

pub(super) struct Inner {
    pub(super) root: PathBuf,
    max_reads: usize,
    max_file_size: u64,
    pub(super) pool: PoolHandle,
    blocking: BlockingPoolHandle,
    requests: Mutex<Requests>,
    done: Mutex<VecDeque<AssetEvent>>,
    pub(super) counters: Counters,
    pub(super) budget: Budget,
    pub(super) loaders: RwLock<Registry>,
    /// Typed loads' ends, applied by `update`.
    pub(super) commits: Mutex<VecDeque<Commit>>,
    /// The wait-for graph of dependencies.
    pub(super) waits: WaitGraph,
    /// The file watcher of `watch`, kept alive with the streamer.
    #[cfg(feature = "hot-reload")]
    pub(super) watcher: Mutex<Option<notify::RecommendedWatcher>>,
}

/// Streams assets from a directory; see the module docs.
///
/// ```
/// use engine_tasks::assets::{encode_asset, AssetStreamer};
/// use engine_tasks::{BlockingPool, Pool};
///
/// let root = std::env::temp_dir().join(format!("assets-{}", std::process::id()));
/// std::fs::create_dir_all(&root).unwrap();
/// std::fs::write(root.join("crate.mesh"), encode_asset(b"8 vertices")).unwrap();
///
/// let pool = Pool::builder().threads(1).build().unwrap();
/// let blocking = BlockingPool::new();
/// let streamer = AssetStreamer::new(&root, &pool, &blocking, 2).unwrap();
/// let id = streamer.request("crate.mesh", 10);
///
/// let mut events = Vec::new();
/// while events.is_empty() {
///     streamer.drain(&mut events); // at the start of each frame
///     std::thread::yield_now(); // run the frame
/// }
/// let mesh = events.pop().unwrap().unwrap();
/// assert_eq!((mesh.id, mesh.data.as_slice()), (id, &b"8 vertices"[..]));
/// std::fs::remove_dir_all(&root).unwrap();
/// ```
#[derive(Clone)]
pub struct AssetStreamer {
    pub(super) inner: Arc<Inner>,
}

impl fmt::Debug for AssetStreamer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AssetStreamer")
            .field("root", &self.inner.root)
            .field("progress", &self.progress())
            .finish()
    }
}

impl AssetStreamer {
    /// A streamer for the files under `root` (which must be a directory),
    /// reading on `blocking` with at most `max_reads_in_flight` reads at once
    /// (0 counts as 1) and decoding on `pool`'s background lane.
    pub fn new(
        root: impl AsRef<Path>,
        pool: &PoolHandle,
        blocking: &BlockingPoolHandle,
        max_reads_in_flight: usize,
    ) -> io::Result<AssetStreamer> {
        let config = StreamerConfig::default().max_reads_in_flight(max_reads_in_flight);
        AssetStreamer::with_config(root, pool, blocking, config)
    }

    /// A streamer for the files under `root` (which must be a directory),
    /// reading on `blocking` and decoding on `pool`'s background lane, as
    /// `config` says.
    ///
    /// ```
    /// use engine_tasks::assets::{AssetStreamer, StreamerConfig};
    /// use engine_tasks::{BlockingPool, Pool};
    ///
    /// let pool = Pool::builder().threads(1).build().unwrap();
    /// let blocking = BlockingPool::builder().build().unwrap();
    /// let config = StreamerConfig::default().max_file_size(64 << 20);
    /// let dir = std::env::temp_dir();
    /// let streamer = AssetStreamer::with_config(&dir, &pool, &blocking, config).unwrap();
    /// assert_eq!(streamer.progress().requested, 0);
    /// ```
    pub fn with_config(
        root: impl AsRef<Path>,
        pool: &PoolHandle,
        blocking: &BlockingPoolHandle,
        config: StreamerConfig,
    ) -> io::Result<AssetStreamer> {
        let root = root.as_ref().canonicalize()?;
        if !root.is_dir() {
            return Err(io::Error::new(
                io::ErrorKind::NotADirectory,
                format!("{} is not a directory", root.display()),
            ));
        }
        let streamer = AssetStreamer {
            inner: Arc::new(Inner {
                root,
                max_reads: config.max_reads_in_flight.max(1),
                max_file_size: config.max_file_size,
                pool: pool.clone(),
                blocking: blocking.clone(),
                requests: Mutex::new(Requests::default()),
                done: Mutex::new(VecDeque::new()),
                counters: Counters::default(),
                budget: Budget::new(config.max_undecoded_bytes),
                loaders: RwLock::new(HashMap::new()),
                commits: Mutex::new(VecDeque::new()),
                waits: WaitGraph::default(),
                #[cfg(feature = "hot-reload")]
                watcher: Mutex::new(None),
            }),
        };
        streamer.register_builtin_loaders();
        Ok(streamer)
    }

    /// The asset root (canonical).
    pub fn root(&self) -> &Path {
        &self.inner.root
    }

    /// Requests the asset at `path` (relative to the root). Higher
    /// `priority` is read first. Never fails here: a bad path ends in an
    /// error event like any other failure.
    ///
    /// ```
    /// use engine_tasks::assets::{AssetErrorKind, AssetStreamer};
    /// use engine_tasks::{BlockingPool, Pool};
    ///
    /// let pool = Pool::builder().threads(1).build().unwrap();
    /// let blocking = BlockingPool::new();
    /// let streamer = AssetStreamer::new(std::env::temp_dir(), &pool, &blocking, 2).unwrap();
    ///
    /// // A path from a mod's manifest that tries to leave the asset root.
    /// let id = streamer.request("../../etc/passwd", 0);
    /// let mut events = Vec::new();
    /// while events.is_empty() {
    ///     streamer.drain(&mut events);
    /// }
    /// let error = events.pop().unwrap().unwrap_err();
    /// assert_eq!(error.id, id);
    /// assert!(matches!(error.kind, AssetErrorKind::OutsideRoot));
    /// ```
    pub fn request(&self, path: impl Into<PathBuf>, priority: i32) -> AssetId {
        let path = path.into();
        let inner = &self.inner;
        // Relaxed: a statistic.
        inner.counters.requested.fetch_add(1, Ordering::Relaxed);
        let id = {
            let mut requests = inner.lock_requests();
            let id = requests.new_id();
            requests.live.insert(id);
            if is_plain_relative(&path) {
                let job = Job::Legacy(id);
                requests.push(priority, Pending { path, job });
            } else {
                drop(requests);
                inner.finish(Err(AssetError {
                    id,
                    path,
                    kind: AssetErrorKind::OutsideRoot,
                }));
                return id;
            }
            id
        };
        Inner::pump(inner);
        id
    }

    /// Cancels a request that has not ended yet; its event will be
    /// [`AssetErrorKind::Cancelled`] (unless it ends before the
    /// cancellation is seen). Returns `false` if it had already ended.
    ///
    /// A typed request ([`load`](Self::load)) ends at once, as
    /// [`LoadEvent::Failed`](super::LoadEvent::Failed) with
    /// [`AssetErrorKind::Cancelled`] at the next
    /// [`update`](Self::update); the load it shared goes on for the other
    /// requests and dependents that want it, and stops if none is left
    /// (before its read, or at its next step; a load already decoded and
    /// waiting for its dependencies ends as it would have, with no request
    /// left to tell). The cancelled request's handles still share the slot:
    /// they read the value if another request loads it.
    pub fn cancel(&self, id: AssetId) -> bool {
        // Declared before the guard, so dropped after it: if this is the
        // slot's last reference, its value's and loader's drops (user code)
        // run with the lock released.
        let _held;
        let mut requests = self.inner.lock_requests();
        if let Some(slot) = requests.typed.get(&id).and_then(Weak::upgrade) {
            _held = slot.clone();
            return Inner::cancel_typed(&self.inner, &mut requests, id, slot);
        }
        if !requests.live.contains(&id) {
            return false;
        }
        requests.cancelled.insert(id);
        true
    }

    /// Changes the priority of a request that waits to be read (a typed
    /// load takes the highest priority of its requests). Returns `false` if
    /// it is not waiting (being read, decoded, or ended).
    pub fn set_priority(&self, id: AssetId, priority: i32) -> bool {
        // Dropped after the guard, as in `cancel`.
        let _held;
        let mut requests = self.inner.lock_requests();
        if let Some(slot) = requests.typed.get(&id).and_then(Weak::upgrade) {
            _held = slot.clone();
            return Inner::set_priority_typed(&mut requests, id, slot, priority);
        }
        requests.reprioritise(QueueKey::Legacy(id), priority)
    }

    /// Moves every finished request's event into `out`, without blocking:
    /// if a decoder is queueing a result right now, the events wait for the
    /// next call. Returns how many were moved.
    pub fn drain(&self, out: &mut Vec<AssetEvent>) -> usize {
        let mut done = match self.inner.done.try_lock() {
            Ok(done) => done,
            // `finish` keeps the queue consistent even if it panicked.
            Err(TryLockError::Poisoned(poisoned)) => poisoned.into_inner(),
            Err(TryLockError::WouldBlock) => return 0,
        };
        let n = done.len();
        out.extend(done.drain(..));
        n
    }

    /// The streamer's counters.
    pub fn progress(&self) -> StreamProgress {
        let c = &self.inner.counters;
        // Relaxed: statistics.
        StreamProgress {
            requested: c.requested.load(Ordering::Relaxed),
            loaded: c.loaded.load(Ordering::Relaxed),
            failed: c.failed.load(Ordering::Relaxed),
            cancelled: c.cancelled.load(Ordering::Relaxed),
            bytes_read: c.bytes_read.load(Ordering::Relaxed),
            bytes_decoded: c.bytes_decoded.load(Ordering::Relaxed),
            reads_in_flight: c.reads_in_flight.load(Ordering::Relaxed),
            undecoded_bytes: c.undecoded.load(Ordering::Relaxed),
            peak_undecoded_bytes: self.inner.budget.peak(),
        }
    }
}

/// Reads `path` if it is a regular file of at most `max` bytes.
///
/// Its metadata is checked before it is opened, so a named pipe or a
/// device is never opened for reading. It is then opened (on Linux without
/// blocking, so that a pipe swapped in after the check cannot stall the
/// open) and checked again through the open handle, and read with the limit
/// enforced as the bytes arrive, since a file can grow while it is read
/// ([`read_bounded`]).
fn read_regular_file(path: &Path, max: u64) -> Result<Vec<u8>, AssetErrorKind> {
    let unreadable = |e: io::Error| match e.kind() {
        io::ErrorKind::NotFound => AssetErrorKind::NotFound,
        _ => AssetErrorKind::Unreadable(e),
    };
    let check = |meta: &std::fs::Metadata| {
        if !meta.is_file() {
            Err(AssetErrorKind::NotAFile)
        } else if meta.len() > max {
            Err(AssetErrorKind::TooLarge {
                size: meta.len(),
                max,
            })
        } else {
            Ok(meta.len())
        }
    };
    check(&std::fs::metadata(path).map_err(unreadable)?)?;
    let mut options = std::fs::OpenOptions::new();
    options.read(true);
    #[cfg(target_os = "linux")]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.custom_flags(libc::O_NONBLOCK);
    }
    let file = options.open(path).map_err(unreadable)?;
    let len = check(&file.metadata().map_err(unreadable)?)?;
    read_bounded(file, len, max).map_err(|e| match e {
        Bounded::Io(e) => unreadable(e),
        Bounded::TooLarge(size) => AssetErrorKind::TooLarge { size, max },
    })
}

/// Why [`read_bounded`] failed.
#[derive(Debug)]
enum Bounded {
    Io(io::Error),
    /// Bytes read when the limit was passed (the limit and one byte).
    TooLarge(u64),
}

/// Reads `source`, whose length was `len` when checked, up to `max` bytes.
/// The buffer is allocated once, at `len`; a source that grew since then
/// is read on into a second buffer of what it gained (one byte over the
/// limit tells it passed it), and the two are joined at their exact size.
/// So the buffer kept is exactly what was read, and a vector's growth by
/// doubling applies only to what the file gained while it was read.
fn read_bounded(source: impl Read, len: u64, max: u64) -> Result<Vec<u8>, Bounded> {
    let len = len.min(max);
    let mut source = source;
    let mut bytes = Vec::with_capacity(len as usize);
    // At most `len`: the read stays within the buffer's capacity.
    (&mut source)
        .take(len)
        .read_to_end(&mut bytes)
        .map_err(Bounded::Io)?;
    let mut grown = Vec::new();
    let room = max.saturating_add(1) - bytes.len() as u64;
    source
        .take(room)
        .read_to_end(&mut grown)
        .map_err(Bounded::Io)?;
    let total = bytes.len() as u64 + grown.len() as u64;
    if total > max {
        return Err(Bounded::TooLarge(total));
    }
    if !grown.is_empty() {
        bytes.reserve_exact(grown.len());
        bytes.extend_from_slice(&grown);
    }
    Ok(bytes)
}

/// Relative, and no component that could climb out of the root.
pub(super) fn is_plain_relative(path: &Path) -> bool {
    !path.as_os_str().is_empty()
        && path
            .components()
            .all(|c| matches!(c, Component::Normal(_) | Component::CurDir))
}

/// One reader job's claim on a read slot. If the job is dropped without
/// running (the blocking pool shut down, or refused it), stops because the
/// pool is shutting down, or panics, the slot is given back, and if it was
/// the last reader, the requests still waiting fail rather than wait
/// forever: a byte request that was cancelled with
/// [`AssetErrorKind::Cancelled`], the others with
/// [`AssetErrorKind::PoolBusy`] if the pool refused the job for now
/// (`pump`), with [`AssetErrorKind::Interrupted`] if a panic drops it (in
/// the read loop, or before the job's body ran), else with
/// [`AssetErrorKind::PoolUnavailable`].
struct ReaderSlot {
    inner: Arc<Inner>,
    armed: bool,
}

impl ReaderSlot {
    /// Reads the most urgent waiting request, hands its bytes to a decode
    /// task on the background lane, and repeats until none waits, or until
    /// the blocking pool shuts down: its shutdown joins this thread, which
    /// a steady stream of requests would otherwise keep reading.
    fn read_loop(mut self) {
        let inner = self.inner.clone();
        loop {
            if inner.blocking.is_shut_down() {
                // The slot's drop fails what waits, if no reader is left.
                return;
            }
            let (next, cancelled) = {
                let mut requests = inner.lock_requests();
                let Some(next) = requests.pop() else {
                    requests.readers -= 1;
                    inner.publish_readers(&requests);
                    self.armed = false;
                    return;
                };
                let cancelled = requests.is_cancelled(&next.job);
                (next, cancelled)
            };
            let id = match next.job {
                Job::Legacy(id) => id,
                Job::Slot(slot) => {
                    Inner::read_slot(&inner, slot);
                    continue;
                }
            };
            let claim = Claim {
                inner: inner.clone(),
                id,
                path: Some(next.path),
                ticket: None,
            };
            if cancelled {
                claim.end(Err(AssetErrorKind::Cancelled));
                continue;
            }
            let mut claim = claim;
            let read = inner.read(claim.path()).map(|(bytes, ticket)| {
                claim.ticket = Some(ticket);
                bytes
            });
            let decode = move || claim.decode(read);
            if let Err(refused) = inner.pool.spawn(Lane::Background, decode) {
                (refused.into_inner())();
            }
        }
    }
}

/// A request taken off the waiting list, which must end in exactly one
/// event. If whoever holds it is dropped without ending it (a panic while
/// reading, or in a decode task before its body ran), the request ends as
/// [`AssetErrorKind::Interrupted`].
struct Claim {
    inner: Arc<Inner>,
    id: AssetId,
    /// `None` once ended.
    path: Option<PathBuf>,
    /// The read bytes' share of the budget, given back when the claim ends.
    ticket: Option<Ticket>,
}

impl Claim {
    fn path(&self) -> &Path {
        self.path.as_deref().expect("a claim is ended once")
    }

    fn end(mut self, result: Result<Vec<u8>, AssetErrorKind>) {
        let path = self.path.take().expect("a claim is ended once");
        let (id, inner) = (self.id, self.inner.clone());
        inner.finish(match result {
            Ok(data) => Ok(Asset { id, path, data }),
            Err(kind) => Err(AssetError { id, path, kind }),
        });
    }

    /// Decodes a read's bytes (on the background lane) and ends the request.
    fn decode(self, read: Result<Vec<u8>, AssetErrorKind>) {
        match read.and_then(|bytes| AssetDecoder::new(bytes).map_err(AssetErrorKind::Corrupt)) {
            Ok(decoder) => self.decode_steps(decoder, DECODE_STEP),
            Err(kind) => self.end(Err(kind)),
        }
    }

    /// Decodes `budget` bytes, then queues the rest as a new background task
    /// (so frame-critical work never waits long for a worker that is
    /// decoding). If the pool refused (it is shutting down; `budget` is then
    /// unlimited), the rest runs here, in a loop, so refusals never nest.
    fn decode_steps(self, mut decoder: AssetDecoder<Vec<u8>>, budget: usize) {
        loop {
            if self.inner.lock_requests().cancelled.contains(&self.id) {
                return self.end(Err(AssetErrorKind::Cancelled));
            }
            match decoder.step(budget) {
                Ok(true) => return self.end(Ok(decoder.into_data())),
                Err(why) => return self.end(Err(AssetErrorKind::Corrupt(why))),
                Ok(false) if budget == UNLIMITED => continue,
                Ok(false) => {
                    let pool = self.inner.pool.clone();
                    return next_step(&pool, move |budget| self.decode_steps(decoder, budget));
                }
            }
        }
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        if let Some(path) = self.path.take() {
            let kind = AssetErrorKind::Interrupted;
            self.inner.finish(Err(AssetError {
                id: self.id,
                path,
                kind,
            }));
        }
    }
}

thread_local! {
    /// Set by `pump` on its own thread just before it drops a reader job
    /// that the blocking pool refused for now (full, or no thread), read by
    /// that job's `ReaderSlot::drop` in the same call: a job dropped
    /// anywhere else (by the pool's shutdown) finds it clear.
    static REFUSED_FOR_NOW: Cell<bool> = const { Cell::new(false) };
}

impl Drop for ReaderSlot {
    fn drop(&mut self) {
        let refused_for_now = REFUSED_FOR_NOW.with(|r| r.replace(false));
        if !self.armed {
            return;
        }
        let interrupted = std::thread::panicking();
        // Each with whether it was cancelled (a byte request's cancellation
        // is noted here; it ends as `Cancelled`, as its `cancel` said).
        let orphans: Vec<(Pending, bool)> = {
            let mut requests = self.inner.lock_requests();
            requests.readers -= 1;
            self.inner.publish_readers(&requests);
            if requests.readers == 0 {
                requests.queued.clear();
                let pending = std::mem::take(&mut requests.pending);
                pending
                    .into_values()
                    .map(|orphan| {
                        let cancelled = requests.is_cancelled(&orphan.job);
                        (orphan, cancelled)
                    })
                    .collect()
            } else {
                Vec::new()
            }
        };
        for (Pending { path, job }, cancelled) in orphans {
            let kind = if cancelled {
                AssetErrorKind::Cancelled
            } else if refused_for_now {
                AssetErrorKind::PoolBusy
            } else if interrupted {
                AssetErrorKind::Interrupted
            } else {
                AssetErrorKind::PoolUnavailable
            };
            match job {
                Job::Legacy(id) => self.inner.finish(Err(AssetError { id, path, kind })),
                Job::Slot(slot) => Inner::finish_load(&self.inner, slot, Err(kind)),
            }
        }
    }
}

impl Inner {
    pub(super) fn lock_requests(&self) -> MutexGuard<'_, Requests> {
        self.requests.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Starts reader jobs while fewer than `max_reads` run and requests
    /// wait. A reader serves requests until none is left, so the blocking
    /// pool never holds more than `max_reads` of our jobs.
    pub(super) fn pump(this: &Arc<Inner>) {
        loop {
            {
                let mut requests = this.lock_requests();
                if requests.readers >= this.max_reads || requests.pending.is_empty() {
                    return;
                }
                requests.readers += 1;
                this.publish_readers(&requests);
            }
            let slot = ReaderSlot {
                inner: this.clone(),
                armed: true,
            };
            if let Err(refused) = this.blocking.spawn(move || slot.read_loop()) {
                // Dropping the job disarms nothing: its slot fails what is
                // pending if no other reader is left (a reader still running
                // serves it), naming why the pool refused.
                if !matches!(refused, BlockingError::ShutDown(_)) {
                    REFUSED_FOR_NOW.with(|r| r.set(true));
                }
                drop(refused);
                return;
            }
        }
    }

    fn publish_readers(&self, requests: &Requests) {
        // Relaxed: a statistic.
        self.counters
            .reads_in_flight
            .store(requests.readers, Ordering::Relaxed);
    }

    /// Resolves `path` under the root, waits for room in the budget and
    /// reads it (on a blocking thread). The ticket holds the bytes' share of
    /// the budget until the decode ends.
    pub(super) fn read(
        self: &Arc<Inner>,
        path: &Path,
    ) -> Result<(Vec<u8>, Ticket), AssetErrorKind> {
        let full = self
            .root
            .join(path)
            .canonicalize()
            .map_err(|e| match e.kind() {
                io::ErrorKind::NotFound => AssetErrorKind::NotFound,
                _ => AssetErrorKind::Unreadable(e),
            })?;
        if !full.starts_with(&self.root) {
            return Err(AssetErrorKind::OutsideRoot);
        }
        // The size now; a file that grows is held to `max_file_size` while
        // read, and its ticket corrected after.
        let expected = std::fs::metadata(&full).map_or(0, |m| m.len().min(self.max_file_size));
        let mut ticket = self.admit(expected);
        let bytes = read_regular_file(&full, self.max_file_size)?;
        ticket.resize(bytes.len() as u64);
        // Relaxed: a statistic.
        self.counters
            .bytes_read
            .fetch_add(bytes.len() as u64, Ordering::Relaxed);
        Ok((bytes, ticket))
    }

    /// Ends a request: counts it and queues its event.
    fn finish(&self, event: AssetEvent) {
        let id = match &event {
            Ok(asset) => asset.id,
            Err(error) => error.id,
        };
        {
            let mut requests = self.lock_requests();
            requests.live.remove(&id);
            requests.cancelled.remove(&id);
        }
        let c = &self.counters;
        // Relaxed: statistics.
        match &event {
            Ok(asset) => {
                c.bytes_decoded
                    .fetch_add(asset.data.len() as u64, Ordering::Relaxed);
                c.loaded.fetch_add(1, Ordering::Relaxed);
            }
            Err(AssetError {
                kind: AssetErrorKind::Cancelled,
                ..
            }) => {
                c.cancelled.fetch_add(1, Ordering::Relaxed);
            }
            Err(_) => {
                c.failed.fetch_add(1, Ordering::Relaxed);
            }
        }
        self.done
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push_back(event);
    }
}

/// The budget of a step that runs where the pool refused it: the caller
/// loops over the rest of its steps in place (`next_step`).
pub(super) const UNLIMITED: usize = usize::MAX;

/// Queues `step` as the next decode step on the background lane, with a
/// budget of [`DECODE_STEP`] bytes; if the pool refuses it (it is shutting
/// down), runs it here with a budget of [`UNLIMITED`], and `step` then
/// runs every later step in a loop of its own, never through this again,
/// so the decode ends without nesting a call per step.
pub(super) fn next_step(pool: &PoolHandle, step: impl FnOnce(usize) + Send + 'static) {
    let inline = Arc::new(AtomicBool::new(false));
    let run_inline = inline.clone();
    let task = move || {
        // Relaxed: set before the task is called on this very thread.
        let budget = if run_inline.load(Ordering::Relaxed) {
            UNLIMITED
        } else {
            DECODE_STEP
        };
        step(budget);
    };
    if let Err(refused) = pool.spawn(Lane::Background, task) {
        // Relaxed: read by the call below, on this thread.
        inline.store(true, Ordering::Relaxed);
        (refused.into_inner())();
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::{read_bounded, Bounded};
    use std::io::Cursor;

    #[test]
    fn a_read_keeps_exactly_what_it_read_even_if_the_file_grew() {
        // As checked: one allocation, exactly the length.
        let read = read_bounded(Cursor::new(vec![1u8; 1000]), 1000, 4096).unwrap();
        assert_eq!((read.len(), read.capacity()), (1000, 1000));
        // Grew by 10 bytes since the check, still within the limit.
        let read = read_bounded(Cursor::new(vec![2u8; 1010]), 1000, 4096).unwrap();
        assert_eq!(read, vec![2u8; 1010]);
        assert_eq!(read.capacity(), 1010, "not doubled");
        // Shrank since the check.
        let read = read_bounded(Cursor::new(vec![3u8; 600]), 1000, 4096).unwrap();
        assert_eq!(read, vec![3u8; 600]);
    }

    #[test]
    fn a_file_that_grew_past_the_limit_is_refused_one_byte_over() {
        let refused = read_bounded(Cursor::new(vec![0u8; 5000]), 1000, 4096);
        assert!(
            matches!(refused, Err(Bounded::TooLarge(4097))),
            "{refused:?}"
        );
        // Exactly at the limit is fine.
        let read = read_bounded(Cursor::new(vec![0u8; 4096]), 1000, 4096).unwrap();
        assert_eq!(read.len(), 4096);
    }
}

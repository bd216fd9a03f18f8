//! The streamer itself: requests by priority, reader jobs on the blocking
//! pool, decoding on the background lane, one event per request (see the
//! parent module for the pipeline).

use super::codec::{AssetDecoder, DECODE_STEP, MAX_ASSET_SIZE};
use super::{Asset, AssetError, AssetErrorKind, AssetEvent, AssetId, StreamProgress};
use crate::blocking::BlockingPoolHandle;
use crate::lane::Lane;
use crate::pool::PoolHandle;
use std::collections::{BinaryHeap, HashSet, VecDeque};
use std::fmt;
use std::io::{self, Read};
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, TryLockError};

struct Pending {
    priority: i32,
    /// Earlier requests first among equal priorities.
    seq: u64,
    id: AssetId,
    path: PathBuf,
}

impl PartialEq for Pending {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == std::cmp::Ordering::Equal
    }
}
impl Eq for Pending {}
impl PartialOrd for Pending {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Pending {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.priority
            .cmp(&other.priority)
            .then(other.seq.cmp(&self.seq))
    }
}

#[derive(Default)]
struct Requests {
    pending: BinaryHeap<Pending>,
    /// Requests not yet ended.
    live: HashSet<AssetId>,
    cancelled: HashSet<AssetId>,
    /// Reader jobs queued or running on the blocking pool.
    readers: usize,
    next_id: u64,
}

#[derive(Default)]
struct Counters {
    requested: AtomicU64,
    loaded: AtomicU64,
    failed: AtomicU64,
    cancelled: AtomicU64,
    bytes_read: AtomicU64,
    bytes_decoded: AtomicU64,
    reads_in_flight: AtomicUsize,
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
}

impl Default for StreamerConfig {
    fn default() -> Self {
        StreamerConfig {
            max_reads_in_flight: 2,
            max_file_size: MAX_ASSET_SIZE,
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
}

struct Inner {
    root: PathBuf,
    max_reads: usize,
    max_file_size: u64,
    pool: PoolHandle,
    blocking: BlockingPoolHandle,
    requests: Mutex<Requests>,
    done: Mutex<VecDeque<AssetEvent>>,
    counters: Counters,
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
    inner: Arc<Inner>,
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
        Ok(AssetStreamer {
            inner: Arc::new(Inner {
                root,
                max_reads: config.max_reads_in_flight.max(1),
                max_file_size: config.max_file_size,
                pool: pool.clone(),
                blocking: blocking.clone(),
                requests: Mutex::new(Requests::default()),
                done: Mutex::new(VecDeque::new()),
                counters: Counters::default(),
            }),
        })
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
            let id = AssetId(requests.next_id);
            requests.next_id += 1;
            requests.live.insert(id);
            if is_plain_relative(&path) {
                requests.pending.push(Pending {
                    priority,
                    seq: id.0,
                    id,
                    path,
                });
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
    pub fn cancel(&self, id: AssetId) -> bool {
        let mut requests = self.inner.lock_requests();
        if !requests.live.contains(&id) {
            return false;
        }
        requests.cancelled.insert(id);
        true
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
        }
    }
}

/// Reads `path` if it is a regular file of at most `max` bytes.
///
/// Its metadata is checked before it is opened, so a named pipe or a
/// device is never opened for reading. It is then opened without blocking
/// (a pipe swapped in after the check cannot stall the open) and checked
/// again through the open handle, and read with the limit enforced as the
/// bytes arrive, since a file can grow while it is read. Nothing larger
/// than `max` (plus one byte) is ever allocated.
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
    let mut bytes = Vec::with_capacity(len as usize);
    // One byte over the limit tells a file that grew past it.
    file.take(max.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(unreadable)?;
    if bytes.len() as u64 > max {
        return Err(AssetErrorKind::TooLarge {
            size: bytes.len() as u64,
            max,
        });
    }
    Ok(bytes)
}

/// Relative, and no component that could climb out of the root.
fn is_plain_relative(path: &Path) -> bool {
    !path.as_os_str().is_empty()
        && path
            .components()
            .all(|c| matches!(c, Component::Normal(_) | Component::CurDir))
}

/// One reader job's claim on a read slot. If the job is dropped without
/// running (the blocking pool shut down, or refused it) or panics, the slot
/// is given back, and if it was the last reader, the requests still waiting
/// fail with [`AssetErrorKind::PoolUnavailable`] rather than wait forever.
struct ReaderSlot {
    inner: Arc<Inner>,
    armed: bool,
}

impl ReaderSlot {
    /// Reads the most urgent waiting request, hands its bytes to a decode
    /// task on the background lane, and repeats until none waits.
    fn read_loop(mut self) {
        let inner = self.inner.clone();
        loop {
            let (next, cancelled) = {
                let mut requests = inner.lock_requests();
                let Some(next) = requests.pending.pop() else {
                    requests.readers -= 1;
                    inner.publish_readers(&requests);
                    self.armed = false;
                    return;
                };
                let cancelled = requests.cancelled.contains(&next.id);
                (next, cancelled)
            };
            let claim = Claim {
                inner: inner.clone(),
                id: next.id,
                path: Some(next.path),
            };
            if cancelled {
                claim.end(Err(AssetErrorKind::Cancelled));
                continue;
            }
            let read = inner.read(claim.path());
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
    /// decoding). If the pool refuses (it is shutting down), the rest runs
    /// here in one step, so refusals never nest.
    fn decode_steps(self, mut decoder: AssetDecoder<Vec<u8>>, budget: usize) {
        if self.inner.lock_requests().cancelled.contains(&self.id) {
            return self.end(Err(AssetErrorKind::Cancelled));
        }
        match decoder.step(budget) {
            Ok(true) => self.end(Ok(decoder.into_data())),
            Err(why) => self.end(Err(AssetErrorKind::Corrupt(why))),
            Ok(false) => {
                let pool = self.inner.pool.clone();
                let inline = Arc::new(AtomicBool::new(false));
                let run_inline = inline.clone();
                let rest = move || {
                    // Relaxed: set before the closure is called on this
                    // very thread.
                    let budget = if run_inline.load(Ordering::Relaxed) {
                        usize::MAX
                    } else {
                        DECODE_STEP
                    };
                    self.decode_steps(decoder, budget);
                };
                if let Err(refused) = pool.spawn(Lane::Background, rest) {
                    // Relaxed: read by the call below, on this thread.
                    inline.store(true, Ordering::Relaxed);
                    (refused.into_inner())();
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

impl Drop for ReaderSlot {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let orphans: Vec<Pending> = {
            let mut requests = self.inner.lock_requests();
            requests.readers -= 1;
            self.inner.publish_readers(&requests);
            if requests.readers == 0 {
                requests.pending.drain().collect()
            } else {
                Vec::new()
            }
        };
        for Pending { id, path, .. } in orphans {
            let kind = AssetErrorKind::PoolUnavailable;
            self.inner.finish(Err(AssetError { id, path, kind }));
        }
    }
}

impl Inner {
    fn lock_requests(&self) -> MutexGuard<'_, Requests> {
        self.requests.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Starts reader jobs while fewer than `max_reads` run and requests
    /// wait. A reader serves requests until none is left, so the blocking
    /// pool never holds more than `max_reads` of our jobs.
    fn pump(this: &Arc<Inner>) {
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
                // pending if no other reader is left.
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

    /// Resolves `path` under the root and reads it (on a blocking thread).
    fn read(&self, path: &Path) -> Result<Vec<u8>, AssetErrorKind> {
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
        let bytes = read_regular_file(&full, self.max_file_size)?;
        // Relaxed: a statistic.
        self.counters
            .bytes_read
            .fetch_add(bytes.len() as u64, Ordering::Relaxed);
        Ok(bytes)
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

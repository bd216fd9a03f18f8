//! Background asset streaming: reads on the blocking pool, decoding on the
//! background lane, results handed to the game loop through a queue it
//! drains at the start of each frame.
//!
//! # What may wait
//!
//! The per-frame calls never wait on the streamer's locks:
//! [`AssetStreamer::drain`] and [`AssetStreamer::update`] take their queue
//! with a `try_lock` (and leave it for the next frame if it is busy;
//! `update` hands the values it replaced to the pool, as a spawn from the
//! frame would), and [`Handle::get`],
//! [`Handle::status`], [`Handle::generation`] and [`Handle::error`] are
//! lock-free. The calls that start or change work may briefly wait on a
//! lock that readers, decoders and the hot-reload watcher also take:
//! [`AssetStreamer::request`], [`load`](AssetStreamer::load),
//! [`cancel`](AssetStreamer::cancel),
//! [`set_priority`](AssetStreamer::set_priority) and
//! [`reload`](AssetStreamer::reload) take the request queue's mutex (and a
//! slot's); `reload` scans the live loads under it; and queueing work may
//! make the blocking pool start an OS thread for a reader. Such waits are
//! short (no lock is held across a read or a decode), but not bounded by
//! the frame.
//!
//! # Pipeline
//!
//! 1. [`AssetStreamer::request`] checks the path without touching the disk
//!    (relative, no `..`) and queues the request by priority.
//! 2. Up to `max_reads_in_flight` reader jobs run on the blocking pool.
//!    Each takes the most urgent waiting request, resolves its path
//!    (refusing one that leads outside the root through a symbolic link),
//!    reads the file, and repeats until no request waits. So reads follow
//!    priority at the moment a reader is free, and the streamer never holds
//!    more than `max_reads_in_flight` blocking threads.
//! 3. The file's bytes go to a [`Lane::Background`](crate::Lane::Background) task on the
//!    work-stealing pool, which decodes them ([`decode_asset`]: LZ4 frames
//!    with a content checksum, inside a small header with the expected
//!    size) and queues the result.
//! 4. The game loop calls [`AssetStreamer::drain`] once per frame; it takes
//!    what is ready with a `try_lock`, so a decoder that happens to be
//!    queueing a result delays the hand-over by a frame, never the frame.
//!
//! Every request ends in exactly one [`AssetEvent`]: loaded, failed (with
//! the reason), or cancelled; a request whose reader or decoder panics ends
//! as [`AssetErrorKind::Interrupted`].
//!
//! # Typed loads
//!
//! [`AssetStreamer::load`] runs the same pipeline with an [`AssetLoader`]
//! (chosen by the file's extension, or given with
//! [`load_with`](AssetStreamer::load_with)) in place of the ETA1 decoder,
//! and returns a [`Handle`]. Each load is a *slot* keyed by path, value
//! type and loader; it moves through these states:
//!
//! ```text
//! idle --request--> queued --reader--> read --background lane--> decoding
//!   ^                 |                                             |
//!   |             cancelled (no request, no dependent left)    steps done
//!   |                 v                                             v
//!   +------------- ended <---- all dependencies ended ---- waiting on dependencies
//! ```
//!
//! A load that ends queues a *commit* (its value or error, and one
//! [`LoadEvent`] per request that wanted it); [`AssetStreamer::update`],
//! called once per frame, takes the commits with a `try_lock` and swaps the
//! values into the slots (an `ArcSwapOption` each), so handles read them
//! without a lock and a frame sees one value throughout. A second request of
//! a live slot joins its load; a slot, and its value, is freed when the last
//! handle to it goes.
//!
//! Dependencies ([`LoadContext::depend`]) are slots of their own; a
//! dependent waits for every dependency to end and fails with
//! [`AssetErrorKind::DependencyFailed`] if one fails. Each wait is an edge
//! of a wait-for graph; an edge that would close a cycle is refused and the
//! load fails with [`AssetErrorKind::DependencyCycle`] instead of waiting
//! forever.
//!
//! Reads wait (on their blocking thread) while the bytes read but not yet
//! decoded would pass [`StreamerConfig::max_undecoded_bytes`]. A file
//! larger than the whole budget is admitted once nothing is held (every
//! byte admitted before it has been decoded), so it still loads; while
//! other files keep streaming it waits until the budget drains. Reads are
//! admitted in the order they asked, so the later ones wait behind it
//! rather than overtake it indefinitely. [`AssetStreamer::reload`] (and, with the `hot-reload` feature,
//! `AssetStreamer::watch`) loads a live slot again; the new value replaces
//! the old one at an [`update`](AssetStreamer::update), a failed reload
//! keeps the old value, and the slots that depend on it reload in turn.
//!
//! The root check resolves the path and then reads it: a symbolic link
//! swapped in between those two steps by someone with write access to the
//! asset directory is not caught. The check guards against paths that name
//! files outside the root, not against a hostile writer inside it.

mod budget;
mod codec;
mod handle;
mod loader;
mod loaders;
mod reload;
mod streamer;
mod typed;
mod waits;
#[cfg(feature = "hot-reload")]
mod watch;

pub use codec::{
    decode_asset, encode_asset, AssetDecoder, ASSET_MAGIC, DECODE_STEP, MAX_ASSET_SIZE,
};
pub use handle::{Handle, LoadEvent, LoadStatus};
pub use loader::{AssetLoader, Decode, DecodeSteps, LoadContext};
pub use loaders::{
    BytesLoader, CodecError, Image, ImageError, Lz4Loader, PngLoader, ZstdLoader,
    DEFAULT_MAX_IMAGE_BYTES,
};
pub use streamer::{AssetStreamer, StreamerConfig};

use std::fmt;
use std::io;
use std::path::PathBuf;
use std::sync::Arc;

/// Identifies a request.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct AssetId(pub u64);

/// A loaded asset.
#[derive(Debug)]
pub struct Asset {
    /// The request.
    pub id: AssetId,
    /// The path as requested, relative to the root.
    pub path: PathBuf,
    /// The decoded bytes.
    pub data: Vec<u8>,
}

/// Why a request produced no asset.
#[derive(Debug)]
#[non_exhaustive]
pub enum AssetErrorKind {
    /// The path is absolute, has `..`, or resolves outside the root.
    OutsideRoot,
    /// No such file.
    NotFound,
    /// The path names something other than a regular file (a directory, a
    /// named pipe, a device): it is not opened for reading.
    NotAFile,
    /// The file is larger than the streamer's
    /// [`max_file_size`](StreamerConfig::max_file_size), by its metadata
    /// or while it was read (it grew).
    TooLarge {
        /// The file's size, or the bytes read when it passed the limit.
        size: u64,
        /// The limit.
        max: u64,
    },
    /// The file exists but could not be read.
    Unreadable(io::Error),
    /// The bytes are not a valid asset (why).
    Corrupt(String),
    /// A pool refused the work (it is shutting down).
    PoolUnavailable,
    /// The blocking pool refused the read for now (its queue was at its
    /// [`max_queued`](crate::BlockingPoolBuilder::max_queued), or it could
    /// not start a thread) while no other read was under way to take the
    /// request later; every request waiting then ends so. Nothing is
    /// shutting down: request it again, once the pool has room
    /// ([`is_transient`](Self::is_transient) also finds it behind a
    /// failed dependency).
    PoolBusy,
    /// A panic interrupted reading or decoding (outside a loader's own
    /// code: a loader's panic is [`LoaderPanicked`](Self::LoaderPanicked)),
    /// or the last reader, as a panic ended it, left the request waiting.
    Interrupted,
    /// The loader panicked, in [`AssetLoader::load`] or in a
    /// [`DecodeSteps::step`]: the panic's message.
    LoaderPanicked(String),
    /// Cancelled with [`AssetStreamer::cancel`].
    Cancelled,
    /// No loader is registered for the file's extension (or it has none).
    UnknownExtension {
        /// The extension, lower case (empty if the path has none).
        extension: String,
    },
    /// Loaders are registered for the extension, but none produces the
    /// requested type.
    WrongType {
        /// The extension, lower case.
        extension: String,
        /// The requested type.
        requested: &'static str,
        /// The types the extension's loaders produce.
        available: Vec<&'static str>,
    },
    /// The loader refused the bytes; its typed error (downcast it to the
    /// loader's `Error` type, e.g. [`ImageError`]).
    Loader(Arc<dyn std::error::Error + Send + Sync>),
    /// A dependency (see [`LoadContext::depend`]) failed.
    ///
    /// Along a chain of dependencies each failed one's error is the next
    /// `reason`, down to the root cause, but at most
    /// [`MAX_DEPENDENCY_LEVELS`](Self::MAX_DEPENDENCY_LEVELS) deep: where a
    /// chain is longer, `reason` skips to the failed dependency whose own
    /// reason is the root cause (so an error of a chain thousands long
    /// still shows, and drops, without deep recursion).
    DependencyFailed {
        /// The dependency.
        path: PathBuf,
        /// Why it failed.
        reason: Arc<AssetErrorKind>,
    },
    /// Waiting for the dependency would close a cycle: the paths around it,
    /// from this asset back to it.
    DependencyCycle {
        /// The assets on the cycle, starting with the one that failed.
        cycle: Vec<PathBuf>,
    },
}

impl AssetErrorKind {
    /// The most levels of [`DependencyFailed`](Self::DependencyFailed) one
    /// error holds, counting its own. Deep enough for any real chain of
    /// assets to be told whole; shallow enough that showing, comparing or
    /// dropping one recurses a few dozen calls at most.
    pub const MAX_DEPENDENCY_LEVELS: usize = 32;

    /// The error of an asset whose dependency at `path` failed with
    /// `reason`, at most [`MAX_DEPENDENCY_LEVELS`](Self::MAX_DEPENDENCY_LEVELS)
    /// deep (see [`DependencyFailed`](Self::DependencyFailed)).
    pub(crate) fn dependency_failed(path: PathBuf, reason: Arc<AssetErrorKind>) -> AssetErrorKind {
        // The levels of `reason`, and its innermost one: the failed
        // dependency whose reason is the root cause.
        let mut levels = 0;
        let mut innermost = &reason;
        while let AssetErrorKind::DependencyFailed { reason: next, .. } = &**innermost {
            levels += 1;
            if !matches!(**next, AssetErrorKind::DependencyFailed { .. }) {
                break;
            }
            innermost = next;
        }
        let reason = if levels < Self::MAX_DEPENDENCY_LEVELS {
            reason
        } else {
            innermost.clone()
        };
        AssetErrorKind::DependencyFailed { path, reason }
    }

    /// Whether the same request may succeed if made again with nothing
    /// else changed: the blocking pool refused the read for now
    /// ([`PoolBusy`](Self::PoolBusy)), directly or for a dependency. A
    /// failed hot reload of that kind ([`LoadEvent::ReloadFailed`]) is not
    /// retried until the file changes again: call
    /// [`AssetStreamer::reload`] for it.
    ///
    /// ```
    /// use engine_tasks::assets::AssetErrorKind;
    /// use std::sync::Arc;
    ///
    /// assert!(AssetErrorKind::PoolBusy.is_transient());
    /// let texture = AssetErrorKind::DependencyFailed {
    ///     path: "rock.png".into(),
    ///     reason: Arc::new(AssetErrorKind::PoolBusy),
    /// };
    /// assert!(texture.is_transient());
    /// assert!(!AssetErrorKind::NotFound.is_transient());
    /// ```
    pub fn is_transient(&self) -> bool {
        match self {
            AssetErrorKind::PoolBusy => true,
            AssetErrorKind::DependencyFailed { reason, .. } => reason.is_transient(),
            _ => false,
        }
    }

    /// A copy for another request that shared the load (`io::Error` is not
    /// `Clone`: an OS error's code is kept, any other error's kind and
    /// message).
    pub(crate) fn duplicate(&self) -> AssetErrorKind {
        use AssetErrorKind as K;
        match self {
            K::OutsideRoot => K::OutsideRoot,
            K::NotFound => K::NotFound,
            K::NotAFile => K::NotAFile,
            K::TooLarge { size, max } => K::TooLarge {
                size: *size,
                max: *max,
            },
            // An OS error keeps its code (and so its kind and message).
            K::Unreadable(e) => K::Unreadable(match e.raw_os_error() {
                Some(code) => io::Error::from_raw_os_error(code),
                None => io::Error::new(e.kind(), e.to_string()),
            }),
            K::Corrupt(why) => K::Corrupt(why.clone()),
            K::PoolUnavailable => K::PoolUnavailable,
            K::PoolBusy => K::PoolBusy,
            K::Interrupted => K::Interrupted,
            K::LoaderPanicked(message) => K::LoaderPanicked(message.clone()),
            K::Cancelled => K::Cancelled,
            K::UnknownExtension { extension } => K::UnknownExtension {
                extension: extension.clone(),
            },
            K::WrongType {
                extension,
                requested,
                available,
            } => K::WrongType {
                extension: extension.clone(),
                requested,
                available: available.clone(),
            },
            K::Loader(e) => K::Loader(e.clone()),
            K::DependencyFailed { path, reason } => K::DependencyFailed {
                path: path.clone(),
                reason: reason.clone(),
            },
            K::DependencyCycle { cycle } => K::DependencyCycle {
                cycle: cycle.clone(),
            },
        }
    }
}

impl fmt::Display for AssetErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AssetErrorKind::OutsideRoot => write!(f, "outside the asset root"),
            AssetErrorKind::NotFound => write!(f, "not found"),
            AssetErrorKind::NotAFile => write!(f, "not a regular file"),
            AssetErrorKind::TooLarge { size, max } => {
                write!(f, "{size} bytes, over the limit of {max}")
            }
            AssetErrorKind::Unreadable(e) => write!(f, "unreadable: {e}"),
            AssetErrorKind::Corrupt(why) => write!(f, "corrupt: {why}"),
            AssetErrorKind::PoolUnavailable => write!(f, "the pools are shutting down"),
            AssetErrorKind::PoolBusy => write!(
                f,
                "the blocking pool refused the read (its queue is full, or it could not \
                 start a thread)"
            ),
            AssetErrorKind::Interrupted => write!(f, "interrupted by a panic"),
            AssetErrorKind::LoaderPanicked(message) => write!(f, "the loader panicked: {message}"),
            AssetErrorKind::Cancelled => write!(f, "cancelled"),
            AssetErrorKind::UnknownExtension { extension } => {
                write!(f, "no loader for the extension {extension:?}")
            }
            AssetErrorKind::WrongType {
                extension,
                requested,
                available,
            } => write!(
                f,
                "no loader makes {requested} from {extension:?} files (they make {})",
                available.join(", ")
            ),
            AssetErrorKind::Loader(e) => write!(f, "loader: {e}"),
            AssetErrorKind::DependencyFailed { path, reason } => {
                write!(f, "dependency {}: {reason}", path.display())
            }
            AssetErrorKind::DependencyCycle { cycle } => {
                let names: Vec<_> = cycle.iter().map(|p| p.display().to_string()).collect();
                write!(f, "dependency cycle: {}", names.join(" -> "))
            }
        }
    }
}

impl std::error::Error for AssetErrorKind {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            AssetErrorKind::Unreadable(e) => Some(e),
            AssetErrorKind::Loader(e) => Some(&**e),
            AssetErrorKind::DependencyFailed { reason, .. } => Some(&**reason),
            _ => None,
        }
    }
}

/// A failed request.
#[derive(Debug)]
#[non_exhaustive]
pub struct AssetError {
    /// The request.
    pub id: AssetId,
    /// The path as requested.
    pub path: PathBuf,
    /// What went wrong.
    pub kind: AssetErrorKind,
}

impl fmt::Display for AssetError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path.display(), self.kind)
    }
}

impl std::error::Error for AssetError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.kind.source()
    }
}

/// The end of one request.
pub type AssetEvent = Result<Asset, AssetError>;

/// Counters of a streamer.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct StreamProgress {
    /// Requests made.
    pub requested: u64,
    /// Requests that produced an asset.
    pub loaded: u64,
    /// Requests that failed (not counting cancelled ones).
    pub failed: u64,
    /// Requests cancelled.
    pub cancelled: u64,
    /// File bytes read.
    pub bytes_read: u64,
    /// Decoded bytes produced by the byte API ([`AssetStreamer::request`]).
    /// Typed loads ([`AssetStreamer::load`]) are not counted: their values'
    /// sizes are their loaders' business.
    pub bytes_decoded: u64,
    /// Reads running now.
    pub reads_in_flight: usize,
    /// File bytes read and not yet decoded, now (see
    /// [`StreamerConfig::max_undecoded_bytes`]).
    pub undecoded_bytes: u64,
    /// The most [`undecoded_bytes`](Self::undecoded_bytes) ever held.
    pub peak_undecoded_bytes: u64,
}

impl StreamProgress {
    /// Requests that have ended, one way or another.
    pub fn finished(&self) -> u64 {
        self.loaded + self.failed + self.cancelled
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::AssetErrorKind;
    use std::io;

    #[test]
    fn a_copied_error_keeps_an_os_code_or_the_kind_and_message() {
        let os = io::Error::from_raw_os_error(13);
        let (code, kind) = (os.raw_os_error(), os.kind());
        match AssetErrorKind::Unreadable(os).duplicate() {
            AssetErrorKind::Unreadable(e) => {
                assert_eq!((e.raw_os_error(), e.kind()), (code, kind));
            }
            other => panic!("{other:?}"),
        }
        let custom = io::Error::new(io::ErrorKind::InvalidData, "bad sector");
        match AssetErrorKind::Unreadable(custom).duplicate() {
            AssetErrorKind::Unreadable(e) => {
                assert_eq!(e.kind(), io::ErrorKind::InvalidData);
                assert_eq!(e.to_string(), "bad sector");
            }
            other => panic!("{other:?}"),
        }
    }
}

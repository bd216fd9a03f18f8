//! Background asset streaming: reads on the blocking pool, decoding on the
//! background lane, results handed to the game loop through a queue it
//! drains at the start of each frame. Nothing here ever blocks the frame.
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
//! The root check resolves the path and then reads it: a symbolic link
//! swapped in between those two steps by someone with write access to the
//! asset directory is not caught. The check guards against paths that name
//! files outside the root, not against a hostile writer inside it.

mod codec;
mod streamer;

pub use codec::{
    decode_asset, encode_asset, AssetDecoder, ASSET_MAGIC, DECODE_STEP, MAX_ASSET_SIZE,
};
pub use streamer::{AssetStreamer, StreamerConfig};

use std::fmt;
use std::io;
use std::path::PathBuf;

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
    /// A panic interrupted reading or decoding.
    Interrupted,
    /// Cancelled with [`AssetStreamer::cancel`].
    Cancelled,
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
        let path = self.path.display();
        match &self.kind {
            AssetErrorKind::OutsideRoot => write!(f, "{path}: outside the asset root"),
            AssetErrorKind::NotFound => write!(f, "{path}: not found"),
            AssetErrorKind::NotAFile => write!(f, "{path}: not a regular file"),
            AssetErrorKind::TooLarge { size, max } => {
                write!(f, "{path}: {size} bytes, over the limit of {max}")
            }
            AssetErrorKind::Unreadable(e) => write!(f, "{path}: unreadable: {e}"),
            AssetErrorKind::Corrupt(why) => write!(f, "{path}: corrupt: {why}"),
            AssetErrorKind::PoolUnavailable => write!(f, "{path}: the pools are shutting down"),
            AssetErrorKind::Interrupted => write!(f, "{path}: interrupted by a panic"),
            AssetErrorKind::Cancelled => write!(f, "{path}: cancelled"),
        }
    }
}

impl std::error::Error for AssetError {}

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
    /// Decoded bytes produced.
    pub bytes_decoded: u64,
    /// Reads running now.
    pub reads_in_flight: usize,
}

impl StreamProgress {
    /// Requests that have ended, one way or another.
    pub fn finished(&self) -> u64 {
        self.loaded + self.failed + self.cancelled
    }
}

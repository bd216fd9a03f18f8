//! Where a frame writes how each node's run went: [`RunRecord`], one per
//! node in one contiguous array, apart from the dependency countdowns.
//!
//! The thread that owns a node for the frame (module docs of `runtime`)
//! writes its record once, after the body, and the frame's thread reads
//! every record after the frame's latch (whose acquire orders the writes),
//! so relaxed accesses suffice. Every node writes its record in every
//! frame, also when it is skipped, so no record needs a frame tag.
//!
//! Kept apart from the countdowns so that the thread running a node does
//! not touch the line that its dependencies' threads count on, and so that
//! a frame run alone walks 32-byte records in order rather than a padded
//! line per node. Two records share a 64-byte line, so in a shared frame
//! two threads may write one line and move it between them; each node
//! writes its record once per frame, after its body, so that costs at most
//! one transfer per node.
//!
//! After a frame the runtime swaps its array with the one in the frame's
//! statistics ([`FrameStats`](super::FrameStats)), so recording a frame
//! copies nothing, and the next frame rewrites the other array.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};

/// How a node's frame went.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum NodeOutcome {
    /// The body ran and returned.
    Ran = 0,
    /// The body or one of its run conditions panicked, or a run condition
    /// of one of its sets panicked in this frame (in whichever node of the
    /// set evaluated it: each node of the set fails alike).
    Panicked = 1,
    /// Not run: a node it depends on panicked or was skipped.
    Skipped = 2,
    /// Not run because a run condition of the node or of one of its sets
    /// did not hold, or the node or one of its sets is disabled
    /// ([`TaskGraph::set_enabled`](super::TaskGraph::set_enabled)). Its
    /// dependents run as if it had.
    Off = 3,
}

impl NodeOutcome {
    pub(super) fn from_u8(value: u8) -> Self {
        match value {
            0 => NodeOutcome::Ran,
            1 => NodeOutcome::Panicked,
            3 => NodeOutcome::Off,
            _ => NodeOutcome::Skipped,
        }
    }

    /// Whether the node's dependents are skipped: it failed, or was skipped
    /// for a failure. A node that is [`Off`](NodeOutcome::Off) does not
    /// skip them.
    pub(super) fn fails_dependents(self) -> bool {
        matches!(self, NodeOutcome::Panicked | NodeOutcome::Skipped)
    }
}

/// What a frame recorded about a node, in clock ticks.
#[derive(Copy, Clone, Debug)]
pub(super) struct RawTiming {
    pub(super) start: u64,
    pub(super) end: u64,
    pub(super) thread: u32,
    pub(super) outcome: NodeOutcome,
}

/// One node's run in the current frame; see the module docs.
#[repr(align(32))]
pub(super) struct RunRecord {
    start: AtomicU64,
    end: AtomicU64,
    /// The thread's slot (low 32 bits) and the [`NodeOutcome`] (above).
    thread_and_outcome: AtomicU64,
}

impl RunRecord {
    /// The record of a node that has not run: no thread, skipped.
    pub(super) fn new() -> Self {
        RunRecord {
            start: AtomicU64::new(0),
            end: AtomicU64::new(0),
            thread_and_outcome: AtomicU64::new(pack(u32::MAX, NodeOutcome::Skipped)),
        }
    }

    /// Written by the thread that ran (or skipped) the node.
    #[inline]
    pub(super) fn write(&self, start: u64, end: u64, thread: u32, outcome: NodeOutcome) {
        // Relaxed, all: read after the frame latch (module docs).
        self.start.store(start, Ordering::Relaxed);
        self.end.store(end, Ordering::Relaxed);
        self.thread_and_outcome
            .store(pack(thread, outcome), Ordering::Relaxed);
    }

    /// Read by the frame's thread after the frame, or from the statistics.
    #[inline]
    pub(super) fn read(&self) -> RawTiming {
        // Relaxed, all: after the frame latch (module docs).
        let thread_and_outcome = self.thread_and_outcome.load(Ordering::Relaxed);
        RawTiming {
            start: self.start.load(Ordering::Relaxed),
            end: self.end.load(Ordering::Relaxed),
            thread: thread_and_outcome as u32,
            outcome: NodeOutcome::from_u8((thread_and_outcome >> 32) as u8),
        }
    }
}

fn pack(thread: u32, outcome: NodeOutcome) -> u64 {
    u64::from(thread) | (outcome as u64) << 32
}

impl fmt::Debug for RunRecord {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.read().fmt(f)
    }
}

impl Clone for RunRecord {
    fn clone(&self) -> Self {
        let record = RunRecord::new();
        let RawTiming {
            start,
            end,
            thread,
            outcome,
        } = self.read();
        record.write(start, end, thread, outcome);
        record
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_reads_back_what_was_written() {
        let record = RunRecord::new();
        let fresh = record.read();
        assert_eq!(
            (fresh.thread, fresh.outcome),
            (u32::MAX, NodeOutcome::Skipped)
        );
        for outcome in [
            NodeOutcome::Ran,
            NodeOutcome::Panicked,
            NodeOutcome::Skipped,
        ] {
            record.write(7, 11, 3, outcome);
            let read = record.read();
            assert_eq!((read.start, read.end, read.thread), (7, 11, 3));
            assert_eq!(read.outcome, outcome);
        }
        record.write(0, 0, u32::MAX, NodeOutcome::Ran);
        assert_eq!(record.read().thread, u32::MAX);
        assert_eq!(std::mem::size_of::<RunRecord>(), 32);
    }
}

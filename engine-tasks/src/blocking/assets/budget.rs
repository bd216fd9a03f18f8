//! The byte budget: file bytes read but not yet decoded. A reader asks
//! for its file's size before reading ([`Inner::admit`]) and waits, on its
//! blocking thread, while the bytes held plus its own would pass the cap,
//! unless nothing is held (so a file larger than the whole budget still
//! loads, alone). The [`Ticket`] it gets travels with the bytes to the
//! decoder and gives them back when decoding ends, or when the job is
//! dropped, waking the waiting readers.

use super::streamer::Inner;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

/// The cap on bytes read but not yet decoded.
pub(super) struct Budget {
    pub(super) max: u64,
    used: Mutex<u64>,
    freed: Condvar,
    peak: AtomicU64,
}

/// Bytes admitted under the budget, given back on drop (when decoding ends,
/// or the job is dropped).
pub(super) struct Ticket {
    inner: Arc<Inner>,
    bytes: u64,
}

impl Ticket {
    /// Corrects the admitted size to what was read.
    pub(super) fn resize(&mut self, bytes: u64) {
        let budget = &self.inner.budget;
        let mut used = budget.used.lock().unwrap_or_else(|e| e.into_inner());
        *used = *used - self.bytes + bytes;
        self.bytes = bytes;
        self.inner.publish_budget(*used);
        drop(used);
        budget.freed.notify_all();
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        self.resize(0);
    }
}

impl Budget {
    pub(super) fn new(max: u64) -> Budget {
        Budget {
            max,
            used: Mutex::new(0),
            freed: Condvar::new(),
            peak: AtomicU64::new(0),
        }
    }

    /// The most bytes ever held.
    pub(super) fn peak(&self) -> u64 {
        // Relaxed: a statistic.
        self.peak.load(Ordering::Relaxed)
    }
}

impl Inner {
    /// Waits until `bytes` more fit in the budget, or nothing else is held
    /// (so a file larger than the budget still loads), and takes them.
    pub(super) fn admit(self: &Arc<Inner>, bytes: u64) -> Ticket {
        let budget = &self.budget;
        let mut used = budget.used.lock().unwrap_or_else(|e| e.into_inner());
        while *used > 0 && used.saturating_add(bytes) > budget.max {
            // A timeout only as a safety net: every ticket notifies.
            used = budget
                .freed
                .wait_timeout(used, Duration::from_millis(100))
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        *used += bytes;
        self.publish_budget(*used);
        Ticket {
            inner: self.clone(),
            bytes,
        }
    }

    fn publish_budget(&self, used: u64) {
        // Relaxed: statistics.
        self.counters.undecoded.store(used, Ordering::Relaxed);
        self.budget.peak.fetch_max(used, Ordering::Relaxed);
    }
}

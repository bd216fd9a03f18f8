//! The byte budget: file bytes read but not yet decoded. A reader asks
//! for its file's size before reading ([`Inner::admit`]) and waits, on its
//! blocking thread, while the bytes held plus its own would pass the cap,
//! unless nothing is held (so a file larger than the whole budget still
//! loads, alone). Readers are admitted in the order they asked here (which
//! may differ from the order their requests were queued: each reader opens
//! its file first), so one waiting for room (a large file) is not
//! overtaken by later, smaller ones.
//! The [`Ticket`] it gets travels with the bytes to the decoder and gives
//! them back when decoding ends, or when the job is dropped, waking the
//! waiting readers.

use super::streamer::Inner;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

/// The cap on bytes read but not yet decoded.
pub(super) struct Budget {
    pub(super) max: u64,
    held: Mutex<Held>,
    freed: Condvar,
    peak: AtomicU64,
}

/// The bytes held, and the readers' turns.
#[derive(Default)]
struct Held {
    used: u64,
    /// The turn the next reader to ask gets.
    next_turn: u64,
    /// The turn admitted next.
    serving: u64,
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
        let inner = &self.inner;
        inner
            .budget
            .resize(self.bytes, bytes, |used| inner.publish_budget(used));
        self.bytes = bytes;
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
            held: Mutex::new(Held::default()),
            freed: Condvar::new(),
            peak: AtomicU64::new(0),
        }
    }

    /// The most bytes ever held.
    pub(super) fn peak(&self) -> u64 {
        // Relaxed: a statistic.
        self.peak.load(Ordering::Relaxed)
    }

    fn lock(&self) -> MutexGuard<'_, Held> {
        self.held.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Waits for this caller's turn and then until `bytes` more fit, or
    /// nothing is held, and takes them; `publish` sees the bytes held.
    fn take(&self, bytes: u64, publish: impl FnOnce(u64)) {
        let mut held = self.lock();
        let turn = held.next_turn;
        held.next_turn += 1;
        while held.serving != turn || (held.used > 0 && held.used.saturating_add(bytes) > self.max)
        {
            // A timeout only as a safety net: every change notifies.
            held = self
                .freed
                .wait_timeout(held, Duration::from_millis(100))
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        held.serving += 1;
        held.used += bytes;
        publish(held.used);
        drop(held);
        // The next in line may fit too.
        self.freed.notify_all();
    }

    /// Changes a holding of `from` bytes to `to`.
    fn resize(&self, from: u64, to: u64, publish: impl FnOnce(u64)) {
        let mut held = self.lock();
        held.used = held.used - from + to;
        publish(held.used);
        drop(held);
        self.freed.notify_all();
    }

    /// Readers waiting for their turn or for room.
    #[cfg(test)]
    fn waiting(&self) -> u64 {
        let held = self.lock();
        held.next_turn - held.serving
    }
}

impl Inner {
    /// Waits until `bytes` more fit in the budget, or nothing else is held
    /// (so a file larger than the budget still loads), after the readers
    /// that asked before, and takes them.
    pub(super) fn admit(self: &Arc<Inner>, bytes: u64) -> Ticket {
        self.budget.take(bytes, |used| self.publish_budget(used));
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

#[cfg(test)]
mod tests {
    use super::Budget;
    use std::sync::{mpsc, Arc};
    use std::time::{Duration, Instant};

    /// Polls `done` until it holds; fails as hung after 30 s.
    fn wait_for(what: &str, done: impl Fn() -> bool) {
        let start = Instant::now();
        while !done() {
            assert!(start.elapsed() < Duration::from_secs(30), "{what}: hung");
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    #[test]
    fn a_reader_waiting_for_room_is_not_overtaken_by_a_smaller_one() {
        let budget = Arc::new(Budget::new(100));
        budget.take(60, |_| {});
        let (done, order) = mpsc::channel();
        let taker = |bytes: u64| {
            let (budget, done) = (budget.clone(), done.clone());
            std::thread::spawn(move || {
                budget.take(bytes, |_| {});
                done.send(bytes).unwrap();
            })
        };
        // Larger than the budget: waits until nothing is held.
        let big = taker(200);
        wait_for("the large read waiting", || budget.waiting() == 1);
        // Fits beside the 60 bytes held, but asked later: waits its turn.
        let small = taker(10);
        wait_for("the small read in line", || budget.waiting() == 2);
        let next = || order.recv_timeout(Duration::from_secs(30)).expect("hung");
        budget.resize(60, 0, |_| {});
        assert_eq!(next(), 200, "the large read goes first");
        budget.resize(200, 0, |_| {});
        assert_eq!(next(), 10);
        big.join().unwrap();
        small.join().unwrap();
    }
}

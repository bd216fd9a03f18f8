//! Dummy tasks for the primitive models and unit tests: headers whose run
//! function does nothing, and a tracker that checks each was taken once.

use crate::sync::task::{Header, TaskRef};
use std::ptr::NonNull;

use std::sync::Arc;

/// How many rounds a stress test runs: `n` on the hardware, a two-hundredth
/// of it (at least 50) under Miri, which interprets each step thousands of
/// times slower and explores thread interleavings by preempting at random
/// rather than by volume.
pub(crate) const fn stress_rounds(n: usize) -> usize {
    if cfg!(miri) {
        let scaled = n / 200;
        if scaled < 50 {
            50
        } else {
            scaled
        }
    } else {
        n
    }
}

pub(crate) struct Tasks {
    headers: Box<[Header]>,
}

impl Tasks {
    pub(crate) fn new(n: usize) -> Self {
        Tasks {
            headers: (0..n).map(|_| Header::new(|_| {})).collect(),
        }
    }

    /// One reference per task; call once.
    pub(crate) fn refs(&self) -> impl Iterator<Item = TaskRef> + '_ {
        self.headers.iter().map(|h| {
            let ptr = NonNull::from(h);
            // SAFETY: the headers outlive every model run, and each reference
            // is handed out once.
            unsafe { TaskRef::from_raw(ptr) }
        })
    }
}

/// Records every task taken. Uses a std mutex
/// on purpose: the bookkeeping is not part of what loom should explore.
#[derive(Clone)]
pub(crate) struct Tracker {
    seen: Arc<std::sync::Mutex<Vec<usize>>>,
    expected: usize,
}

impl Tracker {
    pub(crate) fn new(expected: usize) -> Self {
        Tracker {
            seen: Arc::new(std::sync::Mutex::new(Vec::new())),
            expected,
        }
    }

    pub(crate) fn take(&self, task: TaskRef) {
        self.seen
            .lock()
            .unwrap()
            .push(task.into_raw().as_ptr() as usize);
    }

    pub(crate) fn assert_all_once(&self) {
        let mut seen = self.seen.lock().unwrap().clone();
        seen.sort_unstable();
        let before = seen.len();
        seen.dedup();
        assert_eq!(before, seen.len(), "a task was taken twice");
        assert_eq!(seen.len(), self.expected, "a task was lost");
    }
}

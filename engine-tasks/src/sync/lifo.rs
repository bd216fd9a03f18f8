//! The LIFO slot: one atomic pointer per thread and lane holding the task
//! pushed last, which the owner runs next (cache-warm) and idle threads may
//! steal while the owner is busy.
//!
//! # States
//!
//! Empty (null) or holding one task. The owner's [`LifoSlot::put`] swaps the
//! new task in (AcqRel) and gets back the one it displaced, which it queues
//! elsewhere; anyone's [`LifoSlot::take`] swaps null in (Acquire). Every
//! transfer is a single swap, so a task is handed to exactly one party: the
//! putter that displaced it or the taker that emptied the slot. A racy
//! non-atomic "is it mine?" check never happens; a relaxed look first only
//! avoids writing to an empty slot's cache line.

use crate::loom::atomic::{AtomicPtr, Ordering};
use crate::sync::task::{Header, TaskRef};
use crossbeam_utils::CachePadded;
use std::ptr::{self, NonNull};

/// See the module docs.
pub(crate) struct LifoSlot {
    task: CachePadded<AtomicPtr<Header>>,
}

impl LifoSlot {
    pub(crate) fn new() -> Self {
        LifoSlot {
            task: CachePadded::new(AtomicPtr::new(ptr::null_mut())),
        }
    }

    /// Puts `task` in the slot and returns the task it displaced. Owner only.
    pub(crate) fn put(&self, task: TaskRef) -> Option<TaskRef> {
        // AcqRel: release publishes the task to takers' Acquire swap;
        // acquire takes ownership of the displaced one.
        let displaced = self.task.swap(task.into_raw().as_ptr(), Ordering::AcqRel);
        // SAFETY: the swap handed us the only reference to the displaced task.
        NonNull::new(displaced).map(|t| unsafe { TaskRef::from_raw(t) })
    }

    /// Takes the task in the slot, if any. Owner or thief.
    pub(crate) fn take(&self) -> Option<TaskRef> {
        // Relaxed: a look that saves the swap on an empty slot; the swap
        // below decides.
        if self.task.load(Ordering::Relaxed).is_null() {
            return None;
        }
        // Acquire: pairs with the AcqRel swap in `put`.
        let task = NonNull::new(self.task.swap(ptr::null_mut(), Ordering::Acquire))?;
        // SAFETY: the swap handed us the only reference.
        Some(unsafe { TaskRef::from_raw(task) })
    }

    /// Whether the slot looks occupied (a hint).
    pub(crate) fn is_occupied(&self) -> bool {
        // Relaxed: a hint; `take` decides.
        !self.task.load(Ordering::Relaxed).is_null()
    }
}

#[cfg(all(test, loom))]
mod loom_models {
    use super::*;
    use crate::loom::{thread, Arc};
    use crate::test_support::{Tasks, Tracker};

    /// The owner puts three tasks (each displacing the last) and takes what
    /// is left while a thief takes concurrently: every task ends up with
    /// exactly one party.
    #[test]
    fn every_task_goes_to_exactly_one_party() {
        loom::model(|| {
            let tasks = Box::leak(Box::new(Tasks::new(3)));
            let tracker = Tracker::new(3);
            let slot = Arc::new(LifoSlot::new());
            let thief = {
                let (slot, tracker) = (slot.clone(), tracker.clone());
                thread::spawn(move || {
                    if let Some(task) = slot.take() {
                        tracker.take(task);
                    }
                })
            };
            for task in tasks.refs() {
                if let Some(displaced) = slot.put(task) {
                    tracker.take(displaced);
                }
            }
            if let Some(task) = slot.take() {
                tracker.take(task);
            }
            thief.join().unwrap();
            tracker.assert_all_once();
        });
    }
}

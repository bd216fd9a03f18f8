//! Intrusive tasks.
//!
//! The pool never allocates to queue a task. Whoever creates a task owns the
//! memory it lives in (a reference-counted spawn cell, a stack frame waiting
//! in `join`, a compiled graph node) and embeds a [`Header`] at offset zero
//! (`#[repr(C)]`). The queues move `TaskRef`s, raw pointers to headers; the
//! overflow and injector queues link headers through their `next` field.
//!
//! A `TaskRef` is a unique, linear token: it sits in exactly one queue slot at
//! a time, and whoever takes it out either runs it or hands it to another
//! queue. Running consumes it.

use crate::latch::Latch;
use crate::loom::atomic::AtomicPtr;
use std::panic::Location;
use std::ptr::{self, NonNull};

/// Type-erased entry point of a task.
///
/// # Safety
///
/// Called at most once per task, with the pointer of the header that was
/// queued; the implementation may free the memory holding the header.
pub(crate) type RunFn = unsafe fn(NonNull<Header>);

/// The part of every task that the queues see.
#[repr(C)]
pub(crate) struct Header {
    /// Link for the intrusive overflow and injector queues. Only the queue
    /// that currently holds the task touches it.
    pub(crate) next: AtomicPtr<Header>,
    run: RunFn,
    /// Where the task was spawned, for profiler zones.
    site: Option<&'static Location<'static>>,
    /// The address of the latch of the scope the task belongs to (0 for
    /// tasks of no scope). An identity only, never dereferenced: it decides
    /// whether a thread's scope credit must be settled before the task runs
    /// (credit.rs).
    scope: usize,
}

impl Header {
    pub(crate) fn new(run: RunFn) -> Self {
        Header {
            next: AtomicPtr::new(ptr::null_mut()),
            run,
            site: None,
            scope: 0,
        }
    }

    pub(crate) fn for_scope(run: RunFn, scope: &Latch) -> Self {
        Header {
            scope: ptr::from_ref(scope).addr(),
            ..Header::new(run)
        }
    }

    pub(crate) fn with_site(run: RunFn, site: &'static Location<'static>) -> Self {
        Header {
            site: Some(site),
            ..Header::new(run)
        }
    }
}

/// An owned reference to a queued task; see the module docs.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct TaskRef(NonNull<Header>);

// SAFETY: a TaskRef is a unique token for a task whose payload is `Send`
// (every constructor of a task requires it); moving it to the thread that will
// run the task is exactly what the pool is for.
unsafe impl Send for TaskRef {}

impl TaskRef {
    /// # Safety
    ///
    /// `header` must point to a live task header that stays valid until the
    /// task has run, and no other `TaskRef` to it may exist.
    #[inline(always)]
    pub(crate) unsafe fn from_raw(header: NonNull<Header>) -> Self {
        TaskRef(header)
    }

    #[inline(always)]
    pub(crate) fn into_raw(self) -> NonNull<Header> {
        self.0
    }

    #[inline(always)]
    pub(crate) fn as_ptr(&self) -> *mut Header {
        self.0.as_ptr()
    }

    /// Where the task was spawned, if recorded.
    #[inline(always)]
    pub(crate) fn site(&self) -> Option<&'static Location<'static>> {
        // SAFETY: by the constructor's contract the header is live; `site`
        // is never written after construction.
        unsafe { (*self.0.as_ptr()).site }
    }

    /// The address of the latch of the task's scope, or 0; see [`Header`].
    #[inline(always)]
    pub(crate) fn scope(&self) -> usize {
        // SAFETY: as in `site`.
        unsafe { (*self.0.as_ptr()).scope }
    }

    /// Runs the task, consuming the reference.
    #[inline(always)]
    pub(crate) fn run(self) {
        // SAFETY: by the constructor's contract the header is live and this
        // is the only reference, so this is the single call `RunFn` allows.
        unsafe {
            let run = (*self.0.as_ptr()).run;
            run(self.0)
        }
    }
}

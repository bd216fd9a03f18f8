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

use crate::loom::atomic::AtomicPtr;
use crate::sync::latch::Latch;
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
    tag: Tag,
}

/// Where a task was spawned (for profiler zones) or which scope it belongs
/// to (for scope credit, credit.rs), in one word: every task has at most one
/// of them, so a header stays three words (every spawned cell, `join` half
/// and graph node embeds one).
///
/// Null for neither; a `&'static Location` (aligned, so bit 0 is clear); or
/// the address of the scope's latch with bit 0 set, an identity that is only
/// compared, never dereferenced.
#[derive(Clone, Copy)]
struct Tag(*const ());

// SAFETY: the pointer is either to `'static` immutable data (a `Location`)
// or never dereferenced (a scope key).
unsafe impl Send for Tag {}
// SAFETY: as above.
unsafe impl Sync for Tag {}

/// The scope key of the scope whose latch is at `latch` (what
/// [`TaskRef::scope`] returns for its tasks).
#[inline(always)]
pub(crate) fn scope_key(latch: *const Latch) -> usize {
    latch.addr() | 1
}

impl Header {
    pub(crate) fn new(run: RunFn) -> Self {
        Header {
            next: AtomicPtr::new(ptr::null_mut()),
            run,
            tag: Tag(ptr::null()),
        }
    }

    pub(crate) fn for_scope(run: RunFn, scope: &Latch) -> Self {
        let key = ptr::from_ref(scope).cast::<()>();
        debug_assert_eq!(key.addr() & 1, 0, "latches are word-aligned");
        Header {
            tag: Tag(key.map_addr(|a| a | 1)),
            ..Header::new(run)
        }
    }

    pub(crate) fn with_site(run: RunFn, site: &'static Location<'static>) -> Self {
        let site = ptr::from_ref(site).cast::<()>();
        debug_assert_eq!(site.addr() & 1, 0, "locations are word-aligned");
        Header {
            tag: Tag(site),
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
        // SAFETY: by the constructor's contract the header is live; `tag` is
        // never written after construction.
        let tag = unsafe { (*self.0.as_ptr()).tag.0 };
        if tag.is_null() || tag.addr() & 1 != 0 {
            return None;
        }
        // SAFETY: an untagged, non-null tag came from a `&'static Location`
        // in `Header::with_site`.
        Some(unsafe { &*tag.cast::<Location<'static>>() })
    }

    /// The scope key of the task (its scope latch's address, tagged), or 0
    /// for a task of no scope; see [`Tag`].
    #[inline(always)]
    pub(crate) fn scope(&self) -> usize {
        // SAFETY: as in `site`.
        let tag = unsafe { (*self.0.as_ptr()).tag.0 };
        if tag.addr() & 1 != 0 {
            tag.addr()
        } else {
            0
        }
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

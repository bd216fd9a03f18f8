//! Spawned tasks and their join handles.
//!
//! A spawned task is one reference-counted allocation holding the task
//! header, a completion latch, and a stage that is first the closure, then its
//! result. The queue holds one reference, the [`JoinHandle`] the other, so the
//! task may finish before or after the handle is joined or dropped. A panic in
//! the closure is caught and stored; [`JoinHandle::join`] returns it as
//! [`JoinError::Panicked`] and the worker carries on.

use crate::faults::{self, Site};
use crate::lane::Lane;
use crate::pool::cancel::CancellationToken;
use crate::pool::forbid_waits;
use crate::pool::registry::Shared;
use crate::pool::worker;
use crate::sync::latch::Latch;
use crate::sync::task::{Header, TaskRef};
use std::any::Any;
use std::cell::UnsafeCell;
use std::fmt;
use std::panic::Location;
use std::panic::{self, AssertUnwindSafe};
use std::ptr::NonNull;
use std::sync::Arc;

/// What a spawned task runs: a plain closure, or a [`WithToken`] closure
/// that receives its cancellation token. Keeping the user's closure as the
/// cell's payload lets a refused spawn hand it back unchanged.
pub(crate) trait Body<T>: Send {
    fn call(self) -> T;
}

impl<F, T> Body<T> for F
where
    F: FnOnce() -> T + Send,
{
    fn call(self) -> T {
        self()
    }
}

/// A closure spawned with `spawn_cancellable`, and its token.
pub(crate) struct WithToken<F> {
    pub(crate) f: F,
    pub(crate) token: CancellationToken,
}

impl<F, T> Body<T> for WithToken<F>
where
    F: FnOnce(&CancellationToken) -> T + Send,
{
    fn call(self) -> T {
        (self.f)(&self.token)
    }
}

enum Stage<F, T> {
    Pending(F),
    Done(Result<T, JoinError>),
    Taken,
}

#[repr(C)]
pub(crate) struct SpawnCell<F, T> {
    header: Header,
    latch: Latch,
    lane: Lane,
    token: Option<CancellationToken>,
    stage: UnsafeCell<Stage<F, T>>,
}

// SAFETY: the stage is accessed by one thread at a time: the runner before
// the latch is set, the handle after it observed the latch (acquire); F and T
// are Send, which is all moving them between those threads needs.
unsafe impl<F: Send, T: Send> Sync for SpawnCell<F, T> {}

/// The type-erased view a [`JoinHandle`] keeps.
trait Outcome<T>: Send + Sync {
    fn latch(&self) -> &Latch;
    fn lane(&self) -> Lane;
    /// # Safety
    ///
    /// Only after the latch is set, and at most once.
    unsafe fn take(&self) -> Result<T, JoinError>;
}

impl<F, T> SpawnCell<F, T>
where
    F: Body<T>,
    T: Send,
{
    pub(crate) fn new(
        lane: Lane,
        token: Option<CancellationToken>,
        f: F,
        site: &'static Location<'static>,
    ) -> Arc<Self> {
        Arc::new(SpawnCell {
            header: Header::with_site(Self::run, site),
            latch: Latch::new(1),
            lane,
            token,
            stage: UnsafeCell::new(Stage::Pending(f)),
        })
    }

    /// The queue's reference to the task.
    pub(crate) fn task_ref(this: &Arc<Self>) -> TaskRef {
        let raw = Arc::into_raw(this.clone()).cast_mut().cast::<Header>();
        // SAFETY: `header` is the first field of a `repr(C)` struct, so the
        // pointer is the header's; the Arc reference we leaked keeps it alive
        // until `run` (or `reclaim`) takes it back.
        unsafe { TaskRef::from_raw(NonNull::new_unchecked(raw)) }
    }

    /// Takes back a task reference that was never queued and returns the
    /// closure (used when submission fails).
    pub(crate) fn reclaim(this: Arc<Self>, task: TaskRef) -> F {
        // SAFETY: `task` came from `task_ref(&this)` and was not run.
        drop(unsafe { Arc::from_raw(task.into_raw().as_ptr().cast::<Self>()) });
        // SAFETY: the task never ran, so nobody else touches the stage.
        match unsafe { std::ptr::replace(this.stage.get(), Stage::Taken) } {
            Stage::Pending(f) => f,
            _ => unreachable!("a reclaimed task already ran"),
        }
    }

    unsafe fn run(header: NonNull<Header>) {
        // SAFETY: `header` came from `task_ref`, so it is an `Arc<Self>`
        // reference that this call now owns.
        let this = unsafe { Arc::from_raw(header.as_ptr().cast::<Self>()) };
        // SAFETY: the stage is ours until we set the latch (see `Sync` impl).
        let stage = unsafe { std::ptr::replace(this.stage.get(), Stage::Taken) };
        let Stage::Pending(f) = stage else {
            unreachable!("a spawned task ran twice");
        };
        let result = if this.token.as_ref().is_some_and(|t| t.is_cancelled()) {
            // A panicking destructor of the unrun closure has nowhere to go;
            // it must not unwind into the scheduler.
            drop_quietly(f);
            Err(JoinError::Cancelled)
        } else {
            panic::catch_unwind(AssertUnwindSafe(|| {
                faults::maybe_panic(Site::TaskBody);
                f.call()
            }))
            .map_err(JoinError::Panicked)
        };
        // SAFETY: as above; the handle reads only after the latch.
        unsafe { *this.stage.get() = Stage::Done(result) };
        // SAFETY: `this` (an `Arc`) keeps the latch alive past the call.
        unsafe { Latch::count_down(&raw const this.latch) };
        // If the handle is gone this drops the result; a panicking
        // destructor of a detached task's result is swallowed rather than
        // unwinding into the scheduler.
        drop_quietly(this);
    }
}

/// Drops `value` where nothing may unwind (a scheduler's thread, or a
/// thread already unwinding): a panic of its destructor is caught, and
/// that panic's payload is dropped the same way; if dropping it panics in
/// turn, the payload of that second panic is forgotten, not dropped.
pub(crate) fn drop_quietly<T>(value: T) {
    if let Err(payload) = panic::catch_unwind(AssertUnwindSafe(move || drop(value))) {
        if let Err(second) = panic::catch_unwind(AssertUnwindSafe(move || drop(payload))) {
            std::mem::forget(second);
        }
    }
}

impl<F, T> Outcome<T> for SpawnCell<F, T>
where
    F: Body<T>,
    T: Send,
{
    fn latch(&self) -> &Latch {
        &self.latch
    }

    fn lane(&self) -> Lane {
        self.lane
    }

    unsafe fn take(&self) -> Result<T, JoinError> {
        // SAFETY: the caller saw the latch set, so the runner is done with
        // the stage, and takes it only once.
        match unsafe { std::ptr::replace(self.stage.get(), Stage::Taken) } {
            Stage::Done(result) => result,
            _ => unreachable!("join handle read an unfinished task"),
        }
    }
}

/// Owns the result of a spawned task.
///
/// Dropping the handle detaches the task: it still runs. [`join`](Self::join)
/// is block-on-complete; see its docs for what the waiting thread runs.
#[must_use = "dropping a JoinHandle detaches the task; call join() to wait for it"]
pub struct JoinHandle<T> {
    cell: Arc<dyn Outcome<T>>,
    /// The pool the task runs in. `join` helps in this pool and registers
    /// its waiter with this pool's parkers, and the reference keeps them
    /// alive for as long as the handle can wait.
    pool: Arc<Shared>,
}

impl<T: Send + 'static> JoinHandle<T> {
    pub(crate) fn new<F>(cell: Arc<SpawnCell<F, T>>, pool: Arc<Shared>) -> Self
    where
        F: Body<T> + 'static,
    {
        JoinHandle { cell, pool }
    }
}

impl<T> JoinHandle<T> {
    /// Whether the task has finished. A task cancelled before it started
    /// finishes when a thread takes it from its queue and ends it as
    /// cancelled; until then this is `false`, as for any queued task.
    ///
    /// Poll it once per frame to pick up a long job without blocking:
    ///
    /// ```
    /// use engine_tasks::{Lane, Pool};
    ///
    /// let pool = Pool::builder().threads(1).build().unwrap();
    /// let navmesh = pool.spawn(Lane::Background, || vec![0u8; 4096]).unwrap();
    /// while !navmesh.is_finished() {
    ///     std::thread::yield_now(); // run a frame with the old navmesh
    /// }
    /// // Finished, so this does not wait.
    /// assert_eq!(navmesh.join().unwrap().len(), 4096);
    /// ```
    pub fn is_finished(&self) -> bool {
        self.cell.latch().is_set()
    }

    /// The lane the task was spawned in.
    pub fn lane(&self) -> Lane {
        self.cell.lane()
    }

    /// Waits for the task and returns its result, or the panic it raised.
    ///
    /// While it waits, the calling thread runs queued tasks of the task's
    /// pool that are **at least as urgent** as this task's lane, most urgent
    /// first, and sleeps (no CPU) only when there are none. These may be
    /// unrelated tasks, so do not join while holding a lock that other tasks
    /// take; inside [`forbid_waits`](crate::forbid_waits) it panics, even if
    /// the task is done. A thread outside the pool joins as the pool's guest (one at a
    /// time); a second outside thread sleeps until the task is done, unless
    /// the pool has no threads or is shutting down, when it runs what it can.
    /// A thread of another pool (its worker, or its guest) instead runs its
    /// own pool's tasks, of every lane, while it waits: a task it waits for
    /// may itself wait on work of that pool. In a pool without a worker
    /// thread (none configured or started yet, every start failed, or shut
    /// down) a waiting thread runs tasks of every lane: nothing else would.
    /// A guest whose pool was shut down while it waited (by a drop inside
    /// one of the pool's tasks) runs what is left in the guest slot's
    /// queues, the tasks it spawned among them, before it returns.
    pub fn join(self) -> Result<T, JoinError> {
        forbid_waits::check("`JoinHandle::join`");
        let latch = self.cell.latch();
        if !latch.is_set() {
            let floor = self.cell.lane();
            worker::with_slot(&self.pool, |local| match local {
                Some(local) => local.wait_until(latch, || floor),
                None => crate::pool::wait::wait_without_slot(&self.pool, latch, None),
            });
        }
        // SAFETY: the latch is set (the waits return only then), and `self`
        // is consumed, so this is the only take.
        unsafe { self.cell.take() }
    }
}

impl<T> fmt::Debug for JoinHandle<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JoinHandle")
            .field("lane", &self.lane())
            .field("finished", &self.is_finished())
            .finish()
    }
}

/// Why a task produced no result.
///
/// ```
/// use engine_tasks::{CancellationToken, JoinError, Lane, Pool};
///
/// let pool = Pool::builder().threads(1).build().unwrap();
/// let load = pool.spawn(Lane::Normal, || -> u32 { panic!("save file is corrupt") });
/// let error = load.unwrap().join().unwrap_err();
/// assert!(error.is_panic());
/// assert_eq!(error.panic_message(), Some("save file is corrupt"));
///
/// let token = CancellationToken::new();
/// token.cancel();
/// let skipped = pool.spawn_cancellable(Lane::Background, &token, |_| ()).unwrap();
/// assert!(matches!(skipped.join(), Err(JoinError::Cancelled)));
/// ```
#[non_exhaustive]
pub enum JoinError {
    /// The task panicked; the payload is what it panicked with.
    Panicked(Box<dyn Any + Send + 'static>),
    /// The task's cancellation token was cancelled before it started.
    Cancelled,
}

impl JoinError {
    /// The panic message, if the task panicked with a string.
    pub fn panic_message(&self) -> Option<&str> {
        match self {
            JoinError::Panicked(payload) => panic_message(payload.as_ref()),
            JoinError::Cancelled => None,
        }
    }

    /// Whether the task panicked.
    pub fn is_panic(&self) -> bool {
        matches!(self, JoinError::Panicked(_))
    }

    /// Re-raises the task's panic on this thread (or panics with
    /// "task was cancelled").
    pub fn resume(self) -> ! {
        match self {
            JoinError::Panicked(payload) => panic::resume_unwind(payload),
            JoinError::Cancelled => panic!("task was cancelled"),
        }
    }
}

/// The message of a panic payload, if it is a string.
///
/// ```
/// use engine_tasks::panic_message;
///
/// let payload = std::panic::catch_unwind(|| panic!("shader {} failed", 7)).unwrap_err();
/// assert_eq!(panic_message(&*payload), Some("shader 7 failed"));
/// ```
pub fn panic_message(payload: &(dyn Any + Send)) -> Option<&str> {
    payload
        .downcast_ref::<&'static str>()
        .copied()
        .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
}

impl fmt::Debug for JoinError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            JoinError::Panicked(_) => f
                .debug_tuple("Panicked")
                .field(&self.panic_message().unwrap_or("<non-string panic payload>"))
                .finish(),
            JoinError::Cancelled => f.write_str("Cancelled"),
        }
    }
}

impl fmt::Display for JoinError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            JoinError::Panicked(_) => write!(
                f,
                "task panicked: {}",
                self.panic_message().unwrap_or("<non-string panic payload>")
            ),
            JoinError::Cancelled => f.write_str("task was cancelled before it started"),
        }
    }
}

impl std::error::Error for JoinError {}

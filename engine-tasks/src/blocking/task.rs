//! A blocking task's handle and how its result reaches whoever wants it:
//! a waiter ([`BlockingTask::wait`]) or a continuation scheduled on the
//! work-stealing pool ([`BlockingTask::then`]).
//!
//! # States
//!
//! A task's [`Completion`] holds one [`Outcome`] under a mutex:
//! *pending* (with or without a continuation) → *done* (its result, until
//! the handle takes it) → *taken*. Completing a pending task that has a
//! continuation runs the continuation at once instead of storing the
//! result; `then` on a task already done runs it at once too. So a result
//! is delivered exactly once, to whichever of the two came second.

use crate::blocking::pool::Inner;
use crate::lane::Lane;
use crate::pool::spawn::JoinError;
use crate::pool::PoolHandle;
use crate::sync::latch::Latch;
use std::fmt;
use std::panic::{self, AssertUnwindSafe};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, Weak};

type Continuation<T> = Box<dyn FnOnce(Result<T, JoinError>) + Send>;

/// Runs a continuation where it cannot hand a panic to anyone (a pool that
/// refused it made it run here): the panic is reported and dropped, so the
/// blocking thread survives.
fn run_continuation<T>(continuation: Continuation<T>, result: Result<T, JoinError>) {
    if let Err(payload) = panic::catch_unwind(AssertUnwindSafe(|| continuation(result))) {
        let message =
            crate::pool::spawn::panic_message(&*payload).unwrap_or("<non-string payload>");
        eprintln!("engine-tasks: a blocking task's continuation panicked: {message}");
        crate::pool::spawn::drop_quietly(payload);
    }
}

enum Outcome<T> {
    Pending(Option<Continuation<T>>),
    Done(Result<T, JoinError>),
    Taken,
}

pub(super) struct Completion<T> {
    outcome: Mutex<Outcome<T>>,
    finished: Condvar,
    /// Set once `outcome` holds the result: a thread of a work-stealing
    /// pool waits on it while it runs that pool's work.
    done: Latch,
}

impl<T> Completion<T> {
    pub(super) fn new() -> Self {
        Completion {
            outcome: Mutex::new(Outcome::Pending(None)),
            finished: Condvar::new(),
            done: Latch::new(1),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Outcome<T>> {
        self.outcome.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(super) fn complete(&self, result: Result<T, JoinError>) {
        let mut outcome = self.lock();
        match std::mem::replace(&mut *outcome, Outcome::Taken) {
            Outcome::Pending(Some(continuation)) => {
                drop(outcome);
                run_continuation(continuation, result);
            }
            Outcome::Pending(None) => {
                *outcome = Outcome::Done(result);
                drop(outcome);
                // SAFETY: the caller's `Arc` keeps `self`, and the latch,
                // alive past the call.
                unsafe { Latch::count_down(&self.done) };
                self.finished.notify_all();
            }
            Outcome::Done(_) | Outcome::Taken => unreachable!("a blocking task completed twice"),
        }
    }
}

/// The result of a task on a [`BlockingPool`](crate::BlockingPool): wait
/// for it, or have a continuation scheduled on the work-stealing pool when
/// it is ready. Dropping it detaches the task.
#[must_use = "dropping a BlockingTask detaches it; wait() for it or chain it with then()"]
pub struct BlockingTask<T> {
    completion: Arc<Completion<T>>,
    /// The pool the task was queued on, for a waiter that is one of its
    /// threads (`wait`).
    pool: Weak<Inner>,
}

impl<T> BlockingTask<T> {
    /// The handle of the task that completes `completion`, queued on
    /// `pool`.
    pub(super) fn new(completion: Arc<Completion<T>>, pool: Weak<Inner>) -> Self {
        BlockingTask { completion, pool }
    }
}

impl<T: Send + 'static> BlockingTask<T> {
    /// Whether the task has finished (or was cancelled by shutdown).
    pub fn is_finished(&self) -> bool {
        matches!(*self.completion.lock(), Outcome::Done(_))
    }

    /// Blocks the calling thread until the task finishes, and returns its
    /// result or its panic.
    ///
    /// On a thread that works in a work-stealing [`Pool`](crate::Pool) (its
    /// worker, or a thread waiting there as its guest) the wait runs that
    /// pool's tasks meanwhile, of every lane, since the blocking task may
    /// wait on one of them; do not wait while holding a lock that such
    /// tasks take. On a thread of the task's own blocking pool (one task
    /// waiting for another), the task runs right here if no thread has
    /// taken it yet: every thread may be as busy as the waiting one. On
    /// any other thread it sleeps and runs nothing. It panics inside
    /// [`forbid_waits`](crate::forbid_waits), on any thread.
    ///
    /// ```
    /// use engine_tasks::BlockingPool;
    ///
    /// let path = std::env::temp_dir().join(format!("slot-{}.sav", std::process::id()));
    /// std::fs::write(&path, b"level=3").unwrap();
    ///
    /// let io = BlockingPool::new();
    /// let file = path.clone();
    /// let read = io.spawn(move || std::fs::read_to_string(file)).unwrap();
    /// // A loading screen may block; a frame should use `then` instead.
    /// let save = read.wait().unwrap().unwrap();
    /// assert_eq!(save, "level=3");
    /// std::fs::remove_file(path).unwrap();
    /// ```
    pub fn wait(self) -> Result<T, JoinError> {
        crate::pool::forbid_waits::check("`BlockingTask::wait`");
        if !self.completion.done.is_set() {
            // A task of the same pool that waits for this one, still
            // queued, runs it itself: every thread may be as busy as it.
            if let Some(pool) = self.pool.upgrade() {
                let key = Arc::as_ptr(&self.completion) as *const () as usize;
                pool.run_if_queued_here(key);
            }
        }
        if !self.completion.done.is_set() {
            crate::pool::wait::wait_working_for_own_pool(&self.completion.done);
        }
        let mut outcome = self.completion.lock();
        loop {
            match std::mem::replace(&mut *outcome, Outcome::Taken) {
                Outcome::Done(result) => return result,
                pending @ Outcome::Pending(_) => {
                    *outcome = pending;
                    outcome = self
                        .completion
                        .finished
                        .wait(outcome)
                        .unwrap_or_else(|e| e.into_inner());
                }
                Outcome::Taken => unreachable!("a blocking task's result was taken twice"),
            }
        }
    }

    /// When the task finishes, runs `f` with its result as a task of `lane`
    /// on `pool`, so nobody waits for the I/O. If `pool` refuses the task
    /// (it is shutting down), `f` runs on the thread that completed the
    /// blocking task (a blocking thread, the caller of `shutdown` for a
    /// cancelled task, or the caller of `then` if it had already finished):
    /// the result is never lost.
    ///
    /// ```
    /// use engine_tasks::{BlockingPool, Lane, Pool};
    /// use std::sync::mpsc;
    ///
    /// let pool = Pool::builder().threads(1).build().unwrap();
    /// let io = BlockingPool::new();
    /// let (ready, loaded) = mpsc::channel();
    /// io.spawn(|| "256 256 level_heights".to_string()) // read the file
    ///     .unwrap()
    ///     .then(&pool, Lane::Background, move |text| {
    ///         // Parse on the work-stealing pool, off the I/O thread.
    ///         let text = text.unwrap();
    ///         let size: Vec<u32> = text.split(' ').take(2).map(|n| n.parse().unwrap()).collect();
    ///         ready.send(size).unwrap();
    ///     });
    /// // The game loop checks once per frame without blocking.
    /// let size = loop {
    ///     match loaded.try_recv() {
    ///         Ok(size) => break size,
    ///         Err(mpsc::TryRecvError::Empty) => std::thread::yield_now(), // run a frame
    ///         Err(mpsc::TryRecvError::Disconnected) => panic!("the loader failed"),
    ///     }
    /// };
    /// assert_eq!(size, [256, 256]);
    /// ```
    pub fn then<F>(self, pool: &PoolHandle, lane: Lane, f: F)
    where
        F: FnOnce(Result<T, JoinError>) + Send + 'static,
    {
        let pool = pool.clone();
        let continuation: Continuation<T> = Box::new(move |result| {
            if let Err(refused) = pool.spawn(lane, move || f(result)) {
                (refused.into_inner())();
            }
        });
        let mut outcome = self.completion.lock();
        match std::mem::replace(&mut *outcome, Outcome::Taken) {
            Outcome::Pending(None) => *outcome = Outcome::Pending(Some(continuation)),
            Outcome::Done(result) => {
                drop(outcome);
                run_continuation(continuation, result);
            }
            Outcome::Pending(Some(_)) | Outcome::Taken => {
                unreachable!("then() consumes the only handle")
            }
        }
    }
}

impl<T> fmt::Debug for BlockingTask<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BlockingTask").finish_non_exhaustive()
    }
}

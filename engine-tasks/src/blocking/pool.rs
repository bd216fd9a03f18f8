//! A pool of threads for blocking work: file reads, decompression of a
//! whole file, anything that sleeps. Kept apart from the work-stealing pool
//! so that blocking never takes a worker away from a frame.
//!
//! # Design
//!
//! One queue under a mutex and one condition variable. A blocking task is
//! milliseconds of I/O, so a lock per task costs nothing measurable, and
//! the mutex makes the thread accounting below simple to get right.
//!
//! * **Spawning on demand.** A submission wakes an idle thread if one is
//!   waiting and not yet notified; otherwise it starts a thread if fewer
//!   than `cap` exist; otherwise the task waits in the queue. A flood of
//!   tasks therefore never starts more than `cap` threads.
//! * **Spawn failure.** If starting a thread fails, the task waits for an
//!   existing thread, within `max_queued` as at the cap (else
//!   [`BlockingError::Full`]); with no thread at all the submission fails
//!   with [`BlockingError::NoThread`]. Either hands the closure back.
//!   Nothing panics.
//! * **Spurious wake-ups.** Each notification adds one to `notified`; a
//!   waking thread only counts as notified if it takes one back, else it
//!   waits again for the rest of its keep-alive.
//! * **Keep-alive.** A thread idle for `keep_alive` exits. An exiting thread
//!   parks its own join handle in `last_exited` and joins the one that was
//!   there, so exited threads are reaped without a reaper thread; shutdown
//!   joins the last one.
//! * **Shutdown** ([`BlockingPoolHandle::shutdown`], or dropping the pool): under
//!   the lock, mark the pool shut and take every queued task that is not
//!   mandatory and every thread handle; outside it, drop the taken tasks
//!   (their handles report [`JoinError::Cancelled`], their destructors
//!   run), wake every thread, and join them. A caller that works in a
//!   work-stealing pool first waits for the last thread to leave (on a
//!   latch of its own, which the last one sets) while it runs that pool's
//!   tasks: a blocking task may be waiting for one, with every worker as
//!   stuck as the caller. Threads run the mandatory tasks still queued
//!   before they exit; if no thread is left, the shutting-down caller
//!   runs them. A caller from outside the pool then waits until the
//!   last thread has left (`exited`), also when another call took the
//!   handles first. A pool thread that shuts the pool down takes no handle
//!   and joins no thread (another may be waiting for its task): the threads
//!   leave on their own, and a later call from outside joins them. Nothing
//!   is joined while the lock is held.
//! * **A task waiting for another of its pool** runs it itself if no
//!   thread has taken it yet (`BlockingTask::wait`): with every thread as
//!   busy as the waiter, it would wait behind itself.

use crate::blocking::lost_starts::SpawnCall;
use crate::blocking::task::{BlockingTask, Completion};
use crate::blocking::wakeups::{OnSubmit, Wakeups};
use crate::faults::{self, Site};
use crate::pool::registry::{spawn_std_thread, SpawnFn, ThreadSpec};
use crate::pool::spawn::{drop_quietly, JoinError};
use crate::pool::start;
use crate::pool::worker::AbortOnUnwind;
use crate::pool::MIN_STACK_SIZE;
use crate::sync::latch::Latch;
use crate::trace::instrument;
use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::panic::{self, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, TryLockError};
use std::thread::{self, JoinHandle, ThreadId};
use std::time::{Duration, Instant};

/// Default most threads: enough for many parallel reads from fast storage,
/// an order of magnitude below the 512 at which other runtimes have run
/// into per-process thread limits.
pub const DEFAULT_BLOCKING_CAP: usize = 64;
/// Default idle time before a thread exits.
pub const DEFAULT_KEEP_ALIVE: Duration = Duration::from_secs(10);

/// Configures a [`BlockingPool`].
///
/// ```
/// use engine_tasks::{BlockingBuildError, BlockingPool};
/// use std::time::Duration;
///
/// // Reads from one disk: a few threads are plenty, and they may linger
/// // through a level's loading burst.
/// let io = BlockingPool::builder()
///     .cap(4)
///     .keep_alive(Duration::from_secs(30))
///     .thread_name_prefix("disk")
///     .build()
///     .unwrap();
/// assert_eq!(io.spawn(|| 2 + 2).unwrap().wait().unwrap(), 4);
///
/// let refused = BlockingPool::builder().cap(0).build();
/// assert_eq!(refused.unwrap_err(), BlockingBuildError::ZeroCap);
/// ```
pub struct BlockingPoolBuilder {
    cap: usize,
    max_queued: usize,
    keep_alive: Duration,
    name_prefix: String,
    stack_size: Option<usize>,
    spawn: Option<Arc<SpawnFn>>,
}

impl Default for BlockingPoolBuilder {
    fn default() -> Self {
        BlockingPoolBuilder {
            cap: DEFAULT_BLOCKING_CAP,
            max_queued: usize::MAX,
            keep_alive: DEFAULT_KEEP_ALIVE,
            name_prefix: "engine-blocking".into(),
            stack_size: None,
            spawn: None,
        }
    }
}

impl BlockingPoolBuilder {
    /// Most threads at once (default [`DEFAULT_BLOCKING_CAP`]; at least 1).
    pub fn cap(mut self, cap: usize) -> Self {
        self.cap = cap;
        self
    }

    /// Most tasks waiting for a thread (default: unbounded). A task that an
    /// idle thread, or one just started for it, will take does not count.
    /// With `cap` threads running (or fewer, when no more could start),
    /// none idle, and this many tasks waiting, submissions fail with
    /// [`BlockingError::Full`] instead of growing the queue.
    ///
    /// ```
    /// use engine_tasks::{BlockingError, BlockingPool};
    /// use std::sync::mpsc;
    ///
    /// let io = BlockingPool::builder().cap(1).max_queued(1).build().unwrap();
    /// let (started, is_started) = mpsc::channel();
    /// let (release, hold) = mpsc::channel::<()>();
    /// let slow_read = io.spawn(move || {
    ///     started.send(()).unwrap();
    ///     hold.recv().unwrap(); // a read from a slow disk
    /// });
    /// is_started.recv().unwrap(); // the only thread is busy
    /// let queued = io.spawn(|| ()).unwrap();
    /// assert!(matches!(io.spawn(|| ()), Err(BlockingError::Full(_))));
    /// release.send(()).unwrap();
    /// slow_read.unwrap().wait().unwrap();
    /// queued.wait().unwrap();
    /// ```
    pub fn max_queued(mut self, max_queued: usize) -> Self {
        self.max_queued = max_queued;
        self
    }

    /// How long an idle thread waits for work before it exits (default
    /// [`DEFAULT_KEEP_ALIVE`]). Any duration is accepted; one too long to
    /// add to the clock, such as [`Duration::MAX`], means idle threads never
    /// exit.
    pub fn keep_alive(mut self, keep_alive: Duration) -> Self {
        self.keep_alive = keep_alive;
        self
    }

    /// Thread names are `<prefix>-<n>` (default `engine-blocking`).
    /// [`build`](Self::build) refuses a prefix that holds a NUL byte (with a
    /// [`spawn_with`](Self::spawn_with) function too).
    pub fn thread_name_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.name_prefix = prefix.into();
        self
    }

    /// Stack size of each thread, at least [`MIN_STACK_SIZE`]
    /// ([`build`](Self::build) refuses a smaller one: the pool's own code
    /// on the thread would overflow it).
    pub fn stack_size(mut self, bytes: usize) -> Self {
        self.stack_size = Some(bytes);
        self
    }

    /// Starts threads with `spawn` instead of `std::thread::Builder`.
    ///
    /// `spawn` must run the function it is given on the new thread, or
    /// return an error (a panic counts as one). The pool believes the
    /// answer: a thread the function started before it failed returns at
    /// once without joining the pool, and a function dropped unrun before
    /// it returns makes the start a failure too. A function it keeps may
    /// run at any time, and one it drops unrun later is then a failed start
    /// (the pool takes the thread's count back and finds another thread for
    /// its task, which may call `spawn` on the thread that dropped the
    /// function). But a function kept and never run nor dropped is a thread
    /// the pool counts, and `shutdown` waits for it. Run in the call instead
    /// of on a new thread,
    /// the function panics, and the start fails. `spawn` runs under the
    /// pool's lock, inside the call that submits a task: it must not submit
    /// to this pool or read its [`metrics`](BlockingPoolHandle::metrics)
    /// (that would deadlock), and while it runs, other submitters and the
    /// pool's threads wait.
    pub fn spawn_with<F>(mut self, spawn: F) -> Self
    where
        F: Fn(ThreadSpec, Box<dyn FnOnce() + Send>) -> std::io::Result<JoinHandle<()>>
            + Send
            + Sync
            + 'static,
    {
        self.spawn = Some(Arc::new(spawn));
        self
    }

    /// Creates the pool; no thread starts until there is work.
    pub fn build(self) -> Result<BlockingPool, BlockingBuildError> {
        if self.cap == 0 {
            return Err(BlockingBuildError::ZeroCap);
        }
        if self.keep_alive.is_zero() {
            return Err(BlockingBuildError::ZeroKeepAlive);
        }
        if self.name_prefix.contains('\0') {
            return Err(BlockingBuildError::NulInThreadName);
        }
        if let Some(requested) = self.stack_size.filter(|&s| s < MIN_STACK_SIZE) {
            return Err(BlockingBuildError::StackTooSmall {
                requested,
                min: MIN_STACK_SIZE,
            });
        }
        Ok(BlockingPool {
            handle: BlockingPoolHandle {
                inner: Arc::new(Inner {
                    state: Mutex::new(State::default()),
                    work: Condvar::new(),
                    exited: Condvar::new(),
                    cap: self.cap,
                    max_queued: self.max_queued,
                    keep_alive: self.keep_alive,
                    name_prefix: self.name_prefix,
                    stack_size: self.stack_size,
                    spawn: self.spawn.unwrap_or_else(|| Arc::new(spawn_std_thread)),
                    spawn_call: SpawnCall::default(),
                    metrics: Metrics::default(),
                }),
            },
        })
    }
}

/// A [`BlockingPoolBuilder`] configuration that makes no sense.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum BlockingBuildError {
    /// A cap of zero threads could never run anything.
    ZeroCap,
    /// A zero keep-alive would make every thread exit right after its task.
    ZeroKeepAlive,
    /// A thread-name prefix with a NUL byte, which no thread name can hold
    /// (`std::thread::Builder` panics on one).
    NulInThreadName,
    /// A stack smaller than [`MIN_STACK_SIZE`].
    StackTooSmall {
        /// Requested, in bytes.
        requested: usize,
        /// [`MIN_STACK_SIZE`].
        min: usize,
    },
}

impl fmt::Display for BlockingBuildError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BlockingBuildError::ZeroCap => {
                write!(f, "a blocking pool needs a cap of at least 1 thread")
            }
            BlockingBuildError::ZeroKeepAlive => {
                write!(f, "a blocking pool's keep-alive must be above zero")
            }
            BlockingBuildError::NulInThreadName => {
                f.write_str("the thread name prefix holds a NUL byte, which a thread name cannot")
            }
            BlockingBuildError::StackTooSmall { requested, min } => write!(
                f,
                "a blocking thread's stack of {requested} bytes is below the minimum of {min}"
            ),
        }
    }
}

impl std::error::Error for BlockingBuildError {}

/// Why a blocking task was refused; holds the closure so nothing is lost.
#[non_exhaustive]
pub enum BlockingError<F> {
    /// The pool is shutting down.
    ShutDown(F),
    /// No thread could be started and none exists to run the task.
    NoThread(F),
    /// Every thread is busy, no more may start, and `max_queued` tasks
    /// already wait for one.
    Full(F),
}

impl<F> BlockingError<F> {
    /// The refused closure.
    pub fn into_inner(self) -> F {
        match self {
            BlockingError::ShutDown(f) | BlockingError::NoThread(f) | BlockingError::Full(f) => f,
        }
    }
}

impl<F> fmt::Debug for BlockingError<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            BlockingError::ShutDown(_) => "ShutDown(..)",
            BlockingError::NoThread(_) => "NoThread(..)",
            BlockingError::Full(_) => "Full(..)",
        })
    }
}

impl<F> fmt::Display for BlockingError<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BlockingError::ShutDown(_) => write!(f, "the blocking pool is shutting down"),
            BlockingError::NoThread(_) => {
                write!(f, "no blocking thread could be started and none is running")
            }
            BlockingError::Full(_) => write!(f, "the blocking pool's queue is full"),
        }
    }
}

impl<F> std::error::Error for BlockingError<F> {}

/// Counters of a blocking pool, read without locks.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct BlockingMetrics {
    /// Threads alive.
    pub threads: usize,
    /// Threads waiting for work.
    pub idle_threads: usize,
    /// Tasks queued and not yet started.
    pub queued: usize,
    /// Tasks finished (including ones that panicked).
    pub completed: u64,
    /// Most threads alive at once so far.
    pub peak_threads: usize,
    /// Threads that could not be started, counting a start whose function
    /// the spawn function dropped unrun after it answered `Ok`.
    pub spawn_failures: u64,
}

#[derive(Default)]
struct Metrics {
    completed: AtomicU64,
    peak: AtomicUsize,
    spawn_failures: AtomicU64,
}

/// Runs a queued task (given the metrics to count itself in) or cancels it
/// (`None`: drops the closure and tells its handle).
type JobFn = dyn FnOnce(Option<&Metrics>) + Send;

/// A queued task.
struct Job {
    run: Box<JobFn>,
    mandatory: bool,
    /// Where the task's completion is: the key a waiter finds it by
    /// ([`Inner::run_if_queued_here`]).
    key: usize,
}

#[derive(Default)]
struct State {
    queue: VecDeque<Job>,
    shutdown: bool,
    /// Waiting threads and notifications on their way (wakeups.rs).
    wakeups: Wakeups,
    threads: usize,
    next_id: usize,
    handles: HashMap<ThreadId, JoinHandle<()>>,
    last_exited: Option<JoinHandle<()>>,
    /// The pool is shut down and its last thread has left.
    all_left: bool,
    /// Callers of `shutdown` waiting for `all_left`, each on its own latch
    /// (a latch takes one waiter), counted down when it comes.
    left_waiters: Vec<Arc<Latch>>,
}

pub(super) struct Inner {
    state: Mutex<State>,
    work: Condvar,
    /// Signalled when a thread leaves the pool after shutdown: callers of
    /// `shutdown` wait on it for the last thread.
    exited: Condvar,
    cap: usize,
    max_queued: usize,
    keep_alive: Duration,
    name_prefix: String,
    stack_size: Option<usize>,
    spawn: Arc<SpawnFn>,
    /// Whether a thread is inside the spawn function under the lock, and
    /// the starts lost meanwhile (lost_starts.rs).
    spawn_call: SpawnCall,
    metrics: Metrics,
}

/// Owns a blocking pool; dropping it shuts the pool down (see
/// [`BlockingPoolHandle::shutdown`]). Derefs to a cloneable
/// [`BlockingPoolHandle`].
pub struct BlockingPool {
    handle: BlockingPoolHandle,
}

/// A shared reference to a blocking pool, for submitting from anywhere.
#[derive(Clone)]
pub struct BlockingPoolHandle {
    inner: Arc<Inner>,
}

impl BlockingPool {
    /// A builder with the defaults.
    pub fn builder() -> BlockingPoolBuilder {
        BlockingPoolBuilder::default()
    }

    /// A pool with the defaults.
    pub fn new() -> BlockingPool {
        Self::builder().build().expect("the defaults are valid")
    }

    /// A cloneable handle.
    pub fn handle(&self) -> BlockingPoolHandle {
        self.handle.clone()
    }
}

impl Default for BlockingPool {
    fn default() -> Self {
        Self::new()
    }
}

impl std::ops::Deref for BlockingPool {
    type Target = BlockingPoolHandle;
    fn deref(&self) -> &BlockingPoolHandle {
        &self.handle
    }
}

impl Drop for BlockingPool {
    fn drop(&mut self) {
        self.handle.shutdown();
    }
}

impl fmt::Debug for BlockingPoolHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BlockingPoolHandle")
            .field("metrics", &self.metrics())
            .finish()
    }
}

impl fmt::Debug for BlockingPool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.handle.fmt(f)
    }
}

impl BlockingPoolHandle {
    /// Runs `f` on a blocking thread. Queued tasks that have not started when
    /// the pool shuts down are dropped (their handles report
    /// [`JoinError::Cancelled`]).
    pub fn spawn<F, T>(&self, f: F) -> Result<BlockingTask<T>, BlockingError<F>>
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        self.submit(f, false)
    }

    /// Like [`spawn`](Self::spawn), but the task runs even if the pool shuts
    /// down before it starts: shutdown waits for it.
    ///
    /// ```
    /// use engine_tasks::BlockingPool;
    /// use std::sync::atomic::{AtomicBool, Ordering};
    /// use std::sync::Arc;
    ///
    /// let io = BlockingPool::new();
    /// let saved = Arc::new(AtomicBool::new(false));
    /// let flag = saved.clone();
    /// // The player quit: the save must reach the disk before the process exits.
    /// let save = io.spawn_mandatory(move || flag.store(true, Ordering::Release));
    /// drop(save.unwrap()); // nobody waits for it ...
    /// drop(io); // ... but shutting down does
    /// assert!(saved.load(Ordering::Acquire));
    /// ```
    pub fn spawn_mandatory<F, T>(&self, f: F) -> Result<BlockingTask<T>, BlockingError<F>>
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        self.submit(f, true)
    }

    /// The pool's counters.
    ///
    /// ```
    /// use engine_tasks::BlockingPool;
    ///
    /// let io = BlockingPool::builder().cap(2).build().unwrap();
    /// assert_eq!(io.metrics().threads, 0); // threads start on demand
    /// for chunk in 0..3 {
    ///     io.spawn(move || chunk).unwrap().wait().unwrap();
    /// }
    /// let metrics = io.metrics();
    /// assert_eq!(metrics.completed, 3);
    /// assert!(metrics.peak_threads >= 1 && metrics.peak_threads <= 2);
    /// ```
    pub fn metrics(&self) -> BlockingMetrics {
        // Under the lock: one snapshot of the counts it guards (never more
        // idle threads than threads).
        let (threads, idle_threads, queued) = {
            let state = self.inner.lock();
            (state.threads, state.wakeups.idle, state.queue.len())
        };
        let m = &self.inner.metrics;
        // Relaxed, the rest: statistics.
        BlockingMetrics {
            threads,
            idle_threads,
            queued,
            completed: m.completed.load(Ordering::Relaxed),
            peak_threads: m.peak.load(Ordering::Relaxed),
            spawn_failures: m.spawn_failures.load(Ordering::Relaxed),
        }
    }

    /// Whether [`shutdown`](Self::shutdown) was called: later submissions
    /// fail. For a long job that should stop early, since shutdown joins
    /// its thread.
    pub(crate) fn is_shut_down(&self) -> bool {
        self.inner.lock().shutdown
    }

    /// Shuts the pool down: later submissions fail, queued tasks are
    /// dropped except mandatory ones, which run, and every thread has left
    /// the pool before this returns, every mandatory task run: also for a
    /// second call made while the first is still under way. A call from
    /// one of the pool's own tasks does not wait for the other threads
    /// (one may be waiting for the calling task); the mandatory tasks
    /// still run, on them or here.
    ///
    /// What runs on the calling thread: the destructors of the dropped
    /// tasks' closures (a panic in one is discarded), the continuations
    /// ([`then`](BlockingTask::then)) of those tasks, with
    /// [`JoinError::Cancelled`], if their pool refuses them, and the
    /// mandatory tasks if no thread is left to run them. On a thread that
    /// works in a work-stealing [`Pool`](crate::Pool) (its worker, or a
    /// thread waiting there as its guest), the wait for the blocking
    /// threads also runs that pool's tasks, of every lane, since a
    /// blocking task may wait for one of them; do not shut down while
    /// holding a lock that such tasks take. On any other thread, or while
    /// the thread unwinds from a panic, it sleeps.
    pub fn shutdown(&self) {
        if !std::thread::panicking() {
            // It joins the blocking threads, whose jobs may wait on a pool.
            crate::pool::forbid_waits::check("shutting a `BlockingPool` down");
        }
        let inner = &self.inner;
        let on_pool_thread = inner.on_pool_thread();
        // A caller from outside that unwinds sleeps in the joins below, as
        // before: the tasks a working wait would run could wait for the
        // very code that is unwinding.
        let works_while_waiting = !on_pool_thread && !thread::panicking();
        let (dropped, handles, last, left) = {
            let mut state = inner.lock();
            state.shutdown = true;
            let (mandatory, dropped): (VecDeque<Job>, VecDeque<Job>) =
                state.queue.drain(..).partition(|job| job.mandatory);
            state.queue = mandatory;
            inner.sync_counts(&state);
            inner.note_if_all_left(&mut state);
            let left = (works_while_waiting && !state.all_left).then(|| {
                let latch = Arc::new(Latch::new(1));
                state.left_waiters.push(latch.clone());
                latch
            });
            if on_pool_thread {
                // Joins no thread: another may be waiting for the calling
                // task. The handles stay for a call from outside (the
                // owner's drop); the threads leave on their own.
                (dropped, Vec::new(), None, left)
            } else {
                let handles: Vec<JoinHandle<()>> = state.handles.drain().map(|(_, h)| h).collect();
                (dropped, handles, state.last_exited.take(), left)
            }
        };
        inner.work.notify_all();
        for job in dropped {
            (job.run)(None);
        }
        // On a thread of a work-stealing pool, whose tasks a blocking task
        // may wait for (with every worker as stuck as this one, nobody else
        // would run them), run them until the last thread has left;
        // elsewhere this returns at once.
        if let Some(left) = left {
            crate::pool::wait::wait_working_for_own_pool(&left);
        }
        for handle in handles.into_iter().chain(last) {
            // A thread's panics are caught per task; a join error would be a
            // panic in the pool's own loop, already reported.
            let _ = handle.join();
        }
        // No other thread left (none ever started, all failed to start, or
        // the caller is the last pool thread): the mandatory tasks run here.
        // From outside, first wait until the last thread has left: another
        // call may have taken the threads' handles, and a thread may still
        // run mandatory tasks (the first call came from a task, say). A
        // thread counted but lost before it ran (`lost_start`) leaves its
        // task to this loop.
        loop {
            let job = {
                let mut state = inner.lock();
                if on_pool_thread {
                    if state.threads > 1 {
                        break;
                    }
                } else {
                    while state.threads > 0 {
                        state = inner.exited.wait(state).unwrap_or_else(|e| e.into_inner());
                    }
                }
                let job = state.queue.pop_front();
                inner.sync_counts(&state);
                job
            };
            match job {
                Some(job) => inner.run_job(job),
                None => break,
            }
        }
    }

    fn submit<F, T>(&self, f: F, mandatory: bool) -> Result<BlockingTask<T>, BlockingError<F>>
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        let inner = &self.inner;
        let mut state = inner.lock();
        if state.shutdown {
            return Err(BlockingError::ShutDown(f));
        }
        // Only tasks that no thread will take count against `max_queued`:
        // an idle thread refuses nothing.
        let full = state.wakeups.unclaimed_tasks(state.queue.len()) >= inner.max_queued
            && !state.wakeups.has_unclaimed_thread();
        if full && state.threads >= inner.cap {
            return Err(BlockingError::Full(f));
        }
        if state.wakeups.submitted() == OnSubmit::Signal {
            inner.work.notify_one();
        } else if state.threads < inner.cap && !inner.start_thread(&mut state) {
            // No thread could start for it: the threads there are take it
            // in turn, within `max_queued` as at the cap.
            if state.threads == 0 {
                return Err(BlockingError::NoThread(f));
            }
            if full {
                return Err(BlockingError::Full(f));
            }
        }
        let completion = Arc::new(Completion::new());
        let key = Arc::as_ptr(&completion) as *const () as usize;
        let done = completion.clone();
        let run = move |run: Option<&Metrics>| {
            if let Some(metrics) = run {
                let _span = instrument::blocking_task();
                let body = || {
                    faults::maybe_panic(Site::BlockingBody);
                    f()
                };
                let result =
                    panic::catch_unwind(AssertUnwindSafe(body)).map_err(JoinError::Panicked);
                // Counted before the handle can see the result, so a waiter
                // that got it also sees the count. Relaxed: a statistic,
                // published by the completion's lock.
                metrics.completed.fetch_add(1, Ordering::Relaxed);
                done.complete(result);
            } else {
                // A panicking destructor of the unrun closure must not unwind
                // into shutdown.
                drop_quietly(f);
                done.complete(Err(JoinError::Cancelled));
            }
            // The result is dropped here if the handle is gone; its
            // destructor must not unwind into the blocking thread's loop.
            drop_quietly(done);
        };
        state.queue.push_back(Job {
            run: Box::new(run),
            mandatory,
            key,
        });
        inner.sync_counts(&state);
        Ok(BlockingTask::new(completion, Arc::downgrade(inner)))
    }
}

impl Inner {
    fn lock(&self) -> MutexGuard<'_, State> {
        // Jobs run outside the lock, so a poisoned lock only means a panic in
        // code that keeps the state consistent at every unlock.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records what changed in `state`'s counts: the peak thread count and
    /// the profiler's plot. (`metrics` reads the rest under the lock.)
    fn sync_counts(&self, state: &State) {
        // Relaxed: a statistic; the lock orders the writers.
        self.metrics
            .peak
            .fetch_max(state.threads, Ordering::Relaxed);
        instrument::blocking_threads(state.threads);
    }

    fn on_pool_thread(&self) -> bool {
        CURRENT_POOL.with(|p| p.get() == self as *const Inner as usize)
    }

    /// On a thread of this pool, runs the task whose completion is at `key`
    /// here if it is still queued. For a task that waits for another of
    /// the same pool: with every thread busy (the waiter among them) the
    /// other would wait behind the waiter for ever.
    pub(super) fn run_if_queued_here(&self, key: usize) {
        if !self.on_pool_thread() {
            return;
        }
        let job = {
            let mut state = self.lock();
            let place = state.queue.iter().position(|job| job.key == key);
            let job = place.and_then(|place| state.queue.remove(place));
            self.sync_counts(&state);
            job
        };
        if let Some(job) = job {
            self.run_job(job);
        }
    }

    /// Starts one thread (under the lock). Returns `false` if it failed.
    fn start_thread(self: &Arc<Self>, state: &mut State) -> bool {
        let id = state.next_id;
        state.next_id += 1;
        let spec = ThreadSpec {
            index: id,
            name: format!("{}-{id}", self.name_prefix),
            stack_size: self.stack_size,
        };
        let inner = self.clone();
        let on_lost = {
            let inner = self.clone();
            move |body| {
                drop(body);
                inner.lost_start();
            }
        };
        // A spawn function that panics, or starts the thread and then
        // fails, is a failed start, and that thread never enters the pool
        // (start.rs): it would leave it one more time than it was counted.
        self.spawn_call.enter();
        let started = start::start_thread(&*self.spawn, spec, move || inner.thread_main(), on_lost);
        let lost = self.spawn_call.leave();
        let counted = match started {
            Ok(handle) => {
                state.threads += 1;
                state.wakeups.started();
                state.handles.insert(handle.thread().id(), handle);
                self.sync_counts(state);
                true
            }
            Err(_) => {
                // Relaxed: a statistic.
                self.metrics.spawn_failures.fetch_add(1, Ordering::Relaxed);
                false
            }
        };
        // Lost during the call: uncounted only. The call was made for a
        // task that its own thread takes; starting others here could lose
        // starts again, one call inside the other, without end.
        self.uncount(state, lost);
        counted
    }

    /// The spawn function answered `Ok` for a thread, and then dropped its
    /// function unrun (`pool/start.rs`): that thread will never run, and
    /// `shutdown` would wait for it for ever. Takes its count back, on
    /// whatever thread dropped the function, never waiting for the lock
    /// while a spawn call holds it (lost_starts.rs).
    fn lost_start(self: &Arc<Self>) {
        // Relaxed: a statistic.
        self.metrics.spawn_failures.fetch_add(1, Ordering::Relaxed);
        loop {
            let mut state = match self.state.try_lock() {
                Ok(state) => state,
                Err(TryLockError::Poisoned(poisoned)) => poisoned.into_inner(),
                Err(TryLockError::WouldBlock) => {
                    if self.spawn_call.defer() {
                        // `start_thread` takes it back after the call.
                        return;
                    }
                    thread::yield_now();
                    continue;
                }
            };
            self.uncount(&mut state, 1);
            self.give_tasks_a_thread(&mut state, 1);
            return;
        }
    }

    /// Uncounts `lost` threads that were started and never ran (under the
    /// lock).
    fn uncount(&self, state: &mut State, lost: usize) {
        if lost == 0 {
            return;
        }
        for _ in 0..lost {
            state.threads -= 1;
            state.wakeups.first_look();
        }
        // The handles the spawn function returned for them (threads that
        // do not run this pool) are joined at shutdown; those of threads
        // already ended are let go now, so a long run keeps none.
        state.handles.retain(|_, handle| !handle.is_finished());
        self.sync_counts(state);
        self.note_if_all_left(state);
        self.exited.notify_all();
    }

    /// Finds a thread for the tasks that `lost` uncounted threads would
    /// have taken at their first look (under the lock).
    fn give_tasks_a_thread(self: &Arc<Self>, state: &mut State, lost: usize) {
        for _ in 0..lost {
            if state.shutdown || state.wakeups.unclaimed_tasks(state.queue.len()) == 0 {
                // After shutdown, the callers of `shutdown` run what is left.
                break;
            }
            if state.wakeups.submitted() == OnSubmit::Signal {
                self.work.notify_one();
            } else if state.threads >= self.cap || !self.start_thread(state) {
                // The threads there are take it in turn.
                break;
            }
        }
    }

    /// Sets `all_left` once the pool is shut down with no thread left, and
    /// releases the callers of `shutdown` waiting for it (under the lock:
    /// once only).
    fn note_if_all_left(&self, state: &mut State) {
        if state.shutdown && state.threads == 0 && !state.all_left {
            state.all_left = true;
            for latch in state.left_waiters.drain(..) {
                // SAFETY: the `Arc` keeps the latch alive past the call, and
                // it is counted down once: it leaves the list, under the
                // lock, as it is.
                unsafe { Latch::count_down(Arc::as_ptr(&latch)) };
            }
        }
    }

    fn run_job(&self, job: Job) {
        (job.run)(Some(&self.metrics));
    }

    fn thread_main(self: Arc<Self>) {
        let abort = AbortOnUnwind::new("inside a blocking thread's loop");
        CURRENT_POOL.with(|p| p.set(Arc::as_ptr(&self) as usize));
        /// Forgets the pool when the loop returns: a thread that a custom
        /// spawner keeps must not pass for a thread of a later pool at the
        /// same address.
        struct LeavePool;
        impl Drop for LeavePool {
            fn drop(&mut self) {
                CURRENT_POOL.with(|p| p.set(0));
            }
        }
        let _leave = LeavePool;
        instrument::thread_started(thread::current().name().unwrap_or("engine-blocking"));
        let mut state = self.lock();
        state.wakeups.first_look();
        loop {
            // After shutdown only mandatory tasks are left in the queue.
            if let Some(job) = state.queue.pop_front() {
                self.sync_counts(&state);
                drop(state);
                self.run_job(job);
                state = self.lock();
                continue;
            }
            if state.shutdown {
                break;
            }
            match self.wait_for_work(state) {
                Some(guard) => state = guard,
                None => {
                    abort.done();
                    return;
                }
            }
        }
        state.threads -= 1;
        self.sync_counts(&state);
        self.note_if_all_left(&mut state);
        drop(state);
        self.exited.notify_all();
        abort.done();
    }

    /// Waits up to the keep-alive for a notification. Returns the lock to
    /// look for work again, or `None` after this thread has exited the pool
    /// (idle for the whole keep-alive).
    fn wait_for_work<'a>(
        &'a self,
        mut state: MutexGuard<'a, State>,
    ) -> Option<MutexGuard<'a, State>> {
        state.wakeups.wait();
        self.sync_counts(&state);
        // A keep-alive too long to add to the clock (`Duration::MAX`) never
        // reaps the thread.
        let deadline = Instant::now().checked_add(self.keep_alive);
        loop {
            let now = Instant::now();
            let idle_long_enough = deadline.is_some_and(|deadline| now >= deadline);
            if idle_long_enough && state.queue.is_empty() && !state.shutdown {
                // Idle for the whole keep-alive: leave the pool.
                state.wakeups.stop_waiting();
                state.threads -= 1;
                self.sync_counts(&state);
                let me = thread::current().id();
                let previous = match state.handles.remove(&me) {
                    Some(own) => state.last_exited.replace(own),
                    // Shutdown took our handle and joins us.
                    None => None,
                };
                drop(state);
                if let Some(previous) = previous {
                    let _ = previous.join();
                }
                return None;
            }
            state = match deadline {
                Some(deadline) => {
                    self.work
                        .wait_timeout(state, deadline.saturating_duration_since(now))
                        .unwrap_or_else(|e| e.into_inner())
                        .0
                }
                None => self.work.wait(state).unwrap_or_else(|e| e.into_inner()),
            };
            // A notification, shutdown, the time-out or a spurious wake-up:
            // `woke` tells them apart (wakeups.rs).
            let (queued, shutdown) = (!state.queue.is_empty(), state.shutdown);
            if state.wakeups.woke(queued, shutdown) {
                break;
            }
        }
        state.wakeups.stop_waiting();
        self.sync_counts(&state);
        Some(state)
    }
}

thread_local! {
    /// The blocking pool this thread belongs to, as an address (0: none).
    static CURRENT_POOL: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

//! A pool's configuration: [`PoolBuilder`], checked by
//! [`PoolBuilder::build`] into a [`Pool`] or refused with a [`BuildError`].

use crate::pool::early_wake::EarlyWake;
use crate::pool::handle::{Pool, PoolHandle};
use crate::pool::registry::{self, Config, Shared, SpawnFn, ThreadSpec, MAX_THREADS};
use crate::pool::worker;
use std::fmt;
use std::io;
use std::sync::Arc;

/// Smallest stack a pool thread (a worker, or a blocking pool's thread) may be
/// given: below this even the scheduler's own
/// frames (and a panic's unwinding) do not fit reliably.
pub const MIN_STACK_SIZE: usize = 64 * 1024;

/// Why a pool configuration was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum BuildError {
    /// More worker threads than the pool supports.
    TooManyThreads {
        /// Requested.
        requested: usize,
        /// [`MAX_THREADS`].
        max: usize,
    },
    /// A stack smaller than [`MIN_STACK_SIZE`].
    StackTooSmall {
        /// Requested, in bytes.
        requested: usize,
        /// [`MIN_STACK_SIZE`].
        min: usize,
    },
    /// A background cap of zero would never run background tasks, or one
    /// above the number of threads that can run them.
    InvalidBackgroundCap {
        /// Requested.
        requested: usize,
        /// Largest accepted value: the worker count (at least 1).
        max: usize,
    },
    /// An empty thread-name prefix.
    EmptyThreadName,
    /// A thread-name prefix with a NUL byte, which no thread name can hold
    /// (`std::thread::Builder` panics on one).
    NulInThreadName,
}

impl fmt::Display for BuildError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BuildError::TooManyThreads { requested, max } => {
                write!(
                    f,
                    "{requested} worker threads requested; the most a pool supports is {max}"
                )
            }
            BuildError::StackTooSmall { requested, min } => {
                write!(
                    f,
                    "worker stack of {requested} bytes requested; the minimum is {min}"
                )
            }
            BuildError::InvalidBackgroundCap { requested, max } => write!(
                f,
                "background cap {requested} is invalid: it must be between 1 and {max}"
            ),
            BuildError::EmptyThreadName => f.write_str("the thread name prefix is empty"),
            BuildError::NulInThreadName => {
                f.write_str("the thread name prefix holds a NUL byte, which a thread name cannot")
            }
        }
    }
}

impl std::error::Error for BuildError {}

/// Configures a [`Pool`].
pub struct PoolBuilder {
    threads: Option<usize>,
    background_cap: Option<usize>,
    name_prefix: String,
    stack_size: Option<usize>,
    spawn: Option<Arc<SpawnFn>>,
    early_wake: EarlyWake,
}

impl Default for PoolBuilder {
    fn default() -> Self {
        PoolBuilder {
            threads: None,
            background_cap: None,
            name_prefix: "engine-worker".into(),
            stack_size: None,
            spawn: None,
            early_wake: EarlyWake::Forecast,
        }
    }
}

impl PoolBuilder {
    /// Worker threads to start (lazily) at most. Default: available
    /// parallelism minus one, because the thread that waits takes part; at
    /// least one. Zero is allowed: all work then runs on threads that wait.
    ///
    /// ```
    /// use engine_tasks::{Lane, Pool};
    ///
    /// // No worker threads: a deterministic, single-threaded frame for
    /// // debugging. Tasks run when the frame's thread waits for them.
    /// let pool = Pool::builder().threads(0).build().unwrap();
    /// assert_eq!(pool.threads(), 0);
    /// let ai = pool.spawn(Lane::Normal, || "patrol").unwrap();
    /// assert_eq!(ai.join().unwrap(), "patrol");
    /// assert_eq!(pool.stats().threads_started, 0);
    /// ```
    pub fn threads(mut self, threads: usize) -> Self {
        self.threads = Some(threads);
        self
    }

    /// Most workers that may run background tasks at once. Default: all
    /// workers but one when there are two or more, else 1.
    ///
    /// ```
    /// use engine_tasks::{BuildError, Pool};
    ///
    /// // Four workers, of which at most one streams or decompresses at a
    /// // time: three are always free for frame work.
    /// let pool = Pool::builder().threads(4).background_cap(1).build().unwrap();
    /// assert_eq!(pool.threads(), 4);
    ///
    /// let refused = Pool::builder().threads(4).background_cap(0).build();
    /// assert_eq!(
    ///     refused.unwrap_err(),
    ///     BuildError::InvalidBackgroundCap { requested: 0, max: 4 }
    /// );
    /// ```
    pub fn background_cap(mut self, cap: usize) -> Self {
        self.background_cap = Some(cap);
        self
    }

    /// Thread names are `{prefix}-{index}`. Default `engine-worker`.
    /// [`build`](Self::build) refuses a prefix that is empty or holds a NUL
    /// byte (with a [`spawn_with`](Self::spawn_with) function too).
    ///
    /// ```
    /// use engine_tasks::{Lane, Pool};
    /// use std::sync::mpsc;
    ///
    /// let pool = Pool::builder().threads(1).thread_name_prefix("sim").build().unwrap();
    /// let (send, receive) = mpsc::channel();
    /// let task = pool
    ///     .spawn(Lane::Normal, move || {
    ///         send.send(std::thread::current().name().map(str::to_owned)).unwrap();
    ///     })
    ///     .unwrap();
    /// // Not joined yet, so the pool's only worker runs it.
    /// assert_eq!(receive.recv().unwrap().as_deref(), Some("sim-0"));
    /// task.join().unwrap();
    /// ```
    pub fn thread_name_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.name_prefix = prefix.into();
        self
    }

    /// Stack size of worker threads in bytes. Default: the platform's.
    ///
    /// ```
    /// use engine_tasks::{BuildError, Pool, MIN_STACK_SIZE};
    ///
    /// // Room for deeply recursive tasks, such as a BVH build.
    /// let pool = Pool::builder().threads(2).stack_size(8 << 20).build().unwrap();
    /// assert_eq!(pool.join(|| 1, || 2), (1, 2));
    ///
    /// let refused = Pool::builder().stack_size(16 * 1024).build();
    /// assert!(matches!(
    ///     refused,
    ///     Err(BuildError::StackTooSmall { min: MIN_STACK_SIZE, .. })
    /// ));
    /// ```
    pub fn stack_size(mut self, bytes: usize) -> Self {
        self.stack_size = Some(bytes);
        self
    }

    /// Whether workers wake on their own just before the next frame of a
    /// paced loop of task-graph frames (see [`EarlyWake`]). Default:
    /// [`EarlyWake::Forecast`].
    ///
    /// ```
    /// use engine_tasks::{EarlyWake, Lane, Pool};
    /// use std::time::Duration;
    ///
    /// // A dedicated server or an editor without a paced frame loop: workers
    /// // sleep until work arrives and never look ahead for a frame.
    /// let pool = Pool::builder().early_wake(EarlyWake::Never).build().unwrap();
    /// pool.spawn(Lane::Normal, || ()).unwrap().join().unwrap();
    ///
    /// // What waking early cost, summed over the threads.
    /// let looked: Duration = pool.stats().threads.iter().map(|t| t.early_wait).sum();
    /// assert_eq!(looked, Duration::ZERO);
    /// ```
    pub fn early_wake(mut self, early_wake: EarlyWake) -> Self {
        self.early_wake = early_wake;
        self
    }

    /// Replaces how worker threads are started (default: `std::thread`),
    /// e.g. to pin them or set their OS priority. A returned error is
    /// survived: the pool stops spawning and works with the threads it has.
    /// A panic counts as an error. The pool believes the answer: a thread
    /// the function started before it failed returns at once without
    /// running the pool's loop, and a function it drops unrun before it
    /// returns makes the start a failure too. A function kept to run later
    /// holds up the pool until it runs: the new worker is the one the pool
    /// counts on to wake the next, so parked workers stay parked and new
    /// tasks wait (a `join` runs its own). If it is dropped unrun after
    /// `Ok`, the pool runs the worker on a plain `std::thread` instead
    /// (joined at shutdown, but without the function's set-up); after
    /// shutdown began, or if the system refuses that thread, no worker runs
    /// in its place, the start counts in
    /// [`spawn_failures`](crate::PoolStats::spawn_failures), and the pool
    /// works with the threads it has. `spawn` must run the function on a
    /// new thread: run in the call, it panics, and the start fails.
    ///
    /// ```
    /// use engine_tasks::{Lane, Pool};
    /// use std::sync::{Arc, Mutex};
    ///
    /// let started = Arc::new(Mutex::new(Vec::new()));
    /// let log = started.clone();
    /// let pool = Pool::builder()
    ///     .threads(1)
    ///     .spawn_with(move |spec, main| {
    ///         log.lock().unwrap().push(spec.name.clone());
    ///         // Pin the thread to a core or raise its priority here.
    ///         let mut thread = std::thread::Builder::new().name(spec.name);
    ///         if let Some(bytes) = spec.stack_size {
    ///             thread = thread.stack_size(bytes);
    ///         }
    ///         thread.spawn(main)
    ///     })
    ///     .build()
    ///     .unwrap();
    /// pool.spawn(Lane::Normal, || ()).unwrap().join().unwrap();
    /// assert_eq!(*started.lock().unwrap(), ["engine-worker-0"]);
    /// ```
    pub fn spawn_with<F>(mut self, spawn: F) -> Self
    where
        F: Fn(ThreadSpec, Box<dyn FnOnce() + Send>) -> io::Result<std::thread::JoinHandle<()>>
            + Send
            + Sync
            + 'static,
    {
        self.spawn = Some(Arc::new(spawn));
        self
    }

    /// Validates the configuration and creates the pool. No thread starts
    /// until there is work.
    ///
    /// ```
    /// use engine_tasks::{BuildError, Pool, MAX_THREADS};
    ///
    /// let pool = Pool::builder().threads(3).build().unwrap();
    /// assert_eq!(pool.stats().threads_started, 0);
    ///
    /// let refused = Pool::builder().threads(MAX_THREADS + 1).build();
    /// assert!(matches!(refused, Err(BuildError::TooManyThreads { .. })));
    /// ```
    pub fn build(self) -> Result<Pool, BuildError> {
        let threads = self.threads.unwrap_or_else(default_threads);
        if threads > MAX_THREADS {
            return Err(BuildError::TooManyThreads {
                requested: threads,
                max: MAX_THREADS,
            });
        }
        if let Some(requested) = self.stack_size.filter(|&s| s < MIN_STACK_SIZE) {
            return Err(BuildError::StackTooSmall {
                requested,
                min: MIN_STACK_SIZE,
            });
        }
        let max_cap = threads.max(1);
        let background_cap =
            self.background_cap
                .unwrap_or(if threads >= 2 { threads - 1 } else { 1 });
        if background_cap == 0 || background_cap > max_cap {
            return Err(BuildError::InvalidBackgroundCap {
                requested: background_cap,
                max: max_cap,
            });
        }
        if self.name_prefix.is_empty() {
            return Err(BuildError::EmptyThreadName);
        }
        if self.name_prefix.contains('\0') {
            return Err(BuildError::NulInThreadName);
        }
        let config = Config {
            threads,
            background_cap,
            name_prefix: self.name_prefix,
            stack_size: self.stack_size,
            early_wake: self.early_wake,
            spawn: self
                .spawn
                .unwrap_or_else(|| Arc::new(registry::spawn_std_thread)),
            thread_body: worker::run_worker,
        };
        Ok(Pool::from_handle(PoolHandle::from_shared(Shared::new(
            config,
        ))))
    }
}

fn default_threads() -> usize {
    std::thread::available_parallelism()
        .map_or(1, |n| n.get().saturating_sub(1))
        .clamp(1, MAX_THREADS)
}

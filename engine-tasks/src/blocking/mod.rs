//! Blocking work beside the frame: a [`BlockingPool`] of threads for file
//! I/O and anything else that sleeps, whose results can continue as tasks
//! on the work-stealing pool, and [`assets`], which streams
//! assets with it.
//!
//! ```
//! use engine_tasks::{BlockingPool, Lane, Pool};
//! use std::sync::mpsc;
//!
//! let pool = Pool::builder().threads(1).build().unwrap();
//! let blocking = BlockingPool::builder().build().unwrap();
//! // Wait for a blocking task (this thread sleeps) ...
//! let len = blocking.spawn(|| "a file's bytes".len()).unwrap().wait().unwrap();
//! assert_eq!(len, 14);
//! // ... or continue on the pool's normal lane once it is done.
//! let (send, receive) = mpsc::channel();
//! blocking
//!     .spawn(|| "42".to_string())
//!     .unwrap()
//!     .then(&pool, Lane::Normal, move |text| {
//!         send.send(text.unwrap().parse::<u32>().unwrap()).unwrap();
//!     });
//! assert_eq!(receive.recv().unwrap(), 42);
//! ```
//!
//! The pool's design is in `pool.rs`, a task's handle and the states of its result in `task.rs`; the counting that decides when a
//! submission wakes a thread, with its loom model, in `wakeups.rs`; how a
//! thread counted and never run is taken back, with its loom model, in
//! `lost_starts.rs`.

#[cfg(all(not(loom), feature = "assets"))]
pub mod assets;
pub(crate) mod lost_starts;
#[cfg(not(loom))]
mod pool;
#[cfg(not(loom))]
mod task;
pub(crate) mod wakeups;

#[cfg(not(loom))]
pub use pool::{
    BlockingBuildError, BlockingError, BlockingMetrics, BlockingPool, BlockingPoolBuilder,
    BlockingPoolHandle, DEFAULT_BLOCKING_CAP, DEFAULT_KEEP_ALIVE,
};
#[cfg(not(loom))]
pub use task::BlockingTask;

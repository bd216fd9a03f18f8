//! The work-stealing pool: threads, lanes, the search for work, waiting,
//! and the public API on top (`Pool`, `spawn`, `join`, `scope`).
//!
//! Built on `crate::sync`. The registry (`registry.rs`) holds a pool's
//! shared state and starts its threads, and knows nothing of what they run:
//! the thread body is handed to it by `builder.rs` when the pool is built. A
//! thread's view of the pool, its search order and what a waiting thread
//! runs are in `worker.rs`, `search.rs` and `wait.rs`.

mod builder;
pub(crate) mod cancel;
pub(crate) mod early_wake;
pub(crate) mod forbid_waits;
pub(crate) mod frame_gaps;
mod handle;
pub(crate) mod join;
pub(crate) mod registry;
pub(crate) mod scope;
mod search;
pub(crate) mod spawn;
pub(crate) mod start;
pub(crate) mod stats;
pub(crate) mod wait;
pub(crate) mod worker;

pub use builder::{BuildError, PoolBuilder, MIN_STACK_SIZE};
pub use handle::{default_pool, join, parallel_for, scope, Pool, PoolHandle, SpawnError};

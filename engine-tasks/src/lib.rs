//! engine-tasks: a work-stealing task scheduler for game and simulation frame
//! loops.
//!
//! * A [`Pool`] of worker threads with three priority [`Lane`]s. Each thread
//!   owns, per lane, a LIFO slot, a lock-free 256-slot ring, a lock-free
//!   overflow queue and a Chase-Lev deque of pending `join` halves and scope
//!   tasks; idle threads steal half a ring (or one join half) at a time;
//!   threads outside the pool submit through a lock-free injector. Scheduling
//!   allocates nothing inside the pool: tasks are intrusive.
//! * At most one thread searches for work at a time after a wake-up, and
//!   idle threads sleep on a futex with no timeout: an idle pool uses no CPU.
//! * Fork-join avoids per-task contention: scope tasks' completions are
//!   batched per thread (`credit.rs`), and a `join`'s pop uses a compiler
//!   fence paired with a thief's `membarrier` (`fence.rs`).
//! * Threads start lazily and a failed thread spawn is survived.
//! * Waiting is block-on-complete: [`JoinHandle::join`], [`PoolHandle::join`],
//!   [`PoolHandle::scope`] and [`PoolHandle::parallel_for`] run queued tasks
//!   while they wait, instead of sleeping. Code that must not run other
//!   tasks (it holds a lock that tasks take, or tasks wait for it) runs
//!   inside [`forbid_waits`], where a wait panics instead.
//!
//! ```
//! use engine_tasks::{Lane, Pool};
//!
//! let pool = Pool::builder().threads(2).build().unwrap();
//! let handle = pool.spawn(Lane::Normal, || 6 * 7).unwrap();
//! assert_eq!(handle.join().unwrap(), 42);
//!
//! let mut squares = vec![0u64; 1000];
//! pool.scope(|s| {
//!     for (i, chunk) in squares.chunks_mut(100).enumerate() {
//!         s.spawn(move |_| {
//!             for (j, x) in chunk.iter_mut().enumerate() {
//!                 let n = (i * 100 + j) as u64;
//!                 *x = n * n;
//!             }
//!         });
//!     }
//! });
//! assert_eq!(squares[999], 999 * 999);
//! ```
//!
//! On top of the pool:
//!
//! * [`graph`]: a [`TaskGraph`] of named systems built once and run every
//!   frame, joined by the calling thread, with pinned nodes, panics reported
//!   per node, critical-path-first ordering and per-frame statistics.
//! * [`blocking`]: a [`BlockingPool`] for file I/O and other blocking work,
//!   whose results can continue as tasks on the pool; [`assets`] streams
//!   compressed assets with it.
//! * [`timeline`] and the `tracy` feature: where the frame went.
//!
//! The design notes live beside the code, in `src/`: `sync/ring.rs` (the
//! ring and its steal-half), `sync/deque.rs` (join halves), `sync/fence.rs`
//! (asymmetric fences), `sync/credit.rs` (scope credit), `sync/queue.rs`
//! (overflow and injector), `sync/idle.rs` (the wake-up protocol and why no
//! wake-up is lost), `pool/search.rs` (the search order), `pool/wait.rs`
//! (what a waiting thread runs), `pool/registry.rs` (slots, lazy spawning,
//! shutdown), `lane.rs` (lane policy), `graph/runtime.rs` (a frame),
//! `blocking/pool.rs`, `blocking/assets/` and `trace/timeline.rs`.

#![cfg_attr(loom, allow(dead_code, unused_imports))]

mod lane;
mod loom;
pub(crate) mod sync;

#[cfg(not(loom))]
mod clock;
#[cfg(not(loom))]
pub mod faults;

pub mod blocking;
#[cfg(not(loom))]
pub mod graph;
#[cfg(not(loom))]
mod pool;
#[cfg(not(loom))]
mod trace;

#[cfg(test)]
mod test_support;

pub use lane::Lane;

#[cfg(all(not(loom), feature = "assets"))]
pub use blocking::assets;
#[cfg(all(not(loom), feature = "assets"))]
pub use blocking::assets::{AssetError, AssetErrorKind, CodecError, ImageError};
#[cfg(not(loom))]
pub use trace::{profile, timeline};

#[cfg(not(loom))]
pub use {
    blocking::{
        BlockingBuildError, BlockingError, BlockingMetrics, BlockingPool, BlockingPoolBuilder,
        BlockingPoolHandle, BlockingTask,
    },
    graph::{
        FrameError, FrameSharing, FrameStats, GraphError, NodeClock, NodeContext, NodePanic,
        Planning, ReadyOrder, TaskGraph, TaskGraphBuilder,
    },
    pool::{
        cancel::CancellationToken,
        default_pool,
        early_wake::EarlyWake,
        forbid_waits::forbid_waits,
        join, parallel_for,
        registry::{SpawnFn, ThreadSpec, MAX_THREADS},
        scope,
        scope::Scope,
        spawn::{panic_message, JoinError, JoinHandle},
        stats::{LaneStats, PoolStats, ThreadStats},
        BuildError, Pool, PoolBuilder, PoolHandle, SpawnError, MIN_STACK_SIZE,
    },
    timeline::TimelineError,
};

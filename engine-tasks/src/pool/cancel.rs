//! Cooperative cancellation.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// A shared flag that tasks poll to stop early.
///
/// Cancelling never interrupts a running task: the task decides when it is
/// safe to stop by checking [`is_cancelled`](Self::is_cancelled). A task
/// spawned with [`PoolHandle::spawn_cancellable`](crate::PoolHandle::spawn_cancellable)
/// whose token is cancelled before it starts is not run at all, and its
/// handle reports [`JoinError::Cancelled`](crate::JoinError::Cancelled).
///
/// ```
/// use engine_tasks::CancellationToken;
///
/// let leaving_level = CancellationToken::new();
/// // Every job streaming the level holds a clone.
/// let streaming_job = leaving_level.clone();
/// assert!(!streaming_job.is_cancelled());
///
/// leaving_level.cancel();
/// assert!(streaming_job.is_cancelled());
/// ```
#[derive(Clone, Debug, Default)]
pub struct CancellationToken {
    cancelled: Arc<AtomicBool>,
}

impl CancellationToken {
    /// A new token that is not cancelled.
    pub fn new() -> Self {
        Self::default()
    }

    /// Requests cancellation of every task holding a clone of this token.
    pub fn cancel(&self) {
        // Release: pairs with the Acquire in `is_cancelled`, so what the
        // canceller wrote before cancelling is visible to tasks that stop.
        self.cancelled.store(true, Ordering::Release);
    }

    /// Whether [`cancel`](Self::cancel) was called on any clone.
    pub fn is_cancelled(&self) -> bool {
        // Acquire: pairs with the Release in `cancel`.
        self.cancelled.load(Ordering::Acquire)
    }
}

//! Regions of code in which a wait on a pool panics instead of waiting.
//!
//! A wait on a pool (`join`, `scope`, `parallel_for`, a task's `join`, a
//! blocking task's `wait`, a graph's frame) runs other queued tasks while
//! it waits (`wait.rs`). Some code must never do that, because one of
//! those tasks could need what the waiting code holds up:
//!
//! * a set's run condition in a task graph: the nodes of the set wait for
//!   its answer, and a wait inside it could run one of them, on this
//!   thread or, through a stolen half, on another, so that each waits for
//!   the other for ever (`graph/runtime/gates.rs`);
//! * code that holds a lock which tasks take (bevy's run conditions are
//!   evaluated under the executor's lock).
//!
//! Such code runs inside [`forbid_waits`]. Each wait checks, before it
//! queues anything or waits, whether its thread is inside a region
//! ([`check`]), and panics with a message that names the wait and the
//! region if it is. The check is at the wait's start, not where it blocks,
//! so the same code panics the same way whether or not the wait would have
//! found its work done: a test run catches it, not a rare frame.
//!
//! # State
//!
//! One thread-local: the description of the innermost region the thread is
//! in, or none. Only the thread itself reads and writes it, so it needs no
//! atomics. A region restores the outer description when it ends, also
//! when it unwinds.

use std::cell::Cell;

std::thread_local! {
    /// The innermost region this thread is in (module docs).
    static REGION: Cell<Option<&'static str>> = const { Cell::new(None) };
}

/// Runs `f` in a region where every wait on a pool panics instead of
/// waiting; `region` describes the code, for the panic's message.
///
/// The waits are [`join`](crate::join()), [`scope`](crate::scope()),
/// [`parallel_for`](crate::parallel_for) and
/// [`parallel_chunks_mut`](crate::PoolHandle::parallel_chunks_mut) (on any
/// pool), [`JoinHandle::join`](crate::JoinHandle::join),
/// [`BlockingTask::wait`](crate::BlockingTask::wait) and
/// [`TaskGraph::run`](crate::TaskGraph::run), and dropping a
/// [`Pool`](crate::Pool) or shutting a
/// [`BlockingPool`](crate::BlockingPool) down, which wait for their
/// threads. Each panics at its start, before it queues anything, even if
/// what it would wait for is already done; a refused drop leaves its pool
/// running, its threads parked. Spawning a task does not wait,
/// and stays allowed; blocking on it by other means (a channel, a loop
/// over [`is_finished`](crate::JoinHandle::is_finished)) is not caught,
/// and can hang as the waits could.
///
/// A wait runs other queued tasks while it waits, and those may be any
/// tasks of the pool. Use a region around code that must not run them: code
/// that holds a lock other tasks take, or code that other tasks wait for.
/// The engine runs a task graph set's run conditions in a region, for the
/// second reason.
///
/// Regions nest: the innermost one's description is reported.
///
/// ```
/// use engine_tasks::{forbid_waits, Pool};
///
/// let pool = Pool::builder().threads(1).build().unwrap();
/// let in_region = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
///     forbid_waits("the save-file writer, which holds the save lock", || {
///         pool.join(|| 1, || 2)
///     })
/// }));
/// assert!(in_region.is_err());
/// // Outside the region the same wait runs.
/// assert_eq!(pool.join(|| 1, || 2), (1, 2));
/// ```
pub fn forbid_waits<R>(region: &'static str, f: impl FnOnce() -> R) -> R {
    let _restore = Restore(REGION.replace(Some(region)));
    f()
}

/// Puts the outer region back when a region ends, also when it unwinds.
struct Restore(Option<&'static str>);

impl Drop for Restore {
    fn drop(&mut self) {
        REGION.set(self.0);
    }
}

/// Panics if this thread is inside a [`forbid_waits`] region; `wait` names
/// the wait about to start ("`join`"). Every wait calls it before it queues
/// anything: unwinding from there leaves no task behind.
#[inline]
pub(crate) fn check(wait: &str) {
    if let Some(region) = REGION.get() {
        refuse(wait, region);
    }
}

#[cold]
#[inline(never)]
fn refuse(wait: &str, region: &str) -> ! {
    panic!(
        "{wait} was called inside {region}, where waits on a pool are forbidden \
         (engine_tasks::forbid_waits): a wait runs other queued tasks, and one of \
         them could need what this code holds up"
    )
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::panic::{catch_unwind, AssertUnwindSafe};

    fn message(payload: Box<dyn std::any::Any + Send>) -> String {
        crate::panic_message(&*payload)
            .unwrap_or_default()
            .to_owned()
    }

    #[test]
    fn a_check_inside_a_region_names_the_wait_and_the_innermost_region() {
        check("`join`"); // no region: nothing happens
        let refused = catch_unwind(|| {
            forbid_waits("the outer region", || {
                forbid_waits("the inner region", || check("`scope`"))
            })
        });
        let message = message(refused.unwrap_err());
        assert!(message.starts_with("`scope` was called inside the inner region"));
        // The regions ended with the unwind.
        check("`join`");
    }

    #[test]
    fn an_inner_region_gives_the_outer_one_back_when_it_ends() {
        let refused = catch_unwind(AssertUnwindSafe(|| {
            forbid_waits("the outer region", || {
                forbid_waits("the inner region", || ());
                check("`join`");
            })
        }));
        assert!(message(refused.unwrap_err()).contains("inside the outer region"));
    }
}

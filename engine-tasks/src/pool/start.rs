//! Starting a pool thread through a spawn function, so that the thread
//! joins its pool only if the pool counted it.
//!
//! A spawn function ([`SpawnFn`](crate::pool::registry::SpawnFn)) is the user's
//! code. It may start the thread and then fail anyway (return an error, or
//! panic), or drop the thread's function without running it and still return a
//! handle. The pool decides from the function's answer whether a thread exists:
//! it counts it, keeps its handle, joins it at shutdown. The new thread must
//! follow that answer, or a thread the pool does not know of would run the
//! pool's loop: the blocking pool's count of threads would go below zero when
//! it left, and the work-stealing pool's drop would return while it still ran
//! tasks.
//!
//! The handshake that makes the thread follow the answer is in
//! `sync/start_verdict.rs`.

use crate::faults::{self, Site};
use crate::pool::registry::ThreadSpec;
use crate::pool::spawn::drop_quietly;
use crate::sync::start_verdict;
use std::io;
use std::panic::{self, AssertUnwindSafe};

/// Starts a thread with `spawn` (a pool's
/// [`SpawnFn`](crate::pool::registry::SpawnFn), or a stand-in in the
/// tests) that runs `body` if, and only if, this returns `Ok`. A panicking
/// spawn function is an error too (its payload is dropped here, quietly:
/// the caller may hold a lock).
pub(crate) fn start_thread<H>(
    spawn: &(dyn Fn(ThreadSpec, Box<dyn FnOnce() + Send>) -> io::Result<H> + Send + Sync),
    spec: ThreadSpec,
    body: impl FnOnce() + Send + 'static,
) -> io::Result<H> {
    let (verdict, ticket) = start_verdict::new();
    let main = Box::new(move || {
        if ticket.counted() {
            body();
        }
    });
    let started = panic::catch_unwind(AssertUnwindSafe(|| {
        if faults::should_fail(Site::ThreadSpawn) {
            return Err(io::Error::other("injected fault: thread spawn"));
        }
        spawn(spec, main)
    }))
    .unwrap_or_else(|payload| {
        drop_quietly(payload);
        Err(io::Error::other("the thread spawn function panicked"))
    });
    verdict.decide(started)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Mutex as StdMutex;
    use std::thread::JoinHandle;

    fn spec() -> ThreadSpec {
        ThreadSpec {
            index: 0,
            name: "start-test".into(),
            stack_size: None,
        }
    }

    /// Starts a thread with `spawn` whose body counts into the returned
    /// counter; returns the answer and, once every thread the spawn
    /// function started has ended, how often the body ran.
    fn body_runs(
        spawn: impl Fn(Box<dyn FnOnce() + Send>, &StdMutex<Vec<JoinHandle<()>>>) -> io::Result<()>
            + Send
            + Sync,
    ) -> (bool, usize) {
        let threads = StdMutex::new(Vec::new());
        let runs = std::sync::Arc::new(AtomicUsize::new(0));
        let counter = runs.clone();
        let started = start_thread(&|_spec, main| spawn(main, &threads), spec(), move || {
            counter.fetch_add(1, Ordering::SeqCst);
        });
        for thread in threads.into_inner().unwrap() {
            thread.join().unwrap();
        }
        (started.is_ok(), runs.load(Ordering::SeqCst))
    }

    fn on_a_thread(main: Box<dyn FnOnce() + Send>, threads: &StdMutex<Vec<JoinHandle<()>>>) {
        threads.lock().unwrap().push(std::thread::spawn(main));
    }

    #[test]
    fn a_start_the_function_reports_runs_the_body_once() {
        assert_eq!(
            body_runs(|main, threads| {
                on_a_thread(main, threads);
                Ok(())
            }),
            (true, 1)
        );
    }

    #[test]
    fn a_thread_started_by_a_function_that_then_fails_never_runs_the_body() {
        assert_eq!(
            body_runs(|main, threads| {
                on_a_thread(main, threads);
                Err(io::Error::other("the start was reported failed"))
            }),
            (false, 0)
        );
        assert_eq!(
            body_runs(|main, threads| {
                on_a_thread(main, threads);
                panic!("the start panicked after the thread began")
            }),
            (false, 0)
        );
    }

    #[test]
    fn a_function_that_drops_the_threads_function_is_a_failed_start() {
        assert_eq!(
            body_runs(|main, _| {
                drop(main);
                Ok(())
            }),
            (false, 0)
        );
    }

    #[test]
    fn a_function_kept_to_run_later_runs_the_body_then() {
        let kept = StdMutex::new(None);
        let runs = std::sync::Arc::new(AtomicUsize::new(0));
        let counter = runs.clone();
        let started = start_thread(
            &|_spec, main| {
                *kept.lock().unwrap() = Some(main);
                Ok(())
            },
            spec(),
            move || {
                // SeqCst: read below on this thread; any ordering would do.
                counter.fetch_add(1, Ordering::SeqCst);
            },
        );
        assert!(started.is_ok());
        let main = kept.lock().unwrap().take().unwrap();
        // The verdict is in: the function runs the body without waiting.
        main();
        // SeqCst: as above.
        assert_eq!(runs.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn a_function_run_in_the_call_is_a_failed_start_not_a_hang() {
        let started = start_thread(
            &|_spec, main| {
                main();
                Ok(())
            },
            spec(),
            || unreachable!("the body of a start that failed"),
        );
        let error = started.unwrap_err();
        assert!(error.to_string().contains("panicked"), "{error}");
    }

    #[test]
    fn a_failed_os_start_keeps_its_own_error() {
        // As `std::thread::Builder::spawn` does on failure: the function
        // is dropped, and the error says why.
        let started = start_thread(
            &|_spec, main| {
                drop(main);
                Err::<(), _>(io::Error::other("resource temporarily unavailable"))
            },
            spec(),
            || {},
        );
        assert_eq!(
            started.unwrap_err().to_string(),
            "resource temporarily unavailable"
        );
    }
}

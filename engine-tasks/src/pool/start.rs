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
//!
//! A spawn function may also keep the thread's function to run later, and
//! then drop it unrun after it answered `Ok`: the pool counted a thread
//! that will never exist. Unhandled, the work-stealing pool would wait for
//! ever on that thread's searcher token (it inherits the token of the call
//! that started it), and the blocking pool's shutdown would wait for ever
//! for the thread to leave. So the thread's function hands the pool's body
//! back to the pool (`on_lost`) when it is dropped unrun after the pool
//! counted it: the work-stealing pool runs the body on a plain thread
//! instead, the blocking pool takes its count back. The function can be
//! dropped on any thread, even inside a later call of the spawn function
//! while the pool holds the lock it starts threads under: `on_lost` must
//! not take that lock there.

use crate::faults::{self, Site};
use crate::pool::registry::ThreadSpec;
use crate::pool::spawn::drop_quietly;
use crate::sync::start_verdict::{self, Abandoned, Ticket};
use std::io;
use std::panic::{self, AssertUnwindSafe};

/// Starts a thread with `spawn` (a pool's
/// [`SpawnFn`](crate::pool::registry::SpawnFn), or a stand-in in the
/// tests) that runs `body` if, and only if, this returns `Ok`. A panicking
/// spawn function is an error too (its payload is dropped here, quietly:
/// the caller may hold a lock). If the thread's function is dropped unrun
/// after this returned `Ok`, `on_lost` gets `body` back, on the dropping
/// thread; see the module docs.
pub(crate) fn start_thread<H, B, L>(
    spawn: &(dyn Fn(ThreadSpec, Box<dyn FnOnce() + Send>) -> io::Result<H> + Send + Sync),
    spec: ThreadSpec,
    body: B,
    on_lost: L,
) -> io::Result<H>
where
    B: FnOnce() + Send + 'static,
    L: FnOnce(B) + Send + 'static,
{
    let (verdict, ticket) = start_verdict::new();
    let thread_fn = ThreadFn {
        ticket: Some(ticket),
        body: Some(body),
        on_lost: Some(on_lost),
    };
    let main = Box::new(move || thread_fn.run());
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

/// The thread's function: the pool's body behind the start's verdict, and
/// where the body goes if the function is dropped unrun.
struct ThreadFn<B: FnOnce(), L: FnOnce(B)> {
    /// `None` once the function ran.
    ticket: Option<Ticket>,
    body: Option<B>,
    on_lost: Option<L>,
}

impl<B: FnOnce(), L: FnOnce(B)> ThreadFn<B, L> {
    /// Runs the body if the pool counted the thread.
    fn run(mut self) {
        let (Some(ticket), Some(body)) = (self.ticket.take(), self.body.take()) else {
            return;
        };
        // `counted` panics on the starting call's own thread; the ticket
        // and the body unwind with this frame, and the start fails.
        if ticket.counted() {
            body();
        }
    }
}

impl<B: FnOnce(), L: FnOnce(B)> Drop for ThreadFn<B, L> {
    fn drop(&mut self) {
        let Some(ticket) = self.ticket.take() else {
            // It ran.
            return;
        };
        // Before the verdict the start fails (`Verdict::decide`); after a
        // refusal the pool counted nothing.
        if ticket.abandon() == Abandoned::Counted {
            if let (Some(body), Some(on_lost)) = (self.body.take(), self.on_lost.take()) {
                on_lost(body);
            }
        }
    }
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
        let started = start_thread(
            &|_spec, main| spawn(main, &threads),
            spec(),
            move || {
                // SeqCst: read below, after the joins; any ordering would do.
                counter.fetch_add(1, Ordering::SeqCst);
            },
            |_| unreachable!("no test here drops a counted thread's function"),
        );
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
            |_| unreachable!("the function runs"),
        );
        assert!(started.is_ok());
        let main = kept.lock().unwrap().take().unwrap();
        // The verdict is in: the function runs the body without waiting.
        main();
        // SeqCst: as above.
        assert_eq!(runs.load(Ordering::SeqCst), 1);
    }

    /// Where `on_lost` gets the body, and how often the body ran, for a
    /// start whose spawn function keeps the thread's function, answers
    /// `answer`, and then drops the function unrun.
    fn kept_then_dropped(answer: io::Result<()>) -> (bool, usize, usize) {
        let kept = StdMutex::new(None);
        let answer = StdMutex::new(Some(answer));
        let runs = std::sync::Arc::new(AtomicUsize::new(0));
        let lost = std::sync::Arc::new(AtomicUsize::new(0));
        let (counter, lost_counter) = (runs.clone(), lost.clone());
        let started = start_thread(
            &|_spec, main| {
                *kept.lock().unwrap() = Some(main);
                answer.lock().unwrap().take().unwrap()
            },
            spec(),
            move || {
                // SeqCst: read below on this thread; any ordering would do.
                counter.fetch_add(1, Ordering::SeqCst);
            },
            move |body| {
                // SeqCst: as above.
                lost_counter.fetch_add(1, Ordering::SeqCst);
                // The pool may run the body elsewhere: it is whole.
                body();
            },
        );
        drop(kept.lock().unwrap().take());
        // SeqCst: as above.
        (
            started.is_ok(),
            lost.load(Ordering::SeqCst),
            runs.load(Ordering::SeqCst),
        )
    }

    #[test]
    fn a_counted_function_dropped_unrun_gives_the_body_back() {
        assert_eq!(kept_then_dropped(Ok(())), (true, 1, 1));
    }

    #[test]
    fn a_refused_function_dropped_unrun_gives_nothing_back() {
        assert_eq!(
            kept_then_dropped(Err(io::Error::other("failed after keeping it"))),
            (false, 0, 0)
        );
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
            |_| unreachable!("a failed start loses nothing"),
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
            |_| unreachable!("a failed start loses nothing"),
        );
        assert_eq!(
            started.unwrap_err().to_string(),
            "resource temporarily unavailable"
        );
    }
}

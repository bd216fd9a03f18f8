//! Wake-up accounting of the blocking pool: how many waiting threads there
//! are and how many notifications are on their way to them, so that a
//! submission wakes a thread only if one is waiting and not already
//! claimed, and a thread woken spuriously goes back to waiting.
//!
//! All of it is plain counting under the blocking pool's mutex; this module
//! holds the rules so that a loom model can check them with the same code:
//!
//! * `submitted` (with the task queued under the same lock hold): if
//!   `idle > notified`, claim a
//!   waiting thread (`notified += 1`) and signal the condition variable;
//!   otherwise the caller may start a thread, or the task waits for one.
//! * `woke` (a waiting thread returns from the condition variable): it
//!   takes a notification if one is pending; it also looks for work if the
//!   queue is not empty or the pool shuts down, notification or not, since
//!   a task nobody was notified for is still a task. Otherwise the wake-up
//!   was spurious (or a time-out) and it waits again.
//! * `started` / `first_look`: a thread started for a submission will take
//!   a task at its first look at the queue, as a notified thread will: until
//!   then, one queued task is its and does not count as waiting for a
//!   thread (`unclaimed_tasks`, which `max_queued` limits).

/// See the module docs.
#[derive(Default, Debug)]
pub(crate) struct Wakeups {
    /// Threads waiting on the condition variable.
    pub(crate) idle: usize,
    /// Notifications sent and not yet taken by a waking thread.
    pub(crate) notified: usize,
    /// Threads started and not yet at their first look at the queue.
    pub(crate) starting: usize,
}

/// What a submitter does after queueing its task.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum OnSubmit {
    /// Signal the condition variable once: a waiting thread was claimed.
    Signal,
    /// No waiting thread is free: start one if allowed, else the task waits.
    NoIdleThread,
}

impl Wakeups {
    pub(crate) fn submitted(&mut self) -> OnSubmit {
        if self.has_unclaimed_thread() {
            self.notified += 1;
            OnSubmit::Signal
        } else {
            OnSubmit::NoIdleThread
        }
    }

    /// Whether a waiting thread is free to be claimed by a submission.
    pub(crate) fn has_unclaimed_thread(&self) -> bool {
        self.idle > self.notified
    }

    /// Of `queued` tasks, how many no thread is on its way to take: each
    /// pending notification takes one, and so does each starting thread.
    pub(crate) fn unclaimed_tasks(&self, queued: usize) -> usize {
        queued.saturating_sub(self.notified + self.starting)
    }

    /// A thread was started for a submission.
    pub(crate) fn started(&mut self) {
        self.starting += 1;
    }

    /// A started thread looks at the queue for the first time.
    pub(crate) fn first_look(&mut self) {
        self.starting -= 1;
    }

    /// A thread starts waiting.
    pub(crate) fn wait(&mut self) {
        self.idle += 1;
    }

    /// A waiting thread woke up; `true` if it should look for work now.
    pub(crate) fn woke(&mut self, work_queued: bool, shutting_down: bool) -> bool {
        if self.notified > 0 {
            self.notified -= 1;
            return true;
        }
        work_queued || shutting_down
    }

    /// A thread stops waiting (to work, or to exit).
    pub(crate) fn stop_waiting(&mut self) {
        self.idle -= 1;
        // A notification can never outnumber the threads it was meant for.
        self.notified = self.notified.min(self.idle);
    }
}

#[cfg(all(test, loom))]
mod loom_models {
    use super::*;
    use crate::loom::{thread, Arc, Condvar, Mutex};

    struct Pool {
        state: Mutex<(Wakeups, usize, bool)>,
        cv: Condvar,
    }

    /// One pool thread: take a task if queued, else wait (no keep-alive).
    fn thread_loop(pool: &Pool, ran: &std::sync::atomic::AtomicUsize) {
        let mut state = pool.state.lock().unwrap();
        loop {
            if state.1 > 0 {
                state.1 -= 1;
                ran.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                continue;
            }
            if state.2 {
                return;
            }
            state.0.wait();
            loop {
                state = pool.cv.wait(state).unwrap();
                let (queued, shutdown) = (state.1 > 0, state.2);
                if state.0.woke(queued, shutdown) {
                    break;
                }
            }
            state.0.stop_waiting();
        }
    }

    /// Two waiting threads, two submissions, then shutdown: both tasks run
    /// and every thread exits; a lost notification would leave a task
    /// queued with a thread asleep (loom reports the deadlock or the
    /// assertion fails).
    #[test]
    fn every_submission_reaches_a_thread() {
        loom::model(|| {
            let pool = Arc::new(Pool {
                state: Mutex::new((Wakeups::default(), 0, false)),
                cv: Condvar::new(),
            });
            let ran = Arc::new(std::sync::atomic::AtomicUsize::new(0));
            let threads: Vec<_> = (0..2)
                .map(|_| {
                    let (pool, ran) = (pool.clone(), ran.clone());
                    thread::spawn(move || thread_loop(&pool, &ran))
                })
                .collect();
            for _ in 0..2 {
                let mut state = pool.state.lock().unwrap();
                state.1 += 1;
                if state.0.submitted() == OnSubmit::Signal {
                    pool.cv.notify_one();
                }
            }
            // Shutdown waits for the queue to empty, then wakes everyone.
            loop {
                let mut state = pool.state.lock().unwrap();
                if state.1 == 0 {
                    state.2 = true;
                    drop(state);
                    pool.cv.notify_all();
                    break;
                }
                drop(state);
                thread::yield_now();
            }
            for t in threads {
                t.join().unwrap();
            }
            assert_eq!(ran.load(std::sync::atomic::Ordering::Relaxed), 2);
        });
    }
}

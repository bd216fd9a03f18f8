//! Shared pieces of the benchmarks: the baseline global-queue pool and the
//! thread count every peer gets.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;

/// Threads every pool in a comparison may use: the machine's parallelism.
/// engine-tasks gets one worker fewer, because the waiting main thread takes
/// part in its work (its default); the peers' main threads only block.
pub fn threads() -> usize {
    std::thread::available_parallelism().map_or(2, |n| n.get())
}

type Job = Box<dyn FnOnce() + Send>;

struct Queue {
    jobs: Mutex<(VecDeque<Job>, bool)>,
    ready: Condvar,
}

/// The simplest pool there is: one mutex-protected FIFO and a condition
/// variable, no local queues, no stealing. The baseline the issue names.
pub struct GlobalQueuePool {
    queue: Arc<Queue>,
    threads: Vec<JoinHandle<()>>,
}

/// A cloneable handle for spawning from inside tasks.
#[derive(Clone)]
pub struct GlobalQueueHandle {
    queue: Arc<Queue>,
}

impl GlobalQueueHandle {
    /// Queues `f` and wakes one thread.
    pub fn spawn(&self, f: impl FnOnce() + Send + 'static) {
        let mut jobs = self.queue.jobs.lock().unwrap();
        jobs.0.push_back(Box::new(f));
        drop(jobs);
        self.queue.ready.notify_one();
    }
}

impl GlobalQueuePool {
    /// Starts `threads` worker threads.
    pub fn new(threads: usize) -> Self {
        let queue = Arc::new(Queue {
            jobs: Mutex::new((VecDeque::new(), false)),
            ready: Condvar::new(),
        });
        let threads = (0..threads)
            .map(|_| {
                let queue = queue.clone();
                std::thread::spawn(move || loop {
                    let job = {
                        let mut jobs = queue.jobs.lock().unwrap();
                        loop {
                            if let Some(job) = jobs.0.pop_front() {
                                break job;
                            }
                            if jobs.1 {
                                return;
                            }
                            jobs = queue.ready.wait(jobs).unwrap();
                        }
                    };
                    job();
                })
            })
            .collect();
        GlobalQueuePool { queue, threads }
    }

    /// A handle for spawning.
    pub fn handle(&self) -> GlobalQueueHandle {
        GlobalQueueHandle {
            queue: self.queue.clone(),
        }
    }
}

impl Drop for GlobalQueuePool {
    fn drop(&mut self) {
        self.queue.jobs.lock().unwrap().1 = true;
        self.queue.ready.notify_all();
        for t in self.threads.drain(..) {
            t.join().unwrap();
        }
    }
}

/// A countdown the main thread blocks on until tasks have finished, for
/// peers without join handles. Counting down is one atomic decrement; only
/// the last one takes the lock.
#[derive(Clone)]
pub struct CountDown {
    inner: Arc<(AtomicUsize, Mutex<bool>, Condvar)>,
}

impl CountDown {
    /// Expects `n` calls of [`done`](Self::done).
    pub fn new(n: usize) -> Self {
        CountDown {
            inner: Arc::new((AtomicUsize::new(n), Mutex::new(false), Condvar::new())),
        }
    }

    /// One task finished.
    pub fn done(&self) {
        // AcqRel: the last decrement sees every task's effects.
        if self.inner.0.fetch_sub(1, Ordering::AcqRel) == 1 {
            *self.inner.1.lock().unwrap() = true;
            self.inner.2.notify_all();
        }
    }

    /// Blocks until the count reaches zero.
    pub fn wait(&self) {
        let mut finished = self.inner.1.lock().unwrap();
        while !*finished {
            finished = self.inner.2.wait(finished).unwrap();
        }
    }
}

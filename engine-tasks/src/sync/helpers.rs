//! Helpers: threads from outside a pool that run its work while it has no
//! thread of its own to run it.
//!
//! A pool may have no worker at all: built with none, every thread start
//! failed, or shut down. A thread that waits on such a pool's task from
//! outside (a worker of another pool, or a thread of no pool) must run the
//! pool's queued work itself, or nothing would. Between two looks it
//! sleeps, and the pool's own wake-up protocol cannot reach it: it holds
//! no slot there, and sleeps in its own pool or as a plain thread. So the
//! pool keeps a list of its helpers, and whoever queues work on it while it
//! has no thread wakes them all.
//!
//! # Protocol
//!
//! * A helper [`Helpers::add`]s its waker (under a mutex, then `count` goes
//!   up and a SeqCst fence follows), *then* looks for work, then sleeps; it
//!   looks again after every wake-up, and [`Helpers::remove`]s itself when
//!   its wait ends.
//! * A pusher queues its task, issues a SeqCst fence (the pool's `notify`
//!   has one), *then* calls [`Helpers::wake_all`], which reads `count` and,
//!   if it is not zero, wakes every listed helper under the mutex.
//!
//! The two fences are a Dekker pair. If the helper's comes first in the
//! SeqCst order, the pusher's read of `count` sees the helper, and its
//! lock comes after the helper's (it saw what the helper did after
//! unlocking), so it finds the helper in the list and wakes it (a parker
//! keeps a wake-up that comes before the park). If the pusher's fence comes
//! first, the helper's look sees the task. The loom models below check
//! this.
//!
//! A pusher on a pool that nobody helps pays one load of `count`. The list
//! is short (the threads waiting on the pool from outside), and only a pool
//! without a worker of its own gets helpers.

use crate::loom::atomic::{fence, AtomicUsize, Ordering};
use crate::loom::Mutex;
use crossbeam_utils::CachePadded;

/// A helper's place in the list, to remove it by.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct HelperId(u64);

/// See the module docs. `W` is how a helper is woken.
pub(crate) struct Helpers<W> {
    list: Mutex<List<W>>,
    /// Helpers listed: lets a push skip the lock when there are none. Read
    /// by every push, so on a line of its own.
    count: CachePadded<AtomicUsize>,
}

struct List<W> {
    next_id: u64,
    helpers: Vec<(HelperId, W)>,
}

impl<W> Helpers<W> {
    pub(crate) fn new() -> Self {
        Helpers {
            list: Mutex::new(List {
                next_id: 0,
                helpers: Vec::new(),
            }),
            count: CachePadded::new(AtomicUsize::new(0)),
        }
    }

    fn list(&self) -> crate::loom::MutexGuard<'_, List<W>> {
        // A panic cannot leave the list half-changed (each change is one
        // push or removal), so a poisoned lock is still sound to use.
        self.list.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Adds a helper woken by `waker`. The caller looks for work after this
    /// returns, and before every sleep.
    pub(crate) fn add(&self, waker: W) -> HelperId {
        let id = {
            let mut list = self.list();
            let id = HelperId(list.next_id);
            list.next_id += 1;
            list.helpers.push((id, waker));
            id
        };
        // Relaxed: ordered by the fence after it.
        self.count.fetch_add(1, Ordering::Relaxed);
        // SeqCst: pairs with the pusher's fence before `wake_all` (module
        // docs): either the pusher sees this helper, or the caller's look
        // that follows sees the push.
        fence(Ordering::SeqCst);
        id
    }

    /// Removes a helper whose wait ended.
    pub(crate) fn remove(&self, id: HelperId) -> Option<W> {
        let mut list = self.list();
        let at = list.helpers.iter().position(|(each, _)| *each == id)?;
        // Relaxed: a helper that has stopped looking needs no wake-up, so
        // a pusher that still counts it only takes the lock for nothing.
        self.count.fetch_sub(1, Ordering::Relaxed);
        Some(list.helpers.swap_remove(at).1)
    }

    /// Wakes every helper with `wake`. The caller queued work and then
    /// issued a SeqCst fence (module docs).
    #[cfg_attr(target_os = "linux", link_section = "engine_tasks_shared")]
    pub(crate) fn wake_all(&self, wake: impl Fn(&W)) {
        // Relaxed: ordered by the caller's fence (module docs).
        if self.count.load(Ordering::Relaxed) == 0 {
            return;
        }
        for (_, waker) in &self.list().helpers {
            wake(waker);
        }
    }
}

#[cfg(all(test, loom))]
mod loom_models {
    use super::*;
    use crate::loom::{thread, Arc};
    use crate::sync::park::Parker;

    /// A helper: adds itself, then takes one task from `queue`, sleeping
    /// on its parker between looks. A pusher queues a task, fences (as the
    /// pool's `notify` does) and wakes the helpers.
    fn helper(helpers: &Helpers<Arc<Parker>>, parker: &Arc<Parker>, queue: &Mutex<usize>) {
        let id = helpers.add(parker.clone());
        loop {
            {
                let mut queued = queue.lock().unwrap();
                if *queued > 0 {
                    *queued -= 1;
                    break;
                }
            }
            parker.park();
        }
        assert!(helpers.remove(id).is_some());
    }

    /// One task pushed while a helper comes and goes: the helper runs it
    /// in every interleaving (a lost wake-up deadlocks, which loom reports).
    #[test]
    fn a_helper_never_sleeps_through_a_push() {
        loom::model(|| {
            let helpers = Arc::new(Helpers::new());
            let queue = Arc::new(Mutex::new(0usize));
            let h = {
                let (helpers, queue) = (helpers.clone(), queue.clone());
                thread::spawn(move || helper(&helpers, &Arc::new(Parker::new()), &queue))
            };
            *queue.lock().unwrap() += 1;
            fence(Ordering::SeqCst);
            helpers.wake_all(|parker| parker.unpark());
            h.join().unwrap();
            assert_eq!(*queue.lock().unwrap(), 0);
        });
    }

    /// Two helpers, two pushes from two threads: both tasks run.
    #[test]
    fn two_helpers_two_pushers() {
        let mut builder = loom::model::Builder::new();
        // Four threads: two preemptions keep the run within CI's budget.
        builder.preemption_bound = Some(2);
        builder.check(|| {
            let helpers = Arc::new(Helpers::new());
            let queue = Arc::new(Mutex::new(0usize));
            let spawn_helper = || {
                let (helpers, queue) = (helpers.clone(), queue.clone());
                thread::spawn(move || helper(&helpers, &Arc::new(Parker::new()), &queue))
            };
            let (a, b) = (spawn_helper(), spawn_helper());
            let push = {
                let (helpers, queue) = (helpers.clone(), queue.clone());
                move || {
                    *queue.lock().unwrap() += 1;
                    fence(Ordering::SeqCst);
                    helpers.wake_all(|parker| parker.unpark());
                }
            };
            let pusher = thread::spawn(push.clone());
            push();
            pusher.join().unwrap();
            a.join().unwrap();
            b.join().unwrap();
            assert_eq!(*queue.lock().unwrap(), 0);
        });
    }
}

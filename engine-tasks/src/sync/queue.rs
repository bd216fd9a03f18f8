//! Unbounded intrusive task queue: many producers that never block, one
//! consumer at a time chosen by a try-lock.
//!
//! This is Dmitry Vyukov's intrusive MPSC node-based queue ("Intrusive MPSC
//! node-based queue", 1024cores.net) with the consumer end guarded by a
//! non-blocking lock folded into the `head` word, as described in the zap
//! thread-pool design: a consumer CASes `head` to a `LOCKED` sentinel, pops,
//! and stores the new head back. A consumer that finds the lock taken reports
//! "empty" instead of waiting; that is allowed because every push is followed
//! by a wake-up (`idle.rs`), and whoever holds the lock leaves nothing behind
//! without notifying.
//!
//! Queues of this kind: per lane, each worker's **overflow queue** (the
//! owner migrates half its ring there when the ring is full) and the
//! global **injector** (tasks submitted from threads outside the pool);
//! a scope's **inbox** (tasks for the thread that opened it), and a graph
//! frame's inboxes of pinned nodes.
//!
//! # States
//!
//! * `tail` is the last node (null means "the stub", before the first push).
//!   Producers `swap` themselves in and then link the previous tail to their
//!   first node. Between the two steps the list is briefly cut; a consumer
//!   that meets the cut returns `None` (a spurious empty).
//! * `head` is the first node (null means "the stub"), or `LOCKED`.
//! * The stub node lives inside the queue and is re-linked when the consumer
//!   takes the last real node, so a node can always be detached.
//! * `len` counts queued tasks. Producers add before linking, consumers
//!   subtract what they unlinked when they unlock, so it never under-counts;
//!   it is the cheap emptiness check callers use before taking the lock.
//!
//! The queue must not move after its first push or pop: once the consumer
//! re-links the stub, `tail` points into the queue itself. Each queue lives
//! where nothing moves it: in the pool's shared, reference-counted state,
//! on the stack frame of the `scope` call it belongs to (borrowed, never
//! moved, until the scope's tasks have all run), or in a graph's memory,
//! which is boxed.

use crate::loom::atomic::{AtomicPtr, AtomicUsize, Ordering};
use crate::sync::task::{Header, TaskRef};
use crossbeam_utils::CachePadded;
use std::ptr::{self, NonNull};

/// See the module docs.
pub(crate) struct TaskQueue {
    head: CachePadded<AtomicPtr<Header>>,
    tail: CachePadded<AtomicPtr<Header>>,
    len: AtomicUsize,
    stub: Header,
}

fn locked() -> *mut Header {
    // A non-null address that no header can have (headers are aligned).
    ptr::without_provenance_mut(1)
}

/// A list of tasks linked through their headers, built by the caller and
/// pushed with one atomic swap.
pub(crate) struct TaskList {
    first: *mut Header,
    last: *mut Header,
    len: usize,
}

impl TaskList {
    pub(crate) const fn new() -> Self {
        TaskList {
            first: ptr::null_mut(),
            last: ptr::null_mut(),
            len: 0,
        }
    }

    pub(crate) fn push_back(&mut self, task: TaskRef) {
        let node = task.into_raw().as_ptr();
        // SAFETY: we own `node` (it came out of a TaskRef) and `self.last`,
        // which is not shared until the list is pushed into a queue.
        unsafe {
            // Relaxed: the list is private; `TaskQueue::push` publishes it.
            (*node).next.store(ptr::null_mut(), Ordering::Relaxed);
            if self.last.is_null() {
                self.first = node;
            } else {
                (*self.last).next.store(node, Ordering::Relaxed);
            }
        }
        self.last = node;
        self.len += 1;
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Takes the tasks back out, oldest first (a list that was never pushed).
    pub(crate) fn into_tasks(self) -> impl Iterator<Item = TaskRef> {
        let mut next = self.first;
        std::iter::from_fn(move || {
            let node = NonNull::new(next)?;
            // SAFETY: the list owns its nodes (it was never pushed), and
            // each is handed out once.
            unsafe {
                // Relaxed: the list is private to this thread.
                next = (*node.as_ptr()).next.load(Ordering::Relaxed);
                Some(TaskRef::from_raw(node))
            }
        })
    }
}

impl TaskQueue {
    pub(crate) fn new() -> Self {
        TaskQueue {
            head: CachePadded::new(AtomicPtr::new(ptr::null_mut())),
            tail: CachePadded::new(AtomicPtr::new(ptr::null_mut())),
            len: AtomicUsize::new(0),
            stub: Header::new(|_| unreachable!("the queue's stub node is never run")),
        }
    }

    fn stub(&self) -> *mut Header {
        &self.stub as *const Header as *mut Header
    }

    /// Number of queued tasks (never less than the true number).
    #[inline]
    pub(crate) fn len(&self) -> usize {
        // Acquire: pairs with the Release add in `push_list`. A hint only:
        // the add comes before the link, so this orders nothing a consumer
        // needs; the nodes are published by the `tail` swap and the `next`
        // store (`link`).
        self.len.load(Ordering::Acquire)
    }

    #[inline]
    pub(crate) fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Pushes one task. Never blocks.
    pub(crate) fn push(&self, task: TaskRef) {
        let mut list = TaskList::new();
        list.push_back(task);
        self.push_list(list);
    }

    /// Pushes a whole list with one swap. Never blocks.
    pub(crate) fn push_list(&self, list: TaskList) {
        if list.len == 0 {
            return;
        }
        // Release: pairs with the Acquire load in `len`, a hint (see there);
        // the nodes are published by the swap and store in `link`.
        self.len.fetch_add(list.len, Ordering::Release);
        self.link(list.first, list.last);
    }

    fn link(&self, first: *mut Header, last: *mut Header) {
        // AcqRel: release publishes our nodes' `next = null` and contents;
        // acquire pairs with the previous producer's swap so its node's
        // initialisation happens before our store to its `next`.
        let prev = self.tail.swap(last, Ordering::AcqRel);
        let prev = if prev.is_null() { self.stub() } else { prev };
        // SAFETY: `prev` is the stub or a node still in the queue: a consumer
        // never detaches the node `tail` pointed at without re-linking the
        // stub behind it first, and the swap made `prev` ours to link.
        unsafe {
            // Release: pairs with the consumer's Acquire load of `next`.
            (*prev).next.store(first, Ordering::Release);
        }
    }

    /// Takes the consumer lock, or returns `None` if the queue looks empty or
    /// another consumer holds it.
    pub(crate) fn try_lock(&self) -> Option<Consumer<'_>> {
        if self.is_empty() {
            return None;
        }
        // Relaxed: the CAS below acquires.
        let mut head = self.head.load(Ordering::Relaxed);
        loop {
            if head == locked() {
                return None;
            }
            // Acquire: pairs with the Release store in `Consumer::drop`, so we
            // see the previous consumer's view of the list.
            match self.head.compare_exchange_weak(
                head,
                locked(),
                Ordering::Acquire,
                Ordering::Relaxed,
            ) {
                Ok(_) => {
                    let head = if head.is_null() { self.stub() } else { head };
                    return Some(Consumer {
                        queue: self,
                        head,
                        popped: 0,
                    });
                }
                Err(actual) => head = actual,
            }
        }
    }
}

/// The consumer lock of a [`TaskQueue`]; unlocks on drop.
pub(crate) struct Consumer<'a> {
    queue: &'a TaskQueue,
    head: *mut Header,
    /// Tasks popped under this lock; subtracted from `len` once, at unlock.
    popped: usize,
}

impl Consumer<'_> {
    /// Pops the oldest task, or `None` if the queue is empty or a producer is
    /// between its two steps.
    pub(crate) fn pop(&mut self) -> Option<TaskRef> {
        let queue = self.queue;
        let stub = queue.stub();
        let mut head = self.head;
        // Acquire: pairs with the Release store of `next` in `link`.
        // SAFETY: `head` and the nodes reached from it are linked into the
        // queue, which we own as consumer; no one else detaches or frees them.
        let mut next = unsafe { (*head).next.load(Ordering::Acquire) };
        if head == stub {
            if next.is_null() {
                return None;
            }
            // Skip the stub.
            self.head = next;
            head = next;
            // SAFETY: see above. Acquire: as above.
            next = unsafe { (*head).next.load(Ordering::Acquire) };
        }
        if !next.is_null() {
            self.head = next;
            return Some(self.detach(head));
        }
        // `head` may be the last node. Acquire: pairs with producers' swap.
        if queue.tail.load(Ordering::Acquire) != head {
            // A producer swapped in behind `head` but has not linked yet.
            return None;
        }
        // Re-link the stub behind `head` so `head` can be detached.
        // SAFETY: the stub is not in the queue (we skipped it), so we own it.
        // Relaxed: published by the swap in `link`.
        unsafe { (*stub).next.store(ptr::null_mut(), Ordering::Relaxed) };
        queue.link(stub, stub);
        // SAFETY: see above. Acquire: as above.
        next = unsafe { (*head).next.load(Ordering::Acquire) };
        if next.is_null() {
            // Another producer got between us and `head`; it will link soon.
            return None;
        }
        self.head = next;
        Some(self.detach(head))
    }

    fn detach(&mut self, node: *mut Header) -> TaskRef {
        self.popped += 1;
        let node = NonNull::new(node).expect("queue node is null");
        // SAFETY: the node was pushed as a TaskRef and is now unlinked; we are
        // the only holder.
        unsafe { TaskRef::from_raw(node) }
    }
}

impl Drop for Consumer<'_> {
    fn drop(&mut self) {
        if self.popped > 0 {
            // Relaxed: a count; `len` may over-count until now, never under.
            self.queue.len.fetch_sub(self.popped, Ordering::Relaxed);
        }
        let head = if self.head == self.queue.stub() {
            ptr::null_mut()
        } else {
            self.head
        };
        // Release: pairs with the Acquire CAS in `try_lock`.
        self.queue.head.store(head, Ordering::Release);
    }
}

#[cfg(all(test, loom))]
mod loom_models {
    use super::*;
    use crate::loom::{thread, Arc};
    use crate::test_support::{Tasks, Tracker};

    /// Two producers race a consumer that polls through spurious empties:
    /// every task arrives exactly once.
    #[test]
    fn two_producers_one_consumer() {
        loom::model(|| {
            let queue = Arc::new(TaskQueue::new());
            let tasks = Tasks::new(3);
            let tracker = Tracker::new(3);
            let mut refs = tasks.refs();
            let first = refs.next().unwrap();
            let mut pair = TaskList::new();
            pair.push_back(refs.next().unwrap());
            pair.push_back(refs.next().unwrap());
            let producers = [
                {
                    let queue = queue.clone();
                    thread::spawn(move || queue.push(first))
                },
                {
                    let queue = queue.clone();
                    thread::spawn(move || queue.push_list(pair))
                },
            ];
            let mut seen = 0;
            while seen < 3 {
                if let Some(mut consumer) = queue.try_lock() {
                    while let Some(task) = consumer.pop() {
                        tracker.take(task);
                        seen += 1;
                    }
                }
                thread::yield_now();
            }
            for p in producers {
                p.join().unwrap();
            }
            assert!(queue.is_empty());
            tracker.assert_all_once();
        });
    }

    /// Two consumers contend for the lock while a producer pushes: the lock
    /// excludes, nothing is lost, and the queue drains.
    #[test]
    fn two_consumers_try_lock() {
        loom::model(|| {
            let queue = Arc::new(TaskQueue::new());
            let tasks = Tasks::new(2);
            let tracker = Tracker::new(2);
            let mut refs = tasks.refs();
            queue.push(refs.next().unwrap());
            let second = refs.next().unwrap();
            let other = {
                let queue = queue.clone();
                let tracker = tracker.clone();
                thread::spawn(move || {
                    if let Some(mut consumer) = queue.try_lock() {
                        if let Some(task) = consumer.pop() {
                            tracker.take(task);
                        }
                    }
                })
            };
            queue.push(second);
            if let Some(mut consumer) = queue.try_lock() {
                if let Some(task) = consumer.pop() {
                    tracker.take(task);
                }
            }
            other.join().unwrap();
            // Everything left is visible once all threads are done.
            let mut consumer = queue.try_lock().into_iter().next();
            while let Some(task) = consumer.as_mut().and_then(|c| c.pop()) {
                tracker.take(task);
            }
            drop(consumer);
            tracker.assert_all_once();
        });
    }
}

#[cfg(all(test, not(loom)))]
mod stress {
    use super::*;
    use crate::test_support::{stress_rounds, Tasks, Tracker};
    use std::sync::atomic::AtomicBool;
    use std::sync::Arc;

    /// Four producers (single pushes and lists) and three try-lock consumers
    /// on real threads: every task arrives exactly once.
    #[test]
    fn four_producers_three_consumers() {
        const PER_PRODUCER: usize = stress_rounds(50_000);
        let tasks = Tasks::new(4 * PER_PRODUCER);
        let tracker = Tracker::new(4 * PER_PRODUCER);
        let queue = Arc::new(TaskQueue::new());
        let done = Arc::new(AtomicBool::new(false));
        let refs: Vec<TaskRef> = tasks.refs().collect();
        let mut chunks: Vec<Vec<TaskRef>> = Vec::new();
        let mut iter = refs.into_iter();
        for _ in 0..4 {
            chunks.push(iter.by_ref().take(PER_PRODUCER).collect());
        }
        std::thread::scope(|s| {
            for _ in 0..3 {
                let (queue, tracker, done) = (queue.clone(), tracker.clone(), done.clone());
                s.spawn(move || loop {
                    let finished = done.load(Ordering::Acquire);
                    if let Some(mut consumer) = queue.try_lock() {
                        for _ in 0..16 {
                            match consumer.pop() {
                                Some(task) => tracker.take(task),
                                None => break,
                            }
                        }
                    }
                    if finished && queue.is_empty() {
                        break;
                    }
                });
            }
            let producers: Vec<_> = chunks
                .into_iter()
                .enumerate()
                .map(|(p, chunk)| {
                    let queue = queue.clone();
                    s.spawn(move || {
                        let mut list = TaskList::new();
                        for (i, task) in chunk.into_iter().enumerate() {
                            if p % 2 == 0 {
                                queue.push(task);
                            } else {
                                list.push_back(task);
                                if i % 5 == 4 {
                                    queue.push_list(std::mem::replace(&mut list, TaskList::new()));
                                }
                            }
                        }
                        queue.push_list(list);
                    })
                })
                .collect();
            for p in producers {
                p.join().unwrap();
            }
            done.store(true, Ordering::Release);
        });
        tracker.assert_all_once();
    }
}

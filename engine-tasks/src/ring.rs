//! Bounded single-producer, multi-consumer ring of tasks.
//!
//! Each worker owns one ring per lane. The owner pushes at `tail` and pops at
//! `head` (FIFO); other threads steal half of what they see in one batch. The
//! layout follows the Go runtime's `runqput`/`runqsteal` ring (also used by
//! Tokio and the zap and volt pools): slots are atomic pointers so that a slow
//! stealer may read a slot the owner is rewriting, and the only contended
//! word is `head`, advanced by compare-and-swap by every consumer.
//!
//! `pop_newest` adds the Chase-Lev owner-side `take` (Chase and Lev, "Dynamic
//! Circular Work-Stealing Deque", SPAA 2005; fences from Lê, Pop, Cohen and
//! Zappa Nardelli, "Correct and Efficient Work-Stealing for Weak Memory
//! Models", PPoPP 2013) so that `join` can take back the task it just pushed
//! instead of running the oldest one.
//!
//! # States
//!
//! `head` and `tail` are free-running `u32` indices; slot `i` lives at
//! `i % CAPACITY`. The ring holds `tail - head` tasks (wrapping), at most
//! `CAPACITY`. A consumer owns the tasks in `[head, head + n)` only once its
//! CAS moves `head` past them; a stealer that was preempted for 2^32 pushes
//! could suffer ABA on `head`, which we accept (as Go and Tokio do).
//!
//! # Handles
//!
//! [`Ring`] itself only offers the operations any thread may call (`steal_into`,
//! `len`). The owner's operations live on [`RingOwner`], which is `!Send` and
//! `!Sync` and can only be created through an `unsafe` promise that there is
//! one owner at a time.

use crate::loom::atomic::{fence, AtomicPtr, AtomicU32, Ordering};
use crate::task::{Header, TaskRef};
use crossbeam_utils::CachePadded;
use std::marker::PhantomData;
use std::ptr::{self, NonNull};

/// Slots per ring. 256 amortises overflow migration (128 tasks move at once)
/// while keeping one ring in 2 KiB; loom explores a 4-slot ring so that full,
/// wrap-around and half-steal states are all reached in a few operations.
#[cfg(not(loom))]
pub(crate) const CAPACITY: usize = 256;
#[cfg(loom)]
pub(crate) const CAPACITY: usize = 4;

const MASK: u32 = CAPACITY as u32 - 1;

/// See the module docs.
pub(crate) struct Ring {
    head: CachePadded<AtomicU32>,
    tail: CachePadded<AtomicU32>,
    slots: Box<[AtomicPtr<Header>]>,
}

/// Outcome of a push into a full ring: the caller moves `half` plus `task`
/// elsewhere (the overflow queue).
pub(crate) struct Full {
    pub(crate) task: TaskRef,
}

impl Ring {
    pub(crate) fn new() -> Self {
        Ring {
            head: CachePadded::new(AtomicU32::new(0)),
            tail: CachePadded::new(AtomicU32::new(0)),
            slots: (0..CAPACITY)
                .map(|_| AtomicPtr::new(ptr::null_mut()))
                .collect(),
        }
    }

    #[inline(always)]
    fn slot(&self, index: u32) -> &AtomicPtr<Header> {
        &self.slots[(index & MASK) as usize]
    }

    /// Number of queued tasks as seen right now; a hint, exact only to the
    /// owner when no stealer is active.
    #[inline]
    pub(crate) fn len(&self) -> usize {
        // Relaxed: a hint; callers that act on it go through `pop`/`steal_into`,
        // whose CAS on `head` decides ownership.
        let head = self.head.load(Ordering::Relaxed);
        let tail = self.tail.load(Ordering::Relaxed);
        (tail.wrapping_sub(head) as usize).min(CAPACITY)
    }

    #[inline]
    pub(crate) fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Creates the owner handle.
    ///
    /// # Safety
    ///
    /// At most one `RingOwner` of this ring may be in use at a time, and a
    /// hand-over between threads must be synchronised (acquire/release).
    #[inline(always)]
    pub(crate) unsafe fn owner(&self) -> RingOwner<'_> {
        RingOwner {
            ring: self,
            _not_send_or_sync: PhantomData,
        }
    }

    /// Steals about half of this ring's tasks into `dest`, whose owner must be
    /// the caller. Returns one stolen task to run now; the rest are in `dest`.
    /// Returns `(None, 0)` when there was nothing to steal.
    pub(crate) fn steal_into(&self, dest: &RingOwner<'_>) -> Option<(TaskRef, u32)> {
        let dest_ring = dest.ring;
        // Relaxed: only the caller (dest's owner) writes dest.tail.
        let dest_tail = dest_ring.tail.load(Ordering::Relaxed);
        // Acquire: pairs with the AcqRel CAS of whoever last advanced
        // dest.head, so the slots they read are free for us to overwrite.
        let dest_head = dest_ring.head.load(Ordering::Acquire);
        let room = CAPACITY as u32 - dest_tail.wrapping_sub(dest_head);
        loop {
            // Acquire: pairs with the AcqRel CAS of the previous consumer.
            let head = self.head.load(Ordering::Acquire);
            // SeqCst fence between reading head and tail: pairs with the fence
            // in `pop_newest` (Lê et al., steal()), so a stealer and an owner
            // taking the last task cannot both succeed without a CAS.
            fence(Ordering::SeqCst);
            // Acquire: pairs with the Release store of `tail` in `push`, which
            // publishes the slot writes and the tasks behind them.
            let tail = self.tail.load(Ordering::Acquire);
            let available = tail.wrapping_sub(head);
            if available == 0 || available > CAPACITY as u32 {
                // Empty, or the owner is inside `pop_newest` (tail briefly
                // below head). Report empty rather than spin on the owner: a
                // spurious empty is allowed, because the owner is running and
                // will see its own tasks.
                return None;
            }
            let take = (available - available / 2).min(room);
            if take == 0 {
                return None;
            }
            for i in 0..take {
                // Relaxed: visibility of the slot contents comes from the
                // Acquire load of tail; the CAS below validates that no
                // consumer took these slots while we copied.
                let task = self.slot(head.wrapping_add(i)).load(Ordering::Relaxed);
                // Relaxed: published by the Release store of dest.tail below.
                dest_ring
                    .slot(dest_tail.wrapping_add(i))
                    .store(task, Ordering::Relaxed);
            }
            // AcqRel on success: acquire orders our use of the tasks after the
            // producer's writes; release pairs with the Acquire head loads in
            // `push`, so the owner overwrites the slots only after we read them.
            if self
                .head
                .compare_exchange(
                    head,
                    head.wrapping_add(take),
                    Ordering::AcqRel,
                    Ordering::Relaxed,
                )
                .is_ok()
            {
                let last = dest_tail.wrapping_add(take - 1);
                // Relaxed: we wrote this slot ourselves just above.
                let task = dest_ring.slot(last).load(Ordering::Relaxed);
                if take > 1 {
                    // Release: publishes the copied slots to dest's stealers
                    // (pairs with their Acquire tail load).
                    dest_ring.tail.store(last, Ordering::Release);
                }
                let task = NonNull::new(task).expect("stolen ring slot was empty");
                // SAFETY: the successful CAS made us the only owner of the
                // tasks in [head, head + take); this one was not republished.
                return Some((unsafe { TaskRef::from_raw(task) }, take));
            }
        }
    }
}

/// The owner's side of a [`Ring`]: push, pop and take back. `!Send + !Sync`.
pub(crate) struct RingOwner<'a> {
    ring: &'a Ring,
    _not_send_or_sync: PhantomData<*mut ()>,
}

impl RingOwner<'_> {
    /// Pushes a task, or hands it back if the ring is full.
    #[inline]
    pub(crate) fn push(&self, task: TaskRef) -> Result<(), Full> {
        let ring = self.ring;
        // Relaxed: we are the only writer of tail.
        let tail = ring.tail.load(Ordering::Relaxed);
        // Acquire: pairs with consumers' AcqRel CAS on head, so their reads of
        // the slot we are about to reuse happened before our write.
        let head = ring.head.load(Ordering::Acquire);
        if tail.wrapping_sub(head) >= CAPACITY as u32 {
            return Err(Full { task });
        }
        // Relaxed: published by the Release store of tail.
        ring.slot(tail)
            .store(task.into_raw().as_ptr(), Ordering::Relaxed);
        // Release: pairs with the Acquire tail load in `steal_into` and in the
        // owner-side pops of a later owner of this slot.
        ring.tail.store(tail.wrapping_add(1), Ordering::Release);
        Ok(())
    }

    /// Pops the oldest task.
    #[inline]
    pub(crate) fn pop(&self) -> Option<TaskRef> {
        let ring = self.ring;
        // Acquire: pairs with the AcqRel CAS of the last consumer.
        let mut head = ring.head.load(Ordering::Acquire);
        loop {
            // Relaxed: we are the only writer of tail.
            let tail = ring.tail.load(Ordering::Relaxed);
            if head == tail {
                return None;
            }
            // Relaxed: we wrote this slot (or it was written before the
            // hand-over that made us owner); the CAS validates it is unclaimed.
            let task = ring.slot(head).load(Ordering::Relaxed);
            // AcqRel: serialises with stealers' CAS on head (see steal_into).
            match ring.head.compare_exchange_weak(
                head,
                head.wrapping_add(1),
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => {
                    let task = NonNull::new(task).expect("ring slot was empty");
                    // SAFETY: the CAS gave us the task at `head` exclusively.
                    return Some(unsafe { TaskRef::from_raw(task) });
                }
                Err(actual) => head = actual,
            }
        }
    }

    /// Takes the newest task (the one pushed last), Chase-Lev style.
    pub(crate) fn pop_newest(&self) -> Option<TaskRef> {
        let ring = self.ring;
        // Relaxed: we are the only writer of tail.
        let tail = ring.tail.load(Ordering::Relaxed);
        // Acquire: pairs with the AcqRel CAS of the last consumer.
        if tail == ring.head.load(Ordering::Acquire) {
            return None;
        }
        let newest = tail.wrapping_sub(1);
        // Relaxed store followed by a SeqCst fence: pairs with the fence in
        // `steal_into` (Lê et al., take()). A stealer that loads tail after the
        // fence sees `newest` and cannot take index `newest` unless it is the
        // only task, which the CAS below arbitrates.
        ring.tail.store(newest, Ordering::Relaxed);
        fence(Ordering::SeqCst);
        // Relaxed: ordered by the fence above.
        let head = ring.head.load(Ordering::Relaxed);
        let distance = newest.wrapping_sub(head) as i32;
        if distance > 0 {
            // More than one task was queued: index `newest` is ours alone.
            // Relaxed: our own slot write.
            let task = ring.slot(newest).load(Ordering::Relaxed);
            let task = NonNull::new(task).expect("ring slot was empty");
            // SAFETY: no consumer can claim index `newest` (see above).
            return Some(unsafe { TaskRef::from_raw(task) });
        }
        let mut taken = None;
        if distance == 0 {
            // The last task: race the stealers for it on head.
            // Relaxed: our own slot write.
            let task = ring.slot(newest).load(Ordering::Relaxed);
            // AcqRel: serialises with stealers' CAS on head.
            if ring
                .head
                .compare_exchange(
                    head,
                    head.wrapping_add(1),
                    Ordering::AcqRel,
                    Ordering::Relaxed,
                )
                .is_ok()
            {
                let task = NonNull::new(task).expect("ring slot was empty");
                // SAFETY: our CAS claimed the task.
                taken = Some(unsafe { TaskRef::from_raw(task) });
            }
        }
        // Either we took the last task or a stealer did: the ring is empty,
        // with head == newest + 1. Restore tail to match.
        // Release: pairs with stealers' Acquire tail load.
        ring.tail.store(tail, Ordering::Release);
        taken
    }

    /// Claims the older half of the ring for migration to the overflow queue
    /// and passes the tasks, oldest first, to `sink`. Returns how many moved.
    pub(crate) fn drain_half(&self, mut sink: impl FnMut(TaskRef)) -> usize {
        let ring = self.ring;
        let mut batch = [ptr::null_mut::<Header>(); CAPACITY / 2];
        loop {
            // Acquire: pairs with the AcqRel CAS of the last consumer.
            let head = ring.head.load(Ordering::Acquire);
            // Relaxed: we are the only writer of tail.
            let tail = ring.tail.load(Ordering::Relaxed);
            let count = (tail.wrapping_sub(head) / 2).min(CAPACITY as u32 / 2);
            if count == 0 {
                return 0;
            }
            for (i, slot) in batch.iter_mut().enumerate().take(count as usize) {
                // Relaxed: validated by the CAS below.
                *slot = ring
                    .slot(head.wrapping_add(i as u32))
                    .load(Ordering::Relaxed);
            }
            // AcqRel: serialises with stealers' CAS on head.
            if ring
                .head
                .compare_exchange(
                    head,
                    head.wrapping_add(count),
                    Ordering::AcqRel,
                    Ordering::Relaxed,
                )
                .is_ok()
            {
                for &task in &batch[..count as usize] {
                    let task = NonNull::new(task).expect("ring slot was empty");
                    // SAFETY: the CAS made us the only owner of these tasks.
                    sink(unsafe { TaskRef::from_raw(task) });
                }
                return count as usize;
            }
        }
    }
}

#[cfg(all(test, loom))]
mod loom_models {
    use super::*;
    use crate::loom::{thread, Arc};
    use crate::test_support::{Tasks, Tracker};

    /// Owner pushes and pops while a stealer steals half: every task is taken
    /// exactly once.
    #[test]
    fn push_pop_steal_half() {
        loom::model(|| {
            let victim = Arc::new(Ring::new());
            let tasks = Tasks::new(4);
            let tracker = Tracker::new(4);
            let stealer = {
                let victim = victim.clone();
                let tracker = tracker.clone();
                thread::spawn(move || {
                    let dest = Ring::new();
                    // SAFETY: this thread is dest's only owner.
                    let dest_owner = unsafe { dest.owner() };
                    if let Some((task, _)) = victim.steal_into(&dest_owner) {
                        tracker.take(task);
                    }
                    while let Some(task) = dest_owner.pop() {
                        tracker.take(task);
                    }
                })
            };
            // SAFETY: the main thread is the victim's only owner.
            let owner = unsafe { victim.owner() };
            for task in tasks.refs().take(3) {
                assert!(owner.push(task).is_ok());
            }
            if let Some(task) = owner.pop() {
                tracker.take(task);
            }
            for task in tasks.refs().skip(3) {
                assert!(owner.push(task).is_ok());
            }
            stealer.join().unwrap();
            while let Some(task) = owner.pop() {
                tracker.take(task);
            }
            tracker.assert_all_once();
        });
    }

    /// The owner takes back its newest task while a stealer races for it.
    #[test]
    fn pop_newest_races_steal() {
        loom::model(|| {
            let victim = Arc::new(Ring::new());
            let tasks = Tasks::new(2);
            let tracker = Tracker::new(2);
            // SAFETY: the main thread is the victim's only owner.
            let owner = unsafe { victim.owner() };
            for task in tasks.refs() {
                assert!(owner.push(task).is_ok());
            }
            let stealer = {
                let victim = victim.clone();
                let tracker = tracker.clone();
                thread::spawn(move || {
                    let dest = Ring::new();
                    // SAFETY: this thread is dest's only owner.
                    let dest_owner = unsafe { dest.owner() };
                    if let Some((task, _)) = victim.steal_into(&dest_owner) {
                        tracker.take(task);
                    }
                    while let Some(task) = dest_owner.pop() {
                        tracker.take(task);
                    }
                })
            };
            while let Some(task) = owner.pop_newest() {
                tracker.take(task);
            }
            stealer.join().unwrap();
            while let Some(task) = owner.pop() {
                tracker.take(task);
            }
            tracker.assert_all_once();
        });
    }

    /// Two stealers and a full ring being drained to overflow: no task lost
    /// or duplicated, and the push after the drain succeeds.
    #[test]
    fn drain_half_races_two_stealers() {
        loom::model(|| {
            let victim = Arc::new(Ring::new());
            let tasks = Tasks::new(CAPACITY + 1);
            let tracker = Tracker::new(CAPACITY + 1);
            // SAFETY: the main thread is the victim's only owner.
            let owner = unsafe { victim.owner() };
            let mut refs = tasks.refs();
            for task in refs.by_ref().take(CAPACITY) {
                assert!(owner.push(task).is_ok());
            }
            let stealers: Vec<_> = (0..2)
                .map(|_| {
                    let victim = victim.clone();
                    let tracker = tracker.clone();
                    thread::spawn(move || {
                        let dest = Ring::new();
                        // SAFETY: this thread is dest's only owner.
                        let dest_owner = unsafe { dest.owner() };
                        if let Some((task, _)) = victim.steal_into(&dest_owner) {
                            tracker.take(task);
                        }
                        while let Some(task) = dest_owner.pop() {
                            tracker.take(task);
                        }
                    })
                })
                .collect();
            let extra = refs.next().unwrap();
            if let Err(Full { task }) = owner.push(extra) {
                owner.drain_half(|t| tracker.take(t));
                owner.push(task).ok().expect("room after draining half");
            }
            for s in stealers {
                s.join().unwrap();
            }
            while let Some(task) = owner.pop() {
                tracker.take(task);
            }
            tracker.assert_all_once();
        });
    }
}

#[cfg(all(test, not(loom)))]
mod stress {
    use super::*;
    use crate::test_support::{Tasks, Tracker};
    use std::sync::atomic::AtomicBool;
    use std::sync::Arc;

    /// Real threads: the owner mixes push (with overflow migration), pop and
    /// pop_newest while three stealers steal half; every task is taken once.
    #[test]
    fn owner_and_three_stealers() {
        const N: usize = 200_000;
        let tasks = Tasks::new(N);
        let tracker = Tracker::new(N);
        let ring = Arc::new(Ring::new());
        let done = Arc::new(AtomicBool::new(false));
        std::thread::scope(|s| {
            for _ in 0..3 {
                let (ring, tracker, done) = (ring.clone(), tracker.clone(), done.clone());
                s.spawn(move || {
                    let mine = Ring::new();
                    // SAFETY: this thread is `mine`'s only owner.
                    let owner = unsafe { mine.owner() };
                    loop {
                        let finished = done.load(Ordering::Acquire);
                        if let Some((task, _)) = ring.steal_into(&owner) {
                            tracker.take(task);
                        }
                        while let Some(task) = owner.pop() {
                            tracker.take(task);
                        }
                        if finished && ring.is_empty() {
                            break;
                        }
                    }
                });
            }
            // SAFETY: this thread is the ring's only owner.
            let owner = unsafe { ring.owner() };
            for (i, task) in tasks.refs().enumerate() {
                if let Err(full) = owner.push(task) {
                    owner.drain_half(|t| tracker.take(t));
                    owner.push(full.task).ok().expect("room after drain");
                }
                // Phases: mostly full (overflow), then near empty (the
                // last-task races of pop_newest against steals).
                let near_empty = (i / 10_000) % 2 == 1;
                match i % 7 {
                    0 => {
                        if let Some(t) = owner.pop() {
                            tracker.take(t);
                        }
                    }
                    3 => {
                        if let Some(t) = owner.pop_newest() {
                            tracker.take(t);
                        }
                    }
                    _ if near_empty => {
                        if let Some(t) = owner.pop_newest() {
                            tracker.take(t);
                        }
                    }
                    _ => {}
                }
            }
            while let Some(t) = owner.pop_newest() {
                tracker.take(t);
            }
            done.store(true, Ordering::Release);
        });
        tracker.assert_all_once();
    }
}

//! Bounded single-producer, multi-consumer ring of tasks.
//!
//! Each worker owns one ring per lane. The owner pushes at the tail and takes
//! from either end: the oldest task (`pop`, the run loop's FIFO order) or the
//! newest (`pop_newest`, so a waiting task takes back what it just pushed).
//! Other threads steal half of what they see in one batch. The slots are atomic
//! pointers, so a slow stealer may read a slot without a data race.
//!
//! # One word of state
//!
//! The three indices live in one `AtomicU64` and every change is a single
//! atomic read-modify-write of that word, so each operation sees, and acts
//! on, one consistent `(steal, real, tail)` triple:
//!
//! * `tail` (bits 48..64): the next slot the owner writes. Only the owner
//!   changes it: `push` adds one (a `fetch_add`; the carry falls off the top of
//!   the word), `pop_newest` subtracts one by CAS.
//! * `real` (bits 16..32): the oldest task not yet claimed by anyone.
//! * `steal` (bits 32..48): the oldest slot still being read. It differs from
//!   `real` only while a stealer copies the slots it reserved.
//!
//! Indices are `u16` and wrap; a ring holds `tail - real` tasks, and the slots
//! in `[steal, tail)` are in use, at most [`CAPACITY`].
//!
//! A steal takes three steps, as in Tokio's run queue (itself after the Go
//! runtime's `runqsteal`): (1) reserve half the tasks by moving `real` forward
//! with a CAS, leaving `steal` behind; (2) copy the reserved slots; (3) release
//! by moving `steal` up to `real`. While a steal is in progress no other steal
//! starts on that ring, `push` treats the reserved slots as full, and the
//! owner's pops only ever claim slots at or after `real`, so a reserved task
//! cannot also be taken from either end.
//!
//! An earlier version kept `head` and `tail` in separate words with a
//! Chase-Lev take from the tail. That is only correct when stealers take one
//! task at a time: a half-steal that read an old, larger `tail` could claim a
//! task the owner had already taken back from the tail (found by the pool's
//! stress test, and now by the `pop_newest_races_half_steal` model).
//!
//! # Handles
//!
//! [`Ring`] offers what any thread may call (`steal_into`, `len`). The owner's
//! operations live on [`RingOwner`], which is `!Send + !Sync` and created only
//! through an `unsafe` promise that there is one owner at a time.

use crate::loom::atomic::{AtomicPtr, AtomicU64, Ordering};
use crate::sync::task::{Header, TaskRef};
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

const MASK: u16 = CAPACITY as u16 - 1;
const TAIL_ONE: u64 = 1 << 48;

/// The unpacked state word; see the module docs.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
struct Indices {
    real: u16,
    steal: u16,
    tail: u16,
}

impl Indices {
    fn unpack(word: u64) -> Self {
        Indices {
            real: (word >> 16) as u16,
            steal: (word >> 32) as u16,
            tail: (word >> 48) as u16,
        }
    }

    fn pack(self) -> u64 {
        (u64::from(self.real) << 16) | (u64::from(self.steal) << 32) | (u64::from(self.tail) << 48)
    }

    /// Tasks not yet claimed.
    fn len(self) -> u16 {
        self.tail.wrapping_sub(self.real)
    }

    /// Slots in use, including ones a stealer is still reading.
    fn used(self) -> u16 {
        self.tail.wrapping_sub(self.steal)
    }
}

/// See the module docs.
pub(crate) struct Ring {
    state: CachePadded<AtomicU64>,
    slots: Box<[AtomicPtr<Header>]>,
}

/// Outcome of a push into a full ring: the caller moves the task (and half
/// the ring, see [`RingOwner::drain_half`]) to the overflow queue.
pub(crate) struct Full {
    pub(crate) task: TaskRef,
}

impl Ring {
    pub(crate) fn new() -> Self {
        Ring {
            state: CachePadded::new(AtomicU64::new(0)),
            slots: (0..CAPACITY)
                .map(|_| AtomicPtr::new(ptr::null_mut()))
                .collect(),
        }
    }

    #[inline(always)]
    fn slot(&self, index: u16) -> &AtomicPtr<Header> {
        &self.slots[usize::from(index & MASK)]
    }

    /// Takes the task in slot `index`, which the caller has claimed.
    ///
    /// # Safety
    ///
    /// The caller's successful CAS (or ownership of the slot) made it the only
    /// claimant of the task in `index`.
    #[inline(always)]
    unsafe fn take_slot(&self, index: u16) -> TaskRef {
        // Relaxed: every caller reads a slot its own thread wrote (the owner
        // in `pop`, `pop_newest` and `drain_half`; a thief its own
        // destination slot after copying), so program order (or the slot
        // owner's hand-over) orders the write before this read.
        let task = self.slot(index).load(Ordering::Relaxed);
        let task = NonNull::new(task).expect("claimed ring slot was empty");
        // SAFETY: forwarded from the caller.
        unsafe { TaskRef::from_raw(task) }
    }

    fn load(&self) -> Indices {
        // Acquire: pairs with the Release half of every RMW on the word, so
        // the slots a pusher wrote and a stealer finished reading are ordered
        // before whatever we do next.
        Indices::unpack(self.state.load(Ordering::Acquire))
    }

    /// CAS on the state word. AcqRel: acquire as in `load`; release publishes
    /// our slot reads (a finished steal) or writes before the change.
    fn cas(&self, current: Indices, new: Indices) -> Result<(), Indices> {
        self.state
            .compare_exchange(
                current.pack(),
                new.pack(),
                Ordering::AcqRel,
                Ordering::Acquire,
            )
            .map(|_| ())
            .map_err(Indices::unpack)
    }

    /// Number of unclaimed tasks as seen right now (a hint).
    #[inline]
    pub(crate) fn len(&self) -> usize {
        // Relaxed: a hint; claiming goes through a CAS.
        usize::from(Indices::unpack(self.state.load(Ordering::Relaxed)).len())
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
    /// the caller. Returns one stolen task to run now (the rest are in `dest`)
    /// and how many were taken. `None` if there was nothing to steal, or
    /// another steal from this ring is in progress. That empty answer can be
    /// spurious, which the pool tolerates: the ring's owner is running and
    /// takes its own tasks, and a thief that took more than one notifies.
    pub(crate) fn steal_into(&self, dest: &RingOwner<'_>) -> Option<(TaskRef, u32)> {
        let dest_ring = dest.ring;
        let dest_now = dest_ring.load();
        let room = CAPACITY as u16 - dest_now.used();
        // Phase 1: reserve.
        let mut current = self.load();
        let (first, take) = loop {
            if current.steal != current.real {
                return None;
            }
            let available = current.len();
            let take = (available - available / 2).min(room);
            if take == 0 {
                return None;
            }
            let reserved = Indices {
                real: current.real.wrapping_add(take),
                ..current
            };
            match self.cas(current, reserved) {
                Ok(()) => break (current.real, take),
                Err(actual) => current = actual,
            }
        };
        // Phase 2: copy. The reserved slots cannot be overwritten (push counts
        // them as used) nor claimed by anyone else (they are before `real`).
        for i in 0..take {
            // Relaxed: ordered by the reservation CAS (acquire) after the
            // pushes; published to dest's stealers by the tail update below.
            let task = self.slot(first.wrapping_add(i)).load(Ordering::Relaxed);
            dest_ring
                .slot(dest_now.tail.wrapping_add(i))
                .store(task, Ordering::Relaxed);
        }
        // Phase 3: release, letting `steal` catch up with `real` (which the
        // owner may have moved meanwhile by popping).
        let mut current = self.load();
        loop {
            debug_assert_eq!(current.steal, first);
            let released = Indices {
                steal: current.real,
                ..current
            };
            match self.cas(current, released) {
                Ok(()) => break,
                Err(actual) => current = actual,
            }
        }
        // One task to run now; the others become visible in dest.
        let last = dest_now.tail.wrapping_add(take - 1);
        if take > 1 {
            // Release: publishes the copied slots (pairs with dest's loaders).
            dest_ring
                .state
                .fetch_add(TAIL_ONE * u64::from(take - 1), Ordering::Release);
        }
        // SAFETY: the reservation made these tasks ours; `last` was copied
        // into a dest slot beyond dest's tail, which only we (its owner) use.
        Some((unsafe { dest_ring.take_slot(last) }, u32::from(take)))
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
        let now = ring.load();
        if usize::from(now.used()) >= CAPACITY {
            return Err(Full { task });
        }
        // Relaxed: published by the Release fetch_add below.
        ring.slot(now.tail)
            .store(task.into_raw().as_ptr(), Ordering::Relaxed);
        // Release: pairs with the Acquire loads/CASes of consumers. Only the
        // owner changes `tail`, so adding to it cannot race another change
        // of `tail`; the carry out of bit 63 is the u16 wrap.
        ring.state.fetch_add(TAIL_ONE, Ordering::Release);
        Ok(())
    }

    /// Pops the oldest task.
    #[inline]
    pub(crate) fn pop(&self) -> Option<TaskRef> {
        let ring = self.ring;
        let mut current = ring.load();
        loop {
            if current.len() == 0 {
                return None;
            }
            let real = current.real.wrapping_add(1);
            let next = Indices {
                real,
                // With no steal in progress `steal` follows `real`.
                steal: if current.steal == current.real {
                    real
                } else {
                    current.steal
                },
                ..current
            };
            match ring.cas(current, next) {
                // SAFETY: the CAS claimed the task at the old `real`.
                Ok(()) => return Some(unsafe { ring.take_slot(current.real) }),
                Err(actual) => current = actual,
            }
        }
    }

    /// Takes the newest task (the one pushed last).
    pub(crate) fn pop_newest(&self) -> Option<TaskRef> {
        let ring = self.ring;
        let mut current = ring.load();
        loop {
            if current.len() == 0 {
                return None;
            }
            let tail = current.tail.wrapping_sub(1);
            match ring.cas(current, Indices { tail, ..current }) {
                // SAFETY: the CAS claimed the task at the new `tail`, which is
                // at or after `real`, so no stealer has reserved it.
                Ok(()) => return Some(unsafe { ring.take_slot(tail) }),
                Err(actual) => current = actual,
            }
        }
    }

    /// Claims the older half of the ring for migration to the overflow queue
    /// and passes the tasks, oldest first, to `sink`. Returns how many moved.
    pub(crate) fn drain_half(&self, mut sink: impl FnMut(TaskRef)) -> usize {
        let ring = self.ring;
        let mut current = ring.load();
        let (first, count) = loop {
            let count = current.len() / 2;
            if count == 0 {
                return 0;
            }
            let real = current.real.wrapping_add(count);
            let next = Indices {
                real,
                steal: if current.steal == current.real {
                    real
                } else {
                    current.steal
                },
                ..current
            };
            match ring.cas(current, next) {
                Ok(()) => break (current.real, count),
                Err(actual) => current = actual,
            }
        };
        for i in 0..count {
            // SAFETY: the CAS claimed these tasks; their slots are only
            // rewritten by our own later pushes.
            sink(unsafe { ring.take_slot(first.wrapping_add(i)) });
        }
        usize::from(count)
    }
}

#[cfg(all(test, loom))]
mod loom_models {
    use super::*;
    use crate::loom::{thread, Arc};
    use crate::test_support::{Tasks, Tracker};

    /// A thread that steals once from `victim` and drains what it got.
    fn stealer(victim: &Arc<Ring>, tracker: &Tracker) -> thread::JoinHandle<()> {
        let (victim, tracker) = (victim.clone(), tracker.clone());
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
    }

    /// Owner pushes and pops while a stealer steals half: every task is taken
    /// exactly once.
    #[test]
    fn push_pop_steal_half() {
        loom::model(|| {
            let victim = Arc::new(Ring::new());
            let tasks = Tasks::new(4);
            let tracker = Tracker::new(4);
            let stealer = stealer(&victim, &tracker);
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
            let stealer = stealer(&victim, &tracker);
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

    /// The defect the single-word state fixes: a half-steal that read the
    /// ring at four tasks races the owner taking three back from the tail.
    #[test]
    fn pop_newest_races_half_steal() {
        loom::model(|| {
            let victim = Arc::new(Ring::new());
            let tasks = Tasks::new(4);
            let tracker = Tracker::new(4);
            // SAFETY: the main thread is the victim's only owner.
            let owner = unsafe { victim.owner() };
            for task in tasks.refs() {
                assert!(owner.push(task).is_ok());
            }
            let stealer = stealer(&victim, &tracker);
            for _ in 0..3 {
                if let Some(task) = owner.pop_newest() {
                    tracker.take(task);
                }
            }
            stealer.join().unwrap();
            while let Some(task) = owner.pop() {
                tracker.take(task);
            }
            tracker.assert_all_once();
        });
    }

    /// A thief steals into its own ring while another thief steals from
    /// that ring: the second may see the tasks the first moves in or not
    /// (they are published by the first's tail store), and every task is
    /// taken once.
    #[test]
    fn steal_into_a_ring_being_stolen_from() {
        loom::model(|| {
            let victim = Arc::new(Ring::new());
            let middle = Arc::new(Ring::new());
            let tasks = Tasks::new(3);
            let tracker = Tracker::new(3);
            let mut refs = tasks.refs();
            // SAFETY: the main thread is the victim's only owner.
            let owner = unsafe { victim.owner() };
            for task in refs.by_ref().take(2) {
                assert!(owner.push(task).is_ok());
            }
            let own = refs.next().unwrap();
            let thief = {
                let (victim, middle, tracker) = (victim.clone(), middle.clone(), tracker.clone());
                thread::spawn(move || {
                    // SAFETY: this thread is the middle ring's only owner.
                    let middle_owner = unsafe { middle.owner() };
                    assert!(middle_owner.push(own).is_ok());
                    if let Some((task, _)) = victim.steal_into(&middle_owner) {
                        tracker.take(task);
                    }
                    while let Some(task) = middle_owner.pop() {
                        tracker.take(task);
                    }
                })
            };
            let second = stealer(&middle, &tracker);
            thief.join().unwrap();
            second.join().unwrap();
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
            let stealers: Vec<_> = (0..2).map(|_| stealer(&victim, &tracker)).collect();
            let extra = refs.next().unwrap();
            if let Err(Full { task }) = owner.push(extra) {
                owner.drain_half(|t| tracker.take(t));
                // A steal in progress keeps its reserved slots in use, so
                // the ring may still be full: the pool then sends the task to
                // the overflow queue too.
                if let Err(Full { task }) = owner.push(task) {
                    tracker.take(task);
                }
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
    use crate::test_support::{stress_rounds, Tasks, Tracker};
    use std::sync::atomic::AtomicBool;
    use std::sync::Arc;

    /// Real threads: the owner mixes push (with overflow migration), pop and
    /// pop_newest while three stealers steal half; every task is taken once.
    #[test]
    fn owner_and_three_stealers() {
        const N: usize = stress_rounds(200_000);
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
                    if let Err(full) = owner.push(full.task) {
                        tracker.take(full.task);
                    }
                }
                // Phases: mostly full (overflow), then near empty (the
                // last-task races of pop_newest against steals).
                let near_empty = (i / stress_rounds(10_000)) % 2 == 1;
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

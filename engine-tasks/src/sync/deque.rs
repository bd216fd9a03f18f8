//! Bounded Chase-Lev deque for `join` halves.
//!
//! `join(a, b)` pushes `b` here, runs `a`, then pops `b` back and runs it
//! inline, unless a thief stole it. Owner push and pop work at the bottom;
//! thieves take **one** task at a time from the top. Single-task steals are
//! what make the owner's pop from the bottom safe with one fence and no
//! read-modify-write except on the last task (Chase and Lev, "Dynamic
//! Circular Work-Stealing Deque", SPAA 2005; orderings and fences from Lê,
//! Pop, Cohen and Zappa Nardelli, "Correct and Efficient Work-Stealing for
//! Weak Memory Models", PPoPP 2013, with one change: where the paper's push
//! runs a release fence before a relaxed store of `bottom`, every store of
//! `bottom` here is a Release store; see `pop`). Join halves are whole
//! subtrees of work, so stealing one at a time loses nothing; the spawn
//! ring, which steals half, is a separate structure (`ring.rs`) for exactly
//! that reason.
//!
//! # States
//!
//! `top` and `bottom` are free-running `u32` indices; the deque holds
//! `bottom - top` tasks (as a signed difference). The owner's pop first
//! lowers `bottom`, fences, then reads `top`: if tasks remain above the one
//! it took, no thief can take that one; if it is the last, owner and thieves
//! race by CAS on `top`. A thief reads `top`, fences, reads `bottom`, and
//! claims the top task by CAS on `top`. The two fences are asymmetric
//! (fence.rs): the owner's, run on every `join`, is nearly free, and the
//! thief's, run a few times per fork-join tree, is a system call.

use crate::loom::atomic::{AtomicPtr, AtomicU32, Ordering};
use crate::sync::fence;
use crate::sync::task::{Header, TaskRef};
use crossbeam_utils::CachePadded;
use std::marker::PhantomData;
use std::ptr::{self, NonNull};

/// Slots per deque: the most `join`s one thread can have pending in one
/// lane; a deeper `join` runs its second half inline. 256 nested joins is
/// far beyond what recursive splitting produces (log2 of the work). Loom
/// explores 4 slots.
#[cfg(not(loom))]
pub(crate) const CAPACITY: usize = 256;
#[cfg(loom)]
pub(crate) const CAPACITY: usize = 4;

const MASK: u32 = CAPACITY as u32 - 1;

/// See the module docs.
pub(crate) struct Deque {
    top: CachePadded<AtomicU32>,
    bottom: CachePadded<AtomicU32>,
    slots: Box<[AtomicPtr<Header>]>,
}

impl Deque {
    pub(crate) fn new() -> Self {
        // Both sides of the fence pair must agree on the mode before the
        // deque is first used (fence.rs).
        fence::init();
        Deque {
            top: CachePadded::new(AtomicU32::new(0)),
            bottom: CachePadded::new(AtomicU32::new(0)),
            slots: (0..CAPACITY)
                .map(|_| AtomicPtr::new(ptr::null_mut()))
                .collect(),
        }
    }

    fn slot(&self, index: u32) -> &AtomicPtr<Header> {
        &self.slots[(index & MASK) as usize]
    }

    /// Tasks in the deque (a hint).
    pub(crate) fn len(&self) -> usize {
        // Relaxed: a hint; claiming decides.
        let top = self.top.load(Ordering::Relaxed);
        let bottom = self.bottom.load(Ordering::Relaxed);
        (bottom.wrapping_sub(top) as i32).max(0) as usize
    }

    /// Creates the owner handle.
    ///
    /// # Safety
    ///
    /// At most one `DequeOwner` may be in use at a time, and a hand-over
    /// between threads must be synchronised (acquire/release).
    pub(crate) unsafe fn owner(&self) -> DequeOwner<'_> {
        DequeOwner {
            deque: self,
            _not_send_or_sync: PhantomData,
        }
    }

    /// Steals the oldest task, or `None` if empty or another consumer won.
    pub(crate) fn steal(&self) -> Option<TaskRef> {
        // The heavy fence below is expensive: skip it when the deque looks
        // empty. A thief that misses a task only loses parallelism: the
        // deque's owner drains it before it parks (`Local::push_join`).
        if self.len() == 0 {
            return None;
        }
        // Acquire: pairs with the SeqCst CAS of the previous claimant.
        let top = self.top.load(Ordering::Acquire);
        // Pairs with the light fence in `pop` (Lê et al., steal()).
        fence::heavy();
        // Acquire: pairs with the Release stores of `bottom` in `push` and
        // `pop`, publishing the slots pushed before them.
        let bottom = self.bottom.load(Ordering::Acquire);
        if bottom.wrapping_sub(top) as i32 <= 0 {
            return None;
        }
        // Relaxed: published by the acquire above; validated by the CAS.
        let task = self.slot(top).load(Ordering::Relaxed);
        // SeqCst: the claim races the owner's CAS for the last task.
        self.top
            .compare_exchange(
                top,
                top.wrapping_add(1),
                Ordering::SeqCst,
                Ordering::Relaxed,
            )
            .ok()?;
        let task = NonNull::new(task).expect("deque slot was empty");
        // SAFETY: our CAS claimed index `top` exclusively.
        Some(unsafe { TaskRef::from_raw(task) })
    }
}

/// The owner's side of a [`Deque`]. `!Send + !Sync`.
pub(crate) struct DequeOwner<'a> {
    deque: &'a Deque,
    _not_send_or_sync: PhantomData<*mut ()>,
}

impl DequeOwner<'_> {
    /// Pushes at the bottom, or hands the task back if the deque is full.
    #[inline]
    pub(crate) fn push(&self, task: TaskRef) -> Result<(), TaskRef> {
        let deque = self.deque;
        // Relaxed: we are the only writer of bottom.
        let bottom = deque.bottom.load(Ordering::Relaxed);
        // Acquire: pairs with thieves' CAS, so their slot reads are done.
        let top = deque.top.load(Ordering::Acquire);
        if bottom.wrapping_sub(top) as usize >= CAPACITY {
            return Err(task);
        }
        // Relaxed: published by this Release store of bottom, and by the
        // owner's later ones (`pop`).
        deque
            .slot(bottom)
            .store(task.into_raw().as_ptr(), Ordering::Relaxed);
        // Release: pairs with the Acquire bottom load in `steal`.
        deque
            .bottom
            .store(bottom.wrapping_add(1), Ordering::Release);
        Ok(())
    }

    /// Pops the newest task.
    #[inline]
    pub(crate) fn pop(&self) -> Option<TaskRef> {
        let deque = self.deque;
        // Relaxed: we are the only writer of bottom.
        let bottom = deque.bottom.load(Ordering::Relaxed).wrapping_sub(1);
        // Release: a thief whose Acquire load of `bottom` reads this value
        // must also see every slot pushed before it. Relaxed left that thief
        // synchronised with no push since the last pop's fence: `push`
        // publishes with a Release store, not the paper's release fence, and
        // since C++20 a release sequence takes in no later non-RMW store of
        // the same thread (Miri found thieves reading stale slots). Then a
        // store-load fence: pairs with the heavy fence in `steal` (fence.rs:
        // on Linux this side is a compiler fence). Release does not keep the
        // `top` load below from moving above this store; the fence does.
        deque.bottom.store(bottom, Ordering::Release);
        fence::light();
        // Relaxed: ordered by the fence.
        let top = deque.top.load(Ordering::Relaxed);
        let size = bottom.wrapping_sub(top) as i32;
        if size < 0 {
            // Empty: undo. Release: as above, defensively: a thief that
            // reads this value finds no task between `top` and it.
            deque
                .bottom
                .store(bottom.wrapping_add(1), Ordering::Release);
            return None;
        }
        // Relaxed: our own write.
        let task = deque.slot(bottom).load(Ordering::Relaxed);
        if size > 0 {
            let task = NonNull::new(task).expect("deque slot was empty");
            // SAFETY: tasks remain above index `bottom`, so no thief can
            // reach it (they claim from the top, one at a time).
            return Some(unsafe { TaskRef::from_raw(task) });
        }
        // The last task: race the thieves for it.
        // SeqCst: as in `steal`.
        let won = deque
            .top
            .compare_exchange(
                top,
                top.wrapping_add(1),
                Ordering::SeqCst,
                Ordering::Relaxed,
            )
            .is_ok();
        // The deque is empty either way; top == bottom + 1 now. Release: as
        // above, defensively: a thief that reads this value finds the deque
        // empty or loses its CAS.
        deque
            .bottom
            .store(bottom.wrapping_add(1), Ordering::Release);
        if !won {
            return None;
        }
        let task = NonNull::new(task).expect("deque slot was empty");
        // SAFETY: our CAS claimed the last task.
        Some(unsafe { TaskRef::from_raw(task) })
    }
}

#[cfg(all(test, loom))]
mod loom_models {
    use super::*;
    use crate::loom::{thread, Arc};
    use crate::test_support::{Tasks, Tracker};

    /// The owner pops everything back while two thieves steal: every task
    /// is taken once, including the last, raced by all three.
    #[test]
    fn pop_races_two_thieves() {
        loom::model(|| {
            let deque = Arc::new(Deque::new());
            let tasks = Tasks::new(3);
            let tracker = Tracker::new(3);
            // SAFETY: the main thread is the only owner.
            let owner = unsafe { deque.owner() };
            for task in tasks.refs() {
                assert!(owner.push(task).is_ok());
            }
            let thieves: Vec<_> = (0..2)
                .map(|_| {
                    let (deque, tracker) = (deque.clone(), tracker.clone());
                    thread::spawn(move || {
                        if let Some(task) = deque.steal() {
                            tracker.take(task);
                        }
                    })
                })
                .collect();
            while let Some(task) = owner.pop() {
                tracker.take(task);
            }
            for t in thieves {
                t.join().unwrap();
            }
            while let Some(task) = deque.steal() {
                tracker.take(task);
            }
            tracker.assert_all_once();
        });
    }

    /// Push after a pop emptied the deque while a thief was mid-steal: the
    /// wrapped slot is not handed out twice.
    #[test]
    fn push_pop_steal_wraparound() {
        loom::model(|| {
            let deque = Arc::new(Deque::new());
            let tasks = Tasks::new(CAPACITY + 1);
            let tracker = Tracker::new(CAPACITY + 1);
            // SAFETY: the main thread is the only owner.
            let owner = unsafe { deque.owner() };
            let mut refs = tasks.refs();
            assert!(owner.push(refs.next().unwrap()).is_ok());
            let thief = {
                let (deque, tracker) = (deque.clone(), tracker.clone());
                thread::spawn(move || {
                    if let Some(task) = deque.steal() {
                        tracker.take(task);
                    }
                })
            };
            if let Some(task) = owner.pop() {
                tracker.take(task);
            }
            for task in refs {
                match owner.push(task) {
                    Ok(()) => {}
                    Err(task) => tracker.take(task),
                }
            }
            thief.join().unwrap();
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

    /// Real threads: the owner pushes and pops (often down to the last task)
    /// while three thieves steal; every task is taken once.
    #[test]
    fn owner_and_three_thieves() {
        const N: usize = stress_rounds(200_000);
        let tasks = Tasks::new(N);
        let tracker = Tracker::new(N);
        let deque = Arc::new(Deque::new());
        let done = Arc::new(AtomicBool::new(false));
        std::thread::scope(|s| {
            for _ in 0..3 {
                let (deque, tracker, done) = (deque.clone(), tracker.clone(), done.clone());
                s.spawn(move || loop {
                    let finished = done.load(Ordering::Acquire);
                    if let Some(task) = deque.steal() {
                        tracker.take(task);
                    } else if finished && deque.len() == 0 {
                        break;
                    }
                });
            }
            // SAFETY: this thread is the only owner.
            let owner = unsafe { deque.owner() };
            for (i, task) in tasks.refs().enumerate() {
                if let Err(task) = owner.push(task) {
                    tracker.take(task);
                }
                if i % 3 != 0 {
                    if let Some(task) = owner.pop() {
                        tracker.take(task);
                    }
                }
            }
            while let Some(task) = owner.pop() {
                tracker.take(task);
            }
            done.store(true, Ordering::Release);
        });
        tracker.assert_all_once();
    }
}

/// The loom models check the algorithm with symmetric fences; this runs it
/// on real threads with the fences the build uses (asymmetric on Linux), so
/// the owner's cheap pop really races thieves on the hardware.
#[cfg(all(test, not(loom)))]
mod hardware_stress {
    use super::*;
    use crate::test_support::{stress_rounds, Tasks};
    use std::sync::atomic::AtomicBool;
    use std::sync::Arc;

    #[test]
    fn owner_pops_race_thieves_on_real_threads() {
        const ROUNDS: usize = stress_rounds(200_000);
        const PER_ROUND: usize = 3;
        let deque = Arc::new(Deque::new());
        let tasks = Tasks::new(ROUNDS * PER_ROUND);
        let done = Arc::new(AtomicBool::new(false));
        let thieves: Vec<_> = (0..2)
            .map(|_| {
                let (deque, done) = (deque.clone(), done.clone());
                std::thread::spawn(move || {
                    let mut stolen = Vec::new();
                    // Relaxed: only ends the loop; the join below orders.
                    while !done.load(Ordering::Relaxed) {
                        if let Some(task) = deque.steal() {
                            stolen.push(task.into_raw().as_ptr() as usize);
                        }
                    }
                    stolen
                })
            })
            .collect();
        #[cfg(all(target_os = "linux", target_arch = "x86_64", not(miri)))]
        assert!(
            fence::asymmetric() || std::env::var_os("ENGINE_TASKS_FENCES").is_some(),
            "membarrier is unavailable: this test would check symmetric fences"
        );
        // SAFETY: this thread is the only owner.
        let owner = unsafe { deque.owner() };
        let mut taken = Vec::new();
        let mut refs = tasks.refs();
        for round in 0..ROUNDS {
            for task in refs.by_ref().take(PER_ROUND) {
                assert!(owner.push(task).is_ok());
            }
            if round % 64 == 0 {
                // Now and then leave the tasks long enough for a thief's
                // membarrier, so steals happen even on a loaded machine.
                for _ in 0..stress_rounds(10_000) {
                    std::hint::spin_loop();
                }
            }
            while let Some(task) = owner.pop() {
                taken.push(task.into_raw().as_ptr() as usize);
            }
        }
        // Relaxed: see above.
        done.store(true, Ordering::Relaxed);
        let mut steals = 0;
        for thief in thieves {
            let stolen = thief.join().unwrap();
            steals += stolen.len();
            taken.extend(stolen);
        }
        assert!(steals > 0, "the thieves never won a race");
        taken.sort_unstable();
        let before = taken.len();
        taken.dedup();
        assert_eq!(before, taken.len(), "a task was taken twice");
        assert_eq!(taken.len(), ROUNDS * PER_ROUND, "a task was lost");
    }
}

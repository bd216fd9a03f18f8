//! Dependency countdown of a task-graph node: each finishing dependency
//! counts down once, and exactly one of them, the last, learns that it
//! released the node.
//!
//! The count starts each frame at the number of dependencies (written while
//! no task of the graph runs). A dependency that loads 1 (Acquire) is the
//! last one: nobody else can still count down, so it skips the
//! read-modify-write, and the load synchronises with every earlier
//! dependency's AcqRel decrement, so the node sees all their effects.
//! Otherwise it decrements (AcqRel) and is last if it took the count from 1
//! to 0.

use crate::loom::atomic::{AtomicU32, Ordering};

/// See the module docs.
#[derive(Default)]
pub(crate) struct Countdown(AtomicU32);

impl Countdown {
    /// Sets the count for a frame; `&mut`, so no dependency is counting.
    pub(crate) fn reset(&mut self, dependencies: u32) {
        // Relaxed: `&mut self` means nobody else is looking; the next
        // frame's task hand-offs publish it.
        self.0.store(dependencies, Ordering::Relaxed);
    }

    /// Counts one finished dependency. `true` for the last one, which now
    /// owns the node.
    #[inline]
    pub(crate) fn release(&self) -> bool {
        // Acquire: pairs with the AcqRel decrements of the other dependencies.
        if self.0.load(Ordering::Acquire) == 1 {
            return true;
        }
        // AcqRel: release publishes this dependency's effects; the final
        // decrement acquires every earlier one's.
        self.0.fetch_sub(1, Ordering::AcqRel) == 1
    }
}

#[cfg(all(test, loom))]
mod loom_models {
    use super::*;
    use crate::loom::atomic::AtomicUsize;
    use crate::loom::{thread, Arc};

    /// Three dependencies finish at once, each after writing its result:
    /// exactly one releases the node, and it sees all three results.
    #[test]
    fn exactly_one_release_and_it_sees_every_result() {
        loom::model(|| {
            let mut countdown = Countdown::default();
            countdown.reset(3);
            let countdown = Arc::new(countdown);
            let results: Arc<[AtomicUsize; 3]> = Arc::new(Default::default());
            let releases = Arc::new(AtomicUsize::new(0));
            let deps: Vec<_> = (0..3)
                .map(|i| {
                    let (countdown, results, releases) =
                        (countdown.clone(), results.clone(), releases.clone());
                    thread::spawn(move || {
                        // Relaxed: ordered by the countdown's AcqRel.
                        results[i].store(i + 1, Ordering::Relaxed);
                        if countdown.release() {
                            releases.fetch_add(1, Ordering::Relaxed);
                            let seen: usize =
                                results.iter().map(|r| r.load(Ordering::Relaxed)).sum();
                            assert_eq!(seen, 6, "the releaser sees every dependency");
                        }
                    })
                })
                .collect();
            for d in deps {
                d.join().unwrap();
            }
            assert_eq!(releases.load(Ordering::Relaxed), 1);
        });
    }
}

//! Dependency countdown of a task-graph node: each finishing dependency
//! counts once per frame, and exactly one of them, the last, learns that it
//! released the node.
//!
//! The count is never reset. It counts releases since the graph was built,
//! so frame `epoch` (1 for the first frame) is complete for this node when
//! it reaches `epoch × dependencies`: every started frame runs to its end,
//! and in it every dependency releases the node exactly once (also when it
//! was skipped). Not resetting matters for speed: a reset at frame start
//! would write every node's line from the frame's thread, and each other
//! thread would then miss on the line of every node it releases.
//!
//! A node with a single dependency needs no count at all: that dependency
//! is always the last one. Otherwise each dependency adds one (AcqRel) and
//! the one that reaches the frame's target is last; its acquire synchronises
//! with every earlier dependency's release, so the node sees all their
//! effects.

use crate::loom::atomic::{AtomicU64, Ordering};

/// See the module docs.
pub(crate) struct Countdown {
    releases: AtomicU64,
    dependencies: u32,
}

impl Countdown {
    /// A countdown for a node with `dependencies` dependencies, before its
    /// first frame.
    pub(crate) fn new(dependencies: u32) -> Self {
        Countdown {
            releases: AtomicU64::new(0),
            dependencies,
        }
    }

    /// Counts one finished dependency in frame `epoch` (1 for the first
    /// frame, then one more per frame). `true` for the last one, which now
    /// owns the node.
    #[inline]
    pub(crate) fn release(&self, epoch: u64) -> bool {
        if self.dependencies == 1 {
            return true;
        }
        let target = epoch * u64::from(self.dependencies);
        // AcqRel: release publishes this dependency's effects; the last
        // dependency's acquire pairs with every earlier one's release.
        let released = self.releases.fetch_add(1, Ordering::AcqRel) + 1;
        debug_assert!(released <= target, "a dependency released twice");
        released == target
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn the_last_release_of_each_frame_owns_the_node() {
        let countdown = Countdown::new(3);
        for epoch in 1..=1000 {
            let owners: Vec<bool> = (0..3).map(|_| countdown.release(epoch)).collect();
            assert_eq!(owners, [false, false, true], "frame {epoch}");
        }
    }

    #[test]
    fn a_single_dependency_always_owns_the_node() {
        let countdown = Countdown::new(1);
        assert!((1..=1000).all(|epoch| countdown.release(epoch)));
    }
}

#[cfg(all(test, loom))]
mod loom_models {
    use super::*;
    use crate::loom::atomic::AtomicUsize;
    use crate::loom::{thread, Arc};

    /// Per frame: write this dependency's result for the frame, then
    /// release; the releaser checks it sees all three results.
    fn finish(
        countdown: &Countdown,
        results: &[AtomicUsize; 3],
        owners: &AtomicUsize,
        i: usize,
        epoch: u64,
    ) {
        // Relaxed: ordered by the countdown's AcqRel.
        results[i].store(epoch as usize, Ordering::Relaxed);
        if countdown.release(epoch) {
            owners.fetch_add(1, Ordering::Relaxed);
            let seen = results
                .iter()
                .all(|r| r.load(Ordering::Relaxed) == epoch as usize);
            assert!(seen, "the releaser sees every dependency of frame {epoch}");
        }
    }

    /// Two frames in a row of a node with three dependencies (two threads
    /// and the frame's thread) that finish at once: in each frame exactly
    /// one releases the node, and it sees all three of that frame's
    /// results. Frame 2 starts after frame 1 ended (its threads joined), as
    /// frames do. Five threads in all, loom's limit.
    #[test]
    fn exactly_one_release_per_frame_and_it_sees_every_result() {
        loom::model(|| {
            let countdown = Arc::new(Countdown::new(3));
            let results: Arc<[AtomicUsize; 3]> = Arc::new(Default::default());
            for epoch in 1..=2 {
                let owners = Arc::new(AtomicUsize::new(0));
                let deps: Vec<_> = (0..2)
                    .map(|i| {
                        let (countdown, results, owners) =
                            (countdown.clone(), results.clone(), owners.clone());
                        thread::spawn(move || finish(&countdown, &results, &owners, i, epoch))
                    })
                    .collect();
                finish(&countdown, &results, &owners, 2, epoch);
                for d in deps {
                    d.join().unwrap();
                }
                // Relaxed: the joins ordered every release of the frame.
                assert_eq!(owners.load(Ordering::Relaxed), 1, "frame {epoch}");
            }
        });
    }
}

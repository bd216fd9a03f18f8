//! Dependency countdown of a task-graph node: each finishing dependency
//! counts once per frame, and exactly one of them, the last, learns that it
//! released the node.
//!
//! The count is never reset. It counts releases since the graph was built,
//! over the frames that count: the caller numbers them from 1 (`epoch`),
//! and frame `epoch` is complete for this node when the count reaches
//! `epoch × dependencies`. Every counting frame runs to its end, and in it
//! every dependency releases the node exactly once (also when it was
//! skipped), or the frame completes the node at once
//! ([`complete_alone`](Countdown::complete_alone)). A frame that one
//! thread runs alone from start to end does not count at all and takes no
//! epoch (`graph/runtime/alone.rs`). Not resetting matters for speed: a
//! reset at frame start would write every node's line from the frame's
//! thread, and each other thread would then miss on the line of every
//! node it releases.
//!
//! A node with a single dependency needs no count at all: that dependency
//! is always the last one. Otherwise each dependency adds one (AcqRel) and
//! the one that reaches the frame's target is last; its acquire synchronises
//! with every earlier dependency's release, so the node sees all their
//! effects.
//!
//! The dependency count is not stored here but passed in by the caller,
//! which keeps it where no thread writes (the graph's read-only arrays).
//! On the counter's line, reading it before the read-modify-write moved
//! that line between cores twice per release (once shared for the read,
//! once exclusive for the add), and a single-dependency node's line once
//! for nothing; perf put about 40% of the graph runner's own time there.

use crate::loom::atomic::{AtomicU64, Ordering};

/// See the module docs. Every call for one countdown must pass the same
/// `dependencies`, the node's fixed number of dependencies (at least 1 to
/// release; `complete_alone` also takes a root's 0 and does nothing).
pub(crate) struct Countdown {
    releases: AtomicU64,
}

impl Countdown {
    /// A countdown before its node's first frame.
    pub(crate) fn new() -> Self {
        Countdown {
            releases: AtomicU64::new(0),
        }
    }

    /// Counts one finished dependency of a node with `dependencies`
    /// dependencies in frame `epoch` (1 for the first frame, then one more
    /// per frame). `true` for the last one, which now owns the node.
    #[inline]
    pub(crate) fn release(&self, dependencies: u32, epoch: u64) -> bool {
        if dependencies == 1 {
            return true;
        }
        let target = epoch * u64::from(dependencies);
        // AcqRel: release publishes this dependency's effects; the last
        // dependency's acquire pairs with every earlier one's release.
        let released = self.releases.fetch_add(1, Ordering::AcqRel) + 1;
        debug_assert!(released <= target, "a dependency released twice");
        released == target
    }

    /// [`release`](Self::release) while one thread runs the frame alone
    /// (a hand-over counting the releases of the nodes that ran): the same
    /// count, without a read-modify-write. Only that thread releases nodes
    /// until it hands them to other threads through the queues, whose
    /// release/acquire pairs put this store before any other thread's
    /// `release` of the node. The latch of the last frame that counted
    /// orders its counts before this load.
    #[inline]
    pub(crate) fn release_alone(&self, dependencies: u32, epoch: u64) -> bool {
        if dependencies == 1 {
            return true;
        }
        let target = epoch * u64::from(dependencies);
        // Relaxed, both: this thread is the only one counting (see above).
        let released = self.releases.load(Ordering::Relaxed) + 1;
        debug_assert!(released <= target, "a dependency released twice");
        self.releases.store(released, Ordering::Relaxed);
        released == target
    }

    /// Completes frame `epoch` for this node at once, as if all of its
    /// dependencies had counted: for a node that ran before a frame run
    /// alone handed over, with its dependencies run uncounted before it
    /// (`graph/runtime/alone.rs`). The same argument as for
    /// [`release_alone`](Self::release_alone) orders it.
    #[inline]
    pub(crate) fn complete_alone(&self, dependencies: u32, epoch: u64) {
        if dependencies > 1 {
            // Relaxed: as in `release_alone`.
            self.releases
                .store(epoch * u64::from(dependencies), Ordering::Relaxed);
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn the_last_release_of_each_frame_owns_the_node() {
        let countdown = Countdown::new();
        for epoch in 1..=1000 {
            let owners: Vec<bool> = (0..3).map(|_| countdown.release(3, epoch)).collect();
            assert_eq!(owners, [false, false, true], "frame {epoch}");
        }
    }

    #[test]
    fn a_single_dependency_always_owns_the_node() {
        let countdown = Countdown::new();
        assert!((1..=1000).all(|epoch| countdown.release(1, epoch)));
        assert!((1001..=2000).all(|epoch| countdown.release_alone(1, epoch)));
    }

    #[test]
    fn frames_handed_over_and_shared_count_alike() {
        let countdown = Countdown::new();
        for epoch in 1..=1000 {
            let owners: Vec<bool> = match epoch % 3 {
                0 => (0..2).map(|_| countdown.release_alone(2, epoch)).collect(),
                1 => (0..2).map(|_| countdown.release(2, epoch)).collect(),
                _ => {
                    countdown.complete_alone(2, epoch);
                    vec![false, true]
                }
            };
            assert_eq!(owners, [false, true], "frame {epoch}");
        }
    }
}

#[cfg(all(test, loom))]
mod loom_models {
    use super::*;
    use crate::loom::atomic::AtomicUsize;
    use crate::loom::{thread, Arc};

    /// Per frame: write this dependency's result for the frame, then
    /// release; the releaser checks it sees every result.
    fn finish(
        countdown: &Countdown,
        results: &[AtomicUsize],
        owners: &AtomicUsize,
        i: usize,
        epoch: u64,
    ) {
        // Relaxed: ordered by the countdown's AcqRel.
        results[i].store(epoch as usize, Ordering::Relaxed);
        // One result per dependency.
        if countdown.release(results.len() as u32, epoch) {
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
            let countdown = Arc::new(Countdown::new());
            let results: Arc<[AtomicUsize; 3]> = Arc::new(Default::default());
            for epoch in 1..=2 {
                let owners = Arc::new(AtomicUsize::new(0));
                let deps: Vec<_> = (0..2)
                    .map(|i| {
                        let (countdown, results, owners) =
                            (countdown.clone(), results.clone(), owners.clone());
                        thread::spawn(move || finish(&countdown, &results[..], &owners, i, epoch))
                    })
                    .collect();
                finish(&countdown, &results[..], &owners, 2, epoch);
                for d in deps {
                    d.join().unwrap();
                }
                // Relaxed: the joins ordered every release of the frame.
                assert_eq!(owners.load(Ordering::Relaxed), 1, "frame {epoch}");
            }
        });
    }

    /// A node of two dependencies whose frame is handed over to a second
    /// thread, as a queue does it (release store, acquire load).
    #[derive(Clone)]
    struct HandOver {
        countdown: Arc<Countdown>,
        results: Arc<[AtomicUsize; 2]>,
        owners: Arc<AtomicUsize>,
        handed_over: Arc<AtomicUsize>,
    }

    impl HandOver {
        fn new() -> Self {
            HandOver {
                countdown: Arc::new(Countdown::new()),
                results: Arc::new(Default::default()),
                owners: Arc::new(AtomicUsize::new(0)),
                handed_over: Arc::new(AtomicUsize::new(0)),
            }
        }

        /// A thread that, once handed over, finishes dependency `i` in
        /// frame `epoch`: it gets the dependency as from a queue.
        fn finish_once_handed_over(&self, i: usize, epoch: u64) -> thread::JoinHandle<()> {
            let this = self.clone();
            thread::spawn(move || {
                // Acquire: pairs with the release store in `hand_over`, as a
                // steal pairs with a push.
                while this.handed_over.load(Ordering::Acquire) == 0 {
                    thread::yield_now();
                }
                this.finish(i, epoch);
            })
        }

        fn hand_over(&self) {
            // Release: pairs with the acquire load above.
            self.handed_over.store(1, Ordering::Release);
        }

        fn finish(&self, i: usize, epoch: u64) {
            finish(&self.countdown, &self.results[..], &self.owners, i, epoch);
        }

        fn owners(&self) -> usize {
            // Relaxed: read after joining every thread that counted.
            self.owners.load(Ordering::Relaxed)
        }
    }

    /// A shared frame between two frames counted by one thread alone, for
    /// a node with two dependencies. Frame 1 completes the node at once
    /// (`complete_alone`, a node that ran before a hand-over); in frame 2
    /// one dependency runs on a thread already running, which gets it as
    /// from a queue (a release store after frame 1, an acquire load before
    /// it counts); frame 3 counts each dependency with `release_alone` (a
    /// hand-over's count), after that thread joined, as after a frame's
    /// latch. Frame 3's releases own the node once; in frame 2 exactly one
    /// release owns it and sees both results.
    ///
    /// Loom puts stores in modification order as they execute, so it checks
    /// the counting across the kinds of frame and the plain loads of the
    /// counts made alone (which read stale values without the join); that a
    /// read-modify-write after the hand-over follows the plain stores
    /// before it rests on the release/acquire pair, as argued on
    /// `release_alone`.
    #[test]
    fn counts_made_alone_carry_over() {
        loom::model(|| {
            let node = HandOver::new();
            let dependency = node.finish_once_handed_over(0, 2);
            node.countdown.complete_alone(2, 1);
            node.hand_over();
            node.finish(1, 2);
            dependency.join().unwrap();
            assert_eq!(node.owners(), 1, "frame 2");
            let alone: Vec<bool> = (0..2).map(|_| node.countdown.release_alone(2, 3)).collect();
            assert_eq!(alone, [false, true], "frame 3");
        });
    }

    /// A frame handed over between its two dependencies: the frame's thread
    /// counts the first with `release_alone`, then hands the second over as
    /// a queue does (release store, acquire load); the thread that runs it
    /// counts with `release`, owns the node, and sees the first result.
    #[test]
    fn a_frame_handed_over_between_two_releases() {
        loom::model(|| {
            let node = HandOver::new();
            let other = node.finish_once_handed_over(1, 1);
            // Relaxed: published by the hand-over below.
            node.results[0].store(1, Ordering::Relaxed);
            assert!(
                !node.countdown.release_alone(2, 1),
                "the first of two releases"
            );
            node.hand_over();
            other.join().unwrap();
            assert_eq!(node.owners(), 1);
        });
    }
}

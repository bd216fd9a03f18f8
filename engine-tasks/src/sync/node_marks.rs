//! The marks of a planned frame (`graph/runtime/planned.rs`): per node, who
//! claimed it and whether it finished in this frame; and how the frame's
//! thread sleeps until a helper finishes a node.
//!
//! # Marks
//!
//! Each thread walks its own list of the plan. Before it runs a node it
//! checks that every dependency's `finished` mark shows this frame
//! (Acquire, pairing with the Release that set it, so the node sees its
//! dependencies' effects), then claims the node with one swap of the
//! `claimed` mark to the frame's epoch. A dependency that the same thread
//! ran just before may still be unmarked: the walker claims its next node
//! before it marks the one that ran (`Shared::claim_next`), and program
//! order gives it that one's effects. A thread whose own next node is
//! not ready may claim a ready node of another list instead, so a plan
//! that a busy or late helper does not keep still runs every node; the
//! swap makes sure exactly one thread runs each. Marks carry the frame's
//! epoch (frames numbered from 1) and are never reset: a stale epoch reads
//! as unset, and the frame's thread does not write every node's line at
//! frame start (see `countdown.rs` for what that cost).
//!
//! The owner's claim is usually of a line it wrote itself in the frames
//! before (plans stay put between re-sorts), so it stays in its core's
//! cache; a `finished` mark moves to the other core only when a node there
//! depends on it, once per edge between the lists.
//!
//! # Sleeping walkers
//!
//! A walker that finds nothing ready for a while sleeps, and whoever
//! finishes a node next wakes it. This is the flag-and-recheck pair of two
//! fences:
//!
//! - finisher: set `finished` (Release), [`fence::light`], read the
//!   [`Sleepers`] bits;
//! - sleeper: set its bit, [`fence::heavy`], read the marks again, and
//!   sleep only if they show nothing new.
//!
//! Either the finisher's read sees the bit and wakes the sleeper, or the
//! sleeper's re-read sees the mark. The frequent side (every node) pays a
//! compiler fence and a load; the rare side (a walker about to sleep) pays
//! the expensive fence (`fence.rs`).

use crate::loom::atomic::{AtomicU32, AtomicU64, Ordering};
use crate::sync::fence;

/// A node's marks; see the module docs.
pub(crate) struct NodeMarks {
    claimed: AtomicU64,
    finished: AtomicU64,
}

impl NodeMarks {
    pub(crate) fn new() -> Self {
        NodeMarks {
            claimed: AtomicU64::new(0),
            finished: AtomicU64::new(0),
        }
    }

    /// Claims the node for frame `epoch`; `true` for the one caller that
    /// runs it.
    #[inline]
    pub(crate) fn claim(&self, epoch: u64) -> bool {
        // Relaxed: only the swap's atomicity matters (one winner). The
        // winner saw the dependencies' marks with Acquire before (or ran
        // the one not yet marked itself, `claim_next`), and the node's
        // effects of earlier frames are ordered by the frame boundary (the
        // frame's end acquires every thread's last mark; its next start
        // publishes the helper tasks with Release).
        self.claimed.swap(epoch, Ordering::Relaxed) != epoch
    }

    /// Whether the node was claimed in frame `epoch` (by anyone).
    #[inline]
    pub(crate) fn is_claimed(&self, epoch: u64) -> bool {
        // Relaxed: a hint to skip the node; `claim` decides.
        self.claimed.load(Ordering::Relaxed) == epoch
    }

    /// Whether the node finished in frame `epoch`; if so, its effects are
    /// visible to the caller.
    #[inline]
    pub(crate) fn is_finished(&self, epoch: u64) -> bool {
        // Acquire: pairs with the Release in `finish`/`finish_and_check`.
        self.finished.load(Ordering::Acquire) == epoch
    }

    /// Marks the node finished in frame `epoch`; returns the bits of the
    /// walkers that may be asleep and must be woken (module docs).
    #[inline]
    pub(crate) fn finish(&self, epoch: u64, sleepers: &Sleepers) -> u32 {
        // Release: publishes the node's effects (and its poison marks on
        // successors) to whoever sees the mark.
        self.finished.store(epoch, Ordering::Release);
        // Pairs with the heavy fence in `Sleepers::announce`.
        fence::light();
        // Acquire: pairs with the Release of `announce`'s `fetch_or`, so
        // the caller sees what the sleeper wrote before (where to wake it).
        sleepers.0.load(Ordering::Acquire)
    }
}

/// One bit per walker that is asleep or about to be (module docs).
pub(crate) struct Sleepers(AtomicU32);

impl Sleepers {
    pub(crate) fn new() -> Self {
        Sleepers(AtomicU32::new(0))
    }

    /// Walker `bit` is about to sleep: after this, re-read the marks (with
    /// [`NodeMarks::is_finished`]) and sleep only if nothing changed.
    pub(crate) fn announce(&self, bit: u32) {
        // Release: publishes what the walker wrote before (see `finish`);
        // the store-load order comes from the fence pair.
        self.0.fetch_or(1 << bit, Ordering::Release);
        // Pairs with the light fence in `finish`.
        fence::heavy();
    }

    /// Walker `bit` woke (or did not sleep after all).
    pub(crate) fn withdraw(&self, bit: u32) {
        // Relaxed: a late wake-up this saves only costs a spare permit.
        self.0.fetch_and(!(1 << bit), Ordering::Relaxed);
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn one_claim_per_frame_and_marks_of_other_frames_read_as_unset() {
        let marks = NodeMarks::new();
        let sleepers = Sleepers::new();
        for epoch in 1..=3 {
            assert!(!marks.is_claimed(epoch));
            assert!(marks.claim(epoch), "frame {epoch}");
            assert!(!marks.claim(epoch), "frame {epoch}");
            assert!(marks.is_claimed(epoch));
            assert!(!marks.is_finished(epoch));
            assert_eq!(marks.finish(epoch, &sleepers), 0);
            assert!(marks.is_finished(epoch));
            assert!(!marks.is_finished(epoch + 1));
        }
        sleepers.announce(0);
        sleepers.announce(3);
        assert_eq!(marks.finish(4, &sleepers), 0b1001);
        sleepers.withdraw(0);
        assert_eq!(marks.finish(5, &sleepers), 0b1000);
    }
}

#[cfg(all(test, loom))]
mod loom_models {
    use super::*;
    use crate::loom::atomic::AtomicUsize;
    use crate::loom::{thread, Arc};
    use crate::sync::park::Parker;

    const EPOCH: u64 = 1;

    /// A planned frame of three nodes `a -> c <- b`: the frame's list is
    /// `[a, c]`, the helper's `[b]`, and either walker may claim any ready
    /// node. With early claims, a walker that ran one node of `order` may
    /// claim the next one of `order` before marking the first finished: `c`
    /// after `a` or `b` (the case that matters: `c` depends on it), or `b`
    /// or `a` after `c`. That is more than `claim_next` does (the helper's
    /// own list holds only `b`).
    struct Frame {
        marks: [NodeMarks; 3],
        results: [AtomicUsize; 3],
        runs: AtomicUsize,
        sleepers: Sleepers,
        parkers: [Parker; 2],
    }

    fn deps(node: usize) -> &'static [usize] {
        [&[][..], &[], &[0, 1]][node]
    }

    fn ready(frame: &Frame, node: usize) -> bool {
        !frame.marks[node].is_claimed(EPOCH)
            && deps(node)
                .iter()
                .all(|&d| frame.marks[d].is_finished(EPOCH))
    }

    /// Runs `node` (claimed by this walker) and marks it finished, waking
    /// the other walker if it sleeps. With `claim_next`, first claims the
    /// node after it in this walker's order if only `node` held that one
    /// back, as `Shared::claim_next` does, and then runs it too.
    fn run_claimed(frame: &Frame, me: u32, node: usize, claim_next: Option<usize>) {
        for &d in deps(node) {
            // Relaxed: ordered by the marks' Acquire/Release (or by this
            // thread's program order, for a node it ran itself).
            assert_eq!(frame.results[d].load(Ordering::Relaxed), 1);
        }
        // Relaxed: published by `finish`.
        frame.results[node].store(1, Ordering::Relaxed);
        frame.runs.fetch_add(1, Ordering::Relaxed);
        let next = claim_next.filter(|&next| {
            !frame.marks[next].is_claimed(EPOCH)
                && deps(next)
                    .iter()
                    .all(|&d| d == node || frame.marks[d].is_finished(EPOCH))
                && frame.marks[next].claim(EPOCH)
        });
        if next.is_some_and(|next| deps(next).contains(&node)) {
            // Outside the model (a std atomic): counts, over all
            // executions, claims of a node whose dependency `node` was not
            // marked finished yet.
            EARLY_CLAIMS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        let sleeping = frame.marks[node].finish(EPOCH, &frame.sleepers);
        let other = 1 - me;
        if sleeping & (1 << other) != 0 {
            frame.parkers[other as usize].unpark();
        }
        if let Some(next) = next {
            run_claimed(frame, me, next, None);
        }
    }

    /// Walks `order` until every node is claimed, sleeping when nothing is
    /// ready; with `claim_next`, claims a node's successor in `order`
    /// before marking the node finished (`run_claimed`).
    fn walk(frame: &Frame, me: u32, order: [usize; 3], claim_next: bool) {
        while !frame.marks.iter().all(|m| m.is_claimed(EPOCH)) {
            let mut ran = false;
            for (k, &node) in order.iter().enumerate() {
                if ready(frame, node) && frame.marks[node].claim(EPOCH) {
                    let next = order.get(k + 1).copied().filter(|_| claim_next);
                    run_claimed(frame, me, node, next);
                    ran = true;
                }
            }
            if ran {
                continue;
            }
            frame.sleepers.announce(me);
            let all_claimed = frame.marks.iter().all(|m| m.is_claimed(EPOCH));
            if !all_claimed && !(0..3).any(|n| ready(frame, n)) {
                frame.parkers[me as usize].park();
            }
            frame.sleepers.withdraw(me);
        }
    }

    /// Each node runs once, after its dependencies (it sees their writes),
    /// and a walker that sleeps is always woken: a lost wake-up is a
    /// deadlock, which loom reports.
    #[test]
    fn each_node_runs_once_after_its_dependencies_and_no_wake_up_is_lost() {
        walkers_run_each_node_once(false);
    }

    /// The same when a walker claims its next node before it marks the one
    /// it ran finished (`Shared::claim_next`): `c` may be claimed while `a`
    /// or `b` is not marked yet, and the other walker, asleep for `c`, is
    /// still woken.
    #[test]
    fn claiming_the_next_node_before_the_finish_mark_loses_nothing() {
        walkers_run_each_node_once(true);
    }

    /// Early claims of a node whose dependency was not marked yet, over all
    /// executions of a model.
    static EARLY_CLAIMS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

    fn walkers_run_each_node_once(claim_next: bool) {
        loom::model(move || {
            let frame = Arc::new(Frame {
                marks: [NodeMarks::new(), NodeMarks::new(), NodeMarks::new()],
                results: Default::default(),
                runs: AtomicUsize::new(0),
                sleepers: Sleepers::new(),
                parkers: [Parker::new(), Parker::new()],
            });
            let helper = {
                let frame = frame.clone();
                thread::spawn(move || walk(&frame, 1, [1, 2, 0], claim_next))
            };
            walk(&frame, 0, [0, 2, 1], claim_next);
            helper.join().unwrap();
            // Relaxed: the join ordered the helper's writes.
            assert_eq!(frame.runs.load(Ordering::Relaxed), 3);
            assert!((0..3).all(|n| frame.marks[n].is_finished(EPOCH)));
        });
        if claim_next {
            // The model took the early claim in some execution.
            assert!(EARLY_CLAIMS.load(std::sync::atomic::Ordering::Relaxed) > 0);
        }
    }
}

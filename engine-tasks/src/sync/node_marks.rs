//! The marks of a planned frame (`graph/runtime/planned.rs`): per node, who
//! claimed it and whether it finished in this frame; and how the frame's
//! thread sleeps until a helper finishes a node.
//!
//! # Marks
//!
//! Each thread walks its own list of the plan. Before it runs a node it
//! checks that every dependency's [`FinishMark`] shows this frame
//! (Acquire, pairing with the Release that set it, so the node sees its
//! dependencies' effects), then claims the node with one swap of its
//! [`ClaimMark`] to the frame's epoch. A dependency that the same thread
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
//! # Where the marks live
//!
//! A finish mark sits in its node's padded state, which only the threads
//! that run the node and its successors touch: it moves to another core
//! once per edge between the lists.
//!
//! Claim marks sit apart, in plan order ([`ClaimMarks`]): each list's
//! marks fill lines of their own, so the walker that owns a list swaps
//! marks on lines its own core holds. Only a walker that looks past its
//! own list (for a ready head of another, or when every head waits)
//! reads another list's line. When both marks shared the node's line,
//! the owner's swap found that line shared with the other core, which had
//! read the finish mark for a successor, and waited for it to be
//! invalidated. A locked instruction also waits for every earlier store
//! of its core to leave the store buffer. On the 2-core development VM the
//! separate lines ended 1 µs frames of the 256-node benchmark graph
//! 4.8-6.0 µs sooner back to back and 2.6-3.7 µs sooner at 60 Hz, in
//! in-process A/B runs (the layout chosen at random per frame;
//! `docs/performance/paced-cold-start.md`).

use crate::loom::atomic::{AtomicU32, AtomicU64, Ordering};
use crate::sync::fence;

/// Whether a node finished in a frame; see the module docs.
pub(crate) struct FinishMark(AtomicU64);

impl FinishMark {
    pub(crate) fn new() -> Self {
        FinishMark(AtomicU64::new(0))
    }

    /// Whether the node finished in frame `epoch`; if so, its effects are
    /// visible to the caller.
    #[inline]
    pub(crate) fn is_finished(&self, epoch: u64) -> bool {
        // Acquire: pairs with the Release in `finish`.
        self.0.load(Ordering::Acquire) == epoch
    }

    /// Marks the node finished in frame `epoch`; returns the bits of the
    /// walkers that may be asleep and must be woken (module docs).
    #[inline]
    pub(crate) fn finish(&self, epoch: u64, sleepers: &Sleepers) -> u32 {
        // Release: publishes the node's effects (and its poison marks on
        // successors) to whoever sees the mark.
        self.0.store(epoch, Ordering::Release);
        // Pairs with the heavy fence in `Sleepers::announce`.
        fence::light();
        // Acquire: pairs with the Release of `announce`'s `fetch_or`, so
        // the caller sees what the sleeper wrote before (where to wake it).
        sleepers.0.load(Ordering::Acquire)
    }
}

/// Which frame last claimed a node; see the module docs.
pub(crate) struct ClaimMark(AtomicU64);

impl ClaimMark {
    fn new() -> Self {
        ClaimMark(AtomicU64::new(0))
    }

    /// Claims the node for frame `epoch`; `true` for the one caller that
    /// runs it.
    #[inline]
    pub(crate) fn claim(&self, epoch: u64) -> bool {
        // Relaxed: only the swap's atomicity matters (one winner). The
        // winner saw the dependencies' finish marks with Acquire before (or
        // ran the one not yet marked itself, `claim_next`), and the node's
        // effects of earlier frames are ordered by the frame boundary (the
        // frame's end acquires every thread's last mark; its next start
        // publishes the helper tasks with the injector push's Release).
        self.0.swap(epoch, Ordering::Relaxed) != epoch
    }

    /// Whether the node was claimed in frame `epoch` (by anyone).
    #[inline]
    pub(crate) fn is_claimed(&self, epoch: u64) -> bool {
        // Relaxed: a hint to skip the node; `claim` decides.
        self.0.load(Ordering::Relaxed) == epoch
    }
}

/// Claim marks per line: a line of 128 bytes, the pair of 64-byte lines
/// that x86's adjacent-line prefetcher fetches together.
const MARKS_PER_LINE: usize = 16;

/// One line of claim marks.
#[repr(align(128))]
struct ClaimLine([ClaimMark; MARKS_PER_LINE]);

/// The claim marks of a plan's lists, list after list, each list starting
/// on a line of its own (module docs). Laid out again by
/// [`lay_out`](Self::lay_out) whenever the plan changes, in the memory
/// held: the marks' epochs are of earlier frames, so a mark that now
/// stands for another node reads as unclaimed. [`resize`](Self::resize)
/// unsets them all, as a rebuild does every node's state.
pub(crate) struct ClaimMarks {
    lines: Vec<ClaimLine>,
    /// List `t`'s marks start at line `first_line[t]`.
    first_line: Vec<u32>,
}

impl ClaimMarks {
    /// No marks; allocates nothing.
    pub(crate) fn new() -> Self {
        ClaimMarks {
            lines: Vec::new(),
            first_line: Vec::new(),
        }
    }

    /// Room for `nodes` nodes in up to `lists` lists, every mark unset, in
    /// the memory held if it is enough (a graph rebuilt at the same size).
    pub(crate) fn resize(&mut self, nodes: usize, lists: usize) {
        // Each list wastes less than a line at its end.
        let lines = if nodes == 0 {
            0
        } else {
            nodes.div_ceil(MARKS_PER_LINE) + lists
        };
        self.lines.truncate(lines);
        for mark in self.lines.iter_mut().flat_map(|line| line.0.iter_mut()) {
            *mark = ClaimMark::new();
        }
        self.lines.resize_with(lines, || {
            ClaimLine(std::array::from_fn(|_| ClaimMark::new()))
        });
        self.first_line.clear();
        self.first_line
            .resize(if nodes == 0 { 0 } else { lists }, 0);
    }

    /// Places lists of the given lengths, in order (at most the `lists`
    /// and, together, the `nodes` given to [`resize`](Self::resize)).
    pub(crate) fn lay_out(&mut self, lengths: impl Iterator<Item = usize>) {
        let mut line = 0;
        for (first, length) in self.first_line.iter_mut().zip(lengths) {
            *first = line as u32;
            line += length.div_ceil(MARKS_PER_LINE);
        }
        debug_assert!(line <= self.lines.len(), "more nodes than room");
    }

    /// The mark of the node at place `at` of list `list`.
    #[inline]
    pub(crate) fn get(&self, list: usize, at: usize) -> &ClaimMark {
        let line = self.first_line[list] as usize + at / MARKS_PER_LINE;
        &self.lines[line].0[at % MARKS_PER_LINE]
    }
}

/// One bit per walker that is asleep or about to be (module docs).
pub(crate) struct Sleepers(AtomicU32);

impl Sleepers {
    pub(crate) fn new() -> Self {
        Sleepers(AtomicU32::new(0))
    }

    /// Walker `bit` is about to sleep: after this, re-read the marks (with
    /// [`FinishMark::is_finished`]) and sleep only if nothing changed.
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
        let mut claims = ClaimMarks::new();
        claims.resize(1, 1);
        claims.lay_out([1].into_iter());
        let claim = claims.get(0, 0);
        let finished = FinishMark::new();
        let sleepers = Sleepers::new();
        for epoch in 1..=3 {
            assert!(!claim.is_claimed(epoch));
            assert!(claim.claim(epoch), "frame {epoch}");
            assert!(!claim.claim(epoch), "frame {epoch}");
            assert!(claim.is_claimed(epoch));
            assert!(!finished.is_finished(epoch));
            assert_eq!(finished.finish(epoch, &sleepers), 0);
            assert!(finished.is_finished(epoch));
            assert!(!finished.is_finished(epoch + 1));
        }
        sleepers.announce(0);
        sleepers.announce(3);
        assert_eq!(finished.finish(4, &sleepers), 0b1001);
        sleepers.withdraw(0);
        assert_eq!(finished.finish(5, &sleepers), 0b1000);
    }

    /// Every place of every list has a mark of its own, and no line holds
    /// marks of two lists, whatever the lengths.
    #[test]
    fn each_list_has_marks_of_its_own_on_lines_of_its_own() {
        let mut claims = ClaimMarks::new();
        claims.resize(100, 4);
        for lengths in [
            [100, 0, 0, 0],
            [1, 33, 16, 50],
            [25, 25, 25, 25],
            [0, 0, 99, 1],
        ] {
            claims.lay_out(lengths.into_iter());
            let mut seen = std::collections::HashMap::new();
            for (list, &length) in lengths.iter().enumerate() {
                for at in 0..length {
                    let address = claims.get(list, at) as *const ClaimMark as usize;
                    assert_eq!(seen.insert(address, list), None, "{lengths:?}");
                }
            }
            for (&address, &list) in &seen {
                let line = address / 128;
                assert!(
                    seen.iter().all(|(&a, &l)| a / 128 != line || l == list),
                    "{lengths:?}: list {list} shares a line"
                );
            }
        }
    }

    /// A rebuild starts every node's state afresh, the claim marks with
    /// them: `resize` unsets every mark, in the memory held.
    #[test]
    fn resizing_unsets_every_mark_in_the_memory_held() {
        let mut claims = ClaimMarks::new();
        assert_eq!(
            claims.lines.capacity(),
            0,
            "an empty plan allocates nothing"
        );
        claims.resize(40, 2);
        claims.lay_out([40, 0].into_iter());
        assert!((0..40).all(|at| claims.get(0, at).claim(1)));
        let lines = claims.lines.as_ptr();
        claims.resize(40, 2);
        claims.lay_out([40, 0].into_iter());
        assert_eq!(claims.lines.as_ptr(), lines);
        assert!((0..40).all(|at| !claims.get(0, at).is_claimed(1)));
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
        claims: ClaimMarks,
        finished: [FinishMark; 3],
        results: [AtomicUsize; 3],
        runs: AtomicUsize,
        sleepers: Sleepers,
        parkers: [Parker; 2],
    }

    fn deps(node: usize) -> &'static [usize] {
        [&[][..], &[], &[0, 1]][node]
    }

    fn ready(frame: &Frame, node: usize) -> bool {
        !frame.claims.get(0, node).is_claimed(EPOCH)
            && deps(node)
                .iter()
                .all(|&d| frame.finished[d].is_finished(EPOCH))
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
            !frame.claims.get(0, next).is_claimed(EPOCH)
                && deps(next)
                    .iter()
                    .all(|&d| d == node || frame.finished[d].is_finished(EPOCH))
                && frame.claims.get(0, next).claim(EPOCH)
        });
        if next.is_some_and(|next| deps(next).contains(&node)) {
            // Outside the model (a std atomic): counts, over all
            // executions, claims of a node whose dependency `node` was not
            // marked finished yet.
            EARLY_CLAIMS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        let sleeping = frame.finished[node].finish(EPOCH, &frame.sleepers);
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
        while !(0..3).all(|n| frame.claims.get(0, n).is_claimed(EPOCH)) {
            let mut ran = false;
            for (k, &node) in order.iter().enumerate() {
                if ready(frame, node) && frame.claims.get(0, node).claim(EPOCH) {
                    let next = order.get(k + 1).copied().filter(|_| claim_next);
                    run_claimed(frame, me, node, next);
                    ran = true;
                }
            }
            if ran {
                continue;
            }
            frame.sleepers.announce(me);
            let all_claimed = (0..3).all(|n| frame.claims.get(0, n).is_claimed(EPOCH));
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
                claims: {
                    let mut claims = ClaimMarks::new();
                    claims.resize(3, 1);
                    claims.lay_out([3].into_iter());
                    claims
                },
                finished: [FinishMark::new(), FinishMark::new(), FinishMark::new()],
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
            assert!((0..3).all(|n| frame.finished[n].is_finished(EPOCH)));
        });
        if claim_next {
            // The model took the early claim in some execution.
            assert!(EARLY_CLAIMS.load(std::sync::atomic::Ordering::Relaxed) > 0);
        }
    }
}

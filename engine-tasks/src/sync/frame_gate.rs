//! A yes-or-no answer worked out once per frame, by whichever thread asks
//! first: a set's run conditions, evaluated when the first of its nodes is
//! about to run (`graph/runtime/frame.rs`).
//!
//! # States
//!
//! One word: the frame's epoch (frames numbered from 1) shifted left by
//! two, and two bits: `EVALUATING`, `NO`, `YES` or `PANICKED`. A word of an
//! older epoch means "not asked yet this frame", so nothing is reset
//! between frames.
//!
//! * The first thread to ask swaps in `(epoch, EVALUATING)` with a
//!   compare-exchange, evaluates, and stores `(epoch, answer)` with
//!   Release. If the evaluation panics, it stores `PANICKED` before the
//!   panic goes on: every later asker of the frame gets
//!   [`Panicked`] (its caller fails the way the evaluator did),
//!   and no asker waits for ever on a panic.
//! * A thread that finds `EVALUATING` of its epoch waits (spinning, then
//!   yielding) for the answer, which it reads with Acquire; one that finds
//!   an answer of its epoch takes it.
//!
//! Such a wait ends only if the evaluation never waits for an asker, for
//! instance by running an asker's work while it waits: the caller makes
//! sure of it (the task graph forbids waits on the pool inside a set's
//! conditions, and a refused wait panics, which the gate answers as
//! `PANICKED`).
//!
//! Exactly one thread evaluates per frame: the compare-exchange from the
//! old word succeeds once, and every later asker sees the epoch's word (or
//! the only asker evaluates, below).
//!
//! A caller that knows it is the only thread asking in the frame (a frame
//! run alone, before it hands any node over: [`Askers::OnlyThis`]) skips
//! the compare-exchange: it evaluates and stores the answer with Release,
//! as the claiming thread does, and never stores `EVALUATING`. Whatever
//! later lets another thread ask in
//! the frame (a hand-over's queue push, with its release/acquire pair)
//! orders that store before the other's load, so the other finds the
//! answer, never the old word.

use crate::loom::atomic::{AtomicU64, Ordering};
#[cfg(not(loom))]
use crossbeam_utils::Backoff;

/// Zero: the initial word (epoch 0) never reads as a frame's, since
/// frames are numbered from 1.
const PANICKED: u64 = 0;
const EVALUATING: u64 = 1;
const NO: u64 = 2;
const YES: u64 = 3;

/// The word for `epoch` and `state`.
fn word(epoch: u64, state: u64) -> u64 {
    epoch << 2 | state
}

/// The gate has no answer for the frame: its evaluation panicked (module
/// docs).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) struct Panicked;

/// Who may ask a gate during the caller's frame (module docs).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum Askers {
    /// Other threads may ask at the same time: the first asker claims the
    /// evaluation with a compare-exchange.
    Many,
    /// Only the caller asks until something that synchronises (a queue
    /// push) lets other threads in: it evaluates without a claim.
    OnlyThis,
}

/// See the module docs.
pub(crate) struct FrameGate {
    state: AtomicU64,
}

impl FrameGate {
    pub(crate) fn new() -> Self {
        FrameGate {
            state: AtomicU64::new(0),
        }
    }

    /// The answer for frame `epoch` (at least 1): `evaluate` runs on exactly
    /// one of the threads that ask in that frame, the others get its answer.
    /// `askers` says whether other threads may be asking now (module docs).
    /// The engine takes the two steps apart ([`known`](Self::known), then
    /// [`answer_unknown`](Self::answer_unknown)) to keep the evaluation out
    /// of line; the tests ask in one.
    #[cfg(test)]
    pub(crate) fn answer(
        &self,
        epoch: u64,
        askers: Askers,
        evaluate: impl FnOnce() -> bool,
    ) -> Result<bool, Panicked> {
        match self.known(epoch) {
            Some(answer) => Ok(answer),
            None => self.answer_unknown(epoch, askers, evaluate),
        }
    }

    /// `answer` after [`known`](Self::known) found none: evaluates, or
    /// waits for the thread that does.
    #[cold]
    pub(crate) fn answer_unknown(
        &self,
        epoch: u64,
        askers: Askers,
        evaluate: impl FnOnce() -> bool,
    ) -> Result<bool, Panicked> {
        match askers {
            Askers::Many => self.ask(epoch, evaluate),
            Askers::OnlyThis => {
                // Relaxed: no other thread asks, so the word is this
                // thread's (a panicked evaluation of this frame) or older.
                let word = self.state.load(Ordering::Relaxed);
                if word == self::word(epoch, PANICKED) {
                    return Err(Panicked);
                }
                debug_assert!(word >> 2 < epoch, "another thread asked a frame run alone");
                Ok(self.evaluate(epoch, evaluate))
            }
        }
    }

    /// Frame `epoch`'s answer if it was worked out already; `None` if not
    /// (then ask with [`answer_unknown`](Self::answer_unknown)). The usual case, for every
    /// node of a set but the first: kept apart so that a caller can keep
    /// the evaluation out of line.
    #[inline]
    pub(crate) fn known(&self, epoch: u64) -> Option<bool> {
        debug_assert!(epoch > 0 && epoch < 1 << 62);
        // Acquire: pairs with the Release store of the answer
        // (`Publish::drop`), so the evaluator's reads and writes happen
        // before the caller's.
        let word = self.state.load(Ordering::Acquire);
        // Two whole-word compares: fewer instructions than taking the word
        // apart.
        if word == self::word(epoch, YES) {
            Some(true)
        } else if word == self::word(epoch, NO) {
            Some(false)
        } else {
            None
        }
    }

    /// `answer_unknown` with other askers: claims the evaluation, or waits
    /// for the thread that did.
    fn ask(&self, epoch: u64, evaluate: impl FnOnce() -> bool) -> Result<bool, Panicked> {
        #[cfg(not(loom))]
        let backoff = Backoff::new();
        loop {
            // Acquire: pairs with the Release store of the answer, so the
            // evaluator's reads and writes happen before ours.
            let word = self.state.load(Ordering::Acquire);
            if word >> 2 == epoch {
                match word & 3 {
                    NO => return Ok(false),
                    YES => return Ok(true),
                    PANICKED => return Err(Panicked),
                    _ => {
                        // Another thread is evaluating: wait for its answer.
                        #[cfg(loom)]
                        crate::loom::thread::yield_now();
                        #[cfg(not(loom))]
                        backoff.snooze();
                        continue;
                    }
                }
            }
            // Acquire on success: as above, for the previous frame's word.
            // Relaxed on failure: the loop loads again.
            if self
                .state
                .compare_exchange(
                    word,
                    self::word(epoch, EVALUATING),
                    Ordering::Acquire,
                    Ordering::Relaxed,
                )
                .is_ok()
            {
                return Ok(self.evaluate(epoch, evaluate));
            }
        }
    }

    /// Evaluates frame `epoch`'s answer and publishes it: for the thread
    /// that claimed the evaluation, or the only one asking.
    #[cold]
    #[cfg_attr(target_os = "linux", link_section = "engine_tasks_frame")]
    fn evaluate(&self, epoch: u64, evaluate: impl FnOnce() -> bool) -> bool {
        let mut publish = Publish {
            gate: self,
            epoch,
            answer: PANICKED,
        };
        let answer = evaluate();
        publish.answer = if answer { YES } else { NO };
        answer
    }
}

/// Stores the evaluator's answer when dropped: `PANICKED` if the
/// evaluation panicked (see the module docs).
struct Publish<'a> {
    gate: &'a FrameGate,
    epoch: u64,
    answer: u64,
}

impl Drop for Publish<'_> {
    fn drop(&mut self) {
        // Release: pairs with the Acquire loads in `known` and `ask`; after
        // an `OnlyThis` evaluation, whatever lets other threads in (a
        // hand-over's queue push) also orders it before their loads.
        self.gate
            .state
            .store(word(self.epoch, self.answer), Ordering::Release);
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    /// With `askers` asking: each frame evaluates once, a panicking
    /// evaluation answers `Panicked` to every later asker of its frame
    /// (and none of the next), and later askers (of either kind) get each
    /// frame's answer.
    fn each_frame_evaluates_once(askers: Askers) {
        let gate = FrameGate::new();
        let evaluations = AtomicUsize::new(0);
        let yes = || {
            // Relaxed: one thread.
            evaluations.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            true
        };
        assert_eq!(gate.answer(1, askers, yes), Ok(true));
        let answered = || unreachable!("frame 1 was answered");
        assert_eq!(gate.answer(1, askers, answered), Ok(true));
        assert_eq!(gate.answer(1, Askers::Many, answered), Ok(true));
        assert_eq!(gate.answer(2, askers, || false), Ok(false));
        let panicked = std::panic::catch_unwind(|| gate.answer(3, askers, || panic!("a bad one")));
        assert!(panicked.is_err());
        let answered = || unreachable!("frame 3 panicked");
        assert_eq!(gate.answer(3, askers, answered), Err(Panicked));
        assert_eq!(gate.answer(3, Askers::Many, answered), Err(Panicked));
        assert_eq!(gate.answer(4, askers, || true), Ok(true));
        // Relaxed: one thread.
        assert_eq!(evaluations.load(std::sync::atomic::Ordering::Relaxed), 1);
    }

    #[test]
    fn each_frame_evaluates_once_and_a_panic_reaches_every_asker() {
        each_frame_evaluates_once(Askers::Many);
    }

    #[test]
    fn the_only_asker_evaluates_once_and_later_askers_get_its_answer() {
        each_frame_evaluates_once(Askers::OnlyThis);
    }
}

#[cfg(all(test, loom))]
mod loom_models {
    use super::*;
    use crate::loom::atomic::AtomicUsize;
    use crate::loom::{thread, Arc};

    /// Two threads ask in the same frame, then in the next: each frame's
    /// condition runs once, both get its answer, and what the evaluator
    /// wrote before answering is visible to the other.
    #[test]
    fn one_evaluation_per_frame_and_both_see_it() {
        loom::model(|| {
            let gate = Arc::new(FrameGate::new());
            let evaluations = Arc::new(AtomicUsize::new(0));
            let ask = |gate: &FrameGate, evaluations: &AtomicUsize, epoch: u64| {
                gate.answer(epoch, Askers::Many, || {
                    // Relaxed: published by the gate's Release store.
                    evaluations.fetch_add(1, Ordering::Relaxed);
                    epoch == 1
                })
                .expect("the evaluation does not panic")
            };
            let other = {
                let (gate, evaluations) = (gate.clone(), evaluations.clone());
                thread::spawn(move || {
                    let answer = ask(&gate, &evaluations, 1);
                    // Relaxed: ordered by the gate's Acquire load.
                    assert!(evaluations.load(Ordering::Relaxed) >= 1);
                    answer
                })
            };
            assert!(ask(&gate, &evaluations, 1));
            assert!(other.join().unwrap());
            // Relaxed: the join ordered it.
            assert_eq!(evaluations.load(Ordering::Relaxed), 1);
            assert!(!ask(&gate, &evaluations, 2));
            assert_eq!(evaluations.load(Ordering::Relaxed), 2);
        });
    }

    /// The only asker of a frame evaluates without a claim, then lets
    /// another thread in through a Release store (as a hand-over's queue
    /// push does): the other gets the answer without evaluating, and sees
    /// what the evaluation wrote.
    #[test]
    fn the_only_askers_answer_reaches_a_thread_let_in_after_it() {
        loom::model(|| {
            let gate = Arc::new(FrameGate::new());
            let written = Arc::new(AtomicUsize::new(0));
            let let_in = Arc::new(AtomicUsize::new(0));
            let other = {
                let (gate, written, let_in) = (gate.clone(), written.clone(), let_in.clone());
                thread::spawn(move || {
                    // Acquire: pairs with the Release store below.
                    while let_in.load(Ordering::Acquire) == 0 {
                        thread::yield_now();
                    }
                    let answer = gate.answer(1, Askers::Many, || unreachable!("answered"));
                    let answer = answer.expect("the evaluation does not panic");
                    // Relaxed: ordered by the let-in pair.
                    assert_eq!(written.load(Ordering::Relaxed), 1);
                    answer
                })
            };
            let answer = gate.answer(1, Askers::OnlyThis, || {
                // Relaxed: published by the let-in store.
                written.store(1, Ordering::Relaxed);
                true
            });
            assert_eq!(answer, Ok(true));
            // Release: lets the other thread in, after the answer.
            let_in.store(1, Ordering::Release);
            assert!(other.join().unwrap());
        });
    }
}

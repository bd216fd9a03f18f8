//! A yes-or-no answer worked out once per frame, by whichever thread asks
//! first: a set's run conditions, evaluated when the first of its nodes is
//! about to run (`graph/runtime/frame.rs`).
//!
//! # States
//!
//! One word: the frame's epoch (frames numbered from 1) shifted left by
//! three, and three bits: `EVALUATING`, `SLEPT_ON` (evaluating, and at
//! least one asker sleeps until the answer), `NO`, `YES` or `PANICKED`. A
//! word of an older epoch means "not asked yet this frame", so nothing is
//! reset between frames.
//!
//! * The first thread to ask swaps in `(epoch, EVALUATING)` with a
//!   compare-exchange, evaluates, and swaps in `(epoch, answer)` with
//!   Release. If the evaluation panics, it swaps in `PANICKED` before the
//!   panic goes on: every later asker of the frame gets
//!   [`Panicked`] (its caller fails the way the evaluator did),
//!   and no asker waits for ever on a panic. If the word it swapped out
//!   was `SLEPT_ON`, it takes the gate's lock and wakes every sleeper.
//! * A thread that finds `EVALUATING` or `SLEPT_ON` of its epoch waits for
//!   the answer, which it reads with Acquire; one that finds an answer of
//!   its epoch takes it. The wait spins and yields a little (a condition
//!   is usually a flag or a counter, answered in far less than a wake-up
//!   costs), then sleeps: under the gate's lock it turns `EVALUATING` into
//!   `SLEPT_ON` with a compare-exchange and sleeps on the gate's condition
//!   variable until the word holds an answer. A slow condition (one that
//!   polls a socket, say) so costs its waiters no CPU.
//!
//! The sleep loses no wake-up: a sleeper looks at the word, marks it and
//! goes to sleep all under the lock (a later sleeper that finds the mark
//! sleeps without marking again), and the evaluator, whose swap saw the
//! mark (a read-modify-write reads the latest word), takes the lock before
//! it wakes the sleepers, so each is either asleep by then or has not yet
//! taken the lock, and will see the answer when it does.
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
//! the compare-exchange: it evaluates and stores the answer with Release
//! (a plain store: nobody can have marked the word for a sleep), and never
//! stores `EVALUATING`. Whatever
//! later lets another thread ask in
//! the frame (a hand-over's queue push, with its release/acquire pair)
//! orders that store before the other's load, so the other finds the
//! answer, never the old word.

use crate::loom::atomic::{AtomicU64, Ordering};
use crate::loom::{Condvar, Mutex};
#[cfg(not(loom))]
use crossbeam_utils::Backoff;

/// Zero: the initial word (epoch 0) never reads as a frame's, since
/// frames are numbered from 1.
const PANICKED: u64 = 0;
const EVALUATING: u64 = 1;
const SLEPT_ON: u64 = 2;
const NO: u64 = 3;
const YES: u64 = 4;

/// Bits of the word that hold the state; the epoch is above them.
const STATE_BITS: u32 = 3;
const STATE_MASK: u64 = (1 << STATE_BITS) - 1;

/// The word for `epoch` and `state`.
fn word(epoch: u64, state: u64) -> u64 {
    epoch << STATE_BITS | state
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
    /// Held by a sleeper from its mark to its sleep, and by the evaluator
    /// before it wakes the sleepers (module docs); guards nothing else.
    sleep_lock: Mutex<()>,
    /// Where askers sleep until the answer (module docs).
    sleepers: Condvar,
}

impl FrameGate {
    pub(crate) fn new() -> Self {
        FrameGate {
            state: AtomicU64::new(0),
            sleep_lock: Mutex::new(()),
            sleepers: Condvar::new(),
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
                debug_assert!(
                    word >> STATE_BITS < epoch,
                    "another thread asked a frame run alone"
                );
                Ok(self.evaluate(epoch, Askers::OnlyThis, evaluate))
            }
        }
    }

    /// Frame `epoch`'s answer if it was worked out already; `None` if not
    /// (then ask with [`answer_unknown`](Self::answer_unknown)). The usual case, for every
    /// node of a set but the first: kept apart so that a caller can keep
    /// the evaluation out of line.
    #[inline]
    pub(crate) fn known(&self, epoch: u64) -> Option<bool> {
        debug_assert!(epoch > 0 && epoch < 1 << (64 - STATE_BITS));
        // Acquire: pairs with the Release store or swap of the answer
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
            // Acquire: pairs with the Release swap or store of the answer
            // (`Publish::drop`; a store if the frame ran alone before a
            // hand-over), so the evaluator's reads and writes happen before
            // ours.
            let word = self.state.load(Ordering::Acquire);
            if word >> STATE_BITS == epoch {
                if let Some(answer) = answer_in(word) {
                    return answer;
                }
                // Another thread is evaluating: wait for its answer. Under
                // loom, straight to the sleep, whose protocol is the one
                // to check.
                #[cfg(not(loom))]
                if !backoff.is_completed() {
                    backoff.snooze();
                    continue;
                }
                return self.sleep_until_answered(epoch);
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
                return Ok(self.evaluate(epoch, Askers::Many, evaluate));
            }
        }
    }

    /// Sleeps until frame `epoch`'s evaluation, under way on another
    /// thread, answers (module docs).
    #[cold]
    fn sleep_until_answered(&self, epoch: u64) -> Result<bool, Panicked> {
        // The lock guards no data, so a poisoned one (a debug assertion
        // below that failed) breaks nothing.
        let mut guard = self.sleep_lock.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            // Acquire: as in `ask`.
            let word = self.state.load(Ordering::Acquire);
            debug_assert_eq!(
                word >> STATE_BITS,
                epoch,
                "a frame ended with a node waiting"
            );
            if let Some(answer) = answer_in(word) {
                return answer;
            }
            if word & STATE_MASK == EVALUATING {
                // Relaxed, both: the mark publishes nothing; the answer is
                // read by the Acquire load above. On failure (the answer
                // came, or another sleeper marked it) the loop loads again.
                if self
                    .state
                    .compare_exchange(
                        word,
                        self::word(epoch, SLEPT_ON),
                        Ordering::Relaxed,
                        Ordering::Relaxed,
                    )
                    .is_err()
                {
                    continue;
                }
            }
            // Marked, under the lock: the evaluator's wake-up comes after
            // this sleep starts (module docs). A spurious wake-up loads
            // again.
            guard = self.sleepers.wait(guard).unwrap_or_else(|e| e.into_inner());
        }
    }

    /// Evaluates frame `epoch`'s answer and publishes it: for the thread
    /// that claimed the evaluation, or the only one asking.
    #[cold]
    #[cfg_attr(target_os = "linux", link_section = "engine_tasks_frame")]
    fn evaluate(&self, epoch: u64, askers: Askers, evaluate: impl FnOnce() -> bool) -> bool {
        let mut publish = Publish {
            gate: self,
            epoch,
            askers,
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
    /// `OnlyThis`: nobody else asks, so nobody sleeps (a store will do).
    askers: Askers,
    answer: u64,
}

impl Drop for Publish<'_> {
    fn drop(&mut self) {
        let gate = self.gate;
        let answer = word(self.epoch, self.answer);
        // Release, both: pairs with the Acquire loads in `known`, `ask`
        // and `sleep_until_answered`.
        if self.askers == Askers::OnlyThis {
            // Nobody else asks: whatever lets other threads in (a
            // hand-over's queue push) orders this store before their
            // loads, and nobody sleeps on the word.
            gate.state.store(answer, Ordering::Release);
            return;
        }
        // A swap, not a store: it reads the latest word, so it sees a
        // sleeper's mark (module docs).
        let old = gate.state.swap(answer, Ordering::Release);
        if old == word(self.epoch, SLEPT_ON) {
            // Taking the lock waits out a sleeper between its mark and its
            // sleep, so the wake-up reaches it.
            let _guard = gate.sleep_lock.lock().unwrap_or_else(|e| e.into_inner());
            gate.sleepers.notify_all();
        }
    }
}

/// The answer a word of the asker's epoch holds; `None` while it is being
/// evaluated.
fn answer_in(word: u64) -> Option<Result<bool, Panicked>> {
    match word & STATE_MASK {
        NO => Some(Ok(false)),
        YES => Some(Ok(true)),
        PANICKED => Some(Err(Panicked)),
        _ => None,
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

    /// Frame 1's evaluation on one thread, which waits (up to a watchdog's
    /// minute) until an asker on another thread marks the word as slept
    /// on, then answers with `evaluate`'s result or panic: the asker's
    /// answer, and whether the mark came. The asker's answer is awaited
    /// for a minute too, so that a lost wake-up fails the test instead of
    /// hanging it.
    fn ask_while_a_slow_evaluation_runs(
        evaluate: impl FnOnce() -> bool + Send + 'static,
    ) -> (Result<bool, Panicked>, bool) {
        use std::sync::atomic::AtomicBool;
        use std::sync::{mpsc, Arc};
        use std::time::{Duration, Instant};
        const WATCHDOG: Duration = Duration::from_secs(60);
        let gate = Arc::new(FrameGate::new());
        let (evaluating_tx, evaluating_rx) = mpsc::channel();
        let marked = Arc::new(AtomicBool::new(false));
        let evaluator = {
            let (gate, marked) = (gate.clone(), marked.clone());
            std::thread::spawn(move || {
                let evaluation = std::panic::AssertUnwindSafe(|| {
                    gate.answer(1, Askers::Many, || {
                        evaluating_tx.send(()).unwrap();
                        let watchdog = Instant::now() + WATCHDOG;
                        while Instant::now() < watchdog {
                            // Relaxed: a poll for the mark; nothing is read
                            // through it.
                            if gate.state.load(Ordering::Relaxed) == word(1, SLEPT_ON) {
                                // Relaxed: read after the join.
                                marked.store(true, std::sync::atomic::Ordering::Relaxed);
                                break;
                            }
                            std::thread::sleep(Duration::from_millis(1));
                        }
                        evaluate()
                    })
                });
                let _ = std::panic::catch_unwind(evaluation);
            })
        };
        evaluating_rx.recv().unwrap();
        let (answer_tx, answer_rx) = mpsc::channel();
        std::thread::spawn(move || {
            let answer = gate.answer(1, Askers::Many, || {
                unreachable!("the other thread evaluates")
            });
            answer_tx.send(answer).unwrap();
        });
        let answer = answer_rx
            .recv_timeout(WATCHDOG * 2)
            .expect("the asker was never woken");
        evaluator.join().unwrap();
        // Relaxed: the join ordered it.
        (answer, marked.load(std::sync::atomic::Ordering::Relaxed))
    }

    #[test]
    fn an_asker_sleeps_through_a_slow_evaluation_and_gets_its_answer() {
        let (answer, marked) = ask_while_a_slow_evaluation_runs(|| true);
        assert!(marked, "the asker never went to sleep");
        assert_eq!(answer, Ok(true));
    }

    #[test]
    fn an_asker_asleep_when_the_evaluation_panics_gets_the_panic() {
        let (answer, marked) = ask_while_a_slow_evaluation_runs(|| panic!("a bad condition"));
        assert!(marked, "the asker never went to sleep");
        assert_eq!(answer, Err(Panicked));
    }
}

#[cfg(all(test, loom))]
mod loom_models {
    use super::*;
    use crate::loom::atomic::AtomicUsize;
    use crate::loom::{thread, Arc};

    /// Two threads ask in the same frame, then in the next: each frame's
    /// condition runs once, both get its answer, and what the evaluator
    /// wrote before answering is visible to the other. Under loom an asker
    /// that finds the evaluation under way goes straight to sleep, so this
    /// also checks that the answer wakes it in every interleaving of its
    /// mark and sleep with the evaluator's swap (no lost wake-up).
    #[test]
    fn one_evaluation_per_frame_and_both_see_it() {
        loom::model(|| {
            let gate = Arc::new(FrameGate::new());
            let evaluations = Arc::new(AtomicUsize::new(0));
            let ask = |gate: &FrameGate, evaluations: &AtomicUsize, epoch: u64| {
                gate.answer(epoch, Askers::Many, || {
                    // Relaxed: published by the gate's Release swap.
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

    /// Three threads ask in one frame: one evaluates, and the other two
    /// may both sleep, the second finding the first's mark and sleeping
    /// without marking again; the answer wakes both. Preemptions bounded
    /// to 2: three threads at 3 take too long for CI.
    #[test]
    fn every_sleeper_is_woken_by_the_answer() {
        let mut builder = loom::model::Builder::new();
        builder.preemption_bound = Some(2);
        builder.check(|| {
            let gate = Arc::new(FrameGate::new());
            let evaluations = Arc::new(AtomicUsize::new(0));
            let ask = |gate: &FrameGate, evaluations: &AtomicUsize| {
                gate.answer(1, Askers::Many, || {
                    // Relaxed: published by the gate's Release swap.
                    evaluations.fetch_add(1, Ordering::Relaxed);
                    true
                })
                .expect("the evaluation does not panic")
            };
            let others: Vec<_> = (0..2)
                .map(|_| {
                    let (gate, evaluations) = (gate.clone(), evaluations.clone());
                    thread::spawn(move || ask(&gate, &evaluations))
                })
                .collect();
            assert!(ask(&gate, &evaluations));
            for other in others {
                assert!(other.join().unwrap());
            }
            // Relaxed: the joins ordered it.
            assert_eq!(evaluations.load(Ordering::Relaxed), 1);
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

//! Unit tests of the frame policy (when frames are shared, and how long
//! threads linger), and of what an early-woken worker warms: the code
//! spans, the data spans and the code sections.

use super::alone::HAND_OVER_MARGIN;
use super::policy::{
    linger_ticks, SharingTrial, Worth, CLEARLY_TRIAL_EVERY, ESTIMATE_SETTLED_EVERY, HELD_MARGIN,
    TRIAL_EVERY,
};
use super::ShareThreshold;
use crate::graph::TaskGraphBuilder;
use crate::{FrameSharing, Lane, Planning, Pool, ReadyOrder, TaskGraph};
use std::time::{Duration, Instant};

/// Whether the next frame is shared follows the times of the nodes that
/// ran: not the frame's wall time (which held a panicking node's 50 ms
/// here), also after the first frame, and not a panicked node's time.
#[test]
fn a_light_frame_after_a_slow_panic_runs_alone() {
    let pool = Pool::builder().threads(1).build().unwrap();
    let mut b = TaskGraph::<()>::builder();
    // Far above the light frames, so that a preempted one stays alone.
    b.share_above(Duration::from_millis(10), Duration::ZERO);
    b.node("slow_panic", Lane::FrameCritical, |cx| {
        if cx.frame() == 0 {
            std::thread::sleep(Duration::from_millis(50));
            panic!("the first frame panics after 50 ms");
        }
    });
    b.node("after", Lane::FrameCritical, |_| {})
        .after(["slow_panic"]);
    let mut graph = b.build().unwrap();
    assert!(graph.run(&pool, &()).is_err());
    for _ in 0..3 {
        let stats = graph.run(&pool, &()).unwrap();
        assert_eq!(stats.sharing(), FrameSharing::Alone);
    }
}

/// With zero thresholds every frame is shared (queued, or planned), the
/// first one handed over after its second node; a shared frame is
/// announced to idle threads (they wait in it before parking) only
/// while it runs, also when a node panics.
#[test]
fn shared_frames_are_announced_only_while_they_run() {
    let pool = Pool::builder().threads(1).build().unwrap();
    let handle = pool.handle();
    for planning in [Planning::Off, Planning::Allowed] {
        let mut b = TaskGraph::<()>::builder();
        b.share_above(Duration::ZERO, Duration::ZERO)
            .planning(planning);
        b.node("a", Lane::FrameCritical, |_| {});
        b.node("b", Lane::FrameCritical, |cx| {
            assert!(cx.frame() != 2, "a node panics in frame 2");
        })
        .after(["a"]);
        b.node("c", Lane::FrameCritical, |_| {}).after(["a"]);
        let mut graph = b.build().unwrap();
        for frame in 0..5 {
            let sharing = match graph.run(&handle, &()) {
                Ok(stats) => stats.sharing(),
                Err(error) => {
                    assert_eq!(frame, 2, "{error}");
                    graph.last_frame().sharing()
                }
            };
            let expected = match (frame, planning) {
                (0, _) => FrameSharing::HandedOver,
                (_, Planning::Off) => FrameSharing::Shared,
                (_, Planning::Allowed) => FrameSharing::Planned,
            };
            assert_eq!(sharing, expected, "frame {frame}");
            assert!(!handle.shared().in_shared_frame(), "frame {frame}");
        }
    }
}

#[test]
fn only_frames_of_enough_work_in_heavy_enough_nodes_wake_a_thread() {
    let worth_a_second_thread =
        |nanos, nodes| ShareThreshold::default().worth_a_second_thread(nanos, nodes);
    // 256 nodes of 1 µs.
    assert!(worth_a_second_thread(256_000.0, 256));
    // 256 empty nodes: 42 ns each on one thread, about 140 ns each when
    // a worker took part (the frame that used to keep waking it).
    assert!(!worth_a_second_thread(10_800.0, 256));
    assert!(!worth_a_second_thread(36_000.0, 256));
    // A few heavy nodes, and too little work in all.
    assert!(worth_a_second_thread(50_000.0, 10));
    assert!(!worth_a_second_thread(19_000.0, 10));
    assert!(!worth_a_second_thread(0.0, 0));
}

#[test]
fn zero_thresholds_share_every_frame_and_max_ones_none() {
    let always = ShareThreshold::new(Duration::ZERO, Duration::ZERO);
    assert!(always.worth_a_second_thread(0.0, 0));
    assert!(always.worth_a_second_thread(0.0, 256));
    let never = ShareThreshold::new(Duration::MAX, Duration::ZERO);
    assert!(!never.worth_a_second_thread(1e18, 1));
    let never = ShareThreshold::new(Duration::ZERO, Duration::MAX);
    assert!(!never.worth_a_second_thread(1e18, 1));
}

#[test]
fn threads_linger_only_for_short_gaps_between_frames() {
    // 1 tick = 1 ns here.
    assert_eq!(linger_ticks(3_000.0, 1.0), 20_000, "a short gap");
    assert_eq!(linger_ticks(15_000.0, 1.0), 20_000, "a longer one");
    assert_eq!(
        linger_ticks(20_000.0, 1.0),
        0,
        "no lingering from the limit on"
    );
    assert_eq!(
        linger_ticks(16_000_000.0, 1.0),
        0,
        "a 60 Hz loop parks at once"
    );
    // 3 ticks per ns: the limit scales with the tick rate.
    assert_eq!(linger_ticks(30_000.0, 1.0 / 3.0), 60_000);
    assert_eq!(linger_ticks(60_000.0, 1.0 / 3.0), 0);
}

/// Frames run as a [`SharingTrial`] decides, from the graph's first frame
/// (alone), each taking a given wall time by how it starts.
struct TrialFrames {
    trial: SharingTrial,
    shares: bool,
}

impl TrialFrames {
    fn new() -> Self {
        TrialFrames {
            trial: SharingTrial::default(),
            shares: false,
        }
    }

    /// Runs `frames` frames the threshold finds `worth`, those that start
    /// alone taking `alone_nanos` and shared ones `shared_nanos`; returns
    /// whether each was shared.
    fn run(&mut self, frames: u32, worth: Worth, alone_nanos: f64, shared_nanos: f64) -> Vec<bool> {
        (0..frames)
            .map(|_| {
                let ran_shared = self.shares;
                let (sharing, wall) = if ran_shared {
                    (FrameSharing::Planned, shared_nanos)
                } else {
                    (FrameSharing::Alone, alone_nanos)
                };
                self.shares = self.trial.next_shares(worth, sharing, wall);
                ran_shared
            })
            .collect()
    }
}

/// How many frames of each run of `TRIAL_EVERY` ran shared. Trials come
/// every `TRIAL_EVERY` frames, so each run holds exactly one.
fn shared_per_round(shared: &[bool]) -> Vec<usize> {
    shared
        .chunks(TRIAL_EVERY as usize)
        .map(|round| round.iter().filter(|&&s| s).count())
        .collect()
}

/// Frames the threshold barely finds worth a second thread, but which are
/// slower shared (70 µs) than alone (45 µs): shared until the first trial,
/// then alone but for one shared trial in every `TRIAL_EVERY` frames.
#[test]
fn a_trial_alone_that_wins_holds_frames_alone() {
    let mut frames = TrialFrames::new();
    let first = frames.run(TRIAL_EVERY, Worth::Barely, 45e3, 70e3);
    assert_eq!(
        first.iter().filter(|&&s| s).count(),
        63,
        "shared until the trial"
    );
    // The trial alone won: the first shared trial comes a round later.
    let later = frames.run(TRIAL_EVERY * 8, Worth::Barely, 45e3, 70e3);
    assert_eq!(shared_per_round(&later), [0, 1, 1, 1, 1, 1, 1, 1]);
}

/// Where shared frames are faster, each trial alone loses; when the graph
/// gets faster alone, the next trial holds its frames alone, and when its
/// work grows (its frames that start alone hand over, and take longer), a
/// shared trial lets go.
#[test]
fn trials_follow_whichever_way_is_faster() {
    let round = TRIAL_EVERY as usize;
    let mut frames = TrialFrames::new();
    frames.run(TRIAL_EVERY * 2, Worth::Barely, 90e3, 60e3);
    let shared = frames.run(TRIAL_EVERY * 4, Worth::Barely, 90e3, 60e3);
    assert_eq!(shared_per_round(&shared), [round - 1; 4]);
    frames.run(TRIAL_EVERY * 2, Worth::Barely, 30e3, 60e3);
    let shared = frames.run(TRIAL_EVERY * 4, Worth::Barely, 30e3, 60e3);
    assert_eq!(shared_per_round(&shared), [1; 4]);
    frames.run(TRIAL_EVERY * 2, Worth::Barely, 120e3, 60e3);
    let shared = frames.run(TRIAL_EVERY * 4, Worth::Barely, 120e3, 60e3);
    assert_eq!(shared_per_round(&shared), [round - 1; 4]);
}

/// How frames that start alone may hand over: trials alone of nodes near
/// the threshold not at all, frames held alone at `HELD_MARGIN` times the
/// usual margin, and the rest (trials of heavy nodes among them) at the
/// usual one.
#[test]
fn a_trial_alone_hands_over_only_where_nodes_are_heavy() {
    let usual = Some(HAND_OVER_MARGIN);
    let mut frames = TrialFrames::new();
    assert_eq!(frames.trial.hand_over_margin(), usual, "the first frame");
    frames.run(TRIAL_EVERY, Worth::Barely, 45e3, 70e3);
    assert!(!frames.shares, "a trial alone");
    assert_eq!(frames.trial.hand_over_margin(), None);
    assert_eq!(frames.run(1, Worth::Barely, 45e3, 70e3), [false]);
    assert!(!frames.shares, "held alone");
    assert_eq!(
        frames.trial.hand_over_margin(),
        Some(HAND_OVER_MARGIN * HELD_MARGIN)
    );
    // Heavy nodes: held frames hand over at the usual margin; so would
    // they if they were not held.
    frames.run(1, Worth::Clearly, 45e3, 70e3);
    assert!(!frames.shares, "still held");
    assert_eq!(frames.trial.hand_over_margin(), usual);
    // Light nodes: alone, at the usual margin.
    frames.run(1, Worth::Not, 45e3, 70e3);
    assert_eq!(frames.trial.hand_over_margin(), usual);

    // Heavy nodes, shared faster: a trial alone every `CLEARLY_TRIAL_EVERY`
    // frames hands over at the usual margin, and loses.
    let mut frames = TrialFrames::new();
    frames.run(CLEARLY_TRIAL_EVERY, Worth::Clearly, 300e3, 150e3);
    assert!(!frames.shares, "a trial alone");
    assert_eq!(frames.trial.hand_over_margin(), usual);
    let shared = frames.run(CLEARLY_TRIAL_EVERY * 3, Worth::Clearly, 300e3, 150e3);
    let alone: Vec<usize> = (0..shared.len()).filter(|&i| !shared[i]).collect();
    let every = CLEARLY_TRIAL_EVERY as usize;
    assert_eq!(alone, [0, every, 2 * every], "the trials alone");
}

/// Frames not worth a second thread run alone and pause the count to the
/// next trial: a graph whose verdict keeps flipping still gets its trials.
#[test]
fn frames_not_worth_sharing_run_alone_and_pause_the_count() {
    let mut frames = TrialFrames::new();
    frames.run(TRIAL_EVERY - 1, Worth::Barely, 90e3, 60e3);
    let alone = frames.run(TRIAL_EVERY * 2, Worth::Not, 10e3, 60e3);
    assert!(
        alone[1..].iter().all(|&s| !s),
        "alone from the second frame"
    );
    let shared = frames.run(TRIAL_EVERY, Worth::Barely, 90e3, 60e3);
    assert!(
        !shared[0],
        "the first follows a frame that was not worth it"
    );
    assert!(!shared[1], "the trial alone, due after the paused count");
    assert!(shared[2..].iter().all(|&s| s), "it lost");
}

/// A threshold set with `share_above` hands over at the usual margin,
/// whatever a trial under the default left (a rebuild keeps the trial's
/// state unless the threshold changes).
#[test]
fn a_threshold_that_was_set_ignores_the_trials() {
    let mut frames = TrialFrames::new();
    frames.run(TRIAL_EVERY, Worth::Barely, 45e3, 70e3);
    assert_eq!(
        frames.trial.hand_over_margin(),
        None,
        "a trial alone is due"
    );
    let default = ShareThreshold::default();
    assert_eq!(default.hand_over_margin(&frames.trial), None);
    let set = ShareThreshold::new(Duration::from_micros(20), Duration::from_nanos(200));
    assert_ne!(set, default, "set, though to the same values");
    assert_eq!(set.hand_over_margin(&frames.trial), Some(HAND_OVER_MARGIN));
}

/// One frame stalled by the machine counts as twice the average at most,
/// so it does not turn a trial: shared frames stay faster (60 against
/// 90 µs alone) after one of 5 ms.
#[test]
fn one_stalled_frame_does_not_decide_a_trial() {
    let round = TRIAL_EVERY as usize;
    let mut frames = TrialFrames::new();
    // Trials alone are the frames after each `TRIAL_EVERY`: two rounds,
    // then a trial, the shared frames of the round, and the stall last.
    frames.run(TRIAL_EVERY * 2, Worth::Barely, 90e3, 60e3);
    assert_eq!(frames.run(1, Worth::Barely, 90e3, 60e3), [false]);
    let before = frames.run(TRIAL_EVERY - 2, Worth::Barely, 90e3, 60e3);
    assert!(before.iter().all(|&s| s));
    assert_eq!(frames.run(1, Worth::Barely, 90e3, 5e6), [true]);
    let shared = frames.run(TRIAL_EVERY * 4, Worth::Barely, 90e3, 60e3);
    assert!(!shared[0], "the trial alone");
    assert_eq!(shared_per_round(&shared), [round - 1; 4], "it lost");
}

/// Spins (not sleeps) for `time`, so that a node's run takes it.
fn spin_for(time: Duration) {
    let start = std::time::Instant::now();
    while start.elapsed() < time {
        std::hint::spin_loop();
    }
}

/// A builder of `nodes` empty nodes in a chain, alone below `frame` (a
/// frame threshold of `share_above`), with node 1 spinning for `heavy`
/// once `heavy_from` frames have run.
fn chain_builder(
    nodes: usize,
    frame: Duration,
    heavy: Duration,
    heavy_from: u64,
) -> TaskGraphBuilder<()> {
    let mut b = TaskGraph::<()>::builder();
    b.share_above(frame, Duration::ZERO);
    let names: Vec<String> = (0..nodes).map(|i| format!("n{i}")).collect();
    for (i, name) in names.iter().enumerate() {
        let node = b.node(name.clone(), Lane::FrameCritical, move |cx| {
            if i == 1 && cx.frame() >= heavy_from {
                spin_for(heavy);
            }
        });
        if i > 0 {
            node.after([names[i - 1].clone()]);
        }
    }
    b
}

/// [`chain_builder`]'s graph.
fn chain(nodes: usize, frame: Duration, heavy: Duration, heavy_from: u64) -> TaskGraph<()> {
    chain_builder(nodes, frame, heavy, heavy_from)
        .build()
        .unwrap()
}

/// Whether a frame whose verdict was clear unless it is `unclear` (the
/// last unclear frame) updates the estimates, the last update having been
/// at `last`: the rule of `Runtime::estimates_due`, written out.
fn settled_due(frame: u64, last: Option<u64>, unclear: Option<u64>) -> bool {
    unclear == Some(frame)
        || unclear.is_some_and(|at| frame <= at + ESTIMATE_SETTLED_EVERY)
        || last.is_none_or(|last| frame >= last + ESTIMATE_SETTLED_EVERY)
}

/// Frames clearly too light to share update the node estimates one frame
/// in `ESTIMATE_SETTLED_EVERY`, the first frame and the first after a
/// rebuild included, and at once after a frame whose batch of light nodes
/// ran heavy (here only if the thread was interrupted in one).
#[test]
fn clearly_alone_frames_update_the_estimates_one_frame_in_a_few() {
    let pool = Pool::builder().threads(0).build().unwrap();
    let mut graph = chain(4, Duration::from_secs(1), Duration::ZERO, u64::MAX);
    // Light under a bound a batch of empty nodes reaches only if its
    // thread was held up for hundreds of µs: the default (250 ns a node)
    // is within reach of an unoptimised build's empty nodes on a 2 GHz
    // machine, and a batch over it makes its frame unclear.
    let bound = (50_000.0 / graph.runtime.rate.nanos_per_tick()) as u64;
    let (mut last, mut unclear, mut skipped) = (None, None, 0);
    for frame in 0..3 * ESTIMATE_SETTLED_EVERY {
        if frame > 0 {
            graph.runtime.plan.set_light_below(bound);
        }
        let stats = graph.run(&pool, &()).unwrap();
        assert_eq!(stats.sharing(), FrameSharing::Alone);
        let ran_heavy = graph.runtime.plan.light_ran_heavy();
        if ran_heavy {
            unclear = Some(frame);
        }
        let due = settled_due(frame, last, unclear);
        let updated = graph.runtime.estimated_after == Some(frame);
        assert_eq!(updated, due, "frame {frame}");
        // Priorities are re-sorted only in a frame that was not clearly
        // alone: here one whose batch ran heavy.
        let resorted = graph.runtime.reprioritized_after == Some(frame);
        assert!(!resorted || ran_heavy, "frame {frame} re-sorted");
        if due {
            last = Some(frame);
        } else {
            skipped += 1;
        }
    }
    assert!(
        skipped >= ESTIMATE_SETTLED_EVERY,
        "{skipped} frames skipped"
    );
    assert!(
        graph.runtime.estimate.iter().all(|&e| e > 0),
        "every node was estimated"
    );
    assert_eq!(graph.runtime.order, ReadyOrder::CriticalPathFirst);
    // A rebuild (same names: the estimates carry over) updates them at
    // its first frame.
    let mut b = TaskGraph::<()>::builder();
    b.share_above(Duration::from_secs(1), Duration::ZERO);
    b.node("n0", Lane::FrameCritical, |_| {});
    b.node("n9", Lane::FrameCritical, |_| {}).after(["n0"]);
    b.build_into(&mut graph).unwrap();
    assert_eq!(graph.runtime.estimated_after, None);
    graph.run(&pool, &()).unwrap();
    assert_eq!(
        graph.runtime.estimated_after,
        Some(3 * ESTIMATE_SETTLED_EVERY)
    );
}

/// A frame run alone that is not clearly light (a quarter of the frame
/// threshold or more) updates the estimates at once, every frame, so a
/// graph that grows is shared no later than before.
#[test]
fn frames_near_the_threshold_update_the_estimates_every_frame() {
    let pool = Pool::builder().threads(0).build().unwrap();
    // 2 ms a frame from frame 2: alone (under 4 ms), but over a quarter of
    // it, so not clearly alone. (Frame 2 also finds node 1's batch heavy.)
    let mut graph = chain(4, Duration::from_millis(4), Duration::from_millis(2), 2);
    for frame in 0..2 + ESTIMATE_SETTLED_EVERY {
        graph.run(&pool, &()).unwrap();
        if frame >= 2 {
            assert_eq!(graph.runtime.estimated_after, Some(frame), "frame {frame}");
        }
    }
    // Re-sorted at the first frame that was not clearly alone, as due (by
    // frame 2; earlier if a batch of frame 1 was held up).
    let resorted = graph.runtime.reprioritized_after;
    assert!(
        resorted.is_some_and(|at| at <= 2),
        "re-sorted after {resorted:?}"
    );
}

/// In frames clearly alone, a batch of light nodes that ran heavy (one of
/// them turned heavy) updates the estimates at once, so the node is no
/// longer light, and timed alone, from the next frame; a batch that ran
/// light waits for its turn.
#[test]
#[cfg_attr(
    miri,
    ignore = "timing policy: under Miri the clock counts interpreted steps"
)]
fn a_light_node_that_turns_heavy_updates_the_estimates_at_once() {
    let pool = Pool::builder().threads(0).build().unwrap();
    let heavy_from = ESTIMATE_SETTLED_EVERY + 4;
    let mut graph = chain(8, Duration::MAX, Duration::from_millis(2), heavy_from);
    // Every node light, under a bound a batch of empty nodes reaches only
    // if its thread was held up for hundreds of µs, and a batch holding
    // the 2 ms node always does.
    let bound = (50_000.0 / graph.runtime.rate.nanos_per_tick()) as u64;
    let (mut last, mut unclear, mut waited) = (None, None, 0);
    for frame in 0..=heavy_from {
        if frame > 0 {
            graph.runtime.plan.light_mut().fill(true);
            graph.runtime.plan.set_light_below(bound);
        }
        graph.run(&pool, &()).unwrap();
        let ran_heavy = graph.runtime.plan.light_ran_heavy();
        if ran_heavy {
            unclear = Some(frame);
        }
        let due = settled_due(frame, last, unclear);
        let updated = graph.runtime.estimated_after == Some(frame);
        assert_eq!(
            updated, due,
            "frame {frame} (a batch ran heavy: {ran_heavy})"
        );
        if due {
            last = Some(frame);
        } else {
            waited += 1;
        }
    }
    assert!(
        graph.runtime.plan.light_ran_heavy(),
        "the 2 ms node's batch ran heavy"
    );
    assert!(!graph.runtime.plan.light_mut()[1], "node 1 is heavy after");
    assert!(waited > 0, "no light frame waited for its turn");
}

/// Planned frames whose estimated work, and measured work (the walkers'
/// summed node times), would be worth a second thread at a quarter of it
/// update the
/// estimates one frame in `ESTIMATE_SETTLED_EVERY`; a frame handed over,
/// or queued, updates them at once.
#[test]
fn clearly_shared_frames_update_the_estimates_one_frame_in_a_few() {
    let pool = Pool::builder().threads(1).build().unwrap();
    for planning in [Planning::Off, Planning::Allowed] {
        let mut b = chain_builder(4, Duration::ZERO, Duration::ZERO, u64::MAX);
        b.planning(planning);
        let mut graph = b.build().unwrap();
        let (mut last, mut unclear, mut skipped, mut planned) = (None, None, 0, 0);
        for frame in 0..3 * ESTIMATE_SETTLED_EVERY {
            let sharing = graph.run(&pool, &()).unwrap().sharing();
            assert_ne!(sharing, FrameSharing::Alone, "frame {frame}");
            planned += usize::from(sharing == FrameSharing::Planned);
            if sharing != FrameSharing::Planned {
                unclear = Some(frame);
            }
            let due = settled_due(frame, last, unclear);
            let updated = graph.runtime.estimated_after == Some(frame);
            assert_eq!(updated, due, "frame {frame} ({sharing:?}, {planning:?})");
            if due {
                last = Some(frame);
            } else {
                skipped += 1;
            }
        }
        let plan = planning == Planning::Allowed;
        assert_eq!(planned > 0, plan, "{planned} frames planned");
        if plan {
            assert!(
                skipped >= ESTIMATE_SETTLED_EVERY,
                "{skipped} frames skipped"
            );
        }
    }
}

/// A shared frame whose estimated work would not be worth a second thread
/// at a quarter of it updates the estimates every frame, so a graph that
/// turns lighter runs alone as soon as before.
#[test]
#[cfg_attr(
    miri,
    ignore = "timing policy: under Miri the clock counts interpreted steps"
)]
fn shared_frames_near_the_threshold_update_the_estimates_every_frame() {
    let pool = Pool::builder().threads(1).build().unwrap();
    // Four nodes of 200 µs: 800 µs of work, shared above 700 µs but not
    // clearly: that takes estimates of 2.8 ms, which only a node held up
    // by the machine for milliseconds gives (such frames are left out).
    let threshold = Duration::from_micros(700);
    let mut b = TaskGraph::<()>::builder();
    b.share_above(threshold, Duration::ZERO);
    for name in ["a", "b", "c", "d"] {
        b.node(name, Lane::FrameCritical, |_| {
            spin_for(Duration::from_micros(200))
        });
    }
    let mut graph = b.build().unwrap();
    let mut checked = 0;
    for frame in 0..5 * ESTIMATE_SETTLED_EVERY {
        let work = graph.runtime.estimate_total as f64 * graph.runtime.rate.nanos_per_tick();
        let sharing = graph.run(&pool, &()).unwrap().sharing();
        let shared = matches!(sharing, FrameSharing::Shared | FrameSharing::Planned);
        if !shared || work >= 4.0 * threshold.as_nanos() as f64 {
            continue;
        }
        checked += 1;
        assert_eq!(
            graph.runtime.estimated_after,
            Some(frame),
            "frame {frame} ({sharing:?})"
        );
    }
    // Frames that follow a held-up one are clearly shared until the
    // estimates come down: on a busy machine, most of them.
    assert!(checked >= 4, "{checked} frames checked");
}

/// In a planned frame the helpers mark the pool slots that ran its nodes
/// (for the early wake-ups), the same slots the run records name.
#[test]
fn the_helpers_of_a_planned_frame_mark_the_slots_that_ran_its_nodes() {
    let pool = Pool::builder().threads(1).build().unwrap();
    let mut b = TaskGraph::<()>::builder();
    b.share_above(Duration::ZERO, Duration::ZERO);
    // 800 µs a frame: long enough for a parked worker to wake and help.
    for i in 0..16 {
        b.node(format!("n{i}"), Lane::FrameCritical, |_| {
            spin_for(Duration::from_micros(50))
        });
    }
    let mut graph = b.build().unwrap();
    let (mut planned, mut helped) = (0, 0);
    for _ in 0..30 {
        if graph.run(&pool, &()).unwrap().sharing() != FrameSharing::Planned {
            continue;
        }
        planned += 1;
        let runtime = &mut graph.runtime;
        let frame_slot = super::bit_of(runtime.frame_slot);
        let marked = *runtime.shared_mut().helper_slots.get_mut();
        let ran = runtime.stats.slots_that_ran();
        assert_eq!(marked & !frame_slot, ran & !frame_slot);
        helped += usize::from(ran & !frame_slot != 0);
    }
    assert!(
        planned > 0 && helped > 0,
        "{planned} planned, {helped} helped"
    );
}

/// A graph clearly worth sharing whose nodes turn empty runs alone again
/// within the frames its estimates take to come down, updated every frame:
/// its planned frames' measured work is no longer clearly above the
/// threshold, so they are not clear.
#[test]
#[cfg_attr(
    miri,
    ignore = "timing policy: under Miri the clock counts interpreted steps"
)]
fn a_shared_graph_that_turns_light_runs_alone_again_soon() {
    // On pools of one and of three workers: the frame's measured work, not
    // its threads, decides.
    for workers in [1, 3] {
        let pool = Pool::builder().threads(workers).build().unwrap();
        let light_from = 2 * ESTIMATE_SETTLED_EVERY;
        let mut b = TaskGraph::<()>::builder();
        // 1.6 ms of work, shared above 200 µs: clearly, while it lasts.
        b.share_above(Duration::from_micros(200), Duration::ZERO);
        for name in ["a", "b", "c", "d"] {
            b.node(name, Lane::FrameCritical, move |cx| {
                if cx.frame() < light_from {
                    spin_for(Duration::from_micros(400));
                }
            });
        }
        let mut graph = b.build().unwrap();
        let mut clear = 0;
        for _ in 0..light_from {
            let sharing = graph.run(&pool, &()).unwrap().sharing();
            clear += usize::from(sharing == FrameSharing::Planned);
        }
        assert!(
            clear > 0,
            "no planned frame while heavy ({workers} workers)"
        );
        // From 1.6 ms to under 200 µs at a quarter a frame: 8 frames, then
        // one to act on it; a few more for a frame held up on a busy
        // machine.
        let alone_after = (light_from..light_from + 24)
            .find(|_| graph.run(&pool, &()).unwrap().sharing() == FrameSharing::Alone)
            .map(|frame| frame - light_from);
        assert!(
            alone_after.is_some_and(|after| after <= 12),
            "alone again after {alone_after:?} frames ({workers} workers)"
        );
    }
}

/// A chain of 64 nodes, node `i` running `body(i, data)`, shared above
/// 500 µs of work in nodes of 20 µs on average.
fn chain_of_64<C: Sync + 'static>(body: fn(usize, &C)) -> TaskGraph<C> {
    let mut b = TaskGraph::<C>::builder();
    b.share_above(Duration::from_micros(500), Duration::from_micros(20));
    let names: Vec<String> = (0..64).map(|i| format!("n{i}")).collect();
    for (i, name) in names.iter().enumerate() {
        let node = b.node(name.clone(), Lane::FrameCritical, move |cx| {
            body(i, cx.data())
        });
        if i > 0 {
            node.after([names[i - 1].clone()]);
        }
    }
    b.build().unwrap()
}

/// A frame run alone that is held up once (here one node sleeps 3 ms, as
/// a preempted thread would) runs on alone: the nodes after it run fast,
/// so the rule does not hand the rest over, and its times do not go into
/// the estimates (a second such frame in a row's do). A frame whose nodes
/// all turn slow is handed over.
///
/// A preemption of the test's own thread in the middle of a frame looks
/// like a hold-up or like slow nodes too, so one on a loaded machine can
/// make a frame go the other way: up to three tries of the whole story,
/// each on a new pool and graph.
#[test]
#[cfg_attr(
    miri,
    ignore = "timing policy: under Miri the clock counts interpreted steps"
)]
fn a_frame_held_up_once_runs_on_alone() {
    let mut failures = Vec::new();
    for _ in 0..3 {
        match held_up_once_then_slow() {
            Ok(()) => return,
            Err(failure) => failures.push(failure),
        }
    }
    panic!("three tries failed: {failures:?}");
}

/// The story of [`a_frame_held_up_once_runs_on_alone`]; the first step
/// that went otherwise, if any.
fn held_up_once_then_slow() -> Result<(), &'static str> {
    use std::sync::atomic::{AtomicU8, Ordering::Relaxed};
    const LIGHT: u8 = 0;
    const HELD_UP: u8 = 1;
    const SLOW: u8 = 2;
    let check = |ok: bool, step: &'static str| if ok { Ok(()) } else { Err(step) };
    let pool = Pool::builder().threads(1).build().unwrap();
    // 64 empty nodes are far below the threshold; 54 of 100 µs far above.
    let mut graph = chain_of_64(|i, mode: &AtomicU8| {
        // Relaxed: set between frames; the frame's start publishes it.
        match mode.load(Relaxed) {
            HELD_UP if i == 10 => std::thread::sleep(Duration::from_millis(3)),
            SLOW if i >= 10 => spin_for(Duration::from_micros(100)),
            _ => {}
        }
    });
    let mode = AtomicU8::new(LIGHT);
    let run_light_until_alone = |graph: &mut TaskGraph<AtomicU8>| {
        // Relaxed, these stores: between frames (as above).
        mode.store(LIGHT, Relaxed);
        for _ in 0..200 {
            if graph.run(&pool, &mode).unwrap().sharing() == FrameSharing::Alone
                && !graph.runtime.waking
                && !graph.runtime.plan.held_up()
            {
                return Ok(());
            }
        }
        Err("light frames kept sharing")
    };
    run_light_until_alone(&mut graph)?;
    mode.store(HELD_UP, Relaxed);
    let held_up = graph.runtime.frames;
    let total = graph.runtime.estimate_total;
    let sharing = graph.run(&pool, &mode).unwrap().sharing();
    check(
        sharing == FrameSharing::Alone,
        "the frame held up once shared",
    )?;
    check(
        graph.runtime.plan.held_up(),
        "the first frame was not held up",
    )?;
    // Its times teach the estimates nothing.
    check(
        graph.runtime.estimated_after != Some(held_up) && graph.runtime.estimate_total == total,
        "the frame held up once taught the estimates",
    )?;
    // Held up twice in a row, the node is slow: its times count.
    graph.run(&pool, &mode).unwrap();
    check(
        graph.runtime.plan.held_up(),
        "the second frame was not held up",
    )?;
    check(
        graph.runtime.estimated_after == Some(held_up + 1) && graph.runtime.estimate_total > total,
        "the second frame held up taught the estimates nothing",
    )?;
    run_light_until_alone(&mut graph)?;
    mode.store(SLOW, Relaxed);
    let sharing = graph.run(&pool, &mode).unwrap().sharing();
    check(
        sharing == FrameSharing::HandedOver,
        "the frame that turned slow was not handed over",
    )
}

/// Work that holds up every other frame run alone is work, not a stall:
/// only the first such frame is left out of the estimates.
#[test]
#[cfg_attr(
    miri,
    ignore = "timing policy: under Miri the clock counts interpreted steps"
)]
fn a_frame_held_up_every_other_frame_counts() {
    use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
    let pool = Pool::builder().threads(1).build().unwrap();
    let mut graph = chain_of_64(|i, heavy: &AtomicBool| {
        // Relaxed: set between frames; the frame's start publishes it.
        if i == 10 && heavy.load(Relaxed) {
            std::thread::sleep(Duration::from_millis(3));
        }
    });
    let heavy = AtomicBool::new(false);
    for _ in 0..20 {
        graph.run(&pool, &heavy).unwrap();
    }
    let before = graph.runtime.estimate_total;
    let mut left_out = 0;
    for k in 0..6 {
        // Relaxed: between frames (as above).
        heavy.store(k % 2 == 0, Relaxed);
        let frame = graph.runtime.frames;
        let sharing = graph.run(&pool, &heavy).unwrap().sharing();
        if k % 2 == 0 && sharing == FrameSharing::Alone && graph.runtime.plan.held_up() {
            left_out += usize::from(graph.runtime.estimated_after != Some(frame));
        }
    }
    assert!(left_out <= 1, "{left_out} held-up frames left out");
    // The 3 ms counted: more than 300 µs more in all, after the decay of
    // the light frames between.
    let ticks_300_us = (300_000.0 / graph.runtime.rate.nanos_per_tick()) as u64;
    assert!(graph.runtime.estimate_total > before + ticks_300_us);
}

/// The code spans a graph publishes for the early-woken workers to warm:
/// on Linux the two sections of the engine's frame code, the shared
/// frames' first; elsewhere spans worked out from its real anchors, each
/// starting at an anchor's line, the lowest anchor in the first span, and
/// the spans in the line budget (`sync/prefetch.rs`).
#[test]
#[cfg_attr(
    miri,
    ignore = "no linker sections, and a function may have several addresses: the code spans move"
)]
fn a_graphs_code_spans_are_its_sections_or_start_at_its_anchors() {
    use crate::sync::prefetch::{CodeSection, Span, LINE_BYTES, MAX_LINES};
    let spans = super::Runtime::code_spans();
    // The same spans every time: the graph publishes them every frame.
    assert_eq!(spans, super::Runtime::code_spans());
    if cfg!(target_os = "linux") {
        let sections = [CodeSection::Shared.span(), CodeSection::Frame.span()];
        assert_eq!(spans[..2], sections);
        assert!(spans[2..].iter().all(|span| *span == Span::default()));
        // What a shared frame runs, on either thread, is in them.
        let covered = |f: usize| {
            spans
                .iter()
                .any(|s| (s.start..s.start + s.lines * LINE_BYTES).contains(&f))
        };
        for (name, f) in [
            ("run_frame", super::Runtime::run_frame as *const () as usize),
            ("walk_plan", super::Shared::walk_plan as *const () as usize),
            ("run_helper", super::frame::run_helper as *const () as usize),
            ("run_node", super::frame::run_node as *const () as usize),
            (
                "wait_frame",
                crate::pool::worker::Local::wait_frame as *const () as usize,
            ),
        ] {
            assert!(covered(f), "{name} lies outside {spans:?}");
        }
        assert!(spans.iter().map(|s| s.lines).sum::<usize>() <= MAX_LINES);
        return;
    }
    let anchors = super::Runtime::code_anchors();
    let lowest = *anchors.iter().min().unwrap();
    assert!(spans[0].start <= lowest && lowest < spans[0].start + spans[0].lines * LINE_BYTES);
    for span in spans.iter().filter(|s| s.lines > 0) {
        assert!(
            anchors.iter().any(|a| a - a % LINE_BYTES == span.start),
            "a span starts off every anchor: {span:?}"
        );
    }
    assert!(spans.iter().map(|s| s.lines).sum::<usize>() <= MAX_LINES);
}

/// On Linux the functions a frame runs from its entry to its return lie
/// in the frame's code section, which a frame after a gap warms whole
/// (`sync/prefetch.rs`); the planned walk, which frames run alone never
/// reach, lies in the section of frames that share.
#[test]
#[cfg(all(target_os = "linux", not(miri)))]
fn a_frames_code_lies_in_the_section_of_its_kind() {
    use crate::graph::stats::FrameStats;
    use crate::sync::prefetch::{CodeSection, LINE_BYTES};
    let code = CodeSection::Frame.span();
    let section = code.start..code.start + code.lines * LINE_BYTES;
    let placed = [
        super::Runtime::run_frame as *const () as usize,
        super::Runtime::run_nodes_in as *const () as usize,
        super::Shared::run_alone as *const () as usize,
        super::Shared::run_body as *const () as usize,
        FrameStats::reset as *const () as usize,
        crate::pool::registry::Shared::frame_began as *const () as usize,
    ];
    for (i, address) in placed.into_iter().enumerate() {
        assert!(
            section.contains(&address),
            "function {i} lies outside {code:?}"
        );
    }
    let walk = super::Shared::walk_plan as *const () as usize;
    assert!(
        !section.contains(&walk),
        "the planned walk lies in {code:?}"
    );
}

/// The spans a graph publishes for the early-woken workers to warm hold
/// its runtime and frame state first, then its read-only arrays in the
/// order a walk reads them (the plan's lists, the dependency and successor
/// rows, the nodes and their closures' addresses), then its code; never
/// the lines nodes write (node states, run records).
#[test]
#[cfg_attr(
    miri,
    ignore = "no linker sections, and a function may have several addresses: the code spans move"
)]
fn a_graphs_warm_spans_hold_its_state_its_arrays_then_its_code() {
    use crate::sync::prefetch::{Span, MAX_DATA_LINES, MAX_DATA_SPANS};
    let graph = chain_of_64(|_, _: &()| {});
    let runtime = &graph.runtime;
    let spans = runtime.warm_spans();
    // SAFETY: no frame runs; a read of the graph's arrays.
    let shared = unsafe { runtime.shared.as_ref() };
    let expected = [
        Span::of_value(runtime),
        Span::of_value(shared),
        shared.schedule.all_lists(),
        Span::of(&shared.dependency_start, MAX_DATA_LINES),
        Span::of(&shared.dependency_list, MAX_DATA_LINES),
        Span::of(&shared.dependencies, MAX_DATA_LINES),
        Span::of(&shared.successor_start, MAX_DATA_LINES),
        Span::of(&shared.successors, MAX_DATA_LINES),
        Span::of(&shared.nodes, MAX_DATA_LINES),
        Span::of(&shared.closures, MAX_DATA_LINES),
    ];
    assert_eq!(&spans[..MAX_DATA_SPANS], &expected[..]);
    // The plan's lists (third) are empty until frames are planned.
    assert!(expected
        .iter()
        .enumerate()
        .all(|(k, span)| k == 2 || span.lines > 0));
    assert_eq!(spans[0].start, runtime as *const _ as usize & !63);
    for written in [
        Span::of(&shared.states, MAX_DATA_LINES),
        Span::of(&shared.runs, MAX_DATA_LINES),
    ] {
        assert!(
            spans.iter().all(|span| span.start != written.start),
            "{written:?} is written by every frame"
        );
    }
    assert_eq!(&spans[MAX_DATA_SPANS..], &super::Runtime::code_spans()[..]);
    // What the graph keeps to publish is what it would work out now, but
    // for its own address: it was worked out inside the builder, and the
    // graph may have moved since (its next frame after an idle gap works
    // it out again, see below).
    assert_eq!(runtime.warm[1..], spans[1..]);
}

/// A graph moved between frames (into a box, here) works its spans out
/// again at its next frame after an idle gap, so that the workers warm its
/// new address, not the one it had when they were worked out.
#[test]
#[cfg_attr(
    miri,
    ignore = "no linker sections, and a function may have several addresses: the code spans move"
)]
fn a_moved_graph_warms_its_new_address() {
    let pool = Pool::builder().threads(1).build().unwrap();
    let graph = chain_of_64(|_, _: &()| {});
    let home = |graph: &TaskGraph<()>| &graph.runtime as *const super::Runtime as usize & !63;
    let mut graphs = vec![graph];
    graphs[0].run(&pool, &()).unwrap();
    assert_eq!(graphs[0].runtime.warm[0].start, home(&graphs[0]));
    let key_before = graphs[0].runtime.warm_key;
    let mut moved = Box::new(graphs.pop().unwrap());
    // Longer than the idle gap after which a frame publishes a forecast.
    std::thread::sleep(Duration::from_millis(5));
    moved.run(&pool, &()).unwrap();
    assert_eq!(moved.runtime.warm[0].start, home(&moved));
    assert_eq!(moved.runtime.warm, moved.runtime.warm_spans());
    // A new key, so that the pool stores the new spans (`set_spans`
    // skips spans whose key it holds already).
    assert_ne!(moved.runtime.warm_key, key_before);
}

/// Each structure the frame thread's warming covers (the pool's shared
/// state, guest slot and its parker; the graph's runtime and frame state)
/// fits under its span's cap, so none is cut short.
#[test]
fn the_frame_threads_state_fits_its_spans() {
    use crate::sync::prefetch::MAX_STRUCT_LINES;
    let pool = Pool::builder().threads(1).build().unwrap();
    let graph = chain_of_64(|_, _: &()| {});
    let spans = pool.shared().frame_thread_spans();
    let state = &graph.runtime.warm_spans()[..2];
    for span in spans.iter().chain(state) {
        assert!(span.lines > 0 && span.lines < MAX_STRUCT_LINES, "{span:?}");
    }
}

/// A graph that runs right after another, both after the loop's sleep
/// (two graphs a tick), prefetches: its own data waited through the sleep,
/// though the pool was busy just before its frame. Run again at once, with
/// no sleep since its last frame, it does not.
#[test]
fn a_second_graph_after_the_sleep_prefetches() {
    use super::frame::Caches;
    let pool = Pool::builder().threads(1).build().unwrap();
    let mut first = chain_of_64(|_, _: &()| {});
    let mut second = chain_of_64(|_, _: &()| {});
    for _ in 0..3 {
        // Longer than the idle gap that counts (`LINGER_GAP_NANOS`).
        std::thread::sleep(Duration::from_millis(2));
        first.run(&pool, &()).unwrap();
        assert_eq!(first.runtime.shared_mut().inputs.caches, Caches::Cold);
        second.run(&pool, &()).unwrap();
        assert_eq!(second.runtime.shared_mut().inputs.caches, Caches::Cold);
    }
    // Without a sleep in between, only an idle gap of the pool (this
    // thread held up for over 20 µs) would make it prefetch again.
    let idle_starts = pool.shared().frame_gaps.idle_starts();
    second.run(&pool, &()).unwrap();
    if pool.shared().frame_gaps.idle_starts() == idle_starts {
        assert_eq!(second.runtime.shared_mut().inputs.caches, Caches::Warm);
    }
}

/// A graph that is the only one of its paced loop never leaves a forecast
/// of another graph's frame within the tick (`NextFrame::expect_soon`):
/// after each of its shared frames the worker plans for the next tick
/// only.
#[test]
fn a_single_graph_loop_forecasts_no_second_graph() {
    use crate::pool::early_wake::{Forecasts, LookFor};
    let pool = Pool::builder().threads(1).build().unwrap();
    let mut b = TaskGraph::<()>::builder();
    for chain in 0..2 {
        for link in 0..4 {
            let node = b.node(format!("c{chain}-{link}"), Lane::FrameCritical, |_| {
                let start = std::time::Instant::now();
                while start.elapsed() < Duration::from_micros(100) {
                    std::hint::spin_loop();
                }
            });
            if link > 0 {
                node.after([format!("c{chain}-{}", link - 1)]);
            }
        }
    }
    let mut graph = b.build().unwrap();
    let mut shared = 0;
    for _ in 0..12 {
        std::thread::sleep(Duration::from_millis(2));
        let stats = graph.run(&pool, &()).unwrap();
        if stats.sharing() != FrameSharing::Alone {
            shared += 1;
        }
        let plan = pool
            .shared()
            .next_frame
            .plan(0, crate::clock::ticks(), Forecasts::Any);
        assert!(
            plan.is_none_or(|plan| plan.looking_for == LookFor::Tick),
            "{plan:?}"
        );
    }
    assert!(
        shared > 0,
        "no frame was shared: the check above saw nothing"
    );
}

/// `sleep_until` warms nothing for a tick already past, the warming asks
/// for the pool's and the graph's lines, and a graph moved since its spans
/// were worked out warms where it is now.
#[test]
fn sleep_until_warms_only_ahead_of_a_tick_and_a_moved_graph_where_it_is() {
    let pool = Pool::builder().threads(1).build().unwrap();
    let mut graph = chain_of_64(|_, _: &()| {});
    graph.run(&pool, &()).unwrap();
    assert_eq!(graph.runtime.sleep_until(&pool, Instant::now()), 0);
    let published: usize = graph.runtime.warm.iter().map(|span| span.lines).sum();
    assert!(graph.runtime.warm_ahead(&pool) > published);
    let moved = Box::new(graph);
    let spans = moved.runtime.spans_to_warm();
    assert_eq!(spans[0].start, &moved.runtime as *const _ as usize & !63);
    // The data's spans: Miri may give a function a new address at each
    // use, and the code's spans are found from such addresses off Linux.
    let data = crate::sync::prefetch::MAX_DATA_SPANS;
    assert_eq!(spans[..data], moved.runtime.warm_spans()[..data]);
    moved.sleep_until(&pool, Instant::now() + Duration::from_millis(1));
}

/// A heavy node turned off (disabled here; a run condition that stays
/// false is the same) keeps its estimate for when it comes back, but adds
/// nothing to the graph's total: the total decides whether a frame is worth
/// waking threads for. Before, the disabled node's old time stayed in the
/// total for good, and every frame of light work woke threads for it.
#[test]
#[cfg_attr(
    miri,
    ignore = "timing policy: under Miri the clock counts interpreted steps"
)]
fn a_node_turned_off_adds_nothing_to_the_estimated_work() {
    let pool = Pool::builder().threads(1).build().unwrap();
    let mut b = TaskGraph::<()>::builder();
    b.share_above(Duration::from_micros(500), Duration::from_micros(20));
    b.node("debug_draw", Lane::FrameCritical, |_| {
        spin_for(Duration::from_millis(2))
    });
    for i in 0..8 {
        b.node(format!("light_{i}"), Lane::FrameCritical, |_| {})
            .after(["debug_draw"]);
    }
    let mut graph = b.build().unwrap();
    for _ in 0..4 {
        graph.run(&pool, &()).unwrap();
    }
    let heavy = graph.runtime.estimate[0];
    let ticks_1_ms = (1_000_000.0 / graph.runtime.rate.nanos_per_tick()) as u64;
    assert!(heavy > ticks_1_ms, "the heavy node was measured");
    assert!(graph.set_enabled("debug_draw", false));
    // Enough frames for the estimates to be updated (every frame while
    // they are unclear, every `ESTIMATE_SETTLED_EVERY` once settled).
    for _ in 0..4 * ESTIMATE_SETTLED_EVERY {
        graph.run(&pool, &()).unwrap();
    }
    assert_eq!(graph.runtime.estimate[0], heavy, "the estimate is kept");
    assert!(
        graph.runtime.estimate_total < heavy,
        "the total still counts the node that is off: {} ticks, the node {heavy}",
        graph.runtime.estimate_total
    );
    assert!(!graph.runtime.waking, "light frames still wake threads");
}

/// A rebuild keeps what the estimates say of each node it knows by name:
/// a heavy node is not light in the rebuilt graph's first frame (it was:
/// every node started light, as if unmeasured, and a frame run alone timed
/// the heavy node in a batch with the light ones), and a new node starts
/// light.
#[test]
#[cfg_attr(
    miri,
    ignore = "timing policy: under Miri the clock counts interpreted steps"
)]
fn a_rebuild_keeps_a_known_heavy_node_out_of_the_light_batches() {
    let pool = Pool::builder().threads(1).build().unwrap();
    let shape = |extra: bool| {
        let mut b = TaskGraph::<()>::builder();
        b.share_above(Duration::from_secs(1), Duration::ZERO);
        b.node("heavy", Lane::FrameCritical, |_| {
            spin_for(Duration::from_micros(200))
        });
        b.node("light", Lane::FrameCritical, |_| {})
            .after(["heavy"]);
        if extra {
            b.node("new", Lane::FrameCritical, |_| {}).after(["light"]);
        }
        b
    };
    let mut graph = shape(false).build().unwrap();
    for _ in 0..4 * ESTIMATE_SETTLED_EVERY {
        graph.run(&pool, &()).unwrap();
    }
    let before = graph.runtime.plan.light_mut().to_vec();
    assert!(!before[0], "the heavy node is not light");
    shape(true).build_into(&mut graph).unwrap();
    assert_eq!(graph.runtime.plan.light_mut(), [false, before[1], true]);
}

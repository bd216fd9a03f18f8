//! When a frame is worth a second thread, how long idle threads wait, and
//! what the runtime learns between frames: node time estimates, the
//! priorities of critical-path-first, the plan of planned frames. Each
//! tunable says why it has its value.

use super::alone;
use super::planned::{self, Schedule};
use super::Runtime;
use crate::graph::stats::NodeTime;
use crate::graph::{FrameSharing, ReadyOrder};
use std::time::Duration;

/// Priorities are recomputed from the smoothed node times every this many
/// frames. Times are smoothed over about four frames anyway (see
/// `update_estimates`), and skipping the sort on most frames keeps its cost
/// (a few ns per node) out of the per-node overhead.
pub(super) const REPRIORITIZE_EVERY: u64 = 8;

/// While frames run alone, priorities only order the plan of the next one
/// (`alone.rs`), which on one thread takes as long in any order: they
/// decide no more than what a hand-over queues first and how the shared
/// rest of that frame goes. So they are recomputed only every this many
/// frames (and, once frames are shared, as soon as [`REPRIORITIZE_EVERY`]
/// frames passed). On the benchmark graph of 256 empty nodes, timed, this
/// took the frame from a median of 12.4 to 11.2 µs in three paired runs.
/// While frames run clearly alone ([`Clarity::ClearlyAlone`]), where a
/// hand-over is far off, not at all: on that graph the frame of the
/// re-sort and the new plan took about 10 µs more than the others, which
/// added 0.15 µs to a mean frame of about 4.4 µs.
pub(super) const REPRIORITIZE_ALONE_EVERY: u64 = 64;

/// While the verdict on sharing is clear, frame after frame, the node
/// estimates are brought up to date only every this many frames: in a
/// frame run alone that even [`CLEAR_MARGIN`] times its wall time would
/// not make worth a second thread, and in a planned frame whose estimated
/// work, and its measured work, would both be worth one at a
/// [`CLEAR_MARGIN`]th of it. Such frames use the estimates for nothing the
/// next frames need fresh: the verdict stays, priorities and the plan of
/// planned frames are recomputed from them every 64 frames (not at all
/// while frames run clearly alone), and only frames run alone batch light
/// nodes (`alone.rs`). Walking every node's record after each frame was
/// about a tenth of a 256-node frame of empty nodes, and 1.2 of the 5 µs
/// a paced 1 µs frame of them spent after its last node.
///
/// Any other frame updates them at once, and so do the
/// [`ESTIMATE_SETTLED_EVERY`] frames after it ([`Runtime::estimates_due`]):
/// a frame near the threshold, a hand-over, a queued frame, a frame run
/// alone in which a batch of light nodes ran heavy
/// ([`AlonePlan::light_ran_heavy`](super::alone::AlonePlan::light_ran_heavy)),
/// a planned frame whose measured work, at a [`CLEAR_MARGIN`]th of it,
/// would not be worth a second thread. So a
/// graph that grows heavier or lighter is shared or run alone as soon as
/// before, a node that turned heavy stops being batched as soon as before,
/// and a frame's stall leaves the estimates as fast as before (or, in a
/// frame run alone that was held up once, never goes in: `learn`; then the
/// rest is one frame later).
pub(super) const ESTIMATE_SETTLED_EVERY: u64 = 8;

/// How far from the threshold of a second thread a frame must be for
/// [`ESTIMATE_SETTLED_EVERY`]. A frame run alone ran its nodes one after
/// another within its wall time, so their estimates could grow this much
/// before the verdict changed; a planned frame's work, measured and
/// estimated, could shrink as much.
pub(super) const CLEAR_MARGIN: f64 = 4.0;

/// How clear the verdict on sharing was in a frame ([`Runtime::clarity`]).
#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub(super) enum Clarity {
    /// Run alone, and even [`CLEAR_MARGIN`] times its wall time would not
    /// be worth a second thread (and no batch of light nodes ran heavy).
    ClearlyAlone,
    /// Planned, and a [`CLEAR_MARGIN`]th of its estimated work would be
    /// worth one, and so would a [`CLEAR_MARGIN`]th of its measured work
    /// (its walkers' summed node times).
    ClearlyShared,
    /// Near the threshold, handed over, queued, or a batch of light nodes
    /// ran heavy.
    Unclear,
}

/// Planned frames (`planned.rs`) walk lists worked out from the
/// priorities, and a walker whose list runs late claims the ready nodes of
/// other lists, so the plan need not follow every frame's noise; while
/// working it out again costs about 25 µs on the benchmark graph of 256
/// nodes (8 µs of re-sort, 14-35 µs of list scheduling, all on the frame's
/// thread). So graphs that run planned frames re-plan every this many
/// frames. On that graph with 1 µs nodes, frames back to back, timed
/// against untimed frames interleaved, this took the timed frame from
/// 1.09-1.10 to 1.03-1.04 times the untimed one (three runs each).
pub(super) const REPRIORITIZE_PLANNED_EVERY: u64 = 64;

/// By default ([`ShareThreshold`]) a frame is shared with other threads
/// (its nodes queued, waking a sleeping thread) only if it is expected to
/// take at least this much work (the sum of the smoothed node times; for an
/// untimed graph, the last frame's wall time); otherwise its thread runs it
/// alone (`alone.rs`). A woken worker
/// starts its first node about 6.5 µs after the wake-up on this VM (p50,
/// measured at frame start on the 256-node benchmark graph), and the
/// wake-up's syscall is paid by the thread running the frame; below this
/// much work the frame ends sooner on one thread (the 0 ns case of
/// `benches/graph.rs`: 35 ns per node without wake-ups against 91 with
/// them, before frames ran alone).
pub(super) const WAKE_WORTH_NANOS: f64 = 20_000.0;

/// Threads that run out of work at the end of a frame keep looking for the
/// next one (instead of parking) when the smoothed gap after the graph's
/// frames, until the pool's next frame of any graph (`pool/frame_gaps.rs`),
/// is below this. A park and its wake-up cost the parked thread about 10 µs of
/// CPU and the next frame about 6.5 µs of latency on this VM, so a loop that
/// starts its next frame within microseconds (a frame-rate-unlimited loop, a
/// benchmark) is served better awake; a paced game loop, with gaps of
/// milliseconds, parks at once and spends no CPU between frames.
pub(super) const LINGER_GAP_NANOS: f64 = 20_000.0;

/// How long a thread that runs out of work during a shared frame looks for
/// the frame's next nodes before it parks (`registry::Shared::frame_shared`).
/// Within a frame the next nodes are usually microseconds away; a park and
/// its wake-up cost about 10 µs of CPU and 5 µs of latency here. Before
/// this, the worker parked in about half the frames of the 1 µs benchmark
/// graph, run back to back.
pub(super) const IN_FRAME_WAIT_NANOS: f64 = 20_000.0;

/// By default a frame is shared, and threads linger between frames, only
/// if besides [`WAKE_WORTH_NANOS`] the nodes average at least this much
/// (measured, or for an untimed graph the frame's wall time per node). Lighter nodes cost about as much to hand between cores as to run:
/// a node hand-off between threads costs 80-130 ns here, and the 0 ns case
/// of `benches/graph.rs` took 9-14 µs on one thread and 19-37 µs with a
/// worker in it.
///
/// Without this condition the choice was bistable: with a worker in the
/// frame, 0 ns nodes measure about 140 ns each (their spans include the
/// cross-core hand-offs), the frame's total passes `WAKE_WORTH_NANOS`, and
/// every frame woke the worker again. 200 ns is above that, so such a
/// frame falls back to one thread and stays there.
pub(super) const LIGHT_NODE_NANOS: f64 = 200.0;

/// With the default [`ShareThreshold`], a graph whose frames are shared
/// tries one frame alone every this many frames, and one whose frames the
/// trials hold alone tries one shared frame as often (see
/// [`SharingTrial`]). A trial that loses costs one frame: run alone where
/// sharing was faster, or shared with a worker that had parked. 64 frames
/// are about a second of a 60 Hz loop.
pub(super) const TRIAL_EVERY: u32 = 64;

/// How often a graph of heavy nodes ([`Worth::Clearly`]) whose frames are
/// shared tries one alone, in frames (about 8 s of a 60 Hz loop). Such a
/// trial nearly always hands over and loses; on the benchmark graph of
/// 256 nodes of 1 µs paced at 60 Hz it took 20-60 µs longer than the
/// frames around it. It is there for nodes that measure heavy only
/// because their frames are shared.
pub(super) const CLEARLY_TRIAL_EVERY: u32 = 8 * TRIAL_EVERY;

/// How many times the usual margin a frame held alone by trial must pass
/// before it hands over, while its nodes average under twice the node
/// threshold ([`Worth::Barely`]). A frame that starts cold (after other
/// work, or after a sleep) measures its nodes slower in wall time, and
/// handing over then wakes a worker parked since the hold began, which can
/// take longer than the rest of the frame. Four times still hands over a
/// frame whose nodes turn several times heavier.
pub(super) const HELD_MARGIN: u64 = 4;

/// Whether sharing the frames of a graph pays, found by trial, for the
/// default [`ShareThreshold`].
///
/// The threshold judges a frame by its nodes' measured times, and a node
/// measured in a shared frame also pays what sharing costs it: lines that
/// cross cores, and, in a paced loop with other work between the graph's
/// frames, caches that lost its lines. 256 empty nodes with run conditions
/// and declared access, paced at 60 Hz between stretches of other work,
/// measured over [`LIGHT_NODE_NANOS`] each in shared frames and so stayed
/// shared, taking about 70 µs a frame where frames run alone took 45.
///
/// So the wall times of frames that start alone (run alone, or handed
/// over) and of frames shared from their start are both smoothed, and one
/// in every [`TRIAL_EVERY`] frames that the threshold finds worth a second
/// thread runs the other way ([`CLEARLY_TRIAL_EVERY`] for a trial alone of
/// heavy nodes). A trial alone faster than the smoothed time
/// of shared frames holds the next frames alone; a shared trial faster
/// than the smoothed time of frames that start alone ends the hold. How a
/// frame that starts alone may hand over ([`hand_over_margin`]) depends on
/// what the threshold found ([`Worth`]):
/// - nodes under twice the node threshold ([`Worth::Barely`]), where a
///   frame run alone may well not hand over: a trial alone does not hand
///   over, so that its time is what running alone takes, and a frame held
///   alone hands over at [`HELD_MARGIN`] times the usual margin;
/// - heavier nodes ([`Worth::Clearly`]), perhaps only measured so in
///   shared frames: trials alone and frames held alone hand over at the
///   usual margin (as soon as the frame threshold has passed and the next
///   node confirms it, if the nodes are heavy), so a trial costs the frame
///   a hand-over; if they do
///   hand over, their time counts in that of frames that start alone, and
///   the next shared trial ends the hold.
///
/// Frames not worth a second thread run alone, at the usual margin, and
/// pause the count to the next trial. A graph held alone tries sharing
/// every [`TRIAL_EVERY`] frames, whatever its nodes.
///
/// [`hand_over_margin`]: Self::hand_over_margin
#[derive(Debug)]
pub(super) struct SharingTrial {
    /// Smoothed wall time of frames that started alone, and of frames
    /// shared from the start, in nanoseconds (0: none yet).
    alone_nanos: f64,
    shared_nanos: f64,
    /// Whether frames run alone although the threshold calls for sharing.
    hold_alone: bool,
    /// Frames found worth sharing since the last trial (frames that are
    /// not run alone and do not count).
    since_trial: u32,
    /// Whether the frame being run is a trial.
    in_trial: bool,
    /// The next frame's margin of hand-over (`hand_over_margin`).
    margin: Option<u64>,
}

impl Default for SharingTrial {
    /// Nothing measured yet, no hold, and the usual margin.
    fn default() -> Self {
        SharingTrial {
            alone_nanos: 0.0,
            shared_nanos: 0.0,
            hold_alone: false,
            since_trial: 0,
            in_trial: false,
            margin: Some(alone::HAND_OVER_MARGIN),
        }
    }
}

impl SharingTrial {
    /// The margin on the node threshold at which the frame about to run
    /// hands over if it starts alone (`HandOverRule`), or `None` for no
    /// hand-over (see the type's docs).
    #[cfg_attr(target_os = "linux", link_section = "engine_tasks_frame")]
    pub(super) fn hand_over_margin(&self) -> Option<u64> {
        self.margin
    }

    /// Learns from a frame that ran as `sharing` and took `wall_nanos`, and
    /// returns whether the next frame is shared, given what the threshold
    /// finds it `worth`.
    pub(super) fn next_shares(
        &mut self,
        worth: Worth,
        sharing: FrameSharing,
        wall_nanos: f64,
    ) -> bool {
        let started_alone = matches!(sharing, FrameSharing::Alone | FrameSharing::HandedOver);
        let (mine, other) = if started_alone {
            (&mut self.alone_nanos, self.shared_nanos)
        } else {
            (&mut self.shared_nanos, self.alone_nanos)
        };
        *mine = smooth(*mine, wall_nanos);
        if std::mem::take(&mut self.in_trial) && other > 0.0 {
            // Alone beat shared: hold. Shared beat alone: let go.
            self.hold_alone = (wall_nanos < other) == started_alone;
        }
        let usual = Some(alone::HAND_OVER_MARGIN);
        if worth == Worth::Not {
            self.margin = usual;
            return false;
        }
        self.since_trial += 1;
        let every = if worth == Worth::Clearly && !self.hold_alone {
            CLEARLY_TRIAL_EVERY
        } else {
            TRIAL_EVERY
        };
        if self.since_trial >= every {
            self.since_trial = 0;
            self.in_trial = true;
        }
        let shares = self.hold_alone == self.in_trial;
        self.margin = match worth {
            Worth::Barely if self.in_trial => None,
            Worth::Barely if self.hold_alone => Some(alone::HAND_OVER_MARGIN * HELD_MARGIN),
            _ => usual,
        };
        shares
    }
}

/// What the threshold finds a frame worth, by its nodes' estimates.
#[derive(Copy, Clone, Debug, PartialEq)]
pub(super) enum Worth {
    /// One thread: the frame is light, or its nodes are.
    Not,
    /// A second thread, though its nodes average under
    /// [`HAND_OVER_MARGIN`](alone::HAND_OVER_MARGIN) times the node
    /// threshold, where a frame run alone may not hand over.
    Barely,
    /// A second thread, with nodes at or over that: a frame run alone hands
    /// over once the frame threshold has passed.
    Clearly,
}

/// An exponential average with weight 1/4 for `sample`, as the node
/// estimates; a sample over twice the average counts as twice it, so one
/// frame stalled by the machine does not decide a trial.
fn smooth(average: f64, sample: f64) -> f64 {
    if average == 0.0 {
        sample
    } else {
        average * 0.75 + sample.min(average * 2.0) * 0.25
    }
}

/// When a frame is worth a second thread: enough work in all, in nodes
/// heavy enough on average (`TaskGraphBuilder::share_above`).
#[derive(Copy, Clone, Debug, PartialEq)]
pub(crate) struct ShareThreshold {
    pub(super) frame_nanos: f64,
    pub(super) node_nanos: f64,
    /// Only the default is checked by trial ([`SharingTrial`]); one set
    /// with `share_above` is followed as it is, even with the same values.
    origin: Origin,
}

/// Where a [`ShareThreshold`] came from.
#[derive(Copy, Clone, Debug, PartialEq)]
enum Origin {
    Default,
    Set,
}

impl Default for ShareThreshold {
    /// [`WAKE_WORTH_NANOS`] and [`LIGHT_NODE_NANOS`].
    fn default() -> Self {
        ShareThreshold {
            frame_nanos: WAKE_WORTH_NANOS,
            node_nanos: LIGHT_NODE_NANOS,
            origin: Origin::Default,
        }
    }
}

impl ShareThreshold {
    pub(crate) fn new(frame_work: Duration, node_work: Duration) -> Self {
        ShareThreshold {
            frame_nanos: frame_work.as_nanos() as f64,
            node_nanos: node_work.as_nanos() as f64,
            origin: Origin::Set,
        }
    }

    /// The margin on the node threshold at which the next frame hands
    /// over if it starts alone (`HandOverRule`), or `None` for no
    /// hand-over: as `trial` says for the default threshold, the usual
    /// [`HAND_OVER_MARGIN`](alone::HAND_OVER_MARGIN) for one that was set
    /// (whatever a trial of an earlier build left).
    #[cfg_attr(target_os = "linux", link_section = "engine_tasks_frame")]
    pub(super) fn hand_over_margin(&self, trial: &SharingTrial) -> Option<u64> {
        match self.origin {
            Origin::Default => trial.hand_over_margin(),
            Origin::Set => Some(alone::HAND_OVER_MARGIN),
        }
    }

    /// Whether a frame of `nanos` of work (or wall time, untimed) over
    /// `nodes` nodes is worth waking and keeping a second thread for.
    #[cfg_attr(target_os = "linux", link_section = "engine_tasks_frame")]
    pub(super) fn worth_a_second_thread(&self, nanos: f64, nodes: usize) -> bool {
        nanos >= self.frame_nanos && nanos / nodes.max(1) as f64 >= self.node_nanos
    }
}

/// How long idle threads wait for the next frame, in ticks, given the
/// smoothed gap after a graph's frames until the pool's next frame: [`LINGER_GAP_NANOS`] for gaps under it,
/// otherwise not at all. (Twice the gap, as before, made the worker park
/// after every eighth frame of the benchmark graph run back to back: the
/// frame that re-sorts priorities leaves a longer gap than the average.)
pub(super) fn linger_ticks(gap_ticks: f64, nanos_per_tick: f64) -> u64 {
    let limit = LINGER_GAP_NANOS / nanos_per_tick;
    if gap_ticks < limit {
        limit as u64
    } else {
        0
    }
}

impl Runtime {
    /// Smooths the gap after this graph's last frame until the pool's next
    /// frame (this one, or another graph's that began in between:
    /// `pool/frame_gaps.rs`) and tells the pool how long its idle threads
    /// should wait for the next frame before they park (see
    /// [`LINGER_GAP_NANOS`]). Whether that next frame was another graph's.
    #[cfg_attr(target_os = "linux", link_section = "engine_tasks_frame")]
    pub(super) fn update_linger(
        &mut self,
        pool: &crate::pool::registry::Shared,
        start_tick: u64,
    ) -> bool {
        let pool_key = pool as *const crate::pool::registry::Shared as usize;
        if self.gap_pool != pool_key {
            // Another pool's ends and idle gaps say nothing of this one's.
            self.gap_pool = pool_key;
            self.last_end_number = 0;
            self.gap_estimate = f64::INFINITY;
            self.gap_jitter = 0.0;
            self.gap_count = 0;
            self.idle_starts_seen = u64::MAX;
        }
        let Some(last_end) = self.last_end_tick else {
            return false;
        };
        let followed = pool.frame_gaps.gap_after(self.last_end_number);
        let gap = followed.unwrap_or_else(|| start_tick.saturating_sub(last_end)) as f64;
        // As the loop's own jitter (`early_wake.rs`): plain averages over
        // the first gaps, then weights of 1/8; from the second gap on (the
        // estimate starts infinite).
        if self.gap_estimate.is_finite() {
            self.gap_count = self.gap_count.saturating_add(1);
            let n = f64::from(self.gap_count.min(8));
            self.gap_jitter += ((gap - self.gap_estimate).abs() - self.gap_jitter) / n;
        }
        // Falls at once, rises smoothly: a loop that resumes back-to-back
        // frames after a pause (a loading screen) lingers from its next
        // frame on, and one long gap does not end lingering.
        self.gap_estimate = if gap < self.gap_estimate {
            gap
        } else {
            0.75 * self.gap_estimate + 0.25 * gap
        };
        // Only for frames worth a second thread (`update_wakes`).
        let linger = if self.waking {
            linger_ticks(self.gap_estimate, self.rate.nanos_per_tick())
        } else {
            0
        };
        pool.set_linger_ticks(linger);
        followed.is_some()
    }

    /// As a frame starts: if another graph's frame followed this graph's
    /// last ones within the tick, after a steady gap longer than threads
    /// linger for (game code between the two graphs), tells the pool how
    /// long after this frame the next one should start, so that the
    /// workers that run out of work at its end park with a timeout until
    /// just before it, instead of for good (`NextFrame::expect_soon`);
    /// otherwise clears what an earlier frame told it. Set at the start,
    /// since a worker may run out of work before the frame's thread leaves
    /// the frame. Not for a gap longer than a quarter of the loop's measured
    /// period (the next tick's frame, which the tick's forecast covers),
    /// nor before four gaps were measured, nor for one that wanders by more
    /// than a quarter of itself (the look, four times the jitter and more,
    /// would last about as long as the gap).
    /// `followed_by_other`: what `update_linger` found of the last frame.
    #[cfg_attr(target_os = "linux", link_section = "engine_tasks_frame")]
    pub(super) fn forecast_next_graph(
        &self,
        pool: &crate::pool::registry::Shared,
        followed_by_other: bool,
    ) {
        use crate::pool::early_wake::{EARLY_SHARE, MIN_INTERVALS};
        let nanos_per_tick = self.rate.nanos_per_tick();
        let gap = self.gap_estimate;
        let within_tick = pool
            .next_frame
            .period()
            .is_some_and(|period| gap <= EARLY_SHARE * period);
        if !followed_by_other
            || !within_tick
            || self.gap_count < MIN_INTERVALS
            || gap < LINGER_GAP_NANOS / nanos_per_tick
            || self.gap_jitter > EARLY_SHARE * gap
        {
            pool.next_frame.clear_soon();
            return;
        }
        let forecast = crate::pool::early_wake::Forecast {
            start: gap as u64,
            jitter: self.gap_jitter,
        };
        pool.next_frame.expect_soon(forecast, nanos_per_tick);
    }

    /// How clear the verdict on sharing was in the frame that just ended,
    /// which took `wall`; `walked`: if it was planned, its nodes' summed
    /// time in ticks.
    #[cfg_attr(target_os = "linux", link_section = "engine_tasks_frame")]
    pub(super) fn clarity(&self, wall: Duration, walked: u64) -> Clarity {
        let nodes = self.estimate.len();
        let clearly_worth = |nanos: f64| {
            self.share_above
                .worth_a_second_thread(nanos / CLEAR_MARGIN, nodes)
        };
        match self.stats.sharing() {
            FrameSharing::Alone
                if !self.plan.light_ran_heavy()
                    && !self
                        .share_above
                        .worth_a_second_thread(wall.as_nanos() as f64 * CLEAR_MARGIN, nodes) =>
            {
                Clarity::ClearlyAlone
            }
            // This frame's own work too: a light graph whose estimates one
            // held-up node blew up is not clearly shared.
            FrameSharing::Planned
                if clearly_worth(self.estimate_total as f64 * self.rate.nanos_per_tick())
                    && clearly_worth(walked as f64 * self.rate.nanos_per_tick()) =>
            {
                Clarity::ClearlyShared
            }
            _ => Clarity::Unclear,
        }
    }

    /// Whether frame `number`, of `clarity`, brings the node estimates up
    /// to date: always, but while the verdict is clear, only every
    /// [`ESTIMATE_SETTLED_EVERY`] frames, and not before as many frames
    /// passed since the last frame that was not clear. An unclear frame
    /// (a node held up in a shared frame, say) is folded in at once, so the
    /// frames after it are too, as many as before, to bring it back down.
    pub(super) fn estimates_due(&self, number: u64, clarity: Clarity) -> bool {
        clarity == Clarity::Unclear
            || self
                .unclear_at
                .is_some_and(|at| number <= at + ESTIMATE_SETTLED_EVERY)
            || self
                .estimated_after
                .is_none_or(|after| number >= after + ESTIMATE_SETTLED_EVERY)
    }

    /// Folds this frame's node times into the smoothed estimates
    /// (exponential average, weight 1/4 for the newest frame) and their sum.
    /// A node that panicked or was skipped keeps its estimate. So does one
    /// that was off (disabled, or its condition did not hold), but it adds
    /// nothing to the sum: a node turned off would otherwise keep every
    /// frame judged worth waking threads for by work it no longer does. An
    /// estimate
    /// of 0 has not been measured yet and takes the first time as it is (a
    /// smoothed one never decays to 0: `e - e / 4` stays above 0).
    ///
    /// In the same pass, marks the nodes now light for frames run alone
    /// ([`alone::BATCH_BELOW_NANOS`]): one walk over the nodes, which the
    /// end of a frame pays for when [`estimates_due`](Self::estimates_due).
    pub(super) fn update_estimates(&mut self) {
        let light_ticks = (alone::BATCH_BELOW_NANOS / self.rate.nanos_per_tick()) as u64;
        let mut total = 0;
        // Every rebuild sizes all three to the nodes; a zip would cut a
        // mismatch short without a word.
        assert_eq!(self.plan.light_mut().len(), self.estimate.len());
        assert_eq!(self.stats.node_times().len(), self.estimate.len());
        let nodes = self
            .estimate
            .iter_mut()
            .zip(self.plan.light_mut())
            .zip(self.stats.node_times());
        for ((estimate, light), time) in nodes {
            if let NodeTime::Ran(ticks) = time {
                *estimate = if *estimate == 0 {
                    ticks
                } else {
                    *estimate - *estimate / 4 + ticks / 4
                };
            }
            if time != NodeTime::Off {
                total += *estimate;
            }
            *light = *estimate < light_ticks;
        }
        self.plan.set_light_below(light_ticks);
        self.estimate_total = total;
    }

    /// Decides whether the next frame is shared (its nodes queued, waking
    /// sleeping threads) or runs alone (see [`ShareThreshold`]): by the
    /// smoothed total node time of a timed graph (already updated with this
    /// frame's, the first frame's included: its wall time also holds one-off
    /// costs, such as first touches of memory, that made a graph of a few
    /// empty nodes look worth a second thread), or by this frame's wall time
    /// for an untimed one.
    #[cfg_attr(target_os = "linux", link_section = "engine_tasks_frame")]
    pub(super) fn update_wakes(&mut self, wall: Duration) {
        let nanos = if self.shared_mut().timed {
            self.estimate_total as f64 * self.rate.nanos_per_tick()
        } else {
            wall.as_nanos() as f64
        };
        let nodes = self.estimate.len();
        let mut worth = self.share_above.worth_a_second_thread(nanos, nodes);
        if self.share_above.origin == Origin::Default {
            let margin = self.share_above.node_nanos * alone::HAND_OVER_MARGIN as f64;
            let verdict = if !worth {
                Worth::Not
            } else if nanos / nodes.max(1) as f64 >= margin {
                Worth::Clearly
            } else {
                Worth::Barely
            };
            let sharing = self.stats.sharing();
            worth = self
                .trial
                .next_shares(verdict, sharing, wall.as_nanos() as f64);
        }
        if worth != self.waking {
            self.waking = worth;
            for node in self.shared_mut().nodes.iter_mut() {
                node.wakes = worth;
            }
        }
    }

    /// Priority = own estimate + 1 + the largest successor priority (the `+1`
    /// makes longer chains win when times are equal); then roots and every
    /// successor list are sorted by it, most urgent first.
    pub(super) fn reprioritize(&mut self) {
        if self.order != ReadyOrder::CriticalPathFirst {
            return;
        }
        // SAFETY: between frames, borrowed apart from the other fields.
        let shared = unsafe { self.shared.as_mut() };
        let priority = &mut self.priority;
        for &i in self.topological.iter().rev() {
            let i = i as usize;
            let range = shared.successor_start[i] as usize..shared.successor_start[i + 1] as usize;
            let after = shared.successors[range]
                .iter()
                .map(|&s| priority[s as usize])
                .max();
            priority[i] = self.estimate[i] + 1 + after.unwrap_or(0);
        }
        let key = |&i: &u32| (std::cmp::Reverse(priority[i as usize]), i);
        for i in 0..shared.nodes.len() {
            let range = shared.successor_start[i] as usize..shared.successor_start[i + 1] as usize;
            shared.successors[range].sort_unstable_by_key(key);
        }
        self.roots.sort_unstable_by_key(key);
        self.plan.invalidate();
        shared.schedule.invalidate();
    }

    /// Works out the plan of frames run alone again if the priorities
    /// changed since, and the next frame runs alone.
    #[cfg_attr(target_os = "linux", link_section = "engine_tasks_frame")]
    pub(super) fn replan_if_stale(&mut self) {
        if !self.waking && self.plan.is_stale() {
            // SAFETY: between frames (see `shared_mut`); a shared borrow of
            // the graph alongside the plan.
            let shared = unsafe { self.shared.as_ref() };
            self.plan.replan(&self.roots, &shared.dependencies, |i| {
                shared.successors_of(i)
            });
        }
    }

    /// Works out the plan of planned frames for `lists` threads again if
    /// the priorities changed since (allocates nothing).
    pub(super) fn replan_schedule(&mut self, lists: usize) {
        // SAFETY: between frames (see `shared_mut`), borrowed apart from
        // the estimates and priorities.
        let shared = unsafe { self.shared.as_mut() };
        if !shared.schedule.is_stale(lists) {
            return;
        }
        let cross = (planned::CROSS_NANOS / self.rate.nanos_per_tick()) as u64;
        // Out of the graph while it is worked out (an empty schedule
        // allocates nothing).
        let mut schedule = std::mem::replace(&mut shared.schedule, Schedule::new(0));
        let graph = &*shared;
        let costs = planned::Costs {
            priority: &self.priority,
            estimate: &self.estimate,
            cross,
        };
        schedule.replan(
            lists,
            costs,
            &graph.dependencies,
            |i| graph.successors_of(i),
            |i| graph.dependencies_of(i),
        );
        shared.schedule = schedule;
        self.refresh_warm_spans();
    }
}

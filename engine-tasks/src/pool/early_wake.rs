//! Early wake-ups: a worker of a paced frame loop wakes on its own just
//! before the next frame, instead of being woken by it.
//!
//! # The problem
//!
//! A game loop runs a frame, then sleeps until the next tick. Between frames
//! every pool thread parks, and the CPUs they ran on go idle. When the next
//! frame queues its first nodes, it wakes a worker, and that wake-up is slow
//! exactly when it matters: an idle CPU must leave its sleep state first, and
//! on a virtual machine a halted vCPU must be scheduled by the host. On the
//! 2-core development VM a worker woken by a paced frame started its first
//! task a median of about 100 µs after the wake-up
//! (`cargo run --release -p engine-tasks-benches --bin wake_placement`), so a
//! frame of 250 µs of work ran most of its first 100 µs on one thread. Back
//! to back, no thread sleeps and no frame pays this.
//!
//! # The remedy
//!
//! The frame loop is periodic, so its next start can be forecast. Every
//! task-graph frame that starts after an idle gap of the pool (the first
//! graph of a game's frame, whichever graph that is; see *Several graphs
//! a frame* for the others) tells the pool
//! ([`NextFrame::frame_started`]), which measures the interval since the
//! previous such start ([`Cadence`]) and, if the loop is steady, publishes
//! when it expects the next one, for the worker slots that ran nodes in
//! any of the last [`HELPER_FRAMES`] frames ([`NextFrame::frame_ended`]
//! records them; a frame run alone adds none). A worker among them
//! that runs out of work parks with a timeout instead of for good: it wakes
//! `lead` before the forecast start, on a timer of its own, and then looks
//! for work for at most `lead + window`, until shortly after the start. If
//! the frame's work shows up it runs it at once; otherwise it follows the
//! tick's forecast if that look was for another graph's frame within the
//! tick (see *Several graphs a frame*), or parks for good until a push
//! wakes it, as without a forecast. A push during a timed park wakes it as
//! before.
//!
//! * **What it costs.** The CPU of the look, about `lead + window` per
//!   frame and worker, only for frames heavy enough to share (a graph that
//!   runs its frames alone publishes nothing) and only while the loop is
//!   steady. [`ThreadStats::early_wakes`] and [`ThreadStats::early_wait`]
//!   count it, and [`ThreadStats::early_finds`] how many looks found the
//!   frame's work. An idle pool pays nothing: a forecast is used once, a
//!   worker whose forecast passed parks with no timeout, and a forecast
//!   of the next graph's frame expires with its look once the frame that
//!   published it ended.
//! * **How early.** `lead` is twice the loop's measured jitter (the
//!   smoothed deviation of its start-to-start interval from the smoothed
//!   period) plus [`LEAD_FLOOR_NANOS`], and the worker adds how late the
//!   pool's timed parks have woken so far (`oversleep`, one smoothed value
//!   for the pool; it includes the
//!   kernel's timer slack and the CPU's wake-up; one park counts for at
//!   most [`MAX_OVERSLEEP_NANOS`], so that a preempted one does not stop
//!   the forecasts). A loop whose jitter is over an eighth of its period,
//!   or whose look would exceed [`MAX_LOOK_NANOS`], is not steady: nothing
//!   is published.
//! * **Several graphs a frame.** Only a frame that starts after an idle
//!   gap of the pool times the loop, and only one that comes at the loop's
//!   tick: a frame that starts within a quarter of the loop's period of the
//!   one before (or, with no period measured, after an idle gap under a
//!   quarter of the last counted one's) is left out, and publishes nothing, so that a second
//!   graph's frame after some game code (whose gap the pool counts as
//!   idle) does not pass for a tick ([`Cadence::observe`]). Eight such
//!   starts in a row mean a faster loop, timed again from there. Before
//!   this, such a loop on the 2-core development VM woke its worker early
//!   in no tick at all (the `two_graphs` benchmark). A graph that follows
//!   another within microseconds finds the workers waiting for it: the
//!   pool keeps, for each frame's end, how soon its next frame began
//!   (`frame_gaps.rs`), and lingers after a graph that is followed closely.
//!   One that follows after a steady gap longer than that (game code
//!   between the graphs, up to a quarter of the period) is forecast too:
//!   the first graph's frame tells the pool at its start how long after
//!   its end the next should start ([`NextFrame::expect_soon`]; counted
//!   from when a worker runs out of work until the frame ends, since a
//!   worker may do so first, then from the frame's end), and a worker that
//!   runs out of work then parks with a timeout until just before it, as
//!   for a tick, warming nothing. Graphs that take turns (one per tick, or
//!   a fixed-step simulation graph among render frames) time one loop: the
//!   pool's. Not handled: game code of over a quarter of the period
//!   between two graphs (the second's frames then count as ticks, the loop
//!   looks irregular and nothing is forecast), and a second graph that
//!   runs its frames alone (the worker looks for it in vain each tick).
//!
//! * **Off the frame thread's CPU.** The frame's thread sleeps too, and
//!   its own timer wakes it at the tick, about when the woken workers
//!   look. A worker that wakes on the CPU where the frame's thread sleeps
//!   holds that CPU for its whole look, and the frame's thread waits
//!   behind it, or for the other, halted vCPU to start. On the 2-core
//!   development VM, in a loop of two graphs a tick, the frame's thread
//!   woke 500-680 µs late (against 100-150 µs usually) in each frame whose
//!   worker woke on its CPU; the lateness then raised the loop's jitter
//!   until forecasts stopped, for about eight frames at a time. So a frame
//!   records the CPU its thread ended on ([`NextFrame::frame_ended_on`]),
//!   and a worker about to park with a timeout narrows its own affinity to
//!   the other CPUs first, wherever it runs (the kernel may move its timer
//!   to that CPU), restoring it after the park (`sync/placement.rs`).
//!
//! # Warming what the frame reads first
//!
//! A woken worker that finds no work yet spends its look prefetching what
//! the frame that published the forecast reads first
//! ([`NextFrame::warming`]): the state the frame's thread works through
//! before its first node (this pool's shared state, its guest slot and
//! that slot's parker; the graph's runtime and frame state), its graph's
//! read-only arrays (lists, rows, nodes and their closures' addresses),
//! then the engine's code, a few dozen lines between two looks, instead of
//! only spinning. The frame's thread, fresh from the loop's sleep, then
//! finds them in a cache instead of in memory (`sync/prefetch.rs`). In six
//! in-process A/B runs on the 2-core development VM (`frame_breakdown`'s
//! 256-node graph, 1 µs a node, 60 Hz, warming on or off at random for each
//! wake-up, a temporary probe) the code made both threads start their
//! first nodes 1.0-1.9 µs sooner and frames end 2.0-3.2 µs sooner; the
//! read-only arrays first ended frames another 0.7 µs sooner (median of
//! five runs, −2.0 to +0.3 µs), and the frame thread's state first another
//! 0.7 µs (median of 13 runs, −2.0 to +2.0 µs, ten of them sooner).
//! Warming the lines the nodes write (node states, run records) as well
//! gained nothing. [`ThreadStats::warmed_lines`] counts the lines. A graph
//! works its spans out when they may move (a rebuild, a new plan, the
//! graph itself moved) and publishes them with the forecast: one load of
//! their key when they are out already.
//!
//! Everything here is a hint read with relaxed atomics: a stale or torn
//! forecast costs a wasted look or a late wake-up, never a lost task. The
//! worker still goes through the idle protocol of `idle.rs` for every park;
//! the timed park's own states are in `park.rs`.
//!
//! A pool built with [`EarlyWake::Never`] never publishes a forecast.
//!
//! [`ThreadStats::early_wakes`]: crate::ThreadStats::early_wakes
//! [`ThreadStats::early_finds`]: crate::ThreadStats::early_finds
//! [`ThreadStats::early_wait`]: crate::ThreadStats::early_wait
//! [`ThreadStats::warmed_lines`]: crate::ThreadStats::warmed_lines

use crate::sync::prefetch::{Span, Warming, MAX_POOL_SPANS, MAX_SPANS};
use crossbeam_utils::CachePadded;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Duration;

/// Whether a pool's workers wake on their own before the next frame of a
/// paced frame loop ([`PoolBuilder::early_wake`](crate::PoolBuilder::early_wake)).
///
/// Waking early takes a worker's wake-up latency out of each frame, and
/// costs the CPU of the look before the frame: about the loop's jitter
/// plus a few tens of microseconds per frame and worker, counted in
/// [`ThreadStats::early_wait`](crate::ThreadStats::early_wait).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum EarlyWake {
    /// Forecast the next frame of a steady loop of shared task-graph frames
    /// and wake the workers that took part in recent frames just before it.
    #[default]
    Forecast,
    /// Never: workers wake when work is queued.
    Never,
}

/// Margin of the wake-up ahead of the forecast start beyond twice the
/// jitter: a worker that wakes this much early is looking when the frame
/// queues its first nodes even if its own wake-up ran later than usual.
const LEAD_FLOOR_NANOS: f64 = 20_000.0;
/// How long a woken worker keeps looking after the forecast start, beyond
/// twice the jitter: a frame that starts this late is treated as a frame
/// that did not come (the worker parks; the frame wakes it as usual).
const WINDOW_FLOOR_NANOS: f64 = 50_000.0;
/// The most a worker may look per frame (lead + window + oversleep): a
/// loop too irregular to forecast within this is not helped by looking.
const MAX_LOOK_NANOS: f64 = 1_000_000.0;
/// The oversleep assumed before a worker has measured its own: the order of
/// a halted vCPU's wake-up on the development VM.
const INITIAL_OVERSLEEP_NANOS: f64 = 60_000.0;
/// The most one timed park's lateness counts for: a park that ends later
/// than this was held up (a preempted vCPU), not the timer's usual
/// lateness. Counted in full, one such park set the smoothed oversleep
/// near a millisecond, which made every look too long to publish, so no
/// timed park ever measured it again and the pool stopped waking early
/// (seen on the development VM: in one 60 Hz run 94% of the frames went
/// without an early wake-up, the oversleep stuck at 870-990 µs). Capped,
/// the oversleep stays under this, and a forecast is refused only for a
/// jitter above about 170 µs, which every frame measures afresh: once the
/// loop steadies, forecasts and timed parks come back.
const MAX_OVERSLEEP_NANOS: f64 = 250_000.0;
/// Start-to-start intervals observed before the first forecast.
pub(crate) const MIN_INTERVALS: u32 = 4;
/// How many frames a worker that ran nodes stays among the ones that wake
/// early: one frame it missed (woken late, say) does not drop it.
pub(crate) const HELPER_FRAMES: usize = 8;

/// What a frame loop expects of its next frame, in clock ticks
/// (`clock.rs`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Forecast {
    /// When the next frame should start.
    pub(crate) start: u64,
    /// The loop's smoothed jitter.
    pub(crate) jitter: f64,
}

/// A graph's estimate of its frame loop's period, from the starts of its
/// frames. Owned by the graph's runtime; see the module docs.
#[derive(Debug, Default)]
pub(crate) struct Cadence {
    last_start: Option<u64>,
    /// Smoothed start-to-start interval (ticks); 0 until measured.
    period: f64,
    /// Smoothed absolute deviation of an interval from `period` (ticks).
    jitter: f64,
    intervals: u32,
    /// The idle gap of the pool before the last counted start (0: not
    /// known).
    last_gap: u64,
    /// The last start, counted or not.
    previous: u64,
    /// The period before the loop was last timed again after a pause, to
    /// tell early starts by until the new one is measured (0: none).
    reference: f64,
    /// Starts in a row that came too early to be ticks (see `observe`).
    early_starts: u32,
}

/// A start this early in the loop's period (a fraction of it, after the
/// start before) is not one of its ticks: a second graph's frame that came
/// after an idle gap of the pool (game code between two graphs), or a
/// catch-up frame. Until a period is measured, the one from before a
/// pause serves; with neither, a start whose idle gap is under this share
/// of the last counted start's is left out. A quarter: a loop that
/// switches to a rate up to four times higher is still timed as it goes.
/// (Game code of more than a quarter period between two graphs makes the
/// second graph's frames count: the loop then looks irregular, and is not
/// forecast.)
pub(crate) const EARLY_SHARE: f64 = 0.25;
/// Early starts in a row after which the loop is taken to run that fast
/// now, and is timed again from the next: more than the graphs a game
/// runs after some code of its own within one tick.
const EARLY_STARTS_TO_RESTART: u32 = 8;

impl Cadence {
    /// A frame starts at `start` (ticks), after an idle gap of the pool of
    /// `idle_gap` ticks (`None`: the pool's first frame, which has no gap
    /// to be judged by and is left out). Whether it counts as one of the
    /// loop's ticks (`false`: left out).
    pub(crate) fn observe(&mut self, start: u64, idle_gap: Option<u64>) -> bool {
        let Some(gap) = idle_gap else {
            return false;
        };
        let previous = std::mem::replace(&mut self.previous, start);
        let Some(last) = self.last_start else {
            self.last_start = Some(start);
            self.last_gap = gap;
            return true;
        };
        // Early after whichever frame started last: a faster loop's frames
        // are each early, and soon start it over.
        let since_previous = start.saturating_sub(previous) as f64;
        let early = if self.intervals > 0 {
            since_previous < EARLY_SHARE * self.period
        } else if self.reference > 0.0 {
            since_previous < EARLY_SHARE * self.reference
        } else {
            (gap as f64) < EARLY_SHARE * self.last_gap as f64
        };
        if early {
            self.early_starts += 1;
            if self.early_starts >= EARLY_STARTS_TO_RESTART {
                *self = Cadence {
                    last_start: Some(start),
                    last_gap: gap,
                    previous: start,
                    ..Cadence::default()
                };
                return true;
            }
            return false;
        }
        self.early_starts = 0;
        self.last_start = Some(start);
        self.last_gap = gap;
        let interval = start.saturating_sub(last) as f64;
        if self.intervals == 0 {
            self.period = interval;
            self.intervals = 1;
            return true;
        }
        if interval > 4.0 * self.period {
            // The loop resumed after a pause (a loading screen, a
            // debugger): measure it again from this frame on, telling
            // early starts by the old period meanwhile.
            *self = Cadence {
                last_start: Some(start),
                last_gap: gap,
                previous: start,
                reference: self.period,
                ..Cadence::default()
            };
            return true;
        }
        // Plain averages over the first intervals, then weights of 1/8: a
        // few frames follow a change of rate, and one late frame moves the
        // estimates by an eighth of its lateness. (`intervals - 1`
        // deviations were measured before this one.)
        let n = f64::from(self.intervals.min(8));
        // A deviation counts for at most four times the jitter so far (or a
        // 64th of the period): one frame the host delayed by milliseconds
        // would otherwise stop forecasts for a dozen frames, while a loop
        // that turned irregular still raises the jitter by half each frame.
        let cap = (4.0 * self.jitter).max(self.period / 64.0);
        let deviation = (interval - self.period).abs().min(cap);
        self.jitter += (deviation - self.jitter) / n;
        self.period += (interval - self.period) / (n + 1.0).min(8.0);
        self.intervals = self.intervals.saturating_add(1);
        true
    }

    /// The next frame's forecast, if the loop is steady: measured long
    /// enough, and its jitter at most an eighth of its period.
    pub(crate) fn forecast(&self) -> Option<Forecast> {
        let last = self.last_start?;
        (self.intervals >= MIN_INTERVALS && self.jitter <= self.period / 8.0).then(|| Forecast {
            start: last.saturating_add(self.period as u64),
            jitter: self.jitter,
        })
    }
}

/// Clears a published forecast.
fn clear(published: &Published) {
    // Relaxed: a hint (module docs); checked first so that a loop of light
    // frames does not write the line every frame.
    if published.start.load(Ordering::Relaxed) != 0 {
        published.start.store(0, Ordering::Relaxed);
    }
}

/// What a worker that runs out of work should do about the next frame.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct EarlyPlan {
    /// Sleep this long first (a timed park), if the wake-up is still ahead.
    pub(crate) sleep: Option<Duration>,
    /// When the timed park should end (ticks), to measure its oversleep.
    pub(crate) wake_at: u64,
    /// Look for work until this tick, then follow the tick's forecast, if
    /// this was the next graph's, or park for good.
    pub(crate) look_until: u64,
    /// What the look is for.
    pub(crate) looking_for: LookFor,
}

/// The pool's forecast of the next frame, written by frame loops and read
/// by workers about to park. See the module docs.
pub(crate) struct NextFrame {
    inner: CachePadded<Inner>,
    /// The loop's timing and recent helpers; taken once or twice a frame,
    /// by the frame's thread (frames on several threads at once each try
    /// it and skip if another holds it).
    loop_state: Mutex<LoopState>,
    enabled: bool,
}

#[derive(Default)]
struct LoopState {
    cadence: Cadence,
    /// The worker slots that ran nodes in each of the last frames (a ring).
    helpers: [u64; HELPER_FRAMES],
    next: usize,
}

/// Set in a published start that counts from when a worker runs out of
/// work, not from the clock's zero (`NextFrame::expect_soon`): one store
/// publishes the start and how it counts. Ticks never reach it.
const RELATIVE: u64 = 1 << 63;

/// Which forecasts a worker's plan may follow.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Forecasts {
    /// The tick's and the next graph's within the tick.
    Any,
    /// The tick's only: a look for the next graph's frame found nothing.
    TickOnly,
}

/// What a worker's early look is for, and so what it warms.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum LookFor {
    /// The loop's next tick: it warms the tick graph's state, arrays and
    /// code.
    Tick,
    /// The next graph's frame within the tick, right after the first
    /// graph's frame: what it would warm is in the caches already.
    NextGraph,
}

/// One published forecast.
struct Published {
    /// When the frame should start (ticks); 0: no forecast.
    start: AtomicU64,
    /// How long before `start` to wake, less the oversleep (ticks).
    lead: AtomicU64,
    /// How long after `start` to keep looking (ticks).
    window: AtomicU64,
    /// Worker slots that took part in the frames before (a bit each).
    slots: AtomicU64,
    /// Nanoseconds per tick (`f64` bits), to turn ticks into a timeout.
    nanos_per_tick: AtomicU64,
}

impl Published {
    fn new() -> Self {
        Published {
            start: AtomicU64::new(0),
            lead: AtomicU64::new(0),
            window: AtomicU64::new(0),
            slots: AtomicU64::new(0),
            nanos_per_tick: AtomicU64::new(1f64.to_bits()),
        }
    }

    /// The plan of `slot` at `now` for this forecast, if it has one and
    /// its look has not passed; with the forecast start. `looking_for` goes
    /// into the plan.
    fn plan(
        &self,
        slot: usize,
        now: u64,
        looking_for: LookFor,
        oversleep: u64,
    ) -> Option<(u64, EarlyPlan)> {
        // Acquire: pairs with the Release store in `NextFrame::publish`.
        let start = self.start.load(Ordering::Acquire);
        // Relaxed, the loads below: see `publish`.
        if start == 0 || self.slots.load(Ordering::Relaxed) & (1u64 << slot) == 0 {
            return None;
        }
        let start = if start & RELATIVE != 0 {
            now.saturating_add(start & !RELATIVE)
        } else {
            start
        };
        let look_until = start.saturating_add(self.window.load(Ordering::Relaxed));
        if now >= look_until {
            return None;
        }
        let nanos_per_tick = f64::from_bits(self.nanos_per_tick.load(Ordering::Relaxed));
        let early = self.lead.load(Ordering::Relaxed) + oversleep;
        let wake_at = start.saturating_sub(early).max(now);
        let sleep = (wake_at > now)
            .then(|| Duration::from_nanos(((wake_at - now) as f64 * nanos_per_tick) as u64));
        Some((
            start,
            EarlyPlan {
                sleep,
                wake_at,
                look_until,
                looking_for,
            },
        ))
    }
}

struct Inner {
    /// The forecast of the loop's next tick.
    tick: Published,
    /// The forecast of the next graph's frame within the tick, after some
    /// code of the game's own ([`NextFrame::expect_soon`]).
    soon: Published,
    /// Nanoseconds per tick (`f64` bits), to turn ticks into a timeout.
    nanos_per_tick: AtomicU64,
    /// The loop's measured period (ticks, `f64` bits; 0: not measured).
    period: AtomicU64,
    /// Smoothed lateness of a timed park's wake-up (ticks).
    oversleep: AtomicU64,
    /// The CPU on which the last frame's thread ended its frame, where it
    /// likely sleeps until the next; `usize::MAX`: not known.
    frame_cpu: AtomicUsize,
    /// What the frame loop that published the forecast reads first, for
    /// woken workers to warm (its graph's runtime and frame state, its
    /// read-only arrays, then its code): each span's first address and
    /// its lines.
    spans: [(AtomicUsize, AtomicUsize); MAX_SPANS],
    /// The key of `spans` (`prefetch::spans_key`); 0: none published.
    spans_key: AtomicU64,
}

impl NextFrame {
    /// `early_wake` is the pool's setting ([`EarlyWake::Never`] publishes
    /// nothing).
    pub(crate) fn new(early_wake: EarlyWake) -> Self {
        NextFrame {
            loop_state: Mutex::new(LoopState::default()),
            enabled: early_wake == EarlyWake::Forecast,
            inner: CachePadded::new(Inner {
                tick: Published::new(),
                soon: Published::new(),
                period: AtomicU64::new(0),
                nanos_per_tick: AtomicU64::new(1f64.to_bits()),
                oversleep: AtomicU64::new(0),
                frame_cpu: AtomicUsize::new(usize::MAX),
                spans: Default::default(),
                spans_key: AtomicU64::new(0),
            }),
        }
    }

    /// A frame starts at `start` (ticks) after an idle gap of the pool of
    /// `idle_gap` ticks (`None`: its first frame): times the loop and
    /// publishes (or clears) the forecast, with the `spans` of the frame's
    /// data and code for the woken workers to warm, whose key is
    /// `spans_key`.
    #[cfg_attr(target_os = "linux", link_section = "engine_tasks_frame")]
    pub(crate) fn frame_started(
        &self,
        start: u64,
        idle_gap: Option<u64>,
        nanos_per_tick: f64,
        spans: &[Span; MAX_SPANS],
        spans_key: u64,
    ) {
        let Ok(mut state) = self.loop_state.try_lock() else {
            return;
        };
        if !state.cadence.observe(start, idle_gap) {
            // Not the loop's tick: its forecast and the tick frame's spans
            // stay as they are.
            return;
        }
        // Relaxed: a hint (module docs).
        self.inner
            .period
            .store(state.cadence.period.to_bits(), Ordering::Relaxed);
        let helpers = state.helpers.iter().fold(0, |all, slots| all | slots);
        match state.cadence.forecast() {
            Some(forecast) if self.enabled && helpers != 0 => {
                self.set_spans(spans, spans_key);
                self.expect(forecast, helpers, nanos_per_tick)
            }
            _ => self.clear(),
        }
    }

    /// A frame ended; the worker slots in `helpers` ran its nodes (none for
    /// a frame run alone).
    #[cfg_attr(target_os = "linux", link_section = "engine_tasks_frame")]
    pub(crate) fn frame_ended(&self, helpers: u64) {
        if let Ok(mut state) = self.loop_state.try_lock() {
            let next = state.next;
            state.helpers[next] = helpers;
            state.next = (next + 1) % HELPER_FRAMES;
        }
    }

    /// A frame loop expects its next frame as `forecast` says, with the
    /// worker slots in `slots` taking part. Publishes nothing (and clears
    /// an earlier forecast) if the look would be too long.
    #[cfg_attr(target_os = "linux", link_section = "engine_tasks_frame")]
    pub(crate) fn expect(&self, forecast: Forecast, slots: u64, nanos_per_tick: f64) {
        self.publish(&self.inner.tick, forecast, slots, nanos_per_tick);
    }

    /// A graph's frame starts, and another graph's frame is expected
    /// `forecast.start` ticks after this one ends, within the same tick but
    /// after more than threads linger for (game code between two graphs):
    /// the workers of the tick's forecast that run out of work park with a
    /// timeout until just before it, not for good, and then look for it
    /// as for a tick (warming nothing: the first graph's frame just ran).
    /// Until the frame ends ([`frame_ending`](Self::frame_ending)) the
    /// start counts from when a worker runs out of work; a worker may do so
    /// before the frame's thread leaves the frame. The next frame's start
    /// replaces or clears it ([`clear_soon`](Self::clear_soon)).
    #[cfg_attr(target_os = "linux", link_section = "engine_tasks_frame")]
    pub(crate) fn expect_soon(&self, forecast: Forecast, nanos_per_tick: f64) {
        // Relaxed: the mask of the tick's forecast, which only steers who
        // looks; a stale one wakes other workers, at worst.
        let slots = self.inner.tick.slots.load(Ordering::Relaxed);
        if !self.enabled || forecast.start >= RELATIVE {
            return;
        }
        let relative = Forecast {
            start: forecast.start | RELATIVE,
            ..forecast
        };
        self.publish(&self.inner.soon, relative, slots, nanos_per_tick);
    }

    /// The frame that published a forecast of the next graph's frame
    /// (`expect_soon`) ends at `now`: from here on the forecast counts from
    /// `now`, and expires with its look.
    #[cfg_attr(target_os = "linux", link_section = "engine_tasks_frame")]
    pub(crate) fn frame_ending(&self, now: u64) {
        let soon = &self.inner.soon;
        // Relaxed: the frame's thread that published it reads it back.
        let start = soon.start.load(Ordering::Relaxed);
        if start & RELATIVE != 0 {
            // Release: pairs with the Acquire load in `Published::plan`,
            // as `publish`'s store (lead, window and slots are unchanged).
            soon.start
                .store(now.saturating_add(start & !RELATIVE), Ordering::Release);
        }
    }

    /// No graph's frame is expected within the tick after the starting
    /// one's.
    #[cfg_attr(target_os = "linux", link_section = "engine_tasks_frame")]
    pub(crate) fn clear_soon(&self) {
        clear(&self.inner.soon);
    }

    /// Publishes `forecast` in `to` (see `expect`), or clears it if the
    /// look would be too long.
    fn publish(&self, to: &Published, forecast: Forecast, slots: u64, nanos_per_tick: f64) {
        let ticks = |nanos: f64| nanos / nanos_per_tick;
        let lead = 2.0 * forecast.jitter + ticks(LEAD_FLOOR_NANOS);
        let window = 2.0 * forecast.jitter + ticks(WINDOW_FLOOR_NANOS);
        let oversleep = self.oversleep(nanos_per_tick) as f64;
        if slots == 0 || lead + window + oversleep > ticks(MAX_LOOK_NANOS) {
            clear(to);
            return;
        }
        // Relaxed, these four: hints, published by the Release store of
        // `start` below; a worker that mixes two forecasts only looks at a
        // slightly wrong time.
        to.lead.store(lead as u64, Ordering::Relaxed);
        to.window.store(window as u64, Ordering::Relaxed);
        to.slots.store(slots, Ordering::Relaxed);
        to.nanos_per_tick
            .store(nanos_per_tick.to_bits(), Ordering::Relaxed);
        self.inner
            .nanos_per_tick
            .store(nanos_per_tick.to_bits(), Ordering::Relaxed);
        // Release: pairs with the Acquire load in `Published::plan`.
        to.start.store(forecast.start.max(1), Ordering::Release);
    }

    /// Sets the spans that woken workers warm, whose key is `key`: one
    /// load when they are out already (the same graph publishes the same
    /// spans every frame).
    fn set_spans(&self, spans: &[Span; MAX_SPANS], key: u64) {
        // Relaxed, here and below: a hint (module docs), published by the
        // Release store of `start` in `publish`; a worker that reads a mix
        // of two graphs' spans warms some wrong lines.
        if self.inner.spans_key.load(Ordering::Relaxed) == key {
            return;
        }
        for (slot, span) in self.inner.spans.iter().zip(spans) {
            slot.0.store(span.start, Ordering::Relaxed);
            slot.1.store(span.lines, Ordering::Relaxed);
        }
        self.inner.spans_key.store(key, Ordering::Relaxed);
    }

    /// What a woken worker warms while it looks for the frame's work: the
    /// pool's spans (`pool`: the state of the pool that the frame's thread
    /// works through first), then the published ones.
    pub(crate) fn warming(&self, pool: [Span; MAX_POOL_SPANS]) -> Warming {
        // Relaxed: a hint; read after `plan`'s Acquire load of `start`,
        // which pairs with the Release store that published these.
        Warming::new(
            pool,
            std::array::from_fn(|i| {
                let (start, lines) = &self.inner.spans[i];
                Span {
                    start: start.load(Ordering::Relaxed),
                    lines: lines.load(Ordering::Relaxed),
                }
            }),
        )
    }

    /// A frame's thread ended its frame on `cpu`: it likely sleeps there
    /// until its loop's next frame, and its timer wakes it there, about
    /// when the early-woken workers look for that frame's work. A worker on
    /// the same CPU would delay it by its look (module docs), so it moves
    /// its wake-up elsewhere (`Placement::steer_self_off`).
    #[cfg_attr(target_os = "linux", link_section = "engine_tasks_frame")]
    pub(crate) fn frame_ended_on(&self, cpu: Option<usize>) {
        let cpu = cpu.unwrap_or(usize::MAX);
        // Relaxed, both: a hint (module docs); checked first so that the
        // line is written only when the CPU changes.
        if self.inner.frame_cpu.load(Ordering::Relaxed) != cpu {
            self.inner.frame_cpu.store(cpu, Ordering::Relaxed);
        }
    }

    /// The CPU on which the last frame's thread ended its frame, if known
    /// ([`frame_ended_on`](Self::frame_ended_on)).
    pub(crate) fn frame_cpu(&self) -> Option<usize> {
        // Relaxed: a hint (module docs).
        let cpu = self.inner.frame_cpu.load(Ordering::Relaxed);
        (cpu != usize::MAX).then_some(cpu)
    }

    /// The loop is not steady, or its frames are run alone: no worker wakes
    /// early.
    pub(crate) fn clear(&self) {
        clear(&self.inner.tick);
    }

    /// The loop's measured period in ticks, if it is measured.
    #[cfg_attr(target_os = "linux", link_section = "engine_tasks_frame")]
    pub(crate) fn period(&self) -> Option<f64> {
        // Relaxed: a hint (module docs).
        let period = f64::from_bits(self.inner.period.load(Ordering::Relaxed));
        (period > 0.0).then_some(period)
    }

    /// What worker slot `slot`, out of work at tick `now`, should do: `None`
    /// to park for good. Of the tick's forecast and, with
    /// [`Forecasts::Any`], the next graph's (`expect_soon`), the one that
    /// starts first, of those whose look has not passed.
    pub(crate) fn plan(&self, slot: usize, now: u64, forecasts: Forecasts) -> Option<EarlyPlan> {
        let inner = &*self.inner;
        // Relaxed: a hint; the clock's rate changes little between frames.
        let nanos_per_tick = f64::from_bits(inner.nanos_per_tick.load(Ordering::Relaxed));
        let oversleep = self.oversleep(nanos_per_tick);
        let soon = (forecasts == Forecasts::Any).then_some((&inner.soon, LookFor::NextGraph));
        [(&inner.tick, LookFor::Tick)]
            .into_iter()
            .chain(soon)
            .filter_map(|(published, looking_for)| {
                published.plan(slot, now, looking_for, oversleep)
            })
            .min_by_key(|&(start, _)| start)
            .map(|(_, plan)| plan)
    }

    /// A timed park meant to end at `wake_at` ended at `now` (ticks).
    pub(crate) fn record_oversleep(&self, wake_at: u64, now: u64) {
        // Relaxed: a hint.
        let nanos_per_tick = f64::from_bits(self.inner.nanos_per_tick.load(Ordering::Relaxed));
        let late = (now.saturating_sub(wake_at) as f64).min(MAX_OVERSLEEP_NANOS / nanos_per_tick);
        let smoothed = self.oversleep(nanos_per_tick) as f64;
        // Weight 1/4: a few wake-ups settle it.
        let next = smoothed + (late - smoothed) / 4.0;
        // Relaxed: a hint; two workers racing here lose one sample.
        // At least 1: 0 means not measured yet.
        self.inner
            .oversleep
            .store((next as u64).max(1), Ordering::Relaxed);
    }

    /// The smoothed oversleep (ticks), or the initial guess.
    fn oversleep(&self, nanos_per_tick: f64) -> u64 {
        // Relaxed: a hint.
        match self.inner.oversleep.load(Ordering::Relaxed) {
            0 => (INITIAL_OVERSLEEP_NANOS / nanos_per_tick) as u64,
            measured => measured,
        }
    }
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod pool_tests;

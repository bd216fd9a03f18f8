//! A cheap monotonic tick counter for per-node timing.
//!
//! A graph frame reads the clock once or twice per node (twice for a node
//! taken from a queue), so the clock must cost far
//! less than the 40 ns overhead budget of a node. `Instant::now` costs about
//! 33 ns here (vDSO `clock_gettime`); the x86-64 time-stamp counter costs
//! about 17 ns (both measured on the 2-core development VM with a loop of
//! 10 million reads). Ticks are turned into
//! nanoseconds with a rate measured against `Instant` over the frames run so
//! far ([`TickRate`]). Elsewhere the clock is `Instant`, in nanoseconds.
//!
//! The time-stamp counter is invariant (constant rate, synchronised across
//! cores) on every x86-64 CPU of the last decade; Linux only picks it as its
//! clock source when it is. On a machine where it is not, node times are
//! noisy, never unsafe.
//!
//! Until a graph has measured the rate over its own frames, it uses one
//! measured once per process ([`first_nanos_per_tick`]). The counter's
//! rate differs from machine to machine: on the 2.1 GHz development VM a
//! fixed 3 GHz guess put a first frame's node times 30% short, and a
//! frame run alone that should have handed over (by those times) did not.

use std::time::{Duration, Instant};

/// How long [`first_nanos_per_tick`] reads both clocks: reading jitter of
/// a few tens of nanoseconds is then under 0.1% of the rate, at a cost
/// paid once per process, by the first `TickRate` (a graph's build, or a
/// trace's stop).
const CALIBRATION: Duration = Duration::from_micros(50);

/// How long [`first_nanos_per_tick`] waits for the counter to pass its
/// first reading (a thread moved to a core whose counter is behind) before
/// it gives up.
const CALIBRATION_LIMIT: Duration = Duration::from_millis(1);

/// The shortest stretch between two readings that [`TickRate`] checks
/// against its rate: a reading's jitter (tens of nanoseconds, or a
/// preemption between the paired reads) is a small part of it.
const SEGMENT_MIN: Duration = Duration::from_millis(1);

/// How far a stretch between two readings may disagree with the rate, as a
/// share of its time, before the history starts again: far above the
/// counter's drift against the system clock (parts per million), far below
/// a suspend's or a wrong rate's.
const SEGMENT_TOLERANCE: f64 = 0.1;

/// The rate when no measurement is usable: a 3 GHz counter.
const FALLBACK_NANOS_PER_TICK: f64 = 1.0 / 3.0;

/// Rates outside this are not a time-stamp counter's (under 100 MHz or
/// over 20 GHz): a measurement there was skewed (counters of two cores
/// out of step), and the fallback is used instead.
const PLAUSIBLE_NANOS_PER_TICK: std::ops::RangeInclusive<f64> = 0.05..=10.0;

/// The tick counter's rate, in nanoseconds per tick, measured against
/// `Instant` over [`CALIBRATION`] the first time it is asked for. Both
/// clocks run on while the thread is preempted, so a preemption in the
/// window does not skew the ratio; a thread moved between cores whose
/// counters differ would, so an implausible rate, or none within
/// [`CALIBRATION_LIMIT`], gives [`FALLBACK_NANOS_PER_TICK`].
pub(crate) fn first_nanos_per_tick() -> f64 {
    if !cfg!(all(target_arch = "x86_64", not(miri))) {
        // `ticks` is in nanoseconds there.
        return 1.0;
    }
    use std::sync::OnceLock;
    static RATE: OnceLock<f64> = OnceLock::new();
    *RATE.get_or_init(|| {
        let (start, start_tick) = paired_reading();
        loop {
            let (now, tick) = paired_reading();
            let elapsed = now.duration_since(start);
            if elapsed >= CALIBRATION && tick > start_tick {
                let rate = elapsed.as_nanos() as f64 / (tick - start_tick) as f64;
                return if PLAUSIBLE_NANOS_PER_TICK.contains(&rate) {
                    rate
                } else {
                    FALLBACK_NANOS_PER_TICK
                };
            }
            if elapsed >= CALIBRATION_LIMIT {
                return FALLBACK_NANOS_PER_TICK;
            }
        }
    })
}

/// An `Instant` and the tick at the same moment: of five tries, the one
/// with the fewest ticks between the reads around the `Instant`, and the
/// tick halfway between them. The first `Instant` a process reads can take
/// microseconds (its clock's page is cold), and a thread can be preempted
/// between two reads; either would skew one read pair. A try whose second
/// tick is below its first (the thread moved between cores) does not
/// count, unless all five are such.
fn paired_reading() -> (Instant, u64) {
    let mut best = (Instant::now(), ticks(), u64::MAX);
    for _ in 0..5 {
        let before = ticks();
        let now = Instant::now();
        let after = ticks();
        if after < before {
            continue;
        }
        let width = after - before;
        if width < best.2 {
            best = (now, before + width / 2, width);
        }
    }
    (best.0, best.1)
}

/// Reads the tick counter.
#[inline(always)]
#[cfg(all(target_arch = "x86_64", not(miri)))]
pub(crate) fn ticks() -> u64 {
    // SAFETY: `rdtsc` exists on every x86-64 CPU and has no preconditions; it
    // reads a counter and touches no memory.
    unsafe { core::arch::x86_64::_rdtsc() }
}

/// Reads the tick counter.
#[inline(always)]
#[cfg(any(not(target_arch = "x86_64"), miri))]
pub(crate) fn ticks() -> u64 {
    use std::sync::OnceLock;
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    EPOCH.get_or_init(Instant::now).elapsed().as_nanos() as u64
}

/// Converts ticks to time, from paired (`Instant`, tick) readings.
///
/// A frame loop asks before each reading whether it still sharpens the
/// rate ([`wants_reading`](TickRate::wants_reading)): every reading until
/// the rate is measured (100 µs of history), then readings only each time
/// the history has grown by an eighth (a frame's start and end readings
/// then come as a pair). The rate's error is the readings' jitter over the
/// history, so it stays within 8/7 of what a reading every frame would
/// give, while an hour of frames takes a few hundred readings instead of
/// two a frame (each an `Instant::now` and the arithmetic on it: a tenth
/// of a light frame's instructions).
///
/// A tick below the last reading's (counters of two cores out of step, a
/// migrated VM, a resume) starts the history again from that reading, and
/// so does a reading whose stretch since the last disagrees with the rate
/// by more than [`SEGMENT_TOLERANCE`] (a suspend or a paused VM that one
/// clock counted and the other did not, or a counter that changed rate):
/// else that stretch would skew the average for as long as the history
/// lasts. The rate measured so far stands until the new history is long
/// enough, and only a rate measured over the current history judges.
#[derive(Debug)]
pub(crate) struct TickRate {
    first: Option<(Instant, u64)>,
    /// The tick of the latest reading.
    last_tick: u64,
    /// The `Instant` of the latest reading.
    last_now: Option<Instant>,
    /// Whether `nanos_per_tick` was measured over the current history:
    /// only such a rate judges a stretch (one from the process's first
    /// measurement, or from a history since restarted, may be the wrong
    /// one, and judging by it would restart the history for ever).
    rate_from_history: bool,
    /// Whether `nanos_per_tick` was measured over this rate's own
    /// readings, not taken from [`first_nanos_per_tick`].
    measured: bool,
    nanos_per_tick: f64,
}

impl TickRate {
    pub(crate) fn new() -> Self {
        TickRate {
            first: None,
            last_tick: 0,
            last_now: None,
            rate_from_history: false,
            measured: false,
            // Until 100 µs of readings: the process's first measurement.
            nanos_per_tick: first_nanos_per_tick(),
        }
    }

    /// Whether a reading at `tick` would sharpen the rate: every one until
    /// the rate is measured, then one once the history has grown by an
    /// eighth since the last (or the ticks went back).
    pub(crate) fn wants_reading(&self, tick: u64) -> bool {
        let Some((_, first_tick)) = self.first else {
            return true;
        };
        if !self.measured || tick < self.last_tick {
            return true;
        }
        let history = self.last_tick - first_tick;
        tick - self.last_tick >= history / 8
    }

    /// Whether the rate was measured over this rate's own readings: until
    /// then it is the process's first measurement (and every reading is
    /// wanted, so a frame's wall time comes from `Instant`s).
    #[cfg(test)]
    fn is_measured(&self) -> bool {
        self.measured
    }

    /// Adds a reading taken at `now`/`tick`; the rate is the average since
    /// the first reading, so it sharpens as frames go by.
    pub(crate) fn observe(&mut self, now: Instant, tick: u64) {
        let went_back = tick < self.last_tick;
        let disagrees = !went_back && self.stretch_disagrees(now, tick);
        self.last_tick = tick;
        self.last_now = Some(now);
        match self.first {
            Some((start, start_tick)) if !went_back && !disagrees => {
                let nanos = now.duration_since(start).as_secs_f64() * 1e9;
                let ticks = (tick - start_tick) as f64;
                // Under 100 µs of history the ratio is mostly read jitter.
                if nanos > 100_000.0 && ticks > 0.0 {
                    self.nanos_per_tick = nanos / ticks;
                    self.measured = true;
                    self.rate_from_history = true;
                }
            }
            // The first reading, or the ticks went back, or the clocks
            // parted: the history starts here, and the rate measured so far
            // stands meanwhile.
            _ => {
                self.first = Some((now, tick));
                self.rate_from_history = false;
            }
        }
    }

    /// Whether the ticks from the last reading to `tick`, at the current
    /// rate, are not the time from the last reading to `now`, within
    /// [`SEGMENT_TOLERANCE`]. Stretches under [`SEGMENT_MIN`] by both
    /// clocks are not judged: a reading's jitter is a larger part of them.
    /// (Either clock may be the one that stopped: a suspend that the
    /// system clock did not count is short by it and long by the ticks.)
    fn stretch_disagrees(&self, now: Instant, tick: u64) -> bool {
        let Some(last_now) = self.last_now.filter(|_| self.rate_from_history) else {
            return false;
        };
        let nanos = now.saturating_duration_since(last_now).as_secs_f64() * 1e9;
        let by_ticks = (tick - self.last_tick) as f64 * self.nanos_per_tick;
        let min = SEGMENT_MIN.as_secs_f64() * 1e9;
        if nanos < min && by_ticks < min {
            return false;
        }
        (by_ticks - nanos).abs() > nanos.max(by_ticks) * SEGMENT_TOLERANCE
    }

    /// `ticks` as time, at the current rate.
    pub(crate) fn duration(&self, ticks: u64) -> Duration {
        Duration::from_nanos((ticks as f64 * self.nanos_per_tick) as u64)
    }

    pub(crate) fn nanos_per_tick(&self) -> f64 {
        self.nanos_per_tick
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    #[cfg_attr(
        miri,
        ignore = "a million frames of arithmetic: no unsafe code or atomics"
    )]
    fn readings_thin_out_as_the_history_grows() {
        let mut rate = TickRate::new();
        let now = Instant::now();
        assert!(rate.wants_reading(0), "the first reading is always wanted");
        rate.observe(now, 0);
        assert!(rate.wants_reading(1), "with no history, every reading");
        rate.observe(now, 1_000);
        assert!(rate.wants_reading(1_001), "until the rate is measured");
        // 1 ns per tick from here on: measured.
        rate.observe(now + Duration::from_micros(200), 200_000);
        assert!(rate.is_measured());
        // History 200,000 ticks: the next reading after an eighth of it.
        assert!(!rate.wants_reading(224_999));
        assert!(rate.wants_reading(225_000));
        assert!(rate.wants_reading(100), "ticks that went back");
        // A frame loop of frames 1,000 ticks apart (one reading asked for
        // each) takes O(log) readings over a million frames.
        let mut readings = 0;
        for tick in (201_000..1_000_000_000u64).step_by(1_000) {
            if rate.wants_reading(tick) {
                let at = now + Duration::from_nanos(tick);
                rate.observe(at, tick);
                readings += 1;
            }
        }
        assert!((50..150).contains(&readings), "{readings} readings");
        assert!((rate.nanos_per_tick() - 1.0).abs() < 1e-9);
    }

    #[test]
    fn a_new_rate_starts_from_the_process_measurement() {
        let rate = TickRate::new();
        assert!(!rate.is_measured());
        let first = rate.nanos_per_tick();
        assert_eq!(first, first_nanos_per_tick(), "measured once");
        // The same two clocks over a longer window: a ratio of clocks, so
        // the machine's load does not move it (both run on while the
        // thread is preempted). 5%: a fixed guess is off by tens of
        // percent on machines whose counter runs at another rate, and a
        // clock source other than the counter (a system call per
        // `Instant`) may skew the 50 µs measurement by a few.
        let (start, start_tick) = paired_reading();
        std::thread::sleep(Duration::from_millis(20));
        let (end, end_tick) = paired_reading();
        let ticks = end_tick.saturating_sub(start_tick).max(1);
        let longer = end.duration_since(start).as_nanos() as f64 / ticks as f64;
        assert!(
            (first / longer - 1.0).abs() < 0.05,
            "{first} against {longer} ns per tick"
        );
    }

    #[test]
    fn ticks_that_go_back_start_the_history_again() {
        let mut rate = TickRate::new();
        let start = Instant::now();
        rate.observe(start, 1_000_000);
        rate.observe(start + Duration::from_millis(1), 1_000_000 + 2_000_000);
        assert!(rate.is_measured());
        let measured = rate.nanos_per_tick();
        // The counter steps back: the rate stands, and the history restarts.
        rate.observe(start + Duration::from_millis(2), 10);
        assert_eq!(rate.nanos_per_tick(), measured);
        rate.observe(start + Duration::from_millis(3), 10 + 4_000_000);
        assert!((rate.nanos_per_tick() - 0.25).abs() < 1e-9);
    }

    #[test]
    fn the_rate_is_the_average_since_the_first_reading() {
        let mut rate = TickRate::new();
        let start = Instant::now();
        rate.observe(start, 1_000);
        // Under 100 µs of history the first measurement stands.
        rate.observe(start + Duration::from_micros(50), 1_100);
        assert!(!rate.is_measured());
        let first = rate.nanos_per_tick();
        rate.observe(start + Duration::from_millis(2), 1_000 + 4_000_000);
        assert_ne!(rate.nanos_per_tick(), first);
        assert!((rate.nanos_per_tick() - 0.5).abs() < 1e-9);
        assert_eq!(rate.duration(2_000), Duration::from_nanos(1_000));
    }

    #[test]
    fn a_stretch_the_clocks_disagree_on_starts_the_history_again() {
        let mut rate = TickRate::new();
        let start = Instant::now();
        // 1 ns per tick over 10 ms.
        rate.observe(start, 1_000);
        rate.observe(start + Duration::from_millis(10), 1_000 + 10_000_000);
        assert!((rate.nanos_per_tick() - 1.0).abs() < 1e-9);
        // A suspend that the counter counted and the system clock did not:
        // 100 ms of ticks in 10 ms. The rate stands ...
        let resumed = 1_000 + 110_000_000;
        rate.observe(start + Duration::from_millis(20), resumed);
        assert!((rate.nanos_per_tick() - 1.0).abs() < 1e-9);
        // ... and the history after the resume measures it (it was the
        // average since the first reading, 0.18 ns per tick, and stayed
        // off for as long as the history lasted).
        rate.observe(start + Duration::from_millis(22), resumed + 2_000_000);
        assert!((rate.nanos_per_tick() - 1.0).abs() < 1e-9);
        // Short stretches are not judged, though this one is 50% off:
        // jitter would be a larger part of them.
        rate.observe(start + Duration::from_micros(22_100), resumed + 2_150_000);
        let after_short = rate.nanos_per_tick();
        assert!(
            (after_short - 2_100.0 / 2_150.0).abs() < 1e-9,
            "the short stretch went into the history"
        );
        rate.observe(start + Duration::from_micros(22_200), resumed + 2_250_000);
        // A counter that really changed rate (2 ticks per ns now): one
        // stretch starts the history again, the next measures the new rate.
        let t = resumed + 2_250_000;
        rate.observe(start + Duration::from_millis(30), t + 15_600_000);
        rate.observe(start + Duration::from_millis(40), t + 35_600_000);
        assert!((rate.nanos_per_tick() - 0.5).abs() < 1e-9);
        // A suspend the system clock did not count, inside one frame: 300
        // µs by it, a second by the ticks (at 2 per ns). Judged by the
        // ticks' length, it starts the history again; the rate stands.
        let t = t + 35_600_000;
        rate.observe(start + Duration::from_micros(40_300), t + 2_000_000_000);
        assert!((rate.nanos_per_tick() - 0.5).abs() < 1e-9);
    }
}

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

use std::time::Instant;

/// Reads the tick counter.
#[inline(always)]
#[cfg(target_arch = "x86_64")]
pub(crate) fn ticks() -> u64 {
    // SAFETY: `rdtsc` exists on every x86-64 CPU and has no preconditions; it
    // reads a counter and touches no memory.
    unsafe { core::arch::x86_64::_rdtsc() }
}

/// Reads the tick counter.
#[inline(always)]
#[cfg(not(target_arch = "x86_64"))]
pub(crate) fn ticks() -> u64 {
    use std::sync::OnceLock;
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    EPOCH.get_or_init(Instant::now).elapsed().as_nanos() as u64
}

/// Converts ticks to time, from paired (`Instant`, tick) readings.
#[derive(Debug)]
pub(crate) struct TickRate {
    first: Option<(Instant, u64)>,
    nanos_per_tick: f64,
}

impl TickRate {
    pub(crate) fn new() -> Self {
        TickRate {
            first: None,
            // Until the first frame ends: a 3 GHz guess.
            nanos_per_tick: if cfg!(target_arch = "x86_64") {
                1.0 / 3.0
            } else {
                1.0
            },
        }
    }

    /// Adds a reading taken at `now`/`tick`; the rate is the average since
    /// the first reading, so it sharpens as frames go by.
    pub(crate) fn observe(&mut self, now: Instant, tick: u64) {
        match self.first {
            None => self.first = Some((now, tick)),
            Some((start, start_tick)) => {
                let nanos = now.duration_since(start).as_nanos() as f64;
                let ticks = tick.wrapping_sub(start_tick) as f64;
                // Under 100 µs of history the ratio is mostly read jitter.
                if nanos > 100_000.0 && ticks > 0.0 {
                    self.nanos_per_tick = nanos / ticks;
                }
            }
        }
    }

    pub(crate) fn nanos_per_tick(&self) -> f64 {
        self.nanos_per_tick
    }
}

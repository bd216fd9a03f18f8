//! The forecast's bookkeeping without a pool: cadences, plans, oversleep
//! and the published spans.

use super::*;

fn steady(period: u64, jitter: &[u64]) -> Cadence {
    let mut cadence = Cadence::default();
    let mut start = 1_000_000;
    for &j in jitter {
        cadence.observe(start + j, Some(period / 2));
        start += period;
    }
    cadence
}

#[test]
fn a_steady_loop_is_forecast_one_period_ahead() {
    let cadence = steady(16_000, &[0; 8]);
    let forecast = cadence.forecast().expect("steady");
    assert_eq!(forecast.start, 1_000_000 + 8 * 16_000);
    assert!(forecast.jitter < 16_000.0 / 16.0);
}

#[test]
fn a_loop_is_forecast_only_after_a_few_intervals() {
    assert_eq!(steady(16_000, &[0; 4]).forecast(), None, "3 intervals");
    assert!(steady(16_000, &[0; 5]).forecast().is_some(), "4 intervals");
}

#[test]
fn an_irregular_loop_is_not_forecast() {
    let jitter: Vec<u64> = (0..32).map(|i| (i % 2) * 6_000).collect();
    assert_eq!(steady(16_000, &jitter).forecast(), None);
}

#[test]
fn a_pause_starts_the_estimate_over() {
    let mut cadence = steady(16_000, &[0; 8]);
    let last = cadence.last_start.unwrap();
    cadence.observe(last + 1_000_000, Some(1_000_000));
    assert_eq!(cadence.forecast(), None, "one interval since the pause");
    // A second graph's frame right after the pause's is still left out,
    // by the period from before it.
    assert!(!cadence.observe(last + 1_000_300, Some(100)));
    for i in 1..=4 {
        assert!(cadence.observe(last + 1_000_000 + i * 16_000, Some(8_000)));
    }
    assert_eq!(
        cadence.forecast().unwrap().start,
        last + 1_000_000 + 5 * 16_000
    );
}

/// A loop of two graphs a tick with game code between them, so that
/// the second graph's frames also start after an idle gap of the pool,
/// a short one: only the frames after the loop's sleep are its ticks,
/// from the first on.
#[test]
fn a_frame_after_a_short_idle_gap_is_not_a_tick() {
    let mut cadence = Cadence::default();
    let mut start = 1_000_000;
    for _ in 0..8 {
        cadence.observe(start, Some(15_000));
        cadence.observe(start + 600, Some(300));
        start += 16_000;
    }
    let forecast = cadence.forecast().expect("steady");
    assert_eq!(forecast.start, start);
    assert!(forecast.jitter < 1.0, "{forecast:?}");
    // The pool's first frame has no gap to be judged by: the loop is
    // timed from the next.
    let mut first = Cadence::default();
    assert!(!first.observe(5, None));
    assert!(first.observe(16_005, Some(15_000)));
    assert_eq!(first.last_start, Some(16_005));
}

/// A loop that runs much faster now (its sleep shrinks more than four
/// times) is timed again after a few of its frames.
#[test]
fn a_much_faster_loop_is_timed_again() {
    let mut cadence = steady(16_000, &[0; 8]);
    let mut start = cadence.last_start.unwrap();
    let mut frames = 0;
    while cadence.forecast().is_none_or(|f| f.start != start + 2_000) {
        start += 2_000;
        cadence.observe(start, Some(1_000));
        frames += 1;
        assert!(frames < 40, "not timed again: {cadence:?}");
    }
}

#[test]
fn only_slots_that_took_part_wake_early_and_only_until_the_window_ends() {
    let early = NextFrame::new(EarlyWake::Forecast);
    let forecast = Forecast {
        start: 1_000_000,
        jitter: 0.0,
    };
    // One tick a nanosecond; oversleep not measured yet.
    early.expect(forecast, 0b10, 1.0);
    assert_eq!(
        early.plan(0, 0, Forecasts::Any),
        None,
        "slot 0 took no part"
    );
    let plan = early.plan(1, 0, Forecasts::Any).expect("slot 1 took part");
    let lead = (LEAD_FLOOR_NANOS + INITIAL_OVERSLEEP_NANOS) as u64;
    assert_eq!(plan.wake_at, 1_000_000 - lead);
    assert_eq!(plan.sleep, Some(Duration::from_nanos(1_000_000 - lead)));
    assert_eq!(plan.look_until, 1_000_000 + WINDOW_FLOOR_NANOS as u64);
    let late = early
        .plan(1, 999_000, Forecasts::Any)
        .expect("inside the lead");
    assert_eq!((late.sleep, late.wake_at), (None, 999_000));
    assert_eq!(
        early.plan(1, plan.look_until, Forecasts::Any),
        None,
        "the window passed"
    );
    early.clear();
    assert_eq!(early.plan(1, 0, Forecasts::Any), None, "cleared");
}

/// A forecast of the next graph's frame within the tick comes first,
/// for the workers of the tick's forecast; cleared, the tick's forecast
/// again. A pool that never wakes early publishes neither.
#[test]
fn the_next_graphs_frame_is_planned_before_the_next_tick() {
    let early = NextFrame::new(EarlyWake::Forecast);
    let jitter = 0.0;
    early.expect(
        Forecast {
            start: 10_000_000,
            jitter,
        },
        1,
        1.0,
    );
    // Relative: a million ticks after the worker runs out of work.
    early.expect_soon(
        Forecast {
            start: 1_000_000,
            jitter,
        },
        1.0,
    );
    let soon = early.plan(0, 5, Forecasts::Any).expect("a forecast");
    assert_eq!(soon.look_until, 1_000_005 + WINDOW_FLOOR_NANOS as u64);
    assert_eq!(soon.looking_for, LookFor::NextGraph);
    let tick = early.plan(0, 5, Forecasts::TickOnly).expect("the tick's");
    assert_eq!(tick.look_until, 10_000_000 + WINDOW_FLOOR_NANOS as u64);
    assert_eq!(tick.looking_for, LookFor::Tick);
    // The frame ends at 100: from then on the forecast counts from
    // there, and expires with its look.
    early.frame_ending(100);
    let soon = early.plan(0, 500_000, Forecasts::Any).expect("a forecast");
    assert_eq!(soon.look_until, 1_000_100 + WINDOW_FLOOR_NANOS as u64);
    let after = early
        .plan(0, soon.look_until, Forecasts::Any)
        .expect("the tick's");
    assert_eq!(after.looking_for, LookFor::Tick);
    early.expect_soon(
        Forecast {
            start: 1_000_000,
            jitter,
        },
        1.0,
    );
    early.clear_soon();
    let tick = early.plan(0, 5, Forecasts::Any).expect("the tick's");
    assert_eq!(tick.looking_for, LookFor::Tick);
    let never = NextFrame::new(EarlyWake::Never);
    never.expect_soon(
        Forecast {
            start: 1_000_000,
            jitter,
        },
        1.0,
    );
    assert_eq!(never.plan(0, 0, Forecasts::Any), None);
}

#[test]
fn measured_oversleep_moves_the_wake_up() {
    let early = NextFrame::new(EarlyWake::Forecast);
    let forecast = Forecast {
        start: 1_000_000,
        jitter: 0.0,
    };
    early.expect(forecast, 1, 1.0);
    for _ in 0..40 {
        early.record_oversleep(0, 10_000);
    }
    let plan = early.plan(0, 0, Forecasts::Any).unwrap();
    let lead = LEAD_FLOOR_NANOS as u64 + 10_000;
    assert!(plan.wake_at.abs_diff(1_000_000 - lead) < 100, "{plan:?}");
}

/// Spans are stored when their key differs from the published one,
/// and left alone when it matches (the same graph, frame after frame).
#[test]
fn spans_are_published_by_key() {
    use crate::sync::prefetch::{spans_key, MAX_SPANS};
    let early = NextFrame::new(EarlyWake::Forecast);
    let mut first = [Span::default(); MAX_SPANS];
    first[0] = Span {
        start: 0x1000,
        lines: 4,
    };
    early.set_spans(&first, spans_key(&first));
    assert_eq!(early.warming(Default::default()).step(usize::MAX), 4);
    let mut second = first;
    second[1] = Span {
        start: 0x9000,
        lines: 2,
    };
    early.set_spans(&second, spans_key(&second));
    assert_eq!(early.warming(Default::default()).step(usize::MAX), 6);
    // The same key again: nothing is stored, not even other spans.
    early.set_spans(&first, spans_key(&second));
    assert_eq!(early.warming(Default::default()).step(usize::MAX), 6);
}

#[test]
fn a_held_up_wake_up_does_not_stop_the_forecasts() {
    let early = NextFrame::new(EarlyWake::Forecast);
    let forecast = Forecast {
        start: 10_000_000,
        jitter: 20_000.0,
    };
    early.expect(forecast, 1, 1.0);
    // Timed parks held up for 5 ms, as a preempted vCPU's.
    for _ in 0..40 {
        early.record_oversleep(0, 5_000_000);
    }
    assert!(early.oversleep(1.0) <= MAX_OVERSLEEP_NANOS as u64);
    // The next frame of the same loop is still forecast, so its timed
    // park can measure the oversleep again.
    early.expect(forecast, 1, 1.0);
    assert!(early.plan(0, 0, Forecasts::Any).is_some());
}

#[test]
fn a_look_longer_than_the_limit_is_not_published() {
    let early = NextFrame::new(EarlyWake::Forecast);
    let forecast = Forecast {
        start: 10_000_000,
        jitter: MAX_LOOK_NANOS / 4.0,
    };
    early.expect(forecast, 1, 1.0);
    assert_eq!(early.plan(0, 0, Forecasts::Any), None);
}

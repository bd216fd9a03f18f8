//! Forecasts on a real pool: workers that wake on their own before a
//! forecast frame.

use super::*;
use crate::clock;
use crate::lane::Lane;
use crate::sync::prefetch;
use crate::sync::task::{Header, TaskRef};
use crate::Pool;
use std::ptr::NonNull;
use std::sync::atomic::AtomicUsize;
use std::time::Instant;

/// Runs of the test's task queued with no wake-up.
static RUNS: AtomicUsize = AtomicUsize::new(0);

/// Nanoseconds per tick, measured over `span`.
fn nanos_per_tick(span: Duration) -> f64 {
    let (t0, k0) = (Instant::now(), clock::ticks());
    std::thread::sleep(span);
    t0.elapsed().as_nanos() as f64 / clock::ticks().saturating_sub(k0).max(1) as f64
}

/// Waits until worker 0 is parked (polling, at most 10 s).
fn until_parked(pool: &Pool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !pool.shared().slots[0].counters.is_parked() {
        assert!(Instant::now() < deadline, "the worker never parked");
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// A worker that parks while a frame is forecast wakes on its own before
/// it and runs work that was queued without any wake-up. Without the
/// forecast that work would wait until the next wake-up (here: forever).
/// It warms before its first look (the pool's state first, then the
/// published spans; `sync/prefetch.rs`). A worker whose timer fires
/// after the forecast's window (a loaded machine) wakes, but has no time
/// left to warm in: up to three tries, each on a new pool, so that one
/// late timer does not fail the test.
#[test]
#[cfg_attr(
    miri,
    ignore = "timing policy: under Miri the clock counts interpreted steps"
)]
fn a_worker_wakes_for_a_forecast_frame_without_being_woken() {
    let mut tries = Vec::new();
    for _ in 0..3 {
        let stats = wake_for_a_forecast_frame();
        assert!(stats.early_wakes >= 1);
        if stats.warmed_lines >= crate::pool::wait::WARM_STEP_LINES as u64 {
            return;
        }
        tries.push(stats.warmed_lines);
    }
    panic!("the woken worker warmed {tries:?} lines in three tries");
}

/// Forecasts a frame 50 ms ahead to a pool of one parked worker, queues
/// a task without a wake-up, waits until it ran and returns the worker's
/// statistics.
fn wake_for_a_forecast_frame() -> crate::ThreadStats {
    let pool = Pool::builder().threads(1).build().unwrap();
    let shared = pool.shared();
    let nanos_per_tick = nanos_per_tick(Duration::from_millis(20));
    let ahead = (50_000_000.0 / nanos_per_tick) as u64;
    // A wide window (a jitter of 200 µs): a worker whose timed park
    // wakes late on a loaded machine still looks, and warms.
    let forecast = Forecast {
        start: clock::ticks() + ahead,
        jitter: 200_000.0 / nanos_per_tick,
    };
    let code = prefetch::code_spans(&[super::super::worker::run_worker as *const () as usize]);
    let data = [prefetch::Span::default(); prefetch::MAX_DATA_SPANS];
    let spans = prefetch::warm_spans(&data, &code);
    shared
        .next_frame
        .set_spans(&spans, prefetch::spans_key(&spans));
    shared.next_frame.expect(forecast, 1, nanos_per_tick);
    // The worker starts, runs a task and parks, reading the forecast.
    pool.spawn(Lane::Normal, || ()).unwrap().join().unwrap();
    until_parked(&pool);
    // Relaxed, the counter's uses: a count the test polls.
    let runs_before = RUNS.load(Ordering::Relaxed);
    // Queued where the worker looks, with no notify.
    let header: &'static Header = Box::leak(Box::new(Header::new(|_| {
        RUNS.fetch_add(1, Ordering::Relaxed);
    })));
    // SAFETY: the leaked header lives forever and is queued once.
    let task = unsafe { TaskRef::from_raw(NonNull::from(header)) };
    shared.injector[Lane::Normal.index()].push(task);
    let deadline = Instant::now() + Duration::from_secs(10);
    while RUNS.load(Ordering::Relaxed) == runs_before {
        assert!(
            Instant::now() < deadline,
            "the worker did not wake for the forecast frame"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    pool.stats().threads[0]
}

/// The forecast of the next frame is published before the frame's
/// nodes run, not after: a worker that runs out of work in the middle
/// of a frame (its share done while the frame's thread still runs a
/// long node) reads it to decide how long to park, and a forecast
/// published later would have it park for good and wake late for the
/// next frame. Every node records the forecast it sees, and each must
/// be the one the frame leaves behind (not none, and not the one for
/// the frame itself).
#[test]
#[cfg_attr(
    miri,
    ignore = "timing policy: under Miri the clock counts interpreted steps"
)]
fn the_next_frames_forecast_is_published_before_the_nodes_run() {
    let pool = Pool::builder().threads(1).build().unwrap();
    // Per node: the forecast start it saw, 0 for none.
    type Seen = [AtomicU64; 3];
    let spin = |node: usize, micros: u64| {
        move |cx: &crate::NodeContext<'_, Seen>| {
            let start = Instant::now();
            while start.elapsed() < Duration::from_micros(micros) {
                std::hint::spin_loop();
            }
            let next_frame = &cx.pool().shared().next_frame;
            let seen = match next_frame.plan(0, clock::ticks(), Forecasts::Any) {
                // Relaxed: a test read of the value `plan` just read.
                Some(_) => next_frame.inner.tick.start.load(Ordering::Relaxed),
                None => 0,
            };
            // Relaxed: read after the frame, whose end orders it.
            cx.data()[node].store(seen, Ordering::Relaxed);
        }
    };
    let mut builder = crate::TaskGraph::<Seen>::builder();
    builder.node("short", Lane::FrameCritical, spin(0, 200));
    builder.node("long", Lane::FrameCritical, spin(1, 600));
    builder
        .node("after", Lane::FrameCritical, spin(2, 200))
        .after(["short"]);
    let mut graph = builder.build().unwrap();
    // Until ten frames were forecast: a loop slowed by other work on
    // the machine (tests running beside this one) is not steady enough
    // to be forecast, so this may take many frames (once, in a workspace
    // run on the 2-core development VM, none of 600 was).
    let mut forecast_frames = 0;
    for _ in 0..2_000 {
        if forecast_frames == 10 {
            break;
        }
        let seen: Seen = std::array::from_fn(|_| AtomicU64::new(0));
        graph.run(&pool, &seen).unwrap();
        let next_frame = &pool.shared().next_frame;
        if next_frame.plan(0, clock::ticks(), Forecasts::Any).is_some() {
            forecast_frames += 1;
            // Relaxed: published by the frame's thread, this one.
            let left = next_frame.inner.tick.start.load(Ordering::Relaxed);
            // With the graph's code for the woken worker to warm.
            assert!(next_frame.warming(Default::default()).step(usize::MAX) > 0);
            for (node, seen) in seen.iter().enumerate() {
                assert_eq!(
                    seen.load(Ordering::Relaxed),
                    left,
                    "node {node} ran before the frame published the forecast it leaves"
                );
            }
        }
        std::thread::sleep(Duration::from_millis(6));
    }
    // One is enough for the check above to have run.
    assert!(forecast_frames > 0, "no frame was forecast");
}

/// A pool built with `EarlyWake::Never` gets no forecast from a paced
/// loop of shared frames, and its worker never wakes early.
#[test]
fn a_pool_that_never_wakes_early_gets_no_forecast() {
    let pool = Pool::builder()
        .threads(1)
        .early_wake(EarlyWake::Never)
        .build()
        .unwrap();
    let spin = |_: &crate::NodeContext<'_, ()>| {
        let start = Instant::now();
        while start.elapsed() < Duration::from_micros(300) {
            std::hint::spin_loop();
        }
    };
    let mut builder = crate::TaskGraph::<()>::builder();
    builder.node("a", Lane::FrameCritical, spin);
    builder.node("b", Lane::FrameCritical, spin);
    let mut graph = builder.build().unwrap();
    for _ in 0..12 {
        graph.run(&pool, &()).unwrap();
        assert_eq!(
            pool.shared()
                .next_frame
                .plan(0, clock::ticks(), Forecasts::Any),
            None
        );
        std::thread::sleep(Duration::from_millis(4));
    }
    assert_eq!(pool.stats().threads[0].early_wakes, 0);
}

/// A forecast whose tick rate is a hundred times too small (as after a
/// suspend that the tick counter counted and the monotonic clock did not):
/// the worker's timed park ends about 50 ms early by the tick clock. It
/// then parks for good instead of looking (a spin) until the forecast
/// frame. Before, it spun those 50 ms, and after a clock that went back,
/// for as long as the clock had run before.
#[test]
#[cfg_attr(
    miri,
    ignore = "timing policy: under Miri the clock counts interpreted steps"
)]
fn a_worker_whose_park_ends_long_before_the_forecast_parks_for_good() {
    let pool = Pool::builder().threads(1).build().unwrap();
    let shared = pool.shared();
    let nanos_per_tick = nanos_per_tick(Duration::from_millis(20));
    let ahead = (50_000_000.0 / nanos_per_tick) as u64;
    let forecast = Forecast {
        start: clock::ticks() + ahead,
        jitter: 200_000.0 / nanos_per_tick,
    };
    shared
        .next_frame
        .expect(forecast, 1, nanos_per_tick / 100.0);
    // The worker starts, runs a task and parks, reading the forecast.
    pool.spawn(Lane::Normal, || ()).unwrap().join().unwrap();
    // Past the forecast frame: a look, had there been one, has begun, and
    // ends before the worker parks again.
    std::thread::sleep(Duration::from_millis(80));
    until_parked(&pool);
    let stats = pool.stats().threads[0];
    assert_eq!(
        (stats.early_wakes, stats.early_wait),
        (0, Duration::ZERO),
        "the worker looked for the forecast frame"
    );
}

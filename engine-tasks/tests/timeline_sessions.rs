//! Timeline sessions started and stopped from two threads at once. A file
//! of its own: the recorder is the whole process's, and a session started
//! here would take another test's events.

use engine_tasks::{timeline, Lane, Pool};
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};
use std::sync::{mpsc, Barrier, Mutex};
use std::time::Duration;

/// Bytes allocated and not yet freed, process-wide.
static LIVE: AtomicIsize = AtomicIsize::new(0);

/// The system allocator, counting the bytes it has live.
struct Live;

// SAFETY: every call forwards to `System` with the caller's arguments, so
// `System`'s guarantees are ours; the count is a side effect.
unsafe impl GlobalAlloc for Live {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // Relaxed: a statistic, read after the threads it counts are done.
        LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: same contract as ours.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // Relaxed: as above.
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: same contract as ours.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // Relaxed: as above.
        LIVE.fetch_add(
            new_size as isize - layout.size() as isize,
            Ordering::Relaxed,
        );
        // SAFETY: same contract as ours.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Live = Live;

/// One test at a time: both start sessions.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// Recording is on exactly while a session is: a `start` racing a `stop`
/// never leaves recording on with no session (which made every
/// instrumented point take the sessions' lock until the next start).
#[test]
fn recording_is_on_exactly_while_a_session_is() {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    const ROUNDS: usize = 20_000;
    let (go, raced, checked) = (Barrier::new(2), Barrier::new(2), Barrier::new(2));
    // Rounds that ended recording with no session (or the other way).
    let mut wrong = Vec::new();
    std::thread::scope(|s| {
        s.spawn(|| {
            for _ in 0..ROUNDS {
                go.wait();
                let _ = timeline::start();
                raced.wait();
                checked.wait();
            }
        });
        for round in 0..ROUNDS {
            go.wait();
            let _ = timeline::stop();
            raced.wait();
            let recording = timeline::is_recording();
            let session = timeline::stop();
            if recording != session.is_some() {
                wrong.push(round);
            }
            checked.wait();
        }
    });
    assert!(wrong.is_empty(), "rounds {wrong:?}");
}

/// Dropping a `Timeline` frees its threads' buffers, also those of threads
/// that live on, parked inside a span begun in the session: a game that
/// records a few seconds once keeps none of it. Before, each thread held
/// its last buffer until it recorded in another session or exited, and a
/// parked worker's open span held it until the worker woke.
#[test]
fn dropping_a_timeline_frees_the_buffers_of_threads_that_live_on() {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    const EVENTS: usize = 1 << 20;
    let pool = Pool::builder().threads(1).build().unwrap();
    // Start the worker and let every lazy allocation happen first.
    pool.spawn(Lane::Normal, || ()).unwrap().join().unwrap();
    // Relaxed: this thread's own reads; the worker's allocations before its
    // first park are done once its task has started (below), and it makes
    // none while parked.
    let before = LIVE.load(Ordering::Relaxed);
    timeline::start_with_capacity(EVENTS).unwrap();
    // A task on the worker (this thread does not wait in the pool while it
    // runs), after which the worker parks inside a span of this session.
    let (started, has_started) = mpsc::channel();
    let (go, wait_for_go) = mpsc::channel::<()>();
    let task = pool
        .spawn(Lane::Normal, move || {
            started.send(()).unwrap();
            wait_for_go.recv().unwrap();
        })
        .unwrap();
    has_started.recv().unwrap();
    let parks = pool.stats().parks();
    go.send(()).unwrap();
    while pool.stats().parks() == parks {
        std::thread::sleep(Duration::from_millis(1));
    }
    // The park's count comes just before its span begins; let it begin, so
    // that the worker sleeps inside it (the test holds either way).
    std::thread::sleep(Duration::from_millis(5));
    assert!(task.is_finished());
    let recorded = timeline::stop().expect("the session ran");
    assert_eq!(recorded.count("task").events, 1);
    let while_held = LIVE.load(Ordering::Relaxed);
    let buffers = while_held - before;
    assert!(
        buffers >= EVENTS as isize,
        "the buffers took {buffers} bytes; at least the worker's is {EVENTS} events"
    );
    drop(recorded);
    let after = LIVE.load(Ordering::Relaxed);
    assert!(
        after - before < (EVENTS / 8) as isize,
        "{} of the session's {buffers} bytes are still allocated after its timeline \
         was dropped, with the worker parked",
        after - before
    );
    drop(task);
    // Recording works as before in the next session.
    timeline::start_with_capacity(EVENTS).unwrap();
    pool.spawn(Lane::Normal, || ()).unwrap().join().unwrap();
    assert!(timeline::stop().unwrap().count("task").events >= 1);
}

//! Injected faults against the asset streamer and the pools. A file of its
//! own: a fault plan applies to the whole process.

use engine_tasks::assets::{encode_asset, AssetErrorKind, AssetStreamer};
use engine_tasks::faults::{self, FaultPlan, Site};
use engine_tasks::{BlockingPool, Lane, Pool};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

mod common;

#[test]
fn a_panic_in_a_decode_task_ends_the_request_as_interrupted() {
    let dir = std::env::temp_dir().join(format!("engine-tasks-faults-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("a"), encode_asset(&[7u8; 1000])).unwrap();
    let pool = Pool::builder().threads(1).build().unwrap();
    let blocking = BlockingPool::new();
    let streamer = AssetStreamer::new(&dir, &pool, &blocking, 1).unwrap();

    // Every pool task now panics before its body: the decode task never
    // runs, and its request must still end, exactly once.
    faults::set_plan(FaultPlan {
        task_body: 1_000_000,
        ..FaultPlan::default()
    });
    let id = streamer.request("a", 0);
    let mut events = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while events.is_empty() {
        assert!(Instant::now() < deadline, "the request never ended");
        streamer.drain(&mut events);
        std::thread::sleep(Duration::from_millis(1));
    }
    faults::set_plan(FaultPlan::default());
    assert_eq!(events.len(), 1);
    let err = events.pop().unwrap().unwrap_err();
    assert_eq!(err.id, id);
    assert!(matches!(err.kind, AssetErrorKind::Interrupted), "{err}");
    assert!(!streamer.cancel(id), "the request has ended");
    assert!(faults::fired(Site::TaskBody) >= 1);

    // The pool still works afterwards.
    assert_eq!(pool.spawn(Lane::Normal, || 3).unwrap().join().unwrap(), 3);
    let _ = std::fs::remove_dir_all(&dir);
}

/// How one race of [`a_spawn_that_races_the_pools_drop_from_a_guest_slot_still_runs`] went.
enum Race {
    /// The worker left before the spawn's push, and the task then ran.
    Raced,
    /// The worker was still there at the push (the host held a thread up):
    /// it could run the task itself, so the case tells nothing.
    WorkerStayed,
}

/// One race on a new pool: see the test. Fails if the task never runs.
fn race_a_spawn_against_the_pools_drop() -> Race {
    let exited = Arc::new(AtomicBool::new(false));
    let on_exit = exited.clone();
    let pool = Pool::builder()
        .threads(1)
        .spawn_with(move |spec, main| {
            let on_exit = on_exit.clone();
            std::thread::Builder::new().name(spec.name).spawn(move || {
                main();
                on_exit.store(true, Ordering::SeqCst);
            })
        })
        .build()
        .unwrap();
    let handle = pool.handle();
    let owner = Mutex::new(Some(pool));
    let ran = Arc::new(AtomicBool::new(false));
    let (dropper_started, gave_up) = (AtomicBool::new(false), AtomicBool::new(false));
    let fired_before = faults::fired(Site::SpawnPush);
    faults::set_plan(FaultPlan {
        spawn_push: 1_000_000,
        ..FaultPlan::default()
    });
    let (pushed_after_exit, _) = handle.join(
        || {
            // The worker takes the other half once it has started. If it
            // has not within half the watchdog's time, this thread runs
            // that half after this one, and the case fails.
            let waited = Instant::now();
            while !dropper_started.load(Ordering::SeqCst) {
                if waited.elapsed() > common::WATCHDOG / 2 {
                    gave_up.store(true, Ordering::SeqCst);
                    return None;
                }
                std::hint::spin_loop();
            }
            let task_ran = ran.clone();
            let spawned =
                handle.spawn(Lane::Normal, move || task_ran.store(true, Ordering::SeqCst));
            assert!(spawned.is_ok(), "the pool was open at the spawn's check");
            Some(exited.load(Ordering::SeqCst) && !ran.load(Ordering::SeqCst))
        },
        || {
            dropper_started.store(true, Ordering::SeqCst);
            // The spawn is in its pause from here.
            while faults::fired(Site::SpawnPush) == fired_before && !gave_up.load(Ordering::SeqCst)
            {
                std::hint::spin_loop();
            }
            drop(owner.lock().unwrap().take());
        },
    );
    faults::set_plan(FaultPlan::default());
    let pushed_after_exit =
        pushed_after_exit.expect("the worker never took the half that drops the pool");
    // A worker still there may run the task a little after the join.
    let waited = Instant::now();
    while !ran.load(Ordering::SeqCst) && waited.elapsed() < Duration::from_secs(1) {
        std::thread::sleep(Duration::from_millis(1));
    }
    assert!(
        ran.load(Ordering::SeqCst),
        "the task pushed during the pool's drop never ran"
    );
    if pushed_after_exit {
        Race::Raced
    } else {
        Race::WorkerStayed
    }
}

/// An outside thread waits on a `join` as the pool's guest; its first half
/// spawns a task just as the second half, on the worker, drops the pool.
/// The spawn found the pool open and paused (`Site::SpawnPush`) while the
/// drop ran the queued tasks and returned (a drop inside one of the pool's
/// own tasks waits for nobody) and the worker left; then it pushed into
/// the guest slot's own queue. The guest runs that task as it leaves the
/// slot. Before, the task stayed there, never run and never dropped. A
/// race in which the worker was still there at the push is run again, up
/// to 20 times.
#[test]
fn a_spawn_that_races_the_pools_drop_from_a_guest_slot_still_runs() {
    common::in_child_process(
        "a_spawn_that_races_the_pools_drop_from_a_guest_slot_still_runs",
        || {
            for _ in 0..20 {
                if let Race::Raced = race_a_spawn_against_the_pools_drop() {
                    return;
                }
            }
            eprintln!("skipped: in no race did the worker leave before the push");
        },
    );
}

/// The blocking job that reads files panics before its body runs (an
/// injected fault), and leaves two requests waiting with no reader: they
/// end as `Interrupted`, each once. Before, they ended as
/// `PoolUnavailable`, which says the pools are shutting down, and nothing
/// was. Once the fault is gone, the streamer reads again.
#[test]
fn requests_a_panicking_reader_leaves_end_as_interrupted() {
    common::in_child_process(
        "requests_a_panicking_reader_leaves_end_as_interrupted",
        || {
            let dir = std::env::temp_dir()
                .join(format!("engine-tasks-faults-reader-{}", std::process::id()));
            std::fs::create_dir_all(&dir).unwrap();
            for name in ["a", "b"] {
                std::fs::write(dir.join(name), encode_asset(&[7u8; 100])).unwrap();
            }
            let pool = Pool::builder().threads(1).build().unwrap();
            let blocking = BlockingPool::new();
            let streamer = AssetStreamer::new(&dir, &pool, &blocking, 1).unwrap();
            let drain = |n: usize| {
                let mut events = Vec::new();
                let deadline = Instant::now() + Duration::from_secs(30);
                while events.len() < n {
                    assert!(Instant::now() < deadline, "a request never ended");
                    streamer.drain(&mut events);
                    std::thread::sleep(Duration::from_millis(1));
                }
                events
            };

            faults::set_plan(FaultPlan {
                blocking_body: 1_000_000,
                ..FaultPlan::default()
            });
            let ids = [streamer.request("a", 0), streamer.request("b", 0)];
            let events = drain(2);
            faults::set_plan(FaultPlan::default());
            assert!(faults::fired(Site::BlockingBody) >= 1);
            let mut ended: Vec<_> = events
                .into_iter()
                .map(|event| {
                    let err = event.expect_err("nothing was read");
                    assert!(matches!(err.kind, AssetErrorKind::Interrupted), "{err}");
                    err.id
                })
                .collect();
            ended.sort_by_key(|id| id.0);
            assert_eq!(ended, ids, "each request ends once");
            let p = streamer.progress();
            assert_eq!((p.requested, p.failed), (2, 2));

            let again = streamer.request("a", 0);
            let event = drain(1).pop().unwrap();
            let asset = event.expect("read once the fault is gone");
            assert_eq!((asset.id, asset.data), (again, vec![7u8; 100]));
            let _ = std::fs::remove_dir_all(&dir);
        },
    );
}

//! Behaviour of the public pool API.

use engine_tasks::{BuildError, CancellationToken, JoinError, Lane, Pool, MAX_THREADS};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::Arc;

mod common;
use common::fib;

fn pool(threads: usize) -> Pool {
    Pool::builder().threads(threads).build().unwrap()
}

#[test]
fn spawn_returns_results_in_every_lane() {
    let pool = pool(2);
    let handles: Vec<_> = Lane::ALL
        .iter()
        .flat_map(|&lane| (0..100u64).map(move |i| (lane, i)))
        .map(|(lane, i)| pool.spawn(lane, move || i * 2).unwrap())
        .collect();
    let sum: u64 = handles.into_iter().map(|h| h.join().unwrap()).sum();
    assert_eq!(sum, 3 * (0..100u64).map(|i| i * 2).sum::<u64>());
}

#[test]
fn panics_come_back_to_the_joiner_and_workers_survive() {
    let pool = pool(2);
    for round in 0..50 {
        let handle = pool
            .spawn(Lane::Normal, move || -> u32 { panic!("boom {round}") })
            .unwrap();
        let err = handle.join().unwrap_err();
        assert!(err.is_panic());
        assert_eq!(err.panic_message(), Some(format!("boom {round}").as_str()));
    }
    // The workers are still alive and running tasks.
    let handle = pool.spawn(Lane::Normal, || 7).unwrap();
    assert_eq!(handle.join().unwrap(), 7);
    let stats = pool.stats();
    assert_eq!(stats.total().executed, 51);
}

#[test]
fn join_and_scope_reraise_panics_after_all_work_finished() {
    let pool = pool(2);
    let finished = AtomicUsize::new(0);
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        pool.scope(|s| {
            for i in 0..64 {
                let finished = &finished;
                s.spawn(move |_| {
                    if i == 10 {
                        panic!("scope task failed");
                    }
                    finished.fetch_add(1, Ordering::Relaxed);
                });
            }
        })
    }));
    let payload = result.unwrap_err();
    assert_eq!(
        engine_tasks::panic_message(payload.as_ref()),
        Some("scope task failed")
    );
    assert_eq!(finished.load(Ordering::Relaxed), 63);

    let other = AtomicUsize::new(0);
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        pool.join(
            || panic!("left failed"),
            || {
                other.fetch_add(1, Ordering::Relaxed);
            },
        )
    }));
    assert!(result.is_err());
    assert_eq!(
        other.load(Ordering::Relaxed),
        1,
        "b ran although a panicked"
    );
}

#[test]
fn scope_tasks_borrow_the_callers_stack() {
    let pool = pool(3);
    let mut data = vec![1u64; 10_000];
    pool.scope(|s| {
        for chunk in data.chunks_mut(1000) {
            s.spawn(move |s| {
                let (left, right) = chunk.split_at_mut(500);
                s.spawn(move |_| left.iter_mut().for_each(|x| *x *= 2));
                right.iter_mut().for_each(|x| *x *= 3);
            });
        }
    });
    assert_eq!(data.iter().sum::<u64>(), 5000 * 2 + 5000 * 3);
}

/// A worker that ran scope tasks keeps their counts as credit; before it
/// starts an unrelated task it must give them back, or a task that blocks
/// until the scope's owner moves on would hold the scope open forever. Here
/// a background task blocks until the owner's scope has returned.
#[test]
fn scope_ends_while_a_worker_blocks_in_an_unrelated_task() {
    let pool = pool(1);
    for _ in 0..200 {
        let (tx, rx) = mpsc::channel::<()>();
        let rx = std::sync::Mutex::new(Some(rx));
        let blocker = std::sync::Mutex::new(None);
        pool.scope(|s| {
            for _ in 0..16 {
                s.spawn(|_| {
                    // Background: the scope's owner waits in the normal
                    // lane and never runs it; the worker does.
                    if let Some(rx) = rx.lock().unwrap().take() {
                        let handle = pool
                            .spawn(Lane::Background, move || {
                                rx.recv_timeout(std::time::Duration::from_secs(30)).is_ok()
                            })
                            .unwrap();
                        *blocker.lock().unwrap() = Some(handle);
                    }
                });
            }
        });
        tx.send(()).unwrap();
        let handle = blocker.lock().unwrap().take().unwrap();
        assert!(
            handle.join().unwrap(),
            "the scope outlived the blocker's wait"
        );
    }
}

#[test]
fn join_computes_fib() {
    let pool = pool(3);
    // Under Miri, which interprets each step, a smaller tree.
    let (n, expected) = if cfg!(miri) { (12, 144) } else { (22, 17711) };
    assert_eq!(fib(&pool, n), expected);
}

#[test]
fn parallel_for_visits_every_index_once() {
    let pool = pool(3);
    // Under Miri, which interprets each step, fewer indices.
    let indices = if cfg!(miri) { 2_000 } else { 100_000 };
    let hits: Vec<AtomicUsize> = (0..indices).map(|_| AtomicUsize::new(0)).collect();
    pool.parallel_for(0..hits.len(), 64, |i| {
        hits[i].fetch_add(1, Ordering::Relaxed);
    });
    assert!(hits.iter().all(|h| h.load(Ordering::Relaxed) == 1));
    // A grain of zero counts as one; an empty range does nothing.
    let count = AtomicUsize::new(0);
    pool.parallel_for(0..100, 0, |_| {
        count.fetch_add(1, Ordering::Relaxed);
    });
    pool.parallel_for(5..5, 10, |_| unreachable!());
    assert_eq!(count.load(Ordering::Relaxed), 100);
}

#[test]
fn free_functions_use_the_current_pool_inside_tasks() {
    let pool = pool(2);
    let sum = pool
        .spawn(Lane::Normal, || {
            let total = AtomicUsize::new(0);
            engine_tasks::parallel_for(0..1000, 10, |i| {
                total.fetch_add(i, Ordering::Relaxed);
            });
            let (a, b) = engine_tasks::join(|| 1, || 2);
            total.load(Ordering::Relaxed) + a + b
        })
        .unwrap()
        .join()
        .unwrap();
    assert_eq!(sum, 499_500 + 3);
    // Outside any pool they run on the default pool.
    let (a, b) = engine_tasks::join(|| "a", || "b");
    assert_eq!((a, b), ("a", "b"));
}

#[test]
fn cancellation_before_start_skips_the_task() {
    let pool = pool(1);
    // Occupy the only worker and the main thread's view so the task queues.
    let (release_tx, release_rx) = mpsc::channel::<()>();
    let gate = pool
        .spawn(Lane::FrameCritical, move || release_rx.recv().unwrap())
        .unwrap();
    let token = CancellationToken::new();
    let ran = Arc::new(AtomicUsize::new(0));
    let handle = {
        let ran = ran.clone();
        pool.spawn_cancellable(Lane::Background, &token, move |_| {
            ran.fetch_add(1, Ordering::Relaxed);
        })
        .unwrap()
    };
    token.cancel();
    release_tx.send(()).unwrap();
    gate.join().unwrap();
    assert!(matches!(handle.join(), Err(JoinError::Cancelled)));
    assert_eq!(ran.load(Ordering::Relaxed), 0);
}

#[test]
fn running_task_observes_cancellation() {
    let pool = pool(2);
    let token = CancellationToken::new();
    let (started_tx, started_rx) = mpsc::channel();
    let handle = pool
        .spawn_cancellable(Lane::Background, &token, move |token| {
            started_tx.send(()).unwrap();
            let mut spins = 0u64;
            while !token.is_cancelled() {
                spins += 1;
                std::hint::spin_loop();
            }
            spins
        })
        .unwrap();
    started_rx.recv().unwrap();
    token.cancel();
    handle.join().unwrap();
}

#[test]
fn spawn_after_shutdown_returns_the_task() {
    let pool = pool(2);
    let handle = pool.handle();
    drop(pool);
    let err = handle.spawn(Lane::Normal, || 5).unwrap_err();
    assert_eq!(
        err.to_string(),
        "the pool is shut down; the task was not spawned"
    );
    assert_eq!((err.into_inner())(), 5);
}

struct CountsDrops(Arc<AtomicUsize>);

impl Drop for CountsDrops {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }
}

#[test]
fn shutdown_runs_every_queued_task_and_drops_every_closure() {
    for threads in [0, 1, 3] {
        let ran = Arc::new(AtomicUsize::new(0));
        let dropped = Arc::new(AtomicUsize::new(0));
        let pool = pool(threads);
        for i in 0..1000 {
            let ran = ran.clone();
            let guard = CountsDrops(dropped.clone());
            let lane = Lane::ALL[i % 3];
            // Detached: the handles are dropped at once.
            drop(
                pool.spawn(lane, move || {
                    let _guard = guard;
                    ran.fetch_add(1, Ordering::Relaxed);
                })
                .unwrap(),
            );
        }
        drop(pool);
        assert_eq!(ran.load(Ordering::Relaxed), 1000, "threads = {threads}");
        assert_eq!(dropped.load(Ordering::Relaxed), 1000, "threads = {threads}");
    }
}

#[test]
fn results_of_unjoined_tasks_are_dropped() {
    let dropped = Arc::new(AtomicUsize::new(0));
    let pool = pool(2);
    let handles: Vec<_> = (0..100)
        .map(|_| {
            let dropped = dropped.clone();
            pool.spawn(Lane::Normal, move || CountsDrops(dropped))
                .unwrap()
        })
        .collect();
    drop(handles);
    drop(pool);
    assert_eq!(dropped.load(Ordering::Relaxed), 100);
}

#[test]
fn zero_worker_pool_runs_work_on_the_waiting_thread() {
    let pool = pool(0);
    let handle = pool.spawn(Lane::Background, || 3).unwrap();
    assert_eq!(handle.join().unwrap(), 3);
    assert_eq!(fib(&pool, 15), 610);
    let stats = pool.stats();
    assert_eq!(stats.threads_started, 0);
}

#[test]
fn bad_configurations_are_refused_with_clear_errors() {
    let err = Pool::builder()
        .threads(MAX_THREADS + 1)
        .build()
        .unwrap_err();
    assert_eq!(
        err,
        BuildError::TooManyThreads {
            requested: MAX_THREADS + 1,
            max: MAX_THREADS
        }
    );
    assert!(err.to_string().contains("the most a pool supports is 63"));
    let err = Pool::builder().stack_size(1024).build().unwrap_err();
    assert!(matches!(
        err,
        BuildError::StackTooSmall {
            requested: 1024,
            ..
        }
    ));
    let err = Pool::builder()
        .threads(4)
        .background_cap(0)
        .build()
        .unwrap_err();
    assert_eq!(
        err,
        BuildError::InvalidBackgroundCap {
            requested: 0,
            max: 4
        }
    );
    let err = Pool::builder()
        .threads(2)
        .background_cap(3)
        .build()
        .unwrap_err();
    assert_eq!(
        err,
        BuildError::InvalidBackgroundCap {
            requested: 3,
            max: 2
        }
    );
    let err = Pool::builder().thread_name_prefix("").build().unwrap_err();
    assert_eq!(err, BuildError::EmptyThreadName);
    let err = Pool::builder()
        .thread_name_prefix("sim\0")
        .build()
        .unwrap_err();
    assert_eq!(err, BuildError::NulInThreadName);
    // The defaults are valid.
    let pool = Pool::new();
    assert!(pool.threads() >= 1);
}

#[test]
fn worker_threads_carry_the_configured_names() {
    let pool = Pool::builder()
        .threads(1)
        .thread_name_prefix("sim-worker")
        .stack_size(256 * 1024)
        .build()
        .unwrap();
    let (tx, rx) = mpsc::channel();
    // A task that only a worker thread can run: the main thread does not
    // wait in the pool here.
    drop(
        pool.spawn(Lane::Normal, move || {
            tx.send(std::thread::current().name().map(str::to_owned))
                .unwrap();
        })
        .unwrap(),
    );
    assert_eq!(rx.recv().unwrap().as_deref(), Some("sim-worker-0"));
}

#[test]
fn stats_count_every_task() {
    let pool = pool(2);
    // Under Miri, which interprets each step, fewer tasks.
    let (tasks, indices) = if cfg!(miri) {
        (600, 1_000)
    } else {
        (5000, 10_000)
    };
    let handles: Vec<_> = (0..tasks)
        .map(|i| pool.spawn(Lane::ALL[i % 3], || ()).unwrap())
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    pool.parallel_for(0..indices, 1, |_| {});
    let stats = pool.stats();
    let total = stats.total();
    assert_eq!(total.spawned, total.executed);
    assert!(stats.lane(Lane::FrameCritical).executed >= (tasks as u64).div_ceil(3));
    assert_eq!(stats.threads.len(), 3, "two workers and the guest slot");
}

#[test]
fn background_cap_limits_concurrent_background_tasks() {
    let pool = Pool::builder()
        .threads(3)
        .background_cap(1)
        .build()
        .unwrap();
    let running = Arc::new(AtomicUsize::new(0));
    let peak = Arc::new(AtomicUsize::new(0));
    let handles: Vec<_> = (0..40)
        .map(|_| {
            let (running, peak) = (running.clone(), peak.clone());
            pool.spawn(Lane::Background, move || {
                let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                peak.fetch_max(now, Ordering::SeqCst);
                std::thread::sleep(std::time::Duration::from_micros(200));
                running.fetch_sub(1, Ordering::SeqCst);
            })
            .unwrap()
        })
        .collect();
    // Frame-critical work still gets workers while background work runs.
    let urgent: Vec<_> = (0..100)
        .map(|i| pool.spawn(Lane::FrameCritical, move || i).unwrap())
        .collect();
    assert_eq!(
        urgent.into_iter().map(|h| h.join().unwrap()).sum::<i32>(),
        4950
    );
    for h in handles {
        h.join().unwrap();
    }
    assert_eq!(peak.load(Ordering::SeqCst), 1);
}

#[test]
fn one_worker_runs_lanes_in_priority_order() {
    let pool = pool(1);
    let (gate_tx, gate_rx) = mpsc::channel::<()>();
    let (started_tx, started_rx) = mpsc::channel::<()>();
    let gate = pool
        .spawn(Lane::FrameCritical, move || {
            started_tx.send(()).unwrap();
            gate_rx.recv().unwrap();
        })
        .unwrap();
    started_rx.recv().unwrap();
    let order = Arc::new(std::sync::Mutex::new(Vec::new()));
    let (done_tx, done_rx) = mpsc::channel();
    // Submitted least urgent first, while the only worker is busy.
    for lane in [Lane::Background, Lane::Normal, Lane::FrameCritical] {
        for _ in 0..200 {
            let (order, done_tx) = (order.clone(), done_tx.clone());
            drop(
                pool.spawn(lane, move || {
                    order.lock().unwrap().push(lane);
                    done_tx.send(()).unwrap();
                })
                .unwrap(),
            );
        }
    }
    // Wait without helping, so that only the worker runs tasks.
    gate_tx.send(()).unwrap();
    for _ in 0..600 {
        done_rx.recv().unwrap();
    }
    gate.join().unwrap();
    let order = order.lock().unwrap();
    assert!(
        order.windows(2).all(|w| w[0] <= w[1]),
        "lanes ran out of order"
    );
}

#[test]
fn spawn_batch_runs_every_task_in_order_of_handles() {
    let pool = pool(2);
    // Under Miri, which interprets each step, smaller batches.
    let (outer, inner) = if cfg!(miri) { (500, 100) } else { (5000, 1000) };
    // From outside the pool: one injector push.
    let handles = pool
        .spawn_batch(Lane::Normal, (0..outer).map(|i| move || i * i))
        .unwrap();
    let results: Vec<u64> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    assert_eq!(results, (0..outer).map(|i| i * i).collect::<Vec<_>>());
    // From inside a task: onto the worker's own queues.
    let handle = pool.handle();
    let inner_sum = pool
        .spawn(Lane::Normal, move || {
            handle
                .spawn_batch(Lane::FrameCritical, (0..inner).map(|i| move || i))
                .unwrap()
                .into_iter()
                .map(|h| h.join().unwrap())
                .sum::<u64>()
        })
        .unwrap()
        .join()
        .unwrap();
    assert_eq!(inner_sum, (inner - 1) * inner / 2);
    // After shutdown every closure comes back.
    let handle = pool.handle();
    drop(pool);
    let err = handle
        .spawn_batch(Lane::Normal, (0..3).map(|i| move || i))
        .unwrap_err();
    let back: Vec<i32> = err.into_inner().into_iter().map(|f| f()).collect();
    assert_eq!(back, vec![0, 1, 2]);
}

#[test]
fn handle_spawned_inside_a_zero_thread_pool_is_joined_from_outside() {
    // The task sits in the guest's queues once `join` returns; joining its
    // handle from outside must run it, not sleep forever.
    let pool = pool(0);
    let (handle, ()) = pool.join(|| pool.spawn(Lane::Normal, || 5).unwrap(), || ());
    assert_eq!(handle.join().unwrap(), 5);
}

#[test]
fn handle_from_one_pool_joined_inside_another() {
    let p = pool(1);
    let q = pool(1);
    let (handle, ()) = p.join(|| p.spawn(Lane::Normal, || 7).unwrap(), || ());
    let value = q.scope(|_| handle.join().unwrap());
    drop(q);
    assert_eq!(value, 7);
}

#[test]
fn cancellable_spawn_after_shutdown_returns_the_closure() {
    let pool = pool(1);
    let handle = pool.handle();
    drop(pool);
    let token = CancellationToken::new();
    let err = handle
        .spawn_cancellable(Lane::Normal, &token, |_| 9)
        .unwrap_err();
    assert_eq!((err.into_inner())(&token), 9);
}

#[test]
fn a_panicking_spawn_function_counts_as_a_failed_spawn() {
    let pool = Pool::builder()
        .threads(2)
        .spawn_with(|_, _| panic!("no threads today"))
        .build()
        .unwrap();
    let h = pool.spawn(Lane::Normal, || 1).unwrap();
    assert_eq!(h.join().unwrap(), 1);
    assert_eq!(pool.stats().spawn_failures, 1);
}

type Kept = Arc<std::sync::Mutex<Option<Box<dyn FnOnce() + Send>>>>;

/// A two-thread pool whose spawn function keeps its first worker's
/// function and answers `Ok` (with the handle of a thread that has already
/// ended), and starts every later worker; and where the kept function is.
fn pool_keeping_its_first_worker() -> (Pool, Kept) {
    let kept: Kept = Arc::default();
    let slot = kept.clone();
    let calls = AtomicUsize::new(0);
    let pool = Pool::builder()
        .threads(2)
        .spawn_with(move |spec, main| {
            if calls.fetch_add(1, Ordering::SeqCst) == 0 {
                *slot.lock().unwrap() = Some(main);
                return Ok(std::thread::spawn(|| ()));
            }
            std::thread::Builder::new().name(spec.name).spawn(main)
        })
        .build()
        .unwrap();
    (pool, kept)
}

/// Drops the kept function unrun, out of the lock first: the drop may start
/// a thread, and a spawn function may take the same lock.
fn drop_unrun(kept: &Kept) {
    let function = kept.lock().unwrap().take();
    drop(function.expect("the first worker's function was kept"));
}

/// The kept function is dropped unrun: the pool runs that worker on a
/// plain thread, so the searcher token the worker inherited is not lost
/// with it, and the pool goes on waking threads.
#[test]
fn a_worker_whose_function_is_dropped_unrun_after_it_was_counted_still_runs() {
    let (pool, kept) = pool_keeping_its_first_worker();
    let (tx, rx) = mpsc::channel();
    for i in 0..100 {
        let tx = tx.clone();
        // Detached: each task reports on the channel.
        drop(
            pool.spawn(Lane::Background, move || tx.send(i).unwrap())
                .unwrap(),
        );
    }
    drop_unrun(&kept);
    let mut got: Vec<i32> = (0..100)
        .map(|_| {
            rx.recv_timeout(std::time::Duration::from_secs(60))
                .expect("a task was never run")
        })
        .collect();
    got.sort_unstable();
    assert_eq!(got, (0..100).collect::<Vec<_>>());
    assert_eq!(pool.stats().spawn_failures, 0);
    // The stand-in is joined with the other workers.
    drop(pool);
}

/// The kept function is dropped unrun after the pool was dropped: no
/// stand-in starts, and the tasks queued meanwhile ran in the drop.
#[test]
fn a_worker_function_dropped_unrun_after_shutdown_starts_nothing() {
    let (pool, kept) = pool_keeping_its_first_worker();
    let ran = Arc::new(AtomicUsize::new(0));
    for _ in 0..10 {
        let ran = ran.clone();
        drop(
            pool.spawn(Lane::Background, move || {
                ran.fetch_add(1, Ordering::SeqCst);
            })
            .unwrap(),
        );
    }
    let stats = pool.handle();
    drop(pool);
    assert_eq!(
        ran.load(Ordering::SeqCst),
        10,
        "the drop ran what was queued"
    );
    drop_unrun(&kept);
    assert_eq!(stats.stats().spawn_failures, 1);
}

#[test]
fn parallel_chunks_mut_hands_out_every_item_once() {
    let pool = pool(2);
    for (len, chunk) in [
        (0usize, 4usize),
        (1, 4),
        (10, 3),
        (1000, 7),
        (4096, 64),
        (5, 0),
    ] {
        let mut data = vec![0u32; len];
        let seen = AtomicUsize::new(0);
        pool.parallel_chunks_mut(&mut data, chunk, |k, piece| {
            let chunk = chunk.max(1);
            assert!(piece.len() <= chunk && !piece.is_empty());
            for (j, x) in piece.iter_mut().enumerate() {
                *x += (k * chunk + j) as u32 + 1;
            }
            seen.fetch_add(piece.len(), Ordering::Relaxed);
        });
        assert_eq!(seen.load(Ordering::Relaxed), len);
        assert!(data.iter().enumerate().all(|(i, &x)| x == i as u32 + 1));
    }
}

/// Inside `forbid_waits`, every wait panics at its start with a message
/// that names it and the region, on any thread (a worker's task, or a
/// thread outside the pool), even when what it waits for is done; outside
/// the region the same waits run.
#[test]
fn every_wait_panics_inside_a_region_that_forbids_waits() {
    use engine_tasks::{forbid_waits, panic_message, BlockingPool, TaskGraph};
    type Wait = Box<dyn Fn(&Pool) + Send + Sync>;
    let waits: Vec<(&str, Wait)> = vec![
        (
            "`join`",
            Box::new(|p| assert_eq!(p.join(|| 1, || 2), (1, 2))),
        ),
        (
            "`join`",
            Box::new(|_| assert_eq!(engine_tasks::join(|| 1, || 2), (1, 2))),
        ),
        ("`scope`", Box::new(|p| p.scope(|s| s.spawn(|_| ())))),
        ("`scope`", Box::new(|_| engine_tasks::scope(|_| ()))),
        (
            "`parallel_for`",
            Box::new(|p| p.parallel_for(0..0, 1, |_| ())),
        ),
        (
            "`parallel_for`",
            Box::new(|_| engine_tasks::parallel_for(0..4, 1, |_| ())),
        ),
        (
            "`parallel_chunks_mut`",
            Box::new(|p| p.parallel_chunks_mut(&mut [1, 2, 3], 8, |_, _| ())),
        ),
        (
            "`JoinHandle::join`",
            Box::new(|p| {
                let task = p.spawn(Lane::Normal, || ()).unwrap();
                while !task.is_finished() {
                    std::thread::yield_now();
                }
                task.join().unwrap();
            }),
        ),
        (
            "`BlockingTask::wait`",
            Box::new(|_| drop(BlockingPool::new().spawn(|| ()).unwrap().wait())),
        ),
        (
            "dropping a `Pool`",
            // Refused, the pool is left running: its thread parks for good.
            Box::new(|_| drop(pool(1))),
        ),
        (
            "shutting a `BlockingPool` down",
            Box::new(|_| BlockingPool::new().shutdown()),
        ),
        (
            "`TaskGraph::run`",
            Box::new(|p| {
                let mut b = TaskGraph::<()>::builder();
                b.node("n", Lane::Normal, |_| ());
                b.build().unwrap().run(p, &()).unwrap();
            }),
        ),
    ];
    let pool = Arc::new(pool(2));
    let waits = Arc::new(waits);
    for (i, (name, _)) in waits.iter().enumerate() {
        let in_region = {
            let (pool, waits) = (pool.clone(), waits.clone());
            move || forbid_waits("the test's region", || (waits[i].1)(&pool))
        };
        // On this thread, outside the pool, and in one of its tasks.
        let outside = std::panic::catch_unwind(std::panic::AssertUnwindSafe(&in_region));
        let inside = pool.spawn(Lane::Normal, in_region).unwrap().join();
        let inside = inside.unwrap_err();
        let expected = format!("{name} was called inside the test's region");
        for message in [
            panic_message(&*outside.unwrap_err()).unwrap().to_owned(),
            inside.panic_message().unwrap().to_owned(),
        ] {
            assert!(message.starts_with(&expected), "{message}");
        }
        // The region ended: the same wait runs.
        (waits[i].1)(&pool);
    }
}

/// Dropping the last `Pool` inside a task of another pool returns (it
/// spun for ever, waiting for a slot a thread of another pool never takes),
/// and the tasks still queued on it run. In a child process: a hang is
/// killed.
#[test]
fn dropping_a_pool_inside_a_task_of_another_pool() {
    common::in_child_process("dropping_a_pool_inside_a_task_of_another_pool", || {
        let other = pool(1);
        for threads in [0, 1, 2] {
            let dropped = pool(threads);
            let ran = Arc::new(AtomicUsize::new(0));
            for _ in 0..100 {
                let ran = ran.clone();
                drop(dropped.spawn(Lane::Normal, move || {
                    ran.fetch_add(1, Ordering::SeqCst);
                }));
            }
            let (sent, received) = mpsc::channel();
            let task = other.spawn(Lane::Normal, move || {
                drop(dropped);
                sent.send(()).unwrap();
            });
            received
                .recv_timeout(std::time::Duration::from_secs(30))
                .expect("the drop returned");
            task.unwrap().join().unwrap();
            // Queued tasks run, on the dropped pool's exiting workers or on the
            // dropping thread, maybe after the drop returned.
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
            while ran.load(Ordering::SeqCst) < 100 {
                assert!(
                    std::time::Instant::now() < deadline,
                    "queued tasks were lost"
                );
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
        }
    });
}

/// Tasks spawned for the scope's own thread (`spawn_on_caller`), from
/// tasks on the workers and from that thread, count as spawned as well as
/// run (they counted as run only), whichever thread spawned them.
#[test]
fn tasks_spawned_on_the_caller_count_as_spawned_and_run() {
    let pool = pool(2);
    pool.scope(|s| {
        for _ in 0..8 {
            s.spawn(|s| s.spawn_on_caller(|_| ()));
            s.spawn_on_caller(|_| ());
        }
    });
    let total = pool.stats().total();
    assert_eq!(total.spawned, 8 + 16);
    assert_eq!(total.executed, total.spawned);
}

/// Joins nested deeper than the join deque holds: the halves that found it
/// full run inline, and count as spawned and run like the others (they
/// counted as run only).
#[test]
fn joins_past_the_deque_count_every_half_as_spawned_and_run() {
    fn nest(pool: &Pool, depth: u32) -> u64 {
        if depth == 0 {
            return 1;
        }
        let (a, b) = pool.join(|| nest(pool, depth - 1), || 1);
        a + b
    }
    // No workers: no thief empties the deque, so it fills.
    let pool = Pool::builder().threads(0).build().unwrap();
    // Past the deque's 256, with room on a test thread's 2 MiB stack.
    let depth = 320;
    assert_eq!(nest(&pool, depth), u64::from(depth) + 1);
    let total = pool.stats().total();
    assert_eq!(total.spawned, u64::from(depth));
    assert_eq!(total.executed, total.spawned);
}

//! Adversarial use through the public API: shapes that once hung or
//! aborted. Every case runs under a watchdog, so a hang fails its test
//! instead of stalling the run; a case that could abort the process runs in
//! a child process of this test binary.

use engine_tasks::{
    BlockingPool, CancellationToken, JoinError, JoinHandle, Lane, Pool, PoolHandle,
};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;

mod common;
use common::{in_child_process, within_watchdog};

/// Case 1: a background task X holds the pool's only background permit and
/// joins a normal task Z, which joins a background task W. Z runs on
/// another thread than X (X waits before joining, so that an idle thread
/// takes Z). W used to wait for a permit that X held while X waited for Z.
/// Now the thread waiting in Z's join runs W itself: it queued W, and it is
/// blocked anyway.
fn background_normal_background(pool: Pool) -> u32 {
    let handle = pool.handle();
    let x = pool
        .spawn(Lane::Background, move || {
            let inner = handle.clone();
            let z = handle
                .spawn(Lane::Normal, move || {
                    let w = inner.spawn(Lane::Background, || 7).unwrap();
                    w.join().unwrap()
                })
                .unwrap();
            std::thread::sleep(Duration::from_millis(5));
            z.join().unwrap()
        })
        .unwrap();
    x.join().unwrap()
}

#[test]
fn a_background_join_through_a_normal_join_does_not_hang() {
    for round in 0..20 {
        let value = within_watchdog("two workers, background cap 1", || {
            background_normal_background(
                Pool::builder()
                    .threads(2)
                    .background_cap(1)
                    .build()
                    .unwrap(),
            )
        });
        assert_eq!(value, 7, "round {round}");
    }
}

#[test]
fn a_background_join_through_a_normal_join_does_not_hang_on_one_worker() {
    for round in 0..20 {
        let value = within_watchdog("one worker, background cap 1", || {
            background_normal_background(
                Pool::builder()
                    .threads(1)
                    .background_cap(1)
                    .build()
                    .unwrap(),
            )
        });
        assert_eq!(value, 7, "round {round}");
    }
}

/// Whether every worker of `pool` is asleep now (a hint from the stats).
fn workers_asleep(pool: &PoolHandle, workers: usize) -> bool {
    let stats = pool.stats();
    stats.threads[..workers]
        .iter()
        .all(|thread| thread.parks > thread.unparks)
}

/// A permit freed when a background task ends must wake a worker that was
/// turned away for want of it. Here the main thread, waiting on task A,
/// runs A under the pool's only permit; A has a thread outside the pool
/// queue T, and both workers look at T, are turned away and fall asleep. A
/// returns, the main thread gives the permit back and leaves the pool to
/// wait for T on a channel. No thread of the pool looks again, so unless
/// the release wakes a worker, T never runs (it used to hang here, and in
/// the soak's cross-pool chains).
fn a_permit_freed_after_a_turn_away(pool: Pool) -> u32 {
    let handle = pool.handle();
    let (started, workers_busy) = mpsc::channel();
    let (open, gate) = mpsc::channel::<()>();
    let gate = std::sync::Arc::new(std::sync::Mutex::new(gate));
    // Keep both workers busy so that the main thread takes A.
    for _ in 0..2 {
        let (started, gate) = (started.clone(), gate.clone());
        drop(handle.spawn(Lane::Normal, move || {
            started.send(()).unwrap();
            let _ = gate.lock().unwrap().recv();
        }));
    }
    workers_busy.recv().unwrap();
    workers_busy.recv().unwrap();
    let (done, t_ran) = mpsc::channel();
    let inner = handle.clone();
    let a = handle
        .spawn(Lane::Background, move || {
            let outside = inner.clone();
            std::thread::spawn(move || {
                drop(outside.spawn(Lane::Background, move || done.send(5).unwrap()));
            })
            .join()
            .unwrap();
            drop(open);
            while !workers_asleep(&inner, 2) {
                std::thread::yield_now();
            }
        })
        .unwrap();
    a.join().unwrap();
    t_ran.recv().unwrap()
}

#[test]
fn a_permit_freed_by_a_finished_background_task_wakes_a_worker_turned_away() {
    for round in 0..50 {
        let value = within_watchdog("two workers, background cap 1", || {
            a_permit_freed_after_a_turn_away(
                Pool::builder()
                    .threads(2)
                    .background_cap(1)
                    .build()
                    .unwrap(),
            )
        });
        assert_eq!(value, 5, "round {round}");
    }
}

/// Stress for the case below: calls from a pool's workers into a pool
/// without threads, whose tasks call back and wait in turn, by each kind of
/// wait. The waiting workers run the threadless pool's tasks themselves,
/// several at once, so one may find the queue busy, or look just before a
/// task arrives, and sleep: the push must wake it.
#[test]
fn calls_into_a_pool_without_threads_do_not_hang() {
    let home = Pool::builder().threads(3).build().unwrap();
    let away = Pool::builder().threads(0).build().unwrap();
    for round in 0..200 {
        let (home_handle, away_handle) = (home.handle(), away.handle());
        let total = within_watchdog("calls into a pool without threads", move || {
            let total = std::sync::atomic::AtomicU32::new(0);
            home_handle.scope(|s| {
                for task in 0..6u32 {
                    let (home, away, total) = (&home_handle, &away_handle, &total);
                    s.spawn(move |_| {
                        let back = home.clone();
                        let value = match task % 3 {
                            0 => away
                                .spawn(Lane::Normal, move || {
                                    back.spawn(Lane::Normal, || 1).unwrap().join().unwrap()
                                })
                                .unwrap()
                                .join()
                                .unwrap(),
                            1 => away.join(|| 0, move || back.join(|| 1, || 0).0).1,
                            _ => {
                                let inner = away.clone();
                                away.join(
                                    move || {
                                        inner.spawn(Lane::Background, || 1).unwrap().join().unwrap()
                                    },
                                    || 0,
                                )
                                .0
                            }
                        };
                        total.fetch_add(value, std::sync::atomic::Ordering::Relaxed);
                    });
                }
            });
            total.into_inner()
        });
        assert_eq!(total, 6, "round {round}");
    }
}

/// A push onto a pool without threads must wake the threads of other
/// pools that run its work while they wait on it. Here the main thread,
/// the pool's guest, runs task T; T has worker W of another pool wait for
/// T's own result, which makes W run the threadless pool's queued work
/// until T ends, and sleep when there is none. Once W sleeps, T queues U
/// and waits for it by other means than the pool. Nothing but U's push can
/// wake W (the pool has no thread to wake), and T never ended when the
/// push woke no one.
fn a_push_onto_a_pool_without_threads(away: Pool, home: Pool) -> u32 {
    let t_handle = std::sync::Arc::new(std::sync::Mutex::new(None));
    let (away_handle, home_handle) = (away.handle(), home.handle());
    let (send_w, w) = mpsc::channel();
    let t = {
        let t_handle = t_handle.clone();
        away.spawn(Lane::Normal, move || {
            let t: JoinHandle<u32> = t_handle.lock().unwrap().take().unwrap();
            let w_waits = home_handle.spawn(Lane::Normal, move || t.join().unwrap());
            while !workers_asleep(&home_handle, 1) {
                std::thread::yield_now();
            }
            let (ran, u_ran) = mpsc::channel();
            drop(away_handle.spawn(Lane::Normal, move || ran.send(()).unwrap()));
            u_ran.recv().unwrap();
            send_w.send(w_waits.unwrap()).unwrap();
            9
        })
    };
    *t_handle.lock().unwrap() = Some(t.unwrap());
    // The main thread takes T as the pool's guest while it waits for this.
    away.spawn(Lane::Normal, || 0).unwrap().join().unwrap();
    // What W saw of T.
    w.recv().unwrap().join().unwrap()
}

#[test]
fn a_push_onto_a_pool_without_threads_wakes_its_helpers() {
    for round in 0..20 {
        let value = within_watchdog("a pool without threads and its helper", || {
            a_push_onto_a_pool_without_threads(
                Pool::builder().threads(0).build().unwrap(),
                Pool::builder().threads(1).build().unwrap(),
            )
        });
        assert_eq!(value, 9, "round {round}");
    }
}

/// A pool whose every thread start fails still runs shared frames whole,
/// on the frame's own thread: nodes in every lane, one of which waits for
/// tasks it spawns in less urgent lanes.
#[test]
fn a_frame_on_a_pool_whose_threads_never_start_runs_every_lane() {
    use engine_tasks::{NodeContext, TaskGraph};
    use std::sync::atomic::{AtomicU32, Ordering};
    let graph = {
        let mut b = TaskGraph::<AtomicU32>::builder();
        b.node(
            "urgent",
            Lane::FrameCritical,
            |cx: &NodeContext<'_, AtomicU32>| {
                let pool = cx.pool();
                let normal = pool.spawn(Lane::Normal, || 1).unwrap();
                let background = pool.spawn(Lane::Background, || 10).unwrap();
                let sum = normal.join().unwrap() + background.join().unwrap();
                cx.data().fetch_add(sum, Ordering::Relaxed);
            },
        );
        b.node("normal", Lane::Normal, |cx: &NodeContext<'_, AtomicU32>| {
            cx.data().fetch_add(100, Ordering::Relaxed);
        });
        b.node(
            "background",
            Lane::Background,
            |cx: &NodeContext<'_, AtomicU32>| {
                cx.data().fetch_add(1000, Ordering::Relaxed);
            },
        )
        .after(["normal"]);
        // Share every frame with the pool (never run it alone).
        b.share_above(Duration::ZERO, Duration::ZERO);
        b.build().unwrap()
    };
    let total = within_watchdog("a frame on a pool without threads", move || {
        let pool = Pool::builder()
            .threads(2)
            .spawn_with(|_, _| Err(std::io::Error::other("no threads here")))
            .build()
            .unwrap();
        let mut graph = graph;
        let total = AtomicU32::new(0);
        for _ in 0..10 {
            graph.run(&pool, &total).unwrap();
        }
        assert_eq!(pool.stats().threads_started, 0);
        total.into_inner()
    });
    assert_eq!(total, 10 * 1111);
}

/// In a pool without threads, a thread that waits for urgent work must
/// also run less urgent work, as nothing else will. The main thread, the
/// pool's guest, waits for frame-critical task T; T runs on another thread
/// (it waits on the pool without a slot, and so helps) and waits for
/// normal task N, which only the main thread can reach (it queued N). The
/// main thread used to run only frame-critical work while it waited for T.
fn an_urgent_wait_needs_less_urgent_work(pool: Pool) -> u32 {
    let (started, t_started) = mpsc::channel();
    let (n_ran, wait_for_n) = mpsc::channel::<()>();
    let t = pool
        .spawn(Lane::FrameCritical, move || {
            started.send(()).unwrap();
            wait_for_n.recv().unwrap();
            6
        })
        .unwrap();
    let handle = pool.handle();
    pool.scope(|_| {
        // The scope's body runs with the main thread as the pool's guest,
        // so the helper below waits without a slot, and runs T (queued
        // first) while it waits for its own task.
        let helper_pool = handle.clone();
        let helper = std::thread::spawn(move || {
            let own = helper_pool.spawn(Lane::FrameCritical, || 0).unwrap();
            own.join().unwrap()
        });
        t_started.recv().unwrap();
        drop(handle.spawn(Lane::Normal, move || n_ran.send(()).unwrap()));
        let value = t.join().unwrap();
        helper.join().unwrap();
        value
    })
}

#[test]
fn an_urgent_wait_on_a_pool_without_threads_runs_less_urgent_work() {
    for round in 0..20 {
        let value = within_watchdog("an urgent wait on a pool without threads", || {
            an_urgent_wait_needs_less_urgent_work(Pool::builder().threads(0).build().unwrap())
        });
        assert_eq!(value, 6, "round {round}");
    }
}

/// A guest of a pool without threads leaves tasks it spawned in its
/// queues. A worker of another pool waiting on one of them (it helps
/// there, taking from the injector and the LIFO slots) must reach it, even
/// though no thread takes the guest slot again.
#[test]
fn tasks_a_guest_leaves_behind_reach_the_helpers_of_a_pool_without_threads() {
    for round in 0..20 {
        let value = within_watchdog("tasks a guest leaves behind", || {
            let away = Pool::builder().threads(0).build().unwrap();
            let home = Pool::builder().threads(1).build().unwrap();
            let handle = away.handle();
            // The scope's body runs as the pool's guest: the first spawn
            // goes to its LIFO slot, and the second pushes it to its ring.
            let (first, second) = away.scope(|_| {
                let first = handle.spawn(Lane::Normal, || 8).unwrap();
                let second = handle.spawn(Lane::Normal, || 1).unwrap();
                (first, second)
            });
            let waited = home
                .spawn(Lane::Normal, move || first.join().unwrap())
                .unwrap();
            let value = waited.join().unwrap();
            value + second.join().unwrap()
        });
        assert_eq!(value, 9, "round {round}");
    }
}

/// Case 4: a keep-alive too long to add to the clock once aborted a
/// blocking thread's first idle wait. It now means "never reap": the idle
/// thread stays and runs the next task.
#[test]
fn an_endless_keep_alive_keeps_idle_threads() {
    in_child_process("an_endless_keep_alive_keeps_idle_threads", || {
        let pool = BlockingPool::builder()
            .cap(1)
            .keep_alive(Duration::MAX)
            .build()
            .unwrap();
        assert_eq!(pool.spawn(|| 1).unwrap().wait().unwrap(), 1);
        // The thread is now idle, waiting with the endless keep-alive.
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(pool.metrics().idle_threads, 1);
        assert_eq!(pool.spawn(|| 2).unwrap().wait().unwrap(), 2);
        pool.shutdown();
    });
}

/// The threads of this process, from `/proc/self/task`.
fn live_threads() -> usize {
    std::fs::read_dir("/proc/self/task")
        .expect("/proc/self/task lists this process's threads")
        .count()
}

/// Spawns `n` background tasks on `pool` that each add one to the count
/// returned, without keeping their handles.
fn spawn_counted(pool: &Pool, n: usize) -> std::sync::Arc<std::sync::atomic::AtomicUsize> {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let ran = std::sync::Arc::new(AtomicUsize::new(0));
    for _ in 0..n {
        let ran = std::sync::Arc::clone(&ran);
        let _unjoined = pool
            .spawn(Lane::Background, move || {
                ran.fetch_add(1, Ordering::Relaxed);
            })
            .unwrap();
    }
    ran
}

/// Waits until this process has no more threads than `baseline`: every
/// worker of the pools dropped since exited.
fn until_threads_exit(baseline: usize) {
    while live_threads() > baseline {
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Case 3: the last `Pool` dropped inside one of its own tasks. The worker
/// running that task used to try to join itself and panic ("Resource
/// deadlock avoided"). Now shutdown joins no worker (case 3b says why),
/// every task still queued runs, and the task's own worker exits when the
/// task returns: no panic, no task lost, no thread left behind.
#[test]
fn dropping_the_last_pool_inside_its_own_task() {
    use std::sync::atomic::Ordering;
    use std::sync::Arc;
    in_child_process("dropping_the_last_pool_inside_its_own_task", || {
        let baseline = live_threads();
        let pool = Arc::new(Pool::builder().threads(2).build().unwrap());
        let (dropped_send, dropped) = mpsc::channel::<()>();
        let (done_send, done) = mpsc::channel::<()>();
        let last = Arc::clone(&pool);
        let owner = pool
            .spawn(Lane::Normal, move || {
                dropped.recv().unwrap();
                drop(last);
                done_send.send(()).unwrap();
            })
            .unwrap();
        let ran = spawn_counted(&pool, 100);
        // The task's handle keeps only the result cell, not the pool.
        drop(owner);
        drop(pool);
        dropped_send.send(()).unwrap();
        done.recv().unwrap();
        // Every worker exits once it finds no task, the dropping one once
        // its task has returned; by then every queued task ran.
        until_threads_exit(baseline);
        assert_eq!(ran.load(Ordering::Relaxed), 100, "a queued task was lost");
    });
}

/// Case 3c: the last `Pool` dropped inside its own task while an outside
/// thread holds the pool's only background permit (it runs a background
/// task inside its `join`) and more background tasks are queued. The
/// worker, turned away from them for want of a permit, saw the shutdown
/// and exited; the permit's release then woke nobody, and the queued tasks
/// never ran. Now a shut-down pool's threads take background work past the
/// cap, and a worker leaves only once no work is queued.
#[test]
fn dropping_the_last_pool_while_an_outside_thread_holds_the_background_permit() {
    in_child_process(
        "dropping_the_last_pool_while_an_outside_thread_holds_the_background_permit",
        || {
            let baseline = live_threads();
            let pool = Arc::new(
                Pool::builder()
                    .threads(1)
                    .background_cap(1)
                    .build()
                    .unwrap(),
            );
            // The worker runs this task, which drops the last `Pool` when
            // told to.
            let (started_send, started) = mpsc::channel::<()>();
            let (drop_send, drop_now) = mpsc::channel::<()>();
            let (dropped_send, dropped) = mpsc::channel::<()>();
            let last = Arc::clone(&pool);
            let owner = pool
                .spawn(Lane::Normal, move || {
                    started_send.send(()).unwrap();
                    drop_now.recv().unwrap();
                    drop(last);
                    dropped_send.send(()).unwrap();
                })
                .unwrap();
            drop(owner);
            started.recv().unwrap();
            // With the worker busy, an outside thread's `join` runs this
            // background task itself, holding the only permit until told.
            let (running_send, running) = mpsc::channel::<()>();
            let (release_send, release) = mpsc::channel::<()>();
            let held = pool
                .spawn(Lane::Background, move || {
                    running_send.send(()).unwrap();
                    release.recv().unwrap();
                })
                .unwrap();
            let joined = Arc::new(AtomicBool::new(false));
            let joiner = {
                let joined = Arc::clone(&joined);
                std::thread::spawn(move || {
                    held.join().unwrap();
                    // Relaxed: read after this thread is joined.
                    joined.store(true, Ordering::Relaxed);
                })
            };
            running.recv().unwrap();
            let ran = spawn_counted(&pool, 10);
            drop(pool);
            drop_send.send(()).unwrap();
            dropped.recv().unwrap();
            // Give the worker time to find the queued tasks out of its
            // reach and, before the fix, to exit (not a timing assertion:
            // with the fix the tasks run whenever it looks).
            std::thread::sleep(Duration::from_millis(100));
            release_send.send(()).unwrap();
            joiner.join().unwrap();
            // Relaxed: the join ordered it.
            assert!(joined.load(Ordering::Relaxed));
            // Up to ten seconds, well inside the child's watchdog, so that
            // tasks left queued fail the count here.
            let give_up = std::time::Instant::now() + Duration::from_secs(10);
            // Relaxed: a count; each task adds to it once.
            while ran.load(Ordering::Relaxed) < 10 && std::time::Instant::now() < give_up {
                std::thread::sleep(Duration::from_millis(1));
            }
            assert_eq!(
                ran.load(Ordering::Relaxed),
                10,
                "queued background tasks were lost"
            );
            until_threads_exit(baseline);
        },
    );
}

/// Case 3b: the last `Pool` dropped inside a `join` half that another
/// worker stole, while the worker that pushed the half waits for it. The
/// dropping worker used to join every other worker, the waiting one among
/// them, which waited in turn for the half: both hung. Now it joins none;
/// the join returns, and the workers run every queued task and exit.
#[test]
fn dropping_the_last_pool_inside_a_stolen_join_half() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    in_child_process("dropping_the_last_pool_inside_a_stolen_join_half", || {
        within_watchdog("pool dropped inside a stolen join half", || {
            let baseline = live_threads();
            let pool = Arc::new(Pool::builder().threads(2).build().unwrap());
            let last = Arc::clone(&pool);
            let stolen = Arc::new(AtomicBool::new(false));
            let (done_send, done) = mpsc::channel::<bool>();
            let (dropped_send, dropped) = mpsc::channel::<()>();
            let owner = pool
                .spawn(Lane::Normal, move || {
                    // Once the test's own `Pool` is gone.
                    dropped.recv().unwrap();
                    let seen = Arc::clone(&stolen);
                    let pool = last;
                    let (taken, ()) = engine_tasks::join(
                        // Waits until the other worker takes the second
                        // half, so that this one then waits for it (the
                        // watchdog fails the case if none ever does).
                        move || {
                            while !seen.load(Ordering::Acquire) {
                                std::hint::spin_loop();
                            }
                            true
                        },
                        move || {
                            stolen.store(true, Ordering::Release);
                            drop(pool);
                        },
                    );
                    done_send.send(taken).unwrap();
                })
                .unwrap();
            let ran = spawn_counted(&pool, 100);
            drop(owner);
            drop(pool);
            dropped_send.send(()).unwrap();
            assert!(done.recv().unwrap(), "the other worker took the half");
            // As in case 3: once every worker exited, every task ran.
            until_threads_exit(baseline);
            assert_eq!(ran.load(Ordering::Relaxed), 100, "a queued task was lost");
        });
    });
}

/// Case 3c: as 3b, but the half is taken by a thread outside the pool
/// that waits for the task as the pool's guest (a guest's wait runs the
/// pool's tasks, stolen join halves among them). The guest dropped the last
/// `Pool` there and joined the worker, which waited for the half: both
/// hung. A guest inside a wait counts as inside the pool: it joins none.
#[test]
fn dropping_the_last_pool_inside_a_join_half_a_guest_took() {
    in_child_process(
        "dropping_the_last_pool_inside_a_join_half_a_guest_took",
        guest_takes_the_half_that_drops_the_pool,
    );
}

fn guest_takes_the_half_that_drops_the_pool() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Arc, Mutex};
    within_watchdog("pool dropped inside a guest's join half", || {
        let baseline = live_threads();
        let pool = Arc::new(Pool::builder().threads(1).build().unwrap());
        let last = Arc::clone(&pool);
        let taken = Arc::new(AtomicBool::new(false));
        let taker = Arc::new(Mutex::new(None));
        let (started_send, started) = mpsc::channel::<()>();
        let (dropped_send, dropped) = mpsc::channel::<()>();
        let half_taker = Arc::clone(&taker);
        let task = pool
            .spawn(Lane::Normal, move || {
                started_send.send(()).unwrap();
                dropped.recv().unwrap();
                let seen = Arc::clone(&taken);
                let pool = last;
                let (this, ()) = engine_tasks::join(
                    // The only worker waits here until another thread takes
                    // the second half.
                    move || {
                        while !seen.load(Ordering::Acquire) {
                            std::hint::spin_loop();
                        }
                        std::thread::current().id()
                    },
                    move || {
                        *half_taker.lock().unwrap() = Some(std::thread::current().id());
                        taken.store(true, Ordering::Release);
                        drop(pool);
                    },
                );
                this
            })
            .unwrap();
        // The worker runs the task, not this thread's wait below.
        started.recv().unwrap();
        drop(pool);
        dropped_send.send(()).unwrap();
        // This thread waits as the pool's guest, and takes the half.
        let worker = task.join().unwrap();
        let took = taker.lock().unwrap().expect("the half ran");
        assert_eq!(took, std::thread::current().id(), "the guest took the half");
        assert_ne!(took, worker);
        until_threads_exit(baseline);
    });
}

/// Case 5: a timeline session with a huge capacity used to abort the
/// process on its first event, when a thread's buffer could not be
/// allocated. Now a capacity over `MAX_CAPACITY` is refused with an error
/// and no session starts.
#[test]
fn a_huge_timeline_capacity_is_an_error() {
    use engine_tasks::timeline::{self, TimelineError, MAX_CAPACITY};
    in_child_process("a_huge_timeline_capacity_is_an_error", || {
        let requested = usize::MAX / 4;
        assert_eq!(
            timeline::start_with_capacity(requested),
            Err(TimelineError::CapacityTooLarge { requested })
        );
        assert!(!timeline::is_recording());
        let pool = Pool::builder().threads(1).build().unwrap();
        assert_eq!(pool.join(|| 1, || 2), (1, 2));
        assert!(timeline::stop().is_none(), "no session started");
        assert!(timeline::start_with_capacity(MAX_CAPACITY + 1).is_err());
    });
}

/// How a task of one pool waits on work of another in the cross-pool
/// cases.
#[derive(Clone, Copy, Debug)]
enum CrossWait {
    /// `spawn` there, then `JoinHandle::join`.
    Handle,
    /// `join` on the other pool.
    Join,
    /// `scope` on the other pool.
    Scope,
}

/// Runs `f` on `pool` the way `how` says and returns its result.
fn call_in(
    pool: &PoolHandle,
    lane: Lane,
    how: CrossWait,
    f: impl FnOnce() -> u32 + Send + 'static,
) -> u32 {
    match how {
        CrossWait::Handle => pool.spawn(lane, f).unwrap().join().unwrap(),
        CrossWait::Join => pool.join(|| 0, f).1,
        CrossWait::Scope => {
            let mut out = 0;
            pool.scope(|s| s.spawn(|_| out = f()));
            out
        }
    }
}

/// Case 2: two pools of one worker each. A task on P1 waits on a task of
/// P2, which waits on a task of P1. P1's only worker used to sit in the
/// wait on P2 running none of P1's work (or as P2's guest, running only
/// P2's), so the last task never started. Now a thread of one pool that
/// waits on another keeps running its own pool's work.
#[test]
fn calls_across_two_pools_that_call_back() {
    for outer in [CrossWait::Handle, CrossWait::Join, CrossWait::Scope] {
        for inner in [CrossWait::Handle, CrossWait::Join, CrossWait::Scope] {
            for lane in [Lane::FrameCritical, Lane::Normal, Lane::Background] {
                let value = within_watchdog("a call across two pools that calls back", move || {
                    let p1 = Pool::builder().threads(1).build().unwrap();
                    let p2 = Pool::builder().threads(1).build().unwrap();
                    let (h1, h2) = (p1.handle(), p2.handle());
                    // The result comes back through a channel, received
                    // inside a `join` on P1: this thread holds P1's guest
                    // slot but runs none of P1's work, as a frame's thread
                    // running a long main-thread node does.
                    let (send, receive) = mpsc::channel();
                    let _task = p1
                        .spawn(lane, move || {
                            let value = call_in(&h2, Lane::Normal, outer, move || {
                                call_in(&h1, Lane::Normal, inner, || 7)
                            });
                            send.send(value).unwrap();
                        })
                        .unwrap();
                    p1.join(move || receive.recv().unwrap(), || ()).0
                });
                assert_eq!(value, 7, "{outer:?} then {inner:?} from {lane:?}");
            }
        }
    }
}

/// Case 2 in a frame: a node of a graph on P1 calls into P2, whose task
/// spawns on P1 and joins, while the frame's thread runs a pinned node.
#[test]
fn a_frame_node_calling_across_pools_that_call_back() {
    use engine_tasks::TaskGraph;
    let value = within_watchdog("a frame node calling across pools", || {
        let p1 = Pool::builder().threads(1).build().unwrap();
        let p2 = Pool::builder().threads(1).build().unwrap();
        let (h1, h2) = (p1.handle(), p2.handle());
        let mut b = TaskGraph::<std::sync::atomic::AtomicU32>::builder();
        b.node("cross", Lane::FrameCritical, move |cx| {
            let h1 = h1.clone();
            let got = call_in(&h2, Lane::Normal, CrossWait::Handle, move || {
                call_in(&h1, Lane::Normal, CrossWait::Handle, || 7)
            });
            cx.data()
                .fetch_add(got, std::sync::atomic::Ordering::Relaxed);
        });
        b.main_thread_node("pinned", |_| std::thread::sleep(Duration::from_millis(20)));
        let mut graph = b.build().unwrap();
        let data = std::sync::atomic::AtomicU32::new(0);
        for _ in 0..10 {
            graph.run(&p1, &data).unwrap();
        }
        data.into_inner()
    });
    assert_eq!(value, 70);
}

/// Case 6: `max_queued` counted live threads, not busy ones, so an idle
/// thread refused work. Now a task counts against `max_queued` only when no
/// idle thread will take it.
#[test]
fn an_idle_blocking_thread_never_causes_a_refusal() {
    within_watchdog("idle blocking threads and max_queued", || {
        // One idle thread, no queue: the task goes to the idle thread.
        let pool = BlockingPool::builder()
            .cap(1)
            .max_queued(0)
            .build()
            .unwrap();
        assert_eq!(pool.spawn(|| 1).unwrap().wait().unwrap(), 1);
        while pool.metrics().idle_threads < 1 {
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(pool.metrics().queued, 0);
        assert_eq!(
            pool.spawn(|| 2)
                .expect("an idle thread takes it")
                .wait()
                .unwrap(),
            2
        );

        // Two idle threads, room for one waiting task: a burst of three is
        // two tasks taken by the idle threads and one queued. A fourth
        // waits behind them only if neither thread is free yet.
        let pool = BlockingPool::builder()
            .cap(2)
            .max_queued(1)
            .build()
            .unwrap();
        let (release, gate) = std::sync::mpsc::channel::<()>();
        let gate = std::sync::Arc::new(std::sync::Mutex::new(gate));
        let warm: Vec<_> = (0..2)
            .map(|_| {
                let gate = gate.clone();
                pool.spawn(move || {
                    let _ = gate.lock().unwrap().recv();
                })
                .unwrap()
            })
            .collect();
        release.send(()).unwrap();
        release.send(()).unwrap();
        for task in warm {
            task.wait().unwrap();
        }
        while pool.metrics().idle_threads < 2 {
            std::thread::sleep(Duration::from_millis(1));
        }
        let burst: Vec<_> = (0..3)
            .map(|i| {
                pool.spawn(move || i)
                    .expect("no task of the burst is refused")
            })
            .collect();
        let results: Vec<_> = burst.into_iter().map(|t| t.wait().unwrap()).collect();
        assert_eq!(results, [0, 1, 2]);
    });
}

/// Every public error type is named at the crate root and is a
/// `std::error::Error`, so callers can box it, `?` it and print it.
#[test]
fn every_public_error_is_an_error_at_the_crate_root() {
    // Not `Sync`: the panic-carrying ones hold a `Box<dyn Any + Send>`, as
    // `std::thread::Result` does.
    fn is_error<E: std::error::Error + Send + 'static>() {}
    is_error::<engine_tasks::BuildError>();
    is_error::<engine_tasks::SpawnError<fn()>>();
    is_error::<engine_tasks::JoinError>();
    is_error::<engine_tasks::GraphError>();
    is_error::<engine_tasks::FrameError>();
    is_error::<engine_tasks::NodePanic>();
    is_error::<engine_tasks::BlockingBuildError>();
    is_error::<engine_tasks::BlockingError<fn()>>();
    is_error::<engine_tasks::TimelineError>();
    is_error::<engine_tasks::AssetError>();
    is_error::<engine_tasks::AssetErrorKind>();
    is_error::<engine_tasks::CodecError>();
    is_error::<engine_tasks::ImageError>();
}

/// The rule for a blocking-pool wait: a worker waiting on a blocking task
/// keeps running its pool's work, since the blocking task may wait on it.
/// Here the pool's only worker waits on a blocking task that spawns a task
/// on the pool and joins it, while the pool's guest slot is held by a
/// thread that runs none of the pool's work. The worker used to sleep in
/// the wait, and the task never started.
#[test]
fn a_worker_waiting_on_a_blocking_task_keeps_working() {
    let value = within_watchdog("a worker waiting on a blocking task", || {
        let pool = Pool::builder().threads(1).build().unwrap();
        let blocking = BlockingPool::builder().cap(1).build().unwrap();
        let (home, io) = (pool.handle(), blocking.handle());
        let (send, receive) = mpsc::channel();
        let _task = pool
            .spawn(Lane::Normal, move || {
                let back = home.clone();
                let read = io
                    .spawn(move || back.spawn(Lane::Normal, || 7).unwrap().join().unwrap())
                    .unwrap();
                send.send(read.wait().unwrap()).unwrap();
            })
            .unwrap();
        pool.join(move || receive.recv().unwrap(), || ()).0
    });
    assert_eq!(value, 7);
}

/// A directory under the system's temporary directory, removed on drop.
struct AssetDir(std::path::PathBuf);

impl AssetDir {
    fn new(name: &str) -> AssetDir {
        let dir = std::env::temp_dir().join(format!(
            "engine-tasks-adversarial-{name}-{}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        AssetDir(dir)
    }
}

impl Drop for AssetDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Waits (under the caller's watchdog) for `n` events from `streamer`.
fn events(
    streamer: &engine_tasks::assets::AssetStreamer,
    n: usize,
) -> Vec<engine_tasks::assets::AssetEvent> {
    let mut out = Vec::new();
    while out.len() < n {
        streamer.drain(&mut out);
        std::thread::sleep(Duration::from_millis(1));
    }
    out
}

/// Case 6 through the streamer: a second request on an idle, running pool
/// used to end as `PoolUnavailable` (the blocking pool counted its idle
/// thread as queued work and refused the reader job).
#[test]
fn a_streamer_on_an_idle_pool_loads_every_request() {
    use engine_tasks::assets::{encode_asset, AssetStreamer};
    within_watchdog("streamer on an idle blocking pool", || {
        let dir = AssetDir::new("idle");
        std::fs::write(dir.0.join("a.eta"), encode_asset(b"first")).unwrap();
        std::fs::write(dir.0.join("b.eta"), encode_asset(b"second")).unwrap();
        let pool = Pool::builder().threads(1).build().unwrap();
        let blocking = BlockingPool::builder()
            .cap(1)
            .max_queued(0)
            .build()
            .unwrap();
        let streamer = AssetStreamer::new(&dir.0, &pool, &blocking, 1).unwrap();
        streamer.request("a.eta", 0);
        let first = events(&streamer, 1);
        assert_eq!(first[0].as_ref().unwrap().data, b"first");
        while blocking.metrics().idle_threads < 1 {
            std::thread::sleep(Duration::from_millis(1));
        }
        streamer.request("b.eta", 0);
        let second = events(&streamer, 1);
        assert_eq!(second[0].as_ref().unwrap().data, b"second");
    });
}

/// Case 7: bytes after the LZ4 frame used to be ignored. Now the file is
/// corrupt, by `decode_asset` and through the streamer.
#[test]
fn trailing_bytes_after_the_lz4_frame_are_corrupt() {
    use engine_tasks::assets::{decode_asset, encode_asset, AssetErrorKind, AssetStreamer};
    within_watchdog("trailing bytes", || {
        let mut file = encode_asset(&[7u8; 1000]);
        assert!(decode_asset(&file).is_ok());
        file.extend_from_slice(b"garbage after the frame");
        let why = decode_asset(&file).expect_err("trailing bytes accepted");
        assert!(why.contains("after the LZ4 frame"), "{why}");

        let dir = AssetDir::new("trailing");
        std::fs::write(dir.0.join("t.eta"), &file).unwrap();
        let pool = Pool::builder().threads(1).build().unwrap();
        let blocking = BlockingPool::builder().build().unwrap();
        let streamer = AssetStreamer::new(&dir.0, &pool, &blocking, 1).unwrap();
        streamer.request("t.eta", 0);
        let event = events(&streamer, 1).pop().unwrap();
        assert!(
            matches!(
                event.as_ref().map_err(|e| &e.kind),
                Err(AssetErrorKind::Corrupt(_))
            ),
            "{event:?}"
        );
    });
}

/// Case 8: a named pipe under the root used to block its reader forever,
/// and with it cancellation, shutdown and every request behind it. Now
/// anything but a regular file is refused before it is opened for reading;
/// so is a directory. The request behind them loads.
#[cfg(target_os = "linux")]
#[test]
fn a_named_pipe_or_a_directory_is_refused_without_reading() {
    use engine_tasks::assets::{encode_asset, AssetErrorKind, AssetStreamer};
    use std::ffi::CString;
    within_watchdog("named pipe under the asset root", || {
        let dir = AssetDir::new("fifo");
        let fifo = dir.0.join("pipe.eta");
        let c_path = CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: a valid NUL-terminated path; mkfifo has no other
        // preconditions.
        assert_eq!(unsafe { libc::mkfifo(c_path.as_ptr(), 0o600) }, 0);
        std::fs::create_dir(dir.0.join("folder.eta")).unwrap();
        std::fs::write(dir.0.join("good.eta"), encode_asset(b"good")).unwrap();
        let pool = Pool::builder().threads(1).build().unwrap();
        let blocking = BlockingPool::builder().build().unwrap();
        // One reader: the good request waits behind the pipe.
        let streamer = AssetStreamer::new(&dir.0, &pool, &blocking, 1).unwrap();
        let pipe = streamer.request("pipe.eta", 2);
        let folder = streamer.request("folder.eta", 1);
        let good = streamer.request("good.eta", 0);
        streamer.cancel(pipe);
        let mut ended = events(&streamer, 3);
        ended.sort_by_key(|e| match e {
            Ok(asset) => asset.id,
            Err(error) => error.id,
        });
        for (event, id) in ended.iter().zip([pipe, folder]) {
            let error = event.as_ref().expect_err("not a regular file");
            assert_eq!(error.id, id);
            assert!(
                matches!(
                    error.kind,
                    AssetErrorKind::NotAFile | AssetErrorKind::Cancelled
                ),
                "{error}"
            );
        }
        assert_eq!(ended[2].as_ref().unwrap().id, good);
        assert_eq!(streamer.progress().finished(), 3, "one event per request");
        drop(streamer);
        blocking.shutdown();
    });
}

/// Case 9: a sparse file over the limit used to be read whole (1.25 GiB
/// in memory before it was refused). Now its size is checked from its
/// metadata before any byte is read, and it ends as `TooLarge`; so does a
/// file that grows past the limit while it is read (checked with a limit
/// below its final size).
#[test]
fn a_file_over_the_size_limit_is_refused_before_it_is_read() {
    use engine_tasks::assets::{encode_asset, AssetErrorKind, AssetStreamer, StreamerConfig};
    within_watchdog("oversized asset file", || {
        let dir = AssetDir::new("huge");
        let huge = std::fs::File::create(dir.0.join("huge.eta")).unwrap();
        huge.set_len(5 << 30).unwrap(); // sparse: no disk used
        drop(huge);
        std::fs::write(dir.0.join("small.eta"), encode_asset(&[1u8; 100])).unwrap();
        let pool = Pool::builder().threads(1).build().unwrap();
        let blocking = BlockingPool::builder().build().unwrap();
        let config = StreamerConfig::default()
            .max_reads_in_flight(1)
            .max_file_size(1 << 20);
        let streamer = AssetStreamer::with_config(&dir.0, &pool, &blocking, config).unwrap();
        streamer.request("huge.eta", 1);
        streamer.request("small.eta", 0);
        let ended = events(&streamer, 2);
        match &ended[0] {
            Err(error) => assert!(
                matches!(
                    error.kind,
                    AssetErrorKind::TooLarge {
                        size: 5368709120,
                        max: 1048576
                    }
                ),
                "{error}"
            ),
            Ok(asset) => panic!("read {} bytes", asset.data.len()),
        }
        assert_eq!(ended[1].as_ref().unwrap().data, [1u8; 100]);
        let small = std::fs::metadata(dir.0.join("small.eta")).unwrap().len();
        assert_eq!(
            streamer.progress().bytes_read,
            small,
            "only the small file was read"
        );
    });
}

/// A panic payload whose own drop panics: the worst a task can leave the
/// scheduler to drop.
struct Bomb;

impl Drop for Bomb {
    fn drop(&mut self) {
        panic!("a panic payload's drop panicked");
    }
}

/// Panics with a [`Bomb`] as it drops, after raising its flag.
struct ThrowsBomb(Arc<AtomicBool>);

impl Drop for ThrowsBomb {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
        std::panic::panic_any(Bomb);
    }
}

/// A task body that waits for its release, then returns a [`ThrowsBomb`]
/// that raises `dropped`; and the release. Released after its handle is
/// dropped, the task's thread drops the result.
fn a_bomb_result(
    dropped: &Arc<AtomicBool>,
) -> (
    impl FnOnce() -> ThrowsBomb + Send + 'static,
    mpsc::Sender<()>,
) {
    let result = ThrowsBomb(dropped.clone());
    let (release, released) = mpsc::channel::<()>();
    let body = move || {
        released.recv().unwrap();
        result
    };
    (body, release)
}

fn until_raised(flag: &AtomicBool) {
    while !flag.load(Ordering::SeqCst) {
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// What the scheduler drops for a task (a cancelled task's closure, a
/// detached task's result, a scope's second panic, on the pool and on the
/// blocking pool) may panic as it drops, with a payload that panics as it
/// drops too. The scheduler's thread survives it: before, the second panic
/// unwound out of the `catch_unwind` that had caught the first, into the
/// scheduler. A `join` or scope whose two sides both panic drops the
/// payload it does not re-raise before it unwinds, not during.
#[test]
fn payloads_whose_drop_panics_never_reach_the_scheduler() {
    in_child_process(
        "payloads_whose_drop_panics_never_reach_the_scheduler",
        || {
            let pool = Pool::builder().threads(1).build().unwrap();

            let token = CancellationToken::new();
            token.cancel();
            let dropped = Arc::new(AtomicBool::new(false));
            let held = ThrowsBomb(dropped.clone());
            let cancelled = pool
                .spawn_cancellable(Lane::Normal, &token, move |_| drop(held))
                .unwrap();
            assert!(matches!(cancelled.join(), Err(JoinError::Cancelled)));
            assert!(dropped.load(Ordering::SeqCst));

            let dropped = Arc::new(AtomicBool::new(false));
            let (body, release) = a_bomb_result(&dropped);
            drop(pool.spawn(Lane::Normal, body).unwrap());
            release.send(()).unwrap();
            until_raised(&dropped);

            let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                pool.scope(|s| {
                    s.spawn(|_| std::panic::panic_any(Bomb));
                    s.spawn(|_| std::panic::panic_any(Bomb));
                })
            }));
            let first = outcome.expect_err("the scope re-raises the first panic");
            assert!(first.is::<Bomb>());
            // The test's own thread would abort on it as the scheduler's did.
            std::mem::forget(first);

            // Both halves of a join panic, and a scope's body and its task
            // do: one payload is re-raised, and the other dropped before
            // the unwind (during it, its panic would abort the thread).
            let both = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                pool.join(
                    || std::panic::panic_any(Bomb),
                    || std::panic::panic_any(Bomb),
                )
            }));
            std::mem::forget(both.expect_err("a half's panic is re-raised"));
            let body_and_task = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                pool.scope(|s| {
                    s.spawn(|_| std::panic::panic_any(Bomb));
                    std::panic::panic_any(Bomb)
                })
            }));
            std::mem::forget(body_and_task.expect_err("the body's panic is re-raised"));

            let blocking = BlockingPool::builder().cap(1).build().unwrap();
            let dropped = Arc::new(AtomicBool::new(false));
            let (body, release) = a_bomb_result(&dropped);
            drop(blocking.spawn(body).unwrap());
            release.send(()).unwrap();
            until_raised(&dropped);
            assert_eq!(blocking.spawn(|| 5).unwrap().wait().unwrap(), 5);

            assert_eq!(pool.spawn(Lane::Normal, || 7).unwrap().join().unwrap(), 7);
        },
    );
}

/// A thread-spawn function that panics with a [`Bomb`].
fn spawns_a_bomb(
    _: engine_tasks::ThreadSpec,
    _: Box<dyn FnOnce() + Send>,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    std::panic::panic_any(Bomb)
}

/// The other places where a panic's payload ends up with the engine, not
/// with the code that caught the panic: the other nodes' payloads of a
/// failed frame, a thread-spawn function's panic (pool and blocking pool),
/// and a blocking task's continuation that had to run where nobody waits
/// for it. Each payload is a [`Bomb`]; the engine drops it and its panic
/// quietly, and goes on. (A loader's panic is in `asset_loaders.rs`.)
#[test]
fn the_engines_other_payload_drops_are_quiet_too() {
    in_child_process("the_engines_other_payload_drops_are_quiet_too", || {
        use engine_tasks::{NodeContext, TaskGraph};
        let pool = Pool::builder().threads(1).build().unwrap();

        // Two nodes of a frame panic: one payload is re-raised, the other
        // dropped before the unwind.
        let mut b = TaskGraph::<()>::builder();
        for name in ["a", "b"] {
            b.node(name, Lane::Normal, |_: &NodeContext<'_, ()>| {
                std::panic::panic_any(Bomb)
            });
        }
        let mut graph = b.build().unwrap();
        let failed = graph.run(&pool, &()).expect_err("both nodes panicked");
        assert_eq!(failed.panicked.len(), 2);
        let resumed =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| failed.resume_unwind()));
        let first = resumed.expect_err("the first node's panic is re-raised");
        assert!(first.is::<Bomb>());
        std::mem::forget(first);

        // A pool whose thread starts panic still runs its tasks, on the
        // threads that wait for them.
        let no_threads = Pool::builder()
            .threads(1)
            .spawn_with(spawns_a_bomb)
            .build()
            .unwrap();
        assert_eq!(
            no_threads
                .spawn(Lane::Normal, || 7)
                .unwrap()
                .join()
                .unwrap(),
            7
        );
        assert!(no_threads.stats().spawn_failures >= 1);

        // A blocking pool's: the task comes back with the refusal.
        let no_blocking_threads = BlockingPool::builder()
            .spawn_with(spawns_a_bomb)
            .build()
            .unwrap();
        let refused = no_blocking_threads.spawn(|| 5).unwrap_err();
        assert_eq!((refused.into_inner())(), 5);
        assert!(no_blocking_threads.metrics().spawn_failures >= 1);

        // A continuation whose pool is gone runs where the task ended (the
        // blocking thread, or here if it had ended already), and panics.
        let blocking = BlockingPool::builder().cap(1).build().unwrap();
        let gone = {
            let pool = Pool::builder().threads(1).build().unwrap();
            pool.handle()
        };
        let ran = Arc::new(AtomicBool::new(false));
        for _ in 0..2 {
            ran.store(false, Ordering::SeqCst);
            let flag = ran.clone();
            blocking
                .spawn(|| 1)
                .unwrap()
                .then(&gone, Lane::Normal, move |result| {
                    assert_eq!(result.unwrap(), 1);
                    flag.store(true, Ordering::SeqCst);
                    std::panic::panic_any(Bomb)
                });
            until_raised(&ran);
        }
        assert_eq!(blocking.spawn(|| 5).unwrap().wait().unwrap(), 5);
        assert_eq!(pool.spawn(Lane::Normal, || 7).unwrap().join().unwrap(), 7);
    });
}

/// A thread-spawn function that starts the thread and then reports the
/// start failed, by an error (`panics: false`) or a panic. It keeps the
/// threads it started in `started`.
fn starts_then_fails(
    started: Arc<std::sync::Mutex<Vec<std::thread::JoinHandle<()>>>>,
    panics: bool,
) -> impl Fn(
    engine_tasks::ThreadSpec,
    Box<dyn FnOnce() + Send>,
) -> std::io::Result<std::thread::JoinHandle<()>>
       + Send
       + Sync
       + 'static {
    move |spec, main| {
        let thread = std::thread::Builder::new().name(spec.name).spawn(main)?;
        started.lock().unwrap().push(thread);
        if panics {
            panic!("the start is reported failed after the thread began");
        }
        Err(std::io::Error::other("the start is reported failed"))
    }
}

/// A spawn function that starts its thread and then fails (returns an
/// error, or panics). The pools believe the answer: no thread. Before, the
/// thread ran the pool's loop anyway. The blocking pool's thread, unknown
/// to it, waited in it for work, and took one from its count of threads as
/// it left: below zero, an abort (here a hang first: the keep-alive
/// outlasts the watchdog). The work-stealing pool's ran its tasks, and its
/// drop neither joined nor waited for it.
#[test]
fn a_thread_whose_start_is_reported_failed_never_joins_its_pool() {
    in_child_process(
        "a_thread_whose_start_is_reported_failed_never_joins_its_pool",
        || {
            for panics in [false, true] {
                let started = Arc::new(std::sync::Mutex::new(Vec::new()));
                // A keep-alive that outlasts the watchdog: a thread that
                // entered the pool would wait there, idle, for the join
                // below (and, leaving, take the count below zero).
                let blocking = BlockingPool::builder()
                    .cap(2)
                    .keep_alive(Duration::from_secs(3600))
                    .spawn_with(starts_then_fails(started.clone(), panics))
                    .build()
                    .unwrap();
                let refused = blocking.spawn(|| 5).unwrap_err();
                assert_eq!((refused.into_inner())(), 5);
                // The thread the function started returns at once.
                let threads = std::mem::take(&mut *started.lock().unwrap());
                assert_eq!(threads.len(), 1);
                for thread in threads {
                    thread.join().unwrap();
                }
                let metrics = blocking.metrics();
                assert_eq!((metrics.threads, metrics.idle_threads), (0, 0));
                drop(blocking);

                let pool = Pool::builder()
                    .threads(2)
                    .spawn_with(starts_then_fails(started.clone(), panics))
                    .build()
                    .unwrap();
                let caller = std::thread::current().id();
                let tasks: Vec<_> = (0..50)
                    .map(|_| {
                        pool.spawn(Lane::Normal, || {
                            std::thread::sleep(Duration::from_micros(200));
                            std::thread::current().id()
                        })
                        .unwrap()
                    })
                    .collect();
                for task in tasks {
                    assert_eq!(
                        task.join().unwrap(),
                        caller,
                        "no worker started, so the caller runs every task it waits for"
                    );
                }
                let stats = pool.stats();
                assert_eq!(stats.threads_started, 0);
                assert!(stats.spawn_failures >= 1);
                drop(pool);

                // The threads the function started return at once.
                let threads = std::mem::take(&mut *started.lock().unwrap());
                assert!(!threads.is_empty());
                for thread in threads {
                    thread.join().unwrap();
                }
            }
        },
    );
}

/// On the only worker of a new pool, makes a blocking pool, runs `read` on
/// it as a blocking task (given the work-stealing pool's handle and the
/// blocking pool's), waits until it runs, drops the blocking pool, and
/// returns what `read` returned: all under the watchdog. The worker task is
/// detached, so that the worker, not a joining caller, runs it.
fn drop_a_blocking_pool_on_the_only_worker(
    what: &'static str,
    read: impl FnOnce(PoolHandle, engine_tasks::BlockingPoolHandle) -> u32 + Send + 'static,
) -> u32 {
    within_watchdog(what, move || {
        let pool = Pool::builder().threads(1).build().unwrap();
        let handle = pool.handle();
        let (answered, answer) = mpsc::channel();
        drop(pool.spawn(Lane::Normal, move || {
            let blocking = BlockingPool::new();
            let blocking_handle = blocking.handle();
            let (running, is_running) = mpsc::channel();
            let task = blocking
                .spawn(move || {
                    running.send(()).unwrap();
                    read(handle, blocking_handle)
                })
                .unwrap();
            is_running.recv().unwrap();
            drop(blocking);
            answered.send(task.wait().unwrap()).unwrap();
        }));
        let answer = answer.recv().unwrap();
        drop(pool);
        answer
    })
}

/// A background task of `pool` that sends 7, and its result: a decode
/// step handed to the work-stealing pool by a blocking task.
fn decoded_on(pool: &PoolHandle) -> u32 {
    let (decoded, result) = mpsc::channel();
    drop(pool.spawn(Lane::Background, move || decoded.send(7).unwrap()));
    result.recv().unwrap()
}

/// A blocking pool shut down by a task of a work-stealing pool whose only
/// worker is busy with it, while a blocking task waits for the result of
/// a background task of that pool. The shutdown waits for the blocking
/// thread, which waits for the background task. Before, the shutdown slept
/// in a thread join and nobody ran the background task: a hang. Now a
/// thread of a work-stealing pool runs that pool's tasks while it waits for
/// the blocking threads to leave, as `BlockingTask::wait` does.
#[test]
fn shutting_a_blocking_pool_down_on_a_worker_runs_the_tasks_its_threads_wait_for() {
    let answer = drop_a_blocking_pool_on_the_only_worker(
        "a blocking pool shut down on a worker",
        |pool, _| decoded_on(&pool),
    );
    assert_eq!(answer, 7);
}

/// Two shutdowns of one blocking pool, the second inside the first's wait
/// on the same worker. The first (the pool's drop) finds nothing to run and
/// sleeps; the blocking task then queues a task that shuts the pool down
/// too, which the sleeping worker runs; that second call finds nothing
/// either and sleeps; then the blocking task queues the background task it
/// waits for. Each call must run pool work while it waits. Before, both
/// waited on one latch, which takes one waiter: the second call could not
/// register, slept in a plain wait, and nobody ran the background task.
#[test]
fn a_blocking_pool_shut_down_twice_on_one_worker_runs_the_work_each_time() {
    let answer = drop_a_blocking_pool_on_the_only_worker(
        "two shutdowns of a blocking pool on a worker",
        |pool, blocking| {
            // Long enough for the drop's wait to find nothing and sleep (a
            // shorter sleep only makes the case weaker).
            std::thread::sleep(Duration::from_millis(20));
            let (shutting, is_shutting) = mpsc::channel();
            drop(pool.spawn(Lane::Normal, move || {
                shutting.send(()).unwrap();
                blocking.shutdown();
            }));
            is_shutting.recv().unwrap();
            // The same for the second call's wait.
            std::thread::sleep(Duration::from_millis(20));
            decoded_on(&pool)
        },
    );
    assert_eq!(answer, 7);
}

/// Joins on drop, as a game's system might when it is torn down.
struct JoinsOnDrop<'a>(&'a Pool, &'a AtomicUsize);

impl Drop for JoinsOnDrop<'_> {
    fn drop(&mut self) {
        let (a, b) = self.0.join(|| 1, || 2);
        self.0.scope(|s| {
            s.spawn(|_| {
                self.1.fetch_add(1, Ordering::SeqCst);
            });
        });
        self.1.fetch_add(a + b, Ordering::SeqCst);
    }
}

/// Waits in code that runs while the thread unwinds from a panic: a `join`
/// and a `scope` in a destructor, and a pool without workers dropped then,
/// whose drop runs its queued tasks on that thread, each of which joins.
/// Each wait ends normally and the panic goes on to its catch. Before, the
/// scheduler's guard for a queued half saw `panicking()` as the wait ended
/// normally and aborted the process.
#[test]
fn waits_during_a_panic_end_normally() {
    in_child_process("waits_during_a_panic_end_normally", || {
        let pool = Pool::builder().threads(1).build().unwrap();
        let count = AtomicUsize::new(0);
        let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let _joins = JoinsOnDrop(&pool, &count);
            panic!("the frame failed");
        }));
        assert!(caught.is_err());
        assert_eq!(count.load(Ordering::SeqCst), 4);

        let joined = Arc::new(AtomicUsize::new(0));
        let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let pool = Pool::builder().threads(0).build().unwrap();
            for _ in 0..8 {
                let (joined, handle) = (joined.clone(), pool.handle());
                drop(pool.spawn(Lane::Normal, move || {
                    let (a, b) = handle.join(|| 1, || 1);
                    joined.fetch_add(a + b, Ordering::SeqCst);
                }));
            }
            panic!("the level failed to load");
        }));
        assert!(caught.is_err());
        assert_eq!(joined.load(Ordering::SeqCst), 16, "every queued task ran");

        // A graph's frame in a destructor, in each way a frame runs: alone
        // on this thread, and shared with the pool.
        for share in [false, true] {
            let mut graph = a_graph_of_joins(share);
            let nodes = AtomicUsize::new(0);
            let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                let _runs = RunsAFrameOnDrop(&pool, &mut graph, &nodes);
                panic!("the level was unloaded");
            }));
            assert!(caught.is_err());
            assert_eq!(
                nodes.load(Ordering::SeqCst),
                8 * 2,
                "every node ran and joined"
            );
        }
    });
}

/// Eight independent nodes that each `join`, counting into the frame's data;
/// `share`: every frame is shared with the pool, else run alone.
fn a_graph_of_joins(share: bool) -> engine_tasks::TaskGraph<AtomicUsize> {
    use engine_tasks::{NodeContext, TaskGraph};
    let mut b = TaskGraph::<AtomicUsize>::builder();
    for i in 0..8 {
        b.node(
            format!("node {i}"),
            Lane::Normal,
            |cx: &NodeContext<'_, AtomicUsize>| {
                let (a, b) = cx.pool().join(|| 1, || 1);
                cx.data().fetch_add(a + b, Ordering::SeqCst);
            },
        );
    }
    if share {
        b.share_above(Duration::ZERO, Duration::ZERO);
    } else {
        b.share_above(Duration::MAX, Duration::MAX);
    }
    b.build().unwrap()
}

/// Runs a frame of its graph on drop, as a game's teardown might.
struct RunsAFrameOnDrop<'a>(
    &'a Pool,
    &'a mut engine_tasks::TaskGraph<AtomicUsize>,
    &'a AtomicUsize,
);

impl Drop for RunsAFrameOnDrop<'_> {
    fn drop(&mut self) {
        self.1.run(self.0, self.2).expect("no node panicked");
    }
}

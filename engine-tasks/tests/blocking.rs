//! The blocking pool: cap, keep-alive, shutdown, spawn failure,
//! continuations on the work-stealing pool.

use engine_tasks::blocking::{BlockingBuildError, BlockingPoolBuilder};
use engine_tasks::{BlockingError, BlockingPool, JoinError, Lane, Pool};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::thread;
use std::time::{Duration, Instant};

fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        thread::sleep(Duration::from_millis(2));
    }
}

/// Counts how many instances are alive; drop decrements.
struct Alive(Arc<AtomicUsize>);
impl Alive {
    fn new(count: &Arc<AtomicUsize>) -> Alive {
        count.fetch_add(1, Ordering::SeqCst);
        Alive(count.clone())
    }
}
impl Drop for Alive {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

#[test]
fn a_flood_never_exceeds_the_cap() {
    let pool = BlockingPool::builder().cap(4).build().unwrap();
    let running = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let tasks: Vec<_> = (0..300)
        .map(|i| {
            let (running, most) = (running.clone(), most.clone());
            pool.spawn(move || {
                let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(now, Ordering::SeqCst);
                thread::sleep(Duration::from_micros(300));
                running.fetch_sub(1, Ordering::SeqCst);
                i
            })
            .unwrap()
        })
        .collect();
    let sum: usize = tasks.into_iter().map(|t| t.wait().unwrap()).sum();
    assert_eq!(sum, (0..300).sum::<usize>());
    assert!(most.load(Ordering::SeqCst) <= 4);
    let metrics = pool.metrics();
    assert!(metrics.peak_threads <= 4 && metrics.peak_threads >= 1);
    assert_eq!(metrics.completed, 300);
    assert_eq!(metrics.queued, 0);
}

#[test]
fn idle_threads_exit_after_the_keep_alive_and_respawn() {
    let pool = BlockingPool::builder()
        .cap(3)
        .keep_alive(Duration::from_millis(30))
        .build()
        .unwrap();
    for round in 0..3 {
        let tasks: Vec<_> = (0..3)
            .map(|_| {
                pool.spawn(|| thread::sleep(Duration::from_millis(5)))
                    .unwrap()
            })
            .collect();
        for t in tasks {
            t.wait().unwrap();
        }
        assert!(pool.metrics().threads >= 1, "round {round}");
        wait_until("idle threads to exit", || pool.metrics().threads == 0);
        assert_eq!(pool.metrics().idle_threads, 0);
    }
    assert_eq!(pool.metrics().completed, 9);
}

#[test]
fn shutdown_runs_mandatory_tasks_and_drops_the_rest() {
    /// Opens the gate even if an assertion fails, so the pool's drop
    /// cannot wait forever for the gated task.
    struct OpenOnDrop(Arc<AtomicBool>);
    impl Drop for OpenOnDrop {
        fn drop(&mut self) {
            self.0.store(true, Ordering::SeqCst);
        }
    }
    let gate = Arc::new(AtomicBool::new(false));
    let _open = OpenOnDrop(gate.clone());
    let pool = BlockingPool::builder().cap(1).build().unwrap();
    let (g, started) = (gate.clone(), Arc::new(AtomicBool::new(false)));
    let s = started.clone();
    let first = pool
        .spawn(move || {
            s.store(true, Ordering::SeqCst);
            while !g.load(Ordering::SeqCst) {
                thread::sleep(Duration::from_millis(1));
            }
        })
        .unwrap();
    wait_until("the gated task to start", || started.load(Ordering::SeqCst));
    let ran_mandatory = Arc::new(AtomicUsize::new(0));
    let ran_other = Arc::new(AtomicUsize::new(0));
    let alive = Arc::new(AtomicUsize::new(0));
    let mut mandatory = Vec::new();
    let mut others = Vec::new();
    for _ in 0..5 {
        let (ran, token) = (ran_mandatory.clone(), Alive::new(&alive));
        mandatory.push(
            pool.spawn_mandatory(move || {
                let _token = token;
                ran.fetch_add(1, Ordering::SeqCst);
            })
            .unwrap(),
        );
        let (ran, token) = (ran_other.clone(), Alive::new(&alive));
        others.push(
            pool.spawn(move || {
                let _token = token;
                ran.fetch_add(1, Ordering::SeqCst);
            })
            .unwrap(),
        );
    }
    assert_eq!(pool.metrics().queued, 10);
    let opener = {
        let gate = gate.clone();
        thread::spawn(move || {
            thread::sleep(Duration::from_millis(20));
            gate.store(true, Ordering::SeqCst);
        })
    };
    pool.shutdown();
    opener.join().unwrap();
    assert_eq!(ran_mandatory.load(Ordering::SeqCst), 5);
    assert_eq!(ran_other.load(Ordering::SeqCst), 0);
    assert_eq!(
        alive.load(Ordering::SeqCst),
        0,
        "every captured value was dropped"
    );
    first.wait().unwrap();
    for t in mandatory {
        t.wait().unwrap();
    }
    for t in others {
        assert!(matches!(t.wait(), Err(JoinError::Cancelled)));
    }
    assert_eq!(pool.metrics().threads, 0);
    let refused = pool.spawn(|| 1).unwrap_err();
    assert!(matches!(refused, BlockingError::ShutDown(_)));
    assert_eq!((refused.into_inner())(), 1, "the closure comes back");
}

#[test]
fn spawn_failure_with_no_thread_is_an_error_not_a_panic() {
    let pool = BlockingPool::builder()
        .spawn_with(|_, _| Err(std::io::Error::other("thread limit")))
        .build()
        .unwrap();
    let err = pool.spawn(|| 5).unwrap_err();
    assert!(matches!(err, BlockingError::NoThread(_)));
    assert!(err.to_string().contains("no blocking thread"));
    assert_eq!((err.into_inner())(), 5);
    assert!(pool.metrics().spawn_failures >= 1);
    // Mandatory work refused the same way; shutdown has nothing to run.
    assert!(pool.spawn_mandatory(|| ()).is_err());
}

/// `builder`, whose first thread starts and every later start fails.
fn only_one_thread_starts(builder: BlockingPoolBuilder) -> BlockingPoolBuilder {
    let started = AtomicUsize::new(0);
    builder.spawn_with(move |spec, main| {
        if started.fetch_add(1, Ordering::SeqCst) == 0 {
            thread::Builder::new().name(spec.name).spawn(main)
        } else {
            Err(std::io::Error::other("no more threads"))
        }
    })
}

#[test]
fn after_a_spawn_failure_tasks_wait_for_the_threads_that_exist() {
    let pool = only_one_thread_starts(BlockingPool::builder().cap(8))
        .build()
        .unwrap();
    let tasks: Vec<_> = (0..50u64)
        .map(|i| {
            pool.spawn(move || {
                thread::sleep(Duration::from_micros(100));
                i
            })
            .unwrap()
        })
        .collect();
    let sum: u64 = tasks.into_iter().map(|t| t.wait().unwrap()).sum();
    assert_eq!(sum, (0..50).sum::<u64>());
    let metrics = pool.metrics();
    assert_eq!(metrics.peak_threads, 1);
    assert!(metrics.spawn_failures >= 1);
}

#[test]
fn panics_come_back_and_threads_survive() {
    let pool = BlockingPool::builder().cap(2).build().unwrap();
    for i in 0..20 {
        let err = pool
            .spawn(move || -> u32 { panic!("read {i} failed") })
            .unwrap()
            .wait()
            .unwrap_err();
        assert_eq!(
            err.panic_message(),
            Some(format!("read {i} failed").as_str())
        );
    }
    assert_eq!(pool.spawn(|| 3).unwrap().wait().unwrap(), 3);
}

#[test]
fn continuations_run_on_the_work_stealing_pool() {
    let blocking = BlockingPool::new();
    let pool = Pool::builder().threads(2).build().unwrap();
    let (tx, rx) = mpsc::channel();
    for i in 0..100u64 {
        let tx = tx.clone();
        blocking
            .spawn(move || i * 3)
            .unwrap()
            .then(&pool, Lane::Background, move |result| {
                let name = thread::current().name().map(str::to_owned);
                tx.send((result.unwrap(), name)).unwrap();
            });
    }
    drop(tx);
    let got: Vec<(u64, Option<String>)> = rx.iter().collect();
    assert_eq!(got.len(), 100);
    assert_eq!(
        got.iter().map(|g| g.0).sum::<u64>(),
        3 * (0..100).sum::<u64>()
    );
    assert!(got.iter().all(|(_, name)| name
        .as_deref()
        .is_some_and(|n| n.starts_with("engine-worker"))));
}

#[test]
fn a_continuation_is_not_lost_when_the_pool_refuses_it() {
    let blocking = BlockingPool::new();
    let pool = Pool::builder().threads(1).build().unwrap();
    let handle = pool.handle();
    drop(pool); // shut down: spawning now fails
    let (tx, rx) = mpsc::channel();
    blocking
        .spawn(|| 9)
        .unwrap()
        .then(&handle, Lane::Normal, move |r| tx.send(r.unwrap()).unwrap());
    assert_eq!(rx.recv_timeout(Duration::from_secs(30)).unwrap(), 9);
}

#[test]
fn shutdown_from_a_blocking_thread_does_not_deadlock() {
    let pool = BlockingPool::builder().cap(2).build().unwrap();
    let handle = pool.handle();
    let task = pool
        .spawn(move || {
            handle.shutdown();
            7
        })
        .unwrap();
    assert_eq!(task.wait().unwrap(), 7);
    drop(pool);
}

#[test]
fn bad_configurations_are_refused() {
    assert_eq!(
        BlockingPool::builder().cap(0).build().unwrap_err(),
        BlockingBuildError::ZeroCap
    );
    assert_eq!(
        BlockingPool::builder()
            .keep_alive(Duration::ZERO)
            .build()
            .unwrap_err(),
        BlockingBuildError::ZeroKeepAlive
    );
    assert_eq!(
        BlockingPool::builder()
            .thread_name_prefix("disk\0io")
            .build()
            .unwrap_err(),
        BlockingBuildError::NulInThreadName
    );
    for requested in [0, 16 * 1024] {
        let refused = BlockingPool::builder()
            .stack_size(requested)
            .build()
            .unwrap_err();
        assert_eq!(
            refused,
            BlockingBuildError::StackTooSmall {
                requested,
                min: engine_tasks::MIN_STACK_SIZE
            }
        );
        assert!(refused.to_string().contains("below the minimum"));
    }
    let roomy = BlockingPool::builder()
        .stack_size(engine_tasks::MIN_STACK_SIZE)
        .build()
        .unwrap();
    assert_eq!(roomy.spawn(|| 1).unwrap().wait().unwrap(), 1);
}

#[test]
fn a_full_queue_refuses_with_the_closure_back() {
    let pool = BlockingPool::builder()
        .cap(1)
        .max_queued(2)
        .build()
        .unwrap();
    let gate = Arc::new(AtomicBool::new(false));
    let started = Arc::new(AtomicBool::new(false));
    let (g, s) = (gate.clone(), started.clone());
    let busy = pool
        .spawn(move || {
            s.store(true, Ordering::SeqCst);
            while !g.load(Ordering::SeqCst) {
                thread::sleep(Duration::from_millis(1));
            }
        })
        .unwrap();
    wait_until("the only thread to be busy", || {
        started.load(Ordering::SeqCst)
    });
    let queued: Vec<_> = (0..2).map(|i| pool.spawn(move || i).unwrap()).collect();
    let refused = pool.spawn(|| 99).unwrap_err();
    assert!(matches!(refused, BlockingError::Full(_)));
    assert!(refused.to_string().contains("full"));
    assert_eq!((refused.into_inner())(), 99);
    gate.store(true, Ordering::SeqCst);
    busy.wait().unwrap();
    let sum: i32 = queued.into_iter().map(|t| t.wait().unwrap()).sum();
    assert_eq!(sum, 1);
    // With room again, submissions are accepted.
    assert_eq!(pool.spawn(|| 5).unwrap().wait().unwrap(), 5);
}

/// A thread that has started for a task but not yet taken it: that task
/// does not count against `max_queued`, as a task a notified thread will
/// take does not. Before, with `cap(1).max_queued(1)`, a second task
/// submitted before the new thread's first look was refused as `Full`,
/// though nothing waited for a thread yet. The spawn function holds each
/// thread back until the test lets it go, so the order is fixed.
#[test]
fn a_task_a_starting_thread_will_take_does_not_count_against_max_queued() {
    let released = Arc::new(AtomicBool::new(false));
    let hold = released.clone();
    let pool = BlockingPool::builder()
        .cap(1)
        .max_queued(1)
        .spawn_with(move |spec, main| {
            let hold = hold.clone();
            thread::Builder::new().name(spec.name).spawn(move || {
                while !hold.load(Ordering::SeqCst) {
                    thread::sleep(Duration::from_millis(1));
                }
                main()
            })
        })
        .build()
        .unwrap();
    /// Lets the threads go also when an assertion fails, so that the
    /// pool's drop does not wait for them for ever.
    struct Release(Arc<AtomicBool>);
    impl Drop for Release {
        fn drop(&mut self) {
            self.0.store(true, Ordering::SeqCst);
        }
    }
    let release = Release(released);
    let first = pool.spawn(|| 1).unwrap(); // starts the thread, which will take it
    let second = pool.spawn(|| 2).unwrap(); // the one task waiting for a thread
    let refused = pool.spawn(|| 3).unwrap_err();
    assert!(matches!(refused, BlockingError::Full(_)));
    drop(release);
    assert_eq!(first.wait().unwrap() + second.wait().unwrap(), 3);
    assert_eq!(pool.metrics().peak_threads, 1);
}

/// A blocking task that waits for another task of its own pool, with every
/// thread busy (here the only one, the waiter), runs it itself: before, it
/// waited for it behind itself for ever. Mandatory or not, and twice
/// nested.
#[test]
fn a_task_that_waits_for_another_of_its_pool_at_the_cap_runs_it() {
    let pool = BlockingPool::builder().cap(1).build().unwrap();
    let handle = pool.handle();
    let outer = pool
        .spawn(move || {
            let inner_handle = handle.clone();
            let inner = handle
                .spawn(move || {
                    let innermost = inner_handle.spawn_mandatory(|| 3).unwrap();
                    innermost.wait().unwrap() + 2
                })
                .unwrap();
            inner.wait().unwrap() * 10
        })
        .unwrap();
    let (sent, received) = mpsc::channel();
    thread::spawn(move || sent.send(outer.wait()).unwrap());
    let result = received
        .recv_timeout(Duration::from_secs(30))
        .expect("the nested waits hung");
    assert_eq!(result.unwrap(), 50);
    assert_eq!(pool.metrics().completed, 3);
}

/// Every call of `shutdown` from outside the pool waits until the mandatory
/// tasks have run, also when it is not the first: here a task shuts the
/// pool down first and runs a slow mandatory task in its call, and the
/// owner's drop comes meanwhile. Before, that drop returned at once, and a
/// process exiting then would lose the task.
#[test]
fn every_shutdown_waits_for_the_mandatory_tasks() {
    let pool = BlockingPool::builder().cap(1).build().unwrap();
    let handle = pool.handle();
    let saved = Arc::new(AtomicBool::new(false));
    let (started, shutting_down) = mpsc::channel();
    let flag = saved.clone();
    let first = pool
        .spawn(move || {
            let save = handle.spawn_mandatory(move || {
                // Running, inside the task's shutdown: the drop comes now.
                started.send(()).unwrap();
                thread::sleep(Duration::from_millis(100));
                flag.store(true, Ordering::SeqCst);
            });
            // Nobody waits for it: only shutdown does.
            drop(save.unwrap());
            handle.shutdown();
        })
        .unwrap();
    shutting_down.recv().unwrap();
    drop(pool);
    assert!(
        saved.load(Ordering::SeqCst),
        "the drop returned before the save"
    );
    first.wait().unwrap();
}

/// `max_queued` bounds the tasks waiting for a thread also below the cap
/// when no more threads can start (each submission still tries to start
/// one): before, every task was queued.
#[test]
fn max_queued_holds_when_threads_cannot_start() {
    let pool = only_one_thread_starts(BlockingPool::builder().cap(4).max_queued(1))
        .build()
        .unwrap();
    let (running, first_runs) = mpsc::channel();
    let (release, hold) = mpsc::channel::<()>();
    let first = pool
        .spawn(move || {
            running.send(()).unwrap();
            hold.recv().unwrap();
            1
        })
        .unwrap();
    first_runs.recv().unwrap();
    let second = pool.spawn(|| 2).unwrap();
    match pool.spawn(|| 3) {
        Err(BlockingError::Full(closure)) => assert_eq!(closure(), 3),
        other => panic!("expected Full, got {other:?}"),
    }
    assert!(matches!(pool.spawn(|| 4), Err(BlockingError::Full(_))));
    assert_eq!(pool.metrics().queued, 1);
    release.send(()).unwrap();
    assert_eq!(first.wait().unwrap() + second.wait().unwrap(), 3);
    assert_eq!(pool.spawn(|| 5).unwrap().wait().unwrap(), 5);
}

/// A task that shuts its own pool down joins no other thread: one may be
/// waiting for that task (before, it joined it, and both waited for ever).
/// The owner's drop later joins them.
#[test]
fn shutdown_from_a_task_does_not_join_a_thread_that_waits_for_it() {
    let (finished, all_done) = mpsc::channel();
    thread::spawn(move || {
        let pool = BlockingPool::builder().cap(2).build().unwrap();
        let handle = pool.handle();
        let (shut, was_shut) = mpsc::channel::<()>();
        let (waiting, is_waiting) = mpsc::channel::<()>();
        let waiter = pool
            .spawn(move || {
                waiting.send(()).unwrap();
                was_shut.recv().unwrap();
                2
            })
            .unwrap();
        is_waiting.recv().unwrap();
        let shutter = pool
            .spawn(move || {
                handle.shutdown();
                shut.send(()).unwrap();
                1
            })
            .unwrap();
        let sum = shutter.wait().unwrap() + waiter.wait().unwrap();
        drop(pool);
        finished.send(sum).unwrap();
    });
    let sum = all_done
        .recv_timeout(Duration::from_secs(30))
        .expect("the shutdown waited for the task waiting for it");
    assert_eq!(sum, 3);
}

/// Runs `f` on a thread of its own and returns what it returns. If it has
/// not returned in a minute, the process aborts with a message: a panic
/// would drop the test's pool as it unwinds, whose shutdown would wait for
/// the same hung thread, and hang the test run instead of failing it.
fn returns<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || tx.send(f()).unwrap());
    rx.recv_timeout(Duration::from_secs(60))
        .unwrap_or_else(|_| {
            eprintln!("{what} hung for a minute; aborting");
            std::process::abort()
        })
}

/// Shuts `pool` down (failing if that hangs); the threads it has left.
fn threads_after_shutdown(pool: BlockingPool) -> usize {
    returns("the shutdown", move || {
        pool.shutdown();
        pool.metrics().threads
    })
}

/// Where a spawn function drops the function it kept.
#[derive(Clone, Copy)]
enum KeptDropped {
    /// By the test, through `Kept`.
    ByItsOwner,
    /// Inside the second call, under the pool's lock.
    InTheNextCall,
    /// Inside the second call, on a thread the call waits for (a thread
    /// factory, say).
    OnAThreadTheNextCallWaitsFor,
}

/// A spawn function that keeps the function of its first start (answering
/// `Ok` with the handle of a thread that has already ended) and starts
/// every later thread; the kept function is dropped unrun as `dropped`
/// says.
type Kept = Arc<std::sync::Mutex<Option<Box<dyn FnOnce() + Send>>>>;
fn keeps_its_first_function(
    builder: BlockingPoolBuilder,
    dropped: KeptDropped,
) -> (BlockingPoolBuilder, Kept) {
    let kept: Kept = Arc::default();
    let slot = kept.clone();
    let calls = AtomicUsize::new(0);
    let builder = builder.spawn_with(move |spec, main| {
        if calls.fetch_add(1, Ordering::SeqCst) == 0 {
            *slot.lock().unwrap() = Some(main);
            return Ok(thread::spawn(|| ()));
        }
        let function = slot.lock().unwrap().take();
        match dropped {
            KeptDropped::ByItsOwner => *slot.lock().unwrap() = function,
            KeptDropped::InTheNextCall => drop(function),
            KeptDropped::OnAThreadTheNextCallWaitsFor => {
                thread::spawn(move || drop(function)).join().unwrap()
            }
        }
        thread::Builder::new().name(spec.name).spawn(main)
    });
    (builder, kept)
}

#[test]
fn a_function_dropped_unrun_after_its_start_was_counted_gives_its_task_to_another_thread() {
    let (builder, kept) =
        keeps_its_first_function(BlockingPool::builder().cap(2), KeptDropped::ByItsOwner);
    let pool = builder.build().unwrap();
    let task = pool.spawn(|| 7).unwrap();
    assert_eq!(pool.metrics().threads, 1, "the kept start counts, for now");
    // The thread the pool counted will never run: the pool takes it back
    // and starts another for the task.
    // Out of the lock first: the drop may start a thread, through the
    // spawn function, which takes the same lock.
    let function = kept.lock().unwrap().take();
    drop(function);
    assert_eq!(returns("the task", move || task.wait().unwrap()), 7);
    assert_eq!(pool.metrics().spawn_failures, 1);
    assert_eq!(threads_after_shutdown(pool), 0);
}

/// The first start's function is dropped inside the second start's spawn
/// call, as `dropped` says, while that call holds the pool's lock: the
/// count is taken back after the call, and nothing waits for the lock.
fn dropped_during_a_later_spawn_call(dropped: KeptDropped) {
    let (builder, kept) = keeps_its_first_function(BlockingPool::builder().cap(2), dropped);
    let pool = builder.build().unwrap();
    let first = pool.spawn(|| 1).unwrap();
    // No thread is idle: the second task starts a thread, and the spawn
    // function drops the first start's function in that call.
    let handle = pool.handle();
    let second = returns("the second submission", move || handle.spawn(|| 2).unwrap());
    assert!(kept.lock().unwrap().is_none());
    let metrics = pool.metrics();
    assert_eq!((metrics.threads, metrics.spawn_failures), (1, 1));
    let sum = returns("the tasks", move || {
        first.wait().unwrap() + second.wait().unwrap()
    });
    assert_eq!(sum, 3);
    assert_eq!(threads_after_shutdown(pool), 0);
}

#[test]
fn a_function_dropped_unrun_inside_a_later_spawn_call_is_taken_back_after_it() {
    dropped_during_a_later_spawn_call(KeptDropped::InTheNextCall);
}

#[test]
fn a_function_dropped_unrun_on_a_thread_a_spawn_call_waits_for_is_taken_back_after_it() {
    dropped_during_a_later_spawn_call(KeptDropped::OnAThreadTheNextCallWaitsFor);
}

#[test]
fn a_mandatory_task_of_a_start_lost_during_shutdown_runs_in_the_shutdown() {
    let (builder, kept) =
        keeps_its_first_function(BlockingPool::builder().cap(1), KeptDropped::ByItsOwner);
    let pool = builder.build().unwrap();
    let ran = Arc::new(AtomicBool::new(false));
    let flag = ran.clone();
    let task = pool
        .spawn_mandatory(move || flag.store(true, Ordering::SeqCst))
        .unwrap();
    // The shutdown waits for the counted thread; it is lost meanwhile.
    let shutdown = {
        let handle = pool.handle();
        thread::spawn(move || handle.shutdown())
    };
    wait_until("the shutdown to begin", || {
        matches!(pool.spawn(|| ()), Err(BlockingError::ShutDown(_)))
    });
    // Out of the lock first: the drop may start a thread, through the
    // spawn function, which takes the same lock.
    let function = kept.lock().unwrap().take();
    drop(function);
    returns("the shutdown", move || shutdown.join().unwrap());
    assert!(ran.load(Ordering::SeqCst), "the mandatory task ran");
    task.wait().unwrap();
}

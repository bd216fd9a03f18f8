//! Adversarial use through the public API: shapes that once hung or
//! aborted. Every case runs under a watchdog, so a hang fails its test
//! instead of stalling the run; a case that could abort the process runs in
//! a child process of this test binary.

use engine_tasks::{BlockingPool, Lane, Pool};
use std::process::Command;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::{Duration, Instant};

/// How long a case may take before it counts as hung.
const WATCHDOG: Duration = Duration::from_secs(30);

/// Runs `case` on its own thread and returns its result; fails the test if
/// it has not returned within [`WATCHDOG`] (the thread is left behind).
fn within_watchdog<T: Send + 'static>(what: &str, case: impl FnOnce() -> T + Send + 'static) -> T {
    let (send, receive) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = send.send(case());
    });
    match receive.recv_timeout(WATCHDOG) {
        Ok(value) => value,
        Err(RecvTimeoutError::Timeout) => panic!("{what}: hung (no result after {WATCHDOG:?})"),
        Err(RecvTimeoutError::Disconnected) => panic!("{what}: the case panicked"),
    }
}

/// Runs `case` in a child process (this binary, running only test `name`)
/// under the watchdog, and fails unless the child exits successfully: an
/// abort, a panic or a hang in the case fails the test, not the run.
fn in_child_process(name: &str, case: impl FnOnce()) {
    const CHILD: &str = "ENGINE_TASKS_ADVERSARIAL_CHILD";
    if std::env::var(CHILD).as_deref() == Ok(name) {
        case();
        return;
    }
    let mut child = Command::new(std::env::current_exe().expect("own path"))
        .args([name, "--exact", "--test-threads=1", "--nocapture"])
        .env(CHILD, name)
        // Its own test summary would read as this run's; its panics and
        // abort messages go to stderr.
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("the test binary runs");
    let started = Instant::now();
    loop {
        if let Some(status) = child.try_wait().expect("the child can be waited for") {
            assert!(
                status.success(),
                "{name}: the child process ended with {status}"
            );
            return;
        }
        if started.elapsed() > WATCHDOG {
            let _ = child.kill();
            panic!("{name}: hung (the child process ran for {WATCHDOG:?})");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

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

//! Helpers shared by the integration tests. Each test crate uses some of
//! them, so the others would be dead code there.
#![allow(dead_code)]

use engine_tasks::Pool;
use std::process::Command;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::{Duration, Instant};

/// fib(n) with a `join` at every call: fork-join work that pushes, steals
/// and waits.
pub fn fib(pool: &Pool, n: u64) -> u64 {
    if n < 2 {
        return n;
    }
    let (a, b) = pool.join(|| fib(pool, n - 1), || fib(pool, n - 2));
    a + b
}

/// Busy work for `d` (a node that is heavy for the frame-sharing rule).
pub fn spin_for(d: std::time::Duration) {
    let start = std::time::Instant::now();
    while start.elapsed() < d {
        std::hint::spin_loop();
    }
}

/// How long a case may take before it counts as hung.
pub const WATCHDOG: Duration = Duration::from_secs(30);

/// Runs `case` on its own thread and returns its result; fails the test if
/// it has not returned within [`WATCHDOG`] (the thread is left behind).
pub fn within_watchdog<T: Send + 'static>(
    what: &str,
    case: impl FnOnce() -> T + Send + 'static,
) -> T {
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
/// Under Miri, which starts no process, the case runs in this one.
pub fn in_child_process(name: &str, case: impl FnOnce()) {
    const CHILD: &str = "ENGINE_TASKS_ADVERSARIAL_CHILD";
    if cfg!(miri) || std::env::var(CHILD).as_deref() == Ok(name) {
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

//! Helpers shared by the integration tests. Each test crate uses some of
//! them, so the others would be dead code there.
#![allow(dead_code)]

use engine_tasks::Pool;

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

//! Helpers shared by the integration tests.

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

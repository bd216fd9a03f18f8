//! Scheduling, stealing and parking allocate nothing: after a warm-up that
//! starts the worker threads, fork-join work (`join`, `parallel_for`) that
//! pushes, steals and parks makes zero heap allocations.

use engine_tasks::Pool;
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

struct Counting;

static COUNTING: AtomicBool = AtomicBool::new(false);
static ALLOCATIONS: AtomicUsize = AtomicUsize::new(0);

// SAFETY: forwards to the system allocator unchanged; only counts calls.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if COUNTING.load(Ordering::Relaxed) {
            ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: same contract as ours.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as ours.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if COUNTING.load(Ordering::Relaxed) {
            ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: same contract as ours.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn fib(pool: &Pool, n: u64) -> u64 {
    if n < 2 {
        return n;
    }
    let (a, b) = pool.join(|| fib(pool, n - 1), || fib(pool, n - 2));
    a + b
}

fn workload(pool: &Pool) -> u64 {
    let sum = AtomicUsize::new(0);
    pool.parallel_for(0..50_000, 16, |i| {
        sum.fetch_add(i, Ordering::Relaxed);
    });
    fib(pool, 20) + sum.load(Ordering::Relaxed) as u64
}

#[test]
fn steady_state_fork_join_makes_no_allocations() {
    let pool = Pool::builder().threads(3).build().unwrap();
    // Warm-up: start every worker, touch every thread-local.
    for _ in 0..20 {
        workload(&pool);
    }
    assert_eq!(pool.stats().threads_started, 3);
    let parks_before: u64 = pool.stats().parks();
    let steals_before = pool.stats().total().stolen_tasks;

    COUNTING.store(true, Ordering::SeqCst);
    let mut checksum = 0;
    for _ in 0..50 {
        checksum += workload(&pool);
        // Let the workers go idle and park between rounds, as between frames.
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    COUNTING.store(false, Ordering::SeqCst);

    assert_eq!(checksum, 50 * (6765 + 49_999 * 50_000 / 2));
    assert_eq!(ALLOCATIONS.load(Ordering::SeqCst), 0);
    let stats = pool.stats();
    assert!(stats.parks() > parks_before, "the workload parked threads");
    assert!(
        stats.total().stolen_tasks > steals_before,
        "the workload stole tasks"
    );
}

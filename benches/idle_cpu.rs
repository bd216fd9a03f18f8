//! CPU time an idle pool uses in the second after a burst of work.
//!
//! For each pool the binary re-runs itself in a child process (so threads of
//! one pool cannot be charged to another), which: builds the pool, runs a
//! burst of 100,000 small tasks, then sleeps one second and reports the CPU
//! time all its threads used during that second, read from each thread's
//! own CPU clock. (The process total of `getrusage` charged engine-tasks
//! 1.4 ms here: its worker ran the burst without a break, so the whole
//! burst's slice was charged when the worker parked, inside the second.)
//! The baseline is a process that only sleeps.
//!
//! Usage: `cargo run --release -p engine-tasks-benches --bin idle_cpu`
//! (add a count, e.g. `-- 5`, to repeat each measurement and report the median).

use engine_tasks::Pool;
use engine_tasks_benches::{
    medians_from_children, process_threads, threads, threads_cpu_nanos, CountDown, GlobalQueuePool,
};
use std::time::Duration;

const PEERS: [&str; 6] = [
    "sleep-only",
    "engine-tasks",
    "rayon",
    "tokio",
    "bevy_tasks",
    "global-queue",
];
const BURST: usize = 100_000;

/// The CPU microseconds all the process's threads use in one second of
/// sleep, read from each thread's own clock (`threads_cpu_nanos`).
fn idle_second() -> u64 {
    let threads = process_threads();
    let before = threads_cpu_nanos(&threads);
    std::thread::sleep(Duration::from_secs(1));
    let used = threads_cpu_nanos(&threads) - before;
    assert_eq!(
        process_threads(),
        threads,
        "a thread started or exited in the idle second"
    );
    used / 1_000
}

fn measure(peer: &str) -> u64 {
    let n = threads();
    match peer {
        "sleep-only" => idle_second(),
        "engine-tasks" => {
            let pool = Pool::builder().threads(n - 1).build().unwrap();
            pool.scope(|s| (0..BURST).for_each(|_| s.spawn(|_| ())));
            idle_second()
        }
        "rayon" => {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(n)
                .build()
                .unwrap();
            pool.scope(|s| (0..BURST).for_each(|_| s.spawn(|_| ())));
            idle_second()
        }
        "tokio" => {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(n)
                .build()
                .unwrap();
            let handles: Vec<_> = (0..BURST).map(|_| rt.spawn(async {})).collect();
            rt.block_on(async {
                for h in handles {
                    h.await.unwrap();
                }
            });
            idle_second()
        }
        "bevy_tasks" => {
            let pool = bevy_tasks::TaskPoolBuilder::new().num_threads(n).build();
            pool.scope(|s| (0..BURST).for_each(|_| s.spawn(async {})));
            idle_second()
        }
        "global-queue" => {
            let pool = GlobalQueuePool::new(n);
            let handle = pool.handle();
            let done = CountDown::new(BURST);
            for _ in 0..BURST {
                let done = done.clone();
                handle.spawn(move || done.done());
            }
            done.wait();
            idle_second()
        }
        other => panic!("unknown peer {other}"),
    }
}

fn main() {
    let Some((repeats, medians)) = medians_from_children(&PEERS, |peer| vec![measure(peer) as f64])
    else {
        return;
    };
    println!("CPU time used in the idle second after a burst of {BURST} tasks");
    println!(
        "({} threads per pool, median of {repeats} runs)\n",
        threads()
    );
    println!("| pool | idle CPU (ms per second) |");
    println!("|---|---|");
    for (peer, median) in PEERS.iter().zip(medians) {
        println!("| {peer} | {:.2} |", median[0] / 1000.0);
    }
}

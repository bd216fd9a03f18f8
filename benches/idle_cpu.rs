//! CPU time an idle pool uses in the second after a burst of work, and
//! in a second of a trickle of small tasks (a loading screen's jobs).
//!
//! For each pool the binary re-runs itself in a child process (so threads of
//! one pool cannot be charged to another), which: builds the pool, runs a
//! burst of 100,000 small tasks, then sleeps one second and reports the CPU
//! time all its threads used during that second, read from each thread's
//! own CPU clock. (The process total of `getrusage` charged engine-tasks
//! 1.4 ms here: its worker ran the burst without a break, so the whole
//! burst's slice was charged when the worker parked, inside the second.)
//! Then it spawns one small task every 250 µs for a second, and reports
//! the CPU time all its threads used in that second: what each task's
//! wake-up, run and return to sleep cost. The baseline is a process that
//! only sleeps (and counts the tasks itself). `engine-tasks-after-frames`
//! runs 300 frames of the benchmark DAG back to back before the idle
//! second: a game loop that stopped for a loading screen, whose workers
//! must not keep waiting for the next frame.
//!
//! Usage: `cargo run --release -p engine-tasks-benches --bin idle_cpu`
//! (add a count, e.g. `-- 5`, to repeat each measurement and report the median).

use engine_tasks::{Lane, NodeClock, Pool, ReadyOrder};
use engine_tasks_benches::{
    benchmark_dag, graph_of, medians_from_children, process_threads, threads, threads_cpu_nanos,
    CountDown, GlobalQueuePool, Work,
};
use std::time::{Duration, Instant};

const PEERS: [&str; 7] = [
    "sleep-only",
    "engine-tasks",
    "engine-tasks-after-frames",
    "rayon",
    "tokio",
    "bevy_tasks",
    "global-queue",
];
const BURST: usize = 100_000;
/// How often a task comes in the trickle: 4,000 a second.
const TRICKLE_EVERY: Duration = Duration::from_micros(250);

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

fn measure(peer: &str) -> Vec<f64> {
    let n = threads();
    match peer {
        "sleep-only" => vec![
            idle_second() as f64,
            trickle_second(|done| done.done()) as f64,
        ],
        "engine-tasks" | "engine-tasks-after-frames" => {
            let pool = Pool::builder().threads(n - 1).build().unwrap();
            pool.scope(|s| (0..BURST).for_each(|_| s.spawn(|_| ())));
            if peer == "engine-tasks-after-frames" {
                back_to_back_frames(&pool);
            }
            let idle = idle_second();
            let spawn = |done: CountDown| drop(pool.spawn(Lane::Normal, move || done.done()));
            vec![idle as f64, trickle_second(spawn) as f64]
        }
        "rayon" => {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(n)
                .build()
                .unwrap();
            pool.scope(|s| (0..BURST).for_each(|_| s.spawn(|_| ())));
            let idle = idle_second();
            let spawn = |done: CountDown| pool.spawn(move || done.done());
            vec![idle as f64, trickle_second(spawn) as f64]
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
            let idle = idle_second();
            let spawn = |done: CountDown| drop(rt.spawn(async move { done.done() }));
            vec![idle as f64, trickle_second(spawn) as f64]
        }
        "bevy_tasks" => {
            let pool = bevy_tasks::TaskPoolBuilder::new().num_threads(n).build();
            pool.scope(|s| (0..BURST).for_each(|_| s.spawn(async {})));
            let idle = idle_second();
            let spawn = |done: CountDown| pool.spawn(async move { done.done() }).detach();
            vec![idle as f64, trickle_second(spawn) as f64]
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
            let idle = idle_second();
            let spawn = |done: CountDown| handle.spawn(move || done.done());
            vec![idle as f64, trickle_second(spawn) as f64]
        }
        other => panic!("unknown peer {other}"),
    }
}

/// Runs 300 frames of the benchmark DAG (1 µs a node) back to back, then
/// stops: a game loop that goes to a loading screen.
fn back_to_back_frames(pool: &Pool) {
    let deps = benchmark_dag();
    let works = vec![Work::nanos(1_000); deps.len()];
    let mut graph = graph_of(&deps, &works, ReadyOrder::CriticalPathFirst, NodeClock::On);
    for _ in 0..300 {
        graph.run(pool, &()).unwrap();
    }
}

/// The CPU microseconds all the process's threads use in a second in which
/// one task is spawned every [`TRICKLE_EVERY`] (a loading screen's trickle
/// of small jobs), until the last has run. `spawn` spawns a task that calls
/// `done` on what it is given; the sleep-only baseline calls it at once.
fn trickle_second(spawn: impl Fn(CountDown)) -> u64 {
    let threads = process_threads();
    let before = threads_cpu_nanos(&threads);
    let tasks = (Duration::from_secs(1).as_nanos() / TRICKLE_EVERY.as_nanos()) as usize;
    let done = CountDown::new(tasks);
    let start = Instant::now();
    for i in 0..tasks {
        let at = start + TRICKLE_EVERY * i as u32;
        std::thread::sleep(at.saturating_duration_since(Instant::now()));
        spawn(done.clone());
    }
    done.wait();
    let used = threads_cpu_nanos(&threads) - before;
    assert_eq!(
        process_threads(),
        threads,
        "a thread started or exited in the trickle"
    );
    used / 1_000
}

fn main() {
    let Some((repeats, medians)) = medians_from_children(&PEERS, measure) else {
        return;
    };
    println!(
        "CPU time used in the idle second after a burst of {BURST} tasks, and in a second \
         of one small task every {} µs",
        TRICKLE_EVERY.as_micros()
    );
    println!(
        "({} threads per pool, median of {repeats} runs)\n",
        threads()
    );
    println!("| pool | idle CPU (ms per second) | trickle CPU (ms per second) |");
    println!("|---|---|---|");
    for (peer, median) in PEERS.iter().zip(medians) {
        println!(
            "| {peer} | {:.2} | {:.2} |",
            median[0] / 1000.0,
            median[1] / 1000.0
        );
    }
}

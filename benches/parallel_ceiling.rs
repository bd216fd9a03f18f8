//! How much faster two threads run independent work than one, on this
//! machine: the ceiling every parallel frame is measured against.
//!
//! The graph benchmarks compare frame times with max(critical path, total
//! work / threads). That bound assumes `threads` threads each run the work at
//! full speed. On a shared VM two vCPUs may be hyper-threads of one core, or
//! be descheduled by the host, so this binary measures the speed-up with no
//! scheduler at all: the 256 nodes' worth of the graph benchmark's busy work
//! run once on one thread, then split 128 + 128 over two plain threads that
//! start together at a barrier. Nothing is shared but the barrier.
//!
//! Then it measures the floor of running the benchmark's DAG itself on two
//! threads of this machine: a schedule fixed in advance (greedy, longest
//! remaining chain first, which takes 128 node times for 256 nodes), two
//! threads that never sleep, and per node only a spin until its
//! dependencies' "done" flags show this round, the work, and a store of its
//! own flag. No queue, no read-modify-write, no wake-up: what remains is
//! the cost of seeing the other core's results (cache lines moving between
//! cores) and of waiting for them, under one good schedule (it does not try
//! to keep edges on one core, so it is a floor for the machine, not the
//! least any schedule could reach). Beside it, the same DAG as an
//! engine-tasks graph on a pool of the default size (one worker and the
//! calling thread), timed and untimed, frames back to back; with 0 ns of
//! work those frames run on one thread (too light to share), so that row
//! compares one thread against the two-thread floor.
//!
//! The peers run the same DAG in both tables, each on two threads of its
//! own: `rayon scope` (a scope that spawns each ready node) and `global
//! queue` (the same runner on one mutex-guarded queue).
//!
//! A second table runs the graphs paced, as a game loop does (a sleep until
//! the next tick of 30, 60 or 240 Hz before each frame, 61 frames each), so
//! that every frame starts with parked threads, against the one-thread
//! loop paced the same way: a thread woken from a sleep runs slower at
//! first than one running back to back. Its ceiling is two plain threads
//! that split the work in halves and are both awake when the frame starts
//! (the helper wakes on its own timer a little before the tick and spins
//! until the frame's thread starts the frame): what two
//! threads of this machine give paced work, with no scheduler and no
//! wake-up in the frame. Beside it, the DAG's fixed schedule on two such
//! threads: the floor of a paced frame whose nodes wait for each other's
//! results across the cores.
//!
//! Usage: `cargo run --release -p engine-tasks-benches --bin parallel_ceiling`
//! Prints, per work size, the medians over 201 rounds and their ratio.

use engine_tasks::{NodeClock, Pool, ReadyOrder};
use engine_tasks_benches::{
    benchmark_dag, graph_of, greedy_two_thread_schedule, median, run_list, threads, GlobalQueueDag,
    GlobalQueuePool, Pacer, Pacing, RayonDag, Work,
};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

const NODES: usize = 256;
const ROUNDS: usize = 201;

fn micros(time: Duration) -> f64 {
    time.as_secs_f64() * 1e6
}

/// Median microseconds per round.
fn one_thread(work: Work) -> f64 {
    median(
        (0..ROUNDS)
            .map(|_| {
                let start = Instant::now();
                (0..NODES).for_each(|_| work.run());
                micros(start.elapsed())
            })
            .collect(),
    )
}

/// Two threads, each running half the nodes per round; a round's time is
/// from the common start to the later thread's end. Median microseconds.
fn two_threads(work: Work) -> f64 {
    let start_line = Arc::new(Barrier::new(2));
    let helper = {
        let start_line = start_line.clone();
        std::thread::spawn(move || {
            (0..ROUNDS)
                .map(|_| {
                    start_line.wait();
                    (0..NODES / 2).for_each(|_| work.run());
                    Instant::now()
                })
                .collect::<Vec<_>>()
        })
    };
    let mut rounds = Vec::with_capacity(ROUNDS);
    for _ in 0..ROUNDS {
        start_line.wait();
        let start = Instant::now();
        (0..NODES / 2).for_each(|_| work.run());
        rounds.push((start, Instant::now()));
    }
    let helper_ends = helper.join().unwrap();
    median(
        rounds
            .into_iter()
            .zip(helper_ends)
            .map(|((start, end), helper_end)| micros(end.max(helper_end) - start))
            .collect(),
    )
}

/// Bits of a paced tick's nanoseconds (after the measurement's start) in
/// the word that also holds its round: 18 minutes, where a measurement of
/// 122 rounds at 30 Hz takes about 4 s.
const TICK_BITS: u32 = 40;

/// How long before the tick the helper of [`paced_pair`] wakes, to spin
/// until it: more than a timer's usual lateness here (tens of µs).
const HELPER_LEAD: Duration = Duration::from_micros(300);

/// Two plain threads at `pacing`, each running half the nodes per frame,
/// both awake when the frame starts ([`paced_pair`]). What two threads of
/// this machine give paced work with no scheduler and no wake-up latency.
fn two_threads_paced(work: Work, pacing: Pacing) -> f64 {
    let Pacing::Hz(hz) = pacing else {
        return two_threads(work);
    };
    let half = move |_round: u64| (0..NODES / 2).for_each(|_| work.run());
    paced_pair(hz, half, half)
}

/// The DAG on two threads with the fixed schedule of [`fixed_dag`], paced
/// and both awake when the frame starts ([`paced_pair`]): what two threads
/// of this machine give a paced frame whose nodes wait for each other's
/// results across the cores, with no scheduler and no wake-up latency.
fn fixed_dag_paced(work: Work, pacing: Pacing) -> f64 {
    let Pacing::Hz(hz) = pacing else {
        return fixed_dag(work);
    };
    let deps = Arc::new(benchmark_dag());
    let [mine, theirs] = greedy_two_thread_schedule(&deps);
    let done: Arc<Vec<AtomicU64>> = Arc::new(deps.iter().map(|_| AtomicU64::new(0)).collect());
    let helper = {
        let (deps, done) = (deps.clone(), done.clone());
        move |round: u64| run_list(&theirs, &deps, &done, round, work)
    };
    paced_pair(
        hz,
        move |round| run_list(&mine, &deps, &done, round, work),
        helper,
    )
}

/// Runs a frame split over two plain threads at `hz`, both awake when it
/// starts: the frame's thread sleeps until the tick as a game loop does,
/// then runs `main` for the round; the helper sleeps until [`HELPER_LEAD`]
/// before the tick on its own timer, spins until the frame's thread starts
/// the frame, then runs `helper` for the round (rounds count from 1), so no
/// wake-up is paid in the frame. Median microseconds from the frame's start
/// (after the frame's thread woke, as the other runners are timed) to the
/// later thread's end, over [`PACED_ROUNDS`] frames after as many of
/// warm-up.
fn paced_pair(
    hz: f64,
    mut main: impl FnMut(u64),
    mut helper: impl FnMut(u64) + Send + 'static,
) -> f64 {
    let period = Duration::from_secs_f64(1.0 / hz);
    let base = Instant::now();
    let rounds = 2 * PACED_ROUNDS as u64;
    // The next tick, in nanoseconds after `base`, and the helper's end of
    // each round.
    let tick = Arc::new(AtomicU64::new(0));
    // The round that started, and the round whose part the helper ended.
    let started = Arc::new(AtomicU64::new(0));
    let finished = Arc::new(AtomicU64::new(0));
    let helper = {
        let (tick, started, finished) = (tick.clone(), started.clone(), finished.clone());
        std::thread::spawn(move || {
            let mut ends = Vec::with_capacity(rounds as usize);
            for r in 1..=rounds {
                // Acquire: pairs with the Release store of round r's tick
                // (published as soon as round r - 1 ended).
                let at = loop {
                    let at = tick.load(Ordering::Acquire);
                    if at >> TICK_BITS == r {
                        break base + Duration::from_nanos(at & ((1 << TICK_BITS) - 1));
                    }
                    std::hint::spin_loop();
                };
                let wake = at.checked_sub(HELPER_LEAD).unwrap_or(at);
                std::thread::sleep(wake.saturating_duration_since(Instant::now()));
                // Acquire: pairs with the Release store of the frame's
                // start.
                while started.load(Ordering::Acquire) != r {
                    std::hint::spin_loop();
                }
                helper(r);
                ends.push(Instant::now());
                // Release: the round's end, for the frame's thread.
                finished.store(r, Ordering::Release);
            }
            ends
        })
    };
    let mut next = Instant::now();
    let mut frames = Vec::with_capacity(rounds as usize);
    for r in 1..=rounds {
        next = (next + period).max(Instant::now() + HELPER_LEAD);
        let at = (next - base).as_nanos() as u64;
        assert!(
            at < 1 << TICK_BITS,
            "the measurement outran its tick encoding"
        );
        // Release: pairs with the helper's Acquire load.
        tick.store(r << TICK_BITS | at, Ordering::Release);
        std::thread::sleep(next.saturating_duration_since(Instant::now()));
        let start = Instant::now();
        // Release: pairs with the helper's Acquire load.
        started.store(r, Ordering::Release);
        main(r);
        let end = Instant::now();
        // Acquire: pairs with the helper's Release store.
        while finished.load(Ordering::Acquire) != r {
            std::hint::spin_loop();
        }
        frames.push((start, end));
    }
    let helper_ends = helper.join().unwrap();
    median(
        frames
            .into_iter()
            .zip(helper_ends)
            .skip(PACED_ROUNDS)
            .map(|((start, end), helper_end)| micros(end.max(helper_end) - start))
            .collect(),
    )
}

/// The DAG on two spinning threads with a fixed schedule; median
/// microseconds per round (from publishing the round to both lists done).
fn fixed_dag(work: Work) -> f64 {
    let deps = Arc::new(benchmark_dag());
    let [mine, theirs] = greedy_two_thread_schedule(&deps);
    let done: Arc<Vec<AtomicU64>> = Arc::new(deps.iter().map(|_| AtomicU64::new(0)).collect());
    let round = Arc::new(AtomicU64::new(0));
    let finished = Arc::new(AtomicU64::new(0));
    let helper = {
        let (deps, done, round, finished) =
            (deps.clone(), done.clone(), round.clone(), finished.clone());
        std::thread::spawn(move || {
            for r in 1..=ROUNDS as u64 {
                // Acquire: pairs with the Release store of the round below.
                while round.load(Ordering::Acquire) != r {
                    std::hint::spin_loop();
                }
                run_list(&theirs, &deps, &done, r, work);
                // Release: the round's end, for the timing thread.
                finished.store(r, Ordering::Release);
            }
        })
    };
    let mut rounds = Vec::with_capacity(ROUNDS);
    for r in 1..=ROUNDS as u64 {
        let start = Instant::now();
        // Release: pairs with the helper's Acquire load.
        round.store(r, Ordering::Release);
        run_list(&mine, &deps, &done, r, work);
        // Acquire: pairs with the helper's Release store.
        while finished.load(Ordering::Acquire) != r {
            std::hint::spin_loop();
        }
        rounds.push(micros(start.elapsed()));
    }
    helper.join().unwrap();
    median(rounds)
}

/// Paced frames per measurement.
const PACED_ROUNDS: usize = 61;

/// Median microseconds of `frame` at `pacing` (each frame timed alone
/// after a sleep until the tick), after as many frames of warm-up.
fn median_frame_at(pacing: Pacing, mut frame: impl FnMut()) -> f64 {
    let rounds = match pacing {
        Pacing::BackToBack => ROUNDS,
        Pacing::Hz(_) => PACED_ROUNDS,
    };
    let mut pacer = Pacer::new(pacing);
    for _ in 0..rounds {
        pacer.wait();
        frame();
    }
    median(
        (0..rounds)
            .map(|_| {
                pacer.wait();
                let start = Instant::now();
                frame();
                micros(start.elapsed())
            })
            .collect(),
    )
}

/// The DAG as an engine-tasks graph at `pacing`; median microseconds per
/// frame.
fn engine_tasks_dag(pool: &Pool, work: Work, clock: NodeClock, pacing: Pacing) -> f64 {
    let deps = benchmark_dag();
    let works = vec![work; deps.len()];
    let mut graph = graph_of(&deps, &works, ReadyOrder::CriticalPathFirst, clock);
    median_frame_at(pacing, || {
        graph.run(pool, &()).unwrap();
    })
}

/// The peers' DAG runners at `pacing`, each on two threads of its own:
/// median microseconds per frame of rayon's scope and of the global queue.
fn peer_dags(peers: &Peers, work: Work, pacing: Pacing) -> [f64; 2] {
    let deps = benchmark_dag();
    let works = vec![work; deps.len()];
    let rayon_dag = RayonDag::new(&deps, &works);
    let global_dag = GlobalQueueDag::new(&deps, &works);
    [
        median_frame_at(pacing, || rayon_dag.run(&peers.rayon)),
        median_frame_at(pacing, || global_dag.run(&peers.global)),
    ]
}

/// The peers' pools.
struct Peers {
    rayon: rayon::ThreadPool,
    global: GlobalQueuePool,
}

fn main() {
    let pool = Pool::builder().threads(threads() - 1).build().unwrap();
    let peers = Peers {
        rayon: rayon::ThreadPoolBuilder::new()
            .num_threads(threads())
            .build()
            .unwrap(),
        global: GlobalQueuePool::new(threads()),
    };
    println!("{NODES} nodes of busy work, medians of {ROUNDS} rounds (µs)");
    println!("over one thread / 2: (time - one thread / 2) per node, in ns");
    println!(
        "{:>8} {:>10} {:>10} {:>8} {:>16} {:>22} {:>22} {:>22} {:>22}",
        "per node",
        "one thread",
        "two threads",
        "speed-up",
        "DAG, fixed (over)",
        "engine-tasks (over)",
        "untimed (over)",
        "rayon scope (over)",
        "global queue (over)"
    );
    for nanos in [0, 1_000, 20_000] {
        let work = Work::nanos(nanos);
        let one = one_thread(work);
        let two = two_threads(work);
        let over = |time: f64| (time - one / 2.0) * 1000.0 / NODES as f64;
        let dag = fixed_dag(work);
        let timed = engine_tasks_dag(&pool, work, NodeClock::On, Pacing::BackToBack);
        let untimed = engine_tasks_dag(&pool, work, NodeClock::Off, Pacing::BackToBack);
        let [rayon, global] = peer_dags(&peers, work, Pacing::BackToBack);
        println!(
            "{:>5} ns {:>10.1} {:>11.1} {:>7.2}x {:>9.1} ({:>4.0}) {:>14.1} ({:>5.0}) {:>14.1} ({:>5.0}) {:>14.1} ({:>5.0}) {:>14.1} ({:>5.0})",
            nanos,
            one,
            two,
            one / two,
            dag,
            over(dag),
            timed,
            over(timed),
            untimed,
            over(untimed),
            rayon,
            over(rayon),
            global,
            over(global),
        );
    }
    println!(
        "\npaced: frame / (one thread / 2), the one thread paced alike; two plain \
         threads awake at the frame's start, splitting the work and running the DAG fixed; \
         engine-tasks timed / untimed, rayon scope, global queue"
    );
    for nanos in [0, 1_000, 20_000] {
        let work = Work::nanos(nanos);
        let mut row = format!("{nanos:>5} ns");
        for &pacing in &Pacing::ALL[1..] {
            let one = median_frame_at(pacing, || (0..NODES).for_each(|_| work.run()));
            let two = two_threads_paced(work, pacing);
            let dag = fixed_dag_paced(work, pacing);
            let timed = engine_tasks_dag(&pool, work, NodeClock::On, pacing);
            let untimed = engine_tasks_dag(&pool, work, NodeClock::Off, pacing);
            let [rayon, global] = peer_dags(&peers, work, pacing);
            let ratio = |time: f64| time / (one / 2.0);
            row.push_str(&format!(
                "  {}: one {one:.1} µs, two {:.2}x, DAG fixed {:.2}x, {:.2}x/{:.2}x, {:.2}x, {:.2}x",
                pacing.label(),
                ratio(two),
                ratio(dag),
                ratio(timed),
                ratio(untimed),
                ratio(rayon),
                ratio(global)
            ));
        }
        println!("{row}");
    }
}

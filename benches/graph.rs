//! Task-graph benchmarks against peers, all in one run with the same thread
//! budget (see `threads()` in lib.rs):
//!
//! 1. `dag256/<work>`: one frame of a fixed random DAG of 256 nodes (16
//!    layers of 16, each node after 1 to 3 nodes of the layer before) with
//!    0 ns, 1 µs or 20 µs of calibrated busy work per node. Peers: bevy_ecs
//!    `Schedule` with its multi-threaded and single-threaded executors (256
//!    systems in 256 system sets, ordered by the same edges), a rayon-scope
//!    runner with atomic in-degree counters, the same runner on a
//!    global-queue pool, and a plain sequential loop.
//!    `two-halves-no-deps` runs the same work without its edges, in two
//!    halves on two threads: what the machine gives two threads for it,
//!    to set beside the nominal bound of half the sequential time.
//!    `engine-tasks-untimed` is the same graph built with
//!    `node_clock(NodeClock::Off)`: no clock reads per node.
//! 2. `dag256-paced/<work>/<rate>`: the same DAG paced as a game loop runs
//!    it, at 30, 60 and 240 Hz: each frame is timed alone, then the runner
//!    sleeps until the next tick, so every pool's threads park between
//!    frames. `engine-tasks-sleep-until` waits for each tick with the
//!    graph's own `TaskGraph::sleep_until`, which warms the frame shortly
//!    before it, where every other runner sleeps plainly; `engine-tasks`
//!    sleeps plainly too. Peers: bevy_ecs's multi-threaded and single-threaded
//!    executors, the rayon scope,
//!    the same runner on a global-queue pool (`global-queue`), and the
//!    sequential loop. `paced_frames` prints the same cases as ratios to
//!    the bound.
//! 3. `skewed`: critical path first against FIFO on a graph whose long chain
//!    (8 nodes of 50 µs) is declared after 64 independent nodes of 10 µs.
//!    With two threads the lower bound is max(400 µs, 1040 µs / 2) = 520 µs
//!    nominally; `chain-only` and `all-work-sequential` measure both terms
//!    in the same run.

use bevy_ecs::schedule::{MultiThreadedExecutor, SingleThreadedExecutor};
use criterion::{
    criterion_group, criterion_main, BenchmarkId, Criterion, SamplingMode, Throughput,
};
use engine_tasks::{NodeClock, Pool, ReadyOrder};
use engine_tasks_benches::{
    benchmark_dag, bevy_schedule, graph_of, init_bevy_pool, paced_iters, paced_iters_waiting,
    paced_times, threads, GlobalQueueDag, GlobalQueuePool, Pacer, Pacing, RayonDag, Work,
};
use std::time::Duration;

fn dag256(c: &mut Criterion) {
    let deps = benchmark_dag();
    let n = deps.len();
    init_bevy_pool(threads());
    let pool = Pool::builder().threads(threads() - 1).build().unwrap();
    let rayon = rayon::ThreadPoolBuilder::new()
        .num_threads(threads())
        .build()
        .unwrap();
    let global = GlobalQueuePool::new(threads());

    for nanos in [0u64, 1_000, 20_000] {
        let work = vec![Work::nanos(nanos); n];
        let mut group = c.benchmark_group(format!("dag256/{nanos}ns"));
        group.throughput(Throughput::Elements(n as u64));
        group.sample_size(if nanos >= 20_000 { 20 } else { 50 });
        group.warm_up_time(Duration::from_secs(1));
        group.measurement_time(Duration::from_secs(3));

        let mut graph = graph_of(&deps, &work, ReadyOrder::CriticalPathFirst, NodeClock::On);
        group.bench_function("engine-tasks", |b| {
            b.iter(|| {
                graph.run(&pool, &()).unwrap();
            })
        });

        // The same graph without per-node clock reads (no node times).
        let mut untimed = graph_of(&deps, &work, ReadyOrder::CriticalPathFirst, NodeClock::Off);
        group.bench_function("engine-tasks-untimed", |b| {
            b.iter(|| {
                untimed.run(&pool, &()).unwrap();
            })
        });

        let (mut world, mut schedule) = bevy_schedule(&deps, &work, MultiThreadedExecutor::new());
        group.bench_function("bevy-multi-threaded", |b| {
            b.iter(|| schedule.run(&mut world))
        });

        let (mut world, mut schedule) = bevy_schedule(&deps, &work, SingleThreadedExecutor::new());
        group.bench_function("bevy-single-threaded", |b| {
            b.iter(|| schedule.run(&mut world))
        });

        let dag = RayonDag::new(&deps, &work);
        group.bench_function("rayon-scope", |b| b.iter(|| dag.run(&rayon)));

        let global_dag = GlobalQueueDag::new(&deps, &work);
        group.bench_function("global-queue", |b| b.iter(|| global_dag.run(&global)));

        group.bench_function("sequential", |b| {
            b.iter(|| {
                for w in &work {
                    w.run();
                }
            })
        });

        // The same work with no dependencies, split in two halves that
        // rayon runs at once: what two threads of this machine reach for
        // this work when nothing orders it (both halves start with a wake-up).
        let (first, second) = work.split_at(n / 2);
        group.bench_function("two-halves-no-deps", |b| {
            b.iter(|| {
                rayon.join(
                    || first.iter().for_each(|w| w.run()),
                    || second.iter().for_each(|w| w.run()),
                )
            })
        });
        group.finish();
    }
}

fn skewed(c: &mut Criterion) {
    const SHORT: usize = 64;
    const CHAIN: usize = 8;
    let mut deps: Vec<Vec<usize>> = vec![Vec::new(); SHORT];
    let mut work = vec![Work::nanos(10_000); SHORT];
    for k in 0..CHAIN {
        deps.push(if k == 0 {
            Vec::new()
        } else {
            vec![SHORT + k - 1]
        });
        work.push(Work::nanos(50_000));
    }
    let pool = Pool::builder().threads(threads() - 1).build().unwrap();
    let mut group = c.benchmark_group("skewed");
    group.sample_size(30);
    for (name, order) in [
        ("critical-path-first", ReadyOrder::CriticalPathFirst),
        ("fifo", ReadyOrder::Fifo),
    ] {
        let mut graph = graph_of(&deps, &work, order, NodeClock::On);
        group.bench_function(BenchmarkId::new("engine-tasks", name), |b| {
            b.iter(|| {
                graph.run(&pool, &()).unwrap();
            })
        });
    }
    // The lower bound's two terms, measured in the same run: the chain
    // alone (the critical path) and all the work on one thread (halved for
    // two threads).
    group.bench_function("chain-only", |b| {
        b.iter(|| work[SHORT..].iter().for_each(|w| w.run()))
    });
    group.bench_function("all-work-sequential", |b| {
        b.iter(|| work.iter().for_each(|w| w.run()))
    });
    group.finish();
}

fn dag256_paced(c: &mut Criterion) {
    let deps = benchmark_dag();
    let n = deps.len();
    init_bevy_pool(threads());
    let pool = Pool::builder().threads(threads() - 1).build().unwrap();
    let rayon = rayon::ThreadPoolBuilder::new()
        .num_threads(threads())
        .build()
        .unwrap();
    let global = GlobalQueuePool::new(threads());
    for nanos in [0u64, 1_000, 20_000] {
        let work = vec![Work::nanos(nanos); n];
        let mut graph = graph_of(&deps, &work, ReadyOrder::CriticalPathFirst, NodeClock::On);
        let (mut world, mut schedule) = bevy_schedule(&deps, &work, MultiThreadedExecutor::new());
        let (mut single_world, mut single) =
            bevy_schedule(&deps, &work, SingleThreadedExecutor::new());
        let rayon_dag = RayonDag::new(&deps, &work);
        let global_dag = GlobalQueueDag::new(&deps, &work);
        for pacing in &Pacing::ALL[1..] {
            let mut group = c.benchmark_group(format!("dag256-paced/{nanos}ns/{}", pacing.label()));
            group.throughput(Throughput::Elements(n as u64));
            group.sampling_mode(SamplingMode::Flat);
            // 50 samples of several frames each (`paced_times`).
            group.sample_size(50);
            let Pacing::Hz(hz) = *pacing else {
                unreachable!("only paced groups here")
            };
            let (warm_up, measurement) = paced_times(hz);
            group.warm_up_time(warm_up);
            group.measurement_time(measurement);
            // One pacer per runner, for all its samples (`paced_iters`).
            let pacer = || Pacer::new(*pacing);
            let mut p = pacer();
            group.bench_function("engine-tasks", |b| {
                b.iter_custom(|iters| {
                    paced_iters(&mut p, iters, || {
                        graph.run(&pool, &()).unwrap();
                    })
                })
            });
            // The same graph waiting with its own `sleep_until`, which
            // warms the frame before the tick.
            let mut p = pacer();
            group.bench_function("engine-tasks-sleep-until", |b| {
                b.iter_custom(|iters| {
                    paced_iters_waiting(
                        &mut p,
                        iters,
                        &mut graph,
                        |graph, tick| graph.sleep_until(&pool, tick),
                        |graph| {
                            graph.run(&pool, &()).unwrap();
                        },
                    )
                })
            });
            let mut p = pacer();
            group.bench_function("bevy-multi-threaded", |b| {
                b.iter_custom(|iters| paced_iters(&mut p, iters, || schedule.run(&mut world)))
            });
            let mut p = pacer();
            group.bench_function("bevy-single-threaded", |b| {
                b.iter_custom(|iters| paced_iters(&mut p, iters, || single.run(&mut single_world)))
            });
            let mut p = pacer();
            group.bench_function("rayon-scope", |b| {
                b.iter_custom(|iters| paced_iters(&mut p, iters, || rayon_dag.run(&rayon)))
            });
            let mut p = pacer();
            group.bench_function("global-queue", |b| {
                b.iter_custom(|iters| paced_iters(&mut p, iters, || global_dag.run(&global)))
            });
            let mut p = pacer();
            group.bench_function("sequential", |b| {
                b.iter_custom(|iters| {
                    paced_iters(&mut p, iters, || work.iter().for_each(|w| w.run()))
                })
            });
            group.finish();
        }
    }
}

criterion_group!(benches, dag256, dag256_paced, skewed);
criterion_main!(benches);

//! Task-graph benchmarks against peers, all in one run with the same thread
//! budget (see `threads()` in lib.rs):
//!
//! 1. `dag256/<work>`: one frame of a fixed random DAG of 256 nodes (16
//!    layers of 16, each node after 1 to 3 nodes of the layer before) with
//!    0 ns, 1 µs or 20 µs of calibrated busy work per node. Peers: bevy_ecs
//!    `Schedule` with its multi-threaded and single-threaded executors (256
//!    systems in 256 system sets, ordered by the same edges), a rayon-scope
//!    runner with atomic in-degree counters, and a plain sequential loop.
//!    `two-halves-no-deps` runs the same work without its edges, in two
//!    halves on two threads: what the machine gives two threads for it,
//!    to set beside the nominal bound of half the sequential time.
//!    `engine-tasks-untimed` is the same graph built with
//!    `measure_nodes(false)`: no clock reads per node.
//! 2. `skewed`: critical path first against FIFO on a graph whose long chain
//!    (8 nodes of 50 µs) is declared after 64 independent nodes of 10 µs.
//!    With two threads the lower bound is max(400 µs, 1040 µs / 2) = 520 µs
//!    nominally; `chain-only` and `all-work-sequential` measure both terms
//!    in the same run.

use bevy_ecs::prelude::*;
use bevy_ecs::schedule::{MultiThreadedExecutor, SingleThreadedExecutor, SystemExecutor};
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use engine_tasks::{Pool, ReadyOrder};
use engine_tasks_benches::{benchmark_dag, graph_of, threads, Work};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

/// The DAG runner a rayon user would write: a scope, one spawn per ready
/// node, atomic in-degree counters.
struct RayonDag {
    successors: Vec<Vec<usize>>,
    in_degree: Vec<usize>,
    pending: Vec<AtomicUsize>,
    work: Vec<Work>,
}

impl RayonDag {
    fn new(deps: &[Vec<usize>], work: &[Work]) -> Self {
        let mut successors = vec![Vec::new(); deps.len()];
        for (i, d) in deps.iter().enumerate() {
            for &d in d {
                successors[d].push(i);
            }
        }
        RayonDag {
            successors,
            in_degree: deps.iter().map(Vec::len).collect(),
            pending: deps.iter().map(|d| AtomicUsize::new(d.len())).collect(),
            work: work.to_vec(),
        }
    }

    fn run(&self, pool: &rayon::ThreadPool) {
        for (p, &d) in self.pending.iter().zip(&self.in_degree) {
            p.store(d, Ordering::Relaxed);
        }
        pool.scope(|s| {
            for i in (0..self.in_degree.len()).filter(|&i| self.in_degree[i] == 0) {
                s.spawn(move |s| self.node(s, i));
            }
        });
    }

    fn node<'s>(&'s self, s: &rayon::Scope<'s>, i: usize) {
        self.work[i].run();
        for &j in &self.successors[i] {
            if self.pending[j].fetch_sub(1, Ordering::AcqRel) == 1 {
                s.spawn(move |s| self.node(s, j));
            }
        }
    }
}

#[derive(SystemSet, Debug, Clone, PartialEq, Eq, Hash)]
struct NodeSet(usize);

fn bevy_schedule(
    deps: &[Vec<usize>],
    work: &[Work],
    executor: impl SystemExecutor + 'static,
) -> (World, Schedule) {
    let mut schedule = Schedule::default();
    schedule.set_executor(executor);
    for (i, d) in deps.iter().enumerate() {
        let w = work[i];
        schedule.add_systems((move || w.run()).in_set(NodeSet(i)));
        for &d in d {
            schedule.configure_sets(NodeSet(i).after(NodeSet(d)));
        }
    }
    let mut world = World::new();
    schedule.run(&mut world);
    (world, schedule)
}

fn dag256(c: &mut Criterion) {
    let deps = benchmark_dag();
    let n = deps.len();
    bevy_tasks::ComputeTaskPool::get_or_init(|| {
        bevy_tasks::TaskPoolBuilder::new()
            .num_threads(threads())
            .build()
    });
    let pool = Pool::builder().threads(threads() - 1).build().unwrap();
    let rayon = rayon::ThreadPoolBuilder::new()
        .num_threads(threads())
        .build()
        .unwrap();

    for nanos in [0u64, 1_000, 20_000] {
        let work = vec![Work::nanos(nanos); n];
        let mut group = c.benchmark_group(format!("dag256/{nanos}ns"));
        group.throughput(Throughput::Elements(n as u64));
        group.sample_size(if nanos >= 20_000 { 20 } else { 50 });
        group.warm_up_time(Duration::from_secs(1));
        group.measurement_time(Duration::from_secs(3));

        let mut graph = graph_of(&deps, &work, ReadyOrder::CriticalPathFirst, true);
        group.bench_function("engine-tasks", |b| {
            b.iter(|| {
                graph.run(&pool, &()).unwrap();
            })
        });

        // The same graph without per-node clock reads (no node times).
        let mut untimed = graph_of(&deps, &work, ReadyOrder::CriticalPathFirst, false);
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
        let mut graph = graph_of(&deps, &work, order, true);
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

criterion_group!(benches, dag256, skewed);
criterion_main!(benches);

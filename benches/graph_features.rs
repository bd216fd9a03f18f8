//! What the task graph's features cost, on the graph benchmark's DAG (256
//! nodes in 16 layers of 16, each after 1 to 3 nodes of the layer before),
//! with 0 ns, 1 µs or 20 µs of calibrated work per node, back to back and
//! paced at 30, 60 and 240 Hz (a sleep until the next tick before each timed
//! frame).
//! Every group runs its peers in the same run, with the same thread budget
//! (`threads()` in lib.rs).
//!
//! 1. `rebuilt/<work>/<pacing>`: a graph built every frame (a builder
//!    reused, filled with the 256 nodes and their edges, compiled into the
//!    graph with `build_into`, then run) against the graph built once
//!    (`prebuilt`). Goal: at most 2x at 0 ns, within 5% at 20 µs.
//! 2. `gated/<work>/<pacing>`: the same shape with every feature in use: a
//!    run condition on every node and on each layer's set (all of them
//!    hold), every node declaring a write of its own resource and a read of
//!    one all share (no conflicting pair, so no edge is added) and taking
//!    the shared one through its context, against the plain graph, and
//!    bevy_ecs's executors running the same DAG plain and gated (a run
//!    condition on every system and on each layer's set, every system
//!    reading a resource).
//! 3. `access/<work>/<pacing>`: every node writes one of four shared
//!    resources (node `i` the `i % 4`th), the two ways to keep writers
//!    apart: `declared` (each node declares its write; conflicting pairs
//!    get ordering edges by declaration when the graph is built) against
//!    `locked` (nothing declared; each node locks the resource's `Mutex` as
//!    it runs, exclusion at run time), and bevy_ecs's multi-threaded
//!    executor, which keeps conflicting systems apart at run time.
//! 4. `modes/<work>/<pacing>`: whether each way of running a frame earns
//!    its place: the default graph (which picks per frame) against the same
//!    graph held to one way: `alone` (every frame on the calling thread),
//!    `queued` (every frame shared through the queues, no plan) and
//!    `planned` (every frame shared by a plan).
//!
//! Usage: `cargo bench -p engine-tasks-benches --bench graph_features`

use bevy_ecs::prelude::{ResMut, Resource};
use bevy_ecs::schedule::{
    IntoScheduleConfigs, MultiThreadedExecutor, Schedule, SingleThreadedExecutor,
};
use criterion::{criterion_group, criterion_main, Criterion, SamplingMode, Throughput};
use engine_tasks::graph::Resources;
use engine_tasks::{Lane, NodeClock, Planning, Pool, ReadyOrder, TaskGraph, TaskGraphBuilder};
use engine_tasks_benches::{
    benchmark_dag, bevy_gated_schedule, bevy_schedule, gated_graph, graph_builder_of, graph_of,
    init_bevy_pool, paced_iters, paced_times, static_names, threads, GatedShared, NodeSet, Pacer,
    Pacing, Work,
};
use std::sync::Mutex;
use std::time::Duration;

/// The pacings of every group: back to back, 30, 60 and 240 Hz.
const PACINGS: [Pacing; 4] = Pacing::ALL;
const WORK: [u64; 3] = [0, 1_000, 20_000];

/// A criterion group for one work size and pacing, sized so that a paced
/// group times `PACED_FRAMES` ticks per runner.
fn group<'c>(
    c: &'c mut Criterion,
    name: &str,
    nanos: u64,
    pacing: Pacing,
) -> criterion::BenchmarkGroup<'c, criterion::measurement::WallTime> {
    let mut group = c.benchmark_group(format!("{name}/{nanos}ns/{}", pacing.label()));
    group.throughput(Throughput::Elements(256));
    match pacing {
        Pacing::BackToBack => {
            group.sample_size(if nanos >= 20_000 { 20 } else { 50 });
            group.warm_up_time(Duration::from_secs(1));
            group.measurement_time(Duration::from_secs(3));
        }
        Pacing::Hz(hz) => {
            group.sampling_mode(SamplingMode::Flat);
            // 50 samples of several frames each (`paced_times`).
            group.sample_size(50);
            let (warm_up, measurement) = paced_times(hz);
            group.warm_up_time(warm_up);
            group.measurement_time(measurement);
        }
    }
    group
}

/// Runs `frame` once per iteration at `pacing`.
fn bench(
    group: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    name: &str,
    pacing: Pacing,
    mut frame: impl FnMut(),
) {
    // One pacer for all the runner's samples (`paced_iters`).
    let mut pacer = Pacer::new(pacing);
    group.bench_function(name, |b| {
        b.iter_custom(|iters| paced_iters(&mut pacer, iters, &mut frame))
    });
}

/// Fills `builder` with the DAG, named from `names` (no allocation).
fn fill(
    builder: &mut TaskGraphBuilder<()>,
    deps: &[Vec<usize>],
    work: &[Work],
    names: &[&'static str],
) {
    for (i, d) in deps.iter().enumerate() {
        let w = work[i];
        builder
            .node(names[i], Lane::FrameCritical, move |_| w.run())
            .after(d.iter().map(|&d| names[d]));
    }
}

fn rebuilt(c: &mut Criterion) {
    let deps = benchmark_dag();
    let names = static_names("n", deps.len());
    let pool = Pool::builder().threads(threads() - 1).build().unwrap();
    for nanos in WORK {
        let work = vec![Work::nanos(nanos); deps.len()];
        for pacing in PACINGS {
            let mut group = group(c, "rebuilt", nanos, pacing);
            let mut prebuilt = graph_of(&deps, &work, ReadyOrder::CriticalPathFirst, NodeClock::On);
            bench(&mut group, "prebuilt", pacing, || {
                prebuilt.run(&pool, &()).unwrap();
            });
            let mut builder = TaskGraph::<()>::builder();
            let mut graph = TaskGraph::<()>::builder().build().unwrap();
            bench(&mut group, "rebuilt", pacing, || {
                fill(&mut builder, &deps, &work, names);
                builder.build_into(&mut graph).unwrap();
                graph.run(&pool, &()).unwrap();
            });
            // The build alone, for the split of the difference.
            bench(&mut group, "build-only", pacing, || {
                fill(&mut builder, &deps, &work, names);
                builder.build_into(&mut graph).unwrap();
            });
            group.finish();
        }
    }
}

fn gated(c: &mut Criterion) {
    let deps = benchmark_dag();
    let names = static_names("n", deps.len());
    init_bevy_pool(threads());
    let pool = Pool::builder().threads(threads() - 1).build().unwrap();
    let mut resources = Resources::new();
    resources.insert(GatedShared(7));
    for nanos in WORK {
        let work = vec![Work::nanos(nanos); deps.len()];
        for pacing in PACINGS {
            let mut group = group(c, "gated", nanos, pacing);
            let mut plain = graph_of(&deps, &work, ReadyOrder::CriticalPathFirst, NodeClock::On);
            bench(&mut group, "plain", pacing, || {
                plain.run(&pool, &()).unwrap();
            });
            let mut gated = gated_graph(&deps, &work, names);
            assert_eq!(gated.ambiguities().count(), 0);
            bench(&mut group, "gated", pacing, || {
                gated.run(&pool, &resources).unwrap();
            });
            let (mut world, mut multi) = bevy_schedule(&deps, &work, MultiThreadedExecutor::new());
            bench(&mut group, "bevy-multi-threaded", pacing, || {
                multi.run(&mut world)
            });
            let (mut world, mut single) =
                bevy_schedule(&deps, &work, SingleThreadedExecutor::new());
            bench(&mut group, "bevy-single-threaded", pacing, || {
                single.run(&mut world)
            });
            let (mut world, mut single) =
                bevy_gated_schedule(&deps, &work, SingleThreadedExecutor::new());
            bench(&mut group, "bevy-single-threaded-gated", pacing, || {
                single.run(&mut world)
            });
            let (mut world, mut multi) =
                bevy_gated_schedule(&deps, &work, MultiThreadedExecutor::new());
            bench(&mut group, "bevy-multi-threaded-gated", pacing, || {
                multi.run(&mut world)
            });
            group.finish();
        }
    }
}

/// The shared resources of `access`: four counters.
struct Slot<const K: usize>(u64);

#[derive(Resource)]
struct BevySlot<const K: usize>(u64);

/// The DAG whose node `i` writes `Slot<i % 4>`, declared.
fn declared_graph(
    deps: &[Vec<usize>],
    work: &[Work],
    names: &[&'static str],
) -> TaskGraph<Resources> {
    let mut builder = TaskGraph::<Resources>::builder();
    for (i, d) in deps.iter().enumerate() {
        let w = work[i];
        let node = builder.node(names[i], Lane::FrameCritical, move |cx| {
            w.run();
            match i % 4 {
                0 => cx.res_mut::<Slot<0>>().0 += 1,
                1 => cx.res_mut::<Slot<1>>().0 += 1,
                2 => cx.res_mut::<Slot<2>>().0 += 1,
                _ => cx.res_mut::<Slot<3>>().0 += 1,
            }
        });
        let node = node.after(d.iter().map(|&d| names[d]));
        match i % 4 {
            0 => node.writes::<Slot<0>>(),
            1 => node.writes::<Slot<1>>(),
            2 => node.writes::<Slot<2>>(),
            _ => node.writes::<Slot<3>>(),
        };
    }
    builder.build().unwrap()
}

/// The same nodes declaring nothing, each locking its slot as it runs.
fn locked_graph(
    deps: &[Vec<usize>],
    work: &[Work],
    names: &[&'static str],
) -> TaskGraph<[Mutex<u64>; 4]> {
    let mut builder = TaskGraph::<[Mutex<u64>; 4]>::builder();
    for (i, d) in deps.iter().enumerate() {
        let w = work[i];
        builder
            .node(names[i], Lane::FrameCritical, move |cx| {
                let mut slot = cx.data()[i % 4].lock().unwrap();
                w.run();
                *slot += 1;
            })
            .after(d.iter().map(|&d| names[d]));
    }
    builder.build().unwrap()
}

/// The same nodes as bevy systems, each taking `ResMut<BevySlot<i % 4>>`.
fn bevy_access_schedule(deps: &[Vec<usize>], work: &[Work]) -> (bevy_ecs::world::World, Schedule) {
    let mut schedule = Schedule::default();
    schedule.set_executor(MultiThreadedExecutor::new());
    for (i, d) in deps.iter().enumerate() {
        let w = work[i];
        match i % 4 {
            0 => schedule.add_systems(
                (move |mut s: ResMut<BevySlot<0>>| {
                    w.run();
                    s.0 += 1;
                })
                .in_set(NodeSet(i)),
            ),
            1 => schedule.add_systems(
                (move |mut s: ResMut<BevySlot<1>>| {
                    w.run();
                    s.0 += 1;
                })
                .in_set(NodeSet(i)),
            ),
            2 => schedule.add_systems(
                (move |mut s: ResMut<BevySlot<2>>| {
                    w.run();
                    s.0 += 1;
                })
                .in_set(NodeSet(i)),
            ),
            _ => schedule.add_systems(
                (move |mut s: ResMut<BevySlot<3>>| {
                    w.run();
                    s.0 += 1;
                })
                .in_set(NodeSet(i)),
            ),
        };
        for &d in d {
            schedule.configure_sets(NodeSet(i).after(NodeSet(d)));
        }
    }
    let mut world = bevy_ecs::world::World::new();
    world.insert_resource(BevySlot::<0>(0));
    world.insert_resource(BevySlot::<1>(0));
    world.insert_resource(BevySlot::<2>(0));
    world.insert_resource(BevySlot::<3>(0));
    schedule.run(&mut world);
    (world, schedule)
}

fn access(c: &mut Criterion) {
    let deps = benchmark_dag();
    let names = static_names("n", deps.len());
    init_bevy_pool(threads());
    let pool = Pool::builder().threads(threads() - 1).build().unwrap();
    let mut resources = Resources::new();
    resources.insert(Slot::<0>(0));
    resources.insert(Slot::<1>(0));
    resources.insert(Slot::<2>(0));
    resources.insert(Slot::<3>(0));
    let slots = [0, 1, 2, 3].map(Mutex::new);
    for nanos in WORK {
        let work = vec![Work::nanos(nanos); deps.len()];
        for pacing in PACINGS {
            let mut group = group(c, "access", nanos, pacing);
            let mut declared = declared_graph(&deps, &work, names);
            bench(&mut group, "declared", pacing, || {
                declared.run(&pool, &resources).unwrap();
            });
            let mut locked = locked_graph(&deps, &work, names);
            bench(&mut group, "locked", pacing, || {
                locked.run(&pool, &slots).unwrap();
            });
            let (mut world, mut schedule) = bevy_access_schedule(&deps, &work);
            bench(&mut group, "bevy-multi-threaded", pacing, || {
                schedule.run(&mut world)
            });
            group.finish();
        }
    }
}

fn modes(c: &mut Criterion) {
    let deps = benchmark_dag();
    let pool = Pool::builder().threads(threads() - 1).build().unwrap();
    let never = Duration::MAX;
    for nanos in WORK {
        let work = vec![Work::nanos(nanos); deps.len()];
        for pacing in PACINGS {
            let mut group = group(c, "modes", nanos, pacing);
            let held = |share: Duration, planning: Planning| {
                let mut builder =
                    graph_builder_of(&deps, &work, ReadyOrder::CriticalPathFirst, NodeClock::On);
                builder.share_above(share, share).planning(planning);
                builder.build().unwrap()
            };
            let mut graphs = [
                (
                    "default",
                    graph_of(&deps, &work, ReadyOrder::CriticalPathFirst, NodeClock::On),
                ),
                ("alone", held(never, Planning::Allowed)),
                ("queued", held(Duration::ZERO, Planning::Off)),
                ("planned", held(Duration::ZERO, Planning::Allowed)),
            ];
            for (name, graph) in &mut graphs {
                bench(&mut group, name, pacing, || {
                    graph.run(&pool, &()).unwrap();
                });
            }
            group.finish();
        }
    }
}

criterion_group!(benches, rebuilt, gated, access, modes);
criterion_main!(benches);

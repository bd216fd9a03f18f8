//! bevy's ordering scenarios (`before`, `after`, sets, `chain`, nested
//! chains, exclusive systems, shuffled builds), each run on this crate's
//! executor and on bevy's multi-threaded one with the same expected order.

mod common;

use bevy_ecs::prelude::*;
use bevy_ecs::schedule::ScheduleBuildSettings;
use common::{run, Runner, RUNNERS};

/// Tags in the order the systems pushed them. Every system writes it, so
/// no two of them run at once and the order is the one the schedule allows.
#[derive(Resource, Default)]
struct Order(Vec<u32>);

fn push(tag: u32) -> impl FnMut(ResMut<Order>) {
    move |mut order: ResMut<Order>| order.0.push(tag)
}

fn push_exclusive(tag: u32) -> impl FnMut(&mut World) {
    move |world: &mut World| world.resource_mut::<Order>().0.push(tag)
}

/// The tag of [`pivot`] and [`pivot_exclusive`].
const PIVOT: u32 = 100;

/// A named system, so that others can be ordered against it.
fn pivot(mut order: ResMut<Order>) {
    order.0.push(PIVOT);
}

fn pivot_exclusive(world: &mut World) {
    world.resource_mut::<Order>().0.push(PIVOT);
}

fn world() -> World {
    let mut world = World::new();
    world.init_resource::<Order>();
    world
}

fn take(world: &mut World) -> Vec<u32> {
    std::mem::take(&mut world.resource_mut::<Order>().0)
}

/// How many times an ordering case is run: the pool executor decides
/// afresh on each run.
const RUNS: usize = 20;

#[derive(SystemSet, Debug, Clone, PartialEq, Eq, Hash)]
struct Later;

// bevy: schedule::tests::system_ordering::order_systems
#[test]
fn before_after_and_set_orderings_hold_also_when_added_after_a_run() {
    for runner in RUNNERS {
        let mut world = world();
        let mut schedule = runner.schedule(&mut world);
        schedule.add_systems((
            pivot,
            push(1).before(pivot),
            push(0).after(pivot).in_set(Later),
        ));
        runner.ready(&mut schedule, &mut world);
        for _ in 0..RUNS {
            run(runner, &mut schedule, &mut world);
            assert_eq!(take(&mut world), [1, PIVOT, 0], "{runner:?}");
        }

        // Changed after it ran: the set is ordered, and systems placed
        // around it.
        schedule.configure_sets(Later.after(pivot));
        schedule.add_systems((push(3).after(pivot).before(Later), push(4).after(Later)));
        for _ in 0..RUNS {
            run(runner, &mut schedule, &mut world);
            assert_eq!(take(&mut world), [1, PIVOT, 3, 0, 4], "{runner:?}");
        }
    }
}

// bevy: schedule::tests::system_ordering::order_exclusive_systems
#[test]
fn exclusive_systems_follow_before_and_after() {
    for runner in RUNNERS {
        let mut world = world();
        let mut schedule = runner.schedule(&mut world);
        schedule.add_systems((
            pivot_exclusive,
            push_exclusive(1).before(pivot_exclusive),
            push_exclusive(0).after(pivot_exclusive),
        ));
        runner.ready(&mut schedule, &mut world);
        for _ in 0..RUNS {
            run(runner, &mut schedule, &mut world);
            assert_eq!(take(&mut world), [1, PIVOT, 0], "{runner:?}");
        }
    }
}

// bevy: schedule::tests::system_ordering::add_systems_correct_order
#[test]
fn a_chain_mixing_exclusive_and_regular_systems_runs_in_order() {
    for runner in RUNNERS {
        let mut world = world();
        let mut schedule = runner.schedule(&mut world);
        schedule.add_systems(
            (
                push(0),
                push(1),
                push_exclusive(2),
                push(3),
                push_exclusive(4),
                push(5),
            )
                .chain(),
        );
        runner.ready(&mut schedule, &mut world);
        for _ in 0..RUNS {
            run(runner, &mut schedule, &mut world);
            assert_eq!(take(&mut world), [0, 1, 2, 3, 4, 5], "{runner:?}");
        }
    }
}

// bevy: schedule::tests::system_ordering::add_systems_correct_order_nested
#[test]
fn nested_chains_order_groups_and_leave_unchained_members_free() {
    for runner in RUNNERS {
        let mut world = world();
        let mut schedule = runner.schedule(&mut world);
        // Five groups chained one after the other; inside them, chained
        // pairs and unordered members.
        schedule.add_systems(
            (
                (push(0), push(1)).chain(),
                push(2),
                (push(3), push(4)).chain(),
                (push(5), (push(6), push(7))),
                ((push(8), push(9)).chain(), push(10)),
            )
                .chain(),
        );
        runner.ready(&mut schedule, &mut world);
        for _ in 0..RUNS {
            run(runner, &mut schedule, &mut world);
            let order = take(&mut world);
            assert_eq!(order.len(), 11, "{runner:?}: {order:?}");
            assert_eq!(order[..5], [0, 1, 2, 3, 4], "{runner:?}: {order:?}");
            let mut free = order[5..8].to_vec();
            free.sort_unstable();
            assert_eq!(free, [5, 6, 7], "{runner:?}: {order:?}");
            // bevy's test allows these two (it starts 9 before 10 once 8
            // is done: 9 comes first in the built schedule).
            assert!(
                order[8..] == [8, 9, 10] || order[8..] == [10, 8, 9],
                "{runner:?}: {order:?}"
            );
        }
    }
}

/// A tree of systems that all write [`Order`]: `0`, then `10` and `11`,
/// and `20` and `21` after `10`. Built with `seed`, run once; the order.
fn run_shuffled(runner: Runner, seed: Option<u64>) -> Vec<u32> {
    let mut world = world();
    let mut schedule = runner.schedule(&mut world);
    fn node<const TAG: u32>(mut order: ResMut<Order>) {
        order.0.push(TAG);
    }
    schedule.add_systems(node::<0>);
    schedule.add_systems((node::<10>, node::<11>).after(node::<0>));
    schedule.add_systems((node::<20>, node::<21>).after(node::<10>));
    schedule.set_build_settings(ScheduleBuildSettings {
        shuffle_seed: seed,
        ..ScheduleBuildSettings::default()
    });
    runner.ready(&mut schedule, &mut world);
    run(runner, &mut schedule, &mut world);
    take(&mut world)
}

// bevy: schedule::schedule::tests::schedule_builds_randomly_with_shuffler
//
// Every system conflicts with every other, so which of two ready systems
// runs first is the executor's choice: bevy's starts them in the order of
// the built schedule, which the shuffle seed decides. This case checks that
// the pool executor makes the same choice.
#[test]
fn conflicting_ready_systems_start_in_the_built_order_for_each_shuffle_seed() {
    let expected: [(Option<u64>, [u32; 5]); 9] = [
        (None, [0, 11, 10, 20, 21]),
        (Some(100000001), [0, 10, 20, 21, 11]),
        (Some(100000030), [0, 10, 21, 20, 11]),
        (Some(100000020), [0, 10, 20, 11, 21]),
        (Some(100000063), [0, 10, 21, 11, 20]),
        (Some(100000003), [0, 10, 11, 20, 21]),
        (Some(100000080), [0, 10, 11, 21, 20]),
        (Some(100000000), [0, 11, 10, 20, 21]),
        (Some(100000004), [0, 11, 10, 21, 20]),
    ];
    let mut wrong = Vec::new();
    for runner in RUNNERS {
        for _ in 0..10 {
            let order = run_shuffled(runner, None);
            let line = format!("{runner:?}, no seed (repeated): {order:?}");
            if order != expected[0].1 && !wrong.contains(&line) {
                wrong.push(line);
            }
        }
        for (seed, want) in expected {
            let order = run_shuffled(runner, seed);
            if order != want {
                wrong.push(format!("{runner:?}, {seed:?}: {order:?}, not {want:?}"));
            }
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
}

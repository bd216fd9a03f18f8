//! bevy's `remove_systems_in_set` scenarios: removing one system, every
//! instance of a system, a system others are ordered after, and a system or
//! an empty set that orders two others (the order must survive). bevy's
//! tests only build the schedule after the removal; here each schedule also
//! runs before and after it, on this crate's executor and on bevy's
//! multi-threaded one, and what ran must agree.

mod common;

use bevy_ecs::prelude::*;
use bevy_ecs::schedule::ScheduleCleanupPolicy;
use common::{run, Runner, RUNNERS};
use std::sync::Mutex;

/// Names of the systems that ran, in order.
#[derive(Resource, Default)]
struct Log(Mutex<Vec<&'static str>>);

fn take(world: &mut World) -> Vec<&'static str> {
    std::mem::take(&mut *world.resource::<Log>().0.lock().unwrap())
}

fn sorted(mut log: Vec<&'static str>) -> Vec<&'static str> {
    log.sort_unstable();
    log
}

fn lone(log: Res<Log>) {
    log.0.lock().unwrap().push("lone");
}

fn head(log: Res<Log>) {
    log.0.lock().unwrap().push("head");
}

fn tail(log: Res<Log>) {
    log.0.lock().unwrap().push("tail");
}

/// Written by [`writer_a`] and [`writer_b`]: they conflict, and only an
/// ordering keeps them apart.
#[derive(Resource, Default)]
struct Contested;

fn writer_a(_: ResMut<Contested>, log: Res<Log>) {
    log.0.lock().unwrap().push("a");
}

fn middle(log: Res<Log>) {
    log.0.lock().unwrap().push("middle");
}

fn writer_b(_: ResMut<Contested>, log: Res<Log>) {
    log.0.lock().unwrap().push("b");
}

fn world() -> World {
    let mut world = World::new();
    world.init_resource::<Log>();
    world.init_resource::<Contested>();
    world
}

/// A schedule with `add`'s systems, with `runner`'s executor in place.
fn built(runner: Runner, world: &mut World, add: impl FnOnce(&mut Schedule)) -> Schedule {
    let mut schedule = runner.schedule(world);
    add(&mut schedule);
    runner.ready(&mut schedule, world);
    schedule
}

// bevy: schedule::schedule::tests::remove_a_system
#[test]
fn a_removed_system_no_longer_runs() {
    for runner in RUNNERS {
        let mut world = world();
        let mut schedule = built(runner, &mut world, |s| {
            s.add_systems(lone);
        });
        run(runner, &mut schedule, &mut world);
        assert_eq!(take(&mut world), ["lone"], "{runner:?}");
        let removed = schedule.remove_systems_in_set(
            lone,
            &mut world,
            ScheduleCleanupPolicy::RemoveSetAndSystemsAllowBreakages,
        );
        assert_eq!(removed.ok(), Some(1), "{runner:?}");
        for _ in 0..3 {
            run(runner, &mut schedule, &mut world);
            assert_eq!(take(&mut world), Vec::<&str>::new(), "{runner:?}");
        }
        assert_eq!(schedule.systems_len(), 0, "{runner:?}");
    }
}

// bevy: schedule::schedule::tests::remove_multiple_systems
#[test]
fn removing_a_system_removes_every_instance_of_it() {
    for runner in RUNNERS {
        let mut world = world();
        let mut schedule = built(runner, &mut world, |s| {
            s.add_systems((lone, lone));
        });
        run(runner, &mut schedule, &mut world);
        assert_eq!(take(&mut world), ["lone", "lone"], "{runner:?}");
        let removed = schedule.remove_systems_in_set(
            lone,
            &mut world,
            ScheduleCleanupPolicy::RemoveSetAndSystemsAllowBreakages,
        );
        assert_eq!(removed.ok(), Some(2), "{runner:?}");
        run(runner, &mut schedule, &mut world);
        assert_eq!(take(&mut world), Vec::<&str>::new(), "{runner:?}");
        assert_eq!(schedule.systems_len(), 0, "{runner:?}");
    }
}

// bevy: schedule::schedule::tests::remove_a_system_with_dependencies
#[test]
fn the_system_after_a_removed_one_still_runs() {
    for runner in RUNNERS {
        let mut world = world();
        let mut schedule = built(runner, &mut world, |s| {
            s.add_systems((head, tail).chain());
        });
        run(runner, &mut schedule, &mut world);
        assert_eq!(take(&mut world), ["head", "tail"], "{runner:?}");
        let removed = schedule.remove_systems_in_set(
            head,
            &mut world,
            ScheduleCleanupPolicy::RemoveSetAndSystemsAllowBreakages,
        );
        assert_eq!(removed.ok(), Some(1), "{runner:?}");
        for _ in 0..3 {
            run(runner, &mut schedule, &mut world);
            assert_eq!(take(&mut world), ["tail"], "{runner:?}");
        }
        assert_eq!(schedule.systems_len(), 1, "{runner:?}");
    }
}

/// Runs `schedule` `times` times: `a` must precede `b` in every run, and
/// the systems that ran must be `expected`.
fn assert_a_before_b(
    runner: Runner,
    schedule: &mut Schedule,
    world: &mut World,
    expected: &[&str],
) {
    for _ in 0..30 {
        run(runner, schedule, world);
        let log = take(world);
        assert_eq!(sorted(log.clone()), expected, "{runner:?}");
        let at = |name: &str| log.iter().position(|n| *n == name).unwrap();
        assert!(at("a") < at("b"), "{runner:?}: {log:?}");
    }
}

// bevy: schedule::schedule::tests::remove_a_system_and_still_ordered
#[test]
fn removing_the_middle_of_a_chain_keeps_its_ends_ordered() {
    for runner in RUNNERS {
        let mut world = world();
        let mut schedule = built(runner, &mut world, |s| {
            s.add_systems((writer_a, middle, writer_b).chain());
        });
        assert_a_before_b(runner, &mut schedule, &mut world, &["a", "b", "middle"]);
        let removed = schedule.remove_systems_in_set(
            middle,
            &mut world,
            ScheduleCleanupPolicy::RemoveSetAndSystems,
        );
        assert_eq!(removed.ok(), Some(1), "{runner:?}");
        assert_a_before_b(runner, &mut schedule, &mut world, &["a", "b"]);
        assert!(
            schedule.graph().conflicting_systems().is_empty(),
            "{runner:?}: the two writers are no longer ordered"
        );
    }
}

#[derive(SystemSet, Debug, Clone, PartialEq, Eq, Hash)]
struct Between;

// bevy: schedule::schedule::tests::remove_a_set_and_still_ordered
#[test]
fn removing_an_empty_set_that_orders_two_systems_keeps_them_ordered() {
    for runner in RUNNERS {
        let mut world = world();
        let mut schedule = built(runner, &mut world, |s| {
            s.add_systems((writer_a.before(Between), middle, writer_b.after(Between)));
        });
        assert_a_before_b(runner, &mut schedule, &mut world, &["a", "b", "middle"]);
        let removed = schedule.remove_systems_in_set(
            Between,
            &mut world,
            ScheduleCleanupPolicy::RemoveSetAndSystems,
        );
        assert_eq!(removed.ok(), Some(0), "{runner:?}");
        assert_a_before_b(runner, &mut schedule, &mut world, &["a", "b", "middle"]);
        assert!(
            schedule.graph().conflicting_systems().is_empty(),
            "{runner:?}: the two writers are no longer ordered"
        );
    }
}

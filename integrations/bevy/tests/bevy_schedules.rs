//! bevy's scenarios for labelled schedules kept in the world's `Schedules`
//! and run with `World::run_schedule`: systems and set orderings added
//! through `Schedules`, to a schedule that exists or one created for them.
//! Each runs on this crate's executor and on bevy's multi-threaded one.

mod common;

use bevy_ecs::prelude::*;
use bevy_ecs::schedule::{MultiThreadedExecutor, ScheduleLabel, Schedules};
use common::{Runner, RUNNERS};

#[derive(ScheduleLabel, Debug, Clone, PartialEq, Eq, Hash)]
struct Labelled;

#[derive(Resource, Default)]
struct Step(u32);

#[derive(SystemSet, Debug, Clone, PartialEq, Eq, Hash)]
enum Stage {
    Early,
    Late,
}

/// Gives the schedule `schedules` holds for [`Labelled`] the runner's
/// executor if it has none yet (`created_by_schedules`: `Schedules` made it
/// when systems were added, so [`Runner::PoolFromStart`] could not install
/// before), then puts `schedules` in the world and runs the schedule
/// through it.
fn run_labelled(
    runner: Runner,
    mut schedules: Schedules,
    created_by_schedules: bool,
    world: &mut World,
) {
    let schedule = schedules.get_mut(Labelled).expect("the schedule exists");
    match runner {
        Runner::Pool => runner.ready(schedule, world),
        Runner::PoolFromStart if created_by_schedules => Runner::Pool.ready(schedule, world),
        Runner::PoolFromStart => {}
        Runner::Bevy => {
            schedule.set_executor(MultiThreadedExecutor::new());
        }
    }
    world.insert_resource(schedules);
    world.run_schedule(Labelled);
}

/// A `Schedules` already holding [`Labelled`], with its executor in place
/// for [`Runner::PoolFromStart`] and [`Runner::Bevy`].
fn with_labelled(runner: Runner, world: &mut World) -> Schedules {
    let mut schedules = Schedules::default();
    schedules.insert(runner.schedule_with_label(Labelled, world));
    schedules
}

// bevy: schedule::schedule::tests::add_systems_to_existing_schedule
#[test]
fn systems_added_through_schedules_to_an_existing_schedule_run() {
    for runner in RUNNERS {
        let mut world = World::new();
        world.init_resource::<Step>();
        let mut schedules = with_labelled(runner, &mut world);
        schedules.add_systems(Labelled, |mut step: ResMut<Step>| step.0 += 1);
        run_labelled(runner, schedules, false, &mut world);
        assert_eq!(world.resource::<Step>().0, 1, "{runner:?}");
    }
}

// bevy: schedule::schedule::tests::add_systems_to_non_existing_schedule
#[test]
fn systems_added_through_schedules_create_the_schedule_and_run() {
    for runner in RUNNERS {
        let mut world = World::new();
        world.init_resource::<Step>();
        let mut schedules = Schedules::default();
        schedules.add_systems(Labelled, |mut step: ResMut<Step>| step.0 += 1);
        run_labelled(runner, schedules, true, &mut world);
        assert_eq!(world.resource::<Step>().0, 1, "{runner:?}");
    }
}

/// Adds a chain of two sets to [`Labelled`] in `schedules`, and a system
/// in each that checks it runs in its turn.
fn add_staged_systems(schedules: &mut Schedules) {
    schedules.configure_sets(Labelled, (Stage::Early, Stage::Late).chain());
    schedules.add_systems(
        Labelled,
        (|mut step: ResMut<Step>| {
            assert_eq!(step.0, 0, "the early system ran second");
            step.0 += 1;
        })
        .in_set(Stage::Early),
    );
    schedules.add_systems(
        Labelled,
        (|mut step: ResMut<Step>| {
            assert_eq!(step.0, 1, "the late system ran first");
            step.0 += 1;
        })
        .in_set(Stage::Late),
    );
}

// bevy: schedule::schedule::tests::configure_set_on_existing_schedule
#[test]
fn sets_chained_through_schedules_on_an_existing_schedule_run_in_order() {
    for runner in RUNNERS {
        let mut world = World::new();
        world.init_resource::<Step>();
        let mut schedules = with_labelled(runner, &mut world);
        add_staged_systems(&mut schedules);
        run_labelled(runner, schedules, false, &mut world);
        assert_eq!(world.resource::<Step>().0, 2, "{runner:?}");
    }
}

// bevy: schedule::schedule::tests::configure_set_on_new_schedule
#[test]
fn sets_chained_through_schedules_on_a_new_schedule_run_in_order() {
    for runner in RUNNERS {
        let mut world = World::new();
        world.init_resource::<Step>();
        let mut schedules = Schedules::default();
        add_staged_systems(&mut schedules);
        run_labelled(runner, schedules, true, &mut world);
        assert_eq!(world.resource::<Step>().0, 2, "{runner:?}");
    }
}

#[derive(Resource)]
struct Flag(bool);

// bevy: schedule::set::tests::test_schedule_label
#[test]
fn a_schedule_added_to_the_world_runs_by_its_interned_label_each_time() {
    for runner in RUNNERS {
        let mut world = World::new();
        let mut schedule = runner.schedule_with_label(Labelled, &mut world);
        schedule.add_systems(|mut flag: ResMut<Flag>| flag.0 = true);
        runner.ready(&mut schedule, &mut world);
        world.add_schedule(schedule);
        let label = Labelled.intern();
        for _ in 0..2 {
            world.insert_resource(Flag(false));
            world.run_schedule(label);
            assert!(world.resource::<Flag>().0, "{runner:?}");
        }
    }
}

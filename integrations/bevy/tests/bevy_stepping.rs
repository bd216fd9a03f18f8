//! bevy's stepping scenarios that run a schedule. With stepping enabled,
//! bevy hands the executor a list of systems to skip in each run (all of
//! them in a frame not stepped, all but the one under the cursor in a
//! step); the executor must skip exactly those, and still evaluate the run
//! conditions of the one it runs. Each case runs on this crate's executor
//! and on bevy's multi-threaded one.
//!
//! bevy's other stepping tests (`schedule::stepping::tests`) check the skip
//! lists that `Stepping` computes without running a schedule; `TESTS.md`
//! lists them.

mod common;

use bevy_ecs::prelude::*;
use bevy_ecs::schedule::{ScheduleLabel, Stepping};
use bevy_ecs::system::RunSystemOnce;
use common::{run, RUNNERS};

#[derive(ScheduleLabel, Clone, Debug, PartialEq, Eq, Hash)]
struct Stepped;

/// How many times each kind of system ran.
#[derive(Resource, Default)]
struct Runs {
    regular: u32,
    exclusive: u32,
}

fn regular(mut runs: ResMut<Runs>) {
    runs.regular += 1;
}

fn exclusive(world: &mut World) {
    world.resource_mut::<Runs>().exclusive += 1;
}

/// Starts a new frame for stepping, as bevy's main schedule does with its
/// `Stepping::begin_frame` system (pending stepping commands take effect).
fn begin_frame(world: &mut World) {
    world
        .run_system_once(Stepping::begin_frame)
        .expect("begin_frame runs");
}

fn runs(world: &World) -> (u32, u32) {
    let runs = world.resource::<Runs>();
    (runs.regular, runs.exclusive)
}

// bevy: schedule::tests::stepping::single_threaded_executor
// bevy: schedule::tests::stepping::multi_threaded_executor
//
// bevy's system panics if it runs; here each system counts its runs, and
// once stepping is disabled again both run.
#[test]
fn a_frame_not_stepped_runs_no_system() {
    for runner in RUNNERS {
        let mut world = World::new();
        world.init_resource::<Runs>();
        let mut schedule = runner.schedule_with_label(Stepped, &mut world);
        schedule.add_systems((regular, exclusive));
        runner.ready(&mut schedule, &mut world);
        let mut stepping = Stepping::new();
        stepping.add_schedule(Stepped).enable();
        world.insert_resource(stepping);
        for _ in 0..3 {
            begin_frame(&mut world);
            run(runner, &mut schedule, &mut world);
            assert_eq!(runs(&world), (0, 0), "{runner:?}: a system ran");
        }
        world.resource_mut::<Stepping>().disable();
        begin_frame(&mut world);
        run(runner, &mut schedule, &mut world);
        assert_eq!(runs(&world), (1, 1), "{runner:?}");
    }
}

/// Whether the second system of the stepped chain ran.
#[derive(Resource, Default)]
struct SecondRan(u32);

// bevy: schedule::stepping::tests::step_run_if_false
#[test]
fn a_step_onto_a_system_whose_condition_fails_runs_nothing() {
    for runner in RUNNERS {
        let mut world = World::new();
        world.init_resource::<SecondRan>();
        let mut schedule = runner.schedule_with_label(Stepped, &mut world);
        fn first() {
            panic!("the first system's condition is false");
        }
        let second = |mut ran: ResMut<SecondRan>| ran.0 += 1;
        schedule.add_systems((first.run_if(|| false), second).chain());
        runner.ready(&mut schedule, &mut world);
        schedule
            .initialize(&mut world)
            .expect("the schedule builds");
        let mut stepping = Stepping::new();
        stepping.add_schedule(Stepped).enable();
        world.insert_resource(stepping);

        // The cursor is on the first system: its condition fails, so the
        // step runs nothing, and the second system is skipped.
        world.resource_mut::<Stepping>().step_frame();
        begin_frame(&mut world);
        run(runner, &mut schedule, &mut world);
        assert_eq!(world.resource::<SecondRan>().0, 0, "{runner:?}");

        // The next step moves the cursor onto the second system.
        world.resource_mut::<Stepping>().step_frame();
        begin_frame(&mut world);
        run(runner, &mut schedule, &mut world);
        assert_eq!(world.resource::<SecondRan>().0, 1, "{runner:?}");
    }
}

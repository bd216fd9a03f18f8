//! bevy's executor scenarios for errors and panics (of systems and of run
//! conditions, with a handler that records or one that panics, and a
//! handler replaced during a run), and final deferred application. Each
//! runs on this crate's executor and on bevy's multi-threaded one, with the
//! same expected result.

mod common;

use bevy_ecs::error::{ignore, panic, BevyError, ErrorContext, FallbackErrorHandler};
use bevy_ecs::prelude::*;
use common::{run, run_catching, Runner, RUNNERS};
use engine_tasks_bevy::Installer;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

/// What the recording handler of [`errors_and_panics_reach_the_handler`]
/// was called for.
static HANDLED: Mutex<Vec<&'static str>> = Mutex::new(Vec::new());

fn record_kind(_: BevyError, ctx: ErrorContext) {
    let kind = match ctx {
        ErrorContext::System { .. } => "system",
        ErrorContext::RunCondition { .. } => "condition",
        _ => "other",
    };
    HANDLED.lock().unwrap().push(kind);
}

const HANDLER_PAYLOAD: &str = "the handler gives up";

fn give_up(_: BevyError, _: ErrorContext) {
    panic!("{HANDLER_PAYLOAD}");
}

static GATED_RAN: AtomicBool = AtomicBool::new(false);

/// The four schedules of [`errors_and_panics_reach_the_handler`].
#[derive(Clone, Copy, Debug)]
enum Failing {
    System,
    SystemPanics,
    Condition,
    ConditionPanics,
}

fn failing_schedule(runner: Runner, failing: Failing, world: &mut World) -> Schedule {
    let mut schedule = runner.schedule(world);
    let gated = || GATED_RAN.store(true, Ordering::SeqCst);
    match failing {
        Failing::System => {
            schedule.add_systems(|| -> Result { Err(BevyError::ignore("failing on purpose")) });
        }
        Failing::SystemPanics => {
            schedule.add_systems(|| -> Result { panic!("the system panics") });
        }
        Failing::Condition => {
            schedule.add_systems(
                gated.run_if(|| -> Result<bool> { Err(BevyError::ignore("failing on purpose")) }),
            );
        }
        Failing::ConditionPanics => {
            schedule.add_systems(gated.run_if(|| -> bool { panic!("the condition panics") }));
        }
    }
    runner.ready(&mut schedule, world);
    schedule
}

// bevy: schedule::executor::multi_threaded::tests::panic_to_error
//
// bevy's test means to run the two condition schedules in its second half
// but runs the two system schedules again; here all four run.
#[test]
fn errors_and_panics_reach_the_handler() {
    let all = [
        Failing::System,
        Failing::SystemPanics,
        Failing::Condition,
        Failing::ConditionPanics,
    ];
    for runner in RUNNERS {
        let mut world = World::new();
        let mut schedules: Vec<_> = all
            .into_iter()
            .map(|failing| (failing, failing_schedule(runner, failing, &mut world)))
            .collect();

        // A handler that returns: each run calls it once, and goes on.
        world.insert_resource(FallbackErrorHandler(record_kind));
        for (failing, schedule) in &mut schedules {
            HANDLED.lock().unwrap().clear();
            run(runner, schedule, &mut world);
            let expected = match failing {
                Failing::System | Failing::SystemPanics => "system",
                Failing::Condition | Failing::ConditionPanics => "condition",
            };
            assert_eq!(
                *HANDLED.lock().unwrap(),
                [expected],
                "{runner:?}, {failing:?}"
            );
        }

        // A handler that panics: the run panics with its payload.
        world.insert_resource(FallbackErrorHandler(give_up));
        for (failing, schedule) in &mut schedules {
            assert_eq!(
                run_catching(schedule, &mut world).as_deref(),
                Some(HANDLER_PAYLOAD),
                "{runner:?}, {failing:?}"
            );
        }
        assert!(
            !GATED_RAN.load(Ordering::SeqCst),
            "{runner:?}: a system whose condition failed ran"
        );
    }
}

#[derive(Resource, Default)]
struct Ran(bool);

fn runs_then_fails(mut ran: ResMut<Ran>) -> Result {
    ran.0 = true;
    Err("failing on purpose".into())
}

// bevy: schedule::schedule::tests::test_default_error_handler
#[test]
fn the_error_handler_is_the_one_in_place_when_the_run_starts() {
    for runner in RUNNERS {
        let mut world = World::new();
        world.init_resource::<Ran>();
        world.insert_resource(FallbackErrorHandler(ignore));
        let mut schedule = runner.schedule(&mut world);
        schedule.add_systems(runs_then_fails);
        runner.ready(&mut schedule, &mut world);
        run(runner, &mut schedule, &mut world);
        assert!(world.resource::<Ran>().0, "{runner:?}");

        // Swapping in a panicking handler during the run changes nothing
        // for the failure later in the same run.
        schedule.add_systems(
            (|world: &mut World| {
                world.insert_resource(FallbackErrorHandler(panic));
            })
            .before(runs_then_fails),
        );
        assert_eq!(run_catching(&mut schedule, &mut world), None, "{runner:?}");
    }
}

#[derive(Resource)]
struct Inserted;

// Not one of bevy's tests: `set_apply_final_deferred(false)` leaves the
// commands of the last systems queued after the run; turned back on, the
// next run applies them.
#[test]
fn without_final_deferred_commands_stay_queued_until_a_later_run() {
    for runner in RUNNERS {
        let mut world = World::new();
        let mut schedule = runner.schedule(&mut world);
        schedule.add_systems(|mut commands: Commands| commands.insert_resource(Inserted));
        match runner {
            Runner::Pool => Installer::new(common::pool().handle())
                .apply_final_deferred(false)
                .install(&mut schedule, &mut world)
                .expect("the schedule builds"),
            Runner::PoolFromStart | Runner::Bevy => {
                schedule.set_apply_final_deferred(false);
            }
        }
        run(runner, &mut schedule, &mut world);
        assert!(!world.contains_resource::<Inserted>(), "{runner:?}");
        schedule.set_apply_final_deferred(true);
        run(runner, &mut schedule, &mut world);
        assert!(world.contains_resource::<Inserted>(), "{runner:?}");
    }
}

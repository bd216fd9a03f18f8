//! bevy's scenarios for running systems: regular and exclusive systems,
//! change detection, systems running in parallel, parameters that fail
//! validation (skipped systems, missing resources), piped systems, and a
//! system that claims exclusive access next to a non-`Send` one. Each runs
//! on this crate's executor and on bevy's multi-threaded one, with the same
//! expected result.

mod common;

use bevy_ecs::change_detection::Tick;
use bevy_ecs::error::{ignore, FallbackErrorHandler};
use bevy_ecs::prelude::*;
use bevy_ecs::system::{SystemAccess, SystemMeta, SystemParam, SystemParamValidationError};
use bevy_ecs::world::unsafe_world_cell::UnsafeWorldCell;
use common::{run, run_catching, wait_for, Runner, POOL_THREADS, RUNNERS};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

#[derive(Resource, Default)]
struct Order(Vec<u32>);

// bevy: schedule::tests::system_execution::run_system
#[test]
fn a_single_system_runs() {
    for runner in RUNNERS {
        let mut world = World::new();
        world.init_resource::<Order>();
        let mut schedule = runner.schedule(&mut world);
        schedule.add_systems(|mut order: ResMut<Order>| order.0.push(0));
        runner.ready(&mut schedule, &mut world);
        run(runner, &mut schedule, &mut world);
        assert_eq!(world.resource::<Order>().0, [0], "{runner:?}");
    }
}

// bevy: schedule::tests::system_execution::run_exclusive_system
#[test]
fn a_single_exclusive_system_runs() {
    for runner in RUNNERS {
        let mut world = World::new();
        world.init_resource::<Order>();
        let mut schedule = runner.schedule(&mut world);
        schedule.add_systems(|world: &mut World| world.resource_mut::<Order>().0.push(0));
        runner.ready(&mut schedule, &mut world);
        run(runner, &mut schedule, &mut world);
        assert_eq!(world.resource::<Order>().0, [0], "{runner:?}");
    }
}

#[derive(Resource, Default)]
struct Watched(bool);

/// Whether [`Watched`] had changed, at each run of the watching system.
#[derive(Resource, Default)]
struct Changes(Vec<bool>);

// bevy: schedule::tests::system_execution::exclusive_system_change_detection
#[test]
fn an_exclusive_system_sees_changes_since_its_last_run() {
    fn watch(world: &mut World) {
        let changed = world.is_resource_changed::<Watched>();
        world.resource_mut::<Changes>().0.push(changed);
    }
    for runner in RUNNERS {
        let mut world = World::new();
        world.init_resource::<Watched>();
        world.init_resource::<Changes>();
        let mut schedule = runner.schedule(&mut world);
        schedule.add_systems(watch);
        runner.ready(&mut schedule, &mut world);
        run(runner, &mut schedule, &mut world);
        run(runner, &mut schedule, &mut world);
        world.resource_mut::<Watched>().0 = true;
        run(runner, &mut schedule, &mut world);
        assert_eq!(
            world.resource::<Changes>().0,
            [true, false, true],
            "{runner:?}"
        );
    }
}

// bevy: schedule::tests::system_execution::failed_systems_should_update_change_ticks
//
// bevy's test runs the system by hand; here it runs in a schedule, whose
// error handler ignores the failure.
#[test]
fn a_failing_system_still_advances_its_change_ticks() {
    fn fails_after_looking(
        watched: Res<Watched>,
        mut changes: ResMut<Changes>,
    ) -> Result<(), BevyError> {
        changes.0.push(watched.is_changed());
        Err("failing on purpose".into())
    }
    for runner in RUNNERS {
        let mut world = World::new();
        world.init_resource::<Watched>();
        world.init_resource::<Changes>();
        world.insert_resource(FallbackErrorHandler(ignore));
        let mut schedule = runner.schedule(&mut world);
        schedule.add_systems(fails_after_looking);
        runner.ready(&mut schedule, &mut world);
        run(runner, &mut schedule, &mut world);
        run(runner, &mut schedule, &mut world);
        assert_eq!(world.resource::<Changes>().0, [true, false], "{runner:?}");
    }
}

// bevy: schedule::tests::system_execution::parallel_execution
//
// As many systems as the executor has threads, none conflicting: each
// waits until all of them are running, which only ends if they all run at
// once. bevy's executor gets one per core (its compute pool's size), ours
// one per pool worker.
#[test]
fn non_conflicting_systems_fill_every_thread_at_once() {
    for runner in RUNNERS {
        let width = if runner.is_pool() {
            POOL_THREADS
        } else {
            std::thread::available_parallelism().map_or(1, |n| n.get())
        };
        let started = Arc::new(AtomicUsize::new(0));
        let timed_out = Arc::new(AtomicUsize::new(0));
        let mut world = World::new();
        let mut schedule = runner.schedule(&mut world);
        for _ in 0..width {
            let started = started.clone();
            let timed_out = timed_out.clone();
            schedule.add_systems(move || {
                started.fetch_add(1, Ordering::SeqCst);
                if !wait_for(|| started.load(Ordering::SeqCst) >= width) {
                    timed_out.fetch_add(1, Ordering::SeqCst);
                }
            });
        }
        runner.ready(&mut schedule, &mut world);
        run(runner, &mut schedule, &mut world);
        assert_eq!(started.load(Ordering::SeqCst), width, "{runner:?}");
        assert_eq!(
            timed_out.load(Ordering::SeqCst),
            0,
            "{runner:?}: {width} systems never ran at once"
        );
    }
}

#[derive(Component)]
struct Thing;

#[derive(Resource, Default)]
struct Ran {
    single: bool,
    populated: bool,
}

fn with_single(_: Single<&Thing>, mut ran: ResMut<Ran>) {
    ran.single = true;
}

fn with_populated(_: Populated<&Thing>, mut ran: ResMut<Ran>) {
    ran.populated = true;
}

// bevy: schedule::executor::tests::single_and_populated_skipped_and_run_singlethreaded
// bevy: schedule::executor::tests::single_and_populated_skipped_and_run_multithreaded
#[test]
fn single_and_populated_systems_are_skipped_until_an_entity_matches() {
    for runner in RUNNERS {
        let mut world = World::new();
        world.init_resource::<Ran>();
        let mut schedule = runner.schedule(&mut world);
        schedule.add_systems((with_single, with_populated));
        runner.ready(&mut schedule, &mut world);
        run(runner, &mut schedule, &mut world);
        let ran = world.resource::<Ran>();
        assert!(!ran.single && !ran.populated, "{runner:?}");

        world.spawn(Thing);
        run(runner, &mut schedule, &mut world);
        let ran = world.resource::<Ran>();
        assert!(ran.single && ran.populated, "{runner:?}");
    }
}

#[derive(Resource)]
struct NeverInserted;

#[derive(Resource, Default)]
struct Count(u8);

// bevy: schedule::executor::tests::missing_resource_panics_single_threaded
// bevy: schedule::executor::tests::missing_resource_panics_multi_threaded
#[test]
fn a_system_needing_a_missing_resource_panics_the_run() {
    for runner in RUNNERS {
        let mut world = World::new();
        let mut schedule = runner.schedule(&mut world);
        schedule.add_systems(|_: Res<NeverInserted>| {});
        runner.ready(&mut schedule, &mut world);
        assert!(
            run_catching(&mut schedule, &mut world).is_some(),
            "{runner:?}: the run did not panic"
        );
    }
}

// bevy: schedule::executor::validation_tests::validation_skips_system_in_schedule_singlethreaded
// bevy: schedule::executor::validation_tests::validation_skips_system_in_schedule_multithreaded
#[test]
fn a_system_whose_parameters_do_not_validate_is_skipped() {
    for runner in RUNNERS {
        let mut world = World::new();
        world.init_resource::<Count>();
        let mut schedule = runner.schedule(&mut world);
        schedule.add_systems(|_: Single<&Thing>, mut count: ResMut<Count>| count.0 += 1);
        runner.ready(&mut schedule, &mut world);
        run(runner, &mut schedule, &mut world);
        assert_eq!(world.resource::<Count>().0, 0, "{runner:?}");
    }
}

/// Runs the piped system `add` adds, once per runner; whether the run
/// panicked, and the [`Count`] after it.
fn piped(add: impl Fn(&mut Schedule)) -> Vec<(Runner, bool, Option<u8>)> {
    RUNNERS
        .into_iter()
        .map(|runner| {
            let mut world = World::new();
            world.init_resource::<Count>();
            let mut schedule = runner.schedule(&mut world);
            add(&mut schedule);
            runner.ready(&mut schedule, &mut world);
            let panicked = run_catching(&mut schedule, &mut world).is_some();
            (runner, panicked, world.get_resource::<Count>().map(|c| c.0))
        })
        .collect()
}

/// Every runner gave `(panicked, count)`.
fn assert_piped(results: &[(Runner, bool, Option<u8>)], panicked: bool, count: u8) {
    for (runner, did_panic, seen) in results {
        assert_eq!(
            (*did_panic, *seen),
            (panicked, Some(count)),
            "{runner:?}: (panicked, count)"
        );
    }
}

fn out_if_thing(_: Single<&Thing>) -> u8 {
    42
}

fn out_counting(mut count: ResMut<Count>) -> u8 {
    count.0 += 1;
    42
}

fn out_needing_missing(_: Res<NeverInserted>) -> u8 {
    42
}

fn out_plain() -> u8 {
    42
}

fn in_counting(_: In<u8>, mut count: ResMut<Count>) {
    count.0 += 1;
}

fn in_if_thing_counting(_: In<u8>, _: Single<&Thing>, mut count: ResMut<Count>) {
    count.0 += 1;
}

fn in_needing_missing(_: In<u8>, _: Res<NeverInserted>) {}

fn in_if_thing(_: In<u8>, _: Single<&Thing>) {}

fn in_plain(_: In<u8>) {}

// bevy: schedule::executor::tests::piped_systems_first_system_skipped
#[test]
fn a_pipe_whose_first_system_is_skipped_runs_neither() {
    assert_piped(
        &piped(|s| {
            s.add_systems(out_if_thing.pipe(in_counting));
        }),
        false,
        0,
    );
}

// bevy: schedule::executor::tests::piped_system_second_system_skipped
#[test]
fn a_pipe_whose_second_system_is_skipped_runs_the_first() {
    assert_piped(
        &piped(|s| {
            s.add_systems(out_counting.pipe(in_if_thing_counting));
        }),
        false,
        1,
    );
}

// bevy: schedule::executor::tests::piped_system_first_system_panics
#[test]
fn a_pipe_whose_first_system_needs_a_missing_resource_panics() {
    assert_piped(
        &piped(|s| {
            s.add_systems(out_needing_missing.pipe(in_plain));
        }),
        true,
        0,
    );
}

// bevy: schedule::executor::tests::piped_system_second_system_panics
#[test]
fn a_pipe_whose_second_system_needs_a_missing_resource_panics() {
    assert_piped(
        &piped(|s| {
            s.add_systems(out_plain.pipe(in_needing_missing));
        }),
        true,
        0,
    );
}

// bevy: schedule::executor::tests::piped_system_skip_and_panic
#[test]
fn a_pipe_skipped_by_its_first_system_does_not_panic_for_its_second() {
    assert_piped(
        &piped(|s| {
            s.add_systems(out_if_thing.pipe(in_needing_missing));
        }),
        false,
        0,
    );
}

// bevy: schedule::executor::tests::piped_system_panic_and_skip
#[test]
fn a_pipe_whose_first_system_fails_panics_even_if_the_second_would_skip() {
    assert_piped(
        &piped(|s| {
            s.add_systems(out_needing_missing.pipe(in_if_thing));
        }),
        true,
        0,
    );
}

// bevy: schedule::executor::tests::piped_system_panic_and_panic
#[test]
fn a_pipe_whose_systems_both_need_a_missing_resource_panics() {
    assert_piped(
        &piped(|s| {
            s.add_systems(out_needing_missing.pipe(in_needing_missing));
        }),
        true,
        0,
    );
}

// bevy: schedule::executor::tests::piped_system_skip_and_skip
#[test]
fn a_pipe_whose_systems_both_skip_runs_neither() {
    fn out_if_thing_counting(_: Single<&Thing>, mut count: ResMut<Count>) -> u8 {
        count.0 += 1;
        42
    }
    assert_piped(
        &piped(|s| {
            s.add_systems(out_if_thing_counting.pipe(in_if_thing_counting));
        }),
        false,
        0,
    );
}

/// A parameter that reads nothing but declares exclusive access: a system
/// with it is exclusive in the schedule's eyes, yet it is a regular
/// (`Send`, non-`&mut World`) system.
struct ClaimsExclusive;

// SAFETY: no world data is read; the access declared is exclusive, which
// covers all of it.
unsafe impl SystemParam for ClaimsExclusive {
    type State = ();
    type Item<'world, 'state> = ClaimsExclusive;

    fn init_state(_: &mut World) {}

    fn init_access(
        _: &Self::State,
        meta: &mut SystemMeta,
        access: &mut SystemAccess,
        _: &mut World,
    ) {
        access.require_exclusive_access::<Self>(meta);
    }

    unsafe fn get_param<'world, 'state>(
        _: &'state mut Self::State,
        _: &SystemMeta,
        _: UnsafeWorldCell<'world>,
        _: Tick,
    ) -> Result<Self::Item<'world, 'state>, SystemParamValidationError> {
        Ok(ClaimsExclusive)
    }
}

#[derive(Default)]
struct LocalFlag(bool);

// bevy: schedule::executor::multi_threaded::tests::exclusive_system_reporting_send_releases_the_local_thread
#[test]
fn a_non_send_system_runs_after_a_send_system_claiming_exclusive_access() {
    for runner in RUNNERS {
        let mut world = World::new();
        world.insert_non_send(LocalFlag::default());
        let mut schedule = runner.schedule(&mut world);
        schedule.add_systems(
            (
                |_: ClaimsExclusive| {},
                |mut flag: NonSendMut<LocalFlag>| flag.0 = true,
            )
                .chain(),
        );
        runner.ready(&mut schedule, &mut world);
        run(runner, &mut schedule, &mut world);
        assert!(world.non_send::<LocalFlag>().0, "{runner:?}");
    }
}

//! bevy's sync-point scenarios: automatic `ApplyDeferred` between a system
//! with commands and the systems after it, explicit ones reused or not,
//! merged ones, `*_ignore_deferred` orderings and chains, sync points turned
//! off. Each runs on this crate's executor and on bevy's multi-threaded one:
//! what the systems see of each other's commands must be the same, and so
//! must the number of systems in the built schedule (`systems_len`, sync
//! points included).

mod common;

use bevy_ecs::prelude::*;
use bevy_ecs::schedule::ScheduleBuildSettings;
use common::{run, run_catching, Runner, RUNNERS};

#[derive(Resource)]
struct First;

#[derive(Resource)]
struct Second;

#[derive(Resource)]
struct Third;

fn insert_first(mut commands: Commands) {
    commands.insert_resource(First);
}

fn insert_second(mut commands: Commands) {
    commands.insert_resource(Second);
}

fn needs_first(_: Res<First>) {}

fn first_is_missing(first: Option<Res<First>>) {
    assert!(first.is_none(), "the command was applied");
}

/// Runs the schedule `add` builds, once, on every runner; it must have
/// `expected` systems once built. Systems check what they see themselves.
fn built_and_run(expected: usize, add: impl Fn(&mut Schedule)) {
    for runner in RUNNERS {
        let mut world = World::new();
        let mut schedule = runner.schedule(&mut world);
        add(&mut schedule);
        runner.ready(&mut schedule, &mut world);
        run(runner, &mut schedule, &mut world);
        assert_eq!(schedule.systems_len(), expected, "{runner:?}");
    }
}

/// A system's run, or the command it queued being applied.
#[derive(Debug, PartialEq)]
enum Event {
    Ran(u32),
    Applied(u32),
}

#[derive(Resource, Default)]
struct Events(Vec<Event>);

fn run_then_apply<const TAG: u32>(mut events: ResMut<Events>, mut commands: Commands) {
    events.0.push(Event::Ran(TAG));
    commands.queue(|world: &mut World| world.resource_mut::<Events>().0.push(Event::Applied(TAG)));
}

// bevy: schedule::schedule::tests::unchanged_auto_insert_apply_deferred_has_no_effect
#[test]
fn commands_of_a_chain_ignoring_deferred_are_applied_at_the_end_in_order() {
    for runner in RUNNERS {
        let mut world = World::new();
        world.init_resource::<Events>();
        let mut schedule = runner.schedule(&mut world);
        schedule.add_systems((run_then_apply::<1>, run_then_apply::<2>).chain_ignore_deferred());
        schedule.set_build_settings(ScheduleBuildSettings {
            auto_insert_apply_deferred: true,
            ..ScheduleBuildSettings::default()
        });
        runner.ready(&mut schedule, &mut world);
        run(runner, &mut schedule, &mut world);
        assert_eq!(
            world.resource::<Events>().0,
            [
                Event::Ran(1),
                Event::Ran(2),
                Event::Applied(1),
                Event::Applied(2)
            ],
            "{runner:?}"
        );
    }
}

// bevy: schedule::schedule::tests::inserts_a_sync_point
#[test]
fn a_chain_after_commands_gets_a_sync_point() {
    built_and_run(3, |schedule| {
        schedule.add_systems((insert_first, needs_first).chain());
    });
}

// bevy: schedule::schedule::tests::explicit_sync_point_used_as_auto_sync_point
#[test]
fn an_explicit_apply_deferred_serves_as_the_sync_point() {
    built_and_run(5, |schedule| {
        schedule.add_systems((insert_first, needs_first).chain());
        schedule.add_systems((|| {}, ApplyDeferred, || {}).chain());
    });
}

// bevy: schedule::schedule::tests::conditional_explicit_sync_point_not_used_as_auto_sync_point
#[test]
fn a_conditional_apply_deferred_is_not_used_as_the_sync_point() {
    built_and_run(6, |schedule| {
        schedule.add_systems((insert_first, needs_first).chain());
        schedule.add_systems((|| {}, ApplyDeferred.run_if(|| false), || {}).chain());
    });
}

// bevy: schedule::schedule::tests::conditional_explicit_sync_point_not_used_as_auto_sync_point_condition_on_chain
#[test]
fn an_apply_deferred_in_a_conditional_chain_is_not_used_as_the_sync_point() {
    built_and_run(6, |schedule| {
        schedule.add_systems((insert_first, needs_first).chain());
        schedule.add_systems((|| {}, ApplyDeferred, || {}).chain().run_if(|| false));
    });
}

// bevy: schedule::schedule::tests::conditional_explicit_sync_point_not_used_as_auto_sync_point_condition_on_system_set
#[test]
fn an_apply_deferred_in_a_conditional_set_is_not_used_as_the_sync_point() {
    #[derive(SystemSet, Debug, Clone, PartialEq, Eq, Hash)]
    struct Closed;
    built_and_run(6, |schedule| {
        schedule.configure_sets(Closed.run_if(|| false));
        schedule.add_systems((insert_first, needs_first).chain());
        schedule.add_systems((|| {}, ApplyDeferred.in_set(Closed), || {}).chain());
    });
}

// bevy: schedule::schedule::tests::conditional_explicit_sync_point_not_used_as_auto_sync_point_condition_on_nested_system_set
#[test]
fn an_apply_deferred_in_a_set_nested_in_a_conditional_one_is_not_used() {
    #[derive(SystemSet, Debug, Clone, PartialEq, Eq, Hash)]
    struct Closed;
    #[derive(SystemSet, Debug, Clone, PartialEq, Eq, Hash)]
    struct InsideClosed;
    built_and_run(6, |schedule| {
        schedule.configure_sets(Closed.run_if(|| false));
        schedule.configure_sets(InsideClosed.in_set(Closed));
        schedule.add_systems((insert_first, needs_first).chain());
        schedule.add_systems((|| {}, ApplyDeferred, || {}).chain().in_set(InsideClosed));
    });
}

// bevy: schedule::schedule::tests::merges_sync_points_into_one
#[test]
fn parallel_systems_with_commands_share_one_sync_point_also_after_a_rebuild() {
    let add = |schedule: &mut Schedule| {
        schedule.add_systems(
            (
                (insert_first, insert_second),
                |_: Res<First>, _: Res<Second>| {},
            )
                .chain(),
        );
    };
    for runner in RUNNERS {
        let mut world = World::new();
        let mut schedule = runner.schedule(&mut world);
        add(&mut schedule);
        runner.ready(&mut schedule, &mut world);
        run(runner, &mut schedule, &mut world);
        assert_eq!(schedule.systems_len(), 4, "{runner:?}");
        add(&mut schedule);
        run(runner, &mut schedule, &mut world);
        assert_eq!(schedule.systems_len(), 7, "{runner:?}");
    }
}

// bevy: schedule::schedule::tests::adds_multiple_consecutive_syncs
#[test]
fn consecutive_systems_with_commands_each_get_a_sync_point() {
    built_and_run(5, |schedule| {
        schedule.add_systems(
            (
                insert_first,
                |mut commands: Commands, _: Res<First>| commands.insert_resource(Second),
                |_: Res<First>, _: Res<Second>| {},
            )
                .chain(),
        );
    });
}

// bevy: schedule::schedule::tests::do_not_consider_ignore_deferred_before_exclusive_system
#[test]
fn an_exclusive_system_in_a_chain_ignoring_deferred_still_sees_the_commands() {
    built_and_run(6, |schedule| {
        schedule.add_systems(
            (
                |_: Commands| {},
                insert_first,
                |world: &mut World| assert!(world.contains_resource::<First>()),
                |_: &mut World| {},
                |_: Commands| {},
            )
                .chain_ignore_deferred(),
        );
    });
}

// bevy: schedule::schedule::tests::bubble_sync_point_through_ignore_deferred_node
#[test]
fn pending_commands_pass_through_an_ignore_deferred_link_to_the_next_sync_point() {
    built_and_run(4, |schedule| {
        schedule.add_systems(((insert_first, || {}).chain_ignore_deferred(), needs_first).chain());
    });
}

// bevy: schedule::schedule::tests::disable_auto_sync_points
#[test]
fn with_automatic_sync_points_off_commands_wait_for_the_end() {
    for runner in RUNNERS {
        let mut world = World::new();
        let mut schedule = runner.schedule(&mut world);
        schedule.set_build_settings(ScheduleBuildSettings {
            auto_insert_apply_deferred: false,
            ..ScheduleBuildSettings::default()
        });
        schedule.add_systems((insert_first, first_is_missing).chain());
        runner.ready(&mut schedule, &mut world);
        run(runner, &mut schedule, &mut world);
        assert_eq!(schedule.systems_len(), 2, "{runner:?}");
        assert!(world.contains_resource::<First>(), "{runner:?}");
    }
}

#[derive(SystemSet, Debug, Clone, PartialEq, Eq, Hash)]
enum Side {
    Before,
    After,
}

// bevy: schedule::schedule::tests::no_sync_edges::system_to_system_after
#[test]
fn after_ignore_deferred_between_systems_adds_no_sync_point() {
    built_and_run(2, |schedule| {
        schedule.add_systems((
            insert_first,
            first_is_missing.after_ignore_deferred(insert_first),
        ));
    });
}

// bevy: schedule::schedule::tests::no_sync_edges::system_to_system_before
#[test]
fn before_ignore_deferred_between_systems_adds_no_sync_point() {
    built_and_run(2, |schedule| {
        schedule.add_systems((
            insert_first.before_ignore_deferred(first_is_missing),
            first_is_missing,
        ));
    });
}

// bevy: schedule::schedule::tests::no_sync_edges::set_to_system_after
#[test]
fn a_set_after_ignore_deferred_a_system_gets_no_sync_point() {
    built_and_run(2, |schedule| {
        schedule
            .add_systems((insert_first, first_is_missing.in_set(Side::After)))
            .configure_sets(Side::After.after_ignore_deferred(insert_first));
    });
}

// bevy: schedule::schedule::tests::no_sync_edges::set_to_system_before
#[test]
fn a_set_before_ignore_deferred_a_system_gets_no_sync_point() {
    built_and_run(2, |schedule| {
        schedule
            .add_systems((insert_first.in_set(Side::Before), first_is_missing))
            .configure_sets(Side::Before.before_ignore_deferred(first_is_missing));
    });
}

// bevy: schedule::schedule::tests::no_sync_edges::set_to_set_after
#[test]
fn a_set_after_ignore_deferred_another_set_gets_no_sync_point() {
    built_and_run(2, |schedule| {
        schedule
            .add_systems((
                insert_first.in_set(Side::Before),
                first_is_missing.in_set(Side::After),
            ))
            .configure_sets(Side::After.after_ignore_deferred(Side::Before));
    });
}

// bevy: schedule::schedule::tests::no_sync_edges::set_to_set_before
#[test]
fn a_set_before_ignore_deferred_another_set_gets_no_sync_point() {
    built_and_run(2, |schedule| {
        schedule
            .add_systems((
                insert_first.in_set(Side::Before),
                first_is_missing.in_set(Side::After),
            ))
            .configure_sets(Side::Before.before_ignore_deferred(Side::After));
    });
}

/// Asserts which of the three resources a system sees.
fn sees(first: bool, second: bool) -> impl FnMut(Option<Res<First>>, Option<Res<Second>>) {
    move |a: Option<Res<First>>, b: Option<Res<Second>>| {
        assert_eq!(
            (a.is_some(), b.is_some()),
            (first, second),
            "(First, Second)"
        );
    }
}

/// Two groups chained strictly (`strict`) or ignoring deferred: the first
/// group's two systems insert [`First`] and [`Second`] in parallel.
fn outer_chain_only(strict: bool) {
    let expected = if strict { 5 } else { 4 };
    let seen = strict;
    built_and_run(expected, |schedule| {
        let groups = (
            (insert_first, insert_second),
            (sees(seen, seen), sees(seen, seen)),
        );
        if strict {
            schedule.add_systems(groups.chain());
        } else {
            schedule.add_systems(groups.chain_ignore_deferred());
        }
    });
}

// bevy: schedule::schedule::tests::no_sync_chain::only_chain_outside
#[test]
fn an_outer_chain_syncs_between_groups_unless_it_ignores_deferred() {
    outer_chain_only(true);
    outer_chain_only(false);
}

// bevy: schedule::schedule::tests::no_sync_chain::chain_first
#[test]
fn a_chained_first_group_syncs_inside_and_the_outer_chain_decides_the_rest() {
    for strict in [true, false] {
        let expected = if strict { 6 } else { 5 };
        built_and_run(expected, |schedule| {
            let groups = (
                (
                    insert_first,
                    |mut commands: Commands, first: Option<Res<First>>| {
                        assert!(first.is_some());
                        commands.insert_resource(Second);
                    },
                )
                    .chain(),
                (sees(true, strict), sees(true, strict)),
            );
            if strict {
                schedule.add_systems(groups.chain());
            } else {
                schedule.add_systems(groups.chain_ignore_deferred());
            }
        });
    }
}

/// Checks that the [`Third`] inserter ran before (with its sync point).
fn sees_all(a: Option<Res<First>>, b: Option<Res<Second>>, c: Option<Res<Third>>) {
    assert!(a.is_some() && b.is_some() && c.is_some());
}

// bevy: schedule::schedule::tests::no_sync_chain::chain_second
#[test]
fn a_chained_second_group_syncs_inside_and_the_outer_chain_decides_before_it() {
    for strict in [true, false] {
        let expected = if strict { 6 } else { 5 };
        built_and_run(expected, |schedule| {
            let groups = (
                (insert_first, insert_second),
                (
                    move |mut commands: Commands, a: Option<Res<First>>, b: Option<Res<Second>>| {
                        assert_eq!((a.is_some(), b.is_some()), (strict, strict));
                        commands.insert_resource(Third);
                    },
                    sees_all,
                )
                    .chain(),
            );
            if strict {
                schedule.add_systems(groups.chain());
            } else {
                schedule.add_systems(groups.chain_ignore_deferred());
            }
        });
    }
}

// bevy: schedule::schedule::tests::no_sync_chain::chain_all
#[test]
fn chained_groups_in_a_chain_sync_inside_each_and_between_unless_ignored() {
    for strict in [true, false] {
        let expected = if strict { 7 } else { 6 };
        built_and_run(expected, |schedule| {
            let groups = (
                (
                    insert_first,
                    |mut commands: Commands, first: Option<Res<First>>| {
                        assert!(first.is_some());
                        commands.insert_resource(Second);
                    },
                )
                    .chain(),
                (
                    move |mut commands: Commands, a: Option<Res<First>>, b: Option<Res<Second>>| {
                        assert_eq!((a.is_some(), b.is_some()), (true, strict));
                        commands.insert_resource(Third);
                    },
                    sees_all,
                )
                    .chain(),
            );
            if strict {
                schedule.add_systems(groups.chain());
            } else {
                schedule.add_systems(groups.chain_ignore_deferred());
            }
        });
    }
}

// bevy: schedule::executor::multi_threaded::tests::check_spawn_exclusive_system_task_miri
#[test]
fn two_chained_systems_with_empty_commands_run_with_their_sync_point() {
    built_and_run(3, |schedule| {
        schedule.add_systems((|_: Commands| {}, |_: Commands| {}).chain());
    });
}

/// The case of [`built_and_run`], for one runner: used where a case must
/// also check the world after the run.
fn world_after(runner: Runner, add: impl FnOnce(&mut Schedule)) -> World {
    let mut world = World::new();
    let mut schedule = runner.schedule(&mut world);
    add(&mut schedule);
    runner.ready(&mut schedule, &mut world);
    run(runner, &mut schedule, &mut world);
    world
}

// Not one of bevy's tests: commands queued before a sync point that is
// skipped stay queued until the next one (here the end of the run).
#[test]
fn commands_before_a_skipped_apply_deferred_are_applied_at_the_end() {
    for runner in RUNNERS {
        let world = world_after(runner, |schedule| {
            schedule.set_build_settings(ScheduleBuildSettings {
                auto_insert_apply_deferred: false,
                ..ScheduleBuildSettings::default()
            });
            schedule.add_systems(
                (
                    insert_first,
                    ApplyDeferred.run_if(|| false),
                    first_is_missing,
                )
                    .chain(),
            );
        });
        assert!(world.contains_resource::<First>(), "{runner:?}");
    }
}

#[derive(Resource)]
struct Late;

// Not one of bevy's tests; found by `random_schedules`. bevy keeps every
// automatic sync point it ever made in the schedule graph, also when a
// rebuild no longer uses one (here the first build's point, replaced by an
// explicit `ApplyDeferred` at the same depth); only the ones in use are in
// the built schedule. The rebuild's new point must still order the system
// after it behind the commands before it.
#[test]
fn an_automatic_sync_point_left_unused_by_a_rebuild_does_not_stand_in_for_another() {
    let mut failed = Vec::new();
    for runner in RUNNERS {
        let mut world = World::new();
        let mut schedule = runner.schedule(&mut world);
        schedule.add_systems((insert_first, needs_first).chain());
        runner.ready(&mut schedule, &mut world);
        run(runner, &mut schedule, &mut world);
        assert_eq!(schedule.systems_len(), 3, "{runner:?}");

        schedule.add_systems(
            (
                || {},
                ApplyDeferred,
                |mut commands: Commands| commands.insert_resource(Late),
                |_: Res<Late>| {},
            )
                .chain(),
        );
        for _ in 0..5 {
            world.remove_resource::<First>();
            world.remove_resource::<Late>();
            if let Some(panic) = run_catching(&mut schedule, &mut world) {
                failed.push(format!(
                    "{runner:?}: {}",
                    panic.lines().next().unwrap_or("")
                ));
                break;
            }
        }
        // Six systems (the explicit point among them) and one automatic
        // point: the first build's is not in the built schedule.
        assert_eq!(schedule.systems_len(), 7, "{runner:?}");
    }
    assert!(failed.is_empty(), "{failed:#?}");
}

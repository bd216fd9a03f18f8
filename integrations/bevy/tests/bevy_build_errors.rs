//! bevy's schedule build errors (dependency and hierarchy loops and cycles,
//! ambiguous system-type sets, redundant hierarchy and ambiguities raised to
//! errors, cross dependencies, ordered sets that intersect). No system runs
//! in these; what is checked is that each error reaches the caller alike:
//! from `install` when the schedule is broken before it, from the next
//! build when it breaks after, and from bevy's own build on its executor.
//! A broken schedule's run panics on all three.

mod common;

use bevy_ecs::prelude::*;
use bevy_ecs::schedule::graph::DiGraphToposortError;
use bevy_ecs::schedule::{
    LogLevel, ScheduleBuildError, ScheduleBuildSettings, ScheduleBuildWarning,
};
use common::{pool, run_catching, Runner, RUNNERS};
use engine_tasks_bevy::{install, InstallError};

/// The error building the schedule `break_it` configures gives, on
/// `runner`: [`Runner::Pool`] installs after `break_it`, so `install`
/// reports it; the others have their executor before, and
/// `Schedule::initialize` reports it. The run that follows must panic.
fn build_error(runner: Runner, break_it: impl FnOnce(&mut Schedule)) -> ScheduleBuildError {
    let mut world = World::new();
    let mut schedule = runner.schedule(&mut world);
    break_it(&mut schedule);
    let error = match runner {
        Runner::Pool => match install(&mut schedule, &mut world, pool().handle()) {
            Err(InstallError::Build(error)) => error,
            Err(other) => panic!("{runner:?}: not a build error: {other}"),
            Ok(()) => panic!("{runner:?}: the broken schedule was installed"),
        },
        Runner::PoolFromStart | Runner::Bevy => match schedule.initialize(&mut world) {
            Err(error) => error,
            Ok(_) => panic!("{runner:?}: the broken schedule built"),
        },
    };
    assert!(
        run_catching(&mut schedule, &mut world).is_some(),
        "{runner:?}: the broken schedule ran"
    );
    error
}

#[derive(SystemSet, Debug, Clone, PartialEq, Eq, Hash)]
enum Sets {
    A,
    B,
    C,
    X,
}

fn one() {}
fn two() {}

// bevy: schedule::tests::schedule_build_errors::dependency_loop
#[test]
fn a_set_after_itself_is_a_dependency_loop() {
    for runner in RUNNERS {
        let error = build_error(runner, |s| {
            s.configure_sets(Sets::X.after(Sets::X));
        });
        assert!(
            matches!(
                error,
                ScheduleBuildError::DependencySort(DiGraphToposortError::Loop(_))
            ),
            "{runner:?}: {error:?}"
        );
    }
}

// bevy: schedule::tests::schedule_build_errors::dependency_loop_from_chain
#[test]
fn a_set_chained_to_itself_is_a_dependency_loop() {
    for runner in RUNNERS {
        let error = build_error(runner, |s| {
            s.configure_sets((Sets::X, Sets::X).chain());
        });
        assert!(
            matches!(
                error,
                ScheduleBuildError::DependencySort(DiGraphToposortError::Loop(_))
            ),
            "{runner:?}: {error:?}"
        );
    }
}

// bevy: schedule::tests::schedule_build_errors::dependency_cycle
#[test]
fn sets_or_systems_after_each_other_are_a_dependency_cycle() {
    for runner in RUNNERS {
        let error = build_error(runner, |s| {
            s.configure_sets(Sets::A.after(Sets::B));
            s.configure_sets(Sets::B.after(Sets::A));
        });
        assert!(
            matches!(
                error,
                ScheduleBuildError::DependencySort(DiGraphToposortError::Cycle(_))
            ),
            "{runner:?}: {error:?}"
        );
        let error = build_error(runner, |s| {
            s.add_systems((one.after(two), two.after(one)));
        });
        assert!(
            matches!(
                error,
                ScheduleBuildError::FlatDependencySort(DiGraphToposortError::Cycle(_))
            ),
            "{runner:?}: {error:?}"
        );
    }
}

// bevy: schedule::tests::schedule_build_errors::hierarchy_loop
#[test]
fn a_set_in_itself_is_a_hierarchy_loop() {
    for runner in RUNNERS {
        let error = build_error(runner, |s| {
            s.configure_sets(Sets::X.in_set(Sets::X));
        });
        assert!(
            matches!(
                error,
                ScheduleBuildError::HierarchySort(DiGraphToposortError::Loop(_))
            ),
            "{runner:?}: {error:?}"
        );
    }
}

// bevy: schedule::tests::schedule_build_errors::hierarchy_cycle
#[test]
fn sets_in_each_other_are_a_hierarchy_cycle() {
    for runner in RUNNERS {
        let error = build_error(runner, |s| {
            s.configure_sets(Sets::A.in_set(Sets::B));
            s.configure_sets(Sets::B.in_set(Sets::A));
        });
        assert!(
            matches!(
                error,
                ScheduleBuildError::HierarchySort(DiGraphToposortError::Cycle(_))
            ),
            "{runner:?}: {error:?}"
        );
    }
}

// bevy: schedule::tests::schedule_build_errors::system_type_set_ambiguity
//
// Ordering against a system's type is fine while one instance of it is in
// the schedule, and an error once a second one is added, after the
// executor is in place (also for the pool executor installed before).
#[test]
fn ordering_against_a_system_with_two_instances_is_an_error() {
    type Add = fn(&mut Schedule);
    let cases: [(Add, Add); 2] = [
        (
            |s| {
                s.add_systems((one, two.after(one)));
            },
            |s| {
                s.add_systems(one);
            },
        ),
        (
            |s| {
                s.add_systems((one, two.ambiguous_with(one)));
            },
            |s| {
                s.add_systems(one);
            },
        ),
    ];
    for runner in RUNNERS {
        for (fine, second_instance) in cases {
            let mut world = World::new();
            let mut schedule = runner.schedule(&mut world);
            fine(&mut schedule);
            runner.ready(&mut schedule, &mut world);
            schedule
                .initialize(&mut world)
                .expect("one instance builds");
            second_instance(&mut schedule);
            let Err(error) = schedule.initialize(&mut world) else {
                panic!("{runner:?}: two instances built");
            };
            assert!(
                matches!(error, ScheduleBuildError::SystemTypeSetAmbiguity(_)),
                "{runner:?}: {error:?}"
            );
        }
    }
}

// bevy: schedule::tests::schedule_build_errors::hierarchy_redundancy
#[test]
fn a_redundant_hierarchy_is_an_error_when_asked() {
    for runner in RUNNERS {
        let error = build_error(runner, |s| {
            s.set_build_settings(ScheduleBuildSettings {
                hierarchy_detection: LogLevel::Error,
                ..ScheduleBuildSettings::default()
            });
            s.configure_sets(Sets::A);
            s.configure_sets(Sets::B.in_set(Sets::A));
            s.configure_sets(Sets::X.in_set(Sets::A).in_set(Sets::B));
        });
        assert!(
            matches!(
                error,
                ScheduleBuildError::Elevated(ScheduleBuildWarning::HierarchyRedundancy(_))
            ),
            "{runner:?}: {error:?}"
        );
    }
}

// bevy: schedule::tests::schedule_build_errors::cross_dependency
#[test]
fn a_set_both_in_and_after_another_is_a_cross_dependency() {
    for runner in RUNNERS {
        let error = build_error(runner, |s| {
            s.configure_sets(Sets::B.in_set(Sets::A));
            s.configure_sets(Sets::B.after(Sets::A));
        });
        assert!(
            matches!(error, ScheduleBuildError::CrossDependency(_)),
            "{runner:?}: {error:?}"
        );
    }
}

// bevy: schedule::tests::schedule_build_errors::sets_have_order_but_intersect
#[test]
fn a_system_in_two_ordered_sets_is_an_error() {
    for runner in RUNNERS {
        let error = build_error(runner, |s| {
            s.add_systems(one.in_set(Sets::A).in_set(Sets::C));
            s.configure_sets((Sets::A, Sets::B.after(Sets::A), Sets::C.after(Sets::B)));
        });
        assert!(
            matches!(error, ScheduleBuildError::SetsHaveOrderButIntersect(_)),
            "{runner:?}: {error:?}"
        );
    }
}

#[derive(Resource)]
struct Contested;

// bevy: schedule::tests::schedule_build_errors::ambiguity
#[test]
fn an_ambiguity_is_an_error_when_asked() {
    for runner in RUNNERS {
        let error = build_error(runner, |s| {
            s.set_build_settings(ScheduleBuildSettings {
                ambiguity_detection: LogLevel::Error,
                ..ScheduleBuildSettings::default()
            });
            s.add_systems((|_: Res<Contested>| {}, |_: ResMut<Contested>| {}));
        });
        assert!(
            matches!(
                error,
                ScheduleBuildError::Elevated(ScheduleBuildWarning::Ambiguity(_))
            ),
            "{runner:?}: {error:?}"
        );
    }
}

//! Schedules that change after the executor is installed, orderings through
//! empty sets, run conditions across rebuilds and failed builds, swapping
//! executors: each case runs on this crate's executor and on bevy's
//! multi-threaded one, and both must give the same observable result.

use bevy_ecs::prelude::*;
use bevy_ecs::schedule::graph::DiGraph;
use bevy_ecs::schedule::{
    FlattenedDependencies, LogLevel, MultiThreadedExecutor, NodeId, ScheduleBuildError,
    ScheduleBuildPass, ScheduleBuildSettings, ScheduleCleanupPolicy, ScheduleGraph,
    SingleThreadedExecutor, SystemKey, SystemSetKey,
};
use bevy_platform::hash::FixedHasher;
use engine_tasks::Pool;
use engine_tasks_bevy::{install, InstallError, Installer};
use indexmap::IndexSet;
use std::sync::{Mutex, OnceLock};

fn pool() -> &'static Pool {
    static POOL: OnceLock<Pool> = OnceLock::new();
    POOL.get_or_init(|| Pool::builder().threads(3).build().expect("pool"))
}

/// The order in which systems ran in one run.
#[derive(Resource, Default)]
struct Log(Mutex<Vec<&'static str>>);

fn log(name: &'static str) -> impl FnMut(Res<Log>) {
    move |log: Res<Log>| log.0.lock().unwrap().push(name)
}

fn take_log(world: &mut World) -> Vec<&'static str> {
    std::mem::take(&mut *world.resource::<Log>().0.lock().unwrap())
}

/// Which executor runs a schedule in a case.
#[derive(Clone, Copy, Debug)]
enum Runner {
    Pool,
    Bevy,
}

const RUNNERS: [Runner; 2] = [Runner::Pool, Runner::Bevy];

fn world() -> World {
    let mut world = World::new();
    world.init_resource::<Log>();
    world
}

/// Installs `runner`'s executor on `schedule`.
fn use_executor(runner: Runner, schedule: &mut Schedule, world: &mut World) {
    match runner {
        Runner::Pool => install(schedule, world, pool().handle()).expect("the schedule builds"),
        Runner::Bevy => {
            schedule.set_executor(MultiThreadedExecutor::new());
        }
    }
}

/// Runs `schedule` `times` times and returns each run's log.
fn runs(schedule: &mut Schedule, world: &mut World, times: usize) -> Vec<Vec<&'static str>> {
    (0..times)
        .map(|_| {
            schedule.run(world);
            take_log(world)
        })
        .collect()
}

fn position(log: &[&str], name: &str) -> usize {
    log.iter()
        .position(|n| *n == name)
        .unwrap_or_else(|| panic!("{name} did not run: {log:?}"))
}

#[derive(SystemSet, Debug, Clone, PartialEq, Eq, Hash)]
enum Phase {
    First,
    Middle,
    Last,
    Empty,
    AlsoEmpty,
}

/// Bug 1: `a.before(Empty)` and `b.after(Empty)` with no system in `Empty`
/// order `a` before `b`, as do chains through one or two empty sets.
#[test]
fn orderings_through_empty_sets_hold() {
    for runner in RUNNERS {
        let mut world = world();
        let mut schedule = Schedule::default();
        schedule.configure_sets((Phase::First, Phase::Middle, Phase::Last).chain());
        schedule.configure_sets((Phase::Empty, Phase::AlsoEmpty).chain());
        schedule.add_systems((
            log("a").before(Phase::Empty),
            log("b").after(Phase::Empty),
            log("first").in_set(Phase::First),
            log("last").in_set(Phase::Last),
            log("x").before(Phase::Empty),
            log("y").after(Phase::AlsoEmpty),
        ));
        use_executor(runner, &mut schedule, &mut world);
        for log in runs(&mut schedule, &mut world, 50) {
            assert!(
                position(&log, "a") < position(&log, "b"),
                "{runner:?}: {log:?}"
            );
            assert!(
                position(&log, "first") < position(&log, "last"),
                "{runner:?}: {log:?}"
            );
            assert!(
                position(&log, "x") < position(&log, "y"),
                "{runner:?}: {log:?}"
            );
        }
    }
}

#[derive(Resource, Default)]
struct Allowed(bool);

fn allowed(flag: Res<Allowed>) -> bool {
    flag.0
}

/// Bug 2: a schedule that already ran, then got this executor (its
/// conditions were inside bevy's built schedule), still honours them; so
/// does one swapped to bevy's executor and back.
#[test]
fn conditions_hold_when_installed_after_a_run_and_across_swaps() {
    let mut world = world();
    world.init_resource::<Allowed>();
    let mut schedule = Schedule::default();
    schedule.set_executor(SingleThreadedExecutor::new());
    schedule.add_systems((
        log("never").run_if(|| false),
        log("gated").run_if(allowed),
        log("always"),
    ));
    schedule.configure_sets(Phase::First.run_if(|| false));
    schedule.add_systems(log("in_a_closed_set").in_set(Phase::First));
    schedule.run(&mut world);
    assert_eq!(take_log(&mut world), ["always"]);
    install(&mut schedule, &mut world, pool().handle()).unwrap();
    assert_eq!(runs(&mut schedule, &mut world, 3), vec![vec!["always"]; 3]);
    world.resource_mut::<Allowed>().0 = true;
    let mut log = runs(&mut schedule, &mut world, 1).remove(0);
    log.sort();
    assert_eq!(log, ["always", "gated"]);
    // Swapped to bevy's executor, the same conditions run there.
    schedule.set_executor(MultiThreadedExecutor::new());
    world.resource_mut::<Allowed>().0 = false;
    assert_eq!(runs(&mut schedule, &mut world, 2), vec![vec!["always"]; 2]);
    // And back.
    install(&mut schedule, &mut world, pool().handle()).unwrap();
    assert_eq!(runs(&mut schedule, &mut world, 2), vec![vec!["always"]; 2]);
}

#[derive(Resource, Default)]
struct Conflict(u32);

fn write_conflict(mut c: ResMut<Conflict>) {
    c.0 += 1;
}

/// Bug 3: a failed install (ambiguities set to error) keeps every run
/// condition; installing again after the schedule is fixed honours them.
#[test]
fn a_failed_install_keeps_the_conditions() {
    let mut world = world();
    world.init_resource::<Conflict>();
    let mut schedule = Schedule::default();
    schedule.set_build_settings(ScheduleBuildSettings {
        ambiguity_detection: LogLevel::Error,
        ..ScheduleBuildSettings::default()
    });
    schedule.add_systems((
        log("never").run_if(|| false),
        write_conflict,
        write_conflict.before(log("never")),
    ));
    // Two writers of `Conflict` with no order: ambiguous, so the build fails.
    let failed = install(&mut schedule, &mut world, pool().handle());
    assert!(failed.is_err(), "the ambiguity is an error");
    schedule.set_build_settings(ScheduleBuildSettings::default());
    install(&mut schedule, &mut world, pool().handle()).unwrap();
    for log in runs(&mut schedule, &mut world, 5) {
        assert!(!log.contains(&"never"), "{log:?}");
    }
    assert_eq!(world.resource::<Conflict>().0, 10);
}

/// A build pass, as a user might write one, that orders the two ends of the
/// first edge of the flattened graph both ways: a cycle that bevy finds
/// after every build pass (this crate's too) has run.
#[derive(Debug)]
struct BackEdge;

impl ScheduleBuildPass for BackEdge {
    type EdgeOptions = ();

    fn add_dependency(&mut self, _from: NodeId, _to: NodeId, _options: Option<&()>) {}

    fn collapse_set(
        &mut self,
        _set: SystemSetKey,
        _systems: &IndexSet<SystemKey, FixedHasher>,
        _dependency_flattening: &DiGraph<NodeId>,
    ) -> impl Iterator<Item = (NodeId, NodeId)> {
        std::iter::empty()
    }

    fn build(
        &mut self,
        _world: &mut World,
        _graph: &mut ScheduleGraph,
        mut dependencies: FlattenedDependencies<'_>,
    ) -> Result<(), ScheduleBuildError> {
        let (before, after) = dependencies
            .graph()
            .all_edges()
            .next()
            .expect("the schedule has an ordering");
        dependencies.add_edge(after, before);
        Ok(())
    }
}

/// Bug 3, for a cycle: an install that fails because the orderings form a
/// cycle (found after this crate's build pass has shared the conditions)
/// keeps every run condition; once the cycle is gone, installing again
/// honours them: neither the system nor the set whose condition is false
/// ever runs.
#[test]
fn an_install_failing_on_a_cycle_keeps_the_conditions() {
    let mut world = world();
    world.init_resource::<Allowed>();
    let mut schedule = Schedule::default();
    schedule.configure_sets(Phase::Last.run_if(|| false));
    schedule.add_systems((
        (
            log("first"),
            log("never").run_if(|| false),
            log("gated").run_if(allowed),
        )
            .chain(),
        log("in_a_closed_set").in_set(Phase::Last),
    ));
    schedule.add_build_pass(BackEdge);
    let failed = install(&mut schedule, &mut world, pool().handle());
    assert!(
        matches!(
            failed,
            Err(InstallError::Build(ScheduleBuildError::FlatDependencySort(
                _
            )))
        ),
        "the cycle is a build error: {failed:?}"
    );
    // The user finds the pass that made the cycle and removes it.
    schedule.remove_build_pass::<BackEdge>();
    install(&mut schedule, &mut world, pool().handle()).unwrap();
    for log in runs(&mut schedule, &mut world, 5) {
        assert_eq!(log, ["first"]);
    }
    world.resource_mut::<Allowed>().0 = true;
    for log in runs(&mut schedule, &mut world, 5) {
        assert_eq!(log, ["first", "gated"]);
    }
}

/// Systems and sets added after the first run, systems removed with
/// `remove_systems_in_set`, and conditions added to a set later: each
/// rebuild is followed, on both executors alike.
#[test]
fn the_executor_follows_every_rebuild() {
    for runner in RUNNERS {
        let mut world = world();
        let mut schedule = Schedule::default();
        schedule.add_systems(log("a"));
        use_executor(runner, &mut schedule, &mut world);
        assert_eq!(runs(&mut schedule, &mut world, 1), vec![vec!["a"]]);

        schedule.configure_sets((Phase::First, Phase::Last).chain());
        schedule.add_systems((
            (log("b"), log("c")).chain().in_set(Phase::Last),
            log("first").in_set(Phase::First),
        ));
        for log in runs(&mut schedule, &mut world, 10) {
            assert_eq!(log.len(), 4, "{runner:?}: {log:?}");
            assert!(position(&log, "first") < position(&log, "b"), "{log:?}");
            assert!(position(&log, "b") < position(&log, "c"), "{log:?}");
        }

        let removed = schedule
            .remove_systems_in_set(
                Phase::Last,
                &mut world,
                ScheduleCleanupPolicy::RemoveSystemsOnly,
            )
            .expect("the set exists");
        assert_eq!(removed, 2);
        for mut log in runs(&mut schedule, &mut world, 5) {
            log.sort();
            assert_eq!(log, ["a", "first"], "{runner:?}");
        }

        schedule.configure_sets(Phase::First.run_if(|| false));
        for log in runs(&mut schedule, &mut world, 5) {
            assert_eq!(log, ["a"], "{runner:?}");
        }
    }
}

#[derive(Resource, Default)]
struct Spawned;

/// `set_apply_final_deferred(false)` after install keeps commands queued
/// until the schedule's next sync point; the installer's setting does the
/// same from the start.
#[test]
fn final_deferred_can_be_turned_off() {
    let spawn = |mut commands: Commands| {
        commands.insert_resource(Spawned);
    };
    let mut world = world();
    let mut schedule = Schedule::default();
    schedule.add_systems(spawn);
    Installer::new(pool().handle())
        .apply_final_deferred(false)
        .install(&mut schedule, &mut world)
        .unwrap();
    schedule.run(&mut world);
    assert!(
        world.get_resource::<Spawned>().is_none(),
        "commands were applied"
    );
    schedule.set_apply_final_deferred(true);
    schedule.run(&mut world);
    assert!(world.get_resource::<Spawned>().is_some());
}

/// Whether `writer` is inside its `ResMut<Shared>`, and how often a run
/// condition that reads `Shared` saw it there.
static WRITING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
static OVERLAPS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

#[derive(Resource, Default)]
struct Shared(u64);

/// Spins for about `micros` µs, checking `WRITING` before and after.
fn spin_watching(micros: u64) {
    use std::sync::atomic::Ordering::SeqCst;
    let start = std::time::Instant::now();
    let mut seen = WRITING.load(SeqCst);
    while start.elapsed() < std::time::Duration::from_micros(micros) {
        std::hint::spin_loop();
    }
    seen |= WRITING.load(SeqCst);
    if seen {
        OVERLAPS.fetch_add(1, SeqCst);
    }
}

fn anchor() {}

fn writer(mut shared: ResMut<Shared>) {
    use std::sync::atomic::Ordering::SeqCst;
    WRITING.store(true, SeqCst);
    std::thread::sleep(std::time::Duration::from_micros(300));
    shared.0 += 1;
    WRITING.store(false, SeqCst);
}

/// A build pass, registered before the executor's, that adds a system
/// with a run condition reading `Shared`, after `anchor`. bevy initialises
/// what passes add only after every pass ran, so the condition's access is
/// not known yet when the executor's pass takes the condition.
#[derive(Debug)]
struct AddGated;

impl ScheduleBuildPass for AddGated {
    type EdgeOptions = ();

    fn add_dependency(&mut self, _from: NodeId, _to: NodeId, _options: Option<&()>) {}

    fn collapse_set(
        &mut self,
        _set: SystemSetKey,
        _systems: &IndexSet<SystemKey, FixedHasher>,
        _dependency_flattening: &DiGraph<NodeId>,
    ) -> impl Iterator<Item = (NodeId, NodeId)> {
        std::iter::empty()
    }

    fn build(
        &mut self,
        _world: &mut World,
        graph: &mut ScheduleGraph,
        mut dependencies: FlattenedDependencies<'_>,
    ) -> Result<(), ScheduleBuildError> {
        let anchor = graph
            .systems
            .iter()
            .find(|(_, system, _)| system.name().to_string().ends_with("anchor"))
            .map(|(key, _, _)| key)
            .expect("the schedule has `anchor`");
        let gated: Box<dyn ReadOnlySystem<In = (), Out = bool>> =
            Box::new(IntoSystem::into_system(|_: Res<Shared>| {
                spin_watching(300);
                true
            }));
        let system = graph
            .systems
            .insert(Box::new(IntoSystem::into_system(|| ())), vec![gated]);
        dependencies.add_edge(anchor, system);
        Ok(())
    }
}

/// A run condition that a build pass before the executor's added reads
/// `Shared`, so it never runs while `writer` holds `ResMut<Shared>`: the
/// executor takes its access from bevy's initialisation of it, not from
/// the empty access it had when the executor's pass saw it.
#[test]
fn a_condition_added_by_an_earlier_build_pass_keeps_its_access() {
    use std::sync::atomic::Ordering::SeqCst;
    let mut world = world();
    world.init_resource::<Shared>();
    let mut schedule = Schedule::default();
    schedule.add_build_pass(AddGated);
    schedule.add_systems((anchor, writer));
    install(&mut schedule, &mut world, pool().handle()).unwrap();
    for _ in 0..200 {
        schedule.run(&mut world);
    }
    assert_eq!(world.resource::<Shared>().0, 200);
    assert_eq!(
        OVERLAPS.load(SeqCst),
        0,
        "the condition ran beside the writer"
    );
}

/// An empty schedule runs, on this crate's executor as on bevy's, and so
/// does it once a system is added.
#[test]
fn an_empty_schedule_runs() {
    for runner in RUNNERS {
        let mut world = world();
        let mut schedule = Schedule::default();
        use_executor(runner, &mut schedule, &mut world);
        schedule.run(&mut world);
        schedule.add_systems(log("a"));
        schedule.run(&mut world);
        assert_eq!(take_log(&mut world), ["a"], "{runner:?}");
    }
}

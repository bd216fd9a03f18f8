//! bevy's run-condition scenarios: conditions on systems and on sets, several
//! on one system or set, distributive conditions, combinators, conditions
//! with state (`Local`, change detection), conditions that fail, conditions
//! on sets whose systems are skipped; each run on this crate's executor and
//! on bevy's multi-threaded one with the same expected result.

mod common;

use bevy_ecs::error::{ignore, BevyError, ErrorContext, FallbackErrorHandler};
use bevy_ecs::prelude::*;
use bevy_ecs::schedule::SystemCondition;
use bevy_ecs::system::{RunSystemOnce, System};
use common::{run, RUNNERS};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Mutex;

/// Tags of the systems that ran, in order.
#[derive(Resource, Default)]
struct Order(Vec<u32>);

fn push(tag: u32) -> impl FnMut(ResMut<Order>) {
    move |mut order: ResMut<Order>| order.0.push(tag)
}

fn push_exclusive(tag: u32) -> impl FnMut(&mut World) {
    move |world: &mut World| world.resource_mut::<Order>().0.push(tag)
}

fn take(world: &mut World) -> Vec<u32> {
    std::mem::take(&mut world.resource_mut::<Order>().0)
}

#[derive(Resource, Default)]
struct Flag(bool);

fn flag_is_set(flag: Res<Flag>) -> bool {
    flag.0
}

/// Counted through a shared reference, so that counting systems do not
/// conflict with each other.
#[derive(Resource, Default)]
struct Runs(AtomicU32);

fn count_run(runs: Res<Runs>) {
    runs.0.fetch_add(1, Ordering::Relaxed);
}

fn runs(world: &World) -> u32 {
    world.resource::<Runs>().0.load(Ordering::Relaxed)
}

#[derive(SystemSet, Debug, Clone, PartialEq, Eq, Hash)]
enum Gate {
    FalseFalse,
    TrueFalse,
    FalseTrue,
    TrueTrue,
}

// bevy: schedule::tests::conditions::system_with_condition_bool
#[test]
fn a_condition_reading_a_resource_gates_its_system() {
    for runner in RUNNERS {
        let mut world = World::new();
        world.init_resource::<Order>();
        world.init_resource::<Flag>();
        let mut schedule = runner.schedule(&mut world);
        schedule.add_systems(push(0).run_if(flag_is_set));
        runner.ready(&mut schedule, &mut world);
        run(runner, &mut schedule, &mut world);
        assert_eq!(take(&mut world), [0u32; 0], "{runner:?}");
        world.resource_mut::<Flag>().0 = true;
        run(runner, &mut schedule, &mut world);
        assert_eq!(take(&mut world), [0], "{runner:?}");
    }
}

// bevy: schedule::tests::conditions::system_with_condition_result_bool
#[test]
fn conditions_returning_result_gate_only_on_ok_true() {
    for runner in RUNNERS {
        let mut world = World::new();
        world.init_resource::<Order>();
        world.insert_resource(FallbackErrorHandler(ignore));
        let mut schedule = runner.schedule(&mut world);
        schedule.add_systems((
            push(0).run_if(|| -> Result<bool> { Err("condition failed".into()) }),
            push(1).run_if(|| -> Result<bool> { Ok(false) }),
        ));
        runner.ready(&mut schedule, &mut world);
        run(runner, &mut schedule, &mut world);
        assert_eq!(take(&mut world), [0u32; 0], "{runner:?}");

        schedule.add_systems(push(2).run_if(|| -> Result<bool> { Ok(true) }));
        run(runner, &mut schedule, &mut world);
        assert_eq!(take(&mut world), [2], "{runner:?}");
    }
}

// bevy: schedule::tests::conditions::systems_with_distributive_condition
#[test]
fn a_distributive_condition_is_evaluated_right_before_each_system() {
    for runner in RUNNERS {
        let mut world = World::new();
        world.init_resource::<Order>();
        world.insert_resource(Flag(true));
        let mut schedule = runner.schedule(&mut world);
        // The middle system clears the flag: the one after it sees that.
        schedule.add_systems(
            (push(0), |mut flag: ResMut<Flag>| flag.0 = false, push(1))
                .chain()
                .distributive_run_if(flag_is_set),
        );
        runner.ready(&mut schedule, &mut world);
        run(runner, &mut schedule, &mut world);
        assert_eq!(take(&mut world), [0], "{runner:?}");
    }
}

// bevy: schedule::tests::conditions::run_exclusive_system_with_condition
#[test]
fn a_condition_gates_an_exclusive_system() {
    for runner in RUNNERS {
        let mut world = World::new();
        world.init_resource::<Order>();
        world.init_resource::<Flag>();
        let mut schedule = runner.schedule(&mut world);
        schedule.add_systems(push_exclusive(0).run_if(flag_is_set));
        runner.ready(&mut schedule, &mut world);
        run(runner, &mut schedule, &mut world);
        assert_eq!(take(&mut world), [0u32; 0], "{runner:?}");
        world.resource_mut::<Flag>().0 = true;
        run(runner, &mut schedule, &mut world);
        assert_eq!(take(&mut world), [0], "{runner:?}");
    }
}

// bevy: schedule::tests::conditions::multiple_conditions_on_system
#[test]
fn a_system_with_two_conditions_runs_only_if_both_hold() {
    for runner in RUNNERS {
        let mut world = World::new();
        world.init_resource::<Runs>();
        let mut schedule = runner.schedule(&mut world);
        schedule.add_systems((
            count_run.run_if(|| false).run_if(|| false),
            count_run.run_if(|| true).run_if(|| false),
            count_run.run_if(|| false).run_if(|| true),
            count_run.run_if(|| true).run_if(|| true),
        ));
        runner.ready(&mut schedule, &mut world);
        run(runner, &mut schedule, &mut world);
        assert_eq!(runs(&world), 1, "{runner:?}");
    }
}

// bevy: schedule::tests::conditions::multiple_conditions_on_system_sets
#[test]
fn a_set_with_two_conditions_runs_only_if_both_hold() {
    for runner in RUNNERS {
        let mut world = World::new();
        world.init_resource::<Runs>();
        let mut schedule = runner.schedule(&mut world);
        schedule.configure_sets((
            Gate::FalseFalse.run_if(|| false).run_if(|| false),
            Gate::TrueFalse.run_if(|| true).run_if(|| false),
            Gate::FalseTrue.run_if(|| false).run_if(|| true),
            Gate::TrueTrue.run_if(|| true).run_if(|| true),
        ));
        schedule.add_systems((
            count_run.in_set(Gate::FalseFalse),
            count_run.in_set(Gate::TrueFalse),
            count_run.in_set(Gate::FalseTrue),
            count_run.in_set(Gate::TrueTrue),
        ));
        runner.ready(&mut schedule, &mut world);
        run(runner, &mut schedule, &mut world);
        assert_eq!(runs(&world), 1, "{runner:?}");
    }
}

// bevy: schedule::tests::conditions::systems_nested_in_system_sets
#[test]
fn a_system_in_a_conditioned_set_needs_its_own_and_the_set_condition() {
    for runner in RUNNERS {
        let mut world = World::new();
        world.init_resource::<Runs>();
        let mut schedule = runner.schedule(&mut world);
        schedule.configure_sets((
            Gate::FalseFalse.run_if(|| false),
            Gate::TrueFalse.run_if(|| true),
            Gate::FalseTrue.run_if(|| false),
            Gate::TrueTrue.run_if(|| true),
        ));
        schedule.add_systems((
            count_run.in_set(Gate::FalseFalse).run_if(|| false),
            count_run.in_set(Gate::TrueFalse).run_if(|| false),
            count_run.in_set(Gate::FalseTrue).run_if(|| true),
            count_run.in_set(Gate::TrueTrue).run_if(|| true),
        ));
        runner.ready(&mut schedule, &mut world);
        run(runner, &mut schedule, &mut world);
        assert_eq!(runs(&world), 1, "{runner:?}");
    }
}

#[derive(Resource, Default)]
struct OtherFlag(bool);

/// Where the two change-detecting conditions of a case go.
#[derive(Clone, Copy, Debug)]
enum Placement {
    /// Both on the system.
    System,
    /// Both on its set.
    Set,
    /// The first on the set, the second on the system.
    Mixed,
}

/// One system gated by "`Flag` changed" and "`OtherFlag` changed" (placed
/// as `placement` says). Each condition keeps its own last-run tick, and
/// both are evaluated on every run, so the system runs only when both
/// resources changed since the previous run.
fn change_detecting_conditions(placement: Placement) {
    let flag_changed = |flag: Res<Flag>| flag.is_changed();
    let other_changed = |other: Res<OtherFlag>| other.is_changed();
    for runner in RUNNERS {
        let mut world = World::new();
        world.init_resource::<Runs>();
        world.init_resource::<Flag>();
        world.init_resource::<OtherFlag>();
        let mut schedule = runner.schedule(&mut world);
        match placement {
            Placement::System => {
                schedule.add_systems(count_run.run_if(flag_changed).run_if(other_changed));
            }
            Placement::Set => {
                schedule.configure_sets(Gate::TrueTrue.run_if(flag_changed).run_if(other_changed));
                schedule.add_systems(count_run.in_set(Gate::TrueTrue));
            }
            Placement::Mixed => {
                schedule.configure_sets(Gate::TrueTrue.run_if(flag_changed));
                schedule.add_systems(count_run.run_if(other_changed).in_set(Gate::TrueTrue));
            }
        }
        runner.ready(&mut schedule, &mut world);
        let case = format!("{runner:?}, {placement:?}");

        // Both were just added.
        run(runner, &mut schedule, &mut world);
        assert_eq!(runs(&world), 1, "{case}");
        // Nothing changed.
        run(runner, &mut schedule, &mut world);
        assert_eq!(runs(&world), 1, "{case}");
        // Only `Flag` changed.
        world.resource_mut::<Flag>().0 = false;
        run(runner, &mut schedule, &mut world);
        assert_eq!(runs(&world), 1, "{case}");
        // Only `OtherFlag` changed (the `Flag` condition saw the last change).
        world.resource_mut::<OtherFlag>().0 = false;
        run(runner, &mut schedule, &mut world);
        assert_eq!(runs(&world), 1, "{case}");
        // Only `Flag` again.
        world.resource_mut::<Flag>().0 = false;
        run(runner, &mut schedule, &mut world);
        assert_eq!(runs(&world), 1, "{case}");
        // Both changed since the last run.
        world.resource_mut::<OtherFlag>().0 = false;
        world.resource_mut::<Flag>().0 = false;
        run(runner, &mut schedule, &mut world);
        assert_eq!(runs(&world), 2, "{case}");
    }
}

// bevy: schedule::tests::conditions::system_conditions_and_change_detection
#[test]
fn change_detecting_conditions_on_a_system_are_all_evaluated_every_run() {
    change_detecting_conditions(Placement::System);
}

// bevy: schedule::tests::conditions::system_set_conditions_and_change_detection
#[test]
fn change_detecting_conditions_on_a_set_are_all_evaluated_every_run() {
    change_detecting_conditions(Placement::Set);
}

// bevy: schedule::tests::conditions::mixed_conditions_and_change_detection
#[test]
fn change_detecting_conditions_on_a_set_and_its_system_are_all_evaluated() {
    change_detecting_conditions(Placement::Mixed);
}

#[derive(Resource, Default)]
struct Total(usize);

fn add_one(mut total: ResMut<Total>) {
    total.0 += 1;
}

fn double(mut total: ResMut<Total>) {
    total.0 *= 2;
}

/// True on the 1st, 3rd, 5th... evaluation of each instance.
fn odd_evaluations(mut evaluated: Local<bool>) -> bool {
    *evaluated = !*evaluated;
    *evaluated
}

// bevy: schedule::condition::tests::run_condition
#[test]
fn a_condition_with_local_state_alternates_also_for_systems_added_later() {
    for runner in RUNNERS {
        let mut world = World::new();
        world.init_resource::<Total>();
        let mut schedule = runner.schedule(&mut world);
        schedule.add_systems(add_one.run_if(odd_evaluations));
        runner.ready(&mut schedule, &mut world);
        for expected in [1, 1, 2, 2] {
            run(runner, &mut schedule, &mut world);
            assert_eq!(world.resource::<Total>().0, expected, "{runner:?}");
        }
        // A second one, negated, out of phase with the first: together they
        // add one on every run.
        schedule.add_systems(add_one.run_if(not(odd_evaluations)));
        for expected in [3, 4, 5, 6] {
            run(runner, &mut schedule, &mut world);
            assert_eq!(world.resource::<Total>().0, expected, "{runner:?}");
        }
    }
}

// bevy: schedule::condition::tests::run_condition_combinators
#[test]
fn condition_combinators_give_the_boolean_results() {
    for runner in RUNNERS {
        let mut world = World::new();
        world.init_resource::<Total>();
        let mut schedule = runner.schedule(&mut world);
        // Odd runs: +1 (and), +1 (nand), +1 (or), +1 (xnor true), +1 (xor
        // false): 5. Even runs: +1 (nand), *2 (nor), +1 (or), *2 (xnor
        // false), *2 (xor true): ((5 + 1) * 2 + 1) * 2 * 2 = 52.
        schedule.add_systems(
            (
                add_one.run_if(odd_evaluations.and_eager(|| true)),
                add_one.run_if(odd_evaluations.nand_eager(|| false)),
                double.run_if(odd_evaluations.nor_eager(|| false)),
                add_one.run_if(odd_evaluations.or_eager(|| true)),
                add_one.run_if(odd_evaluations.xnor(|| true)),
                double.run_if(odd_evaluations.xnor(|| false)),
                add_one.run_if(odd_evaluations.xor(|| false)),
                double.run_if(odd_evaluations.xor(|| true)),
            )
                .chain(),
        );
        runner.ready(&mut schedule, &mut world);
        run(runner, &mut schedule, &mut world);
        assert_eq!(world.resource::<Total>().0, 5, "{runner:?}");
        run(runner, &mut schedule, &mut world);
        assert_eq!(world.resource::<Total>().0, 52, "{runner:?}");
    }
}

// bevy: schedule::condition::tests::multiple_run_conditions
#[test]
fn a_stateful_condition_next_to_a_constant_one() {
    for runner in RUNNERS {
        let mut world = World::new();
        world.init_resource::<Total>();
        let mut schedule = runner.schedule(&mut world);
        schedule.add_systems(add_one.run_if(odd_evaluations).run_if(|| true));
        schedule.add_systems(add_one.run_if(odd_evaluations).run_if(|| false));
        runner.ready(&mut schedule, &mut world);
        run(runner, &mut schedule, &mut world);
        assert_eq!(world.resource::<Total>().0, 1, "{runner:?}");
        run(runner, &mut schedule, &mut world);
        assert_eq!(world.resource::<Total>().0, 1, "{runner:?}");
    }
}

// bevy: schedule::condition::tests::multiple_run_conditions_is_and_operation
#[test]
fn several_conditions_on_a_system_combine_with_and() {
    for runner in RUNNERS {
        let mut world = World::new();
        world.init_resource::<Total>();
        let mut schedule = runner.schedule(&mut world);
        // Each condition has its own state: on every run one of them is
        // false.
        schedule.add_systems(add_one.run_if(odd_evaluations).run_if(not(odd_evaluations)));
        runner.ready(&mut schedule, &mut world);
        for _ in 0..4 {
            run(runner, &mut schedule, &mut world);
            assert_eq!(world.resource::<Total>().0, 0, "{runner:?}");
        }
    }
}

/// What the error handler of [`a_failing_condition_reports_the_system_it_gates`]
/// was given: (condition on a set, name of the system).
static CONDITION_ERRORS: Mutex<Vec<(bool, String)>> = Mutex::new(Vec::new());

fn record_condition_error(_: BevyError, ctx: ErrorContext) {
    let entry = match ctx {
        ErrorContext::RunCondition { system, on_set, .. } => (on_set, system.to_string()),
        other => (false, format!("not a run condition: {other}")),
    };
    CONDITION_ERRORS.lock().unwrap().push(entry);
}

#[derive(Resource)]
struct NeverInserted;

fn needs_missing_resource(_: Res<NeverInserted>) -> bool {
    true
}

fn gated_directly() {}
fn gated_by_set() {}

#[derive(SystemSet, Debug, Clone, PartialEq, Eq, Hash)]
struct FailingGate;

// bevy: schedule::condition::tests::run_if_error_contains_system
#[test]
fn a_failing_condition_reports_the_system_it_gates() {
    let direct = IntoSystem::into_system(gated_directly).name().to_string();
    let in_set = IntoSystem::into_system(gated_by_set).name().to_string();
    for runner in RUNNERS {
        CONDITION_ERRORS.lock().unwrap().clear();
        let mut world = World::new();
        world.insert_resource(FallbackErrorHandler(record_condition_error));

        let mut schedule = runner.schedule(&mut world);
        schedule.add_systems(gated_directly.run_if(needs_missing_resource));
        runner.ready(&mut schedule, &mut world);
        run(runner, &mut schedule, &mut world);

        let mut schedule = runner.schedule(&mut world);
        schedule.configure_sets(FailingGate.run_if(needs_missing_resource));
        schedule.add_systems(gated_by_set.in_set(FailingGate));
        runner.ready(&mut schedule, &mut world);
        run(runner, &mut schedule, &mut world);

        assert_eq!(
            *CONDITION_ERRORS.lock().unwrap(),
            [(false, direct.clone()), (true, in_set.clone())],
            "{runner:?}"
        );
    }
}

// bevy: schedule::schedule::tests::ambiguous_with_not_breaking_run_conditions
#[test]
fn a_closed_set_skips_a_system_marked_ambiguous_with_another() {
    #[derive(SystemSet, Debug, Clone, PartialEq, Eq, Hash)]
    struct Closed;
    for runner in RUNNERS {
        let mut world = World::new();
        world.init_resource::<Order>();
        let mut schedule = runner.schedule(&mut world);
        schedule.configure_sets(Closed.run_if(|| false));
        schedule.add_systems(push(1).ambiguous_with(|| ()).in_set(Closed));
        runner.ready(&mut schedule, &mut world);
        run(runner, &mut schedule, &mut world);
        assert_eq!(take(&mut world), [0u32; 0], "{runner:?}");
    }
}

#[derive(Resource)]
struct Inserted;

// bevy: schedule::executor::multi_threaded::tests::skipped_systems_notify_dependents
#[test]
fn a_system_after_a_skipped_one_still_runs() {
    for runner in RUNNERS {
        let mut world = World::new();
        let mut schedule = runner.schedule(&mut world);
        schedule.add_systems(
            ((|| {}).run_if(|| false), |mut commands: Commands| {
                commands.insert_resource(Inserted)
            })
                .chain(),
        );
        runner.ready(&mut schedule, &mut world);
        run(runner, &mut schedule, &mut world);
        assert!(world.contains_resource::<Inserted>(), "{runner:?}");
    }
}

/// Multiplied by [`TRUE_SEEN`] or [`FALSE_SEEN`] each time a counting
/// condition is evaluated: the product tells which were, and how often.
#[derive(Resource)]
struct Evaluations(Mutex<usize>);

const TRUE_SEEN: usize = 3;
const FALSE_SEEN: usize = 2;

fn counted_true(evaluations: Res<Evaluations>) -> bool {
    *evaluations.0.lock().unwrap() *= TRUE_SEEN;
    true
}

fn counted_false(evaluations: Res<Evaluations>) -> bool {
    *evaluations.0.lock().unwrap() *= FALSE_SEEN;
    false
}

#[derive(Component)]
struct Absent;

/// A condition whose parameters never validate (no [`Absent`] entity):
/// it is skipped, which counts as false.
fn unavailable(_: Single<&Absent>) -> bool {
    true
}

/// One operand of an expected combination: what it evaluates to, and the
/// factor it adds to [`Evaluations`] when evaluated.
#[derive(Clone, Copy)]
enum Operand {
    True,
    False,
    Unavailable,
}

impl Operand {
    fn eval(self, product: &mut usize) -> bool {
        match self {
            Operand::True => {
                *product *= TRUE_SEEN;
                true
            }
            Operand::False => {
                *product *= FALSE_SEEN;
                false
            }
            Operand::Unavailable => false,
        }
    }
}

#[derive(Clone, Copy, Debug)]
enum Op {
    OrElse,
    NorElse,
    Xor,
    Xnor,
    AndThen,
    NandThen,
}

impl Op {
    /// What the combinator should give, with Rust's short circuits.
    fn expected(self, a: Operand, b: Operand) -> (bool, usize) {
        let mut product = 1;
        let result = match self {
            Op::OrElse => a.eval(&mut product) || b.eval(&mut product),
            Op::NorElse => !(a.eval(&mut product) || b.eval(&mut product)),
            Op::Xor => a.eval(&mut product) ^ b.eval(&mut product),
            Op::Xnor => !(a.eval(&mut product) ^ b.eval(&mut product)),
            Op::AndThen => a.eval(&mut product) && b.eval(&mut product),
            Op::NandThen => !(a.eval(&mut product) && b.eval(&mut product)),
        };
        (result, product)
    }
}

/// Adds a system gated by `op` applied to the conditions `a` and `b`.
macro_rules! gate_with {
    ($schedule:expr, $op:expr, $a:expr, $b:expr) => {{
        let gated = |mut order: ResMut<Order>| order.0.push(7);
        match $op {
            Op::OrElse => $schedule.add_systems(gated.run_if($a.or_else($b))),
            Op::NorElse => $schedule.add_systems(gated.run_if($a.nor_else($b))),
            Op::Xor => $schedule.add_systems(gated.run_if($a.xor($b))),
            Op::Xnor => $schedule.add_systems(gated.run_if($a.xnor($b))),
            Op::AndThen => $schedule.add_systems(gated.run_if($a.and_then($b))),
            Op::NandThen => $schedule.add_systems(gated.run_if($a.nand_then($b))),
        }
    }};
}

// bevy: schedule::condition::tests::combinators_with_maybe_failing_condition
//
// bevy's test runs each combined condition alone (`run_system_once`); here
// each gates a system in a schedule, and the system must run exactly when
// the combination is true, with the operands evaluated as Rust's `||`,
// `&&` and `^` would.
#[test]
fn combined_conditions_with_an_unavailable_operand_gate_like_boolean_logic() {
    use Operand::{False, True, Unavailable};
    let pairs = [
        (True, Unavailable),
        (Unavailable, True),
        (True, False),
        (False, Unavailable),
        (True, True),
        (False, False),
    ];
    let ops = [
        Op::OrElse,
        Op::NorElse,
        Op::Xor,
        Op::Xnor,
        Op::AndThen,
        Op::NandThen,
    ];
    let mut world = World::new();
    // An unavailable condition alone is skipped rather than run.
    assert!(world.run_system_once(unavailable).is_err());
    for runner in RUNNERS {
        for (a, b) in pairs {
            for op in ops {
                let mut world = World::new();
                world.init_resource::<Order>();
                world.insert_resource(Evaluations(Mutex::new(1)));
                let mut schedule = runner.schedule(&mut world);
                match (a, b) {
                    (True, Unavailable) => gate_with!(schedule, op, counted_true, unavailable),
                    (Unavailable, True) => gate_with!(schedule, op, unavailable, counted_true),
                    (True, False) => gate_with!(schedule, op, counted_true, counted_false),
                    (False, Unavailable) => gate_with!(schedule, op, counted_false, unavailable),
                    (True, True) => gate_with!(schedule, op, counted_true, counted_true),
                    (False, False) => gate_with!(schedule, op, counted_false, counted_false),
                    _ => unreachable!(),
                };
                runner.ready(&mut schedule, &mut world);
                run(runner, &mut schedule, &mut world);
                let (should_run, product) = op.expected(a, b);
                let ran = !take(&mut world).is_empty();
                let seen = *world.resource::<Evaluations>().0.lock().unwrap();
                assert_eq!(
                    (ran, seen),
                    (should_run, product),
                    "{runner:?}, {op:?}: (ran, evaluations)"
                );
            }
        }
    }
}

/// How many times each condition of
/// [`every_condition_is_evaluated_once_per_run_even_for_skipped_systems`]
/// was evaluated, by name.
#[derive(Resource, Default)]
struct Evaluated(Mutex<Vec<&'static str>>);

fn evaluated(name: &'static str, result: bool) -> impl FnMut(Res<Evaluated>) -> bool {
    move |seen: Res<Evaluated>| {
        seen.0.lock().unwrap().push(name);
        result
    }
}

#[derive(SystemSet, Debug, Clone, PartialEq, Eq, Hash)]
enum Nest {
    Outer,
    Inner,
    Open,
}

// Not one of bevy's tests: what its multi-threaded executor does (every
// condition of a set is evaluated once per run however many systems the set
// has, and a system's own conditions are evaluated even when a set already
// skipped it), which conditions with side effects or state can observe.
#[test]
fn every_condition_is_evaluated_once_per_run_even_for_skipped_systems() {
    for runner in RUNNERS {
        let mut world = World::new();
        world.init_resource::<Order>();
        world.init_resource::<Evaluated>();
        let mut schedule = runner.schedule(&mut world);
        schedule.configure_sets((
            Nest::Outer.run_if(evaluated("outer", false)),
            Nest::Inner
                .in_set(Nest::Outer)
                .run_if(evaluated("inner", true)),
            Nest::Open.run_if(evaluated("open", true)),
        ));
        schedule.add_systems((
            (push(1), push(2).run_if(evaluated("on 2", true))).in_set(Nest::Inner),
            push(3).in_set(Nest::Outer),
            (push(4), push(5).run_if(evaluated("on 5", false)), push(6)).in_set(Nest::Open),
        ));
        runner.ready(&mut schedule, &mut world);
        for _ in 0..5 {
            run(runner, &mut schedule, &mut world);
            let mut ran = take(&mut world);
            ran.sort_unstable();
            assert_eq!(ran, [4, 6], "{runner:?}");
            let mut seen = std::mem::take(&mut *world.resource::<Evaluated>().0.lock().unwrap());
            seen.sort_unstable();
            assert_eq!(
                seen,
                ["inner", "on 2", "on 5", "open", "outer"],
                "{runner:?}"
            );
        }
    }
}

// Not one of bevy's tests: a system's set conditions are evaluated outer
// set first, whatever order the sets were configured in (bevy's order is
// its hierarchy's), then the system's own.
#[test]
fn set_conditions_are_evaluated_outer_set_first() {
    for runner in RUNNERS {
        let mut world = World::new();
        world.init_resource::<Order>();
        world.init_resource::<Evaluated>();
        let mut schedule = runner.schedule(&mut world);
        schedule.configure_sets(Nest::Inner.run_if(evaluated("inner", true)));
        schedule.configure_sets(Nest::Outer.run_if(evaluated("outer", true)));
        schedule.configure_sets(Nest::Inner.in_set(Nest::Outer));
        schedule.add_systems(push(1).run_if(evaluated("own", true)).in_set(Nest::Inner));
        runner.ready(&mut schedule, &mut world);
        for _ in 0..3 {
            run(runner, &mut schedule, &mut world);
            assert_eq!(take(&mut world), [1], "{runner:?}");
            let seen = std::mem::take(&mut *world.resource::<Evaluated>().0.lock().unwrap());
            assert_eq!(seen, ["outer", "inner", "own"], "{runner:?}");
        }
    }
}

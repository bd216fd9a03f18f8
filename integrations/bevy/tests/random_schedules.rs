//! Random schedules, run on this crate's executor and on bevy's
//! `SingleThreadedExecutor`, compared run by run.
//!
//! Each of the 1,000 schedules (from a seeded generator written here) has
//! 5 to 20 systems of varied access (reading or writing a shared resource,
//! exclusive, with commands, non-`Send`), sets (some empty, some nested),
//! orderings between systems and sets (`before`, `after`, `chain`, also of
//! sets, also through empty sets), and run conditions on systems and sets
//! that read flags the test flips between runs. Between runs, systems are
//! added and removed (`remove_systems_in_set`, keeping the set or not).
//!
//! The test keeps its own model of the schedule: which systems exist, their
//! sets, their conditions, and the orderings as bevy's graph holds them
//! (removals bridge a removed node's orderings as bevy does). From it come
//! the systems that must run in each run and every `a before b` pair, which
//! bevy finds by collapsing sets into their systems (an empty set passes
//! its orderings through). Every run must give: the same systems on both
//! executors, the ones the model expects, each ordered pair in order in both
//! logs, and the same number of entities.
//!
//! Acyclic by construction: every node has a position (systems by index,
//! empty sets a point between them, sets the span of everything in them),
//! and an ordering only ever goes from a node to one wholly after it, never
//! between a set and what it contains.

mod common;
#[path = "random_schedules/model.rs"]
mod model;

use bevy_ecs::prelude::*;
use bevy_ecs::schedule::{ScheduleCleanupPolicy, ScheduleConfigs, SingleThreadedExecutor};
use bevy_ecs::system::ScheduleSystem;
use engine_tasks_bevy::install;
use model::{Model, SetModel, Span};
use std::fmt::Write as _;
use std::sync::Mutex;
use std::time::Instant;

const SCHEDULES: u64 = 1_000;
const FLAGS: usize = 4;

/// SplitMix64.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn range(&mut self, low: usize, high_inclusive: usize) -> usize {
        low + self.below(high_inclusive - low + 1)
    }

    fn percent(&mut self, p: u64) -> bool {
        self.next() % 100 < p
    }
}

#[derive(SystemSet, Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Label {
    /// A random set.
    Group(usize),
    /// The set of system `i` alone, through which others are ordered
    /// against it.
    Own(usize),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Node {
    System(usize),
    Set(Label),
}

/// Systems that ran, in the order they started.
#[derive(Resource, Default)]
struct Log(Mutex<Vec<usize>>);

impl Log {
    fn push(&self, id: usize) {
        self.0.lock().unwrap().push(id);
    }
}

/// The flags conditions read, flipped between runs.
#[derive(Resource, Default)]
struct Flags([bool; FLAGS]);

#[derive(Resource, Default)]
struct Tally(u64);

#[derive(Component)]
struct Spawned;

struct NotSend(std::marker::PhantomData<*const ()>);

#[derive(Debug, Clone, Copy)]
enum Kind {
    Reads,
    Writes,
    Exclusive,
    Commands,
    NonSend,
    Plain,
}

#[derive(Debug, Clone, Copy)]
struct Cond {
    flag: usize,
    want: bool,
}

impl Cond {
    fn holds(self, flags: &[bool; FLAGS]) -> bool {
        flags[self.flag] == self.want
    }

    fn system(self) -> impl FnMut(Res<Flags>) -> bool {
        move |flags: Res<Flags>| self.holds(&flags.0)
    }
}

#[derive(Debug, Clone)]
struct SystemSpec {
    id: usize,
    kind: Kind,
    groups: Vec<usize>,
    conds: Vec<Cond>,
    before: Vec<Label>,
    after: Vec<Label>,
}

impl SystemSpec {
    fn config(&self) -> ScheduleConfigs<ScheduleSystem> {
        let id = self.id;
        let mut config = match self.kind {
            Kind::Reads => (move |log: Res<Log>, _: Res<Tally>| log.push(id)).into_configs(),
            Kind::Writes => (move |log: Res<Log>, mut tally: ResMut<Tally>| {
                log.push(id);
                tally.0 += 1;
            })
            .into_configs(),
            Kind::Exclusive => {
                (move |world: &mut World| world.resource::<Log>().push(id)).into_configs()
            }
            Kind::Commands => (move |log: Res<Log>, mut commands: Commands| {
                log.push(id);
                commands.spawn(Spawned);
            })
            .into_configs(),
            Kind::NonSend => {
                (move |log: Res<Log>, _: NonSend<NotSend>| log.push(id)).into_configs()
            }
            Kind::Plain => (move |log: Res<Log>| log.push(id)).into_configs(),
        };
        config = config.in_set(Label::Own(id));
        for &group in &self.groups {
            config = config.in_set(Label::Group(group));
        }
        for &label in &self.before {
            config = config.before(label);
        }
        for &label in &self.after {
            config = config.after(label);
        }
        for &cond in &self.conds {
            config = config.run_if(cond.system());
        }
        config
    }
}

/// One step of building or changing a schedule; applied alike to both.
#[derive(Debug, Clone)]
enum Op {
    Group {
        id: usize,
        parent: Option<usize>,
        conds: Vec<Cond>,
    },
    /// `from` before `to`, written as `from.before(to)` or `to.after(from)`.
    SetOrder {
        from: Label,
        to: Label,
        as_before: bool,
    },
    SetChain(Vec<Label>),
    /// Systems added in one call; chained if more than one.
    Add(Vec<SystemSpec>),
    Remove {
        label: Label,
        keep_set: bool,
    },
}

impl Op {
    /// Applies the step; for a removal, how many systems it removed.
    fn apply(&self, schedule: &mut Schedule, world: &mut World) -> Option<usize> {
        match self {
            Op::Group { id, parent, conds } => {
                let mut config = Label::Group(*id).into_configs();
                if let Some(parent) = parent {
                    config = config.in_set(Label::Group(*parent));
                }
                for &cond in conds {
                    config = config.run_if(cond.system());
                }
                schedule.configure_sets(config);
            }
            Op::SetOrder {
                from,
                to,
                as_before,
            } => {
                if *as_before {
                    schedule.configure_sets(from.before(*to));
                } else {
                    schedule.configure_sets(to.after(*from));
                }
            }
            Op::SetChain(labels) => match labels[..] {
                [a, b] => {
                    schedule.configure_sets((a, b).chain());
                }
                [a, b, c] => {
                    schedule.configure_sets((a, b, c).chain());
                }
                _ => unreachable!("chains of 2 or 3"),
            },
            Op::Add(specs) => match &specs[..] {
                [a] => {
                    schedule.add_systems(a.config());
                }
                [a, b] => {
                    schedule.add_systems((a.config(), b.config()).chain());
                }
                [a, b, c] => {
                    schedule.add_systems((a.config(), b.config(), c.config()).chain());
                }
                _ => unreachable!("1 to 3 systems at once"),
            },
            Op::Remove { label, keep_set } => {
                let policy = if *keep_set {
                    ScheduleCleanupPolicy::RemoveSystemsOnly
                } else {
                    ScheduleCleanupPolicy::RemoveSetAndSystems
                };
                let removed = schedule
                    .remove_systems_in_set(*label, world, policy)
                    .unwrap_or_else(|e| panic!("removing {label:?}: {e:?}"));
                return Some(removed);
            }
        }
        None
    }
}

fn random_conds(rng: &mut Rng, percent: u64) -> Vec<Cond> {
    let mut conds = Vec::new();
    while conds.len() < 2 && rng.percent(percent) {
        conds.push(Cond {
            flag: rng.below(FLAGS),
            want: rng.percent(50),
        });
    }
    conds
}

fn random_kind(rng: &mut Rng) -> Kind {
    match rng.below(12) {
        0..=2 => Kind::Reads,
        3..=5 => Kind::Writes,
        6 => Kind::Exclusive,
        7 | 8 => Kind::Commands,
        9 => Kind::NonSend,
        _ => Kind::Plain,
    }
}

/// A random node: a system, its own set, or a group.
fn random_node(rng: &mut Rng, model: &Model, groups: usize) -> Node {
    match rng.below(3) {
        0 => Node::System(rng.below(model.systems.len())),
        1 => Node::Set(Label::Own(rng.below(model.systems.len()))),
        _ if groups > 0 => Node::Set(Label::Group(rng.below(groups))),
        _ => Node::Set(Label::Own(rng.below(model.systems.len()))),
    }
}

/// The steps that build a random schedule, and its model.
fn random_schedule(rng: &mut Rng) -> (Vec<Op>, Model) {
    let mut model = Model::default();
    let mut ops = Vec::new();
    let count = rng.range(5, 20);
    let groups = rng.range(0, 6);
    // Systems sit at odd positions; empty groups at even ones.
    let position = |i: usize| 2 * i + 1;

    // Groups: some nested in earlier ones, some with conditions.
    let mut group_parents = Vec::new();
    for id in 0..groups {
        let parent = (id > 0 && rng.percent(30)).then(|| rng.below(id));
        let conds = random_conds(rng, 30);
        model.sets.insert(
            Label::Group(id),
            SetModel {
                alive: true,
                parents: parent.map(Label::Group).into_iter().collect(),
                conds: conds.clone(),
                span: None,
            },
        );
        group_parents.push(parent);
        ops.push(Op::Group { id, parent, conds });
    }
    // Which groups each system joins; some groups stay empty.
    let empty: Vec<bool> = (0..groups).map(|_| rng.percent(30)).collect();
    let mut specs: Vec<SystemSpec> = (0..count)
        .map(|id| {
            let mut joined = Vec::new();
            for _ in 0..rng.range(0, 2) {
                if groups > 0 {
                    let g = rng.below(groups);
                    if !empty[g] && !joined.contains(&g) {
                        joined.push(g);
                    }
                }
            }
            SystemSpec {
                id,
                kind: random_kind(rng),
                groups: joined,
                conds: random_conds(rng, 25),
                before: Vec::new(),
                after: Vec::new(),
            }
        })
        .collect();
    // Spans: every system in its sets; groups with nothing get a point.
    for spec in &specs {
        let without_orderings = SystemSpec {
            before: Vec::new(),
            after: Vec::new(),
            ..spec.clone()
        };
        model.add_system(&without_orderings, position(spec.id));
    }
    for id in (0..groups).rev() {
        let label = Label::Group(id);
        if model.sets[&label].span.is_none() {
            let point = Span::point(2 * rng.range(0, count));
            model.cover(label, point);
        }
    }

    // Orderings on the systems' own configurations.
    for _ in 0..rng.range(count, 4 * count) {
        let i = rng.below(count);
        let other = random_node(rng, &model, groups);
        let Node::Set(label) = other else { continue };
        let me = Node::System(i);
        if model.may_order(me, other) {
            model.edges.insert((me, other));
            specs[i].before.push(label);
        } else if model.may_order(other, me) {
            model.edges.insert((other, me));
            specs[i].after.push(label);
        }
    }
    // Orderings between sets, single or chained.
    for _ in 0..rng.range(0, 3 * count) {
        let (Node::Set(a), Node::Set(b)) = (
            random_node(rng, &model, groups),
            random_node(rng, &model, groups),
        ) else {
            continue;
        };
        let (a, b) = if model.may_order(Node::Set(a), Node::Set(b)) {
            (a, b)
        } else if model.may_order(Node::Set(b), Node::Set(a)) {
            (b, a)
        } else {
            continue;
        };
        let c = match random_node(rng, &model, groups) {
            Node::Set(c) if rng.percent(40) && model.may_order(Node::Set(b), Node::Set(c)) => {
                Some(c)
            }
            _ => None,
        };
        model.edges.insert((Node::Set(a), Node::Set(b)));
        if let Some(c) = c {
            model.edges.insert((Node::Set(b), Node::Set(c)));
            ops.push(Op::SetChain(vec![a, b, c]));
        } else if rng.percent(30) {
            ops.push(Op::SetChain(vec![a, b]));
        } else {
            ops.push(Op::SetOrder {
                from: a,
                to: b,
                as_before: rng.percent(50),
            });
        }
    }
    // Systems added in index order, some as chains of 2 or 3.
    let mut i = 0;
    while i < count {
        let len = if rng.percent(25) {
            rng.range(2, 3).min(count - i)
        } else {
            1
        };
        for k in i + 1..i + len {
            model.edges.insert((Node::System(k - 1), Node::System(k)));
        }
        ops.push(Op::Add(specs[i..i + len].to_vec()));
        i += len;
    }
    (ops, model)
}

/// A change between runs: systems added after everything, or a removal.
fn random_change(rng: &mut Rng, model: &mut Model) -> Op {
    let alive: Vec<usize> = (0..model.systems.len())
        .filter(|&i| model.systems[i].alive)
        .collect();
    if rng.percent(50) || alive.len() < 3 {
        let first = model.systems.len();
        let len = rng.range(1, 2);
        let mut specs = Vec::new();
        for id in first..first + len {
            let position = 2 * id + 1;
            // A system placed after everything may only join sets that
            // (like the sets they are in) are ordered before nothing.
            let open: Vec<Label> = model
                .sets
                .iter()
                .filter(|(label, set)| {
                    matches!(label, Label::Group(_))
                        && set.alive
                        && std::iter::once(**label)
                            .chain(model.ancestors(Node::Set(**label)))
                            .all(|l| !model.edges.iter().any(|e| e.0 == Node::Set(l)))
                })
                .map(|(label, _)| *label)
                .collect();
            let mut groups = Vec::new();
            if !open.is_empty() && rng.percent(50) {
                if let Label::Group(g) = open[rng.below(open.len())] {
                    groups.push(g);
                }
            }
            let mut spec = SystemSpec {
                id,
                kind: random_kind(rng),
                groups,
                conds: random_conds(rng, 25),
                before: Vec::new(),
                after: Vec::new(),
            };
            let without_orderings = spec.clone();
            model.add_system(&without_orderings, position);
            for _ in 0..rng.range(0, 3) {
                let labels: Vec<Label> = model.sets.keys().copied().collect();
                let label = labels[rng.below(labels.len())];
                if model.may_order(Node::Set(label), Node::System(id)) {
                    model.edges.insert((Node::Set(label), Node::System(id)));
                    spec.after.push(label);
                }
            }
            specs.push(spec);
        }
        for pair in specs.windows(2) {
            model
                .edges
                .insert((Node::System(pair[0].id), Node::System(pair[1].id)));
        }
        Op::Add(specs)
    } else {
        let label = if rng.percent(60) {
            Label::Own(alive[rng.below(alive.len())])
        } else {
            let groups: Vec<Label> = model
                .sets
                .iter()
                .filter(|(l, s)| matches!(l, Label::Group(_)) && s.alive)
                .map(|(l, _)| *l)
                .collect();
            if groups.is_empty() {
                Label::Own(alive[rng.below(alive.len())])
            } else {
                groups[rng.below(groups.len())]
            }
        };
        let keep_set = rng.percent(50);
        Op::Remove { label, keep_set }
    }
}

fn new_world() -> World {
    let mut world = World::new();
    world.init_resource::<Log>();
    world.init_resource::<Flags>();
    world.init_resource::<Tally>();
    world.insert_non_send(NotSend(std::marker::PhantomData));
    world
}

fn spawned(world: &mut World) -> usize {
    world.query::<&Spawned>().iter(world).count()
}

/// Runs one random schedule; a description of the first difference.
fn compare(seed: u64) -> Result<(), String> {
    let mut rng = Rng(seed);
    let (ops, model) = random_schedule(&mut rng);
    let mut history = String::new();
    run_and_compare(&mut rng, &ops, model, &mut history)
        .map_err(|difference| format!("{ops:#?}\n{history}{difference}"))
}

/// Builds the schedule of `ops` for both executors and runs it, with
/// changes between runs; `history` gets what happened.
fn run_and_compare(
    rng: &mut Rng,
    ops: &[Op],
    mut model: Model,
    history: &mut String,
) -> Result<(), String> {
    let mut ours_world = new_world();
    let mut theirs_world = new_world();
    let mut ours = Schedule::default();
    let mut theirs = Schedule::default();
    theirs.set_executor(SingleThreadedExecutor::new());
    let early = rng.percent(50);
    if early {
        install(&mut ours, &mut ours_world, common::pool().handle()).expect("empty schedule");
    }
    for op in ops {
        op.apply(&mut ours, &mut ours_world);
        op.apply(&mut theirs, &mut theirs_world);
    }
    if !early {
        install(&mut ours, &mut ours_world, common::pool().handle())
            .map_err(|e| format!("install: {e}"))?;
    }
    let _ = writeln!(history, "installed before the systems: {early}");
    let runs = rng.range(3, 5);
    for run in 0..runs {
        if run > 0 && rng.percent(60) {
            let change = random_change(rng, &mut model);
            let expected = match &change {
                Op::Remove { label, keep_set } => Some(model.remove(*label, *keep_set)),
                _ => None,
            };
            let removed = (
                change.apply(&mut ours, &mut ours_world),
                change.apply(&mut theirs, &mut theirs_world),
            );
            let _ = writeln!(history, "before run {run}: {change:#?}");
            if removed != (expected, expected) {
                return Err(format!(
                    "removed (ours, bevy's) {removed:?}, model {expected:?}"
                ));
            }
        }
        let mut flags = [false; FLAGS];
        for flag in &mut flags {
            *flag = rng.percent(50);
        }
        ours_world.resource_mut::<Flags>().0 = flags;
        theirs_world.resource_mut::<Flags>().0 = flags;
        ours.run(&mut ours_world);
        theirs.run(&mut theirs_world);
        let ours_log = std::mem::take(&mut *ours_world.resource::<Log>().0.lock().unwrap());
        let theirs_log = std::mem::take(&mut *theirs_world.resource::<Log>().0.lock().unwrap());
        let _ = writeln!(
            history,
            "run {run}, flags {flags:?}: ours {ours_log:?}, bevy's {theirs_log:?}"
        );
        let sorted = |log: &[usize]| {
            let mut log = log.to_vec();
            log.sort_unstable();
            log
        };
        let expected = model.expected_to_run(&flags);
        if sorted(&ours_log) != sorted(&theirs_log) {
            return Err("different systems ran".to_owned());
        }
        if sorted(&theirs_log) != expected {
            return Err(format!("the model expected {expected:?}"));
        }
        for (a, b) in model.ordered_pairs() {
            for (who, log) in [("ours", &ours_log), ("bevy's", &theirs_log)] {
                let at = |x: usize| log.iter().position(|&y| y == x);
                if let (Some(pa), Some(pb)) = (at(a), at(b)) {
                    if pa > pb {
                        return Err(format!("{who}: {a} must run before {b}"));
                    }
                }
            }
        }
        let (n_ours, n_theirs) = (spawned(&mut ours_world), spawned(&mut theirs_world));
        if n_ours != n_theirs {
            return Err(format!("entities: ours {n_ours}, bevy's {n_theirs}"));
        }
    }
    Ok(())
}

/// Set to a seed to run only that schedule and print what happened.
const ONE_SEED: &str = "RANDOM_SCHEDULES_SEED";

#[test]
fn random_schedules_match_the_single_threaded_executor() {
    if let Some(seed) = std::env::var(ONE_SEED).ok().and_then(|s| s.parse().ok()) {
        match compare(seed) {
            Ok(()) => println!("seed {seed}: no difference"),
            Err(difference) => panic!("seed {seed}:\n{difference}"),
        }
        return;
    }
    let started = Instant::now();
    let mut failures = Vec::new();
    for seed in 0..SCHEDULES {
        if let Err(difference) = compare(seed) {
            failures.push((seed, difference));
        }
    }
    println!(
        "{SCHEDULES} random schedules in {:.1?}, {} differ",
        started.elapsed(),
        failures.len()
    );
    if let Some((seed, first)) = failures.first() {
        let summary: Vec<String> = failures
            .iter()
            .map(|(seed, difference)| {
                format!(
                    "seed {seed}: {}",
                    difference.lines().last().unwrap_or_default()
                )
            })
            .collect();
        panic!(
            "{} of {SCHEDULES} schedules differ (rerun one with {ONE_SEED}=<seed>):\n{}\n\
             the first, seed {seed}:\n{first}",
            failures.len(),
            summary.join("\n"),
        );
    }
}

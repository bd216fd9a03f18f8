//! The executor's view of a built schedule, derived through bevy's public API.
//!
//! bevy keeps the dependency counts and run conditions of a built schedule in
//! private fields of `SystemSchedule`, so [`install`](crate::install) collects
//! them itself: it takes the run conditions out of the `ScheduleGraph` before
//! the build (leaving an always-true stand-in so bevy's build passes still
//! see "has conditions"), builds the schedule, then flattens
//! `graph().dependency()` through `graph().hierarchy()` (plus the edges the
//! build passes added) into system-to-system edges indexed like
//! `Schedule::systems_with_access()`.

use bevy_ecs::schedule::{
    ApplyDeferred, ConditionWithAccess, FixedBitSet, InternedSystemSet, NodeId, Schedule,
    ScheduleBuildMetadata, SystemKey, SystemSetKey,
};
use bevy_ecs::system::{IntoSystem, SystemAccess};
use bevy_ecs::world::World;
use engine_tasks::profile::ZoneName;
use engine_tasks::Lane;
use std::any::TypeId;
use std::collections::HashMap;
use std::sync::atomic::AtomicU64;

/// Run conditions taken out of the schedule graph before the build.
#[derive(Default)]
pub(crate) struct TakenConditions {
    pub(crate) systems: HashMap<SystemKey, Vec<ConditionWithAccess>>,
    pub(crate) sets: HashMap<SystemSetKey, Vec<ConditionWithAccess>>,
}

/// Everything the executor needs per system, indexed in executable order.
pub(crate) struct Plan {
    pub(crate) len: usize,
    pub(crate) dependency_count: Vec<usize>,
    pub(crate) dependents: Vec<Vec<usize>>,
    pub(crate) starting: FixedBitSet,
    /// Exclusive or non-`Send`: runs on the thread that called `run`.
    pub(crate) main_thread: FixedBitSet,
    pub(crate) exclusive: Vec<bool>,
    pub(crate) apply_deferred: Vec<bool>,
    pub(crate) conflicts: Vec<FixedBitSet>,
    pub(crate) condition_conflicts: Vec<FixedBitSet>,
    pub(crate) set_condition_conflicts: Vec<FixedBitSet>,
    /// Per system: indices (into `set_conditions`) of conditioned sets containing it.
    pub(crate) sets_of_system: Vec<FixedBitSet>,
    /// Per conditioned set: the systems it contains.
    pub(crate) set_members: Vec<FixedBitSet>,
    pub(crate) lanes: Vec<Lane>,
    pub(crate) zones: Vec<ZoneName>,
    /// Estimated run time of each system in ns (`u64::MAX` until measured).
    pub(crate) cost_ns: Vec<AtomicU64>,
    pub(crate) system_conditions: Vec<Vec<ConditionWithAccess>>,
    pub(crate) set_conditions: Vec<Vec<ConditionWithAccess>>,
}

/// The always-true condition left in bevy's graph where real conditions were
/// taken out. bevy never evaluates it (this crate's executor runs the
/// schedule); it only keeps the build passes seeing "has conditions", which
/// decides where they insert `ApplyDeferred` sync points.
fn stand_in_condition(world: &mut World) -> ConditionWithAccess {
    let mut condition = ConditionWithAccess::new(Box::new(IntoSystem::into_system(|| true)));
    condition.access = condition.condition.initialize(world);
    condition
}

/// Initializes the graph and moves every non-empty condition list out of it.
pub(crate) fn take_conditions(schedule: &mut Schedule, world: &mut World) -> TakenConditions {
    let graph = schedule.graph_mut();
    graph.initialize(world);
    let mut taken = TakenConditions::default();
    let system_keys: Vec<SystemKey> = graph
        .systems
        .iter()
        .filter(|(_, _, c)| !c.is_empty())
        .map(|(k, _, _)| k)
        .collect();
    for key in system_keys {
        if let Some(conditions) = graph.systems.get_conditions_mut(key) {
            let real = std::mem::replace(conditions, vec![stand_in_condition(world)]);
            taken.systems.insert(key, real);
        }
    }
    let set_keys: Vec<SystemSetKey> = graph
        .system_sets
        .iter()
        .filter(|(_, _, c)| !c.is_empty())
        .map(|(k, _, _)| k)
        .collect();
    for key in set_keys {
        if let Some(conditions) = graph.system_sets.get_conditions_mut(key) {
            let real = std::mem::replace(conditions, vec![stand_in_condition(world)]);
            taken.sets.insert(key, real);
        }
    }
    taken
}

/// Systems (as executable indices) contained directly or transitively in `node`.
fn members(
    schedule: &Schedule,
    node: NodeId,
    index: &HashMap<SystemKey, usize>,
    out: &mut FixedBitSet,
) {
    match node {
        NodeId::System(key) => {
            if let Some(&i) = index.get(&key) {
                out.insert(i);
            }
        }
        NodeId::Set(_) => {
            for child in schedule.graph().hierarchy().graph().neighbors(node) {
                members(schedule, child, index, out);
            }
        }
    }
}

/// Builds the plan of a schedule that was just built by `Schedule::initialize`.
pub(crate) fn build(
    schedule: &Schedule,
    metadata: &ScheduleBuildMetadata,
    mut taken: TakenConditions,
    lanes: &[(InternedSystemSet, Lane)],
) -> Plan {
    let systems: Vec<(SystemKey, _)> = schedule
        .systems_with_access()
        .expect("schedule was initialized by install")
        .collect();
    let len = systems.len();
    let index: HashMap<SystemKey, usize> = systems
        .iter()
        .enumerate()
        .map(|(i, (k, _))| (*k, i))
        .collect();

    let mut expansion: HashMap<NodeId, FixedBitSet> = HashMap::new();
    let mut expand = |node: NodeId| -> FixedBitSet {
        expansion
            .entry(node)
            .or_insert_with(|| {
                let mut set = FixedBitSet::with_capacity(len);
                members(schedule, node, &index, &mut set);
                set
            })
            .clone()
    };

    let mut after = vec![FixedBitSet::with_capacity(len); len];
    for (from, to) in schedule.graph().dependency().graph().all_edges() {
        let targets = expand(to);
        for x in expand(from).ones() {
            after[x].union_with(&targets);
        }
    }
    for (from, to) in &metadata.edges_added_by_build_passes {
        if let (Some(&x), Some(&y)) = (index.get(from), index.get(to)) {
            after[x].insert(y);
        }
    }
    let dependents: Vec<Vec<usize>> = after.iter().map(|s| s.ones().collect()).collect();
    let mut dependency_count = vec![0; len];
    for list in &dependents {
        for &d in list {
            dependency_count[d] += 1;
        }
    }
    let mut starting = FixedBitSet::with_capacity(len);
    for (i, &c) in dependency_count.iter().enumerate() {
        starting.set(i, c == 0);
    }

    let mut system_lanes = vec![Lane::FrameCritical; len];
    for (set, lane) in lanes {
        if let Some(key) = schedule.graph().system_sets.get_key(*set) {
            for i in expand(NodeId::Set(key)).ones() {
                system_lanes[i] = *lane;
            }
        }
    }

    let mut set_conditions = Vec::new();
    let mut set_members = Vec::new();
    let mut sets_of_system = vec![FixedBitSet::with_capacity(len); len];
    let mut set_keys: Vec<SystemSetKey> = taken.sets.keys().copied().collect();
    set_keys.sort();
    for key in set_keys {
        let m = expand(NodeId::Set(key));
        for i in m.ones() {
            sets_of_system[i].grow_and_insert(set_conditions.len());
        }
        set_members.push(m);
        set_conditions.push(taken.sets.remove(&key).unwrap_or_default());
    }
    let system_conditions: Vec<Vec<ConditionWithAccess>> = systems
        .iter()
        .map(|(k, _)| taken.systems.remove(k).unwrap_or_default())
        .collect();

    let accesses: Vec<&SystemAccess> = systems.iter().map(|(_, s)| s.access()).collect();
    let mut conflicts = vec![FixedBitSet::with_capacity(len); len];
    let mut condition_conflicts = vec![FixedBitSet::with_capacity(len); len];
    for a in 0..len {
        for b in 0..a {
            if !accesses[a].is_compatible(accesses[b]) {
                conflicts[a].insert(b);
                conflicts[b].insert(a);
            }
        }
        for (b, access) in accesses.iter().enumerate() {
            if system_conditions[a]
                .iter()
                .any(|c| !access.is_compatible(&c.access))
            {
                condition_conflicts[a].insert(b);
            }
        }
    }
    let set_condition_conflicts = set_conditions
        .iter()
        .map(|conds| {
            let mut set = FixedBitSet::with_capacity(len);
            for (b, access) in accesses.iter().enumerate() {
                if conds.iter().any(|c| !access.is_compatible(&c.access)) {
                    set.insert(b);
                }
            }
            set
        })
        .collect();

    let mut main_thread = FixedBitSet::with_capacity(len);
    let mut exclusive = Vec::with_capacity(len);
    let mut apply_deferred = Vec::with_capacity(len);
    let mut zones = Vec::with_capacity(len);
    for (i, (_, s)) in systems.iter().enumerate() {
        let is_exclusive = s.access().is_exclusive();
        main_thread.set(i, is_exclusive || !s.system().is_send());
        exclusive.push(is_exclusive);
        apply_deferred.push(s.system().system_type() == TypeId::of::<ApplyDeferred>());
        zones.push(ZoneName::new(&s.system().name().to_string()));
    }

    Plan {
        len,
        dependency_count,
        dependents,
        starting,
        main_thread,
        exclusive,
        apply_deferred,
        conflicts,
        condition_conflicts,
        set_condition_conflicts,
        sets_of_system,
        set_members,
        lanes: system_lanes,
        zones,
        cost_ns: (0..len).map(|_| AtomicU64::new(u64::MAX)).collect(),
        system_conditions,
        set_conditions,
    }
}

//! The executor's view of a built schedule: what the build pass recorded
//! (`pass.rs`, keyed by `SystemKey`), matched to the systems of bevy's
//! executable schedule (indexed in its order) by the address of each boxed
//! system.
//!
//! A system the pass did not see (one a build pass registered after this
//! executor's added) cannot be placed in the graph; then the plan runs every
//! system one after the other in bevy's order, which keeps every ordering
//! bevy built, but not that system's run conditions, which the pass never
//! saw. Orderings a later pass adds or removes between systems the pass
//! saw are not seen either (the crate's docs tell users to add their passes
//! before installing).

use crate::condition::ConditionCell;
use crate::pass::{address, Snapshot};
use bevy_ecs::schedule::{ApplyDeferred, FixedBitSet, SystemKey, SystemWithAccess};
use bevy_ecs::system::SystemAccess;
use engine_tasks::profile::ZoneName;
use engine_tasks::Lane;
use std::any::TypeId;
use std::collections::HashMap;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;

/// Everything the executor needs per system, indexed in executable order.
pub(crate) struct Plan {
    pub(crate) len: usize,
    pub(crate) dependency_count: Vec<usize>,
    pub(crate) dependents: Vec<Vec<usize>>,
    pub(crate) starting: FixedBitSet,
    /// Exclusive systems and `ApplyDeferred`: run on the thread that called
    /// `run`, with no other system running.
    pub(crate) main_thread: FixedBitSet,
    /// Non-`Send` systems: run on the thread that called `run`, beside any
    /// system they do not conflict with.
    pub(crate) non_send: FixedBitSet,
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
    pub(crate) system_conditions: Vec<Vec<Arc<ConditionCell>>>,
    pub(crate) set_conditions: Vec<Vec<Arc<ConditionCell>>>,
}

impl Plan {
    /// The plan of the schedule whose systems are `systems` (bevy's
    /// executable order), built as `snapshot` recorded.
    pub(crate) fn new(snapshot: Snapshot, systems: &[SystemWithAccess]) -> Plan {
        let len = systems.len();
        let keys = match_keys(&snapshot, systems);
        let index: HashMap<SystemKey, usize> = keys
            .iter()
            .enumerate()
            .filter_map(|(i, key)| Some(((*key)?, i)))
            .collect();
        let dependents = if keys.iter().all(Option::is_some) {
            dependents_of(&snapshot.edges, &index, len)
        } else {
            // One after the other, in bevy's order (module docs).
            (0..len).map(|i| (i + 1..len).take(1).collect()).collect()
        };
        let mut dependency_count = vec![0; len];
        for list in &dependents {
            for &d in list {
                dependency_count[d] += 1;
            }
        }
        let mut starting = FixedBitSet::with_capacity(len);
        for (i, &count) in dependency_count.iter().enumerate() {
            starting.set(i, count == 0);
        }
        let at = |key: &SystemKey| index.get(key).copied();
        let mut system_conditions = vec![Vec::new(); len];
        let mut lanes = vec![Lane::FrameCritical; len];
        for (i, key) in keys.iter().enumerate() {
            let Some(key) = key else { continue };
            if let Some(cells) = snapshot.system_conditions.get(key) {
                system_conditions[i].clone_from(cells);
            }
            if let Some(&lane) = snapshot.lanes.get(key) {
                lanes[i] = lane;
            }
        }
        let mut set_conditions = Vec::new();
        let mut set_members = Vec::new();
        let mut sets_of_system = vec![FixedBitSet::with_capacity(0); len];
        for (cells, members) in snapshot.set_conditions {
            let mut in_set = FixedBitSet::with_capacity(len);
            for i in members.iter().filter_map(at) {
                in_set.insert(i);
                sets_of_system[i].grow_and_insert(set_conditions.len());
            }
            set_members.push(in_set);
            set_conditions.push(cells);
        }
        let accesses: Vec<&SystemAccess> = systems.iter().map(SystemWithAccess::access).collect();
        let (conflicts, condition_conflicts) = conflicts_of(&accesses, &system_conditions);
        let set_condition_conflicts = set_conditions
            .iter()
            .map(|cells| conflicts_with(&accesses, cells))
            .collect();
        let kinds = Kinds::of(systems);
        Plan {
            len,
            dependency_count,
            dependents,
            starting,
            main_thread: kinds.main_thread,
            non_send: kinds.non_send,
            exclusive: kinds.exclusive,
            apply_deferred: kinds.apply_deferred,
            conflicts,
            condition_conflicts,
            set_condition_conflicts,
            sets_of_system,
            set_members,
            lanes,
            zones: kinds.zones,
            cost_ns: (0..len).map(|_| AtomicU64::new(u64::MAX)).collect(),
            system_conditions,
            set_conditions,
        }
    }
}

/// Where each system must run, and its profiler zone.
struct Kinds {
    main_thread: FixedBitSet,
    non_send: FixedBitSet,
    exclusive: Vec<bool>,
    apply_deferred: Vec<bool>,
    zones: Vec<ZoneName>,
}

impl Kinds {
    fn of(systems: &[SystemWithAccess]) -> Kinds {
        let len = systems.len();
        let mut kinds = Kinds {
            main_thread: FixedBitSet::with_capacity(len),
            non_send: FixedBitSet::with_capacity(len),
            exclusive: Vec::with_capacity(len),
            apply_deferred: Vec::with_capacity(len),
            zones: Vec::with_capacity(len),
        };
        for (i, s) in systems.iter().enumerate() {
            let is_exclusive = s.access().is_exclusive();
            let is_apply_deferred = s.system().system_type() == TypeId::of::<ApplyDeferred>();
            kinds.main_thread.set(i, is_exclusive || is_apply_deferred);
            let non_send = !is_exclusive && !is_apply_deferred && !s.system().is_send();
            kinds.non_send.set(i, non_send);
            kinds.exclusive.push(is_exclusive);
            kinds.apply_deferred.push(is_apply_deferred);
            kinds
                .zones
                .push(ZoneName::new(&s.system().name().to_string()));
        }
        kinds
    }
}

/// The key of each executable system, found by the address and type of its
/// boxed system. Systems of a zero-sized type share an address (every
/// `ApplyDeferred` does); such systems of one type do the same thing, so
/// they are matched in any order: each takes the place, in the graph, of
/// one of the recorded keys, and the graph stays the same.
fn match_keys(snapshot: &Snapshot, systems: &[SystemWithAccess]) -> Vec<Option<SystemKey>> {
    let mut by_address: HashMap<(usize, TypeId), Vec<SystemKey>> = HashMap::new();
    for &(key, address, kind) in snapshot.systems.iter().rev() {
        by_address.entry((address, kind)).or_default().push(key);
    }
    systems
        .iter()
        .map(|s| {
            let system = s.system();
            by_address
                .get_mut(&(address(&**system), system.system_type()))
                .and_then(Vec::pop)
        })
        .collect()
}

/// Each system's dependents (executable indices) from the recorded edges.
fn dependents_of(
    edges: &[(SystemKey, SystemKey)],
    index: &HashMap<SystemKey, usize>,
    len: usize,
) -> Vec<Vec<usize>> {
    let mut after = vec![FixedBitSet::with_capacity(len); len];
    for (before, later) in edges {
        if let (Some(&x), Some(&y)) = (index.get(before), index.get(later)) {
            after[x].insert(y);
        }
    }
    after.iter().map(|s| s.ones().collect()).collect()
}

/// Which systems conflict with each system, and with each system's run
/// conditions.
fn conflicts_of(
    accesses: &[&SystemAccess],
    system_conditions: &[Vec<Arc<ConditionCell>>],
) -> (Vec<FixedBitSet>, Vec<FixedBitSet>) {
    let len = accesses.len();
    let mut conflicts = vec![FixedBitSet::with_capacity(len); len];
    for a in 0..len {
        for b in 0..a {
            if !accesses[a].is_compatible(accesses[b]) {
                conflicts[a].insert(b);
                conflicts[b].insert(a);
            }
        }
    }
    let condition_conflicts = system_conditions
        .iter()
        .map(|cells| conflicts_with(accesses, cells))
        .collect();
    (conflicts, condition_conflicts)
}

/// The systems whose access conflicts with any of `cells`.
fn conflicts_with(accesses: &[&SystemAccess], cells: &[Arc<ConditionCell>]) -> FixedBitSet {
    let mut set = FixedBitSet::with_capacity(accesses.len());
    for (b, access) in accesses.iter().enumerate() {
        if cells.iter().any(|c| !access.is_compatible(&c.access())) {
            set.insert(b);
        }
    }
    set
}

//! The executor's build pass: bevy calls it at every build of the schedule
//! (the first, and every rebuild after systems or sets change), with the
//! schedule graph and the flattened system-to-system dependencies.
//!
//! bevy's built schedule keeps its dependencies and run conditions private,
//! so the pass records what the executor needs from what a build pass may
//! see, keyed by `SystemKey`, into a [`Snapshot`]:
//!
//! * every system's key, and the address and type of its boxed system, by
//!   which the executor finds it again in the built schedule (bevy moves
//!   the boxes, not the systems in them);
//! * the flattened dependencies: bevy has already collapsed every set
//!   (empty ones too, so an ordering through an empty set holds), and the
//!   passes added before this one (bevy's automatic `ApplyDeferred` sync
//!   points) have added their systems and edges;
//! * every run condition, of systems and of sets, shared with bevy's
//!   schedule through `condition.rs`, and the members of each conditioned
//!   set;
//! * the lane of each system, from the installer's sets.
//!
//! Weak orderings (`before_weak`, `chain_weak`) are still in the graph a
//! pass sees; bevy drops those between systems that do not conflict only
//! after the passes ran (`ScheduleGraph::resolve_weak_edges`), and which
//! orderings are weak is private to it: its `Weak` edge option is a
//! `pub(crate)` type, so `add_dependency` gets `None` for weak and strict
//! edges alike. So they are kept as strict orderings here (see the crate
//! docs).

use crate::condition::{self, ConditionCell};
use bevy_ecs::schedule::graph::DiGraph;
use bevy_ecs::schedule::{
    FlattenedDependencies, InternedSystemSet, NodeId, ScheduleBuildError, ScheduleBuildPass,
    ScheduleGraph, SystemKey, SystemSetKey,
};
use bevy_ecs::world::World;
use bevy_platform::hash::FixedHasher;
use engine_tasks::Lane;
use indexmap::IndexSet;
use std::any::TypeId;
use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};

/// What one build of the schedule tells the executor; see the module docs.
#[derive(Default)]
pub(crate) struct Snapshot {
    /// Every system: its key, and the address and type of its boxed system
    /// (systems of a zero-sized type, such as every `ApplyDeferred`, share
    /// an address).
    pub(crate) systems: Vec<(SystemKey, usize, TypeId)>,
    /// `(before, after)`: `before` finishes before `after` starts.
    pub(crate) edges: Vec<(SystemKey, SystemKey)>,
    /// The run conditions of each system that has any.
    pub(crate) system_conditions: HashMap<SystemKey, Vec<Arc<ConditionCell>>>,
    /// Each set that has run conditions: them, and every system in the set.
    pub(crate) set_conditions: Vec<(Vec<Arc<ConditionCell>>, Vec<SystemKey>)>,
    /// The lane of each system not in the default lane.
    pub(crate) lanes: HashMap<SystemKey, Lane>,
}

/// Where the pass leaves the snapshot of the latest build for the executor.
pub(crate) type SnapshotSlot = Arc<Mutex<Option<Snapshot>>>;

/// The build pass; see the module docs.
pub(crate) struct PoolPass {
    pub(crate) slot: SnapshotSlot,
    /// Lanes by set, in the installer's order (later ones win).
    pub(crate) lanes: Vec<(InternedSystemSet, Lane)>,
}

impl fmt::Debug for PoolPass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PoolPass")
            .field("lanes", &self.lanes.len())
            .finish_non_exhaustive()
    }
}

impl ScheduleBuildPass for PoolPass {
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
        dependencies: FlattenedDependencies<'_>,
    ) -> Result<(), ScheduleBuildError> {
        // Only the systems of this build: bevy keeps every automatic sync
        // point it ever made among its systems, also those a later build
        // no longer uses, and those share one address and type with the
        // live ones, so they must not be matched (`plan.rs`).
        let flat = dependencies.graph();
        let mut snapshot = Snapshot {
            systems: graph
                .systems
                .iter()
                .filter(|(key, _, _)| flat.contains_node(*key))
                .map(|(key, system, _)| (key, address(&**system), system.system_type()))
                .collect(),
            edges: flat.all_edges().collect(),
            ..Snapshot::default()
        };
        let conditioned: Vec<SystemKey> = graph
            .systems
            .iter()
            .filter(|(_, _, conditions)| !conditions.is_empty())
            .map(|(key, _, _)| key)
            .collect();
        for key in conditioned {
            if let Some(conditions) = graph.systems.get_conditions_mut(key) {
                let cells = conditions.iter_mut().map(condition::share).collect();
                snapshot.system_conditions.insert(key, cells);
            }
        }
        // In the order of the sets' hierarchy, outer sets first, as bevy
        // evaluates them (its build sorts the hierarchy before the passes;
        // should it not have, in the sets' own order).
        let conditioned_sets: Vec<SystemSetKey> = match graph.hierarchy().get_toposort() {
            Some(order) => order
                .iter()
                .filter_map(NodeId::as_set)
                .filter(|&key| graph.system_sets.has_conditions(key))
                .collect(),
            None => graph
                .system_sets
                .iter()
                .filter(|(_, _, conditions)| !conditions.is_empty())
                .map(|(key, _, _)| key)
                .collect(),
        };
        let mut members = Members::default();
        for key in conditioned_sets {
            let systems = members.of(graph, NodeId::Set(key));
            if let Some(conditions) = graph.system_sets.get_conditions_mut(key) {
                let cells = conditions.iter_mut().map(condition::share).collect();
                snapshot.set_conditions.push((cells, systems));
            }
        }
        for &(set, lane) in &self.lanes {
            if let Some(key) = graph.system_sets.get_key(set) {
                for system in members.of(graph, NodeId::Set(key)) {
                    snapshot.lanes.insert(system, lane);
                }
            }
        }
        *self.slot.lock().unwrap_or_else(PoisonError::into_inner) = Some(snapshot);
        Ok(())
    }
}

/// The address of a boxed system's object.
pub(crate) fn address<S: ?Sized>(system: &S) -> usize {
    system as *const S as *const () as usize
}

/// The systems in each set, directly or through nested sets (memoised).
#[derive(Default)]
struct Members {
    of_set: HashMap<NodeId, Vec<SystemKey>>,
}

impl Members {
    fn of(&mut self, graph: &ScheduleGraph, node: NodeId) -> Vec<SystemKey> {
        if let Some(systems) = self.of_set.get(&node) {
            return systems.clone();
        }
        let systems = match node {
            NodeId::System(key) => vec![key],
            NodeId::Set(_) => {
                let children: Vec<NodeId> = graph.hierarchy().graph().neighbors(node).collect();
                let mut systems = Vec::new();
                for child in children {
                    for system in self.of(graph, child) {
                        if !systems.contains(&system) {
                            systems.push(system);
                        }
                    }
                }
                systems
            }
        };
        self.of_set.insert(node, systems.clone());
        systems
    }
}

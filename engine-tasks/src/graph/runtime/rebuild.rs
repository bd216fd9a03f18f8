//! Building a graph into a runtime, in place: a new compiled form
//! (`rebuild`), or new closures for a build that repeats the last
//! (`refill`); and the
//! toggles, which change what a frame runs without a build. Nodes keep
//! their estimates by name across builds.

use super::frame::closure_address;
use super::memory::Rebuild;
use super::{Runtime, SharingTrial, UNKNOWN};
use crate::graph::builder::TaskGraphBuilder;
use crate::graph::compile::Target;
use crate::graph::shape::BuildId;
use crate::graph::{NodeClock, Planning, ReadyOrder};
use crate::lane::Lane;

impl Runtime {
    /// Replaces the graph, in place, by the one `builder` describes and
    /// compiled (into `builder.compiled`, which gets this graph's compiled
    /// form back for the next build), and leaves the builder empty with its
    /// memory. Nodes whose names the graph had keep their estimates; the
    /// frame count, tick rate and frame-loop timing carry over. Once a graph
    /// of the same shape was built, this allocates nothing: every buffer
    /// keeps its capacity, and the replaced bodies and conditions go to the
    /// builder's memory (`recycle.rs`) for the next graph's. `id` names
    /// the build, for the builder to tell the next build repeats it
    /// (`shape.rs`).
    pub(in crate::graph) fn rebuild<C: ?Sized + Sync>(
        &mut self,
        builder: &mut TaskGraphBuilder<C>,
        id: BuildId,
    ) {
        std::mem::swap(&mut self.compiled, &mut builder.compiled);
        let n = builder.nodes.len();
        let specs = &builder.nodes;
        self.order = builder.order;
        // Planned frames need one lane for every node, none pinned, and
        // priorities to plan by.
        let first_lane = specs.first().map_or(Lane::FrameCritical, |s| s.lane);
        self.plan_lane = (builder.planning == Planning::Allowed
            && self.order == ReadyOrder::CriticalPathFirst
            && specs.iter().all(|s| !s.pinned && s.lane == first_lane))
        .then_some(first_lane);
        self.floor = specs
            .iter()
            .filter(|s| !s.pinned)
            .map(|s| s.lane)
            .max()
            .unwrap_or(Lane::FrameCritical);
        self.plan.rebuild(specs.iter().map(|s| s.lane), self.order);
        self.remember_estimates();
        let compiled = &self.compiled;
        self.roots.clear();
        self.roots
            .extend((0..n as u32).filter(|&i| compiled.dependencies.row(i as usize).is_empty()));
        self.topological.clear();
        self.topological.extend_from_slice(&compiled.topological);
        let graph = self.shared.as_ptr().cast_const();
        // SAFETY: as in `shared_mut` (`&mut self`: no frame runs); borrowed
        // alongside the runtime's other fields, which it does not alias.
        let shared = unsafe { &mut *self.shared.as_ptr() };
        shared.rebuild(
            builder.nodes.drain(..).zip(builder.inputs.names.drain(..)),
            compiled,
            Rebuild {
                graph,
                inline_successors: self.order == ReadyOrder::CriticalPathFirst,
                timed: builder.node_clock == NodeClock::On,
                lane: first_lane,
                wakes: self.waking,
            },
            &mut self.retired_bodies,
        );
        shared
            .gates
            .rebuild(n, builder, compiled, &mut self.retired_conditions);
        self.recall_estimates();
        self.priority.clear();
        self.priority.resize(n, 0);
        self.reprioritized_after = None;
        // The node states start afresh (`Shared::rebuild`), so do their
        // epochs.
        self.counted_frames = 0;
        self.stats.reset(n);
        let compiled = &self.compiled;
        self.stats
            .set_topology(&compiled.dependencies, &compiled.successors);
        if builder.share_above != self.share_above {
            // What trials learnt was learnt under the old threshold.
            self.trial = SharingTrial::default();
        }
        self.share_above = builder.share_above;
        self.ran_alone = 0;
        self.set_names.clear();
        self.set_names.append(&mut builder.sets);
        self.node_on.clear();
        self.node_on.resize(n, true);
        self.set_on.clear();
        self.set_on.resize(self.set_names.len(), true);
        self.built = Some(id);
        self.declares_resources = builder.resources_of.is_some();
        self.reprioritize();
        self.replan_if_stale();
        self.refresh_warm_spans();
        // Last: the replaced closures' drops are user code, which may
        // panic; the graph is whole by then.
        self.retire_into(builder);
    }

    /// The build this graph was last built by (`shape.rs`).
    pub(in crate::graph) fn built(&self) -> Option<BuildId> {
        self.built
    }

    /// Rebuilds the graph from a builder that repeated the build this graph
    /// was built by (`built`): the bodies and conditions are swapped in and
    /// toggles are turned on, as after any build; the compiled graph, its
    /// plans and node times stay. Allocates nothing once warm.
    pub(in crate::graph) fn refill<C: ?Sized + Sync>(&mut self, builder: &mut TaskGraphBuilder<C>) {
        // SAFETY: as in `shared_mut`; borrowed alongside the toggles.
        let shared = unsafe { &mut *self.shared.as_ptr() };
        // The new closures are swapped in first, the old ones taking their
        // places in the builder; only then are the old ones dropped (user
        // code, which may panic): the graph is the new fill's whole by then.
        let closures = shared.closures.iter_mut();
        let nodes = shared.nodes.iter_mut().zip(builder.nodes.iter_mut());
        for ((node, spec), closure) in nodes.zip(closures) {
            std::mem::swap(node.body.get_mut(), &mut spec.body);
            *closure = closure_address(node.body.get_mut());
        }
        // No panic to forget: a frame with a panic takes every payload as
        // it ends (`Runtime::frame_error`).
        let conditions = shared.gates.conditions.iter_mut();
        for (slot, condition) in conditions.zip(builder.conditions.iter_mut()) {
            std::mem::swap(slot, condition);
        }
        shared.gates.conditions_changed();
        if self.node_on.contains(&false) || self.set_on.contains(&false) {
            self.node_on.fill(true);
            self.set_on.fill(true);
            self.update_disabled();
        }
        // The old closures go to the builder's memory, in node order, for
        // the next fill's closures in the same order.
        let memory = &mut builder.memory;
        memory.settle();
        for spec in builder.nodes.drain(..) {
            memory.keep_in_turn(spec.body);
        }
        let memory = &mut builder.condition_memory;
        memory.settle();
        for condition in builder.conditions.drain(..) {
            memory.keep_in_turn(condition);
        }
        builder.clear();
    }

    /// Empties the builder, and gives it the memory of the bodies and
    /// conditions a build replaced (`recycle.rs`).
    fn retire_into<C: ?Sized + Sync>(&mut self, builder: &mut TaskGraphBuilder<C>) {
        builder.clear();
        builder.memory.settle();
        for body in self.retired_bodies.drain(..) {
            builder.memory.keep_in_turn(body);
        }
        builder.condition_memory.settle();
        for condition in self.retired_conditions.drain(..) {
            builder.condition_memory.keep_in_turn(condition);
        }
    }

    /// Files the estimates of the graph about to be replaced by label
    /// number, for `recall_estimates`.
    fn remember_estimates(&mut self) {
        // SAFETY: as in `shared_mut`; only labels are read.
        let old = unsafe { self.shared.as_ref() };
        self.old_labels.clear();
        for (node, &estimate) in old.nodes.iter().zip(&self.estimate) {
            let id = node.label.id();
            if self.by_label.len() <= id as usize {
                self.by_label.resize(id as usize + 1, UNKNOWN);
            }
            self.by_label[id as usize] = estimate;
            self.old_labels.push(id);
        }
    }

    /// Gives each node of the new graph the estimate its name had, and its
    /// light flag by it (a node not yet measured is light), and forgets the
    /// old graph's.
    fn recall_estimates(&mut self) {
        // SAFETY: as in `shared_mut`; only labels are read.
        let new = unsafe { self.shared.as_ref() };
        let by_label = &self.by_label;
        self.estimate.clear();
        self.estimate.extend(new.nodes.iter().map(|node| {
            match by_label.get(node.label.id() as usize) {
                Some(&estimate) if estimate != UNKNOWN => estimate,
                _ => 0,
            }
        }));
        self.estimate_total = self.estimate.iter().sum();
        // Before, a rebuilt graph's first frame batched every node as if
        // unknown, a known heavy one too.
        let light_below = self.plan.light_below();
        for (light, &estimate) in self.plan.light_mut().iter_mut().zip(&self.estimate) {
            *light = estimate < light_below;
        }
        self.estimated_after = None;
        self.unclear_at = None;
        self.held_up_before = false;
        self.stall_left_out_at = None;
        for &id in &self.old_labels {
            self.by_label[id as usize] = UNKNOWN;
        }
    }

    /// Turns the node or set `name` on or off (see `TaskGraph::set_enabled`).
    pub(in crate::graph) fn set_enabled(&mut self, name: &str, enabled: bool) -> bool {
        // SAFETY: as in `shared_mut`; only the names are read.
        let nodes = unsafe { &self.shared.as_ref().nodes };
        let set_names = &self.set_names;
        let target = self.compiled.names.get_with(
            name,
            |i| &nodes[i as usize].name,
            |s| &set_names[s as usize],
        );
        match target {
            Some(Target::Node(i)) => self.node_on[i as usize] = enabled,
            Some(Target::Set(s)) => self.set_on[s as usize] = enabled,
            None => return false,
        }
        self.update_disabled();
        true
    }

    /// Recomputes each node's `disabled` flag from the toggles.
    fn update_disabled(&mut self) {
        let (compiled, node_on, set_on) = (&self.compiled, &self.node_on, &self.set_on);
        // SAFETY: as in `shared_mut`; the other borrows are of other fields.
        let shared = unsafe { self.shared.as_mut() };
        for (i, (&on, disabled)) in node_on.iter().zip(&mut shared.gates.disabled).enumerate() {
            let sets_on = compiled
                .node_sets
                .row(i)
                .iter()
                .all(|&s| set_on[s as usize]);
            *disabled = !(on && sets_on);
        }
        shared.gates.any_disabled = shared.gates.disabled.contains(&true);
    }
}

//! What a build is made of, apart from its closures, and how a builder
//! tells that a build repeats its last one, so that it skips the compiler.
//!
//! A graph built every frame (`TaskGraphBuilder::build_into`) mostly gets
//! the same nodes, orderings, sets, conditions and accesses as the frame
//! before; only the closures are new. The builder keeps the inputs of its
//! last build ([`Replay`]) and compares each input with the last build's as
//! the caller gives it: the node names (by address first: names are mostly
//! the same `&'static str`), lanes and pinning, every ordering, membership,
//! access and condition owner, in the same order. While they repeat, the
//! builder stores nothing but the closures. A build that repeated all of
//! them, with the same set names and options, into the graph the last build
//! went into only swaps the closures in (`Runtime::refill`); the compiled
//! graph, its plans and its measured node times stay.
//!
//! # States
//!
//! - *Repeating*: every input so far equals the last build's at the same
//!   position; the inputs are counted ([`Replay`]'s cursors), not stored.
//! - *Diverged*: an input differed (or there was no last build). The
//!   inputs repeated so far are moved from the last build into the
//!   builder's [`Inputs`], which from then on get every input; the last
//!   build is forgotten, since its inputs were moved out.
//!
//! A build that compiled leaves the builder *repeating* it for the next
//! fill; one that failed leaves no last build, so the next fill is
//! *diverged* from its first input.

use super::access::Access;
use super::builder::{Ambiguities, Name, NodeSpec, Owner, Relation};
use super::runtime::ShareThreshold;
use super::{NodeClock, Planning, ReadyOrder};
use crate::lane::Lane;
use std::sync::atomic::{AtomicU64, Ordering};

/// The builder's options that change the compiled graph or its runtime.
#[derive(Copy, Clone, PartialEq)]
pub(super) struct Options {
    pub(super) order: ReadyOrder,
    pub(super) node_clock: NodeClock,
    pub(super) share_above: ShareThreshold,
    pub(super) planning: Planning,
    pub(super) ambiguities: Ambiguities,
    /// Whether a resource access was declared (`resources_of` is set).
    pub(super) resources: bool,
}

/// The inputs of a build that the compiler reads, apart from the set names
/// (which the builder looks up as it goes) and the closures.
#[derive(Default)]
pub(super) struct Inputs {
    pub(super) names: Vec<Name>,
    pub(super) orders: Vec<(Owner, Name, Relation)>,
    pub(super) memberships: Vec<(Owner, Name)>,
    pub(super) accesses: Vec<(Owner, Access)>,
    /// The owner of each run condition, in order.
    pub(super) condition_owners: Vec<Owner>,
}

impl Inputs {
    fn clear(&mut self) {
        self.names.clear();
        self.orders.clear();
        self.memberships.clear();
        self.accesses.clear();
        self.condition_owners.clear();
    }
}

/// One build: which graph holds the compiled form of which inputs. Unique
/// among every build of the process.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(super) struct BuildId(u64);

impl BuildId {
    fn next() -> BuildId {
        /// Relaxed: only uniqueness matters; no data is published with it.
        static NEXT: AtomicU64 = AtomicU64::new(0);
        BuildId(NEXT.fetch_add(1, Ordering::Relaxed))
    }
}

/// How many inputs of each kind the fill under way repeated.
#[derive(Copy, Clone, Default)]
struct Cursors {
    orders: usize,
    memberships: usize,
    accesses: usize,
    conditions: usize,
}

/// The builder's last build and how far the fill under way repeats it
/// (see the module docs for the states).
#[derive(Default)]
pub(super) struct Replay {
    /// The last build's inputs; meaningful only while `build` is set.
    last: Inputs,
    /// Each node's lane and pinning in the last build.
    kinds: Vec<(Lane, bool)>,
    sets: Vec<Name>,
    options: Option<Options>,
    /// The last build, until an input of this fill differs from it.
    build: Option<BuildId>,
    /// Whether every input of this fill so far repeats the last build.
    repeating: bool,
    at: Cursors,
}

/// Whether two names are equal: by address and length first.
fn same_name(a: &str, b: &str) -> bool {
    (a.as_ptr() == b.as_ptr() && a.len() == b.len()) || a == b
}

/// Whether `item` repeats `last[*at]`; if so, counts it.
#[inline]
fn repeat<T>(last: &[T], at: &mut usize, item: &T, same: impl Fn(&T, &T) -> bool) -> bool {
    match last.get(*at) {
        Some(old) if same(old, item) => {
            *at += 1;
            true
        }
        _ => false,
    }
}

impl Replay {
    /// Node `index` (the number of nodes before it), its `name`, `lane` and
    /// pinning.
    #[inline(always)]
    pub(super) fn node(
        &mut self,
        inputs: &mut Inputs,
        index: usize,
        name: Name,
        lane: Lane,
        pinned: bool,
    ) {
        if self.repeating {
            let same = match (self.last.names.get(index), self.kinds.get(index)) {
                (Some(old), Some(&kind)) => kind == (lane, pinned) && same_name(old, &name),
                _ => false,
            };
            if same {
                return;
            }
            self.diverge(inputs, index);
        }
        inputs.names.push(name);
    }

    #[inline(always)]
    pub(super) fn order(
        &mut self,
        inputs: &mut Inputs,
        nodes: usize,
        item: (Owner, Name, Relation),
    ) {
        if self.repeating {
            let same = |a: &(Owner, Name, Relation), b: &(Owner, Name, Relation)| {
                a.0 == b.0 && a.2 == b.2 && same_name(&a.1, &b.1)
            };
            if repeat(&self.last.orders, &mut self.at.orders, &item, same) {
                return;
            }
            self.diverge(inputs, nodes);
        }
        inputs.orders.push(item);
    }

    pub(super) fn membership(&mut self, inputs: &mut Inputs, nodes: usize, item: (Owner, Name)) {
        if self.repeating {
            let same = |a: &(Owner, Name), b: &(Owner, Name)| a.0 == b.0 && same_name(&a.1, &b.1);
            if repeat(
                &self.last.memberships,
                &mut self.at.memberships,
                &item,
                same,
            ) {
                return;
            }
            self.diverge(inputs, nodes);
        }
        inputs.memberships.push(item);
    }

    pub(super) fn access(&mut self, inputs: &mut Inputs, nodes: usize, item: (Owner, Access)) {
        if self.repeating {
            if repeat(
                &self.last.accesses,
                &mut self.at.accesses,
                &item,
                PartialEq::eq,
            ) {
                return;
            }
            self.diverge(inputs, nodes);
        }
        inputs.accesses.push(item);
    }

    pub(super) fn condition(&mut self, inputs: &mut Inputs, nodes: usize, owner: Owner) {
        if self.repeating {
            let last = &self.last.condition_owners;
            if repeat(last, &mut self.at.conditions, &owner, PartialEq::eq) {
                return;
            }
            self.diverge(inputs, nodes);
        }
        inputs.condition_owners.push(owner);
    }

    /// Leaves *repeating*: moves the inputs repeated so far (of the first
    /// `nodes` nodes) into `inputs`, and forgets the last build.
    #[cold]
    #[inline(never)]
    fn diverge(&mut self, inputs: &mut Inputs, nodes: usize) {
        let (last, at) = (&mut self.last, self.at);
        inputs.names.extend(last.names.drain(..nodes));
        inputs.orders.extend(last.orders.drain(..at.orders));
        inputs
            .memberships
            .extend(last.memberships.drain(..at.memberships));
        inputs.accesses.extend(last.accesses.drain(..at.accesses));
        inputs
            .condition_owners
            .extend(last.condition_owners.drain(..at.conditions));
        self.repeating = false;
        self.build = None;
    }

    /// Whether the fill, of `nodes` nodes and sets `sets` with `options`,
    /// repeated every input of the last build, and that build went into the
    /// graph built by `graph`.
    pub(super) fn repeats(
        &self,
        nodes: usize,
        sets: &[Name],
        options: Options,
        graph: Option<BuildId>,
    ) -> bool {
        let (last, at) = (&self.last, self.at);
        self.repeating
            && self.build.is_some()
            && graph == self.build
            && self.options == Some(options)
            && nodes == last.names.len()
            && at.orders == last.orders.len()
            && at.memberships == last.memberships.len()
            && at.accesses == last.accesses.len()
            && at.conditions == last.condition_owners.len()
            && sets.len() == self.sets.len()
            && sets.iter().zip(&self.sets).all(|(a, b)| same_name(a, b))
    }

    /// Makes `inputs` hold every input of the fill (of `nodes` nodes), for
    /// the compiler.
    pub(super) fn complete(&mut self, inputs: &mut Inputs, nodes: usize) {
        if self.repeating {
            self.diverge(inputs, nodes);
        }
    }

    /// Keeps the inputs of a build that compiled (`inputs`, complete: see
    /// [`complete`](Self::complete)) as the last build, taking their
    /// orderings, memberships and accesses, and copies of the names; the
    /// next fill is compared with them. The new build's id is for the
    /// graph it goes into.
    pub(super) fn record(
        &mut self,
        inputs: &mut Inputs,
        nodes: &[NodeSpec],
        sets: &[Name],
        options: Options,
    ) -> BuildId {
        let last = &mut self.last;
        last.clear();
        last.names.extend(inputs.names.iter().cloned());
        std::mem::swap(&mut last.orders, &mut inputs.orders);
        std::mem::swap(&mut last.memberships, &mut inputs.memberships);
        std::mem::swap(&mut last.accesses, &mut inputs.accesses);
        std::mem::swap(&mut last.condition_owners, &mut inputs.condition_owners);
        self.kinds.clear();
        self.kinds.extend(nodes.iter().map(|n| (n.lane, n.pinned)));
        self.sets.clear();
        self.sets.extend(sets.iter().cloned());
        self.options = Some(options);
        let id = BuildId::next();
        self.build = Some(id);
        id
    }

    /// Starts the next fill: empties `inputs` and compares the next inputs
    /// with the last build, if there is one.
    pub(super) fn restart(&mut self, inputs: &mut Inputs) {
        inputs.clear();
        self.at = Cursors::default();
        self.repeating = self.build.is_some();
    }
}

#[cfg(test)]
mod tests {
    use super::{Inputs, Options, Replay};
    use crate::graph::builder::{Ambiguities, NodeSpec, Owner, Relation};
    use crate::graph::runtime::ShareThreshold;
    use crate::graph::{NodeClock, Planning, ReadyOrder};
    use crate::lane::Lane;

    fn options() -> Options {
        Options {
            order: ReadyOrder::Fifo,
            node_clock: NodeClock::On,
            share_above: ShareThreshold::default(),
            planning: Planning::Allowed,
            ambiguities: Ambiguities::default(),
            resources: false,
        }
    }

    fn spec() -> NodeSpec {
        NodeSpec {
            lane: Lane::Normal,
            pinned: false,
            body: Box::new(|_| {}),
        }
    }

    /// Fills `names` with one ordering of each node after the one before.
    fn fill(replay: &mut Replay, inputs: &mut Inputs, names: &[&'static str]) {
        for (i, &name) in names.iter().enumerate() {
            replay.node(inputs, i, name.into(), Lane::Normal, false);
            if i > 0 {
                let order = (Owner::Node(i as u32), names[i - 1].into(), Relation::After);
                replay.order(inputs, i + 1, order);
            }
        }
    }

    /// A fill that repeats the recorded build stores nothing and repeats it
    /// for the graph of that build only; one that differs at its third
    /// node holds every input after all, those it repeated first included.
    #[test]
    fn a_fill_repeats_the_last_build_or_holds_every_input() {
        let (mut replay, mut inputs) = (Replay::default(), Inputs::default());
        let names = ["a", "b", "c", "d"];
        fill(&mut replay, &mut inputs, &names);
        assert_eq!((inputs.names.len(), inputs.orders.len()), (4, 3));
        let nodes: Vec<_> = (0..4).map(|_| spec()).collect();
        let build = replay.record(&mut inputs, &nodes, &[], options());
        replay.restart(&mut inputs);

        fill(&mut replay, &mut inputs, &names);
        assert!(inputs.names.is_empty() && inputs.orders.is_empty());
        assert!(replay.repeats(4, &[], options(), Some(build)));
        assert!(!replay.repeats(4, &[], options(), None));
        assert!(!replay.repeats(3, &[], options(), Some(build)));
        assert!(!replay.repeats(4, &["set".into()], options(), Some(build)));
        let timed_off = Options {
            node_clock: NodeClock::Off,
            ..options()
        };
        assert!(!replay.repeats(4, &[], timed_off, Some(build)));
        replay.restart(&mut inputs);

        fill(&mut replay, &mut inputs, &["a", "b", "x", "d"]);
        let names: Vec<&str> = inputs.names.iter().map(|n| &**n).collect();
        assert_eq!(names, ["a", "b", "x", "d"]);
        let after: Vec<&str> = inputs.orders.iter().map(|o| &*o.1).collect();
        assert_eq!(after, ["a", "b", "x"]);
        assert!(!replay.repeats(4, &[], options(), Some(build)));
    }
}

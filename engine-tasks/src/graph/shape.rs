//! What a graph was built from, kept so that a build of the same shape
//! skips the compiler.
//!
//! A graph built every frame (`TaskGraphBuilder::build_into`) mostly gets
//! the same nodes, orderings, sets, conditions and accesses as the frame
//! before; only the closures are new. A build is of the same shape when
//! everything but the closures equals the last build's: the node names
//! (compared by address first: names are mostly the same `&'static str`),
//! lanes and pinning, the set names, every ordering, membership, access and
//! condition owner in the same order, and the builder's options. Such a
//! build only swaps the bodies and conditions in (`Runtime::refill`); the
//! compiled graph, its plans and its measured node times stay.

use super::access::Access;
use super::builder::{Ambiguities, Name, Owner, Relation, TaskGraphBuilder};
use super::runtime::ShareThreshold;
use super::ReadyOrder;
use crate::lane::Lane;

/// The builder's options that change the compiled graph or its runtime.
#[derive(Copy, Clone, PartialEq)]
pub(super) struct Options {
    pub(super) order: ReadyOrder,
    pub(super) timed: bool,
    pub(super) share_above: ShareThreshold,
    pub(super) plan_frames: bool,
    pub(super) ambiguities: Ambiguities,
    /// Whether a resource access was declared (`resources_of` is set).
    pub(super) resources: bool,
}

/// The inputs of the last build, apart from the node and set names, lanes
/// and pinning, which the graph keeps anyway.
#[derive(Default)]
pub(super) struct Shape {
    orders: Vec<(Owner, Name, Relation)>,
    memberships: Vec<(Owner, Name)>,
    accesses: Vec<(Owner, Access)>,
    condition_owners: Vec<Owner>,
    options: Option<Options>,
}

/// Whether two names are equal: by address and length first.
fn same_name(a: &str, b: &str) -> bool {
    (a.as_ptr() == b.as_ptr() && a.len() == b.len()) || a == b
}

impl Shape {
    /// Whether `builder` describes the graph this shape was taken from,
    /// whose nodes (name, lane, pinned) and set names are given.
    pub(super) fn matches<'n, C: ?Sized>(
        &self,
        builder: &TaskGraphBuilder<C>,
        mut nodes: impl ExactSizeIterator<Item = (&'n Name, Lane, bool)>,
        sets: &[Name],
    ) -> bool {
        self.options == Some(builder.options())
            && nodes.len() == builder.nodes.len()
            && nodes
                .by_ref()
                .zip(builder.nodes.iter().zip(&builder.names))
                .all(|((name, lane, pinned), (spec, new_name))| {
                    lane == spec.lane && pinned == spec.pinned && same_name(name, new_name)
                })
            && sets.len() == builder.sets.len()
            && sets.iter().zip(&builder.sets).all(|(a, b)| same_name(a, b))
            && self.orders.len() == builder.orders.len()
            && self
                .orders
                .iter()
                .zip(&builder.orders)
                .all(|(a, b)| a.0 == b.0 && a.2 == b.2 && same_name(&a.1, &b.1))
            && self.memberships.len() == builder.memberships.len()
            && self
                .memberships
                .iter()
                .zip(&builder.memberships)
                .all(|(a, b)| a.0 == b.0 && same_name(&a.1, &b.1))
            && self.accesses == builder.accesses
            && self.condition_owners.len() == builder.conditions.len()
            && self
                .condition_owners
                .iter()
                .zip(&builder.conditions)
                .all(|(a, (b, _))| a == b)
    }

    /// Takes the inputs of the build `builder` holds, giving it the old
    /// ones (and their memory) in exchange; the builder clears them.
    pub(super) fn take_from<C: ?Sized>(&mut self, builder: &mut TaskGraphBuilder<C>) {
        std::mem::swap(&mut self.orders, &mut builder.orders);
        std::mem::swap(&mut self.memberships, &mut builder.memberships);
        std::mem::swap(&mut self.accesses, &mut builder.accesses);
        self.condition_owners.clear();
        self.condition_owners
            .extend(builder.conditions.iter().map(|(owner, _)| *owner));
        self.options = Some(builder.options());
    }
}

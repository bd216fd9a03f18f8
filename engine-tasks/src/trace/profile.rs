//! Profiler zones for code outside the scheduler (integrations, engines):
//! the same zones graph nodes get, in Tracy (with the `tracy` feature) and in
//! the timeline recorder (while it records).

use crate::lane::Lane;
use crate::trace::instrument;

/// A zone name, registered once (registration takes a lock; entering a
/// zone does not).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct ZoneName(instrument::NodeLabel);

impl ZoneName {
    /// Registers `name` (the same name twice gives the same `ZoneName`).
    pub fn new(name: &str) -> ZoneName {
        ZoneName(instrument::intern_node_name(name))
    }
}

/// An open zone; it ends when dropped.
#[must_use = "a zone ends when dropped"]
pub struct Zone {
    _span: instrument::Span,
}

/// Opens a zone named `name` for work of `lane` on the current thread.
#[inline]
pub fn zone(name: ZoneName, lane: Lane) -> Zone {
    Zone {
        _span: instrument::node(name.0, lane),
    }
}

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
///
/// ```
/// use engine_tasks::profile::{zone, ZoneName};
/// use engine_tasks::{timeline, Lane};
///
/// let mix = ZoneName::new("audio_mix"); // once, at start-up
/// assert_eq!(mix, ZoneName::new("audio_mix"));
///
/// timeline::start().unwrap();
/// for _frame in 0..3 {
///     let _zone = zone(mix, Lane::Normal);
///     // Mix this frame's voices; the zone ends at the end of the block.
/// }
/// let recorded = timeline::stop().unwrap();
/// assert_eq!(recorded.count("node").events, 3);
/// ```
#[inline]
pub fn zone(name: ZoneName, lane: Lane) -> Zone {
    Zone {
        _span: instrument::node(name.0, lane),
    }
}

//! The one place the scheduler reports what profilers need.
//!
//! Every event a profiler shows (a task or graph node running, a steal
//! attempt, a park, a wake-up sent, a wait in block-on-complete, a
//! blocking-pool task, a frame) goes through these functions, which feed two
//! backends:
//!
//! * **Tracy**, with the `tracy` (or `tracy-remote`) cargo feature. Without
//!   it, that half of every function is compiled out.
//! * **The timeline recorder** ([`crate::trace::timeline`]), enabled at run time.
//!   While it is not recording, each point costs one relaxed load.

use crate::lane::Lane;
use crate::trace::timeline::{self, Category, Label, OpenSpan};
#[cfg(feature = "tracy-core")]
use crate::trace::tracy;
use std::panic::Location;

/// Marks a span of time on the current thread; the span ends on drop.
#[must_use]
pub(crate) struct Span {
    _timeline: Option<OpenSpan>,
    #[cfg(feature = "tracy-core")]
    _tracy: Option<tracy::Zone>,
}

impl Span {
    /// `tracy` makes the Tracy zone (compiled out without the feature).
    #[inline(always)]
    fn new(
        category: Category,
        label: Label,
        lane: u32,
        #[cfg_attr(not(feature = "tracy-core"), allow(unused_variables))] tracy: impl FnOnce()
            -> Option<
            TracyZone,
        >,
    ) -> Span {
        Span {
            _timeline: timeline::begin(category, label, lane),
            #[cfg(feature = "tracy-core")]
            _tracy: tracy(),
        }
    }
}

#[cfg(feature = "tracy-core")]
type TracyZone = tracy::Zone;
#[cfg(not(feature = "tracy-core"))]
type TracyZone = ();

/// A node's or profiler zone's name, numbered for the timeline and with
/// its Tracy source location (made once, when the name is interned).
#[derive(Copy, Clone)]
pub(crate) struct NodeLabel {
    id: u32,
    #[cfg(feature = "tracy-core")]
    tracy: &'static tracy::Location,
}

impl NodeLabel {
    /// The name's number: the same for the same name, across graphs.
    pub(crate) fn id(&self) -> u32 {
        self.id
    }
}

impl std::fmt::Debug for NodeLabel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "NodeLabel({})", self.id)
    }
}

impl PartialEq for NodeLabel {
    fn eq(&self, other: &Self) -> bool {
        self.id == other.id
    }
}

impl Eq for NodeLabel {}

/// A task starts running; the span covers its body. `site` is where it was
/// spawned, when known.
#[inline(always)]
pub(crate) fn task(lane: Lane, site: Option<&'static Location<'static>>) -> Span {
    let label = site.map_or(Label::Fixed("task"), Label::Site);
    Span::new(Category::Task, label, timeline::lane_code(lane), || {
        #[cfg(feature = "tracy-core")]
        return Some(tracy::task_zone(site));
        #[cfg(not(feature = "tracy-core"))]
        None
    })
}

/// A task-graph node (or a profiler zone) named `label` starts running.
#[inline(always)]
pub(crate) fn node(label: NodeLabel, lane: Lane) -> Span {
    Span::new(
        Category::Node,
        Label::Node(label.id),
        timeline::lane_code(lane),
        || {
            #[cfg(feature = "tracy-core")]
            return Some(tracy::named_zone(label.tracy));
            #[cfg(not(feature = "tracy-core"))]
            None
        },
    )
}

/// One steal attempt from `victim` (a slot index, or `None` for the
/// injector) in `lane`, which took `taken` tasks (0: it failed), by the
/// thread whose search state is `search`. Every attempt is a timeline
/// event. In Tracy a steal that took work is a zone carrying the count
/// taken, and failed attempts are folded into `search`'s zone.
#[inline(always)]
pub(crate) fn steal(victim: Option<usize>, lane: Lane, taken: u32, search: &Search) {
    let victim = victim.map_or(u32::MAX, |v| v as u32);
    timeline::instant(Category::Steal, victim, timeline::lane_code(lane), taken);
    #[cfg(feature = "tracy-core")]
    if taken == 0 {
        search.tracy.failed();
    } else {
        tracy::steal(taken);
    }
    #[cfg(not(feature = "tracy-core"))]
    let _ = search;
}

/// A thread's search for work, for the profiler: in Tracy one zone from
/// its first failed steal attempt until it runs a task, parks or stops
/// searching ([`Search::end`]), carrying the number of failed attempts.
/// Without the `tracy` feature it is empty.
#[derive(Default)]
pub(crate) struct Search {
    #[cfg(feature = "tracy-core")]
    tracy: tracy::Search,
}

impl Search {
    /// The search ended: the thread runs a task, parks, or returns from
    /// the wait it searched in.
    #[inline(always)]
    pub(crate) fn end(&self) {
        #[cfg(feature = "tracy-core")]
        self.tracy.end();
    }
}

/// The thread in `slot` parks; the span covers the sleep.
#[inline(always)]
pub(crate) fn park(slot: usize) -> Span {
    let _ = slot;
    Span::new(Category::Park, Label::Fixed("park"), 0, || {
        #[cfg(feature = "tracy-core")]
        return tracy::park_zone();
        #[cfg(not(feature = "tracy-core"))]
        None
    })
}

/// A wake-up was sent to `slot`.
#[inline(always)]
pub(crate) fn wake(slot: usize) {
    timeline::instant(Category::Wake, slot as u32, 0, 0);
    #[cfg(feature = "tracy-core")]
    tracy::wake(slot);
}

/// The current thread blocks in `join` (block-on-complete); the span covers
/// the wait, including the tasks it runs meanwhile.
#[inline(always)]
pub(crate) fn wait() -> Span {
    Span::new(Category::Wait, Label::Fixed("wait"), 0, || {
        #[cfg(feature = "tracy-core")]
        return Some(tracy::wait_zone());
        #[cfg(not(feature = "tracy-core"))]
        None
    })
}

/// A blocking-pool task runs; the span covers it.
#[inline(always)]
pub(crate) fn blocking_task() -> Span {
    Span::new(Category::Blocking, Label::Fixed("blocking task"), 0, || {
        #[cfg(feature = "tracy-core")]
        return Some(tracy::blocking_zone());
        #[cfg(not(feature = "tracy-core"))]
        None
    })
}

/// Task-graph frame `number` runs on this thread; the span covers it, and
/// its end is a frame mark.
#[inline(always)]
pub(crate) fn frame(number: u64) -> FrameSpan {
    FrameSpan {
        _span: Span::new(Category::Frame, Label::Frame(number), 0, || {
            #[cfg(feature = "tracy-core")]
            return Some(tracy::frame_zone());
            #[cfg(not(feature = "tracy-core"))]
            None
        }),
    }
}

/// See [`frame`].
#[must_use]
pub(crate) struct FrameSpan {
    _span: Span,
}

impl Drop for FrameSpan {
    fn drop(&mut self) {
        #[cfg(feature = "tracy-core")]
        tracy::frame_mark();
    }
}

/// Values plotted at the end of each frame: the normal and background
/// tasks still queued (work carried over to the next frame; frame-critical
/// work is done by the frame's end, so its queue would always read 0), and
/// how many of the frame's nodes threads other than the frame's ran.
#[inline(always)]
pub(crate) fn frame_plots(queued: impl Fn(Lane) -> usize, helper_nodes: impl Fn() -> usize) {
    #[cfg(feature = "tracy-core")]
    tracy::frame_plots(&queued, helper_nodes());
    #[cfg(not(feature = "tracy-core"))]
    let _ = (queued, helper_nodes);
}

/// Plots a blocking pool's thread count.
#[inline(always)]
pub(crate) fn blocking_threads(threads: usize) {
    #[cfg(feature = "tracy-core")]
    tracy::blocking_threads(threads);
    #[cfg(not(feature = "tracy-core"))]
    let _ = threads;
}

/// Names the current thread in the profiler (it already has an OS name).
#[inline(always)]
pub(crate) fn thread_started(name: &str) {
    #[cfg(feature = "tracy-core")]
    tracy::thread_name(name);
    #[cfg(not(feature = "tracy-core"))]
    let _ = name;
}

/// Numbers a graph node's name for both backends (when a graph is built).
pub(crate) fn intern_node_name(name: &str) -> NodeLabel {
    NodeLabel {
        id: timeline::intern(name),
        #[cfg(feature = "tracy-core")]
        tracy: tracy::named_location(name),
    }
}

//! The one place the scheduler reports what profilers need.
//!
//! Every event a profiler shows (a task running, a steal attempt, a park, a
//! wake-up sent, a thread waiting in `join`) goes through these functions.
//! Without a profiling backend they are empty `#[inline(always)]` functions
//! and zero-sized guards, so they compile to nothing; a backend (Tracy, a
//! trace recorder) only has to fill them in.

use crate::lane::Lane;

/// Marks a span of time on the current thread; the span ends on drop.
#[must_use]
pub(crate) struct Span(());

impl Span {
    #[inline(always)]
    fn begin() -> Span {
        Span(())
    }
}

/// A task starts running; the span covers its body.
#[inline(always)]
pub(crate) fn task(_lane: Lane) -> Span {
    Span::begin()
}

/// A task-graph node named `name` runs; the span covers its body.
#[inline(always)]
pub(crate) fn node(_name: &str) -> Span {
    Span::begin()
}

/// One steal attempt from `victim` (a slot index, or `None` for the injector)
/// in `lane`, which took `taken` tasks (0: failed).
#[inline(always)]
pub(crate) fn steal(_victim: Option<usize>, _lane: Lane, _taken: u32) {}

/// The thread in `slot` parks; the span covers the sleep.
#[inline(always)]
pub(crate) fn park(_slot: usize) -> Span {
    Span::begin()
}

/// A wake-up was sent to `slot`.
#[inline(always)]
pub(crate) fn wake(_slot: usize) {}

/// The current thread blocks in `join` (block-on-complete); the span covers
/// the wait, including the tasks it runs meanwhile.
#[inline(always)]
pub(crate) fn wait() -> Span {
    Span::begin()
}

/// A blocking-pool task runs; the span covers it.
#[inline(always)]
pub(crate) fn blocking_task() -> Span {
    Span::begin()
}

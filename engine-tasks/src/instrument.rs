//! The one place the scheduler reports what profilers need.
//!
//! Every event a profiler shows (a task or graph node running, a steal
//! attempt, a park, a wake-up sent, a wait in block-on-complete, a
//! blocking-pool task, a frame) goes through these functions, which feed two
//! backends:
//!
//! * **Tracy**, with the `tracy` (or `tracy-remote`) cargo feature. Without
//!   it, that half of every function is compiled out.
//! * **The timeline recorder** ([`crate::timeline`]), enabled at run time.
//!   While it is not recording, each point costs one relaxed load.

use crate::lane::Lane;
use crate::timeline::{self, Category, Label, OpenSpan};
use std::panic::Location;

/// Marks a span of time on the current thread; the span ends on drop.
#[must_use]
pub(crate) struct Span {
    _timeline: Option<OpenSpan>,
    #[cfg(feature = "tracy-core")]
    _tracy: Option<tracy_client::Span>,
}

impl Span {
    #[inline(always)]
    fn new(category: Category, label: Label, lane: u32) -> Span {
        Span {
            _timeline: timeline::begin(category, label, lane),
            #[cfg(feature = "tracy-core")]
            _tracy: tracy::span(label),
        }
    }
}

/// A task starts running; the span covers its body. `site` is where it was
/// spawned, when known.
#[inline(always)]
pub(crate) fn task(lane: Lane, site: Option<&'static Location<'static>>) -> Span {
    let label = site.map_or(Label::Fixed("task"), Label::Site);
    Span::new(Category::Task, label, timeline::lane_code(lane))
}

/// A task-graph node starts running (`name_id` is its interned name).
#[inline(always)]
pub(crate) fn node(name_id: u32, lane: Lane) -> Span {
    Span::new(
        Category::Node,
        Label::Node(name_id),
        timeline::lane_code(lane),
    )
}

/// One steal attempt from `victim` (a slot index, or `None` for the injector)
/// in `lane`, which took `taken` tasks (0: failed).
#[inline(always)]
pub(crate) fn steal(victim: Option<usize>, lane: Lane, taken: u32) {
    let victim = victim.map_or(u32::MAX, |v| v as u32);
    timeline::instant(Category::Steal, victim, timeline::lane_code(lane), taken);
    #[cfg(feature = "tracy-core")]
    tracy::steal(victim, lane, taken);
}

/// The thread in `slot` parks; the span covers the sleep.
#[inline(always)]
pub(crate) fn park(slot: usize) -> Span {
    let _ = slot;
    Span::new(Category::Park, Label::Fixed("park"), 0)
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
    Span::new(Category::Wait, Label::Fixed("wait"), 0)
}

/// A blocking-pool task runs; the span covers it.
#[inline(always)]
pub(crate) fn blocking_task() -> Span {
    Span::new(Category::Blocking, Label::Fixed("blocking task"), 0)
}

/// Task-graph frame `number` runs on this thread; the span covers it, and
/// its end is a frame mark.
#[inline(always)]
pub(crate) fn frame(number: u64) -> FrameSpan {
    FrameSpan {
        _span: Span::new(Category::Frame, Label::Frame(number), 0),
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

/// Values plotted at the end of each frame: tasks queued per lane, threads
/// awake (not parked), blocking-pool threads.
#[inline(always)]
pub(crate) fn frame_plots(queued: impl Fn(Lane) -> usize, awake: impl Fn() -> usize) {
    #[cfg(feature = "tracy-core")]
    tracy::frame_plots(&queued, awake());
    #[cfg(not(feature = "tracy-core"))]
    let _ = (queued, awake);
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
pub(crate) fn intern_node_name(name: &str) -> u32 {
    let id = timeline::intern(name);
    #[cfg(feature = "tracy-core")]
    tracy::register_node_name(id, name);
    id
}

#[cfg(feature = "tracy-core")]
mod tracy {
    //! The Tracy backend: zones with dynamic names (spawn site, node name),
    //! messages for steals and wake-ups, frame marks and plots.

    use super::Label;
    use crate::lane::Lane;
    use std::sync::{Mutex, OnceLock};
    use tracy_client::{plot_name, Client};

    fn client() -> Client {
        Client::start()
    }

    fn node_names() -> &'static Mutex<Vec<String>> {
        static NAMES: OnceLock<Mutex<Vec<String>>> = OnceLock::new();
        NAMES.get_or_init(|| Mutex::new(Vec::new()))
    }

    pub(super) fn register_node_name(id: u32, name: &str) {
        let mut names = node_names().lock().unwrap_or_else(|e| e.into_inner());
        if names.len() <= id as usize {
            names.resize(id as usize + 1, String::new());
        }
        names[id as usize] = name.to_owned();
    }

    pub(super) fn span(label: Label) -> Option<tracy_client::Span> {
        let client = client();
        Some(match label {
            Label::Fixed(name) => client.span_alloc(Some(name), "", "", 0, 0),
            Label::Site(site) => client.span_alloc(Some("task"), "", site.file(), site.line(), 0),
            Label::Node(id) => {
                let names = node_names().lock().unwrap_or_else(|e| e.into_inner());
                let name = names.get(id as usize).map_or("node", String::as_str);
                client.span_alloc(Some(name), "", "", 0, 0)
            }
            Label::Frame(_) => client.span_alloc(Some("frame"), "", "", 0, 0),
        })
    }

    pub(super) fn steal(victim: u32, lane: Lane, taken: u32) {
        let client = client();
        let span = client.span_alloc(Some("steal"), "", "", 0, 0);
        let victim = if victim == u32::MAX {
            "injector".to_owned()
        } else {
            victim.to_string()
        };
        span.emit_text(&format!("victim {victim}, lane {lane:?}, took {taken}"));
    }

    pub(super) fn wake(slot: usize) {
        client().message(&format!("wake slot {slot}"), 0);
    }

    pub(super) fn frame_mark() {
        client().frame_mark();
    }

    pub(super) fn frame_plots(queued: &dyn Fn(Lane) -> usize, awake: usize) {
        let client = client();
        client.plot(
            plot_name!("queued frame-critical"),
            queued(Lane::FrameCritical) as f64,
        );
        client.plot(plot_name!("queued normal"), queued(Lane::Normal) as f64);
        client.plot(
            plot_name!("queued background"),
            queued(Lane::Background) as f64,
        );
        client.plot(plot_name!("threads awake"), awake as f64);
    }

    pub(super) fn blocking_threads(threads: usize) {
        client().plot(plot_name!("blocking threads"), threads as f64);
    }

    pub(super) fn thread_name(name: &str) {
        client().set_thread_name(name);
    }
}

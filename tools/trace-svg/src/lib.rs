//! Turns a Chrome trace-event JSON file written by `engine-tasks` into an SVG timeline.
//!
//! # Input
//!
//! The input is the object the engine-tasks recorder writes,
//! `{"traceEvents": [...], "displayTimeUnit": "ns"}` (a bare array of events is accepted too).
//! Timestamps (`ts`) are microseconds. The events used are:
//!
//! - `M` events named `thread_name`, which give a thread id (`tid`) a name;
//! - `B`/`E` pairs, which nest per thread: an `E` closes the innermost open `B` of its thread,
//!   whatever its own `name` and `cat`. The category is `task`, `node`, `park`, `wait`,
//!   `blocking` or `frame`; task and node spans carry `args.lane`, frames `args.frame`;
//! - `i` instants of category `steal` (`args.victim`, `args.lane`, `args.taken`) and `wake`
//!   (`args.slot`).
//!
//! Other phases and categories are ignored. An `E` without an open `B`, or a `B` that is never
//! closed, is an [`Error::Format`].
//!
//! # Window selection
//!
//! Frames are the `frame` spans, ordered by start time. The window runs from the start of the
//! N-th last frame ([`Options::frames`]) to the end of the last frame. A span is drawn when it
//! overlaps the window (touching it at one instant is not enough), clipped to the window; an
//! instant is drawn when it lies inside the window.
//!
//! # Layout
//!
//! From top to bottom: a title line with counts and a colour legend; the timeline, with one
//! row per thread that has an event in the window (ordered by tid and labelled with the thread
//! name), frame boundaries as vertical lines and a time axis in ms from the window start; and
//! a histogram of the durations of all frames of the trace, captioned with p50 and p99.
//!
//! Within a row, parks are light grey, blocking-pool tasks purple, task and node bars are
//! coloured by lane (nodes lighter) and inset by the number of task and node spans enclosing
//! them, waits are dashed outlines, steal attempts are triangles at the top of the row (filled
//! when something was taken, hollow when the attempt failed) and wake-ups are orange ticks at
//! the bottom. Every drawn span and marker has a `<title>` tooltip.

use std::fmt;

/// What to draw and how wide.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Options {
    /// Number of most recent frames to draw; `0`, or more than the trace holds, draws all.
    pub frames: usize,
    /// Width of the SVG in pixels; values below 400 are raised to 400.
    pub width: u32,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            frames: 8,
            width: 1600,
        }
    }
}

/// Counts describing what [`render`] drew.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Summary {
    /// Number of frames in the drawn window.
    pub frames: usize,
    /// Number of task and node bars (`rect` elements of class `task`) written.
    pub task_bars: usize,
    /// Number of thread rows in the timeline.
    pub threads: usize,
}

/// Why a trace could not be rendered.
#[derive(Debug)]
pub enum Error {
    /// The input is not valid JSON.
    Json(serde_json::Error),
    /// The JSON is not a trace of the expected shape, for example an unmatched `E` event.
    Format(String),
    /// The trace holds no span of category `frame`.
    NoFrames,
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Json(err) => write!(f, "invalid JSON: {err}"),
            Self::Format(message) => write!(f, "malformed trace: {message}"),
            Self::NoFrames => f.write_str("the trace has no frame spans (category \"frame\")"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Json(err) => Some(err),
            Self::Format(_) | Self::NoFrames => None,
        }
    }
}

impl From<serde_json::Error> for Error {
    fn from(err: serde_json::Error) -> Self {
        Self::Json(err)
    }
}

/// Renders a Chrome trace written by engine-tasks as an SVG document.
///
/// Returns the SVG text and a [`Summary`] of what was drawn. See the crate documentation for
/// the expected input, the window selection and the layout.
///
/// # Errors
///
/// [`Error::Json`] if `trace_json` is not JSON, [`Error::Format`] if the events are malformed
/// (missing fields, unmatched `B`/`E`) and [`Error::NoFrames`] if there is no frame span.
pub fn render(trace_json: &str, options: &Options) -> Result<(String, Summary), Error> {
    let trace = parse_trace(trace_json)?;
    let frames = trace.frames();
    if frames.is_empty() {
        return Err(Error::NoFrames);
    }
    let drawn = &frames[frames.len() - drawn_count(frames.len(), options.frames)..];
    let window = Window::around(drawn);
    let rows = build_rows(&trace, window);
    let layout = Layout::new(f64::from(options.width.max(MIN_WIDTH)), rows.len());
    let scale = Scale {
        window,
        left: LABEL_WIDTH,
        width: layout.plot_width,
    };

    let mut body = String::new();
    let task_bars =
        draw_timeline(&mut body, &trace, &rows, drawn, &scale, &layout).expect(STRING_WRITE);
    draw_histogram(&mut body, &frames, &layout).expect(STRING_WRITE);
    let summary = Summary {
        frames: drawn.len(),
        task_bars,
        threads: rows.len(),
    };

    let mut svg = String::with_capacity(body.len() + 2048);
    write_header(&mut svg, &layout, &summary, frames.len(), window).expect(STRING_WRITE);
    svg.push_str(&body);
    svg.push_str("</svg>\n");
    Ok((svg, summary))
}

mod draw;
mod histogram;
mod layout;
mod parse;

use draw::*;
use histogram::*;
use layout::*;
use parse::*;

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

use std::collections::BTreeMap;
use std::fmt::{self, Write as _};

use serde_json::Value;

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

const STRING_WRITE: &str = "writing to a String cannot fail";

const MIN_WIDTH: u32 = 400;
const LABEL_WIDTH: f64 = 170.0;
const LABEL_CHARS: usize = 24;
const RIGHT_MARGIN: f64 = 40.0;
const TITLE_Y: f64 = 22.0;
const LEGEND_Y: f64 = 34.0;
const TIMELINE_TOP: f64 = 78.0;
const ROW_HEIGHT: f64 = 32.0;
const ROW_GAP: f64 = 6.0;
const TIME_TICKS: u32 = 5;
const HISTOGRAM_GAP: f64 = 60.0;
const HISTOGRAM_HEIGHT: f64 = 120.0;
const HISTOGRAM_BINS: usize = 20;
const BOTTOM_MARGIN: f64 = 44.0;

const BAR_INSET: f64 = 2.0;
const LEVEL_INSET: f64 = 4.0;
const MAX_LEVEL: usize = 3;
const MIN_BAR_WIDTH: f64 = 0.5;
const MIN_WINDOW_US: f64 = 1e-3;

const PARK_FILL: &str = "#dcdcdc";
const BLOCKING_FILL: &str = "#b58fd1";
const PARK_PAINT: &str = r##"fill="#dcdcdc""##;
const BLOCKING_PAINT: &str =
    r##"fill="#b58fd1" stroke="#333333" stroke-opacity="0.6" stroke-width="0.5""##;
const WAIT_PAINT: &str =
    r##"fill="none" stroke="#333333" stroke-width="1" stroke-dasharray="3 2""##;
const STEAL_PAINT: &str = r##"fill="#222222""##;
const FAILED_STEAL_PAINT: &str = r##"fill="none" stroke="#888888" stroke-width="1""##;
const LABEL_PAINT: &str = r##"fill="#444444""##;

/// The kind of a `B`/`E` span, from its `cat` field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Category {
    Task,
    Node,
    Park,
    Wait,
    Blocking,
    Frame,
    Other,
}

impl Category {
    fn of(cat: &str) -> Self {
        match cat {
            "task" => Self::Task,
            "node" => Self::Node,
            "park" => Self::Park,
            "wait" => Self::Wait,
            "blocking" => Self::Blocking,
            "frame" => Self::Frame,
            _ => Self::Other,
        }
    }

    /// Whether spans of this category are drawn as `rect.task` bars.
    fn is_bar(self) -> bool {
        matches!(self, Self::Task | Self::Node)
    }
}

/// A closed `B`/`E` pair.
struct Span {
    tid: u64,
    cat: Category,
    name: String,
    lane: Option<String>,
    start: f64,
    end: f64,
    /// Number of task and node spans of the same thread enclosing this one.
    level: usize,
    /// `args.frame` of a frame span.
    frame: Option<u64>,
}

impl Span {
    fn duration(&self) -> f64 {
        self.end - self.start
    }
}

/// An instant event that is drawn.
struct Marker {
    tid: u64,
    ts: f64,
    kind: MarkerKind,
}

enum MarkerKind {
    Steal {
        victim: String,
        lane: String,
        taken: u64,
    },
    Wake {
        slot: String,
    },
}

#[derive(Default)]
struct Trace {
    thread_names: BTreeMap<u64, String>,
    spans: Vec<Span>,
    markers: Vec<Marker>,
}

impl Trace {
    /// The frame spans, ordered by start time.
    fn frames(&self) -> Vec<&Span> {
        let mut frames: Vec<&Span> = self
            .spans
            .iter()
            .filter(|span| span.cat == Category::Frame)
            .collect();
        frames.sort_by(|a, b| a.start.total_cmp(&b.start));
        frames
    }

    fn thread_label(&self, tid: u64) -> String {
        self.thread_names
            .get(&tid)
            .cloned()
            .unwrap_or_else(|| format!("tid {tid}"))
    }
}

fn parse_trace(json: &str) -> Result<Trace, Error> {
    let root: Value = serde_json::from_str(json)?;
    let events = match &root {
        Value::Array(events) => events,
        other => other
            .get("traceEvents")
            .and_then(Value::as_array)
            .ok_or_else(|| Error::Format("no \"traceEvents\" array at the top level".to_owned()))?,
    };
    let mut parser = Parser::default();
    for (index, event) in events.iter().enumerate() {
        parser.event(index, event)?;
    }
    parser.finish()
}

/// A `B` event waiting for its `E`.
struct OpenSpan {
    cat: Category,
    name: String,
    lane: Option<String>,
    start: f64,
    level: usize,
    frame: Option<u64>,
}

impl OpenSpan {
    fn close(self, tid: u64, end: f64) -> Span {
        Span {
            tid,
            cat: self.cat,
            name: self.name,
            lane: self.lane,
            start: self.start,
            end: end.max(self.start),
            level: self.level,
            frame: self.frame,
        }
    }
}

/// Pairs `B`/`E` events with one stack per thread and collects names and markers.
#[derive(Default)]
struct Parser {
    trace: Trace,
    open: BTreeMap<u64, Vec<OpenSpan>>,
}

impl Parser {
    fn event(&mut self, index: usize, event: &Value) -> Result<(), Error> {
        let phase = str_field(event, "ph").ok_or_else(|| malformed(index, "has no \"ph\""))?;
        match phase {
            "M" => self.metadata(index, event),
            "B" => self.begin(index, event),
            "E" => self.end(index, event),
            "i" | "I" => self.instant(index, event),
            _ => Ok(()),
        }
    }

    fn metadata(&mut self, index: usize, event: &Value) -> Result<(), Error> {
        if str_field(event, "name") != Some("thread_name") {
            return Ok(());
        }
        let tid = tid_of(index, event)?;
        if let Some(name) = str_arg(event, "name") {
            self.trace.thread_names.insert(tid, name);
        }
        Ok(())
    }

    fn begin(&mut self, index: usize, event: &Value) -> Result<(), Error> {
        let tid = tid_of(index, event)?;
        let start = ts_of(index, event)?;
        let stack = self.open.entry(tid).or_default();
        let level = stack.iter().filter(|open| open.cat.is_bar()).count();
        stack.push(OpenSpan {
            cat: Category::of(str_field(event, "cat").unwrap_or_default()),
            name: str_field(event, "name").unwrap_or_default().to_owned(),
            lane: str_arg(event, "lane"),
            start,
            level,
            frame: arg(event, "frame").and_then(Value::as_u64),
        });
        Ok(())
    }

    fn end(&mut self, index: usize, event: &Value) -> Result<(), Error> {
        let tid = tid_of(index, event)?;
        let ts = ts_of(index, event)?;
        let open = self.open.get_mut(&tid).and_then(Vec::pop).ok_or_else(|| {
            Error::Format(format!(
                "\"E\" event on tid {tid} at ts {ts} us has no open \"B\" event"
            ))
        })?;
        self.trace.spans.push(open.close(tid, ts));
        Ok(())
    }

    fn instant(&mut self, index: usize, event: &Value) -> Result<(), Error> {
        let kind = match str_field(event, "cat") {
            Some("steal") => MarkerKind::Steal {
                victim: arg(event, "victim").map_or_else(|| "?".to_owned(), value_text),
                lane: str_arg(event, "lane").unwrap_or_else(|| "?".to_owned()),
                taken: arg(event, "taken").and_then(Value::as_u64).unwrap_or(0),
            },
            Some("wake") => MarkerKind::Wake {
                slot: arg(event, "slot").map_or_else(|| "?".to_owned(), value_text),
            },
            _ => return Ok(()),
        };
        let marker = Marker {
            tid: tid_of(index, event)?,
            ts: ts_of(index, event)?,
            kind,
        };
        self.trace.markers.push(marker);
        Ok(())
    }

    fn finish(self) -> Result<Trace, Error> {
        let unclosed = self
            .open
            .iter()
            .find_map(|(tid, stack)| stack.last().map(|open| (tid, open)));
        if let Some((tid, open)) = unclosed {
            return Err(Error::Format(format!(
                "\"B\" event {:?} on tid {tid} at ts {} us is never closed",
                open.name, open.start
            )));
        }
        Ok(self.trace)
    }
}

fn malformed(index: usize, problem: &str) -> Error {
    Error::Format(format!("event {index} {problem}"))
}

fn str_field<'v>(event: &'v Value, key: &str) -> Option<&'v str> {
    event.get(key).and_then(Value::as_str)
}

fn arg<'v>(event: &'v Value, key: &str) -> Option<&'v Value> {
    event.get("args").and_then(|args| args.get(key))
}

fn str_arg(event: &Value, key: &str) -> Option<String> {
    arg(event, key).and_then(Value::as_str).map(str::to_owned)
}

fn value_text(value: &Value) -> String {
    match value {
        Value::String(text) => text.clone(),
        other => other.to_string(),
    }
}

fn tid_of(index: usize, event: &Value) -> Result<u64, Error> {
    event
        .get("tid")
        .and_then(Value::as_u64)
        .ok_or_else(|| malformed(index, "has no integer \"tid\""))
}

fn ts_of(index: usize, event: &Value) -> Result<f64, Error> {
    event
        .get("ts")
        .and_then(Value::as_f64)
        .ok_or_else(|| malformed(index, "has no numeric \"ts\""))
}

/// How many of `available` frames to draw when `wanted` were asked for (`0` meaning all).
fn drawn_count(available: usize, wanted: usize) -> usize {
    if wanted == 0 {
        available
    } else {
        wanted.min(available)
    }
}

/// The drawn time range, in microseconds.
#[derive(Debug, Clone, Copy)]
struct Window {
    start: f64,
    end: f64,
}

impl Window {
    /// From the start of the first drawn frame to the latest end of a drawn frame.
    fn around(drawn: &[&Span]) -> Self {
        let start = drawn.first().map_or(0.0, |frame| frame.start);
        let end = drawn.iter().map(|frame| frame.end).fold(start, f64::max);
        Self { start, end }
    }

    fn overlaps(self, span: &Span) -> bool {
        span.start < self.end && span.end > self.start
    }

    fn contains(self, ts: f64) -> bool {
        (self.start..=self.end).contains(&ts)
    }

    fn duration_us(self) -> f64 {
        (self.end - self.start).max(MIN_WINDOW_US)
    }
}

/// The spans and markers of one thread that show in the window.
struct Row<'a> {
    tid: u64,
    spans: Vec<&'a Span>,
    markers: Vec<&'a Marker>,
}

impl<'a> Row<'a> {
    fn new(tid: u64) -> Self {
        Self {
            tid,
            spans: Vec::new(),
            markers: Vec::new(),
        }
    }

    fn spans_of(&self, cat: Category) -> impl Iterator<Item = &'a Span> + '_ {
        self.spans
            .iter()
            .copied()
            .filter(move |span| span.cat == cat)
    }
}

/// One row per thread with a span overlapping the window or a marker inside it, by tid.
fn build_rows(trace: &Trace, window: Window) -> Vec<Row<'_>> {
    let mut rows = BTreeMap::new();
    for span in trace.spans.iter().filter(|span| window.overlaps(span)) {
        rows.entry(span.tid)
            .or_insert_with(|| Row::new(span.tid))
            .spans
            .push(span);
    }
    for marker in trace
        .markers
        .iter()
        .filter(|marker| window.contains(marker.ts))
    {
        rows.entry(marker.tid)
            .or_insert_with(|| Row::new(marker.tid))
            .markers
            .push(marker);
    }
    rows.into_values().collect()
}

/// Vertical positions that depend on the number of rows.
struct Layout {
    width: f64,
    plot_width: f64,
    timeline_bottom: f64,
    histogram_top: f64,
    height: f64,
}

impl Layout {
    fn new(width: f64, rows: usize) -> Self {
        let timeline_bottom = TIMELINE_TOP + rows as f64 * (ROW_HEIGHT + ROW_GAP);
        let histogram_top = timeline_bottom + HISTOGRAM_GAP;
        Self {
            width,
            plot_width: width - LABEL_WIDTH - RIGHT_MARGIN,
            timeline_bottom,
            histogram_top,
            height: histogram_top + HISTOGRAM_HEIGHT + BOTTOM_MARGIN,
        }
    }

    fn row_top(&self, index: usize) -> f64 {
        TIMELINE_TOP + index as f64 * (ROW_HEIGHT + ROW_GAP)
    }
}

/// Maps trace time to x coordinates, clamping to the window.
struct Scale {
    window: Window,
    left: f64,
    width: f64,
}

impl Scale {
    fn x(&self, ts: f64) -> f64 {
        let clamped = ts.clamp(self.window.start, self.window.end);
        self.left + (clamped - self.window.start) / self.window.duration_us() * self.width
    }
}

/// The rectangle of a span in its row.
struct Bar {
    x: f64,
    y: f64,
    width: f64,
    height: f64,
}

impl Bar {
    /// Clipped to the window and inset by the span's nesting level.
    fn new(span: &Span, top: f64, scale: &Scale) -> Self {
        let x = scale.x(span.start);
        let inset = BAR_INSET + LEVEL_INSET * span.level.min(MAX_LEVEL) as f64;
        Self {
            x,
            y: top + inset,
            width: (scale.x(span.end) - x).max(MIN_BAR_WIDTH),
            height: ROW_HEIGHT - 2.0 * inset,
        }
    }
}

/// Text escaped for XML content and attribute values; the output is pure ASCII.
struct Xml<'a>(&'a str);

impl fmt::Display for Xml<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for c in self.0.chars() {
            match c {
                '&' => f.write_str("&amp;")?,
                '<' => f.write_str("&lt;")?,
                '>' => f.write_str("&gt;")?,
                '"' => f.write_str("&quot;")?,
                '\'' => f.write_str("&#39;")?,
                ' '..='~' => f.write_char(c)?,
                c if is_xml_char(c) => write!(f, "&#x{:X};", u32::from(c))?,
                _ => f.write_char('?')?,
            }
        }
        Ok(())
    }
}

/// Whether XML 1.0 allows `c` in a document (even as a character reference).
fn is_xml_char(c: char) -> bool {
    matches!(
        c,
        '\t' | '\n' | '\r' | '\u{20}'..='\u{D7FF}' | '\u{E000}'..='\u{FFFD}'
            | '\u{10000}'..='\u{10FFFF}'
    )
}

/// `text` cut to at most `max_chars` characters, marked with "..." when cut.
fn shorten(text: &str, max_chars: usize) -> String {
    if text.chars().count() <= max_chars {
        return text.to_owned();
    }
    let mut short: String = text.chars().take(max_chars.saturating_sub(3)).collect();
    short.push_str("...");
    short
}

fn lane_fills(lane: Option<&str>) -> (&'static str, &'static str) {
    match lane {
        Some("FrameCritical") => ("#d9534f", "#f19a96"),
        Some("Normal") => ("#4a7fd4", "#93b5ec"),
        Some("Background") => ("#7a9e74", "#b5cfae"),
        _ => ("#999999", "#c4c4c4"),
    }
}

fn write_header(
    out: &mut String,
    layout: &Layout,
    summary: &Summary,
    total_frames: usize,
    window: Window,
) -> fmt::Result {
    let (width, height) = (layout.width, layout.height);
    writeln!(out, r#"<?xml version="1.0" encoding="UTF-8"?>"#)?;
    writeln!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0}" height="{height:.0}" viewBox="0 0 {width:.0} {height:.0}" font-family="sans-serif" font-size="11">"#
    )?;
    writeln!(
        out,
        r##"<rect class="background" x="0" y="0" width="{width:.0}" height="{height:.0}" fill="#ffffff"/>"##
    )?;
    writeln!(
        out,
        r#"<text class="title" x="10" y="{TITLE_Y}" font-size="14" font-weight="bold">engine-tasks trace: {} threads, {} of {total_frames} frames drawn, {} task bars, window {:.3} ms</text>"#,
        summary.threads,
        summary.frames,
        summary.task_bars,
        window.duration_us() / 1000.0
    )?;
    write_legend(out)
}

fn write_legend(out: &mut String) -> fmt::Result {
    let swatches = [
        ("FrameCritical", lane_fills(Some("FrameCritical")).0),
        ("Normal", lane_fills(Some("Normal")).0),
        ("Background", lane_fills(Some("Background")).0),
        ("node (lighter)", lane_fills(Some("Normal")).1),
        ("park", PARK_FILL),
        ("blocking", BLOCKING_FILL),
    ];
    let mut x = 10.0;
    for (label, fill) in swatches {
        writeln!(
            out,
            r#"<rect class="legend" x="{x:.1}" y="{LEGEND_Y}" width="10" height="10" fill="{fill}"/>"#
        )?;
        writeln!(
            out,
            r#"<text class="legend" x="{:.1}" y="{:.1}">{label}</text>"#,
            x + 14.0,
            LEGEND_Y + 9.0
        )?;
        x += 30.0 + 6.5 * label.len() as f64;
    }
    writeln!(
        out,
        r#"<text class="legend" x="{x:.1}" y="{:.1}">wait: dashed outline; steal: triangle (hollow = failed); wake: orange tick</text>"#,
        LEGEND_Y + 9.0
    )
}

/// Draws the thread rows, frame lines and time axis; returns the number of task bars.
fn draw_timeline(
    out: &mut String,
    trace: &Trace,
    rows: &[Row<'_>],
    drawn: &[&Span],
    scale: &Scale,
    layout: &Layout,
) -> Result<usize, fmt::Error> {
    let mut task_bars = 0;
    for (index, row) in rows.iter().enumerate() {
        let label = trace.thread_label(row.tid);
        task_bars += draw_row(out, row, &label, layout.row_top(index), scale)?;
    }
    draw_frame_lines(out, drawn, scale, layout)?;
    draw_time_axis(out, scale, layout)?;
    Ok(task_bars)
}

/// Draws one thread row, bottom layer first; returns the number of task bars.
fn draw_row(
    out: &mut String,
    row: &Row<'_>,
    label: &str,
    top: f64,
    scale: &Scale,
) -> Result<usize, fmt::Error> {
    writeln!(
        out,
        r##"<rect class="row" x="{:.2}" y="{top:.2}" width="{:.2}" height="{ROW_HEIGHT}" fill="#f6f6f6"/>"##,
        scale.left, scale.width
    )?;
    writeln!(
        out,
        r#"<text class="thread" x="10" y="{:.2}">{}<title>{}</title></text>"#,
        top + ROW_HEIGHT / 2.0 + 4.0,
        Xml(&shorten(label, LABEL_CHARS)),
        Xml(label)
    )?;
    for span in row.spans_of(Category::Park) {
        write_plain_span(out, "park", PARK_PAINT, span, top, scale)?;
    }
    for span in row.spans_of(Category::Blocking) {
        write_plain_span(out, "blocking", BLOCKING_PAINT, span, top, scale)?;
    }
    let mut bars: Vec<&Span> = row
        .spans
        .iter()
        .copied()
        .filter(|span| span.cat.is_bar())
        .collect();
    bars.sort_by(|a, b| a.level.cmp(&b.level).then(a.start.total_cmp(&b.start)));
    for span in &bars {
        write_task(out, span, top, scale)?;
    }
    for span in row.spans_of(Category::Wait) {
        write_plain_span(out, "wait", WAIT_PAINT, span, top, scale)?;
    }
    for marker in &row.markers {
        write_marker(out, marker, top, scale)?;
    }
    Ok(bars.len())
}

fn write_rect(
    out: &mut String,
    class: &str,
    bar: &Bar,
    paint: &str,
    title: fmt::Arguments<'_>,
) -> fmt::Result {
    writeln!(
        out,
        r#"<rect class="{class}" x="{:.2}" y="{:.2}" width="{:.2}" height="{:.2}" {paint}><title>{title}</title></rect>"#,
        bar.x, bar.y, bar.width, bar.height
    )
}

/// A park, wait or blocking span, titled with its name and duration.
fn write_plain_span(
    out: &mut String,
    class: &str,
    paint: &str,
    span: &Span,
    top: f64,
    scale: &Scale,
) -> fmt::Result {
    let (name, duration) = (Xml(&span.name), span.duration());
    let bar = Bar::new(span, top, scale);
    write_rect(
        out,
        class,
        &bar,
        paint,
        format_args!("{name}, {duration:.1} &#181;s"),
    )
}

fn write_task(out: &mut String, span: &Span, top: f64, scale: &Scale) -> fmt::Result {
    let (task_fill, node_fill) = lane_fills(span.lane.as_deref());
    let (kind, fill) = if span.cat == Category::Node {
        ("node", node_fill)
    } else {
        ("task", task_fill)
    };
    let paint =
        format!(r##"fill="{fill}" stroke="#333333" stroke-opacity="0.6" stroke-width="0.5""##);
    let bar = Bar::new(span, top, scale);
    let name = Xml(&span.name);
    let lane = Xml(span.lane.as_deref().unwrap_or("no lane"));
    let duration = span.duration();
    write_rect(
        out,
        "task",
        &bar,
        &paint,
        format_args!("{kind}: {name} [{lane}] {duration:.1} &#181;s"),
    )
}

fn write_marker(out: &mut String, marker: &Marker, top: f64, scale: &Scale) -> fmt::Result {
    let x = scale.x(marker.ts);
    match &marker.kind {
        MarkerKind::Steal {
            victim,
            lane,
            taken,
        } => write_steal(out, x, top, victim, lane, *taken),
        MarkerKind::Wake { slot } => {
            let (y1, y2) = (top + ROW_HEIGHT - 7.0, top + ROW_HEIGHT);
            writeln!(
                out,
                r##"<line class="wake" x1="{x:.2}" y1="{y1:.2}" x2="{x:.2}" y2="{y2:.2}" stroke="#e08a00" stroke-width="1.5"><title>wake, slot {}</title></line>"##,
                Xml(slot)
            )
        }
    }
}

fn write_steal(
    out: &mut String,
    x: f64,
    top: f64,
    victim: &str,
    lane: &str,
    taken: u64,
) -> fmt::Result {
    let (left, right, y, tip) = (x - 3.5, x + 3.5, top + 1.0, top + 8.0);
    let (paint, outcome) = if taken > 0 {
        (STEAL_PAINT, format!("took {taken}"))
    } else {
        (FAILED_STEAL_PAINT, "failed".to_owned())
    };
    writeln!(
        out,
        r#"<path class="steal" d="M {left:.2} {y:.2} L {right:.2} {y:.2} L {x:.2} {tip:.2} Z" {paint}><title>steal, victim {}, lane {}: {outcome}</title></path>"#,
        Xml(victim),
        Xml(lane)
    )
}

/// A vertical line at the start of every drawn frame and one at the end of the window.
fn draw_frame_lines(
    out: &mut String,
    drawn: &[&Span],
    scale: &Scale,
    layout: &Layout,
) -> fmt::Result {
    let (top, bottom) = (TIMELINE_TOP - 14.0, layout.timeline_bottom - ROW_GAP);
    for frame in drawn {
        let x = scale.x(frame.start);
        let label = frame_label(frame);
        let (name, ms) = (Xml(&label), frame.duration() / 1000.0);
        write_frame_line(out, x, top, bottom, format_args!("{name}, {ms:.3} ms"))?;
        writeln!(
            out,
            r#"<text class="frame-label" x="{:.2}" y="{:.2}" {LABEL_PAINT}>{}</text>"#,
            x + 3.0,
            TIMELINE_TOP - 4.0,
            Xml(&label)
        )?;
    }
    let end = scale.x(scale.window.end);
    write_frame_line(out, end, top, bottom, format_args!("end of the window"))
}

fn write_frame_line(
    out: &mut String,
    x: f64,
    top: f64,
    bottom: f64,
    title: fmt::Arguments<'_>,
) -> fmt::Result {
    writeln!(
        out,
        r##"<line class="frame" x1="{x:.2}" y1="{top:.2}" x2="{x:.2}" y2="{bottom:.2}" stroke="#000000" stroke-opacity="0.7" stroke-width="1"><title>{title}</title></line>"##
    )
}

fn frame_label(frame: &Span) -> String {
    match frame.frame {
        Some(number) => format!("frame {number}"),
        None => frame.name.clone(),
    }
}

fn draw_time_axis(out: &mut String, scale: &Scale, layout: &Layout) -> fmt::Result {
    let y = layout.timeline_bottom;
    writeln!(
        out,
        r##"<line class="axis" x1="{:.2}" y1="{y:.2}" x2="{:.2}" y2="{y:.2}" stroke="#888888"/>"##,
        scale.left,
        scale.left + scale.width
    )?;
    for tick in 0..=TIME_TICKS {
        let fraction = f64::from(tick) / f64::from(TIME_TICKS);
        let x = scale.left + fraction * scale.width;
        let ms = fraction * scale.window.duration_us() / 1000.0;
        writeln!(
            out,
            r##"<line class="tick" x1="{x:.2}" y1="{y:.2}" x2="{x:.2}" y2="{:.2}" stroke="#888888"/>"##,
            y + 4.0
        )?;
        writeln!(
            out,
            r#"<text class="tick" x="{x:.2}" y="{:.2}" text-anchor="middle" {LABEL_PAINT}>+{ms:.3} ms</text>"#,
            y + 15.0
        )?;
    }
    Ok(())
}

/// Histogram of the durations of `frames` (all frames of the trace) with p50 and p99.
fn draw_histogram(out: &mut String, frames: &[&Span], layout: &Layout) -> fmt::Result {
    let mut durations: Vec<f64> = frames.iter().map(|frame| frame.duration()).collect();
    durations.sort_by(f64::total_cmp);
    let min = durations.first().copied().unwrap_or(0.0);
    let max = durations.last().copied().unwrap_or(0.0);
    let counts = bin_counts(&durations, min, max);
    let tallest = counts.iter().copied().max().unwrap_or(0).max(1);
    let (left, width) = (LABEL_WIDTH, layout.plot_width);
    let (top, bottom) = (
        layout.histogram_top,
        layout.histogram_top + HISTOGRAM_HEIGHT,
    );
    let bin_width = width / HISTOGRAM_BINS as f64;
    let bin_us = (max - min) / HISTOGRAM_BINS as f64;

    writeln!(
        out,
        r#"<text class="caption" x="{left:.2}" y="{:.2}" font-weight="bold">Frame times of all {} frames: p50 {:.3} ms, p99 {:.3} ms (min {:.3} ms, max {:.3} ms)</text>"#,
        top - 10.0,
        durations.len(),
        percentile(&durations, 0.50) / 1000.0,
        percentile(&durations, 0.99) / 1000.0,
        min / 1000.0,
        max / 1000.0
    )?;
    for (index, &count) in counts.iter().enumerate() {
        if count == 0 {
            continue;
        }
        let height = count as f64 / tallest as f64 * HISTOGRAM_HEIGHT;
        let x = left + index as f64 * bin_width;
        let low = min + index as f64 * bin_us;
        writeln!(
            out,
            r##"<rect class="histogram" x="{:.2}" y="{:.2}" width="{:.2}" height="{height:.2}" fill="#6c8ebf"><title>{:.3} to {:.3} ms: {count} frames</title></rect>"##,
            x + 1.0,
            bottom - height,
            (bin_width - 2.0).max(1.0),
            low / 1000.0,
            (low + bin_us) / 1000.0
        )?;
    }
    draw_histogram_axes(out, layout, tallest, min, bin_us)
}

fn draw_histogram_axes(
    out: &mut String,
    layout: &Layout,
    tallest: usize,
    min: f64,
    bin_us: f64,
) -> fmt::Result {
    let (left, width) = (LABEL_WIDTH, layout.plot_width);
    let (top, bottom) = (
        layout.histogram_top,
        layout.histogram_top + HISTOGRAM_HEIGHT,
    );
    writeln!(
        out,
        r##"<line class="axis" x1="{left:.2}" y1="{bottom:.2}" x2="{:.2}" y2="{bottom:.2}" stroke="#888888"/>"##,
        left + width
    )?;
    writeln!(
        out,
        r##"<line class="axis" x1="{left:.2}" y1="{top:.2}" x2="{left:.2}" y2="{bottom:.2}" stroke="#888888"/>"##
    )?;
    for bin in (0..=HISTOGRAM_BINS).step_by(HISTOGRAM_BINS / 4) {
        let x = left + bin as f64 * width / HISTOGRAM_BINS as f64;
        let ms = (min + bin as f64 * bin_us) / 1000.0;
        writeln!(
            out,
            r#"<text class="histogram-axis" x="{x:.2}" y="{:.2}" text-anchor="middle" {LABEL_PAINT}>{ms:.3} ms</text>"#,
            bottom + 14.0
        )?;
    }
    writeln!(
        out,
        r#"<text class="histogram-axis" x="{:.2}" y="{:.2}" text-anchor="end" {LABEL_PAINT}>{tallest} frames</text>"#,
        left - 6.0,
        top + 10.0
    )?;
    writeln!(
        out,
        r#"<text class="histogram-axis" x="{:.2}" y="{bottom:.2}" text-anchor="end" {LABEL_PAINT}>0</text>"#,
        left - 6.0
    )?;
    writeln!(
        out,
        r#"<text class="histogram-axis" x="{:.2}" y="{:.2}" text-anchor="middle" {LABEL_PAINT}>frame time (ms)</text>"#,
        left + width / 2.0,
        bottom + 30.0
    )
}

/// Counts of `durations` in [`HISTOGRAM_BINS`] equal bins from `min` to `max`.
fn bin_counts(durations: &[f64], min: f64, max: f64) -> Vec<usize> {
    let mut counts = vec![0; HISTOGRAM_BINS];
    let range = max - min;
    for &duration in durations {
        let index = if range > 0.0 {
            ((duration - min) / range * HISTOGRAM_BINS as f64) as usize
        } else {
            0
        };
        counts[index.min(HISTOGRAM_BINS - 1)] += 1;
    }
    counts
}

/// Nearest-rank percentile of ascending `sorted`; `fraction` is in `0.0..=1.0`.
fn percentile(sorted: &[f64], fraction: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = (fraction * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_markup_and_non_ascii() {
        let escaped = Xml("a<&\">'\u{e9}\u{1}").to_string();
        assert_eq!(escaped, "a&lt;&amp;&quot;&gt;&#39;&#xE9;?");
    }

    #[test]
    fn nearest_rank_percentiles() {
        let sorted = [1.0, 2.0, 3.0, 4.0];
        assert_eq!(percentile(&sorted, 0.5), 2.0);
        assert_eq!(percentile(&sorted, 0.99), 4.0);
        assert_eq!(percentile(&[7.0], 0.5), 7.0);
    }

    #[test]
    fn bins_span_min_to_max() {
        let counts = bin_counts(&[0.0, 5.0, 10.0], 0.0, 10.0);
        assert_eq!(counts[0], 1);
        assert_eq!(counts[10], 1);
        assert_eq!(counts[HISTOGRAM_BINS - 1], 1);
        assert_eq!(counts.iter().sum::<usize>(), 3);
    }

    #[test]
    fn zero_frames_wanted_draws_all() {
        assert_eq!(drawn_count(5, 0), 5);
        assert_eq!(drawn_count(5, 2), 2);
        assert_eq!(drawn_count(3, 8), 3);
    }
}

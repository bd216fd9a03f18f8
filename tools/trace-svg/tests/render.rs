//! Integration tests of `trace_svg::render` on synthetic engine-tasks traces.

use roxmltree::Document;
use serde_json::{json, Value};
use trace_svg::{render, Error, Options, Summary};

const SVG_NAMESPACE: &str = "http://www.w3.org/2000/svg";
const FRAME_COUNT: u64 = 5;
const TRICKY_NODE: &str = "physics/<&\">";
const ACCENTED_NODE: &str = "ai/path/\u{e9}tape";

/// Builds a trace event by event and records, independently of the renderer, the task and
/// node spans, frames and steals the assertions need.
#[derive(Default)]
struct TraceBuilder {
    events: Vec<Value>,
    open: Vec<(u64, &'static str, f64)>,
    bars: Vec<(f64, f64)>,
    frames: Vec<(f64, f64)>,
    steals: Vec<f64>,
}

impl TraceBuilder {
    fn thread_name(&mut self, tid: u64, name: &str) {
        self.events.push(json!({
            "ph": "M", "name": "thread_name", "pid": 1, "tid": tid, "args": {"name": name}
        }));
    }

    fn begin(&mut self, tid: u64, cat: &'static str, name: &str, ts: f64, args: Value) {
        self.events.push(json!({
            "ph": "B", "cat": cat, "name": name, "pid": 1, "tid": tid, "ts": ts, "args": args
        }));
        self.open.push((tid, cat, ts));
    }

    /// Closes the innermost open span of `tid`. Node ends omit `cat`, to check that `E` events
    /// are paired by the stack alone.
    fn end(&mut self, tid: u64, ts: f64) {
        let position = self
            .open
            .iter()
            .rposition(|open| open.0 == tid)
            .expect("an open span on this thread");
        let (_, cat, start) = self.open.remove(position);
        match cat {
            "task" | "node" => self.bars.push((start, ts)),
            "frame" => self.frames.push((start, ts)),
            _ => {}
        }
        let event = if cat == "node" {
            json!({"ph": "E", "pid": 1, "tid": tid, "ts": ts})
        } else {
            json!({"ph": "E", "cat": cat, "pid": 1, "tid": tid, "ts": ts})
        };
        self.events.push(event);
    }

    fn task(&mut self, tid: u64, name: &str, lane: &str, ts: f64) {
        self.begin(tid, "task", name, ts, json!({ "lane": lane }));
    }

    fn node(&mut self, tid: u64, name: &str, lane: &str, ts: f64) {
        self.begin(tid, "node", name, ts, json!({ "lane": lane }));
    }

    fn leaf(&mut self, tid: u64, cat: &'static str, name: &str, start: f64, end: f64) {
        self.begin(tid, cat, name, start, json!({}));
        self.end(tid, end);
    }

    fn frame(&mut self, tid: u64, number: u64, ts: f64) {
        let name = format!("frame {number}");
        self.begin(tid, "frame", &name, ts, json!({ "frame": number }));
    }

    fn steal(&mut self, tid: u64, ts: f64, victim: Value, taken: u64) {
        self.events.push(json!({
            "ph": "i", "s": "t", "cat": "steal", "name": "steal", "pid": 1, "tid": tid, "ts": ts,
            "args": {"victim": victim, "lane": "Normal", "taken": taken}
        }));
        self.steals.push(ts);
    }

    fn wake(&mut self, tid: u64, ts: f64, slot: u64) {
        self.events.push(json!({
            "ph": "i", "s": "t", "cat": "wake", "name": "wake", "pid": 1, "tid": tid, "ts": ts,
            "args": {"slot": slot}
        }));
    }

    fn json(&self) -> String {
        json!({"traceEvents": self.events, "displayTimeUnit": "ns"}).to_string()
    }

    /// The window of the last `count` frames: start of the first, latest end.
    fn window(&self, count: usize) -> (f64, f64) {
        let drawn = &self.frames[self.frames.len() - count..];
        let end = drawn.iter().map(|frame| frame.1).fold(f64::MIN, f64::max);
        (drawn[0].0, end)
    }

    fn bars_overlapping(&self, (start, end): (f64, f64)) -> usize {
        self.bars
            .iter()
            .filter(|bar| bar.0 < end && bar.1 > start)
            .count()
    }

    fn steals_inside(&self, (start, end): (f64, f64)) -> usize {
        self.steals
            .iter()
            .filter(|&&ts| (start..=end).contains(&ts))
            .count()
    }
}

fn frame_start(frame: u64) -> f64 {
    100.0 + 1000.0 * frame as f64
}

/// Four named threads and an unnamed blocking-pool thread (tid 4) over five frames, with
/// nested tasks and nodes, parks, waits, steals, wake-ups and a task crossing a frame end.
fn sample_trace() -> TraceBuilder {
    let mut trace = TraceBuilder::default();
    trace.thread_name(1, "engine-main");
    trace.thread_name(2, "engine-worker-0");
    trace.thread_name(3, "engine-worker-1");
    trace.thread_name(5, "engine-worker-early");
    trace.task(5, "warm-up", "Background", 50.0);
    trace.end(5, 90.0);
    for frame in 0..FRAME_COUNT {
        let start = frame_start(frame);
        main_thread(&mut trace, frame, start);
        worker_0(&mut trace, start);
        worker_1(&mut trace, start);
        trace.leaf(4, "blocking", "blocking task", start + 50.0, start + 500.0);
    }
    trace
}

fn main_thread(trace: &mut TraceBuilder, frame: u64, start: f64) {
    trace.frame(1, frame, start);
    trace.task(1, &format!("main-{frame}"), "FrameCritical", start + 10.0);
    trace.node(1, "input", "FrameCritical", start + 20.0);
    trace.end(1, start + 100.0);
    trace.end(1, start + 300.0);
    trace.leaf(1, "wait", "wait", start + 310.0, start + 600.0);
    trace.end(1, start + 800.0 + 37.5 * frame as f64);
}

fn worker_0(trace: &mut TraceBuilder, start: f64) {
    trace.steal(2, start + 12.0, json!("injector"), 3);
    trace.task(2, "physics", "Normal", start + 15.0);
    trace.node(2, "physics/broadphase", "Normal", start + 20.0);
    trace.end(2, start + 150.0);
    trace.node(2, TRICKY_NODE, "Normal", start + 160.0);
    trace.end(2, start + 390.0);
    trace.end(2, start + 400.0);
    trace.steal(2, start + 405.0, json!(3), 0);
    trace.leaf(2, "park", "park", start + 410.0, start + 700.0);
    trace.task(2, "streaming", "Background", start + 750.0);
    trace.end(2, start + 1008.0);
}

fn worker_1(trace: &mut TraceBuilder, start: f64) {
    trace.task(3, "ai", "Normal", start + 30.0);
    trace.node(3, "ai/path", "Normal", start + 40.0);
    trace.node(3, ACCENTED_NODE, "Normal", start + 50.0);
    trace.end(3, start + 120.0);
    trace.end(3, start + 200.0);
    trace.end(3, start + 250.0);
    trace.wake(3, start + 260.0, 1);
    trace.leaf(3, "park", "park", start + 270.0, start + 900.0);
}

fn count_class(doc: &Document<'_>, tag: &str, class: &str) -> usize {
    doc.descendants()
        .filter(|node| {
            node.is_element()
                && node.tag_name().name() == tag
                && node.attribute("class") == Some(class)
        })
        .count()
}

fn texts_of(doc: &Document<'_>, tag: &str) -> Vec<String> {
    doc.descendants()
        .filter(|node| node.is_element() && node.tag_name().name() == tag)
        .filter_map(|node| node.text())
        .map(str::to_owned)
        .collect()
}

fn render_ok(json: &str, options: &Options) -> (String, Summary) {
    render(json, options).expect("the trace renders")
}

#[test]
fn output_is_well_formed_ascii_svg() {
    let trace = sample_trace();
    let (svg, _) = render_ok(&trace.json(), &Options::default());
    assert!(svg.is_ascii(), "the markup is ASCII");
    let doc = Document::parse(&svg).expect("well-formed XML");
    let root = doc.root_element();
    assert_eq!(root.tag_name().name(), "svg");
    assert_eq!(root.tag_name().namespace(), Some(SVG_NAMESPACE));
}

#[test]
fn task_bars_match_spans_overlapping_the_last_two_frames() {
    let trace = sample_trace();
    assert_eq!(trace.frames.len(), FRAME_COUNT as usize);
    let window = trace.window(2);
    let expected = trace.bars_overlapping(window);
    // Two frames of 9 bars each, plus the streaming task that ends in the window.
    assert_eq!(expected, 19);

    let options = Options {
        frames: 2,
        ..Options::default()
    };
    let (svg, summary) = render_ok(&trace.json(), &options);
    let doc = Document::parse(&svg).expect("well-formed XML");
    assert_eq!(count_class(&doc, "rect", "task"), expected);
    assert_eq!(
        summary,
        Summary {
            frames: 2,
            task_bars: expected,
            threads: 4,
        }
    );
    assert_eq!(
        count_class(&doc, "path", "steal"),
        trace.steals_inside(window)
    );
    assert_eq!(count_class(&doc, "line", "wake"), 2);
    assert_eq!(count_class(&doc, "rect", "blocking"), 2);
    assert!(count_class(&doc, "rect", "park") >= 4);
    assert!(count_class(&doc, "rect", "wait") >= 2);

    let labels = texts_of(&doc, "text");
    for label in [
        "engine-main",
        "engine-worker-0",
        "engine-worker-1",
        "tid 4",
        "frame 3",
    ] {
        assert!(
            labels.iter().any(|text| text == label),
            "missing label {label}"
        );
    }
    assert!(!labels.iter().any(|text| text == "engine-worker-early"));
    assert!(!labels.iter().any(|text| text == "frame 2"));
    assert!(count_class(&doc, "line", "frame") >= 2);
}

#[test]
fn zero_frames_draws_the_whole_trace() {
    let trace = sample_trace();
    let options = Options {
        frames: 0,
        ..Options::default()
    };
    let (svg, summary) = render_ok(&trace.json(), &options);
    let expected = trace.bars_overlapping(trace.window(trace.frames.len()));
    assert_eq!(summary.frames, FRAME_COUNT as usize);
    assert_eq!(summary.task_bars, expected);
    let doc = Document::parse(&svg).expect("well-formed XML");
    assert_eq!(count_class(&doc, "rect", "task"), expected);
}

#[test]
fn user_text_is_escaped() {
    let trace = sample_trace();
    let (svg, _) = render_ok(&trace.json(), &Options::default());
    assert!(!svg.contains(TRICKY_NODE), "raw markup characters leaked");
    let doc = Document::parse(&svg).expect("well-formed XML");
    let titles = texts_of(&doc, "title");
    assert!(titles.iter().any(|title| title.contains(TRICKY_NODE)));
    assert!(titles.iter().any(|title| title.contains(ACCENTED_NODE)));
}

#[test]
fn histogram_covers_all_frames() {
    let trace = sample_trace();
    let options = Options {
        frames: 1,
        ..Options::default()
    };
    let (svg, _) = render_ok(&trace.json(), &options);
    let doc = Document::parse(&svg).expect("well-formed XML");
    let bins = count_class(&doc, "rect", "histogram");
    assert!((1..=FRAME_COUNT as usize).contains(&bins), "{bins} bins");
    let caption = texts_of(&doc, "text")
        .into_iter()
        .find(|text| text.contains("p50"))
        .expect("a histogram caption");
    assert!(
        caption.contains("all 5 frames") && caption.contains("p99"),
        "{caption}"
    );
}

#[test]
fn trace_without_frames_is_rejected() {
    let mut trace = TraceBuilder::default();
    trace.task(1, "lonely", "Normal", 1.0);
    trace.end(1, 2.0);
    let result = render(&trace.json(), &Options::default());
    assert!(matches!(result, Err(Error::NoFrames)), "{result:?}");
}

#[test]
fn unmatched_end_is_a_format_error() {
    let json = json!({"traceEvents": [
        {"ph": "B", "cat": "frame", "name": "frame 1", "pid": 1, "tid": 7, "ts": 1.0,
         "args": {"frame": 1}},
        {"ph": "E", "pid": 1, "tid": 7, "ts": 2.0},
        {"ph": "E", "pid": 1, "tid": 7, "ts": 3.5}
    ]})
    .to_string();
    match render(&json, &Options::default()) {
        Err(Error::Format(message)) => {
            assert!(
                message.contains("tid 7") && message.contains("3.5"),
                "{message}"
            );
        }
        other => panic!("expected a format error, got {other:?}"),
    }
}

#[test]
fn unclosed_begin_is_a_format_error() {
    let mut trace = TraceBuilder::default();
    trace.frame(1, 1, 10.0);
    trace.end(1, 20.0);
    trace.task(2, "never-ends", "Normal", 12.25);
    match render(&trace.json(), &Options::default()) {
        Err(Error::Format(message)) => {
            assert!(
                message.contains("tid 2") && message.contains("12.25"),
                "{message}"
            );
        }
        other => panic!("expected a format error, got {other:?}"),
    }
}

#[test]
fn invalid_json_is_a_json_error() {
    let result = render("{\"traceEvents\": [", &Options::default());
    assert!(matches!(result, Err(Error::Json(_))), "{result:?}");
    let message = result.expect_err("invalid JSON").to_string();
    assert!(message.starts_with("invalid JSON"), "{message}");
}

//! Reading the trace: thread names, `B`/`E` spans nested per thread, steal
//! and wake instants; malformed input is an `Error::Format`.

use crate::Error;
use serde_json::Value;
use std::collections::BTreeMap;

/// The kind of a `B`/`E` span, from its `cat` field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Category {
    Task,
    Node,
    Park,
    Wait,
    Blocking,
    Frame,
    Other,
}

impl Category {
    pub(crate) fn of(cat: &str) -> Self {
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
    pub(crate) fn is_bar(self) -> bool {
        matches!(self, Self::Task | Self::Node)
    }
}

/// A closed `B`/`E` pair.
pub(crate) struct Span {
    pub(crate) tid: u64,
    pub(crate) cat: Category,
    pub(crate) name: String,
    pub(crate) lane: Option<String>,
    pub(crate) start: f64,
    pub(crate) end: f64,
    /// Number of task and node spans of the same thread enclosing this one.
    pub(crate) level: usize,
    /// `args.frame` of a frame span.
    pub(crate) frame: Option<u64>,
}

impl Span {
    pub(crate) fn duration(&self) -> f64 {
        self.end - self.start
    }
}

/// An instant event that is drawn.
pub(crate) struct Marker {
    pub(crate) tid: u64,
    pub(crate) ts: f64,
    pub(crate) kind: MarkerKind,
}

pub(crate) enum MarkerKind {
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
pub(crate) struct Trace {
    pub(crate) thread_names: BTreeMap<u64, String>,
    pub(crate) spans: Vec<Span>,
    pub(crate) markers: Vec<Marker>,
}

impl Trace {
    /// The frame spans, ordered by start time.
    pub(crate) fn frames(&self) -> Vec<&Span> {
        let mut frames: Vec<&Span> = self
            .spans
            .iter()
            .filter(|span| span.cat == Category::Frame)
            .collect();
        frames.sort_by(|a, b| a.start.total_cmp(&b.start));
        frames
    }

    pub(crate) fn thread_label(&self, tid: u64) -> String {
        self.thread_names
            .get(&tid)
            .cloned()
            .unwrap_or_else(|| format!("tid {tid}"))
    }
}

pub(crate) fn parse_trace(json: &str) -> Result<Trace, Error> {
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
pub(crate) struct OpenSpan {
    pub(crate) cat: Category,
    pub(crate) name: String,
    pub(crate) lane: Option<String>,
    pub(crate) start: f64,
    pub(crate) level: usize,
    pub(crate) frame: Option<u64>,
}

impl OpenSpan {
    pub(crate) fn close(self, tid: u64, end: f64) -> Span {
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
pub(crate) struct Parser {
    pub(crate) trace: Trace,
    pub(crate) open: BTreeMap<u64, Vec<OpenSpan>>,
}

impl Parser {
    pub(crate) fn event(&mut self, index: usize, event: &Value) -> Result<(), Error> {
        let phase = str_field(event, "ph").ok_or_else(|| malformed(index, "has no \"ph\""))?;
        match phase {
            "M" => self.metadata(index, event),
            "B" => self.begin(index, event),
            "E" => self.end(index, event),
            "i" | "I" => self.instant(index, event),
            _ => Ok(()),
        }
    }

    pub(crate) fn metadata(&mut self, index: usize, event: &Value) -> Result<(), Error> {
        if str_field(event, "name") != Some("thread_name") {
            return Ok(());
        }
        let tid = tid_of(index, event)?;
        if let Some(name) = str_arg(event, "name") {
            self.trace.thread_names.insert(tid, name);
        }
        Ok(())
    }

    pub(crate) fn begin(&mut self, index: usize, event: &Value) -> Result<(), Error> {
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

    pub(crate) fn end(&mut self, index: usize, event: &Value) -> Result<(), Error> {
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

    pub(crate) fn instant(&mut self, index: usize, event: &Value) -> Result<(), Error> {
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

    pub(crate) fn finish(self) -> Result<Trace, Error> {
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

pub(crate) fn malformed(index: usize, problem: &str) -> Error {
    Error::Format(format!("event {index} {problem}"))
}

pub(crate) fn str_field<'v>(event: &'v Value, key: &str) -> Option<&'v str> {
    event.get(key).and_then(Value::as_str)
}

pub(crate) fn arg<'v>(event: &'v Value, key: &str) -> Option<&'v Value> {
    event.get("args").and_then(|args| args.get(key))
}

pub(crate) fn str_arg(event: &Value, key: &str) -> Option<String> {
    arg(event, key).and_then(Value::as_str).map(str::to_owned)
}

pub(crate) fn value_text(value: &Value) -> String {
    match value {
        Value::String(text) => text.clone(),
        other => other.to_string(),
    }
}

pub(crate) fn tid_of(index: usize, event: &Value) -> Result<u64, Error> {
    event
        .get("tid")
        .and_then(Value::as_u64)
        .ok_or_else(|| malformed(index, "has no integer \"tid\""))
}

pub(crate) fn ts_of(index: usize, event: &Value) -> Result<f64, Error> {
    event
        .get("ts")
        .and_then(Value::as_f64)
        .ok_or_else(|| malformed(index, "has no numeric \"ts\""))
}

//! Drawing the timeline: the header and legend, each row's spans and
//! markers, frame boundaries and the time axis, escaped for XML.

use crate::layout::*;
use crate::parse::*;
use crate::Summary;
use std::fmt::{self, Write as _};

pub(crate) const PARK_FILL: &str = "#dcdcdc";
pub(crate) const BLOCKING_FILL: &str = "#b58fd1";
pub(crate) const PARK_PAINT: &str = r##"fill="#dcdcdc""##;
pub(crate) const BLOCKING_PAINT: &str =
    r##"fill="#b58fd1" stroke="#333333" stroke-opacity="0.6" stroke-width="0.5""##;
pub(crate) const WAIT_PAINT: &str =
    r##"fill="none" stroke="#333333" stroke-width="1" stroke-dasharray="3 2""##;
pub(crate) const STEAL_PAINT: &str = r##"fill="#222222""##;
pub(crate) const FAILED_STEAL_PAINT: &str = r##"fill="none" stroke="#888888" stroke-width="1""##;
pub(crate) const LABEL_PAINT: &str = r##"fill="#444444""##;

/// Text escaped for XML content and attribute values; the output is pure ASCII.
pub(crate) struct Xml<'a>(&'a str);

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
pub(crate) fn is_xml_char(c: char) -> bool {
    matches!(
        c,
        '\t' | '\n' | '\r' | '\u{20}'..='\u{D7FF}' | '\u{E000}'..='\u{FFFD}'
            | '\u{10000}'..='\u{10FFFF}'
    )
}

/// `text` cut to at most `max_chars` characters, marked with "..." when cut.
pub(crate) fn shorten(text: &str, max_chars: usize) -> String {
    if text.chars().count() <= max_chars {
        return text.to_owned();
    }
    let mut short: String = text.chars().take(max_chars.saturating_sub(3)).collect();
    short.push_str("...");
    short
}

pub(crate) fn lane_fills(lane: Option<&str>) -> (&'static str, &'static str) {
    match lane {
        Some("FrameCritical") => ("#d9534f", "#f19a96"),
        Some("Normal") => ("#4a7fd4", "#93b5ec"),
        Some("Background") => ("#7a9e74", "#b5cfae"),
        _ => ("#999999", "#c4c4c4"),
    }
}

pub(crate) fn write_header(
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

pub(crate) fn write_legend(out: &mut String) -> fmt::Result {
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
pub(crate) fn draw_timeline(
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
pub(crate) fn draw_row(
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

pub(crate) fn write_rect(
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
pub(crate) fn write_plain_span(
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

pub(crate) fn write_task(out: &mut String, span: &Span, top: f64, scale: &Scale) -> fmt::Result {
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

pub(crate) fn write_marker(
    out: &mut String,
    marker: &Marker,
    top: f64,
    scale: &Scale,
) -> fmt::Result {
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

pub(crate) fn write_steal(
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
pub(crate) fn draw_frame_lines(
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

pub(crate) fn write_frame_line(
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

pub(crate) fn frame_label(frame: &Span) -> String {
    match frame.frame {
        Some(number) => format!("frame {number}"),
        None => frame.name.clone(),
    }
}

pub(crate) fn draw_time_axis(out: &mut String, scale: &Scale, layout: &Layout) -> fmt::Result {
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

#[cfg(test)]
mod tests {
    use super::Xml;

    #[test]
    fn escapes_markup_and_non_ascii() {
        let escaped = Xml("a<&\">'\u{e9}\u{1}").to_string();
        assert_eq!(escaped, "a&lt;&amp;&quot;&gt;&#39;&#xE9;?");
    }
}

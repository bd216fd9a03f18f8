//! Where things go: the window of frames drawn, one row per thread, the
//! canvas geometry and the time scale.

use crate::parse::*;
use std::collections::BTreeMap;

pub(crate) const STRING_WRITE: &str = "writing to a String cannot fail";

pub(crate) const MIN_WIDTH: u32 = 400;
pub(crate) const LABEL_WIDTH: f64 = 170.0;
pub(crate) const LABEL_CHARS: usize = 24;
pub(crate) const RIGHT_MARGIN: f64 = 40.0;
pub(crate) const TITLE_Y: f64 = 22.0;
pub(crate) const LEGEND_Y: f64 = 34.0;
pub(crate) const TIMELINE_TOP: f64 = 78.0;
pub(crate) const ROW_HEIGHT: f64 = 32.0;
pub(crate) const ROW_GAP: f64 = 6.0;
pub(crate) const TIME_TICKS: u32 = 5;
pub(crate) const HISTOGRAM_GAP: f64 = 60.0;
pub(crate) const HISTOGRAM_HEIGHT: f64 = 120.0;
pub(crate) const HISTOGRAM_BINS: usize = 20;
pub(crate) const BOTTOM_MARGIN: f64 = 44.0;

pub(crate) const BAR_INSET: f64 = 2.0;
pub(crate) const LEVEL_INSET: f64 = 4.0;
pub(crate) const MAX_LEVEL: usize = 3;
pub(crate) const MIN_BAR_WIDTH: f64 = 0.5;
pub(crate) const MIN_WINDOW_US: f64 = 1e-3;

/// How many of `available` frames to draw when `wanted` were asked for (`0` meaning all).
pub(crate) fn drawn_count(available: usize, wanted: usize) -> usize {
    if wanted == 0 {
        available
    } else {
        wanted.min(available)
    }
}

/// The drawn time range, in microseconds.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Window {
    pub(crate) start: f64,
    pub(crate) end: f64,
}

impl Window {
    /// From the start of the first drawn frame to the latest end of a drawn frame.
    pub(crate) fn around(drawn: &[&Span]) -> Self {
        let start = drawn.first().map_or(0.0, |frame| frame.start);
        let end = drawn.iter().map(|frame| frame.end).fold(start, f64::max);
        Self { start, end }
    }

    pub(crate) fn overlaps(self, span: &Span) -> bool {
        span.start < self.end && span.end > self.start
    }

    pub(crate) fn contains(self, ts: f64) -> bool {
        (self.start..=self.end).contains(&ts)
    }

    pub(crate) fn duration_us(self) -> f64 {
        (self.end - self.start).max(MIN_WINDOW_US)
    }
}

/// The spans and markers of one thread that show in the window.
pub(crate) struct Row<'a> {
    pub(crate) tid: u64,
    pub(crate) spans: Vec<&'a Span>,
    pub(crate) markers: Vec<&'a Marker>,
}

impl<'a> Row<'a> {
    pub(crate) fn new(tid: u64) -> Self {
        Self {
            tid,
            spans: Vec::new(),
            markers: Vec::new(),
        }
    }

    pub(crate) fn spans_of(&self, cat: Category) -> impl Iterator<Item = &'a Span> + '_ {
        self.spans
            .iter()
            .copied()
            .filter(move |span| span.cat == cat)
    }
}

/// One row per thread with a span overlapping the window or a marker inside it, by tid.
pub(crate) fn build_rows(trace: &Trace, window: Window) -> Vec<Row<'_>> {
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
pub(crate) struct Layout {
    pub(crate) width: f64,
    pub(crate) plot_width: f64,
    pub(crate) timeline_bottom: f64,
    pub(crate) histogram_top: f64,
    pub(crate) height: f64,
}

impl Layout {
    pub(crate) fn new(width: f64, rows: usize) -> Self {
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

    pub(crate) fn row_top(&self, index: usize) -> f64 {
        TIMELINE_TOP + index as f64 * (ROW_HEIGHT + ROW_GAP)
    }
}

/// Maps trace time to x coordinates, clamping to the window.
pub(crate) struct Scale {
    pub(crate) window: Window,
    pub(crate) left: f64,
    pub(crate) width: f64,
}

impl Scale {
    pub(crate) fn x(&self, ts: f64) -> f64 {
        let clamped = ts.clamp(self.window.start, self.window.end);
        self.left + (clamped - self.window.start) / self.window.duration_us() * self.width
    }
}

/// The rectangle of a span in its row.
pub(crate) struct Bar {
    pub(crate) x: f64,
    pub(crate) y: f64,
    pub(crate) width: f64,
    pub(crate) height: f64,
}

impl Bar {
    /// Clipped to the window and inset by the span's nesting level.
    pub(crate) fn new(span: &Span, top: f64, scale: &Scale) -> Self {
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

#[cfg(test)]
mod tests {
    use super::drawn_count;

    #[test]
    fn zero_frames_wanted_draws_all() {
        assert_eq!(drawn_count(5, 0), 5);
        assert_eq!(drawn_count(5, 2), 2);
        assert_eq!(drawn_count(3, 8), 3);
    }
}

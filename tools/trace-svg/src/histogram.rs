//! The histogram of frame durations under the timeline, with p50 and p99.

use crate::draw::*;
use crate::layout::*;
use crate::parse::*;
use std::fmt::{self, Write as _};

/// Histogram of the durations of `frames` (all frames of the trace) with p50 and p99.
pub(crate) fn draw_histogram(out: &mut String, frames: &[&Span], layout: &Layout) -> fmt::Result {
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

pub(crate) fn draw_histogram_axes(
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
pub(crate) fn bin_counts(durations: &[f64], min: f64, max: f64) -> Vec<usize> {
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
pub(crate) fn percentile(sorted: &[f64], fraction: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = (fraction * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

#[cfg(test)]
mod tests {
    use super::{bin_counts, percentile};
    use crate::layout::HISTOGRAM_BINS;

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
}

//! Prefetch hints: asking the CPU to bring a cache line in before it is
//! needed, for this thread or, through the caches the cores share, for
//! another.
//!
//! A prefetch is a hint with no effect on memory or on the program: it
//! never faults, whatever the address, and reads nothing into a register.
//! A stale or wrong address costs one wasted load at most, so the spans
//! here are plain addresses, never dereferenced, and may outlive what they
//! pointed at.
//!
//! # Warming code for another core
//!
//! After a paced frame loop's sleep, the frame's thread runs its first
//! microseconds on code that went cold: the engine's code is a few hundred
//! kilobytes spread over the binary, and a missed line of code stalls the
//! CPU's front end until it arrives. A worker that wakes early for the
//! frame (`pool/early_wake.rs`) spends its look prefetching that code
//! instead of only spinning ([`Warming`]), so that the frame thread's
//! misses find the lines in a cache the cores share or can hand over,
//! and the worker's own first steps of the frame run warm. (An earlier
//! attempt had the frame's thread prefetch 58 KiB of the engine's code
//! itself, at the frame's start: those frames got slower, see
//! `docs/performance/paced-frames.md`. Ahead of the frame, from the other core,
//! the warming does pay.)
//!
//! Which code: on Linux, the two sections of the frame's code (below),
//! the shared frames' first. Elsewhere the compiler decides where
//! functions land, and code that is
//! inlined has no address of its own, so the spans are worked out from a
//! few *anchors*, addresses of functions: the frame's entry and the
//! helper's and a queued node's task functions (always out of line), the
//! planned walk, the pool's wait and wake-up (out of line in the builds
//! measured; taking the address keeps a copy, which the compiler places
//! near the code that calls it). Anchors close to each other are taken as
//! one stretch of code, from the first to the last plus [`TAIL_BYTES`]
//! ([`code_spans`]). In the 2-core development VM's release builds,
//! before the sections, the engine's anchors lay within about 260 KB of
//! each other, one span; the warming started at its lowest address, the
//! planned walker's code.
//!
//! Before the code, a warming walks a graph's read-only arrays
//! ([`data_spans`]: its plan's lists, its dependency and successor rows,
//! its nodes and the addresses of their closures), a few hundred lines
//! that the frame reads first. Lines the nodes write (node states, run
//! records) are left out: every node would have to take its line back
//! from the worker's cache.
//!
//! # Warming the frame thread's own state
//!
//! Before the arrays come the structures the frame's thread works through
//! before its first node: the pool's shared state, the guest slot it takes
//! and that slot's parker (the pool's spans, [`MAX_POOL_SPANS`]), then the
//! graph's runtime and the state its frames share (the first two of the
//! graph's data spans): 187 lines on x86-64, each structure under
//! [`MAX_STRUCT_LINES`] (a test checks). Unlike the arrays, these lines are
//! written too: the graph's by the frame's thread and, during the frame,
//! by its helpers; the pool's also by its workers and by whoever queues
//! work. A line the worker warmed and the
//! frame's thread then writes is taken back from the worker's cache, which
//! on the development VM is still quicker than from memory; a worker that
//! wakes late may warm a line the frame's thread is writing, and costs it
//! that transfer. Frames ended a median of 0.7 µs sooner for it
//! (in-process A/B runs on the development VM,
//! `docs/performance/paced-frames.md`). The guest slot's lines are warmed even
//! when the frame's thread is a pool worker, which does not use them.
//!
//! # The frame's code in one place
//!
//! A frame run alone wakes no worker, so nothing warms for it: after a
//! paced loop's sleep its thread fetches every line of the engine's code
//! it runs from memory, and first walks the page tables for every page
//! those lines are on. A one-node frame run alone at 60 Hz ran about 2,600
//! instructions on 276 lines of code spread over 28 pages, and took about
//! 22 µs where it takes 1.3 back to back (a trace under Valgrind's
//! `lackey`, and a temporary probe; `docs/performance/paced-cold-start.md`).
//!
//! So on Linux the functions a frame runs from its entry to its return
//! (the runtime's, the statistics', the pool's frame bookkeeping and its
//! guest slot) carry
//! `#[cfg_attr(target_os = "linux", link_section = "engine_tasks_frame")]`,
//! and what a frame that shares runs besides (the planned walk, the
//! helper task, the pool's path for tasks and waits) carries the same with
//! `engine_tasks_shared` ([`CodeSection`]). The linker places each section
//! in one piece (about 33 KB for the first with lld, whatever the graphs'
//! data types: the runtime is not generic, `graph/context.rs`), and linkers
//! define `__start_`/`__stop_` symbols that bound a section whose name is
//! an identifier. The one-node frame then touched 17 pages.
//!
//! A frame that comes after a gap in its thread's frames
//! ([`COLD_CODE_NANOS`]) first asks for
//! every line of the frame section at once ([`CodeSection::warm`]), so that
//! the misses overlap instead of coming one after another. On the
//! development VM a one-node frame run alone at 60 Hz went from 22.6 to
//! 20.3 µs with the section (builds taking turns), and from 20.5 to 16.9
//! with the warming (in-process A/B). Unlike the 58 KiB of the engine's
//! code that the earlier attempt above warmed, the section holds only what
//! a frame runs. With the shared frames' section and the rest of the
//! change, the one-node frame's median went from 14-20 µs to 10-11 (builds
//! taking turns). Back to back the warming would cost about 0.3 µs a frame,
//! so frames that follow closely skip it. The frame's thread does not
//! warm the shared frames' section at the frame's start: a planned frame's
//! early-woken worker does, and the thread's own warming of it showed no
//! gain. Ahead of the frame, in the gap before its tick, the thread warms
//! both sections and the graph's spans if the loop waits with
//! `TaskGraph::sleep_until` (`graph/runtime/warm_ahead.rs`). Off Linux the
//! attributes do nothing and the sections are empty.

/// A gap since a thread's last frame (of any graph) after which its next
/// frame takes the engine's code to be cold and warms it
/// ([`CodeSection::warm`]): longer than frames back to back leave (a few
/// µs), shorter than a frame loop's sleep or a game's other work between
/// two frames.
pub(crate) const COLD_CODE_NANOS: f64 = 100_000.0;

/// Code past the last anchor of a span that belongs to it: that function
/// and its neighbours (the largest engine functions are 10-20 KB).
pub(crate) const TAIL_BYTES: usize = 16 * 1024;
/// Anchors further apart than this start a new span: the code between two
/// far anchors is mostly someone else's (a game binary's other crates).
pub(crate) const MAX_GAP_BYTES: usize = 256 * 1024;
/// The most lines all code spans hold: 384 KB, under half the development VM's
/// 1 MB L2, and about 6,000 prefetches (in 60 Hz runs of the 256-node
/// graph a look warmed about 3,000 before the frame's work showed up).
pub(crate) const MAX_LINES: usize = 6144;
/// The most code spans: the two sections on Linux, and elsewhere the
/// spans around the anchors, with room to spare.
pub(crate) const MAX_CODE_SPANS: usize = 4;
/// The most data spans of a graph: its runtime and frame state (module
/// docs), then the read-only arrays a planned frame's walk reads first
/// (its lists, dependency and successor rows, the nodes).
pub(crate) const MAX_DATA_SPANS: usize = 10;
/// The pool's spans a warming walks first: its shared state, the guest
/// slot and the guest slot's parker (module docs).
pub(crate) const MAX_POOL_SPANS: usize = 3;
/// The most lines one structure's span holds: the largest the frame's
/// thread works through (the pool's shared state) spans 68 on x86-64.
pub(crate) const MAX_STRUCT_LINES: usize = 128;
/// The most data lines: 64 KB, the graph's runtime and frame state (58
/// lines on x86-64) and the arrays of a graph of about 550 nodes (about
/// 110 bytes a node). A larger graph's first arrays take
/// the budget (each at most this much), the later ones get what is left.
pub(crate) const MAX_DATA_LINES: usize = 1024;
/// The most spans a graph publishes: the data's first (a few hundred lines
/// that a look warms in its first microseconds), then the code's.
pub(crate) const MAX_SPANS: usize = MAX_DATA_SPANS + MAX_CODE_SPANS;
/// The most spans a warming walks: the pool's, then the graph's.
const WARM_SPANS: usize = MAX_POOL_SPANS + MAX_SPANS;
/// The most anchors [`code_spans`] takes: a handful is enough to bound the
/// engine's code.
pub(crate) const MAX_ANCHORS: usize = 16;
/// Bytes in a cache line on the targets the engine is tuned for.
pub(crate) const LINE_BYTES: usize = 64;

/// Asks the CPU to start loading the cache line at `address` into this
/// core's caches. Any address is allowed (module docs).
#[inline(always)]
pub(crate) fn line(address: usize) {
    hint(address, Level::First);
}

/// The nearest cache a prefetch fills.
#[derive(Clone, Copy)]
enum Level {
    /// The first-level data cache (and those below it).
    First,
    /// The second-level cache (and those below it).
    Second,
}

/// Asks the CPU to start loading the cache line at `address` into this
/// core's caches down to `level`. Any address is allowed (module docs).
#[inline(always)]
fn hint(address: usize, level: Level) {
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0, _MM_HINT_T1};
        let address = address as *const i8;
        // SAFETY: `_mm_prefetch` needs SSE, which every x86_64 CPU has (it
        // is in the target's baseline); it is a hint that never faults,
        // whatever the address, and reads nothing into the program.
        unsafe {
            match level {
                Level::First => _mm_prefetch::<_MM_HINT_T0>(address),
                Level::Second => _mm_prefetch::<_MM_HINT_T1>(address),
            }
        }
    }
    #[cfg(any(not(target_arch = "x86_64"), miri))]
    let _ = (address, level);
}

/// Asks the CPU to start loading the cache line at `address` into this
/// core's caches for a write: the line arrives owned by this core, so the
/// store or locked swap that follows finds no other core's copy to
/// invalidate. Any address is allowed (module docs).
#[inline(always)]
pub(crate) fn line_for_write(address: usize) {
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    // SAFETY: `prefetchw` is a hint that never faults, whatever the
    // address, and changes no register, flag or memory; x86-64 CPUs that
    // lack it (Intel before Broadwell) decode its opcode as a no-op.
    unsafe {
        std::arch::asm!(
            "prefetchw [{0}]",
            in(reg) address,
            options(nostack, preserves_flags, readonly)
        );
    }
    #[cfg(any(not(target_arch = "x86_64"), miri))]
    let _ = address;
}

/// Asks the CPU to start loading the cache line holding `value` (its
/// first byte): a hint with no effect on memory.
#[inline(always)]
pub(crate) fn value<T>(value: &T) {
    line(value as *const T as usize);
}

/// A stretch of memory by whole cache lines: `lines` lines from the one
/// holding `start`. Empty when `lines` is 0.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Span {
    pub(crate) start: usize,
    pub(crate) lines: usize,
}

impl Span {
    /// The lines of one structure, at most [`MAX_STRUCT_LINES`].
    pub(crate) fn of_value<T>(value: &T) -> Span {
        Span::of(std::slice::from_ref(value), MAX_STRUCT_LINES)
    }

    /// The lines of `slice`, at most `max_lines` from its start.
    pub(crate) fn of<T>(slice: &[T], max_lines: usize) -> Span {
        let span = Span::of_bytes(slice.as_ptr() as usize, std::mem::size_of_val(slice));
        Span {
            lines: span.lines.min(max_lines),
            ..span
        }
    }

    /// The lines of the `bytes` bytes from `address`.
    pub(crate) fn of_bytes(address: usize, bytes: usize) -> Span {
        let start = address - address % LINE_BYTES;
        let lines = if bytes == 0 {
            0
        } else {
            (address + bytes - start).div_ceil(LINE_BYTES)
        };
        Span { start, lines }
    }
}

/// The data spans of `arrays`, in order, at most [`MAX_DATA_LINES`] lines
/// in all (the first arrays first); arrays past the first
/// [`MAX_DATA_SPANS`] are left out.
pub(crate) fn data_spans(arrays: &[Span]) -> [Span; MAX_DATA_SPANS] {
    let mut spans = [Span::default(); MAX_DATA_SPANS];
    let mut budget = MAX_DATA_LINES;
    for (span, array) in spans.iter_mut().zip(arrays) {
        let lines = array.lines.min(budget);
        budget -= lines;
        *span = Span {
            start: array.start,
            lines,
        };
    }
    spans
}

/// The spans a warming walks: `data` first, then `code`.
pub(crate) fn warm_spans(
    data: &[Span; MAX_DATA_SPANS],
    code: &[Span; MAX_CODE_SPANS],
) -> [Span; MAX_SPANS] {
    std::array::from_fn(|i| {
        if i < MAX_DATA_SPANS {
            data[i]
        } else {
            code[i - MAX_DATA_SPANS]
        }
    })
}

/// A key of `spans` (FNV-1a over their starts and lengths), so that a
/// publisher can tell with one load that the spans it would publish are
/// the ones already out. A collision only leaves a stale hint.
pub(crate) fn spans_key(spans: &[Span]) -> u64 {
    const PRIME: u64 = 0x100_0000_01b3;
    spans
        .iter()
        .flat_map(|span| [span.start as u64, span.lines as u64])
        .fold(0xcbf2_9ce4_8422_2325, |key, word| {
            (key ^ word).wrapping_mul(PRIME)
        })
}

/// The spans of code around `anchors` (module docs): anchors within
/// [`MAX_GAP_BYTES`] of the previous one share a span, which runs from the
/// first one's line to [`TAIL_BYTES`] past the last. At most [`MAX_CODE_SPANS`]
/// spans and [`MAX_LINES`] lines in all, given out in address order (the
/// lowest spans get the budget first). At most [`MAX_ANCHORS`] anchors
/// count.
pub(crate) fn code_spans(anchors: &[usize]) -> [Span; MAX_CODE_SPANS] {
    debug_assert!(anchors.len() <= MAX_ANCHORS, "more anchors than count");
    let mut sorted = [0usize; MAX_ANCHORS];
    let count = anchors.len().min(sorted.len());
    sorted[..count].copy_from_slice(&anchors[..count]);
    let sorted = &mut sorted[..count];
    sorted.sort_unstable();
    let mut spans = [Span::default(); MAX_CODE_SPANS];
    let mut budget = MAX_LINES;
    let mut next = 0;
    let mut i = 0;
    while i < sorted.len() && next < MAX_CODE_SPANS && budget > 0 {
        let first = sorted[i];
        let mut last = first;
        i += 1;
        while i < sorted.len() && sorted[i] - last <= MAX_GAP_BYTES {
            last = sorted[i];
            i += 1;
        }
        let start = first - first % LINE_BYTES;
        let end = last.saturating_add(TAIL_BYTES);
        let lines = (end - start).div_ceil(LINE_BYTES).min(budget);
        budget -= lines;
        spans[next] = Span { start, lines };
        next += 1;
    }
    spans
}

/// A walk over spans, a few lines at a time, in order: what an early-woken
/// worker prefetches between its looks for work.
#[derive(Debug)]
pub(crate) struct Warming {
    spans: [Span; WARM_SPANS],
    /// The span being warmed, and the next line in it.
    span: usize,
    line: usize,
    warmed: usize,
}

impl Warming {
    /// Walks `pool`'s spans, then `graph`'s.
    pub(crate) fn new(pool: [Span; MAX_POOL_SPANS], graph: [Span; MAX_SPANS]) -> Self {
        Warming {
            spans: std::array::from_fn(|i| {
                if i < MAX_POOL_SPANS {
                    pool[i]
                } else {
                    graph[i - MAX_POOL_SPANS]
                }
            }),
            span: 0,
            line: 0,
            warmed: 0,
        }
    }

    /// Nothing to warm.
    pub(crate) fn none() -> Self {
        Warming::new(
            [Span::default(); MAX_POOL_SPANS],
            [Span::default(); MAX_SPANS],
        )
    }

    /// Prefetches up to `lines` more lines; how many it did (0 once every
    /// line was).
    pub(crate) fn step(&mut self, lines: usize) -> usize {
        self.step_with(lines, line)
    }

    /// [`Warming::step`], handing each line's address to `fetch`.
    fn step_with(&mut self, lines: usize, mut fetch: impl FnMut(usize)) -> usize {
        let mut done = 0;
        while done < lines {
            let Some(span) = self.spans.get(self.span) else {
                break;
            };
            if self.line >= span.lines {
                self.span += 1;
                self.line = 0;
                continue;
            }
            let take = (lines - done).min(span.lines - self.line);
            // Wrapping: a span read torn between two graphs' may hold any
            // address, and every address may be prefetched.
            let first = span.start.wrapping_add(self.line * LINE_BYTES);
            for k in 0..take {
                fetch(first.wrapping_add(k * LINE_BYTES));
            }
            self.line += take;
            done += take;
        }
        self.warmed += done;
        done
    }

    /// Lines prefetched so far.
    pub(crate) fn warmed(&self) -> usize {
        self.warmed
    }
}

/// A linker section that holds the engine's code for a kind of frame
/// (module docs), on Linux.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum CodeSection {
    /// `engine_tasks_frame`: what every frame runs from its entry to its
    /// return.
    Frame,
    /// `engine_tasks_shared`: what a frame that shares runs besides, the
    /// planned walk and the pool's path for tasks and waits.
    Shared,
}

impl CodeSection {
    /// The section's lines; empty off Linux (and under Miri, which has no
    /// linker sections).
    #[cfg(all(target_os = "linux", not(miri)))]
    #[link_section = "engine_tasks_frame"]
    pub(crate) fn span(self) -> Span {
        let (start, end) = match self {
            CodeSection::Frame => frame_section_bounds(),
            CodeSection::Shared => shared_section_bounds(),
        };
        Span::of_bytes(start, end.saturating_sub(start))
    }

    /// The section's lines: none off Linux (module docs).
    #[cfg(any(not(target_os = "linux"), miri))]
    pub(crate) fn span(self) -> Span {
        Span::default()
    }

    /// Asks for every line of the section to be brought into this core's
    /// second-level cache, all at once, so that the frame's misses on its
    /// code overlap (module docs). A hint: nothing is read into the program.
    #[cfg_attr(target_os = "linux", link_section = "engine_tasks_frame")]
    pub(crate) fn warm(self) {
        let code = self.span();
        for k in 0..code.lines {
            line_to_l2(code.start + k * LINE_BYTES);
        }
    }
}

/// The addresses the linker gives the first byte of `engine_tasks_frame`
/// and the byte past its end. Each section's bounds are read by a function
/// in it, so whenever the reference is linked the section holds at least
/// that function (a linker that collects unused sections does not keep one
/// for its bounds' symbols alone).
#[cfg(all(target_os = "linux", not(miri)))]
#[link_section = "engine_tasks_frame"]
#[inline(never)]
fn frame_section_bounds() -> (usize, usize) {
    extern "C" {
        static __start_engine_tasks_frame: u8;
        static __stop_engine_tasks_frame: u8;
    }
    (
        &raw const __start_engine_tasks_frame as usize,
        &raw const __stop_engine_tasks_frame as usize,
    )
}

/// [`frame_section_bounds`] for `engine_tasks_shared`.
#[cfg(all(target_os = "linux", not(miri)))]
#[link_section = "engine_tasks_shared"]
#[inline(never)]
fn shared_section_bounds() -> (usize, usize) {
    extern "C" {
        static __start_engine_tasks_shared: u8;
        static __stop_engine_tasks_shared: u8;
    }
    (
        &raw const __start_engine_tasks_shared as usize,
        &raw const __stop_engine_tasks_shared as usize,
    )
}

/// Asks the CPU to start loading the cache line at `address` into this
/// core's second-level cache (not the first, which code does not share
/// with data). Any address is allowed (module docs).
#[inline(always)]
pub(crate) fn line_to_l2(address: usize) {
    hint(address, Level::Second);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn close_anchors_make_one_span_from_the_first_line_to_the_tail() {
        let spans = code_spans(&[0x10_0040 + 5, 0x10_0000 + 70, 0x12_0000]);
        assert_eq!(spans[0].start, 0x10_0040);
        assert_eq!(
            spans[0].lines,
            (0x12_0000 + TAIL_BYTES - 0x10_0040) / LINE_BYTES
        );
        assert!(spans[1..].iter().all(|s| s.lines == 0));
    }

    #[test]
    fn far_anchors_make_separate_spans() {
        let far = 0x10_0000 + MAX_GAP_BYTES + 64;
        let spans = code_spans(&[far, 0x10_0000]);
        assert_eq!(spans[0].start, 0x10_0000);
        assert_eq!(spans[0].lines, TAIL_BYTES / LINE_BYTES);
        assert_eq!(spans[1].start, far);
        assert_eq!(spans[1].lines, TAIL_BYTES / LINE_BYTES);
    }

    #[test]
    fn spans_stay_within_the_line_budget_and_the_span_count() {
        // A chain of anchors each just within the gap: one long span.
        let chain: Vec<usize> = (0..8).map(|i| 0x100_0000 + i * MAX_GAP_BYTES).collect();
        let spans = code_spans(&chain);
        assert_eq!(spans[0].lines, MAX_LINES);
        assert!(spans[1..].iter().all(|s| s.lines == 0));
        // More far-apart anchors than spans: the lowest ones get spans.
        let scattered: Vec<usize> = (0..8).map(|i| i * 16 * MAX_GAP_BYTES).collect();
        let spans = code_spans(&scattered);
        for (k, span) in spans.iter().enumerate() {
            assert_eq!(span.start, k * 16 * MAX_GAP_BYTES);
            assert_eq!(span.lines, TAIL_BYTES / LINE_BYTES);
        }
        // The budget runs out in the second span: it gets what is left,
        // and no third span follows.
        let first_lines = MAX_LINES - 10;
        let long = (first_lines - TAIL_BYTES / LINE_BYTES) * LINE_BYTES;
        let far = 1 << 40;
        let spans = code_spans(&[0, long / 2, long, far, 2 * far]);
        assert_eq!(spans[0].lines, first_lines);
        assert_eq!(
            spans[1],
            Span {
                start: far,
                lines: 10
            }
        );
        assert_eq!(spans[2].lines, 0);
    }

    #[test]
    fn prefetches_of_any_address_never_fault_and_change_nothing() {
        let value = std::hint::black_box([7u64; 8]);
        // Null, unmapped, the kernel's half, and a live value.
        for address in [0, 8, 1 << 46, usize::MAX - 63, &value as *const _ as usize] {
            line(address);
            line_for_write(address);
        }
        assert_eq!(value, [7u64; 8]);
    }

    #[test]
    fn a_slice_spans_the_lines_it_touches() {
        #[repr(align(64))]
        struct Lines([u8; 256]);
        let lines = Lines([0; 256]);
        let base = lines.0.as_ptr() as usize;
        let span = |range: std::ops::Range<usize>| Span::of(&lines.0[range], usize::MAX);
        // One whole line, ending on a line boundary: no extra line.
        assert_eq!(
            span(0..64),
            Span {
                start: base,
                lines: 1
            }
        );
        // Eight bytes across a boundary: two lines.
        assert_eq!(
            span(60..68),
            Span {
                start: base,
                lines: 2
            }
        );
        // Within the third line.
        assert_eq!(
            span(130..140),
            Span {
                start: base + 128,
                lines: 1
            }
        );
        assert_eq!(span(0..256).lines, 4);
        // Empty slices, and slices of a zero-sized type, span nothing.
        assert_eq!(span(10..10).lines, 0);
        assert_eq!(Span::of(&[(); 5][..], usize::MAX).lines, 0);
        // At most `max_lines`, from the start.
        assert_eq!(
            Span::of(&lines.0[..], 3),
            Span {
                start: base,
                lines: 3
            }
        );
    }

    #[test]
    fn data_spans_stay_in_budget_and_come_before_the_code() {
        let big = Span {
            start: 0x10_0000,
            lines: MAX_DATA_LINES - 3,
        };
        let small = Span {
            start: 0x90_0000,
            lines: 10,
        };
        let data = data_spans(&[big, small, small]);
        assert_eq!(data[0], big);
        assert_eq!(data[1].lines, 3);
        assert_eq!(data[2].lines, 0);
        // Arrays past the first `MAX_DATA_SPANS` are left out.
        let many = [small; MAX_DATA_SPANS + 2];
        let data_of_many = data_spans(&many);
        assert!(data_of_many.iter().all(|s| *s == small));
        let code = code_spans(&[0x50_0000]);
        let all = warm_spans(&data, &code);
        assert_eq!(&all[..MAX_DATA_SPANS], &data[..]);
        assert_eq!(&all[MAX_DATA_SPANS..], &code[..]);
    }

    #[test]
    fn a_structure_spans_its_lines_up_to_the_cap() {
        #[repr(align(64))]
        struct Three([u8; 3 * 64]);
        let three = Three([0; 3 * 64]);
        assert_eq!(std::mem::size_of_val(&three.0), 3 * LINE_BYTES);
        assert_eq!(
            Span::of_value(&three),
            Span {
                start: &three as *const Three as usize,
                lines: 3
            }
        );
        let huge = vec![[0u8; (MAX_STRUCT_LINES + 5) * 64]; 1];
        assert_eq!(Span::of_value(&huge[0]).lines, MAX_STRUCT_LINES);
    }

    #[test]
    fn warming_visits_the_pools_lines_then_the_graphs_once_in_steps() {
        let mut pool = [Span::default(); MAX_POOL_SPANS];
        pool[1] = Span {
            start: 0x40_0000,
            lines: 2,
        };
        let mut graph = [Span::default(); MAX_SPANS];
        graph[0] = Span {
            start: 0x1000,
            lines: 5,
        };
        graph[2] = Span {
            start: 0x9000,
            lines: 3,
        };
        let mut warming = Warming::new(pool, graph);
        let mut seen = Vec::new();
        while warming.step_with(3, |a| seen.push(a)) > 0 {}
        let expected: Vec<usize> = (0..2)
            .map(|k| 0x40_0000 + k * LINE_BYTES)
            .chain((0..5).map(|k| 0x1000 + k * LINE_BYTES))
            .chain((0..3).map(|k| 0x9000 + k * LINE_BYTES))
            .collect();
        assert_eq!(seen, expected);
        assert_eq!(warming.warmed(), 10);
        assert_eq!(Warming::none().step(32), 0);
    }

    /// Each code section holds the functions compiled into it and not
    /// others; both are empty off Linux.
    #[test]
    #[cfg(not(loom))]
    fn each_code_section_holds_its_functions_and_no_others() {
        let frame = CodeSection::Frame.span();
        let shared = CodeSection::Shared.span();
        let within =
            |span: Span, f: usize| (span.start..span.start + span.lines * LINE_BYTES).contains(&f);
        let warm = CodeSection::warm as *const () as usize;
        let inject = crate::pool::registry::Shared::inject_structured as *const () as usize;
        let elsewhere = code_spans as *const () as usize;
        if cfg!(all(target_os = "linux", not(miri))) {
            for span in [frame, shared] {
                assert!(span.lines > 0 && span.start % LINE_BYTES == 0, "{span:?}");
                assert!(!within(span, elsewhere), "{elsewhere:#x} inside {span:?}");
            }
            assert!(within(frame, warm) && !within(shared, warm));
            assert!(within(shared, inject) && !within(frame, inject));
        } else {
            assert_eq!((frame, shared), (Span::default(), Span::default()));
        }
    }
}

//! A timeline recorder for people without Tracy: what every thread ran, stole
//! and waited for, written as Chrome trace-event JSON (Perfetto and
//! `chrome://tracing` open it; `tools/trace-svg` draws it).
//!
//! # Recording
//!
//! [`start`] begins a session; every instrumented point (task, graph node,
//! steal, park, wake-up, wait, blocking task, frame) then appends a fixed-size
//! event to its thread's buffer. [`stop`] ends the session and returns the
//! [`Timeline`]. While no session runs, an instrumented point costs one
//! relaxed load of a global flag.
//!
//! # Buffers
//!
//! One buffer per thread per session, allocated on the thread's first event
//! with the session's capacity and never grown, so memory is bounded by
//! threads x capacity. The capacity is at most [`MAX_CAPACITY`]; a thread
//! whose buffer cannot be allocated records nothing (its events count as
//! dropped) instead of aborting the process. The session, then the
//! [`Timeline`] that [`stop`] returns, owns the buffers; a thread keeps only
//! a weak reference to its own, so dropping the `Timeline` frees them all,
//! even on threads that live on and record nothing more, or that sleep
//! inside a span (a parked worker: the span's end is then not recorded).
//! Only the owning thread writes: it fills the next slot,
//! then publishes it by storing the new length (Release); readers load the
//! length (Acquire) and read only published slots. No lock is taken on the
//! recording path after a thread's first event.
//!
//! A span's begin is recorded only if the buffer can still hold the ends of
//! every span open on the thread; its end is always recorded (while its
//! `Timeline` lives), into the
//! buffer its begin went to. So a full buffer drops whole spans (counted in
//! [`Timeline::dropped`]), never half of one, and every recorded begin has
//! its end unless the span was still open when the session stopped; the
//! writer closes those at the last recorded time.

use crate::clock::{self, TickRate};
use crate::lane::Lane;
use std::cell::{Cell, RefCell, UnsafeCell};
use std::collections::HashMap;
use std::fmt;
use std::io::{self, Write};
use std::marker::PhantomData;
use std::mem::MaybeUninit;
use std::panic::Location;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Instant;

/// Events per thread per session unless [`start_with_capacity`] says
/// otherwise: 2^18 events of 40 bytes, 10 MiB per thread.
pub const DEFAULT_CAPACITY: usize = 1 << 18;

/// The largest capacity [`start_with_capacity`] accepts: 2^24 events, 640 MiB
/// per thread, over a minute of a busy worker's events.
pub const MAX_CAPACITY: usize = 1 << 24;

/// Why a session did not start.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum TimelineError {
    /// A session is already recording; [`stop`] it first.
    AlreadyRecording,
    /// The capacity asked for is over [`MAX_CAPACITY`].
    CapacityTooLarge {
        /// Events per thread asked for.
        requested: usize,
    },
}

impl fmt::Display for TimelineError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TimelineError::AlreadyRecording => f.write_str("a timeline session is already recording"),
            TimelineError::CapacityTooLarge { requested } => write!(
                f,
                "a timeline capacity of {requested} events per thread is over the maximum of {MAX_CAPACITY}"
            ),
        }
    }
}

impl std::error::Error for TimelineError {}

/// Whether a session is recording. Relaxed everywhere: a point that misses
/// the start or the stop by a moment records or skips one event.
static RECORDING: AtomicBool = AtomicBool::new(false);
/// The current session's number; buffers of older sessions are not used.
static SESSION: AtomicU64 = AtomicU64::new(0);

struct Session {
    number: u64,
    capacity: usize,
    started: Instant,
    start_tick: u64,
    buffers: Vec<Arc<ThreadBuffer>>,
}

fn sessions() -> &'static Mutex<Option<Session>> {
    static CURRENT: OnceLock<Mutex<Option<Session>>> = OnceLock::new();
    CURRENT.get_or_init(|| Mutex::new(None))
}

/// Graph node names, interned when a graph is built so that events carry a
/// number instead of a string. Each distinct name is kept once for the
/// process's life, so rebuilding graphs with the same names adds nothing.
#[derive(Default)]
struct Names {
    /// By number.
    list: Vec<Arc<str>>,
    /// Number by name, so a graph of n nodes interns in O(n), not O(n²).
    numbers: HashMap<Arc<str>, u32>,
}

fn names() -> &'static Mutex<Names> {
    static NAMES: OnceLock<Mutex<Names>> = OnceLock::new();
    NAMES.get_or_init(Mutex::default)
}

/// Registers a node name and returns its number (not on a hot path).
pub(crate) fn intern(name: &str) -> u32 {
    let mut names = names().lock().unwrap_or_else(|e| e.into_inner());
    if let Some(&number) = names.numbers.get(name) {
        return number;
    }
    let number = names.list.len() as u32;
    let name: Arc<str> = name.into();
    names.list.push(name.clone());
    names.numbers.insert(name, number);
    number
}

/// What an event is about.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum Category {
    Task,
    Node,
    Park,
    Wait,
    Blocking,
    Frame,
    Steal,
    Wake,
}

impl Category {
    fn as_str(self) -> &'static str {
        match self {
            Category::Task => "task",
            Category::Node => "node",
            Category::Park => "park",
            Category::Wait => "wait",
            Category::Blocking => "blocking",
            Category::Frame => "frame",
            Category::Steal => "steal",
            Category::Wake => "wake",
        }
    }
}

/// The label of a span.
#[derive(Copy, Clone, Debug)]
pub(crate) enum Label {
    Fixed(&'static str),
    Site(&'static Location<'static>),
    Node(u32),
    Frame(u64),
}

#[derive(Copy, Clone, Debug)]
enum Kind {
    Begin,
    End,
    Instant,
}

/// One recorded event. `a` and `b` are per-category arguments: the lane for
/// tasks and nodes; victim (`u32::MAX`: injector), lane and tasks taken for
/// steals; the woken slot for wake-ups.
#[derive(Copy, Clone, Debug)]
struct Event {
    tick: u64,
    kind: Kind,
    category: Category,
    label: Label,
    a: u32,
    b: u32,
    c: u32,
}

/// One thread's events in one session; see the module docs.
struct ThreadBuffer {
    session: u64,
    thread: String,
    tid: u64,
    slots: Box<[UnsafeCell<MaybeUninit<Event>>]>,
    len: AtomicUsize,
    /// Spans begun and not yet ended (owner only; atomic to keep the type
    /// `Sync`).
    open: AtomicUsize,
    dropped: AtomicU64,
}

// SAFETY: slots are written only by the owning thread, each exactly once and
// before `len` publishes it with a Release store; readers read only slots
// below a length they loaded with Acquire. Everything else is atomic or
// immutable.
unsafe impl Sync for ThreadBuffer {}
// SAFETY: as above; `Event` is plain data.
unsafe impl Send for ThreadBuffer {}

impl ThreadBuffer {
    /// Appends if `reserve` more slots stay free afterwards; owner only.
    fn push(&self, event: Event, reserve: usize) -> bool {
        // Relaxed: only this thread writes `len`.
        let len = self.len.load(Ordering::Relaxed);
        if len + 1 + reserve > self.slots.len() {
            return false;
        }
        // SAFETY: slot `len` is not yet published, so no reader looks at it,
        // and only the owner (us) writes.
        unsafe { (*self.slots[len].get()).write(event) };
        // Release: publishes the slot to readers' Acquire load of `len`.
        self.len.store(len + 1, Ordering::Release);
        true
    }

    fn events(&self) -> impl Iterator<Item = Event> + '_ {
        // Acquire: pairs with the Release store in `push`.
        let len = self.len.load(Ordering::Acquire);
        self.slots[..len].iter().map(|slot| {
            // SAFETY: slots below a published length are initialised and no
            // longer written.
            unsafe { (*slot.get()).assume_init() }
        })
    }
}

thread_local! {
    /// This thread's buffer in the latest session it recorded in; weak, so
    /// that the buffer goes with its `Timeline` (module docs).
    static BUFFER: RefCell<Weak<ThreadBuffer>> = const { RefCell::new(Weak::new()) };
    static TID: Cell<u64> = const { Cell::new(0) };
}

fn thread_id() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    TID.with(|tid| {
        if tid.get() == 0 {
            // Relaxed: only uniqueness matters.
            tid.set(NEXT.fetch_add(1, Ordering::Relaxed));
        }
        tid.get()
    })
}

/// This thread's buffer for the running session, made on first use.
fn buffer() -> Option<Arc<ThreadBuffer>> {
    // Relaxed: see `RECORDING`.
    let session = SESSION.load(Ordering::Relaxed);
    BUFFER
        .try_with(|slot| {
            let mut slot = slot.borrow_mut();
            if let Some(buffer) = slot.upgrade().filter(|b| b.session == session) {
                return Some(buffer);
            }
            let mut current = sessions().lock().unwrap_or_else(|e| e.into_inner());
            let current = current.as_mut().filter(|s| s.number == session)?;
            let buffer = Arc::new(ThreadBuffer {
                session,
                thread: std::thread::current()
                    .name()
                    .map_or_else(|| format!("thread {}", thread_id()), str::to_owned),
                tid: thread_id(),
                slots: allocate_slots(current.capacity),
                len: AtomicUsize::new(0),
                open: AtomicUsize::new(0),
                dropped: AtomicU64::new(0),
            });
            current.buffers.push(buffer.clone());
            *slot = Arc::downgrade(&buffer);
            Some(buffer)
        })
        .ok()
        .flatten()
}

#[inline(always)]
pub(crate) fn recording() -> bool {
    // Relaxed: see `RECORDING`.
    RECORDING.load(Ordering::Relaxed)
}

/// An open span: ends (records its end event) on drop. Not `Send`: only the
/// thread that owns the buffer may write to it. It holds the buffer weakly,
/// as the thread does: a span open when its `Timeline` is dropped (a parked
/// worker's) does not keep the buffer, and its end is not recorded.
pub(crate) struct OpenSpan {
    buffer: Weak<ThreadBuffer>,
    category: Category,
    _owner_thread: PhantomData<*const ()>,
}

impl Drop for OpenSpan {
    fn drop(&mut self) {
        // The timeline went, and with it the buffer and the span's begin.
        let Some(buffer) = self.buffer.upgrade() else {
            return;
        };
        let end = Event {
            tick: clock::ticks(),
            kind: Kind::End,
            category: self.category,
            label: Label::Fixed(""),
            a: 0,
            b: 0,
            c: 0,
        };
        // The begin reserved room for this end.
        let pushed = buffer.push(end, 0);
        debug_assert!(pushed, "a span's end always fits");
        // Relaxed: owner-only counter.
        buffer.open.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Begins a span if a session records; `a` is the lane where it applies.
/// Inlined down to the one relaxed load of `recording` (every task and
/// node passes here); the recording itself stays out of line.
#[inline(always)]
pub(crate) fn begin(category: Category, label: Label, a: u32) -> Option<OpenSpan> {
    if !recording() {
        return None;
    }
    begin_recorded(category, label, a)
}

#[cold]
#[inline(never)]
fn begin_recorded(category: Category, label: Label, a: u32) -> Option<OpenSpan> {
    let buffer = buffer()?;
    // Relaxed: owner-only counter.
    let open = buffer.open.load(Ordering::Relaxed);
    let event = Event {
        tick: clock::ticks(),
        kind: Kind::Begin,
        category,
        label,
        a,
        b: 0,
        c: 0,
    };
    // Keep room for this span's end and every open span's end.
    if !buffer.push(event, open + 1) {
        // Relaxed: a statistic.
        buffer.dropped.fetch_add(1, Ordering::Relaxed);
        return None;
    }
    buffer.open.store(open + 1, Ordering::Relaxed);
    Some(OpenSpan {
        buffer: Arc::downgrade(&buffer),
        category,
        _owner_thread: PhantomData,
    })
}

/// Records an instant event if a session records (inlined down to the
/// check, as [`begin`]).
#[inline(always)]
pub(crate) fn instant(category: Category, a: u32, b: u32, c: u32) {
    if !recording() {
        return;
    }
    instant_recorded(category, a, b, c);
}

#[cold]
#[inline(never)]
fn instant_recorded(category: Category, a: u32, b: u32, c: u32) {
    let Some(buffer) = buffer() else { return };
    // Relaxed: owner-only counter.
    let open = buffer.open.load(Ordering::Relaxed);
    let event = Event {
        tick: clock::ticks(),
        kind: Kind::Instant,
        category,
        label: Label::Fixed(category.as_str()),
        a,
        b,
        c,
    };
    if !buffer.push(event, open) {
        // Relaxed: a statistic.
        buffer.dropped.fetch_add(1, Ordering::Relaxed);
    }
}

/// A thread's event slots, or none if the memory is not there: its events
/// are then dropped and counted, and the process goes on.
fn allocate_slots(capacity: usize) -> Box<[UnsafeCell<MaybeUninit<Event>>]> {
    let mut slots = Vec::new();
    if slots.try_reserve_exact(capacity).is_err() {
        return Box::new([]);
    }
    slots.resize_with(capacity, || UnsafeCell::new(MaybeUninit::uninit()));
    slots.into_boxed_slice()
}

/// Lane as recorded in events.
pub(crate) fn lane_code(lane: Lane) -> u32 {
    lane as u32
}

/// Starts a recording session with [`DEFAULT_CAPACITY`] events per thread.
/// Fails (and changes nothing) if a session is already recording.
///
/// ```
/// use engine_tasks::timeline;
///
/// let pool = engine_tasks::Pool::builder().threads(1).build().unwrap();
/// timeline::start().expect("no other session records");
/// let task = pool.spawn(engine_tasks::Lane::Normal, || 1).unwrap();
/// assert_eq!(task.join().unwrap(), 1);
/// let recorded = timeline::stop().expect("the session ran");
/// assert_eq!(recorded.count("task").events, 1);
/// // `recorded.write_chrome_trace(file)` writes it for Perfetto.
/// ```
pub fn start() -> Result<(), TimelineError> {
    start_with_capacity(DEFAULT_CAPACITY)
}

/// Starts a recording session with room for `capacity` events per thread
/// (at least 16, at most [`MAX_CAPACITY`]). Fails (and changes nothing) if a
/// session is already recording or the capacity is over the maximum.
///
/// ```
/// use engine_tasks::timeline::{self, TimelineError, MAX_CAPACITY};
///
/// // Room for a short capture of a few frames per thread.
/// timeline::start_with_capacity(16 * 1024).unwrap();
/// assert!(timeline::is_recording());
/// assert_eq!(timeline::start(), Err(TimelineError::AlreadyRecording));
/// let capture = timeline::stop().unwrap();
/// assert_eq!(capture.dropped(), 0);
///
/// let too_big = timeline::start_with_capacity(MAX_CAPACITY + 1);
/// assert!(matches!(too_big, Err(TimelineError::CapacityTooLarge { .. })));
/// ```
pub fn start_with_capacity(capacity: usize) -> Result<(), TimelineError> {
    if capacity > MAX_CAPACITY {
        return Err(TimelineError::CapacityTooLarge {
            requested: capacity,
        });
    }
    let mut current = sessions().lock().unwrap_or_else(|e| e.into_inner());
    if current.is_some() {
        return Err(TimelineError::AlreadyRecording);
    }
    // Relaxed: the session mutex orders the bookkeeping; events racing the
    // start are simply not recorded.
    let number = SESSION.fetch_add(1, Ordering::Relaxed) + 1;
    *current = Some(Session {
        number,
        capacity: capacity.max(16),
        started: Instant::now(),
        start_tick: clock::ticks(),
        buffers: Vec::new(),
    });
    RECORDING.store(true, Ordering::Relaxed);
    Ok(())
}

/// Whether a session is recording.
pub fn is_recording() -> bool {
    recording()
}

/// Ends the session and returns what it recorded (`None` if none ran).
/// Spans still open (a parked thread, a running task) are closed at the
/// last recorded time when the timeline is written.
pub fn stop() -> Option<Timeline> {
    let session = {
        let mut current = sessions().lock().unwrap_or_else(|e| e.into_inner());
        // Under the lock, as `start` sets it: a `start` racing this `stop`
        // either comes after it (a new session, recording) or before it
        // (its session taken here, recording off), never recording with no
        // session. Relaxed: the lock orders the two stores.
        RECORDING.store(false, Ordering::Relaxed);
        current.take()
    }?;
    let mut rate = TickRate::new();
    rate.observe(session.started, session.start_tick);
    rate.observe(Instant::now(), clock::ticks());
    Some(Timeline {
        start_tick: session.start_tick,
        nanos_per_tick: rate.nanos_per_tick(),
        buffers: session.buffers,
        names: names()
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .list
            .clone(),
    })
}

/// A finished recording.
///
/// ```
/// use engine_tasks::{timeline, Lane, Pool, TaskGraph};
///
/// let mut builder = TaskGraph::<()>::builder();
/// builder.node("physics", Lane::FrameCritical, |_| {});
/// builder.node("render", Lane::FrameCritical, |_| {}).after(["physics"]);
/// let mut graph = builder.build().unwrap();
/// let pool = Pool::builder().threads(1).build().unwrap();
///
/// timeline::start().unwrap();
/// for _ in 0..3 {
///     graph.run(&pool, &()).unwrap();
/// }
/// let recorded = timeline::stop().unwrap();
/// assert_eq!(recorded.count("frame").events, 3);
/// assert_eq!(recorded.count("node").events, 6);
/// assert_eq!(recorded.dropped(), 0);
/// ```
pub struct Timeline {
    start_tick: u64,
    nanos_per_tick: f64,
    buffers: Vec<Arc<ThreadBuffer>>,
    names: Vec<Arc<str>>,
}

/// Counts of one category of events in a [`Timeline`], for tests and tools.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct CategoryCount {
    /// Spans (begin events) or instant events.
    pub events: u64,
    /// For steals: attempts that took at least one task.
    pub successful: u64,
    /// For steals: attempts on the injector rather than a peer.
    pub from_injector: u64,
    /// For steals: successful attempts on the injector.
    pub successful_from_injector: u64,
}

impl Timeline {
    /// Events dropped because a thread's buffer was full.
    pub fn dropped(&self) -> u64 {
        self.buffers
            .iter()
            // Relaxed: the session is over.
            .map(|b| b.dropped.load(Ordering::Relaxed))
            .sum()
    }

    /// Threads that recorded events.
    pub fn threads(&self) -> usize {
        self.buffers.len()
    }

    /// How many events of `category` were recorded: one of "task", "node",
    /// "park", "wait", "blocking", "frame", "steal", "wake".
    pub fn count(&self, category: &str) -> CategoryCount {
        let mut count = CategoryCount::default();
        for event in self.buffers.iter().flat_map(|b| b.events()) {
            if event.category.as_str() == category && !matches!(event.kind, Kind::End) {
                count.events += 1;
                if event.category == Category::Steal {
                    let injector = event.a == u32::MAX;
                    count.from_injector += u64::from(injector);
                    if event.c > 0 {
                        count.successful += 1;
                        count.successful_from_injector += u64::from(injector);
                    }
                }
            }
        }
        count
    }

    fn micros(&self, tick: u64) -> f64 {
        tick.saturating_sub(self.start_tick) as f64 * self.nanos_per_tick / 1000.0
    }

    fn label(&self, label: Label) -> String {
        match label {
            Label::Fixed(name) => name.to_owned(),
            Label::Site(site) => format!("{}:{}", site.file(), site.line()),
            Label::Node(id) => self
                .names
                .get(id as usize)
                .map_or_else(|| format!("node {id}"), |n| n.to_string()),
            Label::Frame(number) => format!("frame {number}"),
        }
    }

    fn lane_name(code: u32) -> &'static str {
        Lane::ALL
            .get(code as usize)
            .map_or("FrameCritical", |lane| match lane {
                Lane::FrameCritical => "FrameCritical",
                Lane::Normal => "Normal",
                Lane::Background => "Background",
            })
    }

    fn event_json(&self, tid: u64, event: &Event) -> serde_json::Value {
        use serde_json::json;
        let ts = self.micros(event.tick);
        let cat = event.category.as_str();
        match event.kind {
            Kind::End => json!({"ph": "E", "cat": cat, "pid": 1, "tid": tid, "ts": ts}),
            Kind::Begin => {
                let args = match event.category {
                    Category::Task | Category::Node => json!({"lane": Self::lane_name(event.a)}),
                    Category::Frame => match event.label {
                        Label::Frame(number) => json!({ "frame": number }),
                        _ => json!({}),
                    },
                    _ => json!({}),
                };
                json!({"ph": "B", "cat": cat, "name": self.label(event.label), "pid": 1,
                       "tid": tid, "ts": ts, "args": args})
            }
            Kind::Instant => {
                let args = match event.category {
                    Category::Steal => json!({
                        "victim": if event.a == u32::MAX { json!("injector") } else { json!(event.a) },
                        "lane": Self::lane_name(event.b),
                        "taken": event.c,
                    }),
                    Category::Wake => json!({ "slot": event.a }),
                    _ => json!({}),
                };
                json!({"ph": "i", "s": "t", "cat": cat, "name": cat, "pid": 1, "tid": tid,
                       "ts": ts, "args": args})
            }
        }
    }

    /// Writes the timeline as Chrome trace-event JSON: a `thread_name`
    /// record per thread, then each thread's events in order, with spans
    /// still open at the end closed at the thread's last event.
    ///
    /// ```
    /// use engine_tasks::{timeline, Lane, Pool};
    ///
    /// let pool = Pool::builder().threads(1).build().unwrap();
    /// timeline::start().unwrap();
    /// pool.spawn(Lane::Normal, || ()).unwrap().join().unwrap();
    /// let recorded = timeline::stop().unwrap();
    ///
    /// // Any `Write`: a `File` to open in Perfetto, or memory to send over.
    /// let mut json = Vec::new();
    /// recorded.write_chrome_trace(&mut json).unwrap();
    /// let json = String::from_utf8(json).unwrap();
    /// assert!(json.starts_with(r#"{"displayTimeUnit":"ns","traceEvents":["#));
    /// assert!(json.contains(r#""cat":"task""#));
    /// ```
    pub fn write_chrome_trace(&self, out: impl Write) -> io::Result<()> {
        let mut out = io::BufWriter::new(out);
        out.write_all(b"{\"displayTimeUnit\":\"ns\",\"traceEvents\":[\n")?;
        let mut first = true;
        let mut emit = |out: &mut io::BufWriter<_>, value: serde_json::Value| -> io::Result<()> {
            if !first {
                out.write_all(b",\n")?;
            }
            first = false;
            serde_json::to_writer(&mut *out, &value).map_err(io::Error::other)
        };
        for buffer in &self.buffers {
            let tid = buffer.tid;
            emit(
                &mut out,
                serde_json::json!({"ph": "M", "name": "thread_name", "pid": 1, "tid": tid,
                                   "args": {"name": buffer.thread}}),
            )?;
            let mut open: Vec<Category> = Vec::new();
            let mut last = self.start_tick;
            for event in buffer.events() {
                match event.kind {
                    Kind::Begin => open.push(event.category),
                    Kind::End => {
                        open.pop();
                    }
                    Kind::Instant => {}
                }
                last = last.max(event.tick);
                emit(&mut out, self.event_json(tid, &event))?;
            }
            while let Some(category) = open.pop() {
                let close = Event {
                    tick: last,
                    kind: Kind::End,
                    category,
                    label: Label::Fixed(""),
                    a: 0,
                    b: 0,
                    c: 0,
                };
                emit(&mut out, self.event_json(tid, &close))?;
            }
        }
        out.write_all(b"\n]}\n")?;
        out.flush()
    }
}

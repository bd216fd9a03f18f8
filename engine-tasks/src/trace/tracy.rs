//! The Tracy backend of `instrument.rs`: zones, values, messages, frame
//! marks and plots, with nothing allocated on the hot paths.
//!
//! # Source locations
//!
//! A Tracy zone names its source location by pointer: a
//! `___tracy_source_location_data` that must stay valid while the profiler
//! runs. Every location here is made once and leaked ([`Location`]), so a
//! zone costs a begin and an end event and no allocation:
//!
//! * fixed zones (park, wait, frame, steal search, ...) have one location
//!   each, made on first use;
//! * graph nodes and profiler zones get theirs when their name is interned
//!   (when a graph is built), one per distinct name;
//! * tasks are named by their spawn site; the first task of each site makes
//!   its location, and later ones find it in a lock-free table keyed by the
//!   site's address ([`site_location`]).
//!
//! # Exit
//!
//! Tracy's client, on exit with a profiler connected, sends its last data
//! and waits for the profiler to hang up, and the profiler waits until no
//! thread has a zone open. A pool thread parked for good (the default
//! pool's workers are never joined) sleeps inside its park zone, so that
//! wait never ended and the program hung at exit. So the first zone
//! registers an `atexit` handler that runs before Tracy's own (handlers run
//! in reverse order of registration, and Tracy's static profiler registers
//! at start-up): it marks the process as exiting and wakes every parked
//! pool thread (`registry::wake_all_for_exit`); a woken thread closes its
//! park zone and parks again without one ([`exiting`]).

use crate::lane::Lane;
use std::ffi::{c_char, c_int, CString};
use std::marker::PhantomData;
use std::panic::Location as Site;
use std::sync::atomic::{AtomicBool, AtomicPtr, Ordering};
use std::sync::{Mutex, Once, OnceLock};
use tracy_client::{plot_name, sys, Client};

/// A zone's source location, leaked: valid for the rest of the process.
pub(crate) struct Location(sys::___tracy_source_location_data);

// SAFETY: the data holds only pointers to leaked, never-written C strings
// and plain numbers, so sharing it between threads is sharing immutable
// memory.
unsafe impl Send for Location {}
// SAFETY: as above.
unsafe impl Sync for Location {}

/// Leaks `text` as a C string (a NUL inside it ends it early).
fn leak_c_str(text: &str) -> *const c_char {
    let text = text.split('\0').next().unwrap_or("");
    let owned = CString::new(text).expect("no NUL left in the text");
    Box::leak(owned.into_boxed_c_str()).as_ptr()
}

/// Makes a location that lives for the rest of the process.
fn make_location(name: &str, file: &str, line: u32) -> &'static Location {
    Box::leak(Box::new(Location(sys::___tracy_source_location_data {
        name: leak_c_str(name),
        function: leak_c_str("engine-tasks"),
        file: leak_c_str(file),
        line,
        color: 0,
    })))
}

/// The location of a fixed zone name, made on first use.
fn fixed(cell: &'static OnceLock<&'static Location>, name: &str) -> &'static Location {
    cell.get_or_init(|| make_location(name, "", 0))
}

/// The location named `name`, one per distinct name (taken when a graph
/// is built or a profiler zone name registered, not per zone).
pub(crate) fn named_location(name: &str) -> &'static Location {
    static NAMES: OnceLock<Mutex<std::collections::HashMap<Box<str>, &'static Location>>> =
        OnceLock::new();
    let mut names = NAMES
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    if let Some(&location) = names.get(name) {
        return location;
    }
    let location = make_location(name, "", 0);
    names.insert(name.into(), location);
    location
}

/// Spawn sites with a location: open addressing on the site's address.
/// 1024 entries hold far more distinct spawn sites than a program has
/// (each `spawn` call in the source is one); past that, tasks share the
/// plain "task" location.
const SITES: usize = 1024;

struct SiteEntry {
    site: AtomicPtr<Site<'static>>,
    location: AtomicPtr<Location>,
}

/// The location of tasks spawned at `site`: lock-free after the first task
/// of the site.
fn site_location(site: &'static Site<'static>) -> &'static Location {
    static TABLE: OnceLock<Box<[SiteEntry]>> = OnceLock::new();
    static PLAIN: OnceLock<&'static Location> = OnceLock::new();
    let table = TABLE.get_or_init(|| {
        (0..SITES)
            .map(|_| SiteEntry {
                site: AtomicPtr::new(std::ptr::null_mut()),
                location: AtomicPtr::new(std::ptr::null_mut()),
            })
            .collect()
    });
    let key = site as *const Site<'static> as *mut Site<'static>;
    // Fibonacci hashing of the address (sites are at least 8-aligned).
    let start = ((key as usize >> 3).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 54) % SITES;
    for probe in 0..SITES {
        let entry = &table[(start + probe) % SITES];
        // Acquire: pairs with the Release store of `location` below, read
        // through the `site` that was published first.
        let mut current = entry.site.load(Ordering::Acquire);
        if current.is_null() {
            // AcqRel on success: claims the entry (the location follows);
            // Acquire on failure: another thread's site, read as above.
            match entry.site.compare_exchange(
                std::ptr::null_mut(),
                key,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => {
                    let made = make_location("task", site.file(), site.line());
                    // Release: pairs with the Acquire loads of `location`.
                    entry
                        .location
                        .store(made as *const Location as *mut Location, Ordering::Release);
                    return made;
                }
                Err(actual) => current = actual,
            }
        }
        if current == key {
            // Acquire: pairs with the Release store above; null while the
            // claiming thread is still making it.
            let location = entry.location.load(Ordering::Acquire);
            // SAFETY: a non-null location was made by `make_location`,
            // which leaks it.
            return match unsafe { location.as_ref() } {
                Some(location) => location,
                None => fixed(&PLAIN, "task"),
            };
        }
    }
    fixed(&PLAIN, "task")
}

/// An open Tracy zone; it ends on drop, on the thread that opened it.
pub(crate) struct Zone {
    ctx: sys::___tracy_c_zone_context,
    _on_this_thread: PhantomData<*mut ()>,
}

impl Zone {
    fn begin(location: &'static Location) -> Zone {
        let _client = started();
        Zone {
            // SAFETY: the client runs (`started`), and the location lives
            // for the rest of the process.
            ctx: unsafe { sys::___tracy_emit_zone_begin(&location.0, 1) },
            _on_this_thread: PhantomData,
        }
    }

    /// Attaches a number to the zone (shown with it in the profiler).
    fn value(&self, value: u64) {
        // SAFETY: the zone is open (ended only by drop).
        unsafe { sys::___tracy_emit_zone_value(self.ctx, value) }
    }
}

impl Drop for Zone {
    fn drop(&mut self) {
        // SAFETY: begun by `Zone::begin` on this thread (`Zone` is not
        // `Send`), and ended once.
        unsafe { sys::___tracy_emit_zone_end(self.ctx) }
    }
}

/// The client, started (a check of a flag after the first call), with the
/// exit handler registered.
fn started() -> Client {
    static EXIT_HANDLER: Once = Once::new();
    let client = Client::start();
    EXIT_HANDLER.call_once(|| {
        extern "C" {
            fn atexit(handler: extern "C" fn()) -> c_int;
        }
        // SAFETY: `on_exit` is an `extern "C"` function with no arguments
        // that may run at exit (it only touches atomics and parkers).
        unsafe {
            atexit(on_exit);
        }
    });
    client
}

static EXITING: AtomicBool = AtomicBool::new(false);

extern "C" fn on_exit() {
    // Relaxed: parked threads see it after the wake-up below, whose
    // unpark/park pair orders it.
    EXITING.store(true, Ordering::Relaxed);
    crate::pool::registry::wake_all_for_exit();
}

/// Whether the process is exiting: threads park without a zone then.
pub(crate) fn exiting() -> bool {
    // Relaxed: see `on_exit`.
    EXITING.load(Ordering::Relaxed)
}

/// A zone of a fixed name.
macro_rules! fixed_zone {
    ($name:literal) => {{
        static LOCATION: OnceLock<&'static Location> = OnceLock::new();
        Zone::begin(fixed(&LOCATION, $name))
    }};
}

pub(crate) fn task_zone(site: Option<&'static Site<'static>>) -> Zone {
    match site {
        Some(site) => Zone::begin(site_location(site)),
        None => fixed_zone!("task"),
    }
}

pub(crate) fn named_zone(location: &'static Location) -> Zone {
    Zone::begin(location)
}

pub(crate) fn park_zone() -> Option<Zone> {
    (!exiting()).then(|| fixed_zone!("park"))
}

pub(crate) fn wait_zone() -> Zone {
    fixed_zone!("wait")
}

pub(crate) fn blocking_zone() -> Zone {
    fixed_zone!("blocking task")
}

pub(crate) fn frame_zone() -> Zone {
    fixed_zone!("frame")
}

/// A steal that took `taken` tasks: an instant zone carrying the count.
pub(crate) fn steal(taken: u32) {
    let zone = fixed_zone!("steal");
    zone.value(u64::from(taken));
}

/// The failed steal attempts of one search, folded into one zone from the
/// first failure until `end`, carrying their count.
#[derive(Default)]
pub(crate) struct Search {
    zone: std::cell::RefCell<Option<Zone>>,
    failed: std::cell::Cell<u64>,
}

impl Search {
    pub(crate) fn failed(&self) {
        let mut zone = self.zone.borrow_mut();
        if zone.is_none() {
            *zone = Some(fixed_zone!("steal search"));
        }
        self.failed.set(self.failed.get() + 1);
    }

    pub(crate) fn end(&self) {
        if let Some(zone) = self.zone.borrow_mut().take() {
            zone.value(self.failed.replace(0));
        }
    }
}

impl Drop for Search {
    fn drop(&mut self) {
        self.end();
    }
}

/// A wake-up sent to `slot`: a message from a table made once.
pub(crate) fn wake(slot: usize) {
    static MESSAGES: OnceLock<Box<[Box<str>]>> = OnceLock::new();
    let messages = MESSAGES.get_or_init(|| {
        (0..crate::sync::idle::MAX_SLOTS)
            .map(|slot| format!("wake slot {slot}").into_boxed_str())
            .collect()
    });
    if let Some(message) = messages.get(slot) {
        started().message(message, 0);
    }
}

pub(crate) fn frame_mark() {
    started().frame_mark();
}

/// What each frame plots (see `instrument::frame_plots`).
pub(crate) fn frame_plots(queued: &dyn Fn(Lane) -> usize, helper_nodes: usize) {
    let client = started();
    client.plot(plot_name!("queued normal"), queued(Lane::Normal) as f64);
    client.plot(
        plot_name!("queued background"),
        queued(Lane::Background) as f64,
    );
    client.plot(plot_name!("frame nodes on workers"), helper_nodes as f64);
}

pub(crate) fn blocking_threads(threads: usize) {
    started().plot(plot_name!("blocking threads"), threads as f64);
}

pub(crate) fn thread_name(name: &str) {
    started().set_thread_name(name);
}

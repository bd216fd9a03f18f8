//! The pool's shared state: thread slots, injector, sleep protocol, lazy
//! thread spawning and shutdown.
//!
//! # Slots
//!
//! A pool with `n` worker threads has `n + 1` slots. Slot `i < n` belongs to
//! worker thread `i`, started lazily the first time a wake-up finds no idle
//! thread. Slot `n` is the **guest** slot: a thread outside the pool that
//! blocks in `join`, `scope` or `JoinHandle::join` borrows it for the
//! duration, so the main thread gets its own queues, can be stolen from, and
//! sleeps in the same protocol as workers. One guest at a time; other outside
//! threads wait without a slot (see `wait::wait_without_slot`). A thread
//! that works in another pool (its worker or guest) never takes the guest
//! slot: it waits without one, working for its own pool.
//!
//! Each slot holds, per lane, a LIFO slot, a ring, an overflow queue and a
//! deque of pending `join` halves.
//! `advertised[lane]` has bit `i` set while slot `i` may have work of that
//! lane, so a search for urgent work looks only at slots that have some.
//!
//! # Threads
//!
//! Threads are spawned through the configured spawn function, one at a time,
//! under `threads`' lock. A failed spawn is counted and stops further spawning:
//! the pool carries on with the threads it has, and with none at all the
//! threads that wait in `join` run the work.
//!
//! # Shutdown
//!
//! Dropping the `Pool` sets `shutdown` (new `spawn`s fail and return their
//! task), wakes every thread, and joins them. Workers exit only when no task
//! is queued, so everything queued runs; a shut-down pool's threads take
//! background work past the cap (`Local::acquire_background`), which no
//! frame needs any more. The dropping thread then waits for
//! submissions that were already past the shutdown check, and runs whatever is
//! still queued itself. No task is dropped unrun. A `Pool` dropped inside
//! one of its own tasks (on a worker, or on a thread waiting as its guest)
//! joins no worker, since one may be waiting for that task: every worker
//! exits once no task is queued (the dropping one when that task returns),
//! and tasks may still be running when the drop returns.

use crate::lane::Lane;
use crate::pool::early_wake::{EarlyWake, NextFrame};
use crate::pool::frame_gaps::FrameGaps;
use crate::pool::start;
use crate::pool::stats::{PoolStats, SlotCounters};
use crate::pool::worker;
use crate::sync::deque::Deque;
use crate::sync::gate::Gate;
use crate::sync::helpers::{HelperId, Helpers};
use crate::sync::idle::{Notify, Sleep, MAX_SLOTS};
use crate::sync::lifo::LifoSlot;
use crate::sync::permits::{Permits, Released};
use crate::sync::prefetch::{Span, MAX_POOL_SPANS};
use crate::sync::queue::{TaskList, TaskQueue};
use crate::sync::ring::Ring;
use crate::sync::task::TaskRef;
use crate::trace::instrument;
use crossbeam_utils::CachePadded;
use std::io;
use std::sync::atomic::{fence, AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::thread::JoinHandle;

/// Most worker threads a pool can have (one slot is the guest's).
pub const MAX_THREADS: usize = MAX_SLOTS - 1;

/// What the spawn function is asked to start.
#[derive(Clone, Debug)]
pub struct ThreadSpec {
    /// Which thread: in a [`Pool`](crate::Pool), the worker's index, from 0
    /// and below the pool's thread count; in a
    /// [`BlockingPool`](crate::BlockingPool), a count of the pool's
    /// attempts to start a thread, from 0, which goes on growing as idle
    /// threads exit and new ones start.
    pub index: usize,
    /// The thread name from the configured prefix, e.g. `engine-worker-0`.
    pub name: String,
    /// Requested stack size in bytes, if configured.
    pub stack_size: Option<usize>,
}

/// Starts an OS thread running `main`. Injectable so that tests (and engines
/// with their own thread setup: affinity, priorities) control spawning.
pub type SpawnFn =
    dyn Fn(ThreadSpec, Box<dyn FnOnce() + Send>) -> io::Result<JoinHandle<()>> + Send + Sync;

pub(crate) fn spawn_std_thread(
    spec: ThreadSpec,
    main: Box<dyn FnOnce() + Send>,
) -> io::Result<JoinHandle<()>> {
    let mut builder = std::thread::Builder::new().name(spec.name);
    if let Some(size) = spec.stack_size {
        builder = builder.stack_size(size);
    }
    builder.spawn(main)
}

/// Per-lane queues of one slot.
pub(crate) struct SlotLane {
    pub(crate) lifo: LifoSlot,
    pub(crate) ring: Ring,
    pub(crate) overflow: TaskQueue,
    /// Pending second halves of this thread's `join`s.
    pub(crate) joins: Deque,
}

/// One thread slot; see the module docs.
pub(crate) struct Slot {
    pub(crate) lanes: [SlotLane; Lane::COUNT],
    pub(crate) counters: SlotCounters,
}

impl Slot {
    fn new() -> Self {
        Slot {
            lanes: std::array::from_fn(|_| SlotLane {
                lifo: LifoSlot::new(),
                ring: Ring::new(),
                overflow: TaskQueue::new(),
                joins: Deque::new(),
            }),
            counters: SlotCounters::default(),
        }
    }

    /// Whether any queue of `lane` looks non-empty.
    pub(crate) fn has_work(&self, lane: Lane) -> bool {
        let q = &self.lanes[lane.index()];
        // Relaxed: a hint; taking the task decides.
        self.has_batch_work(lane) || q.lifo.is_occupied() || q.joins.len() > 0
    }

    /// Whether `lane`'s ring or overflow queue looks non-empty: the queues
    /// whose steal can come back empty only because another thread is
    /// moving their tasks (a steal in progress, a held consumer lock). A
    /// failed take from the LIFO slot or join deque means someone else got
    /// the task.
    pub(crate) fn has_batch_work(&self, lane: Lane) -> bool {
        let q = &self.lanes[lane.index()];
        // Relaxed: a hint; taking the task decides.
        !q.ring.is_empty() || !q.overflow.is_empty()
    }
}

/// How a helper (helpers.rs) is woken.
pub(crate) enum HelperWaker {
    /// A thread working in another pool sleeps on its slot there.
    Pool {
        /// Keeps the parker alive while the helper is listed.
        pool: Arc<Shared>,
        slot: usize,
    },
    /// A thread of no pool.
    Thread(std::thread::Thread),
}

impl HelperWaker {
    fn wake(&self) {
        match self {
            HelperWaker::Pool { pool, slot } => pool.sleep.unpark(*slot),
            HelperWaker::Thread(thread) => thread.unpark(),
        }
    }
}

/// Validated configuration (see `PoolBuilder`).
pub(crate) struct Config {
    pub(crate) threads: usize,
    pub(crate) background_cap: usize,
    pub(crate) name_prefix: String,
    pub(crate) stack_size: Option<usize>,
    pub(crate) early_wake: EarlyWake,
    pub(crate) spawn: Arc<SpawnFn>,
    /// What a worker thread runs: its scheduler loop (`worker::run_worker`).
    /// Handed in by the pool's builder, so that the registry, which starts
    /// the threads, does not depend on what they run.
    pub(crate) thread_body: fn(Arc<Shared>, usize),
}

pub(crate) struct Shared {
    pub(crate) slots: Box<[Slot]>,
    pub(crate) injector: [TaskQueue; Lane::COUNT],
    pub(crate) advertised: [CachePadded<AtomicU64>; Lane::COUNT],
    pub(crate) sleep: Sleep,
    /// Participants running background tasks now, and the most allowed.
    background: Permits,
    guest_taken: CachePadded<AtomicBool>,
    /// Task-graph frames running now, and whether one ever ran (see
    /// `between_frames`).
    frames_in_flight: CachePadded<AtomicUsize>,
    frame_loop: AtomicBool,
    /// How long (clock ticks) a thread that runs out of work between frames
    /// waits for the next frame before it parks; set by the frame loop.
    linger_ticks: AtomicU64,
    /// Task-graph frames running now whose nodes are queued for any thread
    /// (not run alone), and how long (clock ticks) a thread that runs out
    /// of work during one looks for more before it parks.
    shared_frames: CachePadded<AtomicUsize>,
    in_frame_wait_ticks: AtomicU64,
    /// When the task-graph frames on this pool ended, and how soon the
    /// next began after each (`frame_gaps.rs`).
    pub(crate) frame_gaps: FrameGaps,
    /// The forecast of a paced frame loop's next frame (early_wake.rs).
    pub(crate) next_frame: NextFrame,
    /// Closed at shutdown; external submissions pass through it.
    gate: Gate,
    /// Threads from outside that run this pool's work while it has no
    /// thread to run it (`needs_helpers`; helpers.rs).
    helpers: Helpers<HelperWaker>,
    /// Worker threads started; only written under `threads`' lock.
    started: AtomicUsize,
    spawn_failed: AtomicBool,
    spawn_failures: AtomicU64,
    threads: Mutex<Vec<JoinHandle<()>>>,
    /// Plain threads that run a counted worker's body because the spawn
    /// function dropped the worker's function unrun (`stand_in`); joined at
    /// shutdown with `threads`. A leaf lock, free of `threads`: the
    /// function can be dropped inside a spawn call that holds that one.
    stand_ins: Mutex<Vec<JoinHandle<()>>>,
    pub(crate) external: SlotCounters,
    config: Config,
    me: Weak<Shared>,
}

impl Shared {
    pub(crate) fn new(config: Config) -> Arc<Shared> {
        // Before any queue exists: both sides of every fence pair must agree.
        crate::sync::fence::init();
        let slots = config.threads + 1;
        let shared = Arc::new_cyclic(|me| Shared {
            slots: (0..slots).map(|_| Slot::new()).collect(),
            injector: std::array::from_fn(|_| TaskQueue::new()),
            advertised: std::array::from_fn(|_| CachePadded::new(AtomicU64::new(0))),
            sleep: Sleep::new(slots),
            background: Permits::new(config.background_cap),
            guest_taken: CachePadded::new(AtomicBool::new(false)),
            frames_in_flight: CachePadded::new(AtomicUsize::new(0)),
            frame_loop: AtomicBool::new(false),
            linger_ticks: AtomicU64::new(0),
            shared_frames: CachePadded::new(AtomicUsize::new(0)),
            in_frame_wait_ticks: AtomicU64::new(0),
            frame_gaps: FrameGaps::new(),
            next_frame: NextFrame::new(config.early_wake),
            gate: Gate::default(),
            helpers: Helpers::new(),
            started: AtomicUsize::new(0),
            spawn_failed: AtomicBool::new(false),
            spawn_failures: AtomicU64::new(0),
            threads: Mutex::new(Vec::with_capacity(config.threads)),
            stand_ins: Mutex::new(Vec::new()),
            external: SlotCounters::default(),
            config,
            me: me.clone(),
        });
        #[cfg(feature = "tracy-core")]
        {
            let mut pools = live_pools().lock().unwrap_or_else(|e| e.into_inner());
            pools.retain(|pool| pool.strong_count() > 0);
            pools.push(Arc::downgrade(&shared));
        }
        shared
    }

    pub(crate) fn worker_count(&self) -> usize {
        self.config.threads
    }

    pub(crate) fn guest_index(&self) -> usize {
        self.config.threads
    }

    /// What an outside thread that runs a frame on this pool works through
    /// before the frame's first node, for early-woken workers to warm
    /// (`sync/prefetch.rs`): this state, the guest slot and its parker.
    pub(crate) fn frame_thread_spans(&self) -> [Span; MAX_POOL_SPANS] {
        let guest = self.guest_index();
        [
            Span::of_value(self),
            Span::of_value(&self.slots[guest]),
            Span::of_value(self.sleep.parker(guest)),
        ]
    }

    /// A counted reference to this pool's shared state. Called only by a
    /// thread working in the pool (a worker, or a guest whose caller
    /// borrows a handle), so the state is alive.
    pub(crate) fn arc(&self) -> Arc<Shared> {
        self.me
            .upgrade()
            .expect("a thread working in a pool keeps the pool alive")
    }

    /// Worker threads started so far (only grows).
    #[cfg_attr(target_os = "linux", link_section = "engine_tasks_frame")]
    pub(crate) fn threads_started(&self) -> usize {
        // Relaxed: a hint; a thread that starts later only adds a runner.
        self.started.load(Ordering::Relaxed)
    }

    pub(crate) fn is_shutdown(&self) -> bool {
        self.gate.is_closed()
    }

    /// Whether no worker of this pool will run its queued work: none
    /// started (none configured, or every start failed), or shutdown began.
    /// Threads that wait on its tasks from outside then run them, as
    /// helpers (helpers.rs).
    pub(crate) fn needs_helpers(&self) -> bool {
        self.threads_started() == 0 || self.is_shutdown()
    }

    /// Lists a helper; it looks for work after this and before every sleep.
    pub(crate) fn add_helper(&self, waker: HelperWaker) -> HelperId {
        self.helpers.add(waker)
    }

    /// Unlists a helper whose wait ended.
    pub(crate) fn remove_helper(&self, id: HelperId) {
        self.helpers.remove(id);
    }

    /// Tries to borrow the guest slot (see module docs).
    #[cfg_attr(target_os = "linux", link_section = "engine_tasks_frame")]
    pub(crate) fn try_take_guest(&self) -> bool {
        // Acquire: pairs with the Release in `release_guest`, handing over the
        // slot's owner-only state from the previous guest.
        self.guest_taken
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
    }

    #[cfg_attr(target_os = "linux", link_section = "engine_tasks_frame")]
    pub(crate) fn release_guest(&self) {
        // Release: pairs with the Acquire in `try_take_guest`.
        self.guest_taken.store(false, Ordering::Release);
    }

    /// A task-graph frame starts on this pool, at `start_tick`.
    #[cfg_attr(target_os = "linux", link_section = "engine_tasks_frame")]
    pub(crate) fn frame_began(&self, start_tick: u64) {
        // Relaxed, here and below: a hint that only decides whether an idle
        // thread spins before it parks; the queues carry the tasks.
        if !self.frame_loop.load(Ordering::Relaxed) {
            self.frame_loop.store(true, Ordering::Relaxed);
        }
        self.frames_in_flight.fetch_add(1, Ordering::Relaxed);
        self.frame_gaps.frame_began(start_tick);
    }

    /// The frame that `frame_began` announced has ended, at `end_tick`:
    /// returns the end's number (`FrameGaps::gap_after`).
    #[cfg_attr(target_os = "linux", link_section = "engine_tasks_frame")]
    pub(crate) fn frame_ended(&self, end_tick: u64) -> u64 {
        // The end first: a thread that finds no frame in flight then finds
        // this end (`linger_ticks_at`), as far as a hint can.
        let end = self.frame_gaps.frame_ended(end_tick);
        self.frames_in_flight.fetch_sub(1, Ordering::Relaxed);
        end
    }

    /// How long the pool was idle before a frame starting at `start_tick`,
    /// in ticks since its last frame ended: `None` while another frame
    /// runs, `Some(None)` before the pool's first frame.
    #[cfg_attr(target_os = "linux", link_section = "engine_tasks_frame")]
    pub(crate) fn idle_gap_before(&self, start_tick: u64) -> Option<Option<u64>> {
        // Relaxed: a hint, as in `frame_began`.
        if self.frames_in_flight.load(Ordering::Relaxed) != 0 {
            return None;
        }
        let last = self.frame_gaps.last_end();
        Some((last != 0).then(|| start_tick.saturating_sub(last)))
    }

    /// The pool runs a frame loop and is between two frames. A thread that
    /// runs out of work now waits for the next frame as long as the frame
    /// loop says (`linger_ticks_at`: zero for a paced loop, and soon after
    /// the loop stops) and then parks,
    /// without the usual idle spin: the next work is most likely the next
    /// frame, and spinning in a gap of milliseconds would only burn CPU
    /// (the `frame_cpu` benchmark measures it).
    pub(crate) fn between_frames(&self) -> bool {
        // Relaxed, both: a hint for how long an idle thread waits before it
        // parks, paired with nothing; a stale answer costs a short wait or
        // an early park, and the queues carry the tasks.
        self.frame_loop.load(Ordering::Relaxed)
            && self.frames_in_flight.load(Ordering::Relaxed) == 0
    }

    /// Sets how long idle threads wait for the next frame (see the field).
    pub(crate) fn set_linger_ticks(&self, ticks: u64) {
        store_if_moved(&self.linger_ticks, ticks);
    }

    /// How long a thread that runs out of work at `now`, between frames,
    /// waits for the next frame: the frame loop's linger, but only until
    /// twice the linger after the latest frame's end. A loop whose next
    /// frame is later than that has paused or stopped (a loading screen),
    /// and waiting for it from every idle moment would only burn CPU. While
    /// a frame is still in flight (the thread ran its last node, and the
    /// frame's thread has yet to end it), the whole linger.
    pub(crate) fn linger_ticks_at(&self, now: u64) -> u64 {
        // Relaxed: see `set_linger_ticks` and `between_frames`.
        let linger = self.linger_ticks.load(Ordering::Relaxed);
        if self.frames_in_flight.load(Ordering::Relaxed) != 0 {
            return linger;
        }
        let since_end = now.saturating_sub(self.frame_gaps.last_end());
        linger.min(linger.saturating_mul(2).saturating_sub(since_end))
    }

    /// A running frame queues its nodes for any thread; until
    /// `frame_unshared`, threads that run out of work look for more for up
    /// to `wait_ticks` before they park.
    #[cfg_attr(target_os = "linux", link_section = "engine_tasks_shared")]
    pub(crate) fn frame_shared(&self, wait_ticks: u64) {
        store_if_moved(&self.in_frame_wait_ticks, wait_ticks);
        // Relaxed, here and below: a hint for how long an idle thread looks
        // before it parks; the queues carry the tasks.
        self.shared_frames.fetch_add(1, Ordering::Relaxed);
    }

    /// The frame that `frame_shared` announced has ended.
    #[cfg_attr(target_os = "linux", link_section = "engine_tasks_shared")]
    pub(crate) fn frame_unshared(&self) {
        self.shared_frames.fetch_sub(1, Ordering::Relaxed);
    }

    /// How long a thread that runs out of work now looks for more before it
    /// parks: zero unless a shared frame is running.
    pub(crate) fn in_frame_wait_ticks(&self) -> u64 {
        if self.in_shared_frame() {
            // Relaxed: a hint, as in `frame_shared`; paired with nothing.
            self.in_frame_wait_ticks.load(Ordering::Relaxed)
        } else {
            0
        }
    }

    pub(crate) fn in_shared_frame(&self) -> bool {
        // Relaxed: a hint, as in `frame_shared`; paired with nothing.
        self.shared_frames.load(Ordering::Relaxed) > 0
    }

    /// Takes one of the `background_cap` permits to run background work.
    pub(crate) fn try_acquire_background(&self) -> bool {
        self.background.try_acquire()
    }

    /// Gives back `n` permits: one when a background task ends, or those a
    /// waiting thread lends. After a release from the cap a thread may have
    /// been turned away from queued background work for want of one and be
    /// asleep by now: look for that work at once, and wake a thread for it
    /// (permits.rs says why no wake-up is lost).
    pub(crate) fn release_background(&self, n: u32) {
        if self.background.release(n) == Released::FromCap {
            // SeqCst: pairs with the pusher's fence in `Sleep::notify` and
            // the fence before every thread's last look ahead of parking
            // (`Sleep::prepare_park`); permits.rs.
            fence(Ordering::SeqCst);
            if self.has_visible_work(Lane::Background) {
                self.notify(Lane::Background);
            }
        }
    }

    /// Takes `n` lent permits back whether or not the cap allows (a wait
    /// that lent them has ended; permits.rs).
    pub(crate) fn force_acquire_background_permits(&self, n: u32) {
        self.background.force_acquire(n);
    }

    /// Whether work of `lane` is queued anywhere in the pool: its injector
    /// or any thread's queues.
    #[inline]
    pub(crate) fn has_visible_work(&self, lane: Lane) -> bool {
        !self.injector[lane.index()].is_empty() || self.slots.iter().any(|slot| slot.has_work(lane))
    }

    /// Whether work of any lane looks queued anywhere in the pool (a hint,
    /// as [`has_visible_work`](Self::has_visible_work)): a look for it may
    /// still come back empty while another thread moves it.
    pub(crate) fn has_queued_work(&self) -> bool {
        Lane::ALL.iter().any(|&lane| self.has_visible_work(lane))
    }

    /// Queues a task submitted by a thread without a slot of this pool.
    /// Fails (returning the task) once shutdown has begun.
    pub(crate) fn inject(&self, lane: Lane, task: TaskRef) -> Result<(), TaskRef> {
        let mut list = TaskList::new();
        list.push_back(task);
        self.inject_list(lane, list).map_err(|list| {
            list.into_tasks()
                .next()
                .expect("the refused list holds the task")
        })
    }

    /// Queues a list of tasks submitted from outside with one push and one
    /// wake-up. Fails (returning the list) once shutdown has begun.
    pub(crate) fn inject_list(&self, lane: Lane, list: TaskList) -> Result<(), TaskList> {
        // The gate orders this push before shutdown's final drain (gate.rs).
        let Some(pass) = self.gate.enter() else {
            return Err(list);
        };
        let count = list.len() as u64;
        self.injector[lane.index()].push_list(list);
        self.external.lanes[lane.index()].spawned.add_shared(count);
        drop(pass);
        self.notify(lane);
        Ok(())
    }

    /// Queues a task that must run even during shutdown (a `join` half or a
    /// scope task whose submitter waits for it); never fails.
    #[cfg_attr(target_os = "linux", link_section = "engine_tasks_shared")]
    pub(crate) fn inject_structured(&self, lane: Lane, task: TaskRef) {
        self.injector[lane.index()].push(task);
        self.external.lanes[lane.index()].spawned.add_shared(1);
        self.notify(lane);
    }

    #[inline]
    fn can_spawn(&self) -> bool {
        // Relaxed: hints re-checked under the `threads` lock in `spawn_worker`.
        self.started.load(Ordering::Relaxed) < self.config.threads
            && !self.spawn_failed.load(Ordering::Relaxed)
            && !self.gate.is_closed()
    }

    /// Wakes (or starts) one thread for new work of `lane`, unless a searcher
    /// is already active. See `idle.rs`.
    #[cfg_attr(target_os = "linux", link_section = "engine_tasks_shared")]
    pub(crate) fn notify(&self, lane: Lane) {
        match self.sleep.notify(lane, self.can_spawn()) {
            Notify::Busy => {}
            Notify::Woke(slot) => instrument::wake(slot),
            Notify::NeedThread => {
                if !self.spawn_worker() {
                    self.sleep.give_up_token();
                }
            }
        }
        // Threads that run this pool's work from outside while it has no
        // worker (helpers.rs): `Sleep::notify`'s fence above is the pusher's
        // fence of that protocol.
        self.helpers.wake_all(HelperWaker::wake);
    }

    /// `notify` for a `join` half. The thread that pushed it either pops it
    /// back or waits for it, so the half is never stranded even if no other
    /// thread hears of it; a wake-up only adds parallelism. That lets this
    /// path skip `notify`'s fence when an unfenced look says nobody could be
    /// woken (the common case in a busy fork-join: every thread is working).
    /// rayon's push path makes the same trade.
    /// A pool without workers always notifies: a task pushed for a scope
    /// that a helper waits on (helpers.rs) may have no other thread to run
    /// it.
    #[inline]
    pub(crate) fn notify_join(&self, lane: Lane) {
        if self.can_spawn() || self.sleep.may_wake(lane) || self.needs_helpers() {
            self.notify(lane);
        }
    }

    /// Starts the next worker, which inherits the searcher token.
    fn spawn_worker(&self) -> bool {
        let mut threads = self.threads.lock().unwrap_or_else(|e| e.into_inner());
        // Relaxed: `started` is only written under this lock.
        let index = self.started.load(Ordering::Relaxed);
        if index >= self.config.threads
            || self.spawn_failed.load(Ordering::Relaxed)
            || self.is_shutdown()
        {
            return false;
        }
        let Some(shared) = self.me.upgrade() else {
            return false;
        };
        let spec = ThreadSpec {
            index,
            name: format!("{}-{index}", self.config.name_prefix),
            stack_size: self.config.stack_size,
        };
        // A spawn function that panics, or starts the thread and then
        // fails, is a failed spawn, and that thread never runs the body
        // (start.rs).
        let body = self.config.thread_body;
        let on_lost = {
            let (shared, spec) = (shared.clone(), spec.clone());
            move |body| shared.stand_in(spec, body)
        };
        match start::start_thread(
            &*self.config.spawn,
            spec,
            move || body(shared, index),
            on_lost,
        ) {
            Ok(handle) => {
                threads.push(handle);
                // Relaxed: read as a hint by `can_spawn`; the lock orders it.
                self.started.store(index + 1, Ordering::Relaxed);
                true
            }
            Err(_) => {
                // Relaxed: see `can_spawn`.
                self.spawn_failed.store(true, Ordering::Relaxed);
                self.spawn_failures.fetch_add(1, Ordering::Relaxed);
                false
            }
        }
    }

    /// The spawn function answered `Ok` for a worker, and then dropped its
    /// function unrun (start.rs): runs the worker's `body` on a plain
    /// thread, so that the worker the pool counted exists. It holds the
    /// searcher token of the call that started it (`notify`), and a parked
    /// pool would otherwise never wake a thread again. If no thread starts
    /// (the system refuses one, or the pool is shutting down, whose drop
    /// runs what is queued), the token is passed on instead and the pool
    /// works with the threads it has.
    fn stand_in(&self, spec: ThreadSpec, body: impl FnOnce() + Send + 'static) {
        let mut stand_ins = self.stand_ins.lock().unwrap_or_else(|e| e.into_inner());
        // Decided under the lock that `shutdown_and_join` takes after it
        // closes the gate: a thread started here is one it joins.
        let started = if self.is_shutdown() {
            Err(io::Error::other("the pool is shutting down"))
        } else {
            spawn_std_thread(spec, Box::new(body))
        };
        match started {
            Ok(handle) => stand_ins.push(handle),
            Err(_) => {
                drop(stand_ins);
                // Relaxed: hints for `can_spawn`, and a statistic. Stored
                // outside the `threads` lock: a `spawn_worker` that reads
                // the old value makes one more attempt, no more.
                self.spawn_failed.store(true, Ordering::Relaxed);
                self.spawn_failures.fetch_add(1, Ordering::Relaxed);
                self.sleep.give_up_token();
            }
        }
    }

    /// Begins shutdown and joins every worker, unless the caller is running
    /// one of the pool's tasks; see the module docs.
    pub(crate) fn shutdown_and_join(&self) {
        self.gate.close();
        let mut handles = {
            let mut threads = self.threads.lock().unwrap_or_else(|e| e.into_inner());
            std::mem::take(&mut *threads)
        };
        handles.append(&mut self.stand_ins.lock().unwrap_or_else(|e| e.into_inner()));
        for slot in 0..self.sleep.slots() {
            self.sleep.unpark(slot);
        }
        // The last `Pool` may be dropped inside one of its own tasks, on a
        // worker or on a thread waiting as the pool's guest (which runs the
        // pool's tasks while it waits). That thread cannot join itself, nor
        // any worker: one may be waiting for the very task that drops the
        // pool (a `join` half this thread stole), and would never exit. So
        // it joins none: it drains the queues beside them (the caller's
        // `drain`), every worker's loop sees the closed gate and exits once
        // no task is queued, and their handles are dropped, detaching them.
        // Each holds the pool's `Shared` until it exits. Tasks may still be
        // running on them when the drop returns. The same for a thread of
        // another pool (its worker or guest): a task of this pool may wait
        // on that pool's work, which only this thread may be there to run.
        if !worker::holds_a_slot_of(self) && !worker::in_another_pool(self) {
            // A worker runs every task inside its slot, so this thread is
            // none of them.
            debug_assert!(handles
                .iter()
                .all(|handle| handle.thread().id() != std::thread::current().id()));
            for handle in handles {
                // Workers abort rather than unwind, so join cannot fail; if
                // a custom spawn function's thread did, there is nothing to
                // resume.
                let _ = handle.join();
            }
        }
        self.gate.wait_empty();
    }

    pub(crate) fn stats(&self) -> PoolStats {
        PoolStats {
            threads: self.slots.iter().map(|s| s.counters.snapshot()).collect(),
            external: self.external.snapshot(),
            // Relaxed: statistics.
            threads_started: self.threads_started(),
            spawn_failures: self.spawn_failures.load(Ordering::Relaxed),
        }
    }

    /// Tasks stolen so far, over every slot and lane; allocation-free, for
    /// per-frame statistics.
    #[cfg_attr(target_os = "linux", link_section = "engine_tasks_frame")]
    pub(crate) fn stolen_tasks_total(&self) -> u64 {
        self.slots
            .iter()
            .flat_map(|s| s.counters.lanes.iter())
            .map(|lane| lane.stolen_tasks.get())
            .sum()
    }

    /// Queued tasks of `lane` over every queue (a hint, for tests and plots).
    pub(crate) fn queued(&self, lane: Lane) -> usize {
        let i = lane.index();
        self.injector[i].len()
            + self
                .slots
                .iter()
                .map(|s| {
                    let q = &s.lanes[i];
                    // Relaxed: a hint.
                    q.ring.len()
                        + q.overflow.len()
                        + q.joins.len()
                        + usize::from(q.lifo.is_occupied())
                })
                .sum::<usize>()
    }
}

/// Sets a tick count that frame loops set every frame, only when it moves
/// by more than a sixteenth (tick rates sharpen frame by frame), so that
/// frames do not dirty a line that idle threads read.
fn store_if_moved(hint: &AtomicU64, ticks: u64) {
    // Relaxed, both: a hint for how long idle threads wait, as in
    // `frame_began`; the queues carry the tasks.
    let current = hint.load(Ordering::Relaxed);
    if current.abs_diff(ticks) > ticks / 16 {
        hint.store(ticks, Ordering::Relaxed);
    }
}

/// Every pool created and not yet dropped, for the profiler's exit handler
/// (tracy.rs); dead entries are pruned when a pool is created.
#[cfg(feature = "tracy-core")]
fn live_pools() -> &'static Mutex<Vec<Weak<Shared>>> {
    static POOLS: Mutex<Vec<Weak<Shared>>> = Mutex::new(Vec::new());
    &POOLS
}

/// Wakes every thread slot of every live pool, so that threads parked for
/// good leave their profiler zones before the profiler shuts down
/// (tracy.rs). A woken thread finds nothing to do and parks again.
#[cfg(feature = "tracy-core")]
pub(crate) fn wake_all_for_exit() {
    let pools = live_pools().lock().unwrap_or_else(|e| e.into_inner());
    for pool in pools.iter().filter_map(Weak::upgrade) {
        for slot in 0..pool.sleep.slots() {
            pool.sleep.unpark(slot);
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use crate::Pool;

    /// Threads wait for the next frame for the loop's linger, but only
    /// until twice the linger after the latest frame's end: once a loop
    /// stops (a loading screen), a thread that runs out of work parks.
    #[test]
    fn lingering_ends_soon_after_the_latest_frame() {
        let pool = Pool::builder().threads(1).build().unwrap();
        let shared = pool.shared();
        assert_eq!(shared.linger_ticks_at(5_000), 0, "no frame loop yet");
        shared.set_linger_ticks(1_000);
        shared.frame_began(4_000);
        // The thread that ran the frame's last node asks before the frame's
        // thread ends it: the latest end is long past, the frame in flight.
        assert_eq!(shared.linger_ticks_at(9_000), 1_000);
        shared.frame_ended(10_000);
        assert!(shared.between_frames());
        assert_eq!(shared.linger_ticks_at(10_000), 1_000);
        assert_eq!(shared.linger_ticks_at(11_500), 500);
        assert_eq!(shared.linger_ticks_at(12_000), 0);
        assert_eq!(shared.linger_ticks_at(1_000_000), 0, "the loop stopped");
        // The loop goes on: the next frame's end counts.
        shared.frame_began(1_000_000);
        shared.frame_ended(1_000_100);
        assert_eq!(shared.linger_ticks_at(1_000_100), 1_000);
        shared.set_linger_ticks(0);
        assert_eq!(shared.linger_ticks_at(1_000_100), 0, "a paced loop");
    }
}

//! Priority lanes.
//!
//! Every queue in the pool exists once per lane, and every search for work
//! walks the lanes from [`Lane::FrameCritical`] down to [`Lane::Background`].
//! A thread therefore never starts a lower-lane task while a higher-lane one is
//! visible to it (in its own queues, the injector, or a peer's advertised
//! queues; see `pool/search.rs` for the exact search).
//!
//! # Background work under sustained load
//!
//! Lanes are strict priorities, not weighted shares: while frame-critical or
//! normal work keeps every worker busy, background work waits. Two rules keep
//! that from hurting a game:
//!
//! * at most `background_cap` workers run background tasks at once (default:
//!   all workers but one when there are two or more), so one worker is always
//!   free to pick up frame-critical work the moment it appears. A thread
//!   blocked in a wait may still run a background task it pushed itself
//!   (still in its LIFO slot or join deque), without a permit: it takes no
//!   free worker, and the task may be what it waits for. A background task
//!   blocked in a wait lends its permit until the wait ends (permits.rs), so
//!   the cap counts running background tasks, not blocked ones. A pool that
//!   shut down runs what is queued without the cap;
//! * a thread that waits in `join` (block-on-complete) only helps with work at
//!   least as urgent as what it waits for, so a frame never waits behind a
//!   background job that its own main thread started (in a pool with no
//!   worker thread, where nothing else would run them, it runs every lane).
//!
//! Between frames, when frame work is done, background work gets every worker
//! the cap allows. A task already running is never preempted: keep background
//! tasks short (split big jobs) so a worker returns to the search often.

/// The priority class of a task.
///
/// Lanes order from most to least urgent:
///
/// ```
/// use engine_tasks::{Lane, Pool};
///
/// assert!(Lane::FrameCritical < Lane::Normal && Lane::Normal < Lane::Background);
///
/// let pool = Pool::builder().threads(1).build().unwrap();
/// let cull = pool.spawn(Lane::FrameCritical, || "visible set").unwrap();
/// let stream = pool.spawn(Lane::Background, || "next level").unwrap();
/// assert_eq!(cull.lane(), Lane::FrameCritical);
/// assert_eq!(cull.join().unwrap(), "visible set");
/// assert_eq!(stream.join().unwrap(), "next level");
/// ```
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum Lane {
    /// Work the current frame waits for. Always runs first.
    FrameCritical = 0,
    /// Ordinary work.
    Normal = 1,
    /// Work that may span frames: streaming, decompression, precomputation.
    Background = 2,
}

impl Lane {
    /// Number of lanes.
    pub const COUNT: usize = 3;

    /// All lanes, most urgent first: the order every search walks.
    pub const ALL: [Lane; Lane::COUNT] = [Lane::FrameCritical, Lane::Normal, Lane::Background];

    /// The lane's position in [`Lane::ALL`], for indexing per-lane arrays.
    #[inline(always)]
    pub const fn index(self) -> usize {
        self as usize
    }

    /// The lanes that are at least as urgent as `self`, most urgent first.
    ///
    /// ```
    /// use engine_tasks::Lane;
    ///
    /// // What a thread waiting on `Normal` work may run meanwhile.
    /// assert_eq!(Lane::Normal.and_above(), [Lane::FrameCritical, Lane::Normal]);
    /// assert_eq!(Lane::Background.and_above(), Lane::ALL);
    /// ```
    #[inline(always)]
    pub fn and_above(self) -> &'static [Lane] {
        &Lane::ALL[..=self.index()]
    }
}

//! The public pool: spawning, structured parallelism, statistics and
//! shutdown. Its configuration is in `builder.rs`.

use crate::faults;
use crate::lane::Lane;
use crate::pool::builder::PoolBuilder;
use crate::pool::cancel::CancellationToken;
use crate::pool::forbid_waits;
use crate::pool::join as fork_join;
use crate::pool::registry::Shared;
use crate::pool::scope::{self, Scope};
use crate::pool::spawn::{Body, JoinHandle, SpawnCell, WithToken};
use crate::pool::stats::PoolStats;
use crate::pool::worker;
use crate::sync::queue::TaskList;
use std::fmt;
use std::ops::{Deref, Range};
use std::panic::Location;
use std::sync::{Arc, OnceLock};

/// A spawn refused because the pool is shutting down; holds the closure so
/// nothing is lost.
///
/// ```
/// use engine_tasks::{Lane, Pool};
///
/// let pool = Pool::builder().threads(1).build().unwrap();
/// let handle = pool.handle();
/// drop(pool); // the game is quitting
///
/// let refused = handle.spawn(Lane::Background, || "flush telemetry").unwrap_err();
/// // Run it here instead.
/// let flush = refused.into_inner();
/// assert_eq!(flush(), "flush telemetry");
/// ```
#[non_exhaustive]
pub struct SpawnError<F> {
    task: F,
}

impl<F> SpawnError<F> {
    /// The closure that was not spawned.
    pub fn into_inner(self) -> F {
        self.task
    }
}

impl<F> fmt::Debug for SpawnError<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SpawnError(pool is shut down)")
    }
}

impl<F> fmt::Display for SpawnError<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("the pool is shut down; the task was not spawned")
    }
}

impl<F> std::error::Error for SpawnError<F> {}

/// The owner of a work-stealing pool. Dropping it shuts the pool down: it
/// stops accepting `spawn`s, runs every task already queued, and joins every
/// thread. Dropped inside one of the pool's own tasks, it joins no thread
/// (one may be waiting for that task): the workers run what is queued and
/// exit on their own, and tasks may still be running when the drop returns;
/// an outside thread waiting in the pool as its guest runs what is left in
/// its own queues before its wait returns.
/// The same on any thread that holds a slot of another pool (its worker, or
/// a thread waiting in it as its guest: inside that pool's task, `join`
/// half, scope body or wait), since a task of this one may wait on that
/// pool's work, which the dropping thread may be the one to run: a process
/// that exits right after such a drop may cut this pool's tasks off. Inside
/// [`forbid_waits`](crate::forbid_waits) the drop panics and does not shut
/// the pool down: its threads stay parked.
/// All methods come from [`PoolHandle`].
///
/// ```
/// use engine_tasks::{Lane, Pool};
/// use std::sync::atomic::{AtomicUsize, Ordering};
/// use std::sync::Arc;
///
/// let pool = Pool::builder().threads(2).build().unwrap();
/// let saved = Arc::new(AtomicUsize::new(0));
/// for _slot in 0..4 {
///     let saved = saved.clone();
///     // Detached: nobody joins these autosaves.
///     drop(pool.spawn(Lane::Background, move || saved.fetch_add(1, Ordering::Relaxed)));
/// }
/// drop(pool); // runs what is still queued, then joins the workers
/// assert_eq!(saved.load(Ordering::Relaxed), 4);
/// ```
pub struct Pool {
    handle: PoolHandle,
}

impl Pool {
    /// The pool that owns `handle`'s threads (`PoolBuilder::build`).
    pub(super) fn from_handle(handle: PoolHandle) -> Pool {
        Pool { handle }
    }
}

impl Pool {
    /// A pool with the default configuration.
    pub fn new() -> Pool {
        Pool::builder()
            .build()
            .expect("the default pool configuration is valid")
    }

    /// Starts configuring a pool.
    pub fn builder() -> PoolBuilder {
        PoolBuilder::default()
    }

    /// A cloneable handle for spawning from anywhere; it does not keep the
    /// pool running after the `Pool` is dropped (spawns then fail).
    ///
    /// ```
    /// use engine_tasks::{Lane, Pool};
    ///
    /// let pool = Pool::builder().threads(1).build().unwrap();
    /// let handle = pool.handle();
    /// // A loading thread outside the pool submits work too.
    /// let loader = std::thread::spawn(move || {
    ///     let level = handle.spawn(Lane::Background, || "level 2 baked").unwrap();
    ///     level.join().unwrap()
    /// });
    /// assert_eq!(loader.join().unwrap(), "level 2 baked");
    ///
    /// let late = pool.handle();
    /// drop(pool);
    /// assert!(late.spawn(Lane::Normal, || ()).is_err());
    /// ```
    pub fn handle(&self) -> PoolHandle {
        self.handle.clone()
    }
}

impl Default for Pool {
    fn default() -> Self {
        Pool::new()
    }
}

impl Deref for Pool {
    type Target = PoolHandle;

    fn deref(&self) -> &PoolHandle {
        &self.handle
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            // The drop runs queued tasks on this thread (`drain`).
            forbid_waits::check("dropping a `Pool`");
        }
        let shared = &self.handle.shared;
        shared.shutdown_and_join();
        worker::drain(shared);
    }
}

impl fmt::Debug for Pool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Pool")
            .field("threads", &self.threads())
            .finish()
    }
}

/// A shared reference to a pool, for spawning from anywhere.
#[derive(Clone)]
pub struct PoolHandle {
    shared: Arc<Shared>,
}

impl PoolHandle {
    /// A handle of the pool whose state is `shared`.
    pub(super) fn from_shared(shared: Arc<Shared>) -> PoolHandle {
        PoolHandle { shared }
    }
}

impl fmt::Debug for PoolHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PoolHandle")
            .field("threads", &self.threads())
            .finish()
    }
}

impl PoolHandle {
    pub(crate) fn shared(&self) -> &Shared {
        &self.shared
    }

    /// Most worker threads (started lazily).
    pub fn threads(&self) -> usize {
        self.shared.worker_count()
    }

    /// Runs `f` on the pool in `lane`. Fails, handing `f` back, once the pool
    /// is shutting down.
    ///
    /// ```
    /// use engine_tasks::{Lane, Pool};
    ///
    /// let pool = Pool::builder().threads(2).build().unwrap();
    /// // Start the path search early in the frame ...
    /// let path = pool
    ///     .spawn(Lane::Normal, || vec![(0, 0), (1, 0), (1, 1)])
    ///     .unwrap();
    /// // ... do other frame work here, and pick the result up when needed.
    /// assert_eq!(path.join().unwrap().last(), Some(&(1, 1)));
    /// ```
    #[track_caller]
    pub fn spawn<F, T>(&self, lane: Lane, f: F) -> Result<JoinHandle<T>, SpawnError<F>>
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        self.spawn_cell(lane, None, f, Location::caller())
    }

    /// Like [`spawn`](Self::spawn), with a token the task can poll. If the
    /// token is cancelled before the task starts, it is not run and its
    /// handle returns [`JoinError::Cancelled`](crate::JoinError::Cancelled).
    ///
    /// ```
    /// use engine_tasks::{CancellationToken, JoinError, Lane, Pool};
    ///
    /// let pool = Pool::builder().threads(1).build().unwrap();
    /// let level_loaded = CancellationToken::new();
    /// let bake = pool
    ///     .spawn_cancellable(Lane::Background, &level_loaded, |token| {
    ///         let mut probes = 0;
    ///         while probes < 100_000 && !token.is_cancelled() {
    ///             probes += 1; // bake one light probe
    ///         }
    ///         probes
    ///     })
    ///     .unwrap();
    /// level_loaded.cancel(); // the player left the level
    /// match bake.join() {
    ///     Ok(probes) => assert!(probes <= 100_000), // stopped early, or done
    ///     Err(error) => assert!(matches!(error, JoinError::Cancelled)), // never started
    /// }
    /// ```
    #[track_caller]
    pub fn spawn_cancellable<F, T>(
        &self,
        lane: Lane,
        token: &CancellationToken,
        f: F,
    ) -> Result<JoinHandle<T>, SpawnError<F>>
    where
        F: FnOnce(&CancellationToken) -> T + Send + 'static,
        T: Send + 'static,
    {
        self.spawn_cell(
            lane,
            Some(token.clone()),
            WithToken {
                f,
                token: token.clone(),
            },
            Location::caller(),
        )
        .map_err(|err| SpawnError { task: err.task.f })
    }

    fn spawn_cell<F, T>(
        &self,
        lane: Lane,
        token: Option<CancellationToken>,
        f: F,
        site: &'static Location<'static>,
    ) -> Result<JoinHandle<T>, SpawnError<F>>
    where
        F: Body<T> + 'static,
        T: Send + 'static,
    {
        let shared = &self.shared;
        if shared.is_shutdown() {
            return Err(SpawnError { task: f });
        }
        let cell = SpawnCell::new(lane, token, f, site);
        let task = SpawnCell::task_ref(&cell);
        let outside = worker::with_current(|local| match local {
            Some(local) if std::ptr::eq(local.shared, &**shared) => {
                // The pool may shut down from here on and its drop return:
                // a worker's loop still runs what it pushed, and a guest
                // runs it as it leaves the slot (`worker::in_guest_slot`).
                faults::maybe_pause_before_push();
                local.push(lane, task);
                None
            }
            _ => Some(task),
        });
        match outside {
            None => Ok(JoinHandle::new(cell, shared.clone())),
            Some(task) => match shared.inject(lane, task) {
                Ok(()) => Ok(JoinHandle::new(cell, shared.clone())),
                Err(task) => Err(SpawnError {
                    task: SpawnCell::reclaim(cell, task),
                }),
            },
        }
    }

    /// Spawns several tasks in `lane` with a single queue operation and a
    /// single wake-up (the woken thread passes the search on as it finds
    /// work). Handles come back in the order of `tasks`. Fails, handing every
    /// closure back, once the pool is shutting down.
    ///
    /// ```
    /// use engine_tasks::{Lane, Pool};
    ///
    /// let pool = Pool::builder().threads(2).build().unwrap();
    /// // One task per terrain tile, queued in one go.
    /// let tiles = pool
    ///     .spawn_batch(Lane::Background, (0..8u32).map(|tile| move || tile * 100))
    ///     .unwrap();
    /// let heights: Vec<u32> = tiles.into_iter().map(|t| t.join().unwrap()).collect();
    /// assert_eq!(heights, [0, 100, 200, 300, 400, 500, 600, 700]);
    /// ```
    #[track_caller]
    pub fn spawn_batch<I, F, T>(
        &self,
        lane: Lane,
        tasks: I,
    ) -> Result<Vec<JoinHandle<T>>, SpawnError<Vec<F>>>
    where
        I: IntoIterator<Item = F>,
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        let shared = &self.shared;
        let site = Location::caller();
        let tasks: Vec<F> = tasks.into_iter().collect();
        if shared.is_shutdown() {
            return Err(SpawnError { task: tasks });
        }
        let cells: Vec<_> = tasks
            .into_iter()
            .map(|f| SpawnCell::new(lane, None, f, site))
            .collect();
        let inside = worker::with_current(|local| match local {
            Some(local) if std::ptr::eq(local.shared, &**shared) => {
                // See `spawn_cell`.
                faults::maybe_pause_before_push();
                local.push_batch(lane, cells.iter().map(SpawnCell::task_ref));
                true
            }
            _ => false,
        });
        if inside {
            return Ok(cells
                .into_iter()
                .map(|c| JoinHandle::new(c, shared.clone()))
                .collect());
        }
        let mut list = TaskList::new();
        for cell in &cells {
            list.push_back(SpawnCell::task_ref(cell));
        }
        match shared.inject_list(lane, list) {
            Ok(()) => Ok(cells
                .into_iter()
                .map(|c| JoinHandle::new(c, shared.clone()))
                .collect()),
            Err(list) => Err(SpawnError {
                task: cells
                    .into_iter()
                    .zip(list.into_tasks())
                    .map(|(cell, task)| SpawnCell::reclaim(cell, task))
                    .collect(),
            }),
        }
    }

    /// Runs `a` and `b`, potentially in parallel, and returns both results.
    /// A panic in either is re-raised here after both have finished.
    ///
    /// While it waits for work that another thread took, the calling thread
    /// runs queued tasks of the pool at least as urgent as the lane it runs
    /// in (its task's or node's lane; [`Lane::Normal`] on a thread outside
    /// the pool), with the exceptions [`JoinHandle::join`] lists. These may
    /// be unrelated tasks: do not call it while holding a lock that other
    /// tasks take. It panics inside [`forbid_waits`](crate::forbid_waits).
    ///
    /// ```
    /// use engine_tasks::Pool;
    ///
    /// let pool = Pool::builder().threads(1).build().unwrap();
    /// let meshes = [4.0f32, -2.0, 9.5, 1.0];
    /// let (visible, furthest) = pool.join(
    ///     || meshes.iter().filter(|&&z| z > 0.0).count(),
    ///     || meshes.iter().copied().fold(f32::MIN, f32::max),
    /// );
    /// assert_eq!((visible, furthest), (3, 9.5));
    /// ```
    pub fn join<A, B, RA, RB>(&self, a: A, b: B) -> (RA, RB)
    where
        A: FnOnce() -> RA + Send,
        B: FnOnce() -> RB + Send,
        RA: Send,
        RB: Send,
    {
        fork_join::join_in(&self.shared, a, b)
    }

    /// Creates a scope whose tasks may borrow from the caller's stack, and
    /// waits (block-on-complete) until all of them finish. After every task
    /// has finished, the body's panic is re-raised if it panicked, else the
    /// first task's panic; any other payload is dropped.
    ///
    /// While it waits for tasks that other threads took, the calling thread
    /// runs queued tasks of the pool at least as urgent as the least urgent
    /// lane the scope's tasks were spawned in (by default the lane it runs
    /// in: its task's or node's lane; [`Lane::Normal`] on a thread outside
    /// the pool), with the exceptions [`JoinHandle::join`] lists. These may
    /// be unrelated tasks: do not call it while holding a lock that other
    /// tasks take. It panics inside [`forbid_waits`](crate::forbid_waits).
    ///
    /// ```
    /// use engine_tasks::Pool;
    ///
    /// let pool = Pool::builder().threads(1).build().unwrap();
    /// let scene = vec![1u32, 2, 3, 4];
    /// let (mut shadow_pass, mut opaque_pass) = (Vec::new(), Vec::new());
    /// // Both tasks borrow `scene` and write their own command list.
    /// pool.scope(|s| {
    ///     s.spawn(|_| shadow_pass.extend(scene.iter().map(|mesh| mesh * 10)));
    ///     s.spawn(|_| opaque_pass.extend(scene.iter().copied().filter(|m| m % 2 == 0)));
    /// });
    /// assert_eq!(shadow_pass, [10, 20, 30, 40]);
    /// assert_eq!(opaque_pass, [2, 4]);
    /// ```
    pub fn scope<'env, F, R>(&self, f: F) -> R
    where
        F: for<'scope> FnOnce(&'scope Scope<'scope, 'env>) -> R,
    {
        scope::scope_in(&self.shared, f)
    }

    /// Calls `f(i)` for each `i` in `range` in parallel, in pieces of at most
    /// `grain` indices (0 counts as 1), and returns when all are done.
    ///
    /// While it waits for work that another thread took, the calling thread
    /// runs queued tasks of the pool at least as urgent as the lane it runs
    /// in (its task's or node's lane; [`Lane::Normal`] on a thread outside
    /// the pool), with the exceptions [`JoinHandle::join`] lists. These may
    /// be unrelated tasks: do not call it while holding a lock that other
    /// tasks take. It panics inside [`forbid_waits`](crate::forbid_waits).
    ///
    /// ```
    /// use engine_tasks::Pool;
    /// use std::sync::atomic::{AtomicUsize, Ordering};
    ///
    /// let pool = Pool::builder().threads(1).build().unwrap();
    /// let enemy_distance: Vec<f32> = (0..1000).map(|i| i as f32).collect();
    /// let in_range = AtomicUsize::new(0);
    /// pool.parallel_for(0..enemy_distance.len(), 64, |i| {
    ///     if enemy_distance[i] < 50.0 {
    ///         in_range.fetch_add(1, Ordering::Relaxed);
    ///     }
    /// });
    /// assert_eq!(in_range.into_inner(), 50);
    /// ```
    pub fn parallel_for<F>(&self, range: Range<usize>, grain: usize, f: F)
    where
        F: Fn(usize) + Send + Sync,
    {
        // Here, once: a range small enough to run inline still refuses, and
        // each split's `join` checks again.
        forbid_waits::check("`parallel_for`");
        fork_join::parallel_for_in(&self.shared, range, grain, &f);
    }

    /// Calls `f(k, chunk)` in parallel for each `k`-th piece of `data` of
    /// `chunk_len` items (the last piece may be shorter), each a disjoint
    /// `&mut`, and returns when all are done: the mutable counterpart of
    /// [`parallel_for`](Self::parallel_for), and waits as it does.
    ///
    /// ```
    /// use engine_tasks::Pool;
    ///
    /// let pool = Pool::builder().threads(1).build().unwrap();
    /// let velocity = vec![2.0f32; 1000];
    /// let mut position = vec![0.0f32; 1000];
    /// let dt = 0.5;
    /// pool.parallel_chunks_mut(&mut position, 256, |k, chunk| {
    ///     // Piece `k` starts at index `k * 256` of every parallel array.
    ///     for (j, x) in chunk.iter_mut().enumerate() {
    ///         *x += velocity[k * 256 + j] * dt;
    ///     }
    /// });
    /// assert!(position.iter().all(|&x| x == 1.0));
    /// ```
    pub fn parallel_chunks_mut<T, F>(&self, data: &mut [T], chunk_len: usize, f: F)
    where
        T: Send,
        F: Fn(usize, &mut [T]) + Send + Sync,
    {
        forbid_waits::check("`parallel_chunks_mut`");
        fork_join::parallel_chunks_in(&self.shared, data, chunk_len, 0, &f);
    }

    /// A lock-free snapshot of the pool's counters.
    ///
    /// The counters only grow: subtract two snapshots for a frame's share.
    ///
    /// ```
    /// use engine_tasks::{Lane, Pool};
    ///
    /// let pool = Pool::builder().threads(2).build().unwrap();
    /// let before = pool.stats().lane(Lane::Background);
    /// let decodes = pool.spawn_batch(Lane::Background, (0..8).map(|i| move || i)).unwrap();
    /// for decode in decodes {
    ///     decode.join().unwrap();
    /// }
    /// let after = pool.stats().lane(Lane::Background);
    /// assert_eq!(after.spawned - before.spawned, 8);
    /// assert_eq!(after.executed - before.executed, 8);
    /// ```
    pub fn stats(&self) -> PoolStats {
        self.shared.stats()
    }

    /// Tasks queued in `lane` right now, over every queue (a hint).
    ///
    /// ```
    /// use engine_tasks::{Lane, Pool};
    ///
    /// let pool = Pool::builder().threads(1).build().unwrap();
    /// let mut chunks = Vec::new();
    /// for chunk in 0..64 {
    ///     // Back-pressure: stream more terrain next frame rather than
    ///     // piling up work the workers cannot reach soon.
    ///     if pool.queued(Lane::Background) >= 4 {
    ///         break;
    ///     }
    ///     chunks.push(pool.spawn(Lane::Background, move || chunk).unwrap());
    /// }
    /// assert!(chunks.len() >= 4);
    /// for chunk in chunks {
    ///     chunk.join().unwrap();
    /// }
    /// ```
    pub fn queued(&self, lane: Lane) -> usize {
        self.shared.queued(lane)
    }
}

/// The process-wide default pool, created with the default configuration on
/// first use and never shut down.
///
/// ```
/// use engine_tasks::{default_pool, Lane};
///
/// let checksum = default_pool()
///     .spawn(Lane::Background, || b"save".iter().map(|&b| u32::from(b)).sum::<u32>())
///     .unwrap();
/// assert_eq!(checksum.join().unwrap(), 431);
/// assert!(std::ptr::eq(default_pool(), default_pool()));
/// ```
pub fn default_pool() -> &'static Pool {
    static DEFAULT: OnceLock<Pool> = OnceLock::new();
    DEFAULT.get_or_init(Pool::new)
}

/// The pool the calling thread works for, else the default pool.
fn current_shared<R>(f: impl FnOnce(&Shared) -> R) -> R {
    let mut f = Some(f);
    let inside =
        worker::with_current(|local| local.map(|l| (f.take().expect("called once"))(l.shared)));
    match inside {
        Some(result) => result,
        None => (f.take().expect("called once"))(&default_pool().shared),
    }
}

/// [`PoolHandle::join`] on the current thread's pool (or the default pool).
///
/// Recursive splits keep every thread busy without knowing the pool:
///
/// ```
/// fn bounds(xs: &[f32]) -> (f32, f32) {
///     if xs.len() <= 256 {
///         return xs.iter().fold((f32::MAX, f32::MIN), |(lo, hi), &x| (lo.min(x), hi.max(x)));
///     }
///     let (left, right) = xs.split_at(xs.len() / 2);
///     let ((l0, h0), (l1, h1)) = engine_tasks::join(|| bounds(left), || bounds(right));
///     (l0.min(l1), h0.max(h1))
/// }
///
/// let vertices: Vec<f32> = (0..10_000).map(|i| (i % 700) as f32 - 300.0).collect();
/// assert_eq!(bounds(&vertices), (-300.0, 399.0));
/// ```
pub fn join<A, B, RA, RB>(a: A, b: B) -> (RA, RB)
where
    A: FnOnce() -> RA + Send,
    B: FnOnce() -> RB + Send,
    RA: Send,
    RB: Send,
{
    current_shared(|shared| fork_join::join_in(shared, a, b))
}

/// [`PoolHandle::scope`] on the current thread's pool (or the default pool).
///
/// ```
/// use engine_tasks::{Lane, Pool};
///
/// let pool = Pool::builder().threads(2).build().unwrap();
/// let lods = pool.spawn(Lane::Normal, || {
///     let (mut near, mut far) = (0, 0);
///     // Inside a task, `scope` uses that task's pool.
///     engine_tasks::scope(|s| {
///         s.spawn(|_| near = 3);
///         s.spawn(|_| far = 1);
///     });
///     near + far
/// });
/// assert_eq!(lods.unwrap().join().unwrap(), 4);
/// ```
pub fn scope<'env, F, R>(f: F) -> R
where
    F: for<'scope> FnOnce(&'scope Scope<'scope, 'env>) -> R,
{
    current_shared(|shared| scope::scope_in(shared, f))
}

/// [`PoolHandle::parallel_for`] on the current thread's pool (or the default
/// pool).
///
/// ```
/// use std::sync::atomic::{AtomicU32, Ordering};
///
/// let damage: Vec<u32> = vec![5; 300];
/// let total = AtomicU32::new(0);
/// engine_tasks::parallel_for(0..damage.len(), 32, |i| {
///     total.fetch_add(damage[i], Ordering::Relaxed);
/// });
/// assert_eq!(total.into_inner(), 1500);
/// ```
pub fn parallel_for<F>(range: Range<usize>, grain: usize, f: F)
where
    F: Fn(usize) + Send + Sync,
{
    forbid_waits::check("`parallel_for`");
    current_shared(|shared| fork_join::parallel_for_in(shared, range, grain, &f));
}

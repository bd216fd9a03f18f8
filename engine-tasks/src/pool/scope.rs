//! Scoped tasks that may borrow from the caller's stack.
//!
//! Each task is boxed with a pointer to the scope; the scope's latch counts
//! the body plus every live task. `scope` returns (or re-raises the first
//! panic) only after the latch reaches zero, so no task outlives the data it
//! borrows.

use crate::lane::Lane;
use crate::pool::forbid_waits;
use crate::pool::registry::Shared;
use crate::pool::spawn::drop_quietly;
use crate::pool::worker::{self, AbortOnUnwind};
use crate::sync::latch::{Latch, Waiter};
use crate::sync::queue::TaskQueue;
use crate::sync::task::{Header, TaskRef};
use std::any::Any;
use std::marker::PhantomData;
use std::panic::{self, AssertUnwindSafe};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Mutex;

/// A scope in which tasks borrowing `'env` data can be spawned; see
/// [`PoolHandle::scope`](crate::PoolHandle::scope).
pub struct Scope<'scope, 'env: 'scope> {
    shared: &'scope Shared,
    latch: Latch,
    lane: Lane,
    /// The least urgent lane spawned into, as `Lane::index`: the waiter may
    /// have to run such tasks itself.
    lowest_lane: AtomicU8,
    panic: Mutex<Option<Box<dyn Any + Send>>>,
    /// Tasks that only the thread that opened the scope runs
    /// ([`Scope::spawn_on_caller`]), while it waits for the scope.
    inbox: TaskQueue,
    /// How to wake that thread when a task lands in `inbox`.
    caller: Waiter,
    /// Whether that thread holds a slot of the pool, which counts the
    /// inbox's tasks as run: then they count as spawned too.
    caller_counts: bool,
    _scope: PhantomData<&'scope mut &'scope ()>,
    _env: PhantomData<&'env mut &'env ()>,
}

#[repr(C)]
struct ScopeJob<'scope, 'env, F> {
    header: Header,
    scope: &'scope Scope<'scope, 'env>,
    func: F,
}

impl<'scope, 'env, F> ScopeJob<'scope, 'env, F>
where
    F: FnOnce(&'scope Scope<'scope, 'env>) + Send + 'scope,
{
    unsafe fn run(header: NonNull<Header>) {
        // SAFETY: `header` is the first field of a boxed job created by
        // `Scope::spawn_in`, and the queue's reference is the only one.
        let job = unsafe { Box::from_raw(header.cast::<Self>().as_ptr()) };
        let ScopeJob { scope, func, .. } = *job;
        if let Err(payload) = panic::catch_unwind(AssertUnwindSafe(|| func(scope))) {
            // The first panic is re-raised at the scope's end; a later one
            // is dropped here, outside the lock, without unwinding.
            let later = {
                let mut slot = scope.panic.lock().unwrap_or_else(|e| e.into_inner());
                match *slot {
                    None => slot.replace(payload),
                    Some(_) => Some(payload),
                }
            };
            drop_quietly(later);
        }
        let deferred = worker::with_current(|local| match local {
            // Kept as credit, settled later in one go (credit.rs).
            Some(local) if std::ptr::eq(local.shared, scope.shared) => {
                local.credit.defer(&scope.latch);
                true
            }
            _ => false,
        });
        if !deferred {
            // Out of the closure, whose capture of the scope must stay valid
            // for its whole call: after this the scope may end and free its
            // latch. Touch nothing after.
            // SAFETY: this task's count keeps the scope, and its latch,
            // alive until this call gives it back.
            unsafe { Latch::count_down(&raw const scope.latch) };
        }
    }
}

impl<'scope, 'env> Scope<'scope, 'env> {
    /// Spawns a task in the scope's lane (the lane of the task that opened
    /// the scope, or `Normal` outside the pool).
    ///
    /// A task receives the scope, so it can spawn more tasks into it:
    ///
    /// ```
    /// use engine_tasks::Pool;
    /// use std::sync::atomic::{AtomicUsize, Ordering};
    ///
    /// let pool = Pool::builder().threads(1).build().unwrap();
    /// let rooms = [3usize, 5, 2];
    /// let props = AtomicUsize::new(0);
    /// pool.scope(|s| {
    ///     for &count in &rooms {
    ///         let props = &props;
    ///         s.spawn(move |s| {
    ///             // Each room spawns a task per prop it places.
    ///             for _ in 0..count {
    ///                 s.spawn(move |_| {
    ///                     props.fetch_add(1, Ordering::Relaxed);
    ///                 });
    ///             }
    ///         });
    ///     }
    /// });
    /// assert_eq!(props.into_inner(), 10);
    /// ```
    pub fn spawn<F>(&'scope self, f: F)
    where
        F: FnOnce(&'scope Scope<'scope, 'env>) + Send + 'scope,
    {
        self.spawn_in(self.lane, f);
    }

    /// Spawns a task in `lane`.
    ///
    /// ```
    /// use engine_tasks::{Lane, Pool};
    ///
    /// let pool = Pool::builder().threads(1).build().unwrap();
    /// let (mut visible, mut lightmap) = (0, 0);
    /// pool.scope(|s| {
    ///     // The frame waits for culling; the lightmap bake may take its time.
    ///     s.spawn_in(Lane::FrameCritical, |_| visible = 128);
    ///     s.spawn_in(Lane::Background, |_| lightmap = 1);
    /// });
    /// // Either way, the scope returns only when both are done.
    /// assert_eq!((visible, lightmap), (128, 1));
    /// ```
    pub fn spawn_in<F>(&'scope self, lane: Lane, f: F)
    where
        F: FnOnce(&'scope Scope<'scope, 'env>) + Send + 'scope,
    {
        // Relaxed: read by the scope's own thread after the body returns.
        // Loaded first: a read-modify-write on every spawn would contend on
        // the scope's line.
        if lane as u8 > self.lowest_lane.load(Ordering::Relaxed) {
            self.lowest_lane.fetch_max(lane as u8, Ordering::Relaxed);
        }
        let job = Box::new(ScopeJob {
            header: Header::for_scope(ScopeJob::<F>::run, &self.latch),
            scope: self,
            func: f,
        });
        let header = NonNull::from(Box::leak(job)).cast::<Header>();
        // SAFETY: the job is leaked until `run` reclaims it; the scope waits
        // for it to run before its borrowed data may end.
        let task = unsafe { TaskRef::from_raw(header) };
        let task = worker::with_current(|local| match local {
            Some(local) if std::ptr::eq(local.shared, self.shared) => {
                // The task's count: from this thread's credit if it has any
                // for this scope, else added to the latch. Either way before
                // the task is visible to anyone who could finish it.
                if !local.credit.take(&self.latch) {
                    self.latch.increment();
                }
                push_structured(local, lane, task);
                None
            }
            _ => {
                self.latch.increment();
                Some(task)
            }
        });
        if let Some(task) = task {
            self.shared.inject_structured(lane, task);
        }
    }

    /// Spawns a task that runs on the thread that opened the scope, while
    /// that thread waits for the scope to end: for work bound to one thread
    /// (a graphics context, a window, data that is not `Send`) that may run
    /// beside the scope's other tasks. It may be spawned from any task of
    /// the scope; the opening thread runs such tasks before any other work.
    ///
    /// ```
    /// use engine_tasks::Pool;
    /// use std::sync::atomic::{AtomicUsize, Ordering};
    ///
    /// let pool = Pool::builder().threads(2).build().unwrap();
    /// let caller = std::thread::current().id();
    /// let ran_here = AtomicUsize::new(0);
    /// pool.scope(|s| {
    ///     for _ in 0..4 {
    ///         // Spawned by tasks on any thread, run by this one.
    ///         s.spawn(|s| {
    ///             s.spawn_on_caller(|_| {
    ///                 assert_eq!(std::thread::current().id(), caller);
    ///                 ran_here.fetch_add(1, Ordering::Relaxed);
    ///             })
    ///         });
    ///     }
    /// });
    /// assert_eq!(ran_here.load(Ordering::Relaxed), 4);
    /// ```
    pub fn spawn_on_caller<F>(&'scope self, f: F)
    where
        F: FnOnce(&'scope Scope<'scope, 'env>) + Send + 'scope,
    {
        let job = Box::new(ScopeJob {
            header: Header::for_scope(ScopeJob::<F>::run, &self.latch),
            scope: self,
            func: f,
        });
        let header = NonNull::from(Box::leak(job)).cast::<Header>();
        // SAFETY: as in `spawn_in`.
        let task = unsafe { TaskRef::from_raw(header) };
        // The task's count comes before the task is visible to the caller,
        // who may run it and count down at once.
        self.latch.increment();
        if self.caller_counts {
            // In the scope's lane, which the caller counts it run in.
            worker::with_current(|local| match local {
                Some(local) if std::ptr::eq(local.shared, self.shared) => {
                    local.count_spawned(self.lane)
                }
                _ => self.shared.external.lanes[self.lane.index()]
                    .spawned
                    .add_shared(1),
            });
        }
        self.inbox.push(task);
        // After the push: the caller re-checks its inbox before it parks,
        // and a wake-up given before that park is kept (park.rs).
        self.caller.clone().wake();
    }
}

/// Queues a scope task on this thread. A task spawned while this thread
/// runs a task of the same scope (a recursive fan-out) goes to the
/// owner-drained join deque: the owner takes the newest back, thieves the
/// oldest, biggest subtree, and since the deque's owner drains it before
/// parking, the push may skip the wake-up fence. Others (a loop in the
/// scope's body, say) are pushed like any spawn (LIFO slot, then ring, with
/// a wake-up), where thieves take half the ring per steal: from the deque
/// they would take one task per steal, each paying the heavy fence
/// (fence.rs). Scope tasks from threads without a slot go to the injector,
/// which is never refused, even during shutdown.
fn push_structured(local: &worker::Local<'_>, lane: Lane, task: TaskRef) {
    if local.running_scope() != task.scope() {
        local.push(lane, task);
    } else if let Err(task) = local.push_join(lane, task) {
        local.push(lane, task);
    }
}

/// Runs `f` with a new scope and waits for every task spawned in it.
pub(crate) fn scope_in<'env, F, R>(shared: &Shared, f: F) -> R
where
    F: for<'scope> FnOnce(&'scope Scope<'scope, 'env>) -> R,
{
    forbid_waits::check("`scope`");
    worker::with_slot(shared, |local| {
        let lane = local.map_or(Lane::Normal, |l| l.current_lane());
        let scope = Scope {
            shared,
            latch: Latch::new(1),
            lane,
            lowest_lane: AtomicU8::new(lane as u8),
            panic: Mutex::new(None),
            inbox: TaskQueue::new(),
            caller: match local {
                Some(local) => local.slot_waiter(),
                None => crate::pool::wait::waiter_without_slot(),
            },
            caller_counts: local.is_some(),
            _scope: PhantomData,
            _env: PhantomData,
        };
        let result = panic::catch_unwind(AssertUnwindSafe(|| f(&scope)));
        // SAFETY: the scope lives on this frame, which outlasts the call.
        unsafe { Latch::count_down(&scope.latch) };
        // Tasks may spawn into the scope in less urgent lanes while we wait,
        // so the floor is re-read on every round. Relaxed: a lane raised
        // concurrently is also visible through the queue holding its task.
        let floor = || Lane::ALL[usize::from(scope.lowest_lane.load(Ordering::Relaxed))];
        // Tasks borrowing `scope` may still be queued: no unwinding until
        // they have all run.
        let guard = AbortOnUnwind::new("while scope tasks were queued");
        match local {
            Some(local) => local.wait_scope(&scope.latch, floor, &scope.inbox, lane),
            None => crate::pool::wait::wait_without_slot(shared, &scope.latch, Some(&scope.inbox)),
        }
        guard.done();
        let task_panic = scope.panic.lock().unwrap_or_else(|e| e.into_inner()).take();
        // What is not re-raised is dropped first, where a panic of its
        // destructor cannot abort the unwinding process.
        match (result, task_panic) {
            (Ok(value), None) => value,
            (Err(payload), other) => {
                drop_quietly(other);
                panic::resume_unwind(payload)
            }
            (Ok(other), Some(payload)) => {
                drop_quietly(other);
                panic::resume_unwind(payload)
            }
        }
    })
}

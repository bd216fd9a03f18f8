//! Fork-join: `join(a, b)` and `parallel_for`.
//!
//! `join` puts `b` in a task that lives on the caller's stack (no
//! allocation), pushes it onto the thread's join deque (`deque.rs`) where
//! idle threads can steal it, runs `a`, then pops `b` back and runs it inline
//! unless a thief got it first, in which case it waits for `b`
//! (block-on-complete). The stack frame outlives the task because `join`
//! does not return before `b` has run, and aborts rather than unwind while
//! `b` may still be queued (`a`'s own panic is caught and re-raised later).

use crate::lane::Lane;
use crate::pool::forbid_waits;
use crate::pool::registry::Shared;
use crate::pool::spawn::drop_quietly;
use crate::pool::worker::{self, AbortOnUnwind, Local};
use crate::sync::latch::Latch;
use crate::sync::task::{Header, TaskRef};
use std::cell::UnsafeCell;
use std::ops::Range;
use std::panic::{self, AssertUnwindSafe};
use std::ptr::NonNull;
use std::thread;

#[repr(C)]
struct StackJob<F, R> {
    header: Header,
    latch: Latch,
    func: UnsafeCell<Option<F>>,
    result: UnsafeCell<Option<thread::Result<R>>>,
}

impl<F, R> StackJob<F, R>
where
    F: FnOnce() -> R + Send,
    R: Send,
{
    fn new(func: F) -> Self {
        StackJob {
            header: Header::new(Self::run),
            latch: Latch::new(1),
            func: UnsafeCell::new(Some(func)),
            result: UnsafeCell::new(None),
        }
    }

    /// # Safety
    ///
    /// The job must stay in place until its latch is set, and the reference
    /// must be queued or run exactly once.
    unsafe fn task_ref(&self) -> TaskRef {
        // From the whole job, not its `header` field, so that the pointer
        // may reach the rest of the job (a pointer made from a field's
        // reference may only reach that field).
        let header = NonNull::from(self).cast::<Header>();
        // SAFETY: forwarded to the caller; `header` is at offset 0 of the
        // `repr(C)` job, so `run` can recover the job from it.
        unsafe { TaskRef::from_raw(header) }
    }

    unsafe fn run(header: NonNull<Header>) {
        // SAFETY: `header` came from `task_ref`, and the job is alive until
        // the latch is set below.
        let this = unsafe { header.cast::<Self>().as_ref() };
        // SAFETY: only the single runner touches `func` and `result` before
        // the latch is set; the owner reads `result` only after.
        let func = unsafe { (*this.func.get()).take() }.expect("join task ran twice");
        let result = panic::catch_unwind(AssertUnwindSafe(func));
        // SAFETY: as above.
        unsafe { *this.result.get() = Some(result) };
        // After this the owner may return and free the job: touch nothing.
        // SAFETY: the job is alive until its latch is set, which only this
        // call does; a raw pointer, since the owner may free the job while
        // the call still runs (`latch.rs`).
        unsafe { Latch::count_down(&raw const this.latch) };
    }

    /// Runs the job on the owner's thread after popping it back: no other
    /// thread can see it any more, so no latch is involved.
    fn run_inline(self) -> thread::Result<R> {
        let func = self.func.into_inner().expect("join task ran twice");
        panic::catch_unwind(AssertUnwindSafe(func))
    }

    fn into_result(self) -> thread::Result<R> {
        debug_assert!(self.latch.is_set());
        self.result.into_inner().expect("join task did not run")
    }
}

impl Local<'_> {
    /// `join` on a thread that has a slot.
    pub(crate) fn join<A, B, RA, RB>(&self, a: A, b: B) -> (RA, RB)
    where
        A: FnOnce() -> RA,
        B: FnOnce() -> RB + Send,
        RB: Send,
    {
        let lane = self.current_lane();
        let job = StackJob::new(b);
        // SAFETY: `job` stays on this frame until it has run: inline below,
        // or by a thief, whose latch we wait for; `a`'s panic is caught
        // until then.
        let task = unsafe { job.task_ref() };
        let b_header = task.as_ptr();
        let queued = self.push_join(lane, task).is_ok();
        let result_a = panic::catch_unwind(AssertUnwindSafe(a));
        if !queued {
            // The join deque is full (hundreds of nested joins): no
            // parallelism for this one, b runs here, counted as spawned
            // and run like every other half.
            self.count_unqueued_run(lane);
            return finish(result_a, job.run_inline());
        }
        // From here until b has run, `job` may be in a queue: unwinding out
        // of this frame would free it under a thief.
        let guard = AbortOnUnwind::new("while a join half was queued");
        let result_b = loop {
            if job.latch.is_set() {
                // A thief ran b, or a wait further down the stack popped it.
                break job.into_result();
            }
            match self.pop_join(lane) {
                // b itself, as in the common case: run it inline, no latch.
                Some(task) if task.as_ptr() == b_header => {
                    self.count_inline_run(lane);
                    break job.run_inline();
                }
                // b was stolen and this is other work pushed on this thread
                // (an older join half, or a scope task): run it meanwhile.
                Some(task) => self.run_task(task, lane),
                None => self.wait_until(&job.latch, || lane),
            }
        };
        guard.done();
        finish(result_a, result_b)
    }
}

/// The two results, or the first half's panic re-raised (else the
/// second's). The other half's result or payload is dropped first, where
/// a panic of its destructor cannot abort the unwinding process.
fn finish<RA, RB>(a: thread::Result<RA>, b: thread::Result<RB>) -> (RA, RB) {
    match (a, b) {
        (Ok(a), Ok(b)) => (a, b),
        (Err(payload), other) => {
            drop_quietly(other);
            panic::resume_unwind(payload)
        }
        (Ok(other), Err(payload)) => {
            drop_quietly(other);
            panic::resume_unwind(payload)
        }
    }
}

/// `join` in pool `shared`, from any thread.
pub(crate) fn join_in<A, B, RA, RB>(shared: &Shared, a: A, b: B) -> (RA, RB)
where
    A: FnOnce() -> RA + Send,
    B: FnOnce() -> RB + Send,
    RA: Send,
    RB: Send,
{
    forbid_waits::check("`join`");
    worker::with_slot(shared, move |local| match local {
        Some(local) => local.join(a, b),
        None => {
            let lane = Lane::Normal;
            let job = StackJob::new(b);
            // SAFETY: as in `Local::join`: we wait for the latch below
            // before `job` goes out of scope, even if `a` panics.
            shared.inject_structured(lane, unsafe { job.task_ref() });
            let guard = AbortOnUnwind::new("while a join half was queued");
            let result_a = panic::catch_unwind(AssertUnwindSafe(a));
            crate::pool::wait::wait_without_slot(shared, &job.latch, None);
            guard.done();
            finish(result_a, job.into_result())
        }
    })
}

/// Calls `f(i)` for every `i` in `range`, splitting the range in halves with
/// `join` until a piece has at most `grain` indices (a `grain` of 0 counts as 1).
pub(crate) fn parallel_for_in<F>(shared: &Shared, range: Range<usize>, grain: usize, f: &F)
where
    F: Fn(usize) + Sync,
{
    let grain = grain.max(1);
    if range.len() <= grain {
        range.for_each(f);
        return;
    }
    let mid = range.start + range.len() / 2;
    let (low, high) = (range.start..mid, mid..range.end);
    join_in(
        shared,
        || parallel_for_in(shared, low, grain, f),
        || parallel_for_in(shared, high, grain, f),
    );
}

/// Calls `f(k, chunk)` for the `k`-th piece of `data` of `chunk_len` items
/// (the last may be shorter; a `chunk_len` of 0 counts as 1), halving the
/// slice with `join` so that every piece is a disjoint `&mut`.
pub(crate) fn parallel_chunks_in<T, F>(
    shared: &Shared,
    data: &mut [T],
    chunk_len: usize,
    first: usize,
    f: &F,
) where
    T: Send,
    F: Fn(usize, &mut [T]) + Sync,
{
    let chunk_len = chunk_len.max(1);
    let chunks = data.len().div_ceil(chunk_len);
    if chunks <= 1 {
        if !data.is_empty() {
            f(first, data);
        }
        return;
    }
    let low_chunks = chunks / 2;
    let (low, high) = data.split_at_mut(low_chunks * chunk_len);
    join_in(
        shared,
        || parallel_chunks_in(shared, low, chunk_len, first, f),
        || parallel_chunks_in(shared, high, chunk_len, first + low_chunks, f),
    );
}

//! [`PoolExecutor`]: a bevy `SystemExecutor` that runs systems as scope tasks
//! on an engine-tasks pool.
//!
//! One frame is a loop of phases. A phase opens a `PoolHandle::scope`; its
//! body spawns every ready system that may run now, and each finishing task
//! marks itself complete and spawns the systems it unblocked. The scope
//! waits with block-on-complete, so the calling thread runs systems too.
//! Non-`Send` systems are scope tasks that only the calling thread (the
//! world's) runs (`Scope::spawn_on_caller`), beside the systems they do not
//! conflict with. When the scope drains, only exclusive systems and
//! `ApplyDeferred` can be ready: the calling thread runs the first of them
//! with nothing else running, then the next phase starts.
//!
//! What the executor knows of the schedule (dependencies, run conditions,
//! lanes) comes from its build pass at every build (`pass.rs`), and is
//! turned into a plan on the first run after the build (`plan.rs`): a
//! schedule may change between runs, as bevy's own executors allow.
//!
//! Scheduling decisions follow bevy's multi-threaded executor: dependency
//! counts, access conflicts (including those of run conditions), set
//! conditions evaluated once per run, and errors and panics reported through
//! the schedule's error handler (a panicking handler is re-raised after the
//! run, as bevy does).
//!
//! Waking a worker costs microseconds, more than many systems take. The
//! executor measures each system's run time; a thread that finishes a system
//! keeps a frame-critical system that became startable to run itself when
//! it has nothing else lined up (it runs last of its batch, which is
//! last-in-first-out), and also any frame-critical system measured under
//! `INLINE_BELOW_NS` (within a budget), instead of queueing them.
//! Everything else is spawned into its lane.

use crate::condition::ConditionCell;
use crate::pass::SnapshotSlot;
use crate::plan::Plan;
use bevy_ecs::error::{BevyError, ErrorContext, ErrorHandler};
use bevy_ecs::schedule::{FixedBitSet, SystemExecutor, SystemSchedule, SystemWithAccess};
use bevy_ecs::system::{RunSystemError, System};
use bevy_ecs::world::unsafe_world_cell::UnsafeWorldCell;
use bevy_ecs::world::World;
use engine_tasks::profile::zone;
use engine_tasks::{forbid_waits, Lane, PoolHandle, Scope};
use std::any::Any;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, TryLockError};
use std::time::Instant;

type Payload = Box<dyn Any + Send>;

const NO_BUILD: &str = "engine-tasks-bevy: the schedule was built without the executor's \
     build pass (was it removed?); install the executor again";

/// Runs a bevy schedule on an engine-tasks pool; created by
/// [`install`](crate::install).
pub struct PoolExecutor {
    pool: PoolHandle,
    /// Where the build pass leaves what each build recorded (`pass.rs`).
    slot: SnapshotSlot,
    /// The plan of the current build; made on the first run after it.
    plan: Option<Plan>,
    state: Mutex<State>,
    apply_final_deferred: bool,
}

#[derive(Default)]
struct State {
    remaining: Vec<usize>,
    ready: FixedBitSet,
    scratch: FixedBitSet,
    running: FixedBitSet,
    completed: FixedBitSet,
    skipped: FixedBitSet,
    unapplied: FixedBitSet,
    evaluated_sets: FixedBitSet,
    panic: Option<Payload>,
}

/// The systems of the schedule being run, shared by the tasks.
#[derive(Copy, Clone)]
struct Systems(*mut SystemWithAccess);

// SAFETY: the pointer is only dereferenced for system `i` by the one task (or
// the calling thread) the scheduler marked as running `i`, or under the
// state lock for systems not running; `ScheduleSystem` is `Send + Sync`.
unsafe impl Send for Systems {}
// SAFETY: see `Send` above.
unsafe impl Sync for Systems {}

struct Ctx<'a> {
    plan: &'a Plan,
    state: &'a Mutex<State>,
    systems: Systems,
    world: UnsafeWorldCell<'a>,
    error_handler: ErrorHandler,
}

/// Locks the state, spinning a while first: critical sections are short and
/// sleeping in the kernel costs more than a system.
fn lock(state: &Mutex<State>) -> MutexGuard<'_, State> {
    for _ in 0..1000 {
        match state.try_lock() {
            Ok(guard) => return guard,
            Err(TryLockError::Poisoned(e)) => return e.into_inner(),
            Err(TryLockError::WouldBlock) => std::hint::spin_loop(),
        }
    }
    state.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A system whose measured run time is below this runs on the thread that
/// started it rather than as a new task: waking another worker for it costs
/// more than running it.
const INLINE_BELOW_NS: u64 = 2_000;
/// At most this much estimated work is queued to run inline on one thread.
const INLINE_BUDGET_NS: u64 = 8_000;

/// A small stack of system indices.
struct Batch {
    systems: [usize; 32],
    len: usize,
    cost_ns: u64,
}

impl Batch {
    const fn new() -> Self {
        Batch {
            systems: [0; 32],
            len: 0,
            cost_ns: 0,
        }
    }

    fn push(&mut self, i: usize) -> bool {
        if self.len == self.systems.len() {
            return false;
        }
        self.systems[self.len] = i;
        self.len += 1;
        true
    }

    fn pop(&mut self) -> Option<usize> {
        self.len = self.len.checked_sub(1)?;
        Some(self.systems[self.len])
    }
}

impl PoolExecutor {
    pub(crate) fn new(pool: PoolHandle, slot: SnapshotSlot, apply_final_deferred: bool) -> Self {
        PoolExecutor {
            pool,
            slot,
            plan: None,
            state: Mutex::new(State::default()),
            apply_final_deferred,
        }
    }

    /// Makes the plan of the latest build, for `systems` (bevy's executable
    /// schedule), and sizes the run state for it.
    fn make_plan(&mut self, systems: &[SystemWithAccess]) {
        let snapshot = self
            .slot
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
            .expect(NO_BUILD);
        let plan = Plan::new(snapshot, systems);
        let n = plan.len;
        let state = self.state.get_mut().unwrap_or_else(PoisonError::into_inner);
        *state = State {
            ready: FixedBitSet::with_capacity(n),
            scratch: FixedBitSet::with_capacity(n),
            running: FixedBitSet::with_capacity(n),
            completed: FixedBitSet::with_capacity(n),
            skipped: FixedBitSet::with_capacity(n),
            unapplied: FixedBitSet::with_capacity(n),
            evaluated_sets: FixedBitSet::with_capacity(plan.set_conditions.len()),
            ..State::default()
        };
        self.plan = Some(plan);
    }
}

impl SystemExecutor for PoolExecutor {
    fn init(&mut self, _schedule: &SystemSchedule) {
        // Built or rebuilt: the next run makes the plan of the new build.
        self.plan = None;
    }

    fn run(
        &mut self,
        schedule: &mut SystemSchedule,
        world: &mut World,
        skip_systems: Option<&FixedBitSet>,
        error_handler: ErrorHandler,
    ) {
        // SAFETY: the systems are only run and have their buffers applied
        // through `System` methods; the vector itself is never modified.
        let systems = unsafe { schedule.systems_mut() };
        if systems.is_empty() {
            // Nothing to plan: bevy may never have built an empty schedule.
            return;
        }
        if self.plan.is_none() {
            self.make_plan(systems);
        }
        let plan = self.plan.as_ref().expect("made above");
        let state = self.state.get_mut().unwrap_or_else(PoisonError::into_inner);
        state.reset(plan, skip_systems);
        let ctx = Ctx {
            plan,
            state: &self.state,
            systems: Systems(systems.as_mut_ptr()),
            world: world.as_unsafe_world_cell(),
            error_handler,
        };
        loop {
            self.pool.scope(|scope| {
                let mut inline = Batch::new();
                let mut spawn = Batch::new();
                let on_caller =
                    ctx.start_ready(&mut lock(ctx.state), scope, &mut inline, &mut spawn);
                ctx.spawn(&spawn, scope);
                if on_caller {
                    // This thread has non-`Send` systems to run as soon as
                    // the body returns: the others go to the pool, to run
                    // beside them.
                    ctx.spawn(&inline, scope);
                } else {
                    ctx.run_inline(inline, scope);
                }
            });
            let mut st = lock(ctx.state);
            let first = {
                let State { ready, .. } = &*st;
                ready.intersection(&plan.main_thread).next()
            };
            let Some(i) = first else { break };
            st.ready.remove(i);
            // SAFETY: the scope drained, so no system is running and no other
            // reference to system `i` exists; this one ends with the call.
            let system = unsafe { &*ctx.systems.0.add(i) };
            // SAFETY: nothing is running, so the conditions may read anything.
            if unsafe { ctx.should_run(&mut st, i, system) } {
                // SAFETY: this thread owns the world and holds the state
                // lock; the scope drained, so no system runs, and the
                // reference above ended with `should_run`; `i` is a system
                // of the plan.
                unsafe { ctx.run_on_main_thread(&mut st, i) };
                st.unapplied.insert(i);
            }
            st.completed.insert(i);
            signal_dependents(plan, &mut st, i);
        }
        let state = self.state.get_mut().unwrap_or_else(PoisonError::into_inner);
        debug_assert_eq!(state.completed.count_ones(..), plan.len);
        if self.apply_final_deferred {
            apply_deferred(
                &mut state.unapplied,
                systems,
                world,
                error_handler,
                &mut state.panic,
            );
        }
        if let Some(payload) = state.panic.take() {
            resume_unwind(payload);
        }
    }

    fn set_apply_final_deferred(&mut self, value: bool) {
        self.apply_final_deferred = value;
    }
}

impl State {
    /// Ready for a run: the run's progress reset, in case a previous run
    /// unwound half-way (a stale panic dropped, so that it is not re-raised
    /// by this run), and the systems in `skip` counted as done. The systems
    /// whose deferred buffers were not applied yet (`unapplied`) are kept:
    /// their commands apply at the next sync point, as in bevy.
    fn reset(&mut self, plan: &Plan, skip: Option<&FixedBitSet>) {
        if let Some(stale) = self.panic.take() {
            drop_quietly(stale);
        }
        self.remaining.clone_from(&plan.dependency_count);
        self.ready.clone_from(&plan.starting);
        self.running.clear();
        self.completed.clear();
        self.skipped.clear();
        self.evaluated_sets.clear();
        if let Some(skip) = skip {
            self.completed.union_with(skip);
            for i in skip.ones() {
                self.ready.remove(i);
                signal_dependents(plan, self, i);
            }
        }
    }
}

fn signal_dependents(plan: &Plan, st: &mut State, i: usize) {
    for &d in &plan.dependents[i] {
        st.remaining[d] -= 1;
        if st.remaining[d] == 0 && !st.completed.contains(d) {
            st.ready.insert(d);
        }
    }
}

impl<'a> Ctx<'a> {
    fn can_run(&self, st: &State, i: usize) -> bool {
        for set in self.plan.sets_of_system[i].difference(&st.evaluated_sets) {
            if !self.plan.set_condition_conflicts[set].is_disjoint(&st.running) {
                return false;
            }
        }
        self.plan.condition_conflicts[i].is_disjoint(&st.running)
            && (st.skipped.contains(i) || self.plan.conflicts[i].is_disjoint(&st.running))
    }

    /// Marks running every ready system whose access allows it to run now:
    /// non-`Send` ones as tasks of the calling thread (returns whether there
    /// were any), the others as below. The caller runs `inline` itself:
    /// among frame-critical systems, the first one if it has nothing
    /// queued, and cheap ones within the budget. The others (and every
    /// system of another lane) go to `spawn` for [`spawn`](Self::spawn)
    /// once the lock is released (or are spawned at once if `spawn` is
    /// full).
    fn start_ready<'s>(
        &'a self,
        st: &mut State,
        scope: &'s Scope<'s, 'a>,
        inline: &mut Batch,
        spawn: &mut Batch,
    ) -> bool {
        let mut on_caller = false;
        let mut ready = std::mem::take(&mut st.scratch);
        let mut again = true;
        while again {
            again = false;
            ready.clone_from(&st.ready);
            for i in ready.ones() {
                if self.plan.main_thread.contains(i) || !self.can_run(st, i) {
                    continue;
                }
                st.ready.remove(i);
                // SAFETY: `i` is not running (it was ready), so no other
                // reference to it exists while the lock is held.
                let system = unsafe { &*self.systems.0.add(i) };
                // SAFETY: `can_run` checked that no running system conflicts
                // with the conditions.
                if !unsafe { self.should_run(st, i, system) } {
                    st.completed.insert(i);
                    signal_dependents(self.plan, st, i);
                    again = true;
                    continue;
                }
                st.running.insert(i);
                if self.plan.non_send.contains(i) {
                    // The world's thread runs it, beside the other systems.
                    scope.spawn_on_caller(move |scope| self.run_task(i, scope));
                    on_caller = true;
                    continue;
                }
                let cost = self.plan.cost_ns[i].load(Relaxed);
                let cheap = cost < INLINE_BELOW_NS
                    && inline.cost_ns.saturating_add(cost) < INLINE_BUDGET_NS;
                let inline_ok = self.plan.lanes[i] == Lane::FrameCritical;
                if inline_ok && (inline.len == 0 || cheap) && inline.push(i) {
                    inline.cost_ns = inline.cost_ns.saturating_add(cost);
                } else if !spawn.push(i) {
                    scope.spawn_in(self.plan.lanes[i], move |scope| self.run_task(i, scope));
                }
            }
        }
        st.scratch = ready;
        on_caller
    }

    fn spawn<'s>(&'a self, batch: &Batch, scope: &'s Scope<'s, 'a>) {
        for &i in &batch.systems[..batch.len] {
            scope.spawn_in(self.plan.lanes[i], move |scope| self.run_task(i, scope));
        }
    }

    /// A scope task: runs system `i` and what it starts inline.
    fn run_task<'s>(&'a self, i: usize, scope: &'s Scope<'s, 'a>) {
        let mut inline = Batch::new();
        inline.push(i);
        self.run_inline(inline, scope);
    }

    /// Runs the systems of `inline`, and those their completion starts
    /// inline, on this thread.
    fn run_inline<'s>(&'a self, mut inline: Batch, scope: &'s Scope<'s, 'a>) {
        while let Some(i) = inline.pop() {
            let cost = self.plan.cost_ns[i].load(Relaxed);
            inline.cost_ns = inline.cost_ns.saturating_sub(cost);
            self.run_one(i, scope, &mut inline);
        }
    }

    fn run_one<'s>(&'a self, i: usize, scope: &'s Scope<'s, 'a>, inline: &mut Batch) {
        let start = Instant::now();
        // SAFETY: the scheduler marked `i` running, so this task holds the
        // only reference to it.
        let system = unsafe { &mut *self.systems.0.add(i) };
        let result = {
            let _zone = zone(self.plan.zones[i], self.plan.lanes[i]);
            // SAFETY: `i` is not exclusive (it is not a main-thread system) and
            // no running system's access conflicts with it (`can_run`).
            catch_unwind(AssertUnwindSafe(|| unsafe {
                system.run_unsafe((), self.world)
            }))
        };
        let panic = report(result, system, self.error_handler, "System panicked");
        let ns = u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX - 1);
        let old = self.plan.cost_ns[i].load(Relaxed);
        let estimate = if old == u64::MAX {
            ns
        } else {
            (old / 4) * 3 + ns / 4
        };
        // Relaxed: only the thread running `i` writes it; readers only guess.
        self.plan.cost_ns[i].store(estimate, Relaxed);
        let mut spawn = Batch::new();
        {
            let mut st = lock(self.state);
            if let Some(payload) = panic {
                keep_first(&mut st.panic, payload);
            }
            st.running.remove(i);
            st.completed.insert(i);
            st.unapplied.insert(i);
            signal_dependents(self.plan, &mut st, i);
            self.start_ready(&mut st, scope, inline, &mut spawn);
        }
        self.spawn(&spawn, scope);
    }

    /// Runs system `i`, a sync point or an exclusive system, on the thread
    /// that owns the world (non-`Send` systems run as tasks bound to that
    /// thread, `run_one`). A sync point borrows every system, `i` among
    /// them, so the caller holds no reference to a system across this call,
    /// and an exclusive system's reference is taken only in its branch.
    ///
    /// # Safety
    /// The caller runs on the thread that owns the world, holds the state
    /// lock (`st`), no system is running, the caller holds no reference to
    /// a system, and `i < plan.len`.
    unsafe fn run_on_main_thread(&self, st: &mut State, i: usize) {
        let _zone = zone(self.plan.zones[i], self.plan.lanes[i]);
        // SAFETY: no system is running, so the world is not borrowed.
        let world = unsafe { self.world.world_mut() };
        if self.plan.apply_deferred[i] {
            // SAFETY: no system is running, and the caller holds no
            // reference to one, so none of them is borrowed.
            let systems = unsafe { std::slice::from_raw_parts_mut(self.systems.0, self.plan.len) };
            apply_deferred(
                &mut st.unapplied,
                systems,
                world,
                self.error_handler,
                &mut st.panic,
            );
            return;
        }
        debug_assert!(
            self.plan.exclusive[i],
            "only sync points and exclusive systems"
        );
        // SAFETY: `i < plan.len`, no system is running and the caller holds
        // no reference to one: this is the only reference to system `i`.
        let system = unsafe { &mut *self.systems.0.add(i) };
        let result = catch_unwind(AssertUnwindSafe(|| system.run((), world)));
        if let Some(payload) = report(
            result,
            system,
            self.error_handler,
            "Exclusive system panicked",
        ) {
            keep_first(&mut st.panic, payload);
        }
    }

    /// Evaluates the conditions of `i` and of its conditioned sets not yet
    /// evaluated this run, as bevy's executors do.
    ///
    /// # Safety
    /// No running system may conflict with the conditions evaluated.
    unsafe fn should_run(&self, st: &mut State, i: usize, system: &SystemWithAccess) -> bool {
        let mut should_run = !st.skipped.contains(i);
        for set in self.plan.sets_of_system[i].ones() {
            if st.evaluated_sets.contains(set) {
                continue;
            }
            // SAFETY: upheld by the caller.
            let met = unsafe {
                evaluate(
                    &self.plan.set_conditions[set],
                    self.world,
                    self.error_handler,
                    system,
                    true,
                    &mut st.panic,
                )
            };
            if !met {
                st.skipped.union_with(&self.plan.set_members[set]);
            }
            should_run &= met;
            st.evaluated_sets.insert(set);
        }
        // SAFETY: upheld by the caller.
        let met = unsafe {
            evaluate(
                &self.plan.system_conditions[i],
                self.world,
                self.error_handler,
                system,
                false,
                &mut st.panic,
            )
        };
        if !met {
            st.skipped.insert(i);
        }
        should_run && met
    }
}

/// Runs every condition (no short-circuit: conditions may keep state) and
/// folds them with `and`; failures go to the error handler as bevy does, and
/// a panic of the handler is kept in `panic` to be re-raised after the run.
///
/// The caller holds the run's state lock, which every system takes as it
/// ends: the conditions and the handler run inside `forbid_waits`, since a
/// wait on the pool could run a system of this run on this thread, which
/// would then block on that lock for ever. A refused wait panics, and the
/// panic goes to the error handler like any condition's.
///
/// # Safety
/// `world` must allow reading everything the conditions read.
unsafe fn evaluate(
    conditions: &[Arc<ConditionCell>],
    world: UnsafeWorldCell,
    error_handler: ErrorHandler,
    for_system: &SystemWithAccess,
    on_set: bool,
    panic: &mut Option<Payload>,
) -> bool {
    forbid_waits(UNDER_THE_LOCK, || {
        let mut all = true;
        for cell in conditions {
            let mut condition = cell.lock();
            // SAFETY: upheld by the caller.
            let result = catch_unwind(AssertUnwindSafe(|| unsafe {
                condition.run_unsafe((), world)
            }));
            let context = || ErrorContext::RunCondition {
                name: condition.name(),
                last_run: condition.get_last_run(),
                system: for_system.name(),
                on_set,
            };
            let err = match result {
                Ok(Ok(met)) => {
                    all &= met;
                    continue;
                }
                Ok(Err(RunSystemError::Skipped(_))) => {
                    all = false;
                    continue;
                }
                Ok(Err(RunSystemError::Failed(err))) => err,
                Err(payload) => BevyError::panic("Encountered panic", payload),
            };
            all = false;
            if let Err(payload) = catch_unwind(AssertUnwindSafe(|| error_handler(err, context()))) {
                keep_first(panic, payload);
            }
        }
        all
    })
}

/// What [`evaluate`] runs inside `forbid_waits`, for the panic's message.
const UNDER_THE_LOCK: &str = "a run condition or its error handler, which the \
                              engine-tasks executor runs under its run's lock";

/// Keeps the run's first panic in `slot`, to re-raise after the run. A
/// later one is dropped here, where a panic of its destructor is caught
/// (and the payload of that panic forgotten): it must not unwind into the
/// pool's thread or out of the run's lock.
fn keep_first(slot: &mut Option<Payload>, payload: Payload) {
    if slot.is_none() {
        *slot = Some(payload);
    } else {
        drop_quietly(payload);
    }
}

/// Drops a panic's payload; a panic of its destructor is caught, and that
/// panic's payload forgotten.
fn drop_quietly(payload: Payload) {
    if let Err(payload) = catch_unwind(AssertUnwindSafe(move || drop(payload))) {
        if let Err(second) = catch_unwind(AssertUnwindSafe(move || drop(payload))) {
            std::mem::forget(second);
        }
    }
}

/// Hands a failure or panic of `system` to the error handler; returns the
/// handler's own panic, if it panicked, to be re-raised after the run.
fn report(
    result: std::thread::Result<Result<(), RunSystemError>>,
    system: &SystemWithAccess,
    error_handler: ErrorHandler,
    message: &str,
) -> Option<Payload> {
    let err = match result {
        Ok(Ok(()) | Err(RunSystemError::Skipped(_))) => return None,
        Ok(Err(RunSystemError::Failed(err))) => err,
        Err(payload) => BevyError::panic(message.to_owned(), payload),
    };
    let context = ErrorContext::System {
        name: system.name(),
        last_run: system.get_last_run(),
    };
    catch_unwind(AssertUnwindSafe(|| error_handler(err, context))).err()
}

fn apply_deferred(
    unapplied: &mut FixedBitSet,
    systems: &mut [SystemWithAccess],
    world: &mut World,
    error_handler: ErrorHandler,
    panic: &mut Option<Payload>,
) {
    for i in unapplied.ones() {
        let system = &mut systems[i];
        let result = catch_unwind(AssertUnwindSafe(|| {
            system.apply_deferred(world);
            Ok(())
        }));
        let message = "Encountered a panic while applying system buffers";
        if let Some(payload) = report(result, system, error_handler, message) {
            keep_first(panic, payload);
        }
    }
    unapplied.clear();
}

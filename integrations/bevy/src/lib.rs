//! Runs bevy_ecs schedules on the engine-tasks work-stealing pool.
//!
//! Keep your systems and schedules; install the executor with one call:
//!
//! ```
//! use bevy_ecs::prelude::*;
//! # #[derive(Resource, Default)] struct Score(u32);
//! # fn add_score(mut s: ResMut<Score>) { s.0 += 1; }
//! let mut world = World::new();
//! world.init_resource::<Score>();
//! let mut schedule = Schedule::default();
//! schedule.add_systems(add_score);
//! engine_tasks_bevy::install(&mut schedule, &mut world, engine_tasks::default_pool().handle())
//!     .expect("schedule builds");
//! schedule.run(&mut world);
//! assert_eq!(world.resource::<Score>().0, 1);
//! ```
//!
//! Systems run in [`Lane::FrameCritical`] unless a set or system is given
//! another lane with [`Installer::lane`]: as scope tasks, or inline in the
//! task of a system that just ended (see the executor's docs). The thread
//! that calls `Schedule::run` joins with block-on-complete (it runs systems
//! while it waits, as the pool's guest; when another outside thread is the
//! pool's guest at the time, it runs only the systems it started itself
//! (the first batch, and the systems its non-`Send` systems start inline)
//! and its own non-`Send` systems, and sleeps otherwise), runs exclusive
//! systems and `ApplyDeferred` with nothing else running, and runs
//! non-`Send` systems beside the systems they do not conflict with.
//!
//! Non-`Send` systems always run on the thread that calls `Schedule::run`.
//! Unlike bevy's multi-threaded executor, this one does not read the
//! world's `MainThreadExecutor` resource: a schedule with non-`Send`
//! systems must be run from the thread that owns their non-`Send` data.
//! The executor does not support bevy_ecs's `hotpatching` feature.
//!
//! With the `tracy` feature every system run is a Tracy zone named after
//! the system (the feature turns on bevy_ecs's `debug` feature, without
//! which bevy does not keep system names); without it, the zone is a span
//! of the engine-tasks timeline recorder.
//!
//! Run conditions are evaluated while the executor holds the lock of its
//! run's state, which every system takes as it ends. A wait on the pool (a
//! `join`, `scope`, `parallel_for`, a task's `join`, a blocking task's
//! `wait`, a task graph's frame) runs other queued tasks while it waits,
//! and a system of the same run among them would block on that lock for
//! ever. So conditions (and the error handler's
//! calls for them) run inside [`engine_tasks::forbid_waits`]: such a wait
//! panics at its start, and the panic goes to the error handler like any
//! condition's. Keep waits on the pool out of run conditions.
//!
//! Install any time: before the first run, or after it. The executor
//! follows every rebuild of the schedule, as bevy's executors do: systems
//! added or removed (also by `remove_systems_in_set`), sets reconfigured,
//! conditions added. It learns each build through a build pass that
//! [`install`] adds to the schedule, which sees bevy's flattened graph
//! (every set collapsed, empty ones too, and bevy's automatic sync points)
//! and shares each run condition between bevy's schedule and the executor
//! (bevy keeps a built schedule's conditions private). If the executor is
//! swapped for one of bevy's, the conditions still run there. Install again
//! after swapping back.
//!
//! Add your own build passes before installing: bevy runs passes in the
//! order they were added, and one added later runs after the executor's,
//! which does not see what it changes. Systems such a pass adds make the
//! executor run every system one after the other, in bevy's order (every
//! ordering kept, no parallelism), without their run conditions; orderings
//! it adds or removes between existing systems are not seen. (Turning
//! bevy's `auto_insert_apply_deferred` setting off and on again after
//! installing re-adds bevy's own pass after the executor's, with the first
//! effect.)
//!
//! One difference from bevy's multi-threaded executor, on the safe side:
//! weak orderings (`chain_weak`, `before_weak`, `after_weak`) are kept as
//! strict ones. bevy keeps a weak ordering only between systems that
//! conflict (incompatible access, a run condition of one, or of one of its
//! sets, reading what the other writes, an exclusive system, or commands in
//! the earlier one) and drops it between the others, so two non-conflicting
//! systems chained weakly may run at once there and run one after the other
//! here. No public API of bevy 0.20.1 says which orderings are weak: bevy
//! marks them with a private type (a build pass's `add_dependency` only
//! receives options of its own type), keeps them in private fields of the
//! schedule graph, and drops them after the build passes ran, in a graph
//! whose result only reaches bevy's own executors. What it costs, measured
//! with 16 such systems of 20 µs each, weakly chained, on two cores
//! (`benches/executor.rs`, `weak_chain_16`; figures and command in
//! `TESTS.md`): 324-327 µs a run here, one system after the other as on
//! bevy's single-threaded executor (323 µs), against 227-255 µs on bevy's
//! multi-threaded one; the same systems not chained take 210-213 µs here.
//!
//! `install` replaces the schedule's executor, so `set_apply_final_deferred`
//! on the executor it replaces is not carried over, as with bevy's own
//! `Schedule::set_executor` (bevy keeps the setting in the executor and has
//! no getter for it): give it to [`Installer::apply_final_deferred`], or
//! call it after installing.

mod condition;
mod executor;
mod pass;
mod plan;

use bevy_ecs::schedule::{
    InternedSystemSet, IntoSystemSet, Schedule, ScheduleBuildError, SystemSet,
};
use bevy_ecs::world::World;
use engine_tasks::{Lane, PoolHandle};
use pass::{PoolPass, SnapshotSlot};
use std::fmt;

pub use executor::PoolExecutor;

/// The workspace README's code blocks, run as doc tests here: this crate
/// depends on everything they use (engine-tasks and bevy_ecs).
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
pub struct ReadmeDoctests;

/// Installs a [`PoolExecutor`] on `schedule`, with every system in
/// [`Lane::FrameCritical`], and builds the schedule for `world`.
pub fn install(
    schedule: &mut Schedule,
    world: &mut World,
    pool: PoolHandle,
) -> Result<(), InstallError> {
    Installer::new(pool).install(schedule, world)
}

/// Configures a [`PoolExecutor`] before installing it (lanes per set).
#[derive(Debug)]
pub struct Installer {
    pool: PoolHandle,
    lanes: Vec<(InternedSystemSet, Lane)>,
    apply_final_deferred: bool,
}

impl Installer {
    /// An installer for `pool`, with every system in [`Lane::FrameCritical`].
    pub fn new(pool: PoolHandle) -> Self {
        Installer {
            pool,
            lanes: Vec::new(),
            apply_final_deferred: true,
        }
    }

    /// Runs the systems of `set` (a system set, or a system function, which
    /// is its own set) in `lane`. Later calls win for systems in both sets.
    pub fn lane<M>(mut self, set: impl IntoSystemSet<M>, lane: Lane) -> Self {
        self.lanes.push((set.into_system_set().intern(), lane));
        self
    }

    /// Whether the executor applies the systems' deferred buffers
    /// (`Commands`) at the end of every run, as bevy's
    /// `Schedule::set_apply_final_deferred` says. Default: `true`.
    pub fn apply_final_deferred(mut self, apply: bool) -> Self {
        self.apply_final_deferred = apply;
        self
    }

    /// Installs the executor on `schedule` and builds it for `world`. A
    /// schedule that was already built or run is rebuilt; an executor
    /// installed before is replaced.
    pub fn install(self, schedule: &mut Schedule, world: &mut World) -> Result<(), InstallError> {
        let slot = SnapshotSlot::default();
        schedule.add_build_pass(PoolPass {
            slot: slot.clone(),
            lanes: self.lanes,
        });
        schedule.set_executor(PoolExecutor::new(
            self.pool,
            slot,
            self.apply_final_deferred,
        ));
        // A schedule built before this pass was added is marked changed, so
        // that the build runs the pass. One with a build pending, or with
        // nothing in it yet, is left as it is: the set changes the order
        // in which bevy's build sorts the systems added after it.
        let graph = schedule.graph();
        let has_nodes = !graph.systems.is_empty() || !graph.system_sets.is_empty();
        if has_nodes && !schedule.is_changed() {
            schedule.configure_sets(Installed);
        }
        schedule.initialize(world).map_err(InstallError::Build)?;
        Ok(())
    }
}

/// An empty set added by [`Installer::install`] to force a schedule build
/// (of a schedule built before it was installed).
#[derive(SystemSet, Debug, Clone, PartialEq, Eq, Hash)]
struct Installed;

/// Why [`install`] failed.
#[derive(Debug)]
#[non_exhaustive]
pub enum InstallError {
    /// bevy could not build the schedule (cycles, ambiguities set to
    /// error). The executor stays installed, and the next build (after the
    /// schedule is fixed) uses it.
    Build(ScheduleBuildError),
}

impl fmt::Display for InstallError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            InstallError::Build(e) => write!(f, "schedule build failed: {e}"),
        }
    }
}

impl std::error::Error for InstallError {}

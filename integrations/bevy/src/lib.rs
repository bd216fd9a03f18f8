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
//! Systems run as scope tasks in [`Lane::FrameCritical`] unless a set or
//! system is given another lane with [`Installer::lane`]. The thread that
//! calls `Schedule::run` joins with block-on-complete (it runs systems while
//! it waits) and runs exclusive, non-`Send` and `ApplyDeferred` systems
//! itself. With the `tracy` feature every system run is a Tracy zone named
//! after the system (the feature turns on bevy_ecs's `debug` feature, without
//! which bevy does not keep system names); without it, the zone is a span of
//! the engine-tasks timeline recorder.
//!
//! Install after adding every system and before the schedule's first run:
//! bevy's run conditions and dependency counts are private to its built
//! schedule, so [`install`] collects them from the `ScheduleGraph` before and
//! after building it ([`InstallError::AlreadyBuilt`] otherwise). A schedule
//! changed after `install` (systems or sets added) panics on its next run.
//!
//! Differences from bevy's multi-threaded executor, all on the safe side:
//! non-`Send` systems run on the calling thread with no other system running
//! (bevy lets them overlap with non-conflicting `Send` systems); weak
//! orderings (`chain_weak`, `before_weak`) are kept as strict orderings, since
//! which of them bevy resolved away is not public; the stand-in condition
//! left in the graph for each conditioned system or set is never evaluated.
//! `install` adds one observer entity to the world, which forwards
//! `CheckChangeTicks` to the run conditions the executor holds.

mod executor;
mod plan;

use bevy_ecs::change_detection::CheckChangeTicks;
use bevy_ecs::observer::On;
use bevy_ecs::schedule::{
    InternedSystemSet, IntoSystemSet, Schedule, ScheduleBuildError, SystemSet,
};
use bevy_ecs::world::World;
use engine_tasks::{Lane, PoolHandle};
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};

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
}

impl Installer {
    /// An installer for `pool`, with every system in [`Lane::FrameCritical`].
    pub fn new(pool: PoolHandle) -> Self {
        Installer {
            pool,
            lanes: Vec::new(),
        }
    }

    /// Runs the systems of `set` (a system set, or a system function, which
    /// is its own set) in `lane`. Later calls win for systems in both sets.
    pub fn lane<M>(mut self, set: impl IntoSystemSet<M>, lane: Lane) -> Self {
        self.lanes.push((set.into_system_set().intern(), lane));
        self
    }

    /// Installs the executor on `schedule` and builds it for `world`.
    pub fn install(self, schedule: &mut Schedule, world: &mut World) -> Result<(), InstallError> {
        if schedule.systems_with_access().is_ok() {
            return Err(InstallError::AlreadyBuilt);
        }
        let taken = plan::take_conditions(schedule, world);
        let slot = Arc::new(Mutex::new(None));
        let ticks: executor::TickSlot = Arc::new(Mutex::new(None));
        let observed = ticks.clone();
        world.add_observer(move |check: On<CheckChangeTicks>| {
            *observed.lock().unwrap_or_else(PoisonError::into_inner) = Some(*check);
        });
        schedule.set_executor(PoolExecutor::new(self.pool, slot.clone(), ticks));
        // Marks the graph changed, so the build runs and reports the edges
        // its passes added.
        schedule.configure_sets(Installed);
        let metadata = schedule
            .initialize(world)
            .map_err(InstallError::Build)?
            .expect("a changed schedule is rebuilt");
        let built = plan::build(schedule, &metadata, taken, &self.lanes);
        *slot.lock().unwrap_or_else(PoisonError::into_inner) = Some(built);
        Ok(())
    }
}

/// An empty set added by [`Installer::install`] to force a schedule build.
#[derive(SystemSet, Debug, Clone, PartialEq, Eq, Hash)]
struct Installed;

/// Why [`install`] failed.
#[derive(Debug)]
pub enum InstallError {
    /// The schedule had already been built (run or initialized): its run
    /// conditions are inside bevy's private executable schedule.
    AlreadyBuilt,
    /// bevy could not build the schedule (cycles, ambiguities set to error).
    Build(ScheduleBuildError),
}

impl fmt::Display for InstallError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            InstallError::AlreadyBuilt => {
                f.write_str("install the executor before the schedule's first run")
            }
            InstallError::Build(e) => write!(f, "schedule build failed: {e}"),
        }
    }
}

impl std::error::Error for InstallError {}

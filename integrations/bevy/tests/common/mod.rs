//! What the `bevy_*` test files share: the pool, and the executors each case
//! runs on (this crate's, installed before or after the systems are added,
//! and bevy's multi-threaded one).

#![allow(dead_code, reason = "each test file uses a part of this module")]

use bevy_ecs::prelude::*;
use bevy_ecs::schedule::{MultiThreadedExecutor, ScheduleLabel};
use engine_tasks::Pool;
use engine_tasks_bevy::install;
use std::any::Any;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// Worker threads of the pool the tests run on.
pub const POOL_THREADS: usize = 3;

pub fn pool() -> &'static Pool {
    static POOL: OnceLock<Pool> = OnceLock::new();
    POOL.get_or_init(|| Pool::builder().threads(POOL_THREADS).build().expect("pool"))
}

/// Which executor runs a case, and when it is put on the schedule.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Runner {
    /// This crate's executor, installed once the case's systems are added
    /// (just before the first run).
    Pool,
    /// This crate's executor, installed on the empty schedule, before any
    /// system is added: it must follow the builds that come after.
    PoolFromStart,
    /// bevy's `MultiThreadedExecutor`.
    Bevy,
}

/// Every executor a case runs on.
pub const RUNNERS: [Runner; 3] = [Runner::Pool, Runner::PoolFromStart, Runner::Bevy];

impl Runner {
    pub fn is_pool(self) -> bool {
        self != Runner::Bevy
    }

    /// A new unlabelled schedule for this runner.
    pub fn schedule(self, world: &mut World) -> Schedule {
        self.schedule_labelled(Schedule::default(), world)
    }

    /// Prepares a new `schedule` (no system in it yet) for this runner:
    /// [`Runner::PoolFromStart`] installs now, [`Runner::Bevy`] sets bevy's
    /// executor.
    pub fn schedule_labelled(self, mut schedule: Schedule, world: &mut World) -> Schedule {
        match self {
            Runner::Pool => {}
            Runner::PoolFromStart => {
                install(&mut schedule, world, pool().handle()).expect("an empty schedule builds")
            }
            Runner::Bevy => {
                schedule.set_executor(MultiThreadedExecutor::new());
            }
        }
        schedule
    }

    /// A new schedule with this label for this runner.
    pub fn schedule_with_label(self, label: impl ScheduleLabel, world: &mut World) -> Schedule {
        self.schedule_labelled(Schedule::new(label), world)
    }

    /// Called once the case's systems are added: [`Runner::Pool`] installs
    /// the executor now. The others have theirs already.
    pub fn ready(self, schedule: &mut Schedule, world: &mut World) {
        if self == Runner::Pool {
            install(schedule, world, pool().handle()).expect("the schedule builds");
        }
    }
}

/// Runs `schedule`; a panic out of the run is raised again with the runner
/// named in front of its message.
pub fn run(runner: Runner, schedule: &mut Schedule, world: &mut World) {
    if let Err(payload) = catch_unwind(AssertUnwindSafe(|| schedule.run(world))) {
        match message(&*payload) {
            Some(text) => panic!("{runner:?}: {text}"),
            None => resume_unwind(payload),
        }
    }
}

/// Runs `schedule` and returns the message of the panic that came out of
/// the run, if one did.
pub fn run_catching(schedule: &mut Schedule, world: &mut World) -> Option<String> {
    catch_unwind(AssertUnwindSafe(|| schedule.run(world)))
        .err()
        .map(|payload| message(&*payload).unwrap_or_else(|| "<not a string>".to_owned()))
}

/// The text of a panic payload.
pub fn message(payload: &(dyn Any + Send)) -> Option<String> {
    payload
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| payload.downcast_ref::<&str>().map(|s| (*s).to_owned()))
}

/// Spins (yielding) until `done` holds; false if it did not within 10 s.
pub fn wait_for(mut done: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !done() {
        if Instant::now() > deadline {
            return false;
        }
        std::thread::yield_now();
    }
    true
}

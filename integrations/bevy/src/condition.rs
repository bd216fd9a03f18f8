//! Run conditions shared between bevy's schedule and this executor.
//!
//! bevy keeps a built schedule's run conditions in private fields of its
//! `SystemSchedule`, where a custom executor cannot reach them. So at every
//! build the executor's build pass (`pass.rs`) moves each real condition
//! into a [`ConditionCell`] and leaves in its place a [`SharedCondition`]:
//! a condition that forwards every call to the cell. The executor evaluates
//! conditions through its cells; bevy, if the schedule's executor is ever
//! swapped for one of its own, evaluates the same conditions through the
//! proxies. Either way each condition keeps one state (its `Local`s, its
//! change ticks), and no condition is lost or replaced by a stand-in when a
//! build fails or the schedule is rebuilt.
//!
//! A proxy that comes back into the graph on a rebuild (bevy moves the
//! conditions of its executable schedule back before it builds again) is
//! recognised through [`find`], a registry of live proxies by address, and
//! its cell is reused rather than wrapped again.

use bevy_ecs::change_detection::{CheckChangeTicks, Tick};
use bevy_ecs::schedule::{BoxedCondition, ConditionWithAccess, InternedSystemSet};
use bevy_ecs::system::{
    ReadOnlySystem, RunSystemError, System, SystemAccess, SystemIn, SystemStateFlags,
};
use bevy_ecs::utils::prelude::DebugName;
use bevy_ecs::world::unsafe_world_cell::UnsafeWorldCell;
use bevy_ecs::world::{DeferredWorld, World};
use std::any::TypeId;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};

/// A run condition and its access, shared by its proxy in bevy's schedule
/// and by the executor.
pub(crate) struct ConditionCell {
    condition: Mutex<BoxedCondition>,
    /// The access bevy computed when it initialized the condition: copied
    /// when the cell is made, and again whenever bevy initializes the
    /// condition through its proxy (a condition that a build pass added is
    /// initialized only after every pass ran, so at first its access is
    /// empty).
    access: Mutex<SystemAccess>,
}

impl ConditionCell {
    /// The condition, for one evaluation (or one forwarded call). Never
    /// contended: one executor runs a schedule at a time.
    pub(crate) fn lock(&self) -> MutexGuard<'_, BoxedCondition> {
        self.condition
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// The condition's access, as bevy last computed it.
    pub(crate) fn access(&self) -> MutexGuard<'_, SystemAccess> {
        self.access.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Runs `f` on the live proxies, by the address of the proxy itself, to
/// their cells.
fn with_registry<R>(f: impl FnOnce(&mut HashMap<usize, Weak<ConditionCell>>) -> R) -> R {
    static REGISTRY: Mutex<Option<HashMap<usize, Weak<ConditionCell>>>> = Mutex::new(None);
    let mut guard = REGISTRY.lock().unwrap_or_else(PoisonError::into_inner);
    f(guard.get_or_insert_with(HashMap::new))
}

/// The address of a boxed condition's object.
fn address(condition: &BoxedCondition) -> usize {
    &**condition as *const dyn ReadOnlySystem<In = (), Out = bool> as *const () as usize
}

/// The cell of `condition` if it is one of this crate's proxies.
pub(crate) fn find(condition: &BoxedCondition) -> Option<Arc<ConditionCell>> {
    if condition.system_type() != TypeId::of::<SharedCondition>() {
        return None;
    }
    with_registry(|proxies| proxies.get(&address(condition)).and_then(Weak::upgrade))
}

/// Shares the condition in `slot`: if it is a proxy already, returns its
/// cell; otherwise moves it into a new cell and leaves a proxy in `slot`.
pub(crate) fn share(slot: &mut ConditionWithAccess) -> Arc<ConditionCell> {
    if let Some(cell) = find(&slot.condition) {
        return cell;
    }
    let name = slot.condition.name();
    // A placeholder for the moment between taking the real condition out
    // and putting the proxy in.
    let placeholder: BoxedCondition = Box::new(bevy_ecs::system::IntoSystem::into_system(|| true));
    let real = std::mem::replace(&mut slot.condition, placeholder);
    let cell = Arc::new(ConditionCell {
        condition: Mutex::new(real),
        access: Mutex::new(slot.access.clone()),
    });
    let proxy: BoxedCondition = Box::new(SharedCondition {
        cell: cell.clone(),
        name,
    });
    with_registry(|proxies| proxies.insert(address(&proxy), Arc::downgrade(&cell)));
    slot.condition = proxy;
    cell
}

/// The condition left in bevy's schedule: forwards to its cell.
struct SharedCondition {
    cell: Arc<ConditionCell>,
    name: DebugName,
}

impl Drop for SharedCondition {
    fn drop(&mut self) {
        let me = self as *const SharedCondition as *const () as usize;
        with_registry(|proxies| proxies.remove(&me));
    }
}

impl System for SharedCondition {
    type In = ();
    type Out = bool;

    fn name(&self) -> DebugName {
        self.name.clone()
    }

    fn flags(&self) -> SystemStateFlags {
        self.cell.lock().flags()
    }

    unsafe fn run_unsafe(
        &mut self,
        input: SystemIn<'_, Self>,
        world: UnsafeWorldCell,
    ) -> Result<bool, RunSystemError> {
        // SAFETY: the caller's guarantees for this proxy are those for the
        // condition it forwards to, whose access it reports.
        unsafe { self.cell.lock().run_unsafe(input, world) }
    }

    fn apply_deferred(&mut self, world: &mut World) {
        self.cell.lock().apply_deferred(world);
    }

    fn queue_deferred(&mut self, world: DeferredWorld) {
        self.cell.lock().queue_deferred(world);
    }

    fn initialize(&mut self, world: &mut World) -> SystemAccess {
        let access = self.cell.lock().initialize(world);
        *self.cell.access() = access.clone();
        access
    }

    fn check_change_tick(&mut self, check: CheckChangeTicks) {
        self.cell.lock().check_change_tick(check);
    }

    fn default_system_sets(&self) -> Vec<InternedSystemSet> {
        self.cell.lock().default_system_sets()
    }

    fn get_last_run(&self) -> Tick {
        self.cell.lock().get_last_run()
    }

    fn set_last_run(&mut self, last_run: Tick) {
        self.cell.lock().set_last_run(last_run);
    }
}

// SAFETY: the proxy only forwards to a read-only condition (a
// `BoxedCondition` is a `ReadOnlySystem`), so it never writes the world.
unsafe impl ReadOnlySystem for SharedCondition {}

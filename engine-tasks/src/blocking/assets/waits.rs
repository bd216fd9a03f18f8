//! The wait-for graph of dependencies: an edge from a load to each load it
//! will wait for, added when a loader asks for a dependency
//! ([`LoadContext::depend`](super::LoadContext::depend)) and removed when
//! the waiting load ends. An edge whose target can already reach its source
//! would close a cycle: it is refused, and the load fails with
//! [`AssetErrorKind::DependencyCycle`](super::AssetErrorKind::DependencyCycle)
//! instead of waiting forever.

use super::handle::SlotCore;
use super::streamer::Inner;
use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::Mutex;

/// Slot id -> the slots (id, path) it waits for.
#[derive(Default)]
pub(super) struct WaitGraph(Mutex<HashMap<u64, Vec<(u64, PathBuf)>>>);

impl Inner {
    /// Records that slot `from` will wait for `to`, unless that closes a
    /// cycle: then the paths from `to` back to `from`.
    pub(super) fn add_wait_edge(&self, from: u64, to: &SlotCore) -> Result<(), Vec<PathBuf>> {
        let mut waits = self.waits.0.lock().unwrap_or_else(|e| e.into_inner());
        if from == to.id {
            return Err(Vec::new());
        }
        // Depth-first from `to` over the waits of unfinished loads.
        let mut stack = vec![(to.id, vec![to.path.clone()])];
        let mut seen = HashSet::new();
        while let Some((at, trail)) = stack.pop() {
            if at == from {
                return Err(trail);
            }
            if !seen.insert(at) {
                continue;
            }
            for (id, path) in waits.get(&at).into_iter().flatten() {
                let mut trail = trail.clone();
                trail.push(path.clone());
                stack.push((*id, trail));
            }
        }
        waits
            .entry(from)
            .or_default()
            .push((to.id, to.path.clone()));
        Ok(())
    }

    /// The load `id` ended: it waits for nothing any more.
    pub(super) fn remove_wait_edges(&self, id: u64) {
        self.waits
            .0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&id);
    }
}

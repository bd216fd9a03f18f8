//! Reloads: `AssetStreamer::reload`, the cascade that reloads the loads
//! depending on a reloaded one (each at most once, so a cycle made by
//! reloads ends), and the dependency lists every load rewrites.

use super::handle::AnySlot;
use super::streamer::{Inner, Job, Pending};
use super::typed::normalise;
use super::AssetStreamer;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};

impl AssetStreamer {
    /// Loads every live typed load of `path` again (read, then decode in
    /// the background); each new value is swapped in at an
    /// [`update`](Self::update) ([`LoadEvent::Reloaded`](super::LoadEvent::Reloaded)), and the loads
    /// that depend on it reload in turn. A reload that fails keeps the old
    /// value ([`LoadEvent::ReloadFailed`](super::LoadEvent::ReloadFailed)). A load still running reloads
    /// once it ends. Returns how many loads were queued or marked.
    ///
    /// A reload reloads each slot at most once, also through dependencies
    /// that form a cycle. It looks the path up among the live loads under
    /// the request queue's lock, so it may briefly wait.
    pub fn reload(&self, path: impl AsRef<Path>) -> usize {
        Inner::reload_path(&self.inner, path.as_ref())
    }
}

impl Inner {
    /// Queues a reload of `slot` in reload cascade `cascade` (or marks it,
    /// if a load runs). A slot that already reloaded in `cascade` does not
    /// again, unless `again` (its own pending reload, marked in it).
    /// Whether it queued or marked one.
    pub(super) fn queue_reload(
        this: &Arc<Inner>,
        slot: Arc<dyn AnySlot>,
        cascade: u64,
        again: bool,
    ) -> bool {
        {
            let mut requests = this.lock_requests();
            let core = slot.core();
            let mut st = core.lock();
            if !again {
                if st.cascade == cascade {
                    return false;
                }
                st.cascade = cascade;
            }
            if st.loading {
                st.dirty = true;
                return true;
            }
            if st.outcome.is_none() || core.loader.is_none() {
                return false;
            }
            st.loading = true;
            st.reload = true;
            let (priority, path) = (st.priority, core.path.clone());
            drop(st);
            requests.push(
                priority,
                Pending {
                    path,
                    job: Job::Slot(slot.clone()),
                },
            );
        }
        Inner::pump(this);
        true
    }

    /// See [`AssetStreamer::reload`].
    pub(super) fn reload_path(this: &Arc<Inner>, path: &Path) -> usize {
        let norm = normalise(path);
        let slots: Vec<Arc<dyn AnySlot>> = {
            let requests = this.lock_requests();
            requests
                .slots
                .iter()
                .filter(|((p, _, _), _)| *p == norm)
                .filter_map(|(_, slot)| slot.upgrade())
                .collect()
        };
        // Relaxed: only distinct numbers are needed.
        let cascade = CASCADES.fetch_add(1, Ordering::Relaxed) + 1;
        slots
            .into_iter()
            .filter(|slot| Inner::queue_reload(this, slot.clone(), cascade, false))
            .count()
    }
}

/// Reload cascades started so far: each [`AssetStreamer::reload`] (or
/// watched change) starts one, which the reloads of dependents carry on.
static CASCADES: AtomicU64 = AtomicU64::new(0);

/// Records `deps` as the dependencies of `slot`'s last load, and takes
/// `slot` out of the reverse lists of the slots it no longer depends on, so
/// a reload reloads only the slots whose last load depended on it.
pub(super) fn rewire(slot: &Arc<dyn AnySlot>, deps: &[Arc<dyn AnySlot>]) {
    let me = Arc::downgrade(slot);
    let new: Vec<Weak<dyn AnySlot>> = deps.iter().map(Arc::downgrade).collect();
    let old = std::mem::replace(&mut slot.core().lock().deps, new);
    for gone in old.iter().filter_map(Weak::upgrade) {
        if deps.iter().any(|d| Arc::ptr_eq(d, &gone)) {
            continue;
        }
        let mut st = gone.core().lock();
        st.reverse_deps
            .retain(|d| d.strong_count() > 0 && !Weak::ptr_eq(d, &me));
    }
}

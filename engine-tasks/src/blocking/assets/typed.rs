//! Typed loads: requests that share a slot, the slot's load job (read on
//! a reader, decode in background steps, wait for dependencies), its end
//! (a commit for the next `update`), cancellation, priorities, the end of a
//! reload (`reload.rs` queues them and their cascades) and
//! the wait-for graph that refuses dependency cycles. The states are in the
//! parent module's docs.
//!
//! Lock order: the streamer's requests, then a slot's state, then the
//! commit queue. The wait-for graph's lock is taken alone.

use super::budget::Ticket;
use super::codec::DECODE_STEP;
use super::handle::{
    AnySlot, Commit, Handle, Leftover, LoadEvent, LoadStatus, Req, Slot, SlotCore, SlotState,
    Waiting,
};
use super::loader::{AssetLoader, ErasedDecode, ErasedLoader, ErasedSteps, LoadContext};
use super::loaders::{BytesLoader, Lz4Loader, PngLoader, ZstdLoader};
use super::reload::rewire;
use super::streamer::{next_step, Inner, Job, Pending, QueueKey, Requests, UNLIMITED};
use super::{AssetError, AssetErrorKind, AssetId, AssetStreamer};
use crate::lane::Lane;
use crate::pool::spawn::{drop_quietly, panic_message};
use std::any::{Any, TypeId};
use std::panic::{self, AssertUnwindSafe};
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::{Arc, TryLockError, Weak};
use std::task::Poll;

/// Which loader a request uses.
enum Choice {
    /// The one registered for the extension that makes the type.
    Registered,
    /// This one (`load_with`).
    Given(Arc<dyn ErasedLoader>, TypeId),
}

impl AssetStreamer {
    /// Registers `loader` for its extensions, replacing a loader registered
    /// there before that makes the same type. Built in: `eta`
    /// ([`Lz4Loader`]), `zst` ([`ZstdLoader`]), `png` ([`PngLoader`]) and
    /// `bin` ([`BytesLoader`]).
    pub fn register<L: AssetLoader>(&self, loader: L) {
        let loader: Arc<dyn ErasedLoader> = Arc::new(loader);
        // User code (`extensions`, and the replaced loaders' drops) runs
        // outside the registry's lock.
        let extensions = loader.extension_list();
        let mut replaced = Vec::new();
        let mut registry = self
            .inner
            .loaders
            .write()
            .unwrap_or_else(|e| e.into_inner());
        for extension in extensions {
            let list = registry.entry(extension).or_default();
            let (kept, gone): (Vec<_>, Vec<_>) = std::mem::take(list)
                .into_iter()
                .partition(|l| l.output() != loader.output());
            *list = kept;
            replaced.extend(gone);
            list.push(loader.clone());
        }
        drop(registry);
        drop(replaced);
    }

    pub(super) fn register_builtin_loaders(&self) {
        self.register(Lz4Loader);
        self.register(ZstdLoader::default());
        self.register(PngLoader::default());
        self.register(BytesLoader::default());
    }

    /// Requests the asset at `path` (relative to the root) as a `T`, with
    /// the loader registered for its extension that makes a `T`; higher
    /// `priority` is read first. A request of a path and type that is
    /// loading or loaded already shares that load and its value.
    ///
    /// Never fails here: the request ends in one [`LoadEvent`] at an
    /// [`update`](Self::update) — loaded, or failed with the reason
    /// ([`AssetErrorKind::UnknownExtension`] if no loader reads the
    /// extension, [`AssetErrorKind::WrongType`] if none of them makes a
    /// `T`). The same path asked for as two types is two loads.
    ///
    /// Takes the request queue's lock, which readers also take, so it may
    /// briefly wait (see the module docs).
    pub fn load<T: Send + Sync + 'static>(
        &self,
        path: impl AsRef<Path>,
        priority: i32,
    ) -> Handle<T> {
        Inner::request_slot::<T>(
            &self.inner,
            path.as_ref(),
            priority,
            Choice::Registered,
            true,
        )
        .0
    }

    /// Like [`load`](Self::load), with `loader` instead of a registered one.
    /// Requests share a load when path, type and loader type match (the
    /// first request's loader is the one used).
    pub fn load_with<L: AssetLoader>(
        &self,
        path: impl AsRef<Path>,
        priority: i32,
        loader: L,
    ) -> Handle<L::Asset> {
        let choice = Choice::Given(Arc::new(loader), TypeId::of::<L>());
        Inner::request_slot::<L::Asset>(&self.inner, path.as_ref(), priority, choice, true).0
    }

    /// Call once per frame, at its start: swaps the values of the typed
    /// loads that ended (or reloaded) since the last call into their
    /// handles and moves their events into `out`. Never waits on a lock:
    /// if a loader is queueing a result right now, everything waits for the
    /// next call. The values a reload replaced are freed on the background
    /// lane, not here; a value whose drop panics is freed with its panic
    /// discarded. Returns how many events were moved.
    pub fn update(&self, out: &mut Vec<LoadEvent>) -> usize {
        let commits = match self.inner.commits.try_lock() {
            Ok(mut commits) => std::mem::take(&mut *commits),
            // A commit is pushed whole: the queue is consistent.
            Err(TryLockError::Poisoned(poisoned)) => std::mem::take(&mut *poisoned.into_inner()),
            Err(TryLockError::WouldBlock) => return 0,
        };
        let before = out.len();
        let mut leftovers: Vec<Leftover> = Vec::new();
        for commit in commits {
            let (slot, replaced) = commit.apply(out);
            // A slot only this commit holds would be freed here, with its
            // value.
            if replaced.is_some() || Arc::strong_count(&slot) == 1 {
                leftovers.push((slot, replaced));
            } else {
                // Another holder may let go between the count and this
                // drop, and then the slot's value is freed here after all:
                // quietly, so that a value whose drop panics cannot cut
                // short the commits after it and lose their events.
                drop_quietly(slot);
            }
        }
        if !leftovers.is_empty() {
            // Replaced values (a texture, a mesh) are freed on the
            // background lane, not the frame thread; if the pool refuses,
            // here.
            let free = move || free_leftovers(leftovers);
            if let Err(refused) = self.inner.pool.spawn(Lane::Background, free) {
                (refused.into_inner())();
            }
        }
        out.len() - before
    }
}

/// Frees what `update`'s commits left, each on its own: a value whose drop
/// panics has its panic discarded, and the others are still freed. Dropped
/// as one `Vec`, a second panic would come while the first unwound, and
/// abort the process.
fn free_leftovers(leftovers: Vec<Leftover>) {
    for leftover in leftovers {
        drop_quietly(leftover);
    }
}

/// `path` without `.` components.
pub(super) fn normalise(path: &Path) -> PathBuf {
    path.components()
        .filter(|c| !matches!(c, Component::CurDir))
        .collect()
}

impl Inner {
    /// A request of `path` as a `T` (a user's, or a dependency's when
    /// `user` is false: no event, and the slot is pinned for the caller).
    fn request_slot<T: Send + Sync + 'static>(
        this: &Arc<Inner>,
        path: &Path,
        priority: i32,
        choice: Choice,
        user: bool,
    ) -> (Handle<T>, Arc<dyn AnySlot>) {
        let norm = normalise(path);
        let mut requests = this.lock_requests();
        let id = requests.new_id();
        if user {
            // Relaxed: a statistic.
            this.counters.requested.fetch_add(1, Ordering::Relaxed);
        }
        let (loader, loader_key) = match choice {
            Choice::Registered => (this.find_loader::<T>(&norm), None),
            Choice::Given(loader, key) => (Ok(loader), Some(key)),
        };
        let loader = if super::streamer::is_plain_relative(path) {
            loader
        } else {
            Err(AssetErrorKind::OutsideRoot)
        };
        let loader = match loader {
            Ok(loader) => loader,
            Err(kind) => {
                let slot_id = next_slot(&mut requests);
                let slot = Slot::<T>::new(SlotCore::new(slot_id, norm, None));
                let any: Arc<dyn AnySlot> = slot.clone();
                drop(requests);
                if !user {
                    // The caller's `DepPin` gives it back.
                    any.core().pin();
                }
                this.fail_at_once(&any, user.then_some(id), path, kind);
                return (Handle::new(id, slot), any);
            }
        };
        let key = (norm.clone(), TypeId::of::<T>(), loader_key);
        let existing = requests.slots.get(&key).and_then(Weak::upgrade);
        let slot = match existing {
            Some(slot) => slot
                .as_any()
                .downcast::<Slot<T>>()
                .expect("the key holds the type"),
            None => {
                let slot_id = next_slot(&mut requests);
                let slot = Slot::<T>::new(SlotCore::new(slot_id, norm, Some(loader)));
                let weak: Weak<Slot<T>> = Arc::downgrade(&slot);
                if requests.slots.len() >= 64 && requests.slots.len().is_power_of_two() {
                    requests.slots.retain(|_, s| s.strong_count() > 0);
                }
                requests.slots.insert(key, weak as Weak<dyn AnySlot>);
                slot
            }
        };
        let any: Arc<dyn AnySlot> = slot.clone();
        let started = Self::join(
            this,
            &mut requests,
            &any,
            user.then_some(id),
            path,
            priority,
        );
        drop(requests);
        if started {
            Inner::pump(this);
        }
        (Handle::new(id, slot), any)
    }

    /// Adds a request (or a dependency's pin) to a slot, starting its load
    /// if none runs and it has no value. `true` if a job was queued.
    fn join(
        this: &Arc<Inner>,
        requests: &mut Requests,
        slot: &Arc<dyn AnySlot>,
        id: Option<AssetId>,
        path: &Path,
        priority: i32,
    ) -> bool {
        let core = slot.core();
        let mut st = core.lock();
        if id.is_none() {
            // Pinned under the lock, so no reader can see it unwanted.
            core.pin();
        }
        if let Some(id) = id {
            requests.typed.insert(id, Arc::downgrade(slot));
        }
        // A slot with a value ends the request at once with that value,
        // even while it reloads: the reload's result is no request's.
        if matches!(st.outcome, Some(Ok(()))) {
            if let Some(id) = id {
                requests.typed.remove(&id);
                // Relaxed: a statistic.
                this.counters.loaded.fetch_add(1, Ordering::Relaxed);
                let path = path.to_path_buf();
                let event = LoadEvent::Loaded { id, path };
                this.push_commit(Commit::events(slot.clone(), vec![event]));
            }
            false
        } else if st.loading {
            if let Some(id) = id {
                st.requests.push(Req { id, priority });
            }
            if priority > st.priority {
                st.priority = priority;
                requests.reprioritise(QueueKey::Slot(core.id), priority);
            }
            false
        } else {
            if let Some(id) = id {
                st.requests.push(Req { id, priority });
            }
            // A retry of a failed or cancelled load (its commit may not be
            // applied yet): its handles read `Loading` again, without the
            // old error. A new slot's commit changes nothing.
            st.outcome = None;
            let mut commit = Commit::events(slot.clone(), Vec::new());
            commit.status = Some(LoadStatus::Loading);
            this.push_commit(commit);
            st.loading = true;
            st.reload = false;
            st.priority = priority;
            let path = core.path.clone();
            requests.push(
                priority,
                Pending {
                    path,
                    job: Job::Slot(slot.clone()),
                },
            );
            true
        }
    }

    /// Ends a request whose load could not even start.
    fn fail_at_once(
        &self,
        slot: &Arc<dyn AnySlot>,
        id: Option<AssetId>,
        path: &Path,
        kind: AssetErrorKind,
    ) {
        let kind = Arc::new(kind);
        slot.core().lock().outcome = Some(Err(kind.clone()));
        let mut commit = Commit::events(slot.clone(), Vec::new());
        commit.status = Some(LoadStatus::Failed);
        commit.error = Some(kind.clone());
        if let Some(id) = id {
            // Relaxed: a statistic.
            self.counters.failed.fetch_add(1, Ordering::Relaxed);
            let path = path.to_path_buf();
            commit.events.push(LoadEvent::Failed(AssetError {
                id,
                path,
                kind: kind.duplicate(),
            }));
        }
        self.push_commit(commit);
    }

    /// The registered loader that makes a `T` from `path`'s extension.
    fn find_loader<T: 'static>(
        &self,
        path: &Path,
    ) -> Result<Arc<dyn ErasedLoader>, AssetErrorKind> {
        let extension = path
            .extension()
            .map(|e| e.to_string_lossy().to_ascii_lowercase())
            .unwrap_or_default();
        let registry = self.loaders.read().unwrap_or_else(|e| e.into_inner());
        let Some(list) = registry.get(&extension) else {
            return Err(AssetErrorKind::UnknownExtension { extension });
        };
        match list.iter().find(|l| l.output() == TypeId::of::<T>()) {
            Some(loader) => Ok(loader.clone()),
            None => Err(AssetErrorKind::WrongType {
                extension,
                requested: std::any::type_name::<T>(),
                available: list.iter().map(|l| l.output_name()).collect(),
            }),
        }
    }

    /// A dependency's request, pinned for the caller ([`LoadContext`]).
    pub(super) fn load_dependency<U: Send + Sync + 'static>(
        this: &Arc<Inner>,
        path: &Path,
        priority: i32,
    ) -> (Handle<U>, Arc<dyn AnySlot>) {
        Inner::request_slot::<U>(this, path, priority, Choice::Registered, false)
    }

    pub(super) fn push_commit(&self, commit: Commit) {
        self.commits
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push_back(commit);
    }

    /// A reader's part of a typed load: read, then decode on the background
    /// lane.
    pub(super) fn read_slot(this: &Arc<Inner>, slot: Arc<dyn AnySlot>) {
        let mut claim = SlotClaim {
            inner: this.clone(),
            slot: Some(slot),
            ticket: None,
        };
        if claim.stop_if_unwanted() {
            return;
        }
        match this.read(&claim.core().path) {
            Ok((bytes, ticket)) => {
                claim.ticket = Some(ticket);
                let start = move || claim.start(bytes);
                if let Err(refused) = this.pool.spawn(Lane::Background, start) {
                    (refused.into_inner())();
                }
            }
            Err(kind) => claim.end(Err(kind)),
        }
    }

    /// Ends a slot's load, and every load that ends because it did: each
    /// dependent that waited only for it, theirs in turn, and so on. They
    /// end one after the other in this loop, not by recursion, so a chain
    /// of dependencies thousands long ends without growing the stack.
    pub(super) fn finish_load(
        this: &Arc<Inner>,
        slot: Arc<dyn AnySlot>,
        result: Result<super::handle::ErasedValue, AssetErrorKind>,
    ) {
        let mut ready: Vec<Ending> = Vec::new();
        let mut next = Some((slot, result));
        while let Some((slot, result)) = next.take().or_else(|| ready.pop()) {
            Inner::end_load(this, slot, result, &mut ready);
        }
    }

    /// Ends one slot's load: its commit (value or error, one event per
    /// request), then its dependents (those it was the last wait of go
    /// into `ready`, to be ended next), a pending reload, and the loads
    /// that depend on a reloaded value.
    fn end_load(
        this: &Arc<Inner>,
        slot: Arc<dyn AnySlot>,
        result: Result<super::handle::ErasedValue, AssetErrorKind>,
        ready: &mut Vec<Ending>,
    ) {
        let core = slot.core();
        this.remove_wait_edges(core.id);
        let ok = result.is_ok();
        let (ended, dependents, dirty, reloaded, failure, cascade) = {
            let mut st = core.lock();
            let reload = std::mem::take(&mut st.reload);
            let dirty = std::mem::take(&mut st.dirty);
            st.loading = false;
            let requests = std::mem::take(&mut st.requests);
            let ended: Vec<AssetId> = requests.iter().map(|r| r.id).collect();
            let (commit, failure) = this.end_commit(&slot, &mut st, &requests, reload, result);
            this.push_commit(commit);
            let dependents = std::mem::take(&mut st.dependents);
            // A dirty slot loads again at once; its dependents reload after
            // that load.
            let reloaded: Vec<Arc<dyn AnySlot>> = if reload && ok && !dirty {
                st.reverse_deps.retain(|d| d.strong_count() > 0);
                st.reverse_deps.iter().filter_map(Weak::upgrade).collect()
            } else {
                Vec::new()
            };
            (ended, dependents, dirty, reloaded, failure, st.cascade)
        };
        // Reversed, so that `finish_load` (which takes the last first) ends
        // them in the order they registered.
        let first = ready.len();
        for dependent in dependents {
            let result = match &failure {
                None => Ok(()),
                Some(kind) => Err(AssetErrorKind::dependency_failed(
                    core.path.clone(),
                    kind.clone(),
                )),
            };
            ready.extend(Inner::dep_done(&dependent, result));
        }
        ready[first..].reverse();
        if !ended.is_empty() {
            let mut requests = this.lock_requests();
            for id in ended {
                requests.typed.remove(&id);
            }
        }
        if dirty {
            Inner::queue_reload(this, slot.clone(), cascade, true);
        }
        for dependent in reloaded {
            Inner::queue_reload(this, dependent, cascade, false);
        }
    }

    /// The commit that ends a slot's load, with the error if it failed:
    /// the value (or error) and one event per request, plus a `Reloaded` or
    /// `ReloadFailed` event for a reload. A failed reload keeps the value.
    fn end_commit(
        &self,
        slot: &Arc<dyn AnySlot>,
        st: &mut SlotState,
        requests: &[Req],
        reload: bool,
        result: Result<super::handle::ErasedValue, AssetErrorKind>,
    ) -> (Commit, Option<Arc<AssetErrorKind>>) {
        let path = slot.core().path.clone();
        let mut commit = Commit::events(slot.clone(), Vec::with_capacity(requests.len() + 1));
        // Relaxed (the counters below): statistics.
        match result {
            Ok(value) => {
                st.outcome = Some(Ok(()));
                st.committed += 1;
                commit.value = Some(value);
                commit.status = Some(LoadStatus::Loaded);
                for r in requests {
                    let (id, path) = (r.id, path.clone());
                    commit.events.push(LoadEvent::Loaded { id, path });
                }
                let n = requests.len() as u64;
                self.counters.loaded.fetch_add(n, Ordering::Relaxed);
                if reload {
                    let generation = st.committed;
                    commit.events.push(LoadEvent::Reloaded { path, generation });
                }
                (commit, None)
            }
            Err(kind) => {
                let kind = Arc::new(kind);
                commit.error = Some(kind.clone());
                if !matches!(st.outcome, Some(Ok(()))) {
                    st.outcome = Some(Err(kind.clone()));
                    commit.status = Some(LoadStatus::Failed);
                }
                for r in requests {
                    let (id, path, kind) = (r.id, path.clone(), kind.duplicate());
                    commit
                        .events
                        .push(LoadEvent::Failed(AssetError { id, path, kind }));
                }
                let n = requests.len() as u64;
                self.counters.failed.fetch_add(n, Ordering::Relaxed);
                if reload {
                    let kind = kind.duplicate();
                    commit.events.push(LoadEvent::ReloadFailed { path, kind });
                }
                (commit, Some(kind))
            }
        }
    }

    /// Stops a slot's load if nobody wants it any more (all its requests
    /// cancelled, no dependent, no reload). `true` if stopped.
    fn try_stop(&self, slot: &Arc<dyn AnySlot>) -> bool {
        let core = slot.core();
        let mut st = core.lock();
        if core.wanted(&st) {
            return false;
        }
        st.loading = false;
        // A reload marked for the stopped load is dropped with it.
        st.dirty = false;
        if st.outcome.is_none() {
            let mut commit = Commit::events(slot.clone(), Vec::new());
            commit.status = Some(LoadStatus::Cancelled);
            self.push_commit(commit);
        }
        // Under the slot's lock: once it is released a new load of the slot
        // may start and wait for dependencies, whose edges (filed under the
        // slot's id) must stay. The wait graph's lock is never held while a
        // slot's is taken, so the order slot, then wait graph, is safe.
        self.remove_wait_edges(core.id);
        drop(st);
        true
    }

    /// One of `slot`'s dependencies ended (`Err`: it failed, why). If it
    /// was the last the slot waited for, the slot's load is to end now,
    /// with this result.
    fn dep_done(slot: &Arc<dyn AnySlot>, result: Result<(), AssetErrorKind>) -> Option<Ending> {
        let finished = {
            let mut st = slot.core().lock();
            let waiting = st.waiting.as_mut()?;
            if let Err(kind) = result {
                waiting.failed.get_or_insert(kind);
            }
            waiting.pending -= 1;
            if waiting.pending == 0 {
                st.waiting.take()
            } else {
                None
            }
        };
        finished.map(|waiting| {
            let result = match waiting.failed {
                Some(kind) => {
                    // The decoded value goes unused; its drop is user code,
                    // and a panic there must not cut short the loop over
                    // the other dependents that called this.
                    drop_quietly(waiting.value);
                    Err(kind)
                }
                None => Ok(waiting.value),
            };
            (slot.clone(), result)
        })
    }

    /// Cancels typed request `id` of `slot`; see [`AssetStreamer::cancel`].
    pub(super) fn cancel_typed(
        this: &Arc<Inner>,
        requests: &mut Requests,
        id: AssetId,
        slot: Arc<dyn AnySlot>,
    ) -> bool {
        requests.typed.remove(&id);
        let core = slot.core();
        let mut st = core.lock();
        let Some(at) = st.requests.iter().position(|r| r.id == id) else {
            return false;
        };
        st.requests.swap_remove(at);
        // Relaxed: a statistic.
        this.counters.cancelled.fetch_add(1, Ordering::Relaxed);
        let kind = AssetErrorKind::Cancelled;
        let error = AssetError {
            id,
            path: core.path.clone(),
            kind,
        };
        let mut commit = Commit::events(slot.clone(), vec![LoadEvent::Failed(error)]);
        if let Some(top) = st.requests.iter().map(|r| r.priority).max() {
            st.priority = top;
            requests.reprioritise(QueueKey::Slot(core.id), top);
        } else if !core.wanted(&st) && requests.remove(QueueKey::Slot(core.id)).is_some() {
            // Not read yet: stop it here rather than in a reader. A reload
            // marked for the stopped load is dropped with it.
            st.loading = false;
            st.dirty = false;
            if st.outcome.is_none() {
                commit.status = Some(LoadStatus::Cancelled);
            }
        }
        this.push_commit(commit);
        true
    }

    /// See [`AssetStreamer::set_priority`].
    pub(super) fn set_priority_typed(
        requests: &mut Requests,
        id: AssetId,
        slot: Arc<dyn AnySlot>,
        priority: i32,
    ) -> bool {
        let core = slot.core();
        let mut st = core.lock();
        let Some(request) = st.requests.iter_mut().find(|r| r.id == id) else {
            return false;
        };
        request.priority = priority;
        let top = st
            .requests
            .iter()
            .map(|r| r.priority)
            .max()
            .unwrap_or(priority);
        st.priority = top;
        requests.reprioritise(QueueKey::Slot(core.id), top)
    }
}

/// A load to end, with its result.
type Ending = (
    Arc<dyn AnySlot>,
    Result<super::handle::ErasedValue, AssetErrorKind>,
);

fn next_slot(requests: &mut Requests) -> u64 {
    requests.next_slot += 1;
    requests.next_slot
}

/// A loader's panic as the load's error, with the panic's message.
fn loader_panicked(payload: Box<dyn Any + Send>) -> AssetErrorKind {
    let message = panic_message(&*payload).unwrap_or("a panic whose payload is not a string");
    let kind = AssetErrorKind::LoaderPanicked(message.to_owned());
    // Its drop may panic too; the load still ends as the loader's panic.
    drop_quietly(payload);
    kind
}

/// A typed load between its read and its end, which must end it exactly
/// once: if it is dropped first (a panic outside the loader's own code,
/// or a decode task the pool dropped), the load ends as
/// [`AssetErrorKind::Interrupted`]; a loader's panic ends it as
/// [`AssetErrorKind::LoaderPanicked`].
struct SlotClaim {
    inner: Arc<Inner>,
    /// `None` once ended.
    slot: Option<Arc<dyn AnySlot>>,
    /// The read bytes' share of the budget, given back when decoding ends.
    ticket: Option<Ticket>,
}

impl SlotClaim {
    fn core(&self) -> &SlotCore {
        self.slot.as_ref().expect("a claim is ended once").core()
    }

    fn end(mut self, result: Result<super::handle::ErasedValue, AssetErrorKind>) {
        self.ticket = None;
        let slot = self.slot.take().expect("a claim is ended once");
        Inner::finish_load(&self.inner, slot, result);
    }

    /// Ends the claim if nobody wants the load any more.
    fn stop_if_unwanted(&mut self) -> bool {
        let slot = self.slot.as_ref().expect("a claim is ended once");
        if self.inner.try_stop(slot) {
            self.slot = None;
            return true;
        }
        false
    }

    /// Runs the loader (on the background lane).
    fn start(mut self, bytes: Vec<u8>) {
        if self.stop_if_unwanted() {
            return;
        }
        let core = self.core();
        let loader = core.loader.clone().expect("a slot that loads has a loader");
        let priority = core.lock().priority;
        let mut cx = LoadContext::new(self.inner.clone(), core.path.clone(), core.id, priority);
        let started = panic::catch_unwind(AssertUnwindSafe(|| loader.start(bytes, &mut cx)));
        match started.unwrap_or_else(|payload| Err(loader_panicked(payload))) {
            Err(kind) => self.end(Err(kind)),
            Ok(ErasedDecode::Done(value)) => self.decoded(value, cx),
            Ok(ErasedDecode::Steps(steps)) => self.steps(steps, cx, DECODE_STEP),
        }
    }

    /// Runs one step, then queues the next as a new background task. If the
    /// pool refused (it is shutting down; `budget` is then unlimited), the
    /// rest runs here, step after step in a loop: a loader's steps may do a
    /// fixed amount each whatever the budget, and nesting a call per step
    /// would run out of stack.
    fn steps(mut self, mut steps: Box<dyn ErasedSteps>, cx: LoadContext, budget: usize) {
        loop {
            if self.stop_if_unwanted() {
                return;
            }
            let stepped = panic::catch_unwind(AssertUnwindSafe(|| steps.step(budget)));
            match stepped.unwrap_or_else(|payload| Err(loader_panicked(payload))) {
                Err(kind) => return self.end(Err(kind)),
                Ok(Poll::Ready(value)) => return self.decoded(value, cx),
                Ok(Poll::Pending) if budget == UNLIMITED => continue,
                Ok(Poll::Pending) => {
                    let pool = self.inner.pool.clone();
                    return next_step(&pool, move |budget| self.steps(steps, cx, budget));
                }
            }
        }
    }

    /// Decoded: end now, or wait for the dependencies.
    fn decoded(mut self, value: super::handle::ErasedValue, mut cx: LoadContext) {
        self.ticket = None;
        if let Some(kind) = cx.error.take() {
            return self.end(Err(kind));
        }
        let slot = self.slot.as_ref().expect("a claim is ended once");
        let deps: Vec<Arc<dyn AnySlot>> = cx.deps.iter().map(|pin| pin.slot.clone()).collect();
        rewire(slot, &deps);
        drop(deps);
        if cx.deps.is_empty() {
            return self.end(Ok(value));
        }
        let inner = self.inner.clone();
        let slot = self.slot.take().expect("a claim is ended once");
        let deps = std::mem::take(&mut cx.deps);
        slot.core().lock().waiting = Some(Waiting {
            value,
            pending: deps.len(),
            failed: None,
        });
        for pin in deps {
            let dep = pin.slot.clone();
            let ready = {
                let mut st = dep.core().lock();
                let me = slot.core().id;
                let known = st
                    .reverse_deps
                    .iter()
                    .any(|d| d.upgrade().is_some_and(|d| d.core().id == me));
                if !known {
                    st.reverse_deps.push(Arc::downgrade(&slot));
                }
                match (st.outcome.clone(), st.loading) {
                    (Some(Ok(())), _) => Some(Ok(())),
                    (_, true) => {
                        st.dependents.push(slot.clone());
                        None
                    }
                    (Some(Err(kind)), false) => Some(Err(kind)),
                    (None, false) => Some(Err(Arc::new(AssetErrorKind::Cancelled))),
                }
            };
            drop(pin);
            if let Some(result) = ready {
                let result = result.map_err(|reason| {
                    AssetErrorKind::dependency_failed(dep.core().path.clone(), reason)
                });
                if let Some((slot, result)) = Inner::dep_done(&slot, result) {
                    Inner::finish_load(&inner, slot, result);
                }
            }
            // It may be the dependency's last hold (the loader let its
            // handle go, and the load ended): its value's drop is user
            // code, and a panic there must not leave the other
            // dependencies uncounted.
            drop_quietly(dep);
        }
    }
}

impl Drop for SlotClaim {
    fn drop(&mut self) {
        if let Some(slot) = self.slot.take() {
            self.ticket = None;
            Inner::finish_load(&self.inner, slot, Err(AssetErrorKind::Interrupted));
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::super::handle::ErasedValue;
    use super::{free_leftovers, AnySlot, Leftover, Slot, SlotCore};
    use std::path::PathBuf;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    /// A value whose drop counts itself and panics.
    struct Bomb<'a>(&'a AtomicUsize);

    impl Drop for Bomb<'_> {
        fn drop(&mut self) {
            self.0.fetch_add(1, Ordering::SeqCst);
            panic!("a replaced value panicked as it was dropped");
        }
    }

    /// Two reloads committed in one `update` leave two replaced values, and
    /// both panic as they drop: each is freed, and the process goes on.
    /// Dropped as one `Vec`, the second panic came while the first unwound
    /// and aborted the process.
    #[test]
    fn replaced_values_that_panic_as_they_drop_are_each_freed() {
        static DROPS: AtomicUsize = AtomicUsize::new(0);
        let slot = Slot::<u32>::new(SlotCore::new(0, PathBuf::from("a.bin"), None));
        let leftovers: Vec<Leftover> = (0..2)
            .map(|_| {
                let replaced: ErasedValue = Arc::new(Bomb(&DROPS));
                (slot.clone() as Arc<dyn AnySlot>, Some(replaced))
            })
            .collect();
        free_leftovers(leftovers);
        assert_eq!(DROPS.load(Ordering::SeqCst), 2, "both values dropped");
        assert_eq!(Arc::strong_count(&slot), 1, "both holds on the slot let go");
    }
}

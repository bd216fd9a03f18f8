//! Loaders: the public [`AssetLoader`] trait that turns a file's bytes into
//! a typed value, in one go ([`Decode::Done`]) or in steps
//! ([`Decode::Steps`], one background task per step), and its type-erased
//! form that the streamer stores per extension.
//!
//! A loader asks for other assets through its [`LoadContext`]; each
//! [`depend`](LoadContext::depend) pins the dependency's slot (so it cannot
//! be cancelled under the dependent) until the dependent, once decoded,
//! registers as waiting on it.

use super::handle::{AnySlot, ErasedValue, Handle};
use super::streamer::Inner;
use super::AssetErrorKind;
use std::any::TypeId;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::task::Poll;

/// Turns a file's bytes into a typed asset.
///
/// Register one per file extension with
/// [`AssetStreamer::register`](super::AssetStreamer::register), or pass one
/// for a single request with
/// [`AssetStreamer::load_with`](super::AssetStreamer::load_with).
///
/// ```
/// use engine_tasks::assets::{AssetLoader, Decode, LoadContext};
///
/// /// A text file's lines.
/// struct Lines;
///
/// impl AssetLoader for Lines {
///     type Asset = Vec<String>;
///     type Error = std::string::FromUtf8Error;
///
///     fn extensions(&self) -> &[&str] {
///         &["txt"]
///     }
///
///     fn load(
///         &self,
///         bytes: Vec<u8>,
///         _cx: &mut LoadContext,
///     ) -> Result<Decode<Vec<String>, Self::Error>, Self::Error> {
///         let text = String::from_utf8(bytes)?;
///         Ok(Decode::Done(text.lines().map(str::to_owned).collect()))
///     }
/// }
/// ```
pub trait AssetLoader: Send + Sync + 'static {
    /// The value a file becomes.
    type Asset: Send + Sync + 'static;
    /// Why a file could not become one.
    type Error: std::error::Error + Send + Sync + 'static;

    /// The file extensions this loader reads (lower case, without the dot).
    fn extensions(&self) -> &[&str];

    /// Starts decoding `bytes` (on the background lane): the value, or a
    /// [`DecodeSteps`] that produces it a slice at a time. Dependencies are
    /// asked for through `cx`.
    fn load(
        &self,
        bytes: Vec<u8>,
        cx: &mut LoadContext,
    ) -> Result<Decode<Self::Asset, Self::Error>, Self::Error>;
}

/// What [`AssetLoader::load`] returns.
pub enum Decode<T, E> {
    /// Decoded already.
    Done(T),
    /// Decode in steps: each step is a background task of its own, so a
    /// large file never holds a worker for long.
    Steps(Box<dyn DecodeSteps<Asset = T, Error = E>>),
}

/// A decode in progress.
pub trait DecodeSteps: Send {
    /// The value produced.
    type Asset;
    /// Why decoding failed.
    type Error;

    /// Decodes about `budget` more bytes of output: `Poll::Ready` with the
    /// value once done. A budget of `usize::MAX` means "the rest": the pool
    /// is shutting down, and the streamer calls the step again and again on
    /// the same thread until it is ready, so each call must make progress.
    fn step(&mut self, budget: usize) -> Result<Poll<Self::Asset>, Self::Error>;
}

/// What a loader can ask of the streamer while it loads.
pub struct LoadContext {
    inner: Arc<Inner>,
    path: PathBuf,
    /// The slot being loaded (for the wait-for graph).
    slot_id: u64,
    priority: i32,
    pub(super) deps: Vec<DepPin>,
    /// A dependency that could not be waited for (a cycle).
    pub(super) error: Option<AssetErrorKind>,
}

impl LoadContext {
    pub(super) fn new(inner: Arc<Inner>, path: PathBuf, slot_id: u64, priority: i32) -> Self {
        LoadContext {
            inner,
            path,
            slot_id,
            priority,
            deps: Vec::new(),
            error: None,
        }
    }

    /// The path of the asset being loaded, relative to the root.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Asks for the asset at `path` (relative to the root, not to this
    /// file) as a `U`, with the loader registered for its extension, at this
    /// load's priority. This asset ends only once the dependency has ended;
    /// if it fails, this one fails with
    /// [`AssetErrorKind::DependencyFailed`]; if waiting for it would close
    /// a cycle, with [`AssetErrorKind::DependencyCycle`]. Keep the handle in
    /// the value to read the dependency (and keep it loaded).
    pub fn depend<U: Send + Sync + 'static>(&mut self, path: impl AsRef<Path>) -> Handle<U> {
        // The dependency comes back pinned: `DepPin` owns the pin.
        let (handle, slot) = Inner::load_dependency::<U>(&self.inner, path.as_ref(), self.priority);
        let pin = DepPin { slot };
        match self.inner.add_wait_edge(self.slot_id, pin.slot.core()) {
            Ok(()) => self.deps.push(pin),
            Err(cycle) => {
                if self.error.is_none() {
                    let mut paths = vec![self.path.clone()];
                    paths.extend(cycle);
                    self.error = Some(AssetErrorKind::DependencyCycle { cycle: paths });
                }
            }
        }
        handle
    }
}

/// A dependency pinned by a load: it counts as wanted until the dependent
/// registers as waiting on it, or drops the pin.
pub(super) struct DepPin {
    pub(super) slot: Arc<dyn AnySlot>,
}

impl Drop for DepPin {
    fn drop(&mut self) {
        self.slot.core().unpin();
    }
}

/// A decode in progress, type-erased.
pub(super) enum ErasedDecode {
    Done(ErasedValue),
    Steps(Box<dyn ErasedSteps>),
}

pub(super) trait ErasedSteps: Send {
    fn step(&mut self, budget: usize) -> Result<Poll<ErasedValue>, AssetErrorKind>;
}

struct StepsAdapter<T, E>(Box<dyn DecodeSteps<Asset = T, Error = E>>);

impl<T, E> ErasedSteps for StepsAdapter<T, E>
where
    T: Send + Sync + 'static,
    E: std::error::Error + Send + Sync + 'static,
{
    fn step(&mut self, budget: usize) -> Result<Poll<ErasedValue>, AssetErrorKind> {
        match self.0.step(budget) {
            Ok(Poll::Ready(value)) => Ok(Poll::Ready(Arc::new(value))),
            Ok(Poll::Pending) => Ok(Poll::Pending),
            Err(e) => Err(AssetErrorKind::Loader(Arc::new(e))),
        }
    }
}

/// An [`AssetLoader`] with its types erased, as the streamer stores it.
pub(super) trait ErasedLoader: Send + Sync {
    fn start(&self, bytes: Vec<u8>, cx: &mut LoadContext) -> Result<ErasedDecode, AssetErrorKind>;
    fn output(&self) -> TypeId;
    fn output_name(&self) -> &'static str;
    fn extension_list(&self) -> Vec<String>;
}

impl<L: AssetLoader> ErasedLoader for L {
    fn start(&self, bytes: Vec<u8>, cx: &mut LoadContext) -> Result<ErasedDecode, AssetErrorKind> {
        match self.load(bytes, cx) {
            Ok(Decode::Done(value)) => Ok(ErasedDecode::Done(Arc::new(value))),
            Ok(Decode::Steps(steps)) => Ok(ErasedDecode::Steps(Box::new(StepsAdapter(steps)))),
            Err(e) => Err(AssetErrorKind::Loader(Arc::new(e))),
        }
    }

    fn output(&self) -> TypeId {
        TypeId::of::<L::Asset>()
    }

    fn output_name(&self) -> &'static str {
        std::any::type_name::<L::Asset>()
    }

    fn extension_list(&self) -> Vec<String> {
        self.extensions()
            .iter()
            .map(|e| e.trim_start_matches('.').to_ascii_lowercase())
            .collect()
    }
}

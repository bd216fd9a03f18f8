//! Hot reload (feature `hot-reload`): a `notify` watcher on the root turns
//! each change of a file (created, written, renamed onto, closed after
//! writing) into [`AssetStreamer::reload`] of its path. A file written in
//! several pieces may be seen half-written: that reload fails (the old
//! value stays) or shows the partial file, and the events of the later
//! pieces mark the load to run again once it ends, so the last value is the
//! file's final content.

use super::streamer::Inner;
use super::AssetStreamer;
use notify::event::{AccessKind, AccessMode, EventKind, ModifyKind};
use notify::Watcher;
use std::io;
use std::sync::{Arc, Weak};

/// Whether an event may have changed a file's content.
fn changes_content(kind: &EventKind) -> bool {
    match kind {
        EventKind::Any | EventKind::Create(_) => true,
        EventKind::Modify(ModifyKind::Metadata(_)) => false,
        EventKind::Modify(_) => true,
        EventKind::Access(AccessKind::Close(AccessMode::Write)) => true,
        _ => false,
    }
}

impl AssetStreamer {
    /// Watches the root for changed files and reloads the live loads of
    /// each changed path (see [`reload`](Self::reload)); the new values
    /// come in at [`update`](Self::update). Watching stops once the
    /// streamer is dropped and the work it started has ended (a read or
    /// decode under way, or a reload the watcher is queueing, keeps it
    /// alive until then). Calling it again replaces the watcher.
    ///
    /// ```
    /// use engine_tasks::assets::AssetStreamer;
    /// use engine_tasks::{BlockingPool, Pool};
    ///
    /// // A fresh directory: watching is recursive.
    /// let root = std::env::temp_dir().join(format!("watch-doc-{}", std::process::id()));
    /// std::fs::create_dir_all(&root).unwrap();
    /// let pool = Pool::builder().threads(1).build().unwrap();
    /// let blocking = BlockingPool::new();
    /// let streamer = AssetStreamer::new(&root, &pool, &blocking, 2).unwrap();
    /// streamer.watch().unwrap();
    /// drop(streamer);
    /// std::fs::remove_dir_all(&root).unwrap();
    /// ```
    pub fn watch(&self) -> io::Result<()> {
        let weak: Weak<Inner> = Arc::downgrade(&self.inner);
        let handler = move |event: notify::Result<notify::Event>| {
            let (Ok(event), Some(inner)) = (event, weak.upgrade()) else {
                return;
            };
            if !changes_content(&event.kind) {
                return;
            }
            for path in &event.paths {
                if let Ok(relative) = path.strip_prefix(&inner.root) {
                    Inner::reload_path(&inner, relative);
                }
            }
        };
        let mut watcher = notify::recommended_watcher(handler).map_err(io::Error::other)?;
        watcher
            .watch(&self.inner.root, notify::RecursiveMode::Recursive)
            .map_err(io::Error::other)?;
        *self.inner.watcher.lock().unwrap_or_else(|e| e.into_inner()) = Some(watcher);
        Ok(())
    }
}

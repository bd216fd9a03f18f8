//! Hot reload (feature `hot-reload`): a `notify` watcher on the root turns
//! each change of a file (created, renamed onto, closed after writing, and
//! where the system reports no closes, written) into
//! [`AssetStreamer::reload`] of its path.
//!
//! On Linux, inotify reports the close of a file that was open for
//! writing, so a file saved in place reloads once, when the writer closes
//! it, and is never seen half-written; a writer that keeps the file open
//! reloads nothing until it closes it. Elsewhere each write is a change: a
//! file written in several pieces may be seen half-written, and that
//! reload fails (the old value stays) or shows the partial file. The
//! events of the later pieces mark the load to run again once it ends, so
//! the last value is the file's final content.

use super::streamer::Inner;
use super::AssetStreamer;
use notify::event::{AccessKind, AccessMode, EventKind, ModifyKind};
use notify::Watcher;
use std::io;
use std::sync::{Arc, Weak};

/// Whether the system reports the close of a file written to (inotify's
/// `IN_CLOSE_WRITE`): then a write alone is not a change, its close is.
const REPORTS_WRITE_CLOSES: bool = cfg!(any(target_os = "linux", target_os = "android"));

/// Whether an event may have changed a file's content, ready to be read.
fn changes_content(kind: &EventKind) -> bool {
    match kind {
        EventKind::Any | EventKind::Create(_) => true,
        EventKind::Modify(ModifyKind::Metadata(_)) => false,
        EventKind::Modify(ModifyKind::Name(_)) => true,
        EventKind::Modify(_) => !REPORTS_WRITE_CLOSES,
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

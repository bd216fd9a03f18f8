//! A streamer over a temporary directory for the asset tests, with the
//! files they write (PNG images made with the codec), a material loader
//! with dependencies, and a loader that waits at a gate. Each test crate
//! uses some of it.
#![allow(dead_code)]

use engine_tasks::assets::{
    AssetErrorKind, AssetLoader, AssetStreamer, Decode, DecodeSteps, Handle, Image, LoadContext,
    LoadEvent, LoadStatus, StreamerConfig,
};
use engine_tasks::{BlockingPool, Pool};
use std::cell::Cell;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::task::Poll;
use std::time::Duration;

/// A directory under the system's temporary directory, removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(name: &str) -> TempDir {
        let dir = std::env::temp_dir().join(format!(
            "engine-tasks-loaders-{name}-{}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir.canonicalize().unwrap())
    }

    pub fn write(&self, name: &str, bytes: impl AsRef<[u8]>) {
        let path = self.0.join(name);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, bytes).unwrap();
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A streamer over a fresh directory, with its pools.
pub struct Rig {
    pub dir: TempDir,
    pub streamer: AssetStreamer,
    _pool: Pool,
    _blocking: engine_tasks::BlockingPool,
    /// Request-ending events taken so far.
    ended: Cell<u64>,
}

impl Rig {
    pub fn new(name: &str, config: StreamerConfig, setup: impl FnOnce(&TempDir)) -> Rig {
        Rig::with_threads(name, config, 2, setup)
    }

    pub fn with_threads(
        name: &str,
        config: StreamerConfig,
        threads: usize,
        setup: impl FnOnce(&TempDir),
    ) -> Rig {
        let dir = TempDir::new(name);
        setup(&dir);
        let pool = Pool::builder().threads(threads).build().unwrap();
        let blocking = BlockingPool::builder().build().unwrap();
        let streamer = AssetStreamer::with_config(&dir.0, &pool, &blocking, config).unwrap();
        Rig {
            dir,
            streamer,
            _pool: pool,
            _blocking: blocking,
            ended: Cell::new(0),
        }
    }

    /// Calls `update` (as frames would) until `n` events arrived; the
    /// caller's watchdog bounds it.
    pub fn events(&self, n: usize) -> Vec<LoadEvent> {
        let mut out = Vec::new();
        while out.len() < n {
            self.streamer.update(&mut out);
            std::thread::sleep(Duration::from_millis(1));
        }
        let ending = out
            .iter()
            .filter(|e| matches!(e, LoadEvent::Loaded { .. } | LoadEvent::Failed(_)))
            .count();
        self.ended.set(self.ended.get() + ending as u64);
        out
    }

    /// Events until there has been one for every request made so far
    /// (a request without one hangs here, and the caller's watchdog fails
    /// the test), checking that none ends twice; by request id.
    pub fn outcomes(&self) -> HashMap<u64, Result<(), AssetErrorKind>> {
        let mut outcomes = HashMap::new();
        let mut out = Vec::new();
        let requested = self.streamer.progress().requested;
        while self.ended.get() + (out.len() as u64) < requested {
            self.streamer.update(&mut out);
            std::thread::sleep(Duration::from_millis(1));
        }
        self.ended.set(self.ended.get() + out.len() as u64);
        for event in out {
            let (id, outcome) = match event {
                LoadEvent::Loaded { id, .. } => (id, Ok(())),
                LoadEvent::Failed(error) => (error.id, Err(error.kind)),
                other => panic!("unexpected {other:?}"),
            };
            assert!(
                outcomes.insert(id.0, outcome).is_none(),
                "request {id:?} ended twice"
            );
        }
        outcomes
    }
}

pub fn png_file(width: u32, height: u32, color: png::ColorType, data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    {
        let mut encoder = png::Encoder::new(&mut out, width, height);
        encoder.set_color(color);
        encoder.set_depth(png::BitDepth::Eight);
        if color == png::ColorType::Indexed {
            encoder.set_palette(vec![255, 0, 0, 0, 255, 0, 0, 0, 255]);
        }
        let mut writer = encoder.write_header().unwrap();
        writer.write_image_data(data).unwrap();
    }
    out
}

pub fn gradient(width: u32, height: u32) -> Vec<u8> {
    (0..width * height)
        .flat_map(|i| {
            let (x, y) = (i % width, i / width);
            [x as u8, y as u8, (x ^ y) as u8, 255 - x as u8]
        })
        .collect()
}

pub fn loaded<T: Send + Sync + 'static>(handle: &Handle<T>) -> Arc<T> {
    assert_eq!(handle.status(), LoadStatus::Loaded, "{:?}", handle.error());
    handle.get().expect("a loaded handle has a value")
}

pub fn loader_error<E: std::error::Error + 'static>(kind: &AssetErrorKind) -> &E {
    match kind {
        AssetErrorKind::Loader(e) => e.downcast_ref::<E>().expect("the loader's error type"),
        other => panic!("not a loader error: {other:?}"),
    }
}

/// A material: a text file naming its textures, one per line.
pub struct Material {
    pub textures: Vec<Handle<Image>>,
}

pub struct MaterialLoader;

#[derive(Debug)]
pub struct NoTextures;

impl std::fmt::Display for NoTextures {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "a material needs a texture")
    }
}

impl std::error::Error for NoTextures {}

impl AssetLoader for MaterialLoader {
    type Asset = Material;
    type Error = NoTextures;

    fn extensions(&self) -> &[&str] {
        &["mat"]
    }

    fn load(
        &self,
        bytes: Vec<u8>,
        cx: &mut LoadContext,
    ) -> Result<Decode<Material, NoTextures>, NoTextures> {
        let text = String::from_utf8_lossy(&bytes).into_owned();
        let textures: Vec<Handle<Image>> = text
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(|line| cx.depend::<Image>(line.trim()))
            .collect();
        if textures.is_empty() {
            return Err(NoTextures);
        }
        Ok(Decode::Done(Material { textures }))
    }
}

/// A loader whose loads wait at a gate (on the background lane) and then
/// decode in two steps.
#[derive(Clone, Default)]
pub struct Gate {
    open: Arc<(Mutex<bool>, Condvar)>,
    pub entered: Arc<AtomicUsize>,
    pub finished: Arc<AtomicUsize>,
}

impl Gate {
    pub fn open(&self) {
        *self.open.0.lock().unwrap() = true;
        self.open.1.notify_all();
    }
}

struct GateSteps(Gate, usize);

impl DecodeSteps for GateSteps {
    type Asset = u32;
    type Error = std::io::Error;

    fn step(&mut self, _: usize) -> Result<Poll<u32>, std::io::Error> {
        self.1 += 1;
        if self.1 < 2 {
            return Ok(Poll::Pending);
        }
        self.0.finished.fetch_add(1, Ordering::SeqCst);
        Ok(Poll::Ready(42))
    }
}

impl AssetLoader for Gate {
    type Asset = u32;
    type Error = std::io::Error;

    fn extensions(&self) -> &[&str] {
        &["gate"]
    }

    fn load(
        &self,
        _: Vec<u8>,
        _: &mut LoadContext,
    ) -> Result<Decode<u32, std::io::Error>, std::io::Error> {
        self.entered.fetch_add(1, Ordering::SeqCst);
        let mut open = self.open.0.lock().unwrap();
        while !*open {
            open = self.open.1.wait(open).unwrap();
        }
        Ok(Decode::Steps(Box::new(GateSteps(self.clone(), 0))))
    }
}

pub fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    while !done() {
        std::thread::sleep(Duration::from_millis(1));
    }
    let _ = what;
}

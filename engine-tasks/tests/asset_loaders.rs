//! Typed asset loads, loaders: every built-in loader, a custom loader in
//! steps, dependencies (loaded, failed, cyclic) and bad input. Every case
//! runs under a watchdog and checks values, errors and that each request
//! ends exactly once, never timings.

mod common;
#[path = "common/asset_rig.rs"]
mod rig;

use common::within_watchdog;
use engine_tasks::assets::{
    encode_asset, AssetErrorKind, AssetLoader, BytesLoader, CodecError, Decode, DecodeSteps,
    Handle, Image, ImageError, LoadContext, LoadEvent, LoadStatus, StreamerConfig,
};
use rig::{gradient, loaded, loader_error, png_file, Material, MaterialLoader, Rig};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

#[test]
fn every_built_in_loader_decodes_its_format() {
    within_watchdog("built-in loaders", || {
        let big: Vec<u8> = (0..600_000u32).map(|i| (i / 3 % 251) as u8).collect();
        let rgba = gradient(300, 200);
        let rgb: Vec<u8> = rgba.chunks(4).flat_map(|p| [p[0], p[1], p[2]]).collect();
        let gray: Vec<u8> = rgba.chunks(4).map(|p| p[0]).collect();
        let indexed: Vec<u8> = (0..16u8).map(|i| i % 3).collect();
        let rig = Rig::new("builtin", StreamerConfig::default(), |dir| {
            dir.write("raw.bin", b"raw bytes");
            dir.write("big.eta", encode_asset(&big));
            let zst = ruzstd::encoding::compress_to_vec(
                &big[..],
                ruzstd::encoding::CompressionLevel::Fastest,
            );
            dir.write("big.zst", zst);
            dir.write("rgba.png", png_file(300, 200, png::ColorType::Rgba, &rgba));
            dir.write("rgb.PNG", png_file(300, 200, png::ColorType::Rgb, &rgb));
            dir.write(
                "gray.png",
                png_file(300, 200, png::ColorType::Grayscale, &gray),
            );
            dir.write("pal.png", png_file(4, 4, png::ColorType::Indexed, &indexed));
        });
        let s = &rig.streamer;
        let raw = s.load::<Vec<u8>>("raw.bin", 0);
        let eta = s.load::<Vec<u8>>("big.eta", 0);
        let zst = s.load::<Vec<u8>>("big.zst", 0);
        let rgba_image = s.load::<Image>("rgba.png", 0);
        let rgb_image = s.load::<Image>("rgb.PNG", 0);
        let gray_image = s.load::<Image>("gray.png", 0);
        let pal_image = s.load::<Image>("pal.png", 0);
        let outcomes = rig.outcomes();
        assert_eq!(outcomes.len(), 7);
        assert!(outcomes.values().all(Result::is_ok), "{outcomes:?}");
        assert_eq!(*loaded(&raw), b"raw bytes");
        assert_eq!(*loaded(&eta), big);
        assert_eq!(*loaded(&zst), big);
        let expected = Image {
            width: 300,
            height: 200,
            rgba: rgba.clone(),
        };
        assert_eq!(*loaded(&rgba_image), expected);
        let opaque: Vec<u8> = rgba
            .chunks(4)
            .flat_map(|p| [p[0], p[1], p[2], 255])
            .collect();
        assert_eq!(loaded(&rgb_image).rgba, opaque);
        let grey: Vec<u8> = rgba
            .chunks(4)
            .flat_map(|p| [p[0], p[0], p[0], 255])
            .collect();
        assert_eq!(loaded(&gray_image).rgba, grey);
        let palette = [[255, 0, 0, 255], [0, 255, 0, 255], [0, 0, 255, 255]];
        let pixels: Vec<u8> = indexed.iter().flat_map(|&i| palette[i as usize]).collect();
        assert_eq!(loaded(&pal_image).rgba, pixels);
        assert_eq!(raw.generation(), 1);
    });
}

/// Counts its loads; decodes in steps of `budget` bytes and fails on
/// files starting with `!`, with a typed error.
struct Chunked {
    loads: Arc<AtomicUsize>,
}

#[derive(Debug, PartialEq)]
struct Refused(u8);

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "refused byte {}", self.0)
    }
}

impl std::error::Error for Refused {}

struct ChunkSteps {
    bytes: Vec<u8>,
    at: usize,
    steps: usize,
}

impl DecodeSteps for ChunkSteps {
    type Asset = (String, usize);
    type Error = Refused;

    fn step(&mut self, _budget: usize) -> Result<Poll<(String, usize)>, Refused> {
        self.steps += 1;
        self.at = (self.at + 4).min(self.bytes.len());
        if self.at < self.bytes.len() {
            return Ok(Poll::Pending);
        }
        let text = String::from_utf8_lossy(&self.bytes).into_owned();
        Ok(Poll::Ready((text, self.steps)))
    }
}

impl AssetLoader for Chunked {
    type Asset = (String, usize);
    type Error = Refused;

    fn extensions(&self) -> &[&str] {
        &["txt"]
    }

    fn load(
        &self,
        bytes: Vec<u8>,
        _: &mut LoadContext,
    ) -> Result<Decode<(String, usize), Refused>, Refused> {
        self.loads.fetch_add(1, Ordering::SeqCst);
        if bytes.first() == Some(&b'!') {
            return Err(Refused(b'!'));
        }
        Ok(Decode::Steps(Box::new(ChunkSteps {
            bytes,
            at: 0,
            steps: 0,
        })))
    }
}

#[test]
fn a_custom_loader_decodes_in_steps_and_reports_its_typed_error() {
    within_watchdog("custom loader", || {
        let rig = Rig::new("custom", StreamerConfig::default(), |dir| {
            dir.write("poem.txt", b"sixteen bytes!!!");
            dir.write("bad.txt", b"!nope");
        });
        let loads = Arc::new(AtomicUsize::new(0));
        rig.streamer.register(Chunked {
            loads: loads.clone(),
        });
        let poem = rig.streamer.load::<(String, usize)>("poem.txt", 0);
        let bad = rig.streamer.load::<(String, usize)>("bad.txt", 0);
        // The same file as bytes, with a loader for this request only: a
        // load of its own (another type).
        let raw = rig
            .streamer
            .load_with("poem.txt", 0, BytesLoader::with_extensions(&["txt"]));
        let outcomes = rig.outcomes();
        assert_eq!(*loaded(&poem), ("sixteen bytes!!!".to_string(), 4));
        assert_eq!(*loaded(&raw), b"sixteen bytes!!!");
        let error = outcomes[&bad.id().0].as_ref().unwrap_err();
        assert_eq!(loader_error::<Refused>(error), &Refused(b'!'));
        assert_eq!(bad.status(), LoadStatus::Failed);
        assert!(bad.get().is_none());
        assert!(matches!(*bad.error().unwrap(), AssetErrorKind::Loader(_)));
        assert_eq!(loads.load(Ordering::SeqCst), 2);
    });
}

/// Material files that depend on each other (for cycles).
struct LinkLoader;

impl AssetLoader for LinkLoader {
    type Asset = Vec<Handle<Vec<u8>>>;
    type Error = std::io::Error;

    fn extensions(&self) -> &[&str] {
        &["link"]
    }

    fn load(
        &self,
        bytes: Vec<u8>,
        cx: &mut LoadContext,
    ) -> Result<Decode<Self::Asset, std::io::Error>, std::io::Error> {
        let text = String::from_utf8_lossy(&bytes).into_owned();
        let links = text
            .lines()
            .filter(|l| !l.is_empty())
            .map(|l| cx.depend::<Vec<Handle<Vec<u8>>>>(l))
            .collect::<Vec<_>>();
        // The value holds no handle (a cycle of handles would never free).
        drop(links);
        Ok(Decode::Done(Vec::new()))
    }
}

#[test]
fn a_material_loads_after_its_textures_and_fails_with_a_failed_one() {
    within_watchdog("dependencies", || {
        let rig = Rig::new("deps", StreamerConfig::default(), |dir| {
            dir.write(
                "stone.png",
                png_file(64, 32, png::ColorType::Rgba, &gradient(64, 32)),
            );
            dir.write(
                "moss.png",
                png_file(16, 16, png::ColorType::Rgba, &gradient(16, 16)),
            );
            dir.write("wall.mat", "stone.png\nmoss.png\n");
            dir.write("broken.mat", "stone.png\nmissing.png\n");
            dir.write("bad.png", b"\x89PNG\r\n\x1a\nnot really");
            dir.write("corrupt.mat", "bad.png\n");
            dir.write("odd.mat", "stone.png\nmodel.fbx\n");
        });
        rig.streamer.register(MaterialLoader);
        let wall = rig.streamer.load::<Material>("wall.mat", 5);
        let broken = rig.streamer.load::<Material>("broken.mat", 5);
        let corrupt = rig.streamer.load::<Material>("corrupt.mat", 5);
        let odd = rig.streamer.load::<Material>("odd.mat", 5);
        // Every request ends once; the textures' own loads have no event.
        let mut out = Vec::new();
        let mut ended = HashMap::new();
        while ended.len() < 4 {
            out.clear();
            rig.streamer.update(&mut out);
            for event in out.drain(..) {
                if let LoadEvent::Loaded { id, .. } = &event {
                    if *id == wall.id() {
                        // Both textures are readable in the frame that
                        // sees the material.
                        let material = wall.get().unwrap();
                        assert!(material.textures.iter().all(|t| t.get().is_some()));
                    }
                }
                let id = match &event {
                    LoadEvent::Loaded { id, .. } => *id,
                    LoadEvent::Failed(e) => e.id,
                    other => panic!("unexpected {other:?}"),
                };
                assert!(ended.insert(id, event).is_none(), "ended twice");
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        let material = loaded(&wall);
        assert_eq!(material.textures.len(), 2);
        assert_eq!(loaded(&material.textures[0]).width, 64);
        assert_eq!(loaded(&material.textures[1]).rgba, gradient(16, 16));
        match &ended[&broken.id()] {
            LoadEvent::Failed(e) => match &e.kind {
                AssetErrorKind::DependencyFailed { path, reason } => {
                    assert_eq!(path, Path::new("missing.png"));
                    assert!(matches!(**reason, AssetErrorKind::NotFound), "{reason}");
                }
                other => panic!("{other}"),
            },
            other => panic!("{other:?}"),
        }
        match &ended[&corrupt.id()] {
            LoadEvent::Failed(e) => match &e.kind {
                AssetErrorKind::DependencyFailed { path, reason } => {
                    assert_eq!(path, Path::new("bad.png"));
                    assert!(matches!(
                        loader_error::<ImageError>(reason),
                        ImageError::Decode(_)
                    ));
                }
                other => panic!("{other}"),
            },
            other => panic!("{other:?}"),
        }
        match &ended[&odd.id()] {
            LoadEvent::Failed(e) => match &e.kind {
                AssetErrorKind::DependencyFailed { path, reason } => {
                    assert_eq!(path, Path::new("model.fbx"));
                    assert!(
                        matches!(&**reason, AssetErrorKind::UnknownExtension { extension } if extension == "fbx"),
                        "{reason}"
                    );
                }
                other => panic!("{other}"),
            },
            other => panic!("{other:?}"),
        }
        assert_eq!(broken.status(), LoadStatus::Failed);
        // A texture shared by two materials was loaded once.
        let stone = rig.streamer.load::<Image>("stone.png", 0);
        assert!(stone.same_load(&material.textures[0]));
    });
}

#[test]
fn dependency_cycles_fail_instead_of_waiting_forever() {
    within_watchdog("dependency cycles", || {
        let rig = Rig::new("cycles", StreamerConfig::default(), |dir| {
            dir.write("a.link", "b.link\n");
            dir.write("b.link", "c.link\n");
            dir.write("c.link", "a.link\n");
            dir.write("self.link", "self.link\n");
            dir.write("leaf.link", "");
            dir.write("tree.link", "leaf.link\n");
        });
        rig.streamer.register(LinkLoader);
        let a = rig.streamer.load::<Vec<Handle<Vec<u8>>>>("a.link", 0);
        let b = rig.streamer.load::<Vec<Handle<Vec<u8>>>>("b.link", 0);
        let selfish = rig.streamer.load::<Vec<Handle<Vec<u8>>>>("self.link", 0);
        let tree = rig.streamer.load::<Vec<Handle<Vec<u8>>>>("tree.link", 0);
        let outcomes = rig.outcomes();
        assert_eq!(outcomes.len(), 4);
        assert!(outcomes[&tree.id().0].is_ok());
        let is_cycle = |kind: &AssetErrorKind| match kind {
            AssetErrorKind::DependencyCycle { cycle } => !cycle.is_empty(),
            _ => false,
        };
        match outcomes[&selfish.id().0].as_ref().unwrap_err() {
            AssetErrorKind::DependencyCycle { cycle } => {
                assert_eq!(cycle, &[PathBuf::from("self.link")]);
            }
            other => panic!("{other}"),
        }
        // One load of the ring finds the cycle; the others fail through it.
        for handle in [&a, &b] {
            let kind = outcomes[&handle.id().0].as_ref().unwrap_err();
            let through = match kind {
                AssetErrorKind::DependencyFailed { reason, .. } => {
                    is_cycle(reason) || matches!(&**reason, AssetErrorKind::DependencyFailed { .. })
                }
                other => is_cycle(other),
            };
            assert!(through, "{kind}");
        }
    });
}

/// Links in the chains of `long_chains_of_dependencies_load_and_fail`:
/// deep enough that ending them by recursion, one call per link, overflowed
/// a thread's stack.
const CHAIN: usize = 20_000;

/// A chain of dependencies thousands long, as a generated level's chunks
/// might make: each link's load waits for the next. Ending the last link
/// ends every other one; a failing last link fails every other one, each
/// with a `DependencyFailed` that names its own dependency and leads to the
/// root cause within a bounded depth (so that the error can be shown and
/// dropped). In a child process: a stack overflow aborts.
#[test]
fn long_chains_of_dependencies_load_and_fail() {
    common::in_child_process("long_chains_of_dependencies_load_and_fail", || {
        let rig = Rig::new("chains", StreamerConfig::default(), |dir| {
            for i in 0..CHAIN {
                dir.write(&format!("ok/{i}.link"), format!("ok/{}.link\n", i + 1));
                dir.write(&format!("bad/{i}.link"), format!("bad/{}.link\n", i + 1));
            }
            dir.write(&format!("ok/{CHAIN}.link"), "");
            // `bad/{CHAIN}.link` is missing.
        });
        rig.streamer.register(LinkLoader);
        let ok = rig.streamer.load::<Vec<Handle<Vec<u8>>>>("ok/0.link", 0);
        let bad = rig.streamer.load::<Vec<Handle<Vec<u8>>>>("bad/0.link", 0);
        let outcomes = rig.outcomes();
        assert_eq!(outcomes.len(), 2);
        assert!(outcomes[&ok.id().0].is_ok());
        assert_eq!(ok.status(), LoadStatus::Loaded);
        let error = outcomes[&bad.id().0].as_ref().unwrap_err();
        match error {
            AssetErrorKind::DependencyFailed { path, .. } => {
                assert_eq!(path, Path::new("bad/1.link"))
            }
            other => panic!("{other}"),
        }
        // Down the chain of reasons to the missing file.
        let mut depth = 0;
        let mut kind = error;
        while let AssetErrorKind::DependencyFailed { reason, .. } = kind {
            depth += 1;
            kind = reason;
        }
        assert!(matches!(kind, AssetErrorKind::NotFound), "{kind}");
        assert!(
            (2..=AssetErrorKind::MAX_DEPENDENCY_LEVELS).contains(&depth),
            "{depth} levels of reasons"
        );
        let shown = error.to_string();
        assert!(shown.contains(&format!("bad/{CHAIN}.link")), "{shown}");
        assert_eq!(bad.status(), LoadStatus::Failed);
        drop(outcomes);
        drop((ok, bad));
    });
}

#[test]
fn bad_input_ends_in_typed_errors() {
    within_watchdog("bad input", || {
        let mut huge = png_file(1, 1, png::ColorType::Rgba, &[0; 4]);
        // IHDR: 100,000 x 100,000 (40 GB of RGBA8), CRC left wrong.
        huge[16..20].copy_from_slice(&100_000u32.to_be_bytes());
        huge[20..24].copy_from_slice(&100_000u32.to_be_bytes());
        // u32::MAX x u32::MAX: the size overflows 64 bits.
        let mut widest = huge.clone();
        widest[16..24].fill(0xff);
        let good = png_file(64, 64, png::ColorType::Rgba, &gradient(64, 64));
        let config = StreamerConfig::default().max_file_size(1 << 20);
        let rig = Rig::new("bad", config, |dir| {
            dir.write("model.fbx", b"unknown");
            dir.write("noext", b"none");
            dir.write("huge.png", &huge);
            dir.write("widest.png", &widest);
            dir.write("garbage.png", b"this is not a png at all, not even close");
            dir.write("truncated.png", &good[..good.len() / 2]);
            dir.write("flipped.png", {
                let mut f = good.clone();
                let at = f.len() / 2;
                f[at] ^= 0xff;
                f
            });
            dir.write("bad.zst", b"\x28\xb5\x2f\xfd garbage");
            dir.write("bad.eta", b"ETA1 garbage");
            std::fs::create_dir(dir.0.join("folder.png")).unwrap();
        });
        let s = &rig.streamer;
        let unknown = s.load::<Vec<u8>>("model.fbx", 0);
        let noext = s.load::<Vec<u8>>("noext", 0);
        let wrong = s.load::<Image>("model.bin", 0);
        let huge = s.load::<Image>("huge.png", 0);
        let widest = s.load::<Image>("widest.png", 0);
        let garbage = s.load::<Image>("garbage.png", 0);
        let truncated = s.load::<Image>("truncated.png", 0);
        let flipped = s.load::<Image>("flipped.png", 0);
        let zst = s.load::<Vec<u8>>("bad.zst", 0);
        let eta = s.load::<Vec<u8>>("bad.eta", 0);
        let folder = s.load::<Image>("folder.png", 0);
        let outside = s.load::<Vec<u8>>("../secret.bin", 0);
        let o = rig.outcomes();
        assert_eq!(o.len(), 12, "one event per request");
        let err = |h: AssetIdOf| o[&h.0].as_ref().unwrap_err();
        assert!(
            matches!(err(id(&unknown)), AssetErrorKind::UnknownExtension { extension } if extension == "fbx")
        );
        assert!(
            matches!(err(id(&noext)), AssetErrorKind::UnknownExtension { extension } if extension.is_empty())
        );
        match err(id(&wrong)) {
            AssetErrorKind::WrongType {
                requested,
                available,
                ..
            } => {
                assert!(requested.contains("Image"));
                assert_eq!(available, &["alloc::vec::Vec<u8>"]);
            }
            other => panic!("{other}"),
        }
        match loader_error::<ImageError>(err(id(&huge))) {
            ImageError::TooLarge { width, height, .. } => {
                assert_eq!((*width, *height), (100_000, 100_000));
            }
            other => panic!("{other}"),
        }
        match loader_error::<ImageError>(err(id(&widest))) {
            ImageError::TooLarge {
                width,
                height,
                bytes,
                ..
            } => assert_eq!((*width, *height, *bytes), (u32::MAX, u32::MAX, u64::MAX)),
            other => panic!("{other}"),
        }
        for h in [&garbage, &truncated, &flipped] {
            assert!(matches!(
                loader_error::<ImageError>(err(id(h))),
                ImageError::Decode(_)
            ));
        }
        assert!(matches!(
            loader_error::<CodecError>(err(id(&zst))),
            CodecError::Corrupt(_)
        ));
        assert!(matches!(
            loader_error::<CodecError>(err(id(&eta))),
            CodecError::Corrupt(_)
        ));
        assert!(matches!(err(id(&folder)), AssetErrorKind::NotAFile));
        assert!(matches!(err(id(&outside)), AssetErrorKind::OutsideRoot));
    });
}

type AssetIdOf = engine_tasks::assets::AssetId;

fn id<T: Send + Sync + 'static>(handle: &Handle<T>) -> AssetIdOf {
    handle.id()
}

#[cfg(target_os = "linux")]
#[test]
fn a_fifo_is_refused_and_the_requests_behind_it_load() {
    use std::ffi::CString;
    within_watchdog("fifo", || {
        let rig = Rig::new(
            "fifo",
            StreamerConfig::default().max_reads_in_flight(1),
            |dir| {
                let c_path = CString::new(dir.0.join("pipe.png").to_str().unwrap()).unwrap();
                // SAFETY: a valid NUL-terminated path; mkfifo has no other
                // preconditions.
                assert_eq!(unsafe { libc::mkfifo(c_path.as_ptr(), 0o600) }, 0);
                dir.write("after.bin", b"after");
            },
        );
        let pipe = rig.streamer.load::<Image>("pipe.png", 1);
        let after = rig.streamer.load::<Vec<u8>>("after.bin", 0);
        let o = rig.outcomes();
        assert!(matches!(o[&pipe.id().0], Err(AssetErrorKind::NotAFile)));
        assert_eq!(*loaded(&after), b"after");
    });
}

#[test]
fn a_file_that_grows_while_it_is_read_ends_once_within_the_limit() {
    within_watchdog("growing file", || {
        const MAX: u64 = 1 << 20;
        let config = StreamerConfig::default().max_file_size(MAX);
        let rig = Rig::new("grow", config, |dir| {
            dir.write("log.bin", vec![b'a'; 512 * 1024])
        });
        let path = rig.dir.0.join("log.bin");
        let writer = std::thread::spawn(move || {
            use std::io::Write;
            let mut file = std::fs::OpenOptions::new().append(true).open(path).unwrap();
            for _ in 0..64 {
                file.write_all(&[b'a'; 64 * 1024]).unwrap();
            }
        });
        let log = rig.streamer.load::<Vec<u8>>("log.bin", 0);
        let o = rig.outcomes();
        writer.join().unwrap();
        assert_eq!(o.len(), 1);
        match &o[&log.id().0] {
            Ok(()) => {
                let bytes = loaded(&log);
                assert!(bytes.len() as u64 <= MAX && bytes.iter().all(|&b| b == b'a'));
            }
            Err(AssetErrorKind::TooLarge { max, .. }) => assert_eq!(*max, MAX),
            Err(other) => panic!("{other}"),
        }
        // Read again now that it is over the limit: refused by its size.
        let again = rig.streamer.load::<Vec<u8>>("log.bin", 0);
        let o = rig.outcomes();
        assert!(
            matches!(o[&again.id().0], Err(AssetErrorKind::TooLarge { .. }))
                || again.same_load(&log)
        );
    });
}

/// Panics while loading (`boom`) or in its second step (`late`); `bomb`
/// panics with a [`Bomb`], whose own drop panics.
struct Panicky;

/// A panic payload whose drop panics too: the streamer drops it as it turns
/// the loader's panic into the load's error.
struct Bomb;

impl Drop for Bomb {
    fn drop(&mut self) {
        panic!("a loader's panic payload panicked as it dropped");
    }
}

struct PanicSteps;

impl DecodeSteps for PanicSteps {
    type Asset = u8;
    type Error = std::io::Error;

    fn step(&mut self, _: usize) -> Result<Poll<u8>, std::io::Error> {
        panic!("a loader bug, in a step");
    }
}

impl AssetLoader for Panicky {
    type Asset = u8;
    type Error = std::io::Error;

    fn extensions(&self) -> &[&str] {
        &["panic"]
    }

    fn load(
        &self,
        bytes: Vec<u8>,
        _: &mut LoadContext,
    ) -> Result<Decode<u8, Self::Error>, Self::Error> {
        match bytes.as_slice() {
            b"boom" => panic!("a loader bug"),
            b"bomb" => std::panic::panic_any(Bomb),
            b"late" => Ok(Decode::Steps(Box::new(PanicSteps))),
            _ => Ok(Decode::Done(bytes.len() as u8)),
        }
    }
}

#[test]
fn a_panicking_loader_ends_its_requests_with_the_panic_message() {
    within_watchdog("panicking loader", || {
        let rig = Rig::new("panic", StreamerConfig::default(), |dir| {
            dir.write("boom.panic", "boom");
            dir.write("bomb.panic", "bomb");
            dir.write("late.panic", "late");
            dir.write("fine.panic", "fine!");
        });
        rig.streamer.register(Panicky);
        let boom = rig.streamer.load::<u8>("boom.panic", 0);
        let boom_too = rig.streamer.load::<u8>("boom.panic", 0);
        let late = rig.streamer.load::<u8>("late.panic", 0);
        let bomb = rig.streamer.load::<u8>("bomb.panic", 0);
        let o = rig.outcomes();
        assert_eq!(o.len(), 4, "one event per request");
        for (h, said) in [
            (&boom, "a loader bug"),
            (&boom_too, "a loader bug"),
            (&late, "a loader bug, in a step"),
            (&bomb, "a panic whose payload is not a string"),
        ] {
            match &o[&h.id().0] {
                Err(AssetErrorKind::LoaderPanicked(message)) => assert_eq!(message, said),
                other => panic!("{other:?}"),
            }
        }
        // The streamer and its pools go on.
        let fine = rig.streamer.load::<u8>("fine.panic", 0);
        assert!(rig.outcomes()[&fine.id().0].is_ok());
        assert_eq!(*loaded(&fine), 5);
        assert_eq!(rig.streamer.progress().undecoded_bytes, 0);
    });
}

/// With the work-stealing pool gone, decodes run where their reads ended,
/// step after step: a custom loader's quarter of a million fixed-size steps
/// (it ignores the budget), a plain byte file, and a compressed file as a
/// typed load and as a byte request (the built-in decoder).
/// Before, each refused step nested a call in the last one's, and the
/// custom loader's ran the blocking thread out of stack.
#[test]
fn decodes_finish_in_place_when_the_pool_is_gone() {
    within_watchdog("decodes without a pool", || {
        const SIZE: usize = 1 << 20;
        let dir = rig::TempDir::new("no-pool");
        dir.write("long.txt", vec![b'a'; SIZE]);
        dir.write("plain.bin", vec![3u8; SIZE]);
        dir.write("packed.eta", encode_asset(&vec![5u8; SIZE]));
        let pool = engine_tasks::Pool::builder().threads(1).build().unwrap();
        let blocking = engine_tasks::BlockingPool::builder().build().unwrap();
        let streamer =
            engine_tasks::assets::AssetStreamer::new(&dir.0, &pool, &blocking, 1).unwrap();
        streamer.register(Chunked {
            loads: Arc::new(AtomicUsize::new(0)),
        });
        drop(pool);
        let long = streamer.load::<(String, usize)>("long.txt", 0);
        let plain = streamer.load::<Vec<u8>>("plain.bin", 0);
        let packed = streamer.load::<Vec<u8>>("packed.eta", 0);
        // The byte API's own decoder, in steps too.
        let raw = streamer.request("packed.eta", 0);
        let mut out = Vec::new();
        while out.len() < 3 {
            streamer.update(&mut out);
            std::thread::sleep(Duration::from_millis(1));
        }
        for event in &out {
            assert!(matches!(event, LoadEvent::Loaded { .. }), "{event:?}");
        }
        let mut raw_out = Vec::new();
        while raw_out.is_empty() {
            streamer.drain(&mut raw_out);
            std::thread::sleep(Duration::from_millis(1));
        }
        let asset = raw_out[0].as_ref().expect("the byte request loads");
        assert_eq!((asset.id, &asset.data), (raw, &vec![5u8; SIZE]));
        assert_eq!(*loaded(&packed), vec![5u8; SIZE]);
        let (text, steps) = &*loaded(&long);
        assert_eq!(text.len(), SIZE);
        assert_eq!(*steps, SIZE / 4, "four bytes a step");
        assert_eq!(*loaded(&plain), vec![3u8; SIZE]);
        assert_eq!(streamer.progress().undecoded_bytes, 0);
    });
}

/// Occupies one of `blocking`'s threads with a task that waits, once it
/// has started, until the sender returned with it is used.
fn occupy(
    blocking: &engine_tasks::BlockingPool,
) -> (engine_tasks::BlockingTask<()>, std::sync::mpsc::Sender<()>) {
    let (started, has_started) = std::sync::mpsc::channel();
    let (release, released) = std::sync::mpsc::channel::<()>();
    let task = blocking
        .spawn(move || {
            started.send(()).unwrap();
            released.recv().unwrap();
        })
        .unwrap();
    has_started.recv().unwrap();
    (task, release)
}

/// A byte request cancelled while it waits for a reader that the blocking
/// pool's shutdown then drops ends as `Cancelled`, as `cancel` said it
/// would; the other waiting request as `PoolUnavailable`. Before, both
/// ended as `PoolUnavailable`.
#[test]
fn a_cancelled_request_whose_reader_the_shutdown_drops_ends_cancelled() {
    within_watchdog("cancelled, then shut down", || {
        let dir = rig::TempDir::new("cancel-shutdown");
        dir.write("a.bin", "a");
        dir.write("b.bin", "b");
        let pool = engine_tasks::Pool::builder().threads(1).build().unwrap();
        let blocking = engine_tasks::BlockingPool::builder()
            .cap(1)
            .build()
            .unwrap();
        // Keep the only blocking thread busy, so the reader job waits queued.
        let (holder, release) = occupy(&blocking);
        let streamer =
            engine_tasks::assets::AssetStreamer::new(&dir.0, &pool, &blocking, 1).unwrap();
        let a = streamer.request("a.bin", 0);
        let b = streamer.request("b.bin", 0);
        assert!(streamer.cancel(a));
        let mut out = Vec::new();
        std::thread::scope(|s| {
            // The shutdown drops the queued reader job at once, then waits
            // for the busy thread.
            s.spawn(|| blocking.shutdown());
            while out.len() < 2 {
                streamer.drain(&mut out);
                std::thread::sleep(Duration::from_millis(1));
            }
            release.send(()).unwrap();
        });
        for event in &out {
            let e = event.as_ref().expect_err("neither was read");
            if e.id == a {
                assert!(matches!(e.kind, AssetErrorKind::Cancelled), "{e}");
            } else {
                assert_eq!(e.id, b);
                assert!(matches!(e.kind, AssetErrorKind::PoolUnavailable), "{e}");
            }
        }
        holder.wait().unwrap();
        let p = streamer.progress();
        assert_eq!((p.requested, p.cancelled, p.failed), (2, 1, 1));
    });
}

/// A material whose drop panics: what a dependent leaves when its
/// dependency fails.
struct Fragile(#[allow(dead_code)] Vec<Handle<Image>>);

/// How many [`Fragile`] values were dropped.
static FRAGILE_DROPS: AtomicUsize = AtomicUsize::new(0);

impl Drop for Fragile {
    fn drop(&mut self) {
        FRAGILE_DROPS.fetch_add(1, Ordering::SeqCst);
        panic!("a fragile material was dropped");
    }
}

/// Loads `.fragile` files as [`MaterialLoader`] does, into a [`Fragile`].
struct FragileLoader;

impl AssetLoader for FragileLoader {
    type Asset = Fragile;
    type Error = std::io::Error;

    fn extensions(&self) -> &[&str] {
        &["fragile"]
    }

    fn load(
        &self,
        bytes: Vec<u8>,
        cx: &mut LoadContext,
    ) -> Result<Decode<Fragile, std::io::Error>, std::io::Error> {
        let text = String::from_utf8_lossy(&bytes).into_owned();
        let textures = text.lines().map(|line| cx.depend::<Image>(line.trim()));
        Ok(Decode::Done(Fragile(textures.collect())))
    }
}

/// Three decoded dependents of a file that is missing: their values are
/// dropped unused, and each drop panics. Every request still ends, as
/// `DependencyFailed`. Before, the drop's panic escaped the code that ends
/// the dependents' loads (cutting short a walk over several, when they
/// wait together), and their requests never ended.
#[test]
fn dependents_whose_values_panic_as_they_drop_still_end() {
    within_watchdog("fragile dependents", || {
        let rig = Rig::new("fragile", StreamerConfig::default(), |dir| {
            for name in ["a", "b", "c"] {
                dir.write(&format!("{name}.fragile"), "missing.png\n");
            }
        });
        rig.streamer.register(FragileLoader);
        let loads: Vec<_> = ["a", "b", "c"]
            .iter()
            .map(|name| rig.streamer.load::<Fragile>(format!("{name}.fragile"), 0))
            .collect();
        let o = rig.outcomes();
        assert_eq!(o.len(), 3, "one event per request");
        for load in &loads {
            match &o[&load.id().0] {
                Err(AssetErrorKind::DependencyFailed { path, reason }) => {
                    assert_eq!(path, Path::new("missing.png"));
                    assert!(matches!(**reason, AssetErrorKind::NotFound), "{reason}");
                }
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(
            FRAGILE_DROPS.load(Ordering::SeqCst),
            3,
            "each value dropped"
        );
    });
}

/// A loader that, as it is dropped, asks its streamer for a load: user code
/// that calls back into the streamer from a destructor.
struct CallsBackOnDrop(std::sync::Mutex<Option<engine_tasks::assets::AssetStreamer>>);

impl AssetLoader for CallsBackOnDrop {
    type Asset = Fragile;
    type Error = std::io::Error;

    fn extensions(&self) -> &[&str] {
        &["fragile"]
    }

    fn load(
        &self,
        _: Vec<u8>,
        _: &mut LoadContext,
    ) -> Result<Decode<Fragile, std::io::Error>, std::io::Error> {
        Err(std::io::Error::other("never asked"))
    }
}

impl Drop for CallsBackOnDrop {
    fn drop(&mut self) {
        let streamer = self.0.get_mut().unwrap().take();
        if let Some(streamer) = streamer {
            drop(streamer.load::<Vec<u8>>("any.bin", 0));
        }
    }
}

/// A loader replaced by another runs its drop after the registry's lock is
/// released, so it may call back into the streamer. Before, the drop ran
/// under the registry's write lock, and the call back waited on that lock
/// for ever.
#[test]
fn a_replaced_loader_is_dropped_outside_the_registry_lock() {
    within_watchdog("a replaced loader calls back", || {
        let rig = Rig::new("replaced", StreamerConfig::default(), |_| {});
        let calls_back = CallsBackOnDrop(std::sync::Mutex::new(Some(rig.streamer.clone())));
        rig.streamer.register(calls_back);
        // Same extension and type: replaces it.
        rig.streamer.register(FragileLoader);
        assert_eq!(rig.streamer.progress().requested, 1, "the drop's request");
    });
}

#[test]
fn typed_requests_fail_as_pool_unavailable_once_the_blocking_pool_is_shut_down() {
    within_watchdog("blocking pool shut down", || {
        let dir = rig::TempDir::new("shutdown");
        dir.write("a.bin", "a");
        let pool = engine_tasks::Pool::builder().threads(1).build().unwrap();
        let blocking = engine_tasks::BlockingPool::builder().build().unwrap();
        let streamer =
            engine_tasks::assets::AssetStreamer::new(&dir.0, &pool, &blocking, 1).unwrap();
        blocking.shutdown();
        let a = streamer.load::<Vec<u8>>("a.bin", 0);
        let b = streamer.load::<Vec<u8>>("a.bin", 0);
        let mut out = Vec::new();
        while out.len() < 2 {
            streamer.update(&mut out);
            std::thread::sleep(Duration::from_millis(1));
        }
        for event in &out {
            match event {
                LoadEvent::Failed(e) => {
                    assert!(e.id == a.id() || e.id == b.id());
                    assert!(matches!(e.kind, AssetErrorKind::PoolUnavailable), "{e}");
                }
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(a.status(), LoadStatus::Failed);
        let p = streamer.progress();
        assert_eq!((p.requested, p.failed), (2, 2));
    });
}

#[test]
fn a_read_refused_by_a_full_blocking_pool_fails_as_pool_busy_and_a_retry_loads() {
    within_watchdog("blocking pool full", || {
        let dir = rig::TempDir::new("pool-busy");
        dir.write("a.bin", "a");
        let pool = engine_tasks::Pool::builder().threads(1).build().unwrap();
        let blocking = engine_tasks::BlockingPool::builder()
            .cap(1)
            .max_queued(1)
            .build()
            .unwrap();
        let streamer =
            engine_tasks::assets::AssetStreamer::new(&dir.0, &pool, &blocking, 1).unwrap();
        // The only thread is busy and one task waits: the pool is full.
        let (slow, release) = occupy(&blocking);
        let queued = blocking.spawn(|| ()).unwrap();
        let refused = streamer.load::<Vec<u8>>("a.bin", 0);
        let events = |want: usize| {
            let mut out = Vec::new();
            while out.len() < want {
                streamer.update(&mut out);
                std::thread::sleep(Duration::from_millis(1));
            }
            out
        };
        match &events(1)[..] {
            [LoadEvent::Failed(e)] => {
                assert_eq!(e.id, refused.id());
                assert!(matches!(e.kind, AssetErrorKind::PoolBusy), "{e}");
                assert!(e.kind.is_transient());
            }
            other => panic!("{other:?}"),
        }
        // Room again: the same file loads.
        release.send(()).unwrap();
        slow.wait().unwrap();
        queued.wait().unwrap();
        let retry = streamer.load::<Vec<u8>>("a.bin", 0);
        match &events(1)[..] {
            [LoadEvent::Loaded { id, .. }] => assert_eq!(*id, retry.id()),
            other => panic!("{other:?}"),
        }
        assert_eq!(&**retry.get().unwrap(), b"a");
    });
}

#[test]
fn shutting_the_blocking_pool_down_under_a_stream_of_requests_returns_and_loses_none() {
    within_watchdog("shutdown under requests", || {
        let dir = rig::TempDir::new("shutdown-stream");
        dir.write("a.eta", encode_asset(b"a"));
        let pool = engine_tasks::Pool::builder().threads(1).build().unwrap();
        let blocking = engine_tasks::BlockingPool::builder().build().unwrap();
        let streamer = Arc::new(
            engine_tasks::assets::AssetStreamer::new(&dir.0, &pool, &blocking, 1).unwrap(),
        );
        // Requests arrive faster than one reader reads them, before and
        // after the shutdown, until it returns.
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let requester = {
            let (streamer, stop) = (streamer.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut ids = Vec::new();
                while !stop.load(Ordering::Relaxed) {
                    ids.push(streamer.request("a.eta", 0));
                }
                ids
            })
        };
        while streamer.progress().requested < 200 {
            std::thread::yield_now();
        }
        blocking.shutdown();
        stop.store(true, Ordering::Relaxed);
        let ids = requester.join().unwrap();
        // Every request ends once: read before the shutdown, or failed.
        let mut ended = HashMap::new();
        while ended.len() < ids.len() {
            let mut out = Vec::new();
            streamer.drain(&mut out);
            for event in out {
                let (id, ok) = match event {
                    Ok(asset) => (asset.id, true),
                    Err(e) => {
                        assert!(matches!(e.kind, AssetErrorKind::PoolUnavailable), "{e}");
                        (e.id, false)
                    }
                };
                assert!(ended.insert(id, ok).is_none(), "{id:?} ended twice");
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        assert!(ids.iter().all(|id| ended.contains_key(id)));
        // A request after the shutdown fails at once.
        let late = streamer.request("a.eta", 0);
        let mut out = Vec::new();
        while out.is_empty() {
            streamer.drain(&mut out);
            std::thread::sleep(Duration::from_millis(1));
        }
        match &out[..] {
            [Err(e)] => {
                assert_eq!(e.id, late);
                assert!(matches!(e.kind, AssetErrorKind::PoolUnavailable), "{e}");
            }
            other => panic!("{other:?}"),
        }
    });
}

/// An 18-byte zstd frame that declares 1 GiB of content and holds 5 bytes.
fn zstd_declaring_a_gigabyte() -> Vec<u8> {
    let mut frame = vec![0x28, 0xb5, 0x2f, 0xfd];
    // A 4-byte content size, a window descriptor (1 KiB window).
    frame.extend([0x80, 0x00]);
    frame.extend((1u32 << 30).to_le_bytes());
    // The last block: raw, 5 bytes.
    frame.extend([1 | (5 << 3), 0, 0]);
    frame.extend(b"short");
    frame
}

#[test]
fn a_zstd_frame_declaring_a_huge_size_fails_without_reserving_it() {
    // In a child process whose address space is capped well under the
    // declared size, so reserving it aborts the child, not the run.
    common::in_child_process(
        "a_zstd_frame_declaring_a_huge_size_fails_without_reserving_it",
        || {
            within_watchdog("zstd declared size", || {
                let rig = Rig::new("zstd-declared", StreamerConfig::default(), |dir| {
                    dir.write("liar.zst", zstd_declaring_a_gigabyte());
                });
                #[cfg(target_os = "linux")]
                cap_address_space(768 << 20);
                let liar = rig.streamer.load::<Vec<u8>>("liar.zst", 0);
                let o = rig.outcomes();
                let kind = o[&liar.id().0].as_ref().unwrap_err();
                assert!(
                    matches!(loader_error::<CodecError>(kind), CodecError::Corrupt(_)),
                    "{kind}"
                );
            });
        },
    );
}

/// An asset file (`ETA1`) whose header declares 1 GiB and whose LZ4 frame
/// holds 5 bytes.
fn eta_declaring_a_gigabyte() -> Vec<u8> {
    let mut file = encode_asset(b"short");
    file[4..12].copy_from_slice(&(1u64 << 30).to_le_bytes());
    file
}

#[test]
fn an_asset_file_declaring_a_huge_size_fails_without_reserving_it() {
    // As for zstd above: reserving the declared size aborts the child.
    common::in_child_process(
        "an_asset_file_declaring_a_huge_size_fails_without_reserving_it",
        || {
            within_watchdog("ETA1 declared size", || {
                let rig = Rig::new("eta-declared", StreamerConfig::default(), |dir| {
                    dir.write("liar.eta", eta_declaring_a_gigabyte());
                });
                #[cfg(target_os = "linux")]
                cap_address_space(768 << 20);
                // Whole, as `decode_asset` decodes (one step of any size).
                let whole = engine_tasks::assets::decode_asset(&eta_declaring_a_gigabyte());
                assert!(
                    whole.as_ref().unwrap_err().contains("decoded 5 bytes"),
                    "{whole:?}"
                );
                // In steps, through the loader of `eta` files.
                let liar = rig.streamer.load::<Vec<u8>>("liar.eta", 0);
                let o = rig.outcomes();
                let kind = o[&liar.id().0].as_ref().unwrap_err();
                match loader_error::<CodecError>(kind) {
                    CodecError::Corrupt(why) => assert!(why.contains("decoded 5 bytes"), "{why}"),
                    other => panic!("{other}"),
                }
            });
        },
    );
}

/// Caps this process's address space at what it maps now plus `headroom`.
#[cfg(target_os = "linux")]
fn cap_address_space(headroom: u64) {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap();
    let pages: u64 = statm.split_whitespace().next().unwrap().parse().unwrap();
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as u64;
    let cap = pages * page + headroom;
    let limit = libc::rlimit {
        rlim_cur: cap,
        rlim_max: cap,
    };
    // SAFETY: `limit` is a valid rlimit that outlives the call.
    let rc = unsafe { libc::setrlimit(libc::RLIMIT_AS, &limit) };
    assert_eq!(rc, 0, "setrlimit");
}

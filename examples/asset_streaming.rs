//! Streams a directory of real PNG textures and materials while the game
//! loop runs, compares frame times with and without streaming, hot-reloads
//! a texture rewritten during the run, and compares streaming throughput
//! with a sequential load-and-decode loop.
//!
//! At start-up it writes PNG textures (made with the `png` codec) and
//! materials that each name two of them. Then it runs the boids game (the
//! main demo's graph) for a number of frames without streaming, then for as
//! many frames while textures are requested at a steady rate (cycling over
//! the files; a texture's handle is dropped once it has loaded, so it loads
//! again next time round) and every material is loaded with its textures.
//! Halfway through, another thread rewrites a texture that a material uses:
//! the file watcher reloads it, and the material after it. The frame calls
//! `update` once, at its start; values change only there.
//!
//! `cargo run --release --example asset_streaming -- --help` lists the flags.

#[path = "common/png_dir.rs"]
mod png_dir;
#[path = "game_loop/systems.rs"]
mod systems;
#[path = "game_loop/world.rs"]
mod world;

use clap::Parser;
use engine_tasks::assets::{
    AssetLoader, AssetStreamer, Decode, Handle, Image, LoadContext, LoadEvent, LoadStatus,
};
use engine_tasks::{default_pool, BlockingPool, Lane};
use indicatif::{ProgressBar, ProgressStyle};
use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Streams PNG textures and materials while the game loop runs.
#[derive(Parser, Debug)]
#[command(version, about)]
struct Args {
    /// Where to write the assets (default: a directory under the system
    /// temporary directory, removed at the end).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Number of PNG textures (256, 512 or 1024 pixels square).
    #[arg(long, default_value_t = 48)]
    textures: usize,
    /// Number of materials (two textures each).
    #[arg(long, default_value_t = 4)]
    materials: usize,
    /// Number of boids.
    #[arg(long, default_value_t = 20_000)]
    entities: usize,
    /// Frames per phase (without, then with streaming).
    #[arg(long, default_value_t = 600)]
    frames: usize,
    /// Target frames per second.
    #[arg(long, default_value_t = 60.0)]
    rate: f64,
    /// Most file reads in flight.
    #[arg(long, default_value_t = 2)]
    reads: usize,
    /// Textures requested per second while streaming (about 0.8 MB of
    /// RGBA8 each on average).
    #[arg(long, default_value_t = 12.0)]
    per_second: f64,
    /// Rounds of the throughput comparison (0: skip it).
    #[arg(long, default_value_t = 3)]
    rounds: usize,
}

/// A material: the textures named in its file, one per line.
struct Material {
    textures: Vec<Handle<Image>>,
}

struct MaterialLoader;

impl AssetLoader for MaterialLoader {
    type Asset = Material;
    type Error = std::string::FromUtf8Error;

    fn extensions(&self) -> &[&str] {
        &["mat"]
    }

    fn load(
        &self,
        bytes: Vec<u8>,
        cx: &mut LoadContext,
    ) -> Result<Decode<Material, Self::Error>, Self::Error> {
        let text = String::from_utf8(bytes)?;
        let textures = text
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| cx.depend::<Image>(l.trim()))
            .collect();
        Ok(Decode::Done(Material { textures }))
    }
}

/// Nice 10 for the calling thread (Linux applies nice per thread).
fn lower_thread_priority() {
    #[cfg(target_os = "linux")]
    // SAFETY: setpriority only reads its integer arguments; `who = 0` is the
    // calling thread. Failure leaves the priority unchanged, which is fine.
    unsafe {
        libc::setpriority(libc::PRIO_PROCESS, 0, 10);
    }
}

fn percentile(times: &mut [Duration], p: f64) -> Duration {
    times.sort_unstable();
    times[((times.len() - 1) as f64 * p).round() as usize]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn bar(len: u64, prefix: &'static str, unit: &str) -> ProgressBar {
    let bar = ProgressBar::new(len);
    let template = format!("{{prefix:>10}} [{{bar:40}}] {{pos}}/{{len}} {unit} {{msg}}");
    bar.set_style(
        ProgressStyle::with_template(&template)
            .expect("valid template")
            .progress_chars("=> "),
    );
    bar.set_prefix(prefix);
    bar
}

/// What the hot reload showed.
#[derive(Default)]
struct ReloadSeen {
    written_at_frame: Option<usize>,
    written: Option<Instant>,
    texture_frame: Option<(usize, Duration)>,
    material_frame: Option<(usize, Duration)>,
    failed_reloads: usize,
}

/// The frames of one phase, streaming or not.
struct Phase<'a> {
    args: &'a Args,
    streamer: &'a AssetStreamer,
    textures: &'a [png_dir::TextureFile],
    materials: &'a [PathBuf],
    dir: &'a Path,
}

/// A phase's figures.
#[derive(Default)]
struct PhaseResult {
    frames: Vec<Duration>,
    loaded: u64,
    failed: u64,
    decoded: u64,
    longest_update: Duration,
    reload: ReloadSeen,
}

/// Drops the handles of the loaded textures at the front of `pending`
/// (they load again next round), on the background lane: freeing megabytes
/// is no work for the frame thread. Returns the bytes they decoded.
fn retire(pending: &mut VecDeque<(Handle<Image>, u64)>, pool: &engine_tasks::Pool) -> u64 {
    let n = pending
        .iter()
        .take_while(|(h, _)| h.status() != LoadStatus::Loading)
        .count();
    let done: Vec<_> = pending.drain(..n).collect();
    let decoded = done
        .iter()
        .filter(|(h, _)| h.status() == LoadStatus::Loaded)
        .map(|(_, bytes)| bytes)
        .sum();
    if !done.is_empty() {
        let _ = pool.spawn(Lane::Background, move || drop(done));
    }
    decoded
}

impl Phase<'_> {
    fn run(&self, streaming: bool) -> PhaseResult {
        let (args, pool) = (self.args, default_pool());
        let world = world::new_world(args.entities);
        let mut graph = systems::build();
        let period = Duration::from_secs_f64(1.0 / args.rate);
        let bar = bar(
            args.frames as u64,
            if streaming { "streaming" } else { "baseline" },
            "frames",
        );
        let mut r = PhaseResult::default();
        let (mut events, mut pending) = (Vec::new(), VecDeque::<(Handle<Image>, u64)>::new());
        let (mut owed, mut next_texture) = (0.0, 0usize);
        let materials: Vec<Handle<Material>> = if streaming {
            self.materials
                .iter()
                .map(|m| self.streamer.load(m, 5))
                .collect()
        } else {
            Vec::new()
        };
        // The texture the writer rewrites, held for the whole phase.
        let watched = streaming.then(|| self.streamer.load::<Image>(&self.textures[0].name, 5));
        let reload_frame = args.frames / 3;
        let mut writer = None;
        let mut next = Instant::now();
        for frame in 0..args.frames {
            let update = Instant::now();
            events.clear();
            self.streamer.update(&mut events);
            r.longest_update = r.longest_update.max(update.elapsed());
            if streaming {
                self.observe(frame, &events, &mut r, &bar);
                owed += args.per_second / args.rate;
                while owed >= 1.0 {
                    owed -= 1.0;
                    let file = &self.textures[1 + next_texture % (self.textures.len() - 1)];
                    next_texture += 1;
                    let handle = self.streamer.load::<Image>(&file.name, 0);
                    // Only a load that decodes counts: a request that joins
                    // a loaded texture, or one already pending here,
                    // decodes nothing.
                    let decodes = handle.status() == LoadStatus::Loading
                        && !pending.iter().any(|(p, _)| p.same_load(&handle));
                    pending.push_back((handle, if decodes { file.decoded } else { 0 }));
                }
                r.decoded += retire(&mut pending, pool);
                if frame == reload_frame {
                    writer = Some(self.rewrite_texture(&mut r.reload, frame));
                }
                self.check_reload(frame, watched.as_ref(), &materials, &mut r.reload);
                bar.set_message(format!(
                    "{} loaded, {:.0} MB",
                    r.loaded,
                    r.decoded as f64 / 1e6
                ));
            }
            match graph.run(pool, &world) {
                Ok(stats) => r.frames.push(stats.wall_time()),
                Err(e) => bar.println(format!("frame error: {e}")),
            }
            bar.inc(1);
            next += period;
            match next.checked_duration_since(Instant::now()) {
                Some(wait) => std::thread::sleep(wait),
                None => next = Instant::now(),
            }
        }
        bar.finish();
        if let Some(writer) = writer {
            writer.join().expect("the writer thread");
        }
        r
    }

    fn observe(&self, frame: usize, events: &[LoadEvent], r: &mut PhaseResult, bar: &ProgressBar) {
        for event in events {
            match event {
                LoadEvent::Loaded { .. } => r.loaded += 1,
                LoadEvent::Failed(e) => {
                    r.failed += 1;
                    bar.println(format!("asset error: {e}"));
                }
                LoadEvent::ReloadFailed { path, kind } => {
                    // A half-written file; the old value stays.
                    r.reload.failed_reloads += 1;
                    bar.println(format!(
                        "frame {frame}: reload of {} failed: {kind}",
                        path.display()
                    ));
                }
                LoadEvent::Reloaded { path, generation } => {
                    bar.println(format!(
                        "frame {frame}: reloaded {} (version {generation})",
                        path.display()
                    ));
                }
                _ => {}
            }
        }
    }

    /// Rewrites the watched texture (another colour) on a thread of its own,
    /// as an artist's tool would.
    fn rewrite_texture(&self, seen: &mut ReloadSeen, frame: usize) -> std::thread::JoinHandle<()> {
        let size = [256, 512, 512, 1024][0];
        let path = self.dir.join(&self.textures[0].name);
        seen.written_at_frame = Some(frame);
        seen.written = Some(Instant::now());
        std::thread::spawn(move || {
            let pixels = png_dir::texture_pixels(size, 99, [200, 10, 10]);
            std::fs::write(path, png_dir::encode_png(size, &pixels)).expect("rewrite the texture");
        })
    }

    fn check_reload(
        &self,
        frame: usize,
        watched: Option<&Handle<Image>>,
        materials: &[Handle<Material>],
        seen: &mut ReloadSeen,
    ) {
        let Some(written) = seen.written else { return };
        if seen.texture_frame.is_none() && watched.is_some_and(|t| t.generation() >= 2) {
            seen.texture_frame = Some((frame, written.elapsed()));
        }
        // The material reloaded after its texture, and reads the new one.
        let material = materials
            .first()
            .and_then(|m| Some((m.generation(), m.get()?)));
        let reloaded = material.is_some_and(|(generation, material)| {
            generation >= 2 && material.textures[0].generation() >= 2
        });
        if seen.material_frame.is_none() && reloaded {
            seen.material_frame = Some((frame, written.elapsed()));
        }
    }
}

/// Loads every texture with a sequential loop on this thread, then with the
/// streamer (this thread only calls `update`); the median of `rounds`
/// rounds of each, alternating.
fn throughput(
    args: &Args,
    streamer: &AssetStreamer,
    dir: &Path,
    textures: &[png_dir::TextureFile],
) {
    let total: u64 = textures.iter().map(|t| t.decoded).sum();
    let (mut sequential, mut streamed) = (Vec::new(), Vec::new());
    let bar = bar(
        (args.rounds * textures.len()) as u64,
        "throughput",
        "textures",
    );
    for _ in 0..args.rounds {
        // Kept until the round ends, as the streamer's handles are.
        let mut images = Vec::with_capacity(textures.len());
        let start = Instant::now();
        for t in textures {
            let bytes = std::fs::read(dir.join(&t.name)).expect("read a texture");
            let (_, _, rgba) = png_dir::decode_png_rows(bytes).expect("decode a texture");
            images.push(rgba);
        }
        sequential.push(start.elapsed());
        assert!(images
            .iter()
            .zip(textures)
            .all(|(i, t)| i.len() as u64 == t.decoded));
        drop(images);

        let start = Instant::now();
        let handles: Vec<Handle<Image>> =
            textures.iter().map(|t| streamer.load(&t.name, 0)).collect();
        let mut events = Vec::new();
        while handles.iter().any(|h| h.status() == LoadStatus::Loading) {
            streamer.update(&mut events);
            std::thread::sleep(Duration::from_micros(500));
        }
        streamed.push(start.elapsed());
        assert!(handles.iter().all(|h| h.status() == LoadStatus::Loaded));
        bar.inc(textures.len() as u64);
    }
    bar.finish();
    let (seq, stream) = (
        percentile(&mut sequential, 0.5),
        percentile(&mut streamed, 0.5),
    );
    println!(
        "throughput, {} textures ({:.1} MB RGBA8), median of {} rounds:\n  \
         sequential load-and-decode loop, one thread: {:.1} ms ({:.1} MB/s)\n  \
         streamer (reads on the blocking pool, decode on the background lane): {:.1} ms ({:.1} MB/s)\n  \
         streamer / sequential throughput: {:.2}x",
        textures.len(),
        total as f64 / 1e6,
        args.rounds,
        ms(seq),
        total as f64 / 1e6 / seq.as_secs_f64(),
        ms(stream),
        total as f64 / 1e6 / stream.as_secs_f64(),
        seq.as_secs_f64() / stream.as_secs_f64(),
    );
}

fn report(args: &Args, mut base: PhaseResult, mut with: PhaseResult) {
    let (b50, b99) = (
        percentile(&mut base.frames, 0.5),
        percentile(&mut base.frames, 0.99),
    );
    let (s50, s99) = (
        percentile(&mut with.frames, 0.5),
        percentile(&mut with.frames, 0.99),
    );
    println!("\nframe time over {} frames per phase", args.frames);
    println!(
        "  without streaming: p50 {:.3} ms, p99 {:.3} ms",
        ms(b50),
        ms(b99)
    );
    println!(
        "  while streaming:   p50 {:.3} ms, p99 {:.3} ms",
        ms(s50),
        ms(s99)
    );
    println!(
        "  p99 while streaming / without: {:.2}",
        s99.as_secs_f64() / b99.as_secs_f64()
    );
    println!(
        "streamed {} textures and materials ({:.1} MB RGBA8), {} failed; longest update() call {:.1} µs",
        with.loaded,
        with.decoded as f64 / 1e6,
        with.failed,
        with.longest_update.as_secs_f64() * 1e6
    );
    let seen = &with.reload;
    match (
        seen.written_at_frame,
        seen.texture_frame,
        seen.material_frame,
    ) {
        (Some(w), Some((t, td)), material) => {
            println!(
                "hot reload: texture rewritten at frame {w}; its new pixels were read in frame {t} \
                 ({:.1} ms after the write began){}; {} reloads of a half-written file failed and kept the old value",
                ms(td),
                material.map_or(String::new(), |(m, md)| format!(
                    ", the material's reload in frame {m} ({:.1} ms)",
                    ms(md)
                )),
                seen.failed_reloads
            );
        }
        (Some(w), None, _) => {
            println!("hot reload: texture rewritten at frame {w}, not seen before the end")
        }
        _ => println!("hot reload: no rewrite (too few frames)"),
    }
}

fn main() {
    let args = Args::parse();
    if args.frames == 0 || args.textures < 2 || !(args.rate > 0.0 && args.rate.is_finite()) {
        eprintln!("asset_streaming: --frames and --rate must be above zero, --textures at least 2");
        std::process::exit(2);
    }
    let (dir, remove_after) = match &args.dir {
        Some(dir) => (dir.clone(), false),
        None => (
            std::env::temp_dir().join(format!("engine-tasks-assets-{}", std::process::id())),
            true,
        ),
    };
    let started = Instant::now();
    let (textures, materials) =
        match png_dir::write_texture_dir(&dir, args.textures, args.materials) {
            Ok(written) => written,
            Err(e) => {
                eprintln!(
                    "asset_streaming: cannot write assets to {}: {e}",
                    dir.display()
                );
                std::process::exit(1);
            }
        };
    println!(
        "wrote {} PNG textures ({:.1} MB, {:.1} MB as RGBA8) and {} materials to {} in {:.2} s",
        textures.len(),
        textures.iter().map(|t| t.file).sum::<u64>() as f64 / 1e6,
        textures.iter().map(|t| t.decoded).sum::<u64>() as f64 / 1e6,
        materials.len(),
        dir.display(),
        started.elapsed().as_secs_f64()
    );
    // Blocking threads read files for the streamer: run them at a lower OS
    // priority so that a read never preempts a frame's threads.
    let blocking = BlockingPool::builder()
        .spawn_with(|spec, main| {
            std::thread::Builder::new().name(spec.name).spawn(move || {
                lower_thread_priority();
                main()
            })
        })
        .build()
        .expect("valid blocking pool");
    let streamer =
        AssetStreamer::new(&dir, default_pool(), &blocking, args.reads).expect("asset root");
    streamer.register(MaterialLoader);
    streamer.watch().expect("watch the asset root");
    let phase = Phase {
        args: &args,
        streamer: &streamer,
        textures: &textures,
        materials: &materials,
        dir: &dir,
    };
    let base = phase.run(false);
    let with = phase.run(true);
    report(&args, base, with);
    if args.rounds > 0 {
        throughput(&args, &streamer, &dir, &textures);
    }
    if remove_after {
        let _ = std::fs::remove_dir_all(&dir);
    }
}

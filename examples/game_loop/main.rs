//! The main demo: a simulated game loop on the engine-tasks pool.
//!
//! A flock of boids (20,000 by default) is simulated by a task graph of 22
//! systems in sets (input, AI, broad and narrow phase, integration,
//! animation, audio, culling, LOD, effects, render preparation on the main
//! thread, a network snapshot every 30th frame, ...) at a fixed target
//! rate. Systems declare the resources they read and write and borrow
//! them without locks. Each second it prints frames per second, frame
//! time p50/p99 beside its bound, and how busy each thread was; at the end,
//! a summary. A frame's bound is max(critical path, work / threads), from
//! the frame's own node times: no schedule on these threads can end the
//! frame sooner.
//!
//! `cargo run --release --example game_loop -- --help` lists the flags.

#[path = "../common/asset_dir.rs"]
mod asset_dir;
mod systems;
mod world;

use clap::Parser;
use engine_tasks::assets::AssetStreamer;
use engine_tasks::graph::Resources;
use engine_tasks::{default_pool, BlockingPool, FrameStats, Pool, PoolHandle, TaskGraph};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use world::{Checksum, Hud};

/// A simulated game loop on the engine-tasks pool.
#[derive(Parser, Debug)]
#[command(version, about)]
struct Args {
    /// Number of boids (1 to 4,000,000).
    #[arg(long, default_value_t = 20_000,
          value_parser = clap::value_parser!(u64).range(1..=MAX_ENTITIES))]
    entities: u64,
    /// Frames to run.
    #[arg(long, default_value_t = 600)]
    frames: u64,
    /// Worker threads (the main thread helps too). Default: the process-wide
    /// default pool, sized to the machine's parallelism minus one.
    #[arg(long)]
    threads: Option<usize>,
    /// Target frames per second (0.1 to 10,000); 0 runs frames back to
    /// back.
    #[arg(long, default_value_t = 60.0, value_parser = parse_rate)]
    rate: f64,
    /// Compressed asset files to write to a temporary directory and stream
    /// in the background while the game runs (two requests per frame, read
    /// on the blocking pool, decoded on the background lane); 0 for none.
    #[arg(long, default_value_t = 200)]
    assets: usize,
    /// Record the last frames as a Chrome trace (open it in Perfetto or
    /// chrome://tracing) at this path, and draw them as an SVG timeline next
    /// to it (same name, `.svg`).
    #[arg(long)]
    trace: Option<PathBuf>,
    /// How many of the last frames `--trace` records.
    #[arg(long, default_value_t = 60)]
    trace_frames: u64,
}

/// Most boids `--entities` takes. At this many the demo peaked at 195 MB
/// resident (about 49 bytes a boid) and a frame took 13 s on a 2-core VM.
const MAX_ENTITIES: u64 = 4_000_000;

/// `--rate`: 0 (back to back), or a rate whose frame period a `Duration`
/// holds and a frame loop can keep (0.1 to 10,000 frames per second).
fn parse_rate(text: &str) -> Result<f64, String> {
    let rate: f64 = text
        .parse()
        .map_err(|e: std::num::ParseFloatError| e.to_string())?;
    if rate == 0.0 || (0.1..=10_000.0).contains(&rate) {
        Ok(rate)
    } else {
        Err("must be 0 (back to back) or from 0.1 to 10000".into())
    }
}

/// Frame times and busy time per thread over a window of frames.
#[derive(Default)]
struct Window {
    frame_times: Vec<Duration>,
    /// Per frame, max(critical path, node work / threads).
    bounds: Vec<Duration>,
    /// Per frame, frame time over bound.
    over_bound: Vec<f64>,
    busy: Vec<Duration>,
    wall: Duration,
    steals: u64,
}

impl Window {
    fn add(&mut self, stats: &FrameStats, threads: usize) {
        self.frame_times.push(stats.wall_time());
        let bound = stats
            .critical_path_work()
            .max(stats.total_work() / threads as u32);
        self.bounds.push(bound);
        if !bound.is_zero() {
            self.over_bound
                .push(stats.wall_time().as_secs_f64() / bound.as_secs_f64());
        }
        if self.busy.len() < stats.slots() {
            self.busy.resize(stats.slots(), Duration::ZERO);
        }
        for (slot, sum) in self.busy.iter_mut().enumerate() {
            *sum += stats.awake(slot).unwrap_or_default();
        }
        self.wall += stats.wall_time();
        self.steals += stats.steals();
    }

    fn percentile(&mut self, p: f64) -> Duration {
        percentile(&mut self.frame_times, p).unwrap_or_default()
    }

    /// The median bound, and the median of frame time over bound.
    fn bound(&mut self) -> (Duration, f64) {
        (
            percentile(&mut self.bounds, 0.5).unwrap_or_default(),
            percentile(&mut self.over_bound, 0.5).unwrap_or(f64::NAN),
        )
    }

    /// "w0 61% w1 58% main 72%": time not parked over frame wall time.
    fn utilisation(&self, workers: usize) -> String {
        let wall = self.wall.as_secs_f64().max(f64::MIN_POSITIVE);
        self.busy
            .iter()
            .enumerate()
            .map(|(slot, b)| {
                let name = if slot < workers {
                    format!("w{slot}")
                } else {
                    "main".into()
                };
                format!("{name} {:>3.0}%", 100.0 * b.as_secs_f64() / wall)
            })
            .collect::<Vec<_>>()
            .join(" ")
    }
}

/// Writes the recorded frames as Chrome trace JSON at `path` and as an SVG
/// timeline of the last 8 frames beside it.
fn write_trace(path: &Path) -> Result<(), Box<dyn std::error::Error>> {
    let timeline = engine_tasks::timeline::stop().ok_or("nothing was recorded")?;
    let mut json = Vec::new();
    timeline.write_chrome_trace(&mut json)?;
    std::fs::write(path, &json)?;
    let options = trace_svg::Options {
        frames: 8,
        ..trace_svg::Options::default()
    };
    let (svg, summary) = trace_svg::render(std::str::from_utf8(&json)?, &options)?;
    let svg_path = path.with_extension("svg");
    std::fs::write(&svg_path, svg)?;
    println!(
        "trace: {} ({} threads, {} events dropped), timeline {} ({} frames, {} task bars)",
        path.display(),
        timeline.threads(),
        timeline.dropped(),
        svg_path.display(),
        summary.frames,
        summary.task_bars,
    );
    Ok(())
}

/// The `p` quantile of `values` (nearest rank); `None` if empty.
fn percentile<T: Copy + PartialOrd>(values: &mut [T], p: f64) -> Option<T> {
    values.sort_unstable_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
    let rank = ((values.len().checked_sub(1)?) as f64 * p).round() as usize;
    Some(values[rank])
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn main() {
    let args = Args::parse();
    let own_pool;
    let pool: &PoolHandle = match args.threads {
        Some(threads) => match Pool::builder().threads(threads).build() {
            Ok(pool) => {
                own_pool = pool;
                &own_pool
            }
            Err(e) => {
                eprintln!("game_loop: --threads {threads}: {e}");
                std::process::exit(2);
            }
        },
        None => default_pool(),
    };
    let workers = pool.threads();
    // The frame's threads: the workers and this one.
    let frame_threads = workers + 1;
    println!(
        "game_loop: {} boids, {} frames at {} Hz, {} worker threads + main",
        args.entities,
        args.frames,
        if args.rate > 0.0 {
            args.rate.to_string()
        } else {
            "unlimited".into()
        },
        workers,
    );

    let blocking = BlockingPool::new();
    let asset_root = std::env::temp_dir().join(format!("engine-tasks-game-{}", std::process::id()));
    let asset_files = match asset_dir::write_asset_dir(&asset_root, args.assets) {
        Ok(files) => files,
        Err(e) => {
            eprintln!(
                "game_loop: cannot write assets to {}: {e}",
                asset_root.display()
            );
            std::process::exit(1);
        }
    };
    let streamer = AssetStreamer::new(&asset_root, pool, &blocking, 2).expect("asset root exists");
    let mut asset_events = Vec::new();
    let mut next_asset = 0;
    let (mut assets_loaded, mut asset_bytes, mut asset_failures) = (0u64, 0u64, 0u64);

    let mut world = world::new_world(args.entities as usize);
    let mut graph: TaskGraph<Resources> = systems::build();
    println!("graph: {} systems", graph.len());
    let period = (args.rate > 0.0).then(|| Duration::from_secs_f64(1.0 / args.rate));

    let started = Instant::now();
    let mut second = Window::default();
    let mut all = Window::default();
    let mut second_start = Instant::now();
    let mut second_frames = 0u32;
    let mut failures = 0u64;
    let mut next_frame = Instant::now();
    let trace_from = args.frames.saturating_sub(args.trace_frames.max(1));
    for frame in 0..args.frames {
        if args.trace.is_some() && frame == trace_from {
            engine_tasks::timeline::start().expect("no other timeline session runs");
        }
        // Start of the frame: take the assets that finished, ask for more.
        asset_events.clear();
        streamer.drain(&mut asset_events);
        for event in &asset_events {
            match event {
                Ok(asset) => {
                    assets_loaded += 1;
                    asset_bytes += asset.data.len() as u64;
                }
                Err(e) => {
                    asset_failures += 1;
                    eprintln!("game_loop: asset {e}");
                }
            }
        }
        for _ in 0..2 {
            if let Some(file) = asset_files.get(next_asset) {
                streamer.request(&file.name, 0);
                next_asset += 1;
            }
        }
        match graph.run(pool, &world) {
            Ok(stats) => {
                second.add(stats, frame_threads);
                all.add(stats, frame_threads);
            }
            Err(error) => {
                failures += 1;
                eprintln!("game_loop: {error}");
            }
        }
        second_frames += 1;
        if second_start.elapsed() >= Duration::from_secs(1) {
            let fps = f64::from(second_frames) / second_start.elapsed().as_secs_f64();
            let (bound, over) = second.bound();
            println!(
                "{:5.1} fps | frame p50 {:6.3} ms p99 {:6.3} ms | bound {:6.3} ms ({:.2}x) | busy {} | visible {} | assets {}/{}",
                fps,
                ms(second.percentile(0.5)),
                ms(second.percentile(0.99)),
                ms(bound),
                over,
                second.utilisation(workers),
                world.get_mut::<Hud>().map_or(0, |hud| hud.visible),
                assets_loaded,
                asset_files.len(),
            );
            second = Window::default();
            second_start = Instant::now();
            second_frames = 0;
        }
        if let Some(period) = period {
            next_frame += period;
            let now = Instant::now();
            if next_frame > now {
                // The frame limiter: sleeps until the tick, and brings the
                // graph's code and data back into this core's caches just
                // before it.
                graph.sleep_until(pool, next_frame);
            } else {
                // Running late: do not try to catch up with a burst.
                next_frame = now;
            }
        }
    }

    let elapsed = started.elapsed();
    if let Some(path) = &args.trace {
        if let Err(e) = write_trace(path) {
            eprintln!("game_loop: --trace {}: {e}", path.display());
        }
    }
    let last = graph.last_frame();
    let path: Vec<&str> = last
        .critical_path()
        .iter()
        .map(|&i| graph.node_name(i))
        .collect();
    let checksum = world.get_mut::<Checksum>().map_or(0, |c| c.0);
    let hud = world.get_mut::<Hud>().expect("the world has a HUD");
    let pool_stats = pool.stats();
    println!("\nsummary");
    println!(
        "  frames {} in {:.2} s ({:.1} fps), failed frames {failures}",
        args.frames,
        elapsed.as_secs_f64(),
        args.frames as f64 / elapsed.as_secs_f64()
    );
    println!(
        "  frame time p50 {:.3} ms, p99 {:.3} ms, max {:.3} ms",
        ms(all.percentile(0.5)),
        ms(all.percentile(0.99)),
        ms(all.percentile(1.0)),
    );
    let (bound, over) = all.bound();
    println!(
        "  bound p50 {:.3} ms (max(critical path, work / {frame_threads} threads)); frame / bound p50 {over:.2}x",
        ms(bound),
    );
    println!("  busy during frames: {}", all.utilisation(workers));
    println!(
        "  last frame: critical path {} ({:.3} ms of {:.3} ms work)",
        path.join(" > "),
        ms(last.critical_path_work()),
        ms(last.total_work()),
    );
    println!(
        "  assets streamed {assets_loaded} of {} ({:.1} of {:.1} MB decoded), {asset_failures} failed",
        asset_files.len(),
        asset_bytes as f64 / 1e6,
        asset_files.iter().map(|f| f.bytes).sum::<u64>() as f64 / 1e6,
    );
    println!(
        "  steals {}, parks {}, snapshots sent {}, mean speed {:.2} m/s, checksum {:016x}",
        all.steals,
        pool_stats.parks(),
        hud.snapshots,
        hud.mean_speed,
        checksum,
    );
    drop(streamer);
    let _ = std::fs::remove_dir_all(&asset_root);
}

//! Streams a directory of compressed assets while the game loop runs, and
//! compares frame times with and without streaming.
//!
//! It writes a few hundred real LZ4-compressed asset files, runs the boids
//! game (the main demo's 21-system graph) for a number of frames without
//! streaming, then for as many frames while the streamer reads every asset
//! on the blocking pool and decodes it on the background lane: a few new
//! requests per frame, cycling over the files so streaming runs for the
//! whole phase (`--per-frame 0` requests everything at once instead).
//! Finished assets are drained at the start of each frame.
//!
//! `cargo run --release --example asset_streaming -- --help` lists the flags.

#[path = "common/asset_dir.rs"]
mod asset_dir;
#[path = "game_loop/systems.rs"]
mod systems;
#[path = "game_loop/world.rs"]
mod world;

use clap::Parser;
use engine_tasks::assets::AssetStreamer;
use engine_tasks::{default_pool, BlockingPool};
use indicatif::{ProgressBar, ProgressStyle};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Streams assets while the game loop runs.
#[derive(Parser, Debug)]
#[command(version, about)]
struct Args {
    /// Where to write the assets (default: a directory under the system
    /// temporary directory, removed at the end).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Number of asset files.
    #[arg(long, default_value_t = 300)]
    assets: usize,
    /// Number of boids.
    #[arg(long, default_value_t = 20_000)]
    entities: usize,
    /// Frames per phase (without, then with streaming).
    #[arg(long, default_value_t = 300)]
    frames: usize,
    /// Target frames per second.
    #[arg(long, default_value_t = 60.0)]
    rate: f64,
    /// Most file reads in flight.
    #[arg(long, default_value_t = 2)]
    reads: usize,
    /// New requests per frame, as a game spreads its streaming over frames
    /// (about 0.7 MB per frame at the default sizes); 0 requests every
    /// asset at once and streams as fast as the machine can.
    #[arg(long, default_value_t = 4)]
    per_frame: usize,
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

fn main() {
    let args = Args::parse();
    if args.frames == 0 || args.assets == 0 || !(args.rate > 0.0 && args.rate.is_finite()) {
        eprintln!("asset_streaming: --frames, --assets and --rate must be above zero");
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
    let files = match asset_dir::write_asset_dir(&dir, args.assets) {
        Ok(files) => files,
        Err(e) => {
            eprintln!(
                "asset_streaming: cannot write assets to {}: {e}",
                dir.display()
            );
            std::process::exit(1);
        }
    };
    let total: u64 = files.iter().map(|f| f.bytes).sum();
    println!(
        "wrote {} assets ({:.1} MB decoded) to {} in {:.2} s",
        files.len(),
        total as f64 / 1e6,
        dir.display(),
        started.elapsed().as_secs_f64()
    );

    let pool = default_pool();
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
    let streamer = AssetStreamer::new(&dir, pool, &blocking, args.reads).expect("asset root");
    let world = world::new_world(args.entities);
    let mut graph = systems::build();
    let period = Duration::from_secs_f64(1.0 / args.rate);

    let mut run_phase = |streaming: bool| -> (Vec<Duration>, u64, u64, u64, Duration) {
        let bar = ProgressBar::new(args.frames as u64);
        bar.set_style(
            ProgressStyle::with_template("{prefix:>10} [{bar:40}] {pos}/{len} frames {msg}")
                .expect("valid template")
                .progress_chars("=> "),
        );
        bar.set_prefix(if streaming { "streaming" } else { "baseline" });
        let mut times = Vec::with_capacity(args.frames);
        let (mut loaded, mut failed, mut bytes) = (0u64, 0u64, 0u64);
        let mut events = Vec::new();
        let mut outstanding = 0usize;
        let mut next_file = 0usize;
        let phase_start = Instant::now();
        let mut next = Instant::now();
        for _ in 0..args.frames {
            if streaming {
                let batch = if args.per_frame == 0 {
                    files.len()
                } else {
                    args.per_frame
                };
                for _ in 0..batch {
                    if args.per_frame == 0 && outstanding > 0 {
                        break;
                    }
                    let i = next_file % files.len();
                    next_file += 1;
                    streamer.request(&files[i].name, (i % 3) as i32);
                    outstanding += 1;
                }
                events.clear();
                streamer.drain(&mut events);
                for event in &events {
                    outstanding -= 1;
                    match event {
                        Ok(asset) => {
                            loaded += 1;
                            bytes += asset.data.len() as u64;
                        }
                        Err(e) => {
                            failed += 1;
                            bar.println(format!("asset error: {e}"));
                        }
                    }
                }
                bar.set_message(format!("{loaded} assets, {:.0} MB", bytes as f64 / 1e6));
            }
            match graph.run(pool, &world) {
                Ok(stats) => times.push(stats.wall_time()),
                Err(e) => bar.println(format!("frame error: {e}")),
            }
            bar.inc(1);
            next += period;
            if let Some(wait) = next.checked_duration_since(Instant::now()) {
                std::thread::sleep(wait);
            } else {
                next = Instant::now();
            }
        }
        bar.finish();
        (times, loaded, failed, bytes, phase_start.elapsed())
    };

    let (mut base, ..) = run_phase(false);
    let (mut with, loaded, failed, bytes, elapsed) = run_phase(true);
    // Let in-flight requests end before the pools go away.
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut rest = Vec::new();
    while streamer.progress().finished() < streamer.progress().requested
        && Instant::now() < deadline
    {
        streamer.drain(&mut rest);
        std::thread::sleep(Duration::from_millis(5));
    }

    let (b50, b99) = (percentile(&mut base, 0.5), percentile(&mut base, 0.99));
    let (s50, s99) = (percentile(&mut with, 0.5), percentile(&mut with, 0.99));
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
    let progress = streamer.progress();
    println!(
        "streamed {loaded} assets ({:.1} MB decoded, {:.1} MB/s over the phase), {failed} failed; \
         blocking pool peak {} threads",
        bytes as f64 / 1e6,
        bytes as f64 / 1e6 / elapsed.as_secs_f64(),
        blocking.metrics().peak_threads,
    );
    println!(
        "streamer totals: requested {}, loaded {}, failed {}, read {:.1} MB",
        progress.requested,
        progress.loaded,
        progress.failed,
        progress.bytes_read as f64 / 1e6
    );
    if remove_after {
        let _ = std::fs::remove_dir_all(&dir);
    }
}

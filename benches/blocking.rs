//! Blocking-pool and streaming benchmarks, all in one run:
//!
//! 1. `blocking_512x2ms`: 512 tasks that each sleep 2 ms, submitted from the
//!    main thread and waited for. engine-tasks' blocking pool with the same
//!    512-thread cap as tokio's default, and with its own default cap (64);
//!    tokio's `spawn_blocking` (default `max_blocking_threads`, 512); and a
//!    plain thread per task. Pools are reused across iterations (idle
//!    threads are kept alive for 10 s by both pools).
//! 2. `stream`: loading 120 LZ4 asset files (mixed sizes, about 20 MB
//!    decoded) with the asset streamer (2 reads in flight, decoding on the
//!    background lane) against reading and decoding them one after another
//!    on the main thread. Both keep every decoded asset until the load is
//!    done. Reported as decoded bytes per second.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use engine_tasks::assets::{decode_asset, encode_asset, AssetStreamer};
use engine_tasks::{BlockingPool, Pool};
use engine_tasks_benches::threads;
use std::path::PathBuf;
use std::time::Duration;

const TASKS: usize = 512;
const SLEEP: Duration = Duration::from_millis(2);

fn blocking_512x2ms(c: &mut Criterion) {
    let mut group = c.benchmark_group("blocking_512x2ms");
    group.sample_size(20);
    group.throughput(Throughput::Elements(TASKS as u64));

    for (name, cap) in [("engine-tasks-cap512", 512), ("engine-tasks-cap64", 64)] {
        let pool = BlockingPool::builder().cap(cap).build().unwrap();
        group.bench_function(name, |b| {
            b.iter(|| {
                let tasks: Vec<_> = (0..TASKS)
                    .map(|_| pool.spawn(|| std::thread::sleep(SLEEP)).unwrap())
                    .collect();
                for t in tasks {
                    t.wait().unwrap();
                }
            })
        });
    }

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads())
        .build()
        .unwrap();
    group.bench_function("tokio-spawn_blocking", |b| {
        b.iter(|| {
            rt.block_on(async {
                let tasks: Vec<_> = (0..TASKS)
                    .map(|_| tokio::task::spawn_blocking(|| std::thread::sleep(SLEEP)))
                    .collect();
                for t in tasks {
                    t.await.unwrap();
                }
            })
        })
    });

    group.bench_function("thread-per-task", |b| {
        b.iter(|| {
            let threads: Vec<_> = (0..TASKS)
                .map(|_| std::thread::spawn(|| std::thread::sleep(SLEEP)))
                .collect();
            for t in threads {
                t.join().unwrap();
            }
        })
    });
    group.finish();
}

/// Writes 120 assets of 16 KiB to 512 KiB and returns their names.
fn asset_dir() -> (PathBuf, Vec<PathBuf>, u64) {
    let dir = std::env::temp_dir().join(format!("engine-tasks-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut total = 0;
    let names = (0..120usize)
        .map(|i| {
            let size = (16 * 1024) << (i % 6);
            let data: Vec<u8> = (0..size)
                .map(|j| ((j % 251) as u8).wrapping_add((j / 4096) as u8 ^ (i as u8)))
                .collect();
            total += data.len() as u64;
            let name = PathBuf::from(format!("a{i}.eta"));
            std::fs::write(dir.join(&name), encode_asset(&data)).unwrap();
            name
        })
        .collect();
    (dir, names, total)
}

fn stream(c: &mut Criterion) {
    let (dir, names, total) = asset_dir();
    let mut group = c.benchmark_group("stream");
    group.sample_size(20);
    group.throughput(Throughput::Bytes(total));

    let pool = Pool::builder().threads(threads() - 1).build().unwrap();
    let blocking = BlockingPool::new();
    let streamer = AssetStreamer::new(&dir, &pool, &blocking, 2).unwrap();
    group.bench_function("engine-tasks-streamer", |b| {
        b.iter(|| {
            for name in &names {
                streamer.request(name, 0);
            }
            let mut events = Vec::with_capacity(names.len());
            while events.len() < names.len() {
                streamer.drain(&mut events);
                // Poll like a frame loop would, without taking a core.
                std::thread::sleep(Duration::from_micros(50));
            }
            assert!(events.iter().all(Result::is_ok));
        })
    });

    // Like the streamer's caller (and a game), keep every decoded asset
    // until the load is done, so both pay for fresh memory alike.
    group.bench_function("sequential", |b| {
        b.iter(|| {
            let mut loaded = Vec::with_capacity(names.len());
            for name in &names {
                let file = std::fs::read(dir.join(name)).unwrap();
                loaded.push(decode_asset(&file).unwrap());
            }
            std::hint::black_box(loaded)
        })
    });
    group.finish();
    let _ = std::fs::remove_dir_all(&dir);
}

criterion_group!(benches, blocking_512x2ms, stream);
criterion_main!(benches);

//! A small frame loop on the default pool: particles integrated with
//! `parallel_for`, a frame-critical reduction joined by the main thread, and
//! background work that spans frames. Prints frame-time percentiles and the
//! pool's counters.
//!
//! Usage: `pool_demo [particles] [frames]` (defaults 50000 and 300).

use engine_tasks::{default_pool, Lane};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(Clone, Copy)]
struct Particle {
    pos: [f32; 2],
    vel: [f32; 2],
}

fn main() {
    let mut args = std::env::args().skip(1);
    let count: usize = args
        .next()
        .map_or(50_000, |a| a.parse().expect("particles: a number"));
    let frames: usize = args
        .next()
        .map_or(300, |a| a.parse().expect("frames: a number"));
    let pool = default_pool();
    println!(
        "pool_demo: {count} particles, {frames} frames, {} worker threads + main",
        pool.threads()
    );

    let mut particles: Vec<Particle> = (0..count)
        .map(|i| {
            let a = i as f32 * 0.618;
            Particle {
                pos: [a.cos() * 10.0, a.sin() * 10.0],
                vel: [a.sin(), -a.cos()],
            }
        })
        .collect();
    let background_done = Arc::new(AtomicU64::new(0));
    let mut background = None;
    let mut times = Vec::with_capacity(frames);
    let dt = 1.0 / 60.0;

    for frame in 0..frames {
        let start = Instant::now();
        // Physics: data-parallel over chunks borrowed from this stack frame.
        pool.scope(|s| {
            for chunk in particles.chunks_mut(1024) {
                s.spawn_in(Lane::FrameCritical, move |_| {
                    for p in chunk {
                        let r2 = p.pos[0] * p.pos[0] + p.pos[1] * p.pos[1] + 1.0;
                        p.vel[0] -= p.pos[0] / r2 * dt;
                        p.vel[1] -= p.pos[1] / r2 * dt;
                        p.pos[0] += p.vel[0] * dt;
                        p.pos[1] += p.vel[1] * dt;
                    }
                });
            }
        });
        // A reduction the frame needs, joined by the main thread.
        let energy = AtomicU64::new(0);
        pool.parallel_for(0..particles.len(), 4096, |i| {
            let p = &particles[i];
            let e = (p.vel[0] * p.vel[0] + p.vel[1] * p.vel[1]) * 1000.0;
            energy.fetch_add(e as u64, Ordering::Relaxed);
        });
        // Background work spanning frames: picked up when finished.
        let ready = background
            .as_ref()
            .is_none_or(|h: &engine_tasks::JoinHandle<u64>| h.is_finished());
        if ready {
            if let Some(handle) = background.take() {
                background_done
                    .fetch_add(handle.join().expect("background task"), Ordering::Relaxed);
            }
            let seed = frame as u64;
            background = Some(
                pool.spawn(Lane::Background, move || {
                    (0..200_000u64).fold(seed, |a, x| a.wrapping_mul(31).wrapping_add(x)) % 2 + 1
                })
                .expect("pool is running"),
            );
        }
        times.push(start.elapsed());
        if frame % 60 == 59 {
            println!(
                "frame {:>4}: {:>8.3} ms  energy {}",
                frame + 1,
                ms(times[frame]),
                energy.load(Ordering::Relaxed)
            );
        }
        std::thread::sleep(Duration::from_micros(16_667).saturating_sub(start.elapsed()));
    }
    if let Some(handle) = background {
        background_done.fetch_add(handle.join().expect("background task"), Ordering::Relaxed);
    }
    times.sort();
    let pct = |p: f64| ms(times[((times.len() - 1) as f64 * p) as usize]);
    println!(
        "frame time p50 {:.3} ms, p99 {:.3} ms, max {:.3} ms",
        pct(0.5),
        pct(0.99),
        pct(1.0)
    );
    let stats = pool.stats();
    let total = stats.total();
    println!(
        "tasks: spawned {} executed {} stolen {} lifo hits {}; parks {} unparks {}; background results {}",
        total.spawned, total.executed, total.stolen_tasks, total.lifo_hits, stats.parks(), stats.unparks(),
        background_done.load(Ordering::Relaxed)
    );
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

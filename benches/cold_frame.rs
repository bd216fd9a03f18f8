//! What a paced frame of empty nodes costs, by node count: the part of a
//! frame that does not grow with its nodes, and the part that does, when
//! the frame's thread comes back from a frame loop's sleep (60 Hz) and the
//! caches hold little of the graph. Beside it, the same number of boxed
//! empty closures called in a loop, paced alike.
//!
//! Each graph is 16-node chains side by side, on the default pool; frames
//! this light run on the calling thread alone. A line per node count gives
//! the medians over 120 frames, after 20 of warm-up.
//!
//! Two more columns tell a cold frame's code from its data. In "after a
//! twin", after the same sleep, a twin graph (same shape and context type,
//! so the same code) runs once on a pool of its own, then the graph is
//! timed. The twin shares no node, run record or pool slot with it, so the
//! graph's own data stays as cold as in the first column; what the twin
//! warms is the engine's code and what every frame of the process reads
//! (thread-locals, the allocator, the clock's page, the engine's statics).
//! In "after other work", the thread instead spins for 10 µs (about a
//! twin frame's time) on code of its own before the timed frame: the core
//! is as busy, with nothing of the engine warmed.
//!
//! Usage: `cargo run --release -p engine-tasks-benches --bin cold_frame`

use engine_tasks::{Lane, Pool, TaskGraph};
use engine_tasks_benches::{median, static_names, threads, Pacer, Pacing, Work};
use std::time::Instant;

const FRAMES: usize = 120;
const WARM_UP: usize = 20;

fn main() {
    let pool = Pool::builder().threads(threads() - 1).build().unwrap();
    println!("paced at 60 Hz, medians of {FRAMES} frames (µs)");
    let twin_pool = Pool::builder().threads(threads() - 1).build().unwrap();
    let other_work = Work::nanos(10_000);
    println!(
        "{:>6} {:>10} {:>16} {:>16} {:>16}",
        "nodes", "graph", "after a twin", "after other work", "boxed closures"
    );
    for n in [1usize, 16, 64, 256, 1024] {
        let names = static_names("n", n);
        let chains = || {
            let mut builder = TaskGraph::<()>::builder();
            for i in 0..n {
                let node = builder.node(names[i], Lane::FrameCritical, |_| {});
                if i % 16 != 0 {
                    node.after([names[i - 1]]);
                }
            }
            builder.build().unwrap()
        };
        let (mut graph, mut twin) = (chains(), chains());
        let mut closures: Vec<Box<dyn FnMut()>> = (0..n)
            .map(|_| Box::new(|| {}) as Box<dyn FnMut()>)
            .collect();
        let mut pacer = Pacer::new(Pacing::Hz(60.0));
        let (mut graph_times, mut warm_times, mut busy_times, mut loop_times) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for frame in 0..WARM_UP + FRAMES {
            pacer.wait();
            let start = Instant::now();
            graph.run(&pool, &()).unwrap();
            let graph_time = start.elapsed().as_secs_f64() * 1e6;
            pacer.wait();
            twin.run(&twin_pool, &()).unwrap();
            let start = Instant::now();
            graph.run(&pool, &()).unwrap();
            let warm_time = start.elapsed().as_secs_f64() * 1e6;
            pacer.wait();
            other_work.run();
            let start = Instant::now();
            graph.run(&pool, &()).unwrap();
            let busy_time = start.elapsed().as_secs_f64() * 1e6;
            pacer.wait();
            let start = Instant::now();
            closures.iter_mut().for_each(|f| std::hint::black_box(f)());
            let loop_time = start.elapsed().as_secs_f64() * 1e6;
            if frame >= WARM_UP {
                graph_times.push(graph_time);
                warm_times.push(warm_time);
                busy_times.push(busy_time);
                loop_times.push(loop_time);
            }
        }
        println!(
            "{n:>6} {:>10.1} {:>16.1} {:>16.1} {:>16.1}",
            median(graph_times),
            median(warm_times),
            median(busy_times),
            median(loop_times)
        );
    }
}

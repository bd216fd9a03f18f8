//! Frames paced like a game loop's: one frame, then a sleep until the next
//! tick, so that every pool thread parks between frames and each frame
//! begins with wake-ups. Alone in this test binary, so that no other test
//! competes for the CPUs.

use engine_tasks::{Lane, Pool, TaskGraph};
use std::sync::atomic::{AtomicI32, Ordering};
use std::time::{Duration, Instant};

mod common;
use common::spin_for;

const CHAINS: usize = 2;
const LINKS: usize = 4;
const FRAMES: usize = 60;

/// The CPU the calling thread runs on, or -1 where unknown.
fn current_cpu() -> i32 {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: `sched_getcpu` has no preconditions.
        unsafe { libc::sched_getcpu() }
    }
    #[cfg(not(target_os = "linux"))]
    {
        -1
    }
}

/// Two independent chains of 1 ms each (four nodes of 250 µs) on a pool of
/// one worker and the frame's thread, 60 frames at 60 Hz (and 60 more if
/// those fall short, see below). In at least three frames of four the
/// worker runs nodes, and runs them on another CPU than the frame's
/// thread. Before wake-ups were steered (placement.rs), on the
/// 2-core development VM the worker ran nodes in 33 to 35 of the 60 frames
/// and on a CPU of its own in 28 to 31 (the kernel put the woken thread on
/// its waker's CPU, where the two took turns); steered, 59 and 59.
#[test]
fn at_60_hz_the_worker_takes_part_on_its_own_cpu() {
    let pool = Pool::builder().threads(1).build().unwrap();
    let cpus: &'static [AtomicI32] = Box::leak(
        (0..CHAINS * LINKS)
            .map(|_| AtomicI32::new(-1))
            .collect::<Vec<_>>()
            .into_boxed_slice(),
    );
    let mut builder = TaskGraph::<()>::builder();
    for chain in 0..CHAINS {
        for link in 0..LINKS {
            let at = chain * LINKS + link;
            let node = builder.node(format!("c{chain}-{link}"), Lane::FrameCritical, move |_| {
                // Relaxed: read after the frame, which the frame's end orders.
                cpus[at].store(current_cpu(), Ordering::Relaxed);
                spin_for(Duration::from_micros(250));
            });
            if link > 0 {
                node.after([format!("c{chain}-{}", link - 1)]);
            }
        }
    }
    let mut graph = builder.build().unwrap();
    let tick = Duration::from_secs_f64(1.0 / 60.0);
    // One window of `FRAMES` paced frames: in how many the worker ran
    // nodes, in how many only on CPUs the frame's thread did not use, and
    // how each frame ran.
    let mut window = || {
        let mut next = Instant::now();
        let (mut with_worker, mut apart) = (0, 0);
        let mut sharing = Vec::new();
        for _ in 0..FRAMES {
            let stats = graph.run(&pool, &()).unwrap();
            sharing.push(stats.sharing());
            let (mut worker_cpus, mut frame_cpus) = (Vec::new(), Vec::new());
            for (i, node) in stats.nodes().enumerate() {
                // Relaxed: see the store.
                let cpu = cpus[i].load(Ordering::Relaxed);
                match node.thread {
                    Some(0) => worker_cpus.push(cpu),
                    _ => frame_cpus.push(cpu),
                }
            }
            if !worker_cpus.is_empty() {
                with_worker += 1;
                if worker_cpus
                    .iter()
                    .all(|c| *c >= 0 && !frame_cpus.contains(c))
                {
                    apart += 1;
                }
            }
            next += tick;
            std::thread::sleep(next.saturating_duration_since(Instant::now()));
        }
        (with_worker, apart, sharing)
    };
    // A second window if the first falls short: in some stretches the
    // development VM's host held a halted vCPU for milliseconds every few
    // frames, and the worker, though steered and forecast, took part in
    // only 42-44 of 60 frames (builds that took part in 59 before and
    // after). Two such windows in a row point at the engine.
    let most = FRAMES * 3 / 4;
    let placement_checked = cfg!(target_os = "linux")
        && std::thread::available_parallelism().map_or(1, |n| n.get()) >= 2;
    let first = window();
    let (with_worker, apart, sharing) =
        if first.0 >= most && (first.1 >= most || !placement_checked) {
            first
        } else {
            eprintln!(
                "first window: the worker ran nodes in {} frames, apart in {}; a second window",
                first.0, first.1
            );
            window()
        };
    assert!(
        with_worker >= most,
        "the worker ran nodes in {with_worker} of {FRAMES} frames ({sharing:?})"
    );
    if placement_checked {
        assert!(
            apart >= most,
            "the worker's nodes ran on another CPU than the frame's thread's in only \
             {apart} of {FRAMES} frames"
        );
    } else {
        eprintln!("CPU placement not checked: not Linux, or one CPU available");
    }
}

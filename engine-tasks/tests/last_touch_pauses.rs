//! Threads held just after what may be their last touch of a frame, a join
//! or a scope (`faults::Site::LastTouch`): after a thread released a node
//! or counted a sink that was not the last, pushed the last node it held,
//! counted a latch down, or set a latch and woke its owner, before the
//! call that did so returns. Another thread may end the frame, the join or
//! the scope meanwhile, and its owner free the graph and the stack it
//! borrowed. Nothing must be lost, and nothing touched once freed:
//! natively the counts below show the first, and under Miri (`tools/miri`)
//! any such touch, or a call still holding a reference to what was freed,
//! is reported.
//!
//! A file of its own: a fault plan applies to the whole process.

use engine_tasks::faults::{self, FaultPlan, Site};
use engine_tasks::{FrameSharing, Lane, Planning, Pool, TaskGraph, TaskGraphBuilder};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

/// A chance in a million per last touch: a quarter of them pause.
const PAUSE_CHANCE: u32 = 250_000;

/// Ways of running a frame, by share threshold, planning, whether the
/// graph has a node pinned to the frame's thread, and how many frames each
/// graph runs before it is dropped: alone (never shared, so no other
/// thread touches the frame), handed over then queued, and planned once
/// learnt over the first frames (a graph with a pinned node is never
/// planned). Each graph is freed right after its last frame, which opens
/// the windows the test is after: the fewer frames a graph runs, the more
/// such frames the test has.
const KINDS: [(Duration, Planning, Pinned, u64); 3] = [
    (Duration::MAX, Planning::Allowed, Pinned::Present, 2),
    (Duration::ZERO, Planning::Off, Pinned::Present, 2),
    (Duration::ZERO, Planning::Allowed, Pinned::None, 6),
];

/// Whether a graph has its pinned `present` node.
#[derive(Copy, Clone, PartialEq)]
enum Pinned {
    Present,
    None,
}

/// The builder of a graph of nine or ten nodes, each adding the sum of the
/// frame's data to `total` and counting its run in `ran`: `a` releases
/// `b`, `c` and `d`, which `e` waits for; `f0` to `f3` are more sinks, for
/// either thread to count before the last; with `pinned`, `present`,
/// pinned to the frame's thread, runs after `e`.
fn diamond(
    ran: &Arc<AtomicUsize>,
    total: &Arc<AtomicU64>,
    pinned: Pinned,
) -> TaskGraphBuilder<[u64; 8]> {
    let mut b = TaskGraph::<[u64; 8]>::builder();
    let edges: [(&str, &[&str]); 9] = [
        ("a", &[]),
        ("b", &["a"]),
        ("c", &["a"]),
        ("d", &["a"]),
        ("e", &["b", "c", "d"]),
        ("f0", &[]),
        ("f1", &[]),
        ("f2", &[]),
        ("f3", &[]),
    ];
    for (name, after) in edges {
        let (ran, total) = (ran.clone(), total.clone());
        b.node(name, Lane::FrameCritical, move |cx| {
            total.fetch_add(cx.data().iter().sum::<u64>(), Ordering::Relaxed);
            ran.fetch_add(1, Ordering::Relaxed);
        })
        .after(after.iter().copied());
    }
    if pinned == Pinned::None {
        return b;
    }
    let (ran, total) = (ran.clone(), total.clone());
    let caller = thread::current().id();
    b.main_thread_node("present", move |cx| {
        assert_eq!(thread::current().id(), caller);
        total.fetch_add(cx.data().iter().sum::<u64>(), Ordering::Relaxed);
        ran.fetch_add(1, Ordering::Relaxed);
    })
    .after(["e"]);
    b
}

/// Sums `v` by halving it with `join` down to pieces of 4.
fn sum_by_joins(v: &[u64]) -> u64 {
    if v.len() <= 4 {
        return v.iter().sum();
    }
    let (left, right) = v.split_at(v.len() / 2);
    let (l, r) = engine_tasks::join(|| sum_by_joins(left), || sum_by_joins(right));
    l + r
}

#[test]
fn paused_last_touches_lose_no_node_and_touch_nothing_freed() {
    let pool = Pool::builder().threads(2).build().unwrap();
    let rounds = if cfg!(miri) { 6 } else { 300 };
    faults::set_plan(FaultPlan {
        last_touch: PAUSE_CHANCE,
        ..FaultPlan::default()
    });

    // Frames: each frame's data lives on this loop's stack, and each graph
    // is dropped right after its last frame.
    let ran = Arc::new(AtomicUsize::new(0));
    let total = Arc::new(AtomicU64::new(0));
    let mut seen = Vec::new();
    let (mut expected_runs, mut expected_total) = (0, 0);
    for round in 0..rounds {
        for (threshold, planning, pinned, frames) in KINDS {
            let nodes = if pinned == Pinned::Present { 10 } else { 9 };
            let mut builder = diamond(&ran, &total, pinned);
            builder.share_above(threshold, threshold).planning(planning);
            let mut graph = builder.build().unwrap();
            for frame in 0..frames {
                let data = [round * 8 + frame; 8];
                let stats = graph.run(&pool, &data).unwrap();
                seen.push(stats.sharing());
                expected_runs += nodes;
                expected_total += nodes as u64 * data.iter().sum::<u64>();
            }
            drop(graph);
        }
    }
    assert_eq!(ran.load(Ordering::Relaxed), expected_runs);
    assert_eq!(total.load(Ordering::Relaxed), expected_total);
    for kind in [
        FrameSharing::Alone,
        FrameSharing::HandedOver,
        FrameSharing::Shared,
        FrameSharing::Planned,
    ] {
        let count = seen.iter().filter(|&&s| s == kind).count();
        assert!(count > 0, "no {kind:?} frame among {} frames", seen.len());
    }

    // Spawned tasks, each joined by its handle: their latches are held by
    // an `Arc`, so nothing is freed under a paused thread; this checks
    // that a pause after the wake-up loses no result.
    for round in 0..rounds {
        let handles: Vec<_> = (0..4)
            .map(|i| pool.spawn(Lane::Normal, move || i * round).unwrap())
            .collect();
        let sum: u64 = handles.into_iter().map(|h| h.join().unwrap()).sum();
        assert_eq!(sum, 6 * round);
    }

    // Joins and scopes inside a pool task, on the task's stack: a thief's
    // count-down of a join's latch, or a scope task's, may be its last
    // touch before the owner returns.
    let joined = pool
        .spawn(Lane::Normal, move || {
            let mut sums = Vec::new();
            for round in 0..rounds {
                let v: Vec<u64> = (0..64).map(|i| i + round).collect();
                let mut parts = [0u64; 4];
                engine_tasks::scope(|s| {
                    for (part, chunk) in parts.iter_mut().zip(v.chunks(16)) {
                        s.spawn(move |_| *part = chunk.iter().sum());
                    }
                });
                sums.push((sum_by_joins(&v), parts.iter().sum::<u64>()));
            }
            sums
        })
        .unwrap()
        .join()
        .unwrap();
    faults::set_plan(FaultPlan::default());
    for (round, (by_joins, by_scope)) in (0..).zip(joined) {
        let expected = (0..64).map(|i| i + round).sum::<u64>();
        assert_eq!((by_joins, by_scope), (expected, expected));
    }
    assert!(faults::fired(Site::LastTouch) > 0, "no last touch paused");
}

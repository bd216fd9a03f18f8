//! Behaviour of task graphs: ordering, exactly-once, pinning, panics,
//! validation, frame data, fan-out inside nodes, work across frames.

use engine_tasks::graph::NodeOutcome;
use engine_tasks::{
    FrameError, FrameSharing, FrameStats, GraphError, Lane, NodeClock, Planning, Pool, ReadyOrder,
    TaskGraph, TaskGraphBuilder,
};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::{self, ThreadId};
use std::time::{Duration, Instant};

mod common;
use common::spin_for;

/// A small deterministic generator (xorshift64*), so failures replay.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// Per frame: the order in which nodes finished, and who ran them.
struct Log {
    clock: AtomicU64,
    finished_at: Vec<AtomicU64>,
    runs: Vec<AtomicU64>,
    pinned_off_thread: AtomicUsize,
    /// Nodes run by a thread other than the frame's.
    off_thread: AtomicUsize,
    frame_thread: Mutex<Option<ThreadId>>,
    /// Busy work per node, in nanoseconds.
    spin_nanos: AtomicU64,
}

impl Log {
    /// A log for `n` nodes whose frames run on the calling thread.
    fn for_this_thread(n: usize) -> Log {
        Log {
            clock: AtomicU64::new(0),
            finished_at: (0..n).map(|_| AtomicU64::new(0)).collect(),
            runs: (0..n).map(|_| AtomicU64::new(0)).collect(),
            pinned_off_thread: AtomicUsize::new(0),
            off_thread: AtomicUsize::new(0),
            frame_thread: Mutex::new(Some(thread::current().id())),
            spin_nanos: AtomicU64::new(0),
        }
    }
}

/// Frames share their nodes from 100 µs of work in nodes of 5 µs on
/// average: far above the logging bodies, also in debug builds.
const SHARE_ABOVE: (Duration, Duration) = (Duration::from_micros(100), Duration::from_micros(5));

/// Shares every frame (the first from its third node on).
const SHARE_ALWAYS: (Duration, Duration) = (Duration::ZERO, Duration::ZERO);

/// The sharing thresholds and planning that give every kind of frame: a
/// threshold out of reach runs every frame alone; zero ones hand the first
/// frame over after its second node and share the rest, by queues or by
/// plan.
const EVERY_KIND_OF_FRAME: [(Duration, Planning); 3] = [
    (Duration::MAX, Planning::Allowed),
    (Duration::ZERO, Planning::Off),
    (Duration::ZERO, Planning::Allowed),
];

/// Panics unless `seen` holds every kind of frame.
fn assert_every_kind_of_frame_in(seen: &[FrameSharing]) {
    for sharing in [
        FrameSharing::Alone,
        FrameSharing::HandedOver,
        FrameSharing::Shared,
        FrameSharing::Planned,
    ] {
        assert!(seen.contains(&sharing), "{sharing:?} among {seen:?}");
    }
}

/// The body of node `i`: spins `spin_nanos`, notes the thread that ran it
/// (a `pinned` node must run on the frame's), counts the run and records
/// when it finished.
fn logging_node(
    i: usize,
    pinned: bool,
) -> impl FnMut(&engine_tasks::NodeContext<'_, Log>) + Send + 'static {
    move |cx| {
        let log = cx.data();
        spin_for(Duration::from_nanos(log.spin_nanos.load(Ordering::Relaxed)));
        if Some(thread::current().id()) != *log.frame_thread.lock().unwrap() {
            log.off_thread.fetch_add(1, Ordering::Relaxed);
            if pinned {
                log.pinned_off_thread.fetch_add(1, Ordering::Relaxed);
            }
        }
        log.runs[i].fetch_add(1, Ordering::Relaxed);
        let t = log.clock.fetch_add(1, Ordering::SeqCst);
        log.finished_at[i].store(t, Ordering::SeqCst);
    }
}

/// A random DAG of `nodes` nodes; unless `plannable`, some nodes are
/// pinned and lanes are mixed, which planned frames do not take.
fn random_graph(
    rng: &mut Rng,
    nodes: usize,
    plannable: bool,
    share_above: (Duration, Duration),
) -> (TaskGraph<Log>, Vec<Vec<usize>>) {
    let mut builder = TaskGraph::<Log>::builder();
    builder.share_above(share_above.0, share_above.1);
    let mut deps = Vec::with_capacity(nodes);
    // Shuffled declaration order: node `i` may only depend on nodes with a
    // smaller rank, but is declared at a random position.
    let mut declare: Vec<usize> = (0..nodes).collect();
    for i in (1..nodes).rev() {
        declare.swap(i, rng.below(i as u64 + 1) as usize);
    }
    for i in 0..nodes {
        let count = if i == 0 {
            0
        } else {
            rng.below(4.min(i as u64) + 1)
        };
        let mut d: Vec<usize> = (0..count).map(|_| rng.below(i as u64) as usize).collect();
        d.sort_unstable();
        d.dedup();
        deps.push(d);
    }
    for &i in &declare {
        let pinned = !plannable && rng.below(8) == 0;
        let lane = if plannable {
            Lane::Normal
        } else {
            Lane::ALL[rng.below(2) as usize]
        };
        let body = logging_node(i, pinned);
        let node = if pinned {
            builder.main_thread_node(format!("n{i}"), body)
        } else {
            builder.node(format!("n{i}"), lane, body)
        };
        node.after(deps[i].iter().map(|d| format!("n{d}")));
    }
    (builder.build().unwrap(), deps)
}

/// Five frames per graph: three light ones, which run alone on the frame's
/// thread, then two with 20 µs of work per node. The first of those hands
/// the rest of the frame over to the pool once it passes `SHARE_ABOVE` and
/// the next node confirms it (in graphs with enough nodes left for the
/// rest to pass it too); the second, in graphs of 18 nodes or more,
/// is shared from the start (its smoothed node times pass the rule), or,
/// in every other graph (one lane, nothing pinned), planned.
#[test]
fn random_dags_respect_dependencies_and_run_each_node_once() {
    let pool = Pool::builder().threads(3).build().unwrap();
    let mut rng = Rng(0x1234_5678_9abc_def1);
    let mut sharing_seen = [0usize; 4];
    for graph_no in 0..2_000 {
        let n = 1 + rng.below(40) as usize;
        let (mut graph, deps) = random_graph(&mut rng, n, graph_no % 2 == 0, SHARE_ABOVE);
        let log = Log::for_this_thread(n);
        let frames = 5;
        for frame in 0..frames {
            log.clock.store(0, Ordering::SeqCst);
            let spin = if frame >= 3 { 20_000 } else { 0 };
            log.spin_nanos.store(spin, Ordering::Relaxed);
            let off_thread_before = log.off_thread.load(Ordering::SeqCst);
            let sharing = graph.run(&pool, &log).unwrap().sharing();
            // Taken before the path is asked for: a planned frame's is
            // walked then, by each copy alike.
            let copy = graph.last_frame().clone();
            let stats = graph.last_frame();
            // The critical path runs from a root along dependency edges,
            // each node released by the one before it, to a sink.
            let rank = |index: usize| -> usize { graph.node_name(index)[1..].parse().unwrap() };
            let path: Vec<usize> = stats.critical_path().iter().map(|&i| rank(i)).collect();
            let context = format!("graph {graph_no}, frame {frame} ({sharing:?}): {path:?}");
            assert!(deps[path[0]].is_empty(), "{context} starts at a root");
            for pair in path.windows(2) {
                assert!(deps[pair[1]].contains(&pair[0]), "{context}");
            }
            let last = *path.last().unwrap();
            assert!(
                deps.iter().all(|d| !d.contains(&last)),
                "{context} ends in a sink"
            );
            if sharing == FrameSharing::Alone {
                // One thread ran the frame: each node was released by its
                // dependency that finished last, and the path ends at the
                // sink that finished last.
                let finished = |i: usize| log.finished_at[i].load(Ordering::SeqCst);
                for pair in path.windows(2) {
                    let last_dep = deps[pair[1]].iter().copied().max_by_key(|&d| finished(d));
                    assert_eq!(last_dep, Some(pair[0]), "{context}");
                }
                let last_sink = (0..n)
                    .filter(|&i| deps.iter().all(|d| !d.contains(&i)))
                    .max_by_key(|&i| finished(i));
                assert_eq!(last_sink, Some(last), "{context}");
            }
            assert_eq!(copy.critical_path(), stats.critical_path(), "{context}");
            if sharing == FrameSharing::Planned {
                // Each node on the path follows its dependency that ended
                // last by the run records, and the path ends at the sink
                // that ended last (within the conversion's rounding).
                let index_of = |rank: usize| graph.node_index(&format!("n{rank}")).unwrap();
                let end = |rank: usize| {
                    let node = stats.node(index_of(rank));
                    node.start + node.duration
                };
                let slack = Duration::from_nanos(2);
                for pair in path.windows(2) {
                    let latest = deps[pair[1]].iter().map(|&d| end(d)).max().unwrap();
                    assert!(end(pair[0]) + slack >= latest, "{context}");
                }
                let latest_sink = (0..n)
                    .filter(|&i| deps.iter().all(|d| !d.contains(&i)))
                    .map(end)
                    .max()
                    .unwrap();
                assert!(end(last) + slack >= latest_sink, "{context}");
            }
            sharing_seen[match sharing {
                FrameSharing::Alone => 0,
                FrameSharing::HandedOver => 1,
                FrameSharing::Shared => 2,
                FrameSharing::Planned => 3,
            }] += 1;
            if sharing == FrameSharing::Alone {
                assert_eq!(log.off_thread.load(Ordering::SeqCst), off_thread_before);
            }
            for (i, d) in deps.iter().enumerate() {
                let at = log.finished_at[i].load(Ordering::SeqCst);
                for &d in d {
                    let dep_at = log.finished_at[d].load(Ordering::SeqCst);
                    assert!(
                        dep_at < at,
                        "graph {graph_no}: n{d} must finish before n{i}"
                    );
                }
            }
        }
        for (i, runs) in log.runs.iter().enumerate() {
            assert_eq!(
                runs.load(Ordering::SeqCst),
                frames,
                "graph {graph_no}: node n{i}"
            );
        }
        assert_eq!(log.pinned_off_thread.load(Ordering::SeqCst), 0);
        assert!(graph
            .last_frame()
            .nodes()
            .all(|t| t.outcome == NodeOutcome::Ran));
    }
    let [alone, handed_over, shared, planned] = sharing_seen;
    assert!(
        alone > 0 && handed_over > 0 && shared > 0 && planned > 0,
        "frames alone {alone}, handed over {handed_over}, shared {shared}, planned {planned}"
    );
}

/// Light frames run alone on the frame's thread; a frame that turns heavy
/// is handed over to the pool on the way, the heavy frames after it are
/// shared, and once frames are light again they run alone again. Every
/// frame runs every node once, after its dependencies, and the pinned node
/// on the frame's thread.
#[test]
fn light_frames_run_alone_and_a_heavy_one_is_handed_over() {
    let pool = Pool::builder().threads(2).build().unwrap();
    let n = 64;
    // Layers of 8; a pinned node in the last layer.
    let mut builder = TaskGraph::<Log>::builder();
    // Far above the light bodies, also in debug builds; far below 50 µs
    // nodes.
    builder.share_above(Duration::from_micros(500), Duration::from_micros(20));
    let mut deps = Vec::new();
    for i in 0..n {
        let d: Vec<usize> = if i < 8 {
            Vec::new()
        } else {
            vec![i - 8, (i / 8 - 1) * 8 + (i + 3) % 8]
        };
        let body = logging_node(i, i == n - 1);
        let node = if i == n - 1 {
            builder.main_thread_node(format!("n{i}"), body)
        } else {
            builder.node(format!("n{i}"), Lane::FrameCritical, body)
        };
        node.after(d.iter().map(|d| format!("n{d}")));
        deps.push(d);
    }
    let mut graph = builder.build().unwrap();
    let log = Log::for_this_thread(n);
    let mut frames = 0;
    let mut run = |spin_nanos: u64| {
        log.clock.store(0, Ordering::SeqCst);
        log.spin_nanos.store(spin_nanos, Ordering::Relaxed);
        let off_thread_before = log.off_thread.load(Ordering::SeqCst);
        let sharing = graph.run(&pool, &log).unwrap().sharing();
        frames += 1;
        for (i, d) in deps.iter().enumerate() {
            let at = log.finished_at[i].load(Ordering::SeqCst);
            assert!(d
                .iter()
                .all(|&d| log.finished_at[d].load(Ordering::SeqCst) < at));
            assert_eq!(log.runs[i].load(Ordering::SeqCst), frames, "n{i}");
        }
        assert_eq!(log.pinned_off_thread.load(Ordering::SeqCst), 0);
        let off_thread = log.off_thread.load(Ordering::SeqCst) - off_thread_before;
        if sharing == FrameSharing::Alone {
            assert_eq!(off_thread, 0, "a frame run alone used another thread");
        }
        sharing
    };
    // Light frames: once the smoothed node times (cold in the first frames,
    // or after a preemption) fall below the rule, frames run alone.
    let until_alone = |run: &mut dyn FnMut(u64) -> FrameSharing| {
        let mut frames = 0;
        while run(0) != FrameSharing::Alone {
            frames += 1;
            assert!(frames < 1000, "light frames kept sharing");
        }
    };
    // 50 µs per node: 1.6 ms after 32 nodes. A heavy frame that starts
    // alone hands over; one that starts shared (a light frame before it
    // was preempted, so it looked heavy) stays shared; none runs alone.
    let mut handed_over = false;
    for _ in 0..20 {
        until_alone(&mut run);
        let sharing = run(50_000);
        assert_ne!(sharing, FrameSharing::Alone);
        handed_over = sharing == FrameSharing::HandedOver;
        if handed_over {
            break;
        }
    }
    assert!(handed_over, "no heavy frame started alone");
    // As the smoothed node times rise, heavy frames are shared from the
    // start, and stay so.
    let mut heavy = 0;
    while run(50_000) != FrameSharing::Shared {
        heavy += 1;
        assert!(heavy < 20, "heavy frames kept starting alone");
    }
    for _ in 0..3 {
        assert_eq!(run(50_000), FrameSharing::Shared);
    }
    // Light again; then, after frames run alone that counted nothing (so
    // the countdowns' epoch lags the frame number), heavy ones again.
    for _ in 0..10 {
        until_alone(&mut run);
        for _ in 0..5 {
            run(0);
        }
        assert_ne!(run(50_000), FrameSharing::Alone);
    }
    until_alone(&mut run);
}

#[test]
fn validation_names_the_problem() {
    let mut b = TaskGraph::<()>::builder();
    b.node("a", Lane::Normal, |_| {});
    b.node("a", Lane::Normal, |_| {});
    assert_eq!(
        b.build().unwrap_err(),
        GraphError::DuplicateNode("a".into())
    );

    let mut b = TaskGraph::<()>::builder();
    b.node("a", Lane::Normal, |_| {}).after(["ghost"]);
    let err = b.build().unwrap_err();
    assert_eq!(
        err,
        GraphError::UnknownDependency {
            node: "a".into(),
            dependency: "ghost".into()
        }
    );
    assert!(err.to_string().contains("ghost"));

    let mut b = TaskGraph::<()>::builder();
    b.node("root", Lane::Normal, |_| {});
    b.node("a", Lane::Normal, |_| {}).after(["root", "c"]);
    b.node("b", Lane::Normal, |_| {}).after(["a"]);
    b.node("c", Lane::Normal, |_| {}).after(["b"]);
    let GraphError::Cycle(mut cycle) = b.build().unwrap_err() else {
        panic!("expected a cycle")
    };
    cycle.sort();
    assert_eq!(cycle, ["a", "b", "c"]);

    let mut b = TaskGraph::<()>::builder();
    b.node("self", Lane::Normal, |_| {}).after(["self"]);
    let err = b.build().unwrap_err();
    assert_eq!(err, GraphError::Cycle(vec!["self".into()]));
    assert_eq!(err.to_string(), r#"dependency cycle: "self" -> "self""#);
    let around = GraphError::Cycle(vec!["a".into(), "b".into()]);
    assert_eq!(around.to_string(), r#"dependency cycle: "a" -> "b" -> "a""#);
    assert_eq!(
        GraphError::Cycle(Vec::new()).to_string(),
        "dependency cycle: "
    );
}

/// A long chain builds (names interned by hash, not by a search per node)
/// and runs every node once, in order.
#[test]
fn a_graph_of_many_nodes_builds_and_runs() {
    const NODES: usize = 50_000;
    let mut b = TaskGraph::<AtomicUsize>::builder();
    for i in 0..NODES {
        let node = b.node(format!("n{i}"), Lane::Normal, move |cx| {
            let ran = cx.data().fetch_add(1, Ordering::Relaxed);
            assert_eq!(ran, i, "node n{i} ran out of order");
        });
        if i > 0 {
            node.after([format!("n{}", i - 1)]);
        }
    }
    let mut graph = b.build().unwrap();
    let pool = Pool::builder().threads(1).build().unwrap();
    let ran = AtomicUsize::new(0);
    graph.run(&pool, &ran).unwrap();
    assert_eq!(ran.load(Ordering::Relaxed), NODES);
}

#[test]
fn empty_graph_runs() {
    let pool = Pool::builder().threads(1).build().unwrap();
    let mut graph = TaskGraph::<()>::builder().build().unwrap();
    assert!(graph.is_empty());
    let stats = graph.run(&pool, &()).unwrap();
    assert!(stats.nodes().len() == 0);
    assert!(stats.critical_path().is_empty());
}

/// Graphs dropped as soon as their last frame returns, while the pool's
/// threads may still be on their way out of the node tasks that ended it:
/// a sink just counted, a pinned node just pushed to the frame's thread.
/// Every node runs once, the pinned one on the frame's thread, and the
/// frames share as planned. Under Miri (`tools/miri`) a task that still
/// held a reference to the graph when it is freed would be reported; but
/// Miri's scheduler seldom stops a thread in that window (the code before
/// the fix passed eight seeds), so the rule is argued at `Shared::execute`
/// rather than shown here.
#[test]
fn graphs_dropped_right_after_their_frame_outlive_their_tasks() {
    let pool = Pool::builder().threads(2).build().unwrap();
    let rounds = if cfg!(miri) { 12 } else { 2_000 };
    let caller = thread::current().id();
    let ran = Arc::new(AtomicUsize::new(0));
    for _ in 0..rounds {
        let mut b = TaskGraph::<()>::builder();
        // Zero thresholds share every frame: its nodes run as pool tasks.
        b.share_above(Duration::ZERO, Duration::ZERO);
        for i in 0..4 {
            let ran = ran.clone();
            b.node(format!("w{i}"), Lane::FrameCritical, move |_| {
                ran.fetch_add(1, Ordering::Relaxed);
            });
        }
        let ran_pinned = ran.clone();
        b.main_thread_node("present", move |_| {
            assert_eq!(thread::current().id(), caller);
            ran_pinned.fetch_add(1, Ordering::Relaxed);
        })
        .after(["w2", "w3"]);
        let mut graph = b.build().unwrap();
        // The first frame hands over after its second node; the second is
        // queued from the start (pinned nodes are never planned).
        let first = graph.run(&pool, &()).unwrap().sharing();
        assert_eq!(first, FrameSharing::HandedOver);
        let second = graph.run(&pool, &()).unwrap().sharing();
        assert_eq!(second, FrameSharing::Shared);
        drop(graph);
    }
    assert_eq!(ran.load(Ordering::Relaxed), rounds * 2 * 5);
}

/// The nodes of the panic tests and their dependencies: `collide` and
/// `render` depend on `physics`, which panics; `audio` and `ui` do not.
const GAME: [(&str, &[&str]); 6] = [
    ("input", &[]),
    ("physics", &["input"]),
    ("collide", &["physics"]),
    ("render", &["collide", "audio"]),
    ("audio", &["input"]),
    ("ui", &[]),
];

/// In every kind of frame (run alone, handed over, shared, planned): a panicking
/// node makes the frame return an error naming it, its dependents are
/// skipped and reported, independent nodes still run, and the next frame
/// is normal.
#[test]
fn a_panic_skips_dependents_reports_them_and_the_next_frame_is_normal() {
    let pool = Pool::builder().threads(2).build().unwrap();
    let mut sharing_seen = Vec::new();
    // A threshold out of reach, not the default one: a panic can take long
    // enough to pass the default.
    for (threshold, planning) in EVERY_KIND_OF_FRAME {
        let ran = Arc::new(Mutex::new(Vec::<&'static str>::new()));
        let mut b = TaskGraph::<AtomicBool>::builder();
        b.share_above(threshold, threshold).planning(planning);
        for (name, deps) in GAME {
            let ran = ran.clone();
            b.node(name, Lane::FrameCritical, move |cx| {
                if name == "physics" && cx.data().load(Ordering::SeqCst) {
                    panic!("physics exploded in frame {}", cx.frame());
                }
                ran.lock().unwrap().push(name);
            })
            .after(deps.iter().copied());
        }
        let mut graph = b.build().unwrap();
        for frame in 0..4 {
            let explode = AtomicBool::new(frame % 2 == 0);
            let result = graph.run(&pool, &explode).map(|_| ());
            sharing_seen.push(graph.last_frame().sharing());
            let mut ran_now = std::mem::take(&mut *ran.lock().unwrap());
            ran_now.sort();
            if frame % 2 == 1 {
                result.unwrap();
                assert_eq!(ran_now.len(), 6);
                continue;
            }
            let err: FrameError = result.unwrap_err();
            assert_eq!(err.frame, frame);
            let names: Vec<_> = err
                .panicked
                .iter()
                .map(|p| (&*p.node, &*p.message))
                .collect();
            let message = format!("physics exploded in frame {frame}");
            assert_eq!(names, [("physics", &*message)]);
            assert_eq!(
                err.panicked[0].payload.downcast_ref::<String>(),
                Some(&message),
                "the node's own payload"
            );
            assert_eq!(
                err.skipped,
                vec!["collide".to_string(), "render".to_string()]
            );
            assert!(err.to_string().contains("physics exploded"));
            let resumed =
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| err.resume_unwind()))
                    .unwrap_err();
            assert_eq!(resumed.downcast_ref::<String>(), Some(&message));
            assert_eq!(ran_now, ["audio", "input", "ui"]);
            let outcomes: Vec<_> = graph.last_frame().nodes().map(|n| n.outcome).collect();
            use NodeOutcome::*;
            assert_eq!(outcomes, [Ran, Panicked, Skipped, Skipped, Ran, Ran]);
        }
    }
    assert_every_kind_of_frame_in(&sharing_seen);
}

/// A node that panics after the frame was handed over, in the shared part:
/// the frame reports it, its dependent is skipped, and the nodes before
/// the hand-over and beside the panic ran.
#[test]
fn a_panic_after_a_hand_over_skips_its_dependents() {
    let pool = Pool::builder().threads(1).build().unwrap();
    let mut b = TaskGraph::<()>::builder();
    // Zero thresholds: the first frame starts alone and hands over after
    // `a` and `b` (the second confirms it); `c` runs in the shared part.
    b.share_above(Duration::ZERO, Duration::ZERO);
    let ran = Arc::new(Mutex::new(Vec::<&'static str>::new()));
    for (name, deps) in [("a", &[][..]), ("b", &["a"]), ("c", &["b"]), ("d", &["c"])] {
        let ran = ran.clone();
        b.node(name, Lane::FrameCritical, move |cx| {
            assert!(!(name == "c" && cx.frame() == 0), "c exploded");
            ran.lock().unwrap().push(name);
        })
        .after(deps.iter().copied());
    }
    let mut graph = b.build().unwrap();
    let err = graph.run(&pool, &()).unwrap_err();
    assert_eq!(graph.last_frame().sharing(), FrameSharing::HandedOver);
    assert_eq!(err.panicked.len(), 1);
    assert_eq!(err.panicked[0].node, "c");
    assert_eq!(err.skipped, ["d"]);
    assert_eq!(*ran.lock().unwrap(), ["a", "b"]);
    let outcomes: Vec<NodeOutcome> = graph.last_frame().nodes().map(|n| n.outcome).collect();
    assert_eq!(
        outcomes,
        [
            NodeOutcome::Ran,
            NodeOutcome::Ran,
            NodeOutcome::Panicked,
            NodeOutcome::Skipped
        ]
    );
    graph.run(&pool, &()).unwrap();
    assert_eq!(ran.lock().unwrap().len(), 6);
}

/// A node that panics in the part of a frame run alone, before the frame
/// is handed over: the poison it leaves crosses the hand-over, so the
/// dependents that the shared part runs are skipped, and the next frame
/// runs normally.
#[test]
fn a_panic_before_a_hand_over_skips_dependents_in_the_shared_part() {
    let pool = Pool::builder().threads(2).build().unwrap();
    let mut b = TaskGraph::<AtomicBool>::builder();
    // The rule says hand over once 500 µs have passed, after `input` (the
    // first node, the root of the longest chain); `physics`, the next,
    // confirms it by running slow too, so the frame hands over right
    // after it.
    b.share_above(Duration::from_micros(500), Duration::ZERO);
    let ran = Arc::new(Mutex::new(Vec::<&'static str>::new()));
    for (name, deps) in GAME {
        let ran = ran.clone();
        b.node(name, Lane::FrameCritical, move |cx| {
            if name == "input" {
                spin_for(Duration::from_micros(600));
            }
            if name == "physics" {
                spin_for(Duration::from_millis(1));
                assert!(!cx.data().load(Ordering::SeqCst), "physics exploded");
            }
            ran.lock().unwrap().push(name);
        })
        .after(deps.iter().copied());
    }
    let mut graph = b.build().unwrap();
    let err = graph.run(&pool, &AtomicBool::new(true)).unwrap_err();
    assert_eq!(graph.last_frame().sharing(), FrameSharing::HandedOver);
    assert_eq!(err.panicked.len(), 1);
    assert_eq!(err.panicked[0].node, "physics");
    assert_eq!(err.skipped, ["collide", "render"]);
    let mut ran_now = std::mem::take(&mut *ran.lock().unwrap());
    ran_now.sort();
    assert_eq!(ran_now, ["audio", "input", "ui"]);
    graph.run(&pool, &AtomicBool::new(false)).unwrap();
    assert_eq!(ran.lock().unwrap().len(), 6);
}

/// Frame data is borrowed, not `'static`: here a struct built on the stack
/// each frame, holding a reference to a vector that outlives the graph.
#[test]
fn nodes_borrow_frame_data_from_the_stack_and_fan_out() {
    struct Frame<'a> {
        positions: &'a Mutex<Vec<f32>>,
        step: f32,
        sum: AtomicU64,
    }
    let positions = Mutex::new(vec![0.0f32; 10_000]);
    let pool = Pool::builder().threads(2).build().unwrap();
    let mut b = TaskGraph::<Frame<'_>>::builder();
    b.node("integrate", Lane::FrameCritical, |cx| {
        let step = cx.data().step;
        let mut positions = cx.data().positions.lock().unwrap();
        let chunks: Vec<Mutex<&mut [f32]>> = positions.chunks_mut(1000).map(Mutex::new).collect();
        cx.pool().parallel_for(0..chunks.len(), 1, |c| {
            for p in chunks[c].lock().unwrap().iter_mut() {
                *p += step;
            }
        });
    });
    b.node("measure", Lane::FrameCritical, |cx| {
        let positions = cx.data().positions.lock().unwrap();
        let sum: f32 = positions.iter().sum();
        cx.data().sum.store(sum as u64, Ordering::SeqCst);
    })
    .after(["integrate"]);
    let mut graph = b.build().unwrap();

    for frame in 1..=5u64 {
        let data = Frame {
            positions: &positions,
            step: 1.0,
            sum: AtomicU64::new(0),
        };
        graph.run(&pool, &data).unwrap();
        assert_eq!(data.sum.load(Ordering::SeqCst), frame * 10_000);
    }
    drop(graph);
    assert!(positions.into_inner().unwrap().iter().all(|&p| p == 5.0));
}

/// A node that fans out with `scope` (tasks borrowing the node's stack and
/// the frame's data): its dependent starts only after every scope task
/// finished, on whatever thread it ran, and sees what each wrote.
#[test]
fn a_nodes_scope_finishes_before_its_dependents_start() {
    const TASKS: usize = 64;
    let pool = Pool::builder().threads(2).build().unwrap();
    let done = AtomicUsize::new(0);
    let mut b = TaskGraph::<AtomicUsize>::builder();
    b.share_above(SHARE_ALWAYS.0, SHARE_ALWAYS.1);
    b.node("fan_out", Lane::FrameCritical, |cx| {
        let done = cx.data();
        cx.pool().scope(|s| {
            for _ in 0..TASKS {
                s.spawn(move |_| {
                    spin_for(Duration::from_micros(20));
                    done.fetch_add(1, Ordering::Relaxed);
                });
            }
        });
    });
    b.node("after_fan_out", Lane::FrameCritical, |cx| {
        // Frames before added TASKS + 1 each; this one's scope tasks, TASKS.
        assert_eq!(cx.data().load(Ordering::Relaxed) % (TASKS + 1), TASKS);
        cx.data().fetch_add(1, Ordering::Relaxed);
    })
    .after(["fan_out"]);
    let mut graph = b.build().unwrap();
    for frame in 1..=10 {
        graph.run(&pool, &done).unwrap();
        assert_eq!(done.load(Ordering::Relaxed), frame * (TASKS + 1));
    }
}

#[test]
fn background_work_spans_frames_without_blocking_them() {
    let pool = Pool::builder().threads(2).build().unwrap();
    let release = Arc::new(AtomicBool::new(false));
    let result = Arc::new(AtomicU64::new(0));
    let mut b = TaskGraph::<()>::builder();
    let (rel, res) = (release.clone(), result.clone());
    let mut pending: Option<engine_tasks::JoinHandle<u64>> = None;
    b.node("streamer", Lane::FrameCritical, move |cx| {
        if cx.frame() == 0 {
            let rel = rel.clone();
            pending = Some(
                cx.pool()
                    .spawn(Lane::Background, move || {
                        while !rel.load(Ordering::Acquire) {
                            thread::yield_now();
                        }
                        99
                    })
                    .unwrap(),
            );
        } else if pending.as_ref().is_some_and(|h| h.is_finished()) {
            res.store(pending.take().unwrap().join().unwrap(), Ordering::SeqCst);
        }
    });
    let mut graph = b.build().unwrap();
    // Frames complete while the background task is still running.
    for _ in 0..10 {
        graph.run(&pool, &()).unwrap();
    }
    assert_eq!(result.load(Ordering::SeqCst), 0);
    release.store(true, Ordering::Release);
    let deadline = Instant::now() + Duration::from_secs(60);
    while result.load(Ordering::SeqCst) == 0 {
        assert!(Instant::now() < deadline, "the result never arrived");
        graph.run(&pool, &()).unwrap();
        thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(result.load(Ordering::SeqCst), 99);
}

/// With the frame's thread as the only thread, the run order is the
/// scheduler's choice alone: critical path first starts the long chain
/// before the short nodes declared ahead of it; FIFO keeps declaration order.
#[test]
fn critical_path_first_starts_the_longest_chain() {
    let pool = Pool::builder()
        .threads(1)
        .spawn_with(|_spec, _body| Err(std::io::Error::other("frame thread only")))
        .build()
        .unwrap();
    for order in [ReadyOrder::CriticalPathFirst, ReadyOrder::Fifo] {
        let mut b = TaskGraph::<Mutex<Vec<&'static str>>>::builder();
        b.ready_order(order);
        for name in ["short0", "short1", "short2"] {
            b.node(name, Lane::FrameCritical, move |cx| {
                cx.data().lock().unwrap().push(name)
            });
        }
        b.node("long0", Lane::FrameCritical, |cx| {
            cx.data().lock().unwrap().push("long0");
            spin_for(Duration::from_micros(300));
        });
        b.node("long1", Lane::FrameCritical, |cx| {
            cx.data().lock().unwrap().push("long1");
            spin_for(Duration::from_micros(300));
        })
        .after(["long0"]);
        let mut graph = b.build().unwrap();
        let mut firsts = Vec::new();
        let mut order_run = Vec::new();
        for _ in 0..20 {
            let log = Mutex::new(Vec::new());
            graph.run(&pool, &log).unwrap();
            order_run = log.into_inner().unwrap();
            firsts.push(order_run[0]);
        }
        let late = &firsts[10..];
        match order {
            ReadyOrder::CriticalPathFirst => {
                assert!(late.iter().all(|&f| f == "long0"), "{firsts:?}")
            }
            ReadyOrder::Fifo => assert!(late.iter().all(|&f| f != "long0"), "{firsts:?}"),
        }
        // One thread: the frame ends with the last node run, and the
        // critical path is the chain that released it.
        let stats = graph.last_frame();
        let path: Vec<&str> = stats
            .critical_path()
            .iter()
            .map(|&i| graph.node_name(i))
            .collect();
        match order {
            ReadyOrder::CriticalPathFirst => {
                // The short ones in order of their measured times.
                assert_eq!(order_run[..2], ["long0", "long1"]);
                assert_eq!(path, [order_run[4]]);
            }
            ReadyOrder::Fifo => {
                assert_eq!(order_run, ["short0", "short1", "short2", "long0", "long1"]);
                assert_eq!(path, ["long0", "long1"]);
            }
        }
    }
}

#[test]
fn statistics_describe_the_frame() {
    let pool = Pool::builder().threads(2).build().unwrap();
    let mut b = TaskGraph::<()>::builder();
    b.node("a", Lane::FrameCritical, |_| {
        spin_for(Duration::from_micros(200))
    });
    b.node("b", Lane::FrameCritical, |_| {
        spin_for(Duration::from_micros(200))
    })
    .after(["a"]);
    b.node("c", Lane::FrameCritical, |_| {
        spin_for(Duration::from_micros(50))
    })
    .after(["a"]);
    b.main_thread_node("present", |_| {}).after(["b", "c"]);
    let mut graph = b.build().unwrap();
    // Before the first frame no node has run.
    assert!(graph
        .last_frame()
        .nodes()
        .all(|n| n.outcome == NodeOutcome::Skipped && n.thread.is_none()));
    for _ in 0..5 {
        graph.run(&pool, &()).unwrap();
    }
    let stats = graph.last_frame();
    assert_eq!(stats.frame(), 4);
    assert_eq!(stats.nodes().len(), 4);
    assert!(stats.node(0).duration >= Duration::from_micros(150));
    assert!(stats.total_work() >= stats.critical_path_work());
    let path: Vec<&str> = stats
        .critical_path()
        .iter()
        .map(|&i| graph.node_name(i))
        .collect();
    assert_eq!(path.first(), Some(&"a"));
    assert_eq!(path.last(), Some(&"present"));
    // Busy time per slot adds up to the nodes' run time.
    let busy: Duration = (0..stats.slots()).map(|s| stats.thread_busy(s)).sum();
    // (Each duration is rounded down to whole nanoseconds on its own.)
    assert!(busy.abs_diff(stats.total_work()) <= Duration::from_nanos(4));
    assert_eq!(stats.slots(), pool.threads() + 1);
    // The pinned node ran on the frame's thread: the guest slot.
    assert_eq!(stats.node(3).thread, Some(pool.threads()));
    assert!(stats.wall_time() >= stats.critical_path_work() / 2);
    // The frame's thread (guest slot) was awake for part of the frame.
    let main_awake = stats.awake(pool.threads()).expect("the frame's slot");
    assert!(main_awake <= stats.wall_time());
    assert!(stats.utilisation(pool.threads()) <= 1.0);
}

/// `steals` counts the tasks taken from other threads' queues during the
/// frame: none when the frame runs alone; at least one when a node of a
/// queued frame ran on another thread than the frame's, since the frame's
/// thread queues the roots on its own queue.
#[test]
fn statistics_count_the_frames_steals() {
    let pool = Pool::builder().threads(1).build().unwrap();
    let frame_slot = Some(pool.threads());

    let mut light = TaskGraph::<()>::builder();
    // Alone whatever a loaded machine does to the frames' times.
    light.share_above(Duration::MAX, Duration::MAX);
    for i in 0..4 {
        light.node(format!("light{i}"), Lane::FrameCritical, |_| {});
    }
    let mut light = light.build().unwrap();
    for _ in 0..3 {
        let stats = light.run(&pool, &()).unwrap();
        assert_eq!(stats.sharing(), FrameSharing::Alone);
        assert_eq!(stats.steals(), 0);
    }

    let mut b = TaskGraph::<()>::builder();
    b.share_above(SHARE_ALWAYS.0, SHARE_ALWAYS.1);
    b.planning(Planning::Off);
    b.node("root", Lane::FrameCritical, |_| {});
    for i in 0..8 {
        b.node(format!("leaf{i}"), Lane::FrameCritical, |_| {
            spin_for(Duration::from_micros(200))
        })
        .after(["root"]);
    }
    let mut graph = b.build().unwrap();
    // A woken worker joins within 200 frames (each 1.6 ms of work alone).
    let shared_frames = (0..200).find(|_| {
        let stats = graph.run(&pool, &()).unwrap();
        let off_thread = stats.nodes().filter(|n| n.thread != frame_slot).count();
        assert!(off_thread == 0 || stats.steals() >= 1);
        off_thread > 0 && stats.sharing() == FrameSharing::Shared
    });
    assert!(shared_frames.is_some(), "the worker never ran a node");
}

#[test]
fn graphs_run_when_no_thread_could_be_spawned() {
    let pool = Pool::builder()
        .threads(3)
        .spawn_with(|_spec, _body| Err(std::io::Error::other("no threads today")))
        .build()
        .unwrap();
    // Shared from the second frame on: queued, or planned (the frame's
    // thread then runs the helper tasks itself, as walkers of nothing).
    for plannable in [false, true] {
        let (mut graph, deps) = random_graph(&mut Rng(7), 30, plannable, SHARE_ALWAYS);
        let log = Log::for_this_thread(30);
        for _ in 0..3 {
            graph.run(&pool, &log).unwrap();
        }
        assert!(log.runs.iter().all(|r| r.load(Ordering::SeqCst) == 3));
        assert_eq!(deps.len(), 30);
        let expected = if plannable {
            FrameSharing::Planned
        } else {
            FrameSharing::Shared
        };
        assert_eq!(graph.last_frame().sharing(), expected);
    }
    assert_eq!(pool.stats().threads_started, 0);
}

/// Several outside threads run graphs on one pool at once: one holds the
/// guest slot, the others wait without one, and pinned nodes still run on
/// each graph's own frame thread.
#[test]
fn concurrent_frames_from_outside_threads() {
    let pool = Arc::new(Pool::builder().threads(2).build().unwrap());
    let threads: Vec<_> = (0..4u64)
        .map(|seed| {
            let pool = pool.clone();
            thread::spawn(move || {
                let mut rng = Rng(seed * 7919 + 3);
                for _ in 0..100 {
                    let n = 1 + rng.below(30) as usize;
                    let plannable = rng.below(2) == 0;
                    let (mut graph, _) = random_graph(&mut rng, n, plannable, SHARE_ALWAYS);
                    let log = Log::for_this_thread(n);
                    graph.run(&pool, &log).unwrap();
                    assert!(log.runs.iter().all(|r| r.load(Ordering::SeqCst) == 1));
                    assert_eq!(log.pinned_off_thread.load(Ordering::SeqCst), 0);
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
}

/// A graph run from inside a pool task (a worker is the frame's thread).
#[test]
fn a_graph_can_run_inside_a_task() {
    let pool = Arc::new(Pool::builder().threads(2).build().unwrap());
    let inner = pool.clone();
    let handle = pool
        .spawn(Lane::Normal, move || {
            let mut ok = true;
            for plannable in [false, true] {
                let (mut graph, _) = random_graph(&mut Rng(99), 25, plannable, SHARE_ALWAYS);
                let log = Log::for_this_thread(25);
                for _ in 0..10 {
                    graph.run(&inner, &log).unwrap();
                }
                ok &= log.runs.iter().all(|r| r.load(Ordering::SeqCst) == 10);
                ok &= log.pinned_off_thread.load(Ordering::SeqCst) == 0;
            }
            ok
        })
        .unwrap();
    assert!(handle.join().unwrap());
}

/// A frame whose thread is the pool's only worker never hands over, even
/// when the rule says it is worth a second thread: nobody could help. (The
/// graph's first frame starts alone; with zero thresholds it would hand
/// over after its second node.)
#[test]
fn the_only_worker_never_hands_a_frame_over() {
    let pool = Arc::new(Pool::builder().threads(1).build().unwrap());
    let inner = pool.clone();
    // The result comes back through a channel, not a join: a joining
    // thread could take the task itself, and then the worker could help.
    let (send, receive) = std::sync::mpsc::channel();
    let _handle = pool
        .spawn(Lane::Normal, move || {
            let mut b = TaskGraph::<AtomicUsize>::builder();
            b.share_above(Duration::ZERO, Duration::ZERO);
            for i in 0..40 {
                let node = b.node(format!("n{i}"), Lane::FrameCritical, |cx| {
                    cx.data().fetch_add(1, Ordering::Relaxed);
                });
                if i >= 2 {
                    node.after([format!("n{}", i - 2)]);
                }
            }
            let mut graph = b.build().unwrap();
            let runs = AtomicUsize::new(0);
            let first = graph.run(&inner, &runs).unwrap().sharing();
            for _ in 0..2 {
                graph.run(&inner, &runs).unwrap();
            }
            send.send((first, runs.load(Ordering::Relaxed))).unwrap();
        })
        .unwrap();
    assert_eq!(receive.recv().unwrap(), (FrameSharing::Alone, 120));
}

/// A planned frame relies on its own thread walking to the end (helpers
/// run inside other waits leave when nothing is ready), so a thread that
/// finds the pool's guest slot held (here by another outside thread inside
/// a `scope`) runs its frames queued, never planned; once the slot is free
/// its frames run planned again. Every node runs once per frame, after its
/// dependencies.
#[test]
fn a_frame_whose_thread_finds_no_slot_is_never_planned() {
    let pool = Arc::new(Pool::builder().threads(1).build().unwrap());
    let (held, hold) = (
        Arc::new(std::sync::Barrier::new(2)),
        Arc::new(std::sync::Barrier::new(2)),
    );
    let holder = {
        let (pool, held, hold) = (pool.clone(), held.clone(), hold.clone());
        thread::spawn(move || {
            pool.scope(|_| {
                held.wait();
                hold.wait();
            })
        })
    };
    held.wait();
    let mut b = TaskGraph::<Vec<AtomicU64>>::builder();
    b.share_above(Duration::ZERO, Duration::ZERO);
    for i in 0..64usize {
        let deps: Vec<usize> = if i < 8 {
            Vec::new()
        } else {
            vec![i - 8, (i / 8 - 1) * 8 + (i + 3) % 8]
        };
        let names: Vec<String> = deps.iter().map(|d| format!("n{d}")).collect();
        b.node(format!("n{i}"), Lane::FrameCritical, move |cx| {
            let frame = cx.frame() + 1;
            for &d in &deps {
                assert_eq!(
                    cx.data()[d].load(Ordering::Acquire),
                    frame,
                    "n{d} before n{i}"
                );
            }
            assert_eq!(
                cx.data()[i].swap(frame, Ordering::AcqRel),
                frame - 1,
                "n{i} once"
            );
        })
        .after(names);
    }
    let mut graph = b.build().unwrap();
    let finished: Vec<AtomicU64> = (0..64).map(|_| AtomicU64::new(0)).collect();
    for _ in 0..100 {
        let stats = graph.run(&pool, &finished).unwrap();
        assert_ne!(stats.sharing(), FrameSharing::Planned);
    }
    hold.wait();
    holder.join().unwrap();
    let planned = (0..200)
        .filter(|_| graph.run(&pool, &finished).unwrap().sharing() == FrameSharing::Planned)
        .count();
    assert!(planned > 0, "no frame ran planned with the slot free");
    assert!(finished.iter().all(|f| f.load(Ordering::Relaxed) == 300));
}

/// Planned frames whose nodes wait inside: `parallel_for` pieces and
/// joined tasks. A thread waiting inside a node runs other tasks, helper
/// tasks of the same frame among them; such a helper only runs ready
/// nodes, since waiting there could wait for the node it runs inside. Each
/// node runs once per frame, and no frame hangs.
#[test]
fn planned_frames_whose_nodes_wait_on_pool_work() {
    let pool = Pool::builder().threads(3).build().unwrap();
    let mut b = TaskGraph::<Vec<AtomicUsize>>::builder();
    b.share_above(SHARE_ALWAYS.0, SHARE_ALWAYS.1);
    for i in 0..64usize {
        let deps: Vec<String> = if i < 8 {
            Vec::new()
        } else {
            vec![
                format!("n{}", i - 8),
                format!("n{}", (i / 8 - 1) * 8 + (i + 5) % 8),
            ]
        };
        b.node(format!("n{i}"), Lane::FrameCritical, move |cx| {
            match i % 4 {
                0 => cx
                    .pool()
                    .parallel_for(0..64, 4, |_| spin_for(Duration::from_micros(1))),
                1 => {
                    let task = cx
                        .pool()
                        .spawn(Lane::FrameCritical, || spin_for(Duration::from_micros(5)))
                        .unwrap();
                    task.join().unwrap();
                }
                _ => spin_for(Duration::from_micros(2)),
            }
            cx.data()[i].fetch_add(1, Ordering::Relaxed);
        })
        .after(deps);
    }
    let mut graph = b.build().unwrap();
    let runs: Vec<AtomicUsize> = (0..64).map(|_| AtomicUsize::new(0)).collect();
    let frames = 300;
    let mut planned = 0;
    for _ in 0..frames {
        let stats = graph.run(&pool, &runs).unwrap();
        planned += usize::from(stats.sharing() == FrameSharing::Planned);
    }
    assert!(runs.iter().all(|r| r.load(Ordering::Relaxed) == frames));
    assert_eq!(planned, frames - 1, "all but the first frame");
}

/// What the frames of `a_helper_inside_a_nodes_wait_does_not_wait_for_it`
/// share with their nodes.
#[derive(Default)]
struct WaitingNode {
    /// The task `first` joins: it runs until `second` ran.
    blocker: Mutex<Option<engine_tasks::JoinHandle<bool>>>,
    second_ran: Arc<AtomicBool>,
    second_ran_on: Mutex<Option<ThreadId>>,
}

/// The frame's thread runs node `first`, which joins a task that the only
/// worker runs and that waits for node `second`, planned on the other list.
/// In that join the frame's thread finds the frame's helper task in the
/// pool's injector and runs it: the helper runs `second`, the one ready node, then
/// must leave rather than wait for the rest, which waits for `first`, below
/// it on the same stack.
#[test]
fn a_helper_inside_a_nodes_wait_does_not_wait_for_it() {
    let pool = Pool::builder().threads(1).build().unwrap();
    let mut b = TaskGraph::<WaitingNode>::builder();
    b.share_above(SHARE_ALWAYS.0, SHARE_ALWAYS.1);
    b.node("first", Lane::FrameCritical, |cx| {
        if let Some(task) = cx.data().blocker.lock().unwrap().take() {
            assert!(task.join().unwrap(), "the blocker saw `second` run");
        }
    });
    b.node("second", Lane::FrameCritical, |cx| {
        *cx.data().second_ran_on.lock().unwrap() = Some(thread::current().id());
        cx.data().second_ran.store(true, Ordering::Release);
    });
    // The long chain after `first` puts it first in the plan, on the frame
    // thread's list; `second` goes to the helper's.
    b.node("long", Lane::FrameCritical, |_| {
        spin_for(Duration::from_micros(300))
    })
    .after(["first"]);
    b.node("last", Lane::FrameCritical, |_| {})
        .after(["long", "second"]);
    let mut graph = b.build().unwrap();
    let data = WaitingNode::default();
    for frame in 0..50 {
        data.second_ran.store(false, Ordering::Relaxed);
        if frame > 0 {
            // The worker is busy with the blocker before the frame starts,
            // so the frame's thread is the one to find the helper task.
            let started = Arc::new(AtomicBool::new(false));
            let (started_too, ran) = (started.clone(), data.second_ran.clone());
            let blocker = pool
                .spawn(Lane::FrameCritical, move || {
                    started_too.store(true, Ordering::Release);
                    let give_up = Instant::now() + Duration::from_secs(30);
                    while !ran.load(Ordering::Acquire) {
                        if Instant::now() > give_up {
                            return false;
                        }
                        std::hint::spin_loop();
                    }
                    true
                })
                .unwrap();
            *data.blocker.lock().unwrap() = Some(blocker);
            while !started.load(Ordering::Acquire) {
                std::hint::spin_loop();
            }
        }
        let stats = graph.run(&pool, &data).unwrap();
        if frame > 0 {
            assert_eq!(stats.sharing(), FrameSharing::Planned, "frame {frame}");
            // The helper ran inside `first`'s join, on this thread.
            let ran_on = data.second_ran_on.lock().unwrap().take();
            assert_eq!(ran_on, Some(thread::current().id()), "frame {frame}");
        }
    }
}

/// Planned frames whose nodes run planned frames of another graph: a walk
/// is a wait, so a walker of the inner frame that runs a helper of the
/// outer one (from its own queue, say) only runs the outer frame's ready
/// nodes. Every node of both graphs runs once per frame.
#[test]
fn planned_frames_inside_nodes_of_planned_frames() {
    fn layered(
        layers: usize,
        width: usize,
        body: impl Fn(usize) + Send + Sync + Clone + 'static,
    ) -> TaskGraph<()> {
        let mut b = TaskGraph::<()>::builder();
        b.share_above(SHARE_ALWAYS.0, SHARE_ALWAYS.1);
        for i in 0..layers * width {
            let body = body.clone();
            let deps: Vec<String> = if i < width {
                Vec::new()
            } else {
                vec![
                    format!("n{}", i - width),
                    format!("n{}", i - width + (i + 1) % width - i % width),
                ]
            };
            b.node(format!("n{i}"), Lane::FrameCritical, move |_| body(i))
                .after(deps);
        }
        b.build().unwrap()
    }
    let pool = Pool::builder().threads(3).build().unwrap();
    let inner_runs: Arc<Vec<AtomicUsize>> =
        Arc::new((0..16).map(|_| AtomicUsize::new(0)).collect());
    let outer_runs: Arc<Vec<AtomicUsize>> =
        Arc::new((0..16).map(|_| AtomicUsize::new(0)).collect());
    let handle = pool.handle();
    let inner_graphs: Arc<Vec<Mutex<TaskGraph<()>>>> = Arc::new(
        (0..4)
            .map(|_| {
                let runs = inner_runs.clone();
                Mutex::new(layered(4, 4, move |i| {
                    spin_for(Duration::from_micros(2));
                    runs[i].fetch_add(1, Ordering::Relaxed);
                }))
            })
            .collect(),
    );
    let mut outer = {
        let (runs, inner) = (outer_runs.clone(), inner_graphs.clone());
        layered(4, 4, move |i| {
            if i % 4 == 0 {
                // One inner graph per column: no two nodes lock the same.
                let mut graph = inner[i / 4].lock().unwrap();
                graph.run(&handle, &()).unwrap();
            } else {
                spin_for(Duration::from_micros(5));
            }
            runs[i].fetch_add(1, Ordering::Relaxed);
        })
    };
    let frames = 200;
    for _ in 0..frames {
        outer.run(&pool, &()).unwrap();
    }
    assert!(outer_runs
        .iter()
        .all(|r| r.load(Ordering::Relaxed) == frames));
    // Nodes 0, 4, 8 and 12 each ran a frame of their own inner graph per
    // outer frame: four inner frames, each node index four times.
    assert!(inner_runs
        .iter()
        .all(|r| r.load(Ordering::Relaxed) == 4 * frames));
}

/// Chains of `length` nodes named `{prefix}{i}`, one per prefix, each node
/// spinning 20 µs, in `builder` (left empty before).
fn fill_chains(builder: &mut TaskGraphBuilder<()>, prefixes: &[char], length: usize) {
    builder.share_above(Duration::ZERO, Duration::ZERO);
    for prefix in prefixes {
        for i in 0..length {
            let node = builder.node(format!("{prefix}{i}"), Lane::Normal, |_| {
                spin_for(Duration::from_micros(20));
            });
            if i > 0 {
                node.after([format!("{prefix}{}", i - 1)]);
            }
        }
    }
}

/// Runs `graph` until a frame runs planned; its statistics' names on the
/// critical path (not yet asked for) and a copy of them taken first.
fn planned_path(graph: &mut TaskGraph<()>, pool: &Pool) -> (Vec<String>, FrameStats) {
    for _ in 0..500 {
        if graph.run(pool, &()).unwrap().sharing() == FrameSharing::Planned {
            let copy = graph.last_frame().clone();
            let path = graph.last_frame().critical_path().iter();
            return (path.map(|&i| graph.node_name(i).to_owned()).collect(), copy);
        }
    }
    panic!("no frame of 500 ran planned");
}

/// A planned frame's critical path is walked when asked, against the
/// graph as that frame ran it: after a rebuild into another shape the
/// graph's frames walk the new shape, and a copy of the statistics taken
/// before (never asked) still walks the old one.
#[test]
fn a_planned_frames_path_follows_rebuilds_and_copies_keep_theirs() {
    fn statistics_travel<T: Send + Sync + Clone>() {}
    statistics_travel::<FrameStats>();
    let pool = Pool::builder().threads(2).build().unwrap();
    let mut builder = TaskGraph::<()>::builder();
    fill_chains(&mut builder, &['a', 'b'], 8);
    let mut graph = builder.build().unwrap();
    let (before, copy) = planned_path(&mut graph, &pool);
    let chain = |prefix: char, length: usize| -> Vec<String> {
        (0..length).map(|i| format!("{prefix}{i}")).collect()
    };
    assert!(
        before == chain('a', 8) || before == chain('b', 8),
        "{before:?}"
    );
    let old_names: Vec<String> = (0..graph.len())
        .map(|i| graph.node_name(i).to_owned())
        .collect();

    let mut builder = TaskGraph::<()>::builder();
    fill_chains(&mut builder, &['c', 'd', 'e'], 5);
    builder.build_into(&mut graph).unwrap();
    let (after, _) = planned_path(&mut graph, &pool);
    assert!(
        ['c', 'd', 'e'].iter().any(|&p| after == chain(p, 5)),
        "{after:?}"
    );
    let copied: Vec<&str> = copy
        .critical_path()
        .iter()
        .map(|&i| old_names[i].as_str())
        .collect();
    assert_eq!(copied, before);
}

/// The runtime sees a frame's data only as the address of the `&C` given
/// to `run`, whatever `C`: unsized data (behind a wide pointer) and data
/// that borrows reach every node and condition intact, on the frame's
/// thread and on the pool's.
#[test]
fn frame_data_of_any_type_reaches_nodes_and_conditions() {
    let pool = Pool::builder().threads(2).build().unwrap();

    // A slice: nodes sum it, a condition reads its length. Nodes spin so
    // that frames share with the pool's threads.
    let sums = Arc::new(AtomicU64::new(0));
    let mut builder = TaskGraph::<[u64]>::builder();
    for i in 0..16 {
        let sums = Arc::clone(&sums);
        let node = builder.node(format!("sum{i}"), Lane::Normal, move |cx| {
            spin_for(Duration::from_micros(50));
            sums.fetch_add(cx.data().iter().sum::<u64>(), Ordering::Relaxed);
        });
        if i % 2 == 1 {
            node.run_if(|cx| cx.data().len() > 2);
        }
    }
    let mut graph = builder.build().unwrap();
    for frame in 0..20u64 {
        let values: Vec<u64> = (0..frame % 5).map(|v| v + frame).collect();
        sums.store(0, Ordering::Relaxed);
        graph.run(&pool, &values).unwrap();
        let runs = if values.len() > 2 { 16 } else { 8 };
        assert_eq!(
            sums.load(Ordering::Relaxed),
            runs * values.iter().sum::<u64>(),
            "frame {frame}"
        );
    }

    // A string slice and a trait object.
    let mut builder = TaskGraph::<str>::builder();
    builder.node("greet", Lane::Normal, |cx| assert_eq!(cx.data(), "hello"));
    let mut graph = builder.build().unwrap();
    graph.run(&pool, "hello").unwrap();
    let seen = Arc::new(AtomicU64::new(0));
    let mut builder = TaskGraph::<dyn Fn(u64) -> u64 + Sync>::builder();
    let into = Arc::clone(&seen);
    builder
        .node("apply", Lane::Normal, move |cx| {
            into.store((cx.data())(20), Ordering::Relaxed)
        })
        .run_if(|cx| (cx.data())(1) == 3);
    let mut graph = builder.build().unwrap();
    let offset = 2;
    graph.run(&pool, &move |x: u64| x + offset).unwrap();
    assert_eq!(seen.load(Ordering::Relaxed), 22);

    // Data that borrows: the graph lives no longer than what it borrows.
    struct View<'a> {
        values: &'a [u64],
    }
    let values = vec![1, 2, 3];
    let total = Arc::new(AtomicU64::new(0));
    let mut builder = TaskGraph::<View<'_>>::builder();
    let into = Arc::clone(&total);
    builder.node("total", Lane::Normal, move |cx| {
        into.fetch_add(cx.data().values.iter().sum(), Ordering::Relaxed);
    });
    let mut graph = builder.build().unwrap();
    for _ in 0..3 {
        graph.run(&pool, &View { values: &values }).unwrap();
    }
    assert_eq!(total.load(Ordering::Relaxed), 18);
}

/// An unclocked graph (`NodeClock::Off`) reports every node with a zero
/// start and duration, and no busy time, in every kind of frame: run
/// alone (which still reads the clock now and then to decide on a hand
/// over), handed over, shared by queues and planned.
#[test]
fn an_unclocked_graph_reports_zero_times_in_every_kind_of_frame() {
    let pool = Pool::builder().threads(1).build().unwrap();
    let mut seen = Vec::new();
    for (threshold, planning) in EVERY_KIND_OF_FRAME {
        let mut b = TaskGraph::<()>::builder();
        b.share_above(threshold, threshold)
            .planning(planning)
            .node_clock(NodeClock::Off);
        for layer in 0..4 {
            for i in 0..8 {
                let node = b.node(format!("n{layer}_{i}"), Lane::FrameCritical, |_| {
                    std::hint::black_box((0..2_000u64).sum::<u64>());
                });
                if layer > 0 {
                    node.after([format!("n{}_{i}", layer - 1)]);
                }
            }
        }
        let mut graph = b.build().unwrap();
        for frame in 0..6 {
            let stats = graph.run(&pool, &()).unwrap();
            seen.push(stats.sharing());
            assert_eq!(stats.nodes().len(), 32);
            for (i, node) in stats.nodes().enumerate() {
                assert_eq!(node.outcome, NodeOutcome::Ran, "node {i}, frame {frame}");
                assert_eq!(node.start, Duration::ZERO, "node {i}, frame {frame}");
                assert_eq!(node.duration, Duration::ZERO, "node {i}, frame {frame}");
            }
            assert_eq!(stats.total_work(), Duration::ZERO);
        }
    }
    assert_every_kind_of_frame_in(&seen);
}

/// A graph of `nodes` independent nodes of `spin` each, whose runs are
/// counted in `runs`.
fn counted_graph(runs: &Arc<Vec<AtomicUsize>>, spin: Duration) -> TaskGraph<()> {
    let mut builder = TaskGraph::<()>::builder();
    for i in 0..runs.len() {
        let runs = runs.clone();
        builder.node(format!("n{i}"), Lane::FrameCritical, move |_| {
            spin_for(spin);
            // Relaxed: read after the frame, which its end orders.
            runs[i].fetch_add(1, Ordering::Relaxed);
        });
    }
    builder.build().unwrap()
}

/// `sleep_until` as a frame limiter: it never returns before its
/// deadline, a deadline already past returns (a frame that overran its
/// tick), and the frames after it, of empty nodes and of 50 µs ones, run
/// every node once. (What it warms: `runtime/tests.rs`.)
#[test]
fn sleep_until_wakes_no_sooner_than_its_deadline_and_frames_after_it_run_every_node() {
    let pool = Pool::builder().threads(1).build().unwrap();
    for spin in [Duration::ZERO, Duration::from_micros(50)] {
        let runs = Arc::new((0..32).map(|_| AtomicUsize::new(0)).collect::<Vec<_>>());
        let mut graph = counted_graph(&runs, spin);
        let period = Duration::from_millis(2);
        let mut tick = Instant::now();
        let frames = 24;
        for frame in 0..frames {
            tick += period;
            if frame % 8 == 7 {
                // Overran: the tick is past.
                tick = Instant::now() - period;
            }
            graph.sleep_until(&pool, tick);
            assert!(Instant::now() >= tick, "frame {frame} woke before its tick");
            graph.run(&pool, &()).unwrap();
        }
        for (i, count) in runs.iter().enumerate() {
            assert_eq!(
                count.load(Ordering::Relaxed),
                frames,
                "node {i}, spin {spin:?}"
            );
        }
    }
}

/// A graph moved after its last frame (its published spans then hold its
/// old address, worked out again by the warming) still runs every node
/// after `sleep_until`.
#[test]
fn sleep_until_on_a_moved_graph_still_runs_every_node() {
    let pool = Pool::builder().threads(1).build().unwrap();
    let runs = Arc::new((0..16).map(|_| AtomicUsize::new(0)).collect::<Vec<_>>());
    let mut graph = counted_graph(&runs, Duration::ZERO);
    graph.run(&pool, &()).unwrap();
    let mut moved = vec![graph];
    let mut graph = Box::new(moved.pop().unwrap());
    for _ in 0..3 {
        graph.sleep_until(&pool, Instant::now() + Duration::from_millis(1));
        graph.run(&pool, &()).unwrap();
    }
    assert!(runs.iter().all(|count| count.load(Ordering::Relaxed) == 4));
}

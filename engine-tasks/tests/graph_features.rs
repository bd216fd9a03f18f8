//! Sets, run conditions, toggles, declared access and graphs rebuilt every
//! frame: what each promises, and the errors bad input gets.

use engine_tasks::graph::{AccessId, Ambiguities, NodeOutcome, Resources};
use engine_tasks::{FrameSharing, GraphError, Lane, NodeContext, Planning, Pool, TaskGraph};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};

mod common;
use common::spin_for;

fn pool() -> &'static Pool {
    static POOL: OnceLock<Pool> = OnceLock::new();
    POOL.get_or_init(|| Pool::builder().threads(3).build().unwrap())
}

/// A frame's log of which nodes ran, in order.
#[derive(Default)]
struct Log(Mutex<Vec<&'static str>>);

impl Log {
    fn take(&self) -> Vec<&'static str> {
        std::mem::take(&mut *self.0.lock().unwrap())
    }
}

fn logs(name: &'static str) -> impl FnMut(&NodeContext<'_, Log>) + Send + 'static {
    move |cx| cx.data().0.lock().unwrap().push(name)
}

fn position(log: &[&str], name: &str) -> usize {
    log.iter()
        .position(|n| *n == name)
        .unwrap_or_else(|| panic!("{name} did not run: {log:?}"))
}

#[test]
fn orderings_by_set_hold_through_nested_and_empty_sets() {
    let mut b = TaskGraph::<Log>::builder();
    b.set("input");
    b.set("simulation").after(["input"]);
    b.set("physics").in_set("simulation");
    b.set("render").after(["simulation"]);
    // Two empty sets in a chain between `early` and `late`.
    b.set("empty_a");
    b.set("empty_b").after(["empty_a"]);
    b.node("read_pad", Lane::FrameCritical, logs("read_pad"))
        .in_set("input");
    b.node("collide", Lane::FrameCritical, logs("collide"))
        .in_set("physics");
    b.node("ai", Lane::FrameCritical, logs("ai"))
        .in_set("simulation");
    b.node("draw", Lane::FrameCritical, logs("draw"))
        .in_set("render");
    b.node("early", Lane::FrameCritical, logs("early"))
        .before(["empty_a"]);
    b.node("late", Lane::FrameCritical, logs("late"))
        .after(["empty_b"]);
    // In two sets at once.
    b.set("tagged");
    b.node("both", Lane::FrameCritical, logs("both"))
        .in_set("tagged")
        .in_set("render");
    let mut graph = b.build().unwrap();
    let log = Log::default();
    for _ in 0..30 {
        graph.run(pool(), &log).unwrap();
        let order = log.take();
        assert_eq!(order.len(), 7, "{order:?}");
        assert!(position(&order, "read_pad") < position(&order, "collide"));
        assert!(position(&order, "read_pad") < position(&order, "ai"));
        assert!(position(&order, "collide") < position(&order, "draw"));
        assert!(position(&order, "ai") < position(&order, "draw"));
        assert!(position(&order, "early") < position(&order, "late"));
        assert!(
            position(&order, "ai") < position(&order, "both"),
            "both is in render"
        );
    }
}

#[test]
fn a_cycle_through_sets_names_every_node_and_set_on_it() {
    let mut b = TaskGraph::<Log>::builder();
    b.set("a_set").after(["last"]);
    b.node("first", Lane::Normal, logs("first")).in_set("a_set");
    b.node("last", Lane::Normal, logs("last")).after(["first"]);
    let Err(GraphError::Cycle(names)) = b.build() else {
        panic!("the cycle was not found")
    };
    for name in ["a_set", "first", "last"] {
        assert!(
            names.iter().any(|n| n == name),
            "{name} missing from {names:?}"
        );
    }
}

#[test]
fn unknown_sets_and_names_are_errors() {
    let mut b = TaskGraph::<Log>::builder();
    b.node("a", Lane::Normal, logs("a")).in_set("nowhere");
    assert_eq!(
        b.build().unwrap_err(),
        GraphError::UnknownSet {
            member: "a".into(),
            set: "nowhere".into()
        }
    );
    // A node of that name is not a set: the message does not say that
    // nothing has the name.
    let mut b = TaskGraph::<Log>::builder();
    b.node("physics", Lane::Normal, logs("physics"));
    b.node("x", Lane::Normal, logs("x")).in_set("physics");
    assert_eq!(
        b.build().unwrap_err().to_string(),
        r#""x" is put in set "physics", which no set is called"#
    );
    let mut b = TaskGraph::<Log>::builder();
    b.set("s").after(["ghost"]);
    assert!(matches!(
        b.build(),
        Err(GraphError::UnknownDependency { node, dependency }) if node == "s" && dependency == "ghost"
    ));
    let mut b = TaskGraph::<Log>::builder();
    b.node("a", Lane::Normal, logs("a")).before(["ghost"]);
    let error = b.build().unwrap_err();
    assert_eq!(
        error.to_string(),
        r#""a" is ordered after or before "ghost", which no node or set is called"#
    );
    let mut b = TaskGraph::<Log>::builder();
    b.set("same");
    b.node("same", Lane::Normal, logs("same"));
    assert_eq!(
        b.build().unwrap_err(),
        GraphError::DuplicateNode("same".into())
    );
}

#[derive(Default)]
struct Gated {
    log: Log,
    open: AtomicBool,
    set_checks: AtomicUsize,
}

fn gated_logs(name: &'static str) -> impl FnMut(&NodeContext<'_, Gated>) + Send + 'static {
    move |cx| cx.data().log.0.lock().unwrap().push(name)
}

/// A node whose condition fails does not run, and its dependents run as if
/// it had; a set's condition is evaluated once per frame however many of
/// its nodes run, on however many threads.
#[test]
fn conditions_skip_nodes_without_skipping_their_dependents() {
    let mut b = TaskGraph::<Gated>::builder();
    b.set("gate").run_if(|cx| {
        cx.data().set_checks.fetch_add(1, Ordering::Relaxed);
        cx.data().open.load(Ordering::Relaxed)
    });
    for name in ["g1", "g2", "g3", "g4", "g5", "g6"] {
        b.node(name, Lane::FrameCritical, move |cx| {
            spin_for(std::time::Duration::from_micros(50));
            gated_logs(name)(cx)
        })
        .in_set("gate");
    }
    b.node(
        "conditional",
        Lane::FrameCritical,
        gated_logs("conditional"),
    )
    .run_if(|cx| cx.frame() % 2 == 0);
    b.node("after_it", Lane::FrameCritical, gated_logs("after_it"))
        .after(["conditional", "gate"]);
    let mut graph = b.build().unwrap();
    let conditional = graph.node_index("conditional").unwrap();
    let data = Gated::default();
    for frame in 0..20u64 {
        data.open.store(frame % 3 == 0, Ordering::Relaxed);
        let stats = graph.run(pool(), &data).unwrap();
        let order = data.log.take();
        assert!(order.contains(&"after_it"), "dependents run: {order:?}");
        let gate_ran = order.iter().filter(|n| n.starts_with('g')).count();
        assert_eq!(gate_ran, if frame % 3 == 0 { 6 } else { 0 }, "{order:?}");
        assert_eq!(order.contains(&"conditional"), frame % 2 == 0);
        let expected = if frame % 2 == 0 {
            NodeOutcome::Ran
        } else {
            NodeOutcome::Off
        };
        assert_eq!(stats.node(conditional).outcome, expected);
    }
    assert_eq!(
        data.set_checks.load(Ordering::Relaxed),
        20,
        "once per frame"
    );
}

/// A set answered by a frame run alone, which then hands its nodes over:
/// the set's condition still runs once per frame, the threads that run
/// the set's other nodes after the hand-over take its answer, and a shared
/// frame after it evaluates it once again.
#[test]
fn a_sets_answer_from_before_a_hand_over_holds_after_it() {
    for open in [true, false] {
        let mut b = TaskGraph::<Gated>::builder();
        // The first frame starts alone; after `heavy` (which runs after
        // `first`, the node that asks the set first) the rule says hand
        // over, `heavier`, 1 ms with 7 nodes after it, confirms it, and the
        // frame hands over the set's other nodes (open or not).
        b.share_above(
            std::time::Duration::from_micros(500),
            std::time::Duration::ZERO,
        );
        b.set("gate").run_if(|cx| {
            // Relaxed, both: read after the frame, whose end orders them.
            cx.data().set_checks.fetch_add(1, Ordering::Relaxed);
            cx.data().open.load(Ordering::Relaxed)
        });
        b.node("first", Lane::FrameCritical, gated_logs("first"))
            .in_set("gate");
        b.node("heavy", Lane::FrameCritical, |_| {
            spin_for(std::time::Duration::from_millis(1))
        })
        .after(["first"]);
        b.node("heavier", Lane::FrameCritical, |_| {
            spin_for(std::time::Duration::from_millis(1))
        })
        .after(["heavy"]);
        let rest = ["g1", "g2", "g3", "g4", "g5", "g6"];
        for name in rest {
            b.node(name, Lane::FrameCritical, move |cx| {
                spin_for(std::time::Duration::from_micros(100));
                gated_logs(name)(cx)
            })
            .in_set("gate")
            .after(["heavier"]);
        }
        b.node("after_it", Lane::FrameCritical, gated_logs("after_it"))
            .after(["gate"]);
        let mut graph = b.build().unwrap();
        let data = Gated::default();
        // Relaxed: the frame's start publishes it to the nodes.
        data.open.store(open, Ordering::Relaxed);
        for frame in 1..=3 {
            let stats = graph.run(pool(), &data).unwrap();
            if frame == 1 {
                assert_eq!(stats.sharing(), FrameSharing::HandedOver);
            } else {
                // Nodes of any time share every frame after the first.
                assert_ne!(stats.sharing(), FrameSharing::Alone);
            }
            let expected = if open {
                NodeOutcome::Ran
            } else {
                NodeOutcome::Off
            };
            for name in std::iter::once("first").chain(rest) {
                let node = graph.node_index(name).unwrap();
                assert_eq!(graph.last_frame().node(node).outcome, expected, "{name}");
            }
            let order = data.log.take();
            assert_eq!(order.len(), if open { 8 } else { 1 }, "{order:?}");
            assert_eq!(order[0], if open { "first" } else { "after_it" });
            assert_eq!(order.last(), Some(&"after_it"));
            assert_eq!(
                data.set_checks.load(Ordering::Relaxed),
                frame,
                "once per frame"
            );
        }
    }
}

/// Each checker logs its name to its node's log, then answers by frame.
fn checks(
    log: fn(&Checks) -> &Log,
    name: &'static str,
    holds: fn(u64) -> bool,
) -> impl Fn(&NodeContext<'_, Checks>) -> bool + Send + Sync + 'static {
    move |cx| {
        log(cx.data()).0.lock().unwrap().push(name);
        holds(cx.frame())
    }
}

/// The conditions each of two nodes evaluated, in order.
#[derive(Default)]
struct Checks {
    many: Log,
    one: Log,
}

/// A node's checks run in order, its sets' before its own, and stop at the
/// first that fails: for a node with one set and one condition of its own,
/// and for one with two of each.
#[test]
fn a_nodes_checks_run_in_order_and_stop_at_the_first_that_fails() {
    let mut b = TaskGraph::<Checks>::builder();
    fn many(c: &Checks) -> &Log {
        &c.many
    }
    fn one(c: &Checks) -> &Log {
        &c.one
    }
    b.set("s1").run_if(checks(many, "s1", |f| f % 5 != 1));
    b.set("s2").run_if(checks(many, "s2", |f| f % 5 != 2));
    b.set("s3").run_if(checks(one, "s3", |f| f % 2 == 0));
    b.node("many", Lane::FrameCritical, |_| {})
        .in_set("s1")
        .in_set("s2")
        .run_if(checks(many, "c1", |f| f % 5 != 3))
        .run_if(checks(many, "c2", |f| f % 5 != 4));
    b.node("one", Lane::FrameCritical, |_| {})
        .in_set("s3")
        .run_if(checks(one, "o", |f| f % 4 != 2));
    let mut graph = b.build().unwrap();
    let (many, one) = (graph.node_index("many"), graph.node_index("one"));
    let (many, one) = (many.unwrap(), one.unwrap());
    let data = Checks::default();
    for frame in 0..20u64 {
        let stats = graph.run(pool(), &data).unwrap();
        // The order among a node's sets is not promised: its sets' checks
        // come first and stop at the failing set, its own follow in order.
        let log = data.many.take();
        let sets = log.iter().take_while(|n| n.starts_with('s')).count();
        let (mut sets, own) = (log[..sets].to_vec(), &log[sets..]);
        match frame % 5 {
            1 => assert_eq!(sets.last(), Some(&"s1"), "frame {frame}: {log:?}"),
            2 => assert_eq!(sets.last(), Some(&"s2"), "frame {frame}: {log:?}"),
            _ => {}
        }
        sets.sort();
        sets.dedup();
        let failing_set_alone = matches!(frame % 5, 1 | 2) && sets.len() == 1;
        assert!(
            sets == ["s1", "s2"] || failing_set_alone,
            "frame {frame}: {log:?}"
        );
        let expected: &[&str] = match frame % 5 {
            0 | 4 => &["c1", "c2"],
            3 => &["c1"],
            _ => &[],
        };
        assert_eq!(own, expected, "frame {frame}: {log:?}");
        let ran = |yes| {
            if yes {
                NodeOutcome::Ran
            } else {
                NodeOutcome::Off
            }
        };
        assert_eq!(
            stats.node(many).outcome,
            ran(frame % 5 == 0),
            "frame {frame}"
        );
        let expected: &[&str] = if frame % 2 == 0 {
            &["s3", "o"]
        } else {
            &["s3"]
        };
        assert_eq!(data.one.take(), expected, "frame {frame}");
        let runs = frame % 2 == 0 && frame % 4 != 2;
        assert_eq!(stats.node(one).outcome, ran(runs), "frame {frame}");
    }
}

#[test]
fn toggles_turn_nodes_and_sets_off_between_frames() {
    let mut b = TaskGraph::<Log>::builder();
    b.set("debug");
    b.node("draw", Lane::Normal, logs("draw"));
    b.node("overlay", Lane::Normal, logs("overlay"))
        .in_set("debug")
        .after(["draw"]);
    b.node("present", Lane::Normal, logs("present"))
        .after(["overlay"]);
    let mut graph = b.build().unwrap();
    let overlay = graph.node_index("overlay").unwrap();
    let log = Log::default();
    assert!(graph.set_enabled("debug", false));
    let stats = graph.run(pool(), &log).unwrap();
    assert_eq!(log.take(), ["draw", "present"]);
    assert_eq!(stats.node(overlay).outcome, NodeOutcome::Off);
    assert!(graph.set_enabled("debug", true));
    assert!(graph.set_enabled("draw", false));
    graph.run(pool(), &log).unwrap();
    assert_eq!(log.take(), ["overlay", "present"]);
    assert!(!graph.set_enabled("missing", false));
}

/// A panic skips its dependents (`Skipped`, an error); a condition that
/// fails does not (`Off`, not an error).
#[test]
fn skipped_by_a_panic_and_off_are_told_apart() {
    let mut b = TaskGraph::<Log>::builder();
    b.node("boom", Lane::Normal, |_| panic!("boom"));
    b.node("after_boom", Lane::Normal, logs("after_boom"))
        .after(["boom"]);
    b.node("never", Lane::Normal, logs("never"))
        .run_if(|_| false);
    b.node("after_never", Lane::Normal, logs("after_never"))
        .after(["never"]);
    let mut graph = b.build().unwrap();
    let log = Log::default();
    let error = graph.run(pool(), &log).unwrap_err();
    assert_eq!(error.skipped, ["after_boom"]);
    assert_eq!(log.take(), ["after_never"]);
    let stats = graph.last_frame();
    let outcome = |name| stats.node(graph.node_index(name).unwrap()).outcome;
    assert_eq!(outcome("after_boom"), NodeOutcome::Skipped);
    assert_eq!(outcome("never"), NodeOutcome::Off);
    assert_eq!(outcome("after_never"), NodeOutcome::Ran);
}

/// A set's condition that panics fails every node of the set, whichever
/// evaluated it, and skips all their dependents: in a frame run alone, in
/// shared frames and in planned ones. The next frame, whose condition
/// holds, runs them all.
#[test]
fn a_panicking_set_condition_fails_every_node_of_the_set() {
    let sharing = [
        (std::time::Duration::MAX, Planning::Off),
        (std::time::Duration::ZERO, Planning::Off),
        (std::time::Duration::ZERO, Planning::Allowed),
    ];
    for (share_above, planning) in sharing {
        let mut b = TaskGraph::<Gated>::builder();
        b.share_above(share_above, std::time::Duration::ZERO)
            .planning(planning);
        b.set("gate").run_if(|cx| {
            // Relaxed: set between frames; the frame's start publishes it.
            if !cx.data().open.load(Ordering::Relaxed) {
                panic!("the gate's condition failed");
            }
            true
        });
        let members = ["a", "b", "c"];
        for name in members {
            b.node(name, Lane::FrameCritical, gated_logs(name))
                .in_set("gate");
            let after = format!("{name}2");
            b.node(after, Lane::FrameCritical, gated_logs("after"))
                .after([name]);
        }
        let mut graph = b.build().unwrap();
        let data = Gated::default();
        for frame in 0..3 {
            let open = frame == 2;
            // Relaxed: the frame's start publishes it to the nodes.
            data.open.store(open, Ordering::Relaxed);
            let result = graph.run(pool(), &data);
            let log = std::mem::take(&mut *data.log.0.lock().unwrap());
            if open {
                result.unwrap();
                assert_eq!(log.len(), 6, "{share_above:?} {planning:?}: {log:?}");
                continue;
            }
            let error = result.unwrap_err();
            let mut panicked: Vec<&str> = error.panicked.iter().map(|p| p.node.as_str()).collect();
            panicked.sort_unstable();
            assert_eq!(panicked, members, "{share_above:?} {planning:?}");
            let original = error
                .panicked
                .iter()
                .filter(|p| p.message == "the gate's condition failed")
                .count();
            assert_eq!(original, 1, "{:?}", error.panicked);
            let mut skipped = error.skipped.clone();
            skipped.sort_unstable();
            assert_eq!(skipped, ["a2", "b2", "c2"]);
            assert!(log.is_empty(), "{log:?}");
        }
    }
}

/// A set's condition that waits on the pool fails every node of the set,
/// every frame, in every way a frame runs, and the frame ends. Such a wait
/// could run another node of the set (on the frame's thread, or through a
/// stolen half on another), which waits for the condition's answer: before,
/// those shapes spun for ever. Now the wait panics at its start, before it
/// queues anything, and the set's nodes fail as for any panicking
/// condition; the evaluating node's message names the wait. In a child
/// process: a hang is killed.
#[test]
fn a_set_condition_that_waits_on_the_pool_fails_its_nodes_instead_of_hanging() {
    common::in_child_process(
        "a_set_condition_that_waits_on_the_pool_fails_its_nodes_instead_of_hanging",
        || {
            type Wait = fn(&NodeContext<'_, Gated>);
            let waits: [(&str, Wait); 5] = [
                ("`join`", |cx| {
                    assert_eq!(cx.pool().join(|| 1, || 2), (1, 2))
                }),
                ("`scope`", |cx| cx.pool().scope(|s| s.spawn(|_| ()))),
                ("`parallel_for`", |cx| {
                    cx.pool().parallel_for(0..1, 1, |_| ())
                }),
                ("`JoinHandle::join`", |cx| {
                    let task = cx.pool().spawn(Lane::Background, || ()).unwrap();
                    task.join().unwrap();
                }),
                ("`BlockingTask::wait`", |_| {
                    let io = engine_tasks::BlockingPool::new();
                    io.spawn(|| ()).unwrap().wait().unwrap();
                }),
            ];
            let sharing = [
                (std::time::Duration::MAX, Planning::Off),
                (std::time::Duration::ZERO, Planning::Off),
                (std::time::Duration::ZERO, Planning::Allowed),
            ];
            for threads in [1, 2] {
                let pool = Pool::builder().threads(threads).build().unwrap();
                for (wait_name, wait) in waits {
                    for (share_above, planning) in sharing {
                        let case =
                            format!("{wait_name}, {threads} threads, {share_above:?} {planning:?}");
                        let mut b = TaskGraph::<Gated>::builder();
                        b.share_above(share_above, std::time::Duration::ZERO)
                            .planning(planning);
                        b.set("gate").run_if(move |cx| {
                            // Relaxed: set between frames; the frame's
                            // start publishes it.
                            if cx.data().open.load(Ordering::Relaxed) {
                                wait(cx);
                            }
                            true
                        });
                        b.node("root", Lane::FrameCritical, gated_logs("root"));
                        let members = ["a", "b", "c"];
                        for name in members {
                            b.node(name, Lane::FrameCritical, gated_logs(name))
                                .in_set("gate")
                                .after(["root"]);
                            b.node(format!("{name}2"), Lane::FrameCritical, gated_logs("after"))
                                .after([name]);
                        }
                        let mut graph = b.build().unwrap();
                        let data = Gated::default();
                        for frame in 0..4 {
                            // The last frame's condition waits on nothing.
                            let waits = frame < 3;
                            // Relaxed: the frame's start publishes it.
                            data.open.store(waits, Ordering::Relaxed);
                            let result = graph.run(&pool, &data);
                            let log = std::mem::take(&mut *data.log.0.lock().unwrap());
                            if !waits {
                                result.unwrap();
                                assert_eq!(log.len(), 7, "{case}: {log:?}");
                                continue;
                            }
                            let error = result.unwrap_err();
                            let mut failed: Vec<&str> =
                                error.panicked.iter().map(|p| p.node.as_str()).collect();
                            failed.sort_unstable();
                            assert_eq!(failed, members, "{case}");
                            let refused =
                                format!("{wait_name} was called inside a set's run condition");
                            let named = error
                                .panicked
                                .iter()
                                .filter(|p| p.message.starts_with(&refused))
                                .count();
                            assert_eq!(named, 1, "{case}: {:?}", error.panicked);
                            let mut skipped = error.skipped.clone();
                            skipped.sort_unstable();
                            assert_eq!(skipped, ["a2", "b2", "c2"], "{case}");
                            assert_eq!(log, ["root"], "{case}");
                        }
                    }
                }
            }
        },
    );
}

/// Each ambiguity names its pair in the order the graph runs them, also
/// where the order derived for one pair comes from the others': `a` and
/// `b` both write `X`, `b` and `c` both write `Y`, `c` runs before `a`; the
/// derived `a` before `b` puts `c` before `b`, against declaration order.
#[test]
fn ambiguities_name_each_pair_in_the_order_it_runs() {
    struct X;
    struct Y;
    static RAN: Mutex<Vec<&str>> = Mutex::new(Vec::new());
    let logs =
        |name: &'static str| move |_: &NodeContext<'_, Resources>| RAN.lock().unwrap().push(name);
    let mut b = TaskGraph::<Resources>::builder();
    b.node("a", Lane::Normal, logs("a")).writes::<X>();
    b.node("b", Lane::Normal, logs("b"))
        .writes::<X>()
        .writes::<Y>();
    b.node("c", Lane::Normal, logs("c"))
        .writes::<Y>()
        .before(["a"]);
    let mut graph = b.build().unwrap();
    let mut resources = Resources::new();
    resources.insert(X);
    resources.insert(Y);
    graph.run(pool(), &resources).unwrap();
    let ran = std::mem::take(&mut *RAN.lock().unwrap());
    assert_eq!(ran, ["c", "a", "b"]);
    let pairs: Vec<_> = graph.ambiguities().map(|(a, b, _)| (a, b)).collect();
    assert_eq!(pairs.len(), 2, "{pairs:?}");
    for (first, second) in pairs {
        assert!(
            position(&ran, first) < position(&ran, second),
            "({first}, {second}) against {ran:?}"
        );
    }
}

struct Health(Vec<i32>);
struct Armor(i32);

/// Writers of one resource never overlap; a reader never overlaps a writer;
/// undeclared order follows declaration; no lock is taken.
#[test]
fn conflicting_accesses_never_overlap_and_follow_declaration() {
    static WRITING: AtomicBool = AtomicBool::new(false);
    static OVERLAPS: AtomicUsize = AtomicUsize::new(0);
    let mut b = TaskGraph::<Resources>::builder();
    let writer = |cx: &NodeContext<'_, Resources>| {
        if WRITING.swap(true, Ordering::SeqCst) {
            OVERLAPS.fetch_add(1, Ordering::Relaxed);
        }
        let mut health = cx.res_mut::<Health>();
        let armor = cx.res::<Armor>().0;
        for h in &mut health.0 {
            *h -= 1 + armor;
        }
        spin_for(std::time::Duration::from_micros(100));
        WRITING.store(false, Ordering::SeqCst);
    };
    for name in ["damage_a", "damage_b", "damage_c"] {
        b.node(name, Lane::FrameCritical, writer)
            .writes::<Health>()
            .reads::<Armor>();
    }
    b.node("report", Lane::FrameCritical, |cx| {
        assert!(
            !WRITING.load(Ordering::SeqCst),
            "a writer runs beside a reader"
        );
        assert!(cx.res::<Health>().0.iter().all(|&h| h <= 100));
    })
    .reads::<Health>();
    let mut graph = b.build().unwrap();
    let ambiguities: Vec<_> = graph.ambiguities().map(|(a, b, _)| (a, b)).collect();
    assert_eq!(
        ambiguities,
        [
            ("damage_a", "damage_b"),
            ("damage_a", "damage_c"),
            ("damage_a", "report"),
            ("damage_b", "damage_c"),
            ("damage_b", "report"),
            ("damage_c", "report")
        ],
        "every conflicting pair without a declared order"
    );
    let mut world = Resources::new();
    world.insert(Health(vec![100; 64]));
    world.insert(Armor(0));
    for _ in 0..20 {
        graph.run(pool(), &world).unwrap();
    }
    assert_eq!(OVERLAPS.load(Ordering::Relaxed), 0);
    assert_eq!(world.get_mut::<Health>().unwrap().0[0], 100 - 60);
}

#[test]
fn ambiguities_can_be_an_error() {
    let mut b = TaskGraph::<Resources>::builder();
    b.node("a", Lane::Normal, |_| {}).writes::<Armor>();
    b.node("b", Lane::Normal, |_| {}).reads::<Armor>();
    b.node("c", Lane::Normal, |_| {})
        .reads::<Armor>()
        .after(["a"]);
    b.ambiguities(Ambiguities::Error);
    let Err(GraphError::Ambiguous(pairs)) = b.build() else {
        panic!("not refused")
    };
    assert_eq!(pairs.len(), 1, "a-c is ordered, b-c only read: {pairs:?}");
    assert_eq!((pairs[0].0.as_str(), pairs[0].1.as_str()), ("a", "b"));
    assert!(pairs[0].2.contains("Armor"));
}

/// Access that was not declared, or a declared resource missing from the
/// frame's `Resources`, fails the node with a panic naming both.
#[test]
fn undeclared_and_missing_resources_name_the_node_and_type() {
    let mut b = TaskGraph::<Resources>::builder();
    b.node("sneaky", Lane::Normal, |cx| {
        let _ = cx.res::<Armor>();
    });
    b.node("wants_health", Lane::Normal, |cx| {
        let _ = cx.res::<Health>();
    })
    .reads::<Health>();
    b.node("reads_only", Lane::Normal, |cx| {
        cx.res_mut::<Armor>().0 = 1;
    })
    .reads::<Armor>();
    let mut graph = b.build().unwrap();
    let mut world = Resources::new();
    world.insert(Armor(3));
    let error = graph.run(pool(), &world).unwrap_err();
    let message = |node: &str| {
        error
            .panicked
            .iter()
            .find(|p| p.node == node)
            .map(|p| p.message.clone())
            .unwrap_or_else(|| panic!("{node} did not fail"))
    };
    let sneaky = message("sneaky");
    assert!(
        sneaky.contains("sneaky") && sneaky.contains("Armor"),
        "{sneaky}"
    );
    let missing = message("wants_health");
    assert!(
        missing.contains("wants_health") && missing.contains("Health"),
        "{missing}"
    );
    assert!(
        message("reads_only").contains("writes"),
        "read-only access refused a write"
    );
    assert_eq!(world.get_mut::<Armor>().unwrap().0, 3);
}

/// Two frames must not use one `Resources` at once: a graph run inside
/// another graph's node, on the same resources, is refused with an error.
/// Inside a node, borrows of one resource follow `RefCell`'s rule: guards
/// in turn are fine, a second `res_mut` beside a live guard panics, and so
/// does a `res` beside a live `res_mut`; the panic names node and type, and
/// the borrows of a panicked node are released for the next frame.
#[test]
fn borrows_inside_a_node_never_alias() {
    struct Ammo;
    struct Fuel;
    struct Map(u32);
    struct Score(u32);
    let mut resources = Resources::new();
    resources.insert(Health(vec![100]));
    resources.insert(Armor(1));
    resources.insert(Ammo);
    resources.insert(Fuel);
    let mut b = TaskGraph::<Resources>::builder();
    b.node("in_turn", Lane::Normal, |cx| {
        cx.res_mut::<Health>().0[0] -= 1;
        let first = cx.res::<Health>();
        let second = cx.res::<Health>();
        assert_eq!(first.0[0], second.0[0]);
        drop((first, second));
        cx.res_mut::<Health>().0[0] -= 1;
    })
    .writes::<Health>();
    b.node("twice_mut", Lane::Normal, |cx| {
        let _ammo = cx.res_mut::<Ammo>();
        let _again = cx.res_mut::<Ammo>();
    })
    .writes::<Ammo>();
    b.node("shared_beside_mut", Lane::Normal, |cx| {
        let _fuel = cx.res_mut::<Fuel>();
        let _read = cx.res::<Fuel>();
    })
    .writes::<Fuel>();
    b.node("mut_beside_shared", Lane::Normal, |cx| {
        let _read = cx.res::<Armor>();
        let _armor = cx.res_mut::<Armor>();
    })
    .writes::<Armor>();
    // A type declared only read has no count: guards of it live side by
    // side with the counted guards of a type written after it.
    b.node("reads_beside_writes", Lane::Normal, |cx| {
        let (first, second) = (cx.res::<Map>(), cx.res::<Map>());
        let mut score = cx.res_mut::<Score>();
        score.0 += first.0 + second.0;
        drop(score);
        let (a, b) = (cx.res::<Score>(), cx.res::<Score>());
        assert_eq!(a.0, b.0);
    })
    .reads::<Map>()
    .writes::<Score>();
    resources.insert(Map(3));
    resources.insert(Score(0));
    let mut graph = b.build().unwrap();
    for frame in 0..2 {
        let error = graph.run(pool(), &resources).unwrap_err();
        let mut messages: Vec<String> = error.panicked.iter().map(|p| p.message.clone()).collect();
        messages.sort();
        assert_eq!(
            messages,
            [
                format!(
                    "node \"mut_beside_shared\": {} is already borrowed in this node",
                    std::any::type_name::<Armor>()
                ),
                format!(
                    "node \"shared_beside_mut\": {} is already borrowed mutably in this node",
                    std::any::type_name::<Fuel>()
                ),
                format!(
                    "node \"twice_mut\": {} is already borrowed in this node",
                    std::any::type_name::<Ammo>()
                ),
            ],
            "frame {frame}"
        );
    }
    assert_eq!(resources.get_mut::<Health>().unwrap().0, [96]);
    assert_eq!(resources.get_mut::<Score>().unwrap().0, 12);
}

/// A resource type of its own per number.
struct Numbered<const N: usize>(usize);

/// A node of twenty resource types, more than count their borrows on the
/// stack: every type reaches its value, and the borrow rule holds for the
/// types past the inline ones as for the first.
#[test]
fn a_node_of_many_resource_types_keeps_each_types_borrows() {
    macro_rules! all_numbers {
        ($then:ident) => {
            $then!(0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19)
        };
    }
    let mut resources = Resources::new();
    macro_rules! insert {
        ($($n:literal)*) => { $(resources.insert(Numbered::<$n>($n));)* };
    }
    all_numbers!(insert);
    let mut b = TaskGraph::<Resources>::builder();
    // Before `many` (declaration orders the conflict): a node that only
    // reads as many types has no counts, and takes no lines from it.
    let mut reader = b.node("reads_many", Lane::Normal, |cx| {
        macro_rules! read {
            ($($n:literal)*) => { $(let _kept = cx.res::<Numbered<$n>>(); let _also = cx.res::<Numbered<$n>>();)* };
        }
        all_numbers!(read);
    });
    macro_rules! declare_read {
        ($($n:literal)*) => { $(reader = reader.reads::<Numbered<$n>>();)* };
    }
    all_numbers!(declare_read);
    let mut node = b.node("many", Lane::Normal, |cx| {
        macro_rules! bump {
            ($($n:literal)*) => { $(cx.res_mut::<Numbered<$n>>().0 += 1;)* };
        }
        all_numbers!(bump);
        let first = cx.res::<Numbered<19>>();
        let second = cx.res::<Numbered<19>>();
        assert_eq!(first.0, second.0);
        if cx.frame() % 2 == 1 {
            let _write = cx.res_mut::<Numbered<18>>();
            let _read = cx.res::<Numbered<18>>();
        }
    });
    macro_rules! declare {
        ($($n:literal)*) => { $(node = node.writes::<Numbered<$n>>();)* };
    }
    all_numbers!(declare);
    let mut graph = b.build().unwrap();
    for frame in 0..4 {
        let result = graph.run(pool(), &resources);
        if frame % 2 == 0 {
            result.unwrap();
        } else {
            let error = result.unwrap_err();
            assert_eq!(
                error.panicked[0].message,
                format!(
                    "node \"many\": {} is already borrowed mutably in this node",
                    std::any::type_name::<Numbered<18>>()
                )
            );
        }
    }
    macro_rules! check {
        ($($n:literal)*) => { $(assert_eq!(resources.get_mut::<Numbered<$n>>().unwrap().0, $n + 4);)* };
    }
    all_numbers!(check);
}

/// A node that declares reading a type its set declares writing holds the
/// write: it may take `res_mut` of it, and its borrows of it are counted.
#[test]
fn a_sets_write_makes_its_nodes_read_a_counted_write() {
    struct Tally(u32);
    let mut resources = Resources::new();
    resources.insert(Tally(0));
    let mut b = TaskGraph::<Resources>::builder();
    b.set("tallying").writes::<Tally>();
    b.node("tally", Lane::Normal, |cx| {
        cx.res_mut::<Tally>().0 += 1;
        if cx.frame() == 1 {
            let _read = cx.res::<Tally>();
            let _write = cx.res_mut::<Tally>();
        }
    })
    .reads::<Tally>()
    .in_set("tallying");
    let mut graph = b.build().unwrap();
    graph.run(pool(), &resources).unwrap();
    let error = graph.run(pool(), &resources).unwrap_err();
    assert_eq!(
        error.panicked[0].message,
        format!(
            "node \"tally\": {} is already borrowed in this node",
            std::any::type_name::<Tally>()
        )
    );
    graph.run(pool(), &resources).unwrap();
    assert_eq!(resources.get_mut::<Tally>().unwrap().0, 3);
}

/// Runs four frames of a graph whose node leaks a `ResMut` each frame and
/// borrows its type again in frame 2: only that frame fails.
fn run_leaking_frames(graph: &mut TaskGraph<Resources>, resources: &Resources) {
    for frame in 0..4 {
        let result = graph.run(pool(), resources);
        if frame == 2 {
            let error = result.unwrap_err();
            assert!(error.panicked[0]
                .message
                .ends_with("is already borrowed mutably in this node"));
        } else {
            result.unwrap();
        }
    }
}

/// Borrow counts start afresh in each run of a node: a guard leaked with
/// `mem::forget` holds its type for the rest of that run only.
#[test]
fn a_leaked_guard_holds_its_type_for_that_run_only() {
    let mut resources = Resources::new();
    resources.insert(Armor(0));
    let mut b = TaskGraph::<Resources>::builder();
    b.node("leak", Lane::Normal, |cx| {
        let mut armor = cx.res_mut::<Armor>();
        armor.0 += 1;
        std::mem::forget(armor);
        if cx.frame() == 2 {
            let _again = cx.res::<Armor>();
        }
    })
    .writes::<Armor>();
    run_leaking_frames(&mut b.build().unwrap(), &resources);
    assert_eq!(resources.get_mut::<Armor>().unwrap().0, 4);
}

/// As above, for a type past those whose counts live on the stack.
#[test]
fn a_leaked_guard_of_a_nineteenth_type_holds_it_for_that_run_only() {
    macro_rules! all_numbers {
        ($then:ident) => {
            $then!(0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18)
        };
    }
    let mut resources = Resources::new();
    macro_rules! insert {
        ($($n:literal)*) => { $(resources.insert(Numbered::<$n>(0));)* };
    }
    all_numbers!(insert);
    let mut b = TaskGraph::<Resources>::builder();
    let mut node = b.node("leak", Lane::Normal, |cx| {
        let mut last = cx.res_mut::<Numbered<18>>();
        last.0 += 1;
        std::mem::forget(last);
        if cx.frame() == 2 {
            let _again = cx.res::<Numbered<18>>();
        }
    });
    macro_rules! declare {
        ($($n:literal)*) => { $(node = node.writes::<Numbered<$n>>();)* };
    }
    all_numbers!(declare);
    run_leaking_frames(&mut b.build().unwrap(), &resources);
    assert_eq!(resources.get_mut::<Numbered<18>>().unwrap().0, 4);
}

/// Nodes see the values of the container each frame is given, after every
/// insert and removal between frames: two containers in turn, a value
/// replaced, a value removed (the node then fails naming it).
#[test]
fn nodes_see_each_frames_container_and_its_changes() {
    struct Seen(Mutex<Vec<i32>>);
    let seen = std::sync::Arc::new(Seen(Mutex::new(Vec::new())));
    let mut b = TaskGraph::<Resources>::builder();
    let log = seen.clone();
    b.node("look", Lane::Normal, move |cx| {
        let armor = cx.res::<Armor>().0;
        log.0.lock().unwrap().push(armor);
    })
    .reads::<Armor>();
    let mut graph = b.build().unwrap();
    let (mut first, mut second) = (Resources::new(), Resources::new());
    first.insert(Armor(1));
    second.insert(Armor(2));
    graph.run(pool(), &first).unwrap();
    graph.run(pool(), &second).unwrap();
    graph.run(pool(), &first).unwrap();
    first.insert(Armor(3));
    graph.run(pool(), &first).unwrap();
    first.remove::<Armor>();
    let error = graph.run(pool(), &first).unwrap_err();
    assert!(error.panicked[0]
        .message
        .contains("is declared but not in the frame's Resources"));
    first.insert(Armor(4));
    graph.run(pool(), &first).unwrap();
    assert_eq!(*seen.0.lock().unwrap(), [1, 2, 1, 3, 4]);
}

#[test]
fn a_second_frame_on_the_same_resources_is_refused() {
    struct Counter(u32);
    let mut inner = TaskGraph::<Resources>::builder();
    inner
        .node("inner", Lane::Normal, |cx| cx.res_mut::<Counter>().0 += 1)
        .writes::<Counter>();
    let inner = std::sync::Arc::new(Mutex::new(inner.build().unwrap()));
    let refused = std::sync::Arc::new(AtomicBool::new(false));
    let mut outer = TaskGraph::<Resources>::builder();
    let (in_node, refused_in_node) = (inner.clone(), refused.clone());
    outer
        .node("outer", Lane::Normal, move |cx| {
            let error = in_node
                .lock()
                .unwrap()
                .run(cx.pool(), cx.data())
                .unwrap_err();
            assert!(error.resources_in_use);
            refused_in_node.store(true, Ordering::Relaxed);
        })
        .reads::<Counter>();
    let mut outer = outer.build().unwrap();
    let mut world = Resources::new();
    world.insert(Counter(0));
    outer.run(pool(), &world).unwrap();
    // The claim is released: the inner graph runs on its own.
    inner.lock().unwrap().run(pool(), &world).unwrap();
    assert_eq!(world.get_mut::<Counter>().unwrap().0, 1);
    assert!(refused.load(Ordering::Relaxed));
}

/// An ECS's own component ids feed the same conflict rules: here a stand-in
/// for an ECS (such as hecs) whose component ids are plain numbers.
#[test]
fn plain_ids_from_an_ecs_order_conflicting_nodes() {
    const POSITION: AccessId = AccessId::from_raw(1);
    const VELOCITY: AccessId = AccessId::from_raw(2);
    struct Ecs {
        writing_position: AtomicBool,
        overlaps: AtomicUsize,
    }
    let mut b = TaskGraph::<Ecs>::builder();
    let writer = |cx: &NodeContext<'_, Ecs>| {
        let ecs = cx.data();
        if ecs.writing_position.swap(true, Ordering::SeqCst) {
            ecs.overlaps.fetch_add(1, Ordering::Relaxed);
        }
        spin_for(std::time::Duration::from_micros(50));
        ecs.writing_position.store(false, Ordering::SeqCst);
    };
    b.node("integrate", Lane::Normal, writer)
        .writes_id(POSITION, "Position")
        .reads_id(VELOCITY, "Velocity");
    b.node("collide", Lane::Normal, writer)
        .writes_id(POSITION, "Position");
    b.node("steer", Lane::Normal, |_| {})
        .writes_id(VELOCITY, "Velocity");
    let mut graph = b.build().unwrap();
    let pairs: Vec<_> = graph.ambiguities().collect();
    assert_eq!(
        pairs,
        [
            ("integrate", "collide", "Position"),
            ("integrate", "steer", "Velocity")
        ]
    );
    let ecs = Ecs {
        writing_position: AtomicBool::new(false),
        overlaps: AtomicUsize::new(0),
    };
    for _ in 0..20 {
        graph.run(pool(), &ecs).unwrap();
    }
    assert_eq!(ecs.overlaps.load(Ordering::Relaxed), 0);
}

/// A graph rebuilt every frame with a different number of passes: each
/// frame runs the passes it was built with, in order.
#[test]
fn a_builder_rebuilds_a_graph_every_frame() {
    let mut b = TaskGraph::<Log>::builder();
    let mut graph = TaskGraph::<Log>::builder().build().unwrap();
    let log = Log::default();
    const PASSES: [&str; 6] = ["p0", "p1", "p2", "p3", "p4", "p5"];
    for frame in 0..30usize {
        let passes = 1 + frame % PASSES.len();
        for (i, &name) in PASSES[..passes].iter().enumerate() {
            let node = b.node(name, Lane::FrameCritical, logs(name));
            if i > 0 {
                node.after([PASSES[i - 1]]);
            }
        }
        b.build_into(&mut graph).unwrap();
        assert_eq!(graph.len(), passes);
        graph.run(pool(), &log).unwrap();
        assert_eq!(log.take(), PASSES[..passes]);
    }
    // A bad build leaves the graph as it was.
    b.node("loop", Lane::Normal, logs("loop")).after(["loop"]);
    assert!(b.build_into(&mut graph).is_err());
    graph.run(pool(), &log).unwrap();
    assert_eq!(log.take().len(), graph.len());
}

/// A build that fails late (its names were indexed, its sets worked out,
/// before the ambiguity check refused it) leaves the graph it was to
/// replace as it was: its nodes, its names for toggles, its sets.
#[test]
fn a_failed_build_leaves_the_graph_and_its_names_as_they_were() {
    let mut b = TaskGraph::<Log>::builder();
    b.set("debug");
    b.node("draw", Lane::Normal, logs("draw"));
    b.node("overlay", Lane::Normal, logs("overlay"))
        .in_set("debug")
        .after(["draw"]);
    let mut graph = b.build().unwrap();
    let mut b = TaskGraph::<Log>::builder();
    b.ambiguities(Ambiguities::Error);
    b.set("other");
    for name in ["a", "b", "c", "d"] {
        b.node(name, Lane::Normal, logs(name))
            .in_set("other")
            .writes_id(AccessId::from_raw(1), "target");
    }
    assert!(matches!(
        b.build_into(&mut graph),
        Err(GraphError::Ambiguous(_))
    ));
    assert_eq!(graph.len(), 2);
    assert_eq!(graph.node_index("overlay"), Some(1));
    assert!(!graph.set_enabled("other", false));
    assert!(graph.set_enabled("debug", false));
    let log = Log::default();
    graph.run(pool(), &log).unwrap();
    assert_eq!(log.take(), ["draw"]);
    assert!(graph.set_enabled("debug", true));
    graph.run(pool(), &log).unwrap();
    assert_eq!(log.take(), ["draw", "overlay"]);
}

/// A build that repeats the builder's last (same names, orderings, sets
/// and condition owners) swaps in the new closures and conditions and
/// turns every toggle back on, exactly as a build of another shape does.
#[test]
fn a_build_of_the_same_shape_runs_the_new_closures() {
    let mut b = TaskGraph::<Log>::builder();
    let mut graph = TaskGraph::<Log>::builder().build().unwrap();
    let log = Log::default();
    let fill = |b: &mut engine_tasks::TaskGraphBuilder<Log>, round: u64| {
        let tag: &'static str = ["first", "second", "third"][round as usize];
        b.set("debug");
        b.node("draw", Lane::FrameCritical, move |cx| {
            cx.data().0.lock().unwrap().push(tag)
        });
        b.node("overlay", Lane::FrameCritical, logs("overlay"))
            .in_set("debug")
            .after(["draw"])
            .run_if(move |_| round != 1);
    };
    for round in 0..3 {
        fill(&mut b, round);
        b.build_into(&mut graph).unwrap();
        graph.run(pool(), &log).unwrap();
        let expected: &[&str] = match round {
            0 => &["first", "overlay"],
            1 => &["second"],
            _ => &["third", "overlay"],
        };
        assert_eq!(log.take(), expected);
        // Off until the next build.
        assert!(graph.set_enabled("debug", false));
        graph.run(pool(), &log).unwrap();
        assert_eq!(log.take().len(), 1);
    }
}

/// In frames run alone, light nodes share clock reads; a light node that
/// turns heavy is timed by itself from the frame after, so the frame's
/// statistics put its time on it and not on its neighbours.
#[test]
fn a_light_node_that_turns_heavy_is_timed_alone() {
    let heavy = AtomicBool::new(false);
    let mut b = TaskGraph::<AtomicBool>::builder();
    for (i, &name) in ["n0", "n1", "n2", "n3", "n4", "n5", "n6", "n7"]
        .iter()
        .enumerate()
    {
        let node = b.node(name, Lane::FrameCritical, move |cx| {
            if i == 5 && cx.data().load(Ordering::Relaxed) {
                spin_for(std::time::Duration::from_millis(2));
            }
        });
        if i > 0 {
            node.after([["n0", "n1", "n2", "n3", "n4", "n5", "n6", "n7"][i - 1]]);
        }
    }
    // Keep every frame on this thread, however heavy.
    b.share_above(std::time::Duration::MAX, std::time::Duration::MAX);
    let mut graph = b.build().unwrap();
    let solo = Pool::builder().threads(0).build().unwrap();
    for _ in 0..20 {
        graph.run(&solo, &heavy).unwrap();
    }
    heavy.store(true, Ordering::Relaxed);
    // The first heavy frame may smear node 5 over its run; after that it
    // is timed alone. A preempted neighbour could look heavy in one frame,
    // so most of the frames after, not all, must show it.
    graph.run(&solo, &heavy).unwrap();
    let mut clean = 0;
    for _ in 0..5 {
        let stats = graph.run(&solo, &heavy).unwrap();
        let five = stats.node(5).duration;
        assert!(five >= std::time::Duration::from_millis(2));
        let others: std::time::Duration = (0..8)
            .filter(|&i| i != 5)
            .map(|i| stats.node(i).duration)
            .sum();
        clean += usize::from(others < five / 4);
    }
    assert!(clean >= 3, "node 5 timed alone in {clean} of 5 frames");
}

/// Random graphs with sets (nested and empty ones too), run conditions and
/// declared accesses: every ordering (declared, through sets, or derived
/// from accesses) holds, conflicting nodes never overlap, and every node
/// either ran once or was reported off.
#[test]
fn random_graphs_with_sets_conditions_and_accesses() {
    let mut rng = 0x2545_F491_4F6C_DD1Du64;
    let mut next = move |n: u64| {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng % n
    };
    const NAMES: [&str; 24] = [
        "n0", "n1", "n2", "n3", "n4", "n5", "n6", "n7", "n8", "n9", "n10", "n11", "n12", "n13",
        "n14", "n15", "n16", "n17", "n18", "n19", "n20", "n21", "n22", "n23",
    ];
    const SETS: [&str; 5] = ["s0", "s1", "s2", "s3", "s4"];
    struct State {
        started: Vec<AtomicU32>,
        finished: Vec<AtomicU32>,
        writing: [AtomicU32; 3],
        readers: [AtomicU32; 3],
        violations: AtomicUsize,
        /// A step counter, and each node's steps at its last start and end.
        step: AtomicU64,
        start_step: Vec<AtomicU64>,
        end_step: Vec<AtomicU64>,
    }
    for _ in 0..120 {
        let n = 4 + next(20) as usize;
        let mut b = TaskGraph::<State>::builder();
        // Sets: each may be inside an earlier one, ordered after an earlier
        // one, conditioned, or left empty.
        for s in 0..SETS.len() {
            let set = b.set(SETS[s]);
            let set = if s > 0 && next(3) == 0 {
                set.in_set(SETS[next(s as u64) as usize])
            } else {
                set
            };
            let set = if s > 0 && next(3) == 0 {
                set.after([SETS[next(s as u64) as usize]])
            } else {
                set
            };
            if next(4) == 0 {
                set.run_if(|cx| cx.frame() % 2 == 0);
            }
        }
        // Declared edges, recorded to check: (before, after) node pairs.
        let mut edges: Vec<(usize, usize)> = Vec::new();
        for (i, &name) in NAMES[..n].iter().enumerate() {
            let mut access: Vec<(usize, bool)> = Vec::new();
            for r in 0..3 {
                if next(3) == 0 {
                    access.push((r, next(2) == 0));
                }
            }
            let body = {
                let access = access.clone();
                move |cx: &NodeContext<'_, State>| {
                    let state = cx.data();
                    let step = state.step.fetch_add(1, Ordering::SeqCst);
                    state.start_step[i].store(step, Ordering::SeqCst);
                    for &(r, write) in &access {
                        if write {
                            if state.writing[r].swap(1, Ordering::SeqCst) != 0
                                || state.readers[r].load(Ordering::SeqCst) != 0
                            {
                                state.violations.fetch_add(1, Ordering::Relaxed);
                            }
                        } else {
                            state.readers[r].fetch_add(1, Ordering::SeqCst);
                            if state.writing[r].load(Ordering::SeqCst) != 0 {
                                state.violations.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                    }
                    state.started[i].fetch_add(1, Ordering::SeqCst);
                    spin_for(std::time::Duration::from_micros(5));
                    for &(r, write) in &access {
                        if write {
                            state.writing[r].store(0, Ordering::SeqCst);
                        } else {
                            state.readers[r].fetch_sub(1, Ordering::SeqCst);
                        }
                    }
                    let step = state.step.fetch_add(1, Ordering::SeqCst);
                    state.end_step[i].store(step, Ordering::SeqCst);
                    state.finished[i].fetch_add(1, Ordering::SeqCst);
                }
            };
            let mut node = b.node(name, Lane::FrameCritical, body);
            if i > 0 && next(2) == 0 {
                let d = next(i as u64) as usize;
                edges.push((d, i));
                node = node.after([NAMES[d]]);
            }
            if next(3) == 0 {
                node = node.in_set(SETS[next(SETS.len() as u64) as usize]);
            }
            if next(5) == 0 {
                node = node.run_if(|cx| cx.frame() % 3 != 1);
            }
            for &(r, write) in &access {
                let id = AccessId::from_raw(100 + r as u64);
                node = if write {
                    node.writes_id(id, "r")
                } else {
                    node.reads_id(id, "r")
                };
            }
        }
        let mut graph = match b.build() {
            Ok(graph) => graph,
            // A random set hierarchy may cross its own orderings.
            Err(GraphError::Cycle(_)) => continue,
            Err(other) => panic!("{other}"),
        };
        let state = State {
            started: (0..n).map(|_| AtomicU32::new(0)).collect(),
            finished: (0..n).map(|_| AtomicU32::new(0)).collect(),
            writing: Default::default(),
            readers: Default::default(),
            violations: AtomicUsize::new(0),
            step: AtomicU64::new(0),
            start_step: (0..n).map(|_| AtomicU64::new(0)).collect(),
            end_step: (0..n).map(|_| AtomicU64::new(0)).collect(),
        };
        let mut ran = vec![0u32; n];
        for _ in 0..4 {
            let stats = graph.run(pool(), &state).unwrap();
            for (i, ran) in ran.iter_mut().enumerate() {
                match stats.node(i).outcome {
                    NodeOutcome::Ran => *ran += 1,
                    NodeOutcome::Off => {}
                    other => panic!("node {i}: {other:?}"),
                }
                // Ran exactly once in each frame it is reported to have run.
                assert_eq!(state.finished[i].load(Ordering::SeqCst), *ran);
                assert_eq!(state.started[i].load(Ordering::SeqCst), *ran);
            }
            for &(d, i) in &edges {
                let (a, b) = (stats.node(d), stats.node(i));
                if a.outcome == NodeOutcome::Ran && b.outcome == NodeOutcome::Ran {
                    let ended = state.end_step[d].load(Ordering::SeqCst);
                    let started = state.start_step[i].load(Ordering::SeqCst);
                    assert!(ended < started, "{d} before {i}");
                }
            }
        }
        assert_eq!(state.violations.load(Ordering::Relaxed), 0);
    }
}

/// Names `{prefix}{chain}_{link}` for `chains` chains of `links` nodes,
/// chain after chain, leaked for `'static` node names.
fn chain_names(prefix: &str, chains: usize, links: usize) -> Vec<&'static str> {
    (0..chains * links)
        .map(|i| &*Box::leak(format!("{prefix}{}_{}", i / links, i % links).into_boxed_str()))
        .collect()
}

/// Checks a frame's `log` of the chains of `chain_names`, `links` nodes
/// each: every node ran once, after the one before it in its chain.
fn chains_ran_once_in_order(log: &[&str], names: &[&str], links: usize, frame: usize) {
    assert_eq!(log.len(), names.len(), "frame {frame}: {log:?}");
    for (i, &name) in names.iter().enumerate() {
        assert_eq!(log.iter().filter(|&&n| n == name).count(), 1, "{name}");
        if i % links != 0 {
            assert!(position(log, names[i - 1]) < position(log, name));
        }
    }
}

/// Planned frames after a sleep prefetch along each walker's list: every
/// node still runs once per frame, after its dependency, on lists longer
/// than the prefetch distance.
#[test]
fn planned_frames_after_a_sleep_run_every_node_once_in_order() {
    const CHAINS: usize = 4;
    const LINKS: usize = 24;
    static NAMES: OnceLock<Vec<&'static str>> = OnceLock::new();
    let names = NAMES.get_or_init(|| chain_names("p", CHAINS, LINKS));
    let mut b = TaskGraph::<Log>::builder();
    b.share_above(std::time::Duration::ZERO, std::time::Duration::ZERO)
        .planning(Planning::Allowed);
    for (i, &name) in names.iter().enumerate() {
        let node = b.node(name, Lane::FrameCritical, move |cx| {
            spin_for(std::time::Duration::from_micros(2));
            cx.data().0.lock().unwrap().push(name);
        });
        if i % LINKS != 0 {
            node.after([names[i - 1]]);
        }
    }
    let mut graph = b.build().unwrap();
    let pool = Pool::builder().threads(1).build().unwrap();
    let mut planned = 0;
    for frame in 0..30 {
        // Past the pool's idle gap: this frame's caches count as cold.
        std::thread::sleep(std::time::Duration::from_millis(1));
        let log = Log::default();
        let stats = graph.run(&pool, &log).unwrap();
        planned += usize::from(stats.sharing() == FrameSharing::Planned);
        chains_ran_once_in_order(&log.take(), names, LINKS, frame);
    }
    // The first frame runs alone; every later one is shared and planned.
    assert_eq!(planned, 29);
}

/// Frames after a sleep prefetch each node's rules too: with a condition
/// on every node and on two sets, and declared access on every node, each
/// node runs exactly when its conditions hold, and reads its resource.
#[test]
fn gated_frames_after_a_sleep_apply_every_rule() {
    const CHAINS: usize = 4;
    const LINKS: usize = 24;
    static NAMES: OnceLock<Vec<&'static str>> = OnceLock::new();
    let names = NAMES.get_or_init(|| chain_names("g", CHAINS, LINKS));
    let runs: &'static [AtomicU64] =
        Box::leak((0..names.len()).map(|_| AtomicU64::new(0)).collect());
    let mut b = TaskGraph::<Resources>::builder();
    b.set("even").run_if(|cx| cx.frame() % 2 == 0);
    b.set("any").run_if(|_| true);
    for (i, &name) in names.iter().enumerate() {
        let node = b
            .node(name, Lane::FrameCritical, move |cx| {
                assert_eq!(cx.res::<Armor>().0, 5);
                runs[i].fetch_add(1, Ordering::Relaxed);
            })
            .in_set(if i % 3 == 0 { "even" } else { "any" })
            .run_if(move |cx| (cx.frame() as usize + i) % 5 != 0)
            .reads::<Armor>()
            .writes_id(AccessId::from_raw(i as u64), "own");
        if i % LINKS != 0 {
            node.after([names[i - 1]]);
        }
    }
    let mut graph = b.build().unwrap();
    let mut resources = Resources::new();
    resources.insert(Armor(5));
    let pool = Pool::builder().threads(1).build().unwrap();
    for frame in 0..20u64 {
        // Past the pool's idle gap: this frame's caches count as cold.
        std::thread::sleep(std::time::Duration::from_millis(1));
        let before: Vec<u64> = runs.iter().map(|r| r.load(Ordering::Relaxed)).collect();
        let stats = graph.run(&pool, &resources).unwrap();
        for i in 0..names.len() {
            let runs_now = (frame % 2 == 0 || i % 3 != 0) && (frame as usize + i) % 5 != 0;
            let expected = if runs_now {
                NodeOutcome::Ran
            } else {
                NodeOutcome::Off
            };
            assert_eq!(stats.node(i).outcome, expected, "frame {frame}, node {i}");
            let ran = runs[i].load(Ordering::Relaxed) - before[i];
            assert_eq!(ran, u64::from(runs_now), "frame {frame}, node {i}");
        }
    }
}

/// Frames that follow an idle gap of the pool (a paced loop's sleep) run
/// alone with what their next nodes read prefetched: every node still runs
/// once per frame after its dependencies, whether the frame stays alone or
/// hands the rest over once a node turns heavy.
#[test]
fn light_frames_after_a_sleep_run_every_node_once_in_order() {
    const CHAINS: usize = 5;
    const LINKS: usize = 8;
    static NAMES: OnceLock<Vec<&'static str>> = OnceLock::new();
    let names = NAMES.get_or_init(|| chain_names("c", CHAINS, LINKS));
    let heavy = AtomicUsize::new(usize::MAX);
    let mut b = TaskGraph::<(Log, &AtomicUsize)>::builder();
    for (i, &name) in names.iter().enumerate() {
        let node = b.node(name, Lane::FrameCritical, move |cx| {
            let (log, heavy) = cx.data();
            if heavy.load(Ordering::Relaxed) == i {
                spin_for(std::time::Duration::from_micros(300));
            }
            log.0.lock().unwrap().push(name);
        });
        if i % LINKS != 0 {
            node.after([names[i - 1]]);
        }
    }
    let mut graph = b.build().unwrap();
    let pool = Pool::builder().threads(1).build().unwrap();
    for frame in 0..30 {
        // Past the pool's idle gap: this frame's caches count as cold.
        std::thread::sleep(std::time::Duration::from_millis(1));
        heavy.store(
            if frame % 10 == 9 { 3 } else { usize::MAX },
            Ordering::Relaxed,
        );
        let data = (Log::default(), &heavy);
        graph.run(&pool, &data).unwrap();
        chains_ran_once_in_order(&data.0.take(), names, LINKS, frame);
    }
}

//! Graphs built every frame by one builder: a build that repeats the
//! builder's last one only swaps the closures in, any other compiles. Either
//! way the graph must run exactly as the same fill built afresh. Each round
//! changes one input of the fill (a name, a lane, an ordering, a
//! membership, an access, a condition, the node count, an option) at a
//! random place, or repeats the fill, or makes it invalid; the graph the
//! builder builds into is compared with a graph built from scratch.

use engine_tasks::graph::{AccessId, NodeOutcome};
use engine_tasks::{
    GraphError, Lane, NodeClock, NodeContext, Pool, ReadyOrder, TaskGraph, TaskGraphBuilder,
};
use std::sync::Mutex;
use std::time::Duration;

/// The frame's log of which nodes ran, in order.
type Log = Mutex<Vec<&'static str>>;

const NAMES: [&str; 16] = [
    "n0", "n1", "n2", "n3", "n4", "n5", "n6", "n7", "n8", "n9", "n10", "n11", "n12", "n13", "n14",
    "n15",
];
const SETS: [&str; 3] = ["early", "middle", "late"];

/// One node of a fill.
#[derive(Clone, Debug)]
struct NodeDesc {
    name: &'static str,
    lane: Lane,
    /// Orderings: after (`true`) or before each named node.
    orders: Vec<(bool, &'static str)>,
    sets: Vec<&'static str>,
    /// A run condition, and whether it holds (a closure's value: not part
    /// of the shape).
    condition: Option<bool>,
    writes: Option<u64>,
}

/// A whole fill: nodes, the sets' order, and an option.
#[derive(Clone, Debug)]
struct Desc {
    nodes: Vec<NodeDesc>,
    /// `late` after `middle` after `early`, or no set ordering.
    ordered_sets: bool,
    /// Critical path first or FIFO. No graph is timed, so that critical
    /// path first ranks by the number of nodes after each, the same in a
    /// fresh graph as in one that ran before.
    critical_path: bool,
    /// A set of no node, if any (only its name shows: it can be toggled).
    spare_set: Option<&'static str>,
    /// Whether set `late` has a run condition that fails, so that its
    /// members show as off.
    late_off: bool,
}

/// A small xorshift generator: the test is the same on every run.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }
}

/// Node `index` of `rank.len()`, ordered after nodes of lower rank and
/// before nodes of higher rank: acyclic, and unlike the order the nodes
/// are declared in, so that every ordering shows in the order they run.
fn random_node(rng: &mut Rng, index: usize, rank: &[usize]) -> NodeDesc {
    let orders = (0..rng.below(4))
        .map(|_| rng.below(rank.len()))
        .filter(|&j| j != index)
        .map(|j| (rank[j] < rank[index], NAMES[j]))
        .collect();
    NodeDesc {
        name: NAMES[index],
        lane: [Lane::FrameCritical, Lane::Normal][rng.below(2)],
        orders,
        sets: (0..rng.below(2)).map(|_| SETS[rng.below(3)]).collect(),
        condition: [None, Some(true), Some(false)][rng.below(3)],
        writes: [None, Some(1), Some(2)][rng.below(3)],
    }
}

fn random_desc(rng: &mut Rng) -> Desc {
    let n = 4 + rng.below(8);
    let mut rank: Vec<usize> = (0..n).collect();
    for i in (1..n).rev() {
        rank.swap(i, rng.below(i + 1));
    }
    Desc {
        nodes: (0..n).map(|i| random_node(rng, i, &rank)).collect(),
        ordered_sets: rng.below(2) == 0,
        critical_path: false,
        spare_set: [None, Some("spare"), Some("extra")][rng.below(3)],
        late_off: rng.below(2) == 0,
    }
}

/// `desc` with one change; what it changed, for the failure message.
fn mutate(desc: &mut Desc, rng: &mut Rng) -> &'static str {
    let n = desc.nodes.len();
    let k = rng.below(n);
    let node = &mut desc.nodes[k];
    match rng.below(18) {
        0 => "nothing",
        1 => {
            // A name no other node has (an ordering naming the old one is
            // then an error).
            node.name = NAMES[n..].first().copied().unwrap_or("renamed");
            "a name"
        }
        2 => {
            node.lane = if node.lane == Lane::Normal {
                Lane::FrameCritical
            } else {
                Lane::Normal
            };
            "a lane"
        }
        3 => {
            // May close a cycle: an error, as for a fresh build.
            node.orders.push((rng.below(2) == 0, NAMES[rng.below(n)]));
            "an ordering added"
        }
        4 => {
            node.orders.pop();
            "an ordering removed"
        }
        5 => {
            node.sets.push(SETS[rng.below(3)]);
            "a membership"
        }
        6 => {
            node.condition = match node.condition {
                None => Some(true),
                Some(_) => None,
            };
            "a condition added or removed"
        }
        7 => {
            node.condition = node.condition.map(|holds| !holds);
            "a condition's value (a closure, not the shape)"
        }
        8 => {
            node.writes = match node.writes {
                Some(1) => Some(2),
                Some(_) => None,
                None => Some(1),
            };
            "an access"
        }
        9 if n < NAMES.len() => {
            // Ranked last or first: still acyclic.
            let rank: Vec<usize> = (0..=n)
                .map(|j| if j == n { n * (k % 2) } else { 1 })
                .collect();
            let added = random_node(rng, n, &rank);
            desc.nodes.push(added);
            "a node added"
        }
        10 if n > 1 => {
            desc.nodes.pop();
            "the last node removed"
        }
        11 => {
            desc.ordered_sets = !desc.ordered_sets;
            "the sets' ordering"
        }
        12 if !node.orders.is_empty() => {
            // May close a cycle.
            let at = rng.below(node.orders.len());
            node.orders[at].0 = !node.orders[at].0;
            "an ordering's direction"
        }
        13 => {
            desc.spare_set = match desc.spare_set {
                None => Some("spare"),
                Some("spare") => Some("extra"),
                Some(_) => None,
            };
            desc.late_off ^= k % 2 == 0;
            "a set of no node, or the condition of set late"
        }
        // The last input of a kind in the whole fill: only the count of
        // those inputs changes.
        14 => trim(desc, |n| n.orders.pop().is_some(), "the last ordering"),
        15 => trim(desc, |n| n.sets.pop().is_some(), "the last membership"),
        16 => trim(desc, |n| n.writes.take().is_some(), "the last access"),
        17 => trim(desc, |n| n.condition.take().is_some(), "the last condition"),
        _ => {
            desc.critical_path = !desc.critical_path;
            "the options"
        }
    }
}

/// Removes an input from the last node that has one: `remove` says whether
/// it had.
fn trim(
    desc: &mut Desc,
    remove: impl Fn(&mut NodeDesc) -> bool,
    what: &'static str,
) -> &'static str {
    for node in desc.nodes.iter_mut().rev() {
        if remove(node) {
            return what;
        }
    }
    "nothing"
}

fn fill(builder: &mut TaskGraphBuilder<Log>, desc: &Desc) {
    if let Some(spare) = desc.spare_set {
        builder.set(spare);
    }
    if desc.late_off {
        builder.set("late").run_if(|_| false);
    }
    if desc.ordered_sets {
        builder.set("middle").after(["early"]);
        builder.set("late").after(["middle"]);
    }
    let order = if desc.critical_path {
        ReadyOrder::CriticalPathFirst
    } else {
        ReadyOrder::Fifo
    };
    // Every frame alone: a frame shared through the queues (chosen by the
    // time earlier frames took) would run by lane, not in one order.
    builder
        .ready_order(order)
        .node_clock(NodeClock::Off)
        .share_above(Duration::MAX, Duration::MAX);
    for node in &desc.nodes {
        let name = node.name;
        let mut added = builder.node(name, node.lane, move |cx: &NodeContext<'_, Log>| {
            cx.data().lock().unwrap().push(name)
        });
        for &(after, other) in &node.orders {
            added = if after {
                added.after([other])
            } else {
                added.before([other])
            };
        }
        for &set in &node.sets {
            added = added.in_set(set);
        }
        if let Some(holds) = node.condition {
            added = added.run_if(move |_| holds);
        }
        if let Some(id) = node.writes {
            added.writes_id(AccessId::from_raw(id), "target");
        }
    }
}

/// What a graph shows of itself and of one frame on one thread: its node
/// names, which spare sets it has, the order its nodes ran in and their
/// outcomes.
type Seen = (Vec<String>, [bool; 2], Vec<&'static str>, Vec<NodeOutcome>);

fn observe(graph: &mut TaskGraph<Log>, pool: &Pool) -> Seen {
    let names = (0..graph.len())
        .map(|i| graph.node_name(i).to_owned())
        .collect();
    let spare = ["spare", "extra"].map(|set| graph.set_enabled(set, true));
    let log = Log::default();
    let stats = graph.run(pool, &log).unwrap();
    let outcomes = stats.nodes().map(|n| n.outcome).collect();
    (names, spare, log.into_inner().unwrap(), outcomes)
}

fn kind(error: &GraphError) -> std::mem::Discriminant<GraphError> {
    std::mem::discriminant(error)
}

#[test]
fn builds_that_repeat_the_last_in_part_run_as_fresh_builds() {
    // No worker: the frame's thread runs every node, in a fixed order.
    let pool = Pool::builder().threads(0).build().unwrap();
    let mut rng = Rng(0x5eed_cafe_f00d);
    let mut builder = TaskGraph::<Log>::builder();
    let mut graph = TaskGraph::<Log>::builder().build().unwrap();
    let mut desc = random_desc(&mut rng);
    // Now and then the builder builds into another graph: the next build
    // into `graph`, even of the same fill, must compile again.
    let mut other = TaskGraph::<Log>::builder().build().unwrap();
    // What `graph` holds: the last fill that built.
    let mut held = None::<Desc>;
    // Under Miri (`tools/miri`), fewer: they still make every kind of
    // change but the options, and both ways of building.
    let rounds = if cfg!(miri) { 100 } else { 2_000 };
    for round in 0..rounds {
        if rng.below(8) == 0 {
            // Another fill into the other graph, then the same into
            // `graph`: the builder's last build, but not the one `graph`
            // holds.
            mutate(&mut desc, &mut rng);
            fill(&mut builder, &desc);
            if builder.build_into(&mut other).is_ok() {
                let _ = observe(&mut other, &pool);
            }
        }
        let change = if rng.below(3) == 0 {
            desc = random_desc(&mut rng);
            "a new graph"
        } else {
            mutate(&mut desc, &mut rng)
        };
        fill(&mut builder, &desc);
        let built = builder.build_into(&mut graph);
        let mut fresh = TaskGraph::<Log>::builder();
        fill(&mut fresh, &desc);
        let fresh = fresh.build();
        let context = format!("round {round}, after {change}: {desc:?}");
        match (built, fresh) {
            (Ok(()), Ok(mut fresh)) => {
                let ours = observe(&mut graph, &pool);
                assert_eq!(ours, observe(&mut fresh, &pool), "{context}");
                held = Some(desc.clone());
            }
            (Err(ours), Err(theirs)) => {
                assert_eq!(kind(&ours), kind(&theirs), "{context}");
                // The graph is left as it was.
                if let Some(held) = &held {
                    let mut again = TaskGraph::<Log>::builder();
                    fill(&mut again, held);
                    let mut again = again.build().unwrap();
                    assert_eq!(
                        observe(&mut graph, &pool),
                        observe(&mut again, &pool),
                        "{context}"
                    );
                }
                // Back to the fill the graph holds, or to a new one.
                desc = held.clone().unwrap_or_else(|| random_desc(&mut rng));
            }
            (ours, theirs) => panic!("{context}: {ours:?} against {:?}", theirs.err()),
        }
    }
}

/// Panics when dropped, if armed.
struct PanicsOnDrop(bool);

impl Drop for PanicsOnDrop {
    fn drop(&mut self) {
        if self.0 {
            panic!("a node's closure panicked as it was dropped");
        }
    }
}

/// A build that repeats the last swaps the closures in and drops the
/// replaced ones. Should one's drop panic, the panic reaches the caller of
/// `build_into`, and the builder is left empty: the next fill builds the
/// graph it describes, nothing of the interrupted fill added to it (its
/// condition, which fails, would turn `b` off).
#[test]
fn a_closure_that_panics_as_it_is_replaced_leaves_the_builder_empty() {
    let pool = Pool::builder().threads(0).build().unwrap();
    let mut builder = TaskGraph::<Log>::builder();
    let mut graph = TaskGraph::<Log>::builder().build().unwrap();
    let fill = |builder: &mut TaskGraphBuilder<Log>, tag: &'static str, armed: bool| {
        let guard = PanicsOnDrop(armed);
        builder.node("a", Lane::FrameCritical, move |cx| {
            let _ = &guard;
            cx.data().lock().unwrap().push(tag)
        });
        builder
            .node("b", Lane::FrameCritical, move |cx| {
                cx.data().lock().unwrap().push(tag)
            })
            .after(["a"])
            .run_if(move |_| tag != "second");
    };
    let log = Log::default();
    fill(&mut builder, "first", true);
    builder.build_into(&mut graph).unwrap();
    graph.run(&pool, &log).unwrap();
    // The same shape: the first fill's closure of `a` is dropped, and
    // panics.
    fill(&mut builder, "second", false);
    let built = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        builder.build_into(&mut graph)
    }));
    assert!(built.is_err(), "the drop's panic reaches the caller");
    fill(&mut builder, "third", false);
    builder.build_into(&mut graph).unwrap();
    assert_eq!(graph.len(), 2);
    graph.run(&pool, &log).unwrap();
    assert_eq!(*log.lock().unwrap(), ["first", "first", "third", "third"]);
}

/// Fills `names` in a chain, each node logging `tag`; the first node's
/// closure panics when dropped if `armed`; the last node runs only in
/// fills not tagged "first" (a condition of the fill).
fn chain_fill(
    builder: &mut TaskGraphBuilder<Log>,
    names: &[&'static str],
    tag: &'static str,
    armed: bool,
) {
    for (i, &name) in names.iter().enumerate() {
        let guard = PanicsOnDrop(armed && i == 0);
        let node = builder.node(name, Lane::FrameCritical, move |cx| {
            let _ = &guard;
            cx.data().lock().unwrap().push(tag)
        });
        let node = if i > 0 {
            node.after([names[i - 1]])
        } else {
            node
        };
        if i == names.len() - 1 {
            node.run_if(move |_| tag != "first");
        }
    }
}

/// Should a replaced closure's drop panic, the graph is already the new
/// fill's, whole: every node runs the new fill's closure and conditions,
/// once, in the next frame. Both ways a build goes into a graph: a build
/// that repeats the last (the closures are swapped in place), and one that
/// compiles (a new shape, which also plans anew).
#[test]
fn a_graph_whose_replaced_closure_panics_as_it_drops_is_the_new_fill_whole() {
    let pool = Pool::builder().threads(0).build().unwrap();
    for new_shape in [&["a", "b", "c"][..], &["a", "b", "c", "d"]] {
        let mut builder = TaskGraph::<Log>::builder();
        let mut graph = TaskGraph::<Log>::builder().build().unwrap();
        let log = Log::default();
        chain_fill(&mut builder, &["a", "b", "c"], "first", true);
        builder.build_into(&mut graph).unwrap();
        graph.run(&pool, &log).unwrap();
        assert_eq!(*log.lock().unwrap(), ["first", "first"], "c is off");
        log.lock().unwrap().clear();
        chain_fill(&mut builder, new_shape, "second", false);
        let built = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            builder.build_into(&mut graph)
        }));
        assert!(built.is_err(), "the drop's panic reaches the caller");
        assert_eq!(graph.len(), new_shape.len());
        for _ in 0..3 {
            graph.run(&pool, &log).unwrap();
            let ran = std::mem::take(&mut *log.lock().unwrap());
            assert_eq!(ran, vec!["second"; new_shape.len()], "{new_shape:?}");
        }
    }
}

/// `clear` leaves the builder empty even if a closure's drop panics: the
/// next fill builds the graph it describes, nothing of the cleared fill
/// (names, orderings, conditions) added to it.
#[test]
fn a_builder_cleared_while_a_closure_panics_as_it_drops_is_empty() {
    let pool = Pool::builder().threads(0).build().unwrap();
    let mut builder = TaskGraph::<Log>::builder();
    chain_fill(&mut builder, &["a", "b", "c"], "first", true);
    let cleared = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| builder.clear()));
    assert!(cleared.is_err(), "the drop's panic reaches the caller");
    chain_fill(&mut builder, &["x", "y"], "second", false);
    let mut graph = builder.build().unwrap();
    assert_eq!(graph.len(), 2);
    let log = Log::default();
    graph.run(&pool, &log).unwrap();
    assert_eq!(*log.lock().unwrap(), ["second", "second"]);
}

/// A fill that declares no resource builds a graph that claims none, even
/// if an earlier fill of the same builder declared some: run inside a node
/// that holds the frame's resources, it runs.
#[test]
fn a_fill_without_resources_claims_none_after_one_with_them() {
    use engine_tasks::graph::Resources;
    struct Position;
    let pool = Pool::builder().threads(1).build().unwrap();
    let mut builder = TaskGraph::<Resources>::builder();
    let mut inner = TaskGraph::<Resources>::builder().build().unwrap();
    builder
        .node("move", Lane::FrameCritical, |cx| {
            drop(cx.res_mut::<Position>())
        })
        .writes::<Position>();
    builder.build_into(&mut inner).unwrap();
    builder.node("count", Lane::FrameCritical, |_| ());
    builder.build_into(&mut inner).unwrap();
    let inner = std::sync::Arc::new(Mutex::new(inner));
    let ran = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut outer = TaskGraph::<Resources>::builder();
    let (handle, inner_of_node, ran_of_node) = (pool.handle(), inner.clone(), ran.clone());
    outer
        .node("outer", Lane::FrameCritical, move |cx| {
            let mut inner = inner_of_node.lock().unwrap();
            inner
                .run(&handle, cx.data())
                .expect("the inner graph claims nothing");
            ran_of_node.store(true, std::sync::atomic::Ordering::Relaxed);
        })
        .writes::<Position>();
    let mut outer = outer.build().unwrap();
    let mut resources = Resources::new();
    resources.insert(Position);
    outer.run(&pool, &resources).unwrap();
    assert!(ran.load(std::sync::atomic::Ordering::Relaxed));
}

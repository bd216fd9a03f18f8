//! Scheduling, stealing and parking allocate nothing: after a warm-up that
//! starts the worker threads, fork-join work (`join`, `parallel_for`) that
//! pushes, steals and parks makes zero heap allocations, and so does a
//! steady-state task-graph frame.
//!
//! The allocator counts the allocations of the threads each test watches:
//! its own and its pool's workers (marked as they start, `watched_pool`).
//! The tests take turns; the harness's own work on other threads (a test
//! that just ended reporting its result, say) does not count.

use engine_tasks::graph::NodeOutcome;
use engine_tasks::{FrameSharing, FrameStats, Lane, Pool, TaskGraph};
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Duration;

mod common;
use common::{fib, spin_for};

struct Counting;

static COUNTING: AtomicBool = AtomicBool::new(false);
static ALLOCATIONS: AtomicUsize = AtomicUsize::new(0);
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

thread_local! {
    /// Whether this thread's allocations count while counting is on. A
    /// const-initialised `Cell` needs no allocation or destructor, so the
    /// allocator may read it.
    static WATCHED: Cell<bool> = const { Cell::new(false) };
}

/// Whether an allocation now counts.
fn counts() -> bool {
    // Relaxed: set and cleared by the test's thread around its workload;
    // the workers' allocations it must see happen inside that window,
    // ordered by the work's own synchronisation.
    COUNTING.load(Ordering::Relaxed) && WATCHED.try_with(Cell::get).unwrap_or(false)
}

/// Counts this thread's allocations until the guard drops: a test's
/// thread holds it inside its turn, so the harness's work on the thread
/// after the test (reporting, while another test counts) does not count.
#[must_use]
fn watch_this_thread() -> Watch {
    WATCHED.with(|w| w.set(true));
    Watch
}

struct Watch;

impl Drop for Watch {
    fn drop(&mut self) {
        WATCHED.with(|w| w.set(false));
    }
}

/// A pool of `threads` workers whose allocations count.
fn watched_pool(threads: usize) -> Pool {
    Pool::builder()
        .threads(threads)
        .spawn_with(|spec, main| {
            let mut thread = std::thread::Builder::new().name(spec.name);
            if let Some(bytes) = spec.stack_size {
                thread = thread.stack_size(bytes);
            }
            thread.spawn(move || {
                // A worker is watched for its life, which ends when the
                // test drops its pool, inside its turn.
                let _watch = watch_this_thread();
                main()
            })
        })
        .build()
        .unwrap()
}

// SAFETY: forwards to the system allocator unchanged; only counts calls.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if counts() {
            // Relaxed: read after the workload, ordered by its joins.
            ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: same contract as ours.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as ours.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if counts() {
            // Relaxed: as in `alloc`.
            ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: same contract as ours.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Runs the workload until all `threads` workers of `pool` started (a
/// worker starts when work reaches it; on a busy machine twenty rounds
/// were not always enough), and at least twenty times.
fn warm_up(pool: &Pool, threads: usize) {
    for round in 0.. {
        workload(pool);
        if round >= 20 && pool.stats().threads_started == threads {
            return;
        }
        assert!(round < 10_000, "{threads} workers never started");
    }
}

fn workload(pool: &Pool) -> u64 {
    let sum = AtomicUsize::new(0);
    pool.parallel_for(0..50_000, 16, |i| {
        sum.fetch_add(i, Ordering::Relaxed);
    });
    fib(pool, 20) + sum.load(Ordering::Relaxed) as u64
}

#[test]
fn steady_state_fork_join_makes_no_allocations() {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    ALLOCATIONS.store(0, Ordering::SeqCst);
    let _watch = watch_this_thread();
    let pool = watched_pool(3);
    // Warm-up: start every worker, touch every thread-local.
    warm_up(&pool, 3);
    let parks_before: u64 = pool.stats().parks();
    let steals_before = pool.stats().total().stolen_tasks;

    COUNTING.store(true, Ordering::SeqCst);
    let mut checksum = 0;
    for _ in 0..50 {
        checksum += workload(&pool);
        // Let the workers go idle and park between rounds, as between frames.
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    COUNTING.store(false, Ordering::SeqCst);

    assert_eq!(checksum, 50 * (6765 + 49_999 * 50_000 / 2));
    assert_eq!(ALLOCATIONS.load(Ordering::SeqCst), 0);
    let stats = pool.stats();
    assert!(stats.parks() > parks_before, "the workload parked threads");
    assert!(
        stats.total().stolen_tasks > steals_before,
        "the workload stole tasks"
    );
}

struct World {
    values: Vec<AtomicUsize>,
    frames: AtomicUsize,
    /// Busy work per node, in nanoseconds.
    spin_nanos: AtomicU64,
}

/// 64 nodes in 8 layers, each after 1-3 nodes of the layer before; one
/// fans out with `parallel_for`. Unless `plannable`, one is pinned to the
/// frame's thread and a few are in the normal lane (so its shared frames
/// queue their nodes); otherwise every node is frame-critical and its
/// shared frames are planned.
fn world_graph(plannable: bool) -> TaskGraph<World> {
    let mut b = TaskGraph::<World>::builder();
    // Far above the light bodies, also in debug builds; far below 50 µs
    // nodes.
    b.share_above(
        std::time::Duration::from_micros(500),
        std::time::Duration::from_micros(20),
    );
    for layer in 0..8usize {
        for k in 0..8usize {
            let i = layer * 8 + k;
            let lane = if k == 7 && !plannable {
                Lane::Normal
            } else {
                Lane::FrameCritical
            };
            let body = move |cx: &engine_tasks::NodeContext<'_, World>| {
                let world = cx.data();
                spin_for(std::time::Duration::from_nanos(
                    world.spin_nanos.load(Ordering::Relaxed),
                ));
                if i == 9 {
                    cx.pool().parallel_for(0..world.values.len(), 64, |j| {
                        world.values[j].fetch_add(1, Ordering::Relaxed);
                    });
                }
                if i == 63 {
                    world.frames.fetch_add(1, Ordering::Relaxed);
                }
            };
            let node = if i == 60 && !plannable {
                b.main_thread_node(format!("n{i}"), body)
            } else {
                b.node(format!("n{i}"), lane, body)
            };
            if layer > 0 {
                let deps =
                    (0..1 + (k % 3)).map(|d| format!("n{}", (layer - 1) * 8 + (k + d * 3) % 8));
                node.after(deps);
            }
        }
    }
    b.build().unwrap()
}

/// Reads every statistic a frame offers, as a frame loop's overlay would:
/// inside the counting window, none may allocate. Returns a few of them for
/// the caller to check.
fn read_every_statistic(stats: &FrameStats) -> (usize, Duration) {
    let mut ran = 0;
    for node in stats.nodes() {
        ran += usize::from(node.outcome == NodeOutcome::Ran);
        std::hint::black_box((node.start, node.duration));
    }
    std::hint::black_box(stats.node(0));
    let busy: Duration = (0..stats.slots()).map(|s| stats.thread_busy(s)).sum();
    for slot in 0..stats.slots() {
        std::hint::black_box((stats.awake(slot), stats.utilisation(slot)));
    }
    std::hint::black_box((stats.frame(), stats.wall_time(), stats.steals()));
    assert!(stats.critical_path_work() <= stats.total_work());
    (ran, busy)
}

#[test]
fn steady_state_graph_frames_make_no_allocations() {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    ALLOCATIONS.store(0, Ordering::SeqCst);
    let _watch = watch_this_thread();
    let pool = watched_pool(3);
    let mut graph = world_graph(false);
    let world = World {
        values: (0..4096).map(|_| AtomicUsize::new(0)).collect(),
        frames: AtomicUsize::new(0),
        spin_nanos: AtomicU64::new(0),
    };
    // Warm-up: frames this light wake no sleeping thread (graph/runtime.rs),
    // so they alone may leave a worker unstarted, to be started (and its
    // name and stack allocated) by some later frame. Start all first.
    warm_up(&pool, 3);
    for _ in 0..50 {
        graph.run(&pool, &world).unwrap();
    }
    let steals_before = pool.stats().total().stolen_tasks;

    // Light frames run alone; a heavy frame that starts alone is handed
    // over to the pool on the way, and heavy frames are shared once their
    // smoothed node times pass the rule; then light frames run alone again.
    // All three ways are counted. (A light frame preempted for milliseconds
    // looks heavy, and the heavy frame after it starts shared: then the
    // cycle is repeated.)
    COUNTING.store(true, Ordering::SeqCst);
    let mut critical_nodes = 0;
    let mut frames = 0;
    let mut sharing_seen = [0usize; 3];
    let mut run = |spin_nanos: u64| {
        world.spin_nanos.store(spin_nanos, Ordering::Relaxed);
        let stats = graph.run(&pool, &world).unwrap();
        let (ran, _) = read_every_statistic(stats);
        assert_eq!(ran, stats.nodes().len(), "every node ran");
        let sharing = stats.sharing();
        sharing_seen[match sharing {
            FrameSharing::Alone => 0,
            FrameSharing::HandedOver => 1,
            FrameSharing::Shared => 2,
            FrameSharing::Planned => unreachable!("a pinned node and two lanes"),
        }] += 1;
        critical_nodes += stats.critical_path().len();
        frames += 1;
        if frames % 20 == 0 {
            // Let the workers park between some frames, as at 60 Hz.
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        sharing
    };
    for _ in 0..50 {
        run(0);
    }
    for _ in 0..5 {
        (0..1000)
            .find(|_| run(0) == FrameSharing::Alone)
            .expect("light frames run alone");
        let first_heavy = run(50_000);
        (0..20)
            .find(|_| run(50_000) == FrameSharing::Shared)
            .expect("heavy frames are shared");
        if first_heavy == FrameSharing::HandedOver {
            break;
        }
    }
    for _ in 0..50 {
        run(0);
    }
    COUNTING.store(false, Ordering::SeqCst);

    assert_eq!(ALLOCATIONS.load(Ordering::SeqCst), 0);
    assert!(
        sharing_seen.iter().all(|&n| n > 0),
        "frames alone, handed over, shared: {sharing_seen:?}"
    );
    assert_eq!(world.frames.load(Ordering::Relaxed), 50 + frames);
    assert!(world
        .values
        .iter()
        .all(|v| v.load(Ordering::Relaxed) == 50 + frames));
    assert!(
        critical_nodes >= frames * 8,
        "every critical path spans the 8 layers"
    );
    assert!(
        pool.stats().total().stolen_tasks > steals_before,
        "the frames stole work"
    );
}

/// Heavy frames of a graph that allows planned frames run planned, and
/// make no allocation either: not the frames, not the re-plans between
/// them (every 64th frame), not the walkers' sleeps, not the waits for a
/// tick (`sleep_until`).
#[test]
fn steady_state_planned_frames_make_no_allocations() {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    ALLOCATIONS.store(0, Ordering::SeqCst);
    let _watch = watch_this_thread();
    let pool = watched_pool(3);
    let mut graph = world_graph(true);
    let world = World {
        values: (0..4096).map(|_| AtomicUsize::new(0)).collect(),
        frames: AtomicUsize::new(0),
        spin_nanos: AtomicU64::new(50_000),
    };
    warm_up(&pool, 3);
    for _ in 0..50 {
        graph.run(&pool, &world).unwrap();
    }
    COUNTING.store(true, Ordering::SeqCst);
    let mut planned = 0;
    let frames = 100;
    for frame in 0..frames {
        if frame % 20 == 0 {
            // Let the workers park between some frames, as at 60 Hz, and
            // wait as a frame limiter does: the warming allocates nothing.
            let tick = std::time::Instant::now() + std::time::Duration::from_millis(1);
            graph.sleep_until(&pool, tick);
        }
        let stats = graph.run(&pool, &world).unwrap();
        planned += usize::from(stats.sharing() == FrameSharing::Planned);
        let (ran, busy) = read_every_statistic(stats);
        assert_eq!(ran, stats.nodes().len(), "every node ran");
        assert!(busy > Duration::ZERO);
        assert!(stats.critical_path().len() >= 8, "frame {frame}");
    }
    COUNTING.store(false, Ordering::SeqCst);
    assert_eq!(ALLOCATIONS.load(Ordering::SeqCst), 0);
    assert_eq!(planned, frames);
    assert_eq!(world.frames.load(Ordering::Relaxed), 50 + frames);
    assert!(world
        .values
        .iter()
        .all(|v| v.load(Ordering::Relaxed) == 50 + frames));
}

/// Frame data of the rebuilt graph below: resources borrowed through
/// declared access.
struct Game {
    resources: engine_tasks::graph::Resources,
}

impl AsRef<engine_tasks::graph::Resources> for Game {
    fn as_ref(&self) -> &engine_tasks::graph::Resources {
        &self.resources
    }
}

struct Positions([u64; 8]);
struct Passes(u64);
struct Snapshots(u64);

const PASSES: [&str; 12] = [
    "pass0", "pass1", "pass2", "pass3", "pass4", "pass5", "pass6", "pass7", "pass8", "pass9",
    "pass10", "pass11",
];

/// A render graph of a different number of passes (8 to 12) every 10 frames,
/// with sets ordered by name, a set and a node behind run conditions that
/// read a resource, declared reads and writes that order the passes, and
/// bodies and conditions that capture values: once both shapes were built,
/// clearing the builder, filling it, building into the graph, toggling a
/// node and running the frame allocate nothing.
#[test]
fn graphs_built_every_frame_make_no_allocations() {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    ALLOCATIONS.store(0, Ordering::SeqCst);
    let _watch = watch_this_thread();
    let pool = watched_pool(2);
    let mut resources = engine_tasks::graph::Resources::new();
    resources.insert(Positions([0; 8]));
    resources.insert(Passes(0));
    resources.insert(Snapshots(0));
    let mut game = Game { resources };
    let mut builder = TaskGraph::<Game>::builder();
    let mut graph = TaskGraph::<Game>::builder().build().unwrap();
    let fill = |builder: &mut engine_tasks::TaskGraphBuilder<Game>, frame: u64| {
        let step = frame % 5 + 1;
        builder.set("simulate").before(["render"]);
        builder.set("render");
        builder
            .set("network")
            .after(["simulate"])
            .reads::<Passes>()
            .run_if(|cx| cx.res::<Passes>().0 % 3 == 0);
        builder
            .node("move", Lane::FrameCritical, move |cx| {
                for p in &mut cx.res_mut::<Positions>().0 {
                    *p += step;
                }
            })
            .in_set("simulate")
            .writes::<Positions>();
        builder
            .node("snapshot", Lane::FrameCritical, |cx| {
                cx.res_mut::<Snapshots>().0 += 1;
            })
            .in_set("network")
            .writes::<Snapshots>();
        // Another shape every 10 frames: builds of a new shape and of the
        // same shape again, which skip the compiler (graph/shape.rs), both
        // count.
        let passes = 8 + (frame / 10 % 5) as usize;
        for (i, &name) in PASSES[..passes].iter().enumerate() {
            let pass = builder
                .node(name, Lane::FrameCritical, move |cx| {
                    let sum: u64 = cx.res::<Positions>().0.iter().sum();
                    std::hint::black_box(sum + i as u64);
                    if i == 0 {
                        cx.res_mut::<Passes>().0 += 1;
                    }
                })
                .in_set("render")
                .reads::<Positions>()
                .writes_id(
                    engine_tasks::graph::AccessId::from_raw(i as u64 % 3),
                    "target",
                );
            // Pass 0 counts the frames; the network set's condition reads
            // the count, and runs first (declared first).
            if i == 0 {
                pass.writes::<Passes>();
            }
        }
        builder
            .node("present", Lane::FrameCritical, |_| {})
            .after([PASSES[0]]);
        builder
            .node("debug_overlay", Lane::FrameCritical, |_| {})
            .after(["present"])
            .run_if(move |_| step % 2 == 0);
    };
    // Start both workers first (frames this light might not).
    warm_up(&pool, 2);
    let mut frame = 0u64;
    let mut run_frame = |builder: &mut engine_tasks::TaskGraphBuilder<Game>,
                         graph: &mut TaskGraph<Game>,
                         game: &Game| {
        fill(builder, frame);
        builder.build_into(graph).unwrap();
        assert!(graph.set_enabled("debug_overlay", frame % 7 != 0));
        let nodes = graph.len();
        let stats = graph.run(&pool, game).unwrap();
        let ran = stats
            .nodes()
            .filter(|n| n.outcome == NodeOutcome::Ran)
            .count();
        std::hint::black_box(ran);
        assert_eq!(stats.nodes().len(), nodes);
        frame += 1;
    };
    // Warm-up: every shape twice, and the step from the largest back to
    // the smallest (the most closures' memory the builder keeps at once).
    // Twice, because the graph and the builder trade the compiled form at
    // each build of a new shape: each of the two buffers must have held
    // every shape (five shapes: ten builds).
    const WARM_UP: u64 = 110;
    const COUNTED: u64 = 100;
    for _ in 0..WARM_UP {
        run_frame(&mut builder, &mut graph, &game);
    }
    COUNTING.store(true, Ordering::SeqCst);
    for _ in 0..COUNTED {
        run_frame(&mut builder, &mut graph, &game);
    }
    COUNTING.store(false, Ordering::SeqCst);
    assert_eq!(ALLOCATIONS.load(Ordering::SeqCst), 0);
    // Every frame moved every position by its step; pass 0 counted every
    // frame, and the network set ran in the frames where the count (as it
    // was before the frame: the set runs before the passes) was a multiple
    // of three.
    let frames = WARM_UP + COUNTED;
    let expected: u64 = (0..frames).map(|f| f % 5 + 1).sum();
    assert_eq!(
        game.resources.get_mut::<Positions>().unwrap().0,
        [expected; 8]
    );
    assert_eq!(game.resources.get_mut::<Passes>().unwrap().0, frames);
    assert_eq!(
        game.resources.get_mut::<Snapshots>().unwrap().0,
        frames.div_ceil(3)
    );
}

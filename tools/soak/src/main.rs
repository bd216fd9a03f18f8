//! Soak test of the whole engine.
//!
//! Each round builds a pool (1-4 workers, thread starts failing at random)
//! and a blocking pool, then runs a random task graph for several frames.
//! Its nodes, in random lanes and some pinned to the frame's thread (or,
//! every other round, all in the frame-critical lane and none pinned, so
//! that the graph's shared frames run planned), fan out with
//! `parallel_for`, spawn nested tasks (which spawn more), submit blocking
//! tasks whose results come back on the pool, and panic at random
//! (injected); a thread pauses after one last touch of a frame or a join
//! in 200 (injected, `faults::Site::LastTouch`), so that frames and joins
//! end while it is still in the call that made it, and a spawn from inside
//! the pool pauses between its check and its push as often
//! (`faults::Site::SpawnPush`). Some nodes run chains
//! of nested joins across lanes under the round's random background cap (a background task joins a normal one
//! that joins a background one), and some call into a second pool whose
//! task calls back into the first and waits (by `JoinHandle::join`, `join`
//! or `scope`). Spawned tasks capture tracked values, some of which panic
//! when dropped. At the end of the round the pools are dropped (shut down)
//! with work possibly still queued. After every round it checks:
//!
//! * every node ran exactly once per frame, except the ones the frame's
//!   error reports as panicked or skipped;
//! * every spawned task ran exactly once, or panicked (its handle says so);
//! * every chain of nested joins and every call across the two pools
//!   returned, with the full value unless an injected panic cut it short;
//! * every tracked value was dropped (a live counter returns to zero);
//! * no frame took longer than the watchdog limit; a stuck round prints the
//!   pool's state and exits with an error instead of hanging;
//! * resident memory stays flat across rounds.
//!
//! `cargo run --release -p soak -- --seconds 600` for a long run.

use clap::Parser;
use engine_tasks::faults::{self, FaultPlan, Site};
use engine_tasks::{
    BlockingPool, FrameSharing, JoinHandle, Lane, NodeContext, Pool, PoolHandle, TaskGraph,
};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Soak test of engine-tasks.
#[derive(Parser, Debug)]
#[command(version, about)]
struct Args {
    /// Run for this many seconds.
    #[arg(long, default_value_t = 20)]
    seconds: u64,
    /// Stop after this many rounds, if sooner.
    #[arg(long)]
    rounds: Option<u64>,
    /// Random seed.
    #[arg(long, default_value_t = 0x5EED)]
    seed: u64,
    /// A frame slower than this is reported as a hang.
    #[arg(long, default_value_t = 30)]
    watchdog_seconds: u64,
}

/// Values alive right now; must return to zero after every round.
static LIVE: AtomicUsize = AtomicUsize::new(0);
static DROP_PANICS: AtomicU64 = AtomicU64::new(0);

/// A value captured by spawned tasks. Counts itself, and may panic when
/// dropped (injected), which the pool must survive.
struct Tracked {
    bomb: bool,
}

impl Tracked {
    fn new() -> Tracked {
        LIVE.fetch_add(1, Ordering::SeqCst);
        Tracked {
            bomb: faults::should_fail(Site::CapturedDrop),
        }
    }
}

impl Drop for Tracked {
    fn drop(&mut self) {
        LIVE.fetch_sub(1, Ordering::SeqCst);
        if self.bomb && !std::thread::panicking() {
            DROP_PANICS.fetch_add(1, Ordering::Relaxed);
            panic!("injected fault: a captured value panicked in drop");
        }
    }
}

/// Counts one arrival when dropped: run, or dropped unrun.
struct Report(Arc<AtomicU64>);

impl Drop for Report {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// What a round's frame shares with its nodes.
struct Frame {
    node_runs: Vec<AtomicU64>,
    spawned: Mutex<Vec<(u64, JoinHandle<()>)>>,
    task_runs: Arc<Vec<AtomicU64>>,
    next_task: AtomicUsize,
    blocking: engine_tasks::BlockingPoolHandle,
    continuations: Arc<AtomicU64>,
    continuations_sent: AtomicU64,
    /// The round's second pool, for calls that cross pools and call back.
    other: PoolHandle,
    /// Chains of nested joins and cross-pool calls: started, and finished
    /// with the full value.
    chains: AtomicU64,
    chains_whole: AtomicU64,
}

/// How a chain waits on the next pool or lane.
#[derive(Clone, Copy)]
enum Wait {
    Handle,
    Join,
    Scope,
}

impl Wait {
    fn random(rng: &mut Rng) -> Wait {
        [Wait::Handle, Wait::Join, Wait::Scope][rng.below(3) as usize]
    }

    /// Runs `f` on `pool` in `lane` and waits for it the way `self` says:
    /// its value, or 0 if a panic (injected) interrupted it.
    fn call(self, pool: &PoolHandle, lane: Lane, f: impl FnOnce() -> u32 + Send + 'static) -> u32 {
        fn caught(f: impl FnOnce() -> u32) -> u32 {
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_or(0)
        }
        match self {
            Wait::Handle => pool
                .spawn(lane, f)
                .ok()
                .and_then(|task| task.join().ok())
                .unwrap_or(0),
            Wait::Join => caught(|| pool.join(|| 0, f).1),
            Wait::Scope => caught(|| {
                let result = AtomicU64::new(0);
                pool.scope(|s| s.spawn(|_| result.store(u64::from(f()), Ordering::Relaxed)));
                result.into_inner() as u32
            }),
        }
    }
}

/// A chain of `lanes.len()` nested waits on `pool`, each in the next lane:
/// the shape of a background task that joins a normal task that joins a
/// background task. Returns one per level that completed.
fn nested_chain(pool: &PoolHandle, lanes: Vec<Lane>, waits: Vec<Wait>) -> u32 {
    let Some((&lane, rest)) = lanes.split_first() else {
        return 0;
    };
    let (inner, rest, more_waits) = (pool.clone(), rest.to_vec(), waits[1..].to_vec());
    let value = waits[0].call(pool, lane, move || {
        1 + nested_chain(&inner, rest, more_waits)
    });
    std::hint::black_box(value)
}

/// Spawns a task that records its run and, `depth` times, a nested one.
fn spawn_tracked(pool: &PoolHandle, frame: &Frame, lane: Lane, depth: u32) {
    let id = frame.next_task.fetch_add(1, Ordering::Relaxed);
    if id >= frame.task_runs.len() {
        return;
    }
    let runs = frame.task_runs.clone();
    let value = Tracked::new();
    let nested = pool.clone();
    let task = move || {
        let _value = &value;
        runs[id].fetch_add(1, Ordering::SeqCst);
        if depth > 0 {
            // Nested spawns are detached; they are counted through `runs`.
            let runs = runs.clone();
            let inner = Tracked::new();
            let _ = nested.spawn(lane, move || {
                let _inner = inner;
                std::hint::black_box(&runs);
            });
        }
    };
    if let Ok(handle) = pool.spawn(lane, task) {
        frame.spawned.lock().unwrap().push((id as u64, handle));
    }
}

/// A random graph of `nodes` nodes; a `plannable` one keeps to one lane
/// and pins nothing, so that its shared frames can run planned.
fn build_graph(rng: &mut Rng, nodes: usize, plannable: bool) -> TaskGraph<Frame> {
    let mut b = TaskGraph::<Frame>::builder();
    for i in 0..nodes {
        let lane = match rng.below(6) {
            _ if plannable => Lane::FrameCritical,
            0 => Lane::Background,
            1 | 2 => Lane::Normal,
            _ => Lane::FrameCritical,
        };
        let pinned = !plannable && rng.below(10) == 0;
        let action = rng.below(7);
        let chain_lanes: Vec<Lane> = (0..3).map(|_| Lane::ALL[rng.below(3) as usize]).collect();
        let chain_waits: Vec<Wait> = (0..3).map(|_| Wait::random(rng)).collect();
        let body = move |cx: &NodeContext<'_, Frame>| {
            let frame = cx.data();
            frame.node_runs[i].fetch_add(1, Ordering::SeqCst);
            match action {
                0 => cx.pool().parallel_for(0..256, 16, |j| {
                    std::hint::black_box(j * j);
                }),
                1 => spawn_tracked(cx.pool(), frame, Lane::ALL[i % 3], 2),
                2 => {
                    let value = Tracked::new();
                    if let Ok(task) = frame.blocking.spawn(move || {
                        let _value = value;
                        std::thread::sleep(Duration::from_micros(50));
                        7u64
                    }) {
                        frame.continuations_sent.fetch_add(1, Ordering::Relaxed);
                        // Reports exactly once: when the continuation runs
                        // (whatever the blocking task's outcome), or when it
                        // is dropped unrun because an injected panic hit the
                        // pool task carrying it.
                        let report = Report(frame.continuations.clone());
                        task.then(cx.pool(), Lane::Background, move |_result| drop(report));
                    }
                }
                3 => cx.pool().scope(|s| {
                    for _ in 0..4 {
                        s.spawn(|_| {
                            std::hint::black_box(0u64);
                        });
                    }
                }),
                4 => {
                    // Nested joins across lanes, under the round's cap.
                    frame.chains.fetch_add(1, Ordering::Relaxed);
                    let depth = chain_lanes.len() as u32;
                    if nested_chain(cx.pool(), chain_lanes.clone(), chain_waits.clone()) == depth {
                        frame.chains_whole.fetch_add(1, Ordering::Relaxed);
                    }
                }
                5 => {
                    // Into the second pool, which calls back into this one.
                    frame.chains.fetch_add(1, Ordering::Relaxed);
                    let home = cx.pool().clone();
                    let (there, back) = (chain_waits[0], chain_waits[1]);
                    let back_lane = chain_lanes[1];
                    let value = there.call(&frame.other, chain_lanes[0], move || {
                        1 + back.call(&home, back_lane, || 1)
                    });
                    if value == 2 {
                        frame.chains_whole.fetch_add(1, Ordering::Relaxed);
                    }
                }
                _ => {}
            }
        };
        let node = if pinned {
            b.main_thread_node(format!("n{i}"), body)
        } else {
            b.node(format!("n{i}"), lane, body)
        };
        if i > 0 {
            let deps: Vec<String> = (0..rng.below(3) + 1)
                .map(|_| format!("n{}", rng.below(i as u64)))
                .collect();
            node.after(deps);
        }
    }
    if plannable {
        // Light nodes: share every frame, so that every frame is planned.
        b.share_above(Duration::ZERO, Duration::ZERO);
    }
    b.build().expect("generated graphs are valid")
}

fn resident_kib() -> u64 {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| {
            s.split_whitespace()
                .nth(1)
                .and_then(|p| p.parse::<u64>().ok())
        })
        .map_or(0, |pages| pages * 4)
}

#[derive(Default)]
struct Totals {
    rounds: u64,
    frames: u64,
    planned_frames: u64,
    nodes_run: u64,
    node_panics: u64,
    nodes_skipped: u64,
    tasks: u64,
    task_panics: u64,
    continuations: u64,
    chains: u64,
    chains_whole: u64,
    spawn_failures: u64,
    max_frame: Duration,
}

fn main() {
    let args = Args::parse();
    // Silence the expected panic messages of injected faults.
    std::panic::set_hook(Box::new(|info| {
        let message = info.payload().downcast_ref::<String>().map(String::as_str);
        let message = message.or_else(|| info.payload().downcast_ref::<&str>().copied());
        if !message.is_some_and(|m| m.starts_with("injected fault")) {
            eprintln!("soak: unexpected panic: {info}");
        }
    }));
    faults::set_plan(FaultPlan {
        thread_spawn: 100_000,
        task_body: 5_000,
        node_body: 5_000,
        captured_drop: 5_000,
        blocking_body: 5_000,
        last_touch: 5_000,
        spawn_push: 5_000,
    });
    let deadline = Instant::now() + Duration::from_secs(args.seconds);
    let watchdog = Duration::from_secs(args.watchdog_seconds);
    let mut rng = Rng(args.seed | 1);
    let mut totals = Totals::default();
    let mut memory_baseline = None;
    let heartbeat = Arc::new(AtomicU64::new(0));
    let status = Arc::new(Mutex::new(String::new()));
    {
        // The watchdog: if no frame finishes within the limit, print what
        // the round was doing and the pool's state, and fail.
        let (heartbeat, status) = (heartbeat.clone(), status.clone());
        std::thread::spawn(move || {
            let mut last = u64::MAX;
            loop {
                std::thread::sleep(watchdog);
                let now = heartbeat.load(Ordering::SeqCst);
                if now == last {
                    eprintln!("soak: no frame finished in {watchdog:?}: hang");
                    eprintln!("{}", status.lock().unwrap_or_else(|e| e.into_inner()));
                    std::process::exit(3);
                }
                last = now;
            }
        });
    }

    while Instant::now() < deadline && args.rounds.is_none_or(|r| totals.rounds < r) {
        let threads = 1 + rng.below(4) as usize;
        let pool = Pool::builder()
            .threads(threads)
            .background_cap(1 + rng.below(threads as u64) as usize)
            .build()
            .expect("valid pool");
        let other_threads = 1 + rng.below(2) as usize;
        let other = Pool::builder()
            .threads(other_threads)
            .background_cap(1 + rng.below(other_threads as u64) as usize)
            .thread_name_prefix("soak-other")
            .build()
            .expect("valid pool");
        let blocking = BlockingPool::builder()
            .cap(1 + rng.below(8) as usize)
            .keep_alive(Duration::from_millis(20 + rng.below(200)))
            .build()
            .expect("valid blocking pool");
        let nodes = 10 + rng.below(120) as usize;
        let mut graph = build_graph(&mut rng, nodes, totals.rounds % 2 == 1);
        let task_runs = Arc::new((0..4096).map(|_| AtomicU64::new(0)).collect::<Vec<_>>());
        let frame = Frame {
            node_runs: (0..nodes).map(|_| AtomicU64::new(0)).collect(),
            spawned: Mutex::new(Vec::new()),
            task_runs: task_runs.clone(),
            next_task: AtomicUsize::new(0),
            blocking: blocking.handle(),
            continuations: Arc::new(AtomicU64::new(0)),
            continuations_sent: AtomicU64::new(0),
            other: other.handle(),
            chains: AtomicU64::new(0),
            chains_whole: AtomicU64::new(0),
        };
        let frames = 1 + rng.below(10);
        for f in 0..frames {
            *status.lock().unwrap() = format!(
                "round {} frame {f}: {nodes} nodes, {threads} workers\npool: {:?}\nqueued: {:?}\nother pool: {:?}\nqueued there: {:?}\nblocking: {:?}",
                totals.rounds,
                pool.stats(),
                Lane::ALL.map(|l| pool.queued(l)),
                other.stats(),
                Lane::ALL.map(|l| other.queued(l)),
                blocking.metrics(),
            );
            let before: Vec<u64> = frame
                .node_runs
                .iter()
                .map(|r| r.load(Ordering::SeqCst))
                .collect();
            let started = Instant::now();
            let result = graph.run(&pool, &frame);
            let took = started.elapsed();
            totals.max_frame = totals.max_frame.max(took);
            heartbeat.fetch_add(1, Ordering::SeqCst);
            let (panicked, skipped) = match &result {
                Ok(_) => (Vec::new(), Vec::new()),
                Err(e) => (
                    e.panicked.iter().map(|p| p.node.clone()).collect(),
                    e.skipped.clone(),
                ),
            };
            if graph.last_frame().sharing() == FrameSharing::Planned {
                totals.planned_frames += 1;
            }
            for (i, (runs, before)) in frame.node_runs.iter().zip(&before).enumerate() {
                let name = graph.node_name(i);
                let ran = runs.load(Ordering::SeqCst) - before;
                // A panicked node panicked before its body (injected: no
                // run) or inside it (one run); a skipped one never started;
                // every other node ran exactly once.
                let round = totals.rounds;
                if panicked.iter().any(|p| p == name) {
                    assert!(
                        ran <= 1,
                        "round {round}: panicked node {name} ran {ran} times"
                    );
                } else if skipped.iter().any(|s| s == name) {
                    assert_eq!(ran, 0, "round {round}: skipped node {name} ran");
                } else {
                    assert_eq!(ran, 1, "round {round}: node {name} ran {ran} times");
                }
            }
            totals.frames += 1;
            totals.node_panics += panicked.len() as u64;
            totals.nodes_skipped += skipped.len() as u64;
            totals.nodes_run += nodes as u64 - panicked.len() as u64 - skipped.len() as u64;
        }
        // Shut down with work possibly queued: detached nested tasks and
        // blocking continuations.
        let spawned = std::mem::take(&mut *frame.spawned.lock().unwrap());
        totals.spawn_failures += pool.stats().spawn_failures;
        drop(graph);
        drop(blocking);
        drop(pool);
        drop(other);
        for (id, handle) in spawned {
            totals.tasks += 1;
            match handle.join() {
                Ok(()) => assert_eq!(
                    task_runs[id as usize].load(Ordering::SeqCst),
                    1,
                    "task {id} ran once"
                ),
                Err(e) if e.is_panic() => {
                    totals.task_panics += 1;
                    // Injected before the body (0 runs), or a captured
                    // value panicked in drop after it (1 run).
                    let runs = task_runs[id as usize].load(Ordering::SeqCst);
                    assert!(runs <= 1, "task {id} ran {runs} times");
                }
                Err(e) => panic!("task {id}: unexpected {e}"),
            }
        }
        let sent = frame.continuations_sent.load(Ordering::SeqCst);
        assert_eq!(
            frame.continuations.load(Ordering::SeqCst),
            sent,
            "every blocking result came back"
        );
        totals.continuations += sent;
        totals.chains += frame.chains.load(Ordering::SeqCst);
        totals.chains_whole += frame.chains_whole.load(Ordering::SeqCst);
        drop(frame);
        assert_eq!(
            LIVE.load(Ordering::SeqCst),
            0,
            "round {}: a tracked value leaked",
            totals.rounds
        );
        totals.rounds += 1;
        if totals.rounds == 20 {
            memory_baseline = Some(resident_kib());
        }
    }
    let memory_end = resident_kib();
    println!(
        "soak: {} rounds, {} frames in {} s (seed {:#x})",
        totals.rounds, totals.frames, args.seconds, args.seed
    );
    println!("| fault or check | count | result |");
    println!("|---|---|---|");
    println!(
        "| graph nodes run | {} | each exactly once per frame |",
        totals.nodes_run
    );
    println!(
        "| frames run planned | {} of {} | the same checks |",
        totals.planned_frames, totals.frames
    );
    println!("| node closures panicked (injected, or a value dropped inside them) | {} | frame error names them; dependents skipped ({}) |", totals.node_panics, totals.nodes_skipped);
    println!(
        "| spawned tasks checked | {} | each ran once or reported its panic |",
        totals.tasks
    );
    println!(
        "| task bodies panicked (injected) | {} | came back as JoinError at join |",
        totals.task_panics
    );
    println!(
        "| captured values panicked in drop (injected) | {} | swallowed; no thread died |",
        DROP_PANICS.load(Ordering::Relaxed)
    );
    println!(
        "| thread spawns failed (injected) | {} | pools kept working with the threads they had |",
        faults::fired(Site::ThreadSpawn)
    );
    println!(
        "| threads paused after a last touch (injected) | {} | every frame and join still ended; nothing lost |",
        faults::fired(Site::LastTouch)
    );
    println!(
        "| spawns paused before their push (injected) | {} | every spawned task still ran or was refused |",
        faults::fired(Site::SpawnPush)
    );
    println!(
        "| blocking results continued on the pool | {} | all arrived, including across shutdown |",
        totals.continuations
    );
    println!(
        "| nested joins across lanes and calls across two pools | {} ({} whole) | all returned; the rest cut short by injected panics |",
        totals.chains, totals.chains_whole
    );
    println!(
        "| pool shutdowns with queued work | {} | nothing lost; live values back to 0 |",
        totals.rounds
    );
    println!(
        "| slowest frame | {:.1} ms | watchdog limit {} s |",
        totals.max_frame.as_secs_f64() * 1e3,
        args.watchdog_seconds
    );
    if let Some(base) = memory_baseline {
        println!("| resident memory after round 20 -> end | {base} -> {memory_end} KiB | flat within 50% + 16 MiB |");
        assert!(
            memory_end <= base + base / 2 + 16 * 1024,
            "memory grew from {base} to {memory_end} KiB"
        );
    }
}

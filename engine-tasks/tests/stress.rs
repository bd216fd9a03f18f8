//! Stress: many threads, a million tasks, panics, spawn failures, pool
//! lifecycles. Every test counts that each task ran exactly once.

use engine_tasks::{Lane, Pool, PoolHandle, ThreadSpec};
use std::io;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

mod common;
use common::fib;

/// One counter per task id, so both lost and duplicated runs show up.
struct RunCounts(Vec<AtomicUsize>);

impl RunCounts {
    fn new(n: usize) -> Arc<Self> {
        Arc::new(RunCounts((0..n).map(|_| AtomicUsize::new(0)).collect()))
    }

    fn hit(&self, id: usize) {
        self.0[id].fetch_add(1, Ordering::Relaxed);
    }

    fn assert_each_once(&self) {
        for (id, count) in self.0.iter().enumerate() {
            assert_eq!(count.load(Ordering::Relaxed), 1, "task {id}");
        }
    }
}

/// 8 producer threads, 1,000,000 tasks: each producer spawns roots from
/// outside the pool; each root spawns 7 children from a worker (nested
/// spawns) and joins them; the producers join the roots.
#[test]
fn million_tasks_from_many_producers_with_nested_spawns() {
    const PRODUCERS: usize = 8;
    const ROOTS_PER_PRODUCER: usize = 15_625;
    const CHILDREN: usize = 7;
    const TOTAL: usize = PRODUCERS * ROOTS_PER_PRODUCER * (CHILDREN + 1);
    assert_eq!(TOTAL, 1_000_000);

    let pool = Pool::builder().threads(4).build().unwrap();
    let counts = RunCounts::new(TOTAL);
    std::thread::scope(|s| {
        for producer in 0..PRODUCERS {
            let handle = pool.handle();
            let counts = counts.clone();
            s.spawn(move || {
                let roots: Vec<_> = (0..ROOTS_PER_PRODUCER)
                    .map(|r| {
                        let base = (producer * ROOTS_PER_PRODUCER + r) * (CHILDREN + 1);
                        let counts = counts.clone();
                        let inner = handle.clone();
                        handle
                            .spawn(Lane::ALL[r % 3], move || {
                                counts.hit(base);
                                let children: Vec<_> = (1..=CHILDREN)
                                    .map(|c| {
                                        let counts = counts.clone();
                                        inner
                                            .spawn(Lane::Normal, move || counts.hit(base + c))
                                            .unwrap()
                                    })
                                    .collect();
                                for child in children {
                                    child.join().unwrap();
                                }
                            })
                            .unwrap()
                    })
                    .collect();
                for root in roots {
                    root.join().unwrap();
                }
            });
        }
    });
    counts.assert_each_once();
    let stats = pool.stats();
    assert_eq!(stats.total().executed, TOTAL as u64);
    assert_eq!(stats.total().spawned, TOTAL as u64);
}

/// The same shape with `scope` instead of handles: roots fan out with a
/// scope on a worker, 100,000 roots of 10 tasks each.
#[test]
fn nested_scopes_from_many_producers() {
    const PRODUCERS: usize = 4;
    const ROOTS: usize = 25_000;
    const TOTAL: usize = PRODUCERS * ROOTS * 10;
    let pool = Pool::builder().threads(3).build().unwrap();
    let counts = RunCounts::new(TOTAL);
    std::thread::scope(|s| {
        for producer in 0..PRODUCERS {
            let handle = pool.handle();
            let counts = counts.clone();
            s.spawn(move || {
                let roots: Vec<_> = (0..ROOTS)
                    .map(|r| {
                        let first = (producer * ROOTS + r) * 10;
                        let counts = counts.clone();
                        let inner = handle.clone();
                        handle
                            .spawn(Lane::ALL[r % 3], move || {
                                counts.hit(first);
                                inner.scope(|sc| {
                                    for id in first + 1..first + 10 {
                                        let counts = &counts;
                                        sc.spawn(move |_| counts.hit(id));
                                    }
                                });
                            })
                            .unwrap()
                    })
                    .collect();
                for root in roots {
                    root.join().unwrap();
                }
            });
        }
    });
    counts.assert_each_once();
}

/// A quarter of the tasks panic; every other task still runs once and every
/// panic is reported to its joiner.
#[test]
fn panicking_tasks_under_load() {
    let pool = Pool::builder().threads(3).build().unwrap();
    let counts = RunCounts::new(100_000);
    let handles: Vec<_> = (0..100_000)
        .map(|id| {
            let counts = counts.clone();
            pool.spawn(Lane::ALL[id % 3], move || {
                counts.hit(id);
                if id % 4 == 0 {
                    panic!("task {id}");
                }
                id
            })
            .unwrap()
        })
        .collect();
    let mut panics = 0;
    for (id, handle) in handles.into_iter().enumerate() {
        match handle.join() {
            Ok(value) => assert_eq!(value, id),
            Err(err) => {
                assert_eq!(err.panic_message(), Some(format!("task {id}").as_str()));
                panics += 1;
            }
        }
    }
    assert_eq!(panics, 25_000);
    counts.assert_each_once();
}

/// Under saturation (more queued work than threads), frame-critical tasks
/// start earlier on average than normal ones, and normal than background.
///
/// Saturation is made certain rather than hoped for: every worker is held
/// by a gate task until all 900 tasks are queued, so the order they start
/// in depends on the lanes alone, not on whether the producer outpaces the
/// workers. Six workers on a machine with fewer cores get preempted in the
/// middle of moving tasks, which is when a search could wrongly fall through
/// to a lower lane (see `Local::wait_for_mover`); before that fix, about one
/// run in eight started dozens of background tasks early.
#[test]
fn lane_order_under_saturation() {
    const THREADS: usize = 6;
    const ROUNDS: usize = 300;
    let pool = Pool::builder().threads(THREADS).build().unwrap();
    let gates_entered = Arc::new(AtomicUsize::new(0));
    let open = Arc::new(AtomicBool::new(false));
    let gates: Vec<_> = (0..THREADS)
        .map(|_| {
            let entered = gates_entered.clone();
            let open = open.clone();
            pool.spawn(Lane::FrameCritical, move || {
                entered.fetch_add(1, Ordering::AcqRel);
                while !open.load(Ordering::Acquire) {
                    std::thread::yield_now();
                }
            })
            .unwrap()
        })
        .collect();
    while gates_entered.load(Ordering::Acquire) < THREADS {
        std::thread::yield_now();
    }

    let clock = Arc::new(AtomicUsize::new(0));
    let mut handles = Vec::new();
    for round in 0..ROUNDS {
        for lane in [Lane::Background, Lane::Normal, Lane::FrameCritical] {
            let clock = clock.clone();
            handles.push((
                lane,
                pool.spawn(lane, move || {
                    let started = clock.fetch_add(1, Ordering::Relaxed);
                    // A little work so the queues stay full.
                    let mut x = round as u64;
                    for _ in 0..2000 {
                        x = std::hint::black_box(
                            x.wrapping_mul(6364136223846793005).wrapping_add(1),
                        );
                    }
                    started
                })
                .unwrap(),
            ));
        }
    }
    open.store(true, Ordering::Release);
    for gate in gates {
        gate.join().unwrap();
    }
    let mut sums = [0usize; 3];
    for (lane, handle) in handles {
        sums[lane.index()] += handle.join().unwrap();
    }
    assert_eq!(sums.iter().sum::<usize>(), (0..3 * ROUNDS).sum::<usize>());
    assert!(
        sums[0] < sums[1],
        "frame-critical started later than normal: {sums:?}"
    );
    assert!(
        sums[1] < sums[2],
        "normal started later than background: {sums:?}"
    );
}

/// A spawn function that fails from the `fail_at`-th call on.
fn failing_spawner(
    fail_at: usize,
) -> impl Fn(ThreadSpec, Box<dyn FnOnce() + Send>) -> io::Result<std::thread::JoinHandle<()>> {
    let calls = AtomicUsize::new(0);
    move |spec, main| {
        if calls.fetch_add(1, Ordering::SeqCst) >= fail_at {
            return Err(io::Error::new(
                io::ErrorKind::WouldBlock,
                "injected spawn failure",
            ));
        }
        std::thread::Builder::new().name(spec.name).spawn(main)
    }
}

fn mixed_workload(handle: &PoolHandle, tasks: usize) -> Arc<RunCounts> {
    let counts = RunCounts::new(tasks * 2);
    let handles: Vec<_> = (0..tasks)
        .map(|id| {
            let counts = counts.clone();
            let inner = handle.clone();
            handle
                .spawn(Lane::ALL[id % 3], move || {
                    counts.hit(2 * id);
                    let counts = counts.clone();
                    inner
                        .spawn(Lane::Normal, move || counts.hit(2 * id + 1))
                        .unwrap()
                        .join()
                        .unwrap();
                })
                .unwrap()
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    counts
}

/// Thread spawning fails at every possible point, including the first: the
/// pool keeps working with the threads it got, even none.
#[test]
fn spawn_failure_at_every_point() {
    const THREADS: usize = 3;
    for fail_at in 0..=THREADS {
        let pool = Pool::builder()
            .threads(THREADS)
            .spawn_with(failing_spawner(fail_at))
            .build()
            .unwrap();
        // Threads start on demand, and a light workload may not need them
        // all: first keep THREADS + 1 tasks busy until the spawner has
        // started all it will and refused the next, so every spawn the
        // pool may attempt is attempted.
        let expected = fail_at.min(THREADS);
        let all_attempted = move |stats: &engine_tasks::PoolStats| {
            stats.threads_started == expected && (fail_at >= THREADS || stats.spawn_failures == 1)
        };
        let waiters: Vec<_> = (0..=THREADS)
            .map(|_| {
                let handle = pool.handle();
                pool.spawn(Lane::Normal, move || {
                    let give_up = std::time::Instant::now() + std::time::Duration::from_secs(30);
                    while !all_attempted(&handle.stats()) && std::time::Instant::now() < give_up {
                        std::thread::sleep(std::time::Duration::from_millis(1));
                    }
                })
                .unwrap()
            })
            .collect();
        for waiter in waiters {
            waiter.join().unwrap();
        }
        let counts = mixed_workload(&pool.handle(), 20_000);
        counts.assert_each_once();
        let (fib, _) = pool.join(|| fib(&pool, 18), || ());
        assert_eq!(fib, 2584);
        let stats = pool.stats();
        assert_eq!(
            stats.threads_started,
            fail_at.min(THREADS),
            "fail_at = {fail_at}"
        );
        if fail_at < THREADS {
            assert_eq!(stats.spawn_failures, 1, "fail_at = {fail_at}");
        }
        // Detached tasks queued at drop still run.
        let late = RunCounts::new(1000);
        for id in 0..1000 {
            let late = late.clone();
            drop(pool.spawn(Lane::Background, move || late.hit(id)).unwrap());
        }
        drop(pool);
        late.assert_each_once();
    }
}

/// Pools are created, used from several threads and dropped, many times.
#[test]
fn repeated_create_and_drop() {
    for cycle in 0..200 {
        let pool = Pool::builder().threads(1 + cycle % 4).build().unwrap();
        let counts = RunCounts::new(400);
        std::thread::scope(|s| {
            for t in 0..2 {
                let handle = pool.handle();
                let counts = counts.clone();
                s.spawn(move || {
                    for id in (t * 200)..(t * 200 + 200) {
                        let counts = counts.clone();
                        drop(
                            handle
                                .spawn(Lane::ALL[id % 3], move || counts.hit(id))
                                .unwrap(),
                        );
                    }
                });
            }
        });
        drop(pool);
        counts.assert_each_once();
    }
}

/// Several outside threads wait in the pool at once: one holds the guest
/// slot, the others wait without one. Nothing hangs and all work is done.
#[test]
fn many_outside_threads_joining_at_once() {
    let pool = Pool::builder().threads(2).build().unwrap();
    let total = AtomicUsize::new(0);
    std::thread::scope(|s| {
        for _ in 0..6 {
            s.spawn(|| {
                for _ in 0..50 {
                    pool.scope(|sc| {
                        for _ in 0..20 {
                            sc.spawn(|_| {
                                total.fetch_add(1, Ordering::Relaxed);
                            });
                        }
                    });
                    let (a, b) = pool.join(|| 1, || 2);
                    total.fetch_add(a + b - 3, Ordering::Relaxed);
                }
            });
        }
    });
    assert_eq!(total.load(Ordering::Relaxed), 6 * 50 * 20);
}

/// Binary fan-out trees in a scope, 2^20 - 1 tasks each round, every task
/// numbered by its heap position: each runs exactly once, and all have run
/// when `scope` returns (threads keep finished tasks' counts as credit and
/// settle later, so an early return would show as a zero here). Every
/// fourth subtree opens a scope of its own, so threads switch between
/// scopes with credit outstanding.
#[test]
fn fan_out_trees_finish_every_task_before_the_scope_returns() {
    const DEPTH: u32 = 20;
    const TOTAL: usize = (1 << DEPTH) - 1;

    fn tree<'s>(
        s: &'s engine_tasks::Scope<'s, '_>,
        pool: &'s PoolHandle,
        counts: &'s RunCounts,
        id: usize,
    ) {
        counts.hit(id);
        let (left, right) = (2 * id + 1, 2 * id + 2);
        if left >= TOTAL {
            return;
        }
        if id % 4 == 3 {
            // A nested scope owns this subtree: it ends before `id`'s task.
            pool.scope(|inner| {
                inner.spawn(move |inner| tree(inner, pool, counts, left));
                tree(inner, pool, counts, right);
            });
        } else {
            s.spawn(move |s| tree(s, pool, counts, left));
            s.spawn(move |s| tree(s, pool, counts, right));
        }
    }

    let pool = Pool::builder().threads(4).build().unwrap();
    for _ in 0..3 {
        let counts = RunCounts::new(TOTAL);
        let handle = pool.handle();
        pool.scope(|s| s.spawn(|s| tree(s, &handle, &counts, 0)));
        counts.assert_each_once();
    }
}

/// A `join` tree of 2^21 leaves started from the main thread, so that every
/// task in the pool is a `join` half and every steal takes one from a join
/// deque, whose owner pops with only a compiler fence (the asymmetric fences
/// of fence.rs). Every leaf runs exactly once; a half handed out twice would
/// count twice (or trip the "ran twice" check). Repeated, for many steals.
#[test]
fn join_trees_hand_out_every_half_once() {
    const LEAVES: usize = 1 << 21;

    fn split(pool: &PoolHandle, counts: &RunCounts, ids: std::ops::Range<usize>) {
        if ids.len() == 1 {
            counts.hit(ids.start);
            return;
        }
        let mid = ids.start + ids.len() / 2;
        pool.join(
            || split(pool, counts, ids.start..mid),
            || split(pool, counts, mid..ids.end),
        );
    }

    let pool = Pool::builder().threads(4).build().unwrap();
    let handle = pool.handle();
    for _ in 0..5 {
        let counts = RunCounts::new(LEAVES);
        let stolen_before = pool.stats().total().stolen_tasks;
        split(&handle, &counts, 0..LEAVES);
        counts.assert_each_once();
        assert!(
            pool.stats().total().stolen_tasks > stolen_before,
            "no steals"
        );
    }
}

/// Planned frames on eight walkers (seven workers and the frame's thread, on a
/// machine of far fewer cores, so walkers are preempted mid-frame and sleep and
/// steal): two outside threads each run 2,000 frames of their own 256-node
/// graph on one pool, over a million node runs in all. The guest slot's holder
/// runs planned frames; the other, without a slot, queues its nodes (a planned
/// frame there once hung: every helper of it ran inside the other frame's waits
/// and left). Each node checks that its dependencies finished in this frame
/// before it, and counts its run.
#[test]
fn planned_frames_on_eight_walkers_run_each_node_once_in_order() {
    use engine_tasks::{NodeContext, TaskGraph};
    const NODES: usize = 256;
    const FRAMES: usize = 2_000;
    struct Frame {
        finished_in: Vec<AtomicUsize>,
        runs: AtomicUsize,
    }
    let pool = Arc::new(Pool::builder().threads(7).build().unwrap());
    let frame_threads: Vec<_> = (0..2u64)
        .map(|seed| {
            let pool = pool.clone();
            std::thread::spawn(move || {
                let mut state = seed * 0x9E37_79B9_7F4A_7C15 + 1;
                let mut below = |n: usize| {
                    state ^= state << 13;
                    state ^= state >> 7;
                    state ^= state << 17;
                    (state % n as u64) as usize
                };
                let mut builder = TaskGraph::<Frame>::builder();
                builder.share_above(std::time::Duration::ZERO, std::time::Duration::ZERO);
                for i in 0..NODES {
                    let deps: Vec<usize> = if i < 16 {
                        Vec::new()
                    } else {
                        let layer_start = (i / 16 - 1) * 16;
                        let mut d: Vec<usize> =
                            (0..1 + below(3)).map(|_| layer_start + below(16)).collect();
                        d.sort_unstable();
                        d.dedup();
                        d
                    };
                    let spin = below(4) * 500;
                    let names: Vec<String> = deps.iter().map(|d| format!("n{d}")).collect();
                    builder
                        .node(
                            format!("n{i}"),
                            Lane::FrameCritical,
                            move |cx: &NodeContext<'_, Frame>| {
                                let frame = cx.frame() as usize + 1;
                                let data = cx.data();
                                for &d in &deps {
                                    assert_eq!(
                                        data.finished_in[d].load(Ordering::Acquire),
                                        frame,
                                        "n{d} before n{i}"
                                    );
                                }
                                common::spin_for(std::time::Duration::from_nanos(spin as u64));
                                data.runs.fetch_add(1, Ordering::Relaxed);
                                data.finished_in[i].store(frame, Ordering::Release);
                            },
                        )
                        .after(names);
                }
                let mut graph = builder.build().unwrap();
                let data = Frame {
                    finished_in: (0..NODES).map(|_| AtomicUsize::new(0)).collect(),
                    runs: AtomicUsize::new(0),
                };
                let mut planned = 0;
                for frame in 0..FRAMES {
                    let stats = graph.run(&pool, &data).unwrap();
                    planned += usize::from(stats.sharing() == engine_tasks::FrameSharing::Planned);
                    assert_eq!(data.runs.load(Ordering::Relaxed), (frame + 1) * NODES);
                }
                planned
            })
        })
        .collect();
    let planned: usize = frame_threads.into_iter().map(|t| t.join().unwrap()).sum();
    assert!(planned > 0, "no frame ran planned");
}

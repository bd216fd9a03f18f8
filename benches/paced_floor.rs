//! How far a paced engine-tasks frame lands from the machine's own floor,
//! with both measured in the same minutes.
//!
//! `parallel_ceiling` measures the floor (the benchmark DAG on two plain
//! threads with a schedule fixed in advance, both awake at the frame's
//! start) and then the engine, one after the other; on a shared VM whose
//! speed drifts from one stretch of seconds to the next, the two land in
//! different stretches. Here they take turns in blocks of frames, paced
//! alike: two blocks of engine-tasks frames (below), a block of
//! fixed-schedule frames, a block of the sequential loop (the bound: half
//! its time), and again, so that each stretch of the machine weighs on
//! every kind (the footprint block below runs after the fixed schedule's).
//!
//! The first frames of each engine block are left out: after a block of
//! other work the pool's forecast of the loop starts over, and its first
//! frames wake the worker late (see `pool/early_wake.rs`). The fixed
//! schedule's helper thread sleeps between its blocks and, in its blocks,
//! wakes on its own timer before each tick and spins until the frame
//! starts, as in `parallel_ceiling`.
//!
//! Each round runs two engine blocks, which take turns going first: one
//! whose frames wait for their tick with a plain sleep, as the other
//! blocks do, and one whose frames wait with `TaskGraph::sleep_until`,
//! which warms the frame before the tick.
//!
//! With a fourth argument `LINES` above 0, an extra block runs the fixed
//! schedule again, each node touching `LINES` more cache lines just
//! before its work: one it writes (as a node's run record is written) and
//! `LINES - 1` it reads (as a scheduler reads a node's record, closure and
//! rows). Each line is one node's own, alone in a 128-byte slot of an
//! array of its own, and each array is visited in a shuffled order, so
//! that no two nodes share a line or a line pair, and the addresses form
//! no stream: what a scheduler's footprint per node costs a paced frame,
//! with no other scheduling cost. The reads are independent of each
//! other, so their misses overlap; a scheduler whose loads depend on
//! each other (a node, then its closure) pays more per line.
//!
//! Usage: `cargo run --release -p engine-tasks-benches --bin paced_floor --
//! [rate in Hz, default 60] [nanoseconds of work per node, default 1000]
//! [rounds of blocks, default 12] [LINES, default 0]`. Prints the medians
//! over all blocks, per node over the bound, and the engine's distance
//! from the floor.

use engine_tasks::{NodeClock, Pool, ReadyOrder};
use engine_tasks_benches::{
    benchmark_dag, graph_of, greedy_two_thread_schedule, median, run_list, threads, Pacer, Pacing,
    Wait, Work,
};
use std::sync::atomic::AtomicU32;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Frames per block.
const BLOCK: usize = 40;
/// Frames left out at the start of each engine block (the forecast needs
/// a few intervals before it wakes the worker early again).
const ENGINE_WARM_UP: usize = 12;
/// How long before the tick the fixed schedule's helper wakes, to spin
/// until the frame starts: more than a timer's usual lateness here.
const HELPER_LEAD: Duration = Duration::from_micros(300);

/// One node's line in a [`Footprint`] array: 128 bytes, so that the
/// pair of 64-byte lines that x86's adjacent-line prefetcher fetches
/// together holds no other node's line.
#[repr(align(128))]
struct Line(AtomicU32);

/// The lines each node touches before its work (module docs): `arrays[a][at[a][i]]`
/// is node `i`'s line in array `a`; array 0 is written, the others read.
struct Footprint {
    arrays: Vec<Vec<Line>>,
    at: Vec<Vec<usize>>,
}

impl Footprint {
    fn new(lines: usize, nodes: usize) -> Self {
        // A fixed xorshift seed: every run shuffles alike.
        let mut seed = 0x2545_F491_4F6C_DD1Du64;
        let mut shuffled = || {
            let mut order: Vec<usize> = (0..nodes).collect();
            for i in (1..nodes).rev() {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                order.swap(i, (seed % (i as u64 + 1)) as usize);
            }
            order
        };
        Footprint {
            arrays: (0..lines)
                .map(|_| (0..nodes).map(|_| Line(AtomicU32::new(0))).collect())
                .collect(),
            at: (0..lines).map(|_| shuffled()).collect(),
        }
    }

    /// Writes node `i`'s line of the first array and reads its others.
    fn touch(&self, i: usize, round: u64) {
        let mut read = 0u32;
        for (a, (array, at)) in self.arrays.iter().zip(&self.at).enumerate() {
            let line = &array[at[i]].0;
            // Relaxed, both: only the memory traffic matters.
            if a == 0 {
                line.store(round as u32, Ordering::Relaxed);
            } else {
                read = read.wrapping_add(line.load(Ordering::Relaxed));
            }
        }
        std::hint::black_box(read);
    }
}

/// [`run_list`], each node touching its lines of `footprint` first.
fn run_list_touching(
    list: &[usize],
    deps: &[Vec<usize>],
    done: &[AtomicU64],
    round: u64,
    work: Work,
    footprint: &Footprint,
) {
    for &i in list {
        for &d in &deps[i] {
            // Acquire: pairs with the Release store of `d`'s thread.
            while done[d].load(Ordering::Acquire) != round {
                std::hint::spin_loop();
            }
        }
        footprint.touch(i, round);
        work.run();
        // Release: publishes the node's work to its successors' threads.
        done[i].store(round, Ordering::Release);
    }
}

fn micros(time: Duration) -> f64 {
    time.as_secs_f64() * 1e6
}

/// The fixed schedule's second thread, which runs a frame's other list
/// when told its round and tick.
struct FixedHelper {
    ticks: mpsc::Sender<(u64, Instant)>,
    /// The round the frame's thread started, and the round whose list the
    /// helper finished.
    started: Arc<AtomicU64>,
    finished: Arc<AtomicU64>,
    /// When the helper finished its last round, in nanoseconds after
    /// `base`.
    ended_at: Arc<AtomicU64>,
    base: Instant,
}

impl FixedHelper {
    fn spawn(
        list: Vec<usize>,
        deps: Arc<Vec<Vec<usize>>>,
        done: Arc<Vec<AtomicU64>>,
        work: Work,
        footprint: Option<Arc<Footprint>>,
    ) -> Self {
        let (ticks, rounds) = mpsc::channel::<(u64, Instant)>();
        let started = Arc::new(AtomicU64::new(0));
        let finished = Arc::new(AtomicU64::new(0));
        let ended_at = Arc::new(AtomicU64::new(0));
        let base = Instant::now();
        {
            let (started, finished, ended_at) =
                (started.clone(), finished.clone(), ended_at.clone());
            std::thread::spawn(move || {
                // Ends when the sender is dropped.
                for (round, tick) in rounds {
                    let wake = tick.checked_sub(HELPER_LEAD).unwrap_or(tick);
                    std::thread::sleep(wake.saturating_duration_since(Instant::now()));
                    // Acquire: pairs with the Release store of the frame's
                    // start.
                    while started.load(Ordering::Acquire) != round {
                        std::hint::spin_loop();
                    }
                    match &footprint {
                        None => run_list(&list, &deps, &done, round, work),
                        Some(lines) => {
                            run_list_touching(&list, &deps, &done, round, work, lines);
                        }
                    }
                    let end = base.elapsed().as_nanos() as u64;
                    // Relaxed: published by the Release store below.
                    ended_at.store(end, Ordering::Relaxed);
                    // Release: the round's end, for the frame's thread.
                    finished.store(round, Ordering::Release);
                }
            });
        }
        FixedHelper {
            ticks,
            started,
            finished,
            ended_at,
            base,
        }
    }
}

/// What each kind of block measured, frame by frame (µs).
#[derive(Default)]
struct Frames {
    engine: Vec<f64>,
    /// Engine frames that waited with `TaskGraph::sleep_until`.
    engine_sleep_until: Vec<f64>,
    fixed: Vec<f64>,
    /// The fixed schedule touching the footprint's lines.
    touching: Vec<f64>,
    sequential: Vec<f64>,
}

/// The fixed schedule's side of the frame's thread: its list, and the
/// helper that runs the other.
struct Fixed<'a> {
    mine: &'a [usize],
    deps: &'a [Vec<usize>],
    done: &'a [AtomicU64],
    work: Work,
    period: Duration,
    helper: FixedHelper,
    footprint: Option<Arc<Footprint>>,
}

impl Fixed<'_> {
    /// Runs a block of frames from round `*round + 1` on; pushes each
    /// frame's time.
    fn block(&self, round: &mut u64, times: &mut Vec<f64>) {
        let helper = &self.helper;
        let mut next = Instant::now();
        for _ in 0..BLOCK {
            *round += 1;
            next = (next + self.period).max(Instant::now() + HELPER_LEAD);
            helper
                .ticks
                .send((*round, next))
                .expect("the helper thread runs");
            std::thread::sleep(next.saturating_duration_since(Instant::now()));
            let start = Instant::now();
            // Release: pairs with the helper's Acquire load.
            helper.started.store(*round, Ordering::Release);
            match &self.footprint {
                None => run_list(self.mine, self.deps, self.done, *round, self.work),
                Some(lines) => {
                    run_list_touching(self.mine, self.deps, self.done, *round, self.work, lines)
                }
            }
            let mine_end = Instant::now();
            // Acquire: pairs with the helper's Release store.
            while helper.finished.load(Ordering::Acquire) != *round {
                std::hint::spin_loop();
            }
            // Relaxed: ordered by the Acquire load above.
            let theirs_end =
                helper.base + Duration::from_nanos(helper.ended_at.load(Ordering::Relaxed));
            times.push(micros(mine_end.max(theirs_end) - start));
        }
    }
}

fn main() {
    let mut args = std::env::args().skip(1);
    let hz: f64 = args
        .next()
        .map_or(60.0, |a| a.parse().expect("a rate in Hz"));
    let nanos: u64 = args
        .next()
        .map_or(1_000, |a| a.parse().expect("nanoseconds per node"));
    let rounds: usize = args
        .next()
        .map_or(12, |a| a.parse().expect("rounds of blocks"));
    let lines: usize = args
        .next()
        .map_or(0, |a| a.parse().expect("lines a node touches"));
    let pacing = Pacing::from_hz(hz);
    let Pacing::Hz(_) = pacing else {
        panic!("paced_floor measures paced frames: give a rate above 0");
    };
    let period = Duration::from_secs_f64(1.0 / hz);
    let work = Work::nanos(nanos);
    let deps = Arc::new(benchmark_dag());
    let nodes = deps.len();
    let works = vec![work; nodes];
    let mut graph = graph_of(&deps, &works, ReadyOrder::CriticalPathFirst, NodeClock::On);
    let pool = Pool::builder().threads(threads() - 1).build().unwrap();
    let [mine, theirs] = greedy_two_thread_schedule(&deps);
    let done: Arc<Vec<AtomicU64>> = Arc::new(deps.iter().map(|_| AtomicU64::new(0)).collect());
    let fixed_with = |footprint: Option<Arc<Footprint>>| Fixed {
        mine: &mine,
        deps: &deps,
        done: &done,
        work,
        period,
        helper: FixedHelper::spawn(
            theirs.clone(),
            deps.clone(),
            done.clone(),
            work,
            footprint.clone(),
        ),
        footprint,
    };
    let plain = fixed_with(None);
    let touching = (lines > 0).then(|| fixed_with(Some(Arc::new(Footprint::new(lines, nodes)))));
    let mut frames = Frames::default();
    let mut round = 0u64;
    for turn in 0..rounds {
        // The two engine blocks take turns going first.
        let mut engine_blocks = [
            (Wait::Sleep, &mut frames.engine),
            (Wait::SleepUntil, &mut frames.engine_sleep_until),
        ];
        if turn % 2 == 1 {
            engine_blocks.reverse();
        }
        for (wait, times) in engine_blocks {
            let mut pacer = Pacer::new(pacing);
            for frame in 0..BLOCK {
                let tick = pacer.next_tick().expect("paced");
                wait.until(tick, &graph, &pool);
                let start = Instant::now();
                graph.run(&pool, &()).expect("no node panics");
                if frame >= ENGINE_WARM_UP {
                    times.push(micros(start.elapsed()));
                }
            }
        }
        plain.block(&mut round, &mut frames.fixed);
        if let Some(touching) = &touching {
            touching.block(&mut round, &mut frames.touching);
        }
        let mut pacer = Pacer::new(pacing);
        for _ in 0..BLOCK {
            pacer.wait();
            let start = Instant::now();
            (0..nodes).for_each(|_| work.run());
            frames.sequential.push(micros(start.elapsed()));
        }
    }
    let bound = median(frames.sequential.clone()) / 2.0;
    let over = |time: f64| (time - bound) * 1000.0 / nodes as f64;
    let engine = median(frames.engine.clone());
    let fixed = median(frames.fixed.clone());
    println!(
        "{nodes} nodes x {nanos} ns at {hz} Hz, {rounds} rounds of {BLOCK}-frame blocks taking turns; medians"
    );
    println!("bound (sequential / 2) {bound:8.1} µs");
    println!(
        "fixed schedule         {fixed:8.1} µs ({:.2}x, {:.0} ns a node over)",
        fixed / bound,
        over(fixed)
    );
    if lines > 0 {
        let touched = median(frames.touching.clone());
        // Each thread runs half the nodes: a line costs each node's thread
        // twice what it adds per node to the frame.
        println!(
            "fixed, {lines:2} lines a node {touched:8.1} µs ({:.2}x, {:.0} ns a node over; {:.1} ns per line per node on its thread)",
            touched / bound,
            over(touched),
            2.0 * (over(touched) - over(fixed)) / lines as f64
        );
    }
    println!(
        "engine-tasks           {engine:8.1} µs ({:.2}x, {:.0} ns a node over)",
        engine / bound,
        over(engine)
    );
    let warmed = median(frames.engine_sleep_until.clone());
    println!(
        "  with sleep_until      {warmed:8.1} µs ({:.2}x, {:.0} ns a node over)",
        warmed / bound,
        over(warmed)
    );
    println!(
        "engine-tasks over the fixed schedule: {:.0} ns a node; with sleep_until {:.0}",
        over(engine) - over(fixed),
        over(warmed) - over(fixed)
    );
}

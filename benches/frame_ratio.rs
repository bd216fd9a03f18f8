//! The graph benchmark's DAG against its bound, in interleaved rounds, for
//! a VM whose speed drifts: criterion measures each runner for seconds on
//! end, and this VM's clock speed has been seen to swing by 1.9x between
//! such runs, more than the 2% the 20 µs target asks for.
//!
//! Each round runs, one after the other, on the same threads:
//! - `sequential`: the 256 nodes' work in a plain loop on this thread;
//! - `halves`: the same work split 128 + 128 over this thread and a helper
//!   thread that waits on a barrier between rounds (so it is woken, as a
//!   pool's worker is), with no edges: what two threads of this machine
//!   give the work at that moment;
//! - `timed` and `untimed`: one frame of the DAG as an engine-tasks graph
//!   (default pool: one worker and this thread), with and without node
//!   timing; shared frames run planned (the default);
//! - `queued timed` and `queued untimed`: the same with planned frames
//!   turned off, so shared frames queue their nodes;
//! - the peers, each with two threads of its own: `rayon scope` (a scope
//!   that spawns each ready node) and `global queue` (the same runner on a
//!   pool of one mutex-guarded queue and a condition variable).
//!
//! The graphs and peers take turns at going first in a round.
//!
//! Paced (`rate` 30, 60 or 240), every runner of a round waits for the next
//! tick before it starts, as a game loop does, so every thread has parked
//! when each frame begins. Then `halves` is no longer what the machine
//! gives two threads: its helper is a plain thread, whose wake-up the
//! kernel of the development VM placed on the waiting thread's CPU (where
//! the two took turns) in most rounds, so it measured about 2.0 times half
//! the sequential time. The pool's own threads are steered off their
//! waker's CPU (`engine-tasks/src/sync/placement.rs`); this helper shows what
//! happens without that. Back to back (`rate` 0), runners follow each
//! other at once.
//!
//! Per round it takes the ratios of each graph frame to half the
//! sequential time (the bound: the DAG's critical path, 16 nodes,
//! is far shorter) and to the halves, and prints their medians and
//! quartiles. Back to back, between two frames of a graph the other
//! runners work for a few frame times, long enough for its worker to stop
//! waiting for the next frame.
//!
//! Usage: `cargo run --release -p engine-tasks-benches --bin frame_ratio --
//! [nanoseconds of work per node, default 20000] [rounds, default 301 back
//! to back and 61 paced] [rate in Hz, 0 for back to back; default: 0, 30, 60
//! and 240 in turn]`

use engine_tasks::TaskGraph;
use engine_tasks::{NodeClock, Planning, Pool, ReadyOrder};
use engine_tasks_benches::{
    benchmark_dag, graph_builder_of, threads, GlobalQueueDag, GlobalQueuePool, Pacer, Pacing,
    RayonDag, Work,
};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

const NODES: usize = 256;

/// The helper half of `halves`: waits at the barrier, runs its half, and
/// reports when it finished.
struct Helper {
    /// Passed before the round's tick, so that the helper is parked at the
    /// start line when the tick comes.
    ready: Arc<Barrier>,
    start_line: Arc<Barrier>,
    ends: std::sync::mpsc::Receiver<Instant>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Helper {
    fn new(work: Work, rounds: usize) -> Helper {
        let start_line = Arc::new(Barrier::new(2));
        let ready = Arc::new(Barrier::new(2));
        let (send, ends) = std::sync::mpsc::channel();
        let thread = {
            let (start_line, ready) = (start_line.clone(), ready.clone());
            std::thread::spawn(move || {
                for _ in 0..rounds {
                    ready.wait();
                    start_line.wait();
                    (0..NODES / 2).for_each(|_| work.run());
                    send.send(Instant::now()).expect("the timing thread waits");
                }
            })
        };
        Helper {
            ready,
            start_line,
            ends,
            thread: Some(thread),
        }
    }

    /// One round of `halves`.
    fn round(&self, work: Work, pacer: &mut Pacer) -> Duration {
        self.ready.wait();
        pacer.wait();
        self.start_line.wait();
        let start = Instant::now();
        (0..NODES / 2).for_each(|_| work.run());
        let mine = Instant::now();
        let theirs = self.ends.recv().expect("the helper runs every round");
        mine.max(theirs) - start
    }
}

impl Drop for Helper {
    fn drop(&mut self) {
        if let Some(thread) = self.thread.take() {
            thread.join().expect("the helper does not panic");
        }
    }
}

/// The median and the quartiles of `values`.
fn quartiles(mut values: Vec<f64>) -> [f64; 3] {
    values.sort_by(f64::total_cmp);
    let at = |q: f64| values[((values.len() - 1) as f64 * q).round() as usize];
    [at(0.25), at(0.5), at(0.75)]
}

fn main() {
    let mut args = std::env::args().skip(1);
    let nanos: u64 = args
        .next()
        .map_or(20_000, |a| a.parse().expect("nanoseconds per node"));
    let rounds: Option<usize> = args.next().map(|a| a.parse().expect("rounds"));
    let pacings: Vec<Pacing> = match args.next() {
        Some(rate) => vec![Pacing::from_hz(rate.parse().expect("a rate in Hz"))],
        None => Pacing::ALL.to_vec(),
    };
    for pacing in pacings {
        let rounds = rounds.unwrap_or(match pacing {
            Pacing::BackToBack => 301,
            Pacing::Hz(_) => 61,
        });
        run(nanos, rounds, pacing);
    }
}

fn run(nanos: u64, rounds: usize, pacing: Pacing) {
    let deps = benchmark_dag();
    let work = Work::nanos(nanos);
    let works = vec![work; deps.len()];
    let pool = Pool::builder().threads(threads() - 1).build().unwrap();
    let graph = |clock: NodeClock, planning: Planning| -> TaskGraph<()> {
        let mut builder = graph_builder_of(&deps, &works, ReadyOrder::CriticalPathFirst, clock);
        builder.planning(planning);
        builder.build().expect("a valid DAG")
    };
    const LABELS: [&str; 6] = [
        "timed",
        "untimed",
        "queued timed",
        "queued untimed",
        "rayon scope",
        "global queue",
    ];
    let mut graphs = [
        graph(NodeClock::On, Planning::Allowed),
        graph(NodeClock::Off, Planning::Allowed),
        graph(NodeClock::On, Planning::Off),
        graph(NodeClock::Off, Planning::Off),
    ];
    let rayon = rayon::ThreadPoolBuilder::new()
        .num_threads(threads())
        .build()
        .unwrap();
    let rayon_dag = RayonDag::new(&deps, &works);
    let global = GlobalQueuePool::new(threads());
    let global_dag = GlobalQueueDag::new(&deps, &works);
    // One frame of runner `k`: the graphs, then the peers.
    let mut frame = |k: usize| match k {
        0..=3 => {
            graphs[k].run(&pool, &()).unwrap();
        }
        4 => rayon_dag.run(&rayon),
        _ => global_dag.run(&global),
    };
    // Warm-up: the graphs' estimates and wake-up decisions settle.
    for _ in 0..50 {
        (0..LABELS.len()).for_each(&mut frame);
    }
    let helper = Helper::new(work, rounds);
    let mut pacer = Pacer::new(pacing);
    let time = |f: &mut dyn FnMut()| {
        let start = Instant::now();
        f();
        start.elapsed()
    };
    // Per round: each graph's frame over half the sequential time, and
    // over the halves.
    let mut over_bound: [Vec<f64>; LABELS.len()] = Default::default();
    let mut over_halves: [Vec<f64>; LABELS.len()] = Default::default();
    let mut halves_over_bound = Vec::new();
    for round in 0..rounds {
        pacer.wait();
        let sequential = time(&mut || (0..NODES).for_each(|_| work.run())).as_secs_f64();
        let halves = helper.round(work, &mut pacer).as_secs_f64();
        // Each round starts with the next graph: the first after the
        // halves finds the pool's worker parked longest, and each later one
        // finds it just done with the frame before.
        for j in 0..LABELS.len() {
            let k = (round + j) % LABELS.len();
            pacer.wait();
            let took = time(&mut || frame(k)).as_secs_f64();
            over_bound[k].push(took / (sequential / 2.0));
            over_halves[k].push(took / halves);
        }
        halves_over_bound.push(halves / (sequential / 2.0));
    }
    println!(
        "{NODES} nodes x {nanos} ns, {rounds} interleaved rounds, {}: ratios, quartiles [25% median 75%]",
        pacing.label()
    );
    let show = |label: &str, values: &Vec<f64>| {
        let [low, mid, high] = quartiles(values.clone());
        println!("{label:<34} {low:.3} {mid:.3} {high:.3}");
    };
    for (label, values) in LABELS.iter().zip(&over_bound) {
        show(&format!("{label} / (sequential / 2)"), values);
    }
    for (label, values) in LABELS.iter().zip(&over_halves) {
        show(&format!("{label} / halves"), values);
    }
    show("halves / (sequential / 2)", &halves_over_bound);
}

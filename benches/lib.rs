//! Shared pieces of the benchmarks: the baseline global-queue pool and the
//! thread count every peer gets.

use engine_tasks::{Lane, NodeClock, ReadyOrder, TaskGraph, TaskGraphBuilder};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;

/// Threads every pool in a comparison may use: the machine's parallelism.
/// engine-tasks gets one worker fewer, because the waiting main thread takes
/// part in its work (its default); the peers' main threads only block.
pub fn threads() -> usize {
    std::thread::available_parallelism().map_or(2, |n| n.get())
}

type Job = Box<dyn FnOnce() + Send>;

struct Queue {
    jobs: Mutex<(VecDeque<Job>, bool)>,
    ready: Condvar,
}

/// The simplest pool there is: one mutex-protected FIFO and a condition
/// variable, no local queues, no stealing. The baseline the issue names.
pub struct GlobalQueuePool {
    queue: Arc<Queue>,
    threads: Vec<JoinHandle<()>>,
}

/// A cloneable handle for spawning from inside tasks.
#[derive(Clone)]
pub struct GlobalQueueHandle {
    queue: Arc<Queue>,
}

impl GlobalQueueHandle {
    /// Queues `f` and wakes one thread.
    pub fn spawn(&self, f: impl FnOnce() + Send + 'static) {
        let mut jobs = self.queue.jobs.lock().unwrap();
        jobs.0.push_back(Box::new(f));
        drop(jobs);
        self.queue.ready.notify_one();
    }
}

impl GlobalQueuePool {
    /// Starts `threads` worker threads.
    pub fn new(threads: usize) -> Self {
        let queue = Arc::new(Queue {
            jobs: Mutex::new((VecDeque::new(), false)),
            ready: Condvar::new(),
        });
        let threads = (0..threads)
            .map(|_| {
                let queue = queue.clone();
                std::thread::spawn(move || loop {
                    let job = {
                        let mut jobs = queue.jobs.lock().unwrap();
                        loop {
                            if let Some(job) = jobs.0.pop_front() {
                                break job;
                            }
                            if jobs.1 {
                                return;
                            }
                            jobs = queue.ready.wait(jobs).unwrap();
                        }
                    };
                    job();
                })
            })
            .collect();
        GlobalQueuePool { queue, threads }
    }

    /// A handle for spawning.
    pub fn handle(&self) -> GlobalQueueHandle {
        GlobalQueueHandle {
            queue: self.queue.clone(),
        }
    }
}

impl Drop for GlobalQueuePool {
    fn drop(&mut self) {
        self.queue.jobs.lock().unwrap().1 = true;
        self.queue.ready.notify_all();
        for t in self.threads.drain(..) {
            t.join().unwrap();
        }
    }
}

/// A countdown the main thread blocks on until tasks have finished, for
/// peers without join handles. Counting down is one atomic decrement; only
/// the last one takes the lock.
#[derive(Clone)]
pub struct CountDown {
    inner: Arc<(AtomicUsize, Mutex<bool>, Condvar)>,
}

impl CountDown {
    /// Expects `n` calls of [`done`](Self::done).
    pub fn new(n: usize) -> Self {
        CountDown {
            inner: Arc::new((AtomicUsize::new(n), Mutex::new(false), Condvar::new())),
        }
    }

    /// One task finished.
    pub fn done(&self) {
        // AcqRel: the last decrement sees every task's effects.
        if self.inner.0.fetch_sub(1, Ordering::AcqRel) == 1 {
            *self.inner.1.lock().unwrap() = true;
            self.inner.2.notify_all();
        }
    }

    /// Blocks until the count reaches zero.
    pub fn wait(&self) {
        let mut finished = self.inner.1.lock().unwrap();
        while !*finished {
            finished = self.inner.2.wait(finished).unwrap();
        }
    }
}

/// The ids of the process's threads, sorted.
pub fn process_threads() -> Vec<libc::pid_t> {
    let mut threads: Vec<libc::pid_t> = std::fs::read_dir("/proc/self/task")
        .expect("procfs")
        .map(|entry| {
            let name = entry.expect("a task entry").file_name();
            name.to_str()
                .and_then(|n| n.parse().ok())
                .expect("a thread id")
        })
        .collect();
    threads.sort_unstable();
    threads
}

/// CPU time of thread `tid` of this process, in nanoseconds, including its
/// current slice if it is running.
pub fn thread_cpu_nanos_of(tid: libc::pid_t) -> u64 {
    // Linux's clock id for a thread's CPU clock: the inverted id shifted
    // by 3, "per thread" (4) and "scheduler time" (2) in the low bits (see
    // `clock_getcpuclockid(3)`).
    let clock = ((!tid) << 3) | 6;
    let mut time = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `time` is a valid timespec to write; an exited thread's clock
    // makes the call fail, which is checked.
    let result = unsafe { libc::clock_gettime(clock as libc::clockid_t, &mut time) };
    assert_eq!(result, 0, "thread {tid} exited while measured");
    time.tv_sec as u64 * 1_000_000_000 + time.tv_nsec as u64
}

/// CPU time of `threads` (ids from [`process_threads`]) in all, in
/// nanoseconds, each read from the thread's own clock. Unlike the process
/// total of `getrusage`, which charges a thread's running slice only when
/// it is switched out, this includes what a thread still running has used:
/// a worker that ran a burst without a break and parked just after a
/// measurement began had its whole burst charged to the measurement.
pub fn threads_cpu_nanos(threads: &[libc::pid_t]) -> u64 {
    threads.iter().map(|&t| thread_cpu_nanos_of(t)).sum()
}

/// A fixed random DAG in layers: node `i` of layer `l > 0` depends on 1 to 3
/// distinct nodes of layer `l - 1` (the first layer has no dependencies).
/// Returns each node's dependencies; nodes are numbered layer by layer, so
/// the numbering is a topological order. Deterministic for a given seed.
pub fn layered_dag(layers: usize, width: usize, seed: u64) -> Vec<Vec<usize>> {
    let mut state = seed | 1;
    let mut next = move |n: usize| {
        // xorshift64*: plenty for picking edges.
        state ^= state >> 12;
        state ^= state << 25;
        state ^= state >> 27;
        (state.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 33) as usize % n
    };
    let mut deps = Vec::with_capacity(layers * width);
    for layer in 0..layers {
        for _ in 0..width {
            if layer == 0 {
                deps.push(Vec::new());
                continue;
            }
            let count = 1 + next(3);
            let mut d: Vec<usize> = Vec::with_capacity(count);
            while d.len() < count.min(width) {
                let pick = (layer - 1) * width + next(width);
                if !d.contains(&pick) {
                    d.push(pick);
                }
            }
            d.sort_unstable();
            deps.push(d);
        }
    }
    deps
}

/// The DAG every graph benchmark runs (`graph`, `frame_cpu`,
/// `frame_breakdown`): 16 layers of 16 nodes, fixed seed.
pub fn benchmark_dag() -> Vec<Vec<usize>> {
    layered_dag(16, 16, 0x0005_EED0_FDA6)
}

/// An engine-tasks graph of `deps` whose node `i` runs `work[i]`, all in
/// the frame-critical lane, named `n0`, `n1`, ...
pub fn graph_of(
    deps: &[Vec<usize>],
    work: &[Work],
    order: ReadyOrder,
    clock: NodeClock,
) -> TaskGraph<()> {
    graph_builder_of(deps, work, order, clock)
        .build()
        .expect("a valid DAG")
}

/// The builder of [`graph_of`]'s graph, for further options.
pub fn graph_builder_of(
    deps: &[Vec<usize>],
    work: &[Work],
    order: ReadyOrder,
    clock: NodeClock,
) -> TaskGraphBuilder<()> {
    let mut b = TaskGraph::<()>::builder();
    b.ready_order(order).node_clock(clock);
    for (i, d) in deps.iter().enumerate() {
        let w = work[i];
        b.node(format!("n{i}"), Lane::FrameCritical, move |_| w.run())
            .after(d.iter().map(|d| format!("n{d}")));
    }
    b
}

/// The greedy two-thread schedule of `deps` (where `deps[i]` names only
/// nodes before `i`) for nodes of equal time and no scheduling cost: at
/// each step each thread takes the ready node with the longest chain of
/// nodes after it. Returns each thread's nodes in order; the first thread
/// runs a node at every step, so its list's length is the makespan in node
/// times.
pub fn greedy_two_thread_schedule(deps: &[Vec<usize>]) -> [Vec<usize>; 2] {
    let n = deps.len();
    let mut successors = vec![Vec::new(); n];
    for (i, d) in deps.iter().enumerate() {
        for &d in d {
            successors[d].push(i);
        }
    }
    // Nodes only depend on earlier ones (benchmark_dag builds layers).
    let mut chain = vec![1usize; n];
    for i in (0..n).rev() {
        chain[i] += successors[i].iter().map(|&s| chain[s]).max().unwrap_or(0);
    }
    let mut pending: Vec<usize> = deps.iter().map(Vec::len).collect();
    let mut ready: Vec<usize> = (0..n).filter(|&i| pending[i] == 0).collect();
    let mut lists = [Vec::new(), Vec::new()];
    while !ready.is_empty() {
        ready.sort_by_key(|&i| (std::cmp::Reverse(chain[i]), i));
        let step: Vec<usize> = ready.drain(..ready.len().min(2)).collect();
        for (thread, &i) in step.iter().enumerate() {
            lists[thread].push(i);
        }
        for &i in &step {
            for &s in &successors[i] {
                pending[s] -= 1;
                if pending[s] == 0 {
                    ready.push(s);
                }
            }
        }
    }
    lists
}

/// Runs `list` of the DAG `deps` (a thread's part of a schedule fixed in
/// advance, as [`greedy_two_thread_schedule`] gives) for round `round`: per
/// node, spin until every dependency's flag in `done` shows the round, do
/// the work, publish. The floor of a DAG on plain threads, with no
/// scheduler (`parallel_ceiling`, `paced_floor`).
pub fn run_list(list: &[usize], deps: &[Vec<usize>], done: &[AtomicU64], round: u64, work: Work) {
    for &i in list {
        for &d in &deps[i] {
            // Acquire: pairs with the Release store of `d`'s thread.
            while done[d].load(Ordering::Acquire) != round {
                std::hint::spin_loop();
            }
        }
        work.run();
        // Release: publishes the node's work to its successors' threads.
        done[i].store(round, Ordering::Release);
    }
}

/// The median of `values` (the upper one of an even count).
pub fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// Calibrated busy work: a dependent chain of integer operations that the
/// compiler cannot remove, sized in nanoseconds on this machine.
#[derive(Copy, Clone, Debug)]
pub struct Work {
    iterations: u64,
}

/// Runs `iterations` rounds of a multiply-xorshift chain.
#[inline(never)]
pub fn spin(iterations: u64) -> u64 {
    let mut x = std::hint::black_box(0x9E37_79B9_7F4A_7C15u64);
    for _ in 0..iterations {
        x = x.wrapping_mul(0x2545_F491_4F6C_DD1D);
        x ^= x >> 29;
    }
    std::hint::black_box(x)
}

impl Work {
    /// Work that takes about `nanos` ns; measured once (median of 9 runs of
    /// 2 ms) when first asked for.
    pub fn nanos(nanos: u64) -> Work {
        use std::sync::OnceLock;
        static PER_NANO: OnceLock<f64> = OnceLock::new();
        let per_nano = *PER_NANO.get_or_init(|| {
            let probe = 200_000;
            median(
                (0..9)
                    .map(|_| {
                        let start = std::time::Instant::now();
                        spin(probe);
                        probe as f64 / start.elapsed().as_nanos() as f64
                    })
                    .collect(),
            )
        });
        Work {
            iterations: (nanos as f64 * per_nano).round() as u64,
        }
    }

    /// Does the work.
    #[inline]
    pub fn run(self) {
        if self.iterations > 0 {
            spin(self.iterations);
        }
    }
}

/// The harness of the CPU-time binaries: each measurement runs in a child
/// process of the same binary (`--child PEER`), so one pool's threads are
/// never charged to another. In a child, runs `measure(peer)`, prints its
/// numbers on one line and returns `None`; in the parent, runs every peer
/// `repeats` times (the first argument, default 3) and returns, per peer,
/// the median of each number.
pub fn medians_from_children(
    peers: &[&str],
    measure: impl Fn(&str) -> Vec<f64>,
) -> Option<(usize, Vec<Vec<f64>>)> {
    let args: Vec<String> = std::env::args().collect();
    if args.len() == 3 && args[1] == "--child" {
        let line: Vec<String> = measure(&args[2]).iter().map(f64::to_string).collect();
        println!("{}", line.join(" "));
        return None;
    }
    let repeats: usize = args.get(1).map_or(3, |a| a.parse().expect("repeat count"));
    let exe = std::env::current_exe().expect("own path");
    let medians = peers
        .iter()
        .map(|peer| {
            let samples: Vec<Vec<f64>> = (0..repeats)
                .map(|_| {
                    let out = std::process::Command::new(&exe)
                        .args(["--child", peer])
                        .output()
                        .expect("child runs");
                    assert!(out.status.success(), "{peer} child failed");
                    String::from_utf8_lossy(&out.stdout)
                        .split_whitespace()
                        .map(|f| f.parse::<f64>().expect("a number"))
                        .collect()
                })
                .collect();
            (0..samples[0].len())
                .map(|k| median(samples.iter().map(|s| s[k]).collect()))
                .collect()
        })
        .collect();
    Some((repeats, medians))
}

/// How a frame benchmark spaces its frames. A game loop is paced: one frame,
/// then a sleep until the next tick (vsync or a frame limiter), so every
/// thread of a pool that does not spin parks between frames and each frame
/// starts with wake-ups. Back to back, threads are still awake when the
/// next frame starts.
#[derive(Copy, Clone, Debug, PartialEq)]
pub enum Pacing {
    /// The next frame starts as soon as the last one returned.
    BackToBack,
    /// One frame per tick of this many hertz.
    Hz(f64),
}

impl Pacing {
    /// What every frame benchmark runs: back to back, and paced at 30, 60
    /// and 240 Hz.
    pub const ALL: [Pacing; 4] = [
        Pacing::BackToBack,
        Pacing::Hz(30.0),
        Pacing::Hz(60.0),
        Pacing::Hz(240.0),
    ];

    /// `back-to-back`, or for example `60Hz`.
    pub fn label(self) -> String {
        match self {
            Pacing::BackToBack => "back-to-back".to_string(),
            Pacing::Hz(hz) => format!("{hz}Hz"),
        }
    }

    /// Parses a rate in hertz, `0` meaning back to back.
    pub fn from_hz(hz: f64) -> Pacing {
        if hz > 0.0 {
            Pacing::Hz(hz)
        } else {
            Pacing::BackToBack
        }
    }

    /// How many frames take about `seconds` at this rate, with at least
    /// `min` (back to back: `min`).
    pub fn frames_in(self, seconds: f64, min: usize) -> usize {
        match self {
            Pacing::BackToBack => min,
            Pacing::Hz(hz) => ((seconds * hz) as usize).max(min),
        }
    }
}

/// Sleeps until `tick` (returns at once if it has passed).
pub fn sleep_to(tick: std::time::Instant) {
    std::thread::sleep(tick.saturating_duration_since(std::time::Instant::now()));
}

/// Sleeps until the next tick of a [`Pacing`]. A frame that overran its
/// tick is followed at once, and the ticks restart from there (no burst of
/// frames to catch up).
pub struct Pacer {
    period: Option<std::time::Duration>,
    next: std::time::Instant,
}

impl Pacer {
    /// Ticks start now.
    pub fn new(pacing: Pacing) -> Self {
        Pacer {
            period: match pacing {
                Pacing::BackToBack => None,
                Pacing::Hz(hz) => Some(std::time::Duration::from_secs_f64(1.0 / hz)),
            },
            next: std::time::Instant::now(),
        }
    }

    /// Sleeps until the next tick (back to back: returns at once).
    pub fn wait(&mut self) {
        if let Some(tick) = self.next_tick() {
            sleep_to(tick);
        }
    }

    /// The next tick, as [`Pacer::wait`] picks it, for a wait of the
    /// caller's own (`TaskGraph::sleep_until`); `None` back to back.
    pub fn next_tick(&mut self) -> Option<std::time::Instant> {
        let period = self.period?;
        self.next = (self.next + period).max(std::time::Instant::now());
        Some(self.next)
    }

    /// Sleeps until the next tick of the grid that is still ahead, as a
    /// vsync wait does: a tick missed while the caller was busy elsewhere
    /// is skipped, not run at once (back to back: returns at once).
    pub fn wait_for_grid(&mut self) {
        if let Some(tick) = self.next_on_grid() {
            sleep_to(tick);
        }
    }

    /// The next tick of the grid that is still ahead, as
    /// [`Pacer::wait_for_grid`] picks it, for a wait of the caller's own
    /// (`TaskGraph::sleep_until`); `None` back to back.
    pub fn next_on_grid(&mut self) -> Option<std::time::Instant> {
        let period = self.period?;
        let now = std::time::Instant::now();
        self.next += period;
        if self.next <= now {
            let behind = (now - self.next).as_nanos();
            let missed = behind / period.as_nanos() + 1;
            self.next += period * missed as u32;
        }
        Some(self.next)
    }
}

/// How many ticks a runner of a paced group times: as many frames when a
/// frame fits in a tick (one that overruns its tick skips the next,
/// [`Pacer::wait_for_grid`]).
pub const PACED_FRAMES: u32 = 300;

/// Criterion's warm-up and measurement times for a paced group at
/// `hz`. Criterion plans a group's iterations by wall time, sleeps
/// included, so these are a number of ticks: [`PACED_FRAMES`] to time
/// (criterion's least, one frame a sample, is 50), after 20 to warm up
/// (criterion doubles its warm-up runs, so about 31 frames).
/// With 50, runs of light frames a few minutes apart disagreed by up to
/// half (engine-tasks at 0 ns and 60 Hz: 37 to 60 µs).
pub fn paced_times(hz: f64) -> (std::time::Duration, std::time::Duration) {
    let tick = std::time::Duration::from_secs_f64(1.0 / hz);
    (tick * 20, tick * PACED_FRAMES)
}

/// Times `frame` alone, `iters` times, each after a sleep until the next
/// tick of `pacer` (for criterion's `iter_custom`).
///
/// The pacer lives as long as the benchmark, not one call: criterion runs
/// a paced sample as one frame or a few, and a pacer started anew in each
/// call put each frame a period after the last call's return, off the
/// loop's grid of ticks by criterion's own bookkeeping in between. A game
/// loop keeps its grid, and a frame loop timed by it (the engine's early
/// wake-ups, `pool/early_wake.rs`) should see the same. A tick that
/// criterion's bookkeeping overran is skipped ([`Pacer::wait_for_grid`]),
/// so that no frame runs without a sleep before it.
pub fn paced_iters(pacer: &mut Pacer, iters: u64, mut frame: impl FnMut()) -> std::time::Duration {
    let mut total = std::time::Duration::ZERO;
    for _ in 0..iters {
        pacer.wait_for_grid();
        let start = std::time::Instant::now();
        frame();
        total += start.elapsed();
    }
    total
}

/// How a paced frame of an engine-tasks graph waits for its tick.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wait {
    /// `std::thread::sleep` until the tick, as every peer's frames wait.
    Sleep,
    /// A sleep until 300 µs before the tick, then one until the tick, with
    /// nothing between them: `SleepUntil` without its warming.
    TwoSleeps,
    /// `TaskGraph::sleep_until`, which warms the frame before the tick.
    SleepUntil,
}

impl Wait {
    /// Waits for `tick` this way, `graph`'s frame next on `pool`.
    pub fn until<C: ?Sized + Sync>(
        self,
        tick: std::time::Instant,
        graph: &engine_tasks::TaskGraph<C>,
        pool: &engine_tasks::PoolHandle,
    ) {
        match self {
            Wait::Sleep => sleep_to(tick),
            Wait::TwoSleeps => {
                // `sleep_until`'s lead (`WARM_LEAD` in engine-tasks).
                let lead = std::time::Duration::from_micros(300);
                sleep_to(tick.checked_sub(lead).unwrap_or(tick));
                sleep_to(tick);
            }
            Wait::SleepUntil => graph.sleep_until(pool, tick),
        }
    }
}

/// [`paced_iters`], each frame's wait until its tick done by `wait`
/// (given `runner` and the tick) instead of a plain sleep: an engine-tasks
/// graph's `sleep_until`, which warms the frame before the tick. Back to
/// back `wait` is not called.
pub fn paced_iters_waiting<R>(
    pacer: &mut Pacer,
    iters: u64,
    runner: &mut R,
    mut wait: impl FnMut(&mut R, std::time::Instant),
    mut frame: impl FnMut(&mut R),
) -> std::time::Duration {
    let mut total = std::time::Duration::ZERO;
    for _ in 0..iters {
        if let Some(tick) = pacer.next_on_grid() {
            wait(runner, tick);
        }
        let start = std::time::Instant::now();
        frame(runner);
        total += start.elapsed();
    }
    total
}

/// Names `{prefix}0`, `{prefix}1`, ... made for the life of the process
/// (call once), so that a graph built every frame names its nodes without
/// allocating.
pub fn static_names(prefix: &str, n: usize) -> &'static [&'static str] {
    let names: Vec<&'static str> = (0..n)
        .map(|i| &*Box::leak(format!("{prefix}{i}").into_boxed_str()))
        .collect();
    Box::leak(names.into_boxed_slice())
}

/// The least time a frame of `deps` can take on `threads` threads when
/// every node takes `node_time`: max(critical path, total work / threads).
pub fn frame_bound(deps: &[Vec<usize>], node_time: f64, threads: usize) -> f64 {
    // Nodes only depend on earlier ones (see `layered_dag`).
    let mut depth = vec![0usize; deps.len()];
    for (i, d) in deps.iter().enumerate() {
        depth[i] = 1 + d.iter().map(|&d| depth[d]).max().unwrap_or(0);
    }
    let critical = depth.iter().copied().max().unwrap_or(0) as f64 * node_time;
    critical.max(deps.len() as f64 * node_time / threads as f64)
}

/// Each node's successors, from each node's dependencies.
fn successors_of(deps: &[Vec<usize>]) -> Vec<Vec<usize>> {
    let mut successors = vec![Vec::new(); deps.len()];
    for (i, d) in deps.iter().enumerate() {
        for &d in d {
            successors[d].push(i);
        }
    }
    successors
}

/// The DAG runner a rayon user would write: a scope, one spawn per ready
/// node, atomic in-degree counters.
pub struct RayonDag {
    successors: Vec<Vec<usize>>,
    in_degree: Vec<usize>,
    pending: Vec<AtomicUsize>,
    work: Vec<Work>,
}

impl RayonDag {
    /// A runner of `deps` whose node `i` runs `work[i]`.
    pub fn new(deps: &[Vec<usize>], work: &[Work]) -> Self {
        RayonDag {
            successors: successors_of(deps),
            in_degree: deps.iter().map(Vec::len).collect(),
            pending: deps.iter().map(|d| AtomicUsize::new(d.len())).collect(),
            work: work.to_vec(),
        }
    }

    /// Runs one frame on `pool`.
    pub fn run(&self, pool: &rayon::ThreadPool) {
        for (p, &d) in self.pending.iter().zip(&self.in_degree) {
            // Relaxed: the scope's spawns publish it.
            p.store(d, Ordering::Relaxed);
        }
        pool.scope(|s| {
            for i in (0..self.in_degree.len()).filter(|&i| self.in_degree[i] == 0) {
                s.spawn(move |s| self.node(s, i));
            }
        });
    }

    fn node<'s>(&'s self, s: &rayon::Scope<'s>, i: usize) {
        self.work[i].run();
        for &j in &self.successors[i] {
            // AcqRel: the last release sees every dependency's effects.
            if self.pending[j].fetch_sub(1, Ordering::AcqRel) == 1 {
                s.spawn(move |s| self.node(s, j));
            }
        }
    }
}

/// What the counting DAG runners below share: each node's successors and
/// in-degree, the counters each frame releases, the work, and the count of
/// the sinks the frame's caller waits on.
struct CountedDag {
    successors: Vec<Vec<usize>>,
    in_degree: Vec<usize>,
    pending: Vec<AtomicUsize>,
    work: Vec<Work>,
    sinks: usize,
    done: Mutex<Option<CountDown>>,
}

impl CountedDag {
    fn new(deps: &[Vec<usize>], work: &[Work]) -> Self {
        let successors = successors_of(deps);
        let sinks = successors.iter().filter(|s| s.is_empty()).count();
        CountedDag {
            successors,
            in_degree: deps.iter().map(Vec::len).collect(),
            pending: deps.iter().map(|d| AtomicUsize::new(d.len())).collect(),
            work: work.to_vec(),
            sinks,
            done: Mutex::new(None),
        }
    }

    /// Resets the counters for a frame; returns what the caller waits on
    /// and the roots. Whatever spawns the roots publishes the counters.
    fn start_frame(&self) -> (CountDown, impl Iterator<Item = usize> + '_) {
        for (p, &d) in self.pending.iter().zip(&self.in_degree) {
            // Relaxed: the spawn of the roots publishes it.
            p.store(d, Ordering::Relaxed);
        }
        let done = CountDown::new(self.sinks);
        *self.done.lock().unwrap() = Some(done.clone());
        let roots = (0..self.in_degree.len()).filter(|&i| self.in_degree[i] == 0);
        (done, roots)
    }

    /// Runs node `i`, then counts down a sink or `spawn`s each successor
    /// it released.
    fn node(&self, i: usize, mut spawn: impl FnMut(usize)) {
        self.work[i].run();
        if self.successors[i].is_empty() {
            if let Some(done) = self.done.lock().unwrap().as_ref() {
                done.done();
            }
            return;
        }
        for &j in &self.successors[i] {
            // AcqRel: the last release sees every dependency's effects.
            if self.pending[j].fetch_sub(1, Ordering::AcqRel) == 1 {
                spawn(j);
            }
        }
    }
}

/// The same DAG runner on [`GlobalQueuePool`]: atomic in-degree counters,
/// each ready node queued in the one global queue, the main thread blocked
/// on a [`CountDown`] of the sinks.
pub struct GlobalQueueDag {
    shared: Arc<CountedDag>,
}

impl GlobalQueueDag {
    /// A runner of `deps` whose node `i` runs `work[i]`.
    pub fn new(deps: &[Vec<usize>], work: &[Work]) -> Self {
        GlobalQueueDag {
            shared: Arc::new(CountedDag::new(deps, work)),
        }
    }

    /// Runs one frame on `pool` and waits for it.
    pub fn run(&self, pool: &GlobalQueuePool) {
        let (done, roots) = self.shared.start_frame();
        let handle = pool.handle();
        for i in roots {
            let (shared, h) = (self.shared.clone(), handle.clone());
            handle.spawn(move || Self::node(&shared, &h, i));
        }
        done.wait();
    }

    fn node(shared: &Arc<CountedDag>, handle: &GlobalQueueHandle, i: usize) {
        shared.node(i, |j| {
            let (s, h) = (shared.clone(), handle.clone());
            handle.spawn(move || Self::node(&s, &h, j));
        });
    }
}

/// The same DAG runner on a tokio multi-threaded runtime: atomic in-degree
/// counters, one `tokio::spawn` per ready node, the calling thread blocked
/// on a [`CountDown`] of the sinks (it is not one of the runtime's threads).
pub struct TokioDag {
    shared: Arc<CountedDag>,
}

impl TokioDag {
    /// A runner of `deps` whose node `i` runs `work[i]`.
    pub fn new(deps: &[Vec<usize>], work: &[Work]) -> Self {
        TokioDag {
            shared: Arc::new(CountedDag::new(deps, work)),
        }
    }

    /// Runs one frame on `runtime` and waits for it.
    pub fn run(&self, runtime: &tokio::runtime::Runtime) {
        let (done, roots) = self.shared.start_frame();
        for i in roots {
            let shared = self.shared.clone();
            runtime.spawn(async move { Self::node(shared, i) });
        }
        done.wait();
    }

    fn node(shared: Arc<CountedDag>, i: usize) {
        shared.node(i, |j| {
            let shared = shared.clone();
            tokio::spawn(async move { Self::node(shared, j) });
        });
    }
}

/// A tokio multi-threaded runtime of `threads` workers.
pub fn tokio_runtime(threads: usize) -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads)
        .build()
        .unwrap()
}

/// How many frames a median frame is taken over.
#[derive(Copy, Clone, Debug)]
pub struct Sampling {
    /// About this many seconds of frames...
    pub seconds: f64,
    /// ...but at least this many (back to back, this many).
    pub min: usize,
    /// Frames run first and not timed.
    pub warm_up: usize,
}

/// Runs `frame` at `pacing` after `sampling.warm_up` frames: the median of
/// the frames `sampling` asks for, each timed alone, in seconds.
pub fn median_frame(pacing: Pacing, sampling: Sampling, mut frame: impl FnMut()) -> f64 {
    median_frame_waiting(
        pacing,
        sampling,
        &mut (),
        |_, tick| sleep_to(tick),
        |_| frame(),
    )
}

/// [`median_frame`], each frame after `wait(runner, tick)` for its tick
/// (paced; back to back none), `runner` lent to both the wait and the
/// frame (a graph that waits with `TaskGraph::sleep_until`, say).
pub fn median_frame_waiting<R>(
    pacing: Pacing,
    sampling: Sampling,
    runner: &mut R,
    mut wait: impl FnMut(&mut R, std::time::Instant),
    mut frame: impl FnMut(&mut R),
) -> f64 {
    let mut pacer = Pacer::new(pacing);
    let mut paced = |runner: &mut R| {
        if let Some(tick) = pacer.next_tick() {
            wait(runner, tick);
        }
    };
    for _ in 0..sampling.warm_up {
        frame(runner);
        paced(runner);
    }
    let times = (0..pacing.frames_in(sampling.seconds, sampling.min))
        .map(|_| {
            let start = std::time::Instant::now();
            frame(runner);
            let time = start.elapsed().as_secs_f64();
            paced(runner);
            time
        })
        .collect();
    median(times)
}

/// [`median_frame`] of `graph`'s frames on `pool`, each paced frame after
/// the graph's own `TaskGraph::sleep_until` for its tick.
pub fn median_frame_sleeping_until(
    pacing: Pacing,
    sampling: Sampling,
    graph: &mut engine_tasks::TaskGraph<()>,
    pool: &engine_tasks::PoolHandle,
) -> f64 {
    median_frame_waiting(
        pacing,
        sampling,
        graph,
        |graph, tick| graph.sleep_until(pool, tick),
        |graph| {
            graph.run(pool, &()).unwrap();
        },
    )
}

/// A system set per node, for ordering bevy systems by the DAG's edges.
#[derive(bevy_ecs::schedule::SystemSet, Debug, Clone, PartialEq, Eq, Hash)]
pub struct NodeSet(pub usize);

/// The DAG as a bevy_ecs `Schedule` of 256 systems in 256 sets, ordered by
/// the same edges, on `executor`; run once, so that its build is not timed.
pub fn bevy_schedule(
    deps: &[Vec<usize>],
    work: &[Work],
    executor: impl bevy_ecs::schedule::SystemExecutor + 'static,
) -> (bevy_ecs::world::World, bevy_ecs::schedule::Schedule) {
    use bevy_ecs::schedule::IntoScheduleConfigs;
    let mut schedule = bevy_ecs::schedule::Schedule::default();
    schedule.set_executor(executor);
    bevy_dag(
        deps,
        schedule,
        bevy_ecs::world::World::new(),
        |schedule, i| {
            let w = work[i];
            schedule.add_systems((move || w.run()).in_set(NodeSet(i)));
        },
    )
}

/// `schedule` with system `i` (in set `NodeSet(i)`) added by `add`, for
/// each node of `deps`, ordered by its edges; run once on `world`.
fn bevy_dag(
    deps: &[Vec<usize>],
    mut schedule: bevy_ecs::schedule::Schedule,
    mut world: bevy_ecs::world::World,
    mut add: impl FnMut(&mut bevy_ecs::schedule::Schedule, usize),
) -> (bevy_ecs::world::World, bevy_ecs::schedule::Schedule) {
    use bevy_ecs::schedule::IntoScheduleConfigs;
    for (i, d) in deps.iter().enumerate() {
        add(&mut schedule, i);
        for &d in d {
            schedule.configure_sets(NodeSet(i).after(NodeSet(d)));
        }
    }
    schedule.run(&mut world);
    (world, schedule)
}

/// Starts bevy's compute task pool with `threads` threads (once per
/// process).
pub fn init_bevy_pool(threads: usize) {
    bevy_tasks::ComputeTaskPool::get_or_init(|| {
        bevy_tasks::TaskPoolBuilder::new()
            .num_threads(threads)
            .build()
    });
}

/// The resource every node of [`gated_graph`] reads.
pub struct GatedShared(pub u64);

/// The DAG with a condition on every node and on each layer's set, and a
/// write of its own id and a read of [`GatedShared`] declared by every
/// node, which each node takes through its context. The frame's
/// `Resources` must hold a `GatedShared`.
pub fn gated_graph(
    deps: &[Vec<usize>],
    work: &[Work],
    names: &[&'static str],
) -> TaskGraph<engine_tasks::graph::Resources> {
    let layers = [
        "layer0", "layer1", "layer2", "layer3", "layer4", "layer5", "layer6", "layer7", "layer8",
        "layer9", "layer10", "layer11", "layer12", "layer13", "layer14", "layer15",
    ];
    let mut builder = TaskGraph::<engine_tasks::graph::Resources>::builder();
    for (layer, &name) in layers.iter().enumerate() {
        builder
            .set(name)
            .run_if(move |cx| cx.frame() != u64::MAX - layer as u64);
    }
    for (i, d) in deps.iter().enumerate() {
        let w = work[i];
        builder
            .node(names[i], Lane::FrameCritical, move |cx| {
                std::hint::black_box(cx.res::<GatedShared>().0);
                w.run();
            })
            .after(d.iter().map(|&d| names[d]))
            .in_set(layers[i / 16])
            .run_if(move |cx| cx.frame() != u64::MAX - i as u64)
            .reads::<GatedShared>()
            .writes_id(engine_tasks::graph::AccessId::from_raw(i as u64), "own");
    }
    builder.build().unwrap()
}

/// What every system of the gated bevy schedule reads.
#[derive(bevy_ecs::prelude::Resource)]
pub struct BevyShared(pub u64);

/// A layer of the DAG, as a bevy set with a run condition.
#[derive(bevy_ecs::schedule::SystemSet, Debug, Clone, PartialEq, Eq, Hash)]
pub struct Layer(pub usize);

/// bevy's form of [`gated_graph`]: every system reads a resource and has a
/// run condition, and so has its layer's set.
pub fn bevy_gated_schedule(
    deps: &[Vec<usize>],
    work: &[Work],
    executor: impl bevy_ecs::schedule::SystemExecutor + 'static,
) -> (bevy_ecs::world::World, bevy_ecs::schedule::Schedule) {
    use bevy_ecs::prelude::Res;
    use bevy_ecs::schedule::IntoScheduleConfigs;
    let mut schedule = bevy_ecs::schedule::Schedule::default();
    schedule.set_executor(executor);
    for layer in 0..16 {
        schedule.configure_sets(Layer(layer).run_if(move || layer != usize::MAX));
    }
    let mut world = bevy_ecs::world::World::new();
    world.insert_resource(BevyShared(7));
    bevy_dag(deps, schedule, world, |schedule, i| {
        let w = work[i];
        schedule.add_systems(
            (move |shared: Res<BevyShared>| {
                std::hint::black_box(shared.0);
                w.run();
            })
            .in_set(NodeSet(i))
            .in_set(Layer(i / 16))
            .run_if(move || i != usize::MAX),
        );
    })
}

//! Shared pieces of the benchmarks: the baseline global-queue pool and the
//! thread count every peer gets.

use engine_tasks::{Lane, ReadyOrder, TaskGraph, TaskGraphBuilder};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
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

/// User plus system CPU time of this process so far, in microseconds.
pub fn cpu_micros() -> u64 {
    // SAFETY: getrusage writes into the zeroed struct we pass.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut usage);
        usage
    };
    let micros = |t: libc::timeval| t.tv_sec as u64 * 1_000_000 + t.tv_usec as u64;
    micros(usage.ru_utime) + micros(usage.ru_stime)
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
    timed: bool,
) -> TaskGraph<()> {
    graph_builder_of(deps, work, order, timed)
        .build()
        .expect("a valid DAG")
}

/// The builder of [`graph_of`]'s graph, for further options.
pub fn graph_builder_of(
    deps: &[Vec<usize>],
    work: &[Work],
    order: ReadyOrder,
    timed: bool,
) -> TaskGraphBuilder<()> {
    let mut b = TaskGraph::<()>::builder();
    b.ready_order(order).measure_nodes(timed);
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

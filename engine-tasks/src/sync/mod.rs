//! The lock-free primitives and the park/wake protocol: the bottom layer.
//!
//! Nothing here knows about pools, graphs or frames. Each module opens with
//! its algorithm and states; each lock-free structure and wake-up protocol
//! carries its loom models (`loom_models`, run with `RUSTFLAGS="--cfg
//! loom"`; `fence.rs` is checked through the models of the deque and the
//! node marks, its users). The atomics come
//! from `crate::loom`,
//! which swaps in loom's under that flag.
//!
//! | module | what |
//! |---|---|
//! | `task` | intrusive task headers: queuing a task allocates nothing |
//! | `ring` | per-thread SPMC ring with two-phase steal-half |
//! | `lifo` | the LIFO slot: one atomic pointer |
//! | `deque` | Chase-Lev deque of `join` halves and scope tasks |
//! | `fence` | asymmetric fences (compiler fence against `membarrier`) |
//! | `queue` | unbounded intrusive queue: overflow and injector |
//! | `latch` | completion latch, and who to wake when it is set |
//! | `credit` | scope credit: batched completions of scope tasks |
//! | `countdown` | a graph node's dependency countdown across frames |
//! | `node_marks` | a planned frame's claim and finish marks |
//! | `gate` | the submission gate that makes shutdown lose no task |
//! | `helpers` | outside threads that run a pool's work while it has no thread |
//! | `start_verdict` | whether a thread a spawn function started may join its pool |
//! | `frame_gate` | a yes-or-no answer worked out once per frame (a set's run conditions) |
//! | `park` | a one-permit parker, with timed parks |
//! | `idle` | the wake protocol: one searcher, no lost wake-up |
//! | `permits` | background permits and the lending rule |
//! | `placement` | steering a woken thread off its waker's CPU |
//! | `prefetch` | prefetch hints; the spans an early-woken worker warms (data, then code) |

pub(crate) mod countdown;
pub(crate) mod credit;
pub(crate) mod deque;
pub(crate) mod fence;
pub(crate) mod frame_gate;
pub(crate) mod gate;
pub(crate) mod helpers;
pub(crate) mod idle;
pub(crate) mod latch;
pub(crate) mod lifo;
pub(crate) mod node_marks;
pub(crate) mod park;
pub(crate) mod permits;
pub(crate) mod placement;
pub(crate) mod prefetch;
pub(crate) mod queue;
pub(crate) mod ring;
pub(crate) mod start_verdict;
pub(crate) mod task;

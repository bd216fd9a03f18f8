//! Asymmetric fences: a cheap fence on a hot path, paid for by an expensive
//! one on a rare path that it pairs with.
//!
//! The owner's pop in the `join` deque (deque.rs) needs a store-load fence
//! between lowering `bottom` and reading `top`, paired with a fence in the
//! thief's steal. A `SeqCst` fence costs 9-14 ns on this project's test
//! machine, about as much as the rest of a `join`, and the owner pays it on
//! every `join`, while steals from join deques happen a handful of times per
//! fork-join tree: about ten per `fib(30)` (1.3 million joins) and per
//! 65,535-task scope fan-out, counted with `PoolStats` on 2 threads. Flat
//! loops of scope spawns, which would be stolen one task at a time, go to
//! the ring instead (scope.rs).
//!
//! So on Linux the frequent side ([`light`]) is only a compiler fence, and
//! the rare side ([`heavy`]) calls `membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED)`,
//! which makes every running thread of the process execute a full memory
//! barrier before it returns (an inter-processor interrupt to each CPU that
//! runs one of them; about 2.5 µs on a 2-core VM with a busy peer). For any
//! pair of a light and a heavy fence, that barrier lands somewhere in the
//! light side's program: before its store, after its load, or between them.
//! Between them it is the symmetric fence. Before the store, the light side's
//! later load sees everything the heavy side's thread saw before calling
//! (x86 and AArch64 are multi-copy atomic), which is what the symmetric pair
//! would have given. After the load, the heavy side's later load sees the
//! light side's store. Linux's userspace RCU and the C++ proposal P1202
//! ("Asymmetric Fences") rest on the same argument.
//!
//! The pairing lives outside the Rust memory model: there, a compiler fence
//! orders nothing between threads, and loom (which implements that model)
//! checks the deque in the symmetric mode only. The asymmetric mode rests on
//! the kernel's guarantee above.
//!
//! The mode is chosen once per process, before the first deque exists
//! (`Deque::new` calls [`init`]), and never changes, so both sides of every
//! pair agree on it. Where
//! `membarrier` is missing (other systems, old kernels, seccomp filters), on
//! other architectures, or when `ENGINE_TASKS_FENCES=symmetric` is set, both
//! sides use `SeqCst` fences.
//! Loom models the symmetric mode, which the asymmetric one emulates, and
//! Miri (which has no `membarrier`) runs it.

use crate::loom::atomic::{fence, Ordering};

/// Runs the frequent side's fence. See the module docs.
#[inline(always)]
pub(crate) fn light() {
    if asymmetric() {
        // The heavy side's membarrier supplies the hardware barrier.
        std::sync::atomic::compiler_fence(Ordering::SeqCst);
    } else {
        fence(Ordering::SeqCst);
    }
}

/// Runs the rare side's fence. See the module docs.
pub(crate) fn heavy() {
    fence(Ordering::SeqCst);
    #[cfg(all(
        target_os = "linux",
        any(target_arch = "x86_64", target_arch = "aarch64"),
        not(any(loom, miri))
    ))]
    if asymmetric() {
        membarrier::private_expedited();
    }
}

/// Chooses the mode for the process; call before any fence is used.
pub(crate) fn init() {
    #[cfg(all(
        target_os = "linux",
        any(target_arch = "x86_64", target_arch = "aarch64"),
        not(any(loom, miri))
    ))]
    membarrier::init();
}

/// Whether this process runs the asymmetric mode.
#[inline(always)]
pub(crate) fn asymmetric() -> bool {
    #[cfg(all(
        target_os = "linux",
        any(target_arch = "x86_64", target_arch = "aarch64"),
        not(any(loom, miri))
    ))]
    return membarrier::enabled();
    #[cfg(not(all(
        target_os = "linux",
        any(target_arch = "x86_64", target_arch = "aarch64"),
        not(any(loom, miri))
    )))]
    return false;
}

#[cfg(all(
    target_os = "linux",
    any(target_arch = "x86_64", target_arch = "aarch64"),
    not(any(loom, miri))
))]
mod membarrier {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Once;

    // From <linux/membarrier.h>.
    const CMD_QUERY: libc::c_long = 0;
    const CMD_PRIVATE_EXPEDITED: libc::c_long = 1 << 3;
    const CMD_REGISTER_PRIVATE_EXPEDITED: libc::c_long = 1 << 4;

    static INIT: Once = Once::new();
    static ENABLED: AtomicBool = AtomicBool::new(false);

    pub(super) fn init() {
        INIT.call_once(|| {
            let wanted = std::env::var_os("ENGINE_TASKS_FENCES")
                .is_none_or(|v| v.to_str() != Some("symmetric"));
            // Relaxed: `Once` orders this store before every caller's return
            // from `init`. Every pool calls `init` as it is created, before
            // any of its queues, deques and planned frames' marks (the fence
            // users: `deque.rs`, `node_marks.rs`) exist, and each deque calls
            // it too; both sides of every fence pair reach that state
            // through the pool.
            ENABLED.store(wanted && register(), Ordering::Relaxed);
        });
    }

    #[inline(always)]
    pub(super) fn enabled() -> bool {
        // Relaxed: written once inside `init`, which happens before any use.
        ENABLED.load(Ordering::Relaxed)
    }

    fn register() -> bool {
        // SAFETY: membarrier takes integer arguments only and touches no
        // memory of ours.
        let supported = unsafe { libc::syscall(libc::SYS_membarrier, CMD_QUERY, 0, 0) };
        if supported < 0 || supported & CMD_PRIVATE_EXPEDITED == 0 {
            return false;
        }
        // SAFETY: as above.
        let registered =
            unsafe { libc::syscall(libc::SYS_membarrier, CMD_REGISTER_PRIVATE_EXPEDITED, 0, 0) };
        registered == 0
    }

    pub(super) fn private_expedited() {
        // SAFETY: as in `register`.
        let done = unsafe { libc::syscall(libc::SYS_membarrier, CMD_PRIVATE_EXPEDITED, 0, 0) };
        if done != 0 {
            // Registered and queried above, so this cannot fail; if it did,
            // light fences would be unpaired and deques could hand out a
            // task twice.
            eprintln!("engine-tasks: membarrier failed after registration; aborting");
            std::process::abort();
        }
    }
}

//! Where a woken thread runs: off the CPU of the thread that woke it.
//!
//! # The problem
//!
//! Whoever wakes a pool thread goes on running. It pushed work and keeps
//! working: a frame's thread queues the frame's roots, then runs nodes
//! itself. Linux chooses the woken thread's CPU at the wake-up
//! (`select_task_rq_fair`). Its wake-affine rule prefers the waker's CPU
//! unless it counts the wakee's previous CPU, or another CPU sharing the
//! cache, as idle. On a KVM guest an idle vCPU is halted, and the guest
//! kernel often does not count it. Then the wakee queues behind the waker on
//! one CPU while the other CPU stays idle. The two threads take turns in
//! slices of a few milliseconds until a load balance moves one of them,
//! which can take longer than a frame.
//!
//! Frames run back to back never saw this: their threads are running or
//! spinning when work arrives, so no placement decision is made. A paced
//! game loop parks every thread between frames, so every frame starts with
//! such a decision, and every park inside a frame ends with one. On the
//! 2-core development VM, a paced thread that woke a parked one shared its
//! CPU with it in 50 to 84 of 100 frames at 60 Hz, whether or not the
//! wakee had last run on the waker's CPU, and the wakee started a median
//! 2.7 ms late. Steered, a pool worker shared it in 1 of 100 frames and
//! started 56 µs after the wake-up, the cost of waking a halted vCPU
//! (`cargo run --release -p engine-tasks-benches --bin wake_placement`).
//!
//! # The remedy
//!
//! Just before it wakes a sleeping thread, the waker narrows that thread's
//! CPU affinity to its current mask less the waker's own CPU. The kernel
//! then has to place it elsewhere, on an idle CPU when there is one. After
//! the wake the thread restores its mask itself, before it runs any task.
//! Steering decides where a wake-up lands, never where the thread may run
//! later.
//!
//! * **Which threads.** A slot's current owner registers its thread id: a
//!   worker when it starts, and a thread that takes the guest slot (a frame's
//!   thread, an outside `join`) for as long as it holds it. Other waiting
//!   threads are not steered.
//! * **When.** Only when the owner sleeps (the parker's `PARKED` state): a
//!   wake-up that only leaves a permit makes no placement decision. Steering
//!   is skipped when the waker's CPU is outside the owner's mask or is the
//!   only CPU in it.
//! * **Cost.** `sched_getcpu` (a vDSO or rseq read) for each wake-up of a
//!   sleeping thread; when steering, `sched_getaffinity` and
//!   `sched_setaffinity` by the waker and one `sched_setaffinity` by the
//!   woken thread.
//!
//! # Early wake-ups
//!
//! A worker that parks with a timeout to wake just before a paced loop's
//! next frame (`pool/early_wake.rs`) is woken by its own timer, and then
//! looks for the frame's work for a few hundred microseconds. The frame's
//! thread sleeps until the same moment; if the worker's wake-up lands on
//! its CPU, the frame's thread waits behind the look. Before such a park
//! the owner narrows its own mask to leave out the CPU the frame's thread
//! ended its last frame on ([`Placement::steer_self_off`]), and restores it
//! after the park. Its current CPU is no guide: the kernel may move a
//! sleeping thread's timer to a busy CPU, whose wake-up then places it
//! there (on the development VM it woke on the frame thread's CPU in 54 of
//! 77 early wake-ups of one run when it only steered from that CPU, 8 of
//! 63 when it always steered).
//!
//! # Protocol
//!
//! One mutex per slot guards the owner's id and the mask to restore
//! (`saved`). All affinity changes happen under it.
//!
//! * Waker: lock; if the owner is registered, still `PARKED`, and nothing is
//!   `saved`, read its mask, save it and set the narrowed one; unlock; then
//!   wake it (the parker's `PARKED` to `NOTIFIED` swap).
//! * Owner, after a park in which it slept, and when it leaves the slot:
//!   lock; restore and clear `saved`; unlock.
//! * Owner, before a timed park for an early wake-up: lock; narrow its own
//!   mask the same way (off the frame thread's CPU); unlock. After that
//!   park, however it ended (a task found before it slept, a timeout, a
//!   wake-up): restore as above (`pool/wait.rs`).
//! * Every narrowing starts from the whole mask: the one `saved`, if a
//!   steer already narrowed it (a waker that wakes an owner out of its
//!   self-steered park moves it off the waker's CPU, not the frame
//!   thread's), else the current one, which is then saved.
//!
//! **Why the owner never runs on with a narrowed mask.** A waker's steer
//! happens under the lock while the owner is `PARKED`. The owner leaves
//! `PARKED` only through a waker's swap, and then, before it returns from
//! the park, takes the same lock. So its restore comes after every steer of
//! that park. A steer that starts after the owner left `PARKED` finds it
//! not `PARKED` and does nothing. The owner's own steer comes before its
//! park, and the restore after that park in `pool/wait.rs` covers it on
//! every path. Since a narrowing starts from the saved mask, `saved` only
//! ever holds the whole mask. Ids are read under the lock, so a steer names
//! the thread that owns the slot at that moment. `loom_models` below
//! checks this.
//!
//! Elsewhere than Linux every operation is a no-op; under loom, masks are
//! modelled by a bit set.

use crate::loom::Mutex;

/// One slot's steering state; see the module docs.
pub(crate) struct Placement {
    steer: Mutex<Steer>,
}

struct Steer {
    /// The owner's kernel thread id; [`os::NO_THREAD`] while unregistered.
    tid: os::Tid,
    /// The owner's mask before a waker narrowed it.
    saved: Option<os::CpuSet>,
    #[cfg(loom)]
    modelled: u64,
}

impl Placement {
    pub(crate) fn new() -> Self {
        Placement {
            steer: Mutex::new(Steer {
                tid: os::NO_THREAD,
                saved: None,
                #[cfg(loom)]
                modelled: os::MODEL_ALL,
            }),
        }
    }

    fn lock(&self) -> crate::loom::MutexGuard<'_, Steer> {
        // A panic under this lock leaves consistent data (every write is a
        // single assignment), so a poisoned lock is used as is.
        self.steer.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The calling thread now owns the slot; wake-ups may steer it.
    #[cfg_attr(target_os = "linux", link_section = "engine_tasks_frame")]
    pub(crate) fn register_current_thread(&self) {
        self.lock().tid = os::current_tid();
    }

    /// The calling thread no longer owns the slot; gives back its mask if
    /// a steer left it narrowed.
    #[cfg_attr(target_os = "linux", link_section = "engine_tasks_frame")]
    pub(crate) fn unregister_current_thread(&self) {
        let mut steer = self.lock();
        restore_locked(&mut steer);
        steer.tid = os::NO_THREAD;
    }

    /// Called by a waker just before it wakes the owner, with `parked`
    /// telling whether the owner still sleeps: moves the owner off the
    /// caller's CPU.
    pub(crate) fn steer_away_from_caller(&self, parked: impl Fn() -> bool) {
        let Some(cpu) = os::current_cpu() else { return };
        let mut steer = self.lock();
        if steer.tid == os::NO_THREAD || !parked() {
            return;
        }
        narrow_locked(&mut steer, cpu);
    }

    /// Called by the owner before a timed park that its timer ends (an
    /// early wake-up, `pool/early_wake.rs`): moves its own wake-up off
    /// `cpu`, where a thread it should not delay sleeps until about then.
    /// Wherever the owner parks, the kernel may move its timer to a busy
    /// CPU (timer migration), whose wake-up then places it there. The
    /// owner restores its mask after the park, however it ends
    /// ([`restore`](Self::restore)). A waker that wakes it out of that park
    /// narrows the saved mask instead, off its own CPU: the wake-up then
    /// avoids the waker, wherever the frame's thread went meanwhile.
    pub(crate) fn steer_self_off(&self, cpu: usize) {
        let mut steer = self.lock();
        if steer.tid == os::NO_THREAD {
            return;
        }
        narrow_locked(&mut steer, cpu);
    }

    /// Called by the owner after a park in which it slept.
    pub(crate) fn restore(&self) {
        restore_locked(&mut self.lock());
    }

    /// The owner's modelled mask (loom models only).
    #[cfg(loom)]
    fn modelled(&self) -> u64 {
        self.lock().modelled
    }
}

/// Sets the owner's mask to its whole mask (the saved one, if a steer
/// narrowed it already) less `cpu`, and saves the whole mask, unless `cpu`
/// is outside it or its only CPU.
fn narrow_locked(steer: &mut Steer, cpu: usize) {
    let tid = steer.tid;
    let whole = match steer.saved {
        Some(saved) => saved,
        None => match os::affinity(steer, tid) {
            Some(mask) => mask,
            None => return,
        },
    };
    let Some(narrowed) = os::without(&whole, cpu) else {
        return;
    };
    if os::set_affinity(steer, tid, &narrowed) {
        steer.saved = Some(whole);
    }
}

/// The CPU the calling thread runs on, if known.
#[cfg_attr(target_os = "linux", link_section = "engine_tasks_frame")]
pub(crate) fn current_cpu() -> Option<usize> {
    os::current_cpu()
}

fn restore_locked(steer: &mut Steer) {
    if let Some(mask) = steer.saved.take() {
        let tid = steer.tid;
        os::set_affinity(steer, tid, &mask);
    }
}

#[cfg(all(target_os = "linux", not(any(loom, miri))))]
mod os {
    use super::Steer;
    use std::cell::Cell;
    use std::mem;
    use std::sync::atomic::{AtomicBool, Ordering};

    pub(super) type Tid = libc::pid_t;
    pub(super) type CpuSet = libc::cpu_set_t;
    pub(super) const NO_THREAD: Tid = 0;

    thread_local! {
        /// The calling thread's id, once asked (`gettid` is a system call).
        static TID: Cell<Tid> = const { Cell::new(NO_THREAD) };
    }

    pub(super) fn current_tid() -> Tid {
        if in_forked_child() {
            // The cache may hold the id of the parent's thread that forked.
            // SAFETY: `gettid` has no preconditions.
            return unsafe { libc::gettid() };
        }
        TID.with(|tid| {
            if tid.get() == NO_THREAD {
                watch_for_forks();
                // SAFETY: `gettid` has no preconditions.
                tid.set(unsafe { libc::gettid() });
            }
            tid.get()
        })
    }

    /// Set in a child made by `fork` without `exec`: every thread id the
    /// parent registered (the owners' ids in each `Steer`, the forking
    /// thread's cached id) names a thread of the parent there, whose mask
    /// a steer would narrow for good. So a forked child does not steer.
    static FORKED: AtomicBool = AtomicBool::new(false);

    /// Whether this process is a child made by `fork` after a thread
    /// registered for steering.
    fn in_forked_child() -> bool {
        // Relaxed: set in the child by its only thread, in `fork` itself,
        // before any thread it starts (thread creation orders it).
        FORKED.load(Ordering::Relaxed)
    }

    /// Has `fork` mark its child (`FORKED`), once per process. Called
    /// before the first thread id is cached, so before any id a child
    /// could misuse exists.
    fn watch_for_forks() {
        extern "C" fn mark_child() {
            // Relaxed: see `in_forked_child`. An atomic store is all a
            // handler that runs in a forked child of a threaded process may
            // safely do.
            FORKED.store(true, Ordering::Relaxed);
        }
        static WATCHING: AtomicBool = AtomicBool::new(false);
        // Relaxed: only one caller registers; a racing caller goes on
        // before that registration ends, a window no fork can depend on.
        if WATCHING.swap(true, Ordering::Relaxed) {
            return;
        }
        // SAFETY: `mark_child` is a valid handler for the process's life.
        if unsafe { libc::pthread_atfork(None, None, Some(mark_child)) } != 0 {
            // Out of memory: a later caller tries again. Relaxed: as above.
            WATCHING.store(false, Ordering::Relaxed);
        }
    }

    /// The CPU the calling thread runs on, if known and within a
    /// `cpu_set_t`.
    pub(super) fn current_cpu() -> Option<usize> {
        // SAFETY: `sched_getcpu` has no preconditions.
        let cpu = unsafe { libc::sched_getcpu() };
        usize::try_from(cpu)
            .ok()
            .filter(|&cpu| cpu < libc::CPU_SETSIZE as usize)
    }

    pub(super) fn affinity(_: &mut Steer, tid: Tid) -> Option<CpuSet> {
        if in_forked_child() {
            return None;
        }
        // SAFETY: an all-zero `cpu_set_t` is the empty set, a valid value.
        let mut set: CpuSet = unsafe { mem::zeroed() };
        // SAFETY: `set` is a writable `cpu_set_t` of the size passed; a
        // stale `tid` only makes the call fail.
        let read = unsafe { libc::sched_getaffinity(tid, mem::size_of_val(&set), &mut set) };
        (read == 0).then_some(set)
    }

    pub(super) fn set_affinity(_: &mut Steer, tid: Tid, set: &CpuSet) -> bool {
        if in_forked_child() {
            return false;
        }
        // SAFETY: `set` is a valid `cpu_set_t` of the size passed; a stale
        // `tid` only makes the call fail.
        unsafe { libc::sched_setaffinity(tid, mem::size_of_val(set), set) == 0 }
    }

    /// `set` less `cpu`, if `cpu` is in it and is not its only CPU.
    pub(super) fn without(set: &CpuSet, cpu: usize) -> Option<CpuSet> {
        // `current_cpu` keeps `cpu` below `CPU_SETSIZE`, the set's size in
        // bits.
        // SAFETY: `cpu` is within the set, as above.
        if !unsafe { libc::CPU_ISSET(cpu, set) } {
            return None;
        }
        let mut narrowed = *set;
        // SAFETY: as above.
        unsafe { libc::CPU_CLR(cpu, &mut narrowed) };
        // SAFETY: reads a valid set.
        (unsafe { libc::CPU_COUNT(&narrowed) } > 0).then_some(narrowed)
    }
}

#[cfg(loom)]
mod os {
    //! The model: one registered thread per slot, whose mask is
    //! `Steer::modelled`; every waker runs on CPU 0 of two.
    use super::Steer;

    pub(super) type Tid = i32;
    pub(super) type CpuSet = u64;
    pub(super) const NO_THREAD: Tid = 0;
    pub(super) const MODEL_ALL: u64 = 0b11;

    pub(super) fn current_tid() -> Tid {
        1
    }
    pub(super) fn current_cpu() -> Option<usize> {
        Some(0)
    }
    pub(super) fn affinity(steer: &mut Steer, _: Tid) -> Option<CpuSet> {
        Some(steer.modelled)
    }
    pub(super) fn set_affinity(steer: &mut Steer, _: Tid, set: &CpuSet) -> bool {
        steer.modelled = *set;
        true
    }
    pub(super) fn without(set: &CpuSet, cpu: usize) -> Option<CpuSet> {
        let narrowed = set & !(1 << cpu);
        (set & (1 << cpu) != 0 && narrowed != 0).then_some(narrowed)
    }
}

#[cfg(all(not(loom), any(not(target_os = "linux"), miri)))]
mod os {
    //! No steering: threads are never registered (other systems, and Miri,
    //! which has no affinity calls).
    use super::Steer;

    pub(super) type Tid = i32;
    pub(super) type CpuSet = ();
    pub(super) const NO_THREAD: Tid = 0;

    pub(super) fn current_tid() -> Tid {
        NO_THREAD
    }
    pub(super) fn current_cpu() -> Option<usize> {
        None
    }
    pub(super) fn affinity(_: &mut Steer, _: Tid) -> Option<CpuSet> {
        None
    }
    pub(super) fn set_affinity(_: &mut Steer, _: Tid, _: &CpuSet) -> bool {
        false
    }
    pub(super) fn without(_: &CpuSet, _: usize) -> Option<CpuSet> {
        None
    }
}

#[cfg(all(test, target_os = "linux", not(any(loom, miri))))]
mod tests {
    use super::Placement;
    use crate::sync::park::Parker;
    use std::mem;
    use std::sync::atomic::{AtomicI32, Ordering};
    use std::sync::Arc;

    fn set_own_affinity(cpus: &[usize]) -> bool {
        // SAFETY: the empty set.
        let mut set: libc::cpu_set_t = unsafe { mem::zeroed() };
        for &cpu in cpus {
            assert!(cpu < libc::CPU_SETSIZE as usize);
            // SAFETY: `cpu` is below the set's size, checked above.
            unsafe { libc::CPU_SET(cpu, &mut set) };
        }
        // SAFETY: a valid set of the size passed, for the calling thread.
        unsafe { libc::sched_setaffinity(0, mem::size_of_val(&set), &set) == 0 }
    }

    fn own_affinity() -> Vec<usize> {
        // SAFETY: the empty set.
        let mut set: libc::cpu_set_t = unsafe { mem::zeroed() };
        // SAFETY: a writable set of the size passed.
        unsafe { libc::sched_getaffinity(0, mem::size_of_val(&set), &mut set) };
        (0..libc::CPU_SETSIZE as usize)
            // SAFETY: `c` is below the set's size.
            .filter(|&c| unsafe { libc::CPU_ISSET(c, &set) })
            .collect()
    }

    /// The test thread's CPUs, or `None` (and a note) if it has fewer than
    /// two: the steering tests need a CPU to steer off.
    fn two_cpus_or_skip() -> Option<Vec<usize>> {
        let cpus = own_affinity();
        if cpus.len() < 2 {
            eprintln!("skipped: needs two CPUs in the test's affinity mask");
            return None;
        }
        Some(cpus)
    }

    /// A registered thread woken by a thread on CPU `c` starts on another
    /// CPU, and has its whole mask back when `park` returns. Deterministic:
    /// the kernel must honour the narrowed mask at the wake-up.
    #[test]
    fn a_woken_thread_starts_off_the_wakers_cpu_and_gets_its_mask_back() {
        let Some(cpus) = two_cpus_or_skip() else {
            return;
        };
        let parker = Arc::new(Parker::new());
        let woke_on = Arc::new(AtomicI32::new(-1));
        let (p, w) = (parker.clone(), woke_on.clone());
        let base = cpus.clone();
        let sleeper = std::thread::spawn(move || {
            p.placement().register_current_thread();
            let mut masks = Vec::new();
            for _ in 0..20 {
                p.park();
                // SAFETY: no preconditions.
                w.store(unsafe { libc::sched_getcpu() }, Ordering::SeqCst);
                masks.push(own_affinity());
            }
            p.placement().unregister_current_thread();
            assert!(masks.iter().all(|m| *m == base), "a mask was not restored");
        });
        let waker_cpu = cpus[0];
        assert!(set_own_affinity(&[waker_cpu]));
        for _ in 0..20 {
            while !parker.is_parked() {
                std::thread::yield_now();
            }
            woke_on.store(-1, Ordering::SeqCst);
            parker.unpark();
            while woke_on.load(Ordering::SeqCst) == -1 {
                std::thread::yield_now();
            }
            assert_ne!(woke_on.load(Ordering::SeqCst), waker_cpu as i32);
        }
        sleeper.join().unwrap();
    }

    /// A thread that never registered keeps its affinity whoever wakes it.
    #[test]
    fn an_unregistered_thread_is_never_steered() {
        let before = own_affinity();
        let placement = Placement::new();
        placement.steer_away_from_caller(|| true);
        placement.steer_self_off(before[0]);
        placement.restore();
        assert_eq!(own_affinity(), before);
    }

    /// An owner that moves its own wake-up off a CPU (before an early
    /// wake-up's timed park) leaves that CPU, and has its whole mask back
    /// when it restores. Deterministic: a thread that narrows its own mask
    /// is moved at once.
    #[test]
    fn a_self_steer_leaves_out_one_cpu_until_restored() {
        let Some(cpus) = two_cpus_or_skip() else {
            return;
        };
        std::thread::spawn(move || {
            let placement = Placement::new();
            placement.register_current_thread();
            placement.steer_self_off(cpus[0]);
            assert_eq!(own_affinity(), cpus[1..]);
            // SAFETY: no preconditions.
            assert_ne!(unsafe { libc::sched_getcpu() }, cpus[0] as i32);
            // A second steer starts from the whole mask, off its own CPU.
            placement.steer_self_off(cpus[1]);
            let mut without_second = cpus.clone();
            without_second.remove(1);
            assert_eq!(own_affinity(), without_second);
            placement.restore();
            assert_eq!(own_affinity(), cpus);
            placement.unregister_current_thread();
        })
        .join()
        .unwrap();
    }

    /// A child made by `fork` without `exec` asks for its own thread's id,
    /// not the cached id of the parent's thread that forked, and steers no
    /// thread: every id the parent registered names one of the parent's
    /// threads, whose mask a steer would narrow for good.
    #[test]
    fn a_forked_child_does_not_keep_the_parents_thread_id() {
        let parent = super::os::current_tid();
        // SAFETY: the child only makes system calls and plain writes and
        // reads (no lock another thread may have held at the fork), then
        // leaves with `_exit`.
        let child = unsafe { libc::fork() };
        assert!(child >= 0, "fork failed");
        if child == 0 {
            let cached = super::os::current_tid();
            // SAFETY: no preconditions.
            let own = unsafe { libc::gettid() };
            // A steer in the child would narrow a parent's thread: the
            // child does not steer at all.
            let placement = Placement::new();
            placement.register_current_thread();
            let steered = super::os::affinity(&mut placement.lock(), own).is_some();
            let code = if cached != own || cached == parent {
                1
            } else if steered {
                2
            } else {
                0
            };
            // SAFETY: ends the child without running the parent's cleanup.
            unsafe { libc::_exit(code) };
        }
        let mut status = 0;
        // SAFETY: `child` is this process's child; `status` is writable.
        let waited = unsafe { libc::waitpid(child, &mut status, 0) };
        assert_eq!(waited, child);
        assert!(libc::WIFEXITED(status), "the child ended with {status}");
        match libc::WEXITSTATUS(status) {
            0 => {}
            1 => panic!("the child kept the parent's thread id"),
            code => panic!("the child may steer (exit code {code})"),
        }
    }
}

#[cfg(all(test, loom))]
mod loom_models {
    use crate::loom::atomic::{AtomicBool, Ordering};
    use crate::loom::{thread, Arc};
    use crate::sync::park::{Parker, Woken};

    /// Two wakers race each other and the owner's park: the owner has its
    /// whole mask whenever `park` returns, and no steer lands after it left
    /// its last park.
    #[test]
    fn the_owner_never_runs_on_with_a_narrowed_mask() {
        loom::model(|| {
            let parker = Arc::new(Parker::new());
            let flag = Arc::new(AtomicBool::new(false));
            parker.placement().register_current_thread();
            let wakers: Vec<_> = (0..2)
                .map(|_| {
                    let (parker, flag) = (parker.clone(), flag.clone());
                    thread::spawn(move || {
                        // Relaxed: the parker's Release/Acquire pair
                        // publishes it.
                        flag.store(true, Ordering::Relaxed);
                        parker.unpark();
                    })
                })
                .collect();
            // Relaxed: as above.
            while !flag.load(Ordering::Relaxed) {
                parker.park();
                assert_eq!(parker.placement().modelled(), super::os::MODEL_ALL);
            }
            for waker in wakers {
                waker.join().unwrap();
            }
            assert_eq!(parker.placement().modelled(), super::os::MODEL_ALL);
        });
    }

    /// A timed park that runs out while a waker steers the owner: the
    /// owner has its whole mask again when the park returns, timed out or
    /// not, and after the waker is done.
    #[test]
    fn a_timed_out_park_never_keeps_a_narrowed_mask() {
        timed_park_with_a_waker(SelfSteer::No);
    }

    /// An owner that moves its own wake-up off a CPU before a timed park
    /// (an early wake-up), while a waker (on CPU 0 in the model, the one
    /// CPU the owner's narrowed mask keeps) may steer it too: the waker's
    /// steer narrows the saved whole mask off its own CPU, and the owner's
    /// restore after the park gives back its whole mask, however the park
    /// ends.
    #[test]
    fn a_self_steered_timed_park_gives_the_whole_mask_back() {
        timed_park_with_a_waker(SelfSteer::OffCpu1);
    }

    /// Whether the owner steers itself before its timed park.
    #[derive(Clone, Copy, PartialEq)]
    enum SelfSteer {
        No,
        OffCpu1,
    }

    /// The owner parks with a timeout while a waker unparks it; with
    /// `self_steer`, it first moves its own wake-up off CPU 1 and restores
    /// its mask after the park, as `pool/wait.rs` does.
    fn timed_park_with_a_waker(self_steer: SelfSteer) {
        loom::model(move || {
            let parker = Arc::new(Parker::new());
            parker.placement().register_current_thread();
            let waker = {
                let parker = parker.clone();
                thread::spawn(move || parker.unpark())
            };
            if self_steer == SelfSteer::OffCpu1 {
                parker.placement().steer_self_off(1);
            }
            let woken = parker.park_timeout(std::time::Duration::from_millis(1));
            if self_steer == SelfSteer::OffCpu1 {
                parker.placement().restore();
            }
            assert_eq!(parker.placement().modelled(), super::os::MODEL_ALL);
            waker.join().unwrap();
            if woken == Woken::TimedOut {
                // The waker's permit is still there.
                parker.park();
            }
            assert_eq!(parker.placement().modelled(), super::os::MODEL_ALL);
        });
    }
}

//! One place that decides whether the primitives use `std` or `loom`.
//!
//! Every lock-free module imports its atomics, cells, locks and threads from
//! here. Under `RUSTFLAGS="--cfg loom"` they come from [loom], which explores
//! every interleaving the memory model allows; otherwise they are plain `std`.
//! Capacities that decide how many states loom must explore (the ring size)
//! are shrunk under loom too, next to their definitions.
//!
//! [loom]: https://docs.rs/loom

#[cfg(loom)]
pub(crate) use loom::{
    cell::UnsafeCell,
    sync::atomic,
    sync::{Arc, Condvar, Mutex, MutexGuard},
    thread,
};

#[cfg(not(loom))]
#[allow(unused_imports)] // `Arc` and `thread` are used by the loom models only
pub(crate) use std::{
    sync::atomic,
    sync::{Arc, Condvar, Mutex, MutexGuard},
    thread,
};

/// `std`'s `UnsafeCell` behind loom's closure-based API, so that code written
/// for loom's checked cell compiles unchanged (and at no cost) against `std`.
#[cfg(not(loom))]
#[derive(Debug)]
pub(crate) struct UnsafeCell<T>(std::cell::UnsafeCell<T>);

#[cfg(not(loom))]
impl<T> UnsafeCell<T> {
    pub(crate) const fn new(value: T) -> Self {
        Self(std::cell::UnsafeCell::new(value))
    }

    #[inline(always)]
    pub(crate) fn with<R>(&self, f: impl FnOnce(*const T) -> R) -> R {
        f(self.0.get())
    }

    #[inline(always)]
    pub(crate) fn with_mut<R>(&self, f: impl FnOnce(*mut T) -> R) -> R {
        f(self.0.get())
    }
}

//! The memory of boxed closures, kept for the next closures of the same
//! size and alignment: how a graph built every frame boxes its node bodies
//! and run conditions without allocating (`TaskGraphBuilder::build_into`).
//!
//! # How
//!
//! When a build replaces a graph, each old body's value is dropped in
//! place and its allocation, with its layout, goes on a free list (one list
//! per layout; a frame's closures come in few layouts). Boxing a closure
//! takes an allocation of exactly its layout from the list if there is
//! one, writes the closure into it and makes the `Box` from it; otherwise
//! it allocates as `Box::new` does. Closures that capture nothing have size
//! zero: their boxes allocate nothing and are not kept.
//!
//! Reusing the memory is sound because a `Box<T>` may be made from memory
//! the global allocator gave for any layout equal to `T`'s (the standard
//! library's `Box` documentation, "Memory layout"), and every kept block was
//! allocated by a `Box` through the global allocator with the layout it is
//! filed under.

use std::alloc::{dealloc, Layout};
use std::ptr::{self, NonNull};

/// Free blocks of boxed values, by layout (see the module docs).
#[derive(Default)]
pub(super) struct BoxMemory {
    /// Each layout, with its free blocks; few layouts, so a linear search.
    free: Vec<(Layout, Vec<NonNull<u8>>)>,
    /// Blocks kept in turn; those before `next` were taken.
    queue: Vec<(Layout, NonNull<u8>)>,
    next: usize,
}

// SAFETY: the blocks hold no values (each was dropped in place before it
// was kept), only memory of the global allocator, which any thread may
// reuse or free.
unsafe impl Send for BoxMemory {}
// SAFETY: `&BoxMemory` gives no access to the blocks.
unsafe impl Sync for BoxMemory {}

impl BoxMemory {
    /// `value` in a box, in a kept block of its layout if there is one.
    #[inline]
    pub(super) fn boxed<T>(&mut self, value: T) -> Box<T> {
        let layout = Layout::new::<T>();
        if layout.size() == 0 {
            // Allocates nothing.
            return Box::new(value);
        }
        let block = match self.queue.get(self.next) {
            Some(&(queued, block)) => {
                self.next += 1;
                if queued == layout {
                    Some(block)
                } else {
                    self.file(queued, block);
                    self.take(layout)
                }
            }
            None => self.take(layout),
        };
        let Some(block) = block else {
            return Box::new(value);
        };
        let at = block.as_ptr().cast::<T>();
        // SAFETY: the block was allocated by the global allocator for a box
        // of a value with `layout`, whose value was dropped (`keep`); it is
        // no longer on the free list or in the queue (taken: before
        // `next`), so this box is its only owner, and a `Box<T>` may own
        // global-allocator memory of `T`'s layout.
        unsafe {
            at.write(value);
            Box::from_raw(at)
        }
    }

    /// A free block of `layout`, off its free list.
    fn take(&mut self, layout: Layout) -> Option<NonNull<u8>> {
        self.free
            .iter_mut()
            .find(|(l, _)| *l == layout)
            .and_then(|(_, blocks)| blocks.pop())
    }

    /// Puts `block` on the free list of `layout`.
    fn file(&mut self, layout: Layout, block: NonNull<u8>) {
        match self.free.iter_mut().find(|(l, _)| *l == layout) {
            Some((_, blocks)) => blocks.push(block),
            None => self.free.push((layout, vec![block])),
        }
    }

    /// Drops the boxed value and keeps its block for [`boxed`](Self::boxed).
    pub(super) fn keep<T: ?Sized>(&mut self, value: Box<T>) {
        self.keep_as(value, Turn::Any);
    }

    /// As [`keep`](Self::keep), for the box made after the blocks queued
    /// since the last [`settle`](Self::settle).
    #[inline]
    pub(super) fn keep_in_turn<T: ?Sized>(&mut self, value: Box<T>) {
        self.keep_as(value, Turn::Queued);
    }

    /// Files the queued blocks that no box took, and starts a new queue.
    pub(super) fn settle(&mut self) {
        let mut queue = std::mem::take(&mut self.queue);
        for (layout, block) in queue.drain(self.next..) {
            self.file(layout, block);
        }
        queue.clear();
        self.queue = queue;
        self.next = 0;
    }

    #[inline]
    fn keep_as<T: ?Sized>(&mut self, value: Box<T>, turn: Turn) {
        let layout = Layout::for_value::<T>(&value);
        if layout.size() == 0 {
            return;
        }
        let raw = Box::into_raw(value);
        // Filed before the value is dropped: if its drop panics, the block
        // is still freed (by `Drop`), not leaked.
        let block = NonNull::new(raw.cast::<u8>()).expect("a box is never null");
        match turn {
            Turn::Queued => self.queue.push((layout, block)),
            Turn::Any => self.file(layout, block),
        }
        // SAFETY: `raw` came from `Box::into_raw`, so it points to a live
        // value that nothing else owns; it is dropped once, here, and its
        // memory is only reused or freed from the free list or the queue
        // from now on.
        unsafe { ptr::drop_in_place(raw) };
    }
}

/// Where [`BoxMemory::keep_as`] keeps a block.
#[derive(Copy, Clone)]
enum Turn {
    /// On its layout's free list.
    Any,
    /// At the end of the queue.
    Queued,
}

impl Drop for BoxMemory {
    fn drop(&mut self) {
        self.settle();
        for (layout, blocks) in self.free.drain(..) {
            for block in blocks {
                // SAFETY: allocated by the global allocator with `layout`
                // (module docs) and owned by the free list alone.
                unsafe { dealloc(block.as_ptr(), layout) };
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::BoxMemory;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    /// Blocks are reused by layout, values are dropped once when kept, and
    /// the reused box holds the new value.
    #[test]
    fn reuses_blocks_of_the_same_layout() {
        let drops = Arc::new(AtomicUsize::new(0));
        struct CountsDrop(Arc<AtomicUsize>, [u64; 3]);
        impl Drop for CountsDrop {
            fn drop(&mut self) {
                self.0.fetch_add(1, Ordering::Relaxed);
            }
        }
        let mut memory = BoxMemory::default();
        let first = memory.boxed(CountsDrop(drops.clone(), [1, 2, 3]));
        assert_eq!(first.1, [1, 2, 3]);
        let address = &*first as *const CountsDrop as usize;
        let erased: Box<dyn Send> = first;
        memory.keep(erased);
        assert_eq!(drops.load(Ordering::Relaxed), 1);
        // A value of another layout gets a new block, one of the same
        // layout (another type) the kept one.
        let second = memory.boxed([7u64, 8, 9, 10, 11]);
        assert_ne!(&*second as *const _ as usize, address, "a larger layout");
        let third = memory.boxed((4u64, 5u64, 6u64, drops.clone()));
        assert_eq!(&*third as *const _ as usize, address);
        assert_eq!(third.0 + third.1 + third.2, 15);
        drop(third);
        memory.keep(second);
        // Zero-sized values are not kept.
        memory.keep(Box::new(()));
        assert_eq!(memory.free.iter().map(|(_, b)| b.len()).sum::<usize>(), 1);
    }
}

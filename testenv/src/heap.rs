//! Heap bytes counted, not sampled: a global allocator that keeps, per
//! thread, the bytes allocated and not yet freed, so a unit test can say
//! exactly what building a value left on the heap — the guard behind the
//! per-object memory budgets (RSS figures stay in the benchmarks).
//!
//! ```ignore
//! #[cfg(test)]
//! #[global_allocator]
//! static HEAP: flotilla_testenv::heap::Counting = flotilla_testenv::heap::Counting;
//!
//! let (view, bytes) = flotilla_testenv::heap::heap_of(|| view(&pod));
//! ```
//!
//! Counted per thread, so tests running beside each other do not mix;
//! sizes are the ones asked for (malloc adds its own 8–16 bytes a chunk,
//! see [`Heap::allocations`]).
#![allow(unsafe_code)] // a GlobalAlloc is an unsafe trait; every call goes straight to System

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

thread_local! {
    /// Bytes allocated on this thread and not freed, and live allocations.
    static LIVE: Cell<(isize, isize)> = const { Cell::new((0, 0)) };
}

fn add(bytes: isize, allocations: isize) {
    // try_with: nothing to count during the thread's own teardown.
    let _ = LIVE.try_with(|c| {
        let (b, a) = c.get();
        c.set((b + bytes, a + allocations));
    });
}

/// The counting allocator: `System`, with every allocation counted on the
/// thread that makes it.
pub struct Counting;

// SAFETY: every method forwards to `System` with the caller's arguments
// unchanged; the counting touches only a thread-local `Cell`, which
// allocates nothing.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded as the caller gave it.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            add(layout.size() as isize, 1);
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded as the caller gave it.
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            add(layout.size() as isize, 1);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded as the caller gave it.
        unsafe { System.dealloc(ptr, layout) };
        add(-(layout.size() as isize), -1);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: forwarded as the caller gave it.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            add(new_size as isize - layout.size() as isize, 0);
        }
        p
    }
}

/// What a value holds on the heap.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Heap {
    /// Bytes asked of the allocator and still held.
    pub bytes: usize,
    /// Allocations still held (each costs malloc 8–16 bytes more).
    pub allocations: usize,
}

impl Heap {
    /// `bytes` plus malloc's per-chunk cost on 64-bit glibc (an 8-byte
    /// header, chunks rounded up to 16 bytes): about what RSS pays.
    pub fn with_malloc_overhead(&self) -> usize {
        self.bytes + 16 * self.allocations
    }
}

fn live() -> (isize, isize) {
    LIVE.try_with(Cell::get).unwrap_or((0, 0))
}

/// Runs `f` and returns its result with the heap it left allocated on this
/// thread: the result's own heap (a temporary freed inside `f` does not
/// count; the result's inline size does not either — box it to count it).
///
/// # Panics
/// When [`Counting`] is not the global allocator: a test that counted
/// nothing would pass whatever the budget.
pub fn heap_of<T>(f: impl FnOnce() -> T) -> (T, Heap) {
    let probe_before = live();
    let probe = std::hint::black_box(Vec::<u8>::with_capacity(64));
    let counted = live().0 - probe_before.0 >= 64;
    drop(probe);
    assert!(
        counted,
        "flotilla_testenv::heap::Counting is not the global allocator of this test binary: \
         add `#[global_allocator] static HEAP: flotilla_testenv::heap::Counting = flotilla_testenv::heap::Counting;`"
    );
    let before = live();
    let value = f();
    let after = live();
    let heap = Heap {
        bytes: usize::try_from(after.0 - before.0).unwrap_or(0),
        allocations: usize::try_from(after.1 - before.1).unwrap_or(0),
    };
    (value, heap)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_what_the_result_holds_and_not_what_was_freed() {
        let (s, heap) = heap_of(|| String::from("hello"));
        assert_eq!((s.as_str(), heap), ("hello", Heap { bytes: 5, allocations: 1 }));
        let (_, heap) = heap_of(|| {
            let scratch = vec![0u8; 1000];
            std::hint::black_box(&scratch);
            Box::new([7u64; 4])
        });
        assert_eq!(heap, Heap { bytes: 32, allocations: 1 });
        let (v, heap) = heap_of(|| {
            let mut v = Vec::with_capacity(1);
            v.extend(0u32..10);
            v
        });
        assert_eq!(heap.bytes, v.capacity() * 4, "a grown Vec counts its capacity");
        assert_eq!(heap.with_malloc_overhead(), heap.bytes + 16);
    }
}

//! Bytes the process's allocations hold right now, counted by a wrapper
//! around the global allocator ([`Counted`]; the `seatfence` binary uses
//! it around mimalloc). Resident memory (RSS) also counts what the
//! allocator keeps after a free and what sled maps; this is the program's
//! own share, so a soak can tell a leak from allocator retention
//! (`seatfence_heap_bytes` on `/metrics`).
//!
//! One relaxed atomic add per allocation and per free.

use std::alloc::{GlobalAlloc, Layout};
use std::sync::atomic::{AtomicI64, Ordering};

static HELD: AtomicI64 = AtomicI64::new(0);

/// Bytes held by allocations made through [`Counted`] and not yet freed;
/// `None` when the process does not count (tests, other binaries).
pub fn held_bytes() -> Option<u64> {
    let held = HELD.load(Ordering::Relaxed);
    (held > 0).then_some(held as u64)
}

/// A global allocator that counts the bytes `A` hands out.
pub struct Counted<A>(pub A);

// SAFETY: every call is forwarded to `A` unchanged; only the counter is
// added, and it never touches the memory.
unsafe impl<A: GlobalAlloc> GlobalAlloc for Counted<A> {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = self.0.alloc(layout);
        if !p.is_null() {
            HELD.fetch_add(layout.size() as i64, Ordering::Relaxed);
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let p = self.0.alloc_zeroed(layout);
        if !p.is_null() {
            HELD.fetch_add(layout.size() as i64, Ordering::Relaxed);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        self.0.dealloc(ptr, layout);
        HELD.fetch_sub(layout.size() as i64, Ordering::Relaxed);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let p = self.0.realloc(ptr, layout, new_size);
        if !p.is_null() {
            HELD.fetch_add(new_size as i64 - layout.size() as i64, Ordering::Relaxed);
        }
        p
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_what_is_held_and_forgets_what_is_freed() {
        let a = Counted(std::alloc::System);
        let before = HELD.load(Ordering::Relaxed);
        unsafe {
            let l = Layout::from_size_align(1000, 8).unwrap();
            let p = a.alloc(l);
            assert_eq!(HELD.load(Ordering::Relaxed) - before, 1000);
            let p = a.realloc(p, l, 3000);
            assert_eq!(HELD.load(Ordering::Relaxed) - before, 3000);
            a.dealloc(p, Layout::from_size_align(3000, 8).unwrap());
        }
        assert_eq!(HELD.load(Ordering::Relaxed), before);
    }
}

//! Bytes the process's allocations hold right now, counted by a wrapper
//! around the global allocator ([`Counted`]; the `seatfence` binary uses
//! it around jemalloc). Resident memory (RSS) also counts what the
//! allocator keeps after a free and what sled maps; this is the program's
//! own share, so a soak can tell a leak from allocator retention
//! (`seatfence_heap_bytes` on `/metrics`).
//!
//! One relaxed atomic add per allocation and per free.
//!
//! **Pre-touch** (`raft.pretouch`, off by default; the soak turns it on):
//! every allocation of [`PRETOUCH_MIN`] bytes or more has one byte of each
//! of its pages written when it is made (and a grown reallocation, its new
//! part), so it is resident at once rather than page by page as it is
//! first written. openraft reserves ~1.5 MiB of ring buffers per group
//! when it starts one, and a ring's pages fault in only as its head moves
//! over them, over hours: without pre-touch RSS climbs toward an allocated
//! heap that is not growing, which a soak's growth fit cannot tell from a
//! leak. With it, RSS is the allocated memory plus what the allocator and
//! the runtime keep, from the start. The cost: reserved capacity a group
//! would never have written is resident too (the JVM's `AlwaysPreTouch`
//! trade).

use std::alloc::{GlobalAlloc, Layout};
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};

static HELD: AtomicI64 = AtomicI64::new(0);
static PRETOUCH: AtomicBool = AtomicBool::new(false);

/// Allocations at least this large are pre-touched (when it is on).
pub const PRETOUCH_MIN: usize = 64 * 1024;
/// One write per this many bytes faults every page in.
const PAGE: usize = 4096;

/// Turn pre-touch on or off for allocations made from now on.
pub fn set_pretouch(on: bool) {
    PRETOUCH.store(on, Ordering::Relaxed);
}

/// Write a zero into every page of `p[from..to]` (memory this allocation
/// owns and has not initialized, or zeroed: a zero keeps it so).
///
/// # Safety
/// `p[from..to]` must be writable memory of one live allocation, with no
/// initialized content in it other than zeroes.
unsafe fn touch(p: *mut u8, from: usize, to: usize) {
    let mut at = from;
    while at < to {
        std::ptr::write_volatile(p.add(at), 0);
        at += PAGE;
    }
    if to > from {
        std::ptr::write_volatile(p.add(to - 1), 0);
    }
}

fn pretouch(size: usize) -> bool {
    size >= PRETOUCH_MIN && PRETOUCH.load(Ordering::Relaxed)
}

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
            if pretouch(layout.size()) {
                touch(p, 0, layout.size());
            }
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let p = self.0.alloc_zeroed(layout);
        if !p.is_null() {
            HELD.fetch_add(layout.size() as i64, Ordering::Relaxed);
            if pretouch(layout.size()) {
                touch(p, 0, layout.size());
            }
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
            if new_size > layout.size() && pretouch(new_size) {
                touch(p, layout.size(), new_size);
            }
        }
        p
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Both tests move the one process-wide counter: one at a time.
    static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

    #[test]
    fn counts_what_is_held_and_forgets_what_is_freed() {
        let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
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

    /// Pre-touch writes only where it may: a zeroed allocation stays
    /// zeroed, and a grown reallocation keeps what it held.
    #[test]
    fn pretouch_keeps_contents() {
        let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
        let a = Counted(std::alloc::System);
        set_pretouch(true);
        unsafe {
            let size = PRETOUCH_MIN * 3 + 100;
            let l = Layout::from_size_align(size, 8).unwrap();
            let z = a.alloc_zeroed(l);
            assert!((0..size).all(|i| *z.add(i) == 0));
            a.dealloc(z, l);

            let p = a.alloc(Layout::from_size_align(PRETOUCH_MIN, 8).unwrap());
            for i in 0..PRETOUCH_MIN {
                *p.add(i) = (i % 251) as u8 + 1;
            }
            let l = Layout::from_size_align(PRETOUCH_MIN, 8).unwrap();
            let p = a.realloc(p, l, size);
            assert!((0..PRETOUCH_MIN).all(|i| *p.add(i) == (i % 251) as u8 + 1));
            a.dealloc(p, Layout::from_size_align(size, 8).unwrap());
        }
        set_pretouch(false);
    }
}

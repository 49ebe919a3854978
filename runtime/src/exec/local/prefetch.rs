//! Asking the core for cache lines before they are needed.
//!
//! A small step of the threads backend is mostly misses on lines another core just wrote: a
//! root's eager slot, a peer's tensor. The core cannot guess which line comes next when the
//! lines are a ring slot apart or in separate tensors, so where the runtime knows, it asks for
//! them one step ahead, and the misses overlap with the step in hand.
//!
//! A prefetch is a hint: it reads nothing the program observes, cannot fault whatever the
//! address, and only costs a fetch if the line changes before it is read. On targets other
//! than x86-64 (and under Miri) it is nothing at all.

/// Asks for the cache line that holds `p`, to be read.
#[inline(always)]
pub(crate) fn line<T>(p: *const T) {
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    // SAFETY: a prefetch reads nothing the program observes and cannot fault, whatever the
    // address (module docs).
    unsafe {
        use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
        _mm_prefetch::<_MM_HINT_T0>(p.cast());
    }
    #[cfg(not(all(target_arch = "x86_64", not(miri))))]
    let _ = p;
}

/// Asks for every cache line of the `bytes` bytes from `p` (see [`line`]).
#[inline(always)]
pub(crate) fn lines<T>(p: *const T, bytes: usize) {
    let p = p.cast::<u8>();
    // Never dereferenced: wrapping arithmetic keeps a stray count from being undefined.
    for at in (0..bytes).step_by(crate::exec::CACHE_LINE) {
        line(p.wrapping_add(at));
    }
}

#[cfg(test)]
mod tests {
    use super::{line, lines};

    /// A hint never faults and reads nothing the program sees: addresses no buffer holds (null,
    /// unmapped, the top of the address space) and counts past any buffer are asked for too —
    /// a peer's unchecked entry may give any.
    #[test]
    fn hints_at_any_address_change_nothing() {
        let data = [7u8; 256];
        lines(data.as_ptr(), 64 * 1024);
        line(std::ptr::null::<u8>());
        lines(std::ptr::without_provenance::<u8>(usize::MAX - 100), 4096);
        lines(std::ptr::without_provenance::<u64>(0x10), 1 << 20);
        assert!(data.iter().all(|&b| b == 7));
    }
}

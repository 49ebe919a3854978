//! Where host tensors' memory comes from: the process's heap, or a *shared heap* that the other
//! processes of the job on this host have mapped too.
//!
//! Under MPI, ranks are processes, and a collective through shared memory could only copy each
//! tensor into a shared window and the results back out, because a peer cannot see another
//! process's heap. When a backend installs a shared heap ([`install`]; the MPI backend's
//! `arena`), host tensors that rankwise allocates (`Tensor::full`, `zeros`, `from_fn`, copies)
//! take their memory from it, and the backend can read and write them where they are, as the
//! threads backend does. A tensor built from the caller's own `Vec` (`from_vec`, `From<Vec>`)
//! keeps that `Vec`: its bytes are never copied just to be shared.
//!
//! Nothing else changes for the user: a tensor's memory is its own until it is dropped, and a
//! peer touches it only inside a collective that borrows the tensor (the call holds `&mut`),
//! on this rank's behalf.

// Only the MPI backend installs a shared heap (and counts its steps); without it, the
// allocator and those hooks are there but unused.
#![cfg_attr(not(feature = "mpi"), allow(dead_code))]

use std::ops::{Deref, DerefMut};
use std::ptr::NonNull;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::element::Element;

/// A heap other processes can read: blocks of at least `bytes`, 64-byte aligned.
pub(crate) trait SharedHeap: Send + Sync {
    /// A block of `bytes` (> 0) bytes, or `None` when the heap has no room (the caller then
    /// uses the process's heap).
    fn alloc(&self, bytes: usize) -> Option<NonNull<u8>>;

    /// Gives back a block.
    ///
    /// # Safety
    /// `block` came from this heap's `alloc(bytes)`, with the same `bytes`, and is not used
    /// after this call.
    unsafe fn free(&self, block: NonNull<u8>, bytes: usize);
}

static HEAP: OnceLock<&'static dyn SharedHeap> = OnceLock::new();

/// Steps of a shared-memory collective this process ran on tensors where they are.
static DIRECT_STEPS: AtomicU64 = AtomicU64::new(0);

/// Counts a step run on tensors where they are (see [`direct_steps`]).
pub(crate) fn note_direct_step() {
    DIRECT_STEPS.fetch_add(1, Ordering::Relaxed);
}

/// How many steps of shared-memory collectives this process ran with its tensors read and
/// written where they are, in its shared heap (0 without one): what the MPI tests check to
/// know that the direct path ran, not only that results were right.
pub fn direct_steps() -> u64 {
    DIRECT_STEPS.load(Ordering::Relaxed)
}

/// Calls the shared-memory window handed back because a sender's tensor was not in its heap.
static HANDED_BACK: AtomicU64 = AtomicU64::new(0);

/// Counts a call the window handed back (see [`handed_back`]).
pub(crate) fn note_handed_back() {
    HANDED_BACK.fetch_add(1, Ordering::Relaxed);
}

/// How many calls the MPI backend's shared-memory window handed back to run as without the
/// shared heap, because a sender's tensor lay outside it: what the MPI tests check to know
/// that path ran.
pub fn handed_back() -> u64 {
    HANDED_BACK.load(Ordering::Relaxed)
}

/// Makes `heap` the source of host tensors' memory for the rest of the process (the first
/// call wins: one backend per process).
pub(crate) fn install(heap: &'static dyn SharedHeap) {
    let _ = HEAP.set(heap);
}

/// The shared heap, if a backend installed one.
fn shared() -> Option<&'static dyn SharedHeap> {
    HEAP.get().copied()
}

/// Size classes of a shared heap, over byte offsets. Sizes are 64 bytes and then, between each
/// power of two `2^p` (from 256 bytes) and the next, its quarters: `2^p · 5/4`, `6/4`, `7/4`,
/// `2^(p+1)`, so that a block wastes at most a fifth of itself (the heap's memory is
/// `/dev/shm`'s, which a large model's tensors fill quickly). Blocks start at multiples of 64.
/// Freed blocks are kept per class and handed out again; new ones are cut from the end of what
/// is used. A loop that frees and allocates the same shapes (buffers made each step: the
/// common case) reuses the same blocks.
#[derive(Debug)]
pub(crate) struct Classes {
    /// Where the next new block starts.
    next: usize,
    /// Freed blocks' offsets, by class.
    free: Vec<Vec<usize>>,
}

/// A class: an index into [`Classes`]' lists.
pub(crate) type Class = usize;

/// The smallest block, 64 bytes (class 0): a cache line, so that no two tensors share one.
/// Classes 1 and 2 hold 128 and 256 bytes; from class 3 on, quarters (320, 384, 448, 512, 640…).
const LINE: usize = 64;

impl Classes {
    pub(crate) fn new() -> Self {
        Classes {
            next: 0,
            free: vec![Vec::new(); 4 * usize::BITS as usize],
        }
    }

    /// The smallest class whose blocks hold `bytes` bytes, if one can.
    pub(crate) fn class_of(bytes: usize) -> Option<Class> {
        if bytes <= LINE {
            return Some(0);
        }
        // 2^p < bytes <= 2^(p + 1); quarters from 2^8 up (below, powers of two: 128, 256).
        let p = (bytes - 1).ilog2() as usize;
        if p < 8 {
            return Some(p - 5);
        }
        let quarter = 1usize << (p - 2);
        let q = (bytes - (1 << p)).div_ceil(quarter);
        let class = 3 + 4 * (p - 8) + (q - 1);
        (Self::size_of(class)? >= bytes).then_some(class)
    }

    /// The bytes of a block of `class`.
    pub(crate) fn size_of(class: Class) -> Option<usize> {
        match class {
            0..=2 => Some(LINE << class),
            _ => {
                let (p, q) = (8 + (class - 3) / 4, 1 + (class - 3) % 4);
                let base = 1usize.checked_shl(p as u32)?;
                base.checked_add((base >> 2).checked_mul(q)?)
                    .filter(|_| p < usize::BITS as usize - 1)
            }
        }
    }

    /// A block of `class`: a freed one, or a new one if it ends within `limit`; `grow` is told
    /// where a new block ends first, and may refuse it (no memory behind it).
    pub(crate) fn take(
        &mut self,
        class: Class,
        limit: usize,
        grow: impl FnOnce(usize) -> bool,
    ) -> Option<usize> {
        let list = self.free.get_mut(class)?;
        if let Some(at) = list.pop() {
            return Some(at);
        }
        let size = Self::size_of(class)?;
        let at = self.next.next_multiple_of(LINE);
        let end = at.checked_add(size).filter(|&e| e <= limit)?;
        if !grow(end) {
            return None;
        }
        self.next = end;
        Some(at)
    }

    /// Gives back the block at `at` of `class`.
    pub(crate) fn give(&mut self, class: Class, at: usize) {
        if let Some(list) = self.free.get_mut(class) {
            list.push(at);
        }
    }
}

/// A host tensor's elements: a `Vec` on the process's heap, or a block of the shared heap.
pub(crate) enum HostMem<T: Element> {
    Heap(Vec<T>),
    Shared(Block<T>),
}

/// `len` elements in a block of a shared heap, given back when dropped.
pub(crate) struct Block<T: Element> {
    ptr: NonNull<T>,
    len: usize,
    heap: &'static dyn SharedHeap,
}

// SAFETY: a block belongs to this value alone (the heap hands each block out once, until this
// value's drop gives it back), like a `Vec`'s buffer; other processes touch it only within a
// collective that borrows the tensor. Elements are `Send + Sync`.
unsafe impl<T: Element> Send for Block<T> {}
// SAFETY: as above; `&Block` gives only shared access to the elements.
unsafe impl<T: Element> Sync for Block<T> {}

impl<T: Element> HostMem<T> {
    /// `len` elements, each `f(i)`: in the shared heap if there is one with room, else in a
    /// `Vec` (whose allocation failure is `Err(bytes)`, not an abort).
    pub(crate) fn build(len: usize, mut f: impl FnMut(usize) -> T) -> Result<Self, usize> {
        let bytes = len.saturating_mul(std::mem::size_of::<T>());
        if let Some(heap) = shared().filter(|_| bytes > 0)
            && let Some(block) = heap.alloc(bytes)
        {
            let ptr = block.cast::<T>();
            for i in 0..len {
                // SAFETY: the block holds `bytes` bytes, 64-byte aligned (a multiple of every
                // element's alignment), so element `i < len` is in bounds; writing does not
                // read the old bytes.
                unsafe { ptr.as_ptr().add(i).write(f(i)) };
            }
            return Ok(HostMem::Shared(Block { ptr, len, heap }));
        }
        let mut v = Vec::new();
        v.try_reserve_exact(len).map_err(|_| bytes)?;
        v.extend((0..len).map(f));
        Ok(HostMem::Heap(v))
    }

    /// The elements as a `Vec`: the `Vec` itself, or a copy of a shared block (then freed).
    pub(crate) fn into_vec(self) -> Vec<T> {
        match self {
            HostMem::Heap(v) => v,
            shared => shared.to_vec(),
        }
    }

    /// A copy, in the shared heap if there is room (as a new tensor would be).
    pub(crate) fn duplicate(&self) -> Result<Self, usize> {
        let from: &[T] = self;
        HostMem::build(from.len(), |i| from[i])
    }
}

impl<T: Element> Deref for HostMem<T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        match self {
            HostMem::Heap(v) => v,
            // SAFETY: the block holds `len` initialised elements (`build` wrote each), owned
            // by this value; every bit pattern other processes may leave is a valid element
            // (plain integers and IEEE floats).
            HostMem::Shared(b) => unsafe { std::slice::from_raw_parts(b.ptr.as_ptr(), b.len) },
        }
    }
}

impl<T: Element> DerefMut for HostMem<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        match self {
            HostMem::Heap(v) => v,
            // SAFETY: as in `deref`; `&mut self` is the only access.
            HostMem::Shared(b) => unsafe { std::slice::from_raw_parts_mut(b.ptr.as_ptr(), b.len) },
        }
    }
}

impl<T: Element> Drop for Block<T> {
    fn drop(&mut self) {
        let bytes = self.len * std::mem::size_of::<T>();
        // SAFETY: the block came from `heap.alloc(bytes)` in `HostMem::build` and is not used
        // after.
        unsafe { self.heap.free(self.ptr.cast(), bytes) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every size gets the smallest class that holds it, and wastes at most a fifth of it above
    /// 256 bytes: checked against the sizes themselves, around every boundary up to 1 TiB.
    #[test]
    fn classes_hold_their_sizes_and_waste_at_most_a_fifth() {
        let mut sizes = vec![
            1usize, 63, 64, 65, 127, 128, 129, 255, 256, 257, 300, 320, 321, 1000, 1024, 1025,
        ];
        for p in 8..40 {
            for q in 0..=4 {
                let b = (1usize << p) + q * (1usize << (p - 2));
                sizes.extend([b - 1, b, b + 1]);
            }
        }
        for bytes in sizes {
            let c = Classes::class_of(bytes).unwrap_or_else(|| panic!("{bytes} has a class"));
            let size = Classes::size_of(c).expect("a class has a size");
            assert!(size >= bytes, "{bytes} in class {c} of {size}");
            if c > 0 {
                let smaller = Classes::size_of(c - 1).expect("a size");
                assert!(
                    smaller < bytes,
                    "{bytes}: class {} of {smaller} would do",
                    c - 1
                );
            }
            assert!(size.is_multiple_of(64));
            if bytes > 256 {
                assert!(
                    size - bytes <= size / 5,
                    "{bytes} wastes {} of {size}",
                    size - bytes
                );
            }
        }
        assert_eq!(Classes::class_of(usize::MAX), None);
        assert_eq!(Classes::size_of(10_000), None);
    }

    /// New blocks are cut in order at 64-byte boundaries, freed ones come back by class,
    /// and a block past the limit, or one `grow` refuses, is `None` and changes nothing.
    #[test]
    fn blocks_are_cut_reused_by_class_and_bounded() {
        let (line, kib, four) = (
            0,
            Classes::class_of(1024).unwrap(),
            Classes::class_of(4096).unwrap(),
        );
        assert_eq!(Classes::size_of(kib), Some(1024));
        let mut c = Classes::new();
        let ok = |_| true;
        assert_eq!(c.take(line, 4096, ok), Some(0));
        assert_eq!(c.take(kib, 4096, ok), Some(64));
        assert_eq!(c.take(line, 4096, ok), Some(64 + 1024));
        c.give(kib, 64);
        c.give(line, 0);
        assert_eq!(
            c.take(kib, 4096, ok),
            Some(64),
            "a freed block of the class"
        );
        assert_eq!(c.take(line, 4096, ok), Some(0));
        assert_eq!(
            c.take(line, 4096, ok),
            Some(64 + 1024 + 64),
            "then new ones again"
        );
        let mut asked = None;
        assert_eq!(
            c.take(four, 8192, |end| {
                asked = Some(end);
                false
            }),
            None,
            "refused by grow"
        );
        assert_eq!(asked, Some(1216 + 4096));
        assert_eq!(c.take(four, 4096, ok), None, "past the limit");
        assert_eq!(c.take(line, 4096, ok), Some(1216), "neither moved the end");
        assert_eq!(c.take(10_000, usize::MAX, ok), None, "no such class");
    }

    /// A heap of plain memory standing in for a shared one: every block it hands out is in
    /// bounds, aligned and unique while held (the tensors' data never mix). In a static, as a
    /// shared heap lives for the process (and Miri sees nothing leaked).
    struct Plain {
        memory: Box<[std::cell::UnsafeCell<u64>]>,
        state: std::sync::Mutex<Classes>,
    }

    // SAFETY: the memory is only reached through blocks, each used by one owner at a time.
    unsafe impl Sync for Plain {}

    const PLAIN_BYTES: usize = 1 << 16;

    impl Plain {
        fn base(&self) -> usize {
            // 64-byte aligned within the memory (it has a line to spare).
            (self.memory.as_ptr() as usize).next_multiple_of(64)
        }
    }

    impl SharedHeap for Plain {
        fn alloc(&self, bytes: usize) -> Option<NonNull<u8>> {
            let c = Classes::class_of(bytes)?;
            let at = self.state.lock().ok()?.take(c, PLAIN_BYTES, |_| true)?;
            // The block's address, derived from the cells' memory (writable through them).
            let first = std::cell::UnsafeCell::raw_get(self.memory.as_ptr()) as *mut u8;
            NonNull::new(first.wrapping_add(self.base() - first as usize + at))
        }
        unsafe fn free(&self, block: NonNull<u8>, bytes: usize) {
            if let (Some(c), Ok(mut s)) = (Classes::class_of(bytes), self.state.lock()) {
                s.give(c, block.as_ptr() as usize - self.base());
            }
        }
    }

    static PLAIN: OnceLock<Plain> = OnceLock::new();

    #[test]
    fn shared_blocks_hold_their_elements_until_dropped_and_copies_are_separate() {
        let heap: &'static Plain = PLAIN.get_or_init(|| Plain {
            memory: (0..PLAIN_BYTES / 8 + 8)
                .map(|_| std::cell::UnsafeCell::new(0))
                .collect(),
            state: std::sync::Mutex::new(Classes::new()),
        });
        let make = |len: usize, k: f32| -> HostMem<f32> {
            let block = heap.alloc((len * 4).max(1)).expect("room");
            let ptr = block.cast::<f32>();
            for i in 0..len {
                // SAFETY: in the block just taken.
                unsafe { ptr.as_ptr().add(i).write(k + i as f32) };
            }
            HostMem::Shared(Block { ptr, len, heap })
        };
        let a = make(300, 1.0);
        let mut b = make(300, 1000.0);
        assert_eq!(a[299], 300.0);
        b[0] = -1.0;
        assert_eq!(a[0], 1.0, "a and b are separate blocks");
        let at = a.as_ptr() as usize;
        drop(a);
        let c = make(300, 5.0);
        assert_eq!(c.as_ptr() as usize, at, "the freed block is reused");
        assert_eq!(c.to_vec()[..2], [5.0, 6.0]);
        let d = c.duplicate().expect("a copy");
        assert_eq!(d[..2], [5.0, 6.0]);
        assert_ne!(d.as_ptr(), c.as_ptr());
        assert_eq!(b.into_vec()[..2], [-1.0, 1001.0]);
    }
}

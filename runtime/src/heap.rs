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

/// Makes `heap` the source of host tensors' memory for the rest of the process (the first
/// call wins: one backend per process).
pub(crate) fn install(heap: &'static dyn SharedHeap) {
    let _ = HEAP.set(heap);
}

/// The shared heap, if a backend installed one.
fn shared() -> Option<&'static dyn SharedHeap> {
    HEAP.get().copied()
}

/// Size classes of a shared heap, over byte offsets: a block of class `c` holds `2^c` bytes and
/// starts at a multiple of 64. Freed blocks are kept per class and handed out again; new ones
/// are cut from the end of what is used. A tensor loop that frees and allocates the same shapes
/// (the common case: buffers made each step) reuses the same blocks.
#[derive(Debug)]
pub(crate) struct Classes {
    /// Where the next new block starts.
    next: usize,
    /// Freed blocks' offsets, by class.
    free: Vec<Vec<usize>>,
}

/// The smallest block: a cache line, so that no two tensors share one.
const MIN_CLASS: u32 = 6;

impl Classes {
    pub(crate) fn new() -> Self {
        Classes {
            next: 0,
            free: vec![Vec::new(); usize::BITS as usize],
        }
    }

    /// The class of a block of `bytes` bytes, if one can hold it.
    pub(crate) fn class_of(bytes: usize) -> Option<u32> {
        let c = bytes.checked_next_power_of_two()?.trailing_zeros();
        Some(c.max(MIN_CLASS))
    }

    /// A block of class `class`: a freed one, or a new one if it ends within `limit`; `grow`
    /// is told where a new block ends first, and may refuse it (no memory behind it).
    pub(crate) fn take(
        &mut self,
        class: u32,
        limit: usize,
        grow: impl FnOnce(usize) -> bool,
    ) -> Option<usize> {
        let list = self.free.get_mut(class as usize)?;
        if let Some(at) = list.pop() {
            return Some(at);
        }
        let size = 1usize.checked_shl(class)?;
        let at = self.next.next_multiple_of(1 << MIN_CLASS);
        let end = at.checked_add(size).filter(|&e| e <= limit)?;
        if !grow(end) {
            return None;
        }
        self.next = end;
        Some(at)
    }

    /// Gives back the block at `at` of class `class`.
    pub(crate) fn give(&mut self, class: u32, at: usize) {
        if let Some(list) = self.free.get_mut(class as usize) {
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
            {
                let ptr = block.cast::<T>();
                for i in 0..len {
                    // SAFETY: the block holds `bytes` bytes, 64-byte aligned (a multiple of
                    // every element's alignment), so element `i < len` is in bounds; writing
                    // does not read the old bytes.
                    unsafe { ptr.as_ptr().add(i).write(f(i)) };
                }
                return Ok(HostMem::Shared(Block { ptr, len, heap }));
            }
        }
        let mut v = Vec::new();
        v.try_reserve_exact(len).map_err(|_| bytes)?;
        v.extend((0..len).map(f));
        Ok(HostMem::Heap(v))
    }

    /// A copy of the elements as a `Vec`.
    pub(crate) fn to_vec(&self) -> Vec<T> {
        self.deref().to_vec()
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

    #[test]
    fn classes_round_up_to_a_line_and_powers_of_two() {
        assert_eq!(Classes::class_of(1), Some(6));
        assert_eq!(Classes::class_of(64), Some(6));
        assert_eq!(Classes::class_of(65), Some(7));
        assert_eq!(Classes::class_of(1024), Some(10));
        assert_eq!(Classes::class_of(1025), Some(11));
        assert_eq!(Classes::class_of(usize::MAX), None);
    }

    /// New blocks are cut in order at 64-byte boundaries, freed ones come back by class,
    /// and a block past the limit, or one `grow` refuses, is `None` and changes nothing.
    #[test]
    fn blocks_are_cut_reused_by_class_and_bounded() {
        let mut c = Classes::new();
        let ok = |_| true;
        assert_eq!(c.take(6, 4096, ok), Some(0));
        assert_eq!(c.take(10, 4096, ok), Some(64));
        assert_eq!(c.take(6, 4096, ok), Some(64 + 1024));
        c.give(10, 64);
        c.give(6, 0);
        assert_eq!(c.take(10, 4096, ok), Some(64), "a freed block of the class");
        assert_eq!(c.take(6, 4096, ok), Some(0));
        assert_eq!(
            c.take(6, 4096, ok),
            Some(64 + 1024 + 64),
            "then new ones again"
        );
        let mut asked = None;
        assert_eq!(
            c.take(12, 8192, |end| {
                asked = Some(end);
                false
            }),
            None,
            "refused by grow"
        );
        assert_eq!(asked, Some(1216 + 4096));
        assert_eq!(c.take(12, 4096, ok), None, "past the limit");
        assert_eq!(c.take(6, 4096, ok), Some(1216), "neither moved the end");
        assert_eq!(c.take(70, usize::MAX, ok), None, "no such class");
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

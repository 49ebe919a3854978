//! Where host tensors' memory comes from: 64-byte-aligned blocks of the process's heap, or of a
//! *shared heap* that the other processes of the job on this host have mapped too.
//!
//! Host tensors that rankwise allocates (`Tensor::full`, `zeros`, `from_fn`, copies) start on
//! a cache line, as PyTorch's CPU allocator places its tensors: the kernels read and write
//! whole lines, and a vector loop over a tensor that starts mid-line touches one line more
//! per group and splits its loads (a `Vec` starts 16 bytes past a line as often as not; at
//! world 2 a 64 KiB all_gather took 1.53–1.56 µs aligned against 1.68–1.71, a reduce_scatter
//! 1.36–1.39 against 1.54–1.60; `docs/decisions.md`, session 43). A tensor built from the
//! caller's own `Vec` (`from_vec`, `From<Vec>`) keeps that `Vec`: its bytes are never copied
//! just to be aligned or shared.
//!
//! Under MPI, ranks are processes, and a collective through shared memory could only copy each
//! tensor into a shared window and the results back out, because a peer cannot see another
//! process's heap. When a backend installs a shared heap ([`install`]; the MPI backend's
//! `arena`), tensors that rankwise allocates take their memory from it, and the backend can
//! read and write them where they are, as the threads backend does.
//!
//! Nothing else changes for the user: a tensor's memory is its own until it is dropped, and a
//! peer touches it only inside a collective that borrows the tensor (the call holds `&mut`),
//! on this rank's behalf.

// Only the MPI backend installs a shared heap (and counts its steps); without it, those hooks
// are there but unused.
#![cfg_attr(not(feature = "mpi"), allow(dead_code))]

use std::ops::{Deref, DerefMut};
use std::ptr::NonNull;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::element::Element;

/// Where blocks of host tensors come from: blocks of at least `bytes`, 64-byte aligned. The
/// process's heap ([`PROCESS`]), or a heap other processes can read ([`install`]).
pub(crate) trait Heap: Send + Sync {
    /// A block of `bytes` (> 0) bytes, or `None` when the heap has no room (a shared heap's
    /// caller then uses the process's heap).
    fn alloc(&self, bytes: usize) -> Option<NonNull<u8>>;

    /// Gives back a block.
    ///
    /// # Safety
    /// `block` came from this heap's `alloc(bytes)`, with the same `bytes`, and is not used
    /// after this call.
    unsafe fn free(&self, block: NonNull<u8>, bytes: usize);
}

static HEAP: OnceLock<&'static dyn Heap> = OnceLock::new();

/// The alignment of every block: a cache line.
const ALIGN: usize = 64;

/// The process's heap, through the global allocator, in 64-byte-aligned blocks.
pub(crate) struct Process;

/// The process's heap.
pub(crate) static PROCESS: Process = Process;

impl Heap for Process {
    fn alloc(&self, bytes: usize) -> Option<NonNull<u8>> {
        let layout = std::alloc::Layout::from_size_align(bytes, ALIGN).ok()?;
        // SAFETY: `bytes > 0` (the trait's contract), so the layout is not zero-sized.
        NonNull::new(unsafe { std::alloc::alloc(layout) })
    }

    unsafe fn free(&self, block: NonNull<u8>, bytes: usize) {
        // `alloc` made a block of this size, so the layout is valid.
        if let Ok(layout) = std::alloc::Layout::from_size_align(bytes, ALIGN) {
            // SAFETY: the block came from `alloc` with this layout (the trait's contract).
            unsafe { std::alloc::dealloc(block.as_ptr(), layout) };
        }
    }
}

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
pub(crate) fn install(heap: &'static dyn Heap) {
    let _ = HEAP.set(heap);
}

/// The shared heap, if a backend installed one.
fn shared() -> Option<&'static dyn Heap> {
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
const LINE: usize = crate::exec::CACHE_LINE;

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

/// A host tensor's elements: the caller's own `Vec` (`from_vec`), or a block of a [`Heap`].
pub(crate) enum HostMem<T: Element> {
    Vec(Vec<T>),
    Block(Block<T>),
}

/// `len` elements in a block of a [`Heap`], given back when dropped.
pub(crate) struct Block<T: Element> {
    ptr: NonNull<T>,
    len: usize,
    heap: &'static dyn Heap,
}

// SAFETY: a block belongs to this value alone (the heap hands each block out once, until this
// value's drop gives it back), like a `Vec`'s buffer; other processes touch it only within a
// collective that borrows the tensor. Elements are `Send + Sync`.
unsafe impl<T: Element> Send for Block<T> {}
// SAFETY: as above; `&Block` gives only shared access to the elements.
unsafe impl<T: Element> Sync for Block<T> {}

/// A block whose elements are still being written: given back if writing them panics (a
/// user's `from_fn` closure).
struct Unfilled {
    block: NonNull<u8>,
    bytes: usize,
    heap: &'static dyn Heap,
}

impl Drop for Unfilled {
    fn drop(&mut self) {
        // SAFETY: the block came from `heap.alloc(bytes)` and holds no element anyone reads.
        unsafe { self.heap.free(self.block, self.bytes) };
    }
}

impl<T: Element> Block<T> {
    /// The block `block` of `heap` with its `len` elements written, each `f(i)`; given back to
    /// the heap if `f` panics.
    ///
    /// # Safety
    /// `block` came from `heap.alloc(len * size_of::<T>())` (a size that did not overflow) and
    /// is used by nothing else.
    unsafe fn fill(
        block: NonNull<u8>,
        heap: &'static dyn Heap,
        len: usize,
        mut f: impl FnMut(usize) -> T,
    ) -> Self {
        let bytes = len * std::mem::size_of::<T>();
        let unfilled = Unfilled { block, bytes, heap };
        let ptr = block.cast::<T>();
        for i in 0..len {
            // SAFETY: the block holds `bytes` bytes, 64-byte aligned (a multiple of every
            // element's alignment), so element `i < len` is in bounds; writing does not read
            // the old bytes.
            unsafe { ptr.as_ptr().add(i).write(f(i)) };
        }
        std::mem::forget(unfilled); // every element written: the block is the tensor's now
        Block { ptr, len, heap }
    }
}

impl<T: Element> HostMem<T> {
    /// `len` elements, each `f(i)`, in a block of the shared heap if there is one with room,
    /// else of the process's heap (whose allocation failure is `Err(bytes)`, not an abort).
    pub(crate) fn build(len: usize, f: impl FnMut(usize) -> T) -> Result<Self, usize> {
        let Some(bytes) = len.checked_mul(std::mem::size_of::<T>()) else {
            return Err(usize::MAX);
        };
        if bytes == 0 {
            return Ok(HostMem::Vec(Vec::new())); // no elements: nothing to place
        }
        let (block, heap) = match shared().and_then(|h| Some((h.alloc(bytes)?, h))) {
            Some(found) => found,
            None => (
                PROCESS.alloc(bytes).ok_or(bytes)?,
                &PROCESS as &'static dyn Heap,
            ),
        };
        // SAFETY: a new block of `heap` of `len` elements' bytes.
        Ok(HostMem::Block(unsafe { Block::fill(block, heap, len, f) }))
    }

    /// The elements as a `Vec`: the caller's `Vec` itself, or a copy of a block (then freed).
    pub(crate) fn into_vec(self) -> Vec<T> {
        match self {
            HostMem::Vec(v) => v,
            block => block.to_vec(),
        }
    }

    /// A copy, placed as a new tensor would be.
    pub(crate) fn duplicate(&self) -> Result<Self, usize> {
        let from: &[T] = self;
        HostMem::build(from.len(), |i| from[i])
    }
}

impl<T: Element> Deref for HostMem<T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        match self {
            HostMem::Vec(v) => v,
            // SAFETY: the block holds `len` initialised elements (`build` wrote each), owned
            // by this value; every bit pattern other processes may leave is a valid element
            // (plain integers and IEEE floats).
            HostMem::Block(b) => unsafe { std::slice::from_raw_parts(b.ptr.as_ptr(), b.len) },
        }
    }
}

impl<T: Element> DerefMut for HostMem<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        match self {
            HostMem::Vec(v) => v,
            // SAFETY: as in `deref`; `&mut self` is the only access.
            HostMem::Block(b) => unsafe { std::slice::from_raw_parts_mut(b.ptr.as_ptr(), b.len) },
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

    impl Heap for Plain {
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
            let block = heap.alloc(len * 4).expect("room");
            // SAFETY: a block just taken from `heap`, of `len` f32s.
            HostMem::Block(unsafe { Block::fill(block, heap, len, |i| k + i as f32) })
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

    /// Blocks of the process's heap start on a cache line and hold exactly the elements
    /// written, for element types of every size and lengths around the line; copies and
    /// `into_vec` keep the elements, and no elements means no block.
    #[test]
    fn process_blocks_are_aligned_and_hold_their_elements() {
        fn check<T: Element>(make: impl Fn(usize) -> T) {
            for len in [1usize, 3, 15, 16, 17, 63, 64, 65, 1000, 4097] {
                let m = HostMem::build(len, &make).expect("memory");
                assert!(matches!(m, HostMem::Block(_)));
                assert_eq!(m.as_ptr() as usize % 64, 0, "{len} elements");
                assert!((0..len).all(|i| m[i] == make(i)), "{len} elements");
                let d = m.duplicate().expect("memory");
                assert_eq!(d.as_ptr() as usize % 64, 0);
                assert_ne!(d.as_ptr(), m.as_ptr());
                assert!(*d == *m);
                assert_eq!(m.into_vec(), (0..len).map(&make).collect::<Vec<_>>());
            }
            let empty = HostMem::<T>::build(0, &make).expect("nothing to allocate");
            assert!(matches!(empty, HostMem::Vec(ref v) if v.is_empty()));
        }
        check(|i| i as u8);
        check(|i| half::f16::from_f32(i as f32));
        check(|i| i as f32 * 0.5);
        check(|i| i as i64 - 7);
        check(|i| i as f64 / 3.0);
        let too_many = HostMem::<f64>::build(usize::MAX / 4, |_| 0.0);
        assert!(
            too_many.is_err(),
            "more bytes than a size holds is an error, not an abort"
        );
        if !cfg!(miri) {
            let too_big = HostMem::<u8>::build(1 << 50, |_| 0);
            assert!(too_big.is_err(), "a petabyte is an error, not an abort");
        }
    }

    /// The process's heap, counting the blocks it hands out and gets back.
    struct Counted(AtomicU64, AtomicU64);

    impl Heap for Counted {
        fn alloc(&self, bytes: usize) -> Option<NonNull<u8>> {
            self.0.fetch_add(1, Ordering::Relaxed);
            PROCESS.alloc(bytes)
        }
        unsafe fn free(&self, block: NonNull<u8>, bytes: usize) {
            self.1.fetch_add(1, Ordering::Relaxed);
            // SAFETY: the block came from `PROCESS.alloc(bytes)` (the caller's contract).
            unsafe { PROCESS.free(block, bytes) }
        }
    }

    static COUNTED: Counted = Counted(AtomicU64::new(0), AtomicU64::new(0));

    /// A block whose elements' closure panics (a user's `from_fn`) goes back to its heap; one
    /// filled whole goes back when its tensor is dropped, once.
    #[test]
    fn a_block_goes_back_once_even_when_filling_it_panics() {
        let take = || COUNTED.alloc(400).expect("memory");
        let panicked = std::panic::catch_unwind(|| {
            // SAFETY: a new block of 100 f32s from `COUNTED`.
            unsafe {
                Block::<f32>::fill(take(), &COUNTED, 100, |i| {
                    if i < 40 { 1.0 } else { panic!("at {i}") }
                })
            }
        });
        assert!(panicked.is_err());
        assert_eq!(
            COUNTED.1.load(Ordering::Relaxed),
            1,
            "given back after the panic"
        );
        // SAFETY: as above.
        let whole = unsafe { Block::<f32>::fill(take(), &COUNTED, 100, |i| i as f32) };
        assert_eq!(
            COUNTED.1.load(Ordering::Relaxed),
            1,
            "kept while the tensor lives"
        );
        let mem = HostMem::Block(whole);
        assert_eq!(mem[99], 99.0);
        drop(mem);
        assert_eq!(COUNTED.0.load(Ordering::Relaxed), 2);
        assert_eq!(
            COUNTED.1.load(Ordering::Relaxed),
            2,
            "given back when dropped"
        );
    }
}

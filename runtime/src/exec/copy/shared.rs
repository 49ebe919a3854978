//! Copies into memory that a process on another core reads next: plain, or with streaming
//! stores when plain ones wait on the other core's cache (see [`copy_to_shared`]).

use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering::Relaxed};
use std::time::Instant;

use super::copy_bytes;
use crate::error::Result;
use crate::vars::{self, Choice};

/// Copies into shared memory at least this long are timed or streamed by [`copy_to_shared`]:
/// a 64 KiB broadcast's message, or a pair's 64 KiB all_to_all. A world-4 all_to_all of
/// 64 KiB (16 KiB per peer) gained nothing from streaming, and below it a copy costs too
/// little to time well.
const SHARED_FROM: usize = if cfg!(miri) { 64 } else { 32 * 1024 };

/// While streaming, every this many copies into shared memory is a plain one, timed, to see
/// whether plain stores have become cheap again.
const PROBE_EVERY: u32 = 16;

/// Plain copies into shared memory slower than this many bytes per nanosecond (10 GB/s) wait
/// on another core's cache: stream instead. On this machine, a 64 KiB plain copy into lines a
/// peer had read ran at 29 GB/s in one state of the VM and at 3.3–6.6 GB/s in the other;
/// streaming stores at 14–22 GB/s in both.
const SLOW_BYTES_PER_NS: u128 = 10;

/// Whether this process streams its copies into shared memory.
static STREAMING: AtomicBool = AtomicBool::new(false);
/// Copies into shared memory since the last timed one.
static SINCE_PROBE: AtomicU32 = AtomicU32::new(0);

/// What `RANKWISE_SHARED_STORES` asks for: `plain`, `stream`, or (unset, or `measured`) a
/// choice by measurement.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum StoreMode {
    Plain,
    Stream,
    Measured,
}

/// `RANKWISE_SHARED_STORES`'s settings.
const STORE_MODES: [Choice<StoreMode>; 3] = [
    Choice {
        values: &["plain"],
        means: "plain stores",
        value: StoreMode::Plain,
    },
    Choice {
        values: &["stream"],
        means: "streaming stores",
        value: StoreMode::Stream,
    },
    Choice {
        values: &["measured"],
        means: "whichever this process measures cheaper: the default",
        value: StoreMode::Measured,
    },
];

/// This process's mode, once [`read_store_mode`] has read it.
static MODE: OnceLock<StoreMode> = OnceLock::new();

/// Reads `RANKWISE_SHARED_STORES` (the MPI backend does, at start, so that a value it does not
/// know is an error before anything runs).
#[cfg_attr(not(feature = "mpi"), allow(dead_code))] // the lanes' tests build this without MPI
pub(crate) fn read_store_mode() -> Result<()> {
    let mode = vars::read("RANKWISE_SHARED_STORES", &STORE_MODES)?.unwrap_or(StoreMode::Measured);
    // A second start in one process reads the same environment.
    let _ = MODE.set(mode);
    Ok(())
}

/// This process's mode: measured until [`read_store_mode`] says otherwise.
fn store_mode() -> StoreMode {
    MODE.get().copied().unwrap_or(StoreMode::Measured)
}

/// Copies `len` bytes from `src` to `dst`, a shared-memory lane's message that a process on
/// another core reads next: plain ([`copy_bytes`]) or with streaming stores, whichever this
/// process measured cheaper. A streamed copy ends with a store fence, so that the release
/// store that publishes the message orders after it, as it does after plain stores.
///
/// Why: a plain store must first take its line from the cache of the core that read it last
/// (the receiver, a lap of the lane's ring earlier). On this VM that transfer is itself
/// bimodal (the hypervisor places the two vCPUs near or far from each other: a line's round
/// trip between them takes 127–160 ns or 496–938 ns), and in the far state a 64 KiB copy into
/// lines a peer had read took 10–20 µs instead of 2.3. Streaming stores drop the peer's copy
/// without fetching it and write through to memory, where the peer then reads: 3–4 µs for the
/// writer in either state, but the reader's misses go to memory, which in the near state costs
/// more than the writer saves (a 64 KiB hand-off: 6.4 µs plain, 10.8 µs streamed). So the
/// process times a plain copy now and then ([`PROBE_EVERY`]) and streams while plain ones run
/// below [`SLOW_BYTES_PER_NS`]. `RANKWISE_SHARED_STORES=plain` or `=stream` fixes the choice.
///
/// (The window's packed and sliced reductions, `mpi::shm`, stay plain: streamed, their 1 MiB
/// all_reduce at world 2 took 0.41–1.05× raw MPI's time against 0.53–0.71× plain — the folds
/// read what was just written, and reads from memory cost them more than the writes save.)
///
/// # Safety
/// As for [`std::ptr::copy_nonoverlapping`].
pub(crate) unsafe fn copy_to_shared(dst: *mut u8, src: *const u8, len: usize) {
    if len < SHARED_FROM {
        // SAFETY: the caller's contract.
        unsafe { copy_bytes(dst, src, len) };
        return;
    }
    let mode = store_mode();
    let stream = match mode {
        StoreMode::Plain => false,
        StoreMode::Stream => true,
        StoreMode::Measured => {
            STREAMING.load(Relaxed) && SINCE_PROBE.fetch_add(1, Relaxed) + 1 < PROBE_EVERY
        }
    };
    if stream {
        // SAFETY: the caller's contract.
        unsafe { copy_streaming(dst, src, len) };
        store_fence();
        return;
    }
    let timed = (mode == StoreMode::Measured).then(Instant::now);
    // SAFETY: the caller's contract.
    unsafe { copy_bytes(dst, src, len) };
    if let Some(start) = timed {
        let ns = start.elapsed().as_nanos();
        if let Some(slow) = verdict(ns, len) {
            STREAMING.store(slow, Relaxed);
        }
        SINCE_PROBE.store(0, Relaxed);
    }
}

/// Whether a plain copy of `len` bytes into shared memory that took `ns` nanoseconds says to
/// stream; nothing when it ran below 1 GB/s, slower than any state of the caches makes a copy:
/// its process lost the core meanwhile (ranks outnumber cores on a busy host), which says
/// nothing about the caches.
fn verdict(ns: u128, len: usize) -> Option<bool> {
    (ns <= len as u128).then_some(ns * SLOW_BYTES_PER_NS > len as u128)
}

/// Orders every streaming store before any later store (they are otherwise weakly ordered).
fn store_fence() {
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    // SAFETY: SSE2, which `_mm_sfence` needs, is part of x86-64's baseline.
    unsafe {
        std::arch::x86_64::_mm_sfence()
    };
}

/// Copies with streaming stores: whole aligned 64-byte lines of `dst` with SSE2's
/// non-temporal stores (part of x86-64's baseline), the partial lines at either end with
/// plain ones. The caller fences ([`store_fence`]) before publishing. Elsewhere, and under
/// Miri, a plain [`copy_bytes`].
///
/// # Safety
/// As for [`std::ptr::copy_nonoverlapping`].
unsafe fn copy_streaming(dst: *mut u8, src: *const u8, len: usize) {
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    {
        use std::arch::x86_64::{__m128i, _mm_loadu_si128, _mm_stream_si128};
        const LINE: usize = crate::exec::CACHE_LINE;
        let head = ((dst as usize).wrapping_neg() % LINE).min(len);
        // SAFETY: `[0, head)` lies within both regions (`head <= len`).
        unsafe { std::ptr::copy_nonoverlapping(src, dst, head) };
        let mut at = head;
        while len - at >= LINE {
            // SAFETY: `[at, at + LINE)` lies within both regions, and `dst + at` is aligned to
            // 64 bytes (so to the 16 a streaming store needs); loads may be unaligned.
            unsafe {
                for k in (0..LINE).step_by(16) {
                    let v = _mm_loadu_si128(src.add(at + k).cast::<__m128i>());
                    _mm_stream_si128(dst.add(at + k).cast::<__m128i>(), v);
                }
            }
            at += LINE;
        }
        // SAFETY: the rest, `[at, len)`, likewise.
        unsafe { std::ptr::copy_nonoverlapping(src.add(at), dst.add(at), len - at) };
    }
    #[cfg(not(all(target_arch = "x86_64", not(miri))))]
    // SAFETY: the caller's contract.
    unsafe {
        copy_bytes(dst, src, len)
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_store_modes_are_plain_stream_and_measured_and_nothing_else() {
        let read = |v| vars::parse("RANKWISE_SHARED_STORES", v, &STORE_MODES);
        assert!(matches!(read("plain"), Ok(Some(StoreMode::Plain))));
        assert!(matches!(read(" Stream "), Ok(Some(StoreMode::Stream))));
        assert!(matches!(read("measured"), Ok(Some(StoreMode::Measured))));
        assert!(matches!(read(""), Ok(None)));
        let e = read("strem").expect_err("a typo");
        assert!(
            e.to_string()
                .contains("RANKWISE_SHARED_STORES=\"strem\" is not a setting"),
            "{e}"
        );
    }

    /// The measured 64 KiB copies of the two states of this VM fall on either side; a copy
    /// that lost its core decides nothing.
    #[test]
    fn plain_copies_below_ten_gigabytes_a_second_switch_to_streaming_unless_descheduled() {
        assert_eq!(verdict(2_250, 64 << 10), Some(false), "29 GB/s is fast");
        assert_eq!(verdict(6_500, 64 << 10), Some(false), "10.1 GB/s is fast");
        assert_eq!(verdict(6_600, 64 << 10), Some(true), "9.9 GB/s is slow");
        assert_eq!(verdict(19_000, 64 << 10), Some(true), "3.4 GB/s is slow");
        assert_eq!(verdict(65_000, 64 << 10), Some(true), "1.01 GB/s is slow");
        assert_eq!(verdict(70_000, 64 << 10), None, "0.94 GB/s was descheduled");
    }

    /// Streaming copies land every byte, at every alignment of either end and lengths around
    /// a line, and touch nothing outside the range; so do copies into shared memory, which
    /// time or stream them.
    #[test]
    fn streaming_copies_copy_every_byte_and_no_more() {
        let lens: &[usize] = if cfg!(miri) {
            &[0, 63, SHARED_FROM + 65]
        } else {
            &[
                0,
                1,
                63,
                64,
                65,
                127,
                4096 + 3,
                SHARED_FROM,
                SHARED_FROM + 191,
            ]
        };
        let src_buf: Vec<u8> = (0..SHARED_FROM + 512)
            .map(|i| (i * 29 + i / 241) as u8)
            .collect();
        let mut dst_buf = vec![0u8; SHARED_FROM + 1024];
        for &len in lens {
            for (s_off, d_off) in [(0, 64), (1, 64), (64, 65), (7, 100), (33, 127)] {
                for copy in [copy_streaming, copy_to_shared] {
                    dst_buf.fill(0xa5);
                    // SAFETY: both ranges lie in their buffers (`len + 127 < 1024 + SHARED_FROM`
                    // and `len + 64 < 512 + SHARED_FROM`), which are distinct.
                    unsafe {
                        copy(
                            dst_buf.as_mut_ptr().add(d_off),
                            src_buf.as_ptr().add(s_off),
                            len,
                        );
                        store_fence();
                    }
                    assert!(
                        dst_buf[d_off..d_off + len] == src_buf[s_off..s_off + len],
                        "len {len}, offsets {s_off}/{d_off}: bytes differ"
                    );
                    assert!(
                        dst_buf[..d_off].iter().all(|&b| b == 0xa5)
                            && dst_buf[d_off + len..].iter().all(|&b| b == 0xa5),
                        "len {len}, offsets {s_off}/{d_off}: wrote outside the range"
                    );
                }
            }
        }
    }
}

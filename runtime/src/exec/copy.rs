//! Strided copies every host backend needs: packing and unpacking rows around a
//! dimension that is not the leading one; and (with MPI) writes into memory another process
//! reads ([`shared`]).

// (Also built for the lanes' tests without MPI: see `exec`.)
#[cfg(any(feature = "mpi", test))]
pub(crate) mod shared;
#[cfg(any(feature = "mpi", test))]
pub(crate) use shared::copy_to_shared;
#[cfg(feature = "mpi")]
pub(crate) use shared::read_store_mode;

/// Copies `rows` rows of `width` bytes from `src` (rows `src_pitch` bytes apart) to `dst` (rows
/// `dst_pitch` apart) — the host counterpart of `cuMemcpy2D`.
///
/// # Safety
/// Both regions must be valid for the given geometry and must not overlap.
pub(crate) unsafe fn copy_rows(
    dst: *mut u8,
    dst_pitch: usize,
    src: *const u8,
    src_pitch: usize,
    rows: usize,
    width: usize,
) {
    // SAFETY: the caller's contract.
    unsafe {
        copy_rows_by(
            copy_bytes, false, dst, dst_pitch, src, src_pitch, rows, width,
        )
    }
}

/// A contiguous copy: [`copy_bytes`], or [`copy_to_shared`] into memory another process reads.
pub(crate) type CopyFn = unsafe fn(*mut u8, *const u8, usize);

/// [`copy_rows`], each contiguous stretch copied by `copy`, the rows from the last to the first
/// if `back` (with [`copy_bytes_back`]: the same bytes, in the reverse order of pieces).
///
/// # Safety
/// As for [`copy_rows`].
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn copy_rows_by(
    copy: CopyFn,
    back: bool,
    dst: *mut u8,
    dst_pitch: usize,
    src: *const u8,
    src_pitch: usize,
    rows: usize,
    width: usize,
) {
    if width == 0 || rows == 0 {
        return;
    }
    if rows == 1 || (dst_pitch == width && src_pitch == width) {
        // SAFETY: contiguous case of the caller's contract.
        unsafe { copy(dst, src, rows * width) };
        return;
    }
    for r in 0..rows {
        let r = if back { rows - 1 - r } else { r };
        // SAFETY: row r of each region, per the caller's contract.
        unsafe { copy(dst.add(r * dst_pitch), src.add(r * src_pitch), width) };
    }
}

/// Large copies go in pieces of this many bytes (under Miri, a few: the same boundaries,
/// interpreted in seconds rather than minutes).
const PIECE: usize = if cfg!(miri) { 64 } else { 256 * 1024 };

/// Copies `len` bytes from `src` to `dst`, a large copy in [`PIECE`]s, and one whose
/// destination lies just past its source within a page ([`near`]) in a loop of its own.
///
/// Why pieces: glibc's `memcpy` picks its strategy by the length of one call, and on CPUs
/// where it stops using `rep movsb` above the L2 size (AMD's tuning: 1 MiB on this machine),
/// a multi-megabyte copy runs its vector loop instead — 12–15 % slower here, with two rank
/// threads each gathering two 8 MiB blocks (0.88–0.89 ms per gather in one call, 0.76–0.80 ms
/// in 256 KiB pieces; the same with `rep movsb` itself). Pieces keep every call in its fast
/// range; elsewhere they cost one call per 256 KiB, nothing measurable.
///
/// # Safety
/// As for [`std::ptr::copy_nonoverlapping`].
pub(crate) unsafe fn copy_bytes(dst: *mut u8, src: *const u8, len: usize) {
    if len >= NEAR_FROM && near(dst, src) {
        // SAFETY: the caller's contract.
        unsafe { copy_near(dst, src, len) };
        return;
    }
    let mut at = 0;
    while at < len {
        let n = PIECE.min(len - at);
        // SAFETY: `[at, at + n)` lies within both regions, per the caller's contract.
        unsafe { std::ptr::copy_nonoverlapping(src.add(at), dst.add(at), n) };
        at += n;
    }
}

/// Pieces of [`copy_bytes_back`]: small enough that the pieces still in the L1 from the last
/// copy are whole ones (4 KiB), larger from 1 MiB where the L2 is what keeps them (64 KiB; one
/// `memcpy` call per 4 KiB cost 5 % there). Under Miri, a few bytes, as for [`PIECE`].
const BACK_PIECE: [usize; 2] = if cfg!(miri) {
    [16, 64]
} else {
    [4 << 10, 64 << 10]
};

/// Copies from this many bytes take [`BACK_PIECE`]'s larger pieces.
const BACK_LARGE_FROM: usize = if cfg!(miri) { 256 } else { 1 << 20 };

/// Copies `len` bytes from `src` to `dst` as [`copy_bytes`] does, but in pieces from the last
/// to the first (each piece from its start to its end).
///
/// Why: a rank that copies the same buffers call after call (an all_to_all or all_gather in a
/// loop) finds in its caches the lines its last copy touched last. A copy that starts with
/// those lines hits them; one that starts where the last one started finds them evicted, and
/// evicts the rest before it gets there. Two threads each copying two 32 KiB blocks per call
/// (an all_to_all of 64 KiB at world 2) took 1.34–1.40 µs a call going forward every time,
/// 0.88–0.94 µs with every other call in 4 KiB pieces from the last (`docs/decisions.md`,
/// session 45). The bytes written are the same either way.
///
/// # Safety
/// As for [`std::ptr::copy_nonoverlapping`].
pub(crate) unsafe fn copy_bytes_back(dst: *mut u8, src: *const u8, len: usize) {
    let piece = BACK_PIECE[usize::from(len >= BACK_LARGE_FROM)];
    let near = len >= NEAR_FROM && near(dst, src);
    let mut end = len;
    while end > 0 {
        let at = (end - 1) / piece * piece;
        // SAFETY: `[at, end)` lies within both regions (`end <= len`), per the caller's
        // contract.
        unsafe {
            let (d, s, n) = (dst.add(at), src.add(at), end - at);
            if near {
                copy_near(d, s, n);
            } else {
                std::ptr::copy_nonoverlapping(s, d, n);
            }
        }
        end = at;
    }
}

/// Copies at least this long go through [`copy_near`] when [`near`]: glibc copies shorter ones
/// with vector loops, which do not mind the distance.
const NEAR_FROM: usize = if cfg!(miri) { 64 } else { 1024 };

/// Whether `dst` lies 1 to 63 bytes past `src`, counted within a 4 KiB page: there `rep movsb`,
/// which glibc's `memcpy` uses from a few KiB up to the L2 size, takes every load for one that
/// depends on a store just made (the two addresses agree in their low 12 bits), and copies
/// about 15 times slower — 1.9 GB/s against 26–33 GB/s on this machine, for 16 KiB to 256 KiB.
/// Tensors from different allocators meet at such distances as a matter of course: a 1 MiB
/// tensor that `malloc` serves from its heap starts 16 bytes from where a freshly mapped one
/// does, and an all_to_all at world 4 between such tensors took 4–6× the copy floor.
fn near(dst: *mut u8, src: *const u8) -> bool {
    let d = (dst as usize).wrapping_sub(src as usize) % 4096;
    (1..64).contains(&d)
}

/// A forward copy in 128-byte blocks of plain vector loads and stores, stores aligned to 64
/// bytes: 21–27 GB/s at the distances where `rep movsb` manages 1.9 (with unaligned stores, odd
/// distances got 12 GB/s).
///
/// # Safety
/// As for [`std::ptr::copy_nonoverlapping`].
unsafe fn copy_near(dst: *mut u8, src: *const u8, len: usize) {
    const BLOCK: usize = 128;
    let head = ((dst as usize).wrapping_neg() % 64).min(len);
    // SAFETY: `[0, head)` lies within both regions (`head <= len`), per the caller's contract.
    unsafe { std::ptr::copy_nonoverlapping(src, dst, head) };
    let mut at = head;
    while len - at >= BLOCK {
        // SAFETY: `[at, at + BLOCK)` lies within both regions, which do not overlap.
        unsafe {
            let block = src.add(at).cast::<[u8; BLOCK]>().read_unaligned();
            dst.add(at).cast::<[u8; BLOCK]>().write_unaligned(block);
        }
        at += BLOCK;
    }
    // SAFETY: the rest, `[at, len)`, likewise.
    unsafe { std::ptr::copy_nonoverlapping(src.add(at), dst.add(at), len - at) };
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Copies in pieces, forward and backward, land every byte where one copy would, at and
    /// around piece boundaries, and touch nothing past the end.
    #[test]
    fn pieces_copy_every_byte_and_no_more() {
        let [small, large] = BACK_PIECE;
        let lens = [
            0,
            1,
            PIECE - 1,
            PIECE,
            PIECE + 1,
            3 * PIECE + 17,
            small - 1,
            small,
            small + 1,
            5 * small + 3,
            BACK_LARGE_FROM - 1,
            BACK_LARGE_FROM,
            BACK_LARGE_FROM + 1,
            BACK_LARGE_FROM + 2 * large + 5,
        ];
        for len in lens {
            let src: Vec<u8> = (0..len).map(|i| (i * 7 + i / 251) as u8).collect();
            for (name, copy) in [("forward", copy_bytes as CopyFn), ("back", copy_bytes_back)] {
                let mut dst = vec![0xa5u8; len + 64];
                // SAFETY: both hold at least `len` bytes and do not overlap.
                unsafe { copy(dst.as_mut_ptr(), src.as_ptr(), len) };
                assert!(dst[..len] == src[..], "{name}, len {len}: bytes differ");
                assert!(
                    dst[len..].iter().all(|&b| b == 0xa5),
                    "{name}, len {len}: wrote past the end"
                );
            }
        }
    }

    /// A destination just past its source within a page takes the block loop: every byte
    /// lands, at every alignment of either end and every length around the block and the
    /// threshold, and nothing past the end is touched.
    #[test]
    fn near_copies_copy_every_byte_and_no_more() {
        let lens: &[usize] = if cfg!(miri) {
            &[NEAR_FROM, NEAR_FROM + 1, 3 * 128 + 63]
        } else {
            &[NEAR_FROM, NEAR_FROM + 127, 4096 + 5, PIECE + 300]
        };
        let src_buf: Vec<u8> = (0..PIECE + 8192)
            .map(|i| (i * 13 + i / 509) as u8)
            .collect();
        let mut dst_buf = vec![0u8; PIECE + 8192 + 4096];
        let page = |p: *const u8| (p as usize).wrapping_neg() % 4096;
        let (s0, d0) = (page(src_buf.as_ptr()), page(dst_buf.as_ptr()));
        for &len in lens {
            for (s_off, dist) in [(0, 1), (5, 16), (64, 63), (3, 0), (0, 64)] {
                let src = s0 + s_off;
                let dst = d0 + s_off + dist;
                if src + len > src_buf.len() || dst + len + 64 > dst_buf.len() {
                    continue;
                }
                for (name, copy) in [("forward", copy_bytes as CopyFn), ("back", copy_bytes_back)] {
                    dst_buf.fill(0xa5);
                    // SAFETY: both ranges lie in their buffers (checked above), which are
                    // distinct.
                    let (d, s) =
                        unsafe { (dst_buf.as_mut_ptr().add(dst), src_buf.as_ptr().add(src)) };
                    assert_eq!(near(d, s), (1..64).contains(&dist), "distance {dist}");
                    // SAFETY: as above.
                    unsafe { copy(d, s, len) };
                    assert!(
                        dst_buf[dst..dst + len] == src_buf[src..src + len],
                        "{name}, len {len}, distance {dist}: bytes differ"
                    );
                    assert!(
                        dst_buf[dst + len..dst + len + 64]
                            .iter()
                            .all(|&b| b == 0xa5)
                            && dst_buf[dst - 1] == 0xa5,
                        "{name}, len {len}, distance {dist}: wrote outside the range"
                    );
                }
            }
        }
    }

    /// Rows wider than a piece, with pitches, copy as rows, forward and backward.
    #[test]
    fn wide_strided_rows_copy_in_pieces() {
        let (rows, width) = (3, PIECE + 5);
        let (sp, dp) = (width + 3, width + 11);
        let src: Vec<u8> = (0..rows * sp).map(|i| (i % 253) as u8).collect();
        for (name, copy, back) in [
            ("forward", copy_bytes as CopyFn, false),
            ("back", copy_bytes_back, true),
        ] {
            let mut dst = vec![0u8; rows * dp];
            // SAFETY: the geometry fits both buffers, which do not overlap.
            unsafe {
                copy_rows_by(
                    copy,
                    back,
                    dst.as_mut_ptr(),
                    dp,
                    src.as_ptr(),
                    sp,
                    rows,
                    width,
                )
            };
            for r in 0..rows {
                assert!(
                    dst[r * dp..r * dp + width] == src[r * sp..r * sp + width],
                    "{name}: row {r}"
                );
                assert!(
                    dst[r * dp + width..(r + 1) * dp].iter().all(|&b| b == 0),
                    "{name}: row {r} gap"
                );
            }
        }
    }
}

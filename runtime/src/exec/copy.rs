//! Strided copies every host backend needs: packing and unpacking rows around a
//! dimension that is not the leading one.

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
    if width == 0 || rows == 0 {
        return;
    }
    if rows == 1 || (dst_pitch == width && src_pitch == width) {
        // SAFETY: contiguous case of the caller's contract.
        unsafe { copy_bytes(dst, src, rows * width) };
        return;
    }
    for r in 0..rows {
        // SAFETY: row r of each region, per the caller's contract.
        unsafe { copy_bytes(dst.add(r * dst_pitch), src.add(r * src_pitch), width) };
    }
}

/// Large copies go in pieces of this many bytes (under Miri, a few: the same boundaries,
/// interpreted in seconds rather than minutes).
const PIECE: usize = if cfg!(miri) { 64 } else { 256 * 1024 };

/// Copies `len` bytes from `src` to `dst`, a large copy in [`PIECE`]s.
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
    let mut at = 0;
    while at < len {
        let n = PIECE.min(len - at);
        // SAFETY: `[at, at + n)` lies within both regions, per the caller's contract.
        unsafe { std::ptr::copy_nonoverlapping(src.add(at), dst.add(at), n) };
        at += n;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Copies in pieces land every byte where one copy would, at and around piece boundaries,
    /// and touch nothing past the end.
    #[test]
    fn pieces_copy_every_byte_and_no_more() {
        for len in [0, 1, PIECE - 1, PIECE, PIECE + 1, 3 * PIECE + 17] {
            let src: Vec<u8> = (0..len).map(|i| (i * 7 + i / 251) as u8).collect();
            let mut dst = vec![0xa5u8; len + 64];
            // SAFETY: both hold at least `len` bytes and do not overlap.
            unsafe { copy_bytes(dst.as_mut_ptr(), src.as_ptr(), len) };
            assert!(dst[..len] == src[..], "len {len}: bytes differ");
            assert!(
                dst[len..].iter().all(|&b| b == 0xa5),
                "len {len}: wrote past the end"
            );
        }
    }

    /// Rows wider than a piece, with pitches, copy as rows.
    #[test]
    fn wide_strided_rows_copy_in_pieces() {
        let (rows, width) = (3, PIECE + 5);
        let (sp, dp) = (width + 3, width + 11);
        let src: Vec<u8> = (0..rows * sp).map(|i| (i % 253) as u8).collect();
        let mut dst = vec![0u8; rows * dp];
        // SAFETY: the geometry fits both buffers, which do not overlap.
        unsafe { copy_rows(dst.as_mut_ptr(), dp, src.as_ptr(), sp, rows, width) };
        for r in 0..rows {
            assert!(
                dst[r * dp..r * dp + width] == src[r * sp..r * sp + width],
                "row {r}"
            );
            assert!(
                dst[r * dp + width..(r + 1) * dp].iter().all(|&b| b == 0),
                "row {r} gap"
            );
        }
    }
}

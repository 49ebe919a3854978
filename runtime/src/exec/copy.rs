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
        unsafe { std::ptr::copy_nonoverlapping(src, dst, rows * width) };
        return;
    }
    for r in 0..rows {
        // SAFETY: row r of each region, per the caller's contract.
        unsafe {
            std::ptr::copy_nonoverlapping(src.add(r * src_pitch), dst.add(r * dst_pitch), width)
        };
    }
}

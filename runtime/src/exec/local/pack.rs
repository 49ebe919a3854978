//! Packed passes over stretches of small reductions.
//!
//! A bucket of small all_reduces (gradients, losses, norms) is mostly bookkeeping: each step
//! alone is a few hundred bytes of data behind a description of a hundred and sixty. Peers
//! read each other's descriptions across cores, so a member that posts a stretch of small
//! reductions also publishes a compact table beside its ops — per step the two buffers, the
//! element count and the shape as one word — and the step's owner checks and reduces the
//! stretch from the tables: one full comparison of descriptions for the stretch's first step it
//! owns, then one word per member and step.

use crate::exec::Op;

use super::kernels::{packs_with, small_reduction};

/// A step's shape does not fit in a key: its descriptions are compared in full.
pub(crate) const NO_KEY: u64 = u64::MAX;

/// One step of a member's run, as the packed pass reads it.
pub(crate) struct PackEntry {
    pub input: *const u8,
    pub output: *mut u8,
    /// The shape, encoded exactly ([`shape_key`]), or [`NO_KEY`].
    pub key: u64,
    pub numel: u32,
    /// How many steps from this one (itself included) form a stretch with it: small reductions
    /// of the same kind, root, reduction and element type. 0: not a small reduction.
    pub rest: u32,
}

// SAFETY: as for `Op`, whose buffers these are: plain addresses, dereferenced only under the
// local backend's protocol (a peer reads a member's table only while the member is blocked in
// the steps it describes).
unsafe impl Send for PackEntry {}
// SAFETY: see `Send`; shared access only reads the fields.
unsafe impl Sync for PackEntry {}

/// The shape as one word, injectively: the number of dimensions, then each dimension in 14
/// bits, for shapes of at most four dimensions below 2^14 (every small reduction in practice);
/// others get [`NO_KEY`]. Keys of different lengths fall in disjoint ranges (the length is the
/// leading digit), so equal keys mean equal shapes.
pub(crate) fn shape_key(shape: &[usize]) -> u64 {
    if shape.len() > 4 || shape.iter().any(|&d| d >= 1 << 14) {
        return NO_KEY;
    }
    shape
        .iter()
        .fold(shape.len() as u64, |key, &d| (key << 14) | d as u64)
}

/// The pack table of a run of collective ops: empty unless two of them could share a pass.
///
/// Built for every collective run a rank posts, so it looks at each op once (a bucket of a
/// thousand small all_reduces pays this per op, beside a kernel of a few hundred instructions).
pub(crate) fn table(ops: &[Op]) -> Vec<PackEntry> {
    if ops.len() < 2 {
        return Vec::new();
    }
    let mut table: Vec<PackEntry> = Vec::with_capacity(ops.len());
    let mut pairs = false;
    for o in ops {
        let numel = o.desc.numel();
        let small =
            small_reduction(&o.desc, numel) && o.input.len == numel && o.output.len == numel;
        pairs |= small && table.last().is_some_and(|e| e.rest > 0);
        table.push(PackEntry {
            input: o.input.ptr.cast_const(),
            output: o.output.ptr,
            key: shape_key(&o.desc.shape),
            // Small: below 8 KiB of elements.
            numel: u32::try_from(numel).unwrap_or(0),
            rest: u32::from(small),
        });
    }
    if !pairs {
        return Vec::new();
    }
    for i in (0..ops.len() - 1).rev() {
        if table[i].rest > 0 && table[i + 1].rest > 0 && packs_with(&ops[i].desc, &ops[i + 1].desc)
        {
            table[i].rest = table[i + 1].rest + 1;
        }
    }
    table
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_tell_every_small_shape_apart() {
        let shapes: Vec<Vec<usize>> = vec![
            vec![],
            vec![0],
            vec![1],
            vec![6],
            vec![1, 6],
            vec![6, 1],
            vec![2, 3],
            vec![3, 2],
            vec![1, 1, 6],
            vec![1, 6, 1],
            vec![6, 1, 1, 1],
            vec![16383],
            vec![1, 16383],
        ];
        for (i, a) in shapes.iter().enumerate() {
            assert_ne!(shape_key(a), NO_KEY, "{a:?}");
            for b in &shapes[i + 1..] {
                assert_ne!(shape_key(a), shape_key(b), "{a:?} vs {b:?}");
            }
        }
        assert_eq!(shape_key(&[16384]), NO_KEY);
        assert_eq!(shape_key(&[1, 1, 1, 1, 1]), NO_KEY);
    }

    proptest::proptest! {
        /// Equal keys mean equal shapes, for every shape that gets a key. (Safe code only: not
        /// worth Miri's time, and proptest's failure files need the file system Miri isolates.)
        #[test]
        #[cfg_attr(miri, ignore)]
        fn keys_are_exact(
            a in proptest::collection::vec(0usize..20_000, 0..6),
            b in proptest::collection::vec(0usize..20_000, 0..6),
        ) {
            let (ka, kb) = (shape_key(&a), shape_key(&b));
            if ka != NO_KEY && kb != NO_KEY {
                proptest::prop_assert_eq!(ka == kb, a == b);
            }
        }
    }
}

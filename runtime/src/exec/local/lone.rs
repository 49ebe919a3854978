//! Lone in-place steps described in the slot's own line.
//!
//! A member running a step in place must see every member's op: compare the descriptions and
//! find the buffers. Read through the published run, that is a chain of dependent cache misses
//! on lines the member has just written — its slot (`posted`, `entries`), then its op, two or
//! three lines — after the transfer that brought `posted` (on the 2-core host, 110–250 ns of a
//! 64 KiB all_gather's 2.7 µs; `docs/decisions.md`, session 40). So a member that posts a run
//! of one op also writes, in the slot's line next to `posted`, the op's exact signature and its
//! two buffer addresses ([`Lone`]), having checked that its own buffers fit the step. A peer
//! whose own op has a signature finds everything in the line that `posted` brought: equal
//! signatures are agreeing descriptions (as for eager steps), and every member vouched for its
//! own buffers. Anything else — no signature, a different one, a member whose run is not this
//! one step, a member that may have left the step (a broadcast's kept op) — takes the full
//! path, which compares the descriptions and reports a disagreement from them.

use std::sync::atomic::Ordering;

use crate::exec::Op;

use super::eager::Sig;
use super::kernels;
use super::pack::NO_KEY;
use super::world::{CollSlot, GroupState};

/// Marks a published description (bit 16 of a signature's first word is always clear).
const VALID: u64 = 1 << 16;

/// A lone op's exact description and buffers, as its slot carries them.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) struct Lone {
    /// The signature without its scale, [`VALID`] set: the first word of a [`Sig`] and the
    /// shape's [`key`].
    pub sig: [u64; 2],
    /// The op's input's first byte (null if it has none).
    pub input: *mut u8,
    /// The op's output's first byte (null if it has none).
    pub output: *mut u8,
}

impl Lone {
    /// The description member `me` of `members` publishes for `op`, a run of one: `None` if
    /// the description has no exact two-word signature (a pre-multiplied sum's scale, a shape
    /// [`key`] cannot encode) or its buffers do not fit the step (the full path reports that).
    pub(crate) fn of(op: &Op, members: &[usize], me: usize) -> Option<Lone> {
        let [w0, key, scale] = Sig::exact(op, key)?.words();
        let fits = kernels::fits(op, members[me], members.len());
        (scale == 0 && fits).then_some(Lone {
            sig: [w0 | VALID, key],
            input: op.input.ptr,
            output: op.output.ptr,
        })
    }

    /// Publishes the description of our next run in our `slot`, before the caller's `posted`
    /// store (Release): `lone`, or none — clearing the one an earlier run left, if any (our own
    /// line, which only we write, says so; writing it when clear would cost every eager call
    /// a store to a line peers read).
    #[inline(always)]
    pub(crate) fn describe(lone: Option<Lone>, slot: &CollSlot) {
        if lone.is_some() || slot.lone[0].load(Ordering::Relaxed) != 0 {
            Lone::publish(lone, slot);
        }
    }

    /// Publishes the description in `slot` (none: `None`).
    #[inline(always)]
    fn publish(lone: Option<Lone>, slot: &CollSlot) {
        let l = lone.unwrap_or(Lone {
            sig: [0; 2],
            input: std::ptr::null_mut(),
            output: std::ptr::null_mut(),
        });
        slot.lone[0].store(l.sig[0], Ordering::Relaxed);
        slot.lone[1].store(l.sig[1], Ordering::Relaxed);
        slot.lone_input.store(l.input, Ordering::Relaxed);
        slot.lone_output.store(l.output, Ordering::Relaxed);
    }
}

/// Every member's buffers (input, output) for step `k`, ours (`mine`, member `me`) included,
/// if every member published a lone description of `k` with our signature `sig`; `None` sends
/// the caller down the full path.
///
/// # Safety
/// Every member has posted step `k` (seen with `Acquire`), and our `done` is at most `k`.
pub(crate) unsafe fn buffers(
    g: &GroupState,
    k: u64,
    sig: [u64; 2],
    me: usize,
    mine: &Op,
) -> Option<smallvec::SmallVec<[(*mut u8, *mut u8); 8]>> {
    (0..g.slots.len())
        .map(|j| {
            if j == me {
                return Some((mine.input.ptr, mine.output.ptr));
            }
            // A member whose slot for `k` keeps its op may have left the step and published
            // another run since: its line may describe that one.
            // SAFETY: the caller's contract (member `j` posted `k`, which we have not finished).
            if unsafe { g.eager_slot(j, k).kept(k) }.is_some() {
                return None;
            }
            // Member `j` stays in step `k` until we finish it, so its line describes the run
            // it posted `k` in (Acquire on its `posted`, by the caller): ours to read.
            let s = &g.slots[j];
            let lone = [
                s.lone[0].load(Ordering::Relaxed),
                s.lone[1].load(Ordering::Relaxed),
            ];
            let alone = s.base.load(Ordering::Relaxed) == k;
            (alone && lone == sig).then(|| {
                (
                    s.lone_input.load(Ordering::Relaxed),
                    s.lone_output.load(Ordering::Relaxed),
                )
            })
        })
        .collect()
}

/// The shape as one word, injectively, for a lone step: the number of dimensions (at most
/// four) in the low three bits, then each dimension in `60 / dimensions` bits (so a vector of
/// up to 2^60 elements has a key, where the packing key stops at 2^14); [`NO_KEY`] if a
/// dimension does not fit. Keys of different lengths differ in their low bits, and within a
/// length every dimension has its own bits, so equal keys mean equal shapes.
pub(crate) fn key(shape: &[usize]) -> u64 {
    let len = shape.len();
    if len > 4 {
        return NO_KEY;
    }
    let width = if len == 0 { 0 } else { 60 / len as u32 };
    let mut key = len as u64;
    for (i, &d) in shape.iter().enumerate() {
        if (d as u64) >> width != 0 {
            return NO_KEY;
        }
        key |= (d as u64) << (3 + width * i as u32);
    }
    key
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn keys_tell_shapes_apart() {
        assert_eq!(key(&[]), 0);
        assert_ne!(key(&[1]), key(&[1, 1]));
        assert_ne!(key(&[2, 3]), key(&[3, 2]));
        assert_ne!(key(&[16384]), NO_KEY);
        assert_ne!(key(&[1 << 59]), NO_KEY);
        assert_eq!(key(&[1 << 60]), NO_KEY);
        assert_eq!(key(&[1 << 30, 1]), NO_KEY);
        assert_eq!(key(&[1, 1, 1, 1, 1]), NO_KEY);
    }

    proptest! {
        /// Equal keys (other than `NO_KEY`) only for equal shapes.
        #[test]
        #[cfg_attr(miri, ignore)] // thousands of cases, no unsafe code
        fn keys_are_injective(
            a in proptest::collection::vec(prop_oneof![0usize..4, 0usize..(1 << 21)], 0..5),
            b in proptest::collection::vec(prop_oneof![0usize..4, 0usize..(1 << 21)], 0..5),
        ) {
            let (ka, kb) = (key(&a), key(&b));
            if ka != NO_KEY && ka == kb {
                prop_assert_eq!(&a, &b);
            }
            if a == b {
                prop_assert_eq!(ka, kb);
            }
        }
    }
}

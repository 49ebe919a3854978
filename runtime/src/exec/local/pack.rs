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
///
/// The buffers are *exposed addresses* (`expose_provenance`), which the reading peer turns back
/// into pointers with `with_exposed_provenance`. Plain pointers would be unsound here: a table
/// kept from the last run keeps an entry whose address equals the new one's, and a tensor freed
/// since and allocated anew at the same address has the same address but not the same
/// provenance — reading the new tensor through the old pointer is undefined behaviour (Miri
/// found it). The address is exposed at every build, so it is always the live tensor's
/// provenance the peer picks up.
#[derive(Clone, Copy, PartialEq)]
pub(crate) struct PackEntry {
    pub input: usize,
    pub output: usize,
    /// The shape, encoded exactly ([`shape_key`]), or [`NO_KEY`].
    pub key: u64,
    pub numel: u32,
    /// How many steps from this one (itself included) form a stretch with it: small reductions
    /// of the same kind, root, reduction and element type. 0: not a small reduction.
    pub rest: u32,
}

impl Default for PackEntry {
    fn default() -> Self {
        PackEntry {
            input: 0,
            output: 0,
            key: NO_KEY,
            numel: 0,
            rest: 0,
        }
    }
}

/// The shape as one word, injectively: the number of dimensions, then each dimension in 14
/// bits, for shapes of at most four dimensions below 2^14 (every small reduction in practice);
/// others get [`NO_KEY`]. Keys of different lengths fall in disjoint ranges (the length is the
/// leading digit), so equal keys mean equal shapes.
pub(crate) fn shape_key(shape: &[usize]) -> u64 {
    if shape.len() > 4 {
        return NO_KEY;
    }
    let mut key = shape.len() as u64;
    for &d in shape {
        if d >= 1 << 14 {
            return NO_KEY;
        }
        key = (key << 14) | d as u64;
    }
    key
}

/// A member's pack table for one communicator, kept from run to run.
///
/// Programs repeat their buckets (the same tensors, every iteration), and peers read a
/// member's table from their own cores: a table rewritten from scratch would take every line
/// back from the peers that read it last time, one cross-core transfer per two steps on both
/// sides. So a rebuild writes only the entries that changed, and an unchanged table stays in
/// the peers' caches.
#[derive(Default)]
pub(crate) struct Table {
    entries: Vec<PackEntry>,
    /// How many entries describe the current run; 0 when nothing in it packs.
    live: usize,
}

impl Table {
    /// Describes the run of collective ops `ops` (empty unless two of them could share a
    /// pass), rewriting only what differs from the last run's table.
    ///
    /// Built for every collective run of two or more ops a rank posts, so it looks at each op
    /// once (a bucket of a thousand small all_reduces pays this per op, beside a kernel of a
    /// few hundred instructions).
    pub(crate) fn build(&mut self, ops: &[Op]) {
        self.live = 0;
        if ops.len() < 2 {
            return;
        }
        if self.entries.len() < ops.len() {
            self.entries.resize_with(ops.len(), PackEntry::default);
        }
        // Backwards, so that each entry is final (its `rest` known) when it is compared.
        let mut pairs = false;
        let mut next: Option<(&Op, u32)> = None;
        for (o, slot) in ops.iter().zip(&mut self.entries).rev() {
            let numel = o.desc.numel();
            let small =
                small_reduction(&o.desc, numel) && o.input.len == numel && o.output.len == numel;
            let rest = match next {
                _ if !small => 0,
                Some((n, r)) if r > 0 && packs_with(&o.desc, &n.desc) => r + 1,
                _ => 1,
            };
            pairs |= rest > 1;
            let entry = PackEntry {
                input: o.input.ptr.expose_provenance(),
                output: o.output.ptr.expose_provenance(),
                key: shape_key(&o.desc.shape),
                // Small: below 8 KiB of elements.
                numel: u32::try_from(numel).unwrap_or(0),
                rest,
            };
            if *slot != entry {
                *slot = entry;
            }
            next = Some((o, rest));
        }
        if pairs {
            self.live = ops.len();
        }
    }

    /// Keeps the table for a run that repeats exactly (equal descriptions, equal buffer
    /// addresses) the run it was last built for, where every entry stands; whether it did.
    ///
    /// The buffers' provenance is new: it is exposed here for the peers to pick up (see
    /// [`PackEntry`]), which costs no instructions; without it a peer would reach a tensor
    /// reallocated at a freed one's address through the freed one's provenance. And each
    /// entry's buffers and element count are compared with the op's, which costs a few: peers
    /// size every member's buffers by the reducer's entry, so a table kept for ops it does not
    /// describe would have them read and write out of bounds. On a difference it returns
    /// `false`, and the caller builds the table anew.
    pub(crate) fn refresh(&mut self, ops: &[Op]) -> bool {
        let fits = self.entries.len() >= ops.len()
            && ops.iter().zip(&self.entries).all(|(o, e)| {
                e.input == o.input.ptr.expose_provenance()
                    && e.output == o.output.ptr.expose_provenance()
                    && (e.rest == 0
                        || (e.numel as usize == o.input.len && o.output.len == o.input.len))
            });
        // Tests run unoptimised: there, check that rebuilding would change nothing at all. (Not
        // under Miri, which checks the exposure above — that a rebuild would redo.)
        #[cfg(all(debug_assertions, not(miri)))]
        if fits {
            let mut fresh = Table::default();
            fresh.build(ops);
            assert!(
                fresh.entries() == self.entries(),
                "a repeated run's pack table differs from the one it repeats"
            );
        }
        fits
    }

    /// The current run's entries (empty when nothing packs).
    pub(crate) fn entries(&self) -> &[PackEntry] {
        &self.entries[..self.live]
    }

    /// Where peers read the entries: null when nothing packs.
    pub(crate) fn as_ptr(&self) -> *mut PackEntry {
        if self.live == 0 {
            std::ptr::null_mut()
        } else {
            self.entries.as_ptr().cast_mut()
        }
    }

    /// Whether it holds entries worth keeping for the next run.
    pub(crate) fn is_allocated(&self) -> bool {
        self.entries.capacity() > 0
    }
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

    use crate::exec::Buf;
    use crate::model::{CallSite, GroupId, OpDesc, OpKind, Shape};
    use crate::{DType, ReduceOp};

    /// A call for the table: kind 0 all_reduce, 1 reduce to rank 0, 2 broadcast; reduction 0
    /// Sum, else Max; `len` f32s at a fake address (the table never dereferences them).
    fn call(kind: u8, max: bool, len: usize, addr: usize) -> Op {
        let (kind, peer) = match kind {
            0 => (OpKind::AllReduce, None),
            1 => (OpKind::Reduce, Some(0)),
            _ => (OpKind::Broadcast, Some(0)),
        };
        let buf = Buf::host(std::ptr::without_provenance_mut(addr), len);
        Op {
            desc: OpDesc {
                kind,
                group: GroupId::WORLD,
                peer,
                op: Some(if max { ReduceOp::Max } else { ReduceOp::Sum }),
                dtype: DType::F32,
                shape: Shape::from_slice(&[len]),
                dim: 0,
                site: CallSite::caller(),
            },
            input: buf,
            output: buf,
        }
    }

    /// What each step's `rest` must be, counted forwards: how many steps from it are small
    /// reductions of one kind, root, reduction and element type.
    fn rests(ops: &[Op]) -> Vec<u32> {
        let small = |o: &Op| {
            matches!(o.desc.kind, OpKind::AllReduce | OpKind::Reduce) && o.desc.numel() * 4 < 8192
        };
        let same = |a: &Op, b: &Op| {
            (a.desc.kind, a.desc.peer, a.desc.op) == (b.desc.kind, b.desc.peer, b.desc.op)
        };
        (0..ops.len())
            .map(|i| {
                if !small(&ops[i]) {
                    return 0;
                }
                let run = ops[i..]
                    .iter()
                    .take_while(|o| small(o) && same(o, &ops[i]))
                    .count();
                run as u32
            })
            .collect()
    }

    fn calls() -> impl proptest::strategy::Strategy<Value = Vec<Op>> {
        use proptest::prelude::*;
        let one = (
            0u8..3,
            any::<bool>(),
            prop_oneof![1usize..8, 2040usize..2050],
        )
            .prop_map(|(k, m, len)| (k, m, len));
        proptest::collection::vec(one, 0..24).prop_map(|v| {
            v.into_iter()
                .enumerate()
                .map(|(i, (k, m, len))| call(k, m, len, 0x1000 * (i + 1) + len))
                .collect()
        })
    }

    proptest::proptest! {
        /// A table rebuilt over the last run's (for any two runs in a row) holds exactly what a
        /// new table would: every field of every entry, nothing left over from before.
        #[test]
        #[cfg_attr(miri, ignore)]
        fn a_rebuilt_table_holds_the_new_run_only(first in calls(), second in calls()) {
            let mut kept = Table::default();
            kept.build(&first);
            kept.build(&second);
            let want = rests(&second);
            if want.iter().all(|&r| r < 2) {
                proptest::prop_assert!(kept.entries().is_empty());
                proptest::prop_assert!(kept.as_ptr().is_null());
            } else {
                proptest::prop_assert_eq!(kept.entries().len(), second.len());
                for ((e, o), rest) in kept.entries().iter().zip(&second).zip(want) {
                    proptest::prop_assert_eq!(e.rest, rest);
                    proptest::prop_assert_eq!(e.input, o.input.ptr.addr());
                    proptest::prop_assert_eq!(e.output, o.output.ptr.addr());
                    proptest::prop_assert_eq!(e.key, shape_key(&o.desc.shape));
                    proptest::prop_assert_eq!(e.numel as usize, o.desc.numel());
                }
            }
        }
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

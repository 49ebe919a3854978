//! The emulation is strict where NCCL is silent: wrong programs end in a specific error on
//! every rank instead of a hang or wrong data, and a wrong call list is caught before it runs.

use std::sync::mpsc;
use std::time::Duration;

use super::*;
use crate::{Emulation, Options, Tensor, spawn_each};

/// Runs `f` on `world` emulated-NCCL ranks, failing the test if that takes over 20 s.
fn each<T: Send + 'static>(
    world: usize,
    f: impl Fn(&mut crate::Ctx) -> Result<T> + Send + Sync + 'static,
) -> Vec<Result<T>> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let opts = Options::default().emulate(Emulation::NCCL);
        let _ = tx.send(spawn_each(world, opts, f));
    });
    rx.recv_timeout(Duration::from_secs(20))
        .expect("the emulation hung")
        .expect("threads start")
}

#[test]
#[cfg_attr(miri, ignore)] // waits by polling: slow under Miri, and no unsafe code of its own
fn members_calling_different_collectives_get_a_mismatch_naming_both() {
    let out = each(2, |ctx| {
        let mut t = Tensor::full([4], 1.0f32)?;
        if ctx.rank() == 0 {
            ctx.all_reduce(&mut t, ReduceOp::Sum)
        } else {
            ctx.broadcast(&mut t, 1)
        }
    });
    for r in &out {
        match r {
            Err(Error::CollectiveMismatch(m)) => {
                assert!(
                    m.what_a.contains("all_reduce") && m.what_b.contains("broadcast"),
                    "{m:?}"
                )
            }
            other => panic!("{other:?}"),
        }
    }
}

#[test]
#[cfg_attr(miri, ignore)] // waits by polling: slow under Miri, and no unsafe code of its own
fn two_ranks_receiving_first_are_a_deadlock() {
    let out = each(2, |ctx| {
        let mut t = Tensor::<f32>::zeros([2])?;
        let peer = 1 - ctx.rank();
        ctx.recv(&mut t, peer)?;
        ctx.send(&t, peer)
    });
    assert!(
        out.iter().all(|r| matches!(r, Err(Error::Deadlock(_)))),
        "{out:?}"
    );
}

#[test]
#[cfg_attr(miri, ignore)] // waits by polling: slow under Miri, and no unsafe code of its own
fn a_receive_of_another_size_is_a_p2p_mismatch() {
    let out = each(2, |ctx| {
        if ctx.rank() == 0 {
            ctx.send(&Tensor::full([3], 1.0f32)?, 1)
        } else {
            ctx.recv(&mut Tensor::<f32>::zeros([2])?, 0)
        }
    });
    assert!(
        matches!(&out[1], Err(Error::P2pMismatch(m)) if m.send_what == "f32[3]" && m.recv_what == "f32[2]"),
        "{out:?}"
    );
}

#[test]
#[cfg_attr(miri, ignore)] // waits by polling: slow under Miri, and no unsafe code of its own
fn a_rank_that_skips_a_collective_or_panics_does_not_hang_the_others() {
    let skipped = each(3, |ctx| {
        let mut t = Tensor::full([2], 1.0f32)?;
        if ctx.rank() != 2 {
            ctx.all_reduce(&mut t, ReduceOp::Sum)?;
        }
        Ok(())
    });
    assert!(skipped[2].is_ok());
    assert!(
        skipped[..2]
            .iter()
            .all(|r| matches!(r, Err(Error::Deadlock(_)))),
        "{skipped:?}"
    );
    let panicked = each(3, |ctx| {
        let mut t = Tensor::full([2], 1.0f32)?;
        if ctx.rank() == 1 {
            panic!("boom");
        }
        ctx.all_reduce(&mut t, ReduceOp::Sum)
    });
    assert!(matches!(&panicked[1], Err(Error::Panicked { rank: 1, .. })));
    for r in [&panicked[0], &panicked[2]] {
        assert!(matches!(r, Err(Error::PeerFailed { peer: 1, .. })), "{r:?}");
    }
}

/// The data path under Miri: packed reductions, a strided all_gather and messages, with every
/// byte read from and written to user tensors through the emulation's unsafe helpers.
#[test]
fn a_small_batch_gives_the_expected_values() {
    let out = each(2, |ctx| {
        let r = ctx.rank() as f32;
        let mut a = Tensor::full([2], r + 1.0)?;
        let mut b = Tensor::full([1], 10.0 * (r + 1.0))?;
        let x = Tensor::from_vec([2, 1], vec![r, r + 0.5])?;
        let mut cols = Tensor::<f32>::zeros([2, 2])?;
        let mut got = Tensor::<f32>::zeros([1])?;
        let mine = Tensor::full([1], r)?;
        let peer = 1 - ctx.rank();
        let mut batch = ctx.batch();
        batch
            .all_reduce(&mut a, ReduceOp::Sum)
            .all_reduce(&mut b, ReduceOp::Max)
            .all_gather(&x, &mut cols, 1)
            .send(&mine, peer)
            .recv(&mut got, peer);
        batch.run()?;
        Ok((a.to_vec(), b.to_vec(), cols.to_vec(), got.to_vec()))
    });
    for (rank, r) in out.into_iter().enumerate() {
        let (a, b, cols, got) = r.unwrap();
        assert_eq!(a, vec![3.0, 3.0]);
        assert_eq!(b, vec![20.0]);
        assert_eq!(cols, vec![0.0, 1.0, 0.5, 1.5]);
        assert_eq!(got, vec![1.0 - rank as f32]);
    }
}

/// A backend for rank 0 of a one-rank world and a batch with one 8-byte scratch buffer.
fn one_rank() -> HostBackend {
    let shared = WorldState::new(1, None);
    HostBackend::new(HostNccl::new(shared, DEFAULT_VERSION, false), 0)
}

/// A batch with no ops and one 8-byte scratch buffer (`sizes` must be `[8]`).
fn one_scratch(sizes: &[usize]) -> Buffers<'_> {
    Buffers {
        ops: &[],
        scratch: vec![vec![0u64; 1]],
        sizes,
    }
}

/// Byte `offset` of that scratch buffer.
fn s(offset: usize) -> At {
    At {
        mem: Mem::Scratch(0),
        offset,
    }
}

fn all_reduce_on(at: At, count: usize) -> Call {
    Call::Coll {
        of: 0,
        coll: Coll::AllReduce,
        comm: Comm::Group(GroupId::WORLD),
        send: Some(at),
        recv: Some(at),
        count,
        dtype: DType::U8,
        op: Some(Red::Sum),
    }
}

#[test]
fn calls_of_one_group_writing_the_same_bytes_are_refused() {
    let b = one_rank();
    let sizes = [8];
    let bufs = one_scratch(&sizes);
    let disjoint = Lowered {
        scratch: sizes.to_vec(),
        calls: vec![all_reduce_on(s(0), 4), all_reduce_on(s(4), 4)],
        ..Lowered::default()
    };
    b.check_hazards(&disjoint, &bufs).unwrap();
    let overlapping = Lowered {
        calls: vec![all_reduce_on(s(0), 5), all_reduce_on(s(4), 4)],
        ..disjoint
    };
    let e = b.check_hazards(&overlapping, &bufs).unwrap_err();
    assert!(e.to_string().contains("same bytes"), "{e}");
}

#[test]
fn addresses_outside_their_buffer_are_errors_not_accesses() {
    let sizes = [8];
    let bufs = one_scratch(&sizes);
    assert!(bufs.range(s(0), 8).is_ok());
    assert!(bufs.range(s(1), 8).is_err());
    assert!(bufs.range(s(usize::MAX), 2).is_err());
    assert!(
        bufs.range(
            At {
                mem: Mem::In(0),
                offset: 0
            },
            1
        )
        .is_err()
    );
    // A strided copy whose last row runs past the end, and one onto itself.
    let past = Copy2d {
        dst: s(0),
        dst_pitch: 4,
        src: s(0),
        src_pitch: 4,
        rows: 3,
        width: 4,
    };
    assert!(bufs.copy(&past).is_err());
    assert!(bufs.copy(&Copy2d { rows: 1, ..past }).is_err());
}

//! Device-resident tensors: what a `Ctx` makes lives on the rank's device — the host under
//! threads, `cuda:r` under the NCCL backends — and the program cannot tell the difference except
//! by asking (`device()`) or by reaching for host memory (`as_slice`), which is an `Err` for a
//! device tensor. Run on the NCCL emulation (`nccl-host`), whose device memory can be reached
//! only by copies, as a GPU's; values are computed by hand or on the threads engine.

use std::sync::Mutex;
use std::time::Duration;

use rankwise_runtime::{
    Device, Emulation, Error, Options, ReduceOp, Result, Tensor, spawn_each, spawn_with,
};

fn on_nccl() -> Options {
    Options::default()
        .timeout(Duration::from_secs(20))
        .emulate(Emulation::NCCL)
}

fn on_threads() -> Options {
    Options::default().timeout(Duration::from_secs(20))
}

#[test]
fn tensors_a_ctx_makes_live_on_the_ranks_device() {
    let got = spawn_with(3, on_nccl(), |ctx| {
        let r = ctx.rank();
        let made = [
            ctx.full([2], 1.0f32)?.device(),
            ctx.zeros::<i32>([3])?.device(),
            ctx.tensor([2], vec![1u8, 2])?.device(),
            ctx.zeros_like(&Tensor::<f64>::zeros([4])?)?.device(),
            ctx.to_device(&Tensor::full([2], 7i64)?)?.device(),
        ];
        assert!(made.iter().all(|&d| d == ctx.device()), "{made:?}");
        // Tensors made without a context stay on the host.
        assert_eq!(Tensor::full([2], r as f32)?.device(), Device::Host);
        Ok(ctx.device())
    })
    .expect("runs");
    assert_eq!(got, vec![Device::Cuda(0), Device::Cuda(1), Device::Cuda(2)]);
    let host = spawn_with(2, on_threads(), |ctx| Ok(ctx.full([1], 0u8)?.device())).expect("runs");
    assert_eq!(host, vec![Device::Host; 2]);
}

#[test]
fn a_device_tensor_is_read_by_copying_not_by_pointer() {
    spawn_with(1, on_nccl(), |ctx| {
        let mut t = ctx.tensor([2, 2], vec![1.0f32, 2.0, 3.0, 4.0])?;
        let e = t
            .as_slice()
            .expect_err("no host slice of device memory")
            .to_string();
        assert!(e.contains("lives on cuda:0"), "{e}");
        assert!(e.contains("to_vec()") && e.contains("to_host()"), "{e}");
        assert!(t.as_mut_slice().is_err());
        assert_eq!(t.to_vec(), vec![1.0, 2.0, 3.0, 4.0]);
        assert_eq!(t.try_to_vec()?, vec![1.0, 2.0, 3.0, 4.0]);
        assert_eq!(t.to_string(), "[[1. 2.]\n [3. 4.]]");
        assert_eq!(
            format!("{t:?}"),
            "Tensor<f32>[2, 2] on cuda:0 [[1. 2.]\n [3. 4.]]"
        );
        let host = t.to_host()?;
        assert_eq!(host.device(), Device::Host);
        assert_eq!(host.as_slice()?, &[1.0, 2.0, 3.0, 4.0]);
        // Placed as a host tensor rankwise allocates: on a cache line.
        assert!((host.as_slice()?.as_ptr() as usize).is_multiple_of(64));
        // A copy is its own memory on the same device.
        let copy = t.clone();
        t.fill(9.0);
        assert_eq!(copy.device(), Device::Cuda(0));
        assert_eq!(copy.to_vec(), vec![1.0, 2.0, 3.0, 4.0]);
        assert_eq!(t.to_vec(), vec![9.0; 4]);
        t.try_fill(5.0)?;
        assert_eq!(t.to_vec(), vec![5.0; 4]);
        // Equality compares shape, device and elements.
        assert_eq!(t, ctx.full([2, 2], 5.0f32)?);
        assert_ne!(t, Tensor::full([2, 2], 5.0f32)?, "host and device differ");
        assert_ne!(t.clone().reshape([4])?, t);
        assert_eq!(t.clone().reshape([4])?.to_vec(), vec![5.0; 4]);
        assert_eq!(t.into_vec(), vec![5.0; 4]);
        Ok(())
    })
    .expect("runs");
}

/// One program of every collective and of messages, on tensors a `Ctx` made (device tensors
/// under NCCL) and on host tensors in the same batches; each rank's values.
fn every_call(ctx: &mut rankwise_runtime::Ctx) -> Result<Vec<Vec<f64>>> {
    let (r, w) = (ctx.rank(), ctx.world());
    let root = w - 1;
    let mut out = Vec::new();
    let mut a = ctx.full([5], r as f64 + 1.0)?;
    ctx.all_reduce(&mut a, ReduceOp::Sum)?;
    out.push(a.to_vec());
    let mut b = ctx.tensor([3], vec![r as f64; 3])?;
    ctx.broadcast(&mut b, root)?;
    out.push(b.to_vec());
    let x = ctx.tensor([2, 2], (0..4).map(|i| (10 * r + i) as f64).collect())?;
    let mut ag = ctx.zeros([2, 2 * w])?;
    ctx.all_gather(&x, &mut ag, 1)?;
    out.push(ag.to_vec());
    let wide = ctx.tensor([2, 2 * w], (0..4 * w).map(|i| (i + r) as f64).collect())?;
    let mut rs = ctx.zeros([2, 2])?;
    ctx.reduce_scatter(&wide, &mut rs, ReduceOp::Max, 1)?;
    out.push(rs.to_vec());
    let mut a2a = ctx.zeros([2, 2 * w])?;
    ctx.all_to_all(&wide, &mut a2a, 1)?;
    out.push(a2a.to_vec());
    let mut g = ctx.zeros([2 * w, 2])?;
    ctx.gather(&x, (r == root).then_some(&mut g), root, 0)?;
    out.push(if r == root { g.to_vec() } else { vec![] });
    let mut s = ctx.zeros([2, 2])?;
    ctx.scatter((r == root).then_some(&wide), &mut s, root, 1)?;
    out.push(s.to_vec());
    // List forms: the list's tensors are device tensors, staged through one buffer.
    let mut parts: Vec<Tensor<f64>> = (0..w).map(|_| ctx.zeros([2, 2])).collect::<Result<_>>()?;
    ctx.all_gather_list(&x, &mut parts)?;
    out.extend(parts.iter().map(Tensor::to_vec));
    let pieces: Vec<Tensor<f64>> = (0..w)
        .map(|q| ctx.full([3], (r * w + q) as f64))
        .collect::<Result<_>>()?;
    let mut mine = ctx.zeros([3])?;
    ctx.reduce_scatter_list(&pieces, &mut mine, ReduceOp::Sum)?;
    out.push(mine.to_vec());
    // A batch mixing device and host tensors, with messages around the ring.
    let send = ctx.full([4], r as f64)?;
    let mut got = Tensor::zeros([4])?;
    let mut host_sum = Tensor::full([2], 1.0f64)?;
    let mut dev_sum = ctx.full([2], 2.0f64)?;
    let mut batch = ctx.batch();
    batch
        .send(&send, (r + 1) % w)
        .recv(&mut got, (r + w - 1) % w)
        .all_reduce(&mut host_sum, ReduceOp::Sum)
        .all_reduce(&mut dev_sum, ReduceOp::Sum);
    batch.run()?;
    out.push(got.to_vec());
    out.push(host_sum.to_vec());
    out.push(dev_sum.to_vec());
    ctx.barrier()?;
    Ok(out)
}

#[test]
fn device_tensors_give_the_threads_engines_values_in_every_call() {
    for world in [1, 2, 3, 4] {
        let want = spawn_with(world, on_threads(), every_call).expect("threads");
        let got = spawn_with(world, on_nccl(), every_call).expect("nccl-host");
        assert_eq!(got, want, "world {world}");
        // And by hand for the parts every rank shares.
        let total: f64 = (1..=world).map(|r| r as f64).sum();
        for (r, v) in got.iter().enumerate() {
            assert_eq!(v[0], vec![total; 5]);
            assert_eq!(v[1], vec![(world - 1) as f64; 3]);
            let n = v.len();
            assert_eq!(v[n - 3], vec![((r + world - 1) % world) as f64; 4]);
            assert_eq!(v[n - 2], vec![world as f64; 2]);
            assert_eq!(v[n - 1], vec![2.0 * world as f64; 2]);
        }
    }
}

#[test]
fn a_tensor_on_another_ranks_device_is_refused_by_name() {
    // Rank 0 hands its device tensor to rank 1 through shared memory (threads of one process
    // can); rank 1's call refuses it before anything is sent, and rank 0 hears of it.
    let handed: Mutex<Option<Tensor<f32>>> = Mutex::new(None);
    let results = spawn_each(2, on_nccl(), |ctx| {
        if ctx.rank() == 0 {
            *handed.lock().expect("lock") = Some(ctx.full([4], 1.0f32)?);
        }
        ctx.barrier()?;
        let mut t = match ctx.rank() {
            1 => handed.lock().expect("lock").take().expect("handed over"),
            _ => ctx.full([4], 1.0f32)?,
        };
        ctx.all_reduce(&mut t, ReduceOp::Sum)?;
        Ok(())
    })
    .expect("ran");
    let e = results[1].as_ref().expect_err("refused").to_string();
    assert!(
        e.contains("rank 1 passed a tensor on cuda:0, but this rank's tensors live on cuda:1"),
        "{e}"
    );
    assert!(e.contains("device.rs"), "names the call site: {e}");
    assert!(results[0].is_err(), "rank 0 does not wait forever");
}

#[test]
fn posted_messages_of_device_tensors_are_refused_where_the_backend_has_none() {
    for recv in [false, true] {
        let err = spawn_with(2, on_nccl(), |ctx| {
            let mut t = ctx.zeros::<f32>([2])?;
            if recv {
                ctx.irecv(&mut t, 1 - ctx.rank())?.wait()?;
            } else {
                ctx.isend(&t, 1 - ctx.rank())?.wait()?;
            }
            Ok(())
        })
        .expect_err("refused");
        let what = if recv { "irecv" } else { "isend" };
        assert!(
            matches!(&err, Error::Backend { .. } | Error::Rank { .. }),
            "{err:?}"
        );
        assert!(
            err.to_string()
                .contains(&format!("{what} is not available")),
            "{err}"
        );
    }
}

/// The book's example (`book/src/nccl.md`, "Where tensors live"), run on both engines.
#[test]
fn the_books_example_runs_alike_on_host_and_device() {
    for opts in [on_threads(), on_nccl()] {
        let got = spawn_with(2, opts, |ctx| {
            // ANCHOR: device_tensors
            let mut grad = ctx.full::<f32>([1 << 10], ctx.rank() as f32)?; // cuda:r under NCCL
            ctx.all_reduce(&mut grad, ReduceOp::Sum)?; // no copy to or from the host
            assert_eq!(grad.device(), ctx.device());
            let first = grad.to_vec()[0]; // one copy, when the program looks
            let on_host = grad.to_host()?; // a host tensor: as_slice works on it
            let back = ctx.to_device(&on_host)?; // and back to the rank's device
            // ANCHOR_END: device_tensors
            assert_eq!(on_host.as_slice()?[1], first);
            Ok((first, back == grad))
        })
        .expect("runs");
        assert_eq!(got, vec![(1.0, true); 2]);
    }
}

//! The list forms (`all_gather_list`, `gather_list`, `scatter_list`, `reduce_scatter_list`,
//! `all_to_all_list`), on the world and on a sub-group, called alone and inside batches next to
//! other ops, against values computed by hand from each rank's data; and their misuse.

use rankwise_runtime::{Ctx, Error, Group, ReduceOp, Result, Tensor, spawn};

const SHAPE: [usize; 2] = [2, 3];
const N: usize = 6;

/// Element `e` of tensor `i` of rank `r`'s list (or of its single tensor, `i = 0`).
fn val(r: usize, i: usize, e: usize) -> f64 {
    (r * 100 + i * 10 + e) as f64
}

fn tensor(r: usize, i: usize) -> Result<Tensor<f64>> {
    Tensor::from_vec(SHAPE, (0..N).map(|e| val(r, i, e)).collect())
}

fn list(r: usize, n: usize) -> Result<Vec<Tensor<f64>>> {
    (0..n).map(|i| tensor(r, i)).collect()
}

fn zeros(n: usize) -> Result<Vec<Tensor<f64>>> {
    (0..n).map(|_| Tensor::zeros(SHAPE)).collect()
}

fn values(ts: &[Tensor<f64>]) -> Vec<Vec<f64>> {
    ts.iter().map(Tensor::to_vec).collect()
}

/// What one rank holds after the five calls.
#[derive(Debug, PartialEq)]
struct Got {
    all_gather: Vec<Vec<f64>>,
    gather: Option<Vec<Vec<f64>>>,
    scatter: Vec<f64>,
    reduce_scatter: Vec<f64>,
    all_to_all: Vec<Vec<f64>>,
}

/// The five list forms on `g`, one call at a time (`batched`: all five and a broadcast in one
/// batch).
fn run(ctx: &mut Ctx, g: &Group, batched: bool) -> Result<Got> {
    let r = ctx.rank();
    let members = g.members().to_vec();
    let n = members.len();
    let (first, last) = (members[0], members[n - 1]);
    let x = tensor(r, 0)?;
    let mut gathered = zeros(n)?;
    let mut at_root = zeros(n)?;
    let scatter_in = list(r, n)?;
    let mut scattered = Tensor::zeros(SHAPE)?;
    let rs_in = list(r, n)?;
    let mut reduced = Tensor::zeros(SHAPE)?;
    let a2a_in = list(r, n)?;
    let mut a2a_out = zeros(n)?;
    let mut extra = Tensor::full([1], r as f64)?;
    let root_out = (r == last).then_some(&mut at_root[..]);
    let root_in = (r == first).then_some(&scatter_in[..]);
    if batched {
        let mut b = ctx.batch();
        b.group(g)
            .all_gather_list(&x, &mut gathered)
            .gather_list(&x, root_out, last)
            .broadcast(&mut extra, first)
            .scatter_list(root_in, &mut scattered, first)
            .reduce_scatter_list(&rs_in, &mut reduced, ReduceOp::Sum)
            .all_to_all_list(&a2a_in, &mut a2a_out);
        b.run()?;
        assert_eq!(extra.to_vec(), [first as f64]);
    } else {
        let mut c = ctx.group(g);
        c.all_gather_list(&x, &mut gathered)?;
        c.gather_list(&x, root_out, last)?;
        c.scatter_list(root_in, &mut scattered, first)?;
        c.reduce_scatter_list(&rs_in, &mut reduced, ReduceOp::Sum)?;
        c.all_to_all_list(&a2a_in, &mut a2a_out)?;
    }
    Ok(Got {
        all_gather: values(&gathered),
        gather: (r == last).then(|| values(&at_root)),
        scatter: scattered.to_vec(),
        reduce_scatter: reduced.to_vec(),
        all_to_all: values(&a2a_out),
    })
}

/// The same, computed from the data's formula.
fn expected(members: &[usize], r: usize) -> Got {
    let me = members.iter().position(|&m| m == r).expect("a member");
    let last = members[members.len() - 1];
    let row = |r: usize, i: usize| (0..N).map(|e| val(r, i, e)).collect::<Vec<_>>();
    let each_member = members.iter().map(|&m| row(m, 0)).collect::<Vec<_>>();
    Got {
        all_gather: each_member.clone(),
        gather: (r == last).then_some(each_member),
        scatter: row(members[0], me),
        reduce_scatter: (0..N)
            .map(|e| members.iter().map(|&m| val(m, me, e)).sum())
            .collect(),
        all_to_all: members.iter().map(|&m| row(m, me)).collect(),
    }
}

#[test]
fn list_forms_move_what_torch_moves_on_the_world_and_on_groups() -> Result<()> {
    for world in 1..=5 {
        for batched in [false, true] {
            // The world, then the odd ranks (the even ones do the same on the world).
            let got = spawn(world, move |ctx| {
                let wg = ctx.world_group().clone();
                let on_world = run(ctx, &wg, batched)?;
                let odd: Vec<usize> = (1..ctx.world()).step_by(2).collect();
                let on_group = if odd.contains(&ctx.rank()) {
                    let g = ctx.new_group(&odd)?;
                    Some(run(ctx, &g, batched)?)
                } else {
                    None
                };
                Ok((on_world, on_group))
            })?;
            let all: Vec<usize> = (0..world).collect();
            let odd: Vec<usize> = (1..world).step_by(2).collect();
            for (r, (on_world, on_group)) in got.into_iter().enumerate() {
                assert_eq!(on_world, expected(&all, r), "world {world}, rank {r}");
                let want = odd.contains(&r).then(|| expected(&odd, r));
                assert_eq!(on_group, want, "odd ranks of world {world}, rank {r}");
            }
        }
    }
    Ok(())
}

/// The rule of lists, on every rank that breaks it, before anything is sent.
#[test]
fn a_list_of_the_wrong_length_or_shape_is_refused_with_its_index() -> Result<()> {
    let got = spawn(3, |ctx| {
        let x = tensor(ctx.rank(), 0)?;
        let mut short = zeros(2)?;
        let short_err = ctx.all_gather_list(&x, &mut short).err();
        let mut odd = zeros(3)?;
        odd[1] = Tensor::zeros([3, 2])?;
        let shape_err = ctx.all_to_all_list(&list(0, 3)?, &mut odd).err();
        Ok((short_err, shape_err))
    })?;
    for (short, shape) in got {
        let short = short.map(|e| e.to_string()).unwrap_or_default();
        assert!(
            short.contains("all_gather_list: `outputs` holds 2 tensor(s), but it needs one per member of the group (3)"),
            "{short}"
        );
        let shape = shape.map(|e| e.to_string()).unwrap_or_default();
        assert!(
            shape.contains("all_to_all_list: `outputs[1]` has shape [3, 2], but every tensor of the list must have shape [2, 3]"),
            "{shape}"
        );
    }
    Ok(())
}

/// A root without its list, or a non-root with one, is the same error as for the tensor forms.
#[test]
fn a_root_without_its_list_is_refused() -> Result<()> {
    let got = spawn(2, |ctx| {
        let x = tensor(ctx.rank(), 0)?;
        Ok(ctx.gather_list(&x, None, 0).err())
    })?;
    let Some(Error::Misuse { rank, .. }) = &got[0] else {
        panic!("the root's call without a list must fail: {got:?}");
    };
    assert_eq!(*rank, 0);
    Ok(())
}

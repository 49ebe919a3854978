//! The evaluator on its own: a function body in, each rank's program description out.

mod control_flow;
mod integers;
// Generated (see `control_flow`): its text is compared with the generator's, as written.
#[rustfmt::skip]
mod snippets;

use std::collections::HashMap;

use rankwise_core::verify::{Item, Program};
use rankwise_core::{DType, GroupId, OpKind, ReduceOp};

use super::{Analysis, Eval};

/// Evaluates `src` (a function whose context is `ctx`) for every rank of `world`.
fn evaluate(src: &str, world: usize) -> (Program, Analysis) {
    let f: syn::ItemFn = syn::parse_str(src).expect("the test program parses");
    let mut p = Program::new(world);
    let mut registry = HashMap::new();
    let mut shared = Analysis::default();
    for r in 0..world {
        Eval::new("ctx".into(), r, world, &mut p, &mut registry, &mut shared).run(&f.block);
    }
    (p, shared)
}

fn errors(shared: &mut Analysis) -> Vec<String> {
    shared.take_errors().into_iter().map(|(_, m)| m).collect()
}

#[test]
fn a_ring_exchange_becomes_one_batch_per_rank() {
    let (p, mut shared) = evaluate(
        "fn ring(ctx: &mut Ctx) -> Result<()> {
            let x = ctx.full([2], 1.0f32)?;
            let mut y = ctx.zeros::<f32>([2])?;
            let w = ctx.world();
            let mut b = ctx.batch();
            b.send(&x, (ctx.rank() + 1) % w);
            b.recv(&mut y, (ctx.rank() + w - 1) % w);
            b.run()?;
            Ok(())
        }",
        3,
    );
    assert!(errors(&mut shared).is_empty());
    for r in 0..3 {
        let [Item::Batch(ops)] = &p.ranks[r][..] else {
            panic!("rank {r}: {:?}", p.ranks[r]);
        };
        let calls: Vec<_> = ops.iter().map(|o| (o.desc.kind, o.desc.peer)).collect();
        assert_eq!(
            calls,
            [
                (OpKind::Send, Some((r + 1) % 3)),
                (OpKind::Recv, Some((r + 2) % 3))
            ]
        );
        assert!(
            ops.iter()
                .all(|o| o.desc.dtype == DType::F32 && o.desc.shape[..] == [2])
        );
    }
    // One site per call in the source, shared by every rank.
    assert_eq!(shared.sites.len(), 2);
}

#[test]
fn loops_unroll_and_branches_follow_the_rank() {
    let (p, mut shared) = evaluate(
        "fn f(ctx: &mut Ctx) -> Result<()> {
            let mut t = ctx.zeros::<i64>([4, 6])?;
            for root in 0..ctx.world() {
                if root % 2 == 0 {
                    ctx.broadcast(&mut t, root)?;
                }
            }
            ctx.reduce(&mut t, 1, ReduceOp::BitXor)?;
            Ok(())
        }",
        4,
    );
    assert!(errors(&mut shared).is_empty());
    let calls: Vec<_> = p.ranks[3]
        .iter()
        .flat_map(Item::ops)
        .map(|o| (o.desc.kind, o.desc.peer, o.desc.op))
        .collect();
    assert_eq!(
        calls,
        [
            (OpKind::Broadcast, Some(0), None),
            (OpKind::Broadcast, Some(2), None),
            (OpKind::Reduce, Some(1), Some(ReduceOp::BitXor)),
        ]
    );
}

#[test]
fn split_groups_get_one_id_per_part() {
    let (p, mut shared) = evaluate(
        "fn f(ctx: &mut Ctx) -> Result<()> {
            let g = ctx.split(&[&[0, 1], &[2, 3]])?;
            let mut t = ctx.full([1], 1u8)?;
            ctx.group(&g).all_reduce(&mut t, ReduceOp::Max)?;
            Ok(())
        }",
        4,
    );
    assert!(errors(&mut shared).is_empty());
    let group_of = |r: usize| p.ranks[r][0].ops()[0].desc.group;
    assert_eq!(group_of(0), group_of(1));
    assert_eq!(group_of(2), group_of(3));
    assert_ne!(group_of(0), group_of(2));
    assert_ne!(group_of(0), GroupId::WORLD);
    assert_eq!(p.groups[group_of(2).0 as usize], [2, 3]);
}

#[test]
fn a_split_the_runtime_refuses_is_refused_with_its_code() {
    let (_, mut shared) = evaluate(
        "fn f(ctx: &mut Ctx) -> Result<()> {
            let g = ctx.split(&[&[0, 1], &[1, 2, 3]])?;
            Ok(())
        }",
        4,
    );
    let e = errors(&mut shared);
    assert_eq!(e.len(), 1, "{e:?}");
    assert!(
        e[0].starts_with("RW011: invalid split: rank 1 appears in more than one part"),
        "{e:?}"
    );
}

#[test]
fn data_dependent_control_flow_is_rw012() {
    let (_, mut shared) = evaluate(
        "fn f(ctx: &mut Ctx) -> Result<()> {
            let mut t = ctx.full([2], 1.0f32)?;
            let x = t.to_vec()[0];
            if x > 0.5 {
                ctx.all_reduce(&mut t, ReduceOp::Sum)?;
            }
            Ok(())
        }",
        2,
    );
    let e = errors(&mut shared);
    assert!(
        !e.is_empty() && e.iter().all(|m| m.starts_with("RW012")),
        "{e:?}"
    );
}

#[test]
fn unknown_names_never_become_a_kind() {
    // `ssend` is not in the table of operations: it is an unknown method on the context.
    let (p, mut shared) = evaluate(
        "fn f(ctx: &mut Ctx) -> Result<()> {
            let t = ctx.full([2], 1.0f32)?;
            ctx.ssend(&t, 1)?;
            Ok(())
        }",
        2,
    );
    assert!(p.ranks.iter().all(Vec::is_empty));
    let e = errors(&mut shared);
    assert!(
        !e.is_empty() && e.iter().all(|m| m.starts_with("RW012")),
        "{e:?}"
    );
}

/// A function defined in one block is not the one of the same name in another block, and a
/// closure computes with the values it captured when it was made — a `move` closure's copies,
/// not the variable assigned later; a captured name, not a later `let` that shadows it.
/// Otherwise the macro would compute peers the program does not use.
#[test]
fn helpers_are_scoped_and_closures_use_what_they_captured() {
    let (p, mut shared) = evaluate(
        "fn f(ctx: &mut Ctx) -> Result<()> {
            let x = ctx.full([1], 1.0f32)?;
            fn peer() -> usize { 1 }
            let b = { fn peer() -> usize { 0 } peer() };
            let a = peer();
            let mut t = ctx.zeros::<f32>([1])?;
            if ctx.rank() == 0 { ctx.send(&x, a)?; } else { ctx.recv(&mut t, b)?; }
            Ok(())
        }",
        2,
    );
    assert!(errors(&mut shared).is_empty());
    let peer = |r: usize| p.ranks[r][0].ops()[0].desc.peer;
    assert_eq!((peer(0), peer(1)), (Some(1), Some(0)));

    for body in [
        "let mut k = 1; let next = move |r: usize| r + k; k = 0;",
        "let k = 1; let next = |r: usize| r + k; let k = 0;",
    ] {
        let (p, mut shared) = evaluate(
            &format!(
                "fn f(ctx: &mut Ctx) -> Result<()> {{
                    let x = ctx.full([1], 1.0f32)?;
                    let mut t = ctx.zeros::<f32>([1])?;
                    {body}
                    if ctx.rank() == k {{ ctx.send(&x, next(0))?; }} else {{ ctx.recv(&mut t, 0)?; }}
                    Ok(())
                }}"
            ),
            2,
        );
        assert!(errors(&mut shared).is_empty(), "{body}");
        let peer = |r: usize| p.ranks[r][0].ops()[0].desc.peer;
        assert_eq!((peer(0), peer(1)), (Some(1), Some(0)), "{body}");
    }
}

/// A closure with effects inside a lazy iterator chain is not replayed: the peer computed from
/// its counter is unknown (RW012), not a guess.
#[test]
fn closures_with_effects_in_iterator_chains_are_not_replayed() {
    let (_, mut shared) = evaluate(
        "fn f(ctx: &mut Ctx) -> Result<()> {
            let x = ctx.full([1], 1.0f32)?;
            let mut count = 0;
            let _lazy = (0..3).map(|i| { count += 1; i });
            ctx.send(&x, count)?;
            Ok(())
        }",
        2,
    );
    let e = errors(&mut shared);
    assert!(e.iter().any(|m| m.contains("RW012")), "{e:?}");
}

#[test]
fn posts_and_waits_become_items_of_their_own() {
    let (p, mut shared) = evaluate(
        "fn f(ctx: &mut Ctx) -> Result<()> {
            let peer = 1 - ctx.rank();
            let t = ctx.full([2], 1.0f32)?;
            let mut u = ctx.zeros::<f32>([2])?;
            let s = ctx.isend(&t, peer)?;
            let q = ctx.irecv(&mut u, peer)?;
            q.wait()?;
            for _ in 0..2 {
                ctx.isend(&t, peer)?.wait()?;
                ctx.recv(&mut u, peer)?;
            }
            s.wait()?;
            Ok(())
        }",
        2,
    );
    assert!(errors(&mut shared).is_empty());
    for items in &p.ranks {
        let shape: Vec<&str> = items
            .iter()
            .map(|i| match i {
                Item::Post(op) if op.desc.kind == OpKind::Send => "isend",
                Item::Post(_) => "irecv",
                Item::Wait { .. } => "wait",
                _ => "call",
            })
            .collect();
        // The loop's posts are not summarised: each wait names its own post.
        assert_eq!(
            shape,
            [
                "isend", "irecv", "wait", "isend", "wait", "call", "isend", "wait", "call", "wait"
            ]
        );
        let waited: Vec<usize> = items
            .iter()
            .filter_map(|i| match i {
                Item::Wait { post, .. } => Some(*post),
                _ => None,
            })
            .collect();
        assert_eq!(waited, [1, 3, 6, 0]);
    }
}

/// `Option::xor` with an argument the macro cannot know is unknown (`or` is not: a `Some`
/// wins whatever the argument). The macro once took `Some(1).xor(unknown)` for `Some(1)`.
#[test]
fn option_xor_with_an_unknown_argument_is_unknown() {
    for (method, known) in [("xor", false), ("or", true)] {
        let (p, mut shared) = evaluate(
            &format!(
                "fn f(ctx: &mut Ctx) -> Result<()> {{
                    let data = ctx.full([1], 0.0f32)?.to_vec()[0] > 0.5;
                    let o = Some(1usize).{method}(if data {{ Some(0) }} else {{ None }});
                    let mut t = ctx.full([1], 0.0f32)?;
                    ctx.broadcast(&mut t, o.unwrap_or(0))?;
                    Ok(())
                }}"
            ),
            2,
        );
        let e = errors(&mut shared);
        assert_eq!(e.is_empty(), known, "{method}: {e:?}");
        if known {
            assert_eq!(p.ranks[0][0].ops()[0].desc.peer, Some(1), "{method}");
        }
    }
}

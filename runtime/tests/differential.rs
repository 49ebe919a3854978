//! Differential tests: random programs — and single mutations of them — are both verified and
//! run, unchecked, on the local backend. The verifier's verdict must agree with what actually
//! happens: accepted programs run to completion; rejected ones fail at run time in one of the
//! ways the verifier predicted (hang, mismatch, misuse). Failing cases are shrunk by proptest and
//! kept in `proptest-regressions/`.

use std::sync::Arc;
use std::time::Duration;

use proptest::prelude::*;
use rankwise_runtime::verify::{Item, Match, Program, Verdict, verify};
use rankwise_runtime::{Code, DType, Error, Options, PeerFailure, ReduceOp, spawn_with};
use rankwise_runtime::{GroupId, OpKind};

/// One event of a random SPMD program, as small integers interpreted modulo the world.
#[derive(Clone, Debug)]
struct Event {
    kind: u8,
    a: u8,
    b: u8,
    c: u8,
    d: u8,
}

/// A change to one rank's program.
#[derive(Clone, Debug)]
struct Mutation {
    rank: u8,
    item: u8,
    kind: u8,
}

fn event() -> impl Strategy<Value = Event> {
    (0u8..6, any::<u8>(), any::<u8>(), any::<u8>(), any::<u8>())
        .prop_map(|(kind, a, b, c, d)| Event { kind, a, b, c, d })
}

fn mutation() -> impl Strategy<Value = Mutation> {
    (any::<u8>(), any::<u8>(), 0u8..7).prop_map(|(rank, item, kind)| Mutation { rank, item, kind })
}

const KINDS: [OpKind; 9] = [
    OpKind::AllReduce,
    OpKind::Reduce,
    OpKind::Broadcast,
    OpKind::Gather,
    OpKind::AllGather,
    OpKind::Scatter,
    OpKind::ReduceScatter,
    OpKind::AllToAll,
    OpKind::Barrier,
];

/// Builds a correct program: every event is issued consistently by every rank involved.
fn build(world: usize, group_masks: &[u8], events: &[Event]) -> Program {
    let mut p = Program::new(world);
    let mut groups = vec![(GroupId::WORLD, (0..world).collect::<Vec<_>>())];
    for &mask in group_masks {
        let mut m: Vec<usize> = (0..world).filter(|r| mask >> r & 1 == 1).collect();
        if m.is_empty() {
            m.push(mask as usize % world);
        }
        groups.push((p.group(&m), m));
    }
    for e in events {
        let w = world;
        match e.kind {
            0 | 3 => {
                let (g, members) = &groups[e.a as usize % groups.len()];
                let n = members.len();
                let dtype = DType::ALL[e.c as usize % 10];
                let ops: Vec<ReduceOp> = ReduceOp::ALL
                    .into_iter()
                    .filter(|o| o.supports(dtype))
                    .collect();
                let op = ops[e.c as usize / 10 % ops.len()];
                let ndim = 1 + e.d as usize % 2;
                let mut shape = vec![1 + (e.d as usize / 2) % 3, 1 + (e.d as usize / 6) % 2];
                shape.truncate(ndim);
                let dim = (e.d as usize / 12) % ndim;
                let root = members[e.a as usize / 8 % n];
                let kinds: &[OpKind] = if e.kind == 3 {
                    &[OpKind::AllReduce, OpKind::Broadcast]
                } else {
                    &KINDS[e.b as usize % 9..][..1]
                };
                for &r in members {
                    let mut b = p.rank(r);
                    if e.kind == 3 {
                        b.batch();
                    }
                    for &kind in kinds {
                        let mut split = shape.clone();
                        split[dim] *= n;
                        match kind {
                            OpKind::AllReduce => b.all_reduce(*g, dtype, &shape, op),
                            OpKind::Reduce => b.reduce(*g, dtype, &shape, root, op),
                            OpKind::Broadcast => b.broadcast(*g, dtype, &shape, root),
                            OpKind::Gather => b.gather(*g, dtype, &shape, root, dim),
                            OpKind::AllGather => b.all_gather(*g, dtype, &shape, dim),
                            OpKind::Scatter => b.scatter(*g, dtype, &shape, root, dim),
                            OpKind::ReduceScatter => b.reduce_scatter(*g, dtype, &split, op, dim),
                            OpKind::AllToAll => b.all_to_all(*g, dtype, &split, dim),
                            _ => b.barrier(*g),
                        };
                    }
                    b.end_batch();
                }
            }
            1 => {
                // Everyone sends to the rank `shift` ahead and receives from the one behind, in a
                // batch (shift 0: to itself).
                let shift = e.a as usize % w;
                let dtype = DType::ALL[e.c as usize % 10];
                for r in 0..w {
                    p.rank(r)
                        .batch()
                        .send(dtype, &[2], (r + shift) % w)
                        .recv(dtype, &[2], (r + w - shift) % w)
                        .end_batch();
                }
            }
            2 if w >= 2 => {
                // An ordered blocking exchange between two distinct ranks.
                let x = e.a as usize % w;
                let y = (x + 1 + e.b as usize % (w - 1)) % w;
                p.rank(x)
                    .send(DType::F32, &[3], y)
                    .recv(DType::F32, &[3], y);
                p.rank(y)
                    .recv(DType::F32, &[3], x)
                    .send(DType::F32, &[3], x);
            }
            4 if w >= 2 => {
                // A blocking pipeline: each rank receives from the previous, then sends on.
                for r in 0..w {
                    let mut b = p.rank(r);
                    if r > 0 {
                        b.recv(DType::I64, &[1], r - 1);
                    }
                    if r + 1 < w {
                        b.send(DType::I64, &[1], r + 1);
                    }
                }
            }
            _ => {
                for r in 0..w {
                    p.rank(r).barrier(GroupId::WORLD);
                }
            }
        }
    }
    p
}

/// Applies `m` to one rank's items (no-op if that rank has none).
fn mutate(p: &mut Program, m: &Mutation) {
    let w = p.world;
    let items = &mut p.ranks[m.rank as usize % w];
    if items.is_empty() {
        return;
    }
    let i = m.item as usize % items.len();
    let first = |item: &mut Item| -> *mut rankwise_runtime::verify::VOp {
        match item {
            Item::Op(op) => op,
            Item::Batch(ops) => ops.as_mut_ptr(),
        }
    };
    match m.kind {
        0 if i + 1 < items.len() => items.swap(i, i + 1),
        1 => {
            items.remove(i);
        }
        6 => {
            if let Item::Batch(ops) = &items[i] {
                let singles: Vec<Item> = ops.iter().cloned().map(Item::Op).collect();
                items.splice(i..=i, singles);
            }
        }
        k => {
            if matches!(&items[i], Item::Batch(ops) if ops.is_empty()) {
                return;
            }
            // SAFETY-free alternative to juggling borrows: take the first op by index.
            let op = match &mut items[i] {
                Item::Op(op) => op,
                Item::Batch(ops) => &mut ops[0],
            };
            let _ = first;
            match k {
                2 => op.desc.peer = op.desc.peer.map(|r| (r + 1) % w),
                3 => {
                    if let Some(d) = op.desc.shape.first_mut() {
                        *d += 1;
                    } else {
                        op.desc.kind = OpKind::AllReduce;
                        op.desc.op = Some(ReduceOp::Sum);
                        op.desc.shape.push(1);
                    }
                }
                4 => {
                    let i = DType::ALL
                        .iter()
                        .position(|d| *d == op.desc.dtype)
                        .unwrap_or(0);
                    op.desc.dtype = DType::ALL[(i + 1) % 10];
                }
                _ => {
                    if op.desc.kind.is_p2p() {
                        op.desc.peer = op.desc.peer.map(|r| (r + 1) % w);
                    } else {
                        op.desc.dim += 1;
                    }
                }
            }
        }
    }
}

/// What happened when the program ran: `None` if every rank finished; for a broken rule, also
/// the rule's code.
fn run(p: &Program) -> Option<(Verdict, Option<Code>)> {
    let program = Arc::new(p.clone());
    let opts = Options::default().timeout(Duration::from_secs(10));
    let result = spawn_with(p.world, opts, |ctx| rankwise_runtime::replay(&program, ctx));
    match result {
        Ok(_) => None,
        Err(e) => Some(classify(&e)),
    }
}

fn classify(e: &Error) -> (Verdict, Option<Code>) {
    match e {
        Error::Deadlock(_)
        | Error::PeerFailed {
            reason: PeerFailure::Exited,
            ..
        } => (Verdict::Hang, None),
        Error::CollectiveMismatch(_) | Error::P2pMismatch(_) => (Verdict::Mismatch, None),
        Error::Misuse { violation, .. } => (Verdict::Misuse, Some(violation.code())),
        other => panic!("the runtime failed in a way no verdict covers: {other}"),
    }
}

fn agree(p: &Program) -> Result<(), TestCaseError> {
    let predicted = verify(p);
    let actual = run(p);
    match (&predicted, actual) {
        (Ok(_), None) => Ok(()),
        // A broken rule is reported by the verifier with the very code the runtime gives it.
        (Err(d), Some((v, code)))
            if d.verdicts().contains(&v)
                && code.is_none_or(|c| d.0.iter().any(|x| x.code == c)) =>
        {
            Ok(())
        }
        (Ok(_), Some(v)) => Err(TestCaseError::fail(format!(
            "verifier accepted, run ended in {v:?}:\n{p:#?}"
        ))),
        (Err(d), None) => Err(TestCaseError::fail(format!(
            "verifier rejected, run succeeded:\n{d}\n{p:#?}"
        ))),
        (Err(d), Some(v)) => Err(TestCaseError::fail(format!(
            "run ended in {v:?}, verifier said:\n{d}\n{p:#?}"
        ))),
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 600, ..ProptestConfig::default() })]

    #[test]
    fn correct_programs_are_accepted_and_run(world in 1usize..=5,
                                             masks in prop::collection::vec(any::<u8>(), 0..3),
                                             events in prop::collection::vec(event(), 0..12)) {
        let p = build(world, &masks, &events);
        let schedule = verify(&p).map_err(|d| TestCaseError::fail(d.to_string()))?;
        // The schedule pairs every send with a recv that points back at it, and every
        // collective with the same step on every member.
        for r in 0..world {
            for (i, item) in p.ranks[r].iter().enumerate() {
                for (j, m) in schedule.matches(r, i).enumerate() {
                    match m {
                        Match::P2p { peer, item: their_item, op } => {
                            let back = schedule.matches(peer as usize, their_item as usize).nth(op as usize);
                            prop_assert_eq!(back, Some(Match::P2p { peer: r as u32, item: i as u32, op: j as u32 }));
                        }
                        Match::Collective { group, .. } => prop_assert_eq!(group, item.ops()[j].desc.group),
                    }
                }
            }
        }
        agree(&p)?;
    }

    #[test]
    fn mutated_programs_get_the_verdict_they_earn(world in 1usize..=5,
                                                   masks in prop::collection::vec(any::<u8>(), 0..3),
                                                   events in prop::collection::vec(event(), 1..12),
                                                   m in mutation()) {
        let mut p = build(world, &masks, &events);
        mutate(&mut p, &m);
        agree(&p)?;
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1500, ..ProptestConfig::default() })]

    #[test]
    fn twice_mutated_programs_agree_too(world in 2usize..=4,
                                        events in prop::collection::vec(event(), 1..8),
                                        m1 in mutation(), m2 in mutation()) {
        let mut p = build(world, &[], &events);
        mutate(&mut p, &m1);
        mutate(&mut p, &m2);
        agree(&p)?;
    }
}

/// The generator must actually exercise every verdict, or the properties above prove little.
#[test]
fn mutations_cover_every_verdict() {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;
    let mut runner = TestRunner::deterministic();
    let strategy = (
        2usize..=5,
        prop::collection::vec(any::<u8>(), 0..3),
        prop::collection::vec(event(), 1..10),
        mutation(),
    );
    let mut tally = std::collections::BTreeMap::new();
    for _ in 0..400 {
        let (world, masks, events, m) = strategy.new_tree(&mut runner).expect("generate").current();
        let mut p = build(world, &masks, &events);
        mutate(&mut p, &m);
        let verdict = match verify(&p) {
            Ok(_) => "ok".to_string(),
            Err(d) => format!("{:?}", d.verdicts()[0]),
        };
        *tally.entry(verdict).or_insert(0) += 1;
        agree(&p).unwrap_or_else(|e| panic!("{e}"));
    }
    eprintln!("verdict tally: {tally:?}");
    for v in ["ok", "Hang", "Mismatch", "Misuse"] {
        assert!(
            tally.get(v).copied().unwrap_or(0) >= 10,
            "too few {v} cases: {tally:?}"
        );
    }
}

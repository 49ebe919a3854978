//! Differential tests: random programs — and single mutations of them — are both verified and
//! run, unchecked, on the local backend. The verifier's verdict must agree with what actually
//! happens: accepted programs run to completion; rejected ones fail at run time in one of the
//! ways the verifier predicted (hang, mismatch, misuse). Failing cases are shrunk by proptest and
//! kept in `proptest-regressions/`. `RANKWISE_SOAK_SCALE=20` runs twenty times as many cases.

use std::sync::Arc;
use std::time::Duration;

use proptest::prelude::*;

#[path = "common/knobs.rs"]
mod knobs;
#[path = "common/programs.rs"]
mod programs;

use programs::{Event, Mutation, build, mutate};
use rankwise_runtime::verify::{Match, Program, Verdict, verify};
use rankwise_runtime::{Code, Emulation, Error, Options, PeerFailure, spawn_with};

/// `n` cases, times `RANKWISE_SOAK_SCALE` (1 by default; e.g. 20 for a soak run).
fn scaled(n: u32) -> u32 {
    n.saturating_mul(knobs::count("RANKWISE_SOAK_SCALE").unwrap_or(1))
}

/// Events of every kind, posted sends and receives (kinds 6 and 7) included.
fn event() -> impl Strategy<Value = Event> {
    (0u8..9, any::<u8>(), any::<u8>(), any::<u8>(), any::<u8>())
        .prop_map(|(kind, a, b, c, d)| Event { kind, a, b, c, d })
}

/// Events without posted messages: the NCCL lowering has no `isend`/`irecv` yet (an `Err`
/// before any call, tested in `requests.rs`).
fn blocking_event() -> impl Strategy<Value = Event> {
    (
        prop::sample::select(&programs::BLOCKING_KINDS[..]),
        any::<u8>(),
        any::<u8>(),
        any::<u8>(),
        any::<u8>(),
    )
        .prop_map(|(kind, a, b, c, d)| Event { kind, a, b, c, d })
}

fn mutation() -> impl Strategy<Value = Mutation> {
    (any::<u8>(), any::<u8>(), 0u8..7).prop_map(|(rank, item, kind)| Mutation { rank, item, kind })
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
    #![proptest_config(ProptestConfig { cases: scaled(600), ..ProptestConfig::default() })]

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
    #![proptest_config(ProptestConfig { cases: scaled(1500), ..ProptestConfig::default() })]

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

fn uses_bitwise_ops(p: &Program) -> bool {
    use rankwise_runtime::ReduceOp::{BitAnd, BitOr, BitXor};
    p.ranks
        .iter()
        .flatten()
        .flat_map(|item| item.ops())
        .any(|op| matches!(op.desc.op, Some(BitAnd | BitOr | BitXor)))
}

/// Every rank's digest of a program's outputs on `emulate`, or the error.
fn digests(p: &Program, emulate: Emulation) -> rankwise_runtime::Result<Vec<u64>> {
    let program = Arc::new(p.clone());
    let opts = Options::default()
        .timeout(Duration::from_secs(10))
        .emulate(emulate);
    spawn_with(p.world, opts, |ctx| rankwise_runtime::replay(&program, ctx))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: scaled(300), ..ProptestConfig::default() })]

    /// The NCCL lowering, executed with NCCL's semantics on host memory, gives every rank the
    /// same bits as the threads backend — for NCCL with its own all_to_all, gather and scatter
    /// (2.28 on) and for the grouped sends and receives that stand in for them before.
    #[test]
    fn the_nccl_lowering_computes_what_the_threads_backend_computes(
        world in 1usize..=5,
        masks in prop::collection::vec(any::<u8>(), 0..3),
        events in prop::collection::vec(blocking_event(), 0..12),
        old in any::<bool>(),
        pack in any::<bool>(),
    ) {
        let p = build(world, &masks, &events);
        prop_assume!(verify(&p).is_ok());
        let version = if old { 22703 } else { 23203 };
        if uses_bitwise_ops(&p) {
            // NCCL has none: refused before any call, on every rank that reaches one.
            // The generator's batches are the same on every member: the packing promise holds.
        let got = digests(&p, Emulation::Nccl { version, pack });
            prop_assert!(
                matches!(&got, Err(e) if e.to_string().contains("backend nccl: ") && e.to_string().contains("NCCL has no bitwise reductions")),
                "{:?}", got
            );
            return Ok(());
        }
        let want = digests(&p, Emulation::Off).map_err(|e| TestCaseError::fail(e.to_string()))?;
        // The generator's batches are the same on every member: the packing promise holds.
        let got = digests(&p, Emulation::Nccl { version, pack })
            .map_err(|e| TestCaseError::fail(format!("NCCL {version}: {e}\n{p:#?}")))?;
        prop_assert_eq!(got, want, "NCCL {}:\n{:#?}", version, p);
    }
}

//! Every example through the NCCL backend's lowering, executed with NCCL's semantics on host
//! memory (`RANKWISE_BACKEND=nccl-host`), for an NCCL with its own all_to_all/gather/scatter
//! (2.32) and one without (2.27), with and without packing: each prints what it prints on the
//! threads engine, bit for bit, except what NCCL cannot do (bitwise reductions), and every
//! failure case ends with an error instead of a hang.

use std::path::PathBuf;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

#[path = "common/examples.rs"]
mod examples;

fn example(name: &str) -> PathBuf {
    examples::example(name, &examples::same_features())
}

/// NCCL versions and packing the emulation runs with: (version, pack).
const SETTINGS: [(&str, &str); 3] = [("2.32.3", "0"), ("2.27.3", "0"), ("2.32.3", "1")];

fn run(name: &str, args: &[&str], env: &[(&str, &str)]) -> (Output, Duration) {
    // Built (and found) before the clock starts: the first call builds every example.
    let exe = example(name);
    let started = Instant::now();
    let out = Command::new(exe)
        .args(args)
        .envs(env.iter().copied())
        .env("RUST_BACKTRACE", "0")
        .output()
        .expect("example runs");
    (out, started.elapsed())
}

fn stdout(name: &str, args: &[&str], env: &[(&str, &str)]) -> String {
    let (out, _) = run(name, args, env);
    assert!(
        out.status.success(),
        "{name} {args:?} with {env:?} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// What `name args…` prints on the threads engine: run once per test binary, since every
/// setting of the emulation is compared with the same output.
fn threads(name: &str, args: &[&str]) -> String {
    examples::once(format!("{name} {args:?}"), || {
        stdout(name, args, &[("RANKWISE_BACKEND", "threads")])
    })
}

fn nccl_host(name: &str, args: &[&str], version: &str, pack: &str) -> String {
    let env = [
        ("RANKWISE_BACKEND", "nccl-host"),
        ("RANKWISE_NCCL_VERSION", version),
        ("RANKWISE_NCCL_PACK", pack),
    ];
    stdout(name, args, &env)
}

#[test]
fn every_operation_gives_the_threads_engines_bits_except_bitwise_reductions() {
    for world in ["1", "2", "3", "4"] {
        let want: Vec<String> = threads("every_op", &[world])
            .lines()
            .filter(|l| !l.contains(" Bit"))
            .map(str::to_string)
            .collect();
        assert!(want.len() > 1000, "every_op printed {} lines", want.len());
        // every_op batches one bucket differently on different ranks: packing is a promise it
        // does not keep, so it runs unpacked here (the packing promise is tested below).
        for (version, pack) in &SETTINGS[..2] {
            let got: Vec<String> = nccl_host("every_op", &[world], version, pack)
                .lines()
                .map(str::to_string)
                .collect();
            assert_eq!(got, want, "every_op at world {world}, NCCL {version}");
        }
    }
}

#[test]
fn a_broken_packing_promise_is_a_mismatch_not_wrong_data() {
    let env = [
        ("RANKWISE_BACKEND", "nccl-host"),
        ("RANKWISE_NCCL_PACK", "1"),
    ];
    let (out, took) = run("every_op", &["4"], &env);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("collective mismatch") && err.contains("packed"),
        "{err}"
    );
    assert!(took < Duration::from_secs(20), "took {took:?}");
}

#[test]
fn examples_print_what_they_print_on_threads() {
    for (version, pack) in SETTINGS {
        assert_eq!(
            nccl_host("quickstart", &[], version, pack),
            threads("quickstart", &[])
        );
        // The threads engine also demonstrates other world sizes; the first lines are the run.
        let ring = nccl_host("ring_allreduce", &[], version, pack);
        assert!(threads("ring_allreduce", &[]).starts_with(&ring), "{ring}");
        assert_eq!(ring.lines().count(), 4, "{ring}");
        assert_eq!(
            nccl_host("failures", &["slow"], version, pack),
            threads("failures", &["slow"])
        );
        for (name, _) in examples::SEED_PORTS {
            if examples::POSTS.contains(&name) {
                // No `isend`/`irecv` on NCCL yet: refused at the first one, on every rank.
                let env = [
                    ("RANKWISE_BACKEND", "nccl-host"),
                    ("RANKWISE_NCCL_VERSION", version),
                    ("RANKWISE_NCCL_PACK", pack),
                ];
                let (run, _) = run(name, &[], &env);
                assert!(!run.status.success(), "{name} succeeded");
                let out = String::from_utf8_lossy(&run.stderr);
                assert!(
                    out.contains("is not available on this backend yet"),
                    "{name}: {out}"
                );
                continue;
            }
            assert_eq!(
                nccl_host(name, &[], version, pack),
                threads(name, &[]),
                "{name}"
            );
        }
    }
}

/// The differential tests' random programs: each one the backend can run gives the threads
/// engine's digests on every rank.
#[test]
fn random_programs_give_the_threads_engines_digests() {
    let want = threads("random_programs", &["good", "11", "100"]);
    for (version, pack) in SETTINGS {
        let got = nccl_host("random_programs", &["good", "11", "100"], version, pack);
        let mut ran = 0;
        for line in got.lines() {
            if line.contains("needs a reduction") {
                continue;
            }
            assert!(
                want.contains(line),
                "NCCL {version}: {line} is not in\n{want}"
            );
            ran += 1;
        }
        assert!(ran > 200, "only {ran} lines compared");
    }
}

/// Each wrong program ends, promptly, with a non-zero status and the error the threads engine
/// reports (the emulation names the same ranks and calls).
#[test]
fn failures_end_promptly_with_an_error() {
    let cases = [
        ("panic", "rank 2 panicked"),
        ("error", "disk full"),
        ("deadlock", "deadlock"),
        ("skip", "deadlock"),
        ("mismatch", "collective mismatch"),
        ("sizes", "collective mismatch"),
        ("rooted", "collective mismatch"),
        ("gathers", "collective mismatch"),
        ("large", "collective mismatch"),
        ("bucket", "step 281: rank 0 calls all_reduce(Sum, f32[256])"),
        ("roots", "step 1: rank 0 calls broadcast(root 0, f32[4])"),
        ("batched", "rank 0 waits in recv(from 1, f32[4])"),
        ("p2p", "f32[4]"),
    ];
    for (case, says) in cases {
        let (out, took) = run("failures", &[case], &[("RANKWISE_BACKEND", "nccl-host")]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{case} succeeded");
        assert!(err.contains(says), "{case}: {err}");
        assert!(took < Duration::from_secs(10), "{case} took {took:?}");
    }
}

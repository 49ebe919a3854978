//! Every example on 1..N local GPUs through NCCL, against the threads engine (feature `nccl`).
//! Skipped unless `RANKWISE_GPU_TESTS=1`: no CI machine here has a GPU. Run it on a GPU host:
//!
//! ```sh
//! RANKWISE_GPU_TESTS=1 cargo test --features nccl --test gpu
//! ```
//!
//! Two ways of starting: processes the way `torchrun` would (`RANK`, `WORLD_SIZE`,
//! `LOCAL_RANK`, `MASTER_ADDR`, `MASTER_PORT`), one per GPU; and one process running every rank,
//! a thread per GPU (`RANKWISE_BACKEND=nccl` without a launcher). NCCL orders floating-point reductions by its own
//! ring or tree, so lines of float `Avg` and `PreMulSum` results may differ from the threads
//! engine's in the last bit and are not compared; everything else must be the same bits.

#![cfg(feature = "nccl")]

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn enabled() -> bool {
    let on = std::env::var("RANKWISE_GPU_TESTS").is_ok_and(|v| v == "1");
    if !on {
        eprintln!("GPU tests skipped: set RANKWISE_GPU_TESTS=1 on a machine with NVIDIA GPUs");
    }
    on
}

/// GPUs to use: `RANKWISE_GPUS`, else what `nvidia-smi -L` lists.
fn gpus() -> usize {
    if let Some(n) = std::env::var("RANKWISE_GPUS")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        return n;
    }
    let out = Command::new("nvidia-smi")
        .arg("-L")
        .output()
        .expect("nvidia-smi runs on a GPU machine (or set RANKWISE_GPUS)");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.starts_with("GPU "))
        .count()
}

#[path = "common/examples.rs"]
mod examples;

fn example(name: &str) -> PathBuf {
    examples::example(name, &examples::same_features())
}

fn free_port() -> u16 {
    rankwise::bootstrap::free_port().expect("a free port")
}

/// Runs `name args` as `n` NCCL ranks, one per GPU; every line they print.
fn nccl(n: usize, name: &str, args: &[&str]) -> BTreeSet<String> {
    let port = free_port().to_string();
    let children: Vec<Child> = (0..n)
        .map(|r| {
            Command::new(example(name))
                .args(args)
                .env("RANKWISE_BACKEND", "nccl")
                .env("RANK", r.to_string())
                .env("LOCAL_RANK", r.to_string())
                .env("WORLD_SIZE", n.to_string())
                .env("MASTER_ADDR", "127.0.0.1")
                .env("MASTER_PORT", &port)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("example starts")
        })
        .collect();
    let started = Instant::now();
    let mut lines = BTreeSet::new();
    for (r, c) in children.into_iter().enumerate() {
        let out = c.wait_with_output().expect("rank ends");
        assert!(
            out.status.success(),
            "{name} rank {r} of {n} failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        lines.extend(
            String::from_utf8_lossy(&out.stdout)
                .lines()
                .map(str::to_string),
        );
    }
    assert!(started.elapsed() < Duration::from_secs(600));
    lines
}

/// Runs `name args` as `n` ranks of one process, a thread per GPU; its lines, or its stderr
/// if it failed.
fn one_process(n: usize, name: &str, args: &[&str]) -> Result<BTreeSet<String>, String> {
    let started = Instant::now();
    let out = Command::new(example(name))
        .args(args)
        .env("RANKWISE_BACKEND", "nccl")
        .env("RANKWISE_WORLD", n.to_string())
        .env_remove("RANK")
        .env("RANKWISE_NCCL_TIMEOUT", "60")
        .output()
        .expect("example runs");
    assert!(started.elapsed() < Duration::from_secs(300));
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).into_owned());
    }
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect())
}

fn threads(n: usize, name: &str, args: &[&str]) -> BTreeSet<String> {
    let out = Command::new(example(name))
        .args(args)
        .env("RANKWISE_BACKEND", "threads")
        .env("RANKWISE_WORLD", n.to_string())
        .output()
        .expect("example runs");
    assert!(out.status.success());
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect()
}

/// Lines whose bits NCCL is expected to reproduce.
fn comparable(line: &str) -> bool {
    let float = ["f32", "f64", "f16", "bf16"]
        .iter()
        .any(|t| line.contains(&format!(" {t} ")));
    !line.contains(" Bit") && !(float && (line.contains("Avg") || line.contains("PreMulSum")))
}

/// Asserts that `got`, example `name`'s lines on `n` GPUs (started as `how`), are the threads
/// engine's, except lines NCCL may round differently. The example takes the world as argument.
fn same_as_threads(n: usize, name: &str, got: BTreeSet<String>, how: &str) {
    let world = n.to_string();
    let keep = |lines: BTreeSet<String>| -> BTreeSet<String> {
        lines.into_iter().filter(|l| comparable(l)).collect()
    };
    let want = keep(threads(n, name, &[&world]));
    assert_eq!(keep(got), want, "{name} on {n} GPUs ({how})");
}

#[test]
fn every_example_on_every_gpu_count_matches_threads() {
    if !enabled() {
        return;
    }
    for n in 1..=gpus().min(8) {
        let world = n.to_string();
        same_as_threads(n, "every_op", nccl(n, "every_op", &[&world]), "processes");
        if n >= 2 {
            let ring = nccl(n, "ring_allreduce", &[]);
            assert!(
                ring.is_subset(&threads(n, "ring_allreduce", &[])),
                "{ring:?}"
            );
        }
        let quick = nccl(n, "quickstart", &[]);
        assert!(quick.is_subset(&threads(n, "quickstart", &[])), "{quick:?}");
        let random = nccl(n, "random_programs", &["good", "11", "100"]);
        let want = threads(n, "random_programs", &["good", "11", "100"]);
        for l in random.iter().filter(|l| !l.contains("needs a reduction")) {
            assert!(want.contains(l), "{l}");
        }
    }
}

#[test]
fn one_process_with_a_thread_per_gpu_matches_threads() {
    if !enabled() {
        return;
    }
    for n in 1..=gpus().min(8) {
        let world = n.to_string();
        let got = one_process(n, "every_op", &[&world])
            .unwrap_or_else(|e| panic!("every_op on {n} GPUs in one process: {e}"));
        same_as_threads(n, "every_op", got, "one process");
    }
}

#[test]
fn in_one_process_a_failing_rank_ends_every_rank_with_its_cause() {
    if !enabled() {
        return;
    }
    let n = gpus().min(4);
    if n < 2 {
        eprintln!("needs two GPUs");
        return;
    }
    // Peers blocked in NCCL hear of the failure through the world's stop, not a timeout.
    for (case, says) in [("panic", "rank 2 panicked"), ("error", "rank 1: disk full")] {
        if case == "panic" && n < 3 {
            continue;
        }
        let started = Instant::now();
        let err = one_process(n, "failures", &[case]).expect_err("fails");
        assert!(err.contains(says), "{case}: {err}");
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "{case} took {:?}",
            started.elapsed()
        );
    }
    let err = one_process(gpus() + 1, "quickstart", &[]).expect_err("too many ranks");
    assert!(err.contains("GPUs, one per rank"), "{err}");
}

#[test]
fn every_seed_port_on_gpus_prints_what_threads_print() {
    if !enabled() {
        return;
    }
    let have = gpus();
    for (name, world) in examples::SEED_PORTS {
        if examples::POSTS.contains(&name) {
            continue; // isend/irecv: refused on NCCL so far (docs/decisions.md)
        }
        if world > have {
            eprintln!("{name} needs {world} GPUs; this machine has {have}");
            continue;
        }
        let want = threads(world, name, &[]);
        let got = one_process(world, name, &[])
            .unwrap_or_else(|e| panic!("{name} on {world} GPUs in one process: {e}"));
        let got: BTreeSet<String> = got.into_iter().filter(|l| comparable(l)).collect();
        assert!(
            !got.is_empty() && got.iter().all(|l| want.contains(l)),
            "{name}: {got:?}"
        );
        let procs: BTreeSet<String> = nccl(world, name, &[])
            .into_iter()
            .filter(|l| comparable(l))
            .collect();
        assert_eq!(
            procs, got,
            "{name}: one process per GPU and one process for all differ"
        );
    }
}

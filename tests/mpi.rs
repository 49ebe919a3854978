//! The MPI backend, run for real under `mpirun` (feature `mpi`; CI installs Open MPI):
//! every example's output against the threads engine's, at several world sizes and over TCP;
//! every failure mode ending the job promptly with a message naming the ranks and calls.
//!
//! Processes are oversubscribed (`--oversubscribe`: more ranks than cores) and may run as root
//! (the `OMPI_ALLOW_RUN_AS_ROOT*` variables), as on CI machines. `RANKWISE_TEST_MCA` adds MCA
//! settings to every job (`"btl self,tcp"`: the whole suite over TCP).

#![cfg(feature = "mpi")]

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

#[path = "common/examples.rs"]
mod examples;

/// An example binary built with this test's features (see `common/examples.rs`).
fn example(name: &str) -> PathBuf {
    examples::example(name, &examples::same_features())
}

struct Run {
    ok: bool,
    /// Each rank's standard output.
    out: BTreeMap<usize, String>,
    err: String,
    took: Duration,
}

/// MCA settings and environment variables of one `mpirun`.
#[derive(Clone, Copy, Default)]
struct Opts<'a> {
    mca: &'a [(&'a str, &'a str)],
    env: &'a [(&'a str, &'a str)],
    /// Variables set for the last rank alone (its own application context, through `env`).
    last_rank_env: &'a [(&'a str, &'a str)],
}

const PLAIN: Opts = Opts {
    mca: &[],
    env: &[],
    last_rank_env: &[],
};

/// Every call checked as if no `#[rankwise::program]` proof covered it.
const CHECK_ALL: Opts = Opts {
    env: &[("RANKWISE_MPI_CHECK", "all")],
    ..PLAIN
};

/// No job of this suite takes a tenth of this; see `mpirun`.
const MPIRUN_TIMEOUT_SECS: u32 = 180;

/// Runs `name args…` as `np` MPI processes, with `opts`, collecting each rank's output
/// separately (`--output-filename`: ranks' lines are not interleaved).
fn mpirun(np: usize, opts: Opts, name: &str, args: &[&str]) -> Run {
    let mca = opts.mca;
    // A directory per run: tests run in parallel, some with the same program and size.
    static RUNS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let run = RUNS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!(
        "rankwise-mpi-{}-{run}-{name}-{np}-{}",
        std::process::id(),
        args.join("-")
    ));
    let _ = std::fs::remove_dir_all(&dir);
    // Open MPI 4.1 makes one session directory per host and user (`$TMPDIR/ompi.<host>.<uid>`)
    // and removes it when its last job ends; two jobs that start together while it is absent
    // race to make it, and the loser fails with "mkdir … File exists". Each job of this
    // parallel suite therefore gets its own TMPDIR (short: the session directory holds sockets,
    // whose paths are limited to about 100 bytes).
    let session = std::env::temp_dir().join(format!("rwm-{}-{run}", std::process::id()));
    std::fs::create_dir_all(&session).expect("the test can make a directory in TMPDIR");
    let mut cmd = Command::new("mpirun");
    // A wall-clock guard: a job that hangs (a regression of the safety net) is killed by
    // mpirun and fails its test — non-zero exit, and "took" far beyond every failure test's
    // bound — instead of hanging the suite.
    cmd.args(["--timeout", &MPIRUN_TIMEOUT_SECS.to_string()])
        .arg("--oversubscribe")
        .arg("--output-filename")
        .arg(&dir)
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .env("RUST_BACKTRACE", "0")
        .env("TMPDIR", &session);
    for (k, v) in mca {
        cmd.args(["--mca", k, v]);
    }
    // Processes on this host inherit mpirun's environment.
    cmd.envs(opts.env.iter().copied());
    // `RANKWISE_TEST_MCA="btl self,tcp"` runs the whole suite over another transport (CI runs
    // it once over TCP, the transport several hosts use).
    if let Ok(extra) = std::env::var("RANKWISE_TEST_MCA") {
        let words: Vec<&str> = extra.split_whitespace().collect();
        for pair in words.chunks(2) {
            if let [k, v] = pair
                && !mca.iter().any(|(key, _)| key == k)
            {
                cmd.args(["--mca", k, v]);
            }
        }
    }
    if opts.last_rank_env.is_empty() || np < 2 {
        cmd.args(["-np", &np.to_string()]);
        cmd.arg(example(name)).args(args);
    } else {
        // Two application contexts: the last rank runs under `env` with its own variables.
        cmd.args(["-np", &(np - 1).to_string()]);
        cmd.arg(example(name)).args(args);
        cmd.args([":", "-np", "1", "env"]);
        cmd.args(opts.last_rank_env.iter().map(|(k, v)| format!("{k}={v}")));
        cmd.arg(example(name)).args(args);
    }
    let start = Instant::now();
    let output = cmd
        .output()
        .expect("mpirun runs (install Open MPI: apt-get install openmpi-bin libopenmpi-dev)");
    let took = start.elapsed();
    let mut out = BTreeMap::new();
    let mut err = String::from_utf8_lossy(&output.stderr).into_owned();
    for rank in 0..np {
        let files = std::fs::read_dir(&dir)
            .into_iter()
            .flatten()
            .flatten()
            .map(|job| job.path().join(format!("rank.{rank}")));
        for rank_dir in files {
            if let Ok(s) = std::fs::read_to_string(rank_dir.join("stdout")) {
                out.insert(rank, s);
            }
            if let Ok(s) = std::fs::read_to_string(rank_dir.join("stderr")) {
                err.push_str(&s);
            }
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    let _ = std::fs::remove_dir_all(&session);
    Run {
        ok: output.status.success(),
        out,
        err,
        took,
    }
}

/// The same program on the threads engine at `world` ranks (run once per test binary: several
/// settings of the MPI backend are compared with it).
fn threads(world: usize, name: &str, args: &[&str]) -> String {
    examples::once(format!("{world} {name} {args:?}"), || {
        let output = Command::new(example(name))
            .args(args)
            .env("RANKWISE_BACKEND", "threads")
            .env("RANKWISE_WORLD", world.to_string())
            .output()
            .expect("example runs");
        assert!(
            output.status.success(),
            "{name} under threads: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8_lossy(&output.stdout).into_owned()
    })
}

fn sorted_lines(text: &str) -> Vec<String> {
    let mut v: Vec<String> = text.lines().map(str::to_string).collect();
    v.sort();
    v
}

/// Every line the MPI ranks printed, against the threads engine's lines for the same world.
fn same_as_threads(np: usize, opts: Opts, name: &str, args: &[&str], exact: bool) -> Run {
    let run = mpirun(np, opts, name, args);
    assert!(run.ok, "{name} -np {np} failed:\n{}", run.err);
    assert_eq!(
        run.out.len(),
        np,
        "{name} -np {np}: not every rank printed:\n{}",
        run.err
    );
    let mpi = sorted_lines(&run.out.values().cloned().collect::<String>());
    let mut want = sorted_lines(&threads(np, name, args));
    if !exact {
        // Lines the program prints only under threads (demos of other world sizes).
        want.retain(|l| mpi.contains(l));
    }
    assert!(!mpi.is_empty(), "{name} -np {np} printed nothing");
    if mpi != want {
        let only_mpi: Vec<&String> = mpi.iter().filter(|l| !want.contains(l)).take(5).collect();
        let only_threads: Vec<&String> = want.iter().filter(|l| !mpi.contains(l)).take(5).collect();
        panic!(
            "{name} -np {np}: {} lines under MPI, {} under threads; only under MPI (first 5): \
             {only_mpi:#?}; only under threads (first 5): {only_threads:#?}",
            mpi.len(),
            want.len()
        );
    }
    run
}

/// How many ranks said their window's collectives ran on tensors where they are, in the shared
/// heap (every_op's stderr line).
fn ranks_direct(run: &Run) -> usize {
    ranks_saying(run, ": shared-heap steps: ")
}

/// How many ranks of `run` (every_op) say `what` on stderr.
fn ranks_saying(run: &Run, what: &str) -> usize {
    let ranks: std::collections::BTreeSet<&str> = run
        .err
        .lines()
        .filter_map(|l| l.split_once(what).map(|(rank, _)| rank))
        .collect();
    ranks.len()
}

/// Shared-heap files in `/dev/shm` whose process is gone: what a job left behind.
fn heap_files_left() -> Vec<String> {
    std::fs::read_dir("/dev/shm")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|name| {
            // rankwise-heap-<pid>-<rank>-<stamp>
            let pid = name
                .strip_prefix("rankwise-heap-")
                .and_then(|r| r.split('-').next());
            pid.is_some_and(|p| !std::path::Path::new(&format!("/proc/{p}")).exists())
        })
        .collect()
}

/// All-reduces (large, or packed) through the group's shared-memory window, and small
/// collectives' messages through its lanes, which every group must have (all ranks are on this
/// host): a group left without one is an error, not a quiet fallback.
const SHM_REQUIRED: Opts = Opts {
    env: &[("RANKWISE_MPI_SHM", "require")],
    ..PLAIN
};

/// Every collective through MPI's messages (no window: neither its steps nor its lanes), as
/// across hosts.
const NO_SHM: Opts = Opts {
    env: &[("RANKWISE_MPI_SHM", "0")],
    ..PLAIN
};

/// And with tensors in the ranks' shared heap (every_op puts some there and leaves others in
/// the ranks' own memory): every rank ran steps on tensors where they are, every rank had
/// calls handed back by the window (an all_to_all or a pair's broadcast or all_gather with a
/// sender outside its heap), and no job left a file in `/dev/shm`.
#[test]
fn every_operation_gives_the_threads_engines_bits() {
    for np in [1, 2, 3, 4] {
        let run = same_as_threads(np, SHM_REQUIRED, "every_op", &[], true);
        let want = if np == 1 { 0 } else { np };
        assert_eq!(ranks_direct(&run), want, "every_op -np {np}:\n{}", run.err);
        let back = ranks_saying(&run, ": calls handed back: ");
        assert_eq!(back, want, "every_op -np {np}:\n{}", run.err);
    }
    assert_eq!(heap_files_left(), Vec::<String>::new());
}

/// Tensors in each rank's own memory (`RANKWISE_MPI_HEAP=0`): every window run copies, as
/// before the shared heap.
#[test]
fn every_operation_without_the_shared_heap() {
    let own_memory = Opts {
        env: &[("RANKWISE_MPI_SHM", "require"), ("RANKWISE_MPI_HEAP", "0")],
        ..PLAIN
    };
    for np in [2, 4] {
        let run = same_as_threads(np, own_memory, "every_op", &[], true);
        assert_eq!(ranks_direct(&run), 0, "{}", run.err);
        assert_eq!(
            ranks_saying(&run, ": calls handed back: "),
            0,
            "{}",
            run.err
        );
    }
}

/// A group of more than eight ranks on one host has a window but no lanes (`lanes::MAX_MEMBERS`):
/// its small collectives take the schedule path, its all_reduces and all_gathers the window.
#[test]
fn every_operation_beyond_eight_ranks() {
    let run = same_as_threads(9, SHM_REQUIRED, "every_op", &[], true);
    // Its all_to_alls with a sender outside the heap are handed back (its all_gathers, among
    // more than two, copy through the window instead).
    assert_eq!(
        ranks_saying(&run, ": calls handed back: "),
        9,
        "{}",
        run.err
    );
}

#[test]
fn every_operation_without_shared_memory() {
    for np in [2, 3, 4] {
        let run = same_as_threads(np, NO_SHM, "every_op", &[], true);
        assert_eq!(
            ranks_direct(&run),
            0,
            "no shared heap without shared memory"
        );
    }
}

/// Lane messages of 32 KiB and more written with streaming stores whatever the copies measure
/// (`exec::copy::shared`; by default only while plain copies into lanes are slow): every_op's
/// all_to_all of 64 KiB blocks per pair among them (its 30,000-byte blocks fall under the
/// 32 KiB threshold and stay plain).
#[test]
fn every_operation_with_streamed_lane_messages() {
    let streamed = Opts {
        env: &[
            ("RANKWISE_MPI_SHM", "require"),
            ("RANKWISE_SHARED_STORES", "stream"),
        ],
        ..PLAIN
    };
    same_as_threads(2, streamed, "every_op", &[], true);
}

#[test]
fn every_operation_without_the_check() {
    // Small rooted collectives go one way then (see `eager::one_way`).
    let unchecked = Opts {
        env: &[("RANKWISE_MPI_CHECK", "0")],
        ..PLAIN
    };
    for np in [2, 4] {
        same_as_threads(np, unchecked, "every_op", &[], true);
    }
}

#[test]
fn every_operation_over_tcp() {
    // The transport several hosts would use, instead of shared memory.
    let tcp = Opts {
        mca: &[("btl", "self,tcp")],
        ..NO_SHM
    };
    same_as_threads(4, tcp, "every_op", &[], true);
}

#[test]
fn examples_print_what_they_print_on_threads() {
    same_as_threads(4, PLAIN, "quickstart", &[], true);
    for (name, np) in examples::SEED_PORTS {
        same_as_threads(np, PLAIN, name, &[], true);
    }
    for np in [3, 4] {
        same_as_threads(np, PLAIN, "ring_allreduce", &[], false);
        same_as_threads(np, PLAIN, "failures", &["slow"], true);
    }
}

#[test]
fn checked_programs_give_the_threads_engines_results() {
    // Small rooted collectives of every kind and root, alone and batched, proven (one way).
    for np in [1, 2, 3, 4] {
        same_as_threads(np, PLAIN, "proofs", &[], true);
    }
    // With every call checked as if unproven (`all`), the same results.
    same_as_threads(4, CHECK_ALL, "proofs", &[], true);
    // Two guards, one inside the other: the inner handshake is outside the outer schedule.
    for np in [2, 4] {
        same_as_threads(np, PLAIN, "proofs", &["twice"], true);
    }
}

#[test]
fn the_macros_corpus_runs_on_its_proofs_as_on_threads() {
    // Every program of the differential corpus the macro accepted (96 of 240: sends, batches,
    // rooted and other collectives, sub-groups), each entered with its handshake and run on
    // its proof, gives every rank the threads engine's values.
    for np in [2, 3, 4] {
        same_as_threads(np, PLAIN, "random_programs", &["corpus"], true);
    }
}

#[test]
fn a_proven_broadcast_waits_only_for_its_root() {
    // Rank 2 comes a second late to a small broadcast from rank 0. Proven, the broadcast goes
    // one way and rank 1 is done as soon as the root's message is there; checked as an
    // unproven call (`RANKWISE_MPI_CHECK=all`), rank 1 must hear from rank 2 too.
    for (np, opts, want) in [(3, PLAIN, "no"), (4, PLAIN, "no"), (4, CHECK_ALL, "yes")] {
        let run = mpirun(np, opts, "proofs", &["one-way"]);
        assert!(run.ok, "-np {np}: {}", run.err);
        let line = format!("rank 1 waited for rank 2: {want}");
        assert!(
            run.out.get(&1).is_some_and(|o| o.contains(&line)),
            "-np {np} ({:?}): no {line:?} in {:?}",
            opts.env,
            run.out
        );
    }
}

#[test]
fn ranks_that_do_not_share_a_proof_are_stopped_at_its_entry() {
    // Ranks 0–1 and 2–3 run different checked functions: every rank's entry fails before
    // either function's first call.
    let run = mpirun(4, PLAIN, "proofs", &["different"]);
    assert!(!run.ok, "the job succeeded: {:?}", run.out);
    for want in [
        "entered `first`, but rank(s) [2, 3] did not enter the same verified schedule",
        "entered `second`, but rank(s) [0, 1] did not enter the same verified schedule",
    ] {
        assert!(run.err.contains(want), "no {want:?} in:\n{}", run.err);
    }
    assert!(run.took < Duration::from_secs(10), "took {:?}", run.took);
    // Rank 3 runs unchecked code: its call meets the handshake and both are named.
    let run = mpirun(4, PLAIN, "proofs", &["unchecked"]);
    assert!(!run.ok, "the job succeeded: {:?}", run.out);
    // The checked ranks name their handshake as the entry it is; the unchecked rank (which
    // cannot know) as the all_gather it is.
    for want in [
        "rank 0 calls the entry of checked program `first` (its handshake) at examples/proofs.rs:",
        "rank 0 calls all_gather(u64[1], dim 0) at examples/proofs.rs:",
        "but rank 3 calls broadcast(root 0, f32[2])",
    ] {
        assert!(run.err.contains(want), "no {want:?} in:\n{}", run.err);
    }
    assert!(run.took < Duration::from_secs(10), "took {:?}", run.took);
}

#[test]
fn a_world_size_the_macro_did_not_check_is_refused_by_every_rank() {
    let run = mpirun(9, PLAIN, "ring_allreduce", &[]);
    assert!(!run.ok);
    assert!(
        run.err
            .contains("was checked for world sizes [2, 3, 4, 5, 6, 7, 8], not 9"),
        "{}",
        run.err
    );
    assert!(
        run.out.values().all(String::is_empty),
        "a rank communicated: {:?}",
        run.out
    );
}

/// Ranks started with different settings stop at start, every one saying which settings differ
/// on which ranks: they would otherwise disagree about collectives they make (a window one rank
/// creates and another skips) and wait for each other.
#[test]
fn ranks_with_different_settings_stop_at_start() {
    let cases: [(&[(&str, &str)], &str); 4] = [
        (
            &[("RANKWISE_MPI_SHM", "0")],
            "RANKWISE_MPI_SHM is on (the default) on ranks [0, 1, 2], 0 on ranks [3]",
        ),
        (
            &[("RANKWISE_MPI_HEAP", "no")],
            "RANKWISE_MPI_HEAP is on (the default) on ranks [0, 1, 2], 0 on ranks [3]",
        ),
        (
            &[("RANKWISE_MPI_CHECK", "0")],
            "RANKWISE_MPI_CHECK is on (the default) on ranks [0, 1, 2], 0 on ranks [3]",
        ),
        (
            &[
                ("RANKWISE_MPI_CHECK", "all"),
                ("RANKWISE_MPI_SHM", "require"),
            ],
            "RANKWISE_MPI_CHECK is on (the default) on ranks [0, 1, 2], all on ranks [3]; \
             RANKWISE_MPI_SHM is on (the default) on ranks [0, 1, 2], require on ranks [3]",
        ),
    ];
    for (last, says) in cases {
        let opts = Opts {
            last_rank_env: last,
            ..PLAIN
        };
        let run = mpirun(4, opts, "quickstart", &[]);
        assert!(!run.ok, "{last:?}: the job succeeded");
        assert!(
            run.err.contains(says),
            "{last:?}: no {says:?} in:\n{}",
            run.err
        );
        assert!(
            run.out.values().all(String::is_empty),
            "{last:?}: {:?}",
            run.out
        );
        assert!(
            run.took < Duration::from_secs(10),
            "{last:?} took {:?}",
            run.took
        );
    }
    // The same setting spelled differently (`0` and `off`) is agreement.
    let opts = Opts {
        env: &[("RANKWISE_MPI_SHM", "0")],
        last_rank_env: &[("RANKWISE_MPI_SHM", "off")],
        ..PLAIN
    };
    assert!(mpirun(4, opts, "quickstart", &[]).ok);
}

/// A setting mistyped on every rank (or on one) ends the job at start, before any
/// communication, naming the variable, its value and the values it takes: it never silently
/// runs with the default.
#[test]
fn a_mistyped_setting_stops_the_job_at_start() {
    let cases: [(&str, &str, &str); 4] = [
        (
            "RANKWISE_MPI_SHM",
            "requre",
            "`require` (a window for every group, or an error)",
        ),
        (
            "RANKWISE_MPI_HEAP",
            "of",
            "`0`/`off`/`false`/`no` (tensors in each rank's own memory)",
        ),
        (
            "RANKWISE_MPI_CHECK",
            "al",
            "`all` (check every call as if no proof covered it)",
        ),
        (
            "RANKWISE_SHARED_STORES",
            "strem",
            "`stream` (streaming stores)",
        ),
    ];
    for (name, value, names) in cases {
        for on_every_rank in [true, false] {
            let set = [(name, value)];
            let opts = if on_every_rank {
                Opts { env: &set, ..PLAIN }
            } else {
                Opts {
                    last_rank_env: &set,
                    ..PLAIN
                }
            };
            let run = mpirun(3, opts, "quickstart", &[]);
            let says = format!("environment variable {name}={value:?} is not a setting");
            assert!(!run.ok, "{name}={value}: the job succeeded");
            assert!(
                run.err.contains(&says) && run.err.contains(names),
                "{name}={value}: no {says:?} or {names:?} in:\n{}",
                run.err
            );
            assert!(run.out.values().all(String::is_empty), "{:?}", run.out);
            assert!(
                run.took < Duration::from_secs(10),
                "{name} took {:?}",
                run.took
            );
        }
    }
}

/// Each wrong program ends the job with a non-zero status, quickly, saying what went wrong:
/// with small collectives' messages through shared-memory lanes (every rank is on this host)
/// and through MPI's messages (as across hosts).
#[test]
fn failures_end_the_job_promptly_and_say_why() {
    failures_on("lanes", PLAIN, &[("RANKWISE_MPI_CHECK", "0")]);
}

#[test]
fn failures_end_the_job_promptly_and_say_why_without_shared_memory() {
    failures_on(
        "messages",
        NO_SHM,
        &[("RANKWISE_MPI_CHECK", "0"), ("RANKWISE_MPI_SHM", "0")],
    );
}

/// The failure cases under `opts`, and the unchecked ones under `unchecked` (environment
/// variables), `how` naming the transport in messages.
fn failures_on(how: &str, opts: Opts, unchecked: &[(&str, &str)]) {
    let cases: [(&str, &[&str]); 19] = [
        ("panic", &["rank 2 panicked: rank 2 lost its data"]),
        ("error", &["rank 1: disk full"]),
        (
            "deadlock",
            &[
                "deadlock: every unfinished rank is blocked",
                "rank 0 waits in send(to 1, f32[4]) at examples/failures.rs",
                "rank 3 waits in send(to 2, f32[4])",
            ],
        ),
        (
            "skip",
            &["rank 3 returned without making the matching call"],
        ),
        (
            "mismatch",
            &["collective mismatch on group [0–3], step 1: rank 0 calls all_reduce(Max, f32[4])"],
        ),
        // Rank 0's small call runs as direct messages, the others' large one as a schedule.
        (
            "sizes",
            &[
                "collective mismatch on group [0–3], step 1: rank 0 calls all_reduce(Sum, f32[4])",
                "rank 1 calls all_reduce(Sum, f32[8192])",
            ],
        ),
        (
            "rooted",
            &[
                "step 1: rank 0 calls broadcast(root 0, f32[4])",
                "rank 1 calls broadcast(root 0, f32[3])",
            ],
        ),
        (
            "gathers",
            &[
                "step 1: rank 0 calls all_gather(f32[8192], dim 0)",
                "rank 1 calls all_gather(f32[8000], dim 0)",
            ],
        ),
        // Tagged by their calls: the two never match, and the monitor names both.
        (
            "exchanges",
            &[
                "step 1: rank 0 calls all_to_all(f32[8192], dim 0)",
                "rank 1 calls all_gather(f32[2048], dim 0)",
            ],
        ),
        (
            "large",
            &[
                "step 1: rank 0 calls all_reduce(Max, f32[8192])",
                "rank 1 calls all_reduce(Sum, f32[8192])",
            ],
        ),
        (
            "broadcast_size",
            &[
                "step 1: rank 0 calls broadcast(root 0, f32[100000])",
                "rank 2 calls broadcast(root 0, f32[100001])",
            ],
        ),
        (
            "all_gather_size",
            &[
                "step 1: rank 0 calls all_gather(f32[30000], dim 0)",
                "rank 2 calls all_gather(f32[30001], dim 0)",
            ],
        ),
        // Large calls batched: their records disagree at the third, before any data moves.
        (
            "large_bucket",
            &[
                "step 3: rank 0 calls all_reduce(Sum, f32[8192])",
                "rank 3 calls all_reduce(Max, f32[8192])",
            ],
        ),
        // Deep inside a long bucket: found where the runs stop agreeing, not as wrong data.
        (
            "bucket",
            &[
                "collective mismatch on group [0–3], step 281: rank 0 calls all_reduce(Sum, f32[256])",
                "rank 3 calls all_reduce(Max, f32[256])",
            ],
        ),
        // A batch whose ops the backend reorders (collectives first): the board must describe
        // the reordered ops (it did not, and the job hung instead of being reported).
        (
            "batched",
            &["rank 0 cannot finish: rank 1 returned without making the matching call"],
        ),
        (
            "roots",
            &[
                "step 1: rank 0 calls broadcast(root 0, f32[4])",
                "rank 1 calls broadcast(root 1, f32[4])",
            ],
        ),
        (
            "p2p",
            &["rank 0 sends f32[more than 3], but the matching recv on rank 1 expects f32[3]"],
        ),
        (
            "wait",
            &[
                "deadlock: every unfinished rank is blocked",
                "rank 0 waits in wait() for recv(from 1, f32[4]) posted at examples/failures.rs",
                "rank 1 waits in recv(from 0, f32[4])",
            ],
        ),
        (
            "posted",
            &["rank 0 sends f32[more than 3], but the matching recv on rank 1 expects f32[3]"],
        ),
    ];
    for (case, says) in cases {
        let run = mpirun(4, opts, "failures", &[case]);
        assert!(!run.ok, "{case} ({how}): the job succeeded");
        for s in says {
            assert!(
                run.err.contains(s),
                "{case} ({how}): no {s:?} in:\n{}",
                run.err
            );
        }
        assert!(run.err.contains("MPI_Abort"), "{case} ({how}): {}", run.err);
        assert!(
            run.took < Duration::from_secs(10),
            "{case} ({how}) took {:?}",
            run.took
        );
    }
    // A batch as long as the one before it: the board's list is refilled in place, and the
    // report must name the new batch's receive, not the earlier batch's calls.
    let source = std::fs::read_to_string("examples/failures.rs").expect("the example's source");
    let case = source.find("\"refilled\" =>").expect("the refilled case");
    let recv = case + source[case..].find("b.recv(").expect("its receive");
    let line = source[..recv].lines().count();
    // The call's column is its method name's (after `b.`), counted from 1.
    let column = recv - source[..recv].rfind('\n').map_or(0, |i| i + 1) + 3;
    let run = mpirun(4, opts, "failures", &["refilled"]);
    let want =
        format!("examples/failures.rs:{line}:{column}: rank 0 cannot finish: rank 1 returned");
    assert!(
        !run.ok && run.err.contains(&want),
        "no {want:?} in:\n{}",
        run.err
    );
    assert!(run.took < Duration::from_secs(10), "took {:?}", run.took);
    // Without the check a small broadcast goes one way; its receivers still find the
    // disagreement (though not the root's call).
    let unchecked = Opts {
        env: unchecked,
        ..PLAIN
    };
    let run = mpirun(4, unchecked, "failures", &["rooted"]);
    assert!(!run.ok, "rooted without the check: the job succeeded");
    assert!(
        run.err.contains("calls broadcast(root 0, f32[3])")
            && run.err.contains("but rank 0's call differs"),
        "{}",
        run.err
    );
    assert!(run.took < Duration::from_secs(10), "took {:?}", run.took);
    // Without the check, a large broadcast's or all_gather's sizes are still compared where
    // its bytes move through the window on one host, before any rank uses another's bytes.
    // (Across hosts MPI's calls do not compare them: `RANKWISE_MPI_CHECK=0` is the user's to
    // choose.) A broadcast's odd rank finds it (it reads the root's bytes); any rank may find
    // an all_gather's (each reads every other's).
    if how == "lanes" {
        for (case, says) in [
            (
                "broadcast_size",
                "rank 2 calls broadcast(root 0, f32[100001]) at examples/failures.rs",
            ),
            ("all_gather_size", "calls all_gather(f32[3000"),
        ] {
            let run = mpirun(4, unchecked, "failures", &[case]);
            assert!(!run.ok, "{case} without the check: the job succeeded");
            assert!(run.err.contains(says), "no {says:?} in:\n{}", run.err);
            let says = "call through the shared-memory window differs";
            assert!(run.err.contains(says), "no {says:?} in:\n{}", run.err);
            assert!(run.took < Duration::from_secs(10), "took {:?}", run.took);
        }
    }
    // Ranks that disagree about a small broadcast's root do not hear from each other without
    // the check; the message left over from the disagreement is found when it is read, never
    // taken for a later step's data.
    let run = mpirun(4, unchecked, "failures", &["roots"]);
    assert!(!run.ok, "roots without the check: the job succeeded");
    assert!(
        run.err
            .contains("at step 2 rank 0 calls broadcast(root 1, f32[4])")
            && run
                .err
                .contains("the message rank 1 sent for it belongs to its step 1 — the members"),
        "{}",
        run.err
    );
    assert!(run.took < Duration::from_secs(10), "took {:?}", run.took);
}

/// How a failed job ended, in the verifier's terms.
fn verdict_of(stderr: &str) -> &'static str {
    if stderr.contains("deadlock") || stderr.contains("returned without making the matching call") {
        "Hang"
    } else if stderr.contains("collective mismatch") || stderr.contains("but the matching recv") {
        "Mismatch"
    } else {
        "Misuse"
    }
}

/// A soak knob of the random-program test: `name` from the environment, or `default`.
fn soak(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(default)
}

/// The differential tests' random programs, through MPI: correct ones give every rank the
/// digests the threads engine gives (300 programs, worlds 2–4); mutated ones fail — promptly —
/// exactly when the verifier rejects them, in a way it predicted.
///
/// Soaking: `RANKWISE_SOAK_SEED` (11), `RANKWISE_SOAK_GOOD` (programs per world size, 100) and
/// `RANKWISE_SOAK_BAD` (mutated programs, 30) draw other or more programs; a failure names the
/// seed and index to rerun with `examples/random_programs.rs`.
#[test]
fn random_programs_agree_with_threads_and_the_verifier() {
    let seed = soak("RANKWISE_SOAK_SEED", 11).to_string();
    let good = soak("RANKWISE_SOAK_GOOD", 100).to_string();
    let bad = soak("RANKWISE_SOAK_BAD", 30);
    for np in [2, 3, 4] {
        same_as_threads(np, PLAIN, "random_programs", &["good", &seed, &good], true);
    }
    let mut rejected = 0;
    for i in 0..bad {
        let np = 2 + i % 3;
        let index = i.to_string();
        let run = mpirun(np, PLAIN, "random_programs", &["bad", &seed, &index]);
        let out = run.out.get(&0).cloned().unwrap_or_default();
        let verdict = out
            .lines()
            .find_map(|l| l.strip_prefix("verdict: "))
            .unwrap_or_else(|| {
                panic!(
                    "seed {seed} bad {i} -np {np}: no verdict printed:\n{}",
                    run.err
                )
            });
        if verdict == "ok" {
            assert!(
                run.ok,
                "seed {seed} bad {i} -np {np}: accepted by the verifier, failed:\n{}",
                run.err
            );
            continue;
        }
        rejected += 1;
        assert!(
            !run.ok,
            "seed {seed} bad {i} -np {np}: rejected ({verdict}) but ran"
        );
        let got = verdict_of(&run.err);
        assert!(
            verdict.split(',').any(|v| v == got),
            "seed {seed} bad {i} -np {np}: the verifier said {verdict}, the job ended in {got}:\n{}",
            run.err
        );
        assert!(
            run.took < Duration::from_secs(10),
            "seed {seed} bad {i} took {:?}",
            run.took
        );
    }
    assert!(
        rejected >= bad / 3,
        "only {rejected} of {bad} mutations were wrong programs"
    );
}

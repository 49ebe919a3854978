//! The examples of this package as binaries, for tests that run them as processes.

use std::path::PathBuf;
use std::process::Command;
use std::sync::Mutex;

/// Example `name`, built (once per test binary) with `features` — the features the test itself
/// was built with, so that what runs is the code under test and a test does not rebuild an
/// example another one is running. Every example is built at once (one parallel build), except
/// with the `nccl` feature: those tests run one example, and linking all of them against
/// cudarc costs minutes of CI.
pub fn example(name: &str, features: &[&str]) -> PathBuf {
    static BUILT: Mutex<Vec<String>> = Mutex::new(Vec::new());
    {
        let mut built = BUILT.lock().unwrap_or_else(|p| p.into_inner());
        let all = !features.contains(&"nccl");
        if !built.iter().any(|b| b == name || (all && b == "*")) {
            let mut cmd = Command::new(env!("CARGO"));
            cmd.args(["build", "--quiet"]);
            if all {
                cmd.arg("--examples");
            } else {
                cmd.args(["--example", name]);
            }
            if !features.is_empty() {
                cmd.args(["--features", &features.join(",")]);
            }
            let status = cmd
                .current_dir(env!("CARGO_MANIFEST_DIR"))
                .status()
                .expect("cargo runs");
            assert!(status.success(), "building example {name} failed");
            built.push(if all {
                "*".to_string()
            } else {
                name.to_string()
            });
        }
    }
    let exe = std::env::current_exe().expect("test binary path");
    let dir = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("target/<profile>/deps");
    let path = dir.join("examples").join(name);
    assert!(path.exists(), "{} is not built", path.display());
    path
}

/// `run()`'s output, computed once per test binary for each `key`: the threads engine's output
/// of an example, which a suite compares with several backends and settings.
#[allow(dead_code)]
pub fn once(key: String, run: impl FnOnce() -> String) -> String {
    static SEEN: Mutex<Vec<(String, String)>> = Mutex::new(Vec::new());
    let cached = {
        let seen = SEEN.lock().unwrap_or_else(|p| p.into_inner());
        seen.iter()
            .find(|(k, _)| *k == key)
            .map(|(_, out)| out.clone())
    };
    cached.unwrap_or_else(|| {
        // Run unlocked: tests in parallel run their references in parallel (a key run twice
        // at once is stored twice, harmlessly).
        let out = run();
        let mut seen = SEEN.lock().unwrap_or_else(|p| p.into_inner());
        seen.push((key, out.clone()));
        out
    })
}

/// The features this test binary was built with, among those that change the examples.
#[allow(dead_code)]
pub fn same_features() -> Vec<&'static str> {
    let mut f = Vec::new();
    if cfg!(feature = "mpi") {
        f.push("mpi");
    }
    if cfg!(feature = "nccl") {
        f.push("nccl");
    }
    f
}

/// The seed ports that post messages (`isend`/`irecv`), which the NCCL backends refuse so far.
#[allow(dead_code)]
pub const POSTS: [&str; 1] = ["seed002_isend_irecv"];

/// The ports of the seed tutorials' programs (`book/src/seeds.md`) and the world each runs at.
#[allow(dead_code)]
pub const SEED_PORTS: [(&str, usize); 29] = [
    ("seed000_all_gather", 4),
    ("seed000_all_reduce", 4),
    ("seed000_reduce", 4),
    ("seed000_reduce_scatter", 4),
    ("seed001_all_gather", 6),
    ("seed001_all_reduce", 6),
    ("seed002_init_process_group", 4),
    ("seed002_new_group", 4),
    ("seed002_send_recv", 3),
    ("seed002_isend_irecv", 3),
    ("seed002_send_recv_pair", 2),
    ("seed002_all_reduce_all_gather", 4),
    ("seed002_softmax_l2", 4),
    ("seed002_broadcast", 4),
    ("seed002_scatter", 4),
    ("seed004_row_gather", 4),
    ("seed004_column_gather", 4),
    ("seed004_row_all_gather", 4),
    ("seed004_column_all_gather", 4),
    ("seed004_reduce", 4),
    ("seed004_all_reduce", 4),
    ("seed004_all_reduce_2d", 4),
    ("seed004_scatter", 4),
    ("seed004_row_reduce_scatter_list", 4),
    ("seed004_row_reduce_scatter", 4),
    ("seed004_column_reduce_scatter", 4),
    ("seed004_row_all_to_all", 4),
    ("seed004_column_all_to_all", 4),
    ("seed004_broadcast", 4),
];

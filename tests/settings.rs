//! Every environment variable that picks a setting refuses a value it does not know: the run
//! stops before it starts, with an error naming the variable, its value and what it takes,
//! instead of running with the default as if the variable were unset. (Under `mpirun`, the
//! MPI backend's own variables: `tests/mpi.rs`.)

use std::process::Command;

#[path = "common/examples.rs"]
mod examples;

/// The quickstart's exit status and standard error under `env`.
fn quickstart(env: &[(&str, &str)]) -> (bool, String, String) {
    let exe = examples::example("quickstart", &examples::same_features());
    let out = Command::new(exe)
        .envs(env.iter().copied())
        .env("RUST_BACKTRACE", "0")
        .output()
        .expect("the quickstart runs");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn a_mistyped_setting_stops_the_run_before_it_starts() {
    let cases: [(&[(&str, &str)], &str); 4] = [
        (
            &[("RANKWISE_PIN", "maybe")],
            "environment variable RANKWISE_PIN=\"maybe\" is not a setting rankwise knows; use \
             `1`/`on`/`true`/`yes` (on), `0`/`off`/`false`/`no` (off)",
        ),
        (
            &[
                ("RANKWISE_BACKEND", "nccl-host"),
                ("RANKWISE_NCCL_PACK", "2"),
            ],
            "RANKWISE_NCCL_PACK=\"2\" is not a setting",
        ),
        (
            &[("RANKWISE_BACKEND", "cuda")],
            "RANKWISE_BACKEND=\"cuda\" names no engine",
        ),
        (
            &[("RANKWISE_WORLD", "four")],
            "RANKWISE_WORLD=\"four\" is not a world size",
        ),
    ];
    for (env, says) in cases {
        let (ok, out, err) = quickstart(env);
        assert!(!ok, "{env:?}: the run succeeded");
        assert!(err.contains(says), "{env:?}: no {says:?} in:\n{err}");
        assert!(out.is_empty(), "{env:?}: the program ran:\n{out}");
    }
}

#[test]
fn every_spelling_of_a_yes_or_no_setting_runs() {
    let (_, want, _) = quickstart(&[]);
    for value in ["1", "on", "true", "yes", "0", "OFF", "False", "no", ""] {
        for env in [
            [("RANKWISE_PIN", value), ("RANKWISE_BACKEND", "threads")],
            [
                ("RANKWISE_NCCL_PACK", value),
                ("RANKWISE_BACKEND", "nccl-host"),
            ],
        ] {
            let (ok, out, err) = quickstart(&env);
            assert!(ok, "{env:?}: {err}");
            assert_eq!(out, want, "{env:?}");
        }
    }
}

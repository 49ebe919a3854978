//! The differential corpus: hundreds of generated rank programs (`tests/corpus/gen.rs`), each
//! checked by the macro and run on the threads backend at every world size it was checked for.
//!
//! * every program the macro accepts runs clean at every checked world, unchecked and checked
//!   (with its guard and batched lowering), with the same results;
//! * every program it rejects with a code other than RW012 fails at run time at a world size
//!   its diagnostics name;
//! * a program rejected only with RW012 ("cannot verify") may run clean — that is the
//!   documented conservative answer — and the test prints how many did.
//!
//! The generated file is committed; `corpus_file_is_current` fails when the generator or the
//! macro's verdicts change (regenerate with `RANKWISE_BLESS=1 cargo test --test corpus`).

#[path = "corpus/gen.rs"]
mod gen_corpus;
#[path = "corpus/programs.rs"]
#[rustfmt::skip] // generated: compared byte for byte with the generator's output
mod programs;

use std::time::Duration;

use rankwise::{Options, spawn_each};

const FILE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/corpus/programs.rs");

#[test]
fn corpus_file_is_current() {
    let fresh = gen_corpus::generate();
    if std::env::var_os("RANKWISE_BLESS").is_some() {
        std::fs::write(FILE, &fresh).expect("write the corpus");
    }
    let committed = std::fs::read_to_string(FILE).expect("the corpus file exists");
    assert!(
        committed == fresh,
        "tests/corpus/programs.rs is stale: regenerate it with `RANKWISE_BLESS=1 cargo test --test corpus`"
    );
}

/// How a program ended at one world size: `None` if every rank finished, else the error.
fn outcome(p: programs::Program, world: usize) -> (Option<String>, Vec<Vec<f32>>) {
    // A safety net only: the backend detects deadlocks itself, in milliseconds.
    let options = Options::default().timeout(Duration::from_secs(20));
    let each = spawn_each(world, options, p).expect("the world starts");
    let mut values = Vec::new();
    let mut error = None;
    for r in each {
        match r {
            Ok(v) => values.push(v),
            Err(e) => {
                error.get_or_insert_with(|| e.to_string());
            }
        }
    }
    (error, values)
}

#[test]
fn accepted_programs_run_clean_and_rejected_ones_fail() {
    let worlds = 1..=4usize;
    let (mut accepted, mut rejected_wrong, mut conservative_ok, mut conservative_wrong) =
        (0, 0, 0, 0);
    for (i, &(verdict, named)) in programs::VERDICTS.iter().enumerate() {
        let unchecked = programs::UNCHECKED[i];
        let runs: Vec<_> = worlds.clone().map(|w| (w, outcome(unchecked, w))).collect();
        match verdict {
            "ok" => {
                accepted += 1;
                let checked = programs::CHECKED[i].expect("accepted programs have a checked copy");
                for (w, (err, values)) in &runs {
                    assert!(
                        err.is_none(),
                        "p{i} was accepted but fails at world {w}: {err:?}"
                    );
                    let (cerr, cvalues) = outcome(checked, *w);
                    assert!(cerr.is_none(), "checked p{i} fails at world {w}: {cerr:?}");
                    assert_eq!(
                        &cvalues, values,
                        "p{i} checked and unchecked differ at world {w}"
                    );
                }
            }
            codes if codes.split(',').all(|c| c == "RW012") => {
                if runs.iter().all(|(_, (e, _))| e.is_none()) {
                    conservative_ok += 1;
                } else {
                    conservative_wrong += 1;
                }
            }
            codes => {
                rejected_wrong += 1;
                let failing: Vec<usize> = runs
                    .iter()
                    .filter(|(_, (e, _))| e.is_some())
                    .map(|(w, _)| *w)
                    .collect();
                assert!(
                    named.iter().any(|w| failing.contains(w)),
                    "p{i} was rejected ({codes}) at worlds {named:?} but fails only at {failing:?}"
                );
            }
        }
    }
    println!(
        "corpus: {} programs: {accepted} accepted (all ran clean), {rejected_wrong} rejected and \
         wrong at run time, {conservative_wrong} RW012 and wrong at run time, {conservative_ok} \
         RW012 that ran clean (conservative)",
        programs::VERDICTS.len()
    );
    assert!(
        accepted >= programs::VERDICTS.len() / 5,
        "too few accepted programs to mean much"
    );
    assert!(
        rejected_wrong >= programs::VERDICTS.len() / 5,
        "too few wrong programs to mean much"
    );
}

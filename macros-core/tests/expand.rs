//! Expansion snapshots: what `#[rankwise::program]` emits for each program in `tests/expand/`,
//! pretty-printed and compared with the stored `.expanded.rs` next to it. A change to the
//! macro's output shows up here as a readable diff; rerun with `RANKWISE_BLESS=1` to accept it.
//!
//! Each case's first line is `// args: <attribute arguments>`; the rest is the function. The
//! input is parsed from the file's text, so spans carry real lines and columns (as they do in
//! rustc), and call sites are what users would see.

use std::path::Path;

fn pretty(tokens: proc_macro2::TokenStream) -> String {
    match syn::parse2::<syn::File>(tokens.clone()) {
        Ok(file) => prettyplease::unparse(&file),
        // Not a file (should not happen): keep the raw tokens so the diff still shows it.
        Err(_) => tokens.to_string(),
    }
}

fn expand_case(source: &str) -> String {
    let (first, body) = source
        .split_once('\n')
        .expect("a case has an args line and a body");
    let args = first
        .strip_prefix("// args:")
        .expect("a case starts with `// args: …`")
        .trim();
    let args: proc_macro2::TokenStream = args.parse().expect("arguments tokenize");
    let item: proc_macro2::TokenStream = body.parse().expect("the case tokenizes");
    pretty(rankwise_macros_core::expand(args, item))
}

#[test]
fn expansions_match_their_snapshots() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/expand");
    let bless = std::env::var_os("RANKWISE_BLESS").is_some();
    let mut cases: Vec<_> = std::fs::read_dir(&dir)
        .expect("tests/expand exists")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.extension().is_some_and(|e| e == "rs")
                && !p.to_string_lossy().ends_with(".expanded.rs")
        })
        .collect();
    cases.sort();
    assert!(!cases.is_empty(), "no cases in {}", dir.display());
    let mut failed = Vec::new();
    for case in &cases {
        let source = std::fs::read_to_string(case).expect("case readable");
        let got = expand_case(&source);
        let snap = case.with_extension("expanded.rs");
        if bless {
            std::fs::write(&snap, &got).expect("snapshot writable");
            continue;
        }
        let want = std::fs::read_to_string(&snap).unwrap_or_default();
        if got != want {
            failed.push(format!(
                "{}: expansion differs from {}\n--- got ---\n{got}",
                case.display(),
                snap.display()
            ));
        }
    }
    assert!(
        failed.is_empty(),
        "{}\n(rerun with RANKWISE_BLESS=1 to accept)",
        failed.join("\n")
    );
}

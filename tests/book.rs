//! The book's internal links resolve: every relative link or image in `book/src/*.md` names a
//! file that exists, and every page is in `SUMMARY.md`. Nothing is pasted: every code block is
//! an `{{#include}}` of a file CI compiles, runs or checks, except shell commands, whose
//! examples and tests exist. (`mdbook build` in CI checks the `{{#include}}`s; it does not check
//! links.)

use std::path::Path;

/// The targets of the Markdown links and images in `text` (`[..](target)`, `![..](target)`).
fn links(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find("](") {
        let after = &rest[at + 2..];
        let Some(end) = after.find(')') else {
            break;
        };
        out.push(&after[..end]);
        rest = &after[end..];
    }
    out
}

#[test]
fn every_internal_link_of_the_book_resolves() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("book/src");
    let summary = std::fs::read_to_string(src.join("SUMMARY.md")).expect("SUMMARY.md");
    let mut pages = 0;
    for entry in std::fs::read_dir(&src).expect("book/src") {
        let path = entry.expect("an entry").path();
        if path.extension().is_none_or(|e| e != "md") {
            continue;
        }
        pages += 1;
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if name != "SUMMARY.md" {
            assert!(
                summary.contains(&format!("]({name})")),
                "{name} is not in SUMMARY.md"
            );
        }
        let text = std::fs::read_to_string(&path).expect("a page");
        for target in links(&text) {
            if target.contains("://") || target.starts_with('#') || target.starts_with("mailto:") {
                continue;
            }
            let file = target.split('#').next().unwrap_or(target);
            assert!(
                src.join(file).exists(),
                "{name} links to {target}, which does not exist"
            );
        }
    }
    assert!(pages > 10, "only {pages} pages");
}

#[test]
fn links_are_read_from_markdown() {
    assert_eq!(
        links("see [a](a.md) and ![p](pictures/p.svg), [b](https://x.y/z#q)."),
        ["a.md", "pictures/p.svg", "https://x.y/z#q"]
    );
}

/// The fenced code blocks of `text`: (language, body).
fn code_blocks(text: &str) -> Vec<(&str, &str)> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find("```") {
        let after = &rest[at + 3..];
        let Some(nl) = after.find('\n') else { break };
        let lang = after[..nl].trim();
        let body = &after[nl + 1..];
        let Some(end) = body.find("```") else { break };
        out.push((lang, &body[..end]));
        rest = &body[end + 3..];
    }
    out
}

/// The word after `flag` in `line`, wherever it appears (`--example quickstart`).
fn after<'a>(line: &'a str, flag: &str) -> Vec<&'a str> {
    let words: Vec<&str> = line.split_whitespace().collect();
    words
        .windows(2)
        .filter(|w| w[0] == flag)
        .map(|w| w[1])
        .collect()
}

#[test]
fn every_code_block_is_included_or_a_command_that_names_real_targets() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let src = root.join("book/src");
    let mut commands = 0;
    for entry in std::fs::read_dir(&src).expect("book/src") {
        let path = entry.expect("an entry").path();
        if path.extension().is_none_or(|e| e != "md") {
            continue;
        }
        let text = std::fs::read_to_string(&path).expect("a page");
        for (lang, body) in code_blocks(&text) {
            if body.trim_start().starts_with("{{#include") {
                continue;
            }
            assert_eq!(
                lang,
                "sh",
                "{}: a pasted {lang:?} block; include it from a file CI checks:\n{body}",
                path.display()
            );
            commands += 1;
            for line in body.lines() {
                for name in after(line, "--example") {
                    let file = root.join("examples").join(format!("{name}.rs"));
                    assert!(file.exists(), "{}: no example {name}", path.display());
                }
                for name in after(line, "--test") {
                    let file = root.join("tests").join(format!("{name}.rs"));
                    assert!(file.exists(), "{}: no test {name}", path.display());
                }
                for name in line
                    .split_whitespace()
                    .filter_map(|w| w.strip_prefix("target/debug/examples/"))
                {
                    let file = root.join("examples").join(format!("{name}.rs"));
                    assert!(file.exists(), "{}: no example {name}", path.display());
                }
            }
        }
    }
    assert!(commands > 3, "only {commands} command blocks");
}

#[test]
fn code_blocks_are_read_from_markdown() {
    let page = "x\n```rust\n{{#include a.rs}}\n```\n\n```sh\ncargo run --example q\n```\n";
    assert_eq!(
        code_blocks(page),
        [
            ("rust", "{{#include a.rs}}\n"),
            ("sh", "cargo run --example q\n")
        ]
    );
    assert_eq!(after("cargo run --example q -- x", "--example"), ["q"]);
}

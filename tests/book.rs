//! The book's internal links resolve: every relative link or image in `book/src/*.md` names a
//! file that exists, and every page is in `SUMMARY.md`. (`mdbook build` in CI checks the
//! `{{#include}}`s; it does not check links.)

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

//! Compile-fail and pass cases for `#[rankwise::program]`, one directory per category under
//! `tests/ui/`. Regenerate the expected `.stderr` files with `TRYBUILD=overwrite` — and then
//! read them: they are the product.

#[test]
fn ui() {
    let t = trybuild::TestCases::new();
    for category in [
        "args",
        "collectives",
        "deadlock",
        "dtypes",
        "p2p",
        "ranks",
        "shapes",
        "trust",
        "unverifiable",
        "worlds",
    ] {
        t.compile_fail(format!("tests/ui/{category}/*.rs"));
    }
    t.pass("tests/ui/pass/*.rs");
}

//! Examples print exactly their golden output (regenerate with `RANKWISE_BLESS=1`).

#[path = "../examples/quickstart.rs"]
mod quickstart;

fn check(name: &str, got: &str) {
    let path = format!("{}/tests/golden/{name}.txt", env!("CARGO_MANIFEST_DIR"));
    if std::env::var_os("RANKWISE_BLESS").is_some() {
        std::fs::write(&path, got).expect("write golden file");
    }
    let want = std::fs::read_to_string(&path).expect("golden file exists");
    assert_eq!(got, want, "{name} output differs from {path}");
}

#[test]
fn quickstart_prints_its_golden_output() {
    check("quickstart", &quickstart::run().expect("quickstart runs"));
}

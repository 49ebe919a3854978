//! Examples print exactly their golden output (regenerate with `RANKWISE_BLESS=1`).

// Each example is its own crate, with its own copy of `examples/common/phases.rs`; compiled
// together here, that file is loaded once per example.
#![allow(clippy::duplicate_mod)]

#[path = "../examples/quickstart.rs"]
mod quickstart;

/// The ports of the seed tutorials' programs: each prints what its seed printed, in
/// rankwise's format (`book/src/seeds.md` maps seeds to examples).
macro_rules! seeds {
    ($($name:ident = $path:literal),* $(,)?) => {
        $(
            #[path = $path]
            mod $name;
        )*
        #[test]
        fn seed_ports_print_their_golden_output() {
            $(check(stringify!($name), &$name::run().expect(stringify!($name)));)*
        }

        /// Independent of the golden files: each port prints what its seed printed under
        /// torch (kept verbatim in `tests/golden/seeds/`), once torch's `tensor([1., 2.])` is
        /// written as rankwise writes it, `[1. 2.]`.
        #[test]
        fn seed_ports_print_what_torch_printed() {
            $(
                let name = stringify!($name);
                let path = format!("{}/tests/golden/seeds/{name}.torch.txt", env!("CARGO_MANIFEST_DIR"));
                let torch = std::fs::read_to_string(&path).expect("the seed's output is kept");
                let ours = $name::run().expect(name);
                assert_eq!(ours, as_rankwise_prints(&torch), "{name} against {path}");
            )*
        }
    };
}

seeds!(
    seed000_all_gather = "../examples/seed000_all_gather.rs",
    seed000_all_reduce = "../examples/seed000_all_reduce.rs",
    seed000_reduce = "../examples/seed000_reduce.rs",
    seed000_reduce_scatter = "../examples/seed000_reduce_scatter.rs",
    seed001_all_gather = "../examples/seed001_all_gather.rs",
    seed001_all_reduce = "../examples/seed001_all_reduce.rs",
);

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

/// torch's printing of 1-d tensors (`tensor([1., 2.])`, `tensor([2, 3], device='npu:0')`) in
/// rankwise's (NumPy's) format (`[1. 2.]`, `[2 3]`: rankwise tensors in these ports live on the
/// host); everything else as it is.
fn as_rankwise_prints(torch: &str) -> String {
    let mut out = String::new();
    let mut rest = torch;
    while let Some(at) = rest.find("tensor([") {
        out.push_str(&rest[..at]);
        let inner = &rest[at + "tensor(".len()..];
        let Some(end) = inner.find(']') else {
            break;
        };
        out.push_str(&inner[..=end].replace(", ", " "));
        // `)` or `, device='…')`.
        let after = &inner[end + 1..];
        rest = after.find(')').map_or(after, |close| &after[close + 1..]);
    }
    out.push_str(rest);
    out
}

#[test]
fn torch_printing_is_translated() {
    assert_eq!(
        as_rankwise_prints(
            "a: [tensor([1.]), tensor([2., 3.])] b: tensor([10., 10.]) c=tensor([2, 3], device='npu:0'), x\n"
        ),
        "a: [[1.], [2. 3.]] b: [10. 10.] c=[2 3], x\n"
    );
}

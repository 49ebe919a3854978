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

        /// Independent of the golden files: every line each seed printed under torch (kept
        /// verbatim in `tests/golden/seeds/`, translated from torch's format to rankwise's)
        /// is printed by its port. The seeds' ranks printed concurrently, so the order of
        /// their lines is not compared; blank lines are not either.
        #[test]
        fn seed_ports_print_what_torch_printed() {
            $(
                let name = stringify!($name);
                let path = format!("{}/tests/golden/seeds/{name}.torch.txt", env!("CARGO_MANIFEST_DIR"));
                let torch = std::fs::read_to_string(&path).expect("the seed's output is kept");
                let ours = $name::run().expect(name);
                let mut left: Vec<&str> = lines(&ours);
                let translated = as_rankwise_prints(&torch);
                let want = lines(&translated);
                for (k, line) in want.iter().enumerate() {
                    // Some seeds' text is cut off mid-line: their last line may be a prefix.
                    let last = k + 1 == want.len();
                    let found = left
                        .iter()
                        .position(|l| l == line)
                        .or_else(|| last.then(|| left.iter().position(|l| l.starts_with(line))).flatten());
                    let Some(at) = found else {
                        panic!("{name}: the seed printed {line:?}, the port does not (once more):\n{ours}");
                    };
                    left.swap_remove(at);
                }
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
    seed004_row_gather = "../examples/seed004_row_gather.rs",
    seed004_column_gather = "../examples/seed004_column_gather.rs",
    seed004_row_all_gather = "../examples/seed004_row_all_gather.rs",
    seed004_column_all_gather = "../examples/seed004_column_all_gather.rs",
    seed004_reduce = "../examples/seed004_reduce.rs",
    seed004_all_reduce = "../examples/seed004_all_reduce.rs",
    seed004_all_reduce_2d = "../examples/seed004_all_reduce_2d.rs",
    seed004_scatter = "../examples/seed004_scatter.rs",
    seed004_row_reduce_scatter_list = "../examples/seed004_row_reduce_scatter_list.rs",
    seed004_row_reduce_scatter = "../examples/seed004_row_reduce_scatter.rs",
    seed004_column_reduce_scatter = "../examples/seed004_column_reduce_scatter.rs",
    seed004_row_all_to_all = "../examples/seed004_row_all_to_all.rs",
    seed004_column_all_to_all = "../examples/seed004_column_all_to_all.rs",
    seed004_broadcast = "../examples/seed004_broadcast.rs",
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

/// The non-blank lines of `text`, without trailing spaces.
fn lines(text: &str) -> Vec<&str> {
    text.lines()
        .map(str::trim_end)
        .filter(|l| !l.is_empty())
        .collect()
}

/// torch's printing in rankwise's (NumPy's): `tensor([1., 2.])` as `[1. 2.]`,
/// `tensor([[0., 1.],\n        [2., 3.]], device='cuda:0')` as `[[0. 1.]\n [2. 3.]]` (the
/// ports' tensors live on the host), `torch.Size([4, 5])` as `[4, 5]`; the rest as it is.
fn as_rankwise_prints(torch: &str) -> String {
    let torch = torch.replace("torch.Size(", "(");
    let mut out = String::new();
    let mut rest = torch.as_str();
    while let Some(at) = rest.find("tensor([") {
        out.push_str(&rest[..at]);
        let inner = &rest[at + "tensor(".len()..];
        // The data: up to the bracket that closes the first one.
        let mut depth = 0usize;
        let mut end = inner.len();
        for (i, c) in inner.char_indices() {
            match c {
                '[' => depth += 1,
                ']' => {
                    depth -= 1;
                    if depth == 0 {
                        end = i;
                        break;
                    }
                }
                _ => {}
            }
        }
        let data = &inner[..=end.min(inner.len() - 1)];
        let mut rows: Vec<String> = Vec::new();
        for (k, row) in data.split(",\n").enumerate() {
            let row = row.trim_start();
            rows.push(if k == 0 {
                row.to_string()
            } else {
                format!(" {row}")
            });
        }
        out.push_str(&rows.join("\n").replace(", ", " "));
        // `)` or `, device='…')`.
        let after = &inner[end + 1..];
        rest = after.find(')').map_or(after, |close| &after[close + 1..]);
    }
    out.push_str(rest);
    // `(…)` left by `torch.Size([4, 5])`.
    out.replace("([", "[").replace("])", "]")
}

#[test]
fn torch_printing_is_translated() {
    assert_eq!(
        as_rankwise_prints(
            "a: [tensor([1.]), tensor([2., 3.])] b: tensor([10., 10.]) c=tensor([2, 3], device='npu:0'), x\n"
        ),
        "a: [[1.], [2. 3.]] b: [10. 10.] c=[2 3], x\n"
    );
    assert_eq!(
        as_rankwise_prints(
            "shape torch.Size([4, 5]):\n tensor([[0., 0.],\n        [1., 1.]], device='cuda:0')\n"
        ),
        "shape [4, 5]:\n [[0. 0.]\n [1. 1.]]\n"
    );
}

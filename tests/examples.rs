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
                // Seed 002 shows its programs' code but not their output.
                let printed = !name.starts_with("seed002_");
                assert_eq!(std::path::Path::new(&path).exists(), printed, "{path}");
                let torch = std::fs::read_to_string(&path).unwrap_or_default();
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
    seed002_init_process_group = "../examples/seed002_init_process_group.rs",
    seed002_new_group = "../examples/seed002_new_group.rs",
    seed002_send_recv = "../examples/seed002_send_recv.rs",
    seed002_isend_irecv = "../examples/seed002_isend_irecv.rs",
    seed002_send_recv_pair = "../examples/seed002_send_recv_pair.rs",
    seed002_all_reduce_all_gather = "../examples/seed002_all_reduce_all_gather.rs",
    seed002_softmax_l2 = "../examples/seed002_softmax_l2.rs",
    seed002_broadcast = "../examples/seed002_broadcast.rs",
    seed002_scatter = "../examples/seed002_scatter.rs",
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

/// Seed 002 shows no output: its ports' values are checked against sums worked out by hand
/// from each program's data (four ranks unless noted).
#[test]
fn seed002_ports_compute_what_the_arithmetic_says() {
    let expect = [
        // Halves [0, 1] and [2, 3] sum their ranks.
        (
            seed002_new_group::run(),
            "Group1 (ranks [0, 1]): 累加结果为 1.0",
        ),
        (
            seed002_new_group::run(),
            "Group2 (ranks [2, 3]): 累加结果为 5.0",
        ),
        // Three ranks: [100, 200], doubled on the way.
        (seed002_send_recv::run(), "Rank 2 收到数据: [200. 400.]"),
        // The same chain, posted and waited for.
        (
            seed002_isend_irecv::run(),
            "Rank 1 接收完成，数据为: [100. 200.]",
        ),
        (
            seed002_isend_irecv::run(),
            "Rank 2 接收完成，最终数据为: [200. 400.]",
        ),
        // [10r, 10r + 1] over r = 0..4.
        (
            seed002_all_reduce_all_gather::run(),
            "归约后的张量 (所有 rank 的和): [60. 64.]",
        ),
        (
            seed002_all_reduce_all_gather::run(),
            "rank 3 的数据: [30.0, 31.0]",
        ),
        // [r + 1, r + 2, r + 3]: the maximum over r = 0..4, and the sums of squares.
        (
            seed002_softmax_l2::run(),
            "max_tensor after all_reduce: [4. 5. 6.]",
        ),
        (
            seed002_softmax_l2::run(),
            "sum_squared after all_reduce: [30. 54. 86.]",
        ),
        // Weights [0.3, 0.3, 0.4] times the column sums [10, 14, 18].
        (
            seed002_softmax_l2::run(),
            "加权后的张量: [3.        4.2       7.2000003]",
        ),
        (seed002_scatter::run(), "Rank 2 收到的数据: [20.0, 21.0]"),
        (
            seed002_broadcast::run(),
            "Rank 3 第二次广播后: data2=[10. 20. 30.]",
        ),
        (
            seed002_init_process_group::run(),
            "进程 3 的最终张量值: 6.0",
        ),
    ];
    for (out, line) in expect {
        let out = out.expect("the port runs");
        assert!(out.lines().any(|l| l == line), "{line:?} not in:\n{out}");
    }
    // softmax(x)_r = e^(x_r - max) / Σ e^(x_s - max): rank 0's is e^-3 / (e^-3 + e^-2 + e^-1 + 1).
    let e = |x: f64| x.exp();
    let want = e(-3.0) / (e(-3.0) + e(-2.0) + e(-1.0) + 1.0);
    let out = seed002_softmax_l2::run().expect("the port runs");
    let line = out
        .lines()
        .find(|l| l.starts_with("Softmax 结果: ["))
        .expect("a softmax line");
    let first: f64 = line["Softmax 结果: [".len()..]
        .split_whitespace()
        .next()
        .and_then(|v| v.parse().ok())
        .expect("a number");
    assert!((first - want).abs() < 1e-6, "{first} vs {want}");
}

#[path = "../examples/proofs.rs"]
mod proofs;

/// The checked program of `examples/proofs.rs` (run under MPI by `tests/mpi.rs`, against the
/// threads engine), against its arithmetic worked out here, at every world size it was checked
/// for.
#[test]
fn proofs_rooted_collectives_compute_what_the_arithmetic_says() {
    for world in 1..=4usize {
        let ranks = rankwise::launch(world, proofs::rooted).expect("the program runs");
        for (rank, lines) in ranks.iter() {
            let mut want = Vec::new();
            for root in 0..world {
                let at_root = |v: Vec<f32>| {
                    if rank == root {
                        format!("{v:?}")
                    } else {
                        "-".to_string()
                    }
                };
                // Rank r's base value is 10r + root; the root's is 11·root.
                let base = |r: usize| (10 * r + root) as f32;
                let rooted = base(root);
                let max = at_root(vec![base(world - 1); 2]);
                let scattered = vec![rooted + (2 * rank) as f32, rooted + (2 * rank + 1) as f32];
                let gathered: Vec<f32> = if rank == root {
                    (0..2).flat_map(|_| (0..world).map(base)).collect()
                } else {
                    vec![0.0; 2 * world]
                };
                let sum = at_root(vec![-(0..world).map(base).sum::<f32>()]);
                want.push(format!(
                    "root {root}: broadcast {:?} reduce {max} scatter {scattered:?} gather \
                     {gathered:?} batch {:?} {sum}",
                    vec![rooted; 3],
                    vec![rooted],
                ));
            }
            if world >= 2 && rank < 2 {
                want.push("pair broadcast [1.5, 1.5]".to_string());
            }
            assert_eq!(lines, &want, "world {world}, rank {rank}");
        }
    }
}

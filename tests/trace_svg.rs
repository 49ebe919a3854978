//! The trace renderer (`examples/trace_svg.rs`) on the trace of a known program: one box per
//! call on the right lane, one arrow per message, failed calls outlined in red.

#[path = "common/examples.rs"]
mod examples;
#[allow(dead_code)] // `main` is the example's
#[path = "../examples/trace_svg.rs"]
mod trace_svg;

use rankwise::{Options, ReduceOp, Result, Tensor, spawn_with};

fn trace_of(
    name: &str,
    world: usize,
    f: impl Fn(&mut rankwise::Ctx) -> Result<()> + Sync,
) -> serde_json::Value {
    let dir = std::env::temp_dir().join(format!("rankwise-svg-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a temporary directory");
    let path = dir.join("t.json");
    let _ = spawn_with(
        world,
        Options::default().trace(path.display().to_string()),
        f,
    );
    let text = std::fs::read_to_string(&path).expect("the trace was written");
    let _ = std::fs::remove_dir_all(&dir);
    serde_json::from_str(&text).expect("JSON")
}

#[test]
fn a_ring_is_drawn_box_by_box_with_its_messages() {
    let json = trace_of("ring", 3, |ctx| {
        let (r, w) = (ctx.rank(), ctx.world());
        let x = Tensor::full([2], r as f32)?;
        let mut y = Tensor::<f32>::zeros([2])?;
        for _ in 0..2 {
            let mut b = ctx.batch();
            b.send(&x, (r + 1) % w).recv(&mut y, (r + w - 1) % w);
            b.run()?;
        }
        let mut t = Tensor::full([1], 1.0f32)?;
        ctx.all_reduce(&mut t, ReduceOp::Sum)
    });
    let calls = trace_svg::calls(&json, 0).expect("a trace");
    let svg = trace_svg::render(&calls);
    assert!(svg.starts_with("<svg"), "{svg}");
    // 3 ranks × (2 × (send + recv) + all_reduce).
    assert_eq!(svg.matches("<rect").count(), 15);
    assert_eq!(svg.matches("class=\"message\"").count(), 6);
    for r in 0..3 {
        assert!(svg.contains(&format!(">rank {r}<")), "lane {r}");
        assert!(
            svg.contains(&format!(">send → {}<", (r + 1) % 3)),
            "rank {r}'s send"
        );
    }
    assert_eq!(svg.matches(">all_reduce<").count(), 3);
    assert!(!svg.contains("#d62728"), "no call failed");
}

#[test]
fn a_failed_call_is_outlined() {
    let json = trace_of("deadlock", 2, |ctx| {
        let mut t = Tensor::<f32>::zeros([1])?;
        ctx.recv(&mut t, 1 - ctx.rank())
    });
    let svg = trace_svg::render(&trace_svg::calls(&json, 0).expect("a trace"));
    assert_eq!(svg.matches("#d62728").count(), 2, "{svg}");
}

/// The book's pictures (`book/src/pictures/`), each drawn from a real run of its example,
/// are what the example and the renderer draw today (regenerate with `RANKWISE_BLESS=1`).
#[test]
fn the_books_pictures_are_current() {
    let root = env!("CARGO_MANIFEST_DIR");
    let dir = std::env::temp_dir().join(format!("rankwise-pictures-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a temporary directory");
    for name in PICTURES {
        let trace = dir.join(format!("{name}.json"));
        let run = std::process::Command::new(examples::example(name, &examples::same_features()))
            .env("RANKWISE_TRACE", &trace)
            .env("RANKWISE_BACKEND", "threads")
            .output()
            .expect("the example runs");
        assert!(
            run.status.success(),
            "{name}: {}",
            String::from_utf8_lossy(&run.stderr)
        );
        let text = std::fs::read_to_string(&trace).expect("the example wrote its trace");
        let json: serde_json::Value = serde_json::from_str(&text).expect("JSON");
        let svg = trace_svg::render(&trace_svg::calls(&json, 0).expect("a trace"));
        let path = format!("{root}/book/src/pictures/{name}.svg");
        if std::env::var_os("RANKWISE_BLESS").is_some() {
            std::fs::create_dir_all(format!("{root}/book/src/pictures")).expect("the directory");
            std::fs::write(&path, &svg).expect("write the picture");
        }
        let want = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            svg == want,
            "{path} is stale: regenerate it with RANKWISE_BLESS=1"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// The examples the book shows as pictures.
const PICTURES: [&str; 13] = [
    "seed002_send_recv",
    "seed004_broadcast",
    "seed004_reduce",
    "seed004_all_reduce",
    "seed004_row_gather",
    "seed004_row_all_gather",
    "seed004_column_all_gather",
    "seed004_scatter",
    "seed004_row_reduce_scatter",
    "seed004_column_reduce_scatter",
    "seed004_row_all_to_all",
    "seed004_column_all_to_all",
    "ring_allreduce",
];

//! How long the verifier takes on a hand-written ring all-reduce: 2·(W−1) batched send/recv
//! steps per rank, 4·W·(W−1) ops in all. Run: `cargo bench -p rankwise-runtime --bench verify`.

use std::time::Instant;

use rankwise_core::DType;
use rankwise_core::verify::{Program, verify};

fn ring_all_reduce(world: usize) -> Program {
    let mut p = Program::new(world);
    for r in 0..world {
        let mut b = p.rank(r);
        for _ in 0..2 * (world - 1) {
            b.batch()
                .send(DType::F32, &[1024], (r + 1) % world)
                .recv(DType::F32, &[1024], (r + world - 1) % world)
                .end_batch();
        }
    }
    p
}

fn main() {
    let quick = std::env::var_os("RANKWISE_BENCH_QUICK").is_some();
    let worlds: &[usize] = if quick { &[16, 64] } else { &[64, 256, 1024] };
    println!("| world | ops | build | verify | per op | growth vs previous (ops ×) |");
    println!("|---:|---:|---:|---:|---:|---:|");
    let mut prev: Option<(f64, usize)> = None;
    for &w in worlds {
        let t = Instant::now();
        let p = ring_all_reduce(w);
        let build = t.elapsed().as_secs_f64();
        let ops = p.num_ops();
        let mut times = Vec::new();
        for _ in 0..3 {
            let t = Instant::now();
            let s = verify(&p);
            times.push(t.elapsed().as_secs_f64());
            assert!(s.is_ok(), "the ring all-reduce must verify");
        }
        times.sort_by(f64::total_cmp);
        let v = times[1];
        let growth = prev.map_or("–".to_string(), |(pv, po)| {
            format!("{:.1}× ({:.1}×)", v / pv, ops as f64 / po as f64)
        });
        println!(
            "| {w} | {ops} | {:.3} s | {:.3} s | {:.0} ns | {growth} |",
            build,
            v,
            v / ops as f64 * 1e9
        );
        prev = Some((v, ops));
    }
}

//! Macro expansion time: what `#[rankwise::program]` adds to a build. Run:
//! `cargo bench -p rankwise-macros-core --bench expand`. `RANKWISE_BENCH_QUICK=1` (CI's smoke
//! run, unoptimised) expands each program once and leaves out the largest world range.

use std::time::Instant;

use proc_macro2::TokenStream;
use quote::quote;

fn ring_all_reduce() -> TokenStream {
    quote! {
        fn ring_all_reduce(ctx: &mut Ctx) -> Result<Vec<f32>> {
            let rank = ctx.rank();
            let world = ctx.world();
            let next = (rank + 1) % world;
            let prev = (rank + world - 1) % world;
            let mut data: Vec<f32> = vec![rank as f32; world * 4];
            let mut outgoing = ctx.zeros::<f32>([4])?;
            let mut incoming = ctx.zeros::<f32>([4])?;
            for step in 0..2 * (world - 1) {
                let reducing = step < world - 1;
                let s = step % (world - 1);
                let send_chunk = if reducing { (rank + world - s) % world } else { (rank + 1 + world - s) % world };
                outgoing.as_mut_slice()?.copy_from_slice(&data[send_chunk * 4..][..4]);
                let mut b = ctx.batch();
                b.send(&outgoing, next);
                b.recv(&mut incoming, prev);
                b.run()?;
            }
            Ok(data)
        }
    }
}

fn time(args: TokenStream, item: &TokenStream, runs: usize) -> (f64, usize) {
    let mut times = Vec::new();
    let mut len = 0;
    for _ in 0..runs {
        let t = Instant::now();
        let out = rankwise_macros_core::expand(args.clone(), item.clone());
        times.push(t.elapsed().as_secs_f64());
        len = out.to_string().len();
    }
    times.sort_by(f64::total_cmp);
    (times[runs / 2], len)
}

fn main() {
    let quick = std::env::var_os("RANKWISE_BENCH_QUICK").is_some();
    let runs = if quick { 1 } else { 5 };
    let item = ring_all_reduce();
    println!("| program | worlds | expansion (median of {runs}) | emitted code |");
    println!("|---|---|---:|---:|");
    for (label, args) in [
        ("world = 4", quote!(world = 4)),
        ("world in [2, 4, 8, 16]", quote!(world in [2, 4, 8, 16])),
        ("world in 2..=64", quote!(world in 2..=64)),
        ("world in 2..=128", quote!(world in 2..=128)),
    ] {
        if quick && label.ends_with("128") {
            continue;
        }
        let (t, len) = time(args, &item, runs);
        println!(
            "| ring all-reduce | {label} | {:.1} ms | {:.1} KiB |",
            t * 1e3,
            len as f64 / 1024.0
        );
    }
}

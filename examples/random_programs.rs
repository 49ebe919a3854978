//! Random programs as data — the differential tests' generator, drawn from a seed so that every
//! process of an MPI job rebuilds the same ones — verified, then run on whichever engine launches
//! this. The MPI tests compare both engines with each other and with the verifier.
//!
//! * `good <seed> <count>`: runs every correct program `0..count` in turn and prints each rank's
//!   digest of what it received (`rankwise::replay`);
//! * `bad <seed> <index>`: mutates program `index`, prints the verifier's verdict, then runs it
//!   (a wrong program then fails: an `Err` under threads, an aborted job under MPI);
//! * `corpus`: runs every program of the macro's differential corpus (`tests/corpus`) that
//!   `#[rankwise::program]` accepted, as checked functions (each with its guard — under MPI,
//!   its handshake and its proven calls), and prints each rank's result.

#[path = "../runtime/tests/common/programs.rs"]
mod programs;

#[path = "../tests/corpus/programs.rs"]
#[rustfmt::skip] // generated: compared byte for byte with the generator's output
mod corpus;

use rankwise::Result;
use rankwise::verify::verify;

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let arg = |i: usize| args.get(i).and_then(|a| a.parse::<u64>().ok()).unwrap_or(0);
    let (mode, seed, n) = (args.get(1).cloned().unwrap_or_default(), arg(2), arg(3));
    let ranks = rankwise::launch(4, |ctx| {
        let world = ctx.world();
        let mut out = Vec::new();
        if mode == "bad" {
            let (mut p, m) = programs::numbered(seed, n, world);
            programs::mutate(&mut p, &m);
            let verdict = match verify(&p) {
                Ok(_) => "ok".to_string(),
                Err(d) => {
                    let mut v: Vec<String> =
                        d.verdicts().iter().map(|v| format!("{v:?}")).collect();
                    v.sort();
                    v.dedup();
                    v.join(",")
                }
            };
            if ctx.rank() == 0 {
                println!("verdict: {verdict}");
            }
            rankwise::replay(&p, ctx)?;
            out.push("ran".to_string());
        } else if mode == "corpus" {
            for (i, p) in corpus::CHECKED.iter().enumerate() {
                if let Some(p) = p {
                    out.push(format!("p{i} {:?}", p(ctx)?));
                }
            }
        } else {
            for i in 0..n {
                let (p, _) = programs::numbered(seed, i, world);
                // A reduction this backend does not have (NCCL: bitwise ones) would be refused.
                let runnable = p
                    .ranks
                    .iter()
                    .flatten()
                    .flat_map(|item| item.ops())
                    .all(|op| op.desc.op.is_none_or(|o| ctx.supports(o, op.desc.dtype)));
                if !runnable {
                    out.push(format!(
                        "program {i} needs a reduction {} lacks",
                        ctx.backend_name()
                    ));
                    continue;
                }
                match verify(&p) {
                    Ok(_) => out.push(format!(
                        "program {i} digest {:016x}",
                        rankwise::replay(&p, ctx)?
                    )),
                    Err(d) => out.push(format!("program {i} rejected: {d}")),
                }
            }
        }
        Ok(out)
    })?;
    for (rank, lines) in ranks.iter() {
        for l in lines {
            println!("rank {rank} {l}");
        }
    }
    Ok(())
}

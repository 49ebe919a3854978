//! How the seed ports print: each rank returns its lines phase by phase ("before", "after"),
//! and the output shows each phase for every rank in rank order — the order the seed tutorials
//! show (their processes printed concurrently; the printed order there was luck).

// Each example uses what it needs of this file.
#![allow(dead_code, unused_macros)]

/// A seed port's `run` (its output, as the golden-output test calls it) and `main` (which
/// prints it), for `program` on `world` ranks.
macro_rules! port_main {
    ($world:expr, $program:ident) => {
        /// The output, every rank's lines phase by phase (under `mpirun`: this process's
        /// rank's).
        pub fn run() -> rankwise::Result<String> {
            phases::run_phases($world, $program)
        }

        #[allow(dead_code)] // also compiled into the golden-output test, which calls `run`
        fn main() -> rankwise::Result<()> {
            print!("{}", run()?);
            Ok(())
        }
    };
}

use rankwise::{Element, Ranks, Tensor};

/// One rank's lines, phase by phase.
pub type Phases = Vec<Vec<String>>;

/// Every rank's phase 0, then every rank's phase 1, and so on.
pub fn render(ranks: &Ranks<Phases>) -> String {
    let phases = ranks.iter().map(|(_, p)| p.len()).max().unwrap_or(0);
    let mut out = String::new();
    for phase in 0..phases {
        for (_, lines) in ranks.iter() {
            for line in lines.get(phase).into_iter().flatten() {
                out.push_str(line);
                out.push('\n');
            }
        }
    }
    out
}

/// A list of tensors as torch prints one: `[[1.], [2.]]`.
pub fn list<T: Element>(ts: &[Tensor<T>]) -> String {
    let parts: Vec<String> = ts.iter().map(|t| t.to_string()).collect();
    format!("[{}]", parts.join(", "))
}

/// A tensor as torch's `tensor.tolist()` prints it: nested Python lists, `[[2.0, 2.0]]`.
pub fn tolist<T: Element>(t: &Tensor<T>) -> String {
    fn nested<T: std::fmt::Debug>(shape: &[usize], data: &[T]) -> String {
        match shape {
            [] => data.first().map(|x| format!("{x:?}")).unwrap_or_default(),
            [_] => format!("{data:?}"),
            [n, inner @ ..] => {
                let step = data.len() / (*n).max(1);
                let parts: Vec<String> = (0..*n)
                    .map(|i| nested(inner, &data[i * step..(i + 1) * step]))
                    .collect();
                format!("[{}]", parts.join(", "))
            }
        }
    }
    nested(t.shape(), &t.to_vec())
}

/// Runs `program` on `world` ranks (threads, or this process's rank under `mpirun`) and
/// renders its lines phase by phase.
pub fn run_phases(
    world: usize,
    program: impl Fn(&mut rankwise::Ctx) -> rankwise::Result<Phases> + Sync,
) -> rankwise::Result<String> {
    Ok(render(&rankwise::launch(world, program)?))
}

//! How the seed ports print: each rank returns its lines phase by phase ("before", "after"),
//! and the output shows each phase for every rank in rank order — the order the seed tutorials
//! show (their processes printed concurrently; the printed order there was luck).

// Each example uses what it needs of this file.
#![allow(dead_code)]

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

//! The verifier: prove a rank program deadlock-free and in agreement, or explain why not.
//!
//! Input: a [`Program`] — a world size and, per rank, the ordered communication items (an op, or
//! a batch of ops), each op carrying kind, peer or root, group, reduce op, dtype, shapes, dim and
//! a call-site id. Output: a [`Schedule`] (which op meets which) or [`Diagnostics`] with stable
//! codes, the ranks involved, the call sites and what to change.
//!
//! Semantics (DESIGN.md): a blocking send completes only when the matching recv is current
//! (rendezvous); the k-th send from r to q meets the k-th recv at q from r, with equal dtype
//! and count; a batch posts all its ops and completes when all are matched; self send/recv only
//! inside a batch; collectives match in order per communicator, and members must agree on kind,
//! root, op, dtype, shape and dim; each call must also satisfy its own rules (`crate::rules`).
//!
//! This module is plain Rust with no dependency on syn or on any backend: the proc macro runs it
//! at compile time and `spawn` at launch, so both apply the same checks.

mod diag;
mod findings;
mod graph;
mod program;
mod schedule;
mod sim;

pub use diag::{Code, Diagnostic, Diagnostics, SiteRef, Verdict, describe_ranks};
pub use program::{Item, Program, RankBuilder, SiteId, VOp};
pub use schedule::{Match, Schedule};

use findings::{Finding, Render};
use sim::Sim;

/// Checks `program`: its schedule if every rank finishes and every meeting agrees, otherwise
/// every independent problem found.
pub fn verify(program: &Program) -> Result<Schedule, Diagnostics> {
    if program.ranks.len() != program.world {
        let d = Diagnostic {
            code: Code::RW009,
            verdict: Verdict::Misuse,
            world: program.world,
            ranks: Vec::new(),
            message: format!(
                "the program describes {} rank(s) for a world of {}",
                program.ranks.len(),
                program.world
            ),
            primary: SiteRef {
                id: SiteId(0),
                site: crate::model::CallSite::caller(),
            },
            secondary: Vec::new(),
            help: "describe exactly one item list per rank".into(),
        };
        return Err(Diagnostics(vec![d]));
    }
    let mut sim = Sim::new(program);
    sim.run();
    if sim.findings.is_empty() {
        return Ok(sim.schedule);
    }
    Err(merge(program.world, sim.findings))
}

/// Verifies `program` at every world size `worlds` yields (built by `build`), collecting the
/// diagnostics of all of them.
pub fn verify_worlds(
    worlds: impl IntoIterator<Item = usize>,
    mut build: impl FnMut(usize) -> Program,
) -> Result<Vec<Schedule>, Diagnostics> {
    let mut schedules = Vec::new();
    let mut all = Vec::new();
    for w in worlds {
        match verify(&build(w)) {
            Ok(s) => schedules.push(s),
            Err(d) => all.extend(d.0),
        }
    }
    if all.is_empty() {
        Ok(schedules)
    } else {
        Err(Diagnostics(all))
    }
}

/// Merges findings of the same problem seen from several ranks into one diagnostic each.
fn merge(world: usize, findings: Vec<Finding>) -> Diagnostics {
    let mut merged: Vec<Finding> = Vec::new();
    for f in findings {
        let same = merged.iter_mut().find(|m| {
            m.code == f.code
                && m.primary.id == f.primary.id
                && m.message == f.message
                && m.render == f.render
        });
        match same {
            Some(m) => m.ranks.extend(f.ranks),
            None => merged.push(f),
        }
    }
    let mut out: Vec<Diagnostic> = merged
        .into_iter()
        .map(|mut f| {
            f.ranks.sort_unstable();
            f.ranks.dedup();
            let message = match f.render {
                Render::Prefixed => format!("{}: {}", describe_ranks(&f.ranks, world), f.message),
                Render::Exact => f.message,
            };
            Diagnostic {
                code: f.code,
                verdict: f.verdict,
                world,
                ranks: f.ranks,
                message,
                primary: f.primary,
                secondary: f.secondary,
                help: f.help,
            }
        })
        .collect();
    out.sort_by(|a, b| (a.code, a.primary.site, &a.ranks).cmp(&(b.code, b.primary.site, &b.ranks)));
    Diagnostics(out)
}

//! Diagnostics: stable codes, the ranks involved, a primary call site, labelled secondary sites
//! and a help line — everything the macro needs to render a compile error and `spawn` needs to
//! render an `Err`.

use std::fmt;

use super::program::SiteId;
pub use crate::code::Code;
use crate::model::CallSite;

/// What running the program would do, as far as one diagnostic is concerned.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Verdict {
    /// Ranks block forever (deadlock, unmatched send/recv, skipped collective at the end).
    Hang,
    /// Ranks meet with calls that disagree (collective fingerprint, p2p count or dtype).
    Mismatch,
    /// A call is wrong on its own (rank out of range, bad shape, …).
    Misuse,
}

/// A call site in a diagnostic.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SiteRef {
    /// The builder's id (the macro maps it to a span).
    pub id: SiteId,
    /// The source location, for text rendering.
    pub site: CallSite,
}

/// One problem with a program.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Diagnostic {
    /// Stable code.
    pub code: Code,
    /// What would happen at run time.
    pub verdict: Verdict,
    /// The world size at which the problem appears.
    pub world: usize,
    /// The ranks involved, ascending.
    pub ranks: Vec<usize>,
    /// What is wrong, in a sentence that names the ranks.
    pub message: String,
    /// Where it is wrong.
    pub primary: SiteRef,
    /// Related call sites on other ranks, each with a label saying how it relates.
    pub secondary: Vec<(SiteRef, String)>,
    /// What to change.
    pub help: String,
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "error[{}]: {} (world = {})",
            self.code, self.message, self.world
        )?;
        write!(f, "\n  --> {}", self.primary.site)?;
        for (s, label) in &self.secondary {
            write!(f, "\n  note: {} ({})", label, s.site)?;
        }
        if !self.help.is_empty() {
            write!(f, "\n  help: {}", self.help)?;
        }
        Ok(())
    }
}

/// Every problem found, in a stable order (by world, code, then site).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Diagnostics(pub Vec<Diagnostic>);

impl Diagnostics {
    /// The distinct verdicts among the diagnostics.
    pub fn verdicts(&self) -> Vec<Verdict> {
        let mut v: Vec<Verdict> = self.0.iter().map(|d| d.verdict).collect();
        v.sort();
        v.dedup();
        v
    }

    /// The distinct codes among the diagnostics.
    pub fn codes(&self) -> Vec<Code> {
        let mut v: Vec<Code> = self.0.iter().map(|d| d.code).collect();
        v.sort();
        v.dedup();
        v
    }
}

impl fmt::Display for Diagnostics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, d) in self.0.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{d}")?;
        }
        Ok(())
    }
}

impl std::error::Error for Diagnostics {}

/// Names a set of ranks the way a person would: "rank 3", "every rank", "every rank but 2",
/// "even ranks", "odd ranks", "ranks 0–3", "ranks 1, 4, 6".
pub fn describe_ranks(ranks: &[usize], world: usize) -> String {
    let mut r = ranks.to_vec();
    r.sort_unstable();
    r.dedup();
    let all: Vec<usize> = (0..world).collect();
    match r.len() {
        0 => return "no rank".into(),
        1 => return format!("rank {}", r[0]),
        _ => {}
    }
    if r == all {
        return if world == 2 {
            "both ranks".into()
        } else {
            "every rank".into()
        };
    }
    if world >= 4
        && r.len() == world - 1
        && let Some(missing) = all.iter().find(|x| !r.contains(x))
    {
        return format!("every rank but {missing}");
    }
    if world >= 4 {
        let evens: Vec<usize> = (0..world).step_by(2).collect();
        let odds: Vec<usize> = (1..world).step_by(2).collect();
        if r == evens {
            return "even ranks".into();
        }
        if r == odds {
            return "odd ranks".into();
        }
    }
    format!("ranks {}", crate::model::RanksFmt(&r))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranks_are_described_compactly() {
        assert_eq!(describe_ranks(&[2], 4), "rank 2");
        assert_eq!(describe_ranks(&[0, 1, 2, 3], 4), "every rank");
        assert_eq!(describe_ranks(&[1, 0], 2), "both ranks");
        assert_eq!(describe_ranks(&[0, 1, 3], 4), "every rank but 2");
        assert_eq!(describe_ranks(&[1, 3, 5, 7], 8), "odd ranks");
        assert_eq!(describe_ranks(&[0, 2, 4, 6], 8), "even ranks");
        assert_eq!(describe_ranks(&[0, 1, 2, 3], 8), "ranks 0–3");
        assert_eq!(describe_ranks(&[1, 4, 6], 8), "ranks 1, 4, 6");
    }
}

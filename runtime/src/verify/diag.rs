//! Diagnostics: stable codes, the ranks involved, a primary call site, labelled secondary sites
//! and a help line — everything the macro needs to render a compile error and `spawn` needs to
//! render an `Err`.

use std::fmt;

use super::program::SiteId;
use crate::error::Error;
use crate::model::CallSite;

/// Stable diagnostic codes (see the book's chapter on each).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Code {
    /// Deadlock: a cycle of blocked ranks.
    RW001,
    /// A send that is never received.
    RW002,
    /// A recv that is never sent.
    RW003,
    /// Collective mismatch across ranks (kind, root, op, group).
    RW004,
    /// A collective skipped by a member (the others wait forever).
    RW005,
    /// Shape or count mismatch (p2p pair, across members, or against the call's rules).
    RW006,
    /// Split dimension not divisible by the group size.
    RW007,
    /// Dtype mismatch.
    RW008,
    /// Rank, root or peer out of range for the world.
    RW009,
    /// Send/recv to self outside a batch.
    RW010,
    /// Bad group: duplicate or out-of-range members, or used by a non-member.
    RW011,
    /// Communication the macro cannot verify.
    RW012,
    /// Reduce op not defined for the dtype.
    RW013,
    /// Dim out of range for the tensor.
    RW014,
    /// Malformed `#[program]` arguments.
    RW015,
}

impl Code {
    /// `"RW001"`, …
    pub fn as_str(self) -> &'static str {
        match self {
            Code::RW001 => "RW001",
            Code::RW002 => "RW002",
            Code::RW003 => "RW003",
            Code::RW004 => "RW004",
            Code::RW005 => "RW005",
            Code::RW006 => "RW006",
            Code::RW007 => "RW007",
            Code::RW008 => "RW008",
            Code::RW009 => "RW009",
            Code::RW010 => "RW010",
            Code::RW011 => "RW011",
            Code::RW012 => "RW012",
            Code::RW013 => "RW013",
            Code::RW014 => "RW014",
            Code::RW015 => "RW015",
        }
    }
}

impl fmt::Display for Code {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

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

impl From<Diagnostics> for Error {
    fn from(d: Diagnostics) -> Self {
        Error::Rejected(Box::new(d))
    }
}

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

//! Stable diagnostic codes, shared by the macro's compile errors, the verifier and run-time
//! errors.

use std::fmt;

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

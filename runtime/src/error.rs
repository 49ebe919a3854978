//! Errors: what went wrong, at which call site, on which ranks, and what to do about it.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use rankwise_core::Violation;
use rankwise_core::model::{CallSite, RanksFmt};
use rankwise_core::verify::Diagnostics;

/// `Result` with rankwise's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in rankwise.
///
/// A collective or receive that fails may have written part of its output (as an MPI or NCCL
/// call that fails may): a peer that failed halfway, or, in the threads backend, an all_gather's
/// or all_to_all's own block, which a rank copies while the others arrive. The tensors it only
/// reads are left as they were, and so is every tensor of a call refused before it was posted
/// (an [`Error::Misuse`]).
///
/// `Debug` prints the same text as `Display`, so that `fn main() -> rankwise::Result<()>`
/// (which prints the error with `{:?}`) shows a readable message; match on the variants for the
/// structured fields.
#[derive(Clone, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A world must have at least one rank.
    #[error("invalid world size {world}: a world needs at least one rank")]
    InvalidWorld {
        /// The requested size.
        world: usize,
    },

    /// A call broke one of its rules: a peer out of range, a bad shape, a group it is not a
    /// member of, … (checked on the calling rank before anything is sent). The [`Violation`]
    /// is the same one the verifier reports at compile time, with the same code and words.
    #[error("{site}: rank {rank}: {violation}; {help}", help = violation.help())]
    Misuse {
        /// Call site.
        site: CallSite,
        /// The calling rank.
        rank: usize,
        /// The rule broken; [`Violation::code`] gives its diagnostic code.
        violation: Violation,
    },

    /// A group handle from another world (e.g. kept from an earlier `spawn`) was used.
    #[error(
        "{site}: rank {rank} uses a handle for group [{members}] that was created in another \
         world; group handles are only valid in the world (the `spawn` or launch) that created \
         them: create the group again with `ctx.new_group(…)` in this world",
        members = RanksFmt(members)
    )]
    ForeignGroup {
        /// Call site.
        site: CallSite,
        /// The calling rank.
        rank: usize,
        /// The handle's members.
        members: Vec<usize>,
    },

    /// A send and its matching receive disagree on element count or type.
    #[error("{0}")]
    P2pMismatch(Box<P2pMismatch>),

    /// Members of a group reached the same collective step with different calls.
    #[error("{0}")]
    CollectiveMismatch(Box<CollectiveMismatch>),

    /// Every live rank is blocked and none can make progress.
    #[error("{0}")]
    Deadlock(DeadlockReport),

    /// A rank this one was waiting on failed, panicked or exited.
    #[error(
        "{}rank {rank} cannot finish: rank {peer} {reason}",
        site.map(|s| format!("{s}: ")).unwrap_or_default()
    )]
    PeerFailed {
        /// The rank reporting.
        rank: usize,
        /// The rank that failed.
        peer: usize,
        /// What happened to it.
        reason: PeerFailure,
        /// Where this rank was waiting, if it was.
        site: Option<CallSite>,
    },

    /// A rank's function panicked.
    #[error("rank {rank} panicked: {message}")]
    Panicked {
        /// The rank.
        rank: usize,
        /// The panic payload, if it was a string.
        message: String,
    },

    /// A communication call waited longer than the configured timeout.
    #[error(
        "{site}: rank {rank} waited {after:?} in {what} for rank(s) {peers} and gave up \
         (timeout set with `Options::timeout`)",
        peers = RanksFmt(waiting_for)
    )]
    Timeout {
        /// The rank.
        rank: usize,
        /// Its call site.
        site: CallSite,
        /// The call.
        what: String,
        /// Whom it waited for.
        waiting_for: Vec<usize>,
        /// How long it waited.
        after: Duration,
    },

    /// An error raised by the user's code on one rank (as reported by `spawn`).
    #[error("rank {rank}: {error}")]
    Rank {
        /// The rank whose function returned the error.
        rank: usize,
        /// The error.
        /// Not a `#[source]`: the message already contains it, and error-chain printers would
        /// show it twice.
        error: Box<Error>,
    },

    /// Tensor data does not fit its shape, or a shape is too large.
    #[error("{0}")]
    Tensor(String),

    /// The tensor lives on a device and must be copied to the host first.
    #[error("tensor is on {0}, not on the host; copy it with `to_vec()` first")]
    NotOnHost(String),

    /// A check inside rankwise that can only fail through a bug in rankwise itself: the run
    /// stops with this error (on every rank) instead of continuing in an inconsistent state.
    #[error("internal error in rankwise (please report it): {0}")]
    Internal(String),

    /// The backend cannot run this (missing library, unsupported op, a resource the
    /// environment refused, …).
    #[error("backend {backend}: {detail}")]
    Backend {
        /// Which backend.
        backend: &'static str,
        /// What went wrong.
        detail: String,
    },

    /// A `#[rankwise::program]` function was run at a world size it was not checked for.
    #[error(
        "`{function}` was checked for world sizes {checked:?}, not {world}; add {world} to its \
         `#[rankwise::program(world …)]` list or run it on a checked world size"
    )]
    WorldNotChecked {
        /// The program function.
        function: &'static str,
        /// The world size it was run at.
        world: usize,
        /// The world sizes it was checked for.
        checked: Vec<usize>,
    },

    /// A `#[rankwise::program]` function made a call its verified schedule did not expect.
    #[error(
        "{site}: rank {rank} of {world} in `{function}` makes a call the verified schedule does \
         not expect here (it expects {expected}): the run left the path the macro proved, e.g. \
         after an error or panic that was caught and ignored; stopped here instead of risking a \
         hang"
    )]
    Diverged {
        /// The program function.
        function: &'static str,
        /// The rank.
        rank: usize,
        /// The world size.
        world: usize,
        /// The unexpected call.
        site: CallSite,
        /// What the schedule expected instead.
        expected: String,
    },

    /// A `#[rankwise::program]` function's call names another peer or root than the one the
    /// macro verified it with: the macro's evaluation of the program was wrong.
    #[error(
        "{site}: rank {rank} of {world} in `{function}` names peer or root {actual:?}, but the \
         macro verified this call with {verified}: rankwise evaluated this program wrongly \
         (please report it, with the program); stopped before the call was posted, rather than \
         run a call nobody verified"
    )]
    UnverifiedPeer {
        /// The program function.
        function: &'static str,
        /// The rank.
        rank: usize,
        /// The world size.
        world: usize,
        /// The call.
        site: CallSite,
        /// The peer or root the macro verified the call with.
        verified: usize,
        /// The one the call names (`None`: none).
        actual: Option<usize>,
    },

    /// At the entry of a `#[rankwise::program]` function on a backend that uses the macro's
    /// proof (MPI), some ranks were not entering the same verified schedule: another checked
    /// function, another build of this one, or (if they made a matching call by chance) no
    /// checked function at all.
    #[error(
        "rank {rank} entered `{function}`, but rank(s) {others:?} did not enter the same \
         verified schedule at the same point (another `#[rankwise::program]` function, another \
         build of this one, or unchecked code): every rank of a job must run the same build of \
         the same program; stopped before the first call"
    )]
    ProofsDiffer {
        /// The program function this rank entered.
        function: &'static str,
        /// This rank.
        rank: usize,
        /// The ranks whose schedule differs.
        others: Vec<usize>,
    },

    /// The trace (`RANKWISE_TRACE`, `Options::trace`) could not be written.
    #[error("could not write the trace to {path}: {detail}")]
    Trace {
        /// The file.
        path: String,
        /// What went wrong.
        detail: String,
    },

    /// An environment variable rankwise reads holds a value that is none of its settings (a
    /// typo must not silently mean the default).
    #[error(
        "environment variable {name}={value:?} is not a setting rankwise knows; use {accepted}, \
         or unset it for the default"
    )]
    Setting {
        /// The variable.
        name: &'static str,
        /// Its value, as read.
        value: String,
        /// The values it takes, and what each means.
        accepted: String,
    },

    /// A program description (`verify::Program`) does not fit how it is used: described for
    /// another world size, or lacking what a call needs.
    #[error("invalid program description: {detail}")]
    BadProgram {
        /// What does not fit.
        detail: String,
    },

    /// The verifier rejected the program before it started.
    #[error("the program was rejected before it started:\n{0}")]
    Rejected(Box<Diagnostics>),

    /// An error from the user's own code, carried through rankwise.
    #[error(transparent)]
    User(Arc<dyn std::error::Error + Send + Sync>),
}

impl From<Diagnostics> for Error {
    fn from(d: Diagnostics) -> Self {
        Error::Rejected(Box::new(d))
    }
}

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl Error {
    /// Wraps any error from the user's code.
    pub fn user(e: impl std::error::Error + Send + Sync + 'static) -> Self {
        Error::User(Arc::new(e))
    }

    /// Whether this error only echoes another rank's failure (so `spawn` looks further for the
    /// root cause).
    pub fn is_echo(&self) -> bool {
        matches!(self, Error::PeerFailed { .. })
    }

    /// Whether the error describes the whole world, naming every rank involved, rather than
    /// one rank's problem.
    pub(crate) fn is_world_level(&self) -> bool {
        matches!(
            self,
            Error::Deadlock(_)
                | Error::CollectiveMismatch(_)
                | Error::P2pMismatch(_)
                | Error::Panicked { .. }
                | Error::Rank { .. }
        )
    }
}

/// The details of [`Error::P2pMismatch`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct P2pMismatch {
    /// Sender.
    pub src: usize,
    /// Receiver.
    pub dst: usize,
    /// Sender's call site (`None` when the sender is another process, as under MPI).
    pub send_site: Option<CallSite>,
    /// Receiver's call site.
    pub recv_site: CallSite,
    /// What the sender sends (`f32[4]`).
    pub send_what: String,
    /// What the receiver expects.
    pub recv_what: String,
}

impl fmt::Display for P2pMismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "rank {} sends {}{}, but the matching recv on rank {} expects {} at {}; the k-th \
             send from one rank to another meets the k-th recv, and both need the same dtype and \
             element count",
            self.src,
            self.send_what,
            self.send_site
                .map(|s| format!(" at {s}"))
                .unwrap_or_default(),
            self.dst,
            self.recv_what,
            self.recv_site
        )
    }
}

/// The details of [`Error::CollectiveMismatch`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CollectiveMismatch {
    /// The group's members.
    pub members: Vec<usize>,
    /// 0-based index of the collective on that group.
    pub step: u64,
    /// One rank (the group's first member).
    pub rank_a: usize,
    /// Its call.
    pub what_a: String,
    /// Its site.
    pub site_a: CallSite,
    /// A rank whose call differs.
    pub rank_b: usize,
    /// Its call.
    pub what_b: String,
    /// Its site.
    pub site_b: CallSite,
}

impl fmt::Display for CollectiveMismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "collective mismatch on group [{}], step {}: rank {} calls {} at {}, but rank {} calls \
             {} at {}; every member must make the same collective calls in the same order",
            RanksFmt(&self.members),
            self.step,
            self.rank_a,
            self.what_a,
            self.site_a,
            self.rank_b,
            self.what_b,
            self.site_b
        )
    }
}

/// What happened to a peer that others were waiting on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PeerFailure {
    /// It panicked (the message, if any).
    Panicked(String),
    /// Its function returned an error (rendered).
    Errored(String),
    /// Its function returned `Ok` without making the call others were waiting for.
    Exited,
}

impl fmt::Display for PeerFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PeerFailure::Panicked(m) => write!(f, "panicked: {m}"),
            PeerFailure::Errored(m) => write!(f, "failed: {m}"),
            PeerFailure::Exited => write!(
                f,
                "returned without making the matching call (a skipped collective or an \
                 unmatched send/recv)"
            ),
        }
    }
}

/// Every blocked rank's call and whom it waits for, at the moment no rank could progress.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeadlockReport {
    /// One entry per blocked rank, in rank order.
    pub waits: Vec<RankWait>,
}

/// One blocked rank in a [`DeadlockReport`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RankWait {
    /// The blocked rank.
    pub rank: usize,
    /// The call it is blocked in.
    pub site: CallSite,
    /// The call, described (`send(to 1, f32[2])`).
    pub what: String,
    /// The ranks whose action it needs.
    pub waiting_for: Vec<usize>,
}

impl fmt::Display for DeadlockReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "deadlock: every unfinished rank is blocked and none can make progress"
        )?;
        for w in &self.waits {
            write!(
                f,
                "\n  rank {} waits in {} at {} for rank(s) {}",
                w.rank,
                w.what,
                w.site,
                RanksFmt(&w.waiting_for)
            )?;
        }
        write!(
            f,
            "\n  help: a blocking send waits for the matching recv; order the calls so that \
             one side receives first, or issue both in one `ctx.batch()`"
        )
    }
}

impl Error {
    /// Whether the message already names the rank it happened on.
    pub(crate) fn names_rank(&self) -> bool {
        !matches!(
            self,
            Error::User(_)
                | Error::Tensor(_)
                | Error::NotOnHost(_)
                | Error::Backend { .. }
                | Error::Internal(_)
                | Error::BadProgram { .. }
                | Error::InvalidWorld { .. }
                | Error::Trace { .. }
                | Error::Setting { .. }
        )
    }
}

/// The text of a panic's payload.
pub(crate) fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        s.to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "(non-string panic payload)".to_string()
    }
}

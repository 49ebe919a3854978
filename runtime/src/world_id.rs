//! Process-unique identity of a running world.

/// Identifies one running world (one `spawn`, one MPI job): every rank of it shares the id, and
/// no two worlds of one process do.
///
/// Handles that name communicators ([`Group`](crate::Group)) carry it, so that a handle taken
/// out of one world and used in another is refused with an error: group ids are only
/// meaningful within the world that created them, and a backend sizing its copies by another
/// world's communicator would write past a buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct WorldId(u64);

impl WorldId {
    /// A world id never handed out before in this process.
    pub(crate) fn fresh() -> Self {
        use std::sync::atomic::{AtomicU64, Ordering};
        static NEXT: AtomicU64 = AtomicU64::new(1);
        WorldId(NEXT.fetch_add(1, Ordering::Relaxed))
    }
}

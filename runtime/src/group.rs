//! Communicator handles.

use std::fmt;
use std::sync::Arc;

use crate::model::{GroupId, RanksFmt, WorldId};

/// A set of ranks that run collectives together (torch's `ProcessGroup`).
///
/// Members are kept sorted; a member's position in that order is its rank within the group, as
/// in `torch.distributed.new_group`. Roots and peers in calls are still *global* ranks.
///
/// A handle belongs to the world that created it: using it with another world's context (a
/// handle kept from an earlier `spawn`, say) is [`Error::ForeignGroup`](crate::Error::ForeignGroup).
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Group {
    id: GroupId,
    members: Arc<[usize]>,
    world: WorldId,
}

impl Group {
    pub(crate) fn new(id: GroupId, members: Arc<[usize]>, world: WorldId) -> Self {
        Group { id, members, world }
    }

    /// The world this handle belongs to.
    pub(crate) fn world_id(&self) -> WorldId {
        self.world
    }

    /// The communicator id (`GroupId::WORLD` for the world).
    pub fn id(&self) -> GroupId {
        self.id
    }

    /// The members, shared (for the trace recorder).
    pub(crate) fn members_arc(&self) -> Arc<[usize]> {
        Arc::clone(&self.members)
    }

    /// Global ranks of the members, ascending.
    pub fn members(&self) -> &[usize] {
        &self.members
    }

    /// Number of members.
    pub fn size(&self) -> usize {
        self.members.len()
    }

    /// Whether global rank `rank` is a member.
    pub fn contains(&self, rank: usize) -> bool {
        self.index_of(rank).is_some()
    }

    /// The group rank of global rank `rank`, if it is a member.
    pub fn index_of(&self, rank: usize) -> Option<usize> {
        self.members.binary_search(&rank).ok()
    }
}

impl fmt::Debug for Group {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Group#{}[{}]", self.id.0, RanksFmt(&self.members))
    }
}

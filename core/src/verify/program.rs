//! A program description: per rank, the ordered communication items, as data.
//!
//! The `#[rankwise::program]` macro builds one per declared world size from the user's code;
//! tests and launch-time checks build them with [`Program::rank`]'s builder, whose methods
//! mirror `Ctx`'s.

use crate::DType;
use crate::ReduceOp;
use crate::model::{CallSite, GroupId, OpDesc, OpKind, Shape};
use crate::rules;

/// An opaque call-site id chosen by whoever built the program (the macro maps it back to a
/// span; the builder gives each source location one id).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SiteId(pub u32);

/// One communication call of one rank.
#[derive(Clone, Debug, PartialEq)]
pub struct VOp {
    /// The call, as the runtime describes it (`desc.site` is shown in messages).
    pub desc: OpDesc,
    /// The separate output's shape (gather at the root, all_gather, reduce_scatter, all_to_all).
    pub output: Option<Shape>,
    /// The root's input to `scatter`.
    pub root_input: Option<Shape>,
    /// The builder's id for the call site.
    pub id: SiteId,
}

/// What a rank does next: one blocking call, a batch posted together, or one half of a
/// non-blocking send or receive.
#[derive(Clone, Debug, PartialEq)]
pub enum Item {
    /// A blocking call.
    Op(VOp),
    /// Calls posted together; the item completes when all of them are matched.
    Batch(Vec<VOp>),
    /// A non-blocking send or receive (`isend`/`irecv`): posted, and the rank goes on at once.
    /// It is matched like any send or receive, in order per peer.
    Post(VOp),
    /// Blocks until the [`Item::Post`] at index `post` of this rank's items is matched.
    Wait {
        /// Index of the post in this rank's items.
        post: usize,
        /// Where the wait is called.
        site: CallSite,
        /// The builder's id for that call site.
        id: SiteId,
    },
}

impl Item {
    /// The item's ops, in program order (a wait has none: its op belongs to the post).
    pub fn ops(&self) -> &[VOp] {
        match self {
            Item::Op(op) | Item::Post(op) => std::slice::from_ref(op),
            Item::Batch(ops) => ops,
            Item::Wait { .. } => &[],
        }
    }

    /// The item's ops, writable.
    pub fn ops_mut(&mut self) -> &mut [VOp] {
        match self {
            Item::Op(op) | Item::Post(op) => std::slice::from_mut(op),
            Item::Batch(ops) => ops,
            Item::Wait { .. } => &mut [],
        }
    }

    /// Whether this is a batch.
    pub fn is_batch(&self) -> bool {
        matches!(self, Item::Batch(_))
    }
}

/// A whole rank program for one world size.
#[derive(Clone, Debug, PartialEq)]
pub struct Program {
    /// Number of ranks.
    pub world: usize,
    /// Communicators by id: `groups[0]` is the world; others as created (members as given).
    pub groups: Vec<Vec<usize>>,
    /// Each rank's items, in order.
    pub ranks: Vec<Vec<Item>>,
    /// Call sites whose element type the builder could not tell (a type variable rustc
    /// resolves): their ops carry a placeholder dtype that is never compared, and every meeting
    /// that involves one is listed in [`Schedule::dtype_links`](super::Schedule::dtype_links)
    /// for the builder to have the types checked (the macro asks rustc).
    pub free_dtypes: Vec<SiteId>,
    /// Builder ids by call site: one id per source location, shared by every rank.
    site_ids: Vec<CallSite>,
}

impl Program {
    /// An empty program for `world` ranks (every rank does nothing).
    pub fn new(world: usize) -> Self {
        Program {
            world,
            groups: vec![(0..world).collect()],
            ranks: vec![Vec::new(); world],
            free_dtypes: Vec::new(),
            site_ids: Vec::new(),
        }
    }

    /// Declares a communicator and returns its id (members need not be valid: the verifier
    /// reports bad groups).
    pub fn group(&mut self, members: impl AsRef<[usize]>) -> GroupId {
        self.groups.push(members.as_ref().to_vec());
        GroupId(self.groups.len() as u32 - 1)
    }

    /// A builder appending to `rank`'s items. Panics if `rank` is not below the world size:
    /// that is a bug in the test or tool building the program, not in the program.
    pub fn rank(&mut self, rank: usize) -> RankBuilder<'_> {
        assert!(
            rank < self.world,
            "rank {rank} outside a world of {}",
            self.world
        );
        RankBuilder {
            program: self,
            rank,
            batch: None,
        }
    }

    /// Whether `op`'s element type is a variable (see [`Program::free_dtypes`]).
    pub fn dtype_is_free(&self, op: &VOp) -> bool {
        !self.free_dtypes.is_empty() && self.free_dtypes.contains(&op.id)
    }

    /// Total number of ops over all ranks.
    pub fn num_ops(&self) -> usize {
        self.ranks.iter().flatten().map(|i| i.ops().len()).sum()
    }
}

/// Appends calls to one rank's items; see [`Program::rank`].
pub struct RankBuilder<'p> {
    program: &'p mut Program,
    rank: usize,
    batch: Option<Vec<VOp>>,
}

impl RankBuilder<'_> {
    #[allow(clippy::too_many_arguments)]
    fn push(
        &mut self,
        site: CallSite,
        kind: OpKind,
        group: GroupId,
        peer: Option<usize>,
        op: Option<ReduceOp>,
        dtype: DType,
        shape: &[usize],
        dim: usize,
    ) -> &mut Self {
        let group = if kind.is_p2p() { GroupId::WORLD } else { group };
        let desc = OpDesc {
            kind,
            group,
            peer,
            op,
            dtype,
            shape: Shape::from_slice(shape),
            dim,
            site,
        };
        let n = if kind.is_p2p() {
            1
        } else {
            self.program
                .groups
                .get(group.0 as usize)
                .map_or(1, |m| m.len().max(1))
        };
        let is_root = peer == Some(self.rank);
        let output = match kind {
            OpKind::Gather if !is_root => None,
            _ => rules::expected_output(&desc, n),
        };
        let root_input =
            (kind == OpKind::Scatter && is_root).then(|| rules::concatenated(&desc, n));
        let id = self.site_id(site);
        let vop = VOp {
            desc,
            output,
            root_input,
            id,
        };
        match &mut self.batch {
            Some(ops) => ops.push(vop),
            None => self.program.ranks[self.rank].push(Item::Op(vop)),
        }
        self
    }

    /// The id of `site`: one per source location, shared by every rank.
    fn site_id(&mut self, site: CallSite) -> SiteId {
        let ids = &mut self.program.site_ids;
        match ids.iter().position(|s| *s == site) {
            Some(i) => SiteId(i as u32),
            None => {
                ids.push(site);
                SiteId(ids.len() as u32 - 1)
            }
        }
    }

    fn last(&mut self) -> Option<&mut VOp> {
        match &mut self.batch {
            Some(ops) => ops.last_mut(),
            None => match self.program.ranks[self.rank].last_mut() {
                Some(Item::Op(op) | Item::Post(op)) => Some(op),
                Some(Item::Batch(ops)) => ops.last_mut(),
                Some(Item::Wait { .. }) | None => None,
            },
        }
    }

    /// Overrides the output shape of the last call (to describe a wrong one).
    pub fn with_output(&mut self, shape: Option<&[usize]>) -> &mut Self {
        if let Some(op) = self.last() {
            op.output = shape.map(Shape::from_slice);
        }
        self
    }

    /// Overrides the root input shape of the last call (`scatter`).
    pub fn with_root_input(&mut self, shape: Option<&[usize]>) -> &mut Self {
        if let Some(op) = self.last() {
            op.root_input = shape.map(Shape::from_slice);
        }
        self
    }

    /// Starts a batch: calls until [`RankBuilder::end_batch`] form one item.
    pub fn batch(&mut self) -> &mut Self {
        self.batch.get_or_insert_with(Vec::new);
        self
    }

    /// Ends the batch begun with [`RankBuilder::batch`].
    pub fn end_batch(&mut self) -> &mut Self {
        if let Some(ops) = self.batch.take() {
            self.program.ranks[self.rank].push(Item::Batch(ops));
        }
        self
    }

    /// `send` of a `dtype` tensor of `shape` to `dst`.
    #[track_caller]
    pub fn send(&mut self, dtype: DType, shape: &[usize], dst: usize) -> &mut Self {
        self.push(
            CallSite::caller(),
            OpKind::Send,
            GroupId::WORLD,
            Some(dst),
            None,
            dtype,
            shape,
            0,
        )
    }

    /// `recv` into a `dtype` tensor of `shape` from `src`.
    #[track_caller]
    pub fn recv(&mut self, dtype: DType, shape: &[usize], src: usize) -> &mut Self {
        self.push(
            CallSite::caller(),
            OpKind::Recv,
            GroupId::WORLD,
            Some(src),
            None,
            dtype,
            shape,
            0,
        )
    }

    /// `isend` of a `dtype` tensor of `shape` to `dst`; returns the post's index for
    /// [`RankBuilder::wait`]. Closes an open batch first (a post is never part of one).
    #[track_caller]
    pub fn isend(&mut self, dtype: DType, shape: &[usize], dst: usize) -> usize {
        self.end_batch();
        self.send(dtype, shape, dst);
        self.make_last_a_post()
    }

    /// `irecv` into a `dtype` tensor of `shape` from `src`; returns the post's index for
    /// [`RankBuilder::wait`].
    #[track_caller]
    pub fn irecv(&mut self, dtype: DType, shape: &[usize], src: usize) -> usize {
        self.end_batch();
        self.recv(dtype, shape, src);
        self.make_last_a_post()
    }

    /// Turns the blocking call just pushed into a post; its index.
    fn make_last_a_post(&mut self) -> usize {
        let items = &mut self.program.ranks[self.rank];
        let at = items.len() - 1;
        if let Item::Op(op) = &items[at] {
            items[at] = Item::Post(op.clone());
        }
        at
    }

    /// `wait` on the post at index `post` (as returned by [`RankBuilder::isend`] or
    /// [`RankBuilder::irecv`]).
    #[track_caller]
    pub fn wait(&mut self, post: usize) -> &mut Self {
        self.end_batch();
        let site = CallSite::caller();
        let id = self.site_id(site);
        self.program.ranks[self.rank].push(Item::Wait { post, site, id });
        self
    }

    /// `broadcast` on group `g`.
    #[track_caller]
    pub fn broadcast(
        &mut self,
        g: GroupId,
        dtype: DType,
        shape: &[usize],
        root: usize,
    ) -> &mut Self {
        self.push(
            CallSite::caller(),
            OpKind::Broadcast,
            g,
            Some(root),
            None,
            dtype,
            shape,
            0,
        )
    }

    /// `reduce` on group `g`.
    #[track_caller]
    pub fn reduce(
        &mut self,
        g: GroupId,
        dtype: DType,
        shape: &[usize],
        root: usize,
        op: ReduceOp,
    ) -> &mut Self {
        self.push(
            CallSite::caller(),
            OpKind::Reduce,
            g,
            Some(root),
            Some(op),
            dtype,
            shape,
            0,
        )
    }

    /// `all_reduce` on group `g`.
    #[track_caller]
    pub fn all_reduce(
        &mut self,
        g: GroupId,
        dtype: DType,
        shape: &[usize],
        op: ReduceOp,
    ) -> &mut Self {
        self.push(
            CallSite::caller(),
            OpKind::AllReduce,
            g,
            None,
            Some(op),
            dtype,
            shape,
            0,
        )
    }

    /// `gather` of an input of `shape` along `dim` to `root` (output shape derived).
    #[track_caller]
    pub fn gather(
        &mut self,
        g: GroupId,
        dtype: DType,
        shape: &[usize],
        root: usize,
        dim: usize,
    ) -> &mut Self {
        self.push(
            CallSite::caller(),
            OpKind::Gather,
            g,
            Some(root),
            None,
            dtype,
            shape,
            dim,
        )
    }

    /// `all_gather` of an input of `shape` along `dim` (output shape derived).
    #[track_caller]
    pub fn all_gather(
        &mut self,
        g: GroupId,
        dtype: DType,
        shape: &[usize],
        dim: usize,
    ) -> &mut Self {
        self.push(
            CallSite::caller(),
            OpKind::AllGather,
            g,
            None,
            None,
            dtype,
            shape,
            dim,
        )
    }

    /// `scatter` into an output of `shape` along `dim` from `root` (root input derived).
    #[track_caller]
    pub fn scatter(
        &mut self,
        g: GroupId,
        dtype: DType,
        shape: &[usize],
        root: usize,
        dim: usize,
    ) -> &mut Self {
        self.push(
            CallSite::caller(),
            OpKind::Scatter,
            g,
            Some(root),
            None,
            dtype,
            shape,
            dim,
        )
    }

    /// `reduce_scatter` of an input of `shape` along `dim` (output shape derived).
    #[track_caller]
    pub fn reduce_scatter(
        &mut self,
        g: GroupId,
        dtype: DType,
        shape: &[usize],
        op: ReduceOp,
        dim: usize,
    ) -> &mut Self {
        self.push(
            CallSite::caller(),
            OpKind::ReduceScatter,
            g,
            None,
            Some(op),
            dtype,
            shape,
            dim,
        )
    }

    /// `all_to_all` of an input of `shape` along `dim`.
    #[track_caller]
    pub fn all_to_all(
        &mut self,
        g: GroupId,
        dtype: DType,
        shape: &[usize],
        dim: usize,
    ) -> &mut Self {
        self.push(
            CallSite::caller(),
            OpKind::AllToAll,
            g,
            None,
            None,
            dtype,
            shape,
            dim,
        )
    }

    /// `barrier` on group `g`.
    #[track_caller]
    pub fn barrier(&mut self, g: GroupId) -> &mut Self {
        self.push(
            CallSite::caller(),
            OpKind::Barrier,
            g,
            None,
            None,
            DType::U8,
            &[],
            0,
        )
    }

    /// Appends a prepared op (as a blocking call, or to the open batch).
    pub fn op(&mut self, vop: VOp) -> &mut Self {
        match &mut self.batch {
            Some(ops) => ops.push(vop),
            None => self.program.ranks[self.rank].push(Item::Op(vop)),
        }
        self
    }
}

impl Drop for RankBuilder<'_> {
    /// A batch left open is closed, so no call is lost.
    fn drop(&mut self) {
        self.end_batch();
    }
}

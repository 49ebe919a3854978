//! The table of communication operations: for each [`OpKind`], the method users call and its
//! arguments in order, each with the role it plays in the call's description.
//!
//! Everything that names or reads calls is derived from this table or checked against it by a
//! test: the kind's properties below (`is_p2p`, `is_rooted`, …), the macro's recognition of
//! calls and of their arguments, `Ctx`/`Comm`/`Batch`/`BatchComm`'s methods (whose names and
//! parameters a runtime test compares with the table) and the `verify::Program` builder (checked
//! the same way). Adding an operation is one row here plus its semantics (rules, verifier,
//! backends); a method name missing from the table is never taken for another kind.

use crate::model::OpKind;

/// What one argument of a communication call is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// The tensor whose dtype and shape the call's description records (see
    /// [`OpDesc`](crate::OpDesc)): the buffer of in-place calls and p2p, the input of most
    /// collectives, the output of `scatter`.
    Described,
    /// The other buffer: a separate output (`gather`'s is an `Option`), or `scatter`'s root
    /// input (an `Option`).
    Other,
    /// The global rank to send to or receive from.
    Peer,
    /// The global rank of the root.
    Root,
    /// The [`ReduceOp`](crate::ReduceOp).
    Op,
    /// The dimension to split or concatenate along.
    Dim,
}

/// One argument: its name in the method's signature and its role.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Param {
    /// The parameter's name in `Ctx`'s method.
    pub name: &'static str,
    /// What it is.
    pub role: Role,
}

use Param as P;
use Role::*;

impl OpKind {
    /// The method name users call (`ctx.all_reduce(…)`), as in `torch.distributed`.
    pub const fn name(self) -> &'static str {
        match self {
            OpKind::Send => "send",
            OpKind::Recv => "recv",
            OpKind::Broadcast => "broadcast",
            OpKind::Reduce => "reduce",
            OpKind::AllReduce => "all_reduce",
            OpKind::Gather => "gather",
            OpKind::AllGather => "all_gather",
            OpKind::Scatter => "scatter",
            OpKind::ReduceScatter => "reduce_scatter",
            OpKind::AllToAll => "all_to_all",
            OpKind::Barrier => "barrier",
        }
    }

    /// The method's arguments after `self`, in order.
    pub const fn params(self) -> &'static [Param] {
        match self {
            OpKind::Send => &[
                P {
                    name: "tensor",
                    role: Described,
                },
                P {
                    name: "dst",
                    role: Peer,
                },
            ],
            OpKind::Recv => &[
                P {
                    name: "tensor",
                    role: Described,
                },
                P {
                    name: "src",
                    role: Peer,
                },
            ],
            OpKind::Broadcast => &[
                P {
                    name: "tensor",
                    role: Described,
                },
                P {
                    name: "root",
                    role: Root,
                },
            ],
            OpKind::Reduce => &[
                P {
                    name: "tensor",
                    role: Described,
                },
                P {
                    name: "root",
                    role: Root,
                },
                P {
                    name: "op",
                    role: Op,
                },
            ],
            OpKind::AllReduce => &[
                P {
                    name: "tensor",
                    role: Described,
                },
                P {
                    name: "op",
                    role: Op,
                },
            ],
            OpKind::Gather => &[
                P {
                    name: "input",
                    role: Described,
                },
                P {
                    name: "output",
                    role: Other,
                },
                P {
                    name: "root",
                    role: Root,
                },
                P {
                    name: "dim",
                    role: Dim,
                },
            ],
            OpKind::AllGather | OpKind::AllToAll => &[
                P {
                    name: "input",
                    role: Described,
                },
                P {
                    name: "output",
                    role: Other,
                },
                P {
                    name: "dim",
                    role: Dim,
                },
            ],
            OpKind::Scatter => &[
                P {
                    name: "input",
                    role: Other,
                },
                P {
                    name: "output",
                    role: Described,
                },
                P {
                    name: "root",
                    role: Root,
                },
                P {
                    name: "dim",
                    role: Dim,
                },
            ],
            OpKind::ReduceScatter => &[
                P {
                    name: "input",
                    role: Described,
                },
                P {
                    name: "output",
                    role: Other,
                },
                P {
                    name: "op",
                    role: Op,
                },
                P {
                    name: "dim",
                    role: Dim,
                },
            ],
            OpKind::Barrier => &[],
        }
    }

    /// The kind whose method is called `name`, if any.
    pub fn from_name(name: &str) -> Option<OpKind> {
        OpKind::ALL.into_iter().find(|k| k.name() == name)
    }

    /// Where the argument with `role` sits in the method's arguments, if the kind has one.
    pub fn position(self, role: Role) -> Option<usize> {
        self.params().iter().position(|p| p.role == role)
    }

    /// Send or receive (the call names a peer).
    pub fn is_p2p(self) -> bool {
        self.position(Peer).is_some()
    }

    /// Collectives with a root (`OpDesc::peer` holds it).
    pub fn is_rooted(self) -> bool {
        self.position(Root).is_some()
    }

    /// Collectives that combine values with a [`ReduceOp`](crate::ReduceOp).
    pub fn is_reducing(self) -> bool {
        self.position(Op).is_some()
    }

    /// Collectives that split or concatenate along a dimension.
    pub fn has_dim(self) -> bool {
        self.position(Dim).is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_found() {
        for k in OpKind::ALL {
            assert_eq!(OpKind::from_name(k.name()), Some(k));
        }
        assert_eq!(OpKind::from_name("isend"), None);
        assert_eq!(OpKind::from_name("Barrier"), None);
    }

    /// Every kind but the barrier describes one tensor; the roles agree with the semantics
    /// the rules and the verifier implement.
    #[test]
    fn roles_match_the_semantics() {
        for k in OpKind::ALL {
            let roles: Vec<Role> = k.params().iter().map(|p| p.role).collect();
            let once = |r: Role| roles.iter().filter(|&&x| x == r).count() <= 1;
            assert!(
                [Described, Other, Peer, Root, Op, Dim]
                    .into_iter()
                    .all(once),
                "{k}"
            );
            assert_eq!(k.position(Described).is_none(), k == OpKind::Barrier, "{k}");
            assert!(!(k.is_p2p() && k.is_rooted()), "{k}");
        }
        let p2p: Vec<_> = OpKind::ALL.into_iter().filter(|k| k.is_p2p()).collect();
        assert_eq!(p2p, [OpKind::Send, OpKind::Recv]);
        let rooted: Vec<_> = OpKind::ALL.into_iter().filter(|k| k.is_rooted()).collect();
        assert_eq!(
            rooted,
            [
                OpKind::Broadcast,
                OpKind::Reduce,
                OpKind::Gather,
                OpKind::Scatter
            ]
        );
        let reducing: Vec<_> = OpKind::ALL
            .into_iter()
            .filter(|k| k.is_reducing())
            .collect();
        assert_eq!(
            reducing,
            [OpKind::Reduce, OpKind::AllReduce, OpKind::ReduceScatter]
        );
    }
}

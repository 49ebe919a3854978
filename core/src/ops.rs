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
    #[inline]
    pub fn is_p2p(self) -> bool {
        self.has(Peer)
    }

    /// Collectives with a root (`OpDesc::peer` holds it).
    #[inline]
    pub fn is_rooted(self) -> bool {
        self.has(Root)
    }

    /// Collectives that combine values with a [`ReduceOp`](crate::ReduceOp).
    #[inline]
    pub fn is_reducing(self) -> bool {
        self.has(Op)
    }

    /// Collectives that split or concatenate along a dimension.
    #[inline]
    pub fn has_dim(self) -> bool {
        self.has(Dim)
    }

    /// Whether the kind's method takes an argument with `role`: one load from [`ROLES`], which
    /// the compiler derives from the table. These predicates run several times for every call
    /// a program makes; searching the table each time cost more than the rest of validation.
    #[inline]
    fn has(self, role: Role) -> bool {
        ROLES[self as usize] & (1 << role as u8) != 0
    }
}

/// Each kind's argument roles as a bit set (bit `role as u8`), indexed by `kind as usize`,
/// computed from [`OpKind::params`] when the crate is compiled.
const ROLES: [u8; OpKind::ALL.len()] = {
    let mut roles = [0u8; OpKind::ALL.len()];
    let mut i = 0;
    while i < OpKind::ALL.len() {
        let kind = OpKind::ALL[i];
        // The index must be the discriminant, or `has` would read another kind's row.
        assert!(
            kind as usize == i,
            "OpKind::ALL is not in declaration order"
        );
        let params = kind.params();
        let mut j = 0;
        while j < params.len() {
            roles[i] |= 1 << params[j].role as u8;
            j += 1;
        }
        i += 1;
    }
    roles
};

/// How a call is spelled: a kind's own method, or one of its list forms.
///
/// torch users pass lists of tensors (`all_gather(tensor_list, tensor)`); rankwise spells those
/// `*_list` methods. A list form moves the same data as its kind along dim 0, on the list's
/// tensors stacked along a new first dimension and the single tensor given a first dimension of
/// 1: `all_gather_list(&x, &mut outs)` with `x: [5]` and four `outs` of `[5]` is the
/// `all_gather` of `[1, 5]` into `[4, 5]` (see [`stacked`]). Every tensor of a list has the shape
/// of the call's single tensor (or, with two lists, of the first list's first tensor), and a
/// list has one tensor per member.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Spelling {
    /// The method's name.
    pub name: &'static str,
    /// The data movement.
    pub kind: OpKind,
    /// The method's arguments after `self`, in order.
    pub params: &'static [Param],
    /// The roles whose argument is a list of tensors (`&[Tensor<T>]`, `&mut [Tensor<T>]`, or an
    /// `Option` of one where the kind's buffer is an `Option`).
    pub lists: &'static [Role],
}

/// `all_gather_list(input, outputs)`: every member's `input` into every member's list.
pub const ALL_GATHER_LIST: Spelling = Spelling {
    name: "all_gather_list",
    kind: OpKind::AllGather,
    params: &[
        P {
            name: "input",
            role: Described,
        },
        P {
            name: "outputs",
            role: Other,
        },
    ],
    lists: &[Other],
};

/// `gather_list(input, outputs, root)`: every member's `input` into the root's list.
pub const GATHER_LIST: Spelling = Spelling {
    name: "gather_list",
    kind: OpKind::Gather,
    params: &[
        P {
            name: "input",
            role: Described,
        },
        P {
            name: "outputs",
            role: Other,
        },
        P {
            name: "root",
            role: Root,
        },
    ],
    lists: &[Other],
};

/// `scatter_list(inputs, output, root)`: tensor `i` of the root's list to member `i`.
pub const SCATTER_LIST: Spelling = Spelling {
    name: "scatter_list",
    kind: OpKind::Scatter,
    params: &[
        P {
            name: "inputs",
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
    ],
    lists: &[Other],
};

/// `reduce_scatter_list(inputs, output, op)`: tensor `i` of every list, reduced, to member `i`.
pub const REDUCE_SCATTER_LIST: Spelling = Spelling {
    name: "reduce_scatter_list",
    kind: OpKind::ReduceScatter,
    params: &[
        P {
            name: "inputs",
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
    ],
    lists: &[Described],
};

/// `all_to_all_list(inputs, outputs)`: tensor `j` of member `i`'s inputs to tensor `i` of member `j`'s outputs.
pub const ALL_TO_ALL_LIST: Spelling = Spelling {
    name: "all_to_all_list",
    kind: OpKind::AllToAll,
    params: &[
        P {
            name: "inputs",
            role: Described,
        },
        P {
            name: "outputs",
            role: Other,
        },
    ],
    lists: &[Described, Other],
};

/// The list forms, one row each.
pub const LIST_FORMS: [Spelling; 5] = [
    ALL_GATHER_LIST,
    GATHER_LIST,
    SCATTER_LIST,
    REDUCE_SCATTER_LIST,
    ALL_TO_ALL_LIST,
];

impl Spelling {
    /// The spelling called `name`: a kind's own method or a list form.
    pub fn from_name(name: &str) -> Option<Spelling> {
        OpKind::from_name(name)
            .map(Spelling::of)
            .or_else(|| LIST_FORMS.into_iter().find(|s| s.name == name))
    }

    /// A kind's own method.
    pub const fn of(kind: OpKind) -> Spelling {
        Spelling {
            name: kind.name(),
            kind,
            params: kind.params(),
            lists: &[],
        }
    }

    /// Whether this is a list form.
    pub fn is_list_form(&self) -> bool {
        !self.lists.is_empty()
    }

    /// Whether the argument with `role` is a list.
    pub fn is_list(&self, role: Role) -> bool {
        self.lists.contains(&role)
    }

    /// Where the argument with `role` sits, if the spelling has one.
    pub fn position(&self, role: Role) -> Option<usize> {
        self.params.iter().position(|p| p.role == role)
    }
}

/// The shape a list form's tensor argument stands for in its kind's description: a list of `n`
/// tensors of shape `s` is `[n, s…]`, a single tensor of a list form `[1, s…]`.
pub fn stacked(count: usize, element: &[usize]) -> Vec<usize> {
    let mut v = Vec::with_capacity(element.len() + 1);
    v.push(count);
    v.extend_from_slice(element);
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn role_bits_match_the_table() {
        let roles = [Described, Other, Peer, Root, Op, Dim];
        for k in OpKind::ALL {
            for role in roles {
                assert_eq!(k.has(role), k.position(role).is_some(), "{k:?} {role:?}");
            }
        }
        // Hand-listed, independent of the table (the other predicates: `roles_match_the_semantics`).
        let dim: Vec<_> = OpKind::ALL.into_iter().filter(|k| k.has_dim()).collect();
        assert_eq!(
            dim,
            [
                OpKind::Gather,
                OpKind::AllGather,
                OpKind::Scatter,
                OpKind::ReduceScatter,
                OpKind::AllToAll
            ]
        );
    }

    #[test]
    fn names_are_unique_and_found() {
        for k in OpKind::ALL {
            assert_eq!(OpKind::from_name(k.name()), Some(k));
        }
        assert_eq!(OpKind::from_name("isend"), None);
        for s in LIST_FORMS {
            assert_eq!(OpKind::from_name(s.name), None, "{}", s.name);
            assert_eq!(Spelling::from_name(s.name), Some(s));
            assert_eq!(s.name.strip_suffix("_list"), Some(s.kind.name()));
        }
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
        // A list form has its kind's roles, without the dim (always 0), and lists in place of
        // tensors only.
        for s in LIST_FORMS {
            let mine: Vec<Role> = s.params.iter().map(|p| p.role).collect();
            let theirs: Vec<Role> = s.kind.params().iter().map(|p| p.role).collect();
            let mut sorted = mine.clone();
            sorted.sort_by_key(|r| *r as u8);
            let mut want: Vec<Role> = theirs.into_iter().filter(|&r| r != Dim).collect();
            want.sort_by_key(|r| *r as u8);
            assert_eq!(sorted, want, "{}", s.name);
            assert!(
                s.lists.iter().all(|r| matches!(r, Described | Other)),
                "{}",
                s.name
            );
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

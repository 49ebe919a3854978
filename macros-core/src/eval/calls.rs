//! Calls: tensor constructors, groups and splits, and every communication call, recorded as
//! an op of the rank's program.

use rankwise_core::model::{GroupId, OpDesc, OpKind, Shape};
use rankwise_core::ops::{Role, Spelling, stacked};
use rankwise_core::verify::{Item, VOp};
use rankwise_core::{DType, ReduceOp, rules};
use syn::spanned::Spanned;
use syn::{Expr, ExprMethodCall, Lit};

use super::scan::{self, ARRAY_PURE, CTX_PURE, PURE, is_comm};
use super::value::*;
use super::{Borrow, Eval, Flow, holds_handle};

/// The list methods that change the list which the macro follows (see `Eval::edit_list`).
const LIST_EDITS: [&str; 16] = [
    "next",
    "push",
    "pop",
    "clear",
    "reverse",
    "truncate",
    "insert",
    "remove",
    "swap",
    "resize",
    "extend",
    "sort",
    "sort_unstable",
    "dedup",
    "retain",
    "sort_by_key",
];

/// The `Option` methods that change the option which the macro follows.
const OPTION_EDITS: [&str; 4] = ["take", "replace", "insert", "get_or_insert"];

/// The longest range an iterator chain is evaluated over (element by element).
const MAX_SEQUENCE: i128 = 1 << 16;

impl Eval<'_> {
    /// Evaluates call arguments in order. `Err` carries the flow to return: the evaluation
    /// returned, or the context was handed to `callee` (reported as RW012).
    fn eval_args<'e>(
        &mut self,
        args: impl IntoIterator<Item = &'e Expr>,
        callee: &str,
    ) -> Result<Vec<Val>, Flow> {
        let mut out = Vec::new();
        for a in args {
            let v = match self.expr(a) {
                Flow::Normal(v) => v,
                other => return Err(other),
            };
            if matches!(v, Val::Ctx) {
                self.unverifiable(
                    a.span(),
                    &format!("the context is passed to {callee}, whose calls the macro cannot see"),
                    "make the communication calls in the program's own body (helpers may compute shapes, peers or data)",
                );
                return Err(Flow::Normal(Val::Unknown));
            }
            if matches!(v, Val::Request(_)) {
                self.unverifiable(
                    a.span(),
                    &format!("a posted request is passed to {callee}, which may wait for it where the macro cannot see"),
                    "call `.wait()` on the request in the program's own body (or leave it to the rank's return)",
                );
                return Err(Flow::Normal(Val::Unknown));
            }
            if let Val::Closure(assigned, ..) = &v {
                // Whoever receives it may call it.
                for n in assigned.clone() {
                    self.havoc(&n);
                }
            }
            out.push(v);
        }
        Ok(out)
    }

    /// After a call to code the macro does not see: every variable an argument lends mutably
    /// (`&mut x`, also inside `Some(&mut x)` or a tuple) may have changed.
    fn havoc_lent<'e>(&mut self, args: impl IntoIterator<Item = &'e Expr>) {
        for a in args {
            let fx = scan::effects(&|f| syn::visit::Visit::visit_expr(f, a));
            for n in self.written(&fx) {
                self.havoc(&n);
            }
            // A variable holding a mutable reference, passed on as it is (`helper(r)`).
            let held: Vec<String> = quote::quote!(#a)
                .into_iter()
                .filter_map(|t| match t {
                    proc_macro2::TokenTree::Ident(i) => Some(i.to_string()),
                    _ => None,
                })
                .filter(|n| self.refs.contains_key(n))
                .collect();
            for n in held {
                self.havoc(&n);
            }
        }
    }

    pub(super) fn call(&mut self, c: &syn::ExprCall) -> Flow {
        // `drop(request)`: the message still completes, by the rank's return at the latest —
        // which is what the model of a request that is never waited for already says.
        if let (Expr::Path(p), [arg]) = (&*c.func, &c.args.iter().collect::<Vec<_>>()[..])
            && p.path.segments.last().is_some_and(|s| s.ident == "drop")
            && matches!(p.path.segments.len(), 1 | 3)
            && let Expr::Path(v) = arg
            && let Some(name) = v.path.get_ident()
            && matches!(self.lookup(&name.to_string()), Some(Val::Request(_)))
        {
            return Flow::Normal(Val::Unit);
        }
        // The guard entry of an inner `#[rankwise::program]` expansion (the attribute twice):
        // it checks and handshakes, outside every schedule, and makes no call of the program.
        if let Expr::Path(p) = &*c.func
            && p.path.leading_colon.is_some()
            && p.path.segments.len() == 4
            && p.path
                .segments
                .iter()
                .zip(["rankwise", "__private", "Guard", "enter"])
                .all(|(s, w)| s.ident == w)
        {
            return Flow::Normal(Val::Unknown);
        }
        let mut args = match self.eval_args(&c.args, "another function") {
            Ok(args) => args,
            Err(flow) => return flow,
        };
        let Expr::Path(p) = &*c.func else {
            self.havoc_lent(&c.args);
            return Flow::Normal(Val::Unknown);
        };
        let segs: Vec<&syn::PathSegment> = p.path.segments.iter().collect();
        let last = segs.last().map(|s| s.ident.to_string()).unwrap_or_default();
        // `Vec::new()`, `Vec::with_capacity(n)` (`std::vec::Vec` too): an empty list. (The
        // prelude's `Vec`: a type of that name defined by the program is not looked for.)
        if matches!(last.as_str(), "new" | "with_capacity")
            && let [prefix @ .., ty, _] = &segs[..]
            && ty.ident == "Vec"
            && prefix
                .iter()
                .all(|s| matches!(s.ident.to_string().as_str(), "std" | "alloc" | "vec"))
        {
            return Flow::Normal(Val::Array(Vec::new()));
        }
        if segs.len() == 1 && last == "Some" {
            return Flow::Normal(Val::Opt(args.into_iter().next().map(Box::new)));
        }
        if args.iter().any(holds_handle) {
            self.unverifiable(
                c.span(),
                "a batch or group handle is passed to another function, whose calls the macro cannot see",
                "record the batch's calls in the program's own body",
            );
            return Flow::Normal(Val::Unknown);
        }
        if segs.len() == 1
            && let Some(Val::Closure(assigned, code, captured)) = self.lookup(&last).cloned()
        {
            // A closure that changes nothing: its value, from its parameters and captures, as
            // they were when it was made (a `move` closure holds copies of them; a later `let`
            // may shadow their names).
            if assigned.is_empty() {
                self.env.push();
                for (n, v) in &captured {
                    self.env.bind(n.clone(), v.clone());
                }
                let v = self.apply(
                    &code.inputs.iter().collect::<Vec<_>>(),
                    &code.body,
                    args,
                    false,
                );
                // It assigns nothing itself, but what it calls may (another closure that
                // does): such a change lands on the copies, and is the variable's too.
                let changed: Vec<String> = captured
                    .iter()
                    .filter(|(n, was)| {
                        format!("{:?}", self.lookup(n)) != format!("{:?}", Some(was))
                    })
                    .map(|(n, _)| n.clone())
                    .collect();
                self.env.pop();
                for n in changed {
                    self.havoc(&n);
                }
                // What it is lent may be written through its parameters (`|r: &mut usize| *r
                // = 1`), which are its own names: forgotten, as for a helper.
                self.havoc_lent(&c.args);
                return Flow::Normal(v);
            }
            for n in &assigned {
                self.havoc(n);
            }
        }
        if segs.len() == 1
            && self.lookup(&last).is_none()
            && let Some(f) = self.shared.helpers.get(&last).cloned()
        {
            // A helper function: it cannot communicate (the context is never passed to it,
            // see `eval_args`), so its value is computed from its arguments alone.
            // With their types: a parameter's type is its argument's, and the return type the
            // value's (see `typed`).
            let params: Vec<syn::Pat> = f
                .sig
                .inputs
                .iter()
                .filter_map(|i| match i {
                    syn::FnArg::Typed(t) => Some(syn::Pat::Type(t.clone())),
                    syn::FnArg::Receiver(_) => None,
                })
                .collect();
            let body = Expr::Block(syn::ExprBlock {
                attrs: Vec::new(),
                label: None,
                block: (*f.block).clone(),
            });
            let v = self.apply(&params.iter().collect::<Vec<_>>(), &body, args, true);
            let v = match &f.sig.output {
                syn::ReturnType::Type(_, ty) => typed(v, ty),
                syn::ReturnType::Default => v,
            };
            self.havoc_lent(&c.args);
            return Flow::Normal(v);
        }
        if let Some(v) = self.mem_fn(p, &c.args, &args) {
            return Flow::Normal(v);
        }
        // `std::cmp::max(a, b)`, `usize::min(a, b)`: the methods, on the first argument.
        if segs.len() >= 2
            && let [Val::Int(a, ta), b] = &args[..]
        {
            let owner = segs[segs.len() - 2].ident.to_string();
            let ta = match IntTy::named(&owner) {
                Some(t) if IntTy::join(*ta, t) == Some(t) => Some(t),
                Some(_) => None,
                None => (owner == "cmp" && matches!(last.as_str(), "max" | "min")).then_some(*ta),
            };
            if let Some(ta) = ta {
                let v = int_method(*a, ta, &last, std::slice::from_ref(b));
                self.havoc_lent(&c.args);
                return Flow::Normal(v);
            }
        }
        if segs.len() >= 2 && segs[segs.len() - 2].ident == "ReduceOp" && last == "PreMulSum" {
            // The scalar is data: a literal is used as is; anything else is compared across
            // ranks at run time by the fingerprint check, so any placeholder will do here.
            let scalar = match c.args.first() {
                Some(Expr::Lit(syn::ExprLit {
                    lit: Lit::Float(f), ..
                })) => f.base10_parse::<f64>().unwrap_or(1.0),
                Some(Expr::Lit(syn::ExprLit {
                    lit: Lit::Int(i), ..
                })) => i.base10_parse::<f64>().unwrap_or(1.0),
                _ => 1.0,
            };
            return Flow::Normal(Val::Op(ReduceOp::PreMulSum(scalar)));
        }
        if segs.len() == 1 && (last == "Ok" || last == "Err") {
            return Flow::Normal(args.into_iter().next().unwrap_or(Val::Unit));
        }
        let is_tensor = segs.len() >= 2 && segs[segs.len() - 2].ident == "Tensor";
        if is_tensor {
            let fish = segs.iter().find_map(|s| match &s.arguments {
                syn::PathArguments::AngleBracketed(a) => turbofish(Some(a)),
                _ => None,
            });
            let fish = fish.or_else(|| c.args.iter().nth(1).and_then(syntactic_dtype));
            let weak = c.args.iter().nth(1).is_some_and(unsuffixed_literal);
            if last == "zeros_like" {
                return Flow::Normal(match args.first() {
                    Some(Val::Tensor(t)) => Val::Tensor(t.clone()),
                    _ => Val::Unknown,
                });
            }
            if let Some(shape) = args.first_mut() {
                *shape = self.concretize(std::mem::replace(shape, Val::Unknown));
            }
            return Flow::Normal(tensor_ctor(&last, &args, fish, weak));
        }
        self.havoc_lent(&c.args);
        Flow::Normal(Val::Unknown)
    }

    pub(super) fn method_call(&mut self, m: &ExprMethodCall) -> Flow {
        let name = m.method.to_string();
        let recv = match self.expr(&m.receiver) {
            Flow::Normal(v) => v,
            other => return other,
        };
        let mut args = match self.eval_args(&m.args, "a method") {
            Ok(args) => args,
            Err(flow) => return flow,
        };
        if matches!(recv, Val::Poison) || args.iter().any(|a| matches!(a, Val::Poison)) {
            return Flow::Normal(Val::Poison);
        }
        self.note_writes_through_closures(m, &args);
        if let Some(flow) = self.unknown_method(m, &name, &recv, &args) {
            return flow;
        }
        // A method a trait of the program defines (`impl Ends for Vec<usize> { fn first … }`):
        // Rust may pick it over the one of that name the macro models.
        if self.shared.trait_methods.contains(&name) {
            self.lost.get_or_insert(super::Lost {
                why: format!(
                    "`{name}` may call the method a trait of this program defines under that \
                     name, which the macro does not follow"
                ),
                help: "give the trait's method a name of its own, or compute the value without it",
            });
            return Flow::Normal(self.unmodelled_method(m, &name, &recv));
        }
        let fish = turbofish(m.turbofish.as_ref());
        // Shapes may use constants from outside the function (see `Val::Sym`).
        if matches!(
            (&recv, name.as_str()),
            (Val::Ctx, "full" | "zeros" | "tensor") | (Val::Tensor(_), "reshape")
        ) && let Some(shape) = args.first_mut()
        {
            *shape = self.concretize(std::mem::replace(shape, Val::Unknown));
        }
        let world_group = || GroupVal {
            id: GroupId::WORLD,
            members: Vec::new(),
        };
        if let Some(v) = self.iterator_method(m, &name, &recv, &args) {
            return Flow::Normal(v);
        }
        let v = match (&recv, name.as_str()) {
            (Val::Ctx, "rank") => Val::usize(self.rank),
            (Val::Ctx, "world") => Val::usize(self.world),
            (Val::Ctx, "full" | "zeros" | "tensor") => {
                let ctor = if name == "tensor" {
                    "from_vec"
                } else {
                    name.as_str()
                };
                tensor_ctor(
                    ctor,
                    &args,
                    fish.or_else(|| m.args.iter().nth(1).and_then(syntactic_dtype)),
                    m.args.iter().nth(1).is_some_and(unsuffixed_literal),
                )
            }
            (Val::Ctx, "world_group") => Val::Group(GroupVal {
                id: GroupId::WORLD,
                members: (0..self.world).collect(),
            }),
            (Val::Ctx, "new_group") => {
                self.check_untainted(m.method.span());
                self.new_group(m, args.into_iter().next())
            }
            (Val::Ctx, "split") => {
                self.check_untainted(m.method.span());
                self.split(m, args.into_iter().next())
            }
            (Val::Ctx, "group") => match args.into_iter().next() {
                Some(Val::Group(g)) => Val::Comm(g),
                _ => {
                    self.unverifiable(m.method.span(), "on a group the macro cannot identify", "create the group with `ctx.new_group([...])` or `ctx.split(...)` in this function, from static members");
                    Val::Unknown
                }
            },
            (Val::Ctx, "batch") => {
                self.batches.push(Vec::new());
                Val::Batch(self.batches.len() - 1)
            }
            (Val::Ctx, "isend" | "irecv") => self.post(m, &args),
            (Val::Request(post), "wait") => self.wait(m, *post),
            (Val::Ctx, n) if is_comm(n) => self.comm(m, &args, world_group(), None),
            (Val::Comm(g), n) if is_comm(n) => self.comm(m, &args, g.clone(), None),
            (Val::Batch(b), n) if is_comm(n) => self.comm(m, &args, world_group(), Some(*b)),
            (Val::BatchComm(b, g), n) if is_comm(n) => self.comm(m, &args, g.clone(), Some(*b)),
            (Val::Batch(b), "group") => match args.into_iter().next() {
                Some(Val::Group(g)) => Val::BatchComm(*b, g),
                _ => {
                    self.unverifiable(
                        m.method.span(),
                        "on a group the macro cannot identify",
                        "create the group with `ctx.new_group([...])` in this function",
                    );
                    Val::Unknown
                }
            },
            (Val::Batch(b), "run") => {
                let ops = std::mem::take(&mut self.batches[*b]);
                if !ops.is_empty() {
                    self.check_untainted(m.method.span());
                }
                self.program.ranks[self.rank].push(Item::Batch(ops));
                Val::Unit
            }
            (Val::Batch(b), "is_empty") => Val::Bool(self.batches[*b].is_empty()),
            (Val::Batch(b), "len") => Val::usize(self.batches[*b].len()),
            (Val::Group(g), "contains") => match args.first() {
                Some(Val::Int(r, _)) => {
                    Val::Bool(usize::try_from(*r).is_ok_and(|r| g.members.contains(&r)))
                }
                _ => Val::Unknown,
            },
            (Val::Group(g), "size") => Val::usize(g.members.len()),
            (Val::Group(g), "members") => {
                Val::Array(g.members.iter().map(|&m| Val::usize(m)).collect())
            }
            (Val::Range { .. }, "collect") => range_vals(&recv).map_or(Val::Unknown, Val::Array),
            (
                Val::Array(a),
                "to_vec" | "clone" | "collect" | "as_slice" | "as_ref" | "to_owned",
            ) => Val::Array(a.clone()),
            (Val::Array(a), "contains") => match args.first() {
                Some(Val::Int(x, _)) if a.iter().all(|v| matches!(v, Val::Int(_, _))) => {
                    Val::Bool(a.iter().any(|v| matches!(v, Val::Int(y, _) if y == x)))
                }
                _ => Val::Unknown,
            },
            (Val::Group(g), "index_of") => match args.first() {
                Some(Val::Int(r, _)) => Val::Opt(
                    g.members
                        .iter()
                        .position(|&x| x as i128 == *r)
                        .map(|i| Box::new(Val::usize(i))),
                ),
                _ => Val::Unknown,
            },
            (
                Val::Range {
                    start,
                    end,
                    step,
                    rev,
                    ty,
                },
                "rev",
            ) => Val::Range {
                start: *start,
                end: *end,
                step: *step,
                rev: !rev,
                ty: *ty,
            },
            (
                Val::Range {
                    start,
                    end,
                    rev: false,
                    ty,
                    ..
                },
                "step_by",
            ) => match args.first() {
                Some(Val::Int(k, _)) if *k > 0 && usize::try_from(*k).is_ok() => Val::Range {
                    start: *start,
                    end: *end,
                    step: *k,
                    rev: false,
                    ty: *ty,
                },
                _ => Val::Unknown,
            },
            (Val::Bool(c), "then_some") => {
                if *c {
                    Val::Opt(args.into_iter().next().map(Box::new))
                } else {
                    Val::Opt(None)
                }
            }
            (Val::Int(..) | Val::Bool(_), n) if scan::assigns_receiver(n) => {
                self.havoc_receiver(&m.receiver);
                Val::Unknown
            }
            (Val::Int(a, t), _) => {
                let v = int_method(*a, *t, &name, &args);
                if matches!(v, Val::Unknown)
                    && is_int_arith(&name)
                    && args.iter().all(|x| matches!(x, Val::Int(..)))
                {
                    self.note_int_unknown(&Expr::MethodCall(m.clone()), *t);
                }
                v
            }
            // Copies: on the same device, or on the host (`to_host`); the shape and dtype stay.
            (Val::Tensor(t), "clone" | "try_clone" | "to_host") => Val::Tensor(t.clone()),
            // The tensor's data: what `ctx.tensor(shape, data)` takes its element type from.
            (Val::Tensor(t), "to_vec" | "into_vec" | "try_to_vec") => {
                t.dtype.map_or(Val::Unknown, Val::Data)
            }
            // Sizing one tensor from another: how torch users size every gather's output.
            (Val::Tensor(t), "shape") => match &t.shape {
                Some(s) => Val::Array(s.iter().map(|&d| Val::usize(d)).collect()),
                None => Val::Unknown,
            },
            (Val::Tensor(t), "numel") => match &t.shape {
                Some(s) => s
                    .iter()
                    .try_fold(1i128, |n, &d| n.checked_mul(d as i128))
                    .map_or(Val::Unknown, |n| IntTy::USIZE.exact(n)),
                None => Val::Unknown,
            },
            (Val::Tensor(t), "ndim") => match &t.shape {
                Some(s) => Val::usize(s.len()),
                None => Val::Unknown,
            },
            (Val::Ctx, "zeros_like" | "to_device") => match args.first() {
                Some(Val::Tensor(t)) => Val::Tensor(t.clone()),
                _ => Val::Unknown,
            },
            (Val::Tensor(t), "reshape") => Val::Tensor(TVal {
                shape: args.first().and_then(shape_of),
                ..t.clone()
            }),
            (Val::Data(d), "to_vec" | "clone" | "to_owned" | "into" | "collect") => Val::Data(*d),
            // `collect::<Vec<f32>>()`: data of a known element type.
            (_, "collect") if fish.is_some() => fish.map_or(Val::Unknown, Val::Data),
            // `as_mut` lends the `Option`: what is written through it is not followed, so the
            // `Option` is forgotten (its value is still what the call returns).
            (Val::Opt(o), "as_mut") => {
                let v = Val::Opt(o.clone());
                self.havoc_receiver(&m.receiver);
                v
            }
            (Val::Opt(o), "as_ref" | "copied" | "cloned") => Val::Opt(o.clone()),
            (Val::Opt(o), "is_some") => Val::Bool(o.is_some()),
            (Val::Opt(o), "is_none") => Val::Bool(o.is_none()),
            (Val::Opt(Some(v)), "unwrap" | "expect" | "unwrap_or" | "unwrap_or_else") => {
                (**v).clone()
            }
            (Val::Opt(None), "unwrap_or") => args.first().cloned().unwrap_or(Val::Unknown),
            (Val::Array(a), "len") => Val::usize(a.len()),
            (Val::Array(a), "is_empty") => Val::Bool(a.is_empty()),
            (Val::Array(a), "first") => Val::Opt(a.first().cloned().map(Box::new)),
            // Out of range is `None`, as in Rust.
            (Val::Array(a), "get") => match args.first() {
                Some(Val::Int(i, _)) => Val::Opt(
                    usize::try_from(*i)
                        .ok()
                        .and_then(|i| a.get(i))
                        .cloned()
                        .map(Box::new),
                ),
                _ => Val::Unknown,
            },
            // A held range (`let mut it = 0..n`) steps as the list of its values.
            (Val::Range { .. }, "next") => {
                match range_vals(&recv).and_then(|list| self.edit_list(m, "next", &list, &args)) {
                    Some(v) => v,
                    None => {
                        self.havoc_receiver(&m.receiver);
                        Val::Unknown
                    }
                }
            }
            (Val::Array(a), n) if LIST_EDITS.contains(&n) => {
                match self.edit_list(m, n, a, &args) {
                    Some(v) => v,
                    // A list inside another value (`lists[0].push(x)`), a reference to one, or
                    // arguments the macro cannot follow: what holds it is forgotten.
                    None => {
                        self.havoc_receiver(&m.receiver);
                        Val::Unknown
                    }
                }
            }
            (Val::Opt(o), n) if OPTION_EDITS.contains(&n) => match self.edit_option(m, n, o, &args)
            {
                Some(v) => v,
                None => {
                    self.havoc_receiver(&m.receiver);
                    Val::Unknown
                }
            },
            (Val::Opt(o), "map" | "filter") => self.option_through(m, name.as_str(), o, &args),
            (Val::Opt(o), "or" | "xor") => match (o, args.first()) {
                (Some(v), Some(Val::Opt(other))) if name == "xor" => match other {
                    Some(_) => Val::Opt(None),
                    None => Val::Opt(Some(v.clone())),
                },
                (Some(v), _) if name == "or" => Val::Opt(Some(v.clone())),
                (None, Some(other @ Val::Opt(_))) => other.clone(),
                _ => Val::Unknown,
            },
            (Val::Opt(o), "and") => match (o, args.first()) {
                (Some(_), Some(other @ Val::Opt(_))) => other.clone(),
                (None, _) => Val::Opt(None),
                _ => Val::Unknown,
            },
            (Val::Array(_), n) if !ARRAY_PURE.contains(&n) => {
                if let Some(name) = scan::base_ident(&m.receiver) {
                    self.havoc(&name);
                }
                Val::Unknown
            }
            _ => self.unmodelled_method(m, &name, &recv),
        };
        Flow::Normal(v)
    }

    /// A method the macro does not model: whatever it borrows mutably may change — its receiver
    /// too (`o.take()`, `o.insert(1)`, `it.next()`), unless its methods cannot change what the
    /// macro knows of it: data's element type, a number's unknown value, a tensor's shape and
    /// type through the tensor's own methods (see `scan::TENSOR_KEEPS`).
    fn unmodelled_method(&mut self, m: &ExprMethodCall, name: &str, recv: &Val) -> Val {
        self.havoc_lent(&m.args);
        let keeps = matches!(
            recv,
            Val::Data(_) | Val::Scalar(_) | Val::Group(_) | Val::Op(_) | Val::Unknown | Val::Poison
        ) || holds_handle(recv)
            || (PURE.contains(&name) && !matches!(recv, Val::Tensor(_)))
            || (matches!(recv, Val::Tensor(_)) && scan::TENSOR_KEEPS.contains(&name))
            // A list's methods are sorted out by `method_call` (`ARRAY_PURE`).
            || matches!(recv, Val::Array(_));
        if !keeps {
            self.havoc_receiver(&m.receiver);
        }
        Val::Unknown
    }

    /// `std::mem::swap(&mut a, &mut b)`, `replace(&mut a, v)` and `take(&mut a)` on variables
    /// (double buffers in a ring, a value handed on): what they do to the variables, and their
    /// value. Only on variables that are not themselves references, and with a value that lends
    /// nothing (see [`mem_call`]); anything else is a call the macro does not follow: its
    /// mutable arguments are forgotten.
    fn mem_fn(
        &mut self,
        p: &syn::ExprPath,
        exprs: &syn::punctuated::Punctuated<Expr, syn::Token![,]>,
        args: &[Val],
    ) -> Option<Val> {
        let (f, lent) = mem_call(p, exprs)?;
        if lent
            .iter()
            .any(|n| self.refs.contains_key(n) || self.lookup(n).is_none())
        {
            return None;
        }
        let old = |me: &Self, i: usize| me.lookup(&lent[i]).cloned().unwrap_or(Val::Unknown);
        match (f, &lent[..], args) {
            ("swap", [a, b], [_, _]) => {
                let (va, vb) = (old(self, 0), old(self, 1));
                self.assign(a, vb);
                self.assign(b, va);
                Some(Val::Unit)
            }
            ("replace", [a], [_, v]) => {
                let was = old(self, 0);
                self.assign(a, v.clone());
                Some(was)
            }
            ("take", [a], [_]) => {
                let was = old(self, 0);
                // What `Default` gives the values the macro follows; anything else is forgotten.
                match &was {
                    Val::Array(_) => self.assign(a, Val::Array(Vec::new())),
                    Val::Int(_, t) => self.assign(a, Val::Int(0, *t)),
                    Val::Bool(_) => self.assign(a, Val::Bool(false)),
                    Val::Opt(_) => self.assign(a, Val::Opt(None)),
                    _ => self.havoc(a),
                }
                Some(was)
            }
            _ => None,
        }
    }

    /// The variable a method that edits its receiver edits: the receiver itself, a variable
    /// that holds no reference (a list inside another value, or behind a reference, is not
    /// followed).
    fn edited(&self, m: &ExprMethodCall) -> Option<String> {
        let mut e = &*m.receiver;
        while let Expr::Paren(p) = e {
            e = &p.expr;
        }
        let name = match e {
            Expr::Path(_) => ident_of(e)?,
            _ => return None,
        };
        (!self.refs.contains_key(&name)).then_some(name)
    }

    /// A closure written at the call (`|&p| p != rank`), applied to `item`, if it assigns
    /// nothing (a closure that does may run other times than the macro would replay).
    fn inline_closure(&mut self, m: &ExprMethodCall, args: &[Val], item: Val) -> Option<Val> {
        self.closure_at(m, args, 0, vec![item])
    }

    /// [`Self::inline_closure`] for the closure written as argument `at`, applied to `inputs`
    /// (`fold`'s closure is its second argument and takes two).
    fn closure_at(
        &mut self,
        m: &ExprMethodCall,
        args: &[Val],
        at: usize,
        inputs: Vec<Val>,
    ) -> Option<Val> {
        let c = match m.args.iter().nth(at) {
            Some(Expr::Closure(c)) => c,
            Some(Expr::Path(p)) => return self.path_as_closure(p, inputs),
            _ => return None,
        };
        if c.inputs.len() != inputs.len()
            || !matches!(args.get(at), Some(Val::Closure(assigned, ..)) if assigned.is_empty())
        {
            return None;
        }
        self.env.push();
        for (p, v) in c.inputs.iter().zip(inputs) {
            self.bind_pat(p, v);
        }
        self.bodies += 1;
        let r = self.expr(&c.body);
        self.bodies -= 1;
        self.env.pop();
        match r {
            Flow::Normal(v) => Some(v),
            _ => None,
        }
    }

    /// A function named where a closure is expected (`map(Vec::as_slice)`, `map(Some)`,
    /// `filter(is_peer)`): a name with a type before it (`Vec::as_slice`, `<[T]>::len`) is a
    /// method called on the one input, as `|x| x.as_slice()` — Rust's method calls are that
    /// function —, and any other name is called with the inputs, as `|x| f(x)`.
    fn path_as_closure(&mut self, p: &syn::ExprPath, inputs: Vec<Val>) -> Option<Val> {
        let names: Vec<syn::Ident> = (0..inputs.len())
            .map(|i| quote::format_ident!("__rankwise_input{i}"))
            .collect();
        let method = p.qself.is_some() || p.path.segments.len() >= 2;
        let call: Expr = match (method, &names[..]) {
            (true, [x]) => {
                let name = &p.path.segments.last()?.ident;
                syn::parse_quote!(#x.#name())
            }
            (true, _) => return None,
            (false, _) => syn::parse_quote!(#p(#(#names),*)),
        };
        self.env.push();
        for (n, v) in names.iter().zip(inputs) {
            self.bind(n.to_string(), v);
        }
        self.bodies += 1;
        let r = self.expr(&call);
        self.bodies -= 1;
        self.env.pop();
        match r {
            Flow::Normal(v) => Some(v),
            _ => None,
        }
    }

    /// A list method that changes the list (`LIST_EDITS`), on a list held by a variable: the
    /// list it leaves, assigned, and the method's value. `None` when the macro cannot follow
    /// it (the receiver, an index out of range — which panics at run time —, elements or a
    /// closure it cannot compute).
    fn edit_list(
        &mut self,
        m: &ExprMethodCall,
        name: &str,
        list: &[Val],
        args: &[Val],
    ) -> Option<Val> {
        let var = self.edited(m)?;
        let mut list = list.to_vec();
        let index = |i: Option<&Val>| match i {
            Some(Val::Int(i, _)) => usize::try_from(*i).ok(),
            _ => None,
        };
        let value = match name {
            "push" => {
                list.push(args.first()?.clone());
                Val::Unit
            }
            "pop" => Val::Opt(list.pop().map(Box::new)),
            // A held iterator (`let mut it = v.iter()`): its items are a list, `next` takes
            // the first (a `Vec` has no `next`, so only an iterator gets here).
            "next" => Val::Opt((!list.is_empty()).then(|| Box::new(list.remove(0)))),
            "clear" => {
                list.clear();
                Val::Unit
            }
            "reverse" => {
                list.reverse();
                Val::Unit
            }
            "truncate" => {
                list.truncate(index(args.first())?);
                Val::Unit
            }
            "insert" => {
                let i = index(args.first()).filter(|&i| i <= list.len())?;
                list.insert(i, args.get(1)?.clone());
                Val::Unit
            }
            "remove" => {
                let i = index(args.first()).filter(|&i| i < list.len())?;
                list.remove(i)
            }
            "swap" => {
                let (i, j) = (index(args.first())?, index(args.get(1))?);
                if i >= list.len() || j >= list.len() {
                    return None;
                }
                list.swap(i, j);
                Val::Unit
            }
            "resize" => {
                let n = index(args.first()).filter(|&n| n as i128 <= super::MAX_REPEAT)?;
                list.resize(n, args.get(1)?.clone());
                Val::Unit
            }
            "extend" => {
                let more = match args.first()? {
                    Val::Array(more) => more.clone(),
                    r @ Val::Range { .. } => range_vals(r)?,
                    _ => return None,
                };
                list.extend(more);
                Val::Unit
            }
            // Integers only: equal ones are alike, so a stable and an unstable sort agree.
            "sort" | "sort_unstable" | "dedup" => {
                let ints = list
                    .iter()
                    .map(|v| match v {
                        Val::Int(i, t) => Some((*i, *t)),
                        _ => None,
                    })
                    .collect::<Option<Vec<_>>>()?;
                let mut ints = ints;
                if name == "dedup" {
                    ints.dedup_by_key(|(i, _)| *i);
                } else {
                    ints.sort_by_key(|(i, _)| *i);
                }
                list = ints.into_iter().map(|(i, t)| Val::Int(i, t)).collect();
                Val::Unit
            }
            // Stable: equal keys keep their order.
            "sort_by_key" => {
                let mut keyed = Vec::new();
                for item in list {
                    match self.inline_closure(m, args, item.clone())? {
                        Val::Int(k, _) => keyed.push((k, item)),
                        _ => return None,
                    }
                }
                keyed.sort_by_key(|(k, _)| *k);
                list = keyed.into_iter().map(|(_, item)| item).collect();
                Val::Unit
            }
            "retain" => {
                let mut kept = Vec::new();
                for item in list {
                    match self.inline_closure(m, args, item.clone())? {
                        Val::Bool(true) => kept.push(item),
                        Val::Bool(false) => {}
                        _ => return None,
                    }
                }
                list = kept;
                Val::Unit
            }
            _ => return None,
        };
        self.assign(&var, Val::Array(list));
        Some(value)
    }

    /// An `Option` method that changes the option (`OPTION_EDITS`), on one held by a
    /// variable: as [`Self::edit_list`].
    fn edit_option(
        &mut self,
        m: &ExprMethodCall,
        name: &str,
        o: &Option<Box<Val>>,
        args: &[Val],
    ) -> Option<Val> {
        let var = self.edited(m)?;
        let (now, value) = match name {
            "take" => (None, Val::Opt(o.clone())),
            "replace" => (Some(Box::new(args.first()?.clone())), Val::Opt(o.clone())),
            "insert" => {
                let x = args.first()?.clone();
                (Some(Box::new(x.clone())), x)
            }
            "get_or_insert" => match o {
                Some(v) => (o.clone(), (**v).clone()),
                None => {
                    let x = args.first()?.clone();
                    (Some(Box::new(x.clone())), x)
                }
            },
            _ => return None,
        };
        self.assign(&var, Val::Opt(now));
        Some(value)
    }

    /// `o.map(f)`, `o.filter(p)` with a closure written at the call.
    fn option_through(
        &mut self,
        m: &ExprMethodCall,
        name: &str,
        o: &Option<Box<Val>>,
        args: &[Val],
    ) -> Val {
        let Some(v) = o else {
            return Val::Opt(None);
        };
        match (name, self.inline_closure(m, args, (**v).clone())) {
            ("map", Some(x)) => Val::Opt(Some(Box::new(x))),
            ("filter", Some(Val::Bool(keep))) => Val::Opt(keep.then(|| v.clone())),
            _ => Val::Unknown,
        }
    }

    /// Forgets the variables behind a method's receiver, which the method may have changed.
    fn havoc_receiver(&mut self, receiver: &Expr) {
        for (n, _) in scan::place_roots(receiver) {
            self.havoc(&n);
        }
    }

    /// The value of a closure's or helper function's `body` with `params` bound to `args`.
    /// A function sees only its parameters (and the helpers); a closure also what it captures.
    /// Anything that does not evaluate to a value (a `return` in a helper, the budget) is
    /// unknown.
    fn apply(&mut self, params: &[&syn::Pat], body: &Expr, args: Vec<Val>, fresh: bool) -> Val {
        if params.len() != args.len() || self.depth >= super::MAX_NESTING {
            return Val::Unknown;
        }
        let saved = fresh.then(|| std::mem::take(&mut self.env));
        self.env.push();
        let outer_params = self.params.len();
        for (p, a) in params.iter().zip(args) {
            super::pat_names(p, &mut self.params);
            self.bind_pat(p, a);
        }
        self.depth += 1;
        self.bodies += 1;
        let r = self.expr(body);
        self.bodies -= 1;
        self.depth -= 1;
        self.params.truncate(outer_params);
        self.env.pop();
        if let Some(env) = saved {
            self.env = env;
        }
        match r {
            Flow::Normal(v) => v,
            Flow::Return if !self.shared.halted() => {
                self.lost.get_or_insert(super::Lost {
                    why: "a closure or helper it calls may return early (`return`, or `?` \
                          on a `None` or on a value the macro cannot tell is a `Some` or an \
                          `Ok`), whose value the macro does not follow"
                        .into(),
                    help: "give the value without an early return (`match`, `if let`, \
                           `map`/`unwrap_or`)",
                });
                Val::Unknown
            }
            _ => Val::Unknown,
        }
    }

    /// Iterator chains over static sequences — ranges and arrays of known length — evaluated
    /// eagerly, closures included: `(0..w).filter(|x| x % 2 == r % 2).collect()`,
    /// `.map(|i| (r + i) % w)`, `.enumerate()`, `.rev()`, `.sum()`. `None` when the receiver
    /// is not such a sequence or the method is not an iterator method modelled here.
    fn iterator_method(
        &mut self,
        m: &ExprMethodCall,
        name: &str,
        recv: &Val,
        args: &[Val],
    ) -> Option<Val> {
        const ADAPTERS: [&str; 34] = [
            "step_by",
            "chain",
            "chunks",
            "windows",
            "partition",
            "fold",
            "max_by_key",
            "min_by_key",
            "take_while",
            "skip_while",
            "product",
            "iter",
            "iter_mut",
            "into_iter",
            "copied",
            "cloned",
            "filter",
            "map",
            "enumerate",
            "take",
            "skip",
            "rev",
            "sum",
            "count",
            "any",
            "all",
            "position",
            "find",
            "max",
            "min",
            "collect",
            "last",
            "nth",
            "zip",
        ];
        if !ADAPTERS.contains(&name) {
            return None;
        }
        // Ranges keep their own `rev`, `step_by` and `collect` (cheaper, and unbounded ends).
        if matches!(recv, Val::Range { .. }) && matches!(name, "rev" | "collect" | "step_by") {
            return None;
        }
        let items: Vec<Val> = match recv {
            Val::Array(a) => a.clone(),
            Val::Range {
                start, end, step, ..
            } => {
                // Never materialise a huge range: such a chain is not a list of ranks.
                if (end - start).max(0) / (*step).max(1) > MAX_SEQUENCE {
                    return Some(Val::Unknown);
                }
                range_vals(recv)?
            }
            _ => return None,
        };
        // The integers of a list and their one type (an empty list's is open).
        let ints_of = |v: &[Val]| -> Option<(Vec<i128>, IntTy)> {
            let mut ty = IntTy::Open;
            let v = v
                .iter()
                .map(|x| match x {
                    Val::Int(i, t) => {
                        ty = IntTy::join(ty, *t)?;
                        Some(*i)
                    }
                    _ => None,
                })
                .collect::<Option<_>>()?;
            Some((v, ty))
        };
        Some(match name {
            "iter" | "iter_mut" | "into_iter" | "copied" | "cloned" | "collect" => {
                Val::Array(items)
            }
            "zip" => match args.first() {
                Some(Val::Array(other)) => Val::Array(
                    items
                        .into_iter()
                        .zip(other.iter().cloned())
                        .map(|(a, b)| Val::Tuple(vec![a, b]))
                        .collect(),
                ),
                Some(r @ Val::Range { .. }) => match range_vals(r) {
                    Some(other) => Val::Array(
                        items
                            .into_iter()
                            .zip(other)
                            .map(|(a, b)| Val::Tuple(vec![a, b]))
                            .collect(),
                    ),
                    None => Val::Unknown,
                },
                _ => Val::Unknown,
            },
            "rev" => Val::Array(items.into_iter().rev().collect()),
            "enumerate" => Val::Array(
                items
                    .into_iter()
                    .enumerate()
                    .map(|(i, v)| Val::Tuple(vec![Val::usize(i), v]))
                    .collect(),
            ),
            "take" | "skip" | "nth" => {
                let Some(Val::Int(k, _)) = args.first() else {
                    return Some(Val::Unknown);
                };
                let k = usize::try_from(*k).ok()?;
                match name {
                    "take" => Val::Array(items.into_iter().take(k).collect()),
                    "skip" => Val::Array(items.into_iter().skip(k).collect()),
                    _ => Val::Opt(items.into_iter().nth(k).map(Box::new)),
                }
            }
            "chain" => match args.first() {
                Some(Val::Array(more)) => {
                    Val::Array(items.into_iter().chain(more.clone()).collect())
                }
                Some(r @ Val::Range { .. }) => match range_vals(r) {
                    Some(more) => Val::Array(items.into_iter().chain(more).collect()),
                    None => Val::Unknown,
                },
                _ => Val::Unknown,
            },
            // A step or a length of 0 panics at run time: unknown.
            "step_by" | "chunks" | "windows" => {
                let k = match args.first() {
                    Some(Val::Int(k, _)) => usize::try_from(*k).ok().filter(|&k| k > 0),
                    _ => None,
                };
                let Some(k) = k else {
                    return Some(Val::Unknown);
                };
                match name {
                    "step_by" => Val::Array(items.into_iter().step_by(k).collect()),
                    "chunks" => {
                        Val::Array(items.chunks(k).map(|c| Val::Array(c.to_vec())).collect())
                    }
                    _ => Val::Array(items.windows(k).map(|c| Val::Array(c.to_vec())).collect()),
                }
            }
            "count" => Val::usize(items.len()),
            "last" => Val::Opt(items.into_iter().last().map(Box::new)),
            // A sum or product the type cannot hold panics or wraps: unknown.
            "sum" | "product" => match ints_of(&items) {
                Some((v, t)) => {
                    let step = |s: i128, &x: &i128| match name {
                        "sum" => s.checked_add(x),
                        _ => s.checked_mul(x),
                    };
                    v.iter()
                        .try_fold(i128::from(name == "product"), step)
                        .map_or(Val::Unknown, |s| t.exact(s))
                }
                None => Val::Unknown,
            },
            // Eager: the closure runs once per item, in order (refused if it assigns, as in
            // `map`).
            "fold" => {
                let mut acc = args.first()?.clone();
                for item in items {
                    match self.closure_at(m, args, 1, vec![acc, item]) {
                        Some(v) => acc = v,
                        None => return Some(Val::Unknown),
                    }
                }
                acc
            }
            "partition" | "take_while" | "skip_while" => {
                let mut kept = Vec::new();
                let mut rest = Vec::new();
                let mut open = true;
                for item in items {
                    // `take_while` and `skip_while` stop calling the closure at its first
                    // `false`: the item it refused and the rest are what is left.
                    if !open {
                        rest.push(item);
                        continue;
                    }
                    match self.inline_closure(m, args, item.clone()) {
                        Some(Val::Bool(true)) => kept.push(item),
                        Some(Val::Bool(false)) => {
                            open = name == "partition";
                            rest.push(item);
                        }
                        _ => return Some(Val::Unknown),
                    }
                }
                match name {
                    "partition" => Val::Tuple(vec![Val::Array(kept), Val::Array(rest)]),
                    "take_while" => Val::Array(kept),
                    _ => Val::Array(rest),
                }
            }
            // Rust's choices among equal keys: the last maximum, the first minimum.
            "max_by_key" | "min_by_key" => {
                let mut best: Option<(i128, Val)> = None;
                for item in items {
                    let Some(Val::Int(k, _)) = self.inline_closure(m, args, item.clone()) else {
                        return Some(Val::Unknown);
                    };
                    let better = best.as_ref().is_none_or(|(b, _)| {
                        if name == "max_by_key" {
                            k >= *b
                        } else {
                            k < *b
                        }
                    });
                    if better {
                        best = Some((k, item));
                    }
                }
                Val::Opt(best.map(|(_, v)| Box::new(v)))
            }
            "max" | "min" => match ints_of(&items) {
                Some((v, t)) => Val::Opt(
                    if name == "max" {
                        v.into_iter().max()
                    } else {
                        v.into_iter().min()
                    }
                    .map(|x| Box::new(Val::Int(x, t))),
                ),
                None => Val::Unknown,
            },
            "filter" | "map" | "any" | "all" | "position" | "find" => {
                // Iterators are lazy: a closure that assigns may run fewer times than the
                // sequence is long (or never), so its effects cannot be replayed here, and
                // `inline_closure` refuses it. (One that assigns nothing is evaluated now, `move`
                // or not: what it captures cannot change while the iterator borrows it, and a
                // `move` copy is taken now.)
                let mut out = Vec::new();
                for (i, item) in items.into_iter().enumerate() {
                    let Some(v) = self.inline_closure(m, args, item.clone()) else {
                        return Some(Val::Unknown);
                    };
                    match (name, v) {
                        ("map", v) => out.push(v),
                        ("filter", Val::Bool(keep)) => {
                            if keep {
                                out.push(item);
                            }
                        }
                        ("any", Val::Bool(true)) => return Some(Val::Bool(true)),
                        ("all", Val::Bool(false)) => return Some(Val::Bool(false)),
                        ("position", Val::Bool(true)) => {
                            return Some(Val::Opt(Some(Box::new(Val::usize(i)))));
                        }
                        ("find", Val::Bool(true)) => return Some(Val::Opt(Some(Box::new(item)))),
                        (_, Val::Bool(_)) if name != "filter" => {}
                        _ => return Some(Val::Unknown),
                    }
                }
                match name {
                    "map" | "filter" => Val::Array(out),
                    "any" => Val::Bool(false),
                    "all" => Val::Bool(true),
                    _ => Val::Opt(None),
                }
            }
            _ => return None,
        })
    }

    /// RW012 for a method the macro does not know called on the context, a batch or a group
    /// communicator (an extension trait's, say), and for a communication method called on
    /// something that may hold one (`pair.0.send(…)`): either may communicate unseen.
    fn unknown_method(
        &mut self,
        m: &ExprMethodCall,
        name: &str,
        recv: &Val,
        args: &[Val],
    ) -> Option<Flow> {
        let known = match recv {
            Val::Ctx => {
                CTX_PURE.contains(&name)
                    || is_comm(name)
                    || matches!(
                        name,
                        "new_group" | "split" | "group" | "batch" | "isend" | "irecv"
                    )
            }
            Val::Request(_) => name == "wait",
            Val::Comm(_) | Val::BatchComm(..) => is_comm(name),
            Val::Batch(_) => is_comm(name) || matches!(name, "group" | "run" | "len" | "is_empty"),
            _ => {
                let comm_name = is_comm(name) || name == "run";
                let may_hold = !matches!(
                    recv,
                    Val::Int(_, _)
                        | Val::Bool(_)
                        | Val::Scalar(_)
                        | Val::Tensor(_)
                        | Val::Group(_)
                        | Val::Range { .. }
                        | Val::Op(_)
                        | Val::Unit
                );
                // Only then is the receiver read (it costs a pass over the variables in scope,
                // and every method call comes through here).
                let mentions = || {
                    scan::communicates(&self.handles(), &|f| {
                        syn::visit::Visit::visit_expr(f, &m.receiver)
                    })
                };
                !(comm_name && may_hold && mentions())
            }
        };
        if known && !args.iter().any(holds_handle) {
            return None;
        }
        self.unverifiable(
            m.method.span(),
            &format!("`{name}` is called on (or with) the context, a batch or a group communicator in a way the macro does not know"),
            "call rankwise's own methods (`ctx.send`, `ctx.group(&g).all_reduce`, `batch.run`, …) directly in the program's body",
        );
        Some(Flow::Normal(Val::Unknown))
    }

    /// `v.iter_mut().for_each(|p| *p = 0)`: a closure given to a method of something that lends
    /// variables mutably may write through what it is handed, whatever the method. What those
    /// variables held is forgotten (as after `let r = &mut x; *r = …`) when such a closure
    /// changes anything, or when a method that calls its argument is given some other function
    /// (`for_each(Vec::clear)`).
    fn note_writes_through_closures(&mut self, m: &ExprMethodCall, args: &[Val]) {
        let lent = scan::lent_mutably(&m.receiver);
        if lent.is_empty() {
            return;
        }
        let writes = |body: &Expr| {
            let fx = scan::effects(&|f| syn::visit::Visit::visit_expr(f, body));
            fx.too_deep
                || !fx.assigned.is_empty()
                || !fx.receivers.is_empty()
                || !fx.written_through.is_empty()
        };
        // Methods that call what they are given: any other function handed to them (`Vec::clear`,
        // a boxed closure, a helper) may write too.
        const CALLS_ITS_ARGUMENT: [&str; 20] = [
            "for_each",
            "try_for_each",
            "map",
            "map_while",
            "filter",
            "filter_map",
            "flat_map",
            "inspect",
            "any",
            "all",
            "position",
            "find",
            "find_map",
            "fold",
            "scan",
            "partition",
            "take_while",
            "skip_while",
            "max_by_key",
            "min_by_key",
        ];
        let calls = CALLS_ITS_ARGUMENT.contains(&m.method.to_string().as_str());
        let any = m.args.iter().zip(args).any(|(e, v)| match (e, v) {
            (Expr::Closure(c), _) => writes(&c.body),
            (_, Val::Closure(_, c, _)) => writes(&c.body),
            (Expr::Lit(_), _) => false,
            _ => calls,
        });
        if any {
            for t in lent {
                self.havoc(&t);
            }
        }
    }

    fn new_group(&mut self, m: &ExprMethodCall, members: Option<Val>) -> Val {
        let Some(members) = members.as_ref().and_then(ints) else {
            self.unverifiable(m.method.span(), "a group whose members the macro cannot compute", "list the members with literals or values computed from `ctx.rank()` and `ctx.world()`");
            return Val::Unknown;
        };
        let sorted = match rules::group(&members, self.world) {
            Ok(sorted) => sorted,
            Err(v) => {
                self.violation(m.method.span(), &v);
                return Val::Poison;
            }
        };
        let ordinal = self.ordinals.entry(sorted.clone()).or_insert(0);
        let key = (sorted.clone(), *ordinal);
        *ordinal += 1;
        let id = match self.registry.get(&key) {
            Some(&id) => id,
            None => {
                let id = self.program.group(&sorted);
                self.registry.insert(key, id);
                id
            }
        };
        Val::Group(GroupVal {
            id,
            members: sorted,
        })
    }

    fn split(&mut self, m: &ExprMethodCall, parts: Option<Val>) -> Val {
        let Some(Val::Array(parts)) = parts else {
            self.unverifiable(m.method.span(), "a split whose parts the macro cannot compute", "list the parts with literals or values computed from `ctx.rank()` and `ctx.world()`");
            return Val::Unknown;
        };
        let Some(lists) = parts.iter().map(ints).collect::<Option<Vec<_>>>() else {
            self.unverifiable(m.method.span(), "a split whose parts the macro cannot compute", "list the parts with literals or values computed from `ctx.rank()` and `ctx.world()`");
            return Val::Unknown;
        };
        if let Err(v) = rules::split(&lists, self.world) {
            self.violation(m.method.span(), &v);
            return Val::Poison;
        }
        let mut mine = Val::Unknown;
        for part in parts {
            let g = self.new_group(m, Some(part));
            if let Val::Group(gv) = &g
                && gv.members.contains(&self.rank)
            {
                mine = g;
            }
        }
        mine
    }

    /// Records one communication call (on `group`, or in batch `batch`): recognise the kind
    /// from the table of operations, read its arguments by role, describe it, note what rustc
    /// must check, register its site and add it to this rank's program.
    fn comm(
        &mut self,
        m: &ExprMethodCall,
        args: &[Val],
        group: GroupVal,
        batch: Option<usize>,
    ) -> Val {
        let span = m.method.span();
        let Some(spelling) = Spelling::from_name(&m.method.to_string()) else {
            // Callers dispatch here only for names in the table; never guess a kind.
            self.unverifiable(
                span,
                &format!("`{}` is not a communication call the macro knows", m.method),
                "use rankwise's communication methods",
            );
            return Val::Poison;
        };
        let kind = spelling.kind;
        if batch.is_none() && !self.check_untainted(span) {
            return Val::Poison;
        }
        if !self.shared.spend(super::analysis::OP_COST) {
            return Val::Poison;
        }
        let call = if spelling.is_list_form() {
            self.list_call_args(m, args, &spelling, &group)
        } else {
            self.call_args(m, args, kind)
        };
        let Some(call) = call else {
            return Val::Poison;
        };
        let desc = self.describe(span, kind, &group, &call);
        self.note_symbolic_split(span, &desc, &group);
        let vop = self.vop(m, &spelling, desc, call.other);
        self.note_dtype(&vop, call.free_arg);
        self.record(vop, batch)
    }

    /// `ctx.isend(&t, dst)` / `ctx.irecv(&mut t, src)`: read like the blocking call, recorded
    /// as a post; the value is the request, whose `wait()` becomes an item of its own.
    fn post(&mut self, m: &ExprMethodCall, args: &[Val]) -> Val {
        let span = m.method.span();
        let blocking = if m.method == "isend" { "send" } else { "recv" };
        let Some(spelling) = Spelling::from_name(blocking) else {
            return Val::Poison;
        };
        if !self.check_untainted(span) || !self.shared.spend(super::analysis::OP_COST) {
            return Val::Poison;
        }
        let Some(call) = self.call_args(m, args, spelling.kind) else {
            return Val::Poison;
        };
        let world = GroupVal {
            id: GroupId::WORLD,
            members: Vec::new(),
        };
        let desc = self.describe(span, spelling.kind, &world, &call);
        let vop = self.vop(m, &spelling, desc, call.other);
        self.note_dtype(&vop, call.free_arg);
        let items = &mut self.program.ranks[self.rank];
        items.push(Item::Post(vop));
        Val::Request(items.len() - 1)
    }

    /// `request.wait()`: blocks until the post at item `post` is matched.
    fn wait(&mut self, m: &ExprMethodCall, post: usize) -> Val {
        let span = m.method.span();
        if !self.check_untainted(span) {
            return Val::Poison;
        }
        let id = self.shared.site(span, || ("wait".to_string(), None));
        let site = self.shared.call_site(span);
        self.program.ranks[self.rank].push(Item::Wait { post, site, id });
        Val::Unit
    }

    /// [`Eval::call_args`] for a list form: each tensor or list read with its role, checked
    /// against the rule of lists, and stacked into the shapes of its kind's description.
    fn list_call_args(
        &mut self,
        m: &ExprMethodCall,
        args: &[Val],
        spelling: &Spelling,
        group: &GroupVal,
    ) -> Option<CallArgs> {
        let span = m.method.span();
        let arg_span = |i: usize| m.args.iter().nth(i).map_or(span, |a| a.span());
        let peer = self.int_arg(m, args, spelling.position(Role::Root), arg_span, "root")?;
        let op = self.op_arg(args, spelling.position(Role::Op), arg_span)?;
        // Each buffer: `Some(tensors)` (one for a single tensor), or `None` for `None`.
        let mut read = |role: Role| -> Option<Option<Vec<TVal>>> {
            let Some(at) = spelling.position(role) else {
                return Some(None);
            };
            let list = spelling.is_list(role);
            let tensors = match (list, args.get(at)) {
                (false, v) => tensor_arg(v).map(|t| t.map(|t| vec![t])),
                (true, Some(Val::Array(a))) => tensors_of(a).map(Some),
                (true, Some(Val::Opt(Some(b)))) => match &**b {
                    Val::Array(a) => tensors_of(a).map(Some),
                    _ => None,
                },
                (true, Some(Val::Opt(None))) => Some(None),
                _ => None,
            };
            let Some(tensors) = tensors else {
                let what = if list {
                    "a list of tensors"
                } else {
                    "a tensor"
                };
                self.unverifiable(
                    arg_span(at),
                    &format!("{what} whose shapes the macro cannot determine"),
                    "build the list in this function with a static length (`vec![…; n]`, \
                     `(0..n).map(…).collect()`), and pass it as `&mut list` or `&mut list[..]`",
                );
                return None;
            };
            if let Some(t) = tensors.iter().flatten().find(|t| t.shape.is_none()) {
                let _ = self.known(t, arg_span(at), m.args.iter().nth(at));
                return None;
            }
            Some(tensors)
        };
        let described = read(Role::Described)?;
        let other = read(Role::Other)?;
        let Some(described) = described else {
            self.unverifiable(
                span,
                "a call without the tensor it needs",
                "pass the tensor",
            );
            return None;
        };
        // rustc gives every tensor of the call one element type: any one known is the dtype.
        // If none is, the call's single (non-list) tensor carries it for rustc (see
        // `call_args`).
        let all = || described.iter().chain(other.iter().flatten());
        // The single tensor is the output (written) when it is the other buffer.
        let bindable = [Role::Described, Role::Other].into_iter().find_map(|role| {
            let at = spelling.position(role)?;
            (!spelling.is_list(role)).then_some((at, role == Role::Other))
        });
        let known = all().find_map(|t| t.dtype);
        let free_arg = if known.is_none() { bindable } else { None };
        let Some(dtype) = known.or(free_arg.map(|_| DType::U8)) else {
            match all().next().cloned() {
                Some(first) => {
                    let _ = self.known(&first, span, None);
                }
                None => self.unverifiable(
                    span,
                    "empty lists, whose element type the macro cannot determine",
                    "give the list one tensor per member of the group",
                ),
            }
            return None;
        };
        let shape_of = |t: &TVal| t.shape.clone().unwrap_or_default();
        // The element shape: the single tensor's, or the first of the described list's.
        let single = [
            (Role::Described, Some(&described)),
            (Role::Other, other.as_ref()),
        ]
        .into_iter()
        .find(|(role, ts)| ts.is_some() && !spelling.is_list(*role))
        .and_then(|(_, ts)| ts.and_then(|ts| ts.first()));
        let element = single
            .or(described.first())
            .map(shape_of)
            .unwrap_or_default();
        let parts = if group.id == GroupId::WORLD {
            self.world
        } else {
            group.members.len()
        };
        let member = group.id == GroupId::WORLD || group.members.contains(&self.rank);
        let stack = |role: Role, ts: &[TVal]| {
            let count = if spelling.is_list(role) { ts.len() } else { 1 };
            stacked(count, &element)
        };
        for (role, ts) in [
            (Role::Described, Some(&described)),
            (Role::Other, other.as_ref()),
        ] {
            let (Some(ts), true) = (ts, spelling.is_list(role) && member) else {
                continue;
            };
            let param = spelling.params[spelling.position(role)?].name;
            let shapes: Vec<Vec<usize>> = ts.iter().map(shape_of).collect();
            let shapes: Vec<&[usize]> = shapes.iter().map(Vec::as_slice).collect();
            if let Err(v) = rules::list(spelling, param, &shapes, &element, parts) {
                self.violation(span, &v);
                return None;
            }
        }
        Some(CallArgs {
            peer,
            dim: Some(0),
            op,
            dtype,
            shape: stack(Role::Described, &described),
            other: other.map(|ts| stack(Role::Other, &ts)),
            free_arg,
        })
    }

    /// Reads a call's arguments by their roles in the table of operations; `None` (with an
    /// error) if one the checks need cannot be computed.
    fn call_args(&mut self, m: &ExprMethodCall, args: &[Val], kind: OpKind) -> Option<CallArgs> {
        let span = m.method.span();
        let arg_span = |i: usize| m.args.iter().nth(i).map_or(span, |a| a.span());
        let at = |role: Role| kind.position(role);
        let rank_role = if kind.is_p2p() {
            Role::Peer
        } else {
            Role::Root
        };
        let peer = self.int_arg(
            m,
            args,
            at(rank_role),
            arg_span,
            if kind.is_p2p() { "peer" } else { "root" },
        )?;
        let dim = self.int_arg(m, args, at(Role::Dim), arg_span, "dim")?;
        let op = self.op_arg(args, at(Role::Op), arg_span)?;
        if kind == OpKind::Barrier {
            return Some(CallArgs {
                peer,
                dim,
                op,
                dtype: DType::U8,
                shape: Vec::new(),
                other: None,
                free_arg: None,
            });
        }
        let Some(t_at) = at(Role::Described) else {
            self.unverifiable(
                span,
                "a call without the tensor it needs",
                "pass the tensor",
            );
            return None;
        };
        let Some(Some(described)) = tensor_arg(args.get(t_at)) else {
            let (why, todo) = self.explain_unknown(
                m.args.iter().nth(t_at),
                "a tensor whose shape and dtype the macro cannot determine",
                "create it in this function with a static shape (`ctx.zeros::<f32>([2, 5])`) or annotate its type",
            );
            self.unverifiable(arg_span(t_at), &why, &todo);
            return None;
        };
        // An element type the macro cannot follow is a variable for rustc (see
        // `lower::dtype_checks`): the lowering binds the argument, whatever its expression; the
        // verifier gets a placeholder it never compares.
        let free = described.dtype.is_none() && described.shape.is_some();
        let (dtype, shape) = match (free, &described.shape) {
            (true, Some(s)) => (DType::U8, s.clone()),
            _ => self.known(&described, arg_span(t_at), m.args.iter().nth(t_at))?,
        };
        // Calls that write their described tensor take it as `&mut`.
        let written = matches!(
            kind,
            OpKind::Recv | OpKind::Broadcast | OpKind::Reduce | OpKind::AllReduce | OpKind::Scatter
        );
        let free_arg = free.then_some((t_at, written));
        let other = match at(Role::Other) {
            None => None,
            Some(o) => match tensor_arg(args.get(o)) {
                Some(None) => None,
                // rustc already holds the other buffer to the described one's element type
                // (one `T` in the signature): only its shape matters here.
                Some(Some(TVal { shape: Some(s), .. })) => Some(s),
                Some(Some(t)) => Some(self.known(&t, arg_span(o), m.args.iter().nth(o))?.1),
                None => {
                    self.unverifiable(arg_span(o), "a tensor whose shape and dtype the macro cannot determine", "create it in this function with a static shape, or pass `None` / `Some(&mut t)` directly");
                    return None;
                }
            },
        };
        Some(CallArgs {
            peer,
            dim,
            op,
            dtype,
            shape,
            other,
            free_arg,
        })
    }

    /// Notes what the macro knows of `vop`'s element type (see `Analysis::free_dtypes`);
    /// `free_arg`: the argument that carries a free one.
    fn note_dtype(&mut self, vop: &VOp, free_arg: Option<(usize, bool)>) {
        let id = vop.id.0;
        if let Some(at) = free_arg {
            self.shared.free_dtypes.insert(id);
            self.shared.free_args.insert(id, at);
            if vop.desc.op.is_some_and(|o| o.is_bitwise()) {
                self.shared.integer_sites.insert(id);
            }
        } else {
            self.shared
                .seen_dtypes
                .entry(id)
                .or_default()
                .insert(vop.desc.dtype);
        }
    }

    /// An integer argument at position `at` (if the kind has one): `Some(None)` if it has none,
    /// `None` (with an error) if it cannot be computed or is negative.
    fn int_arg(
        &mut self,
        m: &ExprMethodCall,
        args: &[Val],
        at: Option<usize>,
        arg_span: impl Fn(usize) -> proc_macro2::Span,
        what: &str,
    ) -> Option<Option<usize>> {
        let Some(i) = at else { return Some(None) };
        match args.get(i) {
            Some(Val::Int(v, _)) if usize::try_from(*v).is_ok() => Some(Some(*v as usize)),
            Some(Val::Int(v, _)) if *v < 0 => {
                self.shared.error(
                    arg_span(i),
                    format!("RW009: {what} {v} is negative (world = {})", self.world),
                );
                None
            }
            _ => {
                let (why, todo) = self.explain_unknown(
                    m.args.iter().nth(i),
                    &format!("a {what} the macro cannot compute"),
                    "compute it from literals, `ctx.rank()` and `ctx.world()`",
                );
                self.unverifiable(arg_span(i), &why, &todo);
                None
            }
        }
    }

    /// The reduce op at position `at` (if the call has one): `Some(None)` if it has none,
    /// `None` (with an error) if the macro cannot tell which op it is.
    fn op_arg(
        &mut self,
        args: &[Val],
        at: Option<usize>,
        arg_span: impl Fn(usize) -> proc_macro2::Span,
    ) -> Option<Option<ReduceOp>> {
        match at.map(|i| (i, args.get(i))) {
            None => Some(None),
            Some((_, Some(Val::Op(o)))) => Some(Some(*o)),
            Some((i, _)) => {
                self.unverifiable(
                    arg_span(i),
                    "a reduce op the macro cannot identify",
                    "name it directly, like `ReduceOp::Sum`",
                );
                None
            }
        }
    }

    /// A tensor's dtype and shape, or `None` (with an error) if either is unknown; `arg`, the
    /// argument that gave it, says where a variable in it was forgotten.
    fn known(
        &mut self,
        t: &TVal,
        span: proc_macro2::Span,
        arg: Option<&Expr>,
    ) -> Option<(DType, Vec<usize>)> {
        match (&t.dtype, &t.shape) {
            (Some(d), Some(s)) => Some((*d, s.clone())),
            (None, _) => {
                self.unverifiable(span, "a tensor whose dtype the macro cannot determine", "give the element type with a literal suffix (`1.0f32`), a turbofish (`zeros::<f32>`) or an annotation (`let t: Tensor<f32>`)");
                None
            }
            (_, None) => {
                let (why, todo) = self.explain_unknown(
                    arg,
                    "a tensor whose shape the macro cannot determine",
                    "build it with a shape of literals or values computed from `ctx.rank()` and `ctx.world()`",
                );
                self.unverifiable(span, &why, &todo);
                None
            }
        }
    }

    /// The call as the verifier sees it.
    fn describe(
        &mut self,
        span: proc_macro2::Span,
        kind: OpKind,
        group: &GroupVal,
        call: &CallArgs,
    ) -> OpDesc {
        OpDesc {
            kind,
            group: if kind.is_p2p() {
                GroupId::WORLD
            } else {
                group.id
            },
            peer: call.peer,
            op: call.op,
            dtype: call.dtype,
            shape: Shape::from_slice(&call.shape),
            dim: call.dim.unwrap_or(0),
            site: self.shared.call_site(span),
        }
    }

    /// A split of a dimension given by a constant from outside the function: the verifier saw
    /// a placeholder divisible by the group size; rustc checks the real value.
    fn note_symbolic_split(&mut self, span: proc_macro2::Span, desc: &OpDesc, group: &GroupVal) {
        if !matches!(desc.kind, OpKind::ReduceScatter | OpKind::AllToAll) {
            return;
        }
        let parts = if group.id == GroupId::WORLD {
            self.world
        } else {
            group.members.len()
        };
        let d = desc.dim;
        let Some(&p) = desc
            .shape
            .get(d)
            .and_then(|x| self.shared.placeholders.get(x))
        else {
            return;
        };
        let what = format!(
            "{} splits dim {d} into {parts} equal parts (world = {})",
            desc.kind, self.world
        );
        self.shared.assert_divisible(super::analysis::Assertion {
            span,
            coefficient: p.coefficient,
            symbol: p.symbol,
            parts,
            what,
        });
    }

    /// The verifier's op: the description, the other buffer's shape in its place, and the
    /// call's site (registered on first sight, with the tensors it borrows).
    fn vop(
        &mut self,
        m: &ExprMethodCall,
        spelling: &Spelling,
        desc: OpDesc,
        other: Option<Vec<usize>>,
    ) -> VOp {
        let kind = desc.kind;
        // The other buffer is scatter's root input, or every other call's separate output,
        // which `rules` compares with the shape the input implies.
        let (output, root_input) = if kind == OpKind::Scatter {
            (None, other)
        } else {
            (other, None)
        };
        let buffers = [
            spelling.position(Role::Described),
            spelling.position(Role::Other),
        ]
        .into_iter()
        .flatten()
        .map(|i| m.args.iter().nth(i).and_then(buffer_of))
        .collect::<Option<Vec<_>>>()
        .map(|v| v.into_iter().flatten().collect());
        // Named as written: `isend` is read as a `send`, but the guard names its own method.
        let id = self
            .shared
            .site(m.method.span(), || (m.method.to_string(), buffers));
        VOp {
            desc,
            output: output.map(|s| Shape::from_slice(&s)),
            root_input: root_input.map(|s| Shape::from_slice(&s)),
            id,
        }
    }

    /// Adds `vop` to the open batch `batch`, or to this rank's program as a call of its own.
    fn record(&mut self, vop: VOp, batch: Option<usize>) -> Val {
        match batch {
            Some(b) => {
                self.batches[b].push(vop);
                Val::Batch(b)
            }
            None => {
                self.program.ranks[self.rank].push(Item::Op(vop));
                Val::Unit
            }
        }
    }
}

/// One call's arguments, read by role.
struct CallArgs {
    /// The argument whose tensor's element type is a variable, if the call's is (`dtype` is
    /// then a placeholder), and whether the call writes it (takes it as `&mut`).
    free_arg: Option<(usize, bool)>,
    peer: Option<usize>,
    dim: Option<usize>,
    op: Option<ReduceOp>,
    /// The described tensor's dtype and shape (see `OpDesc`).
    dtype: DType,
    shape: Vec<usize>,
    /// The other buffer's shape, if one is passed.
    other: Option<Vec<usize>>,
}

/// A tensor argument: `Some(Some(t))` for a tensor (or `Some(t)`), `Some(None)` for `None`,
/// `None` for anything the macro cannot read as a tensor.
fn tensor_arg(v: Option<&Val>) -> Option<Option<TVal>> {
    match v {
        Some(Val::Tensor(t)) => Some(Some(t.clone())),
        Some(Val::Opt(Some(b))) => match &**b {
            Val::Tensor(t) => Some(Some(t.clone())),
            _ => None,
        },
        Some(Val::Opt(None)) => Some(None),
        _ => None,
    }
}

/// The tensors of a list of static length, or `None` if any element is not a tensor.
fn tensors_of(a: &[Val]) -> Option<Vec<TVal>> {
    a.iter()
        .map(|v| match v {
            Val::Tensor(t) => Some(t.clone()),
            _ => None,
        })
        .collect()
}

/// The variable a buffer argument borrows: `Some(None)` for `None`, `None` if the argument is
/// anything but `&x`, `&mut x`, `Some(…)` of those, or `None`. A plain `x` is a reference held
/// in a variable, which may borrow any tensor (`let r = &mut y;`): its call is not batched with
/// others, since the two borrows might overlap.
pub(super) fn buffer_of(e: &Expr) -> Option<Option<Borrow>> {
    match e {
        Expr::Reference(r) => match &*r.expr {
            // A slice of a list borrows the list.
            Expr::Index(ix) if matches!(&*ix.index, Expr::Range(_)) => {
                ident_of(&ix.expr).map(|name| {
                    Some(Borrow {
                        name,
                        mutable: r.mutability.is_some(),
                    })
                })
            }
            Expr::Path(_) => ident_of(&r.expr).map(|name| {
                Some(Borrow {
                    name,
                    mutable: r.mutability.is_some(),
                })
            }),
            _ => None,
        },
        Expr::Path(p) if p.path.is_ident("None") => Some(None),
        Expr::Paren(p) => buffer_of(&p.expr),
        Expr::Call(c)
            if c.args.len() == 1
                && matches!(&*c.func, Expr::Path(p) if p.path.is_ident("Some")) =>
        {
            buffer_of(&c.args[0])
        }
        _ => None,
    }
}

/// `Tensor::full/zeros/from_vec/from_fn` and their `ctx.` forms: the shape from the first
/// argument, the dtype from the value (`full`), the turbofish, or unknown (an annotation may
/// supply it).
pub(super) fn tensor_ctor(name: &str, args: &[Val], fish: Option<DType>, weak: bool) -> Val {
    let shape = args.first().and_then(shape_of);
    let data_dtype = |v: Option<&Val>| match v {
        Some(Val::Data(d)) => Some(*d),
        Some(Val::Array(a)) => a.iter().find_map(|x| match x {
            Val::Scalar(d) => *d,
            Val::Int(_, _) => Some(DType::I32),
            _ => None,
        }),
        _ => None,
    };
    let dtype = match name {
        "full" => match args.get(1) {
            Some(Val::Scalar(d)) => d.or(fish),
            Some(Val::Int(_, _)) => fish.or(Some(DType::I32)),
            _ => fish,
        },
        "from_vec" => fish.or_else(|| data_dtype(args.get(1))),
        "zeros" | "from_fn" => fish,
        _ => return Val::Unknown,
    };
    Val::Tensor(TVal {
        dtype,
        shape,
        weak: weak && fish.is_none() && dtype.is_some(),
    })
}

/// A call of `std::mem::swap`, `replace` or `take` the macro follows: the function's name and
/// the variables it lends (`&mut name` as the places; a value that lends nothing mutably, which
/// could otherwise be a reference the place keeps). Only as `std::mem::…`, `core::mem::…` or
/// `mem::…`: a bare `swap` may be any function.
pub(super) fn mem_call(
    p: &syn::ExprPath,
    exprs: &syn::punctuated::Punctuated<Expr, syn::Token![,]>,
) -> Option<(&'static str, Vec<String>)> {
    let segs = path_idents(p);
    let f = match &segs[..] {
        [m, f] if m == "mem" => f.as_str(),
        [root, m, f] if m == "mem" && matches!(root.as_str(), "std" | "core") => f.as_str(),
        _ => return None,
    };
    let (f, places) = match f {
        "swap" => ("swap", 2),
        "replace" => ("replace", 1),
        "take" => ("take", 1),
        _ => return None,
    };
    let lent: Vec<String> = exprs
        .iter()
        .take(places)
        .map(|e| match e {
            Expr::Reference(r) if r.mutability.is_some() => match &*r.expr {
                Expr::Path(_) => ident_of(&r.expr),
                _ => None,
            },
            _ => None,
        })
        .collect::<Option<_>>()?;
    let lends = exprs.iter().skip(places).any(|e| {
        !scan::effects(&|f| syn::visit::Visit::visit_expr(f, e))
            .assigned
            .is_empty()
            || !scan::lent_mutably(e).is_empty()
    });
    (lent.len() == places && !lends).then_some((f, lent))
}

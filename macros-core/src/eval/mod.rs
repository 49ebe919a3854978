//! Static evaluation of a rank program's body, once per world size and rank.
//!
//! The evaluator walks the function's syntax as an interpreter would, tracking only what the
//! checks need: integers and booleans computed from literals, `ctx.rank()` and `ctx.world()`;
//! tensors' dtypes and shapes; groups; batches; and every communication call, which it records
//! as an op of the rank's program. Everything else is opaque computation and is left alone —
//! unless communication hides in it (under a condition it cannot evaluate, in a `while`/`loop`,
//! in a loop over a run-time collection, in a closure or macro, or in a helper that receives the
//! context), which is RW012: never silently unchecked.

mod calls;
mod scan;
mod shared;
mod value;

use std::collections::HashMap;

use proc_macro2::Span;
use rankwise_runtime::ReduceOp;
use rankwise_runtime::model::GroupId;
use rankwise_runtime::verify::{Program, VOp};
use syn::spanned::Spanned;
use syn::visit::Visit;
use syn::{BinOp, Expr, Pat, Stmt, UnOp};

pub(crate) use scan::COMM;
pub use shared::{Shared, Site};
pub use value::Ratio;

use scan::communicates;
use value::*;

/// Unrolled loop iterations allowed per rank before giving up (compile time must stay small).
const BUDGET: usize = 1 << 20;

/// Evaluates the body for one (world, rank), appending the rank's items to `program`.
pub struct Eval<'a> {
    ctx: String,
    rank: usize,
    world: usize,
    scopes: Vec<Vec<(String, Val)>>,
    batches: Vec<Vec<VOp>>,
    program: &'a mut Program,
    registry: &'a mut HashMap<(Vec<usize>, u32), GroupId>,
    ordinals: HashMap<Vec<usize>, u32>,
    shared: &'a mut Shared,
    budget: usize,
}

impl<'a> Eval<'a> {
    pub fn new(
        ctx: String,
        rank: usize,
        world: usize,
        program: &'a mut Program,
        registry: &'a mut HashMap<(Vec<usize>, u32), GroupId>,
        shared: &'a mut Shared,
    ) -> Self {
        Eval {
            ctx,
            rank,
            world,
            scopes: vec![Vec::new()],
            batches: Vec::new(),
            program,
            registry,
            ordinals: HashMap::new(),
            shared,
            budget: BUDGET,
        }
    }

    /// Evaluates the function body (statements of its block).
    pub fn run(&mut self, body: &syn::Block) {
        let _ = self.block(body);
    }

    /// Replaces constants from outside the function by their placeholders, for use as shapes.
    fn concretize(&mut self, v: Val) -> Val {
        match v {
            Val::Sym { k, sym } => match self.shared.placeholder(k, sym, self.world) {
                Some(x) => Val::Int(x as i128),
                None => Val::Unknown,
            },
            Val::Array(a) => Val::Array(a.into_iter().map(|x| self.concretize(x)).collect()),
            other => other,
        }
    }

    fn unverifiable(&mut self, span: Span, why: &str, todo: &str) {
        self.shared.error(
            span,
            format!("RW012: communication the macro cannot verify: {why}\n= help: {todo}"),
        );
    }

    fn lookup(&self, name: &str) -> Option<&Val> {
        self.scopes
            .iter()
            .rev()
            .find_map(|s| s.iter().rev().find(|(n, _)| n == name).map(|(_, v)| v))
    }

    fn bind(&mut self, name: String, v: Val) {
        if let Some(scope) = self.scopes.last_mut() {
            scope.push((name, v));
        }
    }

    fn assign(&mut self, name: &str, v: Val) {
        for s in self.scopes.iter_mut().rev() {
            if let Some(slot) = s.iter_mut().rev().find(|(n, _)| n == name) {
                slot.1 = v;
                return;
            }
        }
    }

    fn batch_names(&self) -> Vec<String> {
        self.scopes
            .iter()
            .flatten()
            .filter(|(_, v)| matches!(v, Val::Batch(_) | Val::BatchComm(..)))
            .map(|(n, _)| n.clone())
            .collect()
    }

    fn has_comm_expr(&self, e: &Expr) -> bool {
        communicates(&self.ctx, &self.batch_names(), &|f| f.visit_expr(e))
    }

    fn has_comm_block(&self, b: &syn::Block) -> bool {
        communicates(&self.ctx, &self.batch_names(), &|f| f.visit_block(b))
    }

    fn block(&mut self, b: &syn::Block) -> Flow {
        self.scopes.push(Vec::new());
        let mut last = Val::Unit;
        for stmt in &b.stmts {
            match self.stmt(stmt) {
                Flow::Return => {
                    self.scopes.pop();
                    return Flow::Return;
                }
                Flow::Normal(v) => last = v,
            }
        }
        self.scopes.pop();
        Flow::Normal(last)
    }

    fn stmt(&mut self, s: &Stmt) -> Flow {
        match s {
            Stmt::Local(l) => {
                let v = match &l.init {
                    Some(init) => match self.expr(&init.expr) {
                        Flow::Return => return Flow::Return,
                        Flow::Normal(v) => v,
                    },
                    None => Val::Unknown,
                };
                self.bind_pat(&l.pat, v);
                Flow::Normal(Val::Unit)
            }
            Stmt::Expr(e, semi) => match self.expr(e) {
                Flow::Return => Flow::Return,
                Flow::Normal(v) => Flow::Normal(if semi.is_some() { Val::Unit } else { v }),
            },
            Stmt::Macro(m) => {
                self.check_macro(&m.mac);
                Flow::Normal(Val::Unit)
            }
            Stmt::Item(_) => Flow::Normal(Val::Unit),
        }
    }

    fn check_macro(&mut self, m: &syn::Macro) {
        let comm = communicates(&self.ctx, &self.batch_names(), &|f| f.visit_macro(m));
        if !comm {
            return;
        }
        let text = m.tokens.to_string();
        let (why, todo) = if COMM.iter().any(|c| text.contains(&format!(". {c}"))) {
            (
                "a communication call inside a macro invocation",
                "make the call in a statement of its own and pass its result to the macro",
            )
        } else {
            (
                "the context or a batch is handed to a macro, whose expansion the macro cannot see",
                "make the communication calls in the program's own body",
            )
        };
        self.unverifiable(m.span(), why, todo);
    }

    fn bind_pat(&mut self, pat: &Pat, v: Val) {
        match pat {
            Pat::Ident(p) => self.bind(p.ident.to_string(), v),
            Pat::Type(t) => {
                let v = match (v, dtype_of_type(&t.ty)) {
                    (Val::Tensor(mut tv), Some(d)) => {
                        tv.dtype.get_or_insert(d);
                        Val::Tensor(tv)
                    }
                    (Val::Scalar(None), Some(d)) => Val::Scalar(Some(d)),
                    (v, _) => v,
                };
                self.bind_pat(&t.pat, v);
            }
            Pat::Tuple(t) => match v {
                Val::Tuple(vals) if vals.len() == t.elems.len() => {
                    for (p, v) in t.elems.iter().zip(vals) {
                        self.bind_pat(p, v);
                    }
                }
                _ => {
                    for p in &t.elems {
                        self.bind_pat(p, Val::Unknown);
                    }
                }
            },
            _ => {}
        }
    }

    fn expr(&mut self, e: &Expr) -> Flow {
        macro_rules! val {
            ($e:expr) => {
                match self.expr($e) {
                    Flow::Return => return Flow::Return,
                    Flow::Normal(v) => v,
                }
            };
        }
        let v = match e {
            Expr::Lit(l) => lit(&l.lit),
            Expr::Path(p) => self.path(p),
            Expr::Paren(p) => val!(&p.expr),
            Expr::Group(g) => val!(&g.expr),
            Expr::Reference(r) => val!(&r.expr),
            Expr::Try(t) => val!(&t.expr),
            Expr::Block(b) => return self.block(&b.block),
            Expr::Unsafe(u) => return self.block(&u.block),
            Expr::Array(a) => {
                let mut out = Vec::new();
                for x in &a.elems {
                    out.push(val!(x));
                }
                Val::Array(out)
            }
            Expr::Repeat(r) => {
                let x = val!(&r.expr);
                match val!(&r.len) {
                    Val::Int(n) if (0..=4096).contains(&n) => Val::Array(vec![x; n as usize]),
                    _ => Val::Unknown,
                }
            }
            Expr::Tuple(t) => {
                let mut out = Vec::new();
                for x in &t.elems {
                    out.push(val!(x));
                }
                Val::Tuple(out)
            }
            Expr::Cast(c) => {
                let x = val!(&c.expr);
                cast(x, &c.ty)
            }
            Expr::Unary(u) => {
                let x = val!(&u.expr);
                match (&u.op, x) {
                    (UnOp::Neg(_), Val::Int(i)) => i.checked_neg().map_or(Val::Unknown, Val::Int),
                    (UnOp::Not(_), Val::Bool(b)) => Val::Bool(!b),
                    (UnOp::Deref(_), v) => v,
                    (_, Val::Poison) => Val::Poison,
                    (_, Val::Scalar(d)) => Val::Scalar(d),
                    _ => Val::Unknown,
                }
            }
            Expr::Binary(b) => return self.binary(b),
            Expr::Assign(a) => {
                let v = val!(&a.right);
                if let Some(name) = ident_of(&a.left) {
                    self.assign(&name, v);
                }
                Val::Unit
            }
            Expr::Range(r) => {
                let start = match &r.start {
                    Some(s) => val!(s),
                    None => Val::Int(0),
                };
                let end = match &r.end {
                    Some(s) => val!(s),
                    None => Val::Unknown,
                };
                match (start, end) {
                    (Val::Int(a), Val::Int(b)) => {
                        let end = if matches!(r.limits, syn::RangeLimits::Closed(_)) {
                            b + 1
                        } else {
                            b
                        };
                        Val::Range {
                            start: a,
                            end,
                            step: 1,
                            rev: false,
                        }
                    }
                    _ => Val::Unknown,
                }
            }
            Expr::If(i) => return self.if_expr(i),
            Expr::Match(m) => return self.match_expr(m),
            Expr::ForLoop(f) => return self.for_loop(f),
            Expr::While(w) => self.uncounted(&w.body, w.while_token.span, "a `while` loop"),
            Expr::Loop(l) => self.uncounted(&l.body, l.loop_token.span, "a `loop`"),
            Expr::Closure(c) => {
                if self.has_comm_expr(&c.body) {
                    self.unverifiable(
                        c.or1_token.span,
                        "inside a closure, which may run any number of times",
                        "make the calls directly in the program's body",
                    );
                }
                Val::Unknown
            }
            Expr::Return(r) => {
                if let Some(x) = &r.expr {
                    val!(x);
                }
                return Flow::Return;
            }
            Expr::Macro(m) => {
                if m.mac.path.is_ident("vec") {
                    if let Ok(list) = m.mac.parse_body_with(
                        syn::punctuated::Punctuated::<Expr, syn::Token![,]>::parse_terminated,
                    ) {
                        let mut out = Vec::new();
                        for x in &list {
                            out.push(val!(x));
                        }
                        return Flow::Normal(Val::Array(out));
                    }
                }
                self.check_macro(&m.mac);
                Val::Unknown
            }
            Expr::MethodCall(m) => return self.method_call(m),
            Expr::Call(c) => return self.call(c),
            Expr::Index(ix) => {
                let base = val!(&ix.expr);
                let i = val!(&ix.index);
                match (base, i) {
                    (Val::Array(a), Val::Int(i)) if i >= 0 && (i as usize) < a.len() => {
                        a[i as usize].clone()
                    }
                    _ => Val::Unknown,
                }
            }
            Expr::Field(f) => {
                val!(&f.base);
                Val::Unknown
            }
            Expr::Let(l) => {
                val!(&l.expr);
                Val::Unknown
            }
            _ => {
                if self.has_comm_expr(e) {
                    self.unverifiable(
                        e.span(),
                        "inside an expression the macro does not evaluate",
                        "make the call in a statement of its own",
                    );
                }
                Val::Unknown
            }
        };
        Flow::Normal(v)
    }

    /// A loop the macro cannot unroll: fine unless it communicates.
    fn uncounted(&mut self, body: &syn::Block, span: Span, what: &str) -> Val {
        if self.has_comm_block(body) {
            self.unverifiable(
                span,
                &format!("inside {what}, whose iterations the macro cannot count"),
                "use `for` over a range with bounds computed from literals, `ctx.rank()` and `ctx.world()`",
            );
        }
        Val::Unit
    }

    fn path(&mut self, p: &syn::ExprPath) -> Val {
        let segs: Vec<String> = p
            .path
            .segments
            .iter()
            .map(|s| s.ident.to_string())
            .collect();
        if segs.len() == 1 {
            let name = &segs[0];
            if *name == self.ctx {
                return Val::Ctx;
            }
            if name == "None" {
                return Val::Opt(None);
            }
            if let Some(v) = self.lookup(name) {
                return v.clone();
            }
            if is_const_name(name) {
                let sym = self.shared.symbol(&Expr::Path(p.clone()));
                return Val::Sym { k: Ratio::ONE, sym };
            }
            return Val::Unknown;
        }
        if segs.last().is_some_and(|l| is_const_name(l)) && segs.iter().all(|s| s != "ReduceOp") {
            let sym = self.shared.symbol(&Expr::Path(p.clone()));
            return Val::Sym { k: Ratio::ONE, sym };
        }
        if segs.len() >= 2 && segs[segs.len() - 2] == "ReduceOp" {
            let op = match segs[segs.len() - 1].as_str() {
                "Sum" => ReduceOp::Sum,
                "Prod" => ReduceOp::Prod,
                "Min" => ReduceOp::Min,
                "Max" => ReduceOp::Max,
                "Avg" => ReduceOp::Avg,
                "BitAnd" => ReduceOp::BitAnd,
                "BitOr" => ReduceOp::BitOr,
                "BitXor" => ReduceOp::BitXor,
                _ => return Val::Unknown,
            };
            return Val::Op(op);
        }
        Val::Unknown
    }

    fn binary(&mut self, b: &syn::ExprBinary) -> Flow {
        let l = match self.expr(&b.left) {
            Flow::Return => return Flow::Return,
            Flow::Normal(v) => v,
        };
        // Short-circuit like Rust: the right side of `&&`/`||` may not run.
        match (&b.op, &l) {
            (BinOp::And(_), Val::Bool(false)) => return Flow::Normal(Val::Bool(false)),
            (BinOp::Or(_), Val::Bool(true)) => return Flow::Normal(Val::Bool(true)),
            _ => {}
        }
        let r = match self.expr(&b.right) {
            Flow::Return => return Flow::Return,
            Flow::Normal(v) => v,
        };
        let compound = |op: &BinOp| -> Option<BinOp> {
            Some(match op {
                BinOp::AddAssign(_) => BinOp::Add(syn::Token![+](Span::call_site())),
                BinOp::SubAssign(_) => BinOp::Sub(syn::Token![-](Span::call_site())),
                BinOp::MulAssign(_) => BinOp::Mul(syn::Token![*](Span::call_site())),
                BinOp::DivAssign(_) => BinOp::Div(syn::Token![/](Span::call_site())),
                BinOp::RemAssign(_) => BinOp::Rem(syn::Token![%](Span::call_site())),
                BinOp::ShlAssign(_) => BinOp::Shl(syn::Token![<<](Span::call_site())),
                BinOp::ShrAssign(_) => BinOp::Shr(syn::Token![>>](Span::call_site())),
                BinOp::BitAndAssign(_) => BinOp::BitAnd(syn::Token![&](Span::call_site())),
                BinOp::BitOrAssign(_) => BinOp::BitOr(syn::Token![|](Span::call_site())),
                BinOp::BitXorAssign(_) => BinOp::BitXor(syn::Token![^](Span::call_site())),
                _ => return None,
            })
        };
        if let Some(op) = compound(&b.op) {
            let v = binop(&op, l, r);
            if let Some(name) = ident_of(&b.left) {
                self.assign(&name, v);
            }
            return Flow::Normal(Val::Unit);
        }
        let symbolic = matches!(l, Val::Sym { .. }) || matches!(r, Val::Sym { .. });
        match (binop(&b.op, l, r), symbolic) {
            // Other arithmetic on constants alone: the whole expression becomes a symbol (it must
            // be a constant expression, since rustc will evaluate it in a `const` assertion).
            (Val::Unknown, true)
                if !is_comparison(&b.op) && only_constants(&Expr::Binary(b.clone())) =>
            {
                let sym = self.shared.symbol(&Expr::Binary(b.clone()));
                Flow::Normal(Val::Sym { k: Ratio::ONE, sym })
            }
            (v, _) => Flow::Normal(v),
        }
    }

    fn if_expr(&mut self, i: &syn::ExprIf) -> Flow {
        let cond = match self.expr(&i.cond) {
            Flow::Return => return Flow::Return,
            Flow::Normal(v) => v,
        };
        match cond {
            Val::Bool(true) => self.block(&i.then_branch),
            Val::Bool(false) => match &i.else_branch {
                Some((_, e)) => self.expr(e),
                None => Flow::Normal(Val::Unit),
            },
            Val::Poison => Flow::Normal(Val::Poison),
            _ => {
                let comm = self.has_comm_block(&i.then_branch)
                    || i.else_branch
                        .as_ref()
                        .is_some_and(|(_, e)| self.has_comm_expr(e));
                if comm {
                    self.unverifiable(
                        i.if_token.span,
                        "under a condition that depends on run-time data",
                        "branch only on values computed from literals, `ctx.rank()` and `ctx.world()`; if the data decides, \
                         communicate the decision first (e.g. `broadcast` a flag) and make every rank take the same calls",
                    );
                }
                Flow::Normal(Val::Unknown)
            }
        }
    }

    fn match_expr(&mut self, m: &syn::ExprMatch) -> Flow {
        let scrut = match self.expr(&m.expr) {
            Flow::Return => return Flow::Return,
            Flow::Normal(v) => v,
        };
        if let Val::Poison = scrut {
            return Flow::Normal(Val::Poison);
        }
        if matches!(scrut, Val::Int(_) | Val::Bool(_)) {
            for arm in &m.arms {
                if let Some(bound) = pat_matches(&arm.pat, &scrut) {
                    self.scopes.push(bound);
                    let guard_ok = match &arm.guard {
                        Some((_, g)) => match self.expr(g) {
                            Flow::Return => {
                                self.scopes.pop();
                                return Flow::Return;
                            }
                            Flow::Normal(Val::Bool(b)) => Some(b),
                            Flow::Normal(_) => None,
                        },
                        None => Some(true),
                    };
                    match guard_ok {
                        Some(true) => {
                            let r = self.expr(&arm.body);
                            self.scopes.pop();
                            return r;
                        }
                        Some(false) => {
                            self.scopes.pop();
                            continue;
                        }
                        None => {
                            self.scopes.pop();
                            break;
                        }
                    }
                }
            }
        }
        if m.arms.iter().any(|a| self.has_comm_expr(&a.body)) {
            self.unverifiable(
                m.match_token.span,
                "in a `match` on a value that depends on run-time data",
                "match only on values computed from literals, `ctx.rank()` and `ctx.world()`",
            );
        }
        Flow::Normal(Val::Unknown)
    }

    fn for_loop(&mut self, f: &syn::ExprForLoop) -> Flow {
        let iter = match self.expr(&f.expr) {
            Flow::Return => return Flow::Return,
            Flow::Normal(v) => v,
        };
        let values: Option<Vec<Val>> = match iter {
            Val::Range {
                start,
                end,
                step,
                rev,
            } if step > 0 => {
                // Refuse before materialising: a huge range must not exhaust memory or time.
                if end.saturating_sub(start).max(0) / step > self.budget as i128 {
                    self.unverifiable(
                        f.for_token.span,
                        "in a loop with too many iterations to unroll",
                        "check a smaller world size",
                    );
                    return Flow::Normal(Val::Unit);
                }
                let mut v: Vec<i128> = (start..end.max(start)).step_by(step as usize).collect();
                if rev {
                    v.reverse();
                }
                Some(v.into_iter().map(Val::Int).collect())
            }
            Val::Array(a) => Some(a),
            Val::Poison => return Flow::Normal(Val::Unit),
            _ => None,
        };
        let Some(values) = values else {
            if self.has_comm_block(&f.body) {
                self.unverifiable(
                    f.expr.span(),
                    "in a loop over something whose length the macro cannot compute",
                    "loop over a range with bounds computed from literals, `ctx.rank()` and `ctx.world()`",
                );
            }
            return Flow::Normal(Val::Unit);
        };
        if !self.has_comm_block(&f.body) {
            // Nothing to check inside: do not spend the unrolling budget on it.
            return Flow::Normal(Val::Unit);
        }
        for v in values {
            if self.budget == 0 {
                self.unverifiable(
                    f.for_token.span,
                    "in a loop with too many iterations to unroll",
                    "check a smaller world size",
                );
                return Flow::Normal(Val::Unit);
            }
            self.budget -= 1;
            self.scopes.push(Vec::new());
            self.bind_pat(&f.pat, v);
            let r = self.block(&f.body);
            self.scopes.pop();
            if let Flow::Return = r {
                return Flow::Return;
            }
        }
        Flow::Normal(Val::Unit)
    }
}

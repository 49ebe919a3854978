//! Static evaluation of a rank program's body, once per world size and rank.
//!
//! The evaluator walks the function's syntax as an interpreter would, tracking only what the
//! checks need: integers and booleans computed from literals, `ctx.rank()` and `ctx.world()`;
//! tensors' dtypes and shapes; groups; batches; and every communication call, which it records
//! as an op of the rank's program. Everything else is opaque computation and is left alone —
//! unless communication hides in it (under a condition it cannot evaluate, in a `while`/`loop`,
//! in a loop over a run-time collection, in a closure or macro, or in a helper that receives the
//! context), which is RW012: never silently unchecked.

use std::collections::HashMap;

use proc_macro2::Span;
use rankwise_runtime::model::{CallSite, GroupId, OpDesc, OpKind, Shape};
use rankwise_runtime::verify::{Item, Program, SiteId, VOp};
use rankwise_runtime::{DType, ReduceOp};
use syn::spanned::Spanned;
use syn::visit::Visit;
use syn::{BinOp, Expr, ExprMethodCall, Lit, Pat, Stmt, UnOp};

/// Method names that communicate, on a context, a group handle or a batch.
pub(crate) const COMM: [&str; 11] = [
    "send",
    "recv",
    "broadcast",
    "reduce",
    "all_reduce",
    "gather",
    "all_gather",
    "scatter",
    "reduce_scatter",
    "all_to_all",
    "barrier",
];

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 { a } else { gcd(b, a % b) }
}

/// An exact non-negative fraction `num / den` (den > 0, in lowest terms): the coefficient of a
/// constant in a dimension like `CHUNK * 4 / world`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ratio {
    pub num: i128,
    pub den: i128,
}

impl Ratio {
    const ONE: Ratio = Ratio { num: 1, den: 1 };

    fn new(num: i128, den: i128) -> Ratio {
        let g = gcd(num.unsigned_abs() as u64, den.unsigned_abs() as u64).max(1) as i128;
        Ratio {
            num: num / g,
            den: den / g,
        }
    }

    fn mul(self, o: Ratio) -> Option<Ratio> {
        Some(Ratio::new(
            self.num.checked_mul(o.num)?,
            self.den.checked_mul(o.den)?,
        ))
    }

    fn add(self, o: Ratio) -> Option<Ratio> {
        let num = self
            .num
            .checked_mul(o.den)?
            .checked_add(o.num.checked_mul(self.den)?)?;
        Some(Ratio::new(num, self.den.checked_mul(o.den)?))
    }
}

/// Whether an expression is built from literals and constant names only.
fn only_constants(e: &Expr) -> bool {
    quote::quote!(#e).into_iter().all(|t| match t {
        proc_macro2::TokenTree::Ident(i) => is_const_name(&i.to_string()),
        proc_macro2::TokenTree::Group(g) => syn::parse2::<Expr>(g.stream())
            .map(|e| only_constants(&e))
            .unwrap_or(false),
        _ => true,
    })
}

/// Whether a name is spelled like a constant (`CHUNK`, `N_LAYERS`).
fn is_const_name(name: &str) -> bool {
    name.chars().any(|c| c.is_ascii_uppercase())
        && name
            .chars()
            .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
}

/// Standard macros that only format, assert or build vectors: they may mention the context
/// (`println!("{}", ctx.rank())`) without communicating.
const KNOWN_MACROS: [&str; 16] = [
    "println",
    "print",
    "eprintln",
    "eprint",
    "format",
    "write",
    "writeln",
    "assert",
    "assert_eq",
    "assert_ne",
    "debug_assert",
    "debug_assert_eq",
    "debug_assert_ne",
    "panic",
    "dbg",
    "vec",
];

/// Unrolled loop iterations allowed per rank before giving up (compile time must stay small).
const BUDGET: usize = 1 << 20;

/// A communication call site: its span and a short description, indexed by `SiteId`.
pub struct Site {
    pub span: Span,
    pub what: String,
    /// The tensors the call borrows (name, mutably?), or `None` if an argument is not a plain
    /// variable — lowering batches adjacent calls only when their buffers are known disjoint.
    pub buffers: Option<Vec<(String, bool)>>,
}

/// What all evaluations of one function share: the call sites and the errors found.
#[derive(Default)]
pub struct Shared {
    pub sites: Vec<Site>,
    site_ids: HashMap<usize, u32>,
    errors: Vec<(Span, String)>,
    file: Option<&'static str>,
    /// Constant expressions from outside the function, by symbol id.
    pub symbols: Vec<Expr>,
    /// Placeholder dimension values standing for `k · symbol` in the verifier's shapes.
    pub placeholders: HashMap<usize, (Ratio, u32)>,
    /// The placeholder of `1 · symbol` at each world size: (world, value, symbol).
    pub bases: Vec<(usize, usize, u32)>,
    /// Divisibility the verifier could not check (a split of a symbolic dimension):
    /// (call span, coefficient, symbol, parts, what is split).
    pub assertions: Vec<(Span, Ratio, u32, usize, String)>,
}

impl Shared {
    fn site(
        &mut self,
        key: usize,
        span: Span,
        what: impl FnOnce() -> (String, Option<Vec<(String, bool)>>),
    ) -> SiteId {
        let next = self.sites.len() as u32;
        let id = *self.site_ids.entry(key).or_insert(next);
        if id == next {
            let (what, buffers) = what();
            self.sites.push(Site {
                span,
                what,
                buffers,
            });
        }
        SiteId(id)
    }

    fn error(&mut self, span: Span, msg: String) {
        let start = span.start();
        if !self
            .errors
            .iter()
            .any(|(s, m)| s.start() == start && *m == msg)
        {
            self.errors.push((span, msg));
        }
    }

    /// The errors found so far (RW011, RW012), in source order.
    pub fn take_errors(&mut self) -> Vec<(Span, String)> {
        let mut e = std::mem::take(&mut self.errors);
        e.sort_by_key(|(s, _)| (s.start().line, s.start().column));
        e
    }

    fn symbol(&mut self, e: &Expr) -> u32 {
        let text = quote::quote!(#e).to_string();
        match self
            .symbols
            .iter()
            .position(|s| quote::quote!(#s).to_string() == text)
        {
            Some(i) => i as u32,
            None => {
                self.symbols.push(e.clone());
                self.symbols.len() as u32 - 1
            }
        }
    }

    /// The value standing for `k · symbol` at world size `world`: a multiple of every group size
    /// up to 16 and of the world size (so the verifier's divisibility checks pass and rustc does
    /// the real one), times a distinct prime per symbol (so different constants never look equal).
    fn placeholder(&mut self, k: Ratio, sym: u32, world: usize) -> Option<usize> {
        const PRIMES: [u64; 8] = [1009, 1013, 1019, 1021, 1031, 1033, 1039, 1049];
        let lcm = |a: u64, b: u64| a / gcd(a, b) * b;
        let m = lcm(720_720, world as u64);
        let base = m.checked_mul(*PRIMES.get(sym as usize)?)?;
        let (num, den) = (u64::try_from(k.num).ok()?, u64::try_from(k.den).ok()?);
        if base % den != 0 {
            return None;
        }
        let v = usize::try_from((base / den).checked_mul(num)?).ok()?;
        let base = usize::try_from(base).ok()?;
        if !self.bases.contains(&(world, base, sym)) {
            self.bases.push((world, base, sym));
        }
        self.placeholders.insert(v, (k, sym));
        Some(v)
    }

    fn file(&mut self, span: Span) -> &'static str {
        // Leaked once per macro invocation: call sites need a `&'static str`.
        self.file
            .get_or_insert_with(|| Box::leak(span.file().into_boxed_str()))
    }
}

#[derive(Clone, Debug, PartialEq)]
struct GroupVal {
    id: GroupId,
    members: Vec<usize>,
}

#[derive(Clone, Debug)]
struct TVal {
    dtype: Option<DType>,
    shape: Option<Vec<usize>>,
}

#[derive(Clone, Debug)]
enum Val {
    Int(i128),
    Bool(bool),
    /// A number whose value is not known statically, with its type if known.
    Scalar(Option<DType>),
    /// `k ·` a constant defined outside the function (`Shared::symbols[sym]`): usable in shapes,
    /// with checks that depend on its value left to rustc as `const` assertions.
    Sym {
        k: Ratio,
        sym: u32,
    },
    Tensor(TVal),
    Array(Vec<Val>),
    Range {
        start: i128,
        end: i128,
        step: i128,
        rev: bool,
    },
    Group(GroupVal),
    Op(ReduceOp),
    Opt(Option<Box<Val>>),
    Tuple(Vec<Val>),
    /// Follows from an error already reported (an invalid group): anything computed from it
    /// is skipped silently, so one mistake gives one error.
    Poison,
    Ctx,
    Comm(GroupVal),
    Batch(usize),
    BatchComm(usize, GroupVal),
    Unit,
    Unknown,
}

enum Flow {
    Normal(Val),
    Return,
}

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

fn ident_of(e: &Expr) -> Option<String> {
    match e {
        Expr::Path(p) if p.path.segments.len() == 1 && p.qself.is_none() => {
            Some(p.path.segments[0].ident.to_string())
        }
        Expr::Reference(r) => ident_of(&r.expr),
        Expr::Paren(p) => ident_of(&p.expr),
        Expr::Unary(u) if matches!(u.op, UnOp::Deref(_)) => ident_of(&u.expr),
        _ => None,
    }
}

fn dtype_named(name: &str) -> Option<DType> {
    DType::ALL.into_iter().find(|d| d.name() == name)
}

/// The element type named by a type like `f32`, `Tensor<f32>` or `rankwise::Tensor<bf16>`.
fn dtype_of_type(ty: &syn::Type) -> Option<DType> {
    match ty {
        syn::Type::Path(p) => {
            let last = p.path.segments.last()?;
            if let Some(d) = dtype_named(&last.ident.to_string()) {
                return Some(d);
            }
            if let syn::PathArguments::AngleBracketed(a) = &last.arguments {
                for arg in &a.args {
                    if let syn::GenericArgument::Type(t) = arg {
                        return dtype_of_type(t);
                    }
                }
            }
            None
        }
        syn::Type::Reference(r) => dtype_of_type(&r.elem),
        syn::Type::Paren(p) => dtype_of_type(&p.elem),
        _ => None,
    }
}

/// The first turbofish type in a path like `Tensor::<f32>::zeros` or `ctx.zeros::<f32>`.
fn turbofish(args: Option<&syn::AngleBracketedGenericArguments>) -> Option<DType> {
    args?.args.iter().find_map(|a| match a {
        syn::GenericArgument::Type(t) => dtype_of_type(t),
        _ => None,
    })
}

/// Whether `node` contains communication (or hands the context to other code).
fn communicates(ctx: &str, batches: &[String], node: &dyn Fn(&mut CommFinder)) -> bool {
    let mut f = CommFinder {
        ctx: ctx.to_string(),
        batches: batches.to_vec(),
        found: false,
    };
    node(&mut f);
    f.found
}

struct CommFinder {
    ctx: String,
    batches: Vec<String>,
    found: bool,
}

impl<'ast> Visit<'ast> for CommFinder {
    fn visit_expr_method_call(&mut self, m: &'ast ExprMethodCall) {
        let name = m.method.to_string();
        let on_batch = ident_of(&m.receiver).is_some_and(|r| self.batches.contains(&r));
        if COMM.contains(&name.as_str()) || (on_batch && name == "run") {
            self.found = true;
        }
        syn::visit::visit_expr_method_call(self, m);
    }
    fn visit_expr_call(&mut self, c: &'ast syn::ExprCall) {
        if c.args
            .iter()
            .any(|a| ident_of(a).as_deref() == Some(self.ctx.as_str()))
        {
            self.found = true;
        }
        syn::visit::visit_expr_call(self, c);
    }
    fn visit_macro(&mut self, m: &'ast syn::Macro) {
        let text = m.tokens.to_string();
        if COMM.iter().any(|c| text.contains(&format!(". {c}"))) {
            self.found = true;
        }
        // Macros other than the standard formatting and assertion ones may expand to anything:
        // handing them the context (or a batch) is handing it to code the macro cannot see.
        let known = m
            .path
            .get_ident()
            .is_some_and(|i| KNOWN_MACROS.contains(&i.to_string().as_str()));
        let mentions = m.tokens.clone().into_iter().any(|t| match t {
            proc_macro2::TokenTree::Ident(i) => {
                i == self.ctx.as_str() || self.batches.iter().any(|b| i == b.as_str())
            }
            _ => false,
        });
        if !known && mentions {
            self.found = true;
        }
    }
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
            Expr::While(w) => {
                if self.has_comm_block(&w.body) {
                    self.unverifiable(
                        w.while_token.span,
                        "inside a `while` loop, whose iterations the macro cannot count",
                        "use `for` over a range with bounds computed from literals, `ctx.rank()` and `ctx.world()`",
                    );
                }
                Val::Unit
            }
            Expr::Loop(l) => {
                if self.has_comm_block(&l.body) {
                    self.unverifiable(
                        l.loop_token.span,
                        "inside a `loop`, whose iterations the macro cannot count",
                        "use `for` over a range with bounds computed from literals, `ctx.rank()` and `ctx.world()`",
                    );
                }
                Val::Unit
            }
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

    fn call(&mut self, c: &syn::ExprCall) -> Flow {
        let mut args = Vec::new();
        for a in &c.args {
            if ident_of(a).as_deref() == Some(self.ctx.as_str()) {
                self.unverifiable(
                    a.span(),
                    "the context is passed to another function, whose calls the macro cannot see",
                    "make the communication calls in the program's own body (helpers may compute shapes, peers or data)",
                );
                return Flow::Normal(Val::Unknown);
            }
            match self.expr(a) {
                Flow::Return => return Flow::Return,
                Flow::Normal(v) => args.push(v),
            }
        }
        if args
            .iter()
            .any(|v| matches!(v, Val::Batch(_) | Val::BatchComm(..) | Val::Comm(_)))
        {
            self.unverifiable(
                c.span(),
                "a batch or group handle is passed to another function, whose calls the macro cannot see",
                "record the batch's calls in the program's own body",
            );
            return Flow::Normal(Val::Unknown);
        }
        let Expr::Path(p) = &*c.func else {
            return Flow::Normal(Val::Unknown);
        };
        let segs: Vec<&syn::PathSegment> = p.path.segments.iter().collect();
        let last = segs.last().map(|s| s.ident.to_string()).unwrap_or_default();
        if segs.len() == 1 && last == "Some" {
            return Flow::Normal(Val::Opt(args.into_iter().next().map(Box::new)));
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
            if let Some(shape) = args.first_mut() {
                *shape = self.concretize(std::mem::replace(shape, Val::Unknown));
            }
            return Flow::Normal(tensor_ctor(&last, &args, fish));
        }
        Flow::Normal(Val::Unknown)
    }

    fn method_call(&mut self, m: &ExprMethodCall) -> Flow {
        let name = m.method.to_string();
        let recv = match self.expr(&m.receiver) {
            Flow::Return => return Flow::Return,
            Flow::Normal(v) => v,
        };
        let mut args = Vec::new();
        for a in &m.args {
            if ident_of(a).as_deref() == Some(self.ctx.as_str()) {
                self.unverifiable(
                    a.span(),
                    "the context is passed to a method, whose calls the macro cannot see",
                    "make the communication calls in the program's own body",
                );
                return Flow::Normal(Val::Unknown);
            }
            match self.expr(a) {
                Flow::Return => return Flow::Return,
                Flow::Normal(v) => args.push(v),
            }
        }
        if matches!(recv, Val::Poison) || args.iter().any(|a| matches!(a, Val::Poison)) {
            return Flow::Normal(Val::Poison);
        }
        let fish = turbofish(m.turbofish.as_ref());
        // Shapes may use constants from outside the function (see `Val::Sym`).
        if matches!(
            (&recv, name.as_str()),
            (Val::Ctx, "full" | "zeros" | "tensor") | (Val::Tensor(_), "reshape")
        ) {
            if let Some(shape) = args.first_mut() {
                *shape = self.concretize(std::mem::replace(shape, Val::Unknown));
            }
        }
        let world_group = || GroupVal {
            id: GroupId::WORLD,
            members: Vec::new(),
        };
        let v = match (&recv, name.as_str()) {
            (Val::Ctx, "rank") => Val::Int(self.rank as i128),
            (Val::Ctx, "world") => Val::Int(self.world as i128),
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
                )
            }
            (Val::Ctx, "world_group") => Val::Group(GroupVal {
                id: GroupId::WORLD,
                members: (0..self.world).collect(),
            }),
            (Val::Ctx, "new_group") => self.new_group(m, args.into_iter().next()),
            (Val::Ctx, "split") => self.split(m, args.into_iter().next()),
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
            (Val::Ctx, n) if COMM.contains(&n) => self.comm(m, &args, world_group(), None),
            (Val::Comm(g), n) if COMM.contains(&n) => self.comm(m, &args, g.clone(), None),
            (Val::Batch(b), n) if COMM.contains(&n) => self.comm(m, &args, world_group(), Some(*b)),
            (Val::BatchComm(b, g), n) if COMM.contains(&n) => {
                self.comm(m, &args, g.clone(), Some(*b))
            }
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
                self.program.ranks[self.rank].push(Item::Batch(ops));
                Val::Unit
            }
            (Val::Batch(b), "len") => Val::Int(self.batches[*b].len() as i128),
            (Val::Group(g), "contains") => match args.first() {
                Some(Val::Int(r)) => Val::Bool(g.members.contains(&(*r as usize))),
                _ => Val::Unknown,
            },
            (Val::Group(g), "size") => Val::Int(g.members.len() as i128),
            (Val::Group(g), "members") => {
                Val::Array(g.members.iter().map(|&m| Val::Int(m as i128)).collect())
            }
            (Val::Range { .. }, "collect") => match ints(&recv) {
                Some(v) => Val::Array(v.into_iter().map(|x| Val::Int(x as i128)).collect()),
                None => Val::Unknown,
            },
            (Val::Array(a), "to_vec" | "clone" | "collect") => Val::Array(a.clone()),
            (Val::Group(g), "index_of") => match args.first() {
                Some(Val::Int(r)) => Val::Opt(
                    g.members
                        .iter()
                        .position(|&x| x as i128 == *r)
                        .map(|i| Box::new(Val::Int(i as i128))),
                ),
                _ => Val::Unknown,
            },
            (
                Val::Range {
                    start,
                    end,
                    step,
                    rev,
                },
                "rev",
            ) => Val::Range {
                start: *start,
                end: *end,
                step: *step,
                rev: !rev,
            },
            (
                Val::Range {
                    start,
                    end,
                    rev: false,
                    ..
                },
                "step_by",
            ) => match args.first() {
                Some(Val::Int(k)) if *k > 0 => Val::Range {
                    start: *start,
                    end: *end,
                    step: *k,
                    rev: false,
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
            (Val::Int(a), _) => int_method(*a, &name, &args),
            (Val::Tensor(t), "clone") => Val::Tensor(t.clone()),
            (Val::Tensor(t), "reshape") => match args.first().and_then(shape_of) {
                Some(s) => Val::Tensor(TVal {
                    dtype: t.dtype,
                    shape: Some(s),
                }),
                None => Val::Tensor(TVal {
                    dtype: t.dtype,
                    shape: None,
                }),
            },
            (Val::Opt(o), "as_mut" | "as_ref") => Val::Opt(o.clone()),
            (Val::Array(a), "len") => Val::Int(a.len() as i128),
            _ => Val::Unknown,
        };
        Flow::Normal(v)
    }

    fn new_group(&mut self, m: &ExprMethodCall, members: Option<Val>) -> Val {
        let Some(members) = members.as_ref().and_then(ints) else {
            self.unverifiable(m.method.span(), "a group whose members the macro cannot compute", "list the members with literals or values computed from `ctx.rank()` and `ctx.world()`");
            return Val::Unknown;
        };
        let mut sorted = members.clone();
        sorted.sort_unstable();
        let problem = if sorted.is_empty() {
            Some("a group needs at least one member".to_string())
        } else if let Some(w) = sorted.windows(2).find(|w| w[0] == w[1]) {
            Some(format!("rank {} is listed twice", w[0]))
        } else {
            sorted
                .iter()
                .find(|&&r| r >= self.world)
                .map(|r| format!("rank {r} is outside a world of {} ranks", self.world))
        };
        if let Some(p) = problem {
            self.shared.error(
                m.method.span(),
                format!("RW011: invalid group {members:?} (world = {}): {p}\n= help: list each member once, every one below the world size", self.world),
            );
            return Val::Poison;
        }
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
        let mut mine = Val::Unknown;
        for part in parts {
            let g = self.new_group(m, Some(part));
            if let Val::Group(gv) = &g {
                if gv.members.contains(&self.rank) {
                    mine = g;
                }
            }
        }
        mine
    }

    /// Records one communication call (on `group`, or in batch `batch`).
    fn comm(
        &mut self,
        m: &ExprMethodCall,
        args: &[Val],
        group: GroupVal,
        batch: Option<usize>,
    ) -> Val {
        let name = m.method.to_string();
        let kind = match name.as_str() {
            "send" => OpKind::Send,
            "recv" => OpKind::Recv,
            "broadcast" => OpKind::Broadcast,
            "reduce" => OpKind::Reduce,
            "all_reduce" => OpKind::AllReduce,
            "gather" => OpKind::Gather,
            "all_gather" => OpKind::AllGather,
            "scatter" => OpKind::Scatter,
            "reduce_scatter" => OpKind::ReduceScatter,
            "all_to_all" => OpKind::AllToAll,
            _ => OpKind::Barrier,
        };
        let span = m.method.span();
        let arg_span = |i: usize| m.args.iter().nth(i).map_or(span, |a| a.span());
        // Positions of (main tensor, output, rank, op, dim) in the argument list, by kind.
        let (t_at, out_at, rank_at, op_at, dim_at) = arg_layout(kind);
        let need_int = |me: &mut Self, at: Option<usize>, what: &str| -> Option<Option<usize>> {
            let Some(i) = at else { return Some(None) };
            match args.get(i) {
                Some(Val::Int(v)) if *v >= 0 => Some(Some(*v as usize)),
                Some(Val::Int(v)) => {
                    me.shared.error(
                        arg_span(i),
                        format!("RW009: {what} {v} is negative (world = {})", me.world),
                    );
                    None
                }
                _ => {
                    me.unverifiable(
                        arg_span(i),
                        &format!("a {what} the macro cannot compute"),
                        "compute it from literals, `ctx.rank()` and `ctx.world()`",
                    );
                    None
                }
            }
        };
        let Some(peer) = need_int(self, rank_at, if kind.is_p2p() { "peer" } else { "root" })
        else {
            return Val::Unknown;
        };
        let Some(dim) = need_int(self, dim_at, "dim") else {
            return Val::Unknown;
        };
        let op = match op_at.map(|i| args.get(i)) {
            None => None,
            Some(Some(Val::Op(o))) => Some(*o),
            Some(_) => {
                self.unverifiable(
                    arg_span(op_at.unwrap_or(0)),
                    "a reduce op the macro cannot identify",
                    "name it directly, like `ReduceOp::Sum`",
                );
                return Val::Unknown;
            }
        };
        // The tensor whose shape must agree (see `OpDesc`), and the optional extra buffer.
        let tensor = |v: Option<&Val>| -> Option<Option<TVal>> {
            match v {
                Some(Val::Tensor(t)) => Some(Some(t.clone())),
                Some(Val::Opt(Some(b))) => match &**b {
                    Val::Tensor(t) => Some(Some(t.clone())),
                    _ => None,
                },
                Some(Val::Opt(None)) => Some(None),
                _ => None,
            }
        };
        let (main, extra) = match (t_at, out_at) {
            (None, _) => (None, None),
            (Some(t), o) => {
                let Some(main) = tensor(args.get(t)) else {
                    self.unverifiable(arg_span(t), "a tensor whose shape and dtype the macro cannot determine", "create it in this function with a static shape (`ctx.zeros::<f32>([2, 5])`) or annotate its type");
                    return Val::Unknown;
                };
                let extra = match o {
                    None => None,
                    Some(o) => match tensor(args.get(o)) {
                        Some(x) => x,
                        None => {
                            self.unverifiable(arg_span(o), "a tensor whose shape and dtype the macro cannot determine", "create it in this function with a static shape, or pass `None` / `Some(&mut t)` directly");
                            return Val::Unknown;
                        }
                    },
                };
                (main, extra)
            }
        };
        let known = |me: &mut Self, t: &TVal, i: usize| -> Option<(DType, Vec<usize>)> {
            match (&t.dtype, &t.shape) {
                (Some(d), Some(s)) => Some((*d, s.clone())),
                (None, _) => {
                    me.unverifiable(arg_span(i), "a tensor whose dtype the macro cannot determine", "give the element type with a literal suffix (`1.0f32`), a turbofish (`zeros::<f32>`) or an annotation (`let t: Tensor<f32>`)");
                    None
                }
                (_, None) => {
                    me.unverifiable(arg_span(i), "a tensor whose shape the macro cannot determine", "build it with a shape of literals or values computed from `ctx.rank()` and `ctx.world()`");
                    None
                }
            }
        };
        let (dtype, shape, output, root_input) = match (kind, main) {
            (OpKind::Barrier, _) => (DType::U8, Vec::new(), None, None),
            (OpKind::Scatter, Some(out)) => {
                let Some((d, s)) = known(self, &out, 1) else {
                    return Val::Unknown;
                };
                let root_input = match &extra {
                    Some(t) => match known(self, t, 0) {
                        Some((_, s)) => Some(s),
                        None => return Val::Unknown,
                    },
                    None => None,
                };
                (d, s, None, root_input)
            }
            (_, Some(t)) => {
                let Some((d, s)) = known(self, &t, 0) else {
                    return Val::Unknown;
                };
                let output = match &extra {
                    Some(o) => match known(self, o, 1) {
                        Some((_, s)) => Some(s),
                        None => return Val::Unknown,
                    },
                    None => None,
                };
                (d, s, output, None)
            }
            (_, None) => {
                self.unverifiable(
                    span,
                    "a call without the tensor it needs",
                    "pass the tensor",
                );
                return Val::Unknown;
            }
        };
        let gid = if kind.is_p2p() {
            GroupId::WORLD
        } else {
            group.id
        };
        let file = self.shared.file(span);
        let start = span.start();
        let site = CallSite {
            file,
            line: start.line as u32,
            column: start.column as u32 + 1,
        };
        let desc = OpDesc {
            kind,
            group: gid,
            peer,
            op,
            dtype,
            shape: Shape::from_slice(&shape),
            dim: dim.unwrap_or(0),
            site,
        };
        // A split of a dimension given by a constant from outside the function: the verifier
        // saw a placeholder divisible by the group size; rustc checks the real value.
        if matches!(kind, OpKind::ReduceScatter | OpKind::AllToAll) {
            let n = if group.id == GroupId::WORLD {
                self.world
            } else {
                group.members.len()
            };
            let d = dim.unwrap_or(0);
            if let Some(&(k, sym)) = shape.get(d).and_then(|x| self.shared.placeholders.get(x)) {
                let what = format!(
                    "{kind} splits dim {d} into {n} equal parts (world = {})",
                    self.world
                );
                if !self
                    .shared
                    .assertions
                    .iter()
                    .any(|a| a.1 == k && a.2 == sym && a.3 == n && a.4 == what)
                {
                    self.shared.assertions.push((span, k, sym, n, what));
                }
            }
        }
        // Calls with a separate output whose shape follows from the input (all_gather, …) get
        // the output the user passed; `rules` compares the two.
        let output = match kind {
            OpKind::AllGather | OpKind::ReduceScatter | OpKind::AllToAll | OpKind::Gather => {
                output.map(|s| Shape::from_slice(&s))
            }
            _ => None,
        };
        let summary = desc.kind.name().to_string();
        let buffers = [t_at, out_at]
            .into_iter()
            .flatten()
            .map(|i| m.args.iter().nth(i).and_then(buffer_of))
            .collect::<Option<Vec<_>>>()
            .map(|v| v.into_iter().flatten().collect());
        let id = self
            .shared
            .site(m as *const ExprMethodCall as usize, span, || {
                (summary, buffers)
            });
        let vop = VOp {
            desc,
            output,
            root_input: root_input.map(|s| Shape::from_slice(&s)),
            id,
        };
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

/// The variable a buffer argument borrows, and whether mutably: `Some(None)` for `None`, `None`
/// if the argument is anything but `&x`, `&mut x`, `x`, `Some(…)` of those, or `None`. A plain
/// `x` (a reference held in a variable) counts as mutable, to be safe.
fn buffer_of(e: &Expr) -> Option<Option<(String, bool)>> {
    match e {
        Expr::Reference(r) => match &*r.expr {
            Expr::Path(_) => ident_of(&r.expr).map(|n| Some((n, r.mutability.is_some()))),
            _ => None,
        },
        Expr::Path(p) if p.path.is_ident("None") => Some(None),
        Expr::Path(_) => ident_of(e).map(|n| Some((n, true))),
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

/// Where each argument of a call sits, by kind: (main tensor, other buffer, peer or root,
/// reduce op, dim). The main tensor is the one whose shape must agree (see `OpDesc`).
type ArgLayout = (
    Option<usize>,
    Option<usize>,
    Option<usize>,
    Option<usize>,
    Option<usize>,
);

fn arg_layout(kind: OpKind) -> ArgLayout {
    match kind {
        OpKind::Send | OpKind::Recv | OpKind::Broadcast => (Some(0), None, Some(1), None, None),
        OpKind::Reduce => (Some(0), None, Some(1), Some(2), None),
        OpKind::AllReduce => (Some(0), None, None, Some(1), None),
        OpKind::Gather => (Some(0), Some(1), Some(2), None, Some(3)),
        OpKind::AllGather | OpKind::AllToAll => (Some(0), Some(1), None, None, Some(2)),
        OpKind::Scatter => (Some(1), Some(0), Some(2), None, Some(3)),
        OpKind::ReduceScatter => (Some(0), Some(1), None, Some(2), Some(3)),
        OpKind::Barrier => (None, None, None, None, None),
    }
}

/// The element type an expression's syntax gives it: a literal suffix (`1i64`) or a cast
/// (`rank as f32`), looking through parentheses, unary and binary operators.
fn syntactic_dtype(e: &Expr) -> Option<DType> {
    match e {
        Expr::Lit(l) => match &l.lit {
            Lit::Int(i) => dtype_named(i.suffix()),
            Lit::Float(f) => dtype_named(f.suffix()),
            _ => None,
        },
        Expr::Cast(c) => dtype_of_type(&c.ty),
        Expr::Paren(p) => syntactic_dtype(&p.expr),
        Expr::Unary(u) => syntactic_dtype(&u.expr),
        Expr::Binary(b) => syntactic_dtype(&b.left).or_else(|| syntactic_dtype(&b.right)),
        _ => None,
    }
}

fn lit(l: &Lit) -> Val {
    match l {
        Lit::Int(i) => {
            let d = dtype_named(i.suffix());
            match i.base10_parse::<i128>() {
                Ok(v) if d.is_none() || d.is_some_and(|d| !d.is_float()) => Val::Int(v),
                _ => Val::Scalar(d),
            }
        }
        Lit::Float(f) => Val::Scalar(Some(dtype_named(f.suffix()).unwrap_or(DType::F64))),
        Lit::Bool(b) => Val::Bool(b.value),
        _ => Val::Unknown,
    }
}

fn cast(v: Val, ty: &syn::Type) -> Val {
    let target = dtype_of_type(ty);
    if let (Val::Sym { .. }, Some(d)) = (&v, target) {
        if d.is_float() {
            return Val::Scalar(Some(d));
        }
    }
    let int_target = match ty {
        syn::Type::Path(p) => p.path.get_ident().is_some_and(|i| {
            matches!(
                i.to_string().as_str(),
                "usize"
                    | "isize"
                    | "u8"
                    | "u16"
                    | "u32"
                    | "u64"
                    | "i8"
                    | "i16"
                    | "i32"
                    | "i64"
                    | "u128"
                    | "i128"
            )
        }),
        _ => false,
    };
    match (v, target) {
        (Val::Int(i), _) if int_target => Val::Int(i),
        (Val::Sym { k, sym }, _) if int_target || target.is_some_and(|d| !d.is_float()) => {
            Val::Sym { k, sym }
        }
        (_, Some(d)) => Val::Scalar(Some(d)),
        _ => Val::Unknown,
    }
}

fn binop(op: &BinOp, l: Val, r: Val) -> Val {
    match (l, r) {
        (Val::Poison, _) | (_, Val::Poison) => Val::Poison,
        (Val::Sym { k, sym }, Val::Int(n)) | (Val::Int(n), Val::Sym { k, sym })
            if matches!(op, BinOp::Mul(_)) && n >= 0 =>
        {
            k.mul(Ratio::new(n, 1))
                .map_or(Val::Unknown, |k| Val::Sym { k, sym })
        }
        (Val::Sym { k, sym }, Val::Int(n)) if matches!(op, BinOp::Div(_)) && n > 0 => k
            .mul(Ratio::new(1, n))
            .map_or(Val::Unknown, |k| Val::Sym { k, sym }),
        (Val::Sym { k: a, sym: s }, Val::Sym { k: b, sym: t })
            if s == t && matches!(op, BinOp::Add(_)) =>
        {
            a.add(b).map_or(Val::Unknown, |k| Val::Sym { k, sym: s })
        }
        (Val::Int(a), Val::Int(b)) => {
            let v = match op {
                BinOp::Add(_) => a.checked_add(b).map(Val::Int),
                BinOp::Sub(_) => a.checked_sub(b).map(Val::Int),
                BinOp::Mul(_) => a.checked_mul(b).map(Val::Int),
                BinOp::Div(_) => a.checked_div(b).map(Val::Int),
                BinOp::Rem(_) => a.checked_rem(b).map(Val::Int),
                BinOp::Shl(_) => (0..64).contains(&b).then(|| Val::Int(a << b)),
                BinOp::Shr(_) => (0..128).contains(&b).then(|| Val::Int(a >> b)),
                BinOp::BitAnd(_) => Some(Val::Int(a & b)),
                BinOp::BitOr(_) => Some(Val::Int(a | b)),
                BinOp::BitXor(_) => Some(Val::Int(a ^ b)),
                BinOp::Eq(_) => Some(Val::Bool(a == b)),
                BinOp::Ne(_) => Some(Val::Bool(a != b)),
                BinOp::Lt(_) => Some(Val::Bool(a < b)),
                BinOp::Le(_) => Some(Val::Bool(a <= b)),
                BinOp::Gt(_) => Some(Val::Bool(a > b)),
                BinOp::Ge(_) => Some(Val::Bool(a >= b)),
                _ => None,
            };
            v.unwrap_or(Val::Unknown)
        }
        (Val::Bool(a), Val::Bool(b)) => match op {
            BinOp::And(_) | BinOp::BitAnd(_) => Val::Bool(a && b),
            BinOp::Or(_) | BinOp::BitOr(_) => Val::Bool(a || b),
            BinOp::BitXor(_) | BinOp::Ne(_) => Val::Bool(a != b),
            BinOp::Eq(_) => Val::Bool(a == b),
            _ => Val::Unknown,
        },
        (Val::Scalar(d), _) | (_, Val::Scalar(d)) if !is_comparison(op) => Val::Scalar(d),
        _ => Val::Unknown,
    }
}

fn is_comparison(op: &BinOp) -> bool {
    matches!(
        op,
        BinOp::Eq(_)
            | BinOp::Ne(_)
            | BinOp::Lt(_)
            | BinOp::Le(_)
            | BinOp::Gt(_)
            | BinOp::Ge(_)
            | BinOp::And(_)
            | BinOp::Or(_)
    )
}

fn int_method(a: i128, name: &str, args: &[Val]) -> Val {
    let b = match args.first() {
        Some(Val::Int(b)) => Some(*b),
        _ => None,
    };
    let v = match (name, b) {
        ("min", Some(b)) => Some(a.min(b)),
        ("max", Some(b)) => Some(a.max(b)),
        ("pow", Some(b)) if (0..64).contains(&b) => a.checked_pow(b as u32),
        ("abs", _) => a.checked_abs(),
        ("rem_euclid", Some(b)) => a.checked_rem_euclid(b),
        ("saturating_sub", Some(b)) => a.checked_sub(b).map(|v| v.max(0)),
        ("wrapping_sub", Some(b)) => a.checked_sub(b),
        ("wrapping_add" | "saturating_add", Some(b)) => a.checked_add(b),
        ("next_power_of_two", _) if a >= 0 => {
            (a as u128).checked_next_power_of_two().map(|v| v as i128)
        }
        ("trailing_zeros", _) if a > 0 => Some(a.trailing_zeros() as i128),
        ("ilog2", _) if a > 0 => Some(a.ilog2() as i128),
        ("div_ceil", Some(b)) if b > 0 && a >= 0 => a.checked_add(b - 1).map(|v| v / b),
        ("is_power_of_two", _) => return Val::Bool(a > 0 && (a & (a - 1)) == 0),
        ("clone", _) => Some(a),
        _ => None,
    };
    v.map(Val::Int).unwrap_or(Val::Unknown)
}

fn ints(v: &Val) -> Option<Vec<usize>> {
    match v {
        Val::Array(a) => a
            .iter()
            .map(|x| match x {
                Val::Int(i) if *i >= 0 => Some(*i as usize),
                _ => None,
            })
            .collect(),
        Val::Range {
            start,
            end,
            step,
            rev: false,
        } if *start >= 0 && *step > 0 && (*end - *start) / *step <= 1 << 16 => Some(
            (*start..*end)
                .step_by(*step as usize)
                .map(|x| x as usize)
                .collect(),
        ),
        _ => None,
    }
}

fn shape_of(v: &Val) -> Option<Vec<usize>> {
    match v {
        Val::Int(n) if *n >= 0 => Some(vec![*n as usize]),
        other => ints(other),
    }
}

/// `Tensor::full/zeros/from_vec/from_fn` and their `ctx.` forms: the shape from the first
/// argument, the dtype from the value (`full`), the turbofish, or unknown (an annotation may
/// supply it).
fn tensor_ctor(name: &str, args: &[Val], fish: Option<DType>) -> Val {
    let shape = args.first().and_then(shape_of);
    let dtype = match name {
        "full" => match args.get(1) {
            Some(Val::Scalar(d)) => d.or(fish),
            Some(Val::Int(_)) => fish.or(Some(DType::I32)),
            _ => fish,
        },
        "zeros" | "from_vec" | "from_fn" => fish,
        _ => return Val::Unknown,
    };
    Val::Tensor(TVal { dtype, shape })
}

/// Whether `pat` matches the static value `v`; the bindings it makes if so.
fn pat_matches(pat: &Pat, v: &Val) -> Option<Vec<(String, Val)>> {
    match (pat, v) {
        (Pat::Wild(_), _) => Some(Vec::new()),
        (Pat::Ident(i), _) if i.subpat.is_none() => Some(vec![(i.ident.to_string(), v.clone())]),
        (Pat::Lit(l), _) => match (lit(&l.lit), v) {
            (Val::Int(a), Val::Int(b)) if a == *b => Some(Vec::new()),
            (Val::Bool(a), Val::Bool(b)) if a == *b => Some(Vec::new()),
            _ => None,
        },
        (Pat::Range(r), Val::Int(x)) => {
            let bound = |e: &Option<Box<Expr>>| match e.as_deref() {
                Some(Expr::Lit(l)) => match lit(&l.lit) {
                    Val::Int(i) => Some(Some(i)),
                    _ => None,
                },
                None => Some(None),
                _ => None,
            };
            let lo = bound(&r.start)?;
            let hi = bound(&r.end)?;
            let closed = matches!(r.limits, syn::RangeLimits::Closed(_));
            let ok = lo.is_none_or(|lo| *x >= lo)
                && hi.is_none_or(|hi| if closed { *x <= hi } else { *x < hi });
            ok.then(Vec::new)
        }
        (Pat::Or(o), _) => o.cases.iter().find_map(|c| pat_matches(c, v)),
        (Pat::Paren(p), _) => pat_matches(&p.pat, v),
        _ => None,
    }
}

//! Static evaluation of a rank program's body, once per world size and rank.
//!
//! The evaluator walks the function's syntax as an interpreter would, tracking only what the
//! checks need: integers and booleans computed from literals, `ctx.rank()` and `ctx.world()`;
//! tensors' dtypes and shapes; groups; batches; and every communication call, which it records
//! as an op of the rank's program. Everything else is opaque computation and is left alone —
//! unless communication hides in it (under a condition it cannot evaluate, in a `while`/`loop`,
//! in a loop over a run-time collection, in a closure or macro, or in a helper that receives the
//! context), which is RW012: never silently unchecked.

mod analysis;
mod calls;
mod env;
mod scan;
pub(crate) mod summary;
mod value;

use std::collections::HashMap;

use proc_macro2::Span;
use rankwise_core::ReduceOp;
use rankwise_core::model::GroupId;
use rankwise_core::verify::{Item, Program, VOp};
use syn::spanned::Spanned;
use syn::visit::Visit;
use syn::{BinOp, Expr, Pat, Stmt, UnOp};

pub(crate) use analysis::{Analysis, Borrow, Site, WORK_BUDGET, location};
pub(crate) use scan::{is_comm, trait_methods};
pub(crate) use value::Ratio;

use env::Env;
use scan::{EffectFinder, Exit, communicates};
use value::*;

/// Why a value is unknown, and what to write instead, where the macro can say more than that
/// it cannot compute it (see `Eval::lost`).
#[derive(Clone, Debug)]
struct Lost {
    why: String,
    help: &'static str,
}

impl Lost {
    /// Integer arithmetic the program's types may not hold.
    fn arithmetic(why: String) -> Lost {
        Lost {
            why,
            help: "keep the arithmetic within its type (for a neighbour, `(rank + world - 1) % \
                   world`, not `rank - 1`), or give the values a type wide enough",
        }
    }
}

/// The longest `[x; n]` or `vec![x; n]` the macro follows element by element.
const MAX_REPEAT: i128 = 4096;

/// Unrolled loop iterations allowed per rank before giving up (compile time must stay small).
const BUDGET: usize = 1 << 20;

/// The most iterations of one `while` loop the evaluator unrolls: loops written over static
/// values (doubling a mask up to the world, counting to a bound) need far fewer.
const MAX_WHILE: usize = 1 << 14;

/// How deeply expressions and blocks may nest before the evaluator stops with an error: deeper
/// recursion would risk the compiler's stack (rustc compiles far deeper code, so this is ours).
const MAX_NESTING: usize = 96;

/// An evaluated loop or labelled block enclosing the current point: where `break` and
/// `continue` go.
struct Frame {
    label: Option<String>,
    is_loop: bool,
}

/// What decides whether a loop runs its body again.
#[derive(Clone, Copy)]
enum LoopCond<'e> {
    /// `loop`: until a `break`.
    Always,
    /// `while cond`.
    While(&'e Expr),
    /// `while let pat = value`, or a chain of `let`s and conditions joined by `&&`.
    Let(&'e Expr),
}

/// A call the macro cannot count on: code it did not run may leave the function (`frame:
/// None`) or the given enclosing frame before reaching what follows.
struct Taint {
    frame: Option<usize>,
    span: Span,
    what: &'static str,
}

/// Evaluates the body for one (world, rank), appending the rank's items to `program`.
pub(crate) struct Eval<'a> {
    ctx: String,
    rank: usize,
    world: usize,
    env: Env,
    /// Variables that may hold a mutable reference to others (`let r = &mut x;`): whatever
    /// may change `r` may change `x`.
    refs: HashMap<String, Vec<String>>,
    /// The parameters of the closure or helper bodies being evaluated: any of them may be a
    /// mutable reference (`&mut Option<usize>`, or an untyped closure parameter given one).
    params: Vec<String>,
    frames: Vec<Frame>,
    taints: Vec<Taint>,
    depth: usize,
    /// How many closure or helper bodies are being evaluated around this point (see
    /// `Expr::Try`).
    bodies: usize,
    batches: Vec<Vec<VOp>>,
    program: &'a mut Program,
    registry: &'a mut HashMap<(Vec<usize>, u32), GroupId>,
    ordinals: HashMap<Vec<usize>, u32>,
    shared: &'a mut Analysis,
    budget: usize,
    /// The line of the statement being evaluated.
    line: u32,
    /// Variables whose values were forgotten ([`Eval::havoc`]), with the line where: the
    /// explanation a later "cannot compute" owes the user.
    forgotten: HashMap<String, u32>,
    /// Why a value the statement being evaluated computes is unknown, where the macro can say
    /// better than "cannot compute": integer arithmetic the program's types may not hold (see
    /// [`IntTy`]), a `match` pattern it cannot read.
    lost: Option<Lost>,
    /// Variables bound to such a value, with the line and the reason.
    lost_in: HashMap<String, (u32, Lost)>,
    /// The `static mut` items of the blocks seen: what one rank writes there, another may
    /// read, so their values are never known.
    shared_statics: std::collections::HashSet<String>,
}

impl<'a> Eval<'a> {
    pub(crate) fn new(
        ctx: String,
        rank: usize,
        world: usize,
        program: &'a mut Program,
        registry: &'a mut HashMap<(Vec<usize>, u32), GroupId>,
        shared: &'a mut Analysis,
    ) -> Self {
        Eval {
            ctx,
            rank,
            world,
            env: Env::default(),
            refs: HashMap::new(),
            params: Vec::new(),
            frames: Vec::new(),
            taints: Vec::new(),
            depth: 0,
            bodies: 0,
            batches: Vec::new(),
            program,
            registry,
            ordinals: HashMap::new(),
            shared,
            budget: BUDGET,
            line: 0,
            forgotten: HashMap::new(),
            lost: None,
            lost_in: HashMap::new(),
            shared_statics: Default::default(),
        }
    }

    /// Evaluates the function body (statements of its block).
    pub(crate) fn run(&mut self, body: &syn::Block) {
        let _ = self.block(body);
    }

    /// Replaces constants from outside the function by their placeholders, for use as shapes.
    fn concretize(&mut self, v: Val) -> Val {
        match v {
            Val::Sym { k, sym } => match self.shared.placeholder(k, sym, self.world) {
                Some(x) => Val::usize(x),
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

    /// Reports a rule broken by a call the macro evaluates itself (a group or a split), in the
    /// words the runtime would use.
    fn violation(&mut self, span: Span, v: &rankwise_core::Violation) {
        self.shared.error(
            span,
            format!(
                "{}: {v} (world = {})\n= help: {}",
                v.code(),
                self.world,
                v.help()
            ),
        );
    }

    fn lookup(&self, name: &str) -> Option<&Val> {
        self.env.lookup(name)
    }

    fn bind(&mut self, name: String, v: Val) {
        self.forgotten.remove(&name);
        self.note_lost(&name, &v);
        self.env.bind(name, v);
    }

    /// `name = v`. A variable has one type in Rust: a tensor assigned to a variable whose
    /// element type is settled keeps that type, whatever the new value's literal suggested.
    fn assign(&mut self, name: &str, mut v: Val) {
        if self.shared_statics.contains(name) {
            v = Val::Unknown;
        }
        self.forgotten.remove(name);
        self.note_lost(name, &v);
        if let (Some(Val::Tensor(old)), Val::Tensor(new)) = (self.lookup(name), &mut v)
            && !old.open()
            && new.open()
        {
            new.dtype = old.dtype;
            new.weak = false;
        }
        self.env.assign(name, v);
    }

    /// The context's name and every variable holding the context, a batch or a group
    /// communicator (also inside an `Option`, tuple or array): code that mentions one of these
    /// may communicate.
    fn handles(&self) -> Vec<String> {
        let mut out = vec![self.ctx.clone()];
        out.extend(
            self.env
                .visible()
                .filter(|(_, v)| holds_handle(v))
                .map(|(n, _)| n.clone()),
        );
        out
    }

    fn has_comm_expr(&self, e: &Expr) -> bool {
        communicates(&self.handles(), &|f| f.visit_expr(e))
    }

    fn has_comm_block(&self, b: &syn::Block) -> bool {
        communicates(&self.handles(), &|f| f.visit_block(b))
    }

    /// Code that is not run (a branch on run-time data, an uncounted loop, a `#[cfg]`'d
    /// statement, a closure's body) but does not communicate: the variables it may change are
    /// no longer known, and calls after a place it may leave from are no longer certain.
    fn skip(&mut self, span: Span, node: &dyn Fn(&mut EffectFinder)) {
        let fx = scan::effects(node);
        if fx.too_deep {
            self.too_deep(span);
            return;
        }
        for name in self.written(&fx) {
            self.havoc(&name);
        }
        for (exit, at) in fx.exits {
            let (frame, what) = match &exit {
                Exit::Return => (None, "a `return`"),
                Exit::Loop { label, is_break } => {
                    let found = self.frames.iter().rposition(|f| match label {
                        None => f.is_loop,
                        Some(l) => f.label.as_deref() == Some(l.as_str()),
                    });
                    let Some(i) = found else { continue };
                    (
                        Some(i),
                        if *is_break {
                            "a `break`"
                        } else {
                            "a `continue`"
                        },
                    )
                }
            };
            self.taints.push(Taint {
                frame,
                span: at,
                what,
            });
        }
    }

    /// Forgets what is known about a variable — its value, or a tensor's shape (its element
    /// type is fixed by its Rust type) — and about every variable it may refer to mutably.
    fn havoc(&mut self, name: &str) {
        self.forget_from(name, false);
    }

    /// [`Eval::havoc`], or only what `name` refers to ([`Eval::wrote_into`]). A variable reached through `refs` is
    /// named as it was when the reference was taken, and an inner block may have shadowed that
    /// name since (`if let Some(x) = r { let r = 5; *x = 1; }`): every binding of it is
    /// forgotten, the shadowed ones too.
    fn forget_from(&mut self, name: &str, referents_only: bool) {
        let referents = |me: &Self, n: &str| -> Vec<(String, bool)> {
            let targets = me.refs.get(n).into_iter().flatten();
            targets.map(|t| (t.clone(), true)).collect()
        };
        let mut todo = match referents_only {
            true => referents(self, name),
            false => vec![(name.to_string(), false)],
        };
        let mut seen: Vec<String> = Vec::new();
        while let Some((n, through)) = todo.pop() {
            if seen.contains(&n) {
                continue;
            }
            self.havoc_one(&n);
            if through {
                self.env.update_shadowed(&n, forgotten);
            }
            todo.extend(referents(self, &n));
            seen.push(n);
        }
    }

    fn havoc_one(&mut self, name: &str) {
        let v = match self.lookup(name) {
            Some(v) if holds_handle(v) => return,
            Some(v) => forgotten(v),
            None => return,
        };
        self.assign(name, v);
        self.forgotten.insert(name.to_string(), self.line);
    }

    /// Remembers why `name`, bound to `v`, is unknown, if the statement says (see `lost`).
    fn note_lost(&mut self, name: &str, v: &Val) {
        match (&self.lost, v) {
            (Some(why), Val::Unknown) => {
                self.lost_in
                    .insert(name.to_string(), (self.line, why.clone()));
            }
            _ => {
                self.lost_in.remove(name);
            }
        }
    }

    /// Notes why the integer expression `e`, of type `t`, is unknown (see [`IntTy`]), for
    /// the message of a call that needs it.
    fn note_int_unknown(&mut self, e: &Expr, t: IntTy) {
        let rank = self.rank;
        self.lost.get_or_insert_with(|| {
            Lost::arithmetic(format!(
                "`{}` at rank {rank} overflows {} or depends on its width",
                quote::quote!(#e),
                t.name()
            ))
        });
    }

    /// After `let pat = init` bound unknown values: if `init` reads a variable that is unknown
    /// for a reason noted (see `lost`), so are `pat`'s, for the same reason (`let d = rank - 1;
    /// let root = if d > 5 { … }`).
    fn inherit_lost(&mut self, pat: &Pat, init: &Expr) {
        let mut read = Vec::new();
        scan::idents(init, &mut read);
        let Some(why) = read.iter().find_map(|n| self.lost_in.get(n)).cloned() else {
            return;
        };
        let mut names = Vec::new();
        pat_names(pat, &mut names);
        for n in names {
            self.lost_in.insert(n, why.clone());
        }
    }

    /// `why` and `todo` for a value the macro cannot compute in `arg`, completed with where a
    /// variable it mentions was forgotten, if one was: the place to look is there, not here.
    fn explain_unknown(&self, arg: Option<&Expr>, why: &str, todo: &str) -> (String, String) {
        let mut names = Vec::new();
        if let Some(e) = arg {
            scan::idents(e, &mut names);
        }
        let forgotten = names
            .iter()
            .find_map(|n| self.forgotten.get(n).map(|line| (n, *line)));
        let lost = match &self.lost {
            Some(l) => Some((l.why.clone(), l.help)),
            None => names.iter().find_map(|n| {
                self.lost_in.get(n).map(|(line, l)| {
                    (
                        format!("`{n}` is unknown from line {line} on, where {}", l.why),
                        l.help,
                    )
                })
            }),
        };
        if let (None, Some((lost, help))) = (forgotten, lost) {
            return (format!("{why}: {lost}"), help.to_string());
        }
        match forgotten {
            Some((n, line)) => (
                format!(
                    "{why}: `{n}` is unknown from line {line} on, where it may have been changed \
                     through a mutable borrow or by code the macro does not run"
                ),
                format!(
                    "give `{n}` a value the macro can compute after that line, or keep it out \
                     of mutable borrows, closures that write and branches on data"
                ),
            ),
            None => (why.to_string(), todo.to_string()),
        }
    }

    /// RW012 for a communication call recorded while earlier code the macro did not run may
    /// have left the function or a loop: on some ranks the call may not happen.
    fn check_untainted(&mut self, span: Span) -> bool {
        let Some(t) = self.taints.last() else {
            return true;
        };
        let (what, line) = (t.what, t.span.start().line);
        let left = if t.frame.is_none() {
            "the function"
        } else {
            "the loop or block"
        };
        self.unverifiable(
            span,
            &format!(
                "this call may be skipped: {what} at line {line}, under a condition the macro cannot \
                 evaluate, can leave {left} before it"
            ),
            "make the early exit depend only on literals, `ctx.rank()` and `ctx.world()`; to stop \
             on data (a loss, a convergence test), check one step as its own \
             `#[rankwise::program]` function and loop over it in unchecked code, whose exit the \
             runtime's checks cover; errors (`?`, `return Err(…)`) need no change: they stop \
             every rank at run time",
        );
        false
    }

    fn too_deep(&mut self, span: Span) {
        self.unverifiable(
            span,
            &format!("code nested more than {MAX_NESTING} levels deep, which the macro does not read"),
            "split the expression or block with `let` bindings or helper functions that do not communicate",
        );
        self.shared.halt();
    }

    /// Enters a loop or labelled block; `leave_frame` ends it.
    fn enter_frame(&mut self, label: Option<&syn::Label>, is_loop: bool) {
        self.frames.push(Frame {
            label: label.map(|l| l.name.ident.to_string()),
            is_loop,
        });
    }

    /// Leaves the innermost frame, whose code is `code`. Returns whether code the macro did not
    /// run (a branch on data) may have left it early or skipped the rest of an iteration: then
    /// the macro went on where the program may not have, so what the frame assigns — and the
    /// value it ends with — are unknown after it.
    fn leave_frame(&mut self, code: &dyn Fn(&mut EffectFinder)) -> bool {
        let i = self.frames.len().saturating_sub(1);
        let early = self
            .taints
            .iter()
            .find(|t| t.frame == Some(i))
            .map(|t| (t.what, t.span.start().line as u32));
        self.taints.retain(|t| t.frame.is_none_or(|f| f < i));
        self.frames.pop();
        let Some((what, line)) = early else {
            return false;
        };
        let fx = scan::effects(code);
        let why = Lost {
            why: format!(
                "{what} under a condition the macro cannot evaluate may leave the loop or block \
                 (or skip the rest of an iteration) before the value is computed"
            ),
            help: "make the early exit depend only on literals, `ctx.rank()` and `ctx.world()`, \
                   or compute the value outside the loop or block",
        };
        for n in self.written(&fx) {
            self.havoc(&n);
            self.forgotten.remove(&n);
            self.lost_in.insert(n, (line, why.clone()));
        }
        // (And the frame's own value, for the statement it is in.)
        self.lost.get_or_insert(why);
        true
    }

    fn block(&mut self, b: &syn::Block) -> Flow {
        // A function item is visible in its whole block (before its definition too) and only
        // there: another block may define another function of the same name.
        let mut shadowed = Vec::new();
        for stmt in &b.stmts {
            if let Stmt::Item(syn::Item::Fn(f)) = stmt {
                let name = f.sig.ident.to_string();
                let before = self
                    .shared
                    .helpers
                    .insert(name.clone(), std::rc::Rc::new(f.clone()));
                shadowed.push((name, before));
            }
        }
        let flow = self.block_stmts(b);
        for (name, before) in shadowed.into_iter().rev() {
            match before {
                Some(f) => self.shared.helpers.insert(name, f),
                None => self.shared.helpers.remove(&name),
            };
        }
        flow
    }

    fn block_stmts(&mut self, b: &syn::Block) -> Flow {
        self.env.push();
        self.block_items(b);
        let mut last = Val::Unit;
        for stmt in &b.stmts {
            match self.stmt(stmt) {
                Flow::Normal(v) => last = v,
                other => {
                    self.env.pop();
                    return other;
                }
            }
        }
        self.env.pop();
        Flow::Normal(last)
    }

    /// The block's `const` and `static` items, visible in the whole block: bound to their
    /// values, so that one of the same name elsewhere (an outer block's, or the module's) is
    /// never taken for it. A `static mut` is shared by every rank of a process, which any of
    /// them may change: its value is never known (see [`Eval::assign`]).
    fn block_items(&mut self, b: &syn::Block) {
        for stmt in &b.stmts {
            let (name, v) = match stmt {
                Stmt::Item(syn::Item::Const(c)) => {
                    // (Its expression can name no local variable: rustc refuses that.)
                    let v = match self.expr(&c.expr) {
                        Flow::Normal(v) => typed(v, &c.ty),
                        _ => Val::Unknown,
                    };
                    (c.ident.to_string(), v)
                }
                Stmt::Item(syn::Item::Static(st)) => {
                    let name = st.ident.to_string();
                    if matches!(st.mutability, syn::StaticMutability::Mut(_)) {
                        self.shared_statics.insert(name.clone());
                        (name, Val::Unknown)
                    } else {
                        let v = match self.expr(&st.expr) {
                            Flow::Normal(v) => typed(v, &st.ty),
                            _ => Val::Unknown,
                        };
                        (name, v)
                    }
                }
                _ => continue,
            };
            self.bind(name, v);
        }
    }

    fn stmt(&mut self, s: &Stmt) -> Flow {
        self.line = s.span().start().line as u32;
        self.lost = None;
        if let Some(span) = cfg_attr(stmt_attrs(s)) {
            return self.cfg_stmt(s, span);
        }
        match s {
            Stmt::Local(l) => {
                let v = match &l.init {
                    Some(init) => {
                        let v = match self.expr(&init.expr) {
                            Flow::Normal(v) => v,
                            other => return other,
                        };
                        if let Some((_, diverge)) = &init.diverge {
                            // `let … else { … }`: the else block runs when the pattern fails,
                            // which the macro cannot tell; it must diverge, so it is an exit.
                            let diverge = &**diverge;
                            if self.has_comm_expr(diverge) {
                                self.unverifiable(
                                    diverge.span(),
                                    "in the `else` of a `let … else`, which runs when run-time data does not match",
                                    "communicate before the `let … else`, or match on static values",
                                );
                            } else {
                                self.skip(diverge.span(), &|f| f.visit_expr(diverge));
                            }
                        }
                        v
                    }
                    None => Val::Unknown,
                };
                let unknown = matches!(v, Val::Unknown);
                self.bind_pat(&l.pat, v);
                if let Some(init) = &l.init {
                    self.note_references(&l.pat, &init.expr);
                    if unknown && self.lost.is_none() {
                        self.inherit_lost(&l.pat, &init.expr);
                    }
                }
                Flow::Normal(Val::Unit)
            }
            Stmt::Expr(e, semi) => match self.expr(e) {
                Flow::Normal(v) => Flow::Normal(if semi.is_some() { Val::Unit } else { v }),
                other => other,
            },
            Stmt::Macro(m) => {
                self.check_macro(&m.mac);
                Flow::Normal(Val::Unit)
            }
            // Functions defined in the body are registered when their block is entered.
            Stmt::Item(_) => Flow::Normal(Val::Unit),
        }
    }

    /// After `let r = <init>` (or a pattern of `if let`, `while let` or `match` bound to
    /// `init`): if `init` lends variables mutably (`&mut x`, also inside a branch or a call), or
    /// the pattern binds by `ref mut`, `r` may be a reference to them. A value other than a tensor's is forgotten at
    /// once (it may change through `r` at any time while `r` lives); a tensor's shape is
    /// forgotten when something may change `r` (see [`Eval::havoc`]).
    fn note_references(&mut self, pat: &Pat, init: &Expr) {
        let mut fx = scan::effects(&|f| f.visit_expr(init));
        self.note_pattern_references(pat, &fx.mentioned);
        // `std::mem::replace(&mut a, v)` lends `a` for the call only: its value is `a`'s old
        // value, no reference (see `mem_call`).
        if let Expr::Call(c) = init
            && let Expr::Path(p) = &*c.func
            && calls::mem_call(p, &c.args).is_some()
        {
            return;
        }
        // `let it = v.iter_mut()`, `let s = v.as_mut_slice()`: borrows too, held in a variable.
        // And a `ref mut` binding borrows from the place it matches (`let (ref mut a, _) =
        // pair`, `if let Some(ref mut p) = opt`).
        let by_ref = scan::binds_by_mut_ref(pat).then(|| scan::place_roots(init));
        for t in scan::lent_mutably(init)
            .into_iter()
            .chain(by_ref.into_iter().flatten().map(|(n, _)| n))
        {
            if !fx.assigned.contains(&t) {
                fx.assigned.push(t);
            }
        }
        if fx.assigned.is_empty() {
            return;
        }
        let mut names = Vec::new();
        pat_names(pat, &mut names);
        for t in &fx.assigned {
            if !matches!(self.lookup(t), Some(Val::Tensor(_))) {
                self.havoc(t);
            }
        }
        for n in names {
            let targets: Vec<String> = fx.assigned.iter().filter(|t| **t != n).cloned().collect();
            self.refs.entry(n).or_default().extend(targets);
        }
    }

    /// Bindings that may hold a mutable reference another variable holds (`holders`: those
    /// the initialiser names). By match ergonomics a pattern that destructures a reference
    /// binds by reference into it (`if let Some(x) = r { *x = 1 }` after `let r = &mut a`, or
    /// on a helper's `&mut Option<usize>` parameter); a typed or cast binding reborrows it
    /// (`let s: &mut Vec<usize> = r`, `let s = r as &mut T`, after which `r` is usable again);
    /// and a value built around it carries it (`Some(r)`, `(r, 0)`, `vec![r]`). What they refer
    /// to stays known until something writes through them, which then forgets it (see
    /// [`Eval::havoc`] and [`Eval::wrote_into`]).
    fn note_pattern_references(&mut self, pat: &Pat, mentioned: &[String]) {
        let holders: Vec<String> = mentioned
            .iter()
            .filter(|n| self.may_hold_reference(n))
            .cloned()
            .collect();
        if holders.is_empty() {
            return;
        }
        let mut names = Vec::new();
        pat_names(pat, &mut names);
        for n in &names {
            self.refer(n, &holders);
        }
    }

    /// Records that `name` may refer to each of `targets` (but itself).
    fn refer(&mut self, name: &str, targets: &[String]) {
        for t in targets.iter().filter(|t| *t != name) {
            let known = self.refs.entry(name.to_string()).or_default();
            if !known.contains(t) {
                known.push(t.clone());
            }
        }
    }

    /// After code that may store what `sources` give — a variable lent mutably, or one that
    /// may hold a mutable reference — in the variables `into`: each of them may now refer to
    /// those (so a write through it later forgets them; see [`Eval::havoc`]).
    fn note_stores<'e>(&mut self, into: &[String], sources: impl IntoIterator<Item = &'e Expr>) {
        if into.is_empty() {
            return;
        }
        let mut given: Vec<String> = Vec::new();
        for e in sources {
            given.extend(scan::lent_mutably(e));
            let fx = scan::effects(&|f| f.visit_expr(e));
            given.extend(
                fx.mentioned
                    .into_iter()
                    .filter(|n| self.may_hold_reference(n)),
            );
        }
        // The context, a group or a batch keeps nothing the macro does not model itself (a
        // batch's tensors are written by its `run`, as the macro follows).
        for x in into {
            if !self.is_handle(x) {
                self.refer(x, &given);
            }
        }
    }

    /// Whether `name` may hold a mutable reference to data: bound from something lent mutably,
    /// or a parameter of the closure or helper being evaluated — not the context, a group or
    /// a batch, whose calls the macro follows by themselves.
    fn may_hold_reference(&self, name: &str) -> bool {
        (self.refs.contains_key(name) || self.params.iter().any(|p| p == name))
            && !self.is_handle(name)
    }

    /// Whether `name` is the context or holds a group, a batch or a request.
    fn is_handle(&self, name: &str) -> bool {
        name == self.ctx || self.lookup(name).is_some_and(holds_handle)
    }

    /// A write into `name`'s value in place (`r[0] = 1`, `r.0 = 1`): if `name` may refer to
    /// other variables, they change too.
    fn wrote_into(&mut self, name: &str) {
        self.forget_from(name, true);
    }

    /// Before `for <pat> in <iterable>`: if the iterable lends variables mutably
    /// (`x.iter_mut()`, `&mut x`), the loop's bindings are references into them, as after
    /// `let r = &mut x` ([`Eval::note_references`]): a list of anything but tensors is
    /// forgotten at once, a list of tensors when something may change a binding.
    fn note_loop_references(&mut self, pat: &Pat, iterable: &Expr) {
        // `for x in vec![r]`, `for x in Some(r)`: the items may be the references themselves.
        let fx = scan::effects(&|f| f.visit_expr(iterable));
        self.note_pattern_references(pat, &fx.mentioned);
        let lent = scan::lent_mutably(iterable);
        if lent.is_empty() {
            return;
        }
        let tensors = |v: Option<&Val>| match v {
            Some(Val::Tensor(_)) => true,
            Some(Val::Array(a)) => a.iter().all(|x| matches!(x, Val::Tensor(_))),
            _ => false,
        };
        for t in &lent {
            if !tensors(self.lookup(t)) {
                self.havoc(t);
            }
        }
        let mut names = Vec::new();
        pat_names(pat, &mut names);
        for n in names {
            let known = self.refs.entry(n.clone()).or_default();
            for t in &lent {
                if *t != n && !known.contains(t) {
                    known.push(t.clone());
                }
            }
        }
    }

    /// A statement under `#[cfg(…)]`: whether it exists depends on the build, which the macro
    /// does not know. Communication there is RW012; anything else is skipped code.
    fn cfg_stmt(&mut self, s: &Stmt, span: Span) -> Flow {
        let comm = communicates(&self.handles(), &|f| f.visit_stmt(s));
        if comm {
            self.unverifiable(
                span,
                "under `#[cfg(…)]`, which the macro cannot evaluate",
                "move the communication out of the `#[cfg]` statement; let the `#[cfg]` code compute values only",
            );
            return Flow::Normal(Val::Unit);
        }
        self.skip(span, &|f| f.visit_stmt(s));
        if let Stmt::Local(l) = s {
            // The binding may or may not exist: either way its value is unknown.
            let mut names = Vec::new();
            pat_names(&l.pat, &mut names);
            for n in names {
                match self.lookup(&n) {
                    Some(_) => self.havoc(&n),
                    None => self.bind(n, Val::Unknown),
                }
            }
        }
        Flow::Normal(Val::Unit)
    }

    fn check_macro(&mut self, m: &syn::Macro) {
        let comm = communicates(&self.handles(), &|f| f.visit_macro(m));
        if !comm {
            return;
        }
        let text = m.tokens.to_string();
        let (why, todo) = if scan::mentions_comm(&text) {
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
            Pat::Ident(p) => {
                // `x @ (a, b)`: the sub-pattern binds too.
                if let Some((_, sub)) = &p.subpat {
                    self.bind_pat(sub, v.clone());
                }
                self.bind(p.ident.to_string(), v);
            }
            // `let [a, b] = [x, y]`: element by element, for a list of that length.
            Pat::Slice(sl) => match v {
                Val::Array(vals)
                    if vals.len() == sl.elems.len()
                        && !sl.elems.iter().any(|e| matches!(e, Pat::Rest(_))) =>
                {
                    for (p, v) in sl.elems.iter().zip(vals) {
                        self.bind_pat(p, v);
                    }
                }
                _ => self.bind_unknown(pat),
            },
            Pat::Type(t) => {
                // The annotation is the variable's type: it decides an element type the value
                // leaves open, and gives one to a value the macro does not know (`let t:
                // Tensor<f32>;` assigned later, `let v: Vec<f32> = …`).
                let v = match (typed(v, &t.ty), dtype_of_type(&t.ty), type_kind(&t.ty)) {
                    (Val::Tensor(mut tv), Some(d), _) if tv.open() => {
                        tv.dtype = Some(d);
                        tv.weak = false;
                        Val::Tensor(tv)
                    }
                    (Val::Scalar(None), Some(d), _) => Val::Scalar(Some(d)),
                    (Val::Unknown, Some(d), TypeKind::Tensor) => Val::Tensor(TVal::of(d)),
                    (Val::Unknown, Some(d), TypeKind::Data) => Val::Data(d),
                    // Numbers of unknown value: data of the annotated type.
                    (Val::Array(a), Some(d), TypeKind::Data)
                        if !a.is_empty() && a.iter().all(|x| matches!(x, Val::Scalar(_))) =>
                    {
                        Val::Data(d)
                    }
                    // Tensors (`Vec<Tensor<f32>>`): each takes the element type it leaves open.
                    (Val::Array(a), Some(d), TypeKind::Data) => Val::Array(
                        a.into_iter()
                            .map(|x| match x {
                                Val::Tensor(mut t) if t.open() => {
                                    t.dtype = Some(d);
                                    t.weak = false;
                                    Val::Tensor(t)
                                }
                                x => x,
                            })
                            .collect(),
                    ),
                    (v, _, _) => v,
                };
                self.bind_pat(&t.pat, v);
            }
            // `|&x|`, `&(a, b)`: the evaluator's values are not references.
            Pat::Reference(r) => self.bind_pat(&r.pat, v),
            Pat::Paren(p) => self.bind_pat(&p.pat, v),
            Pat::Tuple(t) => match v {
                Val::Tuple(vals) if vals.len() == t.elems.len() => {
                    for (p, v) in t.elems.iter().zip(vals) {
                        self.bind_pat(p, v);
                    }
                }
                _ => self.bind_unknown(pat),
            },
            // Any other pattern (`S { a, .. }`, `Some(x)`): its names are bound, to values the
            // macro does not know — not left naming an outer variable they shadow.
            _ => self.bind_unknown(pat),
        }
    }

    /// Binds every name `pat` binds to an unknown value.
    fn bind_unknown(&mut self, pat: &Pat) {
        let mut names = Vec::new();
        pat_names(pat, &mut names);
        for n in names {
            self.bind(n, Val::Unknown);
        }
    }

    fn expr(&mut self, e: &Expr) -> Flow {
        if self.shared.halted() {
            return Flow::Return;
        }
        if !self.shared.spend(1) {
            return Flow::Return;
        }
        if self.depth >= MAX_NESTING {
            self.too_deep(e.span());
            return Flow::Return;
        }
        self.depth += 1;
        let flow = self.expr_inner(e);
        self.depth -= 1;
        flow
    }

    fn expr_inner(&mut self, e: &Expr) -> Flow {
        macro_rules! val {
            ($e:expr) => {
                match self.expr($e) {
                    Flow::Normal(v) => v,
                    other => return other,
                }
            };
        }
        let v = match e {
            Expr::Lit(l) => lit(&l.lit),
            Expr::Path(p) => self.path(p),
            Expr::Paren(p) => val!(&p.expr),
            Expr::Group(g) => val!(&g.expr),
            Expr::Reference(r) => val!(&r.expr),
            // `x?`: an `Option` the macro knows unwraps or returns `None` from the closure or
            // helper it is in (the program's own body returns a `Result`, where an `Err` ends
            // the rank at run time, so its values are the successes').
            Expr::Try(t) => match val!(&t.expr) {
                Val::Opt(Some(v)) => *v,
                Val::Opt(None) => return Flow::Return,
                // In a closure or helper, `?` on what the macro cannot tell is a `Some` (or an
                // `Ok`: it does not tell them from `Err`s) may return early, so the body's value
                // is unknown. (Bodies never communicate: none of their calls is skipped.) In
                // the program's own body, an `Err` ends the rank, and the runtime stops the
                // world with it.
                _ if self.bodies > 0 => return Flow::Return,
                v => v,
            },
            Expr::Block(b) if b.label.is_some() => {
                self.enter_frame(b.label.as_ref(), false);
                let flow = self.block(&b.block);
                let early = self.leave_frame(&|f| f.visit_block(&b.block));
                let label = b.label.as_ref().map(|l| l.name.ident.to_string());
                return match flow {
                    Flow::Normal(_) if early => Flow::Normal(Val::Unknown),
                    Flow::Break(l, v) if l.is_some() && l == label => {
                        Flow::Normal(if early { Val::Unknown } else { v })
                    }
                    other => other,
                };
            }
            Expr::Block(b) => return self.block(&b.block),
            Expr::Break(b) => {
                let v = match &b.expr {
                    Some(x) => val!(x),
                    None => Val::Unit,
                };
                return Flow::Break(b.label.as_ref().map(|l| l.ident.to_string()), v);
            }
            Expr::Continue(c) => {
                return Flow::Continue(c.label.as_ref().map(|l| l.ident.to_string()));
            }
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
                    Val::Int(n, _) if (0..=MAX_REPEAT).contains(&n) => {
                        Val::Array(vec![x; n as usize])
                    }
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
                    (op @ (UnOp::Neg(_) | UnOp::Not(_)), Val::Int(i, t)) => int_unary(op, i, t),
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
                self.assign_place(&a.left, v);
                // `s = Some(r)`, `slot = &mut t`: `s` may hold the reference now.
                let into: Vec<String> = scan::base_ident(&a.left).into_iter().collect();
                self.note_stores(&into, [&*a.right]);
                Val::Unit
            }
            Expr::Range(r) => {
                let start = match &r.start {
                    Some(s) => val!(s),
                    None => Val::Int(0, IntTy::Open),
                };
                let end = match &r.end {
                    Some(s) => val!(s),
                    None => Val::Unknown,
                };
                match (start, end) {
                    (Val::Int(a, ta), Val::Int(b, tb)) => {
                        let end = if matches!(r.limits, syn::RangeLimits::Closed(_)) {
                            b.checked_add(1)
                        } else {
                            Some(b)
                        };
                        match (end, IntTy::join(ta, tb)) {
                            (Some(end), Some(ty)) => Val::Range {
                                start: a,
                                end,
                                step: 1,
                                rev: false,
                                ty,
                            },
                            _ => Val::Unknown,
                        }
                    }
                    _ => Val::Unknown,
                }
            }
            Expr::If(i) => return self.if_expr(i),
            Expr::Match(m) => return self.match_expr(m),
            Expr::ForLoop(f) => return self.for_loop(f),
            Expr::While(w) => return self.while_loop(e, w),
            Expr::Loop(l) => {
                return self.cond_loop(
                    e,
                    l.label.as_ref(),
                    LoopCond::Always,
                    &l.body,
                    l.loop_token.span,
                );
            }
            Expr::Closure(c) => {
                if self.has_comm_expr(&c.body) {
                    self.unverifiable(
                        c.or1_token.span,
                        "inside a closure, which may run any number of times",
                        "make the calls directly in the program's body",
                    );
                    Val::Unknown
                } else {
                    // It may run at any time from here on: what it assigns is unknown now, and
                    // again whenever it is called.
                    let fx = scan::effects(&|f| f.visit_expr(e));
                    if fx.too_deep {
                        self.too_deep(c.span());
                    }
                    // (A name not in scope here is one of its own: `let mut a = r; a += 1`.)
                    let written: Vec<String> = self
                        .written(&fx)
                        .into_iter()
                        .filter(|n| self.lookup(n).is_some())
                        .collect();
                    for n in &written {
                        self.havoc(n);
                    }
                    // What it mentions, as it is now: a `move` closure keeps a copy, and what
                    // another borrows cannot change while it lives — but a later `let` may
                    // shadow the name, which the closure does not see.
                    let mut captured: Vec<(String, Val)> = Vec::new();
                    let mut names = Vec::new();
                    scan::idents(&c.body, &mut names);
                    for n in names {
                        if let Some(v) = self.lookup(&n)
                            && !captured.iter().any(|(m, _)| *m == n)
                        {
                            captured.push((n, v.clone()));
                        }
                    }
                    Val::Closure(written, Box::new(c.clone()), captured)
                }
            }
            Expr::Return(r) => {
                if let Some(x) = &r.expr {
                    val!(x);
                }
                return Flow::Return;
            }
            Expr::Struct(st) => {
                let mut fields = Vec::new();
                for f in &st.fields {
                    let v = val!(&f.expr);
                    if holds_handle(&v) {
                        self.unverifiable(
                            f.expr.span(),
                            "the context or a batch is stored in a struct, whose use the macro cannot follow",
                            "call the context's methods directly in the program's body",
                        );
                    }
                    if let syn::Member::Named(n) = &f.member {
                        fields.push((n.to_string(), v));
                    }
                }
                if let Some(rest) = &st.rest {
                    val!(rest);
                }
                // Every field named and none taken from another value: a record, read by field.
                if st.rest.is_none() && fields.len() == st.fields.len() {
                    Val::Record(fields)
                } else {
                    Val::Unknown
                }
            }
            Expr::Macro(m) => {
                // `vec![x; n]`: like the array `[x; n]`.
                if m.mac.path.is_ident("vec")
                    && let Ok((x, n)) = m.mac.parse_body_with(|input: syn::parse::ParseStream| {
                        let x: Expr = input.parse()?;
                        input.parse::<syn::Token![;]>()?;
                        Ok((x, input.parse::<Expr>()?))
                    })
                {
                    let x = val!(&x);
                    return Flow::Normal(match val!(&n) {
                        Val::Int(n, _) if (0..=MAX_REPEAT).contains(&n) => {
                            Val::Array(vec![x; n as usize])
                        }
                        _ => Val::Unknown,
                    });
                }
                if m.mac.path.is_ident("vec")
                    && let Ok(list) = m.mac.parse_body_with(
                        syn::punctuated::Punctuated::<Expr, syn::Token![,]>::parse_terminated,
                    )
                {
                    let mut out = Vec::new();
                    for x in &list {
                        out.push(val!(x));
                    }
                    return Flow::Normal(Val::Array(out));
                }
                self.check_macro(&m.mac);
                Val::Unknown
            }
            Expr::MethodCall(m) => {
                let flow = self.method_call(m);
                // `v.push(&mut t)`, `o.replace(r)`: the receiver may hold the reference now.
                let into: Vec<String> = scan::base_ident(&m.receiver).into_iter().collect();
                self.note_stores(&into, m.args.iter());
                return flow;
            }
            // (A function given references forgets what they refer to at once: see
            // `havoc_lent`.)
            Expr::Call(c) => return self.call(c),
            Expr::Index(ix) => {
                let base = val!(&ix.expr);
                // `&mut outs[..]`, `&xs[1..]`: the slice of a list of static length.
                if let (Val::Array(a), Expr::Range(r)) = (&base, &*ix.index) {
                    let bound = |v: Val| match v {
                        Val::Int(i, _) if (0..=a.len() as i128).contains(&i) => Some(i as usize),
                        _ => None,
                    };
                    let start = match &r.start {
                        Some(e) => bound(val!(e)),
                        None => Some(0),
                    };
                    let end = match &r.end {
                        Some(e) => match val!(e) {
                            Val::Int(i, _) if matches!(r.limits, syn::RangeLimits::Closed(_)) => {
                                bound(Val::Int(i + 1, IntTy::USIZE))
                            }
                            v => bound(v),
                        },
                        None => Some(a.len()),
                    };
                    return Flow::Normal(match (start, end) {
                        (Some(s), Some(e)) if s <= e => Val::Array(a[s..e].to_vec()),
                        _ => Val::Unknown,
                    });
                }
                let i = val!(&ix.index);
                match (base, i) {
                    (Val::Array(a), Val::Int(i, _)) if i >= 0 && (i as usize) < a.len() => {
                        a[i as usize].clone()
                    }
                    _ => Val::Unknown,
                }
            }
            Expr::Field(f) => match (val!(&f.base), &f.member) {
                // `pair.1`: an element of a tuple.
                (Val::Tuple(t), syn::Member::Unnamed(i)) => {
                    t.get(i.index as usize).cloned().unwrap_or(Val::Unknown)
                }
                // `plan.root`: a field of a record.
                (Val::Record(fs), syn::Member::Named(n)) => fs
                    .iter()
                    .find(|(name, _)| n == name)
                    .map_or(Val::Unknown, |(_, v)| v.clone()),
                _ => Val::Unknown,
            },
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

    /// A loop the macro cannot unroll: fine unless it communicates; what it assigns is
    /// unknown afterwards.
    fn uncounted(&mut self, whole: &Expr, body: &syn::Block, span: Span, what: &str) -> Val {
        if self.has_comm_block(body) {
            self.unverifiable(
                span,
                &format!("inside {what}, whose iterations the macro cannot count"),
                "use `for` over a range with bounds computed from literals, `ctx.rank()` and `ctx.world()`",
            );
        } else {
            self.skip(span, &|f| f.visit_expr(whole));
        }
        Val::Unit
    }

    fn path(&mut self, p: &syn::ExprPath) -> Val {
        let segs = path_idents(p);
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
        // `u8::MAX`, `i64::MIN`, `u32::BITS`: what every target agrees on.
        if let [ty, name] = &segs[..]
            && let Some(t) = IntTy::named(ty)
        {
            return t.constant(name);
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

    /// `place = v`: a variable, or an element of an array variable at a static index (a shape
    /// being edited, `shape[1] *= world`); any other place (`s.f`, `*r`, an unknown index)
    /// changes its variable in a way not modelled.
    fn assign_place(&mut self, place: &Expr, v: Val) {
        let number = matches!(v, Val::Int(..) | Val::Scalar(_) | Val::Bool(_));
        self.store(place, v, number);
    }

    /// [`Eval::assign_place`]; `number`: what is written is a number (or a compound assignment
    /// changes a value in place), so a tensor's data written element by element keeps its
    /// shape (see [`Eval::havoc_place`]).
    fn store(&mut self, place: &Expr, v: Val, number: bool) {
        match (place, ident_of(place)) {
            (Expr::Path(_), Some(name)) => self.assign(&name, v),
            (Expr::Index(ix), _) => {
                let base = match &*ix.expr {
                    Expr::Path(_) => ident_of(&ix.expr),
                    _ => None,
                };
                let index = match self.expr(&ix.index) {
                    Flow::Normal(Val::Int(i, _)) => usize::try_from(i).ok(),
                    _ => None,
                };
                if let (Some(name), Some(i)) = (base, index)
                    && let Some(Val::Array(mut a)) = self.lookup(&name).cloned()
                    && i < a.len()
                {
                    a[i] = v;
                    self.assign(&name, Val::Array(a));
                    self.wrote_into(&name);
                } else {
                    self.havoc_place(place, number);
                }
            }
            // `plan.root = v`, `pair.0 = v`: a field of a record or tuple a variable holds.
            (Expr::Field(f), _) => {
                let base = match &*f.base {
                    Expr::Path(_) => ident_of(&f.base),
                    _ => None,
                };
                let updated =
                    base.as_ref()
                        .and_then(|name| match (self.lookup(name).cloned(), &f.member) {
                            (Some(Val::Record(mut fs)), syn::Member::Named(n)) => {
                                fs.iter_mut().find(|(k, _)| n == k)?.1 = v.clone();
                                Some(Val::Record(fs))
                            }
                            (Some(Val::Tuple(mut t)), syn::Member::Unnamed(i)) => {
                                *t.get_mut(i.index as usize)? = v.clone();
                                Some(Val::Tuple(t))
                            }
                            _ => None,
                        });
                match (base, updated) {
                    (Some(name), Some(whole)) => {
                        self.assign(&name, whole);
                        self.wrote_into(&name);
                    }
                    _ => self.havoc_place(place, number),
                }
            }
            // Destructuring assignment (`(a, b) = (b, a)`, `[x, y] = …`): part by part when the
            // value's shape is known, else every place in it is forgotten.
            (Expr::Tuple(_) | Expr::Array(_), _) => {
                let parts: Vec<&Expr> = match place {
                    Expr::Tuple(t) => t.elems.iter().collect(),
                    Expr::Array(a) => a.elems.iter().collect(),
                    _ => Vec::new(),
                };
                // (Rust's types make a tuple's value a tuple, an array's a list.) A `..` among
                // the parts stands for as many values as the others leave over.
                let rest = parts.iter().position(|p| matches!(p, Expr::Range(_)));
                let vals = match (v, rest) {
                    (Val::Tuple(vals) | Val::Array(vals), None) if vals.len() == parts.len() => {
                        Some(vals)
                    }
                    (Val::Tuple(mut vals) | Val::Array(mut vals), Some(k))
                        if vals.len() + 1 >= parts.len() =>
                    {
                        let covered = vals.len() + 1 - parts.len();
                        vals.splice(k..k + covered, [Val::Unit]);
                        Some(vals)
                    }
                    _ => None,
                };
                self.assign_parts(&parts, vals);
            }
            (Expr::Paren(p), _) => self.store(&p.expr, v, number),
            (Expr::Infer(_), _) => {}
            // `S { x: a, .. } = s`, `S(a, b) = s`: the fields' places, unknown.
            (Expr::Struct(st), _) => {
                let parts: Vec<&Expr> = st.fields.iter().map(|f| &f.expr).collect();
                self.assign_parts(&parts, None);
            }
            (Expr::Call(c), _) => {
                let parts: Vec<&Expr> = c.args.iter().collect();
                self.assign_parts(&parts, None);
            }
            (left, _) => self.havoc_place(left, number),
        }
    }

    /// The parts of a destructuring assignment, each given its value (`None`: unknown). A rest
    /// `..` is given a place-holder and assigns nothing.
    fn assign_parts(&mut self, parts: &[&Expr], vals: Option<Vec<Val>>) {
        match vals {
            Some(vals) => {
                for (p, x) in parts.iter().zip(vals) {
                    if !matches!(p, Expr::Range(_)) {
                        self.assign_place(p, x);
                    }
                }
            }
            _ => {
                for p in parts {
                    match p {
                        Expr::Tuple(_)
                        | Expr::Array(_)
                        | Expr::Paren(_)
                        | Expr::Struct(_)
                        | Expr::Call(_) => self.assign_place(p, Val::Unknown),
                        Expr::Infer(_) | Expr::Range(_) => {}
                        // (A tensor keeps its element type, as a variable it is.)
                        _ => self.havoc_place(p, false),
                    }
                }
            }
        }
    }

    /// The variables code with effects `fx` may change by assignment: those it assigns, and
    /// those it writes through a method or call (`*v.first_mut().unwrap() = 1`) — but a tensor
    /// written element by element, whose shape and type cannot change that way (as in
    /// [`Eval::havoc_place`]).
    ///
    /// A method may change its receiver too (`v.push(x)`, `o.take()`, `it.next()`): a list,
    /// `Option`, range or tuple a method is called on counts as written. (What the macro knows
    /// of a tensor, a number or a handle no method changes.)
    fn written(&self, fx: &scan::Effects) -> Vec<String> {
        let mut out = fx.assigned.clone();
        // A variable that may hold a mutable reference, named anywhere in code the macro does
        // not follow: handed to a call (`set(r, 1)`, `Vec::push(r, 1)`), matched by a pattern
        // (`if let Some(x) = r { *x = 1 }`) or reborrowed, it may be written through.
        for n in &fx.mentioned {
            if !out.contains(n) && self.may_hold_reference(n) {
                out.push(n.clone());
            }
        }
        for n in &fx.written_through {
            if !out.contains(n) && !matches!(self.lookup(n), Some(Val::Tensor(_))) {
                out.push(n.clone());
            }
        }
        for n in &fx.reshaped {
            if !out.contains(n) && matches!(self.lookup(n), Some(Val::Tensor(_))) {
                out.push(n.clone());
            }
        }
        for n in &fx.receivers {
            if !out.contains(n)
                && matches!(
                    self.lookup(n),
                    Some(
                        Val::Array(_)
                            | Val::Opt(_)
                            | Val::Range { .. }
                            | Val::Tuple(_)
                            | Val::Record(_)
                    )
                )
            {
                out.push(n.clone());
            }
        }
        out
    }

    /// After an assignment to `place`, which the macro does not follow: forgets what it may
    /// have written. A number written into a tensor's data (`t.as_mut_slice()?[0] = 1.0`)
    /// changes neither its shape nor its type, so the tensor is kept; anything else may be a
    /// whole tensor written through a reference a call returned (`*pick(&mut t) = u`).
    fn havoc_place(&mut self, place: &Expr, number: bool) {
        for (name, inside) in scan::place_roots(place) {
            if !(number && inside && matches!(self.lookup(&name), Some(Val::Tensor(_)))) {
                self.havoc(&name);
            }
        }
    }

    /// The right side of `&&`/`||` after a left side the macro does not know: code that may
    /// not run, as an `if`'s branch on data.
    fn right_on_data(&mut self, right: &Expr, span: Span) {
        if self.has_comm_expr(right) {
            self.unverifiable(
                span,
                "on the right of `&&`/`||`, after a condition that depends on run-time data",
                "compute the condition from literals, `ctx.rank()` and `ctx.world()`, or make the call outside it",
            );
        } else {
            self.skip(span, &|f| f.visit_expr(right));
        }
    }

    /// An `if` or `while` condition with `let`s in it: one (`let Some(p) = peer`), or a chain
    /// of them and conditions joined by `&&` (`let Some(p) = peer && p != rank`, Rust 2024).
    /// Its value, and what its patterns bind for the body; each part runs only if the ones
    /// before it held, so a part after one the macro cannot decide is code on data.
    fn chain_cond(&mut self, e: &Expr) -> Result<(Val, Vec<(String, Val)>), Flow> {
        match e {
            Expr::Let(l) => self.let_cond(l),
            Expr::Binary(b) if matches!(b.op, BinOp::And(_)) => {
                let (left, mut bound) = self.chain_cond(&b.left)?;
                match left {
                    Val::Bool(true) => {
                        self.env.push();
                        for (n, v) in &bound {
                            self.bind(n.clone(), v.clone());
                        }
                        let right = self.chain_cond(&b.right);
                        self.env.pop();
                        let (right, more) = right?;
                        Ok(match right {
                            Val::Bool(true) => {
                                bound.extend(more);
                                (Val::Bool(true), bound)
                            }
                            other => (other, Vec::new()),
                        })
                    }
                    Val::Bool(false) | Val::Poison => Ok((left, Vec::new())),
                    _ => {
                        self.right_on_data(&b.right, b.op.span());
                        Ok((Val::Unknown, Vec::new()))
                    }
                }
            }
            c => match self.expr(c) {
                Flow::Normal(v) => Ok((v, Vec::new())),
                other => Err(other),
            },
        }
    }

    fn binary(&mut self, b: &syn::ExprBinary) -> Flow {
        let l = match self.expr(&b.left) {
            Flow::Normal(v) => v,
            other => return other,
        };
        // Short-circuit like Rust: the right side of `&&`/`||` may not run.
        match (&b.op, &l) {
            (BinOp::And(_), Val::Bool(false)) => return Flow::Normal(Val::Bool(false)),
            (BinOp::Or(_), Val::Bool(true)) => return Flow::Normal(Val::Bool(true)),
            // Whether the right side runs is unknown: it is code on a condition on data, as
            // an `if`'s branch is (`data && it.next().is_some()` may not advance `it`).
            (BinOp::And(_) | BinOp::Or(_), Val::Poison) => return Flow::Normal(Val::Poison),
            (BinOp::And(_) | BinOp::Or(_), l) if !matches!(l, Val::Bool(_)) => {
                self.right_on_data(&b.right, b.op.span());
                return Flow::Normal(Val::Unknown);
            }
            _ => {}
        }
        let r = match self.expr(&b.right) {
            Flow::Normal(v) => v,
            other => return other,
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
            self.store(&b.left, v, true);
            return Flow::Normal(Val::Unit);
        }
        let symbolic = matches!(l, Val::Sym { .. }) || matches!(r, Val::Sym { .. });
        let ints = match (&l, &r) {
            (Val::Int(a, t), Val::Int(b, _)) => Some((*a, *t, *b)),
            _ => None,
        };
        let v = match ints {
            Some((x, IntTy::Open, y)) if literals_only(&Expr::Binary(b.clone())) => {
                constant_binop(&b.op, x, y)
            }
            _ => binop(&b.op, l, r),
        };
        if let (Some((x, t, y)), Val::Unknown) = (ints, &v) {
            let exact = match b.op {
                BinOp::Add(_) => x.checked_add(y),
                BinOp::Sub(_) => x.checked_sub(y),
                BinOp::Mul(_) => x.checked_mul(y),
                _ => None,
            };
            let (e, op) = (&b, &b.op);
            self.lost.get_or_insert_with(|| {
                Lost::arithmetic(format!(
                    "`{}` is {x} {} {y} at rank {}, which {}",
                    quote::quote!(#e),
                    quote::quote!(#op),
                    self.rank,
                    t.out_of_range(exact)
                ))
            });
        }
        match (v, symbolic) {
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

    /// `let pat = value` as the condition of an `if` or `while`: whether it matches (true,
    /// false, or unknown), with what it binds. Its bindings may be references into what it
    /// matches, whether the body runs or is skipped (see `note_references`).
    fn let_cond(&mut self, l: &syn::ExprLet) -> Result<(Val, Vec<(String, Val)>), Flow> {
        let v = match self.expr(&l.expr) {
            Flow::Normal(Val::Poison) => return Ok((Val::Poison, Vec::new())),
            Flow::Normal(v) => v,
            other => return Err(other),
        };
        self.note_references(&l.pat, &l.expr);
        Ok(match pat_matches(&l.pat, &v) {
            Matched::Yes(b) => (Val::Bool(true), b),
            Matched::No => (Val::Bool(false), Vec::new()),
            Matched::Unknown => (Val::Unknown, Vec::new()),
        })
    }

    fn if_expr(&mut self, i: &syn::ExprIf) -> Flow {
        // `if let p = v`: taken if the pattern matches a value the macro knows, with its
        // bindings in the branch; unknown (as a condition on data) if it cannot tell.
        let (cond, bound) = match &*i.cond {
            c if has_let(c) => match self.chain_cond(c) {
                Ok(c) => c,
                Err(flow) => return flow,
            },
            c => match self.expr(c) {
                Flow::Normal(v) => (v, Vec::new()),
                other => return other,
            },
        };
        match cond {
            Val::Bool(true) | Val::Bool(false) => {
                let taken = if matches!(cond, Val::Bool(true)) {
                    self.env.push();
                    for (n, v) in bound {
                        self.bind(n, v);
                    }
                    let r = self.block(&i.then_branch);
                    self.env.pop();
                    r
                } else {
                    match &i.else_branch {
                        Some((_, e)) => self.expr(e),
                        None => Flow::Normal(Val::Unit),
                    }
                };
                // Both arms have one type in Rust: an element type the taken arm leaves open
                // is the other arm's, if its syntax says.
                let then_tail = Expr::Block(syn::ExprBlock {
                    attrs: Vec::new(),
                    label: None,
                    block: i.then_branch.clone(),
                });
                let arms = [Some(&then_tail), i.else_branch.as_ref().map(|(_, e)| &**e)];
                unify_arms(taken, arms.into_iter().flatten())
            }
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
                         check the branch's calls as their own `#[rankwise::program]` function and choose in unchecked \
                         code, whose choice the runtime's checks cover",
                    );
                } else {
                    self.skip(i.if_token.span, &|f| {
                        f.visit_block(&i.then_branch);
                        if let Some((_, e)) = &i.else_branch {
                            f.visit_expr(e);
                        }
                    });
                }
                Flow::Normal(Val::Unknown)
            }
        }
    }

    fn match_expr(&mut self, m: &syn::ExprMatch) -> Flow {
        let scrut = match self.expr(&m.expr) {
            Flow::Normal(v) => v,
            other => return other,
        };
        if let Val::Poison = scrut {
            return Flow::Normal(Val::Poison);
        }
        // An arm's bindings may be references into what it matches, whether it runs or the
        // whole `match` is skipped.
        for arm in &m.arms {
            self.note_references(&arm.pat, &m.expr);
        }
        // An arm under `#[cfg]` may not exist: then another arm matches.
        let cfg_arms = m.arms.iter().any(|a| cfg_attr(&a.attrs).is_some());
        // Tuples and lists too, when every part is known: then a pattern the macro cannot
        // decide is one it does not read, as the note below says.
        let decidable = match &scrut {
            Val::Int(..) | Val::Bool(_) | Val::Opt(_) => true,
            Val::Tuple(parts) | Val::Array(parts) => parts.iter().all(known_through),
            _ => false,
        };
        if decidable && !cfg_arms {
            for arm in &m.arms {
                let bound = match pat_matches(&arm.pat, &scrut) {
                    Matched::Yes(bound) => bound,
                    Matched::No => continue,
                    // Whether this arm is taken is unknown, so every later one is too.
                    Matched::Unknown => {
                        let (line, p) = (arm.pat.span().start().line, &arm.pat);
                        self.lost.get_or_insert_with(|| Lost {
                            why: format!(
                                "the `match` decides by the pattern `{}` at line {line}, which \
                                 the macro cannot read (a constant's name, or a kind of pattern \
                                 it does not follow)",
                                quote::quote!(#p)
                            ),
                            help: "match on literals and ranges of literals, or compare with \
                                   `==` in an `if`",
                        });
                        break;
                    }
                };
                {
                    self.env.push();
                    for (n, v) in bound {
                        self.bind(n, v);
                    }
                    let guard_ok = match &arm.guard {
                        Some((_, g)) => match self.expr(g) {
                            Flow::Normal(Val::Bool(b)) => Some(b),
                            Flow::Normal(_) => None,
                            other => {
                                self.env.pop();
                                return other;
                            }
                        },
                        None => Some(true),
                    };
                    match guard_ok {
                        Some(true) => {
                            let r = self.expr(&arm.body);
                            self.env.pop();
                            return unify_arms(r, m.arms.iter().map(|a| &*a.body));
                        }
                        Some(false) => {
                            self.env.pop();
                            continue;
                        }
                        None => {
                            self.env.pop();
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
        } else {
            self.skip(m.match_token.span, &|f| {
                for a in &m.arms {
                    if let Some((_, g)) = &a.guard {
                        f.visit_expr(g);
                    }
                    f.visit_expr(&a.body);
                }
            });
        }
        Flow::Normal(Val::Unknown)
    }

    /// A `while` loop whose condition the macro can compute at every iteration (MPI-style
    /// `while mask < world { …; mask <<= 1 }`) is unrolled like a `for` loop; so is a `while
    /// let` whose pattern it can match, and a `loop` (until a `break`, whose value it has).
    /// A condition that depends on run-time data makes the loop uncounted: an error if it
    /// communicates, otherwise its effects are forgotten.
    fn while_loop(&mut self, whole: &Expr, w: &syn::ExprWhile) -> Flow {
        let cond = match &*w.cond {
            c if has_let(c) => LoopCond::Let(c),
            c => LoopCond::While(c),
        };
        self.cond_loop(whole, w.label.as_ref(), cond, &w.body, w.while_token.span)
    }

    /// A `loop`, `while` or `while let` loop (see [`Eval::while_loop`]).
    fn cond_loop(
        &mut self,
        whole: &Expr,
        label: Option<&syn::Label>,
        cond: LoopCond,
        body: &syn::Block,
        span: Span,
    ) -> Flow {
        let what = match cond {
            LoopCond::Always => "a `loop`",
            LoopCond::While(_) => "a `while` loop",
            LoopCond::Let(_) => "a `while let` loop",
        };
        let name = label.map(|l| l.name.ident.to_string());
        let mine = |l: &Option<String>| l.is_none() || *l == name;
        self.enter_frame(label, true);
        let mut out = Flow::Normal(Val::Unit);
        // Evaluation is deterministic: an iteration that leaves every variable as it was will
        // be followed by the same iteration forever.
        let mut before = self.fingerprint();
        let mut iterations = 0usize;
        loop {
            // Whether the body runs again, with what the pattern binds for it.
            let (verdict, bound) = match cond {
                LoopCond::Always => (Val::Bool(true), Vec::new()),
                LoopCond::While(c) => match self.expr(c) {
                    Flow::Normal(v) => (v, Vec::new()),
                    other => {
                        out = other;
                        break;
                    }
                },
                LoopCond::Let(c) => match self.chain_cond(c) {
                    Ok(c) => c,
                    Err(flow) => {
                        out = flow;
                        break;
                    }
                },
            };
            match verdict {
                Val::Bool(false) | Val::Poison => break,
                Val::Bool(true) if self.budget > 0 && iterations < MAX_WHILE => {}
                Val::Bool(true) => {
                    if self.has_comm_block(body) {
                        self.unverifiable(
                            span,
                            &format!(
                                "in {what} that does not end within the iterations the macro unrolls"
                            ),
                            "make sure the loop ends (a counter that grows to a bound computed \
                             from literals, `ctx.rank()` and `ctx.world()`)",
                        );
                    } else {
                        self.skip(span, &|v| v.visit_expr(whole));
                    }
                    out = Flow::Normal(Val::Unknown);
                    break;
                }
                _ => {
                    self.uncounted(
                        whole,
                        body,
                        span,
                        &format!("{what} whose condition depends on run-time data"),
                    );
                    break;
                }
            }
            self.budget = self.budget.saturating_sub(1);
            iterations += 1;
            self.env.push();
            for (n, v) in bound {
                self.bind(n, v);
            }
            let r = self.block(body);
            self.env.pop();
            match r {
                Flow::Normal(_) => {}
                Flow::Continue(l) if mine(&l) => {}
                Flow::Break(l, v) if mine(&l) => {
                    out = Flow::Normal(v);
                    break;
                }
                other => {
                    out = other;
                    break;
                }
            }
            let after = self.fingerprint();
            if after == before {
                // Nothing changed: the loop runs forever (the next check says so).
                iterations = MAX_WHILE;
            }
            before = after;
        }
        let early = self.leave_frame(&|f| f.visit_expr(whole));
        match out {
            Flow::Normal(_) if early => Flow::Normal(Val::Unknown),
            other => other,
        }
    }

    /// Every visible variable's value, in name order: equal fingerprints, equal futures.
    fn fingerprint(&self) -> String {
        let mut vars: Vec<(&String, &Val)> = self.env.visible().collect();
        vars.sort_by(|a, b| a.0.cmp(b.0));
        format!("{vars:?}")
    }

    fn for_loop(&mut self, f: &syn::ExprForLoop) -> Flow {
        let iter = match self.expr(&f.expr) {
            Flow::Normal(v) => v,
            other => return other,
        };
        let comm = self.has_comm_block(&f.body);
        let too_many = |me: &mut Self| {
            if comm {
                me.unverifiable(
                    f.for_token.span,
                    "in a loop with too many iterations to unroll",
                    "check a smaller world size",
                );
            } else {
                me.skip(f.for_token.span, &|v| v.visit_block(&f.body));
            }
            Flow::Normal(Val::Unit)
        };
        let values: Option<Vec<Val>> = match iter {
            Val::Range {
                start,
                end,
                step,
                rev,
                ty,
            } if step > 0 && usize::try_from(step).is_ok() => {
                // Refuse before materialising: a huge range must not exhaust memory or time.
                if end.saturating_sub(start).max(0) / step > self.budget as i128 {
                    return too_many(self);
                }
                let mut v: Vec<i128> = (start..end.max(start)).step_by(step as usize).collect();
                if rev {
                    v.reverse();
                }
                Some(v.into_iter().map(|x| Val::Int(x, ty)).collect())
            }
            Val::Array(a) => Some(a),
            Val::Poison => return Flow::Normal(Val::Unit),
            _ => None,
        };
        let Some(values) = values else {
            if comm {
                self.unverifiable(
                    f.expr.span(),
                    "in a loop over something whose length the macro cannot compute",
                    "loop over a range with bounds computed from literals, `ctx.rank()` and `ctx.world()`",
                );
            } else {
                self.skip(f.for_token.span, &|v| v.visit_block(&f.body));
            }
            return Flow::Normal(Val::Unit);
        };
        if values.len() > self.budget {
            return too_many(self);
        }
        // Loops run whether or not they communicate: the values they compute (a peer found by
        // searching, a counter) are what later calls use.
        let label = f.label.as_ref().map(|l| l.name.ident.to_string());
        let mine = |l: &Option<String>| l.is_none() || *l == label;
        self.note_loop_references(&f.pat, &f.expr);
        // Iterations that the loop variable cannot change may be evaluated once (`summary`).
        let summarise = values.len() > 2
            && summary::loop_variable_is_inert(&f.pat, &f.body, &|n| {
                self.env.lookup(n).map(|v| matches!(v, Val::Tensor(_)))
            });
        self.enter_frame(f.label.as_ref(), true);
        let mut out = Flow::Normal(Val::Unit);
        let mut previous: Option<Delta> = None;
        let total = values.len();
        for (i, v) in values.into_iter().enumerate() {
            self.budget = self.budget.saturating_sub(1);
            let mark = summarise.then(|| self.mark());
            self.env.push();
            self.bind_pat(&f.pat, v);
            let r = self.block(&f.body);
            self.env.pop();
            match r {
                Flow::Normal(_) => {}
                Flow::Continue(l) if mine(&l) => {}
                Flow::Break(l, _) if mine(&l) => break,
                other => {
                    out = other;
                    break;
                }
            }
            let delta = mark.and_then(|m| self.delta_since(m));
            if delta.is_some() && delta == previous {
                // Two iterations in a row left every variable as it was and made the same
                // calls, and the loop variable cannot change that: so will every other.
                if let Some(d) = delta {
                    self.repeat(&d, total - i - 1);
                }
                break;
            }
            previous = delta;
        }
        // (A `for` loop's value is `()`: an early exit loses only what it assigns.)
        self.leave_frame(&|v| v.visit_block(&f.body));
        out
    }

    /// What an iteration may change, before it runs.
    fn mark(&self) -> Mark {
        Mark {
            fingerprint: self.fingerprint(),
            items: self.program.ranks[self.rank].len(),
            batches: self.batches.iter().map(Vec::len).collect(),
            ordinals: self.ordinals.clone(),
            registry: self.registry.len(),
            refs: self.refs.len(),
            taints: self.taints.len(),
            errors: self.shared.error_count(),
        }
    }

    /// The calls an iteration made since `m`, if it changed nothing else (no variable, group,
    /// diagnostic or open batch of its own); `None` otherwise.
    fn delta_since(&self, m: Mark) -> Option<Delta> {
        let unchanged = !self.shared.halted()
            && self.ordinals == m.ordinals
            && self.registry.len() == m.registry
            && self.refs.len() == m.refs
            && self.taints.len() == m.taints
            && self.shared.error_count() == m.errors
            && self.batches[m.batches.len()..].iter().all(Vec::is_empty)
            && self.fingerprint() == m.fingerprint;
        // Posts and waits name items by index, so their copies would name the wrong ones.
        let posts = self.program.ranks[self.rank][m.items..]
            .iter()
            .any(|i| matches!(i, Item::Post(_) | Item::Wait { .. }));
        if !unchanged || posts {
            return None;
        }
        Some(Delta {
            items: self.program.ranks[self.rank][m.items..].to_vec(),
            batch_ops: m
                .batches
                .iter()
                .enumerate()
                .filter(|&(b, &len)| self.batches[b].len() > len)
                .map(|(b, &len)| (b, self.batches[b][len..].to_vec()))
                .collect(),
        })
    }

    /// Records `d`'s calls `times` more times, as that many iterations would. The calls are
    /// charged as if made (the verifier's work grows with them), the evaluation they save is not.
    fn repeat(&mut self, d: &Delta, times: usize) {
        let ops = d.items.iter().map(|i| i.ops().len()).sum::<usize>()
            + d.batch_ops.iter().map(|(_, o)| o.len()).sum::<usize>();
        for _ in 0..times {
            if !self.shared.spend(analysis::OP_COST * ops as u64) {
                return;
            }
            self.budget = self.budget.saturating_sub(1);
            self.program.ranks[self.rank].extend(d.items.iter().cloned());
            for (b, ops) in &d.batch_ops {
                self.batches[*b].extend(ops.iter().cloned());
            }
        }
    }
}

/// The state an iteration of a loop may change (see `Eval::for_loop`).
struct Mark {
    fingerprint: String,
    items: usize,
    batches: Vec<usize>,
    ordinals: HashMap<Vec<usize>, u32>,
    registry: usize,
    refs: usize,
    taints: usize,
    errors: usize,
}

/// The calls one iteration made: items of the rank's program, and ops added to open batches.
#[derive(PartialEq)]
struct Delta {
    items: Vec<Item>,
    batch_ops: Vec<(usize, Vec<VOp>)>,
}

/// Whether a value is, or contains, the context, a batch or a group communicator.
fn holds_handle(v: &Val) -> bool {
    match v {
        Val::Ctx | Val::Comm(_) | Val::Batch(_) | Val::BatchComm(..) | Val::Request(_) => true,
        Val::Opt(Some(b)) => holds_handle(b),
        Val::Tuple(vs) | Val::Array(vs) => vs.iter().any(holds_handle),
        Val::Record(fs) => fs.iter().any(|(_, v)| holds_handle(v)),
        _ => false,
    }
}

/// The names a pattern binds.
fn pat_names(p: &Pat, out: &mut Vec<String>) {
    match p {
        Pat::Ident(i) => {
            out.push(i.ident.to_string());
            if let Some((_, sub)) = &i.subpat {
                pat_names(sub, out);
            }
        }
        Pat::Type(t) => pat_names(&t.pat, out),
        Pat::Tuple(t) => t.elems.iter().for_each(|e| pat_names(e, out)),
        Pat::TupleStruct(t) => t.elems.iter().for_each(|e| pat_names(e, out)),
        Pat::Reference(r) => pat_names(&r.pat, out),
        Pat::Slice(s) => s.elems.iter().for_each(|e| pat_names(e, out)),
        Pat::Struct(s) => s.fields.iter().for_each(|f| pat_names(&f.pat, out)),
        Pat::Or(o) => o.cases.iter().for_each(|c| pat_names(c, out)),
        Pat::Paren(p) => pat_names(&p.pat, out),
        _ => {}
    }
}

/// A value as [`Eval::havoc`] leaves it: a tensor without its shape, a handle as it was,
/// anything else unknown.
fn forgotten(v: &Val) -> Val {
    match v {
        Val::Tensor(t) => Val::Tensor(TVal {
            shape: None,
            ..t.clone()
        }),
        v if holds_handle(v) => v.clone(),
        _ => Val::Unknown,
    }
}

/// The outer attributes of a statement.
/// The value of a taken `if`/`match` arm, with an element type it leaves open taken from
/// another arm whose syntax gives one (rustc unifies the arms' types).
fn unify_arms<'e>(taken: Flow, arms: impl Iterator<Item = &'e Expr> + Clone) -> Flow {
    match taken {
        Flow::Normal(Val::Tensor(mut t)) if t.open() => {
            if let Some(d) = arms.into_iter().find_map(syntactic_tensor_dtype) {
                t.dtype = Some(d);
                t.weak = false;
            }
            Flow::Normal(Val::Tensor(t))
        }
        // A number: `if r == 0 { 42.0f32 } else { 0.0 }` is an f32 on every rank.
        Flow::Normal(Val::Scalar(d)) => Flow::Normal(Val::Scalar(
            arms.into_iter().find_map(syntactic_dtype).or(d),
        )),
        other => other,
    }
}

fn stmt_attrs(s: &Stmt) -> &[syn::Attribute] {
    match s {
        Stmt::Local(l) => &l.attrs,
        Stmt::Macro(m) => &m.attrs,
        Stmt::Item(_) => &[],
        Stmt::Expr(e, _) => expr_attrs(e),
    }
}

fn expr_attrs(e: &Expr) -> &[syn::Attribute] {
    macro_rules! attrs {
        ($($v:ident),*) => {
            match e {
                $(Expr::$v(x) => &x.attrs,)*
                _ => &[],
            }
        };
    }
    attrs!(
        Array, Assign, Async, Await, Binary, Block, Break, Call, Cast, Closure, Const, Continue,
        Field, ForLoop, Group, If, Index, Infer, Let, Lit, Loop, Macro, Match, MethodCall, Paren,
        Path, Range, RawAddr, Reference, Repeat, Return, Struct, Try, TryBlock, Tuple, Unary,
        Unsafe, While, Yield
    )
}

/// The span of a `#[cfg(…)]` among `attrs`, if there is one.
fn cfg_attr(attrs: &[syn::Attribute]) -> Option<Span> {
    attrs
        .iter()
        .find(|a| a.path().is_ident("cfg"))
        .map(|a| a.span())
}

/// Whether `v` is known all the way down: no part of it is unknown (a tuple or list of
/// numbers, flags and options of them).
fn known_through(v: &Val) -> bool {
    match v {
        Val::Int(..) | Val::Bool(_) | Val::Opt(None) => true,
        Val::Opt(Some(x)) => known_through(x),
        Val::Tuple(parts) | Val::Array(parts) => parts.iter().all(known_through),
        _ => false,
    }
}

/// Whether a condition holds a `let` (alone or in a chain joined by `&&`).
fn has_let(e: &Expr) -> bool {
    match e {
        Expr::Let(_) => true,
        Expr::Binary(b) if matches!(b.op, BinOp::And(_)) => has_let(&b.left) || has_let(&b.right),
        _ => false,
    }
}

#[cfg(test)]
mod tests;

//! Loops evaluated once for all their iterations.
//!
//! A ring all-reduce checked for `world in 2..=64` runs its loop body `2·(W−1)` times per rank
//! and world — about 180,000 evaluations of the same statements, which is most of the build
//! time. Yet every iteration makes the same calls: the loop variable only picks which chunk of
//! data is copied. This module decides, from the body's syntax, when the loop variable cannot
//! change what the macro computes; `Eval::for_loop` then evaluates iterations until two in a row
//! leave every variable as it was and record the same calls, and repeats those calls for the
//! remaining iterations instead of evaluating them. The result is exactly what evaluating every
//! iteration would give (see [`loop_variable_is_inert`]).

use std::collections::HashSet;

use syn::visit::{self, Visit};
use syn::{BinOp, Expr, UnOp};

use super::scan::is_comm;

thread_local! {
    /// Off only in the test that compares expansions with and without summaries.
    static ENABLED: std::cell::Cell<bool> = const { std::cell::Cell::new(true) };
}

/// Runs `f` with every loop evaluated iteration by iteration.
#[cfg(test)]
pub(crate) fn without<R>(f: impl FnOnce() -> R) -> R {
    ENABLED.with(|e| e.set(false));
    let r = f();
    ENABLED.with(|e| e.set(true));
    r
}

/// Whether the values bound by `pat` (the loop variable) cannot influence anything the macro
/// records or keeps from one iteration of `body`: calls, control flow leaving the body, and
/// variables that outlive the iteration. `outer(name)` says whether `name` is visible before the
/// loop and, if so, whether it holds a tensor.
///
/// The names that depend on the loop variable (`tainted`) are found by a fixpoint: a `let` whose
/// value mentions a tainted name, an assignment of one, a call with one among its arguments
/// (the receiver and every `&mut` argument may change), and anything bound or changed under a
/// condition, scrutinee or loop bound that mentions one. The loop variable is inert when:
/// * no communication call, `?`, `return`, `break`, `continue` or macro other than formatting
///   depends on a tainted name or sits under a tainted condition;
/// * no variable visible before the loop is assigned a tainted value; one that a call with
///   tainted arguments may change is a tensor (whose dtype and shape no method changes in
///   place — data the macro does not track);
/// * writes through references (`*r = …` after `let r = &mut x`, `for d in v.iter_mut()`, a
///   closure that assigns what it captured, a `&mut` argument) need no rule: the evaluator
///   models each of them by forgetting what the target held (`Eval::havoc`), whatever the
///   value written, so they cannot carry the loop variable out of an iteration.
///
/// Everything else about an iteration (the variables it changes without the loop variable, the
/// calls it makes) is the same from one iteration to the next *given the same variables*, which
/// `Eval::for_loop` checks by evaluating.
pub(super) fn loop_variable_is_inert(
    pat: &syn::Pat,
    body: &syn::Block,
    outer: &dyn Fn(&str) -> Option<bool>,
) -> bool {
    if !ENABLED.with(|e| e.get()) {
        return false;
    }
    let mut tainted: HashSet<String> = HashSet::new();
    bindings(pat, &mut tainted);
    let loop_names = tainted.clone();
    // A tensor from before the loop, not shadowed in the body: calls may change its data, which
    // the macro does not track, but not its dtype or shape (no method changes them in place).
    let mut local = HashSet::new();
    let mut b = Bound(&mut local);
    b.visit_block(body);
    let outer_tensor = |n: &str| !local.contains(n) && outer(n) == Some(true);
    loop {
        let mut pass = Pass {
            tainted: &tainted,
            governed: 0,
            new_tainted: Vec::new(),
            outer_tensor: &outer_tensor,
            reject: false,
        };
        pass.visit_block(body);
        if pass.reject {
            return false;
        }
        let new: Vec<String> = pass
            .new_tainted
            .into_iter()
            .filter(|n| !tainted.contains(n))
            .collect();
        if new.is_empty() {
            break;
        }
        tainted.extend(new);
    }
    // Every tainted name is the loop variable or bound in the body: nothing that outlives an
    // iteration depends on the loop variable.
    tainted
        .iter()
        .all(|n| loop_names.contains(n) || (local.contains(n) && outer(n).is_none()))
}

/// The names a pattern binds.
fn bindings(pat: &syn::Pat, out: &mut HashSet<String>) {
    Bound(out).visit_pat(pat);
}

/// Collects every name a pattern in the code binds (`let`, `for`, `match` arms, closures).
struct Bound<'o>(&'o mut HashSet<String>);

impl<'ast> Visit<'ast> for Bound<'_> {
    fn visit_pat_ident(&mut self, p: &'ast syn::PatIdent) {
        self.0.insert(p.ident.to_string());
        visit::visit_pat_ident(self, p);
    }
}

/// Whether `e` mentions any of `names` (as a path, or a token inside a macro).
fn mentions(e: &Expr, names: &HashSet<String>) -> bool {
    struct M<'n> {
        names: &'n HashSet<String>,
        found: bool,
    }
    impl<'ast> Visit<'ast> for M<'_> {
        fn visit_ident(&mut self, i: &'ast proc_macro2::Ident) {
            if self.names.contains(&i.to_string()) {
                self.found = true;
            }
        }
        fn visit_macro(&mut self, m: &'ast syn::Macro) {
            self.found |= tokens_mention(m.tokens.clone(), self.names);
            visit::visit_macro(self, m);
        }
    }
    let mut m = M {
        names,
        found: false,
    };
    m.visit_expr(e);
    m.found
}

fn tokens_mention(ts: proc_macro2::TokenStream, names: &HashSet<String>) -> bool {
    ts.into_iter().any(|t| match t {
        proc_macro2::TokenTree::Ident(i) => names.contains(&i.to_string()),
        proc_macro2::TokenTree::Group(g) => tokens_mention(g.stream(), names),
        _ => false,
    })
}

/// The variable a place expression (`x`, `x[i]`, `x.f`, `*x`) is rooted at.
fn root(e: &Expr) -> Option<String> {
    match e {
        Expr::Path(p) => p.path.get_ident().map(|i| i.to_string()),
        Expr::Index(i) => root(&i.expr),
        Expr::Field(f) => root(&f.base),
        Expr::Paren(p) => root(&p.expr),
        Expr::Unary(u) if matches!(u.op, UnOp::Deref(_)) => root(&u.expr),
        Expr::MethodCall(m) => root(&m.receiver),
        Expr::Try(t) => root(&t.expr),
        Expr::Reference(r) => root(&r.expr),
        _ => None,
    }
}

const FORMATTING: [&str; 5] = ["println", "print", "eprintln", "eprint", "format"];

/// One pass over the body: grows the tainted set and looks for what makes summarising unsafe.
struct Pass<'t> {
    tainted: &'t HashSet<String>,
    /// How many tainted conditions enclose the current node.
    governed: usize,
    new_tainted: Vec<String>,
    outer_tensor: &'t dyn Fn(&str) -> bool,
    reject: bool,
}

impl Pass<'_> {
    fn t(&self, e: &Expr) -> bool {
        mentions(e, self.tainted)
    }

    fn taint_assigned(&mut self, name: Option<String>) {
        match name {
            Some(n) => self.new_tainted.push(n),
            // An assignment to something the macro cannot name: give up.
            None => self.reject = true,
        }
    }

    fn taint_received(&mut self, name: Option<String>) {
        // A receiver that is not a variable (a temporary, a call's result) changes nothing
        // that outlives the statement.
        if let Some(n) = name
            && !(self.outer_tensor)(&n)
        {
            self.new_tainted.push(n);
        }
    }

    fn governed_by(&mut self, cond: bool, f: impl FnOnce(&mut Self)) {
        if cond {
            self.governed += 1;
        }
        f(self);
        if cond {
            self.governed -= 1;
        }
    }
}

impl<'ast> Visit<'ast> for Pass<'_> {
    fn visit_local(&mut self, l: &'ast syn::Local) {
        if let Some(init) = &l.init {
            let dep = self.governed > 0
                || self.t(&init.expr)
                || init.diverge.as_ref().is_some_and(|(_, e)| self.t(e));
            if dep {
                let mut names = HashSet::new();
                bindings(&l.pat, &mut names);
                self.new_tainted.extend(names);
            }
        }
        visit::visit_local(self, l);
    }

    fn visit_expr(&mut self, e: &'ast Expr) {
        match e {
            Expr::Assign(a) if self.governed > 0 || self.t(&a.right) || self.t(&a.left) => {
                self.taint_assigned(root(&a.left));
            }
            Expr::Binary(b)
                if is_compound(&b.op)
                    && (self.governed > 0 || self.t(&b.right) || self.t(&b.left)) =>
            {
                self.taint_assigned(root(&b.left));
            }
            Expr::Binary(b) if matches!(b.op, BinOp::And(_) | BinOp::Or(_)) => {
                self.visit_expr(&b.left);
                let cond = self.t(&b.left);
                self.governed_by(cond, |me| me.visit_expr(&b.right));
                return;
            }
            Expr::MethodCall(m) => {
                let name = m.method.to_string();
                let args_t = m.args.iter().any(|a| self.t(a));
                if is_comm(&name) || matches!(name.as_str(), "run" | "new_group" | "split") {
                    if self.governed > 0 || args_t || self.t(&m.receiver) {
                        self.reject = true;
                    }
                } else if self.governed > 0 || args_t {
                    self.taint_received(root(&m.receiver));
                    for a in &m.args {
                        if let Expr::Reference(r) = a
                            && r.mutability.is_some()
                        {
                            self.taint_received(root(&r.expr));
                        }
                    }
                }
            }
            Expr::Call(c) if self.governed > 0 || c.args.iter().any(|a| self.t(a)) => {
                for a in &c.args {
                    if let Expr::Reference(r) = a
                        && r.mutability.is_some()
                    {
                        self.taint_received(root(&r.expr));
                    }
                }
            }
            Expr::Try(t) if self.governed > 0 || self.t(&t.expr) => self.reject = true,
            Expr::Return(_) | Expr::Break(_) | Expr::Continue(_) if self.governed > 0 => {
                self.reject = true;
            }
            Expr::Macro(m) => self.check_macro(&m.mac),
            Expr::If(i) => {
                self.visit_expr(&i.cond);
                let cond = self.t(&i.cond);
                self.governed_by(cond, |me| {
                    me.visit_block(&i.then_branch);
                    if let Some((_, e)) = &i.else_branch {
                        me.visit_expr(e);
                    }
                });
                return;
            }
            Expr::Let(l) if self.governed > 0 || self.t(&l.expr) => {
                let mut names = HashSet::new();
                bindings(&l.pat, &mut names);
                self.new_tainted.extend(names);
            }
            Expr::Match(m) => {
                self.visit_expr(&m.expr);
                let scrutinee = self.t(&m.expr);
                for arm in &m.arms {
                    let cond = scrutinee || arm.guard.as_ref().is_some_and(|(_, g)| self.t(g));
                    if cond || self.governed > 0 {
                        let mut names = HashSet::new();
                        bindings(&arm.pat, &mut names);
                        self.new_tainted.extend(names);
                    }
                    self.governed_by(cond, |me| {
                        if let Some((_, g)) = &arm.guard {
                            me.visit_expr(g);
                        }
                        me.visit_expr(&arm.body);
                    });
                }
                return;
            }
            Expr::While(w) => {
                self.visit_expr(&w.cond);
                let cond = self.t(&w.cond);
                self.governed_by(cond, |me| me.visit_block(&w.body));
                return;
            }
            Expr::ForLoop(f) => {
                self.visit_expr(&f.expr);
                let cond = self.t(&f.expr);
                if cond || self.governed > 0 {
                    let mut names = HashSet::new();
                    bindings(&f.pat, &mut names);
                    self.new_tainted.extend(names);
                }
                self.governed_by(cond, |me| me.visit_block(&f.body));
                return;
            }
            _ => {}
        }
        visit::visit_expr(self, e);
    }

    fn visit_stmt_macro(&mut self, m: &'ast syn::StmtMacro) {
        self.check_macro(&m.mac);
        visit::visit_stmt_macro(self, m);
    }

    fn visit_item(&mut self, _: &'ast syn::Item) {
        // Nested items (helper functions) are evaluated only when called; their calls are
        // what the pass looks at.
    }
}

impl Pass<'_> {
    fn check_macro(&mut self, m: &syn::Macro) {
        let formatting = m
            .path
            .get_ident()
            .is_some_and(|i| FORMATTING.contains(&i.to_string().as_str()));
        if !formatting && (self.governed > 0 || tokens_mention(m.tokens.clone(), self.tainted)) {
            self.reject = true;
        }
    }
}

fn is_compound(op: &BinOp) -> bool {
    matches!(
        op,
        BinOp::AddAssign(_)
            | BinOp::SubAssign(_)
            | BinOp::MulAssign(_)
            | BinOp::DivAssign(_)
            | BinOp::RemAssign(_)
            | BinOp::BitXorAssign(_)
            | BinOp::BitAndAssign(_)
            | BinOp::BitOrAssign(_)
            | BinOp::ShlAssign(_)
            | BinOp::ShrAssign(_)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inert(body: &str, outer: &[(&str, bool)]) -> bool {
        let f: syn::ExprForLoop = syn::parse_str(body).expect("a for loop");
        let outer = |n: &str| outer.iter().find(|(o, _)| *o == n).map(|(_, t)| *t);
        loop_variable_is_inert(&f.pat, &f.body, &outer)
    }

    const RING_OUTER: [(&str, bool); 7] = [
        ("ctx", false),
        ("next", false),
        ("prev", false),
        ("data", false),
        ("outgoing", true),
        ("incoming", true),
        ("world", false),
    ];

    #[test]
    fn the_ring_loop_is_summarised() {
        let ring = "for step in 0..2 * (world - 1) {
            let reducing = step < world - 1;
            let s = step % (world - 1);
            let send_chunk = if reducing { (s + 1) % world } else { s };
            outgoing.as_mut_slice()?.copy_from_slice(&data[send_chunk * 4..][..4]);
            println!(\"step {step}\");
            let mut b = ctx.batch();
            b.send(&outgoing, next);
            b.recv(&mut incoming, prev);
            b.run()?;
        }";
        assert!(inert(ring, &RING_OUTER));
    }

    #[test]
    fn anything_the_loop_variable_reaches_is_not() {
        for body in [
            // A call's argument.
            "for step in 0..4 { ctx.send(&outgoing, step % world)?; }",
            "for step in 0..4 { let p = step % world; ctx.send(&outgoing, p)?; }",
            // A call under a condition on it.
            "for step in 0..4 { if step == 2 { ctx.barrier()?; } }",
            "for step in 0..4 { let last = step == 3; if last { ctx.barrier()?; } }",
            "for step in 0..4 { match step { 3 => ctx.barrier()?, _ => {} } }",
            "for step in 0..4 { for _ in 0..step { ctx.barrier()?; } }",
            // Leaving the loop.
            "for step in 0..4 { if step == 2 { break; } ctx.barrier()?; }",
            "for step in 0..4 { let x: Option<usize> = (step < 2).then_some(1); x?; }",
            // An outer variable changed with it.
            "for step in 0..4 { next = step; }",
            "for step in 0..4 { next += step / 2; }",
            "for step in 0..4 { if step > 1 { next = 0; } }",
            "for step in 0..4 { data.push(step); }",
            "for step in 0..4 { outgoing = ctx.zeros::<f32>([step])?; }",
            // A macro that may panic on it.
            "for step in 0..4 { assert!(step < 3); }",
        ] {
            assert!(!inert(body, &RING_OUTER), "{body}");
        }
    }

    #[test]
    fn fresh_names_and_tensor_data_are_fine() {
        for body in [
            "for step in 0..4 { let k = step * 2; let j = k + 1; println!(\"{j}\"); ctx.barrier()?; }",
            "for step in 0..4 { outgoing.fill(step as f32); ctx.send(&outgoing, next)?; }",
            "for (i, _) in data.iter().enumerate() { let x = i; ctx.barrier()?; }",
            "for step in 0..4 { let v = if step > 1 { 1 } else { 2 }; let w2 = v; }",
            // Writes through references, which the evaluator models as "unknown now".
            "for step in 0..4 { let r = &mut next; *r = step; }",
            "for step in 0..4 { for x in data.iter_mut() { *x = step; } }",
            "for step in 0..4 { for (d, x) in data[step..].iter_mut().zip([1, 2]) { *d += x; } }",
        ] {
            assert!(inert(body, &RING_OUTER), "{body}");
        }
    }
}

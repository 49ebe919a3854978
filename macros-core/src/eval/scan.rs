//! Syntax the evaluator does not follow, read for what matters to the checks: whether it
//! communicates (to report RW012), which variables it may change (so they are no longer
//! trusted), and how control may leave it (so the calls it may skip are not trusted either).

use syn::spanned::Spanned;
use syn::visit::Visit;
use syn::{Expr, ExprMethodCall};

use rankwise_core::OpKind;
use rankwise_core::ops::{LIST_FORMS, Spelling};

use super::value::ident_of;

/// Whether `name` is a communication method (of a context, a group handle or a batch): exactly
/// the names in the table of operations, `rankwise_core::ops`.
pub(crate) fn is_comm(name: &str) -> bool {
    Spelling::from_name(name).is_some()
}

/// Whether `text` (tokens printed by `quote`) contains a call of a communication method.
pub(super) fn mentions_comm(text: &str) -> bool {
    let names = OpKind::ALL.iter().map(|k| k.name());
    let lists = LIST_FORMS.iter().map(|s| s.name);
    let posts = ["isend", "irecv", "wait"].into_iter();
    names
        .chain(lists)
        .chain(posts)
        .any(|n| text.contains(&format!(". {n}")))
}

/// The methods a tensor is known to keep its shape and type through: `Tensor`'s own (which Rust
/// picks before any trait's) and the standard traits' it implements. Any other method called on
/// a tensor is a trait's the macro cannot see, which may replace the tensor through `&mut
/// self` (`impl Grow for Tensor<f32> { fn grow(&mut self) { *self = … } }`).
pub(super) const TENSOR_KEEPS: [&str; 22] = [
    "as_mut_slice",
    "as_slice",
    "device",
    "dtype",
    "fill",
    "into_vec",
    "ndim",
    "numel",
    "reshape",
    "shape",
    "to_host",
    "to_ndarray",
    "to_vec",
    "try_clone",
    "try_fill",
    "try_to_vec",
    "clone",
    "to_owned",
    "to_string",
    "eq",
    "ne",
    "fmt",
];

/// Methods that take their receiver by value or `&self`, whatever its type: they cannot change
/// it (`Option`'s `map`, `unwrap_or`; `clone`; comparisons).
pub(super) const PURE: [&str; 36] = [
    "clone",
    "to_owned",
    "to_string",
    "eq",
    "ne",
    "cmp",
    "partial_cmp",
    "lt",
    "le",
    "gt",
    "ge",
    "as_ref",
    "len",
    "is_empty",
    "contains",
    "iter",
    "into_iter",
    "then",
    "is_some",
    "is_none",
    "is_some_and",
    "is_none_or",
    "map",
    "map_or",
    "map_or_else",
    "and_then",
    "filter",
    "or",
    "xor",
    "zip",
    "ok_or",
    "unwrap",
    "unwrap_or",
    "unwrap_or_default",
    "expect",
    "copied",
];

/// A list's methods that only read it: any other may change it (`push`, `swap`, `sort`, …).
pub(super) const ARRAY_PURE: [&str; 21] = [
    "chunks",
    "windows",
    "len",
    "is_empty",
    "contains",
    "iter",
    "into_iter",
    "clone",
    "to_vec",
    "collect",
    "first",
    "last",
    "get",
    "copied",
    "cloned",
    "as_slice",
    "as_ref",
    "to_owned",
    "binary_search",
    "starts_with",
    "ends_with",
];

/// Methods of a context that neither communicate nor change what later calls mean.
pub(super) const CTX_PURE: [&str; 11] = [
    "rank",
    "world",
    "full",
    "zeros",
    "zeros_like",
    "to_device",
    "device",
    "tensor",
    "world_group",
    "backend_name",
    "supports",
];

/// Standard macros that only format, assert or build vectors: they may mention the context
/// (`println!("{}", ctx.rank())`) without communicating.
pub(super) const KNOWN_MACROS: [&str; 16] = [
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

/// How deep the readers below descend before giving up (and answering conservatively): deeper
/// syntax would risk the compiler's stack.
pub(super) const MAX_DEPTH: usize = 128;

/// Whether `node` contains communication, or hands the context (or a batch or group
/// communicator, named in `handles` with the context and its aliases) to other code.
pub(super) fn communicates(handles: &[String], node: &dyn Fn(&mut CommFinder)) -> bool {
    let mut f = CommFinder {
        handles,
        found: false,
        depth: 0,
    };
    node(&mut f);
    f.found
}

pub(super) struct CommFinder<'h> {
    handles: &'h [String],
    found: bool,
    depth: usize,
}

impl CommFinder<'_> {
    fn is_handle(&self, e: &Expr) -> bool {
        ident_of(e).is_some_and(|n| self.handles.contains(&n))
    }
}

impl<'ast> Visit<'ast> for CommFinder<'_> {
    fn visit_expr(&mut self, e: &'ast Expr) {
        if self.found {
            return;
        }
        if self.depth >= MAX_DEPTH {
            self.found = true; // too deep to read: assume the worst
            return;
        }
        self.depth += 1;
        syn::visit::visit_expr(self, e);
        self.depth -= 1;
    }
    fn visit_expr_method_call(&mut self, m: &'ast ExprMethodCall) {
        let name = m.method.to_string();
        if is_comm(&name) {
            self.found = true;
            return;
        }
        if self.is_handle(&m.receiver) {
            // `ctx.rank()` is harmless; anything else on a handle (`b.run()`, `ctx.new_group`,
            // an extension trait's method) communicates or changes what later calls mean.
            if CTX_PURE.contains(&name.as_str()) {
                for a in &m.args {
                    self.visit_expr(a);
                }
            } else {
                self.found = true;
            }
            return;
        }
        syn::visit::visit_expr_method_call(self, m);
    }
    fn visit_expr_path(&mut self, p: &'ast syn::ExprPath) {
        // A handle used other than as the receiver of a known method: handed on.
        if p.qself.is_none()
            && p.path
                .get_ident()
                .is_some_and(|i| self.handles.contains(&i.to_string()))
        {
            self.found = true;
        }
    }
    fn visit_macro(&mut self, m: &'ast syn::Macro) {
        let text = m.tokens.to_string();
        if mentions_comm(&text) {
            self.found = true;
        }
        // Macros other than the standard formatting and assertion ones may expand to anything:
        // handing them the context (or a batch) is handing it to code the macro cannot see.
        let known = m
            .path
            .get_ident()
            .is_some_and(|i| KNOWN_MACROS.contains(&i.to_string().as_str()));
        let mentions = m.tokens.clone().into_iter().any(|t| match t {
            proc_macro2::TokenTree::Ident(i) => self.handles.iter().any(|h| i == h.as_str()),
            _ => false,
        });
        if !known && mentions {
            self.found = true;
        }
    }
    fn visit_item(&mut self, _: &'ast syn::Item) {}
}

/// How control may leave a piece of code without running to its end.
#[derive(Clone, Debug, PartialEq)]
pub(super) enum Exit {
    /// `return` (other than `return Err(…)`, an error path that stops the world at run time).
    Return,
    /// `break` or `continue`, unlabelled or to a label defined outside the code.
    Loop {
        label: Option<String>,
        is_break: bool,
    },
}

/// What a piece of code the evaluator does not run may do to the state around it.
#[derive(Default, Debug)]
pub(super) struct Effects {
    /// Variables it may assign or mutably borrow (by their base name: `a` for `a[i] = …`).
    pub assigned: Vec<String>,
    /// Variables it calls methods on (a `Vec` may be pushed to).
    pub receivers: Vec<String>,
    /// Variables it calls a method on that a tensor does not keep its shape through (see
    /// [`TENSOR_KEEPS`]).
    pub reshaped: Vec<String>,
    /// Variables at the root of a place it assigns through a method or call
    /// (`*v.first_mut().unwrap() = 1`): changed, unless a tensor written element by element
    /// (see `Eval::written`).
    pub written_through: Vec<String>,
    /// How control may leave it, with where.
    pub exits: Vec<(Exit, proc_macro2::Span)>,
    /// Whether it was too deep to read whole (then every variable is suspect).
    pub too_deep: bool,
    /// Every variable it names: one that holds a mutable reference may be written through in
    /// ways no list above sees (handed to a call, matched by a pattern; see `Eval::written`).
    pub mentioned: Vec<String>,
}

/// Reads the effects of `node`; see [`Effects`].
pub(super) fn effects(node: &dyn Fn(&mut EffectFinder)) -> Effects {
    let mut f = EffectFinder::default();
    node(&mut f);
    let mut out = f.out;
    // A `ref mut` binding written through writes the place it was matched against
    // (`if let Some(ref mut x) = a { *x = 1 }` changes `a`), through any chain of them.
    loop {
        let reached: Vec<String> = f
            .ref_muts
            .iter()
            .filter(|(b, root)| {
                let hit = |l: &Vec<String>| l.contains(b);
                (hit(&out.assigned) || hit(&out.receivers) || hit(&out.written_through))
                    && !out.assigned.contains(root)
            })
            .map(|(_, root)| root.clone())
            .collect();
        if reached.is_empty() {
            break;
        }
        out.assigned.extend(reached);
    }
    out
}

#[derive(Default)]
pub(super) struct EffectFinder {
    out: Effects,
    /// Labels defined inside, and how many unlabelled loops enclose the current point.
    labels: Vec<String>,
    loops: usize,
    /// Inside a closure: its `return`/`break` are its own; its assignments still count.
    closures: usize,
    depth: usize,
    /// `ref mut` bindings and the variable of the place each was matched against.
    ref_muts: Vec<(String, String)>,
}

/// The single-segment paths (variables) an expression mentions, in order.
pub(super) fn idents(e: &Expr, out: &mut Vec<String>) {
    struct Ids<'o>(&'o mut Vec<String>);
    impl<'ast> Visit<'ast> for Ids<'_> {
        fn visit_expr_path(&mut self, p: &'ast syn::ExprPath) {
            if let Some(i) = p.path.get_ident() {
                self.0.push(i.to_string());
            }
        }
    }
    Ids(out).visit_expr(e);
}

/// The variables an expression lends mutably: `&mut x`, and the receivers of `x.iter_mut()`,
/// `x.as_mut_slice()`, `x.last_mut()` and the like (every method named `*_mut` or `as_mut*`).
/// A loop over it may write through its elements (`for p in x.iter_mut() { *p = 1 }`).
pub(super) fn lent_mutably(e: &Expr) -> Vec<String> {
    struct Lent(Vec<String>);
    impl<'ast> Visit<'ast> for Lent {
        fn visit_expr_reference(&mut self, r: &'ast syn::ExprReference) {
            if r.mutability.is_some() {
                self.0.extend(base_ident(&r.expr));
            }
            syn::visit::visit_expr_reference(self, r);
        }
        fn visit_expr_method_call(&mut self, m: &'ast ExprMethodCall) {
            let name = m.method.to_string();
            if name.ends_with("_mut") || name.starts_with("as_mut") {
                self.0.extend(base_ident(&m.receiver));
            }
            syn::visit::visit_expr_method_call(self, m);
        }
    }
    let mut l = Lent(Vec::new());
    l.visit_expr(e);
    l.0
}

/// Whether a method named `name` assigns its receiver whatever its type: the compound
/// assignment operators' (`add_assign`, …) and `clone_from`.
pub(super) fn assigns_receiver(name: &str) -> bool {
    name.ends_with("_assign") || name == "clone_from"
}

/// The variables an assignment to the place `e` may write: its base variable, also through
/// the methods and calls that lend it (`*v.first_mut().unwrap() = 1`, `v.as_mut_slice()[0] =
/// 1`, `*Option::unwrap(v.last_mut()) = 1` write `v`). Each with whether the place is inside
/// it (through an index or a method: an element, not the variable's whole value).
pub(super) fn place_roots(e: &Expr) -> Vec<(String, bool)> {
    fn walk(e: &Expr, inside: bool, out: &mut Vec<(String, bool)>) {
        match e {
            Expr::Index(i) => walk(&i.expr, true, out),
            Expr::Field(f) => walk(&f.base, inside, out),
            Expr::Paren(p) => walk(&p.expr, inside, out),
            Expr::Group(g) => walk(&g.expr, inside, out),
            Expr::Unary(u) => walk(&u.expr, inside, out),
            Expr::Reference(r) => walk(&r.expr, inside, out),
            Expr::Try(t) => walk(&t.expr, inside, out),
            Expr::MethodCall(m) => {
                walk(&m.receiver, true, out);
                for a in &m.args {
                    walk(a, true, out);
                }
            }
            Expr::Call(c) => {
                for a in &c.args {
                    walk(a, true, out);
                }
            }
            _ => out.extend(ident_of(e).map(|n| (n, inside))),
        }
    }
    let mut out = Vec::new();
    walk(e, false, &mut out);
    out
}

/// Whether a pattern binds anything by `ref mut` (a reference into the place it matches).
pub(super) fn binds_by_mut_ref(p: &syn::Pat) -> bool {
    struct Find(bool);
    impl<'ast> Visit<'ast> for Find {
        fn visit_pat_ident(&mut self, i: &'ast syn::PatIdent) {
            self.0 |= i.by_ref.is_some() && i.mutability.is_some();
            syn::visit::visit_pat_ident(self, i);
        }
    }
    let mut f = Find(false);
    f.visit_pat(p);
    f.0
}

/// The variable an assignment target or borrowed place is rooted at: `a` in `a`, `a[i]`,
/// `a.f`, `*a`, `(a)`. A place reached through a method (`t.as_mut_slice()?[0]`) has none
/// here: [`place_roots`] finds the variables behind it (a `Vec`'s `last_mut` changes it; a
/// tensor's `as_mut_slice` cannot change its shape).
pub(super) fn base_ident(e: &Expr) -> Option<String> {
    match e {
        Expr::Index(i) => base_ident(&i.expr),
        Expr::Field(f) => base_ident(&f.base),
        Expr::Paren(p) => base_ident(&p.expr),
        Expr::Unary(u) => base_ident(&u.expr),
        _ => ident_of(e),
    }
}

impl EffectFinder {
    /// An assignment to `place`: its base variable is assigned; a variable it reaches through
    /// a method or call is written through (see [`Effects::written_through`]).
    fn note_place(&mut self, place: &Expr) {
        // A destructuring assignment's places (`(a, b) = …`, `[x, _] = …`, `S { f: a } = …`).
        let parts: Vec<&Expr> = match place {
            Expr::Tuple(t) => t.elems.iter().collect(),
            Expr::Array(a) => a.elems.iter().collect(),
            Expr::Paren(p) => vec![&*p.expr],
            Expr::Struct(st) => st.fields.iter().map(|f| &f.expr).collect(),
            Expr::Call(c) => c.args.iter().collect(),
            Expr::Infer(_) | Expr::Range(_) => Vec::new(),
            _ => {
                self.note_leaf(place);
                return;
            }
        };
        for p in parts {
            self.note_place(p);
        }
    }

    fn note_leaf(&mut self, place: &Expr) {
        let base = base_ident(place);
        for (n, _) in place_roots(place) {
            if base.as_ref() != Some(&n) && !self.out.written_through.contains(&n) {
                self.out.written_through.push(n);
            }
        }
        self.out.assigned.extend(base);
    }

    /// A pattern matched against `init`: its `ref mut` bindings are references into it.
    fn note_pattern(&mut self, pat: &syn::Pat, init: &Expr) {
        if let Some(root) = base_ident(init) {
            for b in ref_mut_bindings(pat) {
                self.ref_muts.push((b, root.clone()));
            }
        }
    }

    fn exit(&mut self, exit: Exit, span: proc_macro2::Span) {
        if self.closures == 0 {
            self.out.exits.push((exit, span));
        }
    }

    fn in_loop(&mut self, label: Option<&syn::Label>, body: impl FnOnce(&mut Self)) {
        let name = label.map(|l| l.name.ident.to_string());
        self.loops += 1;
        self.labels.extend(name.clone());
        body(self);
        if name.is_some() {
            self.labels.pop();
        }
        self.loops -= 1;
    }
}

impl<'ast> Visit<'ast> for EffectFinder {
    fn visit_expr(&mut self, e: &'ast Expr) {
        if self.depth >= MAX_DEPTH {
            self.out.too_deep = true;
            return;
        }
        self.depth += 1;
        syn::visit::visit_expr(self, e);
        self.depth -= 1;
    }
    fn visit_expr_assign(&mut self, a: &'ast syn::ExprAssign) {
        self.note_place(&a.left);
        syn::visit::visit_expr_assign(self, a);
    }
    fn visit_expr_binary(&mut self, b: &'ast syn::ExprBinary) {
        use syn::BinOp::*;
        if matches!(
            b.op,
            AddAssign(_)
                | SubAssign(_)
                | MulAssign(_)
                | DivAssign(_)
                | RemAssign(_)
                | BitXorAssign(_)
                | BitAndAssign(_)
                | BitOrAssign(_)
                | ShlAssign(_)
                | ShrAssign(_)
        ) {
            self.note_place(&b.left);
        }
        syn::visit::visit_expr_binary(self, b);
    }
    fn visit_expr_reference(&mut self, r: &'ast syn::ExprReference) {
        if r.mutability.is_some() {
            self.out.assigned.extend(base_ident(&r.expr));
        }
        syn::visit::visit_expr_reference(self, r);
    }
    fn visit_expr_method_call(&mut self, m: &'ast ExprMethodCall) {
        // A method that only reads changes nothing (`v.len()`, `o.map(…)`).
        let name = m.method.to_string();
        if !PURE.contains(&name.as_str()) && !ARRAY_PURE.contains(&name.as_str()) {
            self.out.receivers.extend(base_ident(&m.receiver));
        }
        if !TENSOR_KEEPS.contains(&name.as_str()) {
            self.out.reshaped.extend(base_ident(&m.receiver));
        }
        // `x.add_assign(1)`, `x.clone_from(&y)`: methods that change even a number.
        if assigns_receiver(&m.method.to_string()) {
            for (n, _) in place_roots(&m.receiver) {
                if !self.out.written_through.contains(&n) {
                    self.out.written_through.push(n);
                }
            }
        }
        syn::visit::visit_expr_method_call(self, m);
    }
    fn visit_expr_return(&mut self, r: &'ast syn::ExprReturn) {
        let is_err = matches!(r.expr.as_deref(), Some(Expr::Call(c))
            if matches!(&*c.func, Expr::Path(p) if p.path.is_ident("Err")));
        if !is_err {
            self.exit(Exit::Return, r.span());
        }
        syn::visit::visit_expr_return(self, r);
    }
    fn visit_expr_break(&mut self, b: &'ast syn::ExprBreak) {
        self.jump(b.label.as_ref(), true, b.span());
        syn::visit::visit_expr_break(self, b);
    }
    fn visit_expr_continue(&mut self, c: &'ast syn::ExprContinue) {
        self.jump(c.label.as_ref(), false, c.span());
    }
    fn visit_expr_for_loop(&mut self, f: &'ast syn::ExprForLoop) {
        self.visit_expr(&f.expr);
        self.in_loop(f.label.as_ref(), |me| me.visit_block(&f.body));
    }
    fn visit_expr_while(&mut self, w: &'ast syn::ExprWhile) {
        self.in_loop(w.label.as_ref(), |me| {
            me.visit_expr(&w.cond);
            me.visit_block(&w.body)
        });
    }
    fn visit_expr_loop(&mut self, l: &'ast syn::ExprLoop) {
        self.in_loop(l.label.as_ref(), |me| me.visit_block(&l.body));
    }
    fn visit_expr_block(&mut self, b: &'ast syn::ExprBlock) {
        let name = b.label.as_ref().map(|l| l.name.ident.to_string());
        self.labels.extend(name.clone());
        self.visit_block(&b.block);
        if name.is_some() {
            self.labels.pop();
        }
    }
    fn visit_expr_closure(&mut self, c: &'ast syn::ExprClosure) {
        self.closures += 1;
        syn::visit::visit_expr_closure(self, c);
        self.closures -= 1;
    }
    fn visit_item(&mut self, _: &'ast syn::Item) {}
    fn visit_expr_path(&mut self, p: &'ast syn::ExprPath) {
        if let Some(i) = p.path.get_ident() {
            self.out.mentioned.push(i.to_string());
        }
    }
    fn visit_macro(&mut self, m: &'ast syn::Macro) {
        // Its arguments are tokens to `syn`: every identifier counts as named.
        fn walk(ts: proc_macro2::TokenStream, out: &mut Vec<String>) {
            for t in ts {
                match t {
                    proc_macro2::TokenTree::Ident(i) => out.push(i.to_string()),
                    proc_macro2::TokenTree::Group(g) => walk(g.stream(), out),
                    _ => {}
                }
            }
        }
        walk(m.tokens.clone(), &mut self.out.mentioned);
    }
    fn visit_local(&mut self, l: &'ast syn::Local) {
        if let Some(init) = &l.init {
            self.note_pattern(&l.pat, &init.expr);
        }
        syn::visit::visit_local(self, l);
    }
    fn visit_expr_let(&mut self, l: &'ast syn::ExprLet) {
        self.note_pattern(&l.pat, &l.expr);
        syn::visit::visit_expr_let(self, l);
    }
    fn visit_expr_match(&mut self, m: &'ast syn::ExprMatch) {
        for arm in &m.arms {
            self.note_pattern(&arm.pat, &m.expr);
        }
        syn::visit::visit_expr_match(self, m);
    }
}

/// The names a pattern binds by `ref mut`.
fn ref_mut_bindings(p: &syn::Pat) -> Vec<String> {
    struct Find(Vec<String>);
    impl<'ast> Visit<'ast> for Find {
        fn visit_pat_ident(&mut self, i: &'ast syn::PatIdent) {
            if i.by_ref.is_some() && i.mutability.is_some() {
                self.0.push(i.ident.to_string());
            }
            syn::visit::visit_pat_ident(self, i);
        }
    }
    let mut f = Find(Vec::new());
    f.visit_pat(p);
    f.0
}

impl EffectFinder {
    fn jump(&mut self, label: Option<&syn::Lifetime>, is_break: bool, span: proc_macro2::Span) {
        let escapes = match label {
            None => self.loops == 0,
            Some(l) => !self.labels.contains(&l.ident.to_string()),
        };
        if escapes {
            let label = label.map(|l| l.ident.to_string());
            self.exit(Exit::Loop { label, is_break }, span);
        }
    }
}

/// The names of the methods that the traits in `node` declare or implement (see
/// `Analysis::trait_methods`).
pub(crate) fn trait_methods(node: &dyn Fn(&mut TraitMethods)) -> std::collections::HashSet<String> {
    let mut f = TraitMethods::default();
    node(&mut f);
    f.0
}

/// Collects what [`trait_methods`] returns.
#[derive(Default)]
pub(crate) struct TraitMethods(std::collections::HashSet<String>);

impl<'ast> Visit<'ast> for TraitMethods {
    fn visit_item_trait(&mut self, t: &'ast syn::ItemTrait) {
        for item in &t.items {
            if let syn::TraitItem::Fn(f) = item {
                self.0.insert(f.sig.ident.to_string());
            }
        }
        syn::visit::visit_item_trait(self, t);
    }
    fn visit_item_impl(&mut self, i: &'ast syn::ItemImpl) {
        if i.trait_.is_some() {
            for item in &i.items {
                if let syn::ImplItem::Fn(f) = item {
                    self.0.insert(f.sig.ident.to_string());
                }
            }
        }
        syn::visit::visit_item_impl(self, i);
    }
}

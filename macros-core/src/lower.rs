//! Lowering: the user's function, unchanged, plus the verified schedule and the guard that
//! holds the run to it (see `rankwise_core::guard`).

use proc_macro2::TokenStream;
use quote::{format_ident, quote};
use rankwise_core::verify::{Item, Program};

use crate::eval::{Borrow, Site, location};

/// `const` assertions for what the macro could not check itself: splits of dimensions given
/// by constants from outside the function must divide evenly, and each such name must be a
/// constant. rustc evaluates them, so a bad value is still a compile error, at the call.
///
/// An expression that uses a generic parameter of the function cannot be checked by a `const`
/// item (E0401); it becomes an inline `const { … }` block, which rustc evaluates for each
/// instantiation.
pub(crate) fn const_assertions(
    shared: &crate::eval::Analysis,
    generics: &syn::Generics,
) -> TokenStream {
    let params: Vec<String> = generics
        .params
        .iter()
        .filter_map(|p| match p {
            syn::GenericParam::Type(t) => Some(t.ident.to_string()),
            syn::GenericParam::Const(c) => Some(c.ident.to_string()),
            syn::GenericParam::Lifetime(_) => None,
        })
        .collect();
    let checks = shared.assertions.iter().map(|a| {
        let (span, k, n, what) = (&a.span, &a.coefficient, &a.parts, &a.what);
        let e = &shared.symbols[a.symbol as usize];
        // The dimension is (num / den) · E; it splits into n parts iff num · E is a multiple of
        // den · n.
        let num = k.num as u128;
        let den_n = k.den as u128 * *n as u128;
        let text = quote!(#e).to_string();
        let dim = crate::render::coefficient(*k, &text);
        let msg = format!("RW007: {what}, but {dim} is not a multiple of {n}; make the dimension a multiple of {n}");
        let generic = mentions_any(e, &params);
        if generic {
            quote::quote_spanned! {*span=>
                const { ::core::assert!(#num * ((#e) as u128) % #den_n == 0, #msg) };
            }
        } else {
            quote::quote_spanned! {*span=>
                const _: () = ::core::assert!(#num * ((#e) as u128) % #den_n == 0, #msg);
            }
        }
    });
    // Every constant a shape was computed from must be one: the macro took it for a value all
    // ranks share, which a `static mut` (or anything else rustc will not evaluate at compile
    // time) is not. rustc refuses such a name here ("constant accesses mutable global memory").
    let mut used: Vec<u32> = shared.bases.iter().map(|b| b.symbol).collect();
    used.sort_unstable();
    used.dedup();
    let constants = used.into_iter().filter_map(|sym| {
        let e = shared.symbols.get(sym as usize)?;
        let generic = mentions_any(e, &params);
        Some(if generic {
            quote::quote_spanned! {syn::spanned::Spanned::span(e)=> const { let _constant = #e; }; }
        } else {
            quote::quote_spanned! {syn::spanned::Spanned::span(e)=> const _: () = { let _constant = #e; }; }
        })
    });
    quote!(#(#checks)* #(#constants)*)
}

/// Whether `e` names one of `params` (a generic parameter of the function), also inside
/// brackets (`(N + 1) * 2`).
fn mentions_any(e: &syn::Expr, params: &[String]) -> bool {
    fn walk(ts: TokenStream, params: &[String]) -> bool {
        ts.into_iter().any(|t| match t {
            proc_macro2::TokenTree::Ident(i) => params.contains(&i.to_string()),
            proc_macro2::TokenTree::Group(g) => walk(g.stream(), params),
            _ => false,
        })
    }
    walk(quote!(#e), params)
}

/// Site ids each rank calls, in order, as runs of a repeated pattern.
fn compress(seq: &[u32]) -> Vec<(Vec<u32>, u32)> {
    let mut runs: Vec<(Vec<u32>, u32)> = Vec::new();
    let mut i = 0;
    while i < seq.len() {
        // The period (up to 8) that repeats most from here; 1 if nothing repeats.
        let mut best = (1usize, 1u32);
        for p in 1..=8.min(seq.len() - i) {
            let mut times = 1u32;
            while i + (times as usize + 1) * p <= seq.len()
                && seq[i + times as usize * p..i + (times as usize + 1) * p] == seq[i..i + p]
            {
                times += 1;
            }
            if times > 1 && (times as usize * p) > best.0 * best.1 as usize {
                best = (p, times);
            }
        }
        let (p, times) = best;
        runs.push((seq[i..i + p].to_vec(), times));
        i += p * times as usize;
    }
    runs
}

/// What the guard holds a run at one world size to: each rank's sequence of calls, as call-site
/// ids with the peer or root each call names (where it names one).
pub(crate) struct WorldSchedule {
    pub world: usize,
    pub ranks: Vec<Vec<(u32, Option<usize>)>>,
}

impl WorldSchedule {
    /// The schedule of a verified program.
    pub(crate) fn of(p: &Program) -> Self {
        let ranks = p
            .ranks
            .iter()
            .map(|items| {
                items
                    .iter()
                    .flat_map(|i| match i {
                        // A wait is a call the guard follows too (it blocks like one).
                        Item::Wait { id, .. } => vec![(id.0, None)],
                        _ => i.ops().iter().map(|o| (o.id.0, o.desc.peer)).collect(),
                    })
                    .collect()
            })
            .collect();
        WorldSchedule {
            world: p.world,
            ranks,
        }
    }
}

/// No peer to check: the guard's table marks calls that name none (and waits) with it.
const NO_PEER: u32 = u32::MAX;

/// The statement that enters the guard, with the function's verified schedule: per world
/// size, each rank's sequence of call-site ids.
///
/// The table has a row per call site (line, column, [`NO_PEER`], what), then one per call site
/// and the peer or root it names somewhere (a broadcast whose root depends on the loop has one
/// row per root): a rank's sequence names those rows, so the guard checks, beside the call
/// site, the peer or root the macro verified the call with. The macro computes each value as
/// the program does (see `IntTy`), so they agree; the check makes sure they do, before a
/// backend that trusts the proof skips asking the other ranks (see `guard.rs`).
pub(crate) fn guard(
    name: &str,
    ctx: &syn::Ident,
    sites: &[Site],
    schedules: &[WorldSchedule],
) -> TokenStream {
    // The table lives in a block of its own and the guard's binding is hygienic
    // (`mixed_site`): user code can name neither, and two programs never collide.
    let table = format_ident!("__RANKWISE_SCHEDULE");
    let guard = syn::Ident::new("__rankwise_guard", proc_macro2::Span::mixed_site());
    let mut rows: Vec<(usize, u32)> = (0..sites.len()).map(|i| (i, NO_PEER)).collect();
    let mut variant: std::collections::HashMap<(u32, usize), u32> = Default::default();
    let mut row_of = |id: u32, peer: Option<usize>| -> u32 {
        match peer.and_then(|p| u32::try_from(p).ok()) {
            Some(p) => *variant.entry((id, p as usize)).or_insert_with(|| {
                rows.push((id as usize, p));
                (rows.len() - 1) as u32
            }),
            None => id,
        }
    };
    let sequences: Vec<(usize, Vec<Vec<u32>>)> = schedules
        .iter()
        .map(|s| {
            let ranks = s
                .ranks
                .iter()
                .map(|seq| seq.iter().map(|&(id, peer)| row_of(id, peer)).collect())
                .collect();
            (s.world, ranks)
        })
        .collect();
    // Row `i` must stay row `i`: a site the list lacks (none should) gets a row no call matches.
    let site_rows = rows.iter().map(|&(i, peer)| match sites.get(i) {
        Some(s) => {
            let (line, col, what) = (s.site.line, s.site.column, &s.what);
            quote!((#line, #col, #peer, #what))
        }
        None => quote!((0u32, 0u32, #peer, "")),
    });
    let worlds = sequences.iter().map(|(w, ranks)| {
        let ranks = ranks.iter().map(|seq| {
            let runs = compress(seq).into_iter().map(|(pattern, times)| {
                quote!(::rankwise::__private::Run { pattern: &[#(#pattern),*], times: #times })
            });
            quote!(::rankwise::__private::RankTable { runs: &[#(#runs),*] })
        });
        quote!((#w, &[#(#ranks),*]))
    });
    let enter = quote! {
        let #guard = {
            static #table: ::rankwise::__private::Table = ::rankwise::__private::Table {
                function: #name,
                worlds: &[#(#worlds),*],
                sites: &[#(#site_rows),*],
            };
            ::rankwise::__private::Guard::enter(&#table, &mut *#ctx)?
        };
    };
    enter
}

/// Issues adjacent communication statements as one batch when they borrow disjoint tensors:
/// `ctx.send(&x, a)?; ctx.recv(&mut y, b)?;` becomes one batch posting both. Posting earlier
/// can only let more operations match (per-peer and per-group order is unchanged), so a program
/// the verifier proved deadlock-free stays so; it saves a rendezvous per call. The method names
/// keep their spans, so the guard still sees the user's call sites.
pub(crate) fn batch_adjacent(block: &mut syn::Block, ctx: &syn::Ident, sites: &[Site]) {
    use syn::visit_mut::VisitMut;
    struct Batcher<'a> {
        ctx: &'a syn::Ident,
        sites: &'a [Site],
    }
    impl VisitMut for Batcher<'_> {
        fn visit_block_mut(&mut self, b: &mut syn::Block) {
            syn::visit_mut::visit_block_mut(self, b);
            let stmts = std::mem::take(&mut b.stmts);
            b.stmts = batch_runs(stmts, self.ctx, self.sites);
        }
        // Closures and nested items are other code: leave them alone.
        fn visit_expr_closure_mut(&mut self, _: &mut syn::ExprClosure) {}
        fn visit_item_mut(&mut self, _: &mut syn::Item) {}
    }
    Batcher { ctx, sites }.visit_block_mut(block);
}

/// A statement `ctx.op(args)?;` or `ctx.group(&g).op(args)?;` that may join a batch: its site,
/// the group expression (if any), the method and the arguments.
struct Candidate<'s> {
    group: Option<syn::Expr>,
    /// The call as written: it is re-emitted with only its receiver replaced, so every token
    /// keeps its span and `Location::caller()` still names the user's line and column.
    call: syn::ExprMethodCall,
    buffers: &'s [Borrow],
}

fn candidate<'s>(stmt: &syn::Stmt, ctx: &syn::Ident, sites: &'s [Site]) -> Option<Candidate<'s>> {
    let syn::Stmt::Expr(syn::Expr::Try(t), Some(_)) = stmt else {
        return None;
    };
    let syn::Expr::MethodCall(m) = &*t.expr else {
        return None;
    };
    let name = m.method.to_string();
    // Barriers order whatever follows them; keep them as written.
    if !crate::eval::is_comm(&name) || name == "barrier" {
        return None;
    }
    let is_ctx = |e: &syn::Expr| matches!(e, syn::Expr::Path(p) if p.path.is_ident(ctx));
    let group = match &*m.receiver {
        r if is_ctx(r) => None,
        syn::Expr::MethodCall(g)
            if g.method == "group" && is_ctx(&g.receiver) && g.args.len() == 1 =>
        {
            Some(g.args[0].clone())
        }
        _ => return None,
    };
    // Arguments that use the context would conflict with the batch's borrow of it.
    let mentions_ctx = |e: &syn::Expr| {
        quote!(#e)
            .into_iter()
            .any(|t| matches!(&t, proc_macro2::TokenTree::Ident(i) if i == ctx))
    };
    if m.args.iter().any(mentions_ctx) || group.as_ref().is_some_and(mentions_ctx) {
        return None;
    }
    let at = location(m.method.span());
    let site = sites.iter().find(|s| (s.site.line, s.site.column) == at)?;
    Some(Candidate {
        group,
        call: m.clone(),
        buffers: site.buffers.as_deref()?,
    })
}

/// Whether two calls' buffers may be borrowed at once (shared reads only).
fn disjoint(a: &[Borrow], b: &[Borrow]) -> bool {
    a.iter().all(|x| b.iter().all(|y| x.compatible(y)))
}

fn batch_runs(stmts: Vec<syn::Stmt>, ctx: &syn::Ident, sites: &[Site]) -> Vec<syn::Stmt> {
    let mut out: Vec<syn::Stmt> = Vec::with_capacity(stmts.len());
    let mut run: Vec<(syn::Stmt, Candidate<'_>)> = Vec::new();
    let flush = |run: &mut Vec<(syn::Stmt, Candidate<'_>)>, out: &mut Vec<syn::Stmt>| {
        if run.len() < 2 {
            out.extend(run.drain(..).map(|(s, _)| s));
            return;
        }
        let b = syn::Ident::new("__rankwise_batch", proc_macro2::Span::mixed_site());
        let calls = run.drain(..).map(|(_, c)| {
            let Candidate {
                group, mut call, ..
            } = c;
            *call.receiver = match group {
                Some(g) => syn::parse_quote!(#b.group(#g)),
                None => syn::parse_quote!(#b),
            };
            quote!(#call;)
        });
        let block: syn::Stmt = syn::parse_quote! {
            {
                let mut #b = #ctx.batch();
                #(#calls)*
                #b.run()?;
            }
        };
        out.push(block);
    };
    for stmt in stmts {
        match candidate(&stmt, ctx, sites) {
            Some(c) if run.iter().all(|(_, r)| disjoint(r.buffers, c.buffers)) => {
                run.push((stmt, c))
            }
            Some(c) => {
                flush(&mut run, &mut out);
                run.push((stmt, c));
            }
            None => {
                flush(&mut run, &mut out);
                out.push(stmt);
            }
        }
    }
    flush(&mut run, &mut out);
    out
}

/// Element types left to rustc (see `rankwise::__private::is`): per free call site a
/// `PhantomData` its tensor argument is bound to, and the equalities the verifier needed.
pub(crate) struct DtypeChecks {
    /// Statements for the top of the function: the variables and the checks (rustc infers
    /// types over the whole body, so the checks may come before the calls that bind them).
    pub prelude: TokenStream,
    /// Links whose two sites are both known and differ: definite RW008s, as (span, message).
    pub errors: Vec<(proc_macro2::Span, String)>,
}

/// The variable of free site `id`: hygienic (user code cannot name it), reported at `at`.
fn dtype_var_at(id: u32, at: proc_macro2::Span) -> syn::Ident {
    syn::Ident::new(
        &format!("__rankwise_dtype_{id}"),
        proc_macro2::Span::mixed_site().located_at(at),
    )
}

fn dtype_var(id: u32) -> syn::Ident {
    dtype_var_at(id, proc_macro2::Span::mixed_site())
}

fn dtype_tokens(d: rankwise_core::DType) -> TokenStream {
    use rankwise_core::DType as D;
    match d {
        D::F32 => quote!(f32),
        D::F64 => quote!(f64),
        D::F16 => quote!(::rankwise::f16),
        D::BF16 => quote!(::rankwise::bf16),
        D::I8 => quote!(i8),
        D::U8 => quote!(u8),
        D::I32 => quote!(i32),
        D::U32 => quote!(u32),
        D::I64 => quote!(i64),
        D::U64 => quote!(u64),
    }
}

/// The checks for `links` (pairs of sites that met, over every world size; see
/// `Schedule::dtype_links`).
pub(crate) fn dtype_checks(
    shared: &crate::eval::Analysis,
    links: &std::collections::BTreeSet<(u32, u32)>,
) -> DtypeChecks {
    let free = &shared.free_dtypes;
    let span = |id: u32| shared.sites.get(id as usize).map(|s| s.span);
    let seen = |id: u32| shared.seen_dtypes.get(&id).into_iter().flatten().copied();
    let mut out = Vec::new();
    let mut errors = Vec::new();
    for &id in free {
        let Some(at) = span(id) else { continue };
        let v = dtype_var_at(id, at);
        // Spanned at the call: rustc reports an unmet bound on the variable where it is made.
        out.push(quote::quote_spanned!(at=> let #v = ::core::marker::PhantomData;));
        // What the macro saw at this site on other ranks is its one static type.
        for d in seen(id) {
            let t = dtype_tokens(d);
            out.push(quote::quote_spanned!(at=> ::rankwise::__private::is::<#t, _>(&#v);));
        }
    }
    for &(a, b) in links {
        let (Some(sa), Some(sb)) = (span(a), span(b)) else {
            continue;
        };
        match (free.contains(&a), free.contains(&b)) {
            (true, true) => {
                let (va, vb) = (dtype_var_at(a, sa), dtype_var_at(b, sa));
                out.push(quote::quote_spanned!(sa=> ::rankwise::__private::same(&#va, &#vb);));
            }
            (true, false) | (false, true) => {
                let (f, k, at) = if free.contains(&a) {
                    (a, b, sa)
                } else {
                    (b, a, sb)
                };
                let v = dtype_var_at(f, at);
                for d in seen(k) {
                    let t = dtype_tokens(d);
                    out.push(quote::quote_spanned!(at=> ::rankwise::__private::is::<#t, _>(&#v);));
                }
            }
            (false, false) => {
                // Met at a step the verifier did not compare (another member's type was
                // free): compare here.
                for da in seen(a) {
                    for db in seen(b).filter(|db| *db != da) {
                        let line = shared.sites[b as usize].site.line;
                        errors.push((
                            sa,
                            format!(
                                "RW008: calls that meet move different element types: {da} here, \
                                 {db} in the call at line {line}\n= help: give every call that \
                                 meets this one the same element type"
                            ),
                        ));
                    }
                }
            }
        }
    }
    DtypeChecks {
        prelude: quote!(#(#out)*),
        errors,
    }
}

/// Binds the tensor argument of every call at a free site to its variable (see
/// [`dtype_checks`]); the ids of the sites it found.
pub(crate) fn bind_free_dtypes(
    block: &mut syn::Block,
    shared: &crate::eval::Analysis,
) -> std::collections::BTreeSet<u32> {
    use syn::visit_mut::VisitMut;
    struct Binder<'a> {
        shared: &'a crate::eval::Analysis,
        /// Free sites by (line, column), looked up once per method call.
        at: std::collections::HashMap<(u32, u32), u32>,
        found: std::collections::BTreeSet<u32>,
    }
    impl VisitMut for Binder<'_> {
        fn visit_expr_method_call_mut(&mut self, m: &mut syn::ExprMethodCall) {
            syn::visit_mut::visit_expr_method_call_mut(self, m);
            let Some(&id) = self.at.get(&location(m.method.span())) else {
                return;
            };
            let Some(&(pos, written)) = self.shared.free_args.get(&id) else {
                return;
            };
            let Some(arg) = m.args.iter_mut().nth(pos) else {
                return;
            };
            let v = dtype_var(id);
            // A bitwise reduction binds with the bound that its element type is an integer, so
            // rustc reports a float at the user's argument. Any expression binds (`&t`, a
            // reference held in a variable): the wrapper takes what the method takes.
            let int = self.shared.integer_sites.contains(&id);
            let r = &*arg;
            let f = match (written, int) {
                (true, false) => "bind_mut",
                (true, true) => "bind_mut_integer",
                (false, false) => "bind_ref",
                (false, true) => "bind_ref_integer",
            };
            // Spanned at the argument: that is where rustc reports an unmet bound.
            let at = syn::spanned::Spanned::span(r);
            let f = syn::Ident::new(f, at);
            *arg = syn::parse_quote_spanned!(at=> ::rankwise::__private::#f(&#v, #r));
            self.found.insert(id);
        }
        fn visit_expr_closure_mut(&mut self, _: &mut syn::ExprClosure) {}
        fn visit_item_mut(&mut self, _: &mut syn::Item) {}
    }
    let at = shared
        .free_dtypes
        .iter()
        .filter_map(|&id| {
            let s = shared.sites.get(id as usize)?;
            Some(((s.site.line, s.site.column), id))
        })
        .collect();
    let mut b = Binder {
        shared,
        at,
        found: Default::default(),
    };
    b.visit_block_mut(block);
    b.found
}

#[cfg(test)]
mod tests {
    use super::compress;

    #[test]
    fn repeated_patterns_compress() {
        let ring: Vec<u32> = [0, 1].repeat(30);
        assert_eq!(compress(&ring), vec![(vec![0, 1], 30)]);
        assert_eq!(
            compress(&[5, 0, 1, 0, 1, 7]),
            vec![(vec![5], 1), (vec![0, 1], 2), (vec![7], 1)]
        );
        assert_eq!(compress(&[]), vec![]);
        let flat: Vec<u32> = compress(&[3, 3, 3, 4])
            .into_iter()
            .flat_map(|(p, t)| p.repeat(t as usize))
            .collect();
        assert_eq!(flat, vec![3, 3, 3, 4]);
    }
}

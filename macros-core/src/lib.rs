//! The implementation of `#[rankwise::program]`, as a plain library: the proc-macro crate is a
//! thin entry point that calls [`expand`], so the pipeline can be tested, fuzzed and
//! benchmarked like any other code.
//!
//! The pipeline, in [`expand`]: parse the arguments and the function → evaluate the body
//! statically for every checked world size and rank, building a program description → check
//! it with the runtime's verifier (the same code `spawn` runs at launch) → lower: emit the
//! function with its verified schedule and run-time guard, or the errors and the unchanged
//! function (so that no cascade of unrelated errors follows).

#![warn(missing_docs, unreachable_pub)]
// Plain data and algorithms: nothing here needs `unsafe`, and nothing may.
#![forbid(unsafe_code)]

mod args;
mod eval;
mod lower;
mod render;

use std::collections::HashMap;

use proc_macro2::TokenStream;
use quote::quote;
use rankwise_core::verify::{self, Program};

use syn::spanned::Spanned;

/// parse → model → check → lower. Never panics: every failure is a compile error.
///
/// On a function, checks that function. On a module, checks every function in it that carries
/// its own `#[rankwise::program(world …)]`, with the module's other functions visible to the
/// macro as helpers (peers, roots and members computed by small functions).
pub fn expand(args: TokenStream, item: TokenStream) -> TokenStream {
    if let Ok(module) = syn::parse2::<syn::ItemMod>(item.clone()) {
        return expand_module(args, module);
    }
    expand_with(args, item, &HashMap::new(), &Default::default())
}

/// Helper functions the evaluator may call, by name.
type Helpers = HashMap<String, std::rc::Rc<syn::ItemFn>>;

/// `#[rankwise::program]` on a module: its program functions, each checked with the module's
/// other functions as helpers. World sizes go on the functions, not the module.
fn expand_module(args: TokenStream, mut module: syn::ItemMod) -> TokenStream {
    if !args.is_empty() {
        let msg = "RW015: on a module, `#[rankwise::program]` takes no arguments: put \
                   `#[rankwise::program(world …)]` on each program function inside it";
        let err = syn::Error::new(args.span(), msg).to_compile_error();
        return quote!(#err #module);
    }
    let Some((_, items)) = &mut module.content else {
        let msg = "RW015: `#[rankwise::program]` goes on a module with a body (`mod m { … }`), \
                   so that the macro can see its functions";
        let err = syn::Error::new(module.ident.span(), msg).to_compile_error();
        return quote!(#err #module);
    };
    let is_program = |a: &syn::Attribute| {
        a.path()
            .segments
            .last()
            .is_some_and(|s| s.ident == "program")
    };
    let helpers: Helpers = items
        .iter()
        .filter_map(|i| match i {
            syn::Item::Fn(f) if !f.attrs.iter().any(is_program) => {
                Some((f.sig.ident.to_string(), std::rc::Rc::new(f.clone())))
            }
            _ => None,
        })
        .collect();
    // Traits of the module, and trait impls anywhere in it, may give a value a method of the
    // name of one the macro models (see `Analysis::trait_methods`).
    let traits = eval::trait_methods(&|f| {
        for i in items.iter() {
            syn::visit::Visit::visit_item(f, i);
        }
    });
    for item in items.iter_mut() {
        let syn::Item::Fn(f) = item else { continue };
        let Some(pos) = f.attrs.iter().position(is_program) else {
            continue;
        };
        let attr = f.attrs.remove(pos);
        let args = match &attr.meta {
            syn::Meta::List(l) => l.tokens.clone(),
            _ => TokenStream::new(),
        };
        let expanded = expand_with(args, quote!(#f), &helpers, &traits);
        *item = syn::Item::Verbatim(expanded);
    }
    quote!(#module)
}

fn expand_with(
    args: TokenStream,
    item: TokenStream,
    helpers: &Helpers,
    module_traits: &std::collections::HashSet<String>,
) -> TokenStream {
    // Too deep to parse safely: syn's parser recurses per nesting level, and a debug-built proc
    // macro has a few MiB of stack (400 nested blocks crashed rustc). Refuse before parsing.
    if let Some(span) = too_deep(item.clone()) {
        let msg = format!(
            "RW012: communication the macro cannot verify: code nested more than {MAX_TOKEN_NESTING} \
             levels deep, which the macro does not read\n= help: split it with `let` bindings or \
             helper functions that do not communicate"
        );
        let err = syn::Error::new(span, msg).to_compile_error();
        return quote!(#err #item);
    }
    // Parse: the function first, so that argument errors still leave it in place.
    let func: syn::ItemFn = match syn::parse2(item.clone()) {
        Ok(f) => f,
        Err(e) => {
            let msg = format!("RW015: #[rankwise::program] goes on a function: {e}");
            let err = syn::Error::new(e.span(), msg).to_compile_error();
            return quote!(#err #item);
        }
    };
    let worlds = match args::parse(args) {
        Ok(w) => w,
        Err(e) => return fail(e, &func),
    };
    let ctx = match context_param(&func) {
        Ok(c) => c,
        Err(e) => return fail(e, &func),
    };

    // Model and check, one world size at a time: evaluate the body for every rank into a
    // program description, verify it with the runtime's verifier, and keep only the schedule
    // the guard needs (so memory holds one world's description at a time).
    let mut shared = eval::Analysis::default();
    shared.helpers = helpers.clone();
    shared.trait_methods = eval::trait_methods(&|f| syn::visit::Visit::visit_item_fn(f, &func));
    shared.trait_methods.extend(module_traits.iter().cloned());
    let mut schedules = Vec::with_capacity(worlds.sizes.len());
    let mut diags = Vec::new();
    // Pairs of call sites that met where an element type was left to rustc (see
    // `lower::dtype_checks`), over every world size.
    let mut dtype_links = std::collections::BTreeSet::new();
    for &w in &worlds.sizes {
        let mut p = Program::new(w);
        let mut registry = HashMap::new();
        for r in 0..w {
            if shared.halted() {
                break;
            }
            eval::Eval::new(ctx.to_string(), r, w, &mut p, &mut registry, &mut shared)
                .run(&func.block);
        }
        if shared.over_budget() {
            let msg = format!(
                "RW012: checking `{}` at world sizes {} needs more work than the macro allows \
                 ({} steps, spent by world size {w}); check fewer or smaller world sizes, e.g. \
                 `world in [2, 4, 8]` (larger worlds can be checked at launch with \
                 `rankwise::Options::verify`)",
                func.sig.ident,
                args::describe(&worlds.sizes),
                eval::WORK_BUDGET
            );
            shared.error(func.sig.ident.span(), msg);
        }
        if shared.halted() {
            break;
        }
        p.free_dtypes = shared
            .free_dtypes
            .iter()
            .map(|&i| verify::SiteId(i))
            .collect();
        // A free site whose type the macro saw on another rank has that type (rustc gives a
        // site one): messages then show it instead of the stand-in.
        if !p.free_dtypes.is_empty() {
            for op in p.ranks.iter_mut().flatten().flat_map(verify::Item::ops_mut) {
                let seen = shared.seen_dtypes.get(&op.id.0);
                if let Some(&d) = seen.filter(|s| s.len() == 1).and_then(|s| s.first()) {
                    op.desc.dtype = d;
                }
            }
        }
        match verify::verify(&p) {
            Ok(s) => dtype_links.extend(s.dtype_links.iter().map(|(a, b)| (a.0, b.0))),
            Err(d) => diags.extend(d.0),
        }
        schedules.push(lower::WorldSchedule::of(&p));
    }
    // Element types left to rustc: the equalities the verifier could not check, as code for
    // rustc (and as errors here where both sides are known).
    let checks = lower::dtype_checks(&shared, &dtype_links);
    for (span, msg) in checks.errors {
        shared.error(span, msg);
    }
    let unverifiable = shared
        .take_errors()
        .into_iter()
        .map(|(s, m)| syn::Error::new(s, m));
    if let Some(all) = unverifiable.reduce(|mut all, e| {
        all.combine(e);
        all
    }) {
        return fail(all, &func);
    }
    if let Some(e) = render::render(&diags, &shared, func.sig.ident.span()) {
        return fail(e, &func);
    }
    // Only a checked function is walked again (never code the evaluator refused as too deep),
    // and on a copy, so that a failure re-emits the function as written.
    let mut block = func.block.clone();
    if !shared.free_dtypes.is_empty() {
        let bound = lower::bind_free_dtypes(&mut block, &shared);
        let unbound = shared.free_dtypes.difference(&bound).map(|&id| {
            syn::Error::new(
                shared.sites[id as usize].span,
                "RW012: communication the macro cannot verify: a tensor whose dtype the macro \
                 cannot determine, in a call it cannot bind to a type for rustc to check\n= help: \
                 give the element type with a literal suffix (`1.0f32`), a turbofish \
                 (`zeros::<f32>`) or an annotation (`let t: Tensor<f32>`)",
            )
        });
        if let Some(all) = unbound.reduce(|mut all, e| {
            all.combine(e);
            all
        }) {
            return fail(all, &func);
        }
    }

    // Lower: the function with its schedule and guard.
    let enter = lower::guard(&func.sig.ident.to_string(), &ctx, &shared.sites, &schedules);
    let asserts = lower::const_assertions(&shared, &func.sig.generics);
    let dtypes = checks.prelude;
    let syn::ItemFn {
        attrs, vis, sig, ..
    } = func;
    lower::batch_adjacent(&mut block, &ctx, &shared.sites);
    let stmts = &block.stmts;
    quote! {
        #(#attrs)*
        #vis #sig {
            #asserts
            #dtypes
            #enter
            #(#stmts)*
        }
    }
}

/// How deeply brackets may nest in the function before the macro refuses to parse it.
const MAX_TOKEN_NESTING: usize = 128;

/// The span of a bracket nested deeper than [`MAX_TOKEN_NESTING`], if any (found without
/// recursion).
fn too_deep(item: TokenStream) -> Option<proc_macro2::Span> {
    let mut stack = vec![item.into_iter()];
    while let Some(top) = stack.last_mut() {
        match top.next() {
            Some(proc_macro2::TokenTree::Group(g)) => {
                if stack.len() >= MAX_TOKEN_NESTING {
                    return Some(g.span());
                }
                stack.push(g.stream().into_iter());
            }
            Some(_) => {}
            None => {
                stack.pop();
            }
        }
    }
    None
}

/// The errors, plus the function as written, so only the real problems are reported.
fn fail(e: syn::Error, func: &syn::ItemFn) -> TokenStream {
    let err = e.to_compile_error();
    quote!(#err #func)
}

/// The name of the context parameter: the first parameter, `name: &mut Ctx`.
///
/// The context is found by its type (`&mut Ctx`, `&mut rankwise::Ctx`, …), so that one in
/// another position gets an error saying where it must go, rather than the first parameter
/// being taken for it.
fn context_param(func: &syn::ItemFn) -> syn::Result<syn::Ident> {
    const USAGE: &str = "a rank program takes the context first, like `fn step(ctx: &mut Ctx, …) -> rankwise::Result<T>`";
    let typed: Vec<&syn::PatType> = func
        .sig
        .inputs
        .iter()
        .filter_map(|a| match a {
            syn::FnArg::Typed(t) => Some(t),
            syn::FnArg::Receiver(_) => None,
        })
        .collect();
    let is_ctx = |t: &syn::PatType| match &*t.ty {
        syn::Type::Reference(r) => {
            r.mutability.is_some()
                && matches!(&*r.elem, syn::Type::Path(p)
                    if p.path.segments.last().is_some_and(|s| s.ident == "Ctx"))
        }
        _ => false,
    };
    let position = typed.iter().position(|t| is_ctx(t));
    let first_is_param = matches!(func.sig.inputs.first(), Some(syn::FnArg::Typed(_)));
    let ctx = match position {
        Some(0) if first_is_param => typed[0],
        Some(i) => {
            return Err(syn::Error::new(
                typed[i].span(),
                format!("RW015: the context must be the first parameter; {USAGE}"),
            ));
        }
        None => {
            let span = typed.first().map_or(func.sig.span(), |t| t.ty.span());
            return Err(syn::Error::new(
                span,
                format!("RW015: no `&mut Ctx` parameter; {USAGE}"),
            ));
        }
    };
    let syn::Pat::Ident(name) = &*ctx.pat else {
        return Err(syn::Error::new(
            ctx.pat.span(),
            format!("RW015: name the context with a plain identifier; {USAGE}"),
        ));
    };
    if func.sig.output == syn::ReturnType::Default {
        return Err(syn::Error::new(
            func.sig.ident.span(),
            "RW015: a rank program returns `rankwise::Result<T>` (its guard reports problems as `Err`)",
        ));
    }
    Ok(name.ident.clone())
}

#[cfg(test)]
mod tests {
    use super::expand as pipeline;
    use proc_macro2::{
        Delimiter, Group, Ident, Literal, Punct, Spacing, Span, TokenStream, TokenTree,
    };
    use proptest::prelude::*;
    use quote::quote;

    /// Runs the pipeline and fails the test if it panics.
    fn no_panic(args: TokenStream, item: TokenStream) -> TokenStream {
        let r = std::panic::catch_unwind(|| pipeline(args.clone(), item.clone()));
        r.unwrap_or_else(|_| panic!("the macro panicked on\nargs: {args}\nitem: {item}"))
    }

    fn token() -> impl Strategy<Value = TokenTree> {
        let leaf = prop_oneof![
            prop::sample::select(vec![
                "ctx", "fn", "let", "if", "for", "in", "world", "send", "recv", "batch", "run",
                "rank", "x", "Tensor", "ReduceOp", "Sum", "mut", "match", "while", "return",
                "Some", "None"
            ])
            .prop_map(|s| TokenTree::Ident(Ident::new(s, Span::call_site()))),
            prop::sample::select(vec![
                '.', ',', ';', '=', '+', '-', '*', '/', '%', '&', '<', '>', '!', '?', ':', '|', '^'
            ])
            .prop_map(|c| TokenTree::Punct(Punct::new(c, Spacing::Alone))),
            (0u32..40).prop_map(|n| TokenTree::Literal(Literal::u32_unsuffixed(n))),
            Just(TokenTree::Literal(Literal::f32_suffixed(1.5))),
        ];
        leaf.prop_recursive(3, 48, 8, |inner| {
            (
                prop::sample::select(vec![
                    Delimiter::Parenthesis,
                    Delimiter::Brace,
                    Delimiter::Bracket,
                ]),
                prop::collection::vec(inner, 0..8),
            )
                .prop_map(|(d, ts)| TokenTree::Group(Group::new(d, ts.into_iter().collect())))
        })
    }

    /// Every program of the project's ui suite and corpus expands to the same code — the same
    /// guard tables, hence the same verified schedules, and the same diagnostics — whether loops
    /// are summarised or evaluated iteration by iteration.
    #[test]
    fn loop_summaries_change_no_expansion() {
        // Debug builds of the evaluator need more stack than the test harness's threads have.
        std::thread::Builder::new()
            .stack_size(256 << 20)
            .spawn(compare_with_and_without_summaries)
            .expect("a thread")
            .join()
            .expect("no panic");
    }

    fn compare_with_and_without_summaries() {
        let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests");
        let mut files = vec![format!("{root}/corpus/programs.rs")];
        for dir in std::fs::read_dir(format!("{root}/ui")).expect("tests/ui") {
            let dir = dir.expect("an entry").path();
            for f in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
                if f.path().extension().is_some_and(|e| e == "rs") {
                    files.push(f.path().display().to_string());
                }
            }
        }
        files.sort();
        let (mut programs, mut over_budget) = (0, 0);
        for file in &files {
            let text = std::fs::read_to_string(file).expect("a readable file");
            let Ok(parsed) = syn::parse_file(&text) else {
                continue; // a ui case about syntax
            };
            let mut items: Vec<syn::Item> = parsed.items;
            // The corpus keeps its programs in a module.
            while let Some(i) = items.iter().position(|i| matches!(i, syn::Item::Mod(m) if m.content.is_some() && !m.attrs.iter().any(is_program))) {
                if let syn::Item::Mod(m) = items.remove(i) {
                    items.extend(m.content.map(|c| c.1).unwrap_or_default());
                }
            }
            for mut item in items {
                let attrs = match &mut item {
                    syn::Item::Fn(f) => &mut f.attrs,
                    syn::Item::Mod(m) => &mut m.attrs,
                    _ => continue,
                };
                let Some(at) = attrs.iter().position(is_program) else {
                    continue;
                };
                let attr = attrs.remove(at);
                let args = match &attr.meta {
                    syn::Meta::List(l) => l.tokens.clone(),
                    _ => TokenStream::new(),
                };
                let tokens = quote!(#item);
                let with = pipeline(args.clone(), tokens.clone()).to_string();
                programs += 1;
                // Summaries save work: a program over the work budget with them is over it
                // without them too, which only spending the whole budget again, a step at a
                // time, would show (`huge_world_list`: 48 of this test's 84 seconds in a debug
                // build). Its error is the ui suite's to compare.
                let over = |s: &str| s.contains("needs more work than the macro allows");
                if over(&with) {
                    over_budget += 1;
                    continue;
                }
                let without =
                    crate::eval::summary::without(|| pipeline(args.clone(), tokens.clone()))
                        .to_string();
                assert!(with == without, "{file}: expansions differ");
            }
        }
        assert!(programs > 100, "only {programs} programs found");
        // The ui suite's one program over the budget; more would mean summaries stopped
        // saving work.
        assert_eq!(
            over_budget, 1,
            "programs over the work budget with summaries"
        );
    }

    fn is_program(a: &syn::Attribute) -> bool {
        let segs: Vec<String> = a
            .path()
            .segments
            .iter()
            .map(|s| s.ident.to_string())
            .collect();
        segs.last().is_some_and(|s| s == "program")
    }

    fn expanded(args: TokenStream, item: TokenStream) -> String {
        let out = no_panic(args, item).to_string();
        assert!(!out.contains("compile_error"), "{out}");
        out
    }

    /// Runs the pipeline on a thread with the stack rustc gives proc macros (8 MiB), so that a
    /// stack overflow fails the test instead of passing on a larger test-thread stack.
    fn on_rustc_stack(args: TokenStream, item: TokenStream) -> String {
        let (args, item) = (args.to_string(), item.to_string());
        std::thread::Builder::new()
            .stack_size(8 << 20)
            .spawn(move || {
                let args: TokenStream = args.parse().unwrap();
                let item: TokenStream = item.parse().unwrap();
                no_panic(args, item).to_string()
            })
            .unwrap()
            .join()
            .unwrap()
    }

    #[test]
    fn deep_code_is_an_error_not_a_crash() {
        // 400 nested blocks around a call.
        let mut body = quote!(ctx.barrier()?;);
        for _ in 0..400 {
            body = quote!({ #body });
        }
        let out = on_rustc_stack(
            quote!(world = 2),
            quote!(fn f(ctx: &mut Ctx) -> Result<()> { #body Ok(()) }),
        );
        assert!(out.contains("nested more than"), "{out}");
        // A 2000-term sum (rustc compiles it) used as a peer.
        let mut sum = quote!(ctx.rank());
        for _ in 0..2000 {
            sum = quote!(#sum + 0);
        }
        let out = on_rustc_stack(
            quote!(world = 2),
            quote!(fn f(ctx: &mut Ctx) -> Result<()> {
                let x = ctx.full([1], 1.0f32)?;
                let p = #sum;
                if p == 5 { ctx.send(&x, p)?; }
                Ok(())
            }),
        );
        assert!(out.contains("nested more than"), "{out}");
        // Moderately deep code is read as usual.
        let mut body = quote!(ctx.barrier()?;);
        for _ in 0..20 {
            body = quote!({ #body });
        }
        expanded(
            quote!(world = 2),
            quote!(fn f(ctx: &mut Ctx) -> Result<()> { #body Ok(()) }),
        );
    }

    #[test]
    fn the_work_budget_stops_huge_world_lists_with_a_diagnostic() {
        let ring = quote! {
            fn ring(ctx: &mut Ctx) -> Result<()> {
                let x = ctx.full([4], 1.0f32)?;
                let mut y = ctx.zeros::<f32>([4])?;
                let (r, w) = (ctx.rank(), ctx.world());
                for _ in 0..2 * (w - 1) {
                    let mut b = ctx.batch();
                    b.send(&x, (r + 1) % w).recv(&mut y, (r + w - 1) % w);
                    b.run()?;
                }
                Ok(())
            }
        };
        let t = std::time::Instant::now();
        let out = no_panic(quote!(world in 1..=1024), ring.clone()).to_string();
        assert!(
            out.contains("needs more work than the macro allows"),
            "{out}"
        );
        assert!(out.contains("world in [2, 4, 8]"), "{out}");
        assert!(
            t.elapsed() < std::time::Duration::from_secs(60),
            "{:?}",
            t.elapsed()
        );
        // A realistic list fits.
        expanded(quote!(world in 1..=32), ring);
    }

    #[test]
    fn long_functions_cost_linear_time() {
        let mut body = TokenStream::new();
        for i in 0..3000usize {
            let v = quote::format_ident!("v{i}");
            body.extend(quote!(let #v = ctx.rank() + #i;));
            if i % 100 == 0 {
                body.extend(quote!(ctx.all_reduce(&mut y, ReduceOp::Sum)?;));
            }
        }
        let t = std::time::Instant::now();
        expanded(
            quote!(world in 1..=16),
            quote!(fn f(ctx: &mut Ctx) -> Result<()> {
                let mut y = ctx.zeros::<f32>([4])?;
                #body
                Ok(())
            }),
        );
        assert!(
            t.elapsed() < std::time::Duration::from_secs(30),
            "{:?}",
            t.elapsed()
        );
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

        /// Arbitrary token streams, as arguments and as the item.
        #[test]
        fn arbitrary_tokens_never_panic(args in prop::collection::vec(token(), 0..8), item in prop::collection::vec(token(), 0..24)) {
            no_panic(args.into_iter().collect(), item.into_iter().collect());
            no_panic(quote!(world in 1..=3), std::iter::once(TokenTree::Ident(Ident::new("fn", Span::call_site()))).collect());
        }

        /// Small programs: random statements in a well-formed program function.
        #[test]
        fn arbitrary_small_programs_never_panic(world in 1usize..5, stmts in prop::collection::vec(0usize..28, 0..10), ks in prop::collection::vec(0i64..6, 10)) {
            let mut body = TokenStream::new();
            for (i, s) in stmts.iter().enumerate() {
                let k = ks[i % ks.len()];
                let k = Literal::i64_unsuffixed(k);
                body.extend(match s {
                    0 => quote!(ctx.send(&x, (ctx.rank() + #k) % ctx.world())?;),
                    1 => quote!(ctx.recv(&mut y, #k)?;),
                    2 => quote!(ctx.all_reduce(&mut y, ReduceOp::Sum)?;),
                    3 => quote!(if ctx.rank() == #k { ctx.barrier()?; }),
                    4 => quote!(for i in 0..#k { ctx.broadcast(&mut y, i)?; }),
                    5 => quote!(let mut b = ctx.batch(); b.send(&x, #k).recv(&mut y, #k); b.run()?;),
                    6 => quote!(let g = ctx.new_group([0, #k])?;),
                    7 => quote!(ctx.reduce_scatter(&x, &mut y, ReduceOp::Max, #k)?;),
                    8 => quote!(let x = ctx.full([#k, 2], 1.0f32)?;),
                    9 => quote!(while ctx.rank() > #k { ctx.barrier()?; }),
                    10 => quote!(match ctx.rank() { 0 => ctx.send(&x, 1)?, #k..=9 => ctx.recv(&mut y, 0)?, _ => {} }),
                    11 => quote!(ctx.all_gather(&x, &mut y, #k)?;),
                    12 => quote!(let k = 1 << #k;),
                    13 => quote!(for i in 0..(1usize << 60) { ctx.barrier()?; }),
                    18 => quote!(let big = ctx.zeros::<f32>([1 << 62])?; ctx.all_gather(&big, &mut y, 0)?;),
                    19 => quote!(for i in 0..=i128::MAX { ctx.barrier()?; }),
                    20 => quote!(for i in (0..4).step_by(1 << 64) { ctx.barrier()?; }),
                    21 => quote!(for i in (0..4).step_by(1 << 63) { ctx.barrier()?; }),
                    22 => quote!('a: for i in 0..#k { for j in 0..3 { if j == i { continue 'a; } if j > 1 { break 'a; } ctx.barrier()?; } }),
                    23 => quote!(let v = 'b: { if ctx.rank() == #k { break 'b 1; } 2 }; ctx.broadcast(&mut y, v)?;),
                    24 => quote!(#[cfg(test)] ctx.barrier()?;),
                    25 => quote!(let mut n = 0; while n < #k { n += 1; } ctx.send(&x, n)?;),
                    26 => quote!(let c = &mut *ctx; c.barrier()?;),
                    27 => quote!(for _ in 0..(1usize << 62) { let z = 1; }),
                    14 => quote!(let q = ctx.world().pow(40) - 170141183460469231731687303715884105727; ctx.send(&x, q)?;),
                    15 => quote!(ctx.all_reduce(&mut y, ReduceOp::PreMulSum(0.5))?;),
                    16 => quote!(let (a, b) = (ctx.rank(), #k); ctx.scatter((a == b).then_some(&x), &mut y, b, 0)?;),
                    _ => quote!(ctx.gather(&x, Some(&mut y), #k, 0)?;),
                });
            }
            let w = Literal::usize_unsuffixed(world);
            let item = quote! {
                fn prog(ctx: &mut Ctx) -> Result<()> {
                    let x = ctx.full([4], 1.0f32)?;
                    let mut y = ctx.zeros::<f32>([4])?;
                    #body
                    Ok(())
                }
            };
            no_panic(quote!(world = #w), item.clone());
            no_panic(quote!(world in 1..=4), item);
        }
    }
}

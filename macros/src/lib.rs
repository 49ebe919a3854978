//! `#[rankwise::program]`: compile-time checking of rank programs.
//!
//! The pipeline, in [`pipeline`]: parse the arguments and the function → evaluate the body
//! statically for every checked world size and rank, building a program description → check
//! it with the runtime's verifier (the same code `spawn` runs at launch) → lower: emit the
//! function with its verified schedule and run-time guard, or the errors and the unchanged
//! function (so that no cascade of unrelated errors follows).

mod args;
mod eval;
mod lower;
mod render;

use std::collections::HashMap;

use proc_macro2::TokenStream;
use quote::quote;
use rankwise_runtime::verify::{self, Program};
use syn::spanned::Spanned;

/// Checks a rank program at compile time for every world size listed:
/// `#[program(world = 4)]`, `#[program(world in [2, 4, 8])]`, `#[program(world in 2..=64)]`.
///
/// The function must take the context first (`ctx: &mut Ctx`) and return
/// `rankwise::Result<T>`. See the crate docs of `rankwise` for what is checked.
#[proc_macro_attribute]
pub fn program(
    args: proc_macro::TokenStream,
    item: proc_macro::TokenStream,
) -> proc_macro::TokenStream {
    pipeline(args.into(), item.into()).into()
}

/// parse → model → check → lower. Never panics: every failure is a compile error.
pub(crate) fn pipeline(args: TokenStream, item: TokenStream) -> TokenStream {
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

    // Model: evaluate the body per world size and rank into program descriptions.
    let mut shared = eval::Shared::default();
    let mut programs: Vec<(usize, Program)> = Vec::with_capacity(worlds.sizes.len());
    for &w in &worlds.sizes {
        let mut p = Program::new(w);
        let mut registry = HashMap::new();
        for r in 0..w {
            eval::Eval::new(ctx.to_string(), r, w, &mut p, &mut registry, &mut shared)
                .run(&func.block);
        }
        programs.push((w, p));
    }
    let unverifiable = shared.take_errors();
    if !unverifiable.is_empty() {
        let mut it = unverifiable.into_iter().map(|(s, m)| syn::Error::new(s, m));
        let mut all = it.next().expect("non-empty");
        it.for_each(|e| all.combine(e));
        return fail(all, &func);
    }

    // Check: the runtime's verifier, on every world size.
    let mut diags = Vec::new();
    for (_, p) in &programs {
        if let Err(d) = verify::verify(p) {
            diags.extend(d.0);
        }
    }
    if let Some(e) = render::render(&diags, &shared.sites, func.sig.ident.span()) {
        return fail(e, &func);
    }

    // Lower: the function with its schedule and guard.
    let (table, enter) = lower::guard(&func.sig.ident.to_string(), &ctx, &shared.sites, &programs);
    let syn::ItemFn {
        attrs,
        vis,
        sig,
        block,
    } = func;
    let stmts = &block.stmts;
    quote! {
        #(#attrs)*
        #vis #sig {
            #table
            #enter
            #(#stmts)*
        }
    }
}

/// The errors, plus the function as written, so only the real problems are reported.
fn fail(e: syn::Error, func: &syn::ItemFn) -> TokenStream {
    let err = e.to_compile_error();
    quote!(#err #func)
}

/// The name of the context parameter: the first parameter, `name: &mut Ctx`.
fn context_param(func: &syn::ItemFn) -> syn::Result<syn::Ident> {
    let bad = |span| {
        syn::Error::new(
            span,
            "RW015: a rank program takes the context first, like `fn step(ctx: &mut Ctx, …) -> rankwise::Result<T>`",
        )
    };
    let Some(syn::FnArg::Typed(first)) = func.sig.inputs.first() else {
        return Err(bad(func.sig.span()));
    };
    let syn::Pat::Ident(name) = &*first.pat else {
        return Err(bad(first.pat.span()));
    };
    if func.sig.output == syn::ReturnType::Default {
        return Err(syn::Error::new(
            func.sig.ident.span(),
            "RW015: a rank program returns `rankwise::Result<T>` (its guard reports problems as `Err`)",
        ));
    }
    Ok(name.ident.clone())
}

//! `#[program(...)]` arguments: `world = 4`, `world in [2, 4, 8]`, `world in 2..=64`.

use proc_macro2::{Span, TokenStream};
use syn::parse::{ParseStream, Parser};
use syn::punctuated::Punctuated;
use syn::{Ident, LitInt, Token};

/// The largest world size a program may be checked for (compile time grows with it).
pub(crate) const MAX_WORLD: usize = 4096;

/// The checked world sizes, ascending and distinct.
pub(crate) struct Worlds {
    pub sizes: Vec<usize>,
}

fn rw015(span: Span, msg: impl std::fmt::Display) -> syn::Error {
    syn::Error::new(span, format!("RW015: {msg}"))
}

const FORMS: &str = "expected `world = 4`, `world in [2, 4, 8]` or `world in 2..=64`";

fn size(lit: &LitInt) -> syn::Result<usize> {
    let v: usize = lit
        .base10_parse()
        .map_err(|_| rw015(lit.span(), "a world size must be a positive integer"))?;
    if v == 0 || v > MAX_WORLD {
        return Err(rw015(
            lit.span(),
            format!("a world size must be between 1 and {MAX_WORLD}, not {v}"),
        ));
    }
    Ok(v)
}

fn parse_inner(input: ParseStream<'_>) -> syn::Result<Worlds> {
    if input.is_empty() {
        return Err(rw015(
            Span::call_site(),
            format!("missing world sizes: {FORMS}"),
        ));
    }
    let key: Ident = input.parse().map_err(|e| rw015(e.span(), FORMS))?;
    if key != "world" {
        return Err(rw015(
            key.span(),
            format!("unknown argument `{key}`: {FORMS}"),
        ));
    }
    let mut sizes = Vec::new();
    if input.peek(Token![=]) {
        input.parse::<Token![=]>()?;
        let lit: LitInt = input
            .parse()
            .map_err(|e| rw015(e.span(), "`world =` takes an integer, like `world = 4`"))?;
        sizes.push(size(&lit)?);
    } else if input.peek(Token![in]) {
        input.parse::<Token![in]>()?;
        if input.peek(syn::token::Bracket) {
            let content;
            let bracket = syn::bracketed!(content in input);
            let list = Punctuated::<LitInt, Token![,]>::parse_terminated(&content)
                .map_err(|e| rw015(e.span(), "a world list holds integers, like `[2, 4, 8]`"))?;
            if list.is_empty() {
                return Err(rw015(bracket.span.join(), "the world list is empty"));
            }
            for lit in &list {
                let v = size(lit)?;
                if sizes.contains(&v) {
                    return Err(rw015(lit.span(), format!("world size {v} is listed twice")));
                }
                sizes.push(v);
            }
        } else {
            let lo: LitInt = input.parse().map_err(|e| rw015(e.span(), FORMS))?;
            let inclusive = if input.peek(Token![..=]) {
                input.parse::<Token![..=]>()?;
                true
            } else if input.peek(Token![..]) {
                input.parse::<Token![..]>()?;
                false
            } else {
                return Err(rw015(
                    input.span(),
                    "expected `..=` or `..` after the first world size",
                ));
            };
            let hi: LitInt = input
                .parse()
                .map_err(|e| rw015(e.span(), "expected the last world size of the range"))?;
            let (a, b) = (
                size(&lo)?,
                hi.base10_parse::<usize>()
                    .map_err(|_| rw015(hi.span(), "expected an integer"))?,
            );
            let end = if inclusive { b } else { b.saturating_sub(1) };
            if end < a {
                return Err(rw015(
                    hi.span(),
                    format!(
                        "the range {a}..{}{b} is empty",
                        if inclusive { "=" } else { "" }
                    ),
                ));
            }
            if end > MAX_WORLD {
                return Err(rw015(
                    hi.span(),
                    format!("a world size must be at most {MAX_WORLD}"),
                ));
            }
            sizes.extend(a..=end);
        }
    } else {
        return Err(rw015(
            input.span(),
            format!("expected `=` or `in` after `world`: {FORMS}"),
        ));
    }
    if !input.is_empty() {
        return Err(rw015(
            input.span(),
            format!("unexpected tokens after the world sizes: {FORMS}"),
        ));
    }
    sizes.sort_unstable();
    Ok(Worlds { sizes })
}

/// Parses the attribute's arguments.
pub(crate) fn parse(args: TokenStream) -> syn::Result<Worlds> {
    parse_inner.parse2(args)
}

/// World sizes as a person would write them: `1..=1024`, or `[2, 4, 8]` (long lists cut).
pub(crate) fn describe(sizes: &[usize]) -> String {
    match sizes {
        [] => "[]".into(),
        [a, .., b] if sizes.windows(2).all(|w| w[1] == w[0] + 1) => format!("{a}..={b}"),
        _ if sizes.len() <= 8 => format!("{sizes:?}"),
        _ => {
            let head: Vec<String> = sizes[..6].iter().map(ToString::to_string).collect();
            format!("[{}, … ({} sizes)]", head.join(", "), sizes.len())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use quote::quote;

    #[test]
    fn accepts_the_three_forms() {
        assert_eq!(parse(quote!(world = 4)).unwrap().sizes, vec![4]);
        assert_eq!(
            parse(quote!(world in [8, 2, 4])).unwrap().sizes,
            vec![2, 4, 8]
        );
        assert_eq!(
            parse(quote!(world in 2..=5)).unwrap().sizes,
            vec![2, 3, 4, 5]
        );
        assert_eq!(parse(quote!(world in 2..4)).unwrap().sizes, vec![2, 3]);
    }

    #[test]
    fn rejects_malformed_arguments_with_rw015() {
        for bad in [
            quote!(),
            quote!(worlds = 4),
            quote!(world = 0),
            quote!(world = x),
            quote!(world in []),
            quote!(world in [2, 2]),
            quote!(world in 4..2),
            quote!(world 4),
            quote!(world = 4, extra),
            quote!(world in 1..=100000),
        ] {
            let e = parse(bad.clone())
                .err()
                .unwrap_or_else(|| panic!("accepted `{bad}`"));
            assert!(e.to_string().starts_with("RW015: "), "{e}");
        }
    }
}

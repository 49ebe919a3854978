//! The verifier's diagnostics as compile errors at the user's spans.
//!
//! On stable Rust a proc macro cannot attach `note:` sub-diagnostics, so each secondary site
//! becomes its own short error that says which primary error it belongs to. The same problem
//! found at several world sizes is reported once, listing the other sizes.

use proc_macro2::Span;
use rankwise_core::verify::Diagnostic;

use crate::eval::{Analysis, Ratio, Site};

/// Call sites in messages as "line N": the error already points into this file.
fn local(message: &str, sites: &[Site]) -> String {
    let mut m = message.to_string();
    for s in sites {
        m = m.replace(&s.site.to_string(), &format!("line {}", s.site.line));
    }
    m
}

/// `k · E` as the user would write it: `CHUNK`, `4*CHUNK`, `CHUNK/2`, `3*CHUNK/2`.
pub(crate) fn coefficient(k: Ratio, e: &str) -> String {
    match (k.num, k.den) {
        (1, 1) => e.to_string(),
        (n, 1) => format!("{n}*{e}"),
        (1, d) => format!("{e}/{d}"),
        (n, d) => format!("{n}*{e}/{d}"),
    }
}

/// A placeholder dimension (see `Analysis::placeholder`), or one the verifier derived from it
/// (an all_gather output, a reduce_scatter part), shown as what the user would write.
fn decode(v: usize, world: usize, shared: &Analysis) -> Option<String> {
    let text = |sym: u32| {
        let e = &shared.symbols[sym as usize];
        quote::quote!(#e).to_string()
    };
    if let Some(p) = shared.placeholders.get(&v) {
        return Some(coefficient(p.coefficient, &text(p.symbol)));
    }
    for b in shared.bases.iter().filter(|b| b.world == world) {
        let (base, sym) = (b.value, b.symbol);
        for den in 1..=64usize {
            if v.checked_mul(den).is_some_and(|x| x % base == 0) {
                let num = v * den / base;
                let k = Ratio {
                    num: num as i128,
                    den: den as i128,
                };
                return Some(coefficient(k, &text(sym)));
            }
        }
    }
    None
}

/// Placeholder numbers in a message replaced by the constants they stand for.
fn symbolic(message: &str, world: usize, shared: &Analysis) -> String {
    if shared.bases.is_empty() {
        return message.to_string();
    }
    let mut out = String::with_capacity(message.len());
    let mut digits = String::new();
    let flush = |digits: &mut String, out: &mut String| {
        let shown = digits
            .parse::<usize>()
            .ok()
            .filter(|v| *v >= 1000)
            .and_then(|v| decode(v, world, shared));
        out.push_str(shown.as_deref().unwrap_or(digits));
        digits.clear();
    };
    for c in message.chars() {
        if c.is_ascii_digit() {
            digits.push(c);
        } else {
            flush(&mut digits, &mut out);
            out.push(c);
        }
    }
    flush(&mut digits, &mut out);
    out
}

/// Renders `diags` (from every checked world size) into one combined error, or `None`.
pub(crate) fn render(
    diags: &[Diagnostic],
    shared: &Analysis,
    fallback: Span,
) -> Option<syn::Error> {
    let sites = &shared.sites[..];
    let span_of = |id: u32| sites.get(id as usize).map_or(fallback, |s| s.span);
    let mut shown: Vec<(&Diagnostic, Vec<usize>)> = Vec::new();
    for d in diags {
        match shown
            .iter_mut()
            .find(|(s, _)| s.code == d.code && s.primary.id == d.primary.id)
        {
            Some((_, worlds)) => {
                if !worlds.contains(&d.world) {
                    worlds.push(d.world);
                }
            }
            None => shown.push((d, vec![d.world])),
        }
    }
    let mut out: Option<syn::Error> = None;
    let mut push = |e: syn::Error| match &mut out {
        Some(o) => o.combine(e),
        None => out = Some(e),
    };
    for (d, worlds) in shown {
        let also = if worlds.len() > 1 {
            let rest: Vec<String> = worlds[1..].iter().take(8).map(|w| w.to_string()).collect();
            let more = if worlds.len() > 9 { ", …" } else { "" };
            format!("; also at world = {}{more}", rest.join(", "))
        } else {
            String::new()
        };
        let mut msg = format!(
            "{}: {} (world = {}{also})",
            d.code,
            symbolic(&local(&d.message, sites), d.world, shared),
            d.world
        );
        if !d.help.is_empty() {
            msg.push_str(&format!("\n= help: {}", d.help));
        }
        // A site whose element type only rustc knows was checked with a stand-in type: say so
        // rather than let the message claim it.
        let unknown: Vec<u32> = std::iter::once(&d.primary)
            .chain(d.secondary.iter().map(|(s, _)| s))
            .map(|s| s.id.0)
            .filter(|id| {
                shared.free_dtypes.contains(id)
                    && shared.seen_dtypes.get(id).is_none_or(|d| d.len() != 1)
            })
            .collect();
        if !unknown.is_empty() {
            let lines: Vec<String> = unknown
                .iter()
                .filter_map(|&id| sites.get(id as usize).map(|s| s.site.line.to_string()))
                .collect();
            let at = match lines.split_last() {
                Some((last, [])) => format!("the call at line {last}"),
                Some((last, rest)) => format!("the calls at lines {} and {last}", rest.join(", ")),
                None => "a call".to_string(),
            };
            msg.push_str(&format!(
                "\n= note: the element type of {at} is known only to rustc; `u8` stands for it \
                 here"
            ));
        }
        push(syn::Error::new(span_of(d.primary.id.0), msg));
        // A secondary site equal to the primary adds nothing: the message already says it.
        for (s, label) in d.secondary.iter().filter(|(s, _)| s.id != d.primary.id) {
            push(syn::Error::new(
                span_of(s.id.0),
                format!("{} (related): {label}", d.code),
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use rankwise_core::CallSite;
    use rankwise_core::verify::{Code, SiteId, SiteRef, Verdict};

    use super::*;

    fn analysis_with_sites(n: usize) -> Analysis {
        let mut a = Analysis::default();
        for i in 0..n {
            a.sites.push(Site {
                span: Span::call_site(),
                site: CallSite {
                    file: "x.rs",
                    line: i as u32 + 1,
                    column: 5,
                },
                what: "send".into(),
                buffers: None,
            });
        }
        a
    }

    fn site(id: u32) -> SiteRef {
        SiteRef {
            id: SiteId(id),
            site: CallSite {
                file: "x.rs",
                line: id + 1,
                column: 5,
            },
        }
    }

    fn diag(world: usize, secondary: Vec<(SiteRef, String)>) -> Diagnostic {
        Diagnostic {
            code: Code::RW001,
            verdict: Verdict::Hang,
            world,
            ranks: vec![0, 1],
            message: "both ranks send first".into(),
            primary: site(0),
            secondary,
            help: "receive first on one side".into(),
        }
    }

    fn messages(e: syn::Error) -> Vec<String> {
        e.into_iter().map(|e| e.to_string()).collect()
    }

    #[test]
    fn one_problem_at_several_worlds_is_one_error() {
        let a = analysis_with_sites(1);
        let diags = [diag(2, vec![]), diag(4, vec![]), diag(8, vec![])];
        let e = render(&diags, &a, Span::call_site()).expect("an error");
        assert_eq!(
            messages(e),
            [
                "RW001: both ranks send first (world = 2; also at world = 4, 8)\n= help: receive \
              first on one side"
            ]
        );
    }

    #[test]
    fn secondary_sites_are_their_own_related_errors() {
        let a = analysis_with_sites(2);
        let d = diag(
            2,
            vec![
                (site(1), "the matching send".into()),
                // The primary again adds nothing.
                (site(0), "itself".into()),
            ],
        );
        let m = messages(render(&[d], &a, Span::call_site()).expect("an error"));
        assert_eq!(m.len(), 2, "{m:?}");
        assert_eq!(m[1], "RW001 (related): the matching send");
    }

    #[test]
    fn nothing_to_render_is_no_error() {
        assert!(render(&[], &analysis_with_sites(0), Span::call_site()).is_none());
    }
}

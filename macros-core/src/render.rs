//! The verifier's diagnostics as compile errors at the user's spans.
//!
//! On stable Rust a proc macro cannot attach `note:` sub-diagnostics, so each secondary site
//! becomes its own short error that says which primary error it belongs to. The same problem
//! found at several world sizes is reported once, listing the other sizes.

use proc_macro2::Span;
use rankwise_runtime::verify::Diagnostic;

use crate::eval::Site;

/// Call sites in messages as "line N": the error already points into this file.
fn local(message: &str, sites: &[Site]) -> String {
    let mut m = message.to_string();
    for s in sites {
        let start = s.span.start();
        let full = format!("{}:{}:{}", s.span.file(), start.line, start.column + 1);
        m = m.replace(&full, &format!("line {}", start.line));
    }
    m
}

/// Renders `diags` (from every checked world size) into one combined error, or `None`.
pub fn render(diags: &[Diagnostic], sites: &[Site], fallback: Span) -> Option<syn::Error> {
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
            local(&d.message, sites),
            d.world
        );
        if !d.help.is_empty() {
            msg.push_str(&format!("\n= help: {}", d.help));
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

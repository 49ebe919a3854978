//! Lowering: the user's function, unchanged, plus the verified schedule and the guard that
//! holds the run to it (see `rankwise_runtime::guard`).

use proc_macro2::TokenStream;
use quote::{format_ident, quote};
use rankwise_runtime::verify::Program;

use crate::eval::Site;

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

/// The guard table for the function and the statement that enters it.
pub fn guard(
    name: &str,
    ctx: &syn::Ident,
    sites: &[Site],
    programs: &[(usize, Program)],
) -> (TokenStream, TokenStream) {
    let table = format_ident!("__RANKWISE_SCHEDULE");
    let site_rows = sites.iter().map(|s| {
        let start = s.span.start();
        let (line, col) = (start.line as u32, start.column as u32 + 1);
        let what = &s.what;
        quote!((#line, #col, #what))
    });
    let worlds = programs.iter().map(|(w, p)| {
        let ranks = p.ranks.iter().map(|items| {
            let seq: Vec<u32> = items
                .iter()
                .flat_map(|i| i.ops().iter().map(|o| o.id.0))
                .collect();
            let runs = compress(&seq).into_iter().map(|(pattern, times)| {
                quote!(::rankwise::guard::Run { pattern: &[#(#pattern),*], times: #times })
            });
            quote!(::rankwise::guard::RankTable { runs: &[#(#runs),*] })
        });
        quote!((#w, &[#(#ranks),*]))
    });
    let def = quote! {
        static #table: ::rankwise::guard::Table = ::rankwise::guard::Table {
            function: #name,
            worlds: &[#(#worlds),*],
            sites: &[#(#site_rows),*],
        };
    };
    let enter = quote! {
        let __rankwise_guard = ::rankwise::guard::Guard::enter(&#table, #ctx.rank(), #ctx.world())?;
    };
    (def, enter)
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

//! What all evaluations of one function share: call sites, errors, and the constants from
//! outside the function with their placeholders.

use std::collections::HashMap;

use proc_macro2::Span;
use rankwise_core::verify::SiteId;
use syn::Expr;

use super::value::{Ratio, gcd};

/// A communication call site: its span and a short description, indexed by `SiteId`.
pub(crate) struct Site {
    pub span: Span,
    pub what: String,
    /// The tensors the call borrows (name, mutably?), or `None` if an argument is not a plain
    /// variable — lowering batches adjacent calls only when their buffers are known disjoint.
    pub buffers: Option<Vec<(String, bool)>>,
}

/// What all evaluations of one function share: the call sites and the errors found.
#[derive(Default)]
pub(crate) struct Analysis {
    pub sites: Vec<Site>,
    site_ids: HashMap<usize, u32>,
    errors: Vec<(Span, String)>,
    file: Option<&'static str>,
    /// Constant expressions from outside the function, by symbol id.
    pub symbols: Vec<Expr>,
    /// Placeholder dimension values standing for `k · symbol` in the verifier's shapes.
    pub placeholders: HashMap<usize, (Ratio, u32)>,
    /// The placeholder of `1 · symbol` at each world size: (world, value, symbol).
    pub bases: Vec<(usize, usize, u32)>,
    /// Divisibility the verifier could not check (a split of a symbolic dimension):
    /// (call span, coefficient, symbol, parts, what is split).
    pub assertions: Vec<(Span, Ratio, u32, usize, String)>,
    /// Work spent so far, over every world size and rank (see [`WORK_BUDGET`]).
    pub work: u64,
    /// Set when evaluation must stop (budget spent, code too deep): nothing further is run.
    halted: bool,
}

/// Units of work the macro may spend on one program, over all its world sizes and ranks: one
/// per expression evaluated, [`OP_COST`] per communication call recorded (calls are kept in
/// memory until checked). About ten seconds and a few hundred MiB at most, so that a large
/// world list is a clear error instead of an exhausted machine.
pub(crate) const WORK_BUDGET: u64 = 60_000_000;

/// Work charged per recorded communication call.
pub(super) const OP_COST: u64 = 64;

impl Analysis {
    pub(super) fn site(
        &mut self,
        key: usize,
        span: Span,
        what: impl FnOnce() -> (String, Option<Vec<(String, bool)>>),
    ) -> SiteId {
        let next = self.sites.len() as u32;
        let id = *self.site_ids.entry(key).or_insert(next);
        if id == next {
            let (what, buffers) = what();
            self.sites.push(Site {
                span,
                what,
                buffers,
            });
        }
        SiteId(id)
    }

    /// Charges `units` of work; `false` (and the evaluation halts) once the budget is spent.
    pub(super) fn spend(&mut self, units: u64) -> bool {
        self.work = self.work.saturating_add(units);
        if self.work > WORK_BUDGET {
            self.halted = true;
            return false;
        }
        true
    }

    /// Stops every further evaluation of this program.
    pub(super) fn halt(&mut self) {
        self.halted = true;
    }

    /// Whether evaluation has stopped.
    pub(crate) fn halted(&self) -> bool {
        self.halted
    }

    /// Whether the work budget ran out.
    pub(crate) fn over_budget(&self) -> bool {
        self.work > WORK_BUDGET
    }

    pub(crate) fn error(&mut self, span: Span, msg: String) {
        let start = span.start();
        if !self
            .errors
            .iter()
            .any(|(s, m)| s.start() == start && *m == msg)
        {
            self.errors.push((span, msg));
        }
    }

    /// The errors found so far (RW011, RW012), in source order.
    pub(crate) fn take_errors(&mut self) -> Vec<(Span, String)> {
        let mut e = std::mem::take(&mut self.errors);
        e.sort_by_key(|(s, _)| (s.start().line, s.start().column));
        e
    }

    pub(super) fn symbol(&mut self, e: &Expr) -> u32 {
        let text = quote::quote!(#e).to_string();
        match self
            .symbols
            .iter()
            .position(|s| quote::quote!(#s).to_string() == text)
        {
            Some(i) => i as u32,
            None => {
                self.symbols.push(e.clone());
                self.symbols.len() as u32 - 1
            }
        }
    }

    /// The value standing for `k · symbol` at world size `world`: a multiple of every group size
    /// up to 16 and of the world size (so the verifier's divisibility checks pass and rustc does
    /// the real one), times a distinct prime per symbol (so different constants never look equal).
    pub(super) fn placeholder(&mut self, k: Ratio, sym: u32, world: usize) -> Option<usize> {
        const PRIMES: [u64; 8] = [1009, 1013, 1019, 1021, 1031, 1033, 1039, 1049];
        let lcm = |a: u64, b: u64| a / gcd(a, b) * b;
        let m = lcm(720_720, world as u64);
        let base = m.checked_mul(*PRIMES.get(sym as usize)?)?;
        let (num, den) = (u64::try_from(k.num).ok()?, u64::try_from(k.den).ok()?);
        if base % den != 0 {
            return None;
        }
        let v = usize::try_from((base / den).checked_mul(num)?).ok()?;
        let base = usize::try_from(base).ok()?;
        if !self.bases.contains(&(world, base, sym)) {
            self.bases.push((world, base, sym));
        }
        self.placeholders.insert(v, (k, sym));
        Some(v)
    }

    pub(super) fn file(&mut self, span: Span) -> &'static str {
        // Leaked once per macro invocation: call sites need a `&'static str`.
        self.file
            .get_or_insert_with(|| Box::leak(span.file().into_boxed_str()))
    }
}

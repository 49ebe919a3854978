//! What all evaluations of one function share: call sites, errors, and the constants from
//! outside the function with their placeholders.

use std::collections::HashMap;

use proc_macro2::Span;
use rankwise_core::verify::SiteId;
use rankwise_core::{CallSite, DType};
use syn::Expr;

use super::value::{Ratio, gcd};

/// The line and 1-based column of a call whose method name has `span`: with the file, the
/// call's [`CallSite`] — the one notion of a call site, shared with the runtime. The guard
/// compares `Location::caller()` of each call made at run time with the sites recorded here,
/// and lowering finds the sites of the statements it rewrites the same way. (Two calls at one
/// location — tokens repeated by a `macro_rules!` — are one site for the guard as well.)
pub(crate) fn location(span: Span) -> (u32, u32) {
    let start = span.start();
    (start.line as u32, start.column as u32 + 1)
}

/// A tensor a call borrows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Borrow {
    /// The variable.
    pub name: String,
    /// Whether the borrow is `&mut`.
    pub mutable: bool,
}

impl Borrow {
    /// Whether this borrow and `other` may coexist (they name different tensors, or both read).
    pub(crate) fn compatible(&self, other: &Borrow) -> bool {
        self.name != other.name || (!self.mutable && !other.mutable)
    }
}

/// A communication call site: its span and a short description, indexed by `SiteId`.
pub(crate) struct Site {
    pub span: Span,
    /// Where it is, as the runtime names it.
    pub site: CallSite,
    pub what: String,
    /// The tensors the call borrows, or `None` if an argument is not a plain variable —
    /// lowering batches adjacent calls only when their buffers are known disjoint.
    pub buffers: Option<Vec<Borrow>>,
}

/// A stand-in value for `coefficient · symbol` in the verifier's shapes, where `symbol` is a
/// constant from outside the function.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Placeholder {
    pub coefficient: Ratio,
    pub symbol: u32,
}

/// The value standing for `1 · symbol` at one world size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Base {
    pub world: usize,
    pub value: usize,
    pub symbol: u32,
}

/// Divisibility the verifier could not check (a split of a symbolic dimension), left to rustc
/// as a `const` assertion.
#[derive(Clone, Debug)]
pub(crate) struct Assertion {
    /// The call that splits.
    pub span: Span,
    /// The split dimension is `coefficient · symbol`…
    pub coefficient: Ratio,
    pub symbol: u32,
    /// …and must divide into this many parts.
    pub parts: usize,
    /// What is split, in words.
    pub what: String,
}

/// What all evaluations of one function share: the call sites and the errors found.
#[derive(Default)]
pub(crate) struct Analysis {
    pub sites: Vec<Site>,
    site_ids: HashMap<CallSite, u32>,
    errors: Vec<(Span, String)>,
    file: Option<&'static str>,
    /// Constant expressions from outside the function, by symbol id.
    pub symbols: Vec<Expr>,
    /// Placeholder dimension values, by value.
    pub placeholders: HashMap<usize, Placeholder>,
    /// The placeholder of `1 · symbol` at each world size.
    pub bases: Vec<Base>,
    /// Splits of symbolic dimensions, for rustc to check.
    pub assertions: Vec<Assertion>,
    /// Call sites whose tensor's element type the macro could not follow on some rank, by
    /// site id: a type variable rustc resolves (see `lower::dtype_checks`).
    pub free_dtypes: std::collections::BTreeSet<u32>,
    /// The argument that carries each free site's element type: its position, and whether the
    /// call takes it as `&mut`.
    pub free_args: HashMap<u32, (usize, bool)>,
    /// The element types the macro did see at each call site (rustc gives a site one type, so
    /// at a free site these are it), and the sites whose reduce op needs an integer type.
    pub seen_dtypes: std::collections::BTreeMap<u32, std::collections::BTreeSet<DType>>,
    pub integer_sites: std::collections::BTreeSet<u32>,
    /// Work spent so far, over every world size and rank (see [`WORK_BUDGET`]).
    pub work: u64,
    /// Set when evaluation must stop (budget spent, code too deep): nothing further is run.
    halted: bool,
    /// Functions the evaluator may call: defined in the program's body, or beside it in a
    /// module under `#[rankwise::program]` (see `expand_module`).
    pub helpers: HashMap<String, std::rc::Rc<syn::ItemFn>>,
    /// The methods the traits the macro can see define or implement (in the function, or in
    /// the module under `#[rankwise::program]`): a call of one of these names may be the
    /// trait's, which the macro does not follow, rather than the standard method it models.
    pub trait_methods: std::collections::HashSet<String>,
}

/// Units of work the macro may spend on one program, over all its world sizes and ranks: one
/// per expression evaluated, [`OP_COST`] per communication call recorded (calls are kept in
/// memory until checked). About ten seconds and a few hundred MiB at most, so that a large
/// world list is a clear error instead of an exhausted machine.
pub(crate) const WORK_BUDGET: u64 = 60_000_000;

/// Work charged per recorded communication call.
pub(super) const OP_COST: u64 = 64;

impl Analysis {
    /// The id of the call site at `span` (the method name), registered on first sight with
    /// the description `what` makes.
    pub(super) fn site(
        &mut self,
        span: Span,
        what: impl FnOnce() -> (String, Option<Vec<Borrow>>),
    ) -> SiteId {
        let site = self.call_site(span);
        let next = self.sites.len() as u32;
        let id = *self.site_ids.entry(site).or_insert(next);
        if id == next {
            let (what, buffers) = what();
            self.sites.push(Site {
                span,
                site,
                what,
                buffers,
            });
        }
        SiteId(id)
    }

    /// Records a split of a symbolic dimension for rustc to check (once per distinct check).
    pub(super) fn assert_divisible(&mut self, a: Assertion) {
        let known = self.assertions.iter().any(|b| {
            (b.coefficient, b.symbol, b.parts, &b.what)
                == (a.coefficient, a.symbol, a.parts, &a.what)
        });
        if !known {
            self.assertions.push(a);
        }
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

    /// How many errors were found so far.
    pub(super) fn error_count(&self) -> usize {
        self.errors.len()
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
        let b = Base {
            world,
            value: base,
            symbol: sym,
        };
        if !self.bases.contains(&b) {
            self.bases.push(b);
        }
        self.placeholders.insert(
            v,
            Placeholder {
                coefficient: k,
                symbol: sym,
            },
        );
        Some(v)
    }

    /// The call site of the call whose method name has `span`.
    pub(super) fn call_site(&mut self, span: Span) -> CallSite {
        let (line, column) = location(span);
        CallSite {
            file: self.file(span),
            line,
            column,
        }
    }

    fn file(&mut self, span: Span) -> &'static str {
        // Leaked once per macro invocation: call sites need a `&'static str`.
        self.file
            .get_or_insert_with(|| Box::leak(span.file().into_boxed_str()))
    }
}

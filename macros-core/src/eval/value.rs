//! The values the evaluator tracks, and the arithmetic, casts and pattern matching on them.

use rankwise_core::DType;
use rankwise_core::ReduceOp;
use rankwise_core::model::GroupId;
use syn::{BinOp, Expr, Lit, Pat, UnOp};

#[derive(Clone, Debug, PartialEq)]
pub(super) struct GroupVal {
    pub(super) id: GroupId,
    pub(super) members: Vec<usize>,
}

#[derive(Clone, Debug)]
pub(super) struct TVal {
    pub(super) dtype: Option<DType>,
    pub(super) shape: Option<Vec<usize>>,
    /// `dtype` is rustc's default for an unsuffixed literal (`1.0` → f64, `1` → i32): another
    /// type the same variable or expression gets elsewhere (an annotation, another branch, an
    /// assignment) wins, as in rustc's inference.
    pub(super) weak: bool,
}

impl TVal {
    /// A tensor whose element type is known to be `d` (and nothing else).
    pub(super) fn of(d: DType) -> TVal {
        TVal {
            dtype: Some(d),
            shape: None,
            weak: false,
        }
    }

    /// Whether a type from elsewhere should decide this tensor's element type.
    pub(super) fn open(&self) -> bool {
        self.dtype.is_none() || self.weak
    }
}

#[derive(Clone, Debug)]
pub(super) enum Val {
    Int(i128),
    Bool(bool),
    /// A number whose value is not known statically, with its type if known.
    Scalar(Option<DType>),
    /// `k ·` a constant defined outside the function (`Analysis::symbols[sym]`): usable in shapes,
    /// with checks that depend on its value left to rustc as `const` assertions.
    Sym {
        k: Ratio,
        sym: u32,
    },
    Tensor(TVal),
    Array(Vec<Val>),
    /// Data of unknown content whose element type is known: a `Vec<f32>` or `[f32; N]` by its
    /// annotation, `collect::<Vec<f32>>()` — what `ctx.tensor(shape, data)` takes its dtype from.
    Data(DType),
    Range {
        start: i128,
        end: i128,
        step: i128,
        rev: bool,
    },
    Group(GroupVal),
    Op(ReduceOp),
    Opt(Option<Box<Val>>),
    Tuple(Vec<Val>),
    /// Follows from an error already reported (an invalid group): anything computed from it
    /// is skipped silently, so one mistake gives one error.
    Poison,
    Ctx,
    Comm(GroupVal),
    Batch(usize),
    BatchComm(usize, GroupVal),
    /// A posted `isend`/`irecv`: the index of its post among this rank's items.
    Request(usize),
    /// A closure that does not communicate, with the variables it may assign when called and
    /// its code (a closure that assigns nothing is evaluated when called).
    Closure(Vec<String>, Box<syn::ExprClosure>),
    Unit,
    Unknown,
}

/// How evaluating a piece of code ended.
pub(super) enum Flow {
    Normal(Val),
    /// `return`, or the evaluation stopped (an error that ends it was reported).
    Return,
    /// `break` with its label, if any, and value.
    Break(Option<String>, Val),
    /// `continue` with its label, if any.
    Continue(Option<String>),
}

pub(super) fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 { a } else { gcd(b, a % b) }
}

/// An exact non-negative fraction `num / den` (den > 0, in lowest terms): the coefficient of a
/// constant in a dimension like `CHUNK * 4 / world`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Ratio {
    pub num: i128,
    pub den: i128,
}

impl Ratio {
    pub(super) const ONE: Ratio = Ratio { num: 1, den: 1 };

    pub(super) fn new(num: i128, den: i128) -> Ratio {
        let g = gcd(num.unsigned_abs() as u64, den.unsigned_abs() as u64).max(1) as i128;
        Ratio {
            num: num / g,
            den: den / g,
        }
    }

    pub(super) fn mul(self, o: Ratio) -> Option<Ratio> {
        Some(Ratio::new(
            self.num.checked_mul(o.num)?,
            self.den.checked_mul(o.den)?,
        ))
    }

    pub(super) fn add(self, o: Ratio) -> Option<Ratio> {
        let num = self
            .num
            .checked_mul(o.den)?
            .checked_add(o.num.checked_mul(self.den)?)?;
        Some(Ratio::new(num, self.den.checked_mul(o.den)?))
    }
}

pub(super) fn ident_of(e: &Expr) -> Option<String> {
    match e {
        Expr::Path(p) if p.path.segments.len() == 1 && p.qself.is_none() => {
            Some(p.path.segments[0].ident.to_string())
        }
        Expr::Reference(r) => ident_of(&r.expr),
        Expr::Paren(p) => ident_of(&p.expr),
        Expr::Unary(u) if matches!(u.op, UnOp::Deref(_)) => ident_of(&u.expr),
        _ => None,
    }
}

pub(super) fn dtype_named(name: &str) -> Option<DType> {
    DType::ALL.into_iter().find(|d| d.name() == name)
}

/// The element type named by a type like `f32`, `Tensor<f32>` or `rankwise::Tensor<bf16>`.
pub(super) fn dtype_of_type(ty: &syn::Type) -> Option<DType> {
    match ty {
        syn::Type::Path(p) => {
            let last = p.path.segments.last()?;
            if let Some(d) = dtype_named(&last.ident.to_string()) {
                return Some(d);
            }
            if let syn::PathArguments::AngleBracketed(a) = &last.arguments {
                for arg in &a.args {
                    if let syn::GenericArgument::Type(t) = arg {
                        return dtype_of_type(t);
                    }
                }
            }
            None
        }
        syn::Type::Reference(r) => dtype_of_type(&r.elem),
        syn::Type::Paren(p) => dtype_of_type(&p.elem),
        syn::Type::Array(a) => dtype_of_type(&a.elem),
        syn::Type::Slice(s) => dtype_of_type(&s.elem),
        _ => None,
    }
}

/// What a type annotation names, for the element types it gives.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum TypeKind {
    /// `Tensor<T>` (or a reference to one).
    Tensor,
    /// `Vec<T>`, `[T; N]`, `[T]`, `&[T]`: data a tensor can be made from.
    Data,
    Other,
}

pub(super) fn type_kind(ty: &syn::Type) -> TypeKind {
    match ty {
        syn::Type::Path(p) => match p.path.segments.last().map(|s| s.ident.to_string()) {
            Some(n) if n == "Tensor" => TypeKind::Tensor,
            Some(n) if n == "Vec" => TypeKind::Data,
            _ => TypeKind::Other,
        },
        syn::Type::Array(_) | syn::Type::Slice(_) => TypeKind::Data,
        syn::Type::Reference(r) => type_kind(&r.elem),
        syn::Type::Paren(p) => type_kind(&p.elem),
        _ => TypeKind::Other,
    }
}

/// The first turbofish type in a path like `Tensor::<f32>::zeros` or `ctx.zeros::<f32>`.
pub(super) fn turbofish(args: Option<&syn::AngleBracketedGenericArguments>) -> Option<DType> {
    args?.args.iter().find_map(|a| match a {
        syn::GenericArgument::Type(t) => dtype_of_type(t),
        _ => None,
    })
}

/// Whether an expression is built from literals and constant names only.
pub(super) fn only_constants(e: &Expr) -> bool {
    quote::quote!(#e).into_iter().all(|t| match t {
        proc_macro2::TokenTree::Ident(i) => is_const_name(&i.to_string()),
        proc_macro2::TokenTree::Group(g) => syn::parse2::<Expr>(g.stream())
            .map(|e| only_constants(&e))
            .unwrap_or(false),
        _ => true,
    })
}

/// Whether a name is spelled like a constant (`CHUNK`, `N_LAYERS`).
pub(super) fn is_const_name(name: &str) -> bool {
    name.chars().any(|c| c.is_ascii_uppercase())
        && name
            .chars()
            .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
}

/// The element type an expression's syntax gives it: a literal suffix (`1i64`) or a cast
/// (`rank as f32`), looking through parentheses, unary and binary operators.
/// Whether `e` is a literal without a type suffix (or a list of them): its type is whatever
/// rustc infers from other uses, `f64`/`i32` only by default.
pub(super) fn unsuffixed_literal(e: &Expr) -> bool {
    match e {
        Expr::Lit(l) => match &l.lit {
            Lit::Int(i) => i.suffix().is_empty(),
            Lit::Float(f) => f.suffix().is_empty(),
            _ => false,
        },
        Expr::Unary(u) => unsuffixed_literal(&u.expr),
        Expr::Paren(p) => unsuffixed_literal(&p.expr),
        Expr::Array(a) => !a.elems.is_empty() && a.elems.iter().all(unsuffixed_literal),
        Expr::Repeat(r) => unsuffixed_literal(&r.expr),
        Expr::Macro(m) if m.mac.path.is_ident("vec") => {
            let tokens = &m.mac.tokens;
            syn::parse2::<Expr>(quote::quote!([#tokens])).is_ok_and(|e| unsuffixed_literal(&e))
        }
        _ => false,
    }
}

/// The element type a tensor-valued expression has by its own syntax, as an arm of an `if` or
/// `match` the macro did not take: a constructor with a turbofish or a typed value
/// (`ctx.zeros::<f32>(…)?`, `ctx.full(s, 0.0f32)?`), looking through `?`, blocks and parens.
pub(super) fn syntactic_tensor_dtype(e: &Expr) -> Option<DType> {
    match e {
        Expr::Try(t) => syntactic_tensor_dtype(&t.expr),
        Expr::Paren(p) => syntactic_tensor_dtype(&p.expr),
        Expr::Block(b) => match b.block.stmts.last() {
            Some(syn::Stmt::Expr(e, None)) => syntactic_tensor_dtype(e),
            _ => None,
        },
        Expr::MethodCall(m) => match m.method.to_string().as_str() {
            "zeros" | "full" | "tensor" => turbofish(m.turbofish.as_ref())
                .or_else(|| m.args.iter().nth(1).and_then(syntactic_dtype)),
            "unwrap" | "expect" | "clone" => syntactic_tensor_dtype(&m.receiver),
            _ => None,
        },
        Expr::Call(c) => match &*c.func {
            Expr::Path(p) => {
                let segs = &p.path.segments;
                let n = segs.len();
                if n < 2 || segs[n - 2].ident != "Tensor" {
                    return None;
                }
                segs.iter()
                    .find_map(|s| match &s.arguments {
                        syn::PathArguments::AngleBracketed(a) => turbofish(Some(a)),
                        _ => None,
                    })
                    .or_else(|| c.args.iter().nth(1).and_then(syntactic_dtype))
            }
            _ => None,
        },
        _ => None,
    }
}

pub(super) fn syntactic_dtype(e: &Expr) -> Option<DType> {
    match e {
        Expr::Lit(l) => match &l.lit {
            Lit::Int(i) => dtype_named(i.suffix()),
            Lit::Float(f) => dtype_named(f.suffix()),
            _ => None,
        },
        Expr::Cast(c) => dtype_of_type(&c.ty),
        Expr::Paren(p) => syntactic_dtype(&p.expr),
        Expr::Unary(u) => syntactic_dtype(&u.expr),
        Expr::Binary(b) => syntactic_dtype(&b.left).or_else(|| syntactic_dtype(&b.right)),
        // `Tensor::from_fn(shape, |i| … as f32)`: the element type is what the closure returns.
        Expr::Closure(c) => syntactic_dtype(&c.body),
        // An `if` or `match` has one type: any arm's says it.
        Expr::If(i) => match i.then_branch.stmts.last() {
            Some(syn::Stmt::Expr(e, None)) => syntactic_dtype(e),
            _ => None,
        }
        .or_else(|| i.else_branch.as_ref().and_then(|(_, e)| syntactic_dtype(e))),
        Expr::Match(m) => m.arms.iter().find_map(|a| syntactic_dtype(&a.body)),
        Expr::Array(a) => a.elems.iter().find_map(syntactic_dtype),
        Expr::Repeat(r) => syntactic_dtype(&r.expr),
        // `vec![a, b]` and `vec![x; n]` read as the array expressions they expand from.
        Expr::Macro(m) if m.mac.path.is_ident("vec") => {
            let tokens = &m.mac.tokens;
            syntactic_dtype(&syn::parse2::<Expr>(quote::quote!([#tokens])).ok()?)
        }
        Expr::Block(b) => match b.block.stmts.last() {
            Some(syn::Stmt::Expr(e, None)) => syntactic_dtype(e),
            _ => None,
        },
        _ => None,
    }
}

pub(super) fn lit(l: &Lit) -> Val {
    match l {
        Lit::Int(i) => {
            let d = dtype_named(i.suffix());
            match i.base10_parse::<i128>() {
                Ok(v) if d.is_none() || d.is_some_and(|d| !d.is_float()) => Val::Int(v),
                _ => Val::Scalar(d),
            }
        }
        Lit::Float(f) => Val::Scalar(Some(dtype_named(f.suffix()).unwrap_or(DType::F64))),
        Lit::Bool(b) => Val::Bool(b.value),
        _ => Val::Unknown,
    }
}

pub(super) fn cast(v: Val, ty: &syn::Type) -> Val {
    let target = dtype_of_type(ty);
    if let (Val::Sym { .. }, Some(d)) = (&v, target)
        && d.is_float()
    {
        return Val::Scalar(Some(d));
    }
    let int_target = match ty {
        syn::Type::Path(p) => p.path.get_ident().is_some_and(|i| {
            matches!(
                i.to_string().as_str(),
                "usize"
                    | "isize"
                    | "u8"
                    | "u16"
                    | "u32"
                    | "u64"
                    | "i8"
                    | "i16"
                    | "i32"
                    | "i64"
                    | "u128"
                    | "i128"
            )
        }),
        _ => false,
    };
    match (v, target) {
        (Val::Int(i), _) if int_target => Val::Int(i),
        (Val::Sym { k, sym }, _) if int_target || target.is_some_and(|d| !d.is_float()) => {
            Val::Sym { k, sym }
        }
        (_, Some(d)) => Val::Scalar(Some(d)),
        _ => Val::Unknown,
    }
}

pub(super) fn binop(op: &BinOp, l: Val, r: Val) -> Val {
    match (l, r) {
        (Val::Poison, _) | (_, Val::Poison) => Val::Poison,
        (Val::Sym { k, sym }, Val::Int(n)) | (Val::Int(n), Val::Sym { k, sym })
            if matches!(op, BinOp::Mul(_)) && n >= 0 =>
        {
            k.mul(Ratio::new(n, 1))
                .map_or(Val::Unknown, |k| Val::Sym { k, sym })
        }
        (Val::Sym { k, sym }, Val::Int(n)) if matches!(op, BinOp::Div(_)) && n > 0 => k
            .mul(Ratio::new(1, n))
            .map_or(Val::Unknown, |k| Val::Sym { k, sym }),
        (Val::Sym { k: a, sym: s }, Val::Sym { k: b, sym: t })
            if s == t && matches!(op, BinOp::Add(_)) =>
        {
            a.add(b).map_or(Val::Unknown, |k| Val::Sym { k, sym: s })
        }
        (Val::Int(a), Val::Int(b)) => {
            let v = match op {
                BinOp::Add(_) => a.checked_add(b).map(Val::Int),
                BinOp::Sub(_) => a.checked_sub(b).map(Val::Int),
                BinOp::Mul(_) => a.checked_mul(b).map(Val::Int),
                BinOp::Div(_) => a.checked_div(b).map(Val::Int),
                BinOp::Rem(_) => a.checked_rem(b).map(Val::Int),
                BinOp::Shl(_) => (0..64).contains(&b).then(|| Val::Int(a << b)),
                BinOp::Shr(_) => (0..128).contains(&b).then(|| Val::Int(a >> b)),
                BinOp::BitAnd(_) => Some(Val::Int(a & b)),
                BinOp::BitOr(_) => Some(Val::Int(a | b)),
                BinOp::BitXor(_) => Some(Val::Int(a ^ b)),
                BinOp::Eq(_) => Some(Val::Bool(a == b)),
                BinOp::Ne(_) => Some(Val::Bool(a != b)),
                BinOp::Lt(_) => Some(Val::Bool(a < b)),
                BinOp::Le(_) => Some(Val::Bool(a <= b)),
                BinOp::Gt(_) => Some(Val::Bool(a > b)),
                BinOp::Ge(_) => Some(Val::Bool(a >= b)),
                _ => None,
            };
            v.unwrap_or(Val::Unknown)
        }
        (Val::Bool(a), Val::Bool(b)) => match op {
            BinOp::And(_) | BinOp::BitAnd(_) => Val::Bool(a && b),
            BinOp::Or(_) | BinOp::BitOr(_) => Val::Bool(a || b),
            BinOp::BitXor(_) | BinOp::Ne(_) => Val::Bool(a != b),
            BinOp::Eq(_) => Val::Bool(a == b),
            _ => Val::Unknown,
        },
        (Val::Scalar(d), _) | (_, Val::Scalar(d)) if !is_comparison(op) => Val::Scalar(d),
        _ => Val::Unknown,
    }
}

pub(super) fn is_comparison(op: &BinOp) -> bool {
    matches!(
        op,
        BinOp::Eq(_)
            | BinOp::Ne(_)
            | BinOp::Lt(_)
            | BinOp::Le(_)
            | BinOp::Gt(_)
            | BinOp::Ge(_)
            | BinOp::And(_)
            | BinOp::Or(_)
    )
}

pub(super) fn int_method(a: i128, name: &str, args: &[Val]) -> Val {
    let b = match args.first() {
        Some(Val::Int(b)) => Some(*b),
        _ => None,
    };
    let v = match (name, b) {
        ("min", Some(b)) => Some(a.min(b)),
        ("max", Some(b)) => Some(a.max(b)),
        ("pow", Some(b)) if (0..64).contains(&b) => a.checked_pow(b as u32),
        ("abs", _) => a.checked_abs(),
        ("rem_euclid", Some(b)) => a.checked_rem_euclid(b),
        ("saturating_sub", Some(b)) => a.checked_sub(b).map(|v| v.max(0)),
        ("wrapping_sub", Some(b)) => a.checked_sub(b),
        ("wrapping_add" | "saturating_add", Some(b)) => a.checked_add(b),
        ("next_power_of_two", _) if a >= 0 => {
            (a as u128).checked_next_power_of_two().map(|v| v as i128)
        }
        ("trailing_zeros", _) if a > 0 => Some(a.trailing_zeros() as i128),
        ("ilog2", _) if a > 0 => Some(a.ilog2() as i128),
        ("div_ceil", Some(b)) if b > 0 && a >= 0 => a.checked_add(b - 1).map(|v| v / b),
        ("is_power_of_two", _) => return Val::Bool(a > 0 && (a & (a - 1)) == 0),
        ("clone", _) => Some(a),
        _ => None,
    };
    v.map(Val::Int).unwrap_or(Val::Unknown)
}

pub(super) fn ints(v: &Val) -> Option<Vec<usize>> {
    match v {
        Val::Array(a) => a
            .iter()
            .map(|x| match x {
                Val::Int(i) if *i >= 0 => Some(*i as usize),
                _ => None,
            })
            .collect(),
        Val::Range {
            start,
            end,
            step,
            rev: false,
        } if *start >= 0
            && *step > 0
            && usize::try_from(*step).is_ok()
            && end.saturating_sub(*start) / *step <= 1 << 16 =>
        {
            Some(
                (*start..*end)
                    .step_by(*step as usize)
                    .map(|x| x as usize)
                    .collect(),
            )
        }
        _ => None,
    }
}

pub(super) fn shape_of(v: &Val) -> Option<Vec<usize>> {
    match v {
        Val::Int(n) if *n >= 0 => Some(vec![*n as usize]),
        other => ints(other),
    }
}

/// Whether `pat` matches the static value `v`; the bindings it makes if so.
pub(super) fn pat_matches(pat: &Pat, v: &Val) -> Option<Vec<(String, Val)>> {
    match (pat, v) {
        (Pat::Wild(_), _) => Some(Vec::new()),
        (Pat::Ident(i), _) if i.subpat.is_none() => Some(vec![(i.ident.to_string(), v.clone())]),
        (Pat::Lit(l), _) => match (lit(&l.lit), v) {
            (Val::Int(a), Val::Int(b)) if a == *b => Some(Vec::new()),
            (Val::Bool(a), Val::Bool(b)) if a == *b => Some(Vec::new()),
            _ => None,
        },
        (Pat::Range(r), Val::Int(x)) => {
            let bound = |e: &Option<Box<Expr>>| match e.as_deref() {
                Some(Expr::Lit(l)) => match lit(&l.lit) {
                    Val::Int(i) => Some(Some(i)),
                    _ => None,
                },
                None => Some(None),
                _ => None,
            };
            let lo = bound(&r.start)?;
            let hi = bound(&r.end)?;
            let closed = matches!(r.limits, syn::RangeLimits::Closed(_));
            let ok = lo.is_none_or(|lo| *x >= lo)
                && hi.is_none_or(|hi| if closed { *x <= hi } else { *x < hi });
            ok.then(Vec::new)
        }
        (Pat::Or(o), _) => o.cases.iter().find_map(|c| pat_matches(c, v)),
        (Pat::Paren(p), _) => pat_matches(&p.pat, v),
        _ => None,
    }
}

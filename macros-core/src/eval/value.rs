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

/// The type of an integer the evaluator tracks, as far as the program's syntax tells.
///
/// The macro evaluates integers exactly (in `i128`), but the program computes in its own types,
/// where a result out of range panics (debug builds) or wraps (release builds), and where
/// `wrapping_*`, `saturating_*`, `!` and `as` depend on the width. A value the macro keeps is
/// the value every build of the program computes; any result that could differ — out of the
/// type's range, or depending on a width the macro cannot see — is unknown, so a call it
/// reaches is refused (RW012) rather than checked against a value the program may not have.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum IntTy {
    /// `iN` or `uN`.
    Fixed { signed: bool, bits: u32 },
    /// `isize` or `usize`: 32 or 64 bits by a target the macro does not see, so only what both
    /// widths agree on is known.
    Size { signed: bool },
    /// No type in sight (an unsuffixed literal, arithmetic on them): rustc infers it from uses
    /// the macro does not follow, `i32` if nothing decides. Its values are kept within `i32`'s
    /// range, and a negative one only where an operand already was (so the type is signed).
    Open,
}

impl IntTy {
    /// `usize`: ranks, world sizes, lengths and shapes.
    pub(super) const USIZE: IntTy = IntTy::Size { signed: false };
    /// `u32`: what `trailing_zeros` and `ilog2` return.
    const U32: IntTy = IntTy::Fixed {
        signed: false,
        bits: 32,
    };

    /// The integer type called `name` (`usize`, `i64`, …).
    pub(super) fn named(name: &str) -> Option<IntTy> {
        let (signed, rest) = match name.split_at_checked(1)? {
            ("i", rest) => (true, rest),
            ("u", rest) => (false, rest),
            _ => return None,
        };
        match rest {
            "size" => Some(IntTy::Size { signed }),
            "8" | "16" | "32" | "64" | "128" => Some(IntTy::Fixed {
                signed,
                bits: rest.parse().ok()?,
            }),
            _ => None,
        }
    }

    /// The integer type a type names (`usize`, not `Vec<usize>`).
    pub(super) fn of_type(ty: &syn::Type) -> Option<IntTy> {
        match ty {
            syn::Type::Path(p) if p.qself.is_none() => {
                IntTy::named(&p.path.get_ident()?.to_string())
            }
            syn::Type::Paren(p) => IntTy::of_type(&p.elem),
            _ => None,
        }
    }

    /// The smallest and largest value the type holds on every target.
    fn bounds(self) -> (i128, i128) {
        let (signed, bits) = match self {
            IntTy::Fixed { signed, bits } => (signed, bits),
            IntTy::Size { signed } => (signed, 32),
            IntTy::Open => (true, 32),
        };
        match (signed, bits) {
            (true, 128) => (i128::MIN, i128::MAX),
            (false, 128) => (0, i128::MAX),
            (true, b) => (-(1 << (b - 1)), (1 << (b - 1)) - 1),
            (false, b) => (0, (1 << b) - 1),
        }
    }

    /// The smallest and largest value the type holds on some target (a `usize` of 64 bits).
    fn widest_bounds(self) -> (i128, i128) {
        match self {
            IntTy::Size { signed: true } => (i64::MIN.into(), i64::MAX.into()),
            IntTy::Size { signed: false } => (0, u64::MAX.into()),
            t => t.bounds(),
        }
    }

    /// `v` as a value of this type, if it is one.
    pub(super) fn exact(self, v: i128) -> Val {
        let (lo, hi) = self.bounds();
        if (lo..=hi).contains(&v) {
            Val::Int(v, self)
        } else {
            Val::Unknown
        }
    }

    /// The value of this type with `v`'s low bits, as `v as T` and `wrapping_*` give — if every
    /// target agrees on it.
    pub(super) fn wrap(self, v: i128) -> Val {
        let at = |signed: bool, bits: u32| -> Option<i128> {
            if bits >= 128 {
                return (signed || v >= 0).then_some(v);
            }
            let low = v & ((1i128 << bits) - 1);
            Some(if signed && low >= 1 << (bits - 1) {
                low - (1 << bits)
            } else {
                low
            })
        };
        let w = match self {
            IntTy::Fixed { signed, bits } => at(signed, bits),
            IntTy::Size { signed } => at(signed, 32).filter(|&w| at(signed, 64) == Some(w)),
            IntTy::Open => Some(v),
        };
        w.map_or(Val::Unknown, |w| self.exact(w))
    }

    /// The type of an operation on values of types `a` and `b`: a literal takes the other
    /// side's type; two different named types do not mix (rustc refuses them).
    pub(super) fn join(a: IntTy, b: IntTy) -> Option<IntTy> {
        match (a, b) {
            (IntTy::Open, t) | (t, IntTy::Open) => Some(t),
            (a, b) if a == b => Some(a),
            _ => None,
        }
    }

    /// The associated constant `name` (`MAX`, `MIN`, `BITS`), where every target agrees on it.
    pub(super) fn constant(self, name: &str) -> Val {
        let (lo, hi) = self.bounds();
        match (self, name) {
            // `u128::MAX` is beyond what the macro holds.
            (
                IntTy::Fixed {
                    signed: false,
                    bits: 128,
                },
                "MAX",
            ) => Val::Unknown,
            (IntTy::Fixed { .. }, "MAX") => Val::Int(hi, self),
            (IntTy::Fixed { .. } | IntTy::Size { signed: false }, "MIN") => Val::Int(lo, self),
            (IntTy::Fixed { bits, .. }, "BITS") => Val::Int(i128::from(bits), IntTy::U32),
            _ => Val::Unknown,
        }
    }

    /// The type as the program spells it, for messages.
    pub(super) fn name(self) -> String {
        let s = |signed: bool| if signed { 'i' } else { 'u' };
        match self {
            IntTy::Fixed { signed, bits } => format!("`{}{bits}`", s(signed)),
            IntTy::Size { signed } => format!("`{}size`", s(signed)),
            IntTy::Open => "its type".to_string(),
        }
    }

    /// Why `v`, a result of this type, is unknown, for messages.
    pub(super) fn out_of_range(self, v: Option<i128>) -> String {
        let (lo, _) = self.bounds();
        let name = self.name();
        match self {
            IntTy::Open => "the macro does not follow: the result is negative or beyond `i32`, \
                            and its type, which rustc infers, may not hold it"
                .to_string(),
            // Below zero no width of `usize` holds it; above `u32::MAX` only some do.
            IntTy::Fixed { .. } => {
                format!("{name} cannot hold (a debug build panics, a release build wraps)")
            }
            IntTy::Size { signed: false } if v.is_some_and(|v| v < lo) => {
                format!("{name} cannot hold (a debug build panics, a release build wraps)")
            }
            IntTy::Size { .. } => {
                format!("{name} may not hold: the macro checks for 32-bit targets too")
            }
        }
    }

    fn signed(self) -> Option<bool> {
        match self {
            IntTy::Fixed { signed, .. } | IntTy::Size { signed } => Some(signed),
            IntTy::Open => None,
        }
    }
}

/// `v` as a value of type `ty` (an annotation, a parameter's or a return type): an integer of
/// no visible type takes it, if it fits (rustc refuses a literal that does not); an integer of
/// another type, which rustc refuses, is unknown. Lists (`[usize; 4]`, `Vec<u8>`, `&[i64]`) type
/// their integers alike.
pub(super) fn typed(v: Val, ty: &syn::Type) -> Val {
    fn elem(ty: &syn::Type) -> Option<&syn::Type> {
        match ty {
            syn::Type::Array(a) => Some(&a.elem),
            syn::Type::Slice(s) => Some(&s.elem),
            syn::Type::Reference(r) => elem(&r.elem),
            syn::Type::Paren(p) => elem(&p.elem),
            syn::Type::Path(p) => {
                let last = p.path.segments.last()?;
                let syn::PathArguments::AngleBracketed(a) = &last.arguments else {
                    return None;
                };
                match (last.ident == "Vec", a.args.first()) {
                    (true, Some(syn::GenericArgument::Type(t))) => Some(t),
                    _ => None,
                }
            }
            _ => None,
        }
    }
    match v {
        Val::Int(i, t) => match IntTy::of_type(ty) {
            Some(want) if IntTy::join(t, want) == Some(want) => want.exact(i),
            Some(_) => Val::Unknown,
            None => match ty {
                syn::Type::Reference(r) => typed(Val::Int(i, t), &r.elem),
                syn::Type::Paren(p) => typed(Val::Int(i, t), &p.elem),
                _ => Val::Int(i, t),
            },
        },
        Val::Array(a) if a.iter().any(|x| matches!(x, Val::Int(..))) => match elem(ty) {
            Some(e) => Val::Array(a.into_iter().map(|x| typed(x, e)).collect()),
            None => Val::Array(a),
        },
        other => other,
    }
}

/// The result `v` of an operation on `a` and `b` of type `t`, if every build of the program
/// computes it (see [`IntTy`]): in range, and, for values of no visible type, negative only if
/// an operand was (else the type may be unsigned, and the operation underflows).
pub(super) fn int_result(t: IntTy, v: Option<i128>, a: i128, b: i128) -> Val {
    match v {
        Some(v) if t == IntTy::Open && v < 0 && a >= 0 && b >= 0 => Val::Unknown,
        Some(v) => t.exact(v),
        None => Val::Unknown,
    }
}

#[derive(Clone, Debug)]
pub(super) enum Val {
    /// An integer and its type.
    Int(i128, IntTy),
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
        /// The type of its values.
        ty: IntTy,
    },
    Group(GroupVal),
    Op(ReduceOp),
    Opt(Option<Box<Val>>),
    Tuple(Vec<Val>),
    /// A struct built in the function with every field named (`Plan { root: 0, peers }`): its
    /// fields by name, read as `plan.root`. (A method called on it, or a field written, forgets
    /// the variable holding it.)
    Record(Vec<(String, Val)>),
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
    /// its code (a closure that assigns nothing is evaluated when called), and the values of
    /// the variables it mentions when it was made.
    Closure(Vec<String>, Box<syn::ExprClosure>, Vec<(String, Val)>),
    Unit,
    Unknown,
}

impl Val {
    /// This integer if `keep` says so, else unknown.
    fn filter_int(self, keep: impl FnOnce(i128) -> bool) -> Val {
        match self {
            Val::Int(v, t) if keep(v) => Val::Int(v, t),
            _ => Val::Unknown,
        }
    }

    /// A `usize`: a rank, a world size, a length, a dimension.
    pub(super) fn usize(n: usize) -> Val {
        IntTy::USIZE.exact(n as i128)
    }
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

/// The names of a path's segments (`std::mem::swap` → `["std", "mem", "swap"]`).
pub(super) fn path_idents(p: &syn::ExprPath) -> Vec<String> {
    p.path
        .segments
        .iter()
        .map(|s| s.ident.to_string())
        .collect()
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
            let ty = if i.suffix().is_empty() {
                Some(IntTy::Open)
            } else {
                IntTy::named(i.suffix())
            };
            match (i.base10_parse::<i128>(), ty) {
                // rustc refuses a literal out of its type's range.
                (Ok(v), Some(ty)) => Val::Int(v, ty),
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
    let int_target = IntTy::of_type(ty);
    match (v, target) {
        // Between integer types, `as` keeps the low bits: the value is exact, whatever its type.
        (Val::Int(i, _), _) if int_target.is_some() => {
            int_target.map_or(Val::Unknown, |t| t.wrap(i))
        }
        (Val::Bool(b), _) if int_target.is_some() => {
            int_target.map_or(Val::Unknown, |t| Val::Int(i128::from(b), t))
        }
        (Val::Sym { k, sym }, _)
            if int_target.is_some() || target.is_some_and(|d| !d.is_float()) =>
        {
            Val::Sym { k, sym }
        }
        (_, Some(d)) => Val::Scalar(Some(d)),
        _ => Val::Unknown,
    }
}

pub(super) fn binop(op: &BinOp, l: Val, r: Val) -> Val {
    match (l, r) {
        (Val::Poison, _) | (_, Val::Poison) => Val::Poison,
        (Val::Sym { k, sym }, Val::Int(n, _)) | (Val::Int(n, _), Val::Sym { k, sym })
            if matches!(op, BinOp::Mul(_)) && n >= 0 =>
        {
            k.mul(Ratio::new(n, 1))
                .map_or(Val::Unknown, |k| Val::Sym { k, sym })
        }
        (Val::Sym { k, sym }, Val::Int(n, _)) if matches!(op, BinOp::Div(_)) && n > 0 => k
            .mul(Ratio::new(1, n))
            .map_or(Val::Unknown, |k| Val::Sym { k, sym }),
        (Val::Sym { k: a, sym: s }, Val::Sym { k: b, sym: t })
            if s == t && matches!(op, BinOp::Add(_)) =>
        {
            a.add(b).map_or(Val::Unknown, |k| Val::Sym { k, sym: s })
        }
        (Val::Int(a, ta), Val::Int(b, tb)) => int_binop(op, (a, ta), (b, tb)),
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

/// `a op b` on integers, as the program computes it (see [`IntTy`]).
pub(super) fn int_binop(op: &BinOp, (a, ta): (i128, IntTy), (b, tb): (i128, IntTy)) -> Val {
    let cmp = match op {
        BinOp::Eq(_) => Some(a == b),
        BinOp::Ne(_) => Some(a != b),
        BinOp::Lt(_) => Some(a < b),
        BinOp::Le(_) => Some(a <= b),
        BinOp::Gt(_) => Some(a > b),
        BinOp::Ge(_) => Some(a >= b),
        _ => None,
    };
    if let Some(c) = cmp {
        return Val::Bool(c);
    }
    // A shift takes any integer type on the right, and keeps the left's. Shifting by the
    // width or more panics or masks the amount; the bits shifted out are dropped.
    if matches!(op, BinOp::Shl(_) | BinOp::Shr(_)) {
        let bits = match ta {
            IntTy::Fixed { bits, .. } => bits,
            IntTy::Size { .. } | IntTy::Open => 32,
        };
        if !(0..i128::from(bits)).contains(&b) {
            return Val::Unknown;
        }
        return match op {
            BinOp::Shr(_) => ta.exact(a >> b),
            // An open type's width is unknown: only a result no type drops bits of is exact.
            _ if ta == IntTy::Open => int_result(ta, a.checked_mul(1 << b), a, b),
            _ => ta.wrap(a.wrapping_shl(b as u32)),
        };
    }
    let Some(t) = IntTy::join(ta, tb) else {
        return Val::Unknown;
    };
    let v = match op {
        BinOp::Add(_) => a.checked_add(b),
        BinOp::Sub(_) => a.checked_sub(b),
        BinOp::Mul(_) => a.checked_mul(b),
        BinOp::Div(_) => a.checked_div(b),
        // `MIN % -1` panics, as `MIN / -1` does: the quotient must fit too.
        BinOp::Rem(_) => a
            .checked_div(b)
            .filter(|q| matches!(t.exact(*q), Val::Int(..)))
            .and_then(|_| a.checked_rem(b)),
        // Two's complement bits of values of one type: the result is of that type too.
        BinOp::BitAnd(_) => Some(a & b),
        BinOp::BitOr(_) => Some(a | b),
        BinOp::BitXor(_) => Some(a ^ b),
        _ => None,
    };
    int_result(t, v, a, b)
}

/// `a op b` for an expression of unsuffixed literals alone (`1 << 40`, `4 * 1024`): exact in
/// `i128`. Its type is still rustc's to infer, but rustc evaluates such an expression itself,
/// and refuses the program (`arithmetic_overflow`, denied by default) if that type cannot hold
/// the result.
pub(super) fn constant_binop(op: &BinOp, a: i128, b: i128) -> Val {
    const WIDE: IntTy = IntTy::Fixed {
        signed: true,
        bits: 128,
    };
    match int_binop(op, (a, WIDE), (b, WIDE)) {
        Val::Int(v, _) => Val::Int(v, IntTy::Open),
        other => other,
    }
}

/// Whether `e` is made of unsuffixed integer literals and operators only.
pub(super) fn literals_only(e: &Expr) -> bool {
    match e {
        Expr::Lit(l) => matches!(&l.lit, Lit::Int(i) if i.suffix().is_empty()),
        Expr::Paren(p) => literals_only(&p.expr),
        Expr::Unary(u) => matches!(u.op, UnOp::Neg(_)) && literals_only(&u.expr),
        Expr::Binary(b) => literals_only(&b.left) && literals_only(&b.right),
        _ => false,
    }
}

/// `-a` and `!a` on an integer of type `t`.
pub(super) fn int_unary(op: &UnOp, a: i128, t: IntTy) -> Val {
    match (op, t.signed()) {
        // rustc refuses `-` on unsigned types; on an open one it makes the type signed.
        (UnOp::Neg(_), Some(true) | None) => a.checked_neg().map_or(Val::Unknown, |v| t.exact(v)),
        // `!a` is `-a - 1` in a signed type; in an unsigned one it depends on the width.
        (UnOp::Not(_), Some(true)) => t.exact(!a),
        (UnOp::Not(_), Some(false)) => match t {
            IntTy::Fixed { .. } => t.wrap(!a),
            _ => Val::Unknown,
        },
        (UnOp::Not(_), None) if a < 0 => t.exact(!a),
        _ => Val::Unknown,
    }
}

/// Whether [`int_method`] computes `name` (an unknown result of another method, such as a
/// `Result`'s `unwrap_or` on what the macro took for its value, is no arithmetic that lost it).
pub(super) fn is_int_arith(name: &str) -> bool {
    matches!(
        name,
        "min"
            | "max"
            | "clamp"
            | "abs"
            | "rem_euclid"
            | "div_euclid"
            | "abs_diff"
            | "wrapping_add"
            | "wrapping_sub"
            | "wrapping_mul"
            | "saturating_add"
            | "saturating_sub"
            | "saturating_mul"
            | "next_power_of_two"
            | "div_ceil"
            | "trailing_zeros"
            | "ilog2"
            | "is_power_of_two"
            | "pow"
    )
}

pub(super) fn int_method(a: i128, ta: IntTy, name: &str, args: &[Val]) -> Val {
    let arg = match args.first() {
        Some(Val::Int(b, tb)) => Some((*b, *tb)),
        _ => None,
    };
    // `pow` takes a `u32`; the other methods an argument of the receiver's type.
    if name == "pow" {
        return match arg {
            Some((e, _)) => match u32::try_from(e) {
                Ok(e) => int_result(ta, a.checked_pow(e), a, 0),
                Err(_) => Val::Unknown,
            },
            _ => Val::Unknown,
        };
    }
    let (b, t) = match arg {
        Some((b, tb)) => match IntTy::join(ta, tb) {
            Some(t) => (Some(b), t),
            None => return Val::Unknown,
        },
        None => (None, ta),
    };
    let exact = |v: Option<i128>| int_result(t, v, a, b.unwrap_or(0));
    match (name, b) {
        ("min", Some(b)) => exact(Some(a.min(b))),
        ("max", Some(b)) => exact(Some(a.max(b))),
        ("clamp", Some(lo)) => match args.get(1) {
            Some(Val::Int(hi, _)) if lo <= *hi => exact(Some(a.clamp(lo, *hi))),
            _ => Val::Unknown,
        },
        ("abs", _) if ta.signed() != Some(false) => exact(a.checked_abs()),
        ("rem_euclid", Some(b)) => exact(a.checked_rem_euclid(b)),
        ("div_euclid", Some(b)) => exact(a.checked_div_euclid(b)),
        ("abs_diff", Some(b)) if t.signed() == Some(false) => exact(Some((a - b).abs())),
        ("wrapping_add", Some(b)) => wrapping(t, a.checked_add(b), a.wrapping_add(b), a, b),
        ("wrapping_sub", Some(b)) => wrapping(t, a.checked_sub(b), a.wrapping_sub(b), a, b),
        ("wrapping_mul", Some(b)) => wrapping(t, a.checked_mul(b), a.wrapping_mul(b), a, b),
        ("saturating_add", Some(b)) => saturating(t, a.checked_add(b), a > 0),
        ("saturating_sub", Some(b)) => saturating(t, a.checked_sub(b), b < 0),
        ("saturating_mul", Some(b)) => saturating(t, a.checked_mul(b), (a > 0) == (b > 0)),
        // Unsigned only, in rustc; what overflows panics or gives 0.
        ("next_power_of_two", None) if a >= 0 && t.signed() != Some(true) => exact(
            (a as u128)
                .checked_next_power_of_two()
                .and_then(|v| i128::try_from(v).ok()),
        ),
        ("div_ceil", Some(b)) if b > 0 && a >= 0 => exact(Some(a / b + i128::from(a % b != 0))),
        ("trailing_zeros", None) if a != 0 => Val::Int(i128::from(a.trailing_zeros()), IntTy::U32),
        // Zero has as many as the type has bits.
        ("trailing_zeros", None) => match t {
            IntTy::Fixed { bits, .. } => Val::Int(i128::from(bits), IntTy::U32),
            _ => Val::Unknown,
        },
        ("ilog2", None) if a > 0 => Val::Int(i128::from(a.ilog2()), IntTy::U32),
        ("is_power_of_two", None) if t.signed() != Some(true) => {
            Val::Bool(a > 0 && (a & (a - 1)) == 0)
        }
        ("checked_add", Some(b)) => checked(t, a.checked_add(b)),
        ("checked_sub", Some(b)) => checked(t, a.checked_sub(b)),
        ("checked_mul", Some(b)) => checked(t, a.checked_mul(b)),
        // The type's `MIN / -1` overflows, in the remainder too; which `MIN` depends on the
        // target for `isize` and on rustc's choice for a literal.
        ("checked_div" | "checked_rem", Some(-1)) if t.signed() != Some(false) => {
            let (lo, wide_lo) = (t.bounds().0, t.widest_bounds().0);
            match a {
                _ if a == lo && lo == wide_lo && t != IntTy::Open => Val::Opt(None),
                _ if a == lo || a == wide_lo => Val::Unknown,
                _ if name == "checked_div" => checked(t, Some(-a)),
                _ => checked(t, Some(0)),
            }
        }
        ("checked_div", Some(b)) => checked(t, a.checked_div(b)),
        ("checked_rem", Some(b)) => checked(t, a.checked_rem(b)),
        ("clone", None) => Val::Int(a, ta),
        _ => Val::Unknown,
    }
}

/// `checked_*` in type `t`, whose exact result is `v` (`None`: beyond `i128`, or a division by
/// zero): `Some` where every target's `t` holds it, `None` where none does, unknown where they
/// differ (a `usize` beyond 32 bits) or rustc picks the type (a literal's: known only for
/// values every integer type holds).
fn checked(t: IntTy, v: Option<i128>) -> Val {
    let some = |v: i128| Val::Opt(Some(Box::new(Val::Int(v, t))));
    let (lo, hi) = t.bounds();
    let (wide_lo, wide_hi) = t.widest_bounds();
    match (t, v) {
        (IntTy::Open, Some(v)) if (0..=127).contains(&v) => some(v),
        (IntTy::Open, _) => Val::Unknown,
        (_, Some(v)) if (lo..=hi).contains(&v) => some(v),
        (_, Some(v)) if !(wide_lo..=wide_hi).contains(&v) => Val::Opt(None),
        // Past `i128`: beyond every type but `u128` (whose upper half the macro does not hold).
        (
            IntTy::Fixed {
                bits: 128,
                signed: false,
            },
            None,
        ) => Val::Unknown,
        (_, None) => Val::Opt(None),
        _ => Val::Unknown,
    }
}

/// `wrapping_*` of `a` and `b` of type `t`: the exact result `v` for a literal's type, whose
/// width is unknown; else the result's low 128 bits `low`, wrapped to the type.
fn wrapping(t: IntTy, v: Option<i128>, low: i128, a: i128, b: i128) -> Val {
    match t {
        IntTy::Open => int_result(t, v, a, b),
        t => t.wrap(low),
    }
}

/// `saturating_*`: the exact result `v`, clamped to the type's range where every target
/// clamps it alike; `v` is `None` past `i128`'s range, above it if `up`.
fn saturating(t: IntTy, v: Option<i128>, up: bool) -> Val {
    let (lo, hi) = t.bounds();
    let up = v.map_or(up, |v| v > hi);
    match (t, v) {
        // A literal's type may be unsigned (stopping at zero) or signed.
        (IntTy::Open, v) => v.map_or(Val::Unknown, |v| t.exact(v).filter_int(|v| v >= 0)),
        (_, Some(v)) if (lo..=hi).contains(&v) => Val::Int(v, t),
        // `u128`'s upper half is beyond what the macro holds.
        (
            IntTy::Fixed {
                signed: false,
                bits: 128,
            },
            _,
        ) if up => Val::Unknown,
        (IntTy::Fixed { .. }, _) => Val::Int(if up { hi } else { lo }, t),
        // Below zero, every unsigned width stops at zero; elsewhere the width decides.
        (IntTy::Size { signed: false }, _) if !up => Val::Int(0, t),
        _ => Val::Unknown,
    }
}

pub(super) fn ints(v: &Val) -> Option<Vec<usize>> {
    match v {
        Val::Array(a) => a
            .iter()
            .map(|x| match x {
                Val::Int(i, _) => usize::try_from(*i).ok(),
                _ => None,
            })
            .collect(),
        Val::Range {
            start,
            end,
            step,
            rev: false,
            ..
        } if *start >= 0
            && *step > 0
            && usize::try_from(*step).is_ok()
            && end.saturating_sub(*start) / *step <= 1 << 16 =>
        {
            (*start..*end)
                .step_by(*step as usize)
                .map(|x| usize::try_from(x).ok())
                .collect()
        }
        _ => None,
    }
}

/// The values of a short range, in its order and type.
pub(super) fn range_vals(v: &Val) -> Option<Vec<Val>> {
    let Val::Range {
        start,
        end,
        step,
        rev,
        ty,
    } = *v
    else {
        return None;
    };
    // In the range's own integers (a `u128` range may hold values no `usize` can).
    let step = usize::try_from(step).ok().filter(|&s| s > 0)?;
    if end.saturating_sub(start).max(0) / step as i128 > 1 << 16 {
        return None;
    }
    let mut out: Vec<Val> = (start..end.max(start))
        .step_by(step)
        .map(|x| Val::Int(x, ty))
        .collect();
    if rev {
        out.reverse();
    }
    Some(out)
}

pub(super) fn shape_of(v: &Val) -> Option<Vec<usize>> {
    match v {
        Val::Int(n, _) => usize::try_from(*n).ok().map(|n| vec![n]),
        other => ints(other),
    }
}

/// Whether a pattern matches a static value.
pub(super) enum Matched {
    /// It does, with the bindings it makes.
    Yes(Vec<(String, Val)>),
    /// It does not.
    No,
    /// The macro cannot tell (a constant's name, a pattern kind it does not read): the match
    /// must not go on to a later arm as if this one had failed.
    Unknown,
}

/// Whether `path` names `Option`'s `variant`: `Some`, `Option::Some`, `std::option::Option::Some`.
fn names_variant(path: &syn::Path, variant: &str) -> bool {
    let segs: Vec<String> = path.segments.iter().map(|s| s.ident.to_string()).collect();
    match &segs[..] {
        [v] => v == variant,
        [.., o, v] => o == "Option" && v == variant,
        _ => false,
    }
}

/// Whether `pat` matches the static value `v`.
pub(super) fn pat_matches(pat: &Pat, v: &Val) -> Matched {
    let yes_if = |b: bool| {
        if b {
            Matched::Yes(Vec::new())
        } else {
            Matched::No
        }
    };
    match (pat, v) {
        (Pat::Wild(_), _) => Matched::Yes(Vec::new()),
        // `Some(p)` and `None` on an `Option` the macro knows.
        (Pat::TupleStruct(ts), Val::Opt(o)) if names_variant(&ts.path, "Some") => {
            match (ts.elems.len(), ts.elems.first(), o) {
                (1, Some(p), Some(x)) => pat_matches(p, x),
                (1, _, None) => Matched::No,
                _ => Matched::Unknown,
            }
        }
        (Pat::Ident(i), Val::Opt(o)) if i.ident == "None" && i.subpat.is_none() => {
            yes_if(o.is_none())
        }
        (Pat::Path(p), Val::Opt(o)) if names_variant(&p.path, "None") => yes_if(o.is_none()),
        (Pat::Ident(i), _) => {
            let name = (i.ident.to_string(), v.clone());
            match &i.subpat {
                // `K` may name a constant, which the pattern compares with rather than binds
                // (Rust decides by what is in scope; constants are named in capitals).
                None if i
                    .ident
                    .to_string()
                    .starts_with(|c: char| c.is_ascii_uppercase()) =>
                {
                    Matched::Unknown
                }
                None => Matched::Yes(vec![name]),
                // `x @ 1..=3`: the subpattern decides, and `x` is bound too.
                Some((_, sub)) => match pat_matches(sub, v) {
                    Matched::Yes(mut b) => {
                        b.push(name);
                        Matched::Yes(b)
                    }
                    other => other,
                },
            }
        }
        (Pat::Lit(l), _) => match (lit(&l.lit), v) {
            (Val::Int(a, _), Val::Int(b, _)) => yes_if(a == *b),
            (Val::Bool(a), Val::Bool(b)) => yes_if(a == *b),
            _ => Matched::Unknown,
        },
        (Pat::Range(r), Val::Int(x, _)) => {
            // Literal bounds only: a constant's value is not known here.
            let bound = |e: &Option<Box<Expr>>| match e.as_deref() {
                Some(Expr::Lit(l)) => match lit(&l.lit) {
                    Val::Int(i, _) => Some(Some(i)),
                    _ => None,
                },
                None => Some(None),
                _ => None,
            };
            let (Some(lo), Some(hi)) = (bound(&r.start), bound(&r.end)) else {
                return Matched::Unknown;
            };
            let closed = matches!(r.limits, syn::RangeLimits::Closed(_));
            yes_if(
                lo.is_none_or(|lo| *x >= lo)
                    && hi.is_none_or(|hi| if closed { *x <= hi } else { *x < hi }),
            )
        }
        // The first case that does not fail decides (a later one's bindings could differ).
        (Pat::Or(o), _) => o
            .cases
            .iter()
            .map(|c| pat_matches(c, v))
            .find(|m| !matches!(m, Matched::No))
            .unwrap_or(Matched::No),
        (Pat::Paren(p), _) => pat_matches(&p.pat, v),
        // The macro's values stand for what references point at (`Some(&p)`, `&(a, b)`).
        (Pat::Reference(r), _) => pat_matches(&r.pat, v),
        (Pat::Type(t), _) => pat_matches(&t.pat, v),
        (Pat::Tuple(t), Val::Tuple(items)) => parts_match(t.elems.iter(), items, false),
        (Pat::Slice(sl), Val::Array(items)) => parts_match(sl.elems.iter(), items, true),
        _ => Matched::Unknown,
    }
}

/// A tuple's or a slice's patterns against its parts: each part in turn, one `..` (or, in a
/// slice, `name @ ..`, bound to the parts it covers) standing for as many as the length leaves
/// over. Any part that fails fails the whole; else any the macro cannot decide leaves it
/// undecided.
fn parts_match<'p>(pats: impl Iterator<Item = &'p Pat>, items: &[Val], slice: bool) -> Matched {
    let pats: Vec<&Pat> = pats.collect();
    let is_rest = |p: &Pat| match p {
        Pat::Rest(_) => true,
        Pat::Ident(i) => {
            slice && matches!(i.subpat.as_ref(), Some((_, sub)) if matches!(**sub, Pat::Rest(_)))
        }
        _ => false,
    };
    let rest = pats.iter().position(|p| is_rest(p));
    let fixed = pats.len() - usize::from(rest.is_some());
    let fits = match rest {
        Some(_) => items.len() >= fixed,
        None => items.len() == fixed,
    };
    if !fits {
        // A tuple's length is its type's: a mismatch is code the macro misread.
        return if slice { Matched::No } else { Matched::Unknown };
    }
    let mut bound = Vec::new();
    let mut undecided = false;
    let mut at = 0;
    for (k, p) in pats.iter().enumerate() {
        if Some(k) == rest {
            let covered = items.len() - fixed;
            if let Pat::Ident(i) = p {
                bound.push((
                    i.ident.to_string(),
                    Val::Array(items[at..at + covered].to_vec()),
                ));
            }
            at += covered;
            continue;
        }
        match pat_matches(p, &items[at]) {
            Matched::Yes(b) => bound.extend(b),
            Matched::No => return Matched::No,
            Matched::Unknown => undecided = true,
        }
        at += 1;
    }
    if undecided {
        Matched::Unknown
    } else {
        Matched::Yes(bound)
    }
}

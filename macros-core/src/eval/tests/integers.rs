//! The evaluator's integer arithmetic against Rust's own, type by type.
//!
//! The promise (see `IntTy`): a value the macro keeps is the value every build of the program
//! computes — a debug build (which panics on overflow) gets it or panics, a release build
//! (which wraps) gets it, on a 32-bit target as on a 64-bit one. And the macro keeps every value
//! all of those agree on, so that the promise is not kept by knowing nothing.

use syn::{BinOp, UnOp};

use super::super::value::{IntTy, Val, cast, int_binop, int_method, int_unary};

/// What the program computes: in a debug build (`None`: it panics) and in a release build.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Real {
    debug: Option<i128>,
    release: Option<i128>,
}

impl Real {
    fn same(v: Option<i128>) -> Real {
        Real {
            debug: v,
            release: v,
        }
    }
}

/// The operations checked, as the program spells them.
#[derive(Clone, Copy, Debug)]
enum Op {
    Bin(&'static str),
    /// A method with one argument of the receiver's type (`pow`'s is a `u32`).
    Method(&'static str),
    /// A method without arguments.
    Unary(&'static str),
    Cast(&'static str),
    Neg,
    Not,
}

const OPS: &[Op] = &[
    Op::Bin("+"),
    Op::Bin("-"),
    Op::Bin("*"),
    Op::Bin("/"),
    Op::Bin("%"),
    Op::Bin("&"),
    Op::Bin("|"),
    Op::Bin("^"),
    Op::Bin("<<"),
    Op::Bin(">>"),
    Op::Method("min"),
    Op::Method("max"),
    Op::Method("pow"),
    Op::Method("rem_euclid"),
    Op::Method("wrapping_add"),
    Op::Method("wrapping_sub"),
    Op::Method("wrapping_mul"),
    Op::Method("saturating_add"),
    Op::Method("saturating_sub"),
    Op::Method("saturating_mul"),
    Op::Method("div_ceil"),
    Op::Unary("abs"),
    Op::Unary("next_power_of_two"),
    Op::Unary("trailing_zeros"),
    Op::Unary("ilog2"),
    Op::Cast("u8"),
    Op::Cast("i8"),
    Op::Cast("u16"),
    Op::Cast("i32"),
    Op::Cast("u32"),
    Op::Cast("i64"),
    Op::Cast("u64"),
    Op::Cast("usize"),
    Op::Cast("isize"),
    Op::Neg,
    Op::Not,
];

/// Rust's result of `op` on `a` and `b` as values of `$t`, or `None` where `$t` has no such
/// operation (rustc would refuse the program) or cannot hold `a` or `b`.
macro_rules! real_in {
    ($t:ty, $signed:expr, $op:expr, $a:expr, $b:expr) => {{
        #[allow(irrefutable_let_patterns)] // i128 holds every i128
        let (Ok(a), Ok(b)) = (<$t>::try_from($a), <$t>::try_from($b)) else {
            return None;
        };
        let w = |v: $t| v as i128;
        let sh = u32::try_from($b).unwrap_or(u32::MAX);
        let signed: bool = $signed;
        Some(match $op {
            Op::Bin("+") => Real {
                debug: a.checked_add(b).map(w),
                release: Some(w(a.wrapping_add(b))),
            },
            Op::Bin("-") => Real {
                debug: a.checked_sub(b).map(w),
                release: Some(w(a.wrapping_sub(b))),
            },
            Op::Bin("*") => Real {
                debug: a.checked_mul(b).map(w),
                release: Some(w(a.wrapping_mul(b))),
            },
            // Division by zero and `MIN / -1` panic in every build.
            Op::Bin("/") => Real::same(a.checked_div(b).map(w)),
            Op::Bin("%") => Real::same(a.checked_rem(b).map(w)),
            Op::Bin("&") => Real::same(Some(w(a & b))),
            Op::Bin("|") => Real::same(Some(w(a | b))),
            Op::Bin("^") => Real::same(Some(w(a ^ b))),
            // The amount is checked in debug builds and masked in release builds; the bits
            // shifted out are dropped in both.
            Op::Bin("<<") => Real {
                debug: a.checked_shl(sh).map(w),
                release: Some(w(a.wrapping_shl(sh))),
            },
            Op::Bin(">>") => Real {
                debug: a.checked_shr(sh).map(w),
                release: Some(w(a.wrapping_shr(sh))),
            },
            Op::Method("min") => Real::same(Some(w(a.min(b)))),
            Op::Method("max") => Real::same(Some(w(a.max(b)))),
            // The exponent is a `u32`: other values of `b` are not exponents.
            Op::Method("pow") if u32::try_from($b).is_err() => return None,
            Op::Method("pow") => Real {
                debug: a.checked_pow(sh).map(w),
                release: Some(w(a.wrapping_pow(sh))),
            },
            Op::Method("rem_euclid") => Real {
                debug: a.checked_rem_euclid(b).map(w),
                release: (b != 0).then(|| w(a.wrapping_rem_euclid(b))),
            },
            Op::Method("wrapping_add") => Real::same(Some(w(a.wrapping_add(b)))),
            Op::Method("wrapping_sub") => Real::same(Some(w(a.wrapping_sub(b)))),
            Op::Method("wrapping_mul") => Real::same(Some(w(a.wrapping_mul(b)))),
            Op::Method("saturating_add") => Real::same(Some(w(a.saturating_add(b)))),
            Op::Method("saturating_sub") => Real::same(Some(w(a.saturating_sub(b)))),
            Op::Method("saturating_mul") => Real::same(Some(w(a.saturating_mul(b)))),
            // Unsigned types only (rustc has them for signed ones only as unstable).
            Op::Method("div_ceil") if !signed => {
                Real::same((b != 0).then(|| w(a / b + <$t>::from(a % b != 0))))
            }
            Op::Unary("abs") if signed => Real {
                debug: (a != <$t>::MIN).then(|| w(if a < b - b { b - b - a } else { a })),
                release: Some(w(if a < b - b {
                    (b - b).wrapping_sub(a)
                } else {
                    a
                })),
            },
            Op::Unary("next_power_of_two") if !signed => {
                // Debug builds panic past the largest power; release builds give 0.
                let mut p: $t = 1;
                let mut over = false;
                while p < a {
                    match p.checked_mul(2) {
                        Some(q) => p = q,
                        None => {
                            over = true;
                            break;
                        }
                    }
                }
                Real {
                    debug: (!over).then(|| w(p)),
                    release: Some(if over { 0 } else { w(p) }),
                }
            }
            Op::Unary("trailing_zeros") => Real::same(Some(i128::from(a.trailing_zeros()))),
            Op::Unary("ilog2") => Real::same(a.checked_ilog2().map(i128::from)),
            Op::Cast("u8") => Real::same(Some(i128::from(a as u8))),
            Op::Cast("i8") => Real::same(Some(i128::from(a as i8))),
            Op::Cast("u16") => Real::same(Some(i128::from(a as u16))),
            Op::Cast("i32") => Real::same(Some(i128::from(a as i32))),
            Op::Cast("u32") => Real::same(Some(i128::from(a as u32))),
            Op::Cast("i64") => Real::same(Some(i128::from(a as i64))),
            Op::Cast("u64") => Real::same(Some(i128::from(a as u64))),
            // The pointer-sized targets, on a 64-bit target (the 32-bit one is `u32`/`i32`,
            // which `sizes` checks beside it).
            Op::Cast("usize") => Real::same(Some(i128::from(a as u64))),
            Op::Cast("isize") => Real::same(Some(i128::from(a as i64))),
            Op::Neg if signed => Real {
                debug: (b - b).checked_sub(a).map(w),
                release: Some(w((b - b).wrapping_sub(a))),
            },
            Op::Not => Real::same(Some(w(!a))),
            _ => return None,
        })
    }};
}

/// Rust's result in each type `ty` stands for: two for `usize` and `isize` (32 and 64 bits;
/// a cast to them likewise), one otherwise. Empty where rustc has no such operation.
fn reals(ty: IntTy, op: Op, a: i128, b: i128) -> Vec<Real> {
    fn fixed(signed: bool, bits: u32, op: Op, a: i128, b: i128) -> Option<Real> {
        match (signed, bits) {
            (false, 8) => real_in!(u8, false, op, a, b),
            (true, 8) => real_in!(i8, true, op, a, b),
            (false, 16) => real_in!(u16, false, op, a, b),
            (true, 16) => real_in!(i16, true, op, a, b),
            (false, 32) => real_in!(u32, false, op, a, b),
            (true, 32) => real_in!(i32, true, op, a, b),
            (false, 64) => real_in!(u64, false, op, a, b),
            (true, 64) => real_in!(i64, true, op, a, b),
            (false, 128) => real_in!(u128, false, op, a, b),
            (true, 128) => real_in!(i128, true, op, a, b),
            _ => None,
        }
    }
    // A cast to a pointer-sized type on a 32-bit target.
    let narrow = |op: Op| match op {
        Op::Cast("usize") => Op::Cast("u32"),
        Op::Cast("isize") => Op::Cast("i32"),
        op => op,
    };
    match ty {
        IntTy::Fixed { signed, bits } => [
            fixed(signed, bits, op, a, b),
            fixed(signed, bits, narrow(op), a, b),
        ]
        .into_iter()
        .flatten()
        .collect(),
        IntTy::Size { signed } => [
            fixed(signed, 32, narrow(op), a, b),
            fixed(signed, 64, op, a, b),
        ]
        .into_iter()
        .flatten()
        .collect(),
        // A literal's type is rustc's choice; the macro vouches for the types wide enough to
        // hold `i32`'s values (see `IntTy::Open`), and for the signed ones if it is negative.
        IntTy::Open => [
            (true, 32),
            (true, 64),
            (false, 32),
            (false, 64),
            (true, 128),
        ]
        .into_iter()
        .filter_map(|(s, bits)| fixed(s, bits, op, a, b))
        .collect(),
    }
}

/// What the macro computes.
fn model(op: Op, a: (i128, IntTy), b: (i128, IntTy)) -> Val {
    match op {
        Op::Bin(s) => int_binop(&syn::parse_str::<BinOp>(s).expect("an operator"), a, b),
        Op::Method(m) => int_method(a.0, a.1, m, &[Val::Int(b.0, b.1)]),
        Op::Unary(m) => int_method(a.0, a.1, m, &[]),
        Op::Cast(t) => cast(
            Val::Int(a.0, a.1),
            &syn::parse_str::<syn::Type>(t).expect("a type"),
        ),
        Op::Neg => int_unary(&UnOp::Neg(Default::default()), a.0, a.1),
        Op::Not => int_unary(&UnOp::Not(Default::default()), a.0, a.1),
    }
}

/// The type of the result: the receiver's, but `u32` for counts of bits and the target's for
/// casts.
fn result_type(op: Op, ty: IntTy) -> IntTy {
    match op {
        Op::Unary("trailing_zeros" | "ilog2") => IntTy::named("u32").expect("u32"),
        Op::Cast(t) => IntTy::named(t).expect("a type"),
        _ => ty,
    }
}

const TYPES: &[&str] = &[
    "u8", "i8", "u16", "i16", "u32", "i32", "u64", "i64", "u128", "i128", "usize", "isize",
];

/// Values at the edges of every type, and small ones.
fn edges() -> Vec<i128> {
    let mut v: Vec<i128> = (-20..=20).collect();
    for bits in [7u32, 8, 15, 16, 31, 32, 63, 64, 127] {
        let p = 1i128 << (bits.min(126));
        let top = if bits == 127 { i128::MAX } else { p };
        for x in [top, top - 1, p - 2, p + 1, -top, -top - 1, -top + 1] {
            v.push(x);
        }
    }
    v.extend([
        i128::MIN,
        i128::MIN + 1,
        3 << 30,
        5 << 40,
        255,
        256,
        300,
        1000,
        -1000,
    ]);
    v.sort_unstable();
    v.dedup();
    v
}

/// Checks one case; `Err` says what is wrong.
fn check(ty: IntTy, op: Op, a: i128, b: i128) -> Result<(), String> {
    // Values the macro holds are within their type's bounds on every target.
    if !matches!(ty.exact(a), Val::Int(..)) || !matches!(ty.exact(b), Val::Int(..)) {
        return Ok(());
    }
    let reals = reals(ty, op, a, b);
    if reals.is_empty() {
        return Ok(());
    }
    let got = model(op, (a, ty), (b, ty));
    let case = || format!("{ty:?} {op:?} a = {a}, b = {b}: model {got:?}, Rust {reals:?}");
    match &got {
        &Val::Int(v, t) => {
            if t != result_type(op, ty) {
                return Err(format!("wrong type: {}", case()));
            }
            for r in &reals {
                if r.release != Some(v) || r.debug.is_some_and(|d| d != v) {
                    return Err(format!("a value some build does not compute: {}", case()));
                }
            }
        }
        Val::Unknown => {
            // Known wherever every build on every target agrees (and no build panics), for the
            // named types; a literal's type stays open, so the macro may know less there.
            let agreed = reals
                .iter()
                .all(|r| r.debug.is_some() && r.debug == r.release && r.debug == reals[0].debug);
            let bounded = reals[0]
                .debug
                .is_some_and(|v| matches!(result_type(op, ty).exact(v), Val::Int(..)));
            if ty != IntTy::Open && agreed && bounded {
                return Err(format!("unknown, though every build agrees: {}", case()));
            }
        }
        _ => return Err(format!("not an integer: {}", case())),
    }
    Ok(())
}

#[test]
fn integer_arithmetic_is_what_every_build_of_the_program_computes() {
    let edges = edges();
    let mut failures = Vec::new();
    let mut checked = 0usize;
    for ty in TYPES
        .iter()
        .map(|t| IntTy::named(t).expect("a type"))
        .chain([IntTy::Open])
    {
        for &op in OPS {
            for &a in &edges {
                for &b in &edges {
                    checked += 1;
                    if let Err(e) = check(ty, op, a, b) {
                        failures.push(e);
                    }
                }
            }
        }
    }
    assert!(checked > 100_000, "{checked} cases");
    // One example of each kind of mistake (type and operation).
    let mut kinds: Vec<&String> = Vec::new();
    for f in &failures {
        let kind = |f: &str| f.split(" a = ").next().map(str::to_string);
        if !kinds.iter().any(|k| kind(k) == kind(f)) {
            kinds.push(f);
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {checked} cases wrong, of {} kinds:\n{}",
        failures.len(),
        kinds.len(),
        kinds
            .iter()
            .map(|k| k.as_str())
            .collect::<Vec<_>>()
            .join("\n")
    );
}

proptest::proptest! {
    /// The same at random values of every type.
    #[test]
    fn integer_arithmetic_agrees_at_random_values(
        t in 0..TYPES.len() + 1,
        op in 0..OPS.len(),
        a in proptest::num::i128::ANY,
        b in proptest::num::i128::ANY,
        shrink_a in 0u32..128,
        shrink_b in 0u32..128,
    ) {
        let ty = TYPES.get(t).map_or(IntTy::Open, |t| IntTy::named(t).expect("a type"));
        // Spread the magnitudes: most random i128s are far outside the small types.
        let (a, b) = (a >> shrink_a, b >> shrink_b);
        if let Err(e) = check(ty, OPS[op], a, b) {
            proptest::prop_assert!(false, "{}", e);
        }
    }
}

#[test]
fn associated_constants_are_every_targets() {
    macro_rules! expect {
        ($t:ty) => {{
            let ty = IntTy::named(stringify!($t)).expect("a type");
            let want_max = i128::try_from(<$t>::MAX).ok();
            assert!(matches!(ty.constant("MIN"), Val::Int(v, t) if v == <$t>::MIN as i128 && t == ty));
            match (ty.constant("MAX"), want_max) {
                (Val::Int(v, t), Some(m)) => assert!(v == m && t == ty),
                (Val::Unknown, None) => {}
                (got, _) => panic!("{}::MAX: {got:?}", stringify!($t)),
            }
            assert!(matches!(ty.constant("BITS"), Val::Int(v, _) if v == i128::from(<$t>::BITS)));
        }};
    }
    expect!(u8);
    expect!(i8);
    expect!(u16);
    expect!(i16);
    expect!(u32);
    expect!(i32);
    expect!(u64);
    expect!(i64);
    expect!(i128);
    expect!(u128);
    // The pointer-sized types' bounds and width differ between targets; zero does not.
    let usize = IntTy::named("usize").expect("usize");
    assert!(matches!(usize.constant("MIN"), Val::Int(0, _)));
    for name in ["MAX", "BITS"] {
        assert!(
            matches!(usize.constant(name), Val::Unknown),
            "usize::{name}"
        );
        assert!(matches!(
            IntTy::named("isize").expect("isize").constant(name),
            Val::Unknown
        ));
    }
}

/// `checked_*` against Rust's, at the edges of every type: an `Option` the macro knows is the
/// one every target computes (both widths of `usize`/`isize`, every type a literal may take),
/// and it knows every one the named types agree on.
#[test]
fn checked_arithmetic_is_every_targets() {
    const METHODS: [&str; 5] = [
        "checked_add",
        "checked_sub",
        "checked_mul",
        "checked_div",
        "checked_rem",
    ];
    // Rust's value in `$t`, or `None` if `$t` cannot hold `a` or `b`.
    macro_rules! real {
        ($t:ty, $m:expr, $a:expr, $b:expr) => {{
            #[allow(irrefutable_let_patterns)] // i128 holds every i128
            match (<$t>::try_from($a), <$t>::try_from($b)) {
                (Ok(a), Ok(b)) => Some(
                    match $m {
                        "checked_add" => a.checked_add(b),
                        "checked_sub" => a.checked_sub(b),
                        "checked_mul" => a.checked_mul(b),
                        "checked_div" => a.checked_div(b),
                        _ => a.checked_rem(b),
                    }
                    .map(|v| v as i128),
                ),
                _ => None,
            }
        }};
    }
    fn reals(ty: &str, m: &str, a: i128, b: i128) -> Vec<Option<Option<i128>>> {
        let one = |t: &str| match t {
            "u8" => real!(u8, m, a, b),
            "i8" => real!(i8, m, a, b),
            "u16" => real!(u16, m, a, b),
            "i16" => real!(i16, m, a, b),
            "u32" => real!(u32, m, a, b),
            "i32" => real!(i32, m, a, b),
            "u64" => real!(u64, m, a, b),
            "i64" => real!(i64, m, a, b),
            "u128" => real!(u128, m, a, b),
            _ => real!(i128, m, a, b),
        };
        match ty {
            "usize" => vec![one("u32"), one("u64")],
            "isize" => vec![one("i32"), one("i64")],
            "open" => ["i32", "i64", "u32", "u64", "i128"].map(one).to_vec(),
            t => vec![one(t)],
        }
    }
    let edges = edges();
    let (mut cases, mut known) = (0usize, 0usize);
    for ty in TYPES.iter().copied().chain(["open"]) {
        let it = IntTy::named(ty).unwrap_or(IntTy::Open);
        for m in METHODS {
            for &a in &edges {
                for &b in &edges {
                    if !matches!(it.exact(a), Val::Int(..)) || !matches!(it.exact(b), Val::Int(..))
                    {
                        continue;
                    }
                    let reals: Vec<Option<i128>> =
                        reals(ty, m, a, b).into_iter().flatten().collect();
                    // (`u128`'s upper half is beyond what the macro holds: left out.)
                    if ty == "u128" && reals.iter().any(|r| r.is_some_and(|v| v < 0)) {
                        continue;
                    }
                    if reals.is_empty() {
                        continue;
                    }
                    cases += 1;
                    let got = int_method(a, it, m, &[Val::Int(b, it)]);
                    let case =
                        || format!("{ty} {m} a = {a}, b = {b}: model {got:?}, Rust {reals:?}");
                    match &got {
                        Val::Opt(o) => {
                            let o = o.as_deref().map(|v| match v {
                                Val::Int(v, t) if *t == it => Some(*v),
                                _ => None,
                            });
                            assert!(o.is_none_or(|v| v.is_some()), "not an integer: {}", case());
                            let o = o.map(|v| v.unwrap_or_default());
                            assert!(reals.iter().all(|r| *r == o), "wrong: {}", case());
                            known += 1;
                        }
                        Val::Unknown => {
                            let agreed = reals.iter().all(|r| *r == reals[0]);
                            // (A literal's type is rustc's; `u128` past `i128` the macro does
                            // not compute.)
                            assert!(
                                ty == "open" || ty == "u128" || !agreed,
                                "unknown, though every target agrees: {}",
                                case()
                            );
                        }
                        _ => panic!("not an option: {}", case()),
                    }
                }
            }
        }
    }
    assert!(known > 50_000, "{known} of {cases} known");
}

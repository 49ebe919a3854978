//! The generator of the differential corpus: random rank programs in the styles that test the
//! macro's model (branches, loops, `break`/`continue`, labelled blocks, assignments in code
//! that does not communicate, helpers, closures, `#[cfg]`, early exits), each with the macro's
//! verdict computed by `rankwise_macros_core::expand` — the same code the attribute runs.

use std::fmt::Write;

/// How many programs the corpus holds, and the world sizes each is checked and run at.
pub const PROGRAMS: usize = 240;
pub const WORLDS: &str = "1..=4";

/// A small deterministic generator (xorshift), so the corpus is reproducible without a crate.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// One statement of a program, in one of the styles above.
fn statement(rng: &mut Rng) -> String {
    let k = rng.below(4);
    let d = rng.below(3);
    let n = 1 + rng.below(3);
    let t = if rng.below(2) == 0 { "0.5" } else { "10.0" };
    let op = ["Sum", "Max", "Min"][rng.below(3) as usize];
    // Mostly correct styles, some that are wrong on some ranks, a few the macro cannot see into.
    const GOOD: [u64; 14] = [0, 1, 2, 4, 5, 7, 9, 10, 16, 17, 19, 20, 23, 8];
    const WRONG: [u64; 4] = [3, 6, 18, 16];
    const UNSEEN: [u64; 8] = [11, 12, 13, 14, 15, 21, 22, 12];
    let roll = rng.below(100);
    let pick = |rng: &mut Rng, from: &[u64]| from[rng.below(from.len() as u64) as usize];
    let which = if roll < 10 {
        pick(rng, &UNSEEN)
    } else if roll < 24 {
        pick(rng, &WRONG)
    } else {
        pick(rng, &GOOD)
    };
    match which {
        0 | 1 => "{ let mut b = ctx.batch(); b.send(&x, (r + 1) % w).recv(&mut y, (r + w - 1) % w); b.run()?; }".into(),
        2 => "{ let p = r ^ 1; if p < w { if r % 2 == 0 { ctx.send(&x, p)?; ctx.recv(&mut y, p)?; } else { ctx.recv(&mut y, p)?; ctx.send(&x, p)?; } } }".into(),
        3 => "{ let p = r ^ 1; if p < w { ctx.send(&x, p)?; ctx.recv(&mut y, p)?; } }".into(),
        4 | 5 => format!("ctx.all_reduce(&mut y, ReduceOp::{op})?;"),
        6 => format!("if r == {k} {{ ctx.barrier()?; }}"),
        7 | 8 => format!(
            "{{ let mut next = r; for c in 0..w {{ if c == (r + {d}) % w {{ next = c; break; }} }} \
             let prev = (r + 4 * w - {d}{bad}) % w; let mut b = ctx.batch(); \
             b.send(&x, next).recv(&mut y, prev); b.run()?; }}",
            bad = if rng.below(6) == 0 { " - 1" } else { "" }
        ),
        9 => format!(
            "for i in 0..{n} {{ if i == {k}{who} {{ continue; }} ctx.barrier()?; }}",
            who = if rng.below(4) == 0 { " && r == 1" } else { "" }
        ),
        10 => format!(
            "'o: for i in 0..{n} {{ for j in 0..2 {{ if j == 1 && i == {k}{who} {{ break 'o; }} }} \
             ctx.all_reduce(&mut y, ReduceOp::Sum)?; }}",
            who = if rng.below(4) == 0 { " && r == 0" } else { "" }
        ),
        11 => "{ let mut n = 0; while n < 2 { n += 1; } let mut b = ctx.batch(); \
               b.send(&x, (r + n) % w).recv(&mut y, (r + 4 * w - n) % w); b.run()?; }"
            .into(),
        12 => format!(
            "{{ let mut q = (r + 1) % w; if x.as_slice()?[0] > {t} {{ q = r; }} let mut b = ctx.batch(); \
             b.send(&x, q).recv(&mut y, (r + w - 1) % w); b.run()?; }}"
        ),
        13 => format!("if x.as_slice()?[0] > {t} {{ return Ok(y.to_vec()); }}"),
        14 => "{ let k = last_rank(r, w); ctx.broadcast(&mut y, k % w)?; }".into(),
        15 => "#[cfg(any())] ctx.barrier()?;".into(),
        16 => format!(
            "if r == 0 {{ for p in 1..w {{ if p == {k} {{ break; }} ctx.send(&x, p)?; }} }} else if {cond} {{ ctx.recv(&mut y, 0)?; }}",
            cond = if rng.below(2) == 0 { format!("r < {k}") } else { "r > 0".into() }
        ),
        17 => format!("ctx.reduce(&mut y, {k} % w, ReduceOp::Sum)?;"),
        18 => "if r == 0 && w > 1 { ctx.send(&x, 1)?; } else if r == 1 { ctx.recv(&mut z, 0)?; }".into(),
        19 => "{ let c = &mut *ctx; c.barrier()?; }".into(),
        20 => "{ let root = 'b: { if w > 2 { break 'b 2; } 0 }; ctx.broadcast(&mut y, root)?; }".into(),
        21 => format!(
            "{{ let mut p = (r + 1) % w; {f}(&mut p, r, w); let mut b = ctx.batch(); \
             b.send(&x, p).recv(&mut y, (r + w - 1) % w); b.run()?; }}",
            f = if rng.below(2) == 0 { "keep" } else { "to_self" }
        ),
        22 => "{ let mut p = (r + 1) % w; let mut set = |v: usize| p = v; set(r); \
               let mut b = ctx.batch(); b.send(&x, p).recv(&mut y, (r + w - 1) % w); b.run()?; }"
            .into(),
        _ => "{ let mut g = ctx.zeros::<f32>([4 * w])?; ctx.all_gather(&x, &mut g, 0)?; \
              y.as_mut_slice()?[0] += g.as_slice()?[4 * w - 1]; }"
            .into(),
    }
}

/// The body shared by the checked and unchecked copies of program `i`.
fn body(rng: &mut Rng) -> String {
    let mut s = String::from(
        "let (r, w) = (ctx.rank(), ctx.world());\n    \
         let x = ctx.full([4], r as f32 + 1.0)?;\n    \
         let mut y = ctx.zeros::<f32>([4])?;\n    \
         let mut z = ctx.zeros::<f32>([3])?;\n    \
         let _ = (&mut z, &x);\n",
    );
    for _ in 0..2 + rng.below(3) {
        writeln!(s, "    {}", statement(rng)).unwrap();
    }
    s.push_str("    Ok(y.to_vec())");
    s
}

/// Helpers the programs call: pure computations the macro does not see into.
const HELPERS: &str = "\
fn last_rank(_r: usize, w: usize) -> usize { w - 1 }
fn keep(p: &mut usize, _r: usize, w: usize) { *p %= w; }
fn to_self(p: &mut usize, r: usize, _w: usize) { *p = r; }
";

/// The macro's verdict on one program: `"ok"`, or the codes it reported with the world sizes
/// its messages name.
fn verdict(name: &str, body: &str) -> (String, Vec<usize>) {
    let item = format!("fn {name}(ctx: &mut Ctx) -> Result<Vec<f32>> {{\n    {body}\n}}");
    let item: proc_macro2::TokenStream = item.parse().expect("generated programs parse");
    let args: proc_macro2::TokenStream = format!("world in {WORLDS}").parse().unwrap();
    let out = rankwise_macros_core::expand(args, item).to_string();
    if !out.contains("compile_error") {
        return ("ok".into(), Vec::new());
    }
    let mut codes: Vec<String> = Vec::new();
    let mut worlds = Vec::new();
    for (i, _) in out.match_indices("RW0") {
        let code = out[i..i + 5].to_string();
        if !codes.contains(&code) {
            codes.push(code);
        }
    }
    for (i, _) in out.match_indices("(world = ") {
        let digits: String = out[i + 9..]
            .chars()
            .take_while(char::is_ascii_digit)
            .collect();
        if let Ok(w) = digits.parse::<usize>()
            && !worlds.contains(&w)
        {
            worlds.push(w);
        }
    }
    codes.sort();
    worlds.sort();
    (codes.join(","), worlds)
}

/// The whole generated file.
pub fn generate() -> String {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut unchecked = String::new();
    let mut checked = String::new();
    let mut verdicts = String::new();
    let mut table_u = String::new();
    let mut table_c = String::new();
    for i in 0..PROGRAMS {
        let name = format!("p{i}");
        let body = body(&mut rng);
        let (v, worlds) = verdict(&name, &body);
        writeln!(
            unchecked,
            "pub fn {name}(ctx: &mut Ctx) -> Result<Vec<f32>> {{\n    {body}\n}}\n"
        )
        .unwrap();
        if v == "ok" {
            writeln!(
                checked,
                "#[rankwise::program(world in {WORLDS})]\npub fn {name}(ctx: &mut Ctx) -> Result<Vec<f32>> {{\n    {body}\n}}\n"
            )
            .unwrap();
            writeln!(table_c, "    Some({name} as Program),").unwrap();
        } else {
            writeln!(table_c, "    None,").unwrap();
        }
        writeln!(verdicts, "    ({v:?}, &{worlds:?}),").unwrap();
        writeln!(table_u, "    {name},").unwrap();
    }
    format!(
        "// @generated by tests/corpus/gen.rs: regenerate with\n\
         // `RANKWISE_BLESS=1 cargo test --test corpus`, then read the statistics it prints.\n\
         #![allow(dead_code, unused_mut, unused_variables, unused_labels, unused_comparisons, clippy::all)]\n\n\
         use rankwise::prelude::*;\n\n\
         /// A rank program of the corpus.\n\
         pub type Program = fn(&mut Ctx) -> Result<Vec<f32>>;\n\n\
         {HELPERS}\n\
         /// The programs as written, without the attribute.\n\
         pub mod unchecked {{\n    use super::*;\n\n{unchecked}}}\n\n\
         /// The programs the macro accepts, with the attribute.\n\
         pub mod checked {{\n    use super::*;\n\n{checked}}}\n\n\
         /// Per program: the macro's verdict (`\"ok\"` or its codes) and the world sizes named.\n\
         pub const VERDICTS: &[(&str, &[usize])] = &[\n{verdicts}];\n\n\
         pub const UNCHECKED: &[Program] = {{\n    use unchecked::*;\n    &[\n{table_u}    ]\n}};\n\n\
         pub const CHECKED: &[Option<Program>] = {{\n    use checked::*;\n    &[\n{table_c}    ]\n}};\n"
    )
}

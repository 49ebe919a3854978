//! The evaluator against rustc on generated code: control flow (loops, `break`/`continue`, labelled
//! blocks, `loop` values, `let … else`), closures (`move` or not, shadowed captures, `&mut`
//! parameters, `?`, early `return`), `Option`s and lists with their patterns (also by reference)
//! and methods, `std::mem`, borrows, destructuring, `match`es with ranges and guards, patterns on
//! tuples and slices, `let` chains, `&&`/`||` with effects on the right, iterator chains (also held
//! in a variable and advanced by `next`), structs read and written by field, integers of other
//! types, `Cell`, and writes through mutable references (match ergonomics, reborrows, names
//! shadowed, code on the data). Each snippet is compiled into this test (`snippets.rs`, written by the
//! generator below) and evaluated by the macro at every rank of worlds 1–4, for each of its three
//! numbers.
//!
//! The promise: a value the macro knows is the one the compiled code computes, whatever the
//! run-time data (`data`, a flag the macro cannot know). And the macro knows most of the values
//! that do not depend on the data, so the test fails for a model that knows nothing.

use std::fmt::Write as _;

use rankwise_core::OpKind;

use super::evaluate;
use super::snippets::SNIPPETS;

/// How many snippets the generator writes, and its seed.
const COUNT: usize = 800;
const SEED: u64 = 0x5eed_2026_1127;

/// The variables every snippet has: three numbers it assigns, an `Option` and a list.
const NUMBERS: [&str; 3] = ["a", "b", "c"];

/// Where a statement is: what `break`/`continue` may do there, and what it may read.
#[derive(Clone)]
struct Place {
    /// Inside a `for` or counted `while` (unlabelled `break` and `continue` allowed).
    in_loop: bool,
    /// Numbers it may read besides `a`, `b`, `c`, `rank` and `world` (loop variables).
    extra: Vec<String>,
}

struct Gen {
    state: u64,
    /// A fresh name's number.
    fresh: usize,
}

impl Gen {
    fn pick(&mut self, n: usize) -> usize {
        // xorshift64*: deterministic, so the file can be compared with what it would write.
        self.state ^= self.state >> 12;
        self.state ^= self.state << 25;
        self.state ^= self.state >> 27;
        (self.state.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 33) as usize % n
    }

    fn name(&mut self, prefix: &str) -> String {
        self.fresh += 1;
        format!("{prefix}{}", self.fresh)
    }

    /// A number below 97 (so nothing overflows), reading `reads`.
    fn expr(&mut self, depth: usize, reads: &[String]) -> String {
        if depth == 0 || self.pick(3) == 0 {
            return match self.pick(4) {
                0 => self.pick(10).to_string(),
                _ if reads.is_empty() => self.pick(10).to_string(),
                _ => reads[self.pick(reads.len())].clone(),
            };
        }
        let d = depth - 1;
        // A method's receiver needs a type: one of literals alone would be ambiguous (E0689).
        let recv = |g: &mut Gen| format!("({} as usize)", g.expr(d, reads));
        match self.pick(9) {
            0 => format!("({} + {}) % 97", self.expr(d, reads), self.expr(d, reads)),
            1 => format!("({} * {}) % 97", self.expr(d, reads), self.expr(d, reads)),
            2 => format!("{}.max({})", recv(self), self.expr(d, reads)),
            3 => format!("{}.min({})", recv(self), self.expr(d, reads)),
            4 => format!("{}.saturating_sub({})", recv(self), self.expr(d, reads)),
            5 => format!(
                "{} / ({} % 5 + 1)",
                self.expr(d, reads),
                self.expr(d, reads)
            ),
            6 => format!(
                "if {} {{ {} }} else {{ {} }}",
                self.cond(d, reads),
                self.expr(d, reads),
                self.expr(d, reads)
            ),
            7 => format!("{}.abs_diff({})", recv(self), self.expr(d, reads)),
            _ => format!("({} + {}) % 97", self.expr(d, reads), self.pick(10)),
        }
    }

    fn cond(&mut self, depth: usize, reads: &[String]) -> String {
        let d = depth.saturating_sub(1);
        match self.pick(7) {
            0 => format!("{} < {}", self.expr(d, reads), self.expr(d, reads)),
            1 => format!("{} == {}", self.expr(d, reads), self.expr(d, reads)),
            2 => format!("{} % 2 == 0", self.expr(d, reads)),
            3 => "data".into(),
            4 => format!("!({})", self.cond(d, reads)),
            5 => format!("{} > {}", self.expr(d, reads), self.pick(5)),
            _ => format!("{} && {}", self.cond(d, reads), self.cond(d, reads)),
        }
    }

    fn reads(&self, place: &Place, without: &[&str]) -> Vec<String> {
        ["a", "b", "c", "rank", "world"]
            .iter()
            .map(|s| s.to_string())
            .chain(place.extra.iter().cloned())
            .filter(|n| !without.contains(&n.as_str()))
            .collect()
    }

    fn target(&mut self) -> &'static str {
        NUMBERS[self.pick(3)]
    }

    fn other(&mut self, t: &str) -> &'static str {
        loop {
            let u = NUMBERS[self.pick(3)];
            if u != t {
                return u;
            }
        }
    }

    /// Up to `n` statements.
    fn stmts(&mut self, depth: usize, n: usize, place: &Place) -> String {
        let k = 1 + self.pick(n.max(1));
        (0..k)
            .map(|_| self.stmt(depth, place))
            .collect::<Vec<_>>()
            .join(" ")
    }

    fn stmt(&mut self, depth: usize, place: &Place) -> String {
        let all = self.reads(place, &[]);
        let t = self.target();
        let d = depth.saturating_sub(1);
        let kinds = if depth == 0 { 12 } else { 42 };
        match self.pick(kinds) {
            0 => format!("{t} = {};", self.expr(2, &all)),
            1 => format!("{t} = ({t} + {}) % 97;", self.expr(2, &all)),
            2 => format!("o = Some({});", self.expr(2, &all)),
            3 => "o = None;".into(),
            4 => format!("{t} = o.unwrap_or({});", self.expr(1, &all)),
            5 => format!("v.push({});", self.expr(1, &all)),
            6 => format!("if let Some(x) = v.pop() {{ {t} = x; }}"),
            7 => format!("{t} = v.len() % 97;"),
            8 => format!("{t} = v.iter().sum::<usize>() % 97;"),
            9 => {
                let u = self.other(t);
                format!("std::mem::swap(&mut {t}, &mut {u});")
            }
            10 if place.in_loop => {
                let c = self.cond(1, &all);
                let exit = if self.pick(2) == 0 {
                    "break"
                } else {
                    "continue"
                };
                format!("if {c} {{ {exit}; }}")
            }
            10 | 11 => {
                let u = self.other(t);
                let e = self.expr(1, &self.reads(place, &[u]));
                format!("{t} = std::mem::replace(&mut {u}, {e});")
            }
            12 => format!(
                "if {} {{ {} }} else {{ {} }}",
                self.cond(2, &all),
                self.stmts(d, 2, place),
                self.stmts(d, 2, place)
            ),
            13 => {
                let i = self.name("i");
                let bound = self.expr(1, &all);
                let mut inner = place.clone();
                inner.in_loop = true;
                inner.extra.push(i.clone());
                format!(
                    "for {i} in 0..({bound} % 4) {{ {} }}",
                    self.stmts(d, 3, &inner)
                )
            }
            14 => {
                let k = self.name("k");
                let bound = self.expr(1, &all);
                let mut inner = place.clone();
                inner.in_loop = true;
                let body = self.stmts(d, 3, &inner);
                format!(
                    "{{ let mut {k} = 0usize; while {k} < ({bound} % 4) {{ {k} += 1; {body} }} }}"
                )
            }
            15 => {
                // A `loop` ending with a value: no unlabelled exits of its own in between.
                let mut inner = place.clone();
                inner.in_loop = false;
                let body = self.stmts(d, 2, &inner);
                let c = self.cond(1, &all);
                format!(
                    "{t} = loop {{ {body} if {c} {{ break {}; }} break {}; }};",
                    self.expr(1, &all),
                    self.expr(1, &all)
                )
            }
            16 => {
                let l = self.name("'l");
                let mut inner = place.clone();
                inner.in_loop = false;
                let body = self.stmts(d, 2, &inner);
                let c = self.cond(1, &all);
                format!(
                    "{t} = {l}: {{ {body} if {c} {{ break {l} {}; }} {} }};",
                    self.expr(1, &all),
                    self.expr(1, &all)
                )
            }
            17 => {
                let mut reads = self.reads(place, &[]);
                reads.push("x".into());
                format!(
                    "{{ let f = move |x: usize| {}; {t} = f({}); }}",
                    self.expr(2, &reads),
                    self.expr(1, &all)
                )
            }
            18 => {
                // A closure that borrows what it reads; a later `let` shadows one of them.
                let s = self.other(t);
                let mut reads = self.reads(place, &[t]);
                reads.push("x".into());
                format!(
                    "{{ let f = |x: usize| ({s} + {}) % 97; let {s} = {}; {t} = (f({}) + {s}) % 97; }}",
                    self.expr(2, &reads),
                    self.expr(1, &all),
                    self.expr(1, &all)
                )
            }
            19 => format!(
                "{{ let g = |r: &mut usize| *r = {}; g(&mut {t}); }}",
                self.expr(2, &self.reads(place, &[t]))
            ),
            20 => format!(
                "{{ let r = &mut {t}; *r = (*r + {}) % 97; }}",
                self.expr(1, &self.reads(place, &[t]))
            ),
            // Writes through what a pattern borrows, read back at once (often from a fresh
            // `Some`, so that there is something known to get wrong).
            21 if self.pick(2) == 0 => format!(
                "o = Some({}); {}",
                self.expr(1, &all),
                self.stmt_on_o(t, &all)
            ),
            21 => self.stmt_on_o(t, &all),
            39 | 40 if self.pick(2) == 0 => format!(
                "o = Some({}); {}",
                self.expr(1, &all),
                self.stmt_through_references(t, &all)
            ),
            39 | 40 => self.stmt_through_references(t, &all),
            22 => format!(
                "match o {{ Some(x) if x > {} => {t} = x, Some(x) => {t} = (x + 1) % 97, None => {t} = {} }}",
                self.pick(50),
                self.expr(1, &all)
            ),
            23 if self.pick(2) == 0 => format!(
                "{{ let h = |q: Option<usize>| -> Option<usize> {{ let x = q?; Some((x + {}) % 97) }}; {t} = h(o).unwrap_or({}); }}",
                self.expr(1, &self.reads(place, &[t])),
                self.expr(1, &all)
            ),
            // `?` on an `Option` the data decides: the closure may return early.
            23 if self.pick(3) == 0 => {
                let e = self.expr(1, &self.reads(place, &[t]));
                format!(
                    "{{ let h = |q: Option<usize>| -> Option<usize> {{ q?; Some({e}) }}; {t} = h(if data {{ Some(1) }} else {{ None }}).unwrap_or({e} + 1); }}"
                )
            }
            // `?` whose value is not used: only its early return matters.
            23 => format!(
                "{{ let h = |q: Option<usize>| -> Option<usize> {{ q?; Some({}) }}; {t} = h(o).unwrap_or({}); }}",
                self.expr(1, &self.reads(place, &[t])),
                self.expr(1, &all)
            ),
            24 => match self.pick(4) {
                0 => format!("while let Some(x) = v.pop() {{ {t} = ({t} + x) % 97; }}"),
                1 => format!(
                    "{t} = v.get({}).copied().unwrap_or({});",
                    self.expr(1, &all),
                    self.expr(1, &all)
                ),
                2 => format!(
                    "v = vec![{}; {} % 4];",
                    self.expr(1, &all),
                    self.expr(1, &all)
                ),
                _ => format!("for x in v.clone() {{ {t} = ({t} + x) % 97; }}"),
            },
            25 => format!(
                "{t} = match {} % 4 {{ 0 => {}, 1 | 2 => {}, y => (y + {}) % 97 }};",
                self.expr(1, &all),
                self.expr(1, &all),
                self.expr(1, &all),
                self.expr(1, &all)
            ),
            26 => {
                let u = self.other(t);
                format!(
                    "{{ let {u} = {}; {t} = ({t} + {u}) % 97; }}",
                    self.expr(1, &all)
                )
            }
            // Destructuring assignment, of fresh values or of the variables themselves.
            28 => {
                let u = self.other(t);
                match self.pick(6) {
                    // A rest `..` standing for the values between.
                    4 => format!(
                        "({t}, .., {u}) = ({}, 5, {});",
                        self.expr(1, &all),
                        self.expr(1, &all)
                    ),
                    5 => format!(
                        "[.., {t}, {u}] = [{}, {}, {}];",
                        self.expr(1, &all),
                        self.expr(1, &all),
                        self.expr(1, &all)
                    ),
                    0 => format!(
                        "({t}, {u}) = ({}, {});",
                        self.expr(1, &all),
                        self.expr(1, &all)
                    ),
                    1 => format!(
                        "[{t}, {u}] = [{}, {}];",
                        self.expr(1, &all),
                        self.expr(1, &all)
                    ),
                    2 => format!(
                        "({t}, _) = ({}, {});",
                        self.expr(1, &all),
                        self.expr(1, &all)
                    ),
                    _ => format!("({t}, {u}) = ({u}, {t});"),
                }
            }
            // Iterator chains over ranges.
            29 => {
                let n = self.expr(1, &all);
                let e = self.expr(1, &all);
                let chain = match self.pick(10) {
                    0 => format!(
                        "map(|i| (i * {e}) % 97).filter(|&x| x % 2 == 0).sum::<usize>() % 97"
                    ),
                    1 => format!("rev().position(|x| x == {}).unwrap_or({e})", self.pick(4)),
                    2 => format!("nth({e}).unwrap_or({})", self.pick(10)),
                    3 => format!("last().unwrap_or({e})"),
                    4 => format!("max().unwrap_or({e})"),
                    5 => format!("step_by({e} % 3 + 1).sum::<usize>() % 97"),
                    6 => format!("take({e}).count()"),
                    7 => format!("skip({e}).map(|x| x + 1).sum::<usize>() % 97"),
                    8 => format!("any(|x| x == {e}) as usize"),
                    _ => {
                        format!("enumerate().map(|(i, x)| (i * x + {e}) % 97).sum::<usize>() % 97")
                    }
                };
                format!("{t} = (0..({n} % 5)).{chain};")
            }
            // Integers of other types, casts and bit operations.
            30 => {
                let e = self.expr(1, &all);
                let f = self.expr(1, &all);
                match self.pick(10) {
                    8 => format!("{t} = (({e}) as usize).checked_sub({f}).unwrap_or(3);"),
                    9 => format!(
                        "{t} = ((({e}) as u8).checked_mul(({f}) as u8 + 2).map_or(7, |x| x as usize)) % 97;"
                    ),
                    0 => format!(
                        "{t} = ((({e}) as u8).wrapping_mul({}u8) as usize) % 97;",
                        100 + self.pick(150)
                    ),
                    1 => format!("{t} = ((({e}) as i64 - ({f}) as i64).rem_euclid(7)) as usize;"),
                    2 => format!("{t} = (({e}) as u32).pow(2) as usize % 97;"),
                    3 => format!("{t} = (1usize << (({e}) % 6)) % 97;"),
                    4 => format!("{t} = (({e}) ^ ({f})) % 97;"),
                    5 => format!("{t} = (({e}) & 7) | (({f}) % 4);"),
                    6 => format!("{t} = (({e}) as i8 as usize) % 97;"),
                    _ => format!("{t} = (({e}) as u16).saturating_sub(({f}) as u16) as usize;"),
                }
            }
            // `Option` methods, reading and changing.
            31 => {
                let e = self.expr(1, &all);
                // Often from a fresh `Some`, so that there is something known to get wrong.
                let fresh = if self.pick(2) == 0 {
                    format!("o = Some({}); ", self.expr(1, &all))
                } else {
                    String::new()
                };
                fresh
                    + &match self.pick(10) {
                        0 => format!("{t} = o.is_some() as usize + o.is_none() as usize * {e};"),
                        1 => format!("{t} = o.map(|x| (x + {e}) % 97).unwrap_or(3);"),
                        2 => format!("{t} = (o.take().unwrap_or({e}) + o.unwrap_or(50)) % 97;"),
                        3 => format!(
                            "{t} = (o.replace({e}).unwrap_or(5) * 2 + o.unwrap_or(1)) % 97;"
                        ),
                        4 => format!("{t} = (*o.get_or_insert({e}) * 2 + o.unwrap_or(1)) % 97;"),
                        5 => {
                            format!(
                                "if let Some(p) = o.as_mut() {{ *p = {e}; }} {t} = o.unwrap_or(1);"
                            )
                        }
                        6 => format!("{t} = o.filter(|&x| x > {e}).unwrap_or(2);"),
                        7 => format!("{t} = o.or(Some({e})).unwrap_or(4);"),
                        8 if self.pick(2) == 0 => format!("{t} = o.unwrap_or_default();"),
                        // (Half the time on the data: an argument the macro cannot know.)
                        8 => {
                            let c = if self.pick(2) == 0 {
                                "data".to_string()
                            } else {
                                self.cond(1, &all)
                            };
                            format!(
                                "{t} = o.xor(if {c} {{ Some({e}) }} else {{ None }}).unwrap_or(8);"
                            )
                        }
                        _ => format!("o = o.and(Some({e})); {t} = o.unwrap_or(6);"),
                    }
            }
            // List methods, reading and changing.
            32 => {
                let e = self.expr(1, &all);
                match self.pick(19) {
                    // A function named where a closure goes, writing through what it is lent.
                    18 => format!(
                        "{{ fn bump(x: &mut usize) {{ *x = (*x + 1) % 97; }} v.iter_mut().for_each(bump); {t} = (v.iter().sum::<usize>() + {e}) % 97; }}"
                    ),
                    17 => format!(
                        "{{ let mut w = Vec::new(); for i in 0..({e} % 4) {{ w.push(i * 2 + 1); }} {t} = (w.len() * 10 + w.last().copied().unwrap_or(3)) % 97; }}"
                    ),
                    0 => format!("v.insert(v.len() / 2, {e}); {t} = (v[0] * 3 + v.len()) % 97;"),
                    1 => format!(
                        "if !v.is_empty() {{ {t} = (v.remove(0) * 3 + v.iter().sum::<usize>()) % 97; }}"
                    ),
                    2 => format!("v.truncate({e} % 3); {t} = v.len();"),
                    3 => format!("v.clear(); {t} = v.len() + {e};"),
                    4 => format!("v.retain(|&x| x % 2 == {e} % 2); {t} = v.len();"),
                    5 => format!("v.sort(); {t} = v.first().copied().unwrap_or({e});"),
                    6 => format!("v.reverse(); {t} = v.last().copied().unwrap_or({e});"),
                    7 => format!("v.extend([{e}, 1]); {t} = v.len();"),
                    8 => format!("{t} = v.contains(&({e})) as usize;"),
                    9 => format!("{t} = v.iter().copied().max().unwrap_or({e});"),
                    10 => format!("{t} = v.iter().position(|&x| x == {e}).unwrap_or(9);"),
                    11 => format!(
                        "v.iter_mut().for_each(|x| *x = ({e} + *x) % 97); {t} = v.iter().sum::<usize>() % 97;"
                    ),
                    12 => format!(
                        "for x in v.iter_mut() {{ *x = (*x + {e}) % 97; }} {t} = v.get(0).copied().unwrap_or(7);"
                    ),
                    13 => format!(
                        "if v.len() > 1 {{ let n = v.len(); v.swap(0, n - 1); }} {t} = v.first().copied().unwrap_or({e});"
                    ),
                    14 => format!("v.resize({e} % 4, 3); {t} = v.len();"),
                    15 => format!(
                        "v.sort_by_key(|&x| (x + {e}) % 5); {t} = (v.first().copied().unwrap_or(1) * 7 + v.last().copied().unwrap_or(2)) % 97;"
                    ),
                    _ => format!("{t} = v.iter().copied().fold({e}, |acc, x| (acc + x) % 97);"),
                }
            }
            // Blocks, `let … else` in loops, closures returning early, richer `match`es.
            33 => {
                let e = self.expr(1, &all);
                let f = self.expr(1, &all);
                match self.pick(6) {
                    0 => format!("{t} = {{ let y = {e}; (y + {f}) % 97 }};"),
                    1 => format!(
                        "for _ in 0..2 {{ let Some(x) = o else {{ break; }}; {t} = x; o = None; }}"
                    ),
                    2 => format!(
                        "{{ let h = |x: usize| -> usize {{ if x > {} {{ return x; }} {f} }}; {t} = h({e}); }}",
                        self.pick(50)
                    ),
                    3 => format!(
                        "{t} = match {e} {{ 0..=3 => {f}, y @ 4..=9 => y, y if y % 2 == 0 => y / 2, _ => 1 }};"
                    ),
                    4 => format!(
                        "{t} = if let Some(x) = o {{ x }} else if {} {{ {e} }} else {{ {f} }};",
                        self.cond(1, &all)
                    ),
                    _ => format!(
                        "{{ let cell = std::cell::Cell::new({e}); cell.set({f}); {t} = cell.get(); }}"
                    ),
                }
            }
            // More iterator methods, over ranges and the list.
            34 => {
                let n = self.expr(1, &all);
                let e = self.expr(1, &all);
                match self.pick(13) {
                    // Functions named where a closure goes.
                    11 => format!(
                        "{t} = (1..({n} % 5 + 1)).map(usize::trailing_zeros).map(|z| z as usize * 3).sum::<usize>() % 97;"
                    ),
                    12 => format!(
                        "{{ let odd = |x: &usize| x % 2 == ({e}) % 2; {t} = (0..({n} % 6)).filter(odd).sum::<usize>() % 97; }}"
                    ),
                    0 => format!("{t} = (0..({n} % 5)).chain(0..({e} % 3)).sum::<usize>() % 97;"),
                    1 => format!(
                        "{t} = v.iter().copied().chain([{e}, 2]).enumerate().map(|(i, x)| (i + 1) * x).sum::<usize>() % 97;"
                    ),
                    2 => format!(
                        "{t} = v.chunks(({e}) % 3 + 1).map(|c| c.len() * 3).sum::<usize>() % 97;"
                    ),
                    3 => {
                        format!("{t} = v.windows(({e}) % 3 + 1).map(|w| w[0]).sum::<usize>() % 97;")
                    }
                    4 => format!(
                        "{{ let (p, q): (Vec<usize>, Vec<usize>) = (0..({n} % 6)).partition(|&x| x % 2 == ({e}) % 2); {t} = (p.len() * 10 + q.iter().sum::<usize>()) % 97; }}"
                    ),
                    5 => format!("{t} = (0..({n} % 6)).fold({e}, |acc, x| (acc * 3 + x) % 97);"),
                    6 => format!("{t} = (0..({n} % 6)).max_by_key(|&x| x % 2).unwrap_or({e});"),
                    7 => {
                        format!("{t} = (0..({n} % 6)).min_by_key(|&x| (x + {e}) % 3).unwrap_or(5);")
                    }
                    8 => format!(
                        "{t} = ((0..({n} % 6)).take_while(|&x| x % 3 != ({e}) % 3).count() * 5 + (0..({n} % 6)).skip_while(|&x| x % 3 != ({e}) % 3).sum::<usize>()) % 97;"
                    ),
                    9 => format!("{t} = (1..({n} % 5 + 1)).product::<usize>() % 97;"),
                    _ => format!("{t} = v.iter().step_by(({e}) % 3 + 1).sum::<usize>() % 97;"),
                }
            }
            // An iterator held in a variable and advanced by `next`.
            35 => {
                let n = self.expr(1, &all);
                let e = self.expr(1, &all);
                match self.pick(4) {
                    0 => format!(
                        "{{ let mut it = v.iter(); if let Some(&x) = it.next() {{ {t} = x; }} {t} = ({t} + it.len() * 7) % 97; }}"
                    ),
                    1 => format!(
                        "{{ let mut it = 0..({n} % 5); it.next(); {t} = it.next().unwrap_or({e}); }}"
                    ),
                    2 => format!(
                        "{{ let mut it = v.clone().into_iter(); while let Some(x) = it.next() {{ if {} {{ break; }} {t} = ({t} + x) % 97; }} }}",
                        self.cond(1, &all)
                    ),
                    _ => format!(
                        "{{ let mut it = v.iter().copied(); {t} = (it.next().unwrap_or(1) * 3 + it.next().unwrap_or({e})) % 97; }}"
                    ),
                }
            }
            // Patterns on tuples and slices, and through references.
            36 => {
                let e = self.expr(1, &all);
                let f = self.expr(1, &all);
                match self.pick(6) {
                    0 => format!(
                        "{t} = match (({e}) % 3, ({f}) % 2) {{ (0, _) => {}, (x, 1) => x + 1, (x, y) => x * y }};",
                        self.expr(1, &all)
                    ),
                    1 => format!(
                        "{t} = match v.as_slice() {{ [] => {e}, [x] => *x, [x, .., y] => (*x + *y) % 97 }};"
                    ),
                    2 => format!(
                        "if let [first, rest @ ..] = v.as_slice() {{ {t} = (*first + rest.len()) % 97; }}"
                    ),
                    3 => format!("if let Some(&x) = v.first() {{ {t} = x; }}"),
                    4 => format!(
                        "{t} = match (o, v.len()) {{ (Some(x), 0) => x, (None, n) => n, (Some(x), n) => (x + n) % 97 }};"
                    ),
                    _ => format!(
                        "{t} = match (({e}) % 2 == 0, {f}) {{ (true, 0..=4) => 1, (false, y) => y, _ => 3 }};"
                    ),
                }
            }
            // `&&` and `||` whose right side changes something: it may not run; `let` chains.
            37 => {
                let c = self.cond(1, &all);
                let e = self.expr(1, &all);
                match self.pick(6) {
                    // Rust 2024's `let` chains.
                    3 if self.pick(2) == 0 => {
                        format!("if let Some(x) = o && x > {e} {{ {t} = x; }}")
                    }
                    3 => format!("if let Some(_) = o && {c} {{ {t} = {e}; }}"),
                    4 => {
                        let u = self.other(t);
                        format!("if {c} && let Some(x) = v.pop() {{ {t} = x; }} {u} = v.len();")
                    }
                    5 => format!(
                        "while let Some(x) = v.pop() && x > {e} {{ {t} = ({t} + x) % 97; }}"
                    ),
                    0 => format!("let _ = {c} && v.pop().is_some(); {t} = v.len();"),
                    1 => format!(
                        "if {c} || o.take().is_some() {{ {t} = 1; }} {t} = ({t} + o.unwrap_or(2)) % 97;"
                    ),
                    _ => format!(
                        "{{ let mut it = v.iter(); let _ = {c} && it.next().is_some(); {t} = it.len(); }}"
                    ),
                }
            }
            // Structs built in the function, read and written by field; tuples by index.
            38 => {
                let e = self.expr(1, &all);
                let f = self.expr(1, &all);
                match self.pick(4) {
                    0 => format!(
                        "{{ struct P {{ x: usize, y: usize }} let mut p = P {{ x: {e}, y: {f} }}; p.x = (p.x + p.y * 2) % 97; {t} = p.x; }}"
                    ),
                    1 => format!(
                        "{{ struct P {{ x: usize }} let mut p = P {{ x: {e} }}; if {} {{ p.x = {f}; }} {t} = p.x; }}",
                        self.cond(1, &all)
                    ),
                    2 => format!(
                        "{{ struct P {{ x: usize }} impl P {{ fn bump(&mut self) {{ self.x = (self.x + 1) % 97; }} }} let mut p = P {{ x: {e} }}; p.bump(); {t} = p.x; }}"
                    ),
                    _ => format!(
                        "{{ let mut q = ({e}, {f}); q.1 = (q.0 * 2 + q.1) % 97; {t} = q.1; }}"
                    ),
                }
            }
            // A list inside another value, grown in place.
            _ => format!(
                "{{ let mut q = (vec![{}], vec![vec![{}]]); q.0.push({}); q.1[0].push(1); {t} = (q.0.len() + q.1[0].len()) % 97; }}",
                self.expr(1, &all),
                self.expr(1, &all),
                self.expr(1, &all)
            ),
        }
    }

    /// A statement on `o` (or `v`) through a mutable reference: match ergonomics on it, typed
    /// and cast reborrows, a closure's `&mut` parameter, field writes through a pattern's
    /// binding, the reference's name shadowed where it is written through, and each of these
    /// under a condition on the data.
    fn stmt_through_references(&mut self, t: &str, all: &[String]) -> String {
        match self.pick(12) {
            0 => format!(
                "{{ let r = &mut o; if let Some(x) = r {{ *x = (*x + {}) % 97; }} {t} = r.unwrap_or({}); }}",
                self.expr(1, all),
                self.pick(10)
            ),
            1 => format!(
                "{{ let r = &mut o; match r {{ Some(x) => *x = {}, None => {{}} }} }} {t} = o.unwrap_or({});",
                self.expr(1, all),
                self.pick(10)
            ),
            2 => format!(
                "{{ let k = {}; let f = |q: &mut Option<usize>| -> usize {{ if let Some(x) = q {{ *x = (*x + k) % 97; }} q.unwrap_or({}) }}; {t} = f(&mut o); }}",
                self.expr(1, all),
                self.pick(10)
            ),
            3 => format!(
                "{{ let r = &mut o; {{ let s: &mut Option<usize> = r; *s = Some({}); }} {t} = r.unwrap_or({}); }}",
                self.expr(1, all),
                self.pick(10)
            ),
            4 => format!(
                "{{ let mut q = ({}, {}); let r = &mut q; let (x, _) = r; *x = (*x + 1) % 97; {t} = q.0; }}",
                self.expr(1, all),
                self.expr(1, all)
            ),
            5 => format!(
                "{{ let mut q = [({}, {})]; let r = &mut q; if let [x] = r {{ x.0 = (x.0 + 1) % 97; }} {t} = r[0].0; }}",
                self.expr(1, all),
                self.expr(1, all)
            ),
            // The reference's name shadowed where the write happens.
            6 => format!(
                "{{ let r = &mut o; if let Some(x) = r {{ let r = {}; *x = (*x + r) % 97; }} {t} = r.unwrap_or({}); }}",
                self.expr(1, all),
                self.pick(10)
            ),
            // Written through under a condition on the data, read after it.
            7 => format!(
                "if data {{ if let Some(ref mut x) = o {{ *x = {}; }} }} {t} = o.unwrap_or({});",
                self.expr(1, all),
                self.pick(10)
            ),
            8 => format!(
                "{{ let r = &mut o; if data {{ if let Some(x) = r {{ *x = {}; }} }} {t} = r.unwrap_or({}); }}",
                self.expr(1, all),
                self.pick(10)
            ),
            9 => format!(
                "{{ let r = &mut o; let set = |q: &mut Option<usize>, k: usize| *q = Some(k); if data {{ set(r, {}); }} {t} = r.unwrap_or({}); }}",
                self.expr(1, all),
                self.pick(10)
            ),
            10 => format!(
                "{{ let r = &mut v; if data {{ Vec::push(r, {}); }} {t} = r.len() % 97; }}",
                self.expr(1, all)
            ),
            _ => format!(
                "{{ let r = &mut o; {{ let s = r as &mut Option<usize>; *s = Some({}); }} {t} = r.unwrap_or({}); }}",
                self.expr(1, all),
                self.pick(10)
            ),
        }
    }

    /// A statement on `o` through a pattern: a copy, or a borrow written through (also by
    /// match ergonomics on a reference, a typed reborrow, or a closure's `&mut` parameter).
    fn stmt_on_o(&mut self, t: &str, all: &[String]) -> String {
        match self.pick(4) {
            0 => format!("if let Some(x) = o {{ {t} = x; }}"),
            1 => format!(
                "if let Some(p) = &mut o {{ *p = (*p + {}) % 97; }} {t} = o.unwrap_or({});",
                self.expr(1, all),
                self.pick(10)
            ),
            2 => format!(
                "match o {{ Some(ref mut p) => *p = {}, None => {{}} }} {t} = o.unwrap_or({});",
                self.expr(1, all),
                self.pick(10)
            ),
            _ => format!(
                "if let Some(ref mut p) = o {{ *p = {}; }} {t} = o.unwrap_or({});",
                self.expr(1, all),
                self.pick(10)
            ),
        }
    }

    /// A snippet: a block computing `(a, b, c)` from `rank`, `world` and `data`.
    fn snippet(&mut self) -> String {
        let init: Vec<String> = vec!["rank".into(), "world".into()];
        let top = Place {
            in_loop: false,
            extra: Vec::new(),
        };
        let mut s = String::new();
        for n in NUMBERS {
            let _ = write!(s, "let mut {n}: usize = {}; ", self.expr(1, &init));
        }
        let _ = write!(
            s,
            "let mut o: Option<usize> = None; let mut v: Vec<usize> = vec![{}, {}]; ",
            self.expr(1, &init),
            self.expr(1, &init)
        );
        s.push_str(&self.stmts(3, 5, &top));
        s.push_str(" (a, b, c)");
        s
    }
}

/// The file of snippets, as the generator writes it.
fn generated() -> String {
    let mut g = Gen {
        state: SEED,
        fresh: 0,
    };
    let mut out = String::from(
        "//! Generated by `control_flow::snippets_are_current` (rerun it with `RANKWISE_BLESS=1` to\n\
         //! rewrite this file); each snippet twice: as text for the macro, compiled for the truth.\n\
         #![allow(warnings, clippy::all, clippy::pedantic)]\n\n\
         type Snippet = (&'static str, fn(usize, usize, bool) -> (usize, usize, usize));\n\n\
         pub(super) const SNIPPETS: &[Snippet] = &[\n",
    );
    for _ in 0..COUNT {
        let body = g.snippet();
        let _ = writeln!(out, "    ({body:?}, |rank, world, data| {{ {body} }}),");
    }
    out.push_str("];\n");
    out
}

#[test]
fn snippets_are_current() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/src/eval/tests/snippets.rs");
    let want = generated();
    if std::env::var_os("RANKWISE_BLESS").is_some() {
        std::fs::write(path, &want).expect("the snippets file is writable");
        return;
    }
    let have = std::fs::read_to_string(path).unwrap_or_default();
    assert!(
        have == want,
        "src/eval/tests/snippets.rs is not what the generator writes: rerun with RANKWISE_BLESS=1"
    );
}

#[test]
fn the_macro_knows_only_what_rust_computes() {
    let (mut known, mut data_free, mut known_data_free) = (0usize, 0usize, 0usize);
    for (i, (body, real)) in SNIPPETS.iter().enumerate() {
        for world in 1..=4 {
            let src = format!(
                "fn p(ctx: &mut Ctx) -> Result<()> {{
                    let rank = ctx.rank();
                    let world = ctx.world();
                    let data = ctx.full([1], 0.0f32)?.to_vec()[0] > 0.5;
                    let result: (usize, usize, usize) = {{ {body} }};
                    let mut t1 = ctx.full([1], 0.0f32)?;
                    let mut t2 = ctx.full([2], 0.0f32)?;
                    let mut t3 = ctx.full([3], 0.0f32)?;
                    ctx.broadcast(&mut t1, result.0)?;
                    ctx.broadcast(&mut t2, result.1)?;
                    ctx.broadcast(&mut t3, result.2)?;
                    Ok(())
                }}"
            );
            let (p, _) = evaluate(&src, world);
            for rank in 0..world {
                let (off, on) = (real(rank, world, false), real(rank, world, true));
                let truths = [[off.0, on.0], [off.1, on.1], [off.2, on.2]];
                // A broadcast whose root the macro cannot compute is not in the program: each
                // is found by its tensor's size, `k + 1` for the `k`-th number.
                let claim = |k: usize| {
                    p.ranks[rank]
                        .iter()
                        .flat_map(|item| item.ops())
                        .find(|o| o.desc.kind == OpKind::Broadcast && o.desc.numel() == k + 1)
                        .and_then(|o| o.desc.peer)
                };
                for (k, truth) in truths.iter().enumerate() {
                    if truth[0] == truth[1] {
                        data_free += 1;
                    }
                    if let Some(c) = claim(k) {
                        assert!(
                            truth.iter().all(|&t| t == c),
                            "snippet {i}, world {world}, rank {rank}: the macro computes {c} \
                             for `{}`, the program {truth:?} (data false, true)\n{body}",
                            NUMBERS[k]
                        );
                        known += 1;
                        if truth[0] == truth[1] {
                            known_data_free += 1;
                        }
                    }
                }
            }
        }
    }
    // Not kept by knowing nothing: most values that do not depend on the data are known.
    eprintln!(
        "known {known}; of the values the data does not decide, {known_data_free} of {data_free}"
    );
    assert!(
        known_data_free * 2 > data_free,
        "the macro knows {known_data_free} of {data_free} values the data does not decide"
    );
}

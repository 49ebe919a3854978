//! Finding communication in code the evaluator does not follow (to report it as RW012).

use syn::ExprMethodCall;
use syn::visit::Visit;

use super::value::ident_of;

/// Method names that communicate, on a context, a group handle or a batch.
pub const COMM: [&str; 11] = [
    "send",
    "recv",
    "broadcast",
    "reduce",
    "all_reduce",
    "gather",
    "all_gather",
    "scatter",
    "reduce_scatter",
    "all_to_all",
    "barrier",
];

/// Standard macros that only format, assert or build vectors: they may mention the context
/// (`println!("{}", ctx.rank())`) without communicating.
pub(super) const KNOWN_MACROS: [&str; 16] = [
    "println",
    "print",
    "eprintln",
    "eprint",
    "format",
    "write",
    "writeln",
    "assert",
    "assert_eq",
    "assert_ne",
    "debug_assert",
    "debug_assert_eq",
    "debug_assert_ne",
    "panic",
    "dbg",
    "vec",
];

/// Whether `node` contains communication (or hands the context to other code).
pub(super) fn communicates(ctx: &str, batches: &[String], node: &dyn Fn(&mut CommFinder)) -> bool {
    let mut f = CommFinder {
        ctx: ctx.to_string(),
        batches: batches.to_vec(),
        found: false,
    };
    node(&mut f);
    f.found
}

pub(super) struct CommFinder {
    ctx: String,
    batches: Vec<String>,
    found: bool,
}

impl<'ast> Visit<'ast> for CommFinder {
    fn visit_expr_method_call(&mut self, m: &'ast ExprMethodCall) {
        let name = m.method.to_string();
        let on_batch = ident_of(&m.receiver).is_some_and(|r| self.batches.contains(&r));
        if COMM.contains(&name.as_str()) || (on_batch && name == "run") {
            self.found = true;
        }
        syn::visit::visit_expr_method_call(self, m);
    }
    fn visit_expr_call(&mut self, c: &'ast syn::ExprCall) {
        if c.args
            .iter()
            .any(|a| ident_of(a).as_deref() == Some(self.ctx.as_str()))
        {
            self.found = true;
        }
        syn::visit::visit_expr_call(self, c);
    }
    fn visit_macro(&mut self, m: &'ast syn::Macro) {
        let text = m.tokens.to_string();
        if COMM.iter().any(|c| text.contains(&format!(". {c}"))) {
            self.found = true;
        }
        // Macros other than the standard formatting and assertion ones may expand to anything:
        // handing them the context (or a batch) is handing it to code the macro cannot see.
        let known = m
            .path
            .get_ident()
            .is_some_and(|i| KNOWN_MACROS.contains(&i.to_string().as_str()));
        let mentions = m.tokens.clone().into_iter().any(|t| match t {
            proc_macro2::TokenTree::Ident(i) => {
                i == self.ctx.as_str() || self.batches.iter().any(|b| i == b.as_str())
            }
            _ => false,
        });
        if !known && mentions {
            self.found = true;
        }
    }
}

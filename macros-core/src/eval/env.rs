//! Variables in scope: a name → stack-of-bindings map, so that lookups cost the same in a
//! function of 3 statements and of 3000 (a list scanned per lookup made long programs
//! quadratic).

use std::collections::HashMap;

use super::value::Val;

#[derive(Default)]
pub(super) struct Env {
    vars: HashMap<String, Vec<Val>>,
    /// Names bound in each open scope, innermost last.
    scopes: Vec<Vec<String>>,
}

impl Env {
    pub(super) fn push(&mut self) {
        self.scopes.push(Vec::new());
    }

    pub(super) fn pop(&mut self) {
        for name in self.scopes.pop().unwrap_or_default() {
            if let Some(stack) = self.vars.get_mut(&name) {
                stack.pop();
                if stack.is_empty() {
                    self.vars.remove(&name);
                }
            }
        }
    }

    pub(super) fn bind(&mut self, name: String, v: Val) {
        if self.scopes.is_empty() {
            self.push();
        }
        self.vars.entry(name.clone()).or_default().push(v);
        if let Some(s) = self.scopes.last_mut() {
            s.push(name);
        }
    }

    pub(super) fn lookup(&self, name: &str) -> Option<&Val> {
        self.vars.get(name).and_then(|s| s.last())
    }

    /// Sets the innermost binding of `name`, if there is one.
    pub(super) fn assign(&mut self, name: &str, v: Val) {
        if let Some(slot) = self.vars.get_mut(name).and_then(|s| s.last_mut()) {
            *slot = v;
        }
    }

    /// Replaces every binding of `name` but the innermost (those an inner scope shadows) by
    /// `f` of it.
    pub(super) fn update_shadowed(&mut self, name: &str, f: impl Fn(&Val) -> Val) {
        if let Some(stack) = self.vars.get_mut(name) {
            let inner = stack.len().saturating_sub(1);
            for v in &mut stack[..inner] {
                *v = f(v);
            }
        }
    }

    /// Every visible binding.
    pub(super) fn visible(&self) -> impl Iterator<Item = (&String, &Val)> {
        self.vars
            .iter()
            .filter_map(|(n, s)| s.last().map(|v| (n, v)))
    }
}

//! Fault injection for the crate's own tests: `fail_point!("name")` marks a place inside a
//! backend where a panic must not hang or corrupt the other ranks. A test arms a point on the
//! current thread (one rank) with [`arm`]; outside `cfg(test)` the macro expands to nothing.

/// Panics here if a test armed this point on this thread (see the module docs).
// Only backends use it; without one compiled in (`--no-default-features`) it sits unused.
#[allow(unused_macros)]
macro_rules! fail_point {
    ($name:literal) => {
        #[cfg(test)]
        $crate::fail::hit($name);
    };
}

#[cfg(test)]
pub(crate) use armed::{arm, hit};

#[cfg(test)]
mod armed {
    use std::cell::Cell;

    thread_local! {
        static ARMED: Cell<Option<(&'static str, u32)>> = const { Cell::new(None) };
    }

    /// Makes the `skip + 1`-th hit of point `name` on this thread panic.
    pub(crate) fn arm(name: &'static str, skip: u32) {
        ARMED.with(|a| a.set(Some((name, skip))));
    }

    pub(crate) fn hit(name: &'static str) {
        ARMED.with(|a| match a.get() {
            Some((n, 0)) if n == name => {
                a.set(None);
                panic!("injected panic at fail point `{name}`");
            }
            Some((n, k)) if n == name => a.set(Some((n, k - 1))),
            _ => {}
        });
    }
}

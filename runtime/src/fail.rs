//! Fault injection for the crate's own tests: `fail_point!("name")` marks a place inside a
//! backend where a panic must not hang or corrupt the other ranks, or where a pause opens a race
//! window a test needs to hit every time. A test arms a point on the current thread (one rank)
//! with [`arm`] or [`arm_pause`]; outside `cfg(test)` the macro expands to nothing.

/// Panics (or pauses) here if a test armed this point on this thread (see the module docs).
// Only backends use it; without one compiled in (`--no-default-features`) it sits unused.
#[allow(unused_macros)]
macro_rules! fail_point {
    ($name:literal) => {
        #[cfg(test)]
        $crate::fail::hit($name);
    };
}

#[cfg(test)]
pub(crate) use armed::{arm, arm_pause, hit};

#[cfg(test)]
mod armed {
    use std::cell::Cell;
    use std::time::Duration;

    #[derive(Clone, Copy)]
    enum Action {
        Panic,
        Pause(Duration),
    }

    thread_local! {
        static ARMED: Cell<Option<(&'static str, u32, Action)>> = const { Cell::new(None) };
    }

    /// Makes the `skip + 1`-th hit of point `name` on this thread panic.
    pub(crate) fn arm(name: &'static str, skip: u32) {
        ARMED.with(|a| a.set(Some((name, skip, Action::Panic))));
    }

    /// Makes the first hit of point `name` on this thread sleep for `pause`.
    pub(crate) fn arm_pause(name: &'static str, pause: Duration) {
        ARMED.with(|a| a.set(Some((name, 0, Action::Pause(pause)))));
    }

    pub(crate) fn hit(name: &'static str) {
        ARMED.with(|a| match a.get() {
            Some((n, 0, action)) if n == name => {
                a.set(None);
                match action {
                    Action::Panic => panic!("injected panic at fail point `{name}`"),
                    Action::Pause(d) => std::thread::sleep(d),
                }
            }
            Some((n, k, action)) if n == name => a.set(Some((n, k - 1, action))),
            _ => {}
        });
    }
}

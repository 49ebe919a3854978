//! Test knobs from the environment: how long a suite runs (soak runs, sanitizer builds), never
//! what it checks.

/// The positive whole number `name` holds, or `None` when it is unset, zero or no number (the
/// suite then runs its default).
pub fn count(name: &str) -> Option<u32> {
    std::env::var(name)
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .filter(|&n| n > 0)
}

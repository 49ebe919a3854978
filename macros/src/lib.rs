//! Procedural macros for rankwise. `#[rankwise::program]` arrives with the compile-time checker;
//! this crate is the pipeline's home (parse → model → check → lower).

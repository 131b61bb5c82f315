//! Procedural macros of stackscan, re-exported by the `stackscan` crate.
//!
//! Empty for now: `#[derive(SubLayer)]` and `#[layer_stack(...)]` are built on top of the
//! planner in dsl and land with it. The crate exists so the dependency direction
//! (dsl → macros, never the reverse) is fixed from the start.

//! Compile-fail and compile-pass tests (trybuild) of the stackscan macros.
//!
//! The cases arrive with the macros; this crate holds their harness so that each mistake a
//! user can make in a declaration gets one file with its expected compiler output.

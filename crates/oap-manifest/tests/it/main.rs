//! oap-manifest's integration tests, one binary: one module per area.

mod common;

mod parse;
mod reference;
mod rules;
mod tool;

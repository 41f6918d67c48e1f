//! oap-discovery's integration tests, one binary: one module per area.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::string_slice,
    clippy::disallowed_methods,
    missing_docs,
    reason = "test code: a failed assumption is a failed test, and tests read their own fixtures whole"
)]

mod abstention;
mod adapter;
mod asks;
mod donors;
mod engine;
mod mcp;
mod multilingual;
mod query_cache;
mod recorded_vectors;
mod requests;
mod spoken_arithmetic;
mod stemming;

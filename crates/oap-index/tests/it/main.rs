//! Integration tests for oap-index (one binary, several modules, to keep link time low).

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::string_slice,
    clippy::disallowed_methods,
    missing_docs,
    reason = "test code: a failed assumption is a failed test, and tests read their own fixtures whole"
)]

mod atomic;
mod common;
mod corruption;
mod dense;
mod lexical;
mod props;
mod roundtrip;
mod tokenize;

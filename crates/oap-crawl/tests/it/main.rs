//! oap-crawl's integration tests, one binary: one module per area.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::string_slice,
    clippy::disallowed_methods,
    missing_docs,
    reason = "test code: a failed assumption is a failed test, and tests read their own fixtures whole"
)]
#![allow(dead_code)]

mod common;

mod crawl;
mod lan;
mod schedule_props;
mod schema;

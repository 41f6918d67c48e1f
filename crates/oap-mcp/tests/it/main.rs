//! oap-mcp's integration tests, one binary: a `Hub` against real MCP
//! servers (the official Python SDK, a misbehaving plain-Python server, the
//! npm `server-everything`), over real pipes, processes and sockets.

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

mod http;
mod stdio;

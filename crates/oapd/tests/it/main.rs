//! oapd's integration tests, one binary: one module per area. Tests run
//! in parallel threads of one process; a group that must not run beside
//! others takes a lock (none needs one today: every test makes its own
//! state directory, port, namespace and cgroup).

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

mod support;

mod bridge;
mod client_tokens;
mod config;
mod context_window;
mod crawl;
mod daemon;
mod experience;
mod exposure;
mod fitness;
mod host_guard;
mod http_errors;
mod lexical_start;
mod lifecycle;
mod mcp;
mod mcp_bodies;
mod mcp_noise;
mod mcp_server;
mod mdns;
mod memory;
mod observability;
mod parallel_tools;
mod passthrough;
mod ray_pipeline;
mod ray_requests_cli;
mod rebinding;
mod request_generation;
mod request_rows;
mod responses;
mod responses_store;
mod sandbox;
mod schema_url;
mod secrets;
mod slow_clients;
mod slow_upstream;
mod snapshot;
mod snapshot_pull;
mod status_page;
mod think_tags;
mod tool_instruction;
mod trusted_clients;
mod upstream_tls;
mod validation;
mod watch;

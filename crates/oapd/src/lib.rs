//! The `oapd` daemon as a library: configuration, start-up, the HTTP API and
//! its server shell. `main.rs` only parses the command line and calls in.

// Product code never panics on what it is given: errors are values.
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

pub mod api;
pub mod app;
pub mod bundled;
pub mod chat;
pub mod config;
pub mod crawl;
pub mod experience;
pub mod files;
pub mod guard;
pub mod head;
pub mod http;
pub mod lifecycle;
pub mod logging;
pub mod mdns;
pub mod rebuild;
pub mod render;
pub mod responses;
pub mod streaming;
pub mod tools;
pub mod txt_dns;
pub mod watch;

// The tool loop and its features live in oap-bridge; the daemon's modules
// (and its tests) keep reaching them under their old names.
pub use oap_bridge::tool_loop as bridge;
pub use oap_bridge::{
    exposure, forcing, meta, payload, sanitize, state, tokens, upstream, validation,
};

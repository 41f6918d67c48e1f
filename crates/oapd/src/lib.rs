//! The `oapd` daemon as a library: configuration, start-up, the HTTP API and
//! its server shell. `main.rs` only parses the command line and calls in.

// Product code never panics on what it is given: errors are values.
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

pub mod api;
pub mod app;
pub mod bridge;
pub mod bundled;
pub mod catalog_sink;
pub mod chat;
pub mod config;
pub mod crawl;
pub mod experience;
pub mod exposure;
pub mod files;
pub mod forcing;
pub mod guard;
pub mod head;
pub mod http;
pub mod lifecycle;
pub mod logging;
pub mod mdns;
pub mod meta;
pub mod payload;
pub mod rebuild;
pub mod render;
pub mod responses;
pub mod sanitize;
pub mod state;
pub mod streaming;
pub mod tokens;
pub mod tools;
pub mod txt_dns;
pub mod upstream;
pub mod validation;
pub mod watch;

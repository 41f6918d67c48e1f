//! The `oapd` daemon as a library: configuration, start-up, the HTTP API and
//! its server shell. `main.rs` only parses the command line and calls in.

// Product code never panics on what it is given: errors are values.
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

pub mod app;
pub mod bridge;
pub mod bundled;
pub mod chat;
pub mod config;
pub mod crawl;
pub mod experience;
pub mod exposure;
pub mod files;
pub mod forcing;
pub mod logging;
pub mod meta;
pub mod payload;
pub mod rebuild;
pub mod responses;
pub mod sanitize;
pub mod server;
pub mod state;
pub mod streaming;
pub mod tokens;
pub mod tools;
pub mod upstream;
pub mod validation;
pub mod watch;

// The paths these modules had before they moved into directories.
pub use crawl::{mdns, txt_dns};
pub use server::{api, guard, head, http, lifecycle, render};

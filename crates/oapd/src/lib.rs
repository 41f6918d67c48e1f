//! The `oapd` daemon as a library, in layers: configuration ([`config`]),
//! the crawler ([`crawl`]), the manifest-directory watch ([`watch`]),
//! opening the engine ([`app`]), the HTTP server and its lifecycle
//! ([`server`]), and the command line ([`cli`]; `main.rs` only calls it).
//! Each uses only layers before it and the small helpers ([`files`],
//! [`logging`], [`metrics`], [`rebuild`], [`bundled`], [`request_gen`]), never one that uses it back:
//! xtask's tidy test `oapd_modules_form_no_cycle` checks it.

pub mod app;
pub mod bundled;
pub mod cli;
pub mod config;
pub mod crawl;
pub mod files;
pub mod logging;
pub mod mcp;
pub mod metrics;
pub mod rebuild;
pub mod request_gen;
pub mod server;
pub mod tools;
pub mod watch;

// The HTTP helpers, where the chat handlers reach them.
pub use server::http;

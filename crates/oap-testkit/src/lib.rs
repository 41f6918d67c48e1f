//! Test support for the oapd workspace, for tests, examples and xtask only
//! (never a normal dependency of a product crate):
//!
//! - [`daemon`]: the real `oapd` binary as a child process ([`DaemonBuilder`]),
//!   on a port the daemon picks and reports;
//! - [`http`]: a minimal HTTP/1.1 client over a plain TCP socket (so tests
//!   can also send what a well-behaved client library never would);
//! - [`model`]: where the real embedding model and the fixtures are;
//! - [`upstream`]: the scripted fake Ollama on its own runtime;
//! - [`pki`] and [`server`]: a test CA, server certificates and loopback
//!   HTTP(S) servers;
//! - [`netns`]: network namespaces for tests that need non-loopback
//!   addresses;
//! - [`resolver`]: a stub name resolver for oap-exec's executor;
//! - [`manifest_web`]: fake manifest publishers for crawler tests;
//! - [`mdns_device`]: a LAN device advertising manifests over mDNS;
//! - [`script_server`]: a loopback server run as a child script (the MCP
//!   SDK's echo server), over TLS with a [`pki`] certificate;
//! - [`stats`], [`rss`] and [`cpu`]: percentiles, resident memory and CPU
//!   time, for benchmarks.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::string_slice,
    clippy::disallowed_methods,
    reason = "test support: a helper that cannot do its job fails the test that called it, loudly"
)]

pub mod cpu;
pub mod daemon;
pub mod http;
#[cfg(all(feature = "tls", feature = "exec"))]
pub mod manifest_web;
#[cfg(feature = "mdns")]
pub mod mdns_device;
pub mod model;
#[cfg(feature = "netns")]
pub mod netns;
#[cfg(feature = "tls")]
pub mod pki;
#[cfg(feature = "exec")]
pub mod resolver;
pub mod rss;
pub mod script_server;
#[cfg(feature = "tls")]
pub mod server;
pub mod stats;
#[cfg(feature = "ollama")]
pub mod upstream;

pub use daemon::{Daemon, DaemonBuilder};
pub use http::{send_raw, Response};

/// `argv` inside a network namespace: without the `netns` feature there
/// is none to run in.
#[cfg(feature = "netns")]
fn netns_command(ns: &str, argv: &[std::ffi::OsString]) -> std::process::Command {
    netns::command_in(ns, argv)
}
#[cfg(not(feature = "netns"))]
fn netns_command(_ns: &str, _argv: &[std::ffi::OsString]) -> std::process::Command {
    panic!("DaemonBuilder::in_netns needs oap-testkit's `netns` feature")
}

#[cfg(feature = "netns")]
fn netns_inside<T: Send + 'static>(ns: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    netns::inside(ns, f)
}
#[cfg(not(feature = "netns"))]
fn netns_inside<T: Send + 'static>(_ns: &str, _f: impl FnOnce() -> T + Send + 'static) -> T {
    panic!("a daemon in a network namespace needs oap-testkit's `netns` feature")
}

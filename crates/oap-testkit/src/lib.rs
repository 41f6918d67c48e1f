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
//!
//! # Architecture
//!
//! The one test and benchmark support layer: the daemon launcher
//! (`DaemonBuilder`: the real binary as a child process, on a port it binds
//! and reports), a raw HTTP/1.1 client (for what no client library would
//! send), the fake Ollama on its own runtime, a test PKI with loopback HTTPS
//! servers, a child-script server that reports its port (`script_server`: the
//! MCP SDK's echo server, over TLS too), a stub resolver, network namespaces,
//! model and fixture paths, percentiles and RSS, and two fake worlds: `manifest_web` (publishers of
//! good and hostile manifests for crawler tests) and `mdns_device` (a LAN
//! device advertising manifests over mDNS). No test includes another crate's
//! files by path. It is never a normal dependency of a product crate.
//!
//! # The test suite
//!
//! `cargo xtask test` runs everything in the release profile (candle in a
//! debug build is too slow, and one profile means one build), then the Python
//! suite (`tests/python`: the real `ollama` and `openai` packages, and Home
//! Assistant core with its Ollama integration, against the daemon and the fake
//! Ollama). CI (`.ci/run`) adds formatting, clippy, the
//! unit checks, the `.deb`, the aarch64 build with its suites in an emulated arm64 guest
//! and an image boot, and runs the suite from a clone with nothing beside it,
//! so a test that reads outside the repository fails there.
//!
//! Each crate has one integration-test binary, `tests/it/` (a `main.rs` with
//! one module per area), and shares one support layer, `oap-testkit`. Tests
//! use the real model, real index files, real processes and real sockets on
//! loopback or in network namespaces the test creates; the only double is the
//! fake Ollama, which speaks Ollama's exact wire format. Model-dependent tests
//! fail (never skip) when the model is absent. Everything a test or benchmark
//! reads is in the repository: the CC0 reference manifests in
//! `tests/fixtures/reference-manifests/` (with their provenance) and the
//! labelled task set in `bench/`.
//!
//! Where the tests concentrate, by boundary:
//! - **The manifest boundary** (`oap-manifest/tests/it`): the 52 reference
//!   manifests, every refusal with its message, the description heuristics.
//! - **The index file** (`oap-index/tests/it`): round trips, corruption of
//!   every section, atomic replacement.
//! - **Discovery quality** (`oap-discovery/tests/it`, `cargo xtask
//!   bench-retrieval`): recall and "nothing fits" on the labelled task sets.
//! - **The executor** (`oap-exec/tests/it`, `oap-sandbox/tests/it`): the SSRF
//!   table with a stub resolver (no connect happens), redirects, credentials,
//!   stdio limits, and the sandbox against the attacks it exists for.
//! - **The tool loop** (`oap-bridge/tests/it`): in-process against the fake
//!   Ollama with hooks of the test's own.
//! - **The daemon from outside** (`oapd/tests/it`): the real binary as a
//!   child process — every route's errors, the Host/Origin guard, slow and
//!   hostile clients, memory under large bodies in a memory cgroup, reload,
//!   socket activation, the crawler against loopback HTTPS, mDNS across two
//!   namespaces, the directory watch.
//! - **Real clients** (`tests/python`): what users run, unmodified, Home
//!   Assistant core included (onboarded, its Ollama integration added through
//!   its own config flow, spoken to through its conversation API), and
//!   Debian's headless Chromium on the status page, driven over the DevTools
//!   pipe (`cdp.py`): it answers the Basic challenge, and the test asserts no
//!   error reached the console.
//!
//! Performance lives in benchmarks, not in timed tests: `docs/BENCHMARKS.md`
//! gives each figure, the machine and the exact command.

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

//! The library's one public surface, small on purpose: what the benchmarks
//! (`oap-bench`), the fuzz targets (`fuzz/`, feature `daemon`) and the
//! configuration tests drive in-process. The daemon is the `oapd` binary
//! and its HTTP API; every module behind this one is private to the crate,
//! so a refactor inside it breaks nothing outside unless it changes a name
//! listed here.
//!
//! What each user builds from it:
//! - **Configuration**: [`Config`] from YAML and `OAP_*` overrides
//!   ([`Config::from_yaml_str`], [`Config::load`]), and the types the
//!   configuration tests name.
//! - **The chat service as the daemon builds it**: [`load_embedder`],
//!   [`open_engine`] (or [`open_engine_with`] without a model), an
//!   [`ExecRunner`] for the tools, then [`chat_service`] — the benchmarks'
//!   tool-token counts and the `/mcp` fuzz target's [`McpServer`] start
//!   there.
//! - **The experience cache** ([`Experience`], [`Hit`], [`STORE_FILE`]),
//!   replayed by the experience benchmark.
//! - **The first request head of a connection** ([`head`]) and the Host
//!   and Origin check ([`guard`]), fuzzed as the server runs them.

pub use crate::app::{load_embedder, open_engine, open_engine_with, ModelState};
pub use crate::config::{
    Config, ConfigError, DiscoveryMode, EmbeddingWeights, Loaded, LogFormat, SandboxMode,
    UrlPolicy, VectorDtype, MAX_CONFIG_FILE_BYTES,
};
pub use crate::server::bridge::chat::ChatService;
pub use crate::server::bridge::experience::{Experience, Hit, STORE_FILE};
pub use crate::server::routes::mcp::{McpServer, McpSettings};
pub use crate::server::run::start::chat_service;
pub use crate::tools::ExecRunner;

/// The reader of a connection's first request head, which runs before
/// hyper sees the connection (the `http_head` fuzz target).
pub mod head {
    pub use crate::server::transport::head::{
        error_response, inspect, read_first, Head, Prefixed, Refused, MAX_HEAD_BYTES,
    };
}

/// The Host and Origin check every request passes before any route (the
/// `http_head` fuzz target).
pub mod guard {
    pub use crate::server::transport::guard::{check, Inbound, Refusal};
}

//! MCP servers as capability sources, client side.
//!
//! People already run MCP servers (stdio programs started with npx, uvx or
//! a binary, or remote servers over streamable HTTP) and describe them in a
//! Claude-Desktop style `mcpServers` file. This crate reads that file
//! verbatim ([`servers_file`]), keeps the servers running ([`Hub`]), lists
//! their tools for discovery ([`Hub::tools`], [`McpTool`]) and calls them
//! under limits ([`Hub::call`]). The protocol itself is the official Rust
//! SDK, `rmcp`; this crate adds the process handling, the address rule for
//! URLs, caps, deadlines and reconnects.
//!
//! - stdio servers are spawned without a shell in their own process group
//!   with rlimits (oap-exec's), stderr drained line by line, lines from
//!   the server capped; the whole group is killed (SIGTERM, a
//!   grace period, SIGKILL) on removal, reconnect and shutdown. A server
//!   configured with `sandbox` runs under oap-sandbox's Landlock and
//!   seccomp confinement, with network access only when it asks.
//! - URL servers go through this crate's hyper client: the host is
//!   resolved once, each address checked against the server's `trust`, and
//!   only an allowed address is connected to. Streamable HTTP uses rmcp's
//!   transport over that client; the legacy HTTP+SSE transport (a URL
//!   ending in `/sse`, or `"type": "sse"`) is this crate's own, with its
//!   message endpoint held to the stream's origin.
//! - Secrets stay out of sight ([`redact`]): a spec prints, serializes and
//!   shows its location without its URL's query, header values, its
//!   environment or anything that came from `${env:}`, and the hub scrubs
//!   them from connect errors, lost-connection reasons and call errors
//!   before they reach the status, the log or the model.
//! - A server that fails (no answer to `initialize`, crash, lost
//!   connection) is retried with exponential backoff without delaying the
//!   others; calls never fail with `Err`: problems are error outcomes with
//!   a clear text, and a dropped call sends `notifications/cancelled`.
//! - Nothing a server sends unasked (log notifications, progress, list
//!   changes, stderr lines) is logged at info or warn: it is counted
//!   ([`Traffic`], `noise`), its text goes to the content target at debug,
//!   and a server over the rate is flagged noisy in [`ServerStatus`] and
//!   summarised in one line a minute. List changes are debounced into
//!   paced re-listings.

mod content;
mod http;
mod hub;
mod line_watch;
mod noise;
mod process;
pub mod redact;
pub mod servers_file;

pub use content::{canonical, content_hash, result_text};
pub use http::HttpError;
pub use hub::{CallOutcome, Hub, HubContext, HubSettings, McpTool, ServerStatus, State};
pub use noise::Traffic;
pub use redact::{Redaction, REDACTED};
pub use servers_file::{ServerSpec, ServersFile, SpecProblem, Start, Transport};

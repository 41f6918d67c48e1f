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
//!
//! # Architecture
//!
//! MCP servers as capability sources, client side. `servers_file::parse`
//! reads the Claude-Desktop style `{"mcpServers": {...}}` file verbatim
//! (`command`/`args`/`env`/`cwd` or `url`/`headers`/`type`, `allowedTools`,
//! `disabledTools`, `${env:VAR}`), plus oapd's own keys per server (`trust`
//! for URLs, `sandbox`, `start`, `timeout_ms`); a bad entry becomes a
//! `SpecProblem` naming its JSON path and the others still load. `Hub` keeps
//! the servers running: one supervisor task per server connects in the
//! background (never blocking `apply` or another server), lists tools page by
//! page within caps, re-lists on `notifications/tools/list_changed` (at most
//! once per 2 s, trailing edge, and 10 times a minute), counts what a server
//! sends unasked (`noise`: a noisy flag and the last minute's counts in its
//! status, one summary line a minute instead of a line per message), and
//! reconnects with exponential backoff (1 s to 60 s). `Hub::call` returns a
//! `CallOutcome` (text capped, non-text content described in one line,
//! `isError` kept), never an error; a deadline or a dropped call sends
//! `notifications/cancelled`. Tools carry a sha256 of their canonical JSON so
//! unchanged tools need no new embedding.
//!
//! Why rmcp: it is the official Rust SDK, so the protocol (initialize,
//! version negotiation, pagination, cancellation, streamable HTTP sessions)
//! is the reference one, and it lets the transport be ours. stdio servers are
//! spawned by this crate, not by rmcp's child-process helper: no shell, their
//! own process group, oap-exec's rlimits (`oap_exec::limit_command`; servers
//! get `HubContext::server_limits`, without a CPU-time limit), environment =
//! the spec's `env` over the daemon's `PATH`/`HOME`/`TMPDIR`/`TZ` and
//! `LANG=C.UTF-8`, stderr logged line by line with each line capped, stdout
//! lines above the message cap dropped (memory stays bounded; `line_watch`
//! counts them so a call in flight fails at once with the reason instead of
//! waiting for its deadline), and the whole
//! group killed (SIGTERM, grace, SIGKILL) on removal, reconnect and shutdown.
//! URL servers use this crate's hyper client (rustls with ring): the host is
//! resolved once, each address checked with oap-exec's `check_address` for
//! the server's `trust` (default `internet`: public addresses only), and only
//! an allowed address is connected to; the credential store's bearer for the
//! host is sent unless the spec sets `Authorization`; `https` trusts the roots
//! the daemon hands over in `HubContext::tls` (the HTTP tools' configuration,
//! so `tools.ca_file` serves both). Streamable HTTP is
//! rmcp's transport over that client; the legacy HTTP+SSE transport (URL
//! ending in `/sse`, or `"type": "sse"`) is this crate's own, its message
//! endpoint held to the stream's origin.
//!
//! **Architecture Invariant.** No connection before the address check, and
//! no server process outlives its removal: its process group is killed.
//! Nothing a server sends (lines, bodies, events, tool lists, results) is
//! kept beyond its cap. The crate depends on nothing of oapd's, oap-discovery's
//! or oap-bridge's; the daemon wires the hub into its config, index, tool loop
//! and `/health`. A server with `"sandbox"` runs under oap-sandbox
//! (`Confinement::prepare_with_network`, mode `require`: a kernel without
//! Landlock or seccomp refuses the server rather than run it unconfined):
//! readable only the system paths, its `paths`, its program's directory and
//! its `cwd`; writable only a fresh scratch directory that becomes its `HOME`
//! and `TMPDIR`; sockets and TCP only with `"network": true`.

mod content;
mod context;
mod http;
mod hub;
mod line_watch;
mod noise;
mod process;
pub mod redact;
pub mod servers_file;

pub use content::{canonical, content_hash, result_text};
pub use context::{HubContext, HubSettings};
pub use http::HttpError;
pub use hub::{CallOutcome, Hub, McpTool, ServerStatus, State};
pub use noise::Traffic;
pub use redact::{Redaction, REDACTED};
pub use servers_file::{ServerSpec, ServersFile, SpecProblem, Start, Transport};

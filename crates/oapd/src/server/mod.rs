//! The HTTP side of the daemon: the router ([`api`]), the chat surfaces
//! around the tool loop ([`chat`], [`responses`], [`streaming`],
//! [`experience`]) and the crawler's endpoints ([`crawl`]), the MCP server
//! at `/mcp` ([`mcp`]), the connection shell ([`http`], [`head`],
//! [`pending`]), who may
//! talk to it ([`guard`], [`auth`]), the operator's status page ([`ui`],
//! [`status`]), what it starts per engine generation ([`start`]),
//! and the process lifecycle that starts, reloads and stops it
//! ([`lifecycle`]). [`observe`] gives every request its id and keeps the
//! recent bridged requests. [`render`] formats answers for the terminal.

pub mod api;
pub mod auth;
pub mod chat;
pub mod crawl;
pub mod experience;
pub mod guard;
pub mod head;
pub mod http;
pub mod lifecycle;
pub mod mcp;
pub mod observe;
pub mod pending;
pub mod render;
pub mod response_store;
pub mod responses;
pub mod start;
pub mod state;
pub mod status;
pub mod streaming;
pub mod ui;

use crate::config::Config;

/// Runs the daemon until SIGINT or SIGTERM (no SIGHUP reload: there is no
/// config file to re-read). See [`lifecycle::serve`].
pub async fn serve(config: Config) -> anyhow::Result<()> {
    lifecycle::serve(config, None).await
}

//! oapd's own endpoints and the router in front of them ([`api`]: the route
//! table, the guard and token checks, discovery, `/health`, `/metrics`):
//! the crawler's ([`crawl`]), the MCP server at `/mcp` ([`mcp`]), the
//! operator's status page ([`ui`], [`status`]). [`state`] is one handler
//! generation's state, below every handler that reads it.

pub(crate) mod api;
pub(crate) mod crawl;
pub(crate) mod mcp;
pub(crate) mod state;
pub(crate) mod status;
pub(crate) mod ui;

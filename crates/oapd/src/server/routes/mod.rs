//! oapd's own endpoints and the router in front of them ([`api`]: the route
//! table, the guard and token checks, discovery, `/health`, `/metrics`):
//! the crawler's ([`crawl`]), the MCP server at `/mcp` ([`mcp`]), the
//! operator's status page ([`ui`], [`status`]). [`state`] is one handler
//! generation's state, below every handler that reads it.

pub mod api;
pub mod crawl;
pub mod mcp;
pub mod state;
pub mod status;
pub mod ui;

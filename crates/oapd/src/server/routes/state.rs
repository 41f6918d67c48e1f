//! The state of one API handler generation and the settings it was built
//! with. The router (`api`) and the handlers it routes to (crawl
//! registration, status) all read it; it lives here, below all of them, so
//! that none of them depends back on the router.

use std::sync::Arc;

use oap_discovery::Engine;

use crate::app::ModelState;
use crate::server::bridge::chat::ChatService;
use crate::server::transport::auth::Client;

/// Settings the handlers need, taken from the config at start.
#[derive(Debug, Clone)]
pub struct ApiSettings {
    /// `server.max_body_bytes`: largest API request body; larger ones get 413.
    pub max_body_bytes: usize,
    /// `server.max_task_bytes`: a task of this many bytes or more gets 400.
    pub max_task_bytes: usize,
    /// `discovery.default_top_k`: candidates returned when `top_k` is absent.
    pub default_top_k: usize,
    /// `discovery.max_top_k`: largest `top_k` a request may ask for.
    pub max_top_k: usize,
    /// `server.auth_token`: bearer token every request must carry (else
    /// 401); `None`: no authentication.
    pub auth_token: Option<String>,
    /// `server.cors_origins`: origins allowed to call the API from a browser.
    pub cors_origins: Vec<String>,
    /// `server.allowed_hosts`: extra Host names a loopback listener accepts.
    pub allowed_hosts: Vec<String>,
    /// `server.trusted_clients`: client addresses that need no bearer token.
    pub trusted_clients: Vec<oap_exec::Cidr>,
    /// `server.clients`: named clients whose tokens open their scopes only.
    pub clients: Vec<Arc<Client>>,
}

/// The HTTP API of one handler generation: a reload builds a new one and
/// swaps it in ([`LiveApi`](crate::server::run::lifecycle::LiveApi)).
pub struct Api {
    /// The index discovery answers from.
    pub engine: Arc<Engine>,
    /// Limits and access settings from the config.
    pub settings: ApiSettings,
    /// Whether the embedding model loaded, for `/health`.
    pub model: ModelState,
    /// Background rebuilds of `engine`: load problems, a failed rebuild
    /// and its retry, the directory watch.
    pub rebuilder: Arc<crate::rebuild::Rebuilder>,
    /// The Ollama-facing surface (chat bridge and pass-through).
    pub chat: Arc<ChatService>,
    /// The crawler, when `crawler.enabled`.
    pub crawler: Option<Arc<oap_crawl::Crawler>>,
    /// `crawler.fetch_timeout`: how long registration waits for the first fetch.
    pub crawler_fetch_timeout: std::time::Duration,
    /// The MCP servers whose tools are indexed (it outlives generations).
    pub mcp_servers: Arc<crate::mcp::McpServers>,
    /// The MCP server at `/mcp`; `None` when `mcp_server.enabled` is false.
    pub mcp: Option<Arc<super::mcp::McpServer>>,
    /// The generated request rows (it outlives generations).
    pub generator: Arc<crate::request_gen::RequestGenerator>,
    /// The daemon's snapshot subscription (`/health` `snapshot`).
    pub snapshots: Arc<crate::snapshots::Snapshots>,
}

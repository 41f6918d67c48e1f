//! Configuration of the `oapd` daemon.
//!
//! Sources, lowest precedence first:
//!
//! 1. the defaults compiled into the binary ([`Config::default`]);
//! 2. an optional YAML file (`config.yaml`, see `docs/config.example.yaml`);
//! 3. environment variables `OAP_<SECTION>_<KEY>`, e.g. `OAP_TOOL_BRIDGE_MAX_ROUNDS=5`.
//!
//! The file is parsed with `serde-saphyr` straight into the typed structs below
//! (every struct denies unknown keys, so a typo is an error rather than a silently
//! ignored setting). Environment overrides are then applied onto the typed value,
//! key by key, so an override always applies whether or not the file mentions the
//! key or even its section. Finally [`Config::validate`] checks ranges and formats.
//!
//! Every error names where the bad value came from: the file and the dotted key path
//! (with line and column), or the environment variable.
//!
//! The tree of sections below is plain data, as close to the file as
//! possible; the rest of the loading lives in submodules: `file` reads and
//! parses the YAML, `env` applies the environment (and holds the key table),
//! `validate` checks the result and `error` says what is wrong. The tool
//! bridge's sections are in `bridge`, the crawler's in `crawler`, the snapshot
//! subscription's in `snapshots`.

use std::fmt;
use std::marker::PhantomData;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::de::{self, Deserializer, SeqAccess, Visitor};
use serde::{Deserialize, Serialize};

mod bridge;
mod crawler;
mod env;
mod error;
mod file;
mod snapshots;
mod text;
mod validate;

pub use bridge::{ExperienceConfig, ToolBridgeConfig, UrlPolicy};
pub(crate) use crawler::parse_host_entry;
pub use crawler::CrawlerConfig;
pub use env::process_env;
pub use error::{ConfigError, Position, Problem};
pub use snapshots::SnapshotsConfig;
pub(crate) use validate::parse_log_filter;

use text::quote;

/// Largest config file accepted, in bytes. A config is a few kilobytes; anything
/// bigger is a mistake (wrong file) or an attack on a small board's memory.
pub const MAX_CONFIG_FILE_BYTES: u64 = 1024 * 1024;

/// Source name used in error messages for [`Config::from_yaml_str`].
const INLINE_SOURCE_NAME: &str = "config.yaml";

/// Placeholder shown instead of the bearer token by [`Config::effective_yaml`] and `Debug`.
pub const REDACTED: &str = "<redacted>";

/// Default in-flight body budget: room for a few image-carrying chats on a
/// 1 GB board (docs/BENCHMARKS.md, "Request-body memory").
pub const DEFAULT_INFLIGHT_BODY_BYTES: usize = 160 * 1024 * 1024;

/// Default budget of connections sending their head or idle between
/// requests (`server.max_pending_connections`): several times the keep-alive
/// pools of the clients a home server has, a few hundred kilobytes of sockets
/// and buffers at most on a Pi.
pub const DEFAULT_PENDING_CONNECTIONS: usize = 64;

// ---------------------------------------------------------------------------
// The configuration tree
// ---------------------------------------------------------------------------

/// The complete `oapd` configuration. Every section and key has a default, so an
/// empty (or absent) file is a valid configuration.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// HTTP server: listen addresses, request limits, timeouts and authentication.
    #[serde(deserialize_with = "null_as_default")]
    pub server: ServerConfig,
    /// On-disk vector index: where it lives and how vectors are stored.
    #[serde(deserialize_with = "null_as_default")]
    pub index: IndexConfig,
    /// Local sentence-embedding model used to embed manifests and tasks.
    #[serde(deserialize_with = "null_as_default")]
    pub embedding: EmbeddingConfig,
    /// Which OAP manifests are indexed.
    #[serde(deserialize_with = "null_as_default")]
    pub manifests: ManifestsConfig,
    /// `/v1/discover` ranking parameters.
    #[serde(deserialize_with = "null_as_default")]
    pub discovery: DiscoveryConfig,
    /// The Ollama tool bridge (`/v1/tools`, `/v1/chat`).
    #[serde(deserialize_with = "null_as_default")]
    pub tool_bridge: ToolBridgeConfig,
    /// The upstream Ollama server the chat proxy forwards to.
    #[serde(deserialize_with = "null_as_default")]
    pub ollama: OllamaConfig,
    /// How oapd's own tools are executed: credentials, reachable networks,
    /// local command directories, result sizes.
    #[serde(deserialize_with = "null_as_default")]
    pub tools: ToolsConfig,
    /// Logging output.
    #[serde(deserialize_with = "null_as_default")]
    pub log: LogConfig,
    /// The crawler: seed domains, schedule, fetch limits, directory watch.
    #[serde(deserialize_with = "null_as_default")]
    pub crawler: CrawlerConfig,
    /// The experience cache: tools that worked for similar tasks skip discovery.
    #[serde(deserialize_with = "null_as_default")]
    pub experience: ExperienceConfig,
    /// MCP servers whose tools are indexed and called like manifests.
    #[serde(deserialize_with = "null_as_default")]
    pub mcp: McpConfig,
    /// oapd as an MCP server at `/mcp` (streamable HTTP).
    #[serde(deserialize_with = "null_as_default")]
    pub mcp_server: McpServerConfig,
    /// The signed index snapshot this board pulls (off without `url`).
    #[serde(deserialize_with = "null_as_default")]
    pub snapshots: SnapshotsConfig,
}

/// `mcp:` section: the MCP servers the operator already runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct McpConfig {
    /// A Claude-Desktop style servers file (`{"mcpServers": {...}}`, as
    /// ollama-mcp-bridge, mcpo and fastmcp read it), read verbatim; a bad
    /// entry is reported with its path and the others load (default none).
    pub servers_file: Option<PathBuf>,
    /// Servers given here, keyed by name, each shaped like one
    /// `mcpServers` entry; a name here wins over the same name in the file
    /// (default none).
    pub servers: McpServers,
    /// Seconds a server has to connect and answer `initialize` before it
    /// is retried with backoff (default 10).
    pub init_timeout: u64,
    /// Seconds a tool call may take when the server sets no `timeout_ms`
    /// (default 60).
    pub call_timeout: u64,
}

impl Default for McpConfig {
    fn default() -> Self {
        Self {
            servers_file: None,
            servers: McpServers::default(),
            init_timeout: 10,
            call_timeout: 60,
        }
    }
}

/// Inline MCP servers: name → one `mcpServers` entry, kept as JSON so the
/// entries are read by the same parser as a servers file. `Debug` names
/// the servers only: their entries hold URLs, headers and environments.
#[derive(Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(transparent)]
pub struct McpServers(pub serde_json::Map<String, serde_json::Value>);

impl std::fmt::Debug for McpServers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_set().entries(self.0.keys()).finish()
    }
}

/// Largest `server.recent_requests`.
pub const MAX_RECENT_REQUESTS: usize = 1000;

/// The scopes a `server.clients` entry may hold, by name.
pub const CLIENT_SCOPES: &[&str] = &["chat", "passthrough"];

/// One `server.clients` entry: a program that cannot send a header (Home
/// Assistant's Ollama integration) gets a token of its own, carried in the
/// URL it is given (`http://board:8300/c/<token>`) or as a Basic password,
/// which opens only the route families of its `scopes` and never the
/// operator's actions. Its `name` is what logs, metrics and the status
/// page show; the token is never printed.
#[derive(Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClientConfig {
    /// Shown in `/v1/requests`, `/metrics` and `/ui`: letters, digits, `-`, `_`, `.`.
    pub name: String,
    /// The client's secret: letters, digits, `-`, `_`, `.`, `~` (it travels in
    /// a URL path), 16 characters or more advised.
    pub token: String,
    /// `chat` (the chat routes, `/api/generate`, `/mcp`, `/v1/discover`,
    /// `/v1/tools`) and/or `passthrough` (Ollama's other routes).
    pub scopes: Vec<String>,
}

impl fmt::Debug for ClientConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientConfig")
            .field("name", &self.name)
            .field("token", &REDACTED)
            .field("scopes", &self.scopes)
            .finish()
    }
}

/// `server.clients`: a list in YAML, a JSON array in `OAP_SERVER_CLIENTS`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ClientList(pub Vec<ClientConfig>);

/// `server:` section.
#[derive(Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ServerConfig {
    /// Socket addresses to listen on, as `IP:port` (`"0.0.0.0:8300"`, `"[::1]:8300"`).
    /// Several entries bind several sockets. Default: loopback only, so a fresh
    /// install is not reachable from the network until the operator decides so.
    #[serde(deserialize_with = "one_or_many")]
    pub listen: Vec<String>,
    /// Largest accepted request body in bytes (default 1 MiB). Bounds the memory one
    /// request can take on a small board; larger bodies get `413`.
    pub max_body_bytes: usize,
    /// Request-body bytes held in memory across all connections at once (default
    /// 160 MiB), counted from the first byte read until the request (chat loop
    /// included) is over. A body that does not fit in what is left gets `503` with
    /// `Retry-After` before it is read. At least `max_body_bytes` and
    /// `ollama.max_request_bytes`.
    pub max_inflight_body_bytes: usize,
    /// A `/v1/discover` (and `/v1/tools`) task whose UTF-8 length is this many bytes
    /// **or more** is refused (default 10 000: a task of 10 kB or more is refused).
    /// Keeps embedding cost per request bounded.
    pub max_task_bytes: usize,
    /// Seconds a request may take in total, from first byte to response, before it
    /// is aborted (default 30).
    pub request_timeout: u64,
    /// Seconds allowed to receive the request headers (default 10); protects against
    /// slow-loris clients holding connections open.
    pub header_read_timeout: u64,
    /// Maximum requests served at once (default 256): a connection takes one of
    /// these slots once it has sent a complete request head and gives it back
    /// when the answer is sent; further complete heads wait for a slot.
    pub max_connections: usize,
    /// Maximum connections still sending their request head or idle between
    /// requests (keep-alive), across all clients (default 64). When it is full,
    /// the oldest of them is closed to admit a new connection, so slow or
    /// silent clients, from however many addresses, cannot keep a prompt one
    /// out. A separate budget from `max_connections`.
    pub max_pending_connections: usize,
    /// Maximum simultaneous connections from one client IP address (default 32).
    /// A connection over it is answered 503 and closed at once, without taking
    /// one of `max_connections`, so one slow client cannot hold every slot.
    pub max_connections_per_client: usize,
    /// Bearer token required in `Authorization: Bearer <token>` on every API request.
    /// `None` (the default) disables authentication; only sensible with a loopback
    /// `listen` address. Never printed by `Debug` or [`Config::effective_yaml`].
    pub auth_token: Option<String>,
    /// Origins allowed by CORS (`"https://app.example"`, or `"*"` for any). Empty
    /// (the default) sends no CORS headers, so browsers on other origins are refused.
    #[serde(deserialize_with = "one_or_many")]
    pub cors_origins: Vec<String>,
    /// Named clients with tokens of their own and limited scopes
    /// ([`ClientConfig`]), for programs that can only be given a URL. Tokens
    /// are never printed by `Debug` or [`Config::effective_yaml`]. Default: none.
    pub clients: ClientList,
    /// Extra names every listener answers to in the `Host` header (e.g.
    /// `"pi.example.org"`), besides any IP address, `localhost`, the
    /// machine's hostname and `*.localhost`, `*.local`, `*.internal` names. Any
    /// other Host is refused with 403 (DNS rebinding protection), even with
    /// the token or from a `trusted_clients` address. Default: none.
    #[serde(deserialize_with = "one_or_many")]
    pub allowed_hosts: Vec<String>,
    /// Seconds in-flight requests may run after SIGTERM/SIGINT before they are
    /// cut (default 10); new connections are refused at once.
    pub shutdown_grace: u64,
    /// Client addresses (IPs or CIDR ranges, e.g. `192.168.1.0/24`) that may
    /// call without the bearer token, for clients that cannot send one.
    /// Host and Origin checks still apply. Default: none.
    #[serde(deserialize_with = "one_or_many")]
    pub trusted_clients: Vec<String>,
    /// Bridged requests `GET /v1/requests` keeps, newest first (default 50,
    /// at most 1000; 0 turns the list off). Names, outcomes and times only.
    pub recent_requests: usize,
    /// Whether message content, tool arguments and results may appear in
    /// debug log lines (truncated) and as `messages_preview` in
    /// `/v1/requests` (default false: never, at any log level).
    pub log_content: bool,
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            listen: vec!["127.0.0.1:8300".to_owned()],
            max_body_bytes: 1024 * 1024,
            max_inflight_body_bytes: DEFAULT_INFLIGHT_BODY_BYTES,
            max_task_bytes: 10_000,
            request_timeout: 30,
            header_read_timeout: 10,
            max_connections: 256,
            max_pending_connections: DEFAULT_PENDING_CONNECTIONS,
            max_connections_per_client: 32,
            auth_token: None,
            cors_origins: Vec::new(),
            clients: ClientList::default(),
            allowed_hosts: Vec::new(),
            shutdown_grace: 10,
            trusted_clients: Vec::new(),
            recent_requests: 50,
            log_content: false,
        }
    }
}

impl fmt::Debug for ServerConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServerConfig")
            .field("listen", &self.listen)
            .field("max_body_bytes", &self.max_body_bytes)
            .field("max_inflight_body_bytes", &self.max_inflight_body_bytes)
            .field("max_task_bytes", &self.max_task_bytes)
            .field("request_timeout", &self.request_timeout)
            .field("header_read_timeout", &self.header_read_timeout)
            .field("max_connections", &self.max_connections)
            .field("max_pending_connections", &self.max_pending_connections)
            .field(
                "max_connections_per_client",
                &self.max_connections_per_client,
            )
            .field("auth_token", &self.auth_token.as_ref().map(|_| REDACTED))
            .field("cors_origins", &self.cors_origins)
            .field("clients", &self.clients)
            .field("allowed_hosts", &self.allowed_hosts)
            .field("shutdown_grace", &self.shutdown_grace)
            .field("trusted_clients", &self.trusted_clients)
            .field("recent_requests", &self.recent_requests)
            .field("log_content", &self.log_content)
            .finish()
    }
}

impl ServerConfig {
    /// The `listen` entries parsed as socket addresses (already checked by
    /// [`Config::validate`]; an entry that does not parse is reported with its index).
    pub fn listen_addrs(&self) -> Result<Vec<SocketAddr>, ConfigError> {
        self.listen
            .iter()
            .enumerate()
            .map(|(i, s)| {
                s.parse::<SocketAddr>().map_err(|_| {
                    ConfigError::Invalid(vec![Problem::new(
                        format!("server.listen[{i}]"),
                        format!("not an IP:port socket address: {}", quote(s)),
                    )])
                })
            })
            .collect()
    }

    /// [`Self::request_timeout`] as a [`Duration`].
    pub fn request_timeout_duration(&self) -> Duration {
        Duration::from_secs(self.request_timeout)
    }

    /// [`Self::header_read_timeout`] as a [`Duration`].
    pub fn header_read_timeout_duration(&self) -> Duration {
        Duration::from_secs(self.header_read_timeout)
    }
}

/// How vectors are stored in the index.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum VectorDtype {
    /// 32-bit floats: exact scores, 4 bytes per dimension.
    #[default]
    F32,
    /// 8-bit quantised: a quarter of the memory, slightly approximate scores.
    I8,
}

/// Alias used by start-up code to tell the config enum apart from `oap_index::VectorDtype`.
pub type VectorDtypeConfig = VectorDtype;

/// Which sentence encoder discovery uses (`embedding.model`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum EmbeddingModel {
    /// all-MiniLM-L6-v2 (English), with the compiled-in tool tuning unless
    /// `embedding.tool_tuning: false`.
    #[default]
    #[serde(rename = "all-MiniLM-L6-v2")]
    AllMiniLmL6V2,
    /// multilingual-e5-small: requests in about a hundred languages find
    /// tools described in English. Three times the encoder work of MiniLM
    /// (twelve layers instead of six).
    #[serde(rename = "multilingual-e5-small")]
    MultilingualE5Small,
}

impl EmbeddingModel {
    /// The model's name: its `--model` for `cargo xtask fetch-model` and
    /// the name of the directory that command installs.
    pub fn name(self) -> &'static str {
        <Self as Named>::name(self)
    }

    /// The command that installs the model.
    pub fn fetch_command(self) -> String {
        match self {
            Self::AllMiniLmL6V2 => "cargo xtask fetch-model".to_owned(),
            other => format!("cargo xtask fetch-model --model {}", other.name()),
        }
    }
}

/// How the embedding model's linear layers keep their weights.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EmbeddingWeights {
    /// `bfloat16`: half the bytes each query reads, about a quarter less CPU
    /// per query; vectors within ~1e-3 of the checkpoint's.
    #[default]
    Bf16,
    /// The checkpoint's 32-bit floats, bit for bit.
    F32,
}

/// How `/v1/discover` ranks manifests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DiscoveryMode {
    /// Dense (embedding) and lexical scores fused.
    #[default]
    Hybrid,
    /// Embedding similarity only.
    Dense,
    /// Lexical (keyword) matching only; works without the embedding model.
    Lexical,
}

/// Log line format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// Human-readable lines (journald adds timestamps).
    #[default]
    Text,
    /// One JSON object per line, for log shippers.
    Json,
    /// Native journald entries with structured fields. `text` switches to
    /// this by itself when stderr is connected to the journal.
    Journald,
}

/// How strictly local (stdio) tools are confined by the kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SandboxMode {
    /// Every protection the kernel offers; what it lacks is logged at start
    /// and shown by `/health`.
    #[default]
    Auto,
    /// Tools do not run unless filesystem and system-call confinement are
    /// both active.
    Require,
    /// No confinement beyond resource limits: a model steered by anyone who
    /// reaches the daemon can run code as the daemon's user.
    Off,
}

impl Named for SandboxMode {
    const ALL: &'static [Self] = &[Self::Auto, Self::Require, Self::Off];
    fn name(self) -> &'static str {
        match self {
            Self::Auto => "auto",
            Self::Require => "require",
            Self::Off => "off",
        }
    }
}

impl From<SandboxMode> for oap_sandbox::Mode {
    fn from(mode: SandboxMode) -> Self {
        match mode {
            SandboxMode::Auto => oap_sandbox::Mode::Auto,
            SandboxMode::Require => oap_sandbox::Mode::Require,
            SandboxMode::Off => oap_sandbox::Mode::Off,
        }
    }
}

/// Closed set of string values, for environment parsing and error messages.
trait Named: Sized + Copy + 'static {
    const ALL: &'static [Self];
    fn name(self) -> &'static str;
}

impl Named for VectorDtype {
    const ALL: &'static [Self] = &[Self::F32, Self::I8];
    fn name(self) -> &'static str {
        match self {
            Self::F32 => "f32",
            Self::I8 => "i8",
        }
    }
}

impl Named for EmbeddingModel {
    const ALL: &'static [Self] = &[Self::AllMiniLmL6V2, Self::MultilingualE5Small];
    fn name(self) -> &'static str {
        match self {
            Self::AllMiniLmL6V2 => "all-MiniLM-L6-v2",
            Self::MultilingualE5Small => "multilingual-e5-small",
        }
    }
}

impl Named for EmbeddingWeights {
    const ALL: &'static [Self] = &[Self::Bf16, Self::F32];
    fn name(self) -> &'static str {
        match self {
            Self::Bf16 => "bf16",
            Self::F32 => "f32",
        }
    }
}

impl Named for DiscoveryMode {
    const ALL: &'static [Self] = &[Self::Hybrid, Self::Dense, Self::Lexical];
    fn name(self) -> &'static str {
        match self {
            Self::Hybrid => "hybrid",
            Self::Dense => "dense",
            Self::Lexical => "lexical",
        }
    }
}

impl Named for LogFormat {
    const ALL: &'static [Self] = &[Self::Text, Self::Json, Self::Journald];
    fn name(self) -> &'static str {
        match self {
            Self::Text => "text",
            Self::Json => "json",
            Self::Journald => "journald",
        }
    }
}

macro_rules! display_named {
    ($($t:ty),*) => {$(
        impl fmt::Display for $t {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.name())
            }
        }
    )*};
}
display_named!(VectorDtype, DiscoveryMode, LogFormat, SandboxMode);

/// `index:` section.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct IndexConfig {
    /// Directory holding the index files. Default `./data` (relative to the working
    /// directory); the appliance sets `/var/lib/oapd`.
    pub data_dir: PathBuf,
    /// Element type of stored vectors: `f32` (exact) or `i8` (4x smaller).
    pub vector_dtype: VectorDtype,
    /// Threads used for a search; `None` (default) lets the engine decide from the
    /// number of CPUs.
    pub search_threads: Option<usize>,
    /// Most texts `serve` embeds before it is ready. When a start must embed
    /// more (a damaged or missing index, a new model, a large catalog
    /// change), the daemon becomes ready at once with the index serving
    /// lexically and embeds them in the background, switching to hybrid
    /// when done. `oapd index` always embeds everything.
    pub start_embed_limit: usize,
    /// Index files whose vectors are taken for identical texts (same model,
    /// same text) instead of embedding them: the shard indexes a
    /// distributed build assembles into one snapshot. One that is missing
    /// or unreadable is skipped with a warning.
    pub vector_donors: Vec<PathBuf>,
}

impl Default for IndexConfig {
    fn default() -> Self {
        Self {
            data_dir: PathBuf::from("./data"),
            vector_dtype: VectorDtype::F32,
            search_threads: None,
            start_embed_limit: oap_discovery::engine::DEFAULT_START_EMBED_LIMIT,
            vector_donors: Vec::new(),
        }
    }
}

/// `embedding:` section.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct EmbeddingConfig {
    /// Load the embedding model. `false` runs lexical-only discovery (saves ~40 MB
    /// of RAM with the default `bf16` weights, ~60 MB with `f32`, and the model
    /// load time).
    pub enabled: bool,
    /// The encoder (`all-MiniLM-L6-v2`, the default, or
    /// `multilingual-e5-small`). Changing it changes the model id, so the
    /// index is re-embedded.
    pub model: EmbeddingModel,
    /// Directory with the model (`config.json`, `tokenizer.json`, `model.safetensors`).
    /// When it is the directory of another known model (the default,
    /// `models/all-MiniLM-L6-v2`, is), the selected model's directory next
    /// to it is used: [`EmbeddingConfig::model_path`].
    pub model_dir: PathBuf,
    /// Input length in tokens; longer texts are truncated. MiniLM supports up to 512;
    /// 256 is what it was trained with.
    pub max_tokens: usize,
    /// Texts embedded per forward pass when (re)indexing; bounds peak memory.
    pub batch_size: usize,
    /// Threads for model inference; `None` (default) uses the engine's default.
    pub threads: Option<usize>,
    /// Precision of the model's weights in memory (`bf16` or `f32`).
    /// Changing it changes the model id, so the index is re-embedded.
    pub weights: EmbeddingWeights,
    /// Merge the compiled-in tool-retrieval tuning into all-MiniLM-L6-v2's
    /// weights (default `true`); other models load as they are. Changing it
    /// changes the model id, so the index is re-embedded.
    pub tool_tuning: bool,
}

impl Default for EmbeddingConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            model: EmbeddingModel::default(),
            model_dir: PathBuf::from("models/all-MiniLM-L6-v2"),
            max_tokens: 256,
            batch_size: 16,
            threads: None,
            weights: EmbeddingWeights::default(),
            tool_tuning: true,
        }
    }
}

impl EmbeddingConfig {
    /// The directory the selected model loads from: `model_dir`, unless
    /// that ends in the name of another known model (as the default
    /// `models/all-MiniLM-L6-v2` and the packaged
    /// `/usr/share/oapd/models/all-MiniLM-L6-v2` do), in which case the
    /// selected model's directory beside it. Choosing a model is then
    /// enough wherever the models are installed side by side.
    pub fn model_path(&self) -> PathBuf {
        let names_other = <EmbeddingModel as Named>::ALL.iter().any(|m| {
            *m != self.model
                && self
                    .model_dir
                    .file_name()
                    .is_some_and(|n| n == std::ffi::OsStr::new(m.name()))
        });
        if names_other {
            self.model_dir.with_file_name(self.model.name())
        } else {
            self.model_dir.clone()
        }
    }
}

/// `manifests:` section.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ManifestsConfig {
    /// Index the manifests compiled into the binary (default `true`).
    pub bundled: bool,
    /// Extra directories of operator-provided manifests (default none).
    #[serde(deserialize_with = "one_or_many")]
    pub dirs: Vec<PathBuf>,
}

impl Default for ManifestsConfig {
    fn default() -> Self {
        Self {
            bundled: true,
            dirs: Vec::new(),
        }
    }
}

/// `discovery:` section.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DiscoveryConfig {
    /// Results returned when a request gives no `top_k` (default 5).
    pub default_top_k: usize,
    /// Largest `top_k` a request may ask for (default 20); larger values are clamped.
    pub max_top_k: usize,
    /// Score below which the best candidate is not a fitting capability, so
    /// discovery answers "no fitting capability" (`match: null`). Unset (the
    /// default) uses the engine's threshold for the active mode, calibrated on
    /// the retrieval benchmark (docs/BENCHMARKS.md).
    pub min_score: Option<f32>,
    /// Ranking mode: `hybrid` (default), `dense` or `lexical`.
    pub mode: DiscoveryMode,
    /// Query embeddings kept for repeated query texts, so a repeat skips
    /// the encoder (default 256, about 1 MiB at most; 0 disables).
    pub query_cache: usize,
    /// Query embeddings that arrive while the encoder is busy are embedded
    /// together in its next forward pass, at most this many texts per pass
    /// (0 or 1, the default, embeds each query alone). A query that finds
    /// the encoder idle runs at once. Off by default: the packed batch pass
    /// saves CPU per query, but on a machine shared with other busy
    /// processes one pass at a time gets less of the CPU than many separate
    /// passes and served fewer requests/s (docs/BENCHMARKS.md).
    pub coalesce_queries: usize,
    /// Ask the co-located Ollama, in the background, for a few requests a
    /// user might say for each capability that has none of its own (no
    /// example descriptions in its manifest, none shipped with it); they
    /// are cached in the data directory and embedded as request rows
    /// (default true). Off: no generation and no generated rows (the cache
    /// is kept for when it is turned on again).
    pub generate_requests: bool,
    /// The Ollama model that writes them (`name[:tag]` as `ollama list`
    /// shows it). Unset (the default): the installed model that wrote the
    /// cached rows, else the first model Ollama's `/api/tags` lists that
    /// can complete text, so pulling another model does not make every
    /// capability's requests be written again.
    pub generate_model: Option<String>,
    /// At most this many generation calls to Ollama per hour (default 30,
    /// 1 .. 3600); one at a time, only while no chat goes through oapd.
    pub generate_per_hour: usize,
}

impl Default for DiscoveryConfig {
    fn default() -> Self {
        Self {
            default_top_k: 5,
            max_top_k: 20,
            min_score: None,
            mode: DiscoveryMode::Hybrid,
            query_cache: oap_discovery::DEFAULT_QUERY_CACHE,
            coalesce_queries: 0,
            generate_requests: true,
            generate_model: None,
            generate_per_hour: 30,
        }
    }
}

/// `tools:` section.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ToolsConfig {
    /// Credential store (YAML or JSON, keyed by domain) used for manifests
    /// with `auth`; must be owned by the daemon's user with mode 0600.
    /// Unset: no credentials, so tools that need auth report it.
    pub credentials_file: Option<PathBuf>,
    /// Extra CA certificates (PEM) trusted by HTTP tools and MCP URL
    /// servers, for LAN services with their own CA. Unset: only the
    /// built-in Mozilla roots.
    pub ca_file: Option<PathBuf>,
    /// Address ranges HTTP tools of any trust level may reach (CIDR, e.g.
    /// `192.168.1.0/24`). Internet manifests are otherwise refused
    /// loopback, private, link-local, CGNAT and metadata addresses.
    pub allow_private: Vec<String>,
    /// Directories local (stdio) tools' executables may live in; also
    /// their `PATH`.
    pub stdio_dirs: Vec<PathBuf>,
    /// Characters of a tool result the model sees (the rest is cut with a note).
    pub max_result_chars: usize,
    /// Bytes of an HTTP tool response read at most.
    pub max_response_bytes: usize,
    /// Tool calls of one model turn run at most this many at a time.
    pub max_parallel: usize,
    /// Kernel confinement of stdio tools: `auto`, `require` or `off`.
    pub sandbox: SandboxMode,
    /// Extra paths stdio tools may read (and execute) below, beside the
    /// system directories and `stdio_dirs`.
    pub sandbox_read_paths: Vec<PathBuf>,
    /// Programs (command names) allowed to start processes inside the
    /// sandbox; every other tool is refused fork/clone.
    pub sandbox_spawn: Vec<String>,
    /// Total bytes a local tool may write in its scratch directory (a
    /// tmpfs of this size when the daemon runs as root, else watched).
    pub max_scratch_bytes: u64,
}

impl Default for ToolsConfig {
    fn default() -> Self {
        Self {
            credentials_file: None,
            ca_file: None,
            allow_private: Vec::new(),
            stdio_dirs: vec![
                PathBuf::from("/usr/bin"),
                PathBuf::from("/bin"),
                PathBuf::from("/usr/local/bin"),
            ],
            max_result_chars: 16_000,
            max_response_bytes: 1024 * 1024,
            max_parallel: 4,
            sandbox: SandboxMode::Auto,
            sandbox_read_paths: Vec::new(),
            sandbox_spawn: vec!["man".to_owned()],
            max_scratch_bytes: oap_exec::StdioLimits::default().max_scratch_bytes,
        }
    }
}

/// `ollama:` section.
#[derive(Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct OllamaConfig {
    /// Base URL of the Ollama server (`http://` or `https://`, optionally with a path
    /// prefix when behind a reverse proxy). Default: the local Ollama.
    pub base_url: String,
    /// Seconds to wait for Ollama's response headers (default 300: loading a
    /// model from an SD card is slow); streamed bodies may run longer.
    pub timeout: u64,
    /// Seconds one bridged chat request may take in all, every tool round
    /// and tool call included (default 300).
    pub chat_deadline: u64,
    /// Largest chat request body accepted, in bytes (default 64 MiB: chat
    /// requests carry base64 images).
    pub max_request_bytes: usize,
    /// PEM file of CA certificates trusted for an `https://` `base_url`
    /// besides the Mozilla roots (a private CA). Default: none.
    pub ca_file: Option<PathBuf>,
    /// Credential for a reverse proxy in front of Ollama, sent as
    /// `Authorization: Bearer <api_key>` on every request to Ollama. Never
    /// logged; redacted by `Debug` and [`Config::effective_yaml`]. Default: none.
    pub api_key: Option<String>,
}

impl fmt::Debug for OllamaConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OllamaConfig")
            .field("base_url", &self.base_url)
            .field("timeout", &self.timeout)
            .field("chat_deadline", &self.chat_deadline)
            .field("max_request_bytes", &self.max_request_bytes)
            .field("ca_file", &self.ca_file)
            .field("api_key", &self.api_key.as_ref().map(|_| REDACTED))
            .finish()
    }
}

impl Default for OllamaConfig {
    fn default() -> Self {
        Self {
            base_url: "http://127.0.0.1:11434".to_owned(),
            timeout: 300,
            chat_deadline: 300,
            max_request_bytes: 64 * 1024 * 1024,
            ca_file: None,
            api_key: None,
        }
    }
}

impl OllamaConfig {
    /// `base_url` joined with an API path, with exactly one `/` between them:
    /// `endpoint("/api/chat")` → `http://127.0.0.1:11434/api/chat`.
    pub fn endpoint(&self, path: &str) -> String {
        format!(
            "{}/{}",
            self.base_url.trim_end_matches('/'),
            path.trim_start_matches('/')
        )
    }
}

/// `log:` section.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LogConfig {
    /// Level (`trace`, `debug`, `info`, `warn`, `error`, `off`) or a
    /// `tracing-subscriber` filter directive such as `info,oapd=debug`.
    pub level: String,
    /// `text` (default) or `json`.
    pub format: LogFormat,
}

impl Default for LogConfig {
    fn default() -> Self {
        Self {
            level: "info".to_owned(),
            format: LogFormat::Text,
        }
    }
}

/// `mcp_server:` section.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct McpServerConfig {
    /// Serve MCP clients at `/mcp` (default `true`): the meta tools
    /// `oap_discover` and `oap_invoke` over streamable HTTP, behind the same
    /// token, Host/Origin and body limits as every other route. `false`:
    /// `/mcp` answers 404.
    pub enabled: bool,
}

impl Default for McpServerConfig {
    fn default() -> Self {
        Self { enabled: true }
    }
}

// ---------------------------------------------------------------------------
// Serde helpers for the file
// ---------------------------------------------------------------------------

/// A section written as `section:` with nothing under it (YAML null) means "all defaults".
fn null_as_default<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de> + Default,
{
    Ok(Option::<T>::deserialize(deserializer)?.unwrap_or_default())
}

/// A list key accepts a list, a single string (a one-element list) or null (empty).
fn one_or_many<'de, D, T>(deserializer: D) -> Result<Vec<T>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de> + From<String>,
{
    struct OneOrMany<T>(PhantomData<T>);

    impl<'de, T> Visitor<'de> for OneOrMany<T>
    where
        T: Deserialize<'de> + From<String>,
    {
        type Value = Vec<T>;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a list of strings")
        }

        fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
            Ok(vec![T::from(v.to_owned())])
        }

        fn visit_string<E: de::Error>(self, v: String) -> Result<Self::Value, E> {
            Ok(vec![T::from(v)])
        }

        fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok(Vec::new())
        }

        fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok(Vec::new())
        }

        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
            let mut out = Vec::new();
            while let Some(item) = seq.next_element::<T>()? {
                out.push(item);
            }
            Ok(out)
        }
    }

    deserializer.deserialize_any(OneOrMany(PhantomData))
}

// ---------------------------------------------------------------------------
// Loading
// ---------------------------------------------------------------------------

/// An `OAP_*` environment variable that was applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnvOverride {
    /// The variable name, e.g. `OAP_TOOL_BRIDGE_MAX_ROUNDS`.
    pub var: String,
    /// The key it set, e.g. `tool_bridge.max_rounds`.
    pub key: String,
}

/// Result of loading: the configuration and what the caller should log once
/// logging is set up (logging itself is configured from this result).
#[derive(Debug, Clone)]
pub struct Loaded {
    /// The validated configuration.
    pub config: Config,
    /// The file that was read, if any.
    pub file: Option<PathBuf>,
    /// Environment variables that overrode keys, sorted by variable name.
    pub env_overrides: Vec<EnvOverride>,
    /// Non-fatal findings: ignored `OAP_*` variables that match no section, and
    /// suspicious but valid settings. Log each at `warn`.
    pub warnings: Vec<String>,
}

impl Config {
    /// Load defaults < the YAML file at `path` (if given) < `OAP_*` variables in `env`,
    /// then validate.
    ///
    /// `path: None` means defaults plus environment. A given path that does not exist
    /// is an error. Pass `process_env()` as `env` in the daemon and an explicit list
    /// in tests.
    pub fn load<I>(path: Option<&Path>, env: I) -> Result<Loaded, ConfigError>
    where
        I: IntoIterator<Item = (String, String)>,
    {
        let config = match path {
            Some(path) => {
                let text = file::read_config_file(path)?;
                file::parse_yaml(&path.display().to_string(), &text)?
            }
            None => Config::default(),
        };
        finish(config, path.map(Path::to_path_buf), env)
    }

    /// Like [`Config::load`] with the file contents given as text (errors name the
    /// source `config.yaml`). The same size limit applies.
    pub fn from_yaml_str<I>(yaml: &str, env: I) -> Result<Loaded, ConfigError>
    where
        I: IntoIterator<Item = (String, String)>,
    {
        if yaml.len() as u64 > MAX_CONFIG_FILE_BYTES {
            return Err(ConfigError::TooLarge {
                path: PathBuf::from(INLINE_SOURCE_NAME),
                size: Some(yaml.len() as u64),
                limit: MAX_CONFIG_FILE_BYTES,
            });
        }
        let config = file::parse_yaml(INLINE_SOURCE_NAME, yaml)?;
        finish(config, None, env)
    }

    /// The configuration as YAML, for `oapd config show`. The bearer token, if set,
    /// is replaced by `REDACTED`.
    pub fn effective_yaml(&self) -> String {
        let mut shown = self.clone();
        if shown.server.auth_token.is_some() {
            shown.server.auth_token = Some(REDACTED.to_owned());
        }
        for client in &mut shown.server.clients.0 {
            client.token = REDACTED.to_owned();
        }
        if shown.ollama.api_key.is_some() {
            shown.ollama.api_key = Some(REDACTED.to_owned());
        }
        // MCP servers' headers and environments carry tokens and keys, a
        // URL's query string and user info too.
        for server in shown.mcp.servers.0.values_mut() {
            if let Some(url) = server.get_mut("url") {
                if let Some(text) = url.as_str() {
                    *url = oap_mcp::redact::url_text(text).into();
                }
            }
            for secret in ["headers", "env"] {
                if let Some(map) = server.get_mut(secret).and_then(|v| v.as_object_mut()) {
                    for value in map.values_mut() {
                        *value = REDACTED.into();
                    }
                }
            }
        }
        match serde_saphyr::to_string(&shown) {
            Ok(yaml) => yaml,
            // Not expected for these plain types; JSON is valid YAML, so fall back to it.
            Err(_) => serde_json::to_string_pretty(&shown)
                .unwrap_or_else(|e| format!("# cannot serialize the configuration: {e}\n")),
        }
    }
}

/// Apply the environment, validate, and gather warnings.
fn finish<I>(mut config: Config, file: Option<PathBuf>, env: I) -> Result<Loaded, ConfigError>
where
    I: IntoIterator<Item = (String, String)>,
{
    let mut warnings = Vec::new();
    let env_overrides = env::apply_env(&mut config, env, &mut warnings)?;
    match config.validate() {
        Ok(more) => warnings.extend(more),
        Err(ConfigError::Invalid(mut problems)) => {
            for p in &mut problems {
                let base = p.key.split('[').next().unwrap_or(&p.key);
                p.env_var = env_overrides
                    .iter()
                    .find(|o| o.key == base)
                    .map(|o| o.var.clone());
            }
            return Err(ConfigError::Invalid(problems));
        }
        Err(other) => return Err(other),
    }
    Ok(Loaded {
        config,
        file,
        env_overrides,
        warnings,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn no_env() -> Vec<(String, String)> {
        Vec::new()
    }

    #[test]
    fn named_enums_round_trip_through_serde() {
        fn check<T: Named + Serialize + for<'de> Deserialize<'de> + PartialEq + fmt::Debug>() {
            for v in T::ALL {
                let json = serde_json::to_value(v).expect("serialize");
                assert_eq!(json, serde_json::Value::String(v.name().to_owned()));
                let back: T = serde_json::from_value(json).expect("deserialize");
                assert_eq!(&back, v);
            }
        }
        check::<VectorDtype>();
        check::<EmbeddingModel>();
        check::<DiscoveryMode>();
        check::<LogFormat>();
    }

    #[test]
    fn choosing_a_model_picks_its_directory_beside_the_default_one() {
        let yaml = "embedding:\n  model: multilingual-e5-small\n";
        let loaded = Config::from_yaml_str(yaml, no_env()).expect("load");
        let em = &loaded.config.embedding;
        assert_eq!(em.model, EmbeddingModel::MultilingualE5Small);
        assert_eq!(
            em.model_path(),
            PathBuf::from("models/multilingual-e5-small")
        );

        let packaged = EmbeddingConfig {
            model: EmbeddingModel::MultilingualE5Small,
            model_dir: PathBuf::from("/usr/share/oapd/models/all-MiniLM-L6-v2"),
            ..EmbeddingConfig::default()
        };
        assert_eq!(
            packaged.model_path(),
            PathBuf::from("/usr/share/oapd/models/multilingual-e5-small")
        );
        // A directory of the operator's own is taken as it is.
        let own = EmbeddingConfig {
            model: EmbeddingModel::MultilingualE5Small,
            model_dir: PathBuf::from("/srv/e5"),
            ..EmbeddingConfig::default()
        };
        assert_eq!(own.model_path(), PathBuf::from("/srv/e5"));
        assert_eq!(
            EmbeddingConfig::default().model_path(),
            PathBuf::from("models/all-MiniLM-L6-v2")
        );
        assert_eq!(
            EmbeddingModel::MultilingualE5Small.fetch_command(),
            "cargo xtask fetch-model --model multilingual-e5-small"
        );
    }

    #[test]
    fn an_unknown_model_is_refused_naming_the_setting_and_the_choices() {
        let err = Config::from_yaml_str("embedding:\n  model: bge-small\n", no_env())
            .expect_err("unknown model")
            .to_string();
        assert!(
            err.contains("embedding.model") && err.contains("multilingual-e5-small"),
            "{err}"
        );
        let env = vec![(
            "OAP_EMBEDDING_MODEL".to_owned(),
            "Multilingual-E5-Small".to_owned(),
        )];
        let loaded = Config::load(None, env).expect("environment");
        assert_eq!(
            loaded.config.embedding.model,
            EmbeddingModel::MultilingualE5Small
        );
    }

    #[test]
    fn defaults_validate_without_warnings() {
        assert_eq!(
            Config::default().validate().expect("valid"),
            Vec::<String>::new()
        );
        let loaded = Config::load(None, no_env()).expect("load");
        assert_eq!(loaded.config, Config::default());
    }
}

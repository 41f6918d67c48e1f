//! The settings each feature of the bridge reads: the `tool_bridge:` and
//! `experience:` sections of the daemon's configuration. The daemon's
//! config loader owns parsing, environment overrides and validation; these
//! are the types it fills.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// `experience:` section.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ExperienceConfig {
    /// Remember which tool succeeded for a task and serve it to close tasks.
    pub enabled: bool,
    /// Cosine similarity (0..1) between task embeddings for a cache hit.
    pub min_similarity: f32,
    /// Seconds an entry lives after its last success.
    pub ttl: u64,
    /// Entries kept at most; the least recently used go first.
    pub max_entries: usize,
}

impl Default for ExperienceConfig {
    fn default() -> Self {
        Self {
            enabled: false,
            min_similarity: 0.9,
            ttl: 30 * 24 * 3600,
            max_entries: 1000,
        }
    }
}

/// How oapd's tools are shown to the model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ToolExposure {
    /// The discovered tools, each with its own definition.
    #[default]
    Direct,
    /// Two meta-tools: `oap_discover(task)` and `oap_invoke(tool, arguments)`.
    Meta,
}

/// What happens to a URL in an answer that no tool result returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum UrlPolicy {
    /// Answers pass unchanged.
    Off,
    /// The URL stays, followed by a visible "(unverified link)" mark.
    #[default]
    Flag,
    /// The URL is replaced by "[link removed]".
    Remove,
}

impl ToolExposure {
    /// The name used in config files and the environment.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Direct => "direct",
            Self::Meta => "meta",
        }
    }
}

impl UrlPolicy {
    /// The name used in config files and the environment.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Off => "off",
            Self::Flag => "flag",
            Self::Remove => "remove",
        }
    }
}

impl fmt::Display for ToolExposure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Display for UrlPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `tool_bridge:` section (keys and defaults as in the OAP tool-bridge document).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ToolBridgeConfig {
    /// Master switch for the `/v1/tools` and `/v1/chat` endpoints.
    pub enabled: bool,
    /// Manifests discovered per request when the request gives no `top_k` (1..=20).
    pub default_top_k: usize,
    /// Cap on tool-call rounds per chat request (1..=10); the per-request
    /// `oap_max_rounds` is clamped to it.
    pub max_rounds: u32,
    /// Seconds to wait for an HTTP tool invocation.
    pub http_timeout: u64,
    /// Seconds to wait for a stdio tool invocation.
    pub stdio_timeout: u64,
    /// Inject tools only into models with a passing `oapd validate-model`
    /// verdict in the validation store; other models pass through untouched.
    pub only_validated_models: bool,
    /// Cap on the estimated prompt tokens of oapd's injected tool
    /// definitions per request; 0 means unlimited (see `exposure.rs`).
    pub tool_token_budget: usize,
    /// `direct` (the discovered tools themselves) or `meta` (two tools,
    /// `oap_discover` and `oap_invoke`).
    pub exposure: ToolExposure,
    /// What happens to URLs in an answer that no tool result (and no user
    /// message) contained: `off`, `flag` or `remove`.
    pub url_policy: UrlPolicy,
    /// Per-manifest-id overrides of `url_policy`, applied when that tool is
    /// offered in a request (the strictest override offered wins).
    pub url_policy_tools: BTreeMap<String, UrlPolicy>,
    /// Forced tools: when `pattern` matches the latest user message, the
    /// bridge offers `tool` and makes sure it is called (see `forcing.rs`).
    pub force: ForceRules,
    /// Seconds of silence after which a streamed answer gets a keep-alive
    /// frame (an empty NDJSON delta, an SSE comment), so clients and proxies
    /// see a live connection while the model loads or a tool round runs.
    pub stream_keepalive: u64,
    /// Model-name prefixes (`gemma3`, `llama3.2`, ...) whose tool calls
    /// printed as text are taken as calls to oapd's own tools: the whole
    /// answer a `{"name", "arguments"}` object or `<tool_call>` block naming
    /// an offered tool of oapd's (see `printed.rs`); `[]` turns it off.
    pub text_tool_calls: Vec<String>,
    /// Bounds of the `/v1/responses` store (`previous_response_id`).
    pub response_store: ResponseStoreConfig,
}

/// `tool_bridge.response_store`: how much of their past responses the
/// Responses API clients may keep in the daemon's memory.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ResponseStoreConfig {
    /// Responses kept per client.
    pub per_client: usize,
    /// Bytes (of JSON) kept per client.
    pub per_client_bytes: usize,
    /// Bytes kept for all clients together.
    pub total_bytes: usize,
    /// Clients with responses kept at once.
    pub clients: usize,
    /// Seconds after which a response is forgotten.
    pub max_age: u64,
}

impl Default for ResponseStoreConfig {
    /// A chat app continues its last few responses; an hour covers a
    /// conversation paused for a while, and 16 MiB in all stays small next
    /// to the model and the index on a board.
    fn default() -> Self {
        Self {
            per_client: 32,
            per_client_bytes: 4 * 1024 * 1024,
            total_bytes: 16 * 1024 * 1024,
            clients: 64,
            max_age: 3600,
        }
    }
}

/// `tool_bridge.force`: a list of `{pattern, tool, case_insensitive}`; in
/// the environment, the same as a JSON array.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ForceRules(pub Vec<ForceRule>);

/// One forced-tool rule.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ForceRule {
    /// Regular expression (Rust `regex` syntax, compiled size-limited).
    pub pattern: String,
    /// Manifest id (as `/v1/tools` shows it, e.g. `local/date`) or tool
    /// name (`oap_date`).
    pub tool: String,
    /// Match ignoring case (default true).
    #[serde(default = "yes")]
    pub case_insensitive: bool,
}

fn yes() -> bool {
    true
}

impl Default for ToolBridgeConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            default_top_k: 3,
            max_rounds: 3,
            http_timeout: 30,
            stdio_timeout: 10,
            tool_token_budget: 0,
            exposure: ToolExposure::Direct,
            url_policy: UrlPolicy::Flag,
            url_policy_tools: BTreeMap::new(),
            force: ForceRules::default(),
            stream_keepalive: 10,
            only_validated_models: false,
            text_tool_calls: vec!["gemma3".into(), "llama3.2".into()],
            response_store: ResponseStoreConfig::default(),
        }
    }
}

impl ToolBridgeConfig {
    /// [`Self::http_timeout`] as a [`Duration`].
    pub fn http_timeout_duration(&self) -> Duration {
        Duration::from_secs(self.http_timeout)
    }

    /// [`Self::stdio_timeout`] as a [`Duration`].
    pub fn stdio_timeout_duration(&self) -> Duration {
        Duration::from_secs(self.stdio_timeout)
    }
}

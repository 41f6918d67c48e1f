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

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt;
use std::marker::PhantomData;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::de::{self, Deserializer, SeqAccess, Visitor};
use serde::{Deserialize, Serialize};

pub use oap_bridge::{
    ExperienceConfig, ForceRule, ForceRules, ToolBridgeConfig, ToolExposure, UrlPolicy,
};

/// Largest config file accepted, in bytes. A config is a few kilobytes; anything
/// bigger is a mistake (wrong file) or an attack on a small board's memory.
pub const MAX_CONFIG_FILE_BYTES: u64 = 1024 * 1024;

/// Prefix of every environment variable that configures `oapd`.
pub const ENV_PREFIX: &str = "OAP_";

/// `OAP_*` variables that are not config keys (they are read elsewhere, e.g. the
/// path of the config file itself) and are therefore skipped without a warning.
pub const NON_CONFIG_ENV_VARS: &[&str] = &["OAP_CONFIG"];

/// Source name used in error messages for [`Config::from_yaml_str`].
const INLINE_SOURCE_NAME: &str = "config.yaml";

/// Placeholder shown instead of the bearer token by [`Config::effective_yaml`] and `Debug`.
pub const REDACTED: &str = "<redacted>";

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
    pub crawler: crate::crawl::CrawlerConfig,
    /// The experience cache: tools that worked for similar tasks skip discovery.
    #[serde(deserialize_with = "null_as_default")]
    pub experience: ExperienceConfig,
}

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
    /// Maximum simultaneous client connections (default 256); further connections
    /// wait in the kernel backlog. Bounds memory and file descriptors.
    pub max_connections: usize,
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
    /// Extra names a loopback listener answers to in the `Host` header (e.g.
    /// `"pi.example.org"`), besides loopback and private IPs, `localhost`, the
    /// machine's hostname and `*.localhost`, `*.local`, `*.internal` names. Any
    /// other Host is refused with 403 (DNS rebinding protection). Default: none.
    #[serde(deserialize_with = "one_or_many")]
    pub allowed_hosts: Vec<String>,
    /// Seconds in-flight requests may run after SIGTERM/SIGINT before they are
    /// cut (default 10); new connections are refused at once.
    pub shutdown_grace: u64,
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            listen: vec!["127.0.0.1:8300".to_owned()],
            max_body_bytes: 1024 * 1024,
            max_inflight_body_bytes: crate::http::DEFAULT_INFLIGHT_BODY_BYTES,
            max_task_bytes: 10_000,
            request_timeout: 30,
            header_read_timeout: 10,
            max_connections: 256,
            max_connections_per_client: 32,
            auth_token: None,
            cors_origins: Vec::new(),
            allowed_hosts: Vec::new(),
            shutdown_grace: 10,
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
            .field(
                "max_connections_per_client",
                &self.max_connections_per_client,
            )
            .field("auth_token", &self.auth_token.as_ref().map(|_| REDACTED))
            .field("cors_origins", &self.cors_origins)
            .field("allowed_hosts", &self.allowed_hosts)
            .field("shutdown_grace", &self.shutdown_grace)
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

impl Named for ToolExposure {
    const ALL: &'static [Self] = &[Self::Direct, Self::Meta];
    fn name(self) -> &'static str {
        match self {
            Self::Direct => "direct",
            Self::Meta => "meta",
        }
    }
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

impl Named for UrlPolicy {
    const ALL: &'static [Self] = &[Self::Off, Self::Flag, Self::Remove];
    fn name(self) -> &'static str {
        match self {
            Self::Off => "off",
            Self::Flag => "flag",
            Self::Remove => "remove",
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
}

impl Default for IndexConfig {
    fn default() -> Self {
        Self {
            data_dir: PathBuf::from("./data"),
            vector_dtype: VectorDtype::F32,
            search_threads: None,
        }
    }
}

/// `embedding:` section.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct EmbeddingConfig {
    /// Load the embedding model. `false` runs lexical-only discovery (saves ~100 MB
    /// of RAM and the model load time).
    pub enabled: bool,
    /// Directory with the model (`config.json`, `tokenizer.json`, `model.safetensors`).
    pub model_dir: PathBuf,
    /// Input length in tokens; longer texts are truncated. MiniLM supports up to 512;
    /// 256 is what it was trained with.
    pub max_tokens: usize,
    /// Texts embedded per forward pass when (re)indexing; bounds peak memory.
    pub batch_size: usize,
    /// Threads for model inference; `None` (default) uses the engine's default.
    pub threads: Option<usize>,
}

impl Default for EmbeddingConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            model_dir: PathBuf::from("models/all-MiniLM-L6-v2"),
            max_tokens: 256,
            batch_size: 16,
            threads: None,
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
}

impl Default for DiscoveryConfig {
    fn default() -> Self {
        Self {
            default_top_k: 5,
            max_top_k: 20,
            min_score: None,
            mode: DiscoveryMode::Hybrid,
        }
    }
}

impl EnvValue for ForceRules {
    fn parse_env(raw: &str) -> Result<Self, String> {
        if raw.trim().is_empty() {
            return Ok(ForceRules::default());
        }
        serde_json::from_str(raw)
            .map_err(|e| format!("expected a JSON array of {{\"pattern\", \"tool\"}} objects: {e}"))
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
}

impl Default for ToolsConfig {
    fn default() -> Self {
        Self {
            credentials_file: None,
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
        }
    }
}

/// `ollama:` section.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
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
}

impl Default for OllamaConfig {
    fn default() -> Self {
        Self {
            base_url: "http://127.0.0.1:11434".to_owned(),
            timeout: 300,
            chat_deadline: 300,
            max_request_bytes: 64 * 1024 * 1024,
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
// Key table (drives environment overrides, suggestions and completeness tests)
// ---------------------------------------------------------------------------

macro_rules! config_keys {
    ($($section:ident { $($key:ident),* $(,)? })*) => {
        /// Every section and its keys, in declaration order.
        const SECTIONS: &[(&str, &[&str])] = &[
            $( (stringify!($section), &[ $(stringify!($key)),* ]) ),*
        ];

        /// Parse `raw` into `config.<section>.<key>`. `None` if the key does not exist.
        fn set_from_env(
            config: &mut Config,
            section: &str,
            key: &str,
            raw: &str,
        ) -> Option<Result<(), String>> {
            match (section, key) {
                $($(
                    (stringify!($section), stringify!($key)) => {
                        Some(parse_into(&mut config.$section.$key, raw))
                    }
                )*)*
                _ => None,
            }
        }
    };
}

config_keys! {
    server {
        listen, max_body_bytes, max_inflight_body_bytes, max_task_bytes, request_timeout,
        header_read_timeout, max_connections, max_connections_per_client, auth_token,
        cors_origins, allowed_hosts, shutdown_grace,
    }
    index { data_dir, vector_dtype, search_threads }
    embedding { enabled, model_dir, max_tokens, batch_size, threads }
    manifests { bundled, dirs }
    discovery { default_top_k, max_top_k, min_score, mode }
    tool_bridge {
        enabled, default_top_k, max_rounds, http_timeout, stdio_timeout, only_validated_models,
        tool_token_budget, exposure, url_policy, url_policy_tools, force, stream_keepalive,
    }
    ollama { base_url, timeout, chat_deadline, max_request_bytes }
    tools {
        credentials_file, allow_private, stdio_dirs, max_result_chars, max_response_bytes,
        max_parallel, sandbox, sandbox_read_paths, sandbox_spawn,
    }
    log { level, format }
    crawler {
        enabled, seeds, seeds_file, interval, jitter, retry_base, max_failures, fetch_timeout,
        round_timeout, concurrency, max_domains, ca_file, allow_private, hosts, watch_interval,
        check_txt, mdns,
    }
    experience { enabled, min_similarity, ttl, max_entries }
}

/// Environment variable name for a key: `("tool_bridge", "max_rounds")` →
/// `OAP_TOOL_BRIDGE_MAX_ROUNDS`.
pub fn env_var_name(section: &str, key: &str) -> String {
    format!(
        "{ENV_PREFIX}{}_{}",
        section.to_ascii_uppercase(),
        key.to_ascii_uppercase()
    )
}

// ---------------------------------------------------------------------------
// Typed parsing of environment values
// ---------------------------------------------------------------------------

/// A config value that can be parsed from an environment variable.
trait EnvValue: Sized {
    fn parse_env(raw: &str) -> Result<Self, String>;
}

fn parse_into<T: EnvValue>(slot: &mut T, raw: &str) -> Result<(), String> {
    *slot = T::parse_env(raw)?;
    Ok(())
}

impl EnvValue for bool {
    fn parse_env(raw: &str) -> Result<Self, String> {
        match raw.to_ascii_lowercase().as_str() {
            "true" | "1" | "yes" => Ok(true),
            "false" | "0" | "no" => Ok(false),
            _ => Err(format!(
                "expected a boolean (true/false/1/0/yes/no), got {}",
                quote(raw)
            )),
        }
    }
}

/// Strict unsigned decimal: ASCII digits only, no sign, no spaces, no `_`, no `0x`.
fn parse_uint(raw: &str, max: u64) -> Result<u64, String> {
    if raw.is_empty() || !raw.bytes().all(|b| b.is_ascii_digit()) {
        let negative = raw
            .strip_prefix('-')
            .is_some_and(|d| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit()));
        return Err(if negative {
            format!("expected a non-negative integer, got {}", quote(raw))
        } else {
            format!("expected an integer, got {}", quote(raw))
        });
    }
    match raw.parse::<u64>() {
        Ok(v) if v <= max => Ok(v),
        _ => Err(format!(
            "integer out of range (max {max}), got {}",
            quote(raw)
        )),
    }
}

macro_rules! env_uint {
    ($($t:ty),*) => {$(
        impl EnvValue for $t {
            fn parse_env(raw: &str) -> Result<Self, String> {
                let v = parse_uint(raw, <$t>::MAX as u64)?;
                <$t>::try_from(v).map_err(|_| {
                    format!("integer out of range (max {}), got {}", <$t>::MAX, quote(raw))
                })
            }
        }
    )*};
}
env_uint!(u32, u64, usize);

impl EnvValue for f32 {
    fn parse_env(raw: &str) -> Result<Self, String> {
        match raw.parse::<f32>() {
            Ok(v) if v.is_finite() => Ok(v),
            _ => Err(format!("expected a finite number, got {}", quote(raw))),
        }
    }
}

impl EnvValue for String {
    fn parse_env(raw: &str) -> Result<Self, String> {
        Ok(raw.to_owned())
    }
}

impl EnvValue for PathBuf {
    fn parse_env(raw: &str) -> Result<Self, String> {
        Ok(PathBuf::from(raw))
    }
}

/// An empty value means `None`.
impl<T: EnvValue> EnvValue for Option<T> {
    fn parse_env(raw: &str) -> Result<Self, String> {
        if raw.is_empty() {
            Ok(None)
        } else {
            T::parse_env(raw).map(Some)
        }
    }
}

/// Comma-separated; items are trimmed; an empty (or all-blank) value is an empty list.
impl<T: EnvValue> EnvValue for Vec<T> {
    fn parse_env(raw: &str) -> Result<Self, String> {
        if raw.trim().is_empty() {
            return Ok(Vec::new());
        }
        raw.split(',')
            .enumerate()
            .map(|(i, item)| {
                let item = item.trim();
                if item.is_empty() {
                    Err(format!(
                        "item {} of the comma-separated list is empty, in {}",
                        i + 1,
                        quote(raw)
                    ))
                } else {
                    T::parse_env(item)
                }
            })
            .collect()
    }
}

macro_rules! env_named {
    ($($t:ty),*) => {$(
        /// Case-insensitive in the environment.
        impl EnvValue for $t {
            fn parse_env(raw: &str) -> Result<Self, String> {
                <$t as Named>::ALL
                    .iter()
                    .copied()
                    .find(|v| v.name().eq_ignore_ascii_case(raw))
                    .ok_or_else(|| format!(
                        "expected one of {}, got {}",
                        one_of(<$t as Named>::ALL.iter().map(|v| v.name())),
                        quote(raw)
                    ))
            }
        }
    )*};
}
env_named!(
    VectorDtype,
    DiscoveryMode,
    LogFormat,
    ToolExposure,
    UrlPolicy,
    SandboxMode
);

/// `key=value` pairs, comma-separated (e.g. `OAP_TOOL_BRIDGE_URL_POLICY_TOOLS=a.example=off`):
/// the key is everything before the last `=`.
impl<T: EnvValue> EnvValue for BTreeMap<String, T> {
    fn parse_env(raw: &str) -> Result<Self, String> {
        let mut map = BTreeMap::new();
        for item in raw.split(',').map(str::trim).filter(|i| !i.is_empty()) {
            let Some((key, value)) = item.rsplit_once('=') else {
                return Err(format!("expected key=value pairs, got {}", quote(item)));
            };
            if key.trim().is_empty() {
                return Err(format!("empty key in {}", quote(item)));
            }
            map.insert(key.trim().to_string(), T::parse_env(value.trim())?);
        }
        Ok(map)
    }
}

// ---------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------

/// One semantic problem found by [`Config::validate`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// Dotted key path, e.g. `tool_bridge.max_rounds` or `server.listen[1]`.
    pub key: String,
    /// What is wrong, e.g. `must be between 1 and 10, got 11`.
    pub message: String,
    /// The environment variable that set the key, if it came from the environment.
    pub env_var: Option<String>,
}

impl Problem {
    fn new(key: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            key: key.into(),
            message: message.into(),
            env_var: None,
        }
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.key, self.message)?;
        if let Some(var) = &self.env_var {
            write!(f, " (set by {var})")?;
        }
        Ok(())
    }
}

/// A line/column position in the config file (1-based).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Position {
    /// 1-based line.
    pub line: u64,
    /// 1-based column.
    pub column: u64,
}

impl fmt::Display for Position {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line {}, column {}", self.line, self.column)
    }
}

fn at(pos: &Option<Position>) -> String {
    pos.map(|p| format!(" at {p}")).unwrap_or_default()
}

fn did_you_mean(suggestion: &Option<String>) -> String {
    suggestion
        .as_ref()
        .map(|s| format!(" (did you mean \"{s}\"?)"))
        .unwrap_or_default()
}

/// Why the configuration could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The config file could not be opened or read (including: it does not exist).
    #[error("{}: cannot read config file: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The config path is a FIFO, directory, socket or device: refused
    /// before it is opened for reading, so it cannot block.
    #[error("{}: the config file is {kind}, not a regular file", path.display())]
    NotRegularFile {
        /// The path given.
        path: PathBuf,
        /// What it is ("a FIFO (named pipe)", "a directory", ...).
        kind: &'static str,
    },
    /// The config file exceeds [`MAX_CONFIG_FILE_BYTES`].
    #[error(
        "{}: config file is too large ({}; the limit is {limit} bytes)",
        path.display(),
        size.map_or_else(|| "more than the limit".to_owned(), |s| format!("{s} bytes"))
    )]
    TooLarge {
        /// The file (or `config.yaml` for inline text).
        path: PathBuf,
        /// Its size, when known.
        size: Option<u64>,
        /// The limit in bytes.
        limit: u64,
    },
    /// The config file is not UTF-8.
    #[error("{}: config file is not valid UTF-8 (first bad byte at offset {offset})", path.display())]
    NotUtf8 {
        /// The file.
        path: PathBuf,
        /// Byte offset of the first invalid byte.
        offset: usize,
    },
    /// YAML syntax error, or a document that is not a mapping of sections.
    #[error("{source_name}: {message}{}", at(position))]
    Syntax {
        /// File name as given (or `config.yaml` for inline text).
        source_name: String,
        /// What the parser reported.
        message: String,
        /// Where.
        position: Option<Position>,
    },
    /// A key in the file that the configuration does not have.
    #[error(
        "{source_name}: unknown key \"{key}\"{}{}",
        did_you_mean(suggestion),
        at(position)
    )]
    UnknownKey {
        /// File name as given.
        source_name: String,
        /// Full dotted path of the unknown key, e.g. `tool_bridge.max_round`.
        key: String,
        /// The closest valid key name in the same section, if one is close.
        suggestion: Option<String>,
        /// Where.
        position: Option<Position>,
    },
    /// A value in the file has the wrong type or spelling.
    #[error("{source_name}: {key}: {message}{}", at(position))]
    InvalidValue {
        /// File name as given.
        source_name: String,
        /// Full dotted path, e.g. `tool_bridge.max_rounds`.
        key: String,
        /// e.g. `expected an integer, got "three"`.
        message: String,
        /// Where.
        position: Option<Position>,
    },
    /// A bad `OAP_*` environment variable: unknown key of a known section, or a
    /// value of the wrong type.
    #[error("{var}: {message}")]
    Env {
        /// The variable, e.g. `OAP_TOOL_BRIDGE_MAX_ROUNDS`.
        var: String,
        /// e.g. `expected an integer, got "x"`.
        message: String,
    },
    /// Values that parse but are out of range or inconsistent (all problems found).
    #[error("invalid configuration: {}", join_problems(.0))]
    Invalid(Vec<Problem>),
}

fn join_problems(problems: &[Problem]) -> String {
    problems
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
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
    /// is an error. Pass [`process_env()`] as `env` in the daemon and an explicit list
    /// in tests.
    pub fn load<I>(path: Option<&Path>, env: I) -> Result<Loaded, ConfigError>
    where
        I: IntoIterator<Item = (String, String)>,
    {
        let config = match path {
            Some(path) => {
                let text = read_config_file(path)?;
                parse_yaml(&path.display().to_string(), &text)?
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
        let config = parse_yaml(INLINE_SOURCE_NAME, yaml)?;
        finish(config, None, env)
    }

    /// Check ranges, formats and cross-key constraints. Returns non-fatal warnings,
    /// or every problem found.
    pub fn validate(&self) -> Result<Vec<String>, ConfigError> {
        let mut c = Checker::default();
        let s = &self.server;

        if s.listen.is_empty() {
            c.fail("server.listen", "at least one address is required");
        }
        for (i, addr) in s.listen.iter().enumerate() {
            let key = format!("server.listen[{i}]");
            match addr.parse::<SocketAddr>() {
                Err(_) => c.fail(
                    key,
                    format!(
                        "not an IP:port socket address (e.g. \"0.0.0.0:8300\", \"[::1]:8300\"): {}",
                        quote(addr)
                    ),
                ),
                Ok(parsed) => {
                    let dup = s.listen[..i]
                        .iter()
                        .any(|o| o.parse::<SocketAddr>().ok() == Some(parsed));
                    if dup {
                        c.fail(key, format!("duplicate address {}", quote(addr)));
                    }
                }
            }
        }
        c.range(
            "server.max_body_bytes",
            s.max_body_bytes,
            1024,
            256 * 1024 * 1024,
        );
        c.range(
            "server.max_task_bytes",
            s.max_task_bytes,
            1,
            s.max_body_bytes.max(1),
        );
        c.range("server.request_timeout", s.request_timeout, 1, 3600);
        c.range("server.header_read_timeout", s.header_read_timeout, 1, 3600);
        c.range("server.max_connections", s.max_connections, 1, 65_536);
        c.range(
            "server.max_connections_per_client",
            s.max_connections_per_client,
            1,
            65_536,
        );
        c.range("server.shutdown_grace", s.shutdown_grace, 1, 3600);
        if let Some(token) = &s.auth_token {
            if token.is_empty() {
                c.fail(
                    "server.auth_token",
                    "is empty; remove the key (or set it to null) to disable authentication",
                );
            } else if !token.bytes().all(|b| b.is_ascii_graphic()) {
                c.fail(
                    "server.auth_token",
                    "may contain only visible ASCII characters (no spaces), as it is sent in an HTTP header",
                );
            } else if token.len() < 16 {
                c.warnings.push(
                    "server.auth_token is shorter than 16 characters; use a long random token"
                        .to_owned(),
                );
            }
        } else if s
            .listen
            .iter()
            .filter_map(|a| a.parse::<SocketAddr>().ok())
            .any(|a| !a.ip().is_loopback())
        {
            c.warnings.push(
                "server.listen includes a non-loopback address and server.auth_token is not set: the API is open to the network"
                    .to_owned(),
            );
        }
        for (i, origin) in s.cors_origins.iter().enumerate() {
            if origin != "*" {
                if let Err(msg) = check_http_url(origin, true) {
                    c.fail(format!("server.cors_origins[{i}]"), msg);
                }
            }
        }
        for (i, host) in s.allowed_hosts.iter().enumerate() {
            if let Err(msg) = crate::guard::check_host_name(host) {
                c.fail(format!("server.allowed_hosts[{i}]"), msg);
            }
        }

        let ix = &self.index;
        if ix.data_dir.as_os_str().is_empty() {
            c.fail("index.data_dir", "must not be empty");
        }
        if let Some(n) = ix.search_threads {
            c.range("index.search_threads", n, 1, 1024);
        }

        let em = &self.embedding;
        if em.model_dir.as_os_str().is_empty() {
            c.fail("embedding.model_dir", "must not be empty");
        }
        c.range("embedding.max_tokens", em.max_tokens, 1, 512);
        c.range("embedding.batch_size", em.batch_size, 1, 1024);
        if let Some(n) = em.threads {
            c.range("embedding.threads", n, 1, 1024);
        }

        let mf = &self.manifests;
        for (i, dir) in mf.dirs.iter().enumerate() {
            if dir.as_os_str().is_empty() {
                c.fail(format!("manifests.dirs[{i}]"), "must not be empty");
            }
        }
        if !mf.bundled && mf.dirs.is_empty() {
            c.warnings.push(
                "manifests.bundled is false and manifests.dirs is empty: the index will have no manifests"
                    .to_owned(),
            );
        }

        let d = &self.discovery;
        c.range("discovery.max_top_k", d.max_top_k, 1, 100);
        c.range(
            "discovery.default_top_k",
            d.default_top_k,
            1,
            d.max_top_k.max(1),
        );
        if let Some(min_score) = d.min_score.filter(|s| !s.is_finite()) {
            c.fail(
                "discovery.min_score",
                format!("must be a finite number, got {min_score}"),
            );
        }
        if !em.enabled && d.mode != DiscoveryMode::Lexical {
            c.warnings.push(format!(
                "discovery.mode is {} but embedding.enabled is false: only lexical ranking is possible",
                d.mode
            ));
        }

        let tb = &self.tool_bridge;
        c.range("tool_bridge.default_top_k", tb.default_top_k, 1, 20);
        if tb.default_top_k > d.max_top_k {
            c.fail(
                "tool_bridge.default_top_k",
                format!(
                    "is {} but discovery.max_top_k is {}; it must not exceed it",
                    tb.default_top_k, d.max_top_k
                ),
            );
        }
        c.range("tool_bridge.max_rounds", tb.max_rounds, 1, 10);
        c.range("tool_bridge.http_timeout", tb.http_timeout, 1, 3600);
        c.range("tool_bridge.stdio_timeout", tb.stdio_timeout, 1, 3600);
        c.range("tool_bridge.stream_keepalive", tb.stream_keepalive, 1, 300);
        for (i, rule) in tb.force.0.iter().enumerate() {
            if let Err(message) = crate::forcing::compile(rule) {
                c.fail(format!("tool_bridge.force[{i}].pattern"), message);
            }
            if rule.tool.trim().is_empty() {
                c.fail(
                    format!("tool_bridge.force[{i}].tool"),
                    "must name a manifest id or tool",
                );
            }
        }
        if tb.tool_token_budget != 0 {
            c.range(
                "tool_bridge.tool_token_budget",
                tb.tool_token_budget,
                50,
                1_000_000,
            );
        }

        let ex = &self.experience;
        if !(0.0..=1.0).contains(&ex.min_similarity) {
            c.fail(
                "experience.min_similarity",
                format!("must be between 0 and 1, got {}", ex.min_similarity),
            );
        }
        c.range("experience.ttl", ex.ttl, 60, 10 * 365 * 24 * 3600);
        c.range("experience.max_entries", ex.max_entries, 1, 100_000);

        let tools = &self.tools;
        c.range(
            "tools.max_result_chars",
            tools.max_result_chars,
            100,
            10_000_000,
        );
        c.range(
            "tools.max_response_bytes",
            tools.max_response_bytes,
            1024,
            1024 * 1024 * 1024,
        );
        c.range("tools.max_parallel", tools.max_parallel, 1, 64);
        for (i, range) in tools.allow_private.iter().enumerate() {
            if range.parse::<oap_exec::Cidr>().is_err() {
                c.fail(
                    format!("tools.allow_private[{i}]"),
                    format!("expected an address or CIDR range like 192.168.1.0/24, got {range:?}"),
                );
            }
        }
        for (i, dir) in tools.stdio_dirs.iter().enumerate() {
            if !dir.is_absolute() {
                c.fail(
                    format!("tools.stdio_dirs[{i}]"),
                    format!("must be an absolute path, got {}", dir.display()),
                );
            }
        }
        for (i, path) in tools.sandbox_read_paths.iter().enumerate() {
            if !path.is_absolute() {
                c.fail(
                    format!("tools.sandbox_read_paths[{i}]"),
                    format!("must be an absolute path, got {}", path.display()),
                );
            }
        }
        for (i, name) in tools.sandbox_spawn.iter().enumerate() {
            if name.is_empty() || name.contains('/') || name.chars().any(char::is_control) {
                c.fail(
                    format!("tools.sandbox_spawn[{i}]"),
                    format!("must be a bare command name such as man, got {name:?}"),
                );
            }
        }
        c.range("ollama.timeout", self.ollama.timeout, 1, 3600);
        c.range("ollama.chat_deadline", self.ollama.chat_deadline, 1, 3600);
        c.range(
            "ollama.max_request_bytes",
            self.ollama.max_request_bytes,
            1024,
            1024 * 1024 * 1024,
        );
        let largest_body = self
            .server
            .max_body_bytes
            .max(self.ollama.max_request_bytes);
        if self.server.max_inflight_body_bytes < largest_body {
            c.fail(
                "server.max_inflight_body_bytes",
                format!(
                    "must be at least the largest single body allowed \
                     (server.max_body_bytes, ollama.max_request_bytes: {largest_body}), got {}",
                    self.server.max_inflight_body_bytes
                ),
            );
        }
        c.range(
            "server.max_inflight_body_bytes",
            self.server.max_inflight_body_bytes,
            1024 * 1024,
            4095 * 1024 * 1024,
        );
        if let Err(msg) = check_http_url(&self.ollama.base_url, false) {
            c.fail("ollama.base_url", msg);
        }

        if let Err(msg) = check_log_level(&self.log.level) {
            c.fail("log.level", msg);
        }

        for (key, message) in self.crawler.problems() {
            c.fail(key, message);
        }

        if c.problems.is_empty() {
            Ok(c.warnings)
        } else {
            Err(ConfigError::Invalid(c.problems))
        }
    }

    /// The configuration as YAML, for `oapd config show`. The bearer token, if set,
    /// is replaced by [`REDACTED`].
    pub fn effective_yaml(&self) -> String {
        let mut shown = self.clone();
        if shown.server.auth_token.is_some() {
            shown.server.auth_token = Some(REDACTED.to_owned());
        }
        match serde_saphyr::to_string(&shown) {
            Ok(yaml) => yaml,
            // Not expected for these plain types; JSON is valid YAML, so fall back to it.
            Err(_) => serde_json::to_string_pretty(&shown)
                .unwrap_or_else(|e| format!("# cannot serialize the configuration: {e}\n")),
        }
    }

    /// Every config key as `(environment variable, dotted key)`, in file order,
    /// e.g. `("OAP_TOOL_BRIDGE_MAX_ROUNDS", "tool_bridge.max_rounds")`.
    pub fn env_vars() -> Vec<(String, String)> {
        SECTIONS
            .iter()
            .flat_map(|(section, keys)| {
                keys.iter()
                    .map(move |key| (env_var_name(section, key), format!("{section}.{key}")))
            })
            .collect()
    }
}

/// The process environment's `OAP_*` variables, for [`Config::load`]. Values that are
/// not valid Unicode are converted lossily (and will then fail validation if the key
/// needs a number, a boolean, ...), instead of panicking like `std::env::vars`.
pub fn process_env() -> Vec<(String, String)> {
    std::env::vars_os()
        .filter_map(|(name, value)| {
            let name = name.into_string().ok()?;
            name.starts_with(ENV_PREFIX)
                .then(|| (name, value.to_string_lossy().into_owned()))
        })
        .collect()
}

fn read_config_file(path: &Path) -> Result<String, ConfigError> {
    use crate::files::ReadError;
    // Never blocks: a FIFO, device or directory is refused from its stat,
    // and the read stops after the limit.
    let bytes = crate::files::read_regular(path, MAX_CONFIG_FILE_BYTES).map_err(|e| match e {
        ReadError::Io(source) => ConfigError::Read {
            path: path.to_path_buf(),
            source,
        },
        ReadError::NotRegular(kind) => ConfigError::NotRegularFile {
            path: path.to_path_buf(),
            kind,
        },
        ReadError::TooLarge { size, .. } => ConfigError::TooLarge {
            path: path.to_path_buf(),
            size,
            limit: MAX_CONFIG_FILE_BYTES,
        },
    })?;
    let mut text = String::from_utf8(bytes).map_err(|e| ConfigError::NotUtf8 {
        path: path.to_path_buf(),
        offset: e.utf8_error().valid_up_to(),
    })?;
    if text.starts_with('\u{feff}') {
        text.drain(..'\u{feff}'.len_utf8());
    }
    Ok(text)
}

fn parse_yaml(source_name: &str, text: &str) -> Result<Config, ConfigError> {
    let mut options = serde_saphyr::Options::default();
    options.with_snippet = false;
    let mut error_path: Option<String> = None;
    let parsed = serde_saphyr::with_deserializer_from_str_with_options(text, options, |de| {
        serde_path_to_error::deserialize::<_, Option<Config>>(de).map_err(|e| {
            error_path = Some(e.path().to_string());
            e.into_inner()
        })
    });
    match parsed {
        Ok(config) => Ok(config.unwrap_or_default()),
        Err(err) => Err(yaml_error(source_name, text, error_path, &err)),
    }
}

/// Apply the environment, validate, and gather warnings.
fn finish<I>(mut config: Config, file: Option<PathBuf>, env: I) -> Result<Loaded, ConfigError>
where
    I: IntoIterator<Item = (String, String)>,
{
    let mut warnings = Vec::new();
    let env_overrides = apply_env(&mut config, env, &mut warnings)?;
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

/// Find the section an `OAP_` variable belongs to: the longest section whose upper-case
/// name is followed by `_` (or ends the name). Returns the section and the key part.
fn match_section(rest: &str) -> Option<(&'static str, &'static [&'static str], Option<&str>)> {
    SECTIONS
        .iter()
        .filter_map(|&(section, keys)| {
            let upper = section.to_ascii_uppercase();
            if rest == upper {
                Some((section, keys, None))
            } else {
                rest.strip_prefix(upper.as_str())
                    .and_then(|r| r.strip_prefix('_'))
                    .map(|key| (section, keys, Some(key)))
            }
        })
        .max_by_key(|(section, _, _)| section.len())
}

fn apply_env<I>(
    config: &mut Config,
    env: I,
    warnings: &mut Vec<String>,
) -> Result<Vec<EnvOverride>, ConfigError>
where
    I: IntoIterator<Item = (String, String)>,
{
    let mut vars: Vec<(String, String)> = env
        .into_iter()
        .filter(|(name, _)| name.starts_with(ENV_PREFIX))
        .collect();
    // Deterministic order (and error reporting); stable, so a repeated name's last
    // value wins.
    vars.sort_by(|a, b| a.0.cmp(&b.0));

    let mut overrides: Vec<EnvOverride> = Vec::new();
    for (var, raw) in vars {
        if NON_CONFIG_ENV_VARS.contains(&var.as_str()) {
            continue;
        }
        let Some(rest) = var.strip_prefix(ENV_PREFIX) else {
            continue;
        };
        let Some((section, keys, key_part)) = match_section(rest) else {
            warnings.push(format!(
                "{var}: ignored, it matches no config section{}",
                section_hint(rest)
            ));
            continue;
        };
        let key_upper = key_part.unwrap_or("");
        let Some(&key) = keys.iter().find(|k| k.to_ascii_uppercase() == key_upper) else {
            let key_lower = key_upper.to_ascii_lowercase();
            let hint = match closest(&key_lower, keys.iter().copied()) {
                Some(k) => format!(" (did you mean {}?)", env_var_name(section, k)),
                None => format!(
                    " (keys of {section}: {})",
                    keys.iter()
                        .map(|k| k.to_ascii_uppercase())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            };
            let what = if key_part.is_none() {
                format!("names the section \"{section}\" but no key")
            } else {
                format!("unknown key \"{section}.{key_lower}\"")
            };
            return Err(ConfigError::Env {
                var,
                message: format!("{what}{hint}"),
            });
        };
        match set_from_env(config, section, key, &raw) {
            Some(Ok(())) => {}
            Some(Err(message)) => return Err(ConfigError::Env { var, message }),
            // Unreachable: `key` comes from the same table as `set_from_env`.
            None => {
                return Err(ConfigError::Env {
                    var,
                    message: format!("internal error: no setter for {section}.{key}"),
                })
            }
        }
        let key_path = format!("{section}.{key}");
        overrides.retain(|o| o.var != var);
        overrides.push(EnvOverride { var, key: key_path });
    }
    Ok(overrides)
}

/// ` (did you mean OAP_TOOL_BRIDGE_...?)` for a near-miss section name.
fn section_hint(rest: &str) -> String {
    let mut best: Option<(usize, &str)> = None;
    for (section, _) in SECTIONS {
        let upper = section.to_ascii_uppercase();
        // Compare the section name with the variable's head of the same length, one
        // shorter and one longer (a dropped or doubled letter).
        for n in [upper.len() - 1, upper.len(), upper.len() + 1] {
            let Some(head) = rest.get(..n.min(rest.len())) else {
                continue;
            };
            let d = levenshtein(head, &upper);
            let limit = if upper.len() < 6 { 1 } else { 2 };
            if d <= limit && best.is_none_or(|(bd, _)| d < bd) {
                best = Some((d, section));
            }
        }
    }
    best.map(|(_, s)| {
        format!(
            " (did you mean {ENV_PREFIX}{}_...?)",
            s.to_ascii_uppercase()
        )
    })
    .unwrap_or_default()
}

// ---------------------------------------------------------------------------
// Turning serde-saphyr errors into ConfigError
// ---------------------------------------------------------------------------

fn yaml_error(
    source_name: &str,
    text: &str,
    path: Option<String>,
    err: &serde_saphyr::Error,
) -> ConfigError {
    use serde_saphyr::Error as E;

    let inner = unwrap_yaml_error(err);
    let location = inner.location().or_else(|| err.location());
    let position = location.filter(|l| l.line() > 0).map(|l| Position {
        line: l.line(),
        column: l.column(),
    });
    let raw = location.and_then(|l| {
        let span = l.span();
        let start = usize::try_from(span.byte_offset()?).ok()?;
        let len = usize::try_from(span.byte_len()?).ok()?;
        let line = text.get(start..)?.lines().next().unwrap_or("");
        Some(Raw {
            value: text.get(start..start.checked_add(len)?)?,
            line,
        })
    });
    // serde_path_to_error writes `?` for a key it could not capture.
    let path = path
        .map(|p| p.trim_end_matches(".?").trim_end_matches('?').to_owned())
        .filter(|p| !p.is_empty() && p != ".");
    let source_name = source_name.to_owned();

    match inner {
        E::SerdeUnknownField {
            field, expected, ..
        } => ConfigError::UnknownKey {
            source_name,
            key: path.unwrap_or_else(|| field.clone()),
            suggestion: closest(field, expected.iter().copied()).map(str::to_owned),
            position,
        },
        E::DuplicateMappingKey { key, .. } => {
            let name = key.clone().unwrap_or_else(|| "?".to_owned());
            ConfigError::InvalidValue {
                source_name,
                key: match path {
                    Some(full) if full == name || full.ends_with(&format!(".{name}")) => full,
                    Some(parent) => format!("{parent}.{name}"),
                    None => name,
                },
                message: "duplicate key: each key may appear only once".to_owned(),
                position,
            }
        }
        E::ExternalMessage { .. } => ConfigError::Syntax {
            source_name,
            message: format!("YAML syntax error: {}", yaml_message(inner)),
            position,
        },
        _ => match path {
            Some(key) => ConfigError::InvalidValue {
                source_name,
                key,
                message: describe_value_error(inner, raw),
                position,
            },
            None => {
                let message = match inner {
                    E::Unexpected { expected, .. } if expected.contains("mapping") => format!(
                        "the top level must be a mapping of sections ({}), got {}",
                        SECTIONS
                            .iter()
                            .map(|(s, _)| format!("{s}:"))
                            .collect::<Vec<_>>()
                            .join(", "),
                        describe_raw(raw)
                    ),
                    _ => yaml_message(inner).into_owned(),
                };
                ConfigError::Syntax {
                    source_name,
                    message,
                    position,
                }
            }
        },
    }
}

fn unwrap_yaml_error(mut err: &serde_saphyr::Error) -> &serde_saphyr::Error {
    loop {
        match err {
            serde_saphyr::Error::WithSnippet { error, .. }
            | serde_saphyr::Error::AliasError { error, .. } => err = error,
            _ => return err,
        }
    }
}

/// serde-saphyr's own message text, without location, control characters neutralised.
fn yaml_message(err: &serde_saphyr::Error) -> Cow<'static, str> {
    use serde_saphyr::MessageFormatter as _;
    let msg = serde_saphyr::DefaultMessageFormatter.format_message(err);
    Cow::Owned(
        msg.chars()
            .map(|c| if c.is_control() { ' ' } else { c })
            .collect(),
    )
}

/// The source text at an error's location.
#[derive(Clone, Copy)]
struct Raw<'a> {
    /// The text of the offending node as spanned by the parser (may be empty).
    value: &'a str,
    /// The rest of the line from the node's start, to recognise `- item` and `[`/`{`.
    line: &'a str,
}

fn describe_value_error(err: &serde_saphyr::Error, raw: Option<Raw<'_>>) -> String {
    use serde_saphyr::Error as E;
    match err {
        E::InvalidScalar { ty, .. } => describe_scalar_mismatch(ty, raw),
        E::SerdeInvalidType {
            unexpected,
            expected,
            ..
        }
        | E::SerdeInvalidValue {
            unexpected,
            expected,
            ..
        } => format!(
            "expected {}, got {}",
            friendly_expected(expected),
            friendly_unexpected(unexpected)
        ),
        E::SerdeUnknownVariant {
            variant, expected, ..
        } => format!(
            "expected one of {}, got {}",
            one_of(expected.iter().copied()),
            quote(variant)
        ),
        E::Unexpected { expected, .. } => {
            format!(
                "expected {}, got {}",
                friendly_expected(expected),
                describe_raw(raw)
            )
        }
        E::NullIntoString { .. } => "expected a string, got an empty value".to_owned(),
        E::ExternallyTaggedEnumExpectedScalarOrMapping { .. } => {
            format!("expected a single word, got {}", describe_raw(raw))
        }
        _ => yaml_message(err).into_owned(),
    }
}

fn describe_scalar_mismatch(ty: &str, raw: Option<Raw<'_>>) -> String {
    let unsigned_max = match ty {
        "u8" => Some(u64::from(u8::MAX)),
        "u16" => Some(u64::from(u16::MAX)),
        "u32" => Some(u64::from(u32::MAX)),
        "u64" => Some(u64::MAX),
        "usize" => Some(usize::MAX as u64),
        _ => None,
    };
    let got = describe_raw(raw);
    if let Some(max) = unsigned_max {
        let text = raw.map(|r| unquote(r.value.trim())).unwrap_or("");
        let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
        if digits(text) {
            return format!("integer out of range (max {max}), got {got}");
        }
        if text.strip_prefix('-').is_some_and(digits) {
            return format!("expected a non-negative integer, got {got}");
        }
        return format!("expected an integer, got {got}");
    }
    match ty {
        "boolean" => format!("expected a boolean (true/false), got {got}"),
        "floating point" | "f32" | "f64" => format!("expected a number, got {got}"),
        other => format!("expected {}, got {got}", friendly_expected(other)),
    }
}

fn friendly_expected(expected: &str) -> Cow<'_, str> {
    let e = expected.trim();
    Cow::Borrowed(match e {
        "u8" | "u16" | "u32" | "u64" | "usize" | "i32" | "i64" => "an integer",
        "f32" | "f64" | "floating point" => "a number",
        "a boolean" | "boolean" => "a boolean (true/false)",
        "mapping start" | "a map" => "a mapping",
        "sequence start" | "a sequence" | "a list of strings" => "a list",
        "string scalar" | "a string" | "path string" => "a string",
        _ if e.starts_with("struct ") => "a mapping",
        _ => return Cow::Borrowed(e),
    })
}

/// How a raw YAML value is shown after "got".
fn describe_raw(raw: Option<Raw<'_>>) -> String {
    let Some(raw) = raw else {
        return "an empty value".to_owned();
    };
    let line = raw.line.trim_start();
    if line.starts_with('[') || line.starts_with("- ") || line == "-" {
        return "a list".to_owned();
    }
    if line.starts_with('{') {
        return "a mapping".to_owned();
    }
    match raw.value.trim() {
        "" | "~" | "null" => "an empty value".to_owned(),
        value => quote(unquote(value)),
    }
}

/// serde's "unexpected" wording (`integer \`8300\``, `map`, `string "x"`) made plain.
fn friendly_unexpected(unexpected: &str) -> String {
    match unexpected {
        "map" => return "a mapping".to_owned(),
        "sequence" => return "a list".to_owned(),
        "unit value" | "null" | "none" | "Option value" => return "an empty value".to_owned(),
        _ => {}
    }
    if let Some((_, rest)) = unexpected.split_once('`') {
        if let Some((inner, _)) = rest.rsplit_once('`') {
            return quote(inner);
        }
    }
    if let Some(s) = unexpected.strip_prefix("string ") {
        return quote(unquote(s));
    }
    unexpected.to_owned()
}

fn unquote(s: &str) -> &str {
    for q in ['"', '\''] {
        if let Some(inner) = s.strip_prefix(q).and_then(|r| r.strip_suffix(q)) {
            return inner;
        }
    }
    s
}

// ---------------------------------------------------------------------------
// Small helpers
// ---------------------------------------------------------------------------

/// `"value"` with quotes and control characters escaped, truncated to 64 characters.
fn quote(s: &str) -> String {
    const MAX: usize = 64;
    if s.chars().count() > MAX {
        let head: String = s.chars().take(MAX).collect();
        format!("\"{}...\"", head.escape_debug())
    } else {
        format!("\"{}\"", s.escape_debug())
    }
}

fn one_of<'a>(names: impl Iterator<Item = &'a str>) -> String {
    names
        .map(|n| format!("\"{n}\""))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The candidate closest to `word` by edit distance, if it is close enough to be a typo.
fn closest<'a>(word: &str, candidates: impl Iterator<Item = &'a str>) -> Option<&'a str> {
    let word = word.to_ascii_lowercase();
    let limit = (word.chars().count() / 3).max(2);
    candidates
        .map(|c| (levenshtein(&word, c), c))
        .filter(|(d, _)| *d <= limit)
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c)
}

fn levenshtein(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    let mut cur = vec![0; b.len() + 1];
    for (i, ca) in a.chars().enumerate() {
        cur[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let cost = usize::from(ca != *cb);
            cur[j + 1] = (prev[j] + cost).min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        std::mem::swap(&mut prev, &mut cur);
    }
    prev[b.len()]
}

#[derive(Default)]
struct Checker {
    problems: Vec<Problem>,
    warnings: Vec<String>,
}

impl Checker {
    fn fail(&mut self, key: impl Into<String>, message: impl Into<String>) {
        self.problems.push(Problem::new(key, message));
    }

    fn range<T: PartialOrd + fmt::Display>(&mut self, key: &str, value: T, min: T, max: T) {
        if value < min || value > max {
            self.fail(key, format!("must be between {min} and {max}, got {value}"));
        }
    }
}

/// Check an `http(s)://host[:port][/path]` URL (no query, fragment or credentials).
/// With `origin_only`, no path is allowed either (a CORS origin).
fn check_http_url(url: &str, origin_only: bool) -> Result<(), String> {
    let shown = quote(url);
    let bad = |why: &str| Err(format!("{why}: {shown}"));
    if url.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return bad("must not contain spaces or control characters");
    }
    let lower = url.to_ascii_lowercase();
    let scheme_len = if lower.starts_with("http://") {
        "http://".len()
    } else if lower.starts_with("https://") {
        "https://".len()
    } else {
        return bad("must start with http:// or https://");
    };
    let rest = &url[scheme_len..];
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    if tail.contains(['?', '#']) {
        return bad("must not contain a query (?) or fragment (#)");
    }
    if origin_only && !tail.is_empty() {
        return bad("an origin has no path (not even a trailing /)");
    }
    if authority.contains('@') {
        return bad("must not contain credentials (user@)");
    }
    let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
        let Some((addr, after)) = v6.split_once(']') else {
            return bad("unclosed [ in IPv6 host");
        };
        if addr.parse::<std::net::Ipv6Addr>().is_err() {
            return bad("invalid IPv6 address");
        }
        match after {
            "" => (addr, None),
            p => match p.strip_prefix(':') {
                Some(port) => (addr, Some(port)),
                None => return bad("unexpected text after ]"),
            },
        }
    } else {
        match authority.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (authority, None),
        }
    };
    if host.is_empty() {
        return bad("has no host");
    }
    if !authority.starts_with('[')
        && !host
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_'))
    {
        return bad("invalid host name");
    }
    if let Some(port) = port {
        let ok = !port.is_empty()
            && port.bytes().all(|b| b.is_ascii_digit())
            && port.parse::<u16>().is_ok_and(|p| p > 0);
        if !ok {
            return bad("invalid port");
        }
    }
    Ok(())
}

fn check_log_level(level: &str) -> Result<(), String> {
    const LEVELS: &[&str] = &["trace", "debug", "info", "warn", "error", "off"];
    let trimmed = level.trim();
    if LEVELS.iter().any(|l| l.eq_ignore_ascii_case(trimmed)) {
        return Ok(());
    }
    let hint = "expected trace, debug, info, warn, error, off, or a filter directive such as \"info,oapd=debug\"";
    // A single bare word would be accepted by EnvFilter as a *target* name, silently
    // disabling all other logs: require a real directive (`=` or `,`) otherwise.
    if trimmed.is_empty() || !trimmed.contains(['=', ',']) {
        return Err(format!("{hint}, got {}", quote(level)));
    }
    tracing_subscriber::EnvFilter::builder()
        .parse(trimmed)
        .map(|_| ())
        .map_err(|e| format!("{hint}; {e}, in {}", quote(level)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn no_env() -> Vec<(String, String)> {
        Vec::new()
    }

    #[test]
    fn key_table_matches_the_structs() {
        let value = serde_json::to_value(Config::default()).expect("serialize defaults");
        let object = value.as_object().expect("top level is an object");
        let sections: Vec<&str> = object.keys().map(String::as_str).collect();
        let table: Vec<&str> = SECTIONS.iter().map(|(s, _)| *s).collect();
        assert_eq!(sections, table, "section list out of sync with Config");
        for (section, keys) in SECTIONS {
            let fields: Vec<&str> = object[*section]
                .as_object()
                .expect("section is an object")
                .keys()
                .map(String::as_str)
                .collect();
            assert_eq!(&fields, keys, "key list of {section} out of sync");
        }
    }

    #[test]
    fn every_key_has_an_env_setter() {
        for (section, keys) in SECTIONS {
            for key in *keys {
                let mut c = Config::default();
                assert!(
                    set_from_env(&mut c, section, key, "").is_some(),
                    "{section}.{key} has no setter"
                );
            }
        }
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
        check::<DiscoveryMode>();
        check::<LogFormat>();
    }

    #[test]
    fn section_matching_prefers_the_longest_section() {
        let (s, _, k) = match_section("TOOL_BRIDGE_MAX_ROUNDS").expect("match");
        assert_eq!((s, k), ("tool_bridge", Some("MAX_ROUNDS")));
        let (s, _, k) = match_section("LOG").expect("match");
        assert_eq!((s, k), ("log", None));
        assert!(match_section("TOOL_MAX").is_none());
        assert!(match_section("LOGGING_LEVEL").is_none());
    }

    #[test]
    fn levenshtein_and_closest() {
        assert_eq!(levenshtein("max_round", "max_rounds"), 1);
        assert_eq!(levenshtein("", "abc"), 3);
        assert_eq!(
            closest("max_round", ["enabled", "max_rounds"].into_iter()),
            Some("max_rounds")
        );
        assert_eq!(
            closest("zzzzzz", ["enabled", "max_rounds"].into_iter()),
            None
        );
    }

    #[test]
    fn url_checks() {
        for ok in [
            "http://127.0.0.1:11434",
            "https://ollama.local",
            "http://[::1]:11434",
            "http://host/prefix/",
            "HTTP://Host.Example:80",
        ] {
            assert!(check_http_url(ok, false).is_ok(), "{ok}");
        }
        for bad in [
            "127.0.0.1:11434",
            "ftp://x",
            "http://",
            "http://:80",
            "http://h:0",
            "http://h:99999",
            "http://h:x",
            "http://u:p@h",
            "http://h/?q",
            "http://h h",
            "http://[::1",
            "http://[zz]:1",
        ] {
            assert!(check_http_url(bad, false).is_err(), "{bad}");
        }
        assert!(check_http_url("https://app.example", true).is_ok());
        assert!(check_http_url("https://app.example/", true).is_err());
    }

    #[test]
    fn log_level_checks() {
        for ok in ["info", "DEBUG", "off", "info,oapd=debug", "oapd=trace"] {
            assert!(check_log_level(ok).is_ok(), "{ok}");
        }
        for bad in ["", "verbose", "info,oapd=loud"] {
            assert!(check_log_level(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn quote_escapes_and_truncates() {
        assert_eq!(quote("x"), "\"x\"");
        assert_eq!(quote("a\nb"), "\"a\\nb\"");
        let long = "y".repeat(100);
        let q = quote(&long);
        assert!(q.starts_with("\"yyy") && q.ends_with("...\""), "{q}");
        assert!(q.len() < 80);
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

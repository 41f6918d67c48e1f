//! The daemon's metrics, served at `GET /metrics` in the Prometheus text
//! format (OpenMetrics, through `prometheus-client`).
//!
//! One registry for the daemon's life (a reload keeps the counts). Every
//! label takes values from a bounded set: routes are the names of the
//! route table (never raw paths), tool labels are the names of indexed
//! tools (anything else is `other`), client labels are the names of
//! `server.clients` (never their tokens), statuses, outcomes and kinds are
//! short fixed words. docs/METRICS.md lists every metric.

use std::collections::BTreeMap;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

/// The `Content-Type` of [`Metrics::render`]'s text.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Latency buckets, seconds: 1 ms to about 2 minutes (a small board's
/// model answers take seconds).
fn latency_buckets() -> impl Iterator<Item = f64> {
    [
        0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
        120.0,
    ]
    .into_iter()
}

/// Buckets for small counts (tools per request, rounds per chat).
fn count_buckets() -> impl Iterator<Item = f64> {
    [0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0, 15.0, 20.0].into_iter()
}

fn latency_histogram() -> Histogram {
    Histogram::new(latency_buckets())
}

type Histograms<L> = Family<L, Histogram, fn() -> Histogram>;

/// `route` and `status` of an answered request.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RouteStatus {
    /// The route table's name of the route.
    pub route: &'static str,
    /// The HTTP status code.
    pub status: u16,
}

/// `route` alone.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RouteLabel {
    /// The route table's name of the route.
    pub route: &'static str,
}

/// Where discovery ran: `api` (`/v1/discover`) or `chat` (tools injected
/// into a chat).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SourceLabel {
    /// `api` or `chat`.
    pub source: &'static str,
}

/// A tool call's tool and outcome.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ToolOutcome {
    /// An indexed tool's name, or `other`.
    pub tool: String,
    /// `ok`, `error`, `timeout`, `refused` or `client`.
    pub outcome: &'static str,
}

/// A tool call's tool.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ToolLabel {
    /// An indexed tool's name, or `other`.
    pub tool: String,
}

/// An upstream request kind.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct EndpointLabel {
    /// `chat`, `show`, `generate` or `other`.
    pub endpoint: &'static str,
}

/// An upstream failure.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct UpstreamFailure {
    /// `chat`, `show`, `generate` or `other`.
    pub endpoint: &'static str,
    /// `unreachable`, `timeout`, `request`, `config`, `status_4xx`, `status_5xx`.
    pub kind: &'static str,
}

/// `result` of a rebuild or `outcome` of a fetch.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabel {
    /// `ok` or `failed`.
    pub result: &'static str,
}

/// The outcome of a crawl fetch.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct FetchOutcome {
    /// A short fixed word (see docs/METRICS.md).
    pub outcome: &'static str,
}

/// A `server.clients` entry, by name.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ClientLabel {
    /// The client's configured name.
    pub client: String,
}

/// How much a `server.clients` entry has been used since the start.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ClientUse {
    /// Requests it made (refused ones included).
    pub requests: u64,
    /// When it made the last one, milliseconds since the Unix epoch.
    pub last_unix_ms: u64,
}

/// The state of tools for request generation.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct GenerationState {
    /// `generated`, `pending` or `failed`.
    pub state: &'static str,
}

/// Every metric of the daemon.
pub struct Metrics {
    registry: Registry,
    http_requests: Family<RouteStatus, Counter>,
    http_duration: Histograms<RouteLabel>,
    discovery_duration: Histograms<SourceLabel>,
    abstentions: Family<SourceLabel, Counter>,
    tools_injected: Histogram,
    rounds: Histogram,
    tool_calls: Family<ToolOutcome, Counter>,
    tool_duration: Histograms<ToolLabel>,
    upstream_duration: Histograms<EndpointLabel>,
    upstream_errors: Family<UpstreamFailure, Counter>,
    index_manifests: Gauge,
    index_bytes: Gauge,
    index_pending_texts: Gauge,
    rebuilds: Family<ResultLabel, Counter>,
    crawl_fetches: Family<FetchOutcome, Counter>,
    resident_bytes: Gauge,
    inflight_body_bytes: Gauge,
    inflight_body_capacity: Gauge,
    generation_tools: Family<GenerationState, Gauge>,
    generation_calls: Family<FetchOutcome, Counter>,
    client_requests: Family<ClientLabel, Counter>,
    snapshot_version: Gauge,
    snapshot_pulls: Family<FetchOutcome, Counter>,
    /// The same counts with the last use, for the status page.
    client_use: Mutex<BTreeMap<String, ClientUse>>,
}

/// What the scrape reads from the serving generation.
#[derive(Debug, Clone, Copy, Default)]
pub struct Snapshot {
    /// Manifests in the served index.
    pub index_manifests: u64,
    /// Size of the served index file, bytes.
    pub index_bytes: u64,
    /// Texts the served index has no vector for yet (discovery is lexical
    /// while it is not 0).
    pub index_pending_texts: u64,
    /// Request-body bytes held right now (`server.max_inflight_body_bytes`).
    pub inflight_body_bytes: u64,
    /// `server.max_inflight_body_bytes`.
    pub inflight_body_capacity: u64,
    /// Tools with generated requests, waiting for them, given up.
    pub generation: Option<(u64, u64, u64)>,
}

static METRICS: OnceLock<Metrics> = OnceLock::new();

/// The daemon's metrics (made on first use).
pub fn get() -> &'static Metrics {
    METRICS.get_or_init(Metrics::new)
}

fn gauge_value(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

impl Metrics {
    fn new() -> Metrics {
        let mut registry = Registry::default();
        let http_requests = Family::<RouteStatus, Counter>::default();
        registry.register(
            "oapd_http_requests",
            "Requests answered, by route (the route table's name; `ollama` for every path passed through) and status",
            http_requests.clone(),
        );
        let http_duration: Histograms<RouteLabel> = Family::new_with_constructor(latency_histogram);
        registry.register(
            "oapd_http_request_duration_seconds",
            "Time from a request's head to its response head, by route",
            http_duration.clone(),
        );
        let discovery_duration: Histograms<SourceLabel> =
            Family::new_with_constructor(latency_histogram);
        registry.register(
            "oapd_discovery_duration_seconds",
            "Time of one discovery (embedding and search), by source: api (/v1/discover) or chat (injected tools)",
            discovery_duration.clone(),
        );
        let abstentions = Family::<SourceLabel, Counter>::default();
        registry.register(
            "oapd_discovery_abstentions",
            "Discoveries that found nothing fitting (match: null), by source",
            abstentions.clone(),
        );
        let tools_injected = Histogram::new(count_buckets());
        registry.register(
            "oapd_chat_tools_injected",
            "oapd's tools offered per bridged chat",
            tools_injected.clone(),
        );
        let rounds = Histogram::new(count_buckets());
        registry.register(
            "oapd_chat_rounds",
            "Model rounds per bridged chat",
            rounds.clone(),
        );
        let tool_calls = Family::<ToolOutcome, Counter>::default();
        registry.register(
            "oapd_tool_calls",
            "Tool calls in bridged chats, by tool (an indexed tool's name, else other) and outcome (ok, error, timeout, refused, client)",
            tool_calls.clone(),
        );
        let tool_duration: Histograms<ToolLabel> = Family::new_with_constructor(latency_histogram);
        registry.register(
            "oapd_tool_call_duration_seconds",
            "Time of the tool calls oapd ran, by tool",
            tool_duration.clone(),
        );
        let upstream_duration: Histograms<EndpointLabel> =
            Family::new_with_constructor(latency_histogram);
        registry.register(
            "oapd_upstream_request_duration_seconds",
            "Time from a request to Ollama to its response head, by endpoint (chat, show, generate, other)",
            upstream_duration.clone(),
        );
        let upstream_errors = Family::<UpstreamFailure, Counter>::default();
        registry.register(
            "oapd_upstream_errors",
            "Requests to Ollama that failed or were answered with an error status, by endpoint and kind",
            upstream_errors.clone(),
        );
        let index_manifests = Gauge::default();
        registry.register(
            "oapd_index_manifests",
            "Manifests in the served index",
            index_manifests.clone(),
        );
        let index_bytes = Gauge::default();
        registry.register(
            "oapd_index_size_bytes",
            "Size of the served index file",
            index_bytes.clone(),
        );
        let index_pending_texts = Gauge::default();
        registry.register(
            "oapd_index_pending_texts",
            "Texts the served index has no vector for yet: discovery is lexical until a background rebuild has embedded them",
            index_pending_texts.clone(),
        );
        let rebuilds = Family::<ResultLabel, Counter>::default();
        registry.register(
            "oapd_index_rebuilds",
            "Index rebuilds after start-up (directory watch, MCP tool changes, crawls and registrations, retries), by result",
            rebuilds.clone(),
        );
        let crawl_fetches = Family::<FetchOutcome, Counter>::default();
        registry.register(
            "oapd_crawl_fetches",
            "Manifest fetches of the crawler, by outcome",
            crawl_fetches.clone(),
        );
        let resident_bytes = Gauge::default();
        registry.register(
            "oapd_process_resident_memory_bytes",
            "Resident memory of the daemon (from /proc/self/statm)",
            resident_bytes.clone(),
        );
        let inflight_body_bytes = Gauge::default();
        registry.register(
            "oapd_inflight_body_bytes",
            "Request-body bytes held in memory right now, all connections together",
            inflight_body_bytes.clone(),
        );
        let inflight_body_capacity = Gauge::default();
        registry.register(
            "oapd_inflight_body_capacity_bytes",
            "The cap on request-body bytes in memory (server.max_inflight_body_bytes)",
            inflight_body_capacity.clone(),
        );
        let generation_tools = Family::<GenerationState, Gauge>::default();
        registry.register(
            "oapd_request_generation_tools",
            "Capabilities by state of their generated requests: generated (cached), pending (waiting for the model), failed (given up after unusable answers)",
            generation_tools.clone(),
        );
        let generation_calls = Family::<FetchOutcome, Counter>::default();
        registry.register(
            "oapd_request_generation_calls",
            "Calls to Ollama that generate requests for a capability, by outcome (ok, bad_answer, unreachable, error_status, no_model)",
            generation_calls.clone(),
        );
        let client_requests = Family::<ClientLabel, Counter>::default();
        registry.register(
            "oapd_client_requests",
            "Requests made with a server.clients token, by client name",
            client_requests.clone(),
        );
        let snapshot_version = Gauge::default();
        registry.register(
            "oapd_snapshot_version",
            "Version of the installed signed index snapshot (0: none installed)",
            snapshot_version.clone(),
        );
        let snapshot_pulls = Family::<FetchOutcome, Counter>::default();
        registry.register(
            "oapd_snapshot_pulls",
            "Checks of the subscribed snapshot, by outcome: installed, not_modified, or the reason it was refused or failed (signature, listing, path, too_large, model, replayed, size, hash, fetch, install, rebuild)",
            snapshot_pulls.clone(),
        );
        Metrics {
            registry,
            snapshot_version,
            snapshot_pulls,
            client_requests,
            client_use: Mutex::new(BTreeMap::new()),
            generation_tools,
            generation_calls,
            http_requests,
            http_duration,
            discovery_duration,
            abstentions,
            tools_injected,
            rounds,
            tool_calls,
            tool_duration,
            upstream_duration,
            upstream_errors,
            index_manifests,
            index_bytes,
            index_pending_texts,
            rebuilds,
            crawl_fetches,
            resident_bytes,
            inflight_body_bytes,
            inflight_body_capacity,
        }
    }

    /// The `server.clients` entry `name` made a request.
    pub fn client_request(&self, name: &str) {
        self.client_requests
            .get_or_create(&ClientLabel {
                client: name.to_owned(),
            })
            .inc();
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        // A panic elsewhere while the lock was held leaves counts that are
        // still counts: keep using them.
        let mut used = self
            .client_use
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let entry = used.entry(name.to_owned()).or_default();
        entry.requests += 1;
        entry.last_unix_ms = now;
    }

    /// Every client's use so far, by name.
    pub fn client_use(&self) -> BTreeMap<String, ClientUse> {
        self.client_use
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// A request was answered.
    pub fn http_request(&self, route: &'static str, status: u16, elapsed: Duration) {
        self.http_requests
            .get_or_create(&RouteStatus { route, status })
            .inc();
        self.http_duration
            .get_or_create(&RouteLabel { route })
            .observe(elapsed.as_secs_f64());
    }

    /// A discovery ran; `abstained` when nothing fitted.
    pub fn discovery(&self, source: &'static str, elapsed: Duration, abstained: bool) {
        let label = SourceLabel { source };
        self.discovery_duration
            .get_or_create(&label)
            .observe(elapsed.as_secs_f64());
        if abstained {
            self.abstentions.get_or_create(&label).inc();
        }
    }

    /// A bridged chat is over: how many tools oapd offered, how many rounds.
    pub fn chat(&self, tools_injected: usize, rounds: u32) {
        self.tools_injected.observe(tools_injected as f64);
        self.rounds.observe(f64::from(rounds));
    }

    /// A tool call; `tool` must already be bounded (an indexed name or
    /// `other`); `elapsed` is `None` for a call handed to the client.
    pub fn tool_call(&self, tool: &str, outcome: &'static str, elapsed: Option<Duration>) {
        self.tool_calls
            .get_or_create(&ToolOutcome {
                tool: tool.to_string(),
                outcome,
            })
            .inc();
        if let Some(elapsed) = elapsed {
            self.tool_duration
                .get_or_create(&ToolLabel {
                    tool: tool.to_string(),
                })
                .observe(elapsed.as_secs_f64());
        }
    }

    /// A request to Ollama came back (or failed).
    pub fn upstream(&self, exchange: &oap_bridge::upstream::UpstreamExchange<'_>) {
        let endpoint = exchange.endpoint;
        self.upstream_duration
            .get_or_create(&EndpointLabel { endpoint })
            .observe(exchange.elapsed.as_secs_f64());
        let kind = match exchange.result {
            Ok(status) if status.is_client_error() => Some("status_4xx"),
            Ok(status) if status.is_server_error() => Some("status_5xx"),
            Ok(_) => None,
            Err(err) => Some(err.kind()),
        };
        if let Some(kind) = kind {
            self.upstream_errors
                .get_or_create(&UpstreamFailure { endpoint, kind })
                .inc();
        }
    }

    /// An index rebuild after start-up ended (background rebuilder or
    /// crawler): `Some(true)` wrote a new index, `Some(false)` found nothing
    /// changed and kept the mapped one (the directory watch sees the
    /// crawler's own writes), `None` failed.
    pub fn rebuild(&self, wrote_index: Option<bool>) {
        let result = match wrote_index {
            Some(true) => "ok",
            Some(false) => "unchanged",
            None => "failed",
        };
        self.rebuilds.get_or_create(&ResultLabel { result }).inc();
    }

    /// A crawl fetch ended.
    pub fn crawl_fetch(&self, outcome: &'static str) {
        self.crawl_fetches
            .get_or_create(&FetchOutcome { outcome })
            .inc();
    }

    /// The installed snapshot's version.
    pub fn snapshot_version(&self, version: u64) {
        self.snapshot_version.set(gauge_value(version));
    }

    /// A snapshot check ended with `outcome` (a short fixed word).
    pub fn snapshot_pull(&self, outcome: &'static str) {
        self.snapshot_pulls
            .get_or_create(&FetchOutcome { outcome })
            .inc();
    }

    /// A request-generation call ended with `outcome`.
    pub fn request_generation_call(&self, outcome: &'static str) {
        self.generation_calls
            .get_or_create(&FetchOutcome { outcome })
            .inc();
    }

    /// The exposition text, with the gauges read now.
    pub fn render(&self, snapshot: Snapshot) -> Result<String, std::fmt::Error> {
        self.index_manifests
            .set(gauge_value(snapshot.index_manifests));
        self.index_bytes.set(gauge_value(snapshot.index_bytes));
        self.index_pending_texts
            .set(gauge_value(snapshot.index_pending_texts));
        self.inflight_body_bytes
            .set(gauge_value(snapshot.inflight_body_bytes));
        self.inflight_body_capacity
            .set(gauge_value(snapshot.inflight_body_capacity));
        if let Some((generated, pending, failed)) = snapshot.generation {
            for (state, value) in [
                ("generated", generated),
                ("pending", pending),
                ("failed", failed),
            ] {
                self.generation_tools
                    .get_or_create(&GenerationState { state })
                    .set(gauge_value(value));
            }
        }
        if let Some(rss) = resident_bytes() {
            self.resident_bytes.set(gauge_value(rss));
        }
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &self.registry)?;
        Ok(text)
    }
}

/// Resident memory from `/proc/self/statm` (its second field, in pages).
fn resident_bytes() -> Option<u64> {
    let statm = crate::files::read_regular(std::path::Path::new("/proc/self/statm"), 4096).ok()?;
    let pages: u64 = std::str::from_utf8(&statm)
        .ok()?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()?;
    let page = nix::unistd::sysconf(nix::unistd::SysconfVar::PAGE_SIZE).ok()??;
    pages.checked_mul(u64::try_from(page).ok()?)
}

//! The hub: one supervisor task per configured server, connecting in the
//! background, listing tools, reconnecting with backoff, calling under
//! deadlines.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use rmcp::model::{CallToolRequestParams, ClientRequest, CustomRequest, ServerResult};
use rmcp::service::{NotificationContext, Peer, RunningService};
use rmcp::{ClientHandler, RoleClient};
use serde::Serialize;
use serde_json::{json, Map, Value};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tracing::{info, warn};

use crate::content::{cap_chars, content_hash, result_text};
use crate::context::{HubContext, HubSettings};
use crate::noise::{Kind, Noise, Traffic};
use crate::process::ServerProcess;
use crate::servers_file::{ServerSpec, Start, Transport};

/// One tool of a ready server.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct McpTool {
    /// The server's name.
    pub server: String,
    /// The tool's name.
    pub name: String,
    /// Its display title, if any.
    pub title: Option<String>,
    /// Its description (empty when the server gave none).
    pub description: String,
    /// Its `inputSchema`, verbatim (`$ref`s are never expanded); a
    /// non-object schema is replaced by `{"type": "object"}`.
    pub input_schema: Value,
    /// Its `annotations`, verbatim.
    pub annotations: Option<Value>,
    /// sha256 hex of the tool's canonical JSON: unchanged tools keep their
    /// hash, so their embeddings can be reused.
    pub content_hash: String,
}

impl McpTool {
    /// `mcp/<server>/<tool>`.
    pub fn id(&self) -> String {
        format!("mcp/{}/{}", self.server, self.name)
    }
}

/// What a call produced. Failures are outcomes too, with a clear text.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CallOutcome {
    /// Text for the model, capped.
    pub text: String,
    /// Whether the call failed (the server said `isError`, or it could not
    /// be made).
    pub is_error: bool,
}

impl CallOutcome {
    fn error(text: impl Into<String>) -> Self {
        Self {
            text: text.into(),
            is_error: true,
        }
    }
}

/// Where a server is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum State {
    /// Connecting or initializing (or, when lazy, not yet wanted).
    Starting,
    /// Initialized, tools listed.
    Ready,
    /// Waiting to reconnect after a failure.
    Backoff,
    /// Will not be retried (a configuration the hub cannot serve).
    Failed,
    /// Removed or shut down.
    Stopped,
}

/// A server's state, for `/health`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ServerStatus {
    /// The server's name.
    pub name: String,
    /// `stdio`, `http` or `sse`.
    pub transport: &'static str,
    /// Where it is.
    pub state: State,
    /// Tools offered (after allow/deny lists).
    pub tools: usize,
    /// The last failure, if any.
    pub last_error: Option<String>,
    /// How many times it was (re)started after the first attempt.
    pub restarts: u64,
    /// Listing notes (truncation, replaced schemas).
    pub notes: Vec<String>,
    /// The process id of a running stdio server.
    pub pid: Option<i32>,
    /// Whether the server sends more unasked messages (log notifications,
    /// progress, list changes, stderr lines) than
    /// [`HubSettings::noisy_messages`] per [`HubSettings::noise_window`];
    /// cleared after a window under that rate. It keeps serving meanwhile.
    pub noisy: bool,
    /// What it sent in about the last minute (the open window and the
    /// closed ones within the minute).
    pub traffic_last_minute: Traffic,
    /// What it sent since it was configured.
    pub traffic_total: Traffic,
}

struct Live {
    state: State,
    tools: Vec<McpTool>,
    peer: Option<Peer<RoleClient>>,
    /// Counts the stdio server's messages dropped for their size.
    oversized: Option<watch::Receiver<u64>>,
    last_error: Option<String>,
    restarts: u64,
    notes: Vec<String>,
    pid: Option<i32>,
    /// The last re-listing's failure, logged once while it repeats.
    relist_error: Option<String>,
}

struct Shared {
    spec: ServerSpec,
    live: Mutex<Live>,
    /// What the server sent unasked, counted (kept across reconnects).
    noise: Arc<Noise>,
    /// Set to true by the first call to a lazy server.
    wanted: watch::Sender<bool>,
}

impl Shared {
    fn live(&self) -> MutexGuard<'_, Live> {
        self.live.lock().unwrap_or_else(|p| p.into_inner())
    }
}

struct Entry {
    shared: Arc<Shared>,
    stop: watch::Sender<bool>,
    task: JoinHandle<()>,
}

struct Inner {
    /// Replaced by [`Hub::reconfigure`]; read when a server connects and
    /// when a call starts.
    settings: Mutex<HubSettings>,
    ctx: Mutex<HubContext>,
    servers: Mutex<BTreeMap<String, Entry>>,
    changes: watch::Sender<u64>,
}

impl Drop for Inner {
    /// The last clone gone without [`Hub::shutdown`]: the supervisors still
    /// stop their servers (process groups killed) in the background.
    fn drop(&mut self) {
        let servers = self.servers.get_mut().unwrap_or_else(|p| p.into_inner());
        for entry in servers.values() {
            let _ = entry.stop.send(true);
        }
    }
}

/// The set of MCP servers, kept running. Cheap to clone.
#[derive(Clone)]
pub struct Hub {
    inner: Arc<Inner>,
}

impl Hub {
    /// A hub with no servers; add them with [`Hub::apply`].
    pub fn new(settings: HubSettings, ctx: HubContext) -> Self {
        Self {
            inner: Arc::new(Inner {
                settings: Mutex::new(settings),
                ctx: Mutex::new(ctx),
                servers: Mutex::new(BTreeMap::new()),
                changes: watch::channel(0).0,
            }),
        }
    }

    fn servers(&self) -> MutexGuard<'_, BTreeMap<String, Entry>> {
        self.inner.servers.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn settings(&self) -> HubSettings {
        self.inner
            .settings
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    fn context(&self) -> HubContext {
        self.inner
            .ctx
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// A supervisor for `spec` with the current settings and context.
    fn spawn_entry(&self, spec: ServerSpec) -> Entry {
        let shared = Arc::new(Shared {
            live: Mutex::new(Live {
                state: State::Starting,
                tools: Vec::new(),
                peer: None,
                oversized: None,
                last_error: None,
                restarts: 0,
                notes: Vec::new(),
                pid: None,
                relist_error: None,
            }),
            wanted: watch::channel(spec.start == Start::Eager).0,
            noise: Arc::new(Noise::default()),
            spec,
        });
        let (stop, stop_rx) = watch::channel(false);
        tokio::spawn(crate::noise::watch(
            shared.spec.name.clone(),
            self.settings(),
            shared.noise.clone(),
            stop_rx.clone(),
        ));
        let task = tokio::spawn(supervise(
            self.settings(),
            self.context(),
            shared.clone(),
            stop_rx,
            self.inner.changes.clone(),
        ));
        Entry { shared, stop, task }
    }

    /// New limits and a new context (a configuration reload: the CA file,
    /// the credential store or the address rule may have changed). Calls
    /// and connections made from now on use them. With
    /// `reconnect_url_servers`, every URL server is reconnected at once,
    /// since its live connection was made with the old TLS roots and
    /// credentials; stdio servers keep running (the context holds nothing
    /// they use once started). Needs a Tokio runtime.
    pub fn reconfigure(&self, settings: HubSettings, ctx: HubContext, reconnect_url_servers: bool) {
        *self
            .inner
            .settings
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = settings;
        *self.inner.ctx.lock().unwrap_or_else(|p| p.into_inner()) = ctx;
        if !reconnect_url_servers {
            return;
        }
        let mut servers = self.servers();
        let url_servers: Vec<String> = servers
            .iter()
            .filter(|(_, e)| matches!(e.shared.spec.transport, Transport::Http { .. }))
            .map(|(name, _)| name.clone())
            .collect();
        for name in url_servers {
            if let Some(old) = servers.remove(&name) {
                info!(server = %name, "MCP server reconnecting (TLS roots, credentials or address rule changed)");
                let _ = old.stop.send(true);
                let entry = self.spawn_entry(old.shared.spec.clone());
                servers.insert(name, entry);
            }
        }
        drop(servers);
        bump(&self.inner.changes);
    }

    /// Make the running set match `specs`: new servers start, changed ones
    /// restart, missing ones stop (their process group killed). Returns at
    /// once; connecting happens in background tasks. Needs a Tokio runtime.
    pub fn apply(&self, specs: Vec<ServerSpec>) {
        let mut servers = self.servers();
        let wanted: BTreeMap<String, ServerSpec> =
            specs.into_iter().map(|s| (s.name.clone(), s)).collect();
        let gone: Vec<String> = servers
            .iter()
            .filter(|(name, e)| wanted.get(*name) != Some(&e.shared.spec))
            .map(|(name, _)| name.clone())
            .collect();
        for name in gone {
            if let Some(entry) = servers.remove(&name) {
                info!(server = %name, "MCP server stopping (removed or changed)");
                let _ = entry.stop.send(true);
            }
        }
        for (name, spec) in wanted {
            if servers.contains_key(&name) {
                continue;
            }
            let entry = self.spawn_entry(spec);
            servers.insert(name, entry);
        }
        drop(servers);
        bump(&self.inner.changes);
    }

    /// Tools of every ready server, filtered by its allow/deny lists.
    pub fn tools(&self) -> Vec<McpTool> {
        let servers = self.servers();
        servers
            .values()
            .flat_map(|e| {
                let live = e.shared.live();
                if live.state == State::Ready {
                    live.tools.clone()
                } else {
                    Vec::new()
                }
            })
            .collect()
    }

    /// Bumps whenever the tool set may have changed.
    pub fn changes(&self) -> watch::Receiver<u64> {
        self.inner.changes.subscribe()
    }

    /// Every server's state.
    pub fn status(&self) -> Vec<ServerStatus> {
        let settings = self.settings();
        self.servers()
            .values()
            .map(|e| {
                let noise = e.shared.noise.status(&settings);
                let live = e.shared.live();
                ServerStatus {
                    name: e.shared.spec.name.clone(),
                    transport: e.shared.spec.transport.kind(),
                    state: live.state,
                    tools: live.tools.len(),
                    last_error: live.last_error.clone(),
                    restarts: live.restarts,
                    notes: live.notes.clone(),
                    pid: live.pid,
                    noisy: noise.noisy,
                    traffic_last_minute: noise.last_minute,
                    traffic_total: noise.total,
                }
            })
            .collect()
    }

    /// Call `tool` on `server`. `timeout` overrides the server's and the
    /// hub's default deadline. Never fails: problems are error outcomes.
    /// Dropping the future sends `notifications/cancelled` to the server.
    pub async fn call(
        &self,
        server: &str,
        tool: &str,
        arguments: Map<String, Value>,
        timeout: Option<Duration>,
    ) -> CallOutcome {
        let settings = self.settings();
        let Some(shared) = self.servers().get(server).map(|e| e.shared.clone()) else {
            return CallOutcome::error(format!("Error: there is no MCP server named {server:?}."));
        };
        if !shared.spec.offers(tool) {
            return CallOutcome::error(format!(
                "Error: tool {tool:?} of MCP server {server:?} is disabled by configuration."
            ));
        }
        let timeout = timeout
            .or(shared.spec.timeout)
            .unwrap_or(settings.call_timeout);
        // A lazy server starts on its first call.
        if !*shared.wanted.borrow() {
            let _ = shared.wanted.send(true);
            let deadline = Instant::now() + settings.init_timeout;
            while shared.live().state == State::Starting && Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(25)).await;
            }
        }
        let (peer, oversized) = {
            let live = shared.live();
            match (&live.peer, live.state) {
                (Some(peer), State::Ready) => {
                    if !live.tools.iter().any(|t| t.name == tool) {
                        return CallOutcome::error(format!(
                            "Error: MCP server {server:?} has no tool {tool:?}."
                        ));
                    }
                    (peer.clone(), live.oversized.clone())
                }
                (_, state) => {
                    return CallOutcome::error(format!(
                        "Error: MCP server {server:?} is not ready ({}){}.",
                        serde_json::to_value(state)
                            .ok()
                            .and_then(|v| v.as_str().map(str::to_string))
                            .unwrap_or_default(),
                        live.last_error
                            .as_deref()
                            .map(|e| format!("; last error: {e}"))
                            .unwrap_or_default()
                    ))
                }
            }
        };
        let mut params = CallToolRequestParams::new(tool.to_string());
        params.arguments = Some(arguments);
        // call_tool_once sends notifications/cancelled when dropped, which
        // the timeout below and a dropped caller both do.
        let answered = tokio::select! {
            answered = tokio::time::timeout(timeout, peer.call_tool_once(params)) => answered,
            () = dropped_for_size(oversized) => return CallOutcome::error(format!(
                "Error: MCP server {server:?} sent a message over the {} MiB cap while \
                 {tool} ran; it was dropped, most likely as this call's answer. \
                 Ask the tool for less at a time.",
                settings.max_message_bytes >> 20
            )),
        };
        match answered {
            Err(_) => CallOutcome::error(format!(
                "Error: MCP tool {server}/{tool} timed out after {}; the request was cancelled.",
                secs(timeout)
            )),
            // The model (and whoever asked it) reads this: no secret of
            // the entry in it.
            Ok(Err(e)) => CallOutcome::error(format!(
                "Error: MCP tool {server}/{tool} failed: {}",
                shared.spec.scrub(&describe_service_error(&e))
            )),
            Ok(Ok(rmcp::model::CallToolResponse::Complete(result))) => {
                let value = serde_json::to_value(&result).unwrap_or(Value::Null);
                CallOutcome {
                    text: result_text(&value, settings.max_result_chars),
                    is_error: result.is_error.unwrap_or(false),
                }
            }
            Ok(Ok(_)) => CallOutcome::error(format!(
                "Error: MCP tool {server}/{tool} asked for input or started a task, \
                 which oapd does not support."
            )),
        }
    }

    /// Stop every server (process groups killed) and wait for them.
    pub async fn shutdown(&self) {
        let entries: Vec<Entry> = {
            let mut servers = self.servers();
            std::mem::take(&mut *servers).into_values().collect()
        };
        for e in &entries {
            let _ = e.stop.send(true);
        }
        let grace = self.settings().stop_grace + Duration::from_secs(6);
        for e in entries {
            let _ = tokio::time::timeout(grace, e.task).await;
            e.shared.live().state = State::Stopped;
        }
        bump(&self.inner.changes);
    }
}

fn secs(d: Duration) -> String {
    let s = d.as_secs_f64();
    if s.fract() == 0.0 {
        format!("{} s", d.as_secs())
    } else {
        format!("{s:.1} s")
    }
}

fn describe_service_error(e: &rmcp::ServiceError) -> String {
    match e {
        rmcp::ServiceError::McpError(data) => {
            format!("the server answered with an error: {}", data.message)
        }
        rmcp::ServiceError::TransportClosed | rmcp::ServiceError::TransportSend(_) => {
            "the connection to the server was lost during the call; it is being restarted".into()
        }
        other => other.to_string(),
    }
}

fn bump(changes: &watch::Sender<u64>) {
    changes.send_modify(|v| *v = v.wrapping_add(1));
}

/// Receives the server's notifications: `tools/list_changed` asks for a
/// re-list (coalesced: one pending request at most), everything is
/// counted, and a log message's text goes only to the content target at
/// debug. Every notification kind is handled here, so none reaches the log
/// through rmcp's defaults.
struct Handler {
    server: String,
    relist: mpsc::Sender<()>,
    noise: Arc<Noise>,
}

impl ClientHandler for Handler {
    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.noise.record(Kind::ListChanged);
        let _ = self.relist.try_send(());
    }

    #[allow(
        deprecated,
        reason = "servers still send notifications/message; it must be counted until none do"
    )]
    async fn on_logging_message(
        &self,
        params: rmcp::model::LoggingMessageNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        self.noise.record(Kind::LogMessage);
        // The server's text: content, for debug lines only.
        tracing::debug!(target: oap_exec::CONTENT_LOG_TARGET, server = %self.server,
            level = ?params.level, logger = ?params.logger,
            "log message: {}", oap_exec::content_excerpt(&params.data.to_string()));
    }

    async fn on_progress(
        &self,
        _params: rmcp::model::ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        self.noise.record(Kind::Progress);
    }

    async fn on_cancelled(
        &self,
        _params: rmcp::model::CancelledNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        self.noise.record(Kind::OtherNotification);
    }

    async fn on_resource_updated(
        &self,
        _params: rmcp::model::ResourceUpdatedNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        self.noise.record(Kind::OtherNotification);
    }

    async fn on_resource_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.noise.record(Kind::OtherNotification);
    }

    async fn on_prompt_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.noise.record(Kind::OtherNotification);
    }

    async fn on_custom_notification(
        &self,
        _notification: rmcp::model::CustomNotification,
        _context: NotificationContext<RoleClient>,
    ) {
        self.noise.record(Kind::OtherNotification);
    }

    async fn on_task_status(
        &self,
        _params: rmcp::model::TaskStatusNotificationParams,
        _context: NotificationContext<RoleClient>,
    ) {
        self.noise.record(Kind::OtherNotification);
    }

    async fn on_subscriptions_acknowledged(
        &self,
        _params: rmcp::model::SubscriptionsAcknowledgedNotificationParams,
        _context: NotificationContext<RoleClient>,
    ) {
        self.noise.record(Kind::OtherNotification);
    }

    fn get_info(&self) -> rmcp::model::ClientConfig {
        let mut info = rmcp::model::ClientConfig::default();
        info.client_info = rmcp::model::Implementation::new("oapd", env!("CARGO_PKG_VERSION"));
        info
    }
}

/// A live connection.
pub(crate) struct Connection {
    service: RunningService<RoleClient, Handler>,
    process: Option<ServerProcess>,
    /// Messages of a stdio server dropped for their size (see
    /// [`crate::line_watch`]).
    oversized: Option<watch::Receiver<u64>>,
}

/// Why connecting failed, and whether to retry.
pub(crate) struct ConnectError {
    pub(crate) message: String,
    pub(crate) retry: bool,
}

impl ConnectError {
    pub(crate) fn retry(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            retry: true,
        }
    }
    pub(crate) fn fatal(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            retry: false,
        }
    }
}

async fn connect(
    settings: &HubSettings,
    ctx: &HubContext,
    spec: &ServerSpec,
    handler: Handler,
) -> Result<Connection, ConnectError> {
    match &spec.transport {
        Transport::Stdio {
            command,
            args,
            env,
            cwd,
            sandbox,
        } => {
            let (process, pipes) = ServerProcess::spawn(
                &crate::process::ServerName {
                    name: spec.name.clone(),
                    noise: handler.noise.clone(),
                },
                command,
                args,
                env,
                cwd.as_deref(),
                sandbox.as_ref(),
                &ctx.stdio_limits,
                spec.redaction(),
            )
            .map_err(|e| ConnectError {
                message: e.message,
                retry: !e.fatal,
            })?;
            let (stdout, oversized) =
                crate::line_watch::LineWatch::new(pipes.stdout, settings.max_message_bytes);
            let transport =
                rmcp::transport::async_rw::AsyncRwTransport::new_client(stdout, pipes.stdin)
                    .with_max_line_length(settings.max_message_bytes);
            let started = tokio::time::timeout(
                settings.init_timeout,
                rmcp::serve_client(handler, transport),
            )
            .await;
            match started {
                Ok(Ok(service)) => Ok(Connection {
                    service,
                    process: Some(process),
                    oversized: Some(oversized),
                }),
                Ok(Err(e)) => {
                    process.stop(settings.stop_grace).await;
                    Err(ConnectError::retry(init_failed(&e)))
                }
                Err(_) => {
                    process.stop(settings.stop_grace).await;
                    Err(ConnectError::retry(format!(
                        "no answer to initialize within {}",
                        secs(settings.init_timeout)
                    )))
                }
            }
        }
        Transport::Http {
            url,
            headers,
            trust,
            legacy_sse,
        } => {
            let client =
                crate::http::Client::new(ctx, url, headers, *trust, settings.max_message_bytes)
                    .map_err(ConnectError::fatal)?
                    .with_redaction(spec.redaction().clone());
            if *legacy_sse {
                let started = tokio::time::timeout(settings.init_timeout, async {
                    let transport = crate::http::LegacySse::connect(client.clone(), url)
                        .await
                        .map_err(|e| match e {
                            crate::http::HttpError::Refused(m) => ConnectError::fatal(m),
                            crate::http::HttpError::Io(m) => ConnectError::retry(m),
                        })?;
                    rmcp::serve_client(handler, transport)
                        .await
                        .map_err(|e| ConnectError::retry(init_failed(&e)))
                })
                .await;
                return match started {
                    Ok(Ok(service)) => Ok(Connection {
                        service,
                        process: None,
                        oversized: None,
                    }),
                    Ok(Err(e)) => Err(e),
                    Err(_) => Err(ConnectError::retry(format!(
                        "no answer to initialize within {}",
                        secs(settings.init_timeout)
                    ))),
                };
            }
            let config = rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig::with_uri(
                url.as_str().to_string(),
            );
            let transport =
                rmcp::transport::StreamableHttpClientTransport::with_client(client.clone(), config);
            let started = tokio::time::timeout(
                settings.init_timeout,
                rmcp::serve_client(handler, transport),
            )
            .await;
            match started {
                Ok(Ok(service)) => Ok(Connection {
                    service,
                    process: None,
                    oversized: None,
                }),
                Ok(Err(e)) => Err(match client.refusal() {
                    Some(refusal) => ConnectError::fatal(refusal),
                    None => ConnectError::retry(init_failed(&e)),
                }),
                Err(_) => Err(ConnectError::retry(format!(
                    "no answer to initialize within {}",
                    secs(settings.init_timeout)
                ))),
            }
        }
    }
}

/// List the server's tools page by page, within the caps. Returns the
/// tools and notes about anything dropped or replaced.
async fn list_tools(
    settings: &HubSettings,
    spec: &ServerSpec,
    peer: &Peer<RoleClient>,
) -> Result<(Vec<McpTool>, Vec<String>), String> {
    let mut tools = Vec::new();
    let mut notes = Vec::new();
    let mut bytes = 0usize;
    let mut cursor: Option<String> = None;
    for page in 0.. {
        if page >= settings.max_list_pages {
            notes.push(format!(
                "tools/list stopped after {} pages",
                settings.max_list_pages
            ));
            break;
        }
        let params = cursor.as_ref().map(|c| json!({ "cursor": c }));
        let request = ClientRequest::CustomRequest(CustomRequest::new("tools/list", params));
        let answer = tokio::time::timeout(settings.init_timeout, peer.send_request(request))
            .await
            .map_err(|_| {
                format!(
                    "tools/list not answered within {}",
                    secs(settings.init_timeout)
                )
            })?
            .map_err(|e| format!("tools/list failed: {}", describe_service_error(&e)))?;
        let value = match answer {
            ServerResult::CustomResult(c) => c.0,
            other => serde_json::to_value(&other).map_err(|e| e.to_string())?,
        };
        let Some(list) = value.get("tools").and_then(Value::as_array) else {
            return Err("tools/list answer has no `tools` array".into());
        };
        let mut full = false;
        for raw in list {
            if tools.len() >= settings.max_tools_per_server {
                full = true;
                break;
            }
            let size = serde_json::to_string(raw).map(|s| s.len()).unwrap_or(0);
            if bytes + size > settings.max_tools_bytes {
                full = true;
                break;
            }
            bytes += size;
            match tool_from(&spec.name, raw, &mut notes) {
                Some(t) if spec.offers(&t.name) => tools.push(t),
                _ => {}
            }
        }
        if full {
            notes.push(format!(
                "tool list truncated: kept {} tools ({} bytes); the limits are {} tools and {} bytes per server",
                tools.len(),
                bytes,
                settings.max_tools_per_server,
                settings.max_tools_bytes
            ));
            break;
        }
        cursor = value
            .get("nextCursor")
            .and_then(Value::as_str)
            .filter(|c| !c.is_empty())
            .map(str::to_string);
        if cursor.is_none() {
            break;
        }
    }
    Ok((tools, notes))
}

fn tool_from(server: &str, raw: &Value, notes: &mut Vec<String>) -> Option<McpTool> {
    let name = raw.get("name").and_then(Value::as_str)?;
    if name.is_empty() || name.chars().count() > 128 || name.chars().any(char::is_control) {
        notes.push(format!(
            "skipped a tool with an invalid name {:?}",
            cap_chars(name.to_string(), 64)
        ));
        return None;
    }
    let input_schema = match raw.get("inputSchema") {
        Some(s @ Value::Object(_)) => s.clone(),
        _ => {
            notes.push(format!(
                "tool {name:?}: inputSchema is not an object; replaced by {{\"type\":\"object\"}}"
            ));
            json!({"type": "object"})
        }
    };
    let text = |k: &str| raw.get(k).and_then(Value::as_str).map(str::to_string);
    Some(McpTool {
        server: server.to_string(),
        name: name.to_string(),
        title: text("title"),
        description: text("description").unwrap_or_default(),
        input_schema,
        annotations: raw.get("annotations").filter(|a| !a.is_null()).cloned(),
        content_hash: content_hash(raw),
    })
}

/// Resolves once `stop` is true (or its sender is gone).
/// One `ping` round trip within `limit`.
async fn ping(peer: &Peer<RoleClient>, limit: Duration) -> Result<(), String> {
    let request = rmcp::model::PingRequest {
        method: Default::default(),
        extensions: Default::default(),
    };
    match tokio::time::timeout(limit, peer.send_request(request.into())).await {
        Err(_) => Err(format!("no answer to ping within {}", secs(limit))),
        Ok(Err(e)) => Err(describe_service_error(&e)),
        Ok(Ok(_)) => Ok(()),
    }
}

async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await;
}

/// How a connection ended.
enum Ended {
    Stop,
    Lost(String),
}

async fn supervise(
    settings: HubSettings,
    ctx: HubContext,
    shared: Arc<Shared>,
    mut stop: watch::Receiver<bool>,
    changes: watch::Sender<u64>,
) {
    let name = shared.spec.name.clone();
    let mut wanted = shared.wanted.subscribe();
    tokio::select! {
        _ = async { let _ = wanted.wait_for(|w| *w).await; } => {}
        _ = stopped(&mut stop) => { shared.live().state = State::Stopped; return; }
    }
    let mut backoff = settings.backoff_min;
    let mut first = true;
    loop {
        {
            let mut live = shared.live();
            live.state = State::Starting;
            if !first {
                live.restarts += 1;
            }
        }
        first = false;
        let (relist_tx, mut relist_rx) = mpsc::channel(1);
        let attempt = tokio::select! {
            r = connect(&settings, &ctx, &shared.spec, Handler {
                server: name.clone(),
                relist: relist_tx,
                noise: shared.noise.clone(),
            }) => Some(r),
            _ = stopped(&mut stop) => None,
        };
        let ended = match attempt {
            None => Ended::Stop,
            Some(Err(e)) => {
                // Errors of connecting quote the URL or the program.
                let message = shared.spec.scrub(&e.message);
                warn!(server = %name, error = %message, "MCP server did not start");
                let fatal = {
                    let mut live = shared.live();
                    live.last_error = Some(message);
                    if !e.retry {
                        live.state = State::Failed;
                    }
                    !e.retry
                };
                if fatal {
                    stopped(&mut stop).await;
                    shared.live().state = State::Stopped;
                    return;
                }
                Ended::Lost(String::new())
            }
            Some(Ok(conn)) => {
                let up_since = Instant::now();
                let ended = run(
                    &settings,
                    &shared,
                    conn,
                    &mut stop,
                    &mut relist_rx,
                    &changes,
                )
                .await;
                if up_since.elapsed() >= settings.backoff_max {
                    backoff = settings.backoff_min;
                }
                ended
            }
        };
        match ended {
            Ended::Stop => {
                let mut live = shared.live();
                live.state = State::Stopped;
                live.peer = None;
                live.oversized = None;
                live.pid = None;
                drop(live);
                bump(&changes);
                return;
            }
            Ended::Lost(reason) => {
                let reason = shared.spec.scrub(&reason);
                let mut live = shared.live();
                if !reason.is_empty() {
                    warn!(server = %name, %reason, "MCP server connection lost");
                    live.last_error = Some(reason);
                }
                let was_ready = !live.tools.is_empty() || live.peer.is_some();
                live.state = State::Backoff;
                live.peer = None;
                live.oversized = None;
                live.pid = None;
                live.tools.clear();
                drop(live);
                if was_ready {
                    bump(&changes);
                }
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(backoff) => {}
            _ = stopped(&mut stop) => {
                shared.live().state = State::Stopped;
                return;
            }
        }
        backoff = (backoff * 2).min(settings.backoff_max);
    }
}

/// Serve one connection until it ends or the server is stopped.
async fn run(
    settings: &HubSettings,
    shared: &Shared,
    conn: Connection,
    stop: &mut watch::Receiver<bool>,
    relist: &mut mpsc::Receiver<()>,
    changes: &watch::Sender<u64>,
) -> Ended {
    let Connection {
        service,
        process,
        oversized,
    } = conn;
    let peer = service.peer().clone();
    let cancel = service.cancellation_token();
    let mut done = tokio::spawn(service.waiting());
    // A stop is honoured while the first listing is under way, too.
    let listed = tokio::select! {
        r = list_tools(settings, &shared.spec, &peer) => Some(r),
        _ = stopped(stop) => None,
    };
    let ended = match listed {
        None => Ended::Stop,
        Some(Err(e)) => Ended::Lost(e),
        Some(Ok((tools, notes))) => {
            {
                for note in &notes {
                    warn!(server = %shared.spec.name, "{note}");
                }
                let mut live = shared.live();
                info!(server = %shared.spec.name, tools = tools.len(), "MCP server ready");
                live.state = State::Ready;
                live.tools = tools;
                live.notes = notes;
                live.peer = Some(peer.clone());
                live.oversized = oversized.clone();
                live.pid = process.as_ref().map(ServerProcess::pid);
                live.last_error = None;
            }
            bump(changes);
            let mut health = tokio::time::interval_at(
                tokio::time::Instant::now() + settings.ping_interval,
                settings.ping_interval,
            );
            let mut relists = RelistPacer::new(settings);
            loop {
                tokio::select! {
                    _ = stopped(stop) => break Ended::Stop,
                    _ = &mut done => break Ended::Lost("the server closed the connection".into()),
                    _ = health.tick() => {
                        if let Err(problem) = ping(&peer, settings.init_timeout).await {
                            break Ended::Lost(format!("health check failed: {problem}"));
                        }
                    }
                    Some(()) = relist.recv() => relists.changed(tokio::time::Instant::now()),
                    () = until(relists.due) => {
                        relists.listed(tokio::time::Instant::now());
                        shared.noise.record(Kind::Relist);
                        relist_tools(settings, shared, &peer, changes).await;
                    }
                }
            }
        }
    };
    cancel.cancel();
    done.abort();
    if let Some(p) = process {
        p.stop(settings.stop_grace).await;
    }
    ended
}
/// List the tools again after a list change. Index and log see only real
/// changes: the same list again bumps nothing, and notes or a failure are
/// logged only when they differ from the last listing's, so a server
/// repeating itself cannot repeat lines in the log.
async fn relist_tools(
    settings: &HubSettings,
    shared: &Shared,
    peer: &Peer<RoleClient>,
    changes: &watch::Sender<u64>,
) {
    let name = &shared.spec.name;
    match list_tools(settings, &shared.spec, peer).await {
        Ok((tools, notes)) => {
            let mut live = shared.live();
            if live.notes != notes {
                for note in &notes {
                    warn!(server = %name, "{note}");
                }
            }
            let changed = live.tools != tools;
            live.tools = tools;
            live.notes = notes;
            live.relist_error = None;
            drop(live);
            if changed {
                bump(changes);
            }
        }
        Err(e) => {
            let mut live = shared.live();
            if live.relist_error.as_deref() != Some(e.as_str()) {
                warn!(server = %name, error = %cap_chars(shared.spec.scrub(&e), 300), "re-listing tools failed");
            }
            live.relist_error = Some(e);
        }
    }
}

/// Paces re-listings: a list change is answered at once when the server
/// was not re-listed within [`HubSettings::relist_interval`], else at the
/// end of that interval (trailing edge: changes in between share that one
/// re-list, and the last one is never lost), and never more than
/// [`HubSettings::max_relists_per_minute`] times in a minute.
struct RelistPacer {
    interval: Duration,
    per_minute: usize,
    /// When the recent re-lists started, oldest first (the last minute's).
    recent: std::collections::VecDeque<tokio::time::Instant>,
    /// When the pending re-list is due; `None`: nothing changed.
    due: Option<tokio::time::Instant>,
}

impl RelistPacer {
    fn new(settings: &HubSettings) -> Self {
        Self {
            interval: settings.relist_interval,
            per_minute: settings.max_relists_per_minute.max(1),
            recent: std::collections::VecDeque::new(),
            due: None,
        }
    }

    /// The server said its list changed at `now`.
    fn changed(&mut self, now: tokio::time::Instant) {
        if self.due.is_some() {
            return;
        }
        let minute = Duration::from_secs(60);
        while self
            .recent
            .front()
            .is_some_and(|t| now.duration_since(*t) >= minute)
        {
            self.recent.pop_front();
        }
        let mut due = now;
        if let Some(last) = self.recent.back() {
            due = due.max(*last + self.interval);
        }
        if self.recent.len() >= self.per_minute {
            if let Some(oldest) = self.recent.front() {
                due = due.max(*oldest + minute);
            }
        }
        self.due = Some(due);
    }

    /// A re-list starts at `now`.
    fn listed(&mut self, now: tokio::time::Instant) {
        self.due = None;
        self.recent.push_back(now);
        while self.recent.len() > self.per_minute {
            self.recent.pop_front();
        }
    }
}

/// Resolves at `at`; never for `None`.
async fn until(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// Resolves when the server drops a message for its size after this
/// point; never for a server without a size watch or once it is gone (the
/// call then ends by itself).
async fn dropped_for_size(oversized: Option<watch::Receiver<u64>>) {
    if let Some(mut seen) = oversized {
        seen.mark_unchanged();
        if seen.changed().await.is_ok() {
            return;
        }
    }
    std::future::pending::<()>().await;
}

/// "initialize failed: <why>" without the SDK's transport type names, which
/// say nothing to an operator: rmcp renders a transport error as
/// `Send message error Transport [<type>] error: Client error: <why>, when
/// send initialize request`.
fn init_failed(error: &dyn std::fmt::Display) -> String {
    let text = error.to_string();
    let why = match text.find("Client error: ") {
        Some(at) => text
            .get(at + "Client error: ".len()..)
            .unwrap_or(&text)
            .trim_end_matches(", when send initialize request"),
        None => text.as_str(),
    };
    format!("initialize failed: {why}")
}

#[cfg(test)]
mod tests {
    use super::{init_failed, HubSettings, RelistPacer};
    use std::time::Duration;

    #[test]
    fn list_changes_are_paced_trailing_edge_and_per_minute() {
        let mut pacer = RelistPacer::new(&HubSettings::default());
        let t0 = tokio::time::Instant::now();
        let s = Duration::from_secs;
        // The first change is answered at once.
        pacer.changed(t0);
        assert_eq!(pacer.due, Some(t0));
        pacer.listed(t0);
        // Changes within the interval share one re-list at its end.
        pacer.changed(t0 + Duration::from_millis(100));
        assert_eq!(pacer.due, Some(t0 + s(2)));
        pacer.changed(t0 + Duration::from_millis(1_900));
        assert_eq!(pacer.due, Some(t0 + s(2)));
        pacer.listed(t0 + s(2));
        // A storm: ten re-lists fill the minute, the next waits for room.
        let mut at = t0 + s(2);
        for _ in 0..8 {
            pacer.changed(at);
            at = pacer.due.unwrap();
            pacer.listed(at);
        }
        assert_eq!(at, t0 + s(18), "every 2 s while the minute has room");
        pacer.changed(at);
        assert_eq!(
            pacer.due,
            Some(t0 + s(60)),
            "the eleventh waits for the minute"
        );
        // Without changes nothing is due.
        pacer.listed(t0 + s(60));
        assert_eq!(pacer.due, None);
    }

    #[test]
    fn an_initialize_error_drops_the_sdks_type_names() {
        let sdk = "Send message error Transport [rmcp::transport::worker::WorkerTransport<x::Client>] \
                   error: Client error: TLS with 127.0.0.1: invalid peer certificate: UnknownIssuer, \
                   when send initialize request";
        assert_eq!(
            init_failed(&sdk),
            "initialize failed: TLS with 127.0.0.1: invalid peer certificate: UnknownIssuer"
        );
        assert_eq!(
            init_failed(&"connection closed"),
            "initialize failed: connection closed"
        );
    }
}

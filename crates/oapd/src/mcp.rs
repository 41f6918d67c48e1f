//! The MCP servers the operator already runs (`mcp:`): their entries read
//! from the config and from a Claude-Desktop style servers file, the hub
//! that keeps them running (`oap-mcp`), the tool source the index reads,
//! and the rebuild when a server's tools change.
//!
//! The hub lives as long as the daemon: a reload applies the new entries
//! to it (added servers start, changed ones restart, removed ones are
//! stopped with their process group), so unchanged servers keep running.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use oap_discovery::{McpToolDoc, McpTools, Trust};
use oap_mcp::{Hub, HubContext, HubSettings, ServerSpec, SpecProblem, Transport};
use serde_json::{json, Value};

use crate::config::Config;
use crate::rebuild::Rebuilder;
use crate::tools::ConnectionBasis;

/// Largest servers file read, in bytes.
pub const MAX_SERVERS_FILE_BYTES: u64 = 1024 * 1024;

/// Quiet time after a tool-list change before the index is rebuilt, so a
/// burst of servers coming up costs one rebuild.
const SETTLE: Duration = Duration::from_millis(300);

/// What the index and `/health` need to know of a server beyond the hub.
#[derive(Debug, Clone)]
struct ServerInfo {
    trust: Trust,
    location: String,
    /// Started on its first call, not at start.
    lazy: bool,
}

/// The configured MCP servers and their hub.
pub struct McpServers {
    hub: Hub,
    /// What the hub's context was built from, so a reload reconnects URL
    /// servers only when it changed.
    connection_basis: Mutex<ConnectionBasis>,
    servers: Mutex<BTreeMap<String, ServerInfo>>,
    problems: Mutex<Vec<SpecProblem>>,
    /// Each server's tools as last listed while it was ready: a server
    /// that is restarting keeps its tools in the index (a call meanwhile
    /// is a clear "not ready" tool error), so a crash costs no re-embedding
    /// and discovery does not flicker.
    last_listed: Mutex<BTreeMap<String, Vec<oap_mcp::McpTool>>>,
}

impl std::fmt::Debug for McpServers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpServers")
            .field("servers", &self.lock_servers().len())
            .finish()
    }
}

impl McpServers {
    /// The hub for `config` with its servers applied; connecting happens in
    /// the background, so a slow or broken server delays nothing. Needs a
    /// Tokio runtime.
    pub fn start(config: &Config, ctx: HubContext, basis: ConnectionBasis) -> Arc<McpServers> {
        let servers = Arc::new(McpServers {
            hub: Hub::new(hub_settings(config), ctx),
            connection_basis: Mutex::new(basis),
            servers: Mutex::new(BTreeMap::new()),
            problems: Mutex::new(Vec::new()),
            last_listed: Mutex::new(BTreeMap::new()),
        });
        servers.apply(config);
        servers
    }

    /// A reload's new limits and context (from the executor built for the
    /// reloaded config): URL servers reconnect when the CA certificates,
    /// the credential store's secrets or the address rule changed, so a
    /// rotated token or a new CA takes effect on SIGHUP as it does for HTTP
    /// tools. Call before [`McpServers::apply`].
    pub fn reconfigure(&self, config: &Config, ctx: HubContext, basis: ConnectionBasis) {
        let changed = {
            let mut current = self
                .connection_basis
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            let changed = *current != basis;
            *current = basis;
            changed
        };
        self.hub.reconfigure(hub_settings(config), ctx, changed);
    }

    /// Makes the running servers match `config` (start, reload).
    pub fn apply(&self, config: &Config) {
        let (specs, problems) = read_specs(config);
        for problem in &problems {
            tracing::warn!(path = %problem.path, problem = %problem.message, "MCP server entry skipped");
        }
        let infos: BTreeMap<String, ServerInfo> = specs
            .iter()
            .map(|spec| (spec.name.clone(), info(spec)))
            .collect();
        if !specs.is_empty() {
            tracing::info!(
                servers = specs.len(),
                names = %infos.keys().cloned().collect::<Vec<_>>().join(", "),
                "MCP servers configured"
            );
        }
        *self.lock_servers() = infos;
        *self.problems.lock().unwrap_or_else(|p| p.into_inner()) = problems;
        self.hub.apply(specs);
    }

    /// The hub (for calls).
    pub fn hub(&self) -> &Hub {
        &self.hub
    }

    /// Each server's state, tool count and last error, and the entries
    /// that could not be read: `/v1/mcp/status` and `/health`'s `mcp`.
    pub fn status(&self) -> Value {
        let problems = self
            .problems
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        let infos = self.lock_servers().clone();
        let servers: Vec<Value> = self
            .hub
            .status()
            .into_iter()
            .map(|status| {
                let mut value = serde_json::to_value(&status).unwrap_or(Value::Null);
                if let (Some(info), Some(object)) = (infos.get(&status.name), value.as_object_mut())
                {
                    object.insert("location".into(), info.location.clone().into());
                    object.insert(
                        "trust".into(),
                        serde_json::to_value(info.trust).unwrap_or(Value::Null),
                    );
                }
                value
            })
            .collect();
        json!({"servers": servers, "problems": problems})
    }

    /// Waits until every server that starts at once has come up or given
    /// up once (ready, backing off or failed), at most `limit`: the
    /// one-shot commands index what the servers offer, as the daemon does.
    pub async fn settled(&self, limit: Duration) {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let lazy: Vec<String> = self
                .lock_servers()
                .iter()
                .filter(|(_, info)| info.lazy)
                .map(|(name, _)| name.clone())
                .collect();
            let waiting = self
                .hub
                .status()
                .iter()
                .any(|s| s.state == oap_mcp::State::Starting && !lazy.contains(&s.name));
            if !waiting || tokio::time::Instant::now() >= deadline {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// True when no server is configured.
    pub fn is_empty(&self) -> bool {
        self.lock_servers().is_empty()
    }

    /// Stops every server (process groups killed).
    pub async fn shutdown(&self) {
        self.hub.shutdown().await;
    }

    fn lock_servers(&self) -> MutexGuard<'_, BTreeMap<String, ServerInfo>> {
        self.servers.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl McpTools for McpServers {
    fn mcp_tools(&self) -> Vec<McpToolDoc> {
        let infos = self.lock_servers().clone();
        let mut listed: BTreeMap<String, Vec<oap_mcp::McpTool>> = BTreeMap::new();
        for tool in self.hub.tools() {
            listed.entry(tool.server.clone()).or_default().push(tool);
        }
        let mut last = self.last_listed.lock().unwrap_or_else(|p| p.into_inner());
        for status in self.hub.status() {
            match status.state {
                oap_mcp::State::Ready => {
                    last.insert(
                        status.name.clone(),
                        listed.remove(&status.name).unwrap_or_default(),
                    );
                }
                // Coming back: keep what it listed before.
                oap_mcp::State::Starting | oap_mcp::State::Backoff => {}
                oap_mcp::State::Failed | oap_mcp::State::Stopped => {
                    last.remove(&status.name);
                }
            }
        }
        last.retain(|name, _| infos.contains_key(name));
        last.iter()
            .flat_map(|(name, tools)| tools.iter().map(move |tool| (name, tool)))
            .filter_map(|(name, tool)| {
                let info = infos.get(name)?;
                Some(McpToolDoc {
                    trust: info.trust,
                    location: info.location.clone(),
                    server: tool.server.clone(),
                    name: tool.name.clone(),
                    title: tool.title.clone(),
                    description: tool.description.clone(),
                    input_schema: tool.input_schema.clone(),
                    annotations: tool.annotations.clone(),
                    content_hash: tool.content_hash.clone(),
                })
            })
            .collect()
    }
}

fn info(spec: &ServerSpec) -> ServerInfo {
    let lazy = spec.start == oap_mcp::Start::Lazy;
    match &spec.transport {
        Transport::Stdio { .. } => ServerInfo {
            // The operator configured the command: trusted like a service
            // they installed.
            trust: Trust::Local,
            // Redacted: the program may come from `${env:}`.
            location: spec.location().to_string(),
            lazy,
        },
        Transport::Http { trust, .. } => ServerInfo {
            trust: match trust {
                oap_exec::Trust::Local => Trust::Local,
                oap_exec::Trust::Lan => Trust::Lan,
                oap_exec::Trust::Internet => Trust::Internet,
            },
            // Without its query or anything from `${env:}`: this is shown
            // in /health, /v1/mcp/status, manifests and `oapd config`.
            location: spec.location().to_string(),
            lazy,
        },
    }
}

/// The hub's limits from `mcp:` and `tools:`.
fn hub_settings(config: &Config) -> HubSettings {
    HubSettings {
        init_timeout: Duration::from_secs(config.mcp.init_timeout),
        call_timeout: Duration::from_secs(config.mcp.call_timeout),
        max_result_chars: config.tools.max_result_chars,
        ..HubSettings::default()
    }
}

/// The servers `config` names: `mcp.servers` first, then the servers
/// file's entries whose names are not taken; every entry that cannot be
/// read is a problem naming where it is.
pub fn read_specs(config: &Config) -> (Vec<ServerSpec>, Vec<SpecProblem>) {
    let mut specs = Vec::new();
    let mut problems = Vec::new();
    for (name, value) in &config.mcp.servers.0 {
        match oap_mcp::servers_file::parse_server(name, value) {
            Ok(spec) => specs.push(spec),
            Err(mut problem) => {
                problem.path = format!("mcp.servers.{}", problem.path);
                problems.push(problem);
            }
        }
    }
    if let Some(path) = &config.mcp.servers_file {
        let origin = path.display().to_string();
        match crate::files::read_regular(path, MAX_SERVERS_FILE_BYTES) {
            Ok(bytes) => {
                let file =
                    oap_mcp::servers_file::parse(&bytes, &origin, |var| std::env::var(var).ok());
                problems.extend(file.problems);
                for spec in file.servers {
                    if specs.iter().any(|s: &ServerSpec| s.name == spec.name) {
                        problems.push(SpecProblem {
                            path: format!("{origin}: mcpServers.{}", spec.name),
                            message: "also defined in mcp.servers, which is used".into(),
                        });
                    } else {
                        specs.push(spec);
                    }
                }
            }
            Err(err) => problems.push(SpecProblem {
                path: format!("mcp.servers_file {origin}"),
                message: format!("cannot read it: {err}"),
            }),
        }
    }
    (specs, problems)
}

/// What `oapd config` adds after the settings: the MCP servers read from
/// `mcp.servers` and the servers file, and the entries that could not be
/// read, as YAML comments (empty when no server is configured).
pub fn describe_specs(config: &Config) -> String {
    if config.mcp.servers.0.is_empty() && config.mcp.servers_file.is_none() {
        return String::new();
    }
    let (specs, problems) = read_specs(config);
    let mut out = format!("# MCP servers read: {}\n", specs.len());
    for spec in &specs {
        let info = info(spec);
        let trust = serde_json::to_value(info.trust)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default();
        // Debug formatting quotes and escapes: a file's text never
        // becomes terminal control sequences.
        out.push_str(&format!(
            "#   {} ({}, {:?}, trust {trust})\n",
            spec.name,
            spec.transport.kind(),
            info.location,
        ));
    }
    for problem in &problems {
        out.push_str(&format!(
            "# MCP entry skipped: {:?}: {:?}\n",
            problem.path, problem.message
        ));
    }
    out
}

/// Asks for an index rebuild whenever the servers' tools change (a server
/// came up, came back, said `tools/list_changed`, or was removed). One task
/// per engine generation; a reload aborts it with the generation.
pub async fn rebuild_on_change(servers: Arc<McpServers>, rebuilder: Arc<Rebuilder>) {
    let mut changes = servers.hub.changes();
    // Servers may have come up between the engine reading the tools and
    // this task subscribing: one rebuild catches that (it changes nothing
    // when the tools are the same).
    if !servers.is_empty() {
        rebuilder.request("MCP server tools");
    }
    while changes.changed().await.is_ok() {
        // Let a burst settle into one rebuild.
        loop {
            tokio::time::sleep(SETTLE).await;
            if !changes.has_changed().unwrap_or(false) {
                break;
            }
            changes.borrow_and_update();
        }
        // Not awaited, as the directory watch does: a change that arrives
        // while a rebuild still embeds makes that embedding step aside and
        // one more rebuild follow, so the new tools are served (lexically
        // first) without waiting for the vectors of the old ones.
        rebuilder.request("MCP server tools changed");
    }
}

/// How often the servers file is looked at for changes.
const FILE_POLL: Duration = Duration::from_secs(2);

/// What identifies one version of the servers file without reading it.
fn file_signature(path: &std::path::Path) -> Option<(std::time::SystemTime, u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(path).ok()?;
    Some((meta.modified().ok()?, meta.len(), meta.ino()))
}

/// Applies the servers file again whenever it changes (an edit, or a new
/// file renamed over it), so servers can be added, changed and removed
/// without a restart or a signal. One task per engine generation, with
/// the generation's config; a reload aborts it with the generation.
pub async fn watch_servers_file(servers: Arc<McpServers>, config: Config) {
    let Some(path) = config.mcp.servers_file.clone() else {
        return;
    };
    let mut seen = file_signature(&path);
    loop {
        tokio::time::sleep(FILE_POLL).await;
        let now = file_signature(&path);
        if now != seen {
            seen = now;
            tracing::info!(path = %path.display(), "MCP servers file changed: applying it");
            servers.apply(&config);
        }
    }
}

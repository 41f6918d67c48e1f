//! `GET /v1/status`: what the status page shows that no other endpoint
//! answers — manifests counted by source, how the last index build ended,
//! and whether Ollama answers and with which models.
//!
//! Also who sees how much of the daemon's state. `/health` and
//! `/v1/mcp/status` name where MCP servers are (URLs, programs) and quote
//! errors, which can tell an attacker where to go next even with secrets
//! redacted. Only the operator sees them ([`View::Operator`]: the caller
//! presented `server.auth_token`, or no token is configured and the
//! caller is on loopback, i.e. on the daemon's own machine); every other
//! caller allowed in (a `server.trusted_clients` address, a LAN client of a
//! daemon without a token) gets counts and states ([`View::Counts`]),
//! built from an allow-list so a field added later stays operator-only
//! until it is listed here.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use hyper::{HeaderMap, Method, Response, StatusCode};
use oap_bridge::upstream::{self, Upstream};
use serde_json::{json, Value};

use super::state::Api;
use crate::server::transport::http::{self, Body};

/// How long `/v1/status` waits for Ollama's model list.
pub const OLLAMA_PROBE_TIMEOUT: Duration = Duration::from_secs(3);

/// Largest `/api/tags` answer read.
const MAX_TAGS_BYTES: usize = 1024 * 1024;

/// Models listed at most (a board holds a handful).
const MAX_MODELS: usize = 256;

/// Every source a manifest can come from, counted even when empty.
const SOURCES: [&str; 6] = ["bundled", "dir", "crawl", "lan", "snapshot", "mcp"];

/// The status document.
pub async fn handle(api: &Api) -> Response<Body> {
    let mut by_source: BTreeMap<String, usize> =
        SOURCES.iter().map(|s| ((*s).to_string(), 0)).collect();
    let manifests = api.engine.list();
    for summary in &manifests {
        *by_source.entry(summary.source.clone()).or_default() += 1;
    }
    let body = json!({
        "version": env!("CARGO_PKG_VERSION"),
        "manifests": {"total": manifests.len(), "by_source": by_source},
        "last_rebuild": api.engine.last_build(),
        // Lexical while a start left vectors to embed in the background.
        "retrieval": {"mode": api.engine.mode(), "pending_texts": api.engine.pending_texts()},
        "ollama": ollama(&api.chat.ctx.upstream).await,
    });
    http::json(StatusCode::OK, &body)
}

/// `{"reachable", "models": [{"name", "size"}], "error"}` from Ollama's
/// `/api/tags`, asked with a short deadline.
async fn ollama(upstream: &Upstream) -> Value {
    let probe = async {
        let response = upstream
            .send(
                Method::GET,
                "/api/tags",
                &HeaderMap::new(),
                upstream::full(Vec::new()),
            )
            .await
            .map_err(|err| err.to_string())?;
        let status = response.status();
        let bytes = upstream::read_limited(response.into_body(), MAX_TAGS_BYTES)
            .await
            .map_err(|err| format!("reading /api/tags: {err}"))?;
        if !status.is_success() {
            return Err(format!("/api/tags answered {status}"));
        }
        serde_json::from_slice::<Value>(&bytes)
            .map_err(|err| format!("/api/tags is not JSON: {err}"))
    };
    let tags = match tokio::time::timeout(OLLAMA_PROBE_TIMEOUT, probe).await {
        Ok(Ok(tags)) => tags,
        Ok(Err(error)) => return json!({"reachable": false, "models": [], "error": error}),
        Err(_) => {
            return json!({
                "reachable": false,
                "models": [],
                "error": format!(
                    "no model list from {} within {} s",
                    upstream.base_url(),
                    OLLAMA_PROBE_TIMEOUT.as_secs()
                ),
            })
        }
    };
    let models: Vec<Value> = tags
        .get("models")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .filter_map(|model| {
            let name = model
                .get("name")
                .or_else(|| model.get("model"))
                .and_then(Value::as_str)?;
            Some(json!({"name": name, "size": model.get("size").and_then(Value::as_u64)}))
        })
        .take(MAX_MODELS)
        .collect();
    json!({"reachable": true, "models": models, "error": null})
}

/// How much of the daemon's state a caller sees.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum View {
    /// Everything, secrets still redacted: locations, errors, notes.
    Operator,
    /// Counts and states only.
    Counts,
}

impl View {
    /// The view of a caller that did (`carries_token`) or did not present
    /// the configured token, from `peer`.
    pub fn of(carries_token: bool, token_configured: bool, peer: Option<SocketAddr>) -> View {
        let local_without_token =
            !token_configured && peer.is_some_and(|p| p.ip().to_canonical().is_loopback());
        if carries_token || local_without_token {
            View::Operator
        } else {
            View::Counts
        }
    }
}

/// Copies the listed keys of `from` that are present.
fn pick(from: &Value, keys: &[&str]) -> Value {
    let mut out = serde_json::Map::new();
    for key in keys {
        if let Some(value) = from.get(*key) {
            out.insert((*key).to_string(), value.clone());
        }
    }
    Value::Object(out)
}

/// `/health` for [`View::Counts`]: whether the daemon is well, its index
/// and MCP servers counted, no location, path or error text.
pub fn health_counts(full: &Value) -> Value {
    let mut out = pick(
        full,
        &[
            "status",
            "version",
            "retrieval",
            "load_problems",
            "collisions",
        ],
    );
    out["model"] = pick(&full["model"], &["loaded", "id"]);
    out["index"] = pick(
        &full["index"],
        &[
            "manifests",
            "rows",
            "bytes",
            "dtype",
            "pending_texts",
            "behind",
        ],
    );
    // Fixed facts of the kernel, as the README tells anyone to look here.
    out["tool_sandbox"] = pick(
        &full["tool_sandbox"],
        &["mode", "landlock_abi", "seccomp", "active", "missing"],
    );
    out["mcp"] = mcp_counts(&full["mcp"]);
    // Version and outcome words only; the URL and error texts stay the
    // operator's.
    if !full["snapshot"].is_null() {
        out["snapshot"] = pick(
            &full["snapshot"],
            &[
                "version",
                "model",
                "key_id",
                "installed_at",
                "last_check",
                "last_outcome",
            ],
        );
    }
    out["request_generation"] = pick(
        &full["request_generation"],
        &[
            "enabled",
            "model",
            "generated",
            "pending",
            "failed",
            "calls",
            "failed_calls",
        ],
    );
    out
}

/// `{"servers": n, "states": {"ready": n, ...}, "problems": n}` from the
/// full MCP status (`{"servers": [..], "problems": [..]}`).
pub fn mcp_counts(full: &Value) -> Value {
    let servers = full["servers"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default();
    let mut states: BTreeMap<String, usize> = BTreeMap::new();
    for server in servers {
        if let Some(state) = server["state"].as_str() {
            *states.entry(state.to_string()).or_default() += 1;
        }
    }
    json!({
        "servers": servers.len(),
        "states": states,
        "problems": full["problems"].as_array().map_or(0, Vec::len),
    })
}

/// `/v1/mcp/status` for [`View::Counts`]: each server's name, transport,
/// state, trust and tool count (what the status page's table needs), the
/// unreadable entries counted; no location, error, note or process id.
pub fn mcp_status_counts(full: &Value) -> Value {
    let servers: Vec<Value> = full["servers"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .map(|server| {
            pick(
                server,
                &["name", "transport", "state", "tools", "restarts", "trust"],
            )
        })
        .collect();
    json!({
        "servers": servers,
        "problems": [],
        "problems_count": full["problems"].as_array().map_or(0, Vec::len),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn full_mcp() -> Value {
        json!({
            "servers": [
                {"name": "a", "transport": "http", "state": "backoff", "tools": 0,
                 "restarts": 3, "trust": "internet",
                 "location": "http://10.0.0.5:9/mcp?<redacted>",
                 "last_error": "cannot connect to 10.0.0.5:9: refused", "notes": [], "pid": null},
                {"name": "b", "transport": "stdio", "state": "ready", "tools": 2,
                 "restarts": 0, "trust": "local", "location": "stdio: /opt/b",
                 "last_error": null, "notes": ["n"], "pid": 42}
            ],
            "problems": [{"path": "/etc/oapd/mcp.json: mcpServers.c", "message": "x"}]
        })
    }

    #[test]
    fn only_a_token_or_a_local_caller_of_a_tokenless_daemon_sees_everything() {
        let lan: SocketAddr = "192.168.1.20:5000".parse().unwrap();
        let local: SocketAddr = "127.0.0.1:5000".parse().unwrap();
        let mapped: SocketAddr = "[::ffff:127.0.0.1]:5000".parse().unwrap();
        assert_eq!(View::of(true, true, Some(lan)), View::Operator);
        assert_eq!(View::of(false, false, Some(local)), View::Operator);
        assert_eq!(View::of(false, false, Some(mapped)), View::Operator);
        // A trusted address (token configured, not presented).
        assert_eq!(View::of(false, true, Some(local)), View::Counts);
        assert_eq!(View::of(false, true, Some(lan)), View::Counts);
        // A LAN client of a daemon without a token.
        assert_eq!(View::of(false, false, Some(lan)), View::Counts);
        assert_eq!(View::of(false, false, None), View::Counts);
    }

    #[test]
    fn counts_name_no_location_and_no_error() {
        let counts = mcp_counts(&full_mcp());
        assert_eq!(
            counts,
            json!({"servers": 2, "states": {"backoff": 1, "ready": 1}, "problems": 1})
        );
        let listed = mcp_status_counts(&full_mcp()).to_string();
        for hidden in [
            "10.0.0.5",
            "/opt/b",
            "refused",
            "location",
            "pid",
            "/etc/oapd",
        ] {
            assert!(!listed.contains(hidden), "{hidden} in {listed}");
        }
        assert!(listed.contains("\"backoff\"") && listed.contains("\"internet\""));
        let health = health_counts(&json!({
            "status": "degraded", "reason": "index rebuild failed: /srv/secret: denied",
            "model": {"loaded": false, "error": "no file /srv/model"},
            "index": {"manifests": 3, "rebuild_failure": {"error": "/srv/secret"}, "watch": "inotify"},
            "mcp": full_mcp(),
            "request_generation": {"enabled": true, "last_error": "http://10.0.0.5 said 500"},
        }))
        .to_string();
        for hidden in ["/srv", "10.0.0.5", "reason", "error"] {
            assert!(!health.contains(hidden), "{hidden} in {health}");
        }
        assert!(health.contains("\"degraded\"") && health.contains("\"manifests\":3"));
    }
}

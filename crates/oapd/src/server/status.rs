//! `GET /v1/status`: what the status page shows that no other endpoint
//! answers — manifests counted by source, how the last index build ended,
//! and whether Ollama answers and with which models.

use std::collections::BTreeMap;
use std::time::Duration;

use hyper::{HeaderMap, Method, Response, StatusCode};
use oap_bridge::upstream::{self, Upstream};
use serde_json::{json, Value};

use super::api::Api;
use super::http::{self, Body};

/// How long `/v1/status` waits for Ollama's model list.
pub const OLLAMA_PROBE_TIMEOUT: Duration = Duration::from_secs(3);

/// Largest `/api/tags` answer read.
const MAX_TAGS_BYTES: usize = 1024 * 1024;

/// Models listed at most (a board holds a handful).
const MAX_MODELS: usize = 256;

/// Every source a manifest can come from, counted even when empty.
const SOURCES: [&str; 5] = ["bundled", "dir", "crawl", "lan", "mcp"];

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

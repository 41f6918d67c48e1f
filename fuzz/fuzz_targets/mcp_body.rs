//! `/mcp` request bodies: arbitrary bytes posted to the daemon's MCP
//! endpoint the way a real client posts them (Accept JSON and SSE,
//! `Content-Type: application/json`, a protocol version), through the path
//! the daemon serves them by: the body check, then rmcp's transport and
//! oapd's MCP tools over a one-tool catalog (lexical discovery, no model).
//! Invariants: nothing panics; every answer is a JSON-RPC 2.0 object (a
//! result, or an error with an integer code) as `application/json`, an SSE
//! stream of such objects, an empty 202 for a notification, or a client
//! error carrying a JSON-RPC error object; never a server error; each body
//! is answered within seconds. Builds the whole daemon, so it is behind the
//! `daemon` feature.
#![no_main]

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::{Method, Request};
use libfuzzer_sys::fuzz_target;
use oapd::harness::{McpServer, McpSettings};
use serde_json::Value;

/// What every input is answered by, built once.
struct Fixture {
    runtime: tokio::runtime::Runtime,
    server: McpServer,
    _dir: tempfile::TempDir,
}

/// A catalog of one stdio tool (`wc`), so `oap_discover` finds something
/// and `oap_invoke` runs something, under the daemon's own sandbox.
const WC_MANIFEST: &str = r#"{
  "oap": "1.0",
  "name": "wc",
  "description": "Counts the lines, words and bytes of a text.",
  "input": {"format": "text/plain", "description": "The text to count."},
  "output": {"format": "text/plain", "description": "Lines, words and bytes."},
  "invoke": {"method": "stdio", "url": "wc"}
}"#;

fn fixture() -> &'static Fixture {
    static FIXTURE: OnceLock<Fixture> = OnceLock::new();
    FIXTURE.get_or_init(|| {
        let dir = tempfile::tempdir().expect("state directory");
        let manifests = dir.path().join("manifests");
        std::fs::create_dir_all(&manifests).expect("manifest directory");
        std::fs::write(manifests.join("wc.json"), WC_MANIFEST).expect("manifest");
        let yaml = format!(
            "index:\n  data_dir: {:?}\nembedding:\n  enabled: false\n\
             manifests:\n  bundled: false\n  dirs: [{manifests:?}]\n",
            dir.path().join("data"),
        );
        let config = oapd::harness::Config::from_yaml_str(&yaml, Vec::new())
            .expect("fuzz configuration")
            .config;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("runtime");
        let server = runtime.block_on(async {
            let (engine, _report) =
                oapd::harness::open_engine_with(&config, None, None).expect("engine");
            let runner = oapd::harness::ExecRunner::new(&config).expect("tool runner");
            let chat = oapd::harness::chat_service(&config, Arc::new(engine), runner)
                .expect("chat service");
            McpServer::new(
                Arc::new(chat),
                McpSettings {
                    max_body_bytes: config.server.max_body_bytes,
                    max_task_bytes: config.server.max_task_bytes,
                    default_top_k: config.discovery.default_top_k,
                },
            )
        });
        Fixture {
            runtime,
            server,
            _dir: dir,
        }
    })
}

/// A JSON-RPC 2.0 response or error object.
fn assert_json_rpc_answer(value: &Value, what: &str) {
    assert_eq!(value["jsonrpc"], "2.0", "{what}: {value}");
    assert!(value.get("id").is_some(), "{what}: no id: {value}");
    match (value.get("result"), value.get("error")) {
        (Some(_), None) => {}
        (None, Some(error)) => {
            assert!(error["code"].is_i64(), "{what}: error code: {value}");
            assert!(
                error["message"].is_string(),
                "{what}: error message: {value}"
            );
        }
        _ => panic!("{what}: neither a result nor an error: {value}"),
    }
}

fuzz_target!(|data: &[u8]| {
    let fixture = fixture();
    let (parts, ()) = Request::builder()
        .method(Method::POST)
        .uri("/mcp")
        .header("accept", "application/json, text/event-stream")
        .header("content-type", "application/json")
        .header("mcp-protocol-version", "2025-06-18")
        .body(())
        .expect("request head")
        .into_parts();
    let body = Bytes::copy_from_slice(data);
    let (status, content_type, answer) = fixture.runtime.block_on(async {
        // Generous: a tool run is a process start, discovery a lexical
        // search over one manifest; minutes would mean a hang.
        let response =
            tokio::time::timeout(Duration::from_secs(8), fixture.server.answer(parts, body))
                .await
                .unwrap_or_else(|_| panic!("no answer within 8 s"));
        let status = response.status();
        let content_type = response
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        let answer = response
            .into_body()
            .collect()
            .await
            .expect("answer body")
            .to_bytes();
        (status, content_type, answer)
    });
    let text = String::from_utf8_lossy(&answer);
    assert!(!status.is_server_error(), "{status}: {text}");
    if status.as_u16() == 202 {
        assert!(answer.is_empty(), "202 with a body: {text}");
        return;
    }
    if content_type.starts_with("text/event-stream") {
        assert_eq!(status.as_u16(), 200, "{text}");
        for line in text.lines() {
            if let Some(data) = line.strip_prefix("data:") {
                if data.trim().is_empty() {
                    continue;
                }
                let value: Value = serde_json::from_str(data.trim())
                    .unwrap_or_else(|e| panic!("SSE data is not JSON ({e}): {data}"));
                assert_json_rpc_answer(&value, "SSE event");
            }
        }
        return;
    }
    assert!(
        content_type.starts_with("application/json"),
        "{status} as {content_type:?}: {text}"
    );
    let value: Value = serde_json::from_slice(&answer)
        .unwrap_or_else(|e| panic!("{status}: not JSON ({e}): {text}"));
    assert_json_rpc_answer(&value, status.as_str());
    if status.is_client_error() {
        assert!(
            value.get("error").is_some(),
            "{status} without an error: {value}"
        );
    }
});

//! Talking to the fake Ollama and a bridge in front of it outside the load
//! runs: the fake's scripts and recorded requests, one chat, the check
//! that a tool round really ran, and waiting for oapd to index a server.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use serde_json::{json, Value};

use super::{MODEL, PROMPT};

fn exchange(addr: SocketAddr, method: &str, path: &str, body: &str) -> Result<(u16, String)> {
    oap_testkit::http::exchange(addr, method, path, body, Duration::from_secs(60))
        .with_context(|| format!("{method} http://{addr}{path}"))
}

/// The fake answers every chat with a short text.
pub(super) fn text_script() -> Value {
    json!({
        "models": [{"name": MODEL, "capabilities": ["completion", "tools"]}],
        "check_host": false,
        "default_turn": {"reply": "Here is the answer you asked for."},
    })
}

/// The fake calls `tool` for Paris on every chat and answers every tool
/// result: one tool round per chat, however many run at once.
pub(super) fn tool_script(tool: &str) -> Value {
    json!({
        "models": [{"name": MODEL, "capabilities": ["completion", "tools"]}],
        "check_host": false,
        "default_turn": {"chunks": [{"tool_calls": [
            {"name": tool, "arguments": {"city": "Paris"}}
        ]}]},
        "after_tool_turn": {"echo": "last_tool"},
    })
}

pub(super) fn set_script(fake: SocketAddr, script: &Value) -> Result<()> {
    let (status, body) = exchange(fake, "POST", "/_fake/script", &script.to_string())?;
    if status != 200 {
        bail!("fake-ollama refused the script ({status}): {body}");
    }
    Ok(())
}

pub(super) fn forget_requests(fake: SocketAddr) -> Result<()> {
    exchange(fake, "DELETE", "/_fake/requests", "")?;
    Ok(())
}

/// The bodies of the `/api/chat` requests the fake recorded, in order.
pub(super) fn chat_requests(fake: SocketAddr) -> Result<Vec<Value>> {
    let (status, body) = exchange(fake, "GET", "/_fake/requests?path=/api/chat", "")?;
    if status != 200 {
        bail!("fake-ollama /_fake/requests: {status} {body}");
    }
    let recorded: Vec<Value> =
        serde_json::from_str(&body).context("fake-ollama /_fake/requests is not a JSON list")?;
    Ok(recorded
        .into_iter()
        .map(|r| r.get("body").cloned().unwrap_or(Value::Null))
        .collect())
}

/// One chat, as the load generator sends it, through `addr`.
pub(super) fn chat_once(addr: SocketAddr) -> Result<Value> {
    let body = json!({
        "model": MODEL,
        "messages": [{"role": "user", "content": PROMPT}],
        "stream": false,
    });
    let (status, text) = exchange(addr, "POST", "/api/chat", &body.to_string())?;
    if status != 200 {
        bail!("POST http://{addr}/api/chat: {status} {text}");
    }
    serde_json::from_str(&text).with_context(|| format!("answer of {addr} is not JSON: {text}"))
}

/// One chat through `addr` under the tool script: checks that it took two
/// model turns with the tool's real result fed back; returns that result.
pub(super) fn check_tool_round(fake: SocketAddr, addr: SocketAddr) -> Result<String> {
    forget_requests(fake)?;
    let answer = chat_once(addr)?;
    let sent = chat_requests(fake)?;
    let last = sent
        .get(1)
        .and_then(|b| b.get("messages"))
        .and_then(Value::as_array)
        .and_then(|m| m.last())
        .cloned()
        .unwrap_or(Value::Null);
    if sent.len() != 2 || last.get("role").and_then(Value::as_str) != Some("tool") {
        bail!(
            "expected two model turns, the second ending with the tool result; \
             the fake saw {} chat requests (last message of the second: {last}); answer: {answer}",
            sent.len()
        );
    }
    let result = last
        .get("content")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    if !result.contains("Paris") {
        bail!("the tool result does not come from the server: {result:?}");
    }
    Ok(result)
}

/// Waits until oapd's MCP server `server` is ready with `tools` tools
/// indexed, `tool` among them.
pub(super) fn wait_indexed(addr: SocketAddr, server: &str, tool: &str, tools: u64) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(120);
    let manifest = format!("/v1/manifests/mcp/{server}/{tool}");
    loop {
        let status = exchange(addr, "GET", "/v1/mcp/status", "")
            .ok()
            .and_then(|(_, body)| serde_json::from_str::<Value>(&body).ok())
            .unwrap_or(Value::Null);
        let ready = status["servers"].as_array().is_some_and(|servers| {
            servers.iter().any(|s| {
                s["name"] == server && s["state"] == "ready" && s["tools"].as_u64() == Some(tools)
            })
        });
        if ready && matches!(exchange(addr, "GET", &manifest, ""), Ok((200, _))) {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("oapd never indexed {server}/{tool}: /v1/mcp/status {status}");
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

//! A slow Ollama, as on a board: the model loads from an SD card, or its
//! first round is a tool call that oapd runs before asking again. Every
//! route family is tried against a scripted Ollama that answers later than
//! `server.request_timeout` (1 s here): chats are bounded by
//! `ollama.chat_deadline` and pass-through by `ollama.timeout` instead, and a
//! streamed answer keeps the connection alive meanwhile.

use crate::support;

use crate::support::{fake, Daemon, Upstream};
use fake_ollama::{Echo, ModelSpec, Script, Turn};
use serde_json::{json, Value};
use sha2::Digest;

/// Longer than `server.request_timeout` and two keep-alive intervals.
const SLOW_MS: u64 = 2_600;

fn models() -> Script {
    Script::new()
        .model(ModelSpec::new("qwen3:4b").capabilities(&["completion", "tools"]))
        .check_host(true)
}

fn daemon(upstream: &Upstream, extra: &str) -> Daemon {
    support::daemon()
        .yaml(&format!(
            "ollama:\n  base_url: {:?}\n{extra}",
            upstream.fake.url()
        ))
        .yaml("tool_bridge:\n  stream_keepalive: 1\n")
        .env("OAP_SERVER_REQUEST_TIMEOUT", "1")
        .start()
}

fn chat(stream: bool) -> String {
    json!({"model": "qwen3:4b", "stream": stream,
           "messages": [{"role": "user", "content": "count the words: one two three"}]})
    .to_string()
}

fn ndjson(body: &[u8]) -> Vec<Value> {
    body.split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
        .map(|l| serde_json::from_slice(l).expect("NDJSON line"))
        .collect()
}

/// Empty assistant deltas before the first real chunk: the keep-alives.
fn leading_keepalives(lines: &[Value]) -> usize {
    lines
        .iter()
        .take_while(|l| {
            l["message"]["content"] == ""
                && l["done"] == false
                && l.get("message").and_then(|m| m.get("tool_calls")).is_none()
        })
        .count()
}

#[test]
fn a_slow_streamed_chat_keeps_the_connection_alive_and_answers() {
    let upstream = fake(models().turn(Turn::reply("three words").response_delay_ms(SLOW_MS)));
    let daemon = daemon(&upstream, "");
    let response = daemon.post_json("/api/chat", &chat(true));
    assert_eq!(response.status, 200, "{}", response.error());
    let lines = ndjson(&response.body);
    assert!(leading_keepalives(&lines) >= 1, "{lines:#?}");
    let text: String = lines
        .iter()
        .filter_map(|l| l["message"]["content"].as_str())
        .collect();
    assert_eq!(text, "three words");
    assert_eq!(lines.last().unwrap()["done"], true);
}

#[test]
fn a_slow_first_tool_round_streams_keepalives_then_the_answer() {
    let upstream = fake(
        models()
            .turn(
                Turn::tool_call("oap_wc", json!({"args": "-w", "stdin": "one two three"}))
                    .response_delay_ms(SLOW_MS),
            )
            .turn(Turn::echo(Echo::LastTool).response_delay_ms(SLOW_MS)),
    );
    let daemon = daemon(&upstream, "");
    let response = daemon.post_json("/api/chat", &chat(true));
    assert_eq!(response.status, 200, "{}", response.error());
    let lines = ndjson(&response.body);
    assert!(leading_keepalives(&lines) >= 2, "{lines:#?}");
    let text: String = lines
        .iter()
        .filter_map(|l| l["message"]["content"].as_str())
        .collect();
    assert_eq!(text.trim(), "3");
    assert!(
        lines
            .iter()
            .all(|l| l["message"].get("tool_calls").is_none()),
        "oapd's own tool call leaked: {lines:#?}"
    );
}

#[test]
fn a_slow_unstreamed_chat_answers() {
    let upstream = fake(models().turn(Turn::reply("three words").response_delay_ms(SLOW_MS)));
    let daemon = daemon(&upstream, "");
    let response = daemon.post_json("/api/chat", &chat(false));
    assert_eq!(response.status, 200, "{}", response.error());
    assert_eq!(response.json()["message"]["content"], "three words");
}

#[test]
fn slow_openai_and_responses_answers_arrive() {
    let upstream = fake(
        models()
            .turn(Turn::reply("one").response_delay_ms(SLOW_MS))
            .turn(Turn::reply("two").response_delay_ms(SLOW_MS))
            .turn(Turn::reply("three").response_delay_ms(SLOW_MS)),
    );
    let daemon = daemon(&upstream, "");
    let streamed = daemon.post_json(
        "/v1/chat/completions",
        &json!({"model": "qwen3:4b", "stream": true,
                "messages": [{"role": "user", "content": "say one"}]})
        .to_string(),
    );
    assert_eq!(streamed.status, 200, "{}", streamed.error());
    let text = String::from_utf8_lossy(&streamed.body);
    assert!(text.starts_with(": keep-alive\n\n"), "{text}");
    assert!(text.contains("\"content\":\"one\""), "{text}");
    assert!(text.trim_end().ends_with("data: [DONE]"), "{text}");

    let unstreamed = daemon.post_json(
        "/v1/chat/completions",
        &json!({"model": "qwen3:4b",
                "messages": [{"role": "user", "content": "say two"}]})
        .to_string(),
    );
    assert_eq!(unstreamed.status, 200, "{}", unstreamed.error());
    assert_eq!(unstreamed.json()["choices"][0]["message"]["content"], "two");

    let responses = daemon.post_json(
        "/v1/responses",
        &json!({"model": "qwen3:4b", "stream": true, "input": "say three"}).to_string(),
    );
    assert_eq!(responses.status, 200, "{}", responses.error());
    let text = String::from_utf8_lossy(&responses.body);
    assert!(text.starts_with(": keep-alive\n\n"), "{text}");
    assert!(text.contains("response.completed"), "{text}");
}

#[test]
fn slow_pass_through_routes_answer() {
    let upstream = fake(models().route_delay_ms(SLOW_MS));
    let daemon = daemon(&upstream, "");
    let pull = daemon.post_json("/api/pull", &json!({"model": "qwen3:4b"}).to_string());
    assert_eq!(pull.status, 200, "pull: {}", pull.error());
    let generate = daemon.post_json(
        "/api/generate",
        &json!({"model": "qwen3:4b", "prompt": "hi", "stream": false}).to_string(),
    );
    assert_eq!(generate.status, 200, "generate: {}", generate.error());
    assert!(generate.json()["response"].is_string());
    let create = daemon.post_json(
        "/api/create",
        &json!({"model": "mine", "from": "qwen3:4b", "stream": false}).to_string(),
    );
    assert_eq!(create.status, 200, "create: {}", create.error());
    let blob = vec![7u8; 256 * 1024];
    let digest = format!("sha256:{}", hex_of(&sha2::Sha256::digest(&blob)));
    let upload = daemon.request("POST", &format!("/api/blobs/{digest}"), &[], &blob);
    assert_eq!(upload.status, 201, "blob: {}", upload.error());
    // A local route is still bounded by server.request_timeout: /health
    // answers at once either way, so only its success is checked.
    assert_eq!(daemon.get("/health").status, 200);
}

fn hex_of(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[test]
fn a_chat_beyond_its_deadline_gets_an_error_naming_the_setting() {
    let upstream = fake(
        models()
            .turn(Turn::reply("late").response_delay_ms(4_000))
            .turn(Turn::reply("late").response_delay_ms(4_000)),
    );
    let daemon = daemon(&upstream, "  chat_deadline: 2\n");
    let unstreamed = daemon.post_json("/api/chat", &chat(false));
    assert_eq!(unstreamed.status, 504, "{:?}", unstreamed.json());
    assert!(
        unstreamed.error().contains("ollama.chat_deadline"),
        "{}",
        unstreamed.error()
    );
    let streamed = daemon.post_json("/api/chat", &chat(true));
    assert_eq!(streamed.status, 200);
    let lines = ndjson(&streamed.body);
    let last = lines.last().expect("a line");
    assert!(
        last["error"]
            .as_str()
            .is_some_and(|e| e.contains("ollama.chat_deadline")),
        "{lines:#?}"
    );
}

//! An MCP server that floods the daemon with what it may send unasked (log
//! notifications, progress, `tools/list_changed`, stderr lines) in a tight
//! loop, `tests/mcp/noisy_server.py`: the daemon's log stays small at the
//! default level and never carries the server's text, the list changes
//! cost a paced handful of re-listings, `/health` shows the server noisy
//! with its counts, and its tool is still discovered and called in a chat.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::support::{self, fake};
use fake_ollama::{Chunk, Echo, ModelSpec, Script, Turn};
use serde_json::{json, Value};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Every line the server writes carries this word.
const MARK: &str = "NOISEMARK";

/// How long the flood runs before the log is measured.
const FLOOD: Duration = Duration::from_secs(10);

/// Log bytes the daemon may write while the flood runs: the requirement
/// is a few KB a minute (a summary line per server per minute, nothing per
/// message), and before the fix this window wrote hundreds of megabytes.
const LOG_BUDGET: usize = 2_000;

/// The `noisy` server's entry of `/health`.
fn noisy_entry(health: &Value) -> Option<Value> {
    health["mcp"]["servers"]
        .as_array()?
        .iter()
        .find(|s| s["name"] == "noisy")
        .cloned()
}

fn wait_for<T>(daemon: &support::Daemon, what: &str, probe: impl Fn() -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        if let Some(value) = probe() {
            return value;
        }
        assert!(
            Instant::now() < deadline,
            "{what} never happened; /v1/mcp/status: {}\n{}",
            daemon.get("/v1/mcp/status").json(),
            daemon.log_text()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn a_server_flooding_notifications_and_stderr_neither_fills_the_log_nor_stops_serving() {
    let markers = tempfile::tempdir().unwrap();
    let upstream = fake(
        Script::new()
            .model(ModelSpec::new("qwen3:4b").capabilities(&["completion", "tools"]))
            .turn(Turn::chunks(vec![Chunk::tool_call(
                "oap_shout",
                json!({"text": "hello"}),
            )]))
            .turn(Turn::echo(Echo::LastTool)),
    );
    let server = repo().join("tests/mcp/noisy_server.py");
    // The default level (the kit runs the daemon with RUST_LOG=info).
    let daemon = support::daemon()
        .yaml(&format!(
            "ollama:\n  base_url: {:?}\nmcp:\n  servers:\n    noisy:\n      command: python3\n      \
             args: [{:?}, {:?}]\n",
            upstream.fake.url(),
            server.display().to_string(),
            markers.path().display().to_string(),
        ))
        .start();

    wait_for(&daemon, "noisy/shout indexed and the server noisy", || {
        let entry = noisy_entry(&daemon.get("/health").json())?;
        let indexed = daemon.get("/v1/manifests/mcp/noisy/shout").status == 200;
        (entry["state"] == "ready" && entry["noisy"] == true && indexed).then_some(())
    });
    let ready_at = Instant::now();
    let log_before = daemon.log_text().len();
    std::thread::sleep(FLOOD);
    let log = daemon.log_text();
    let grown = log.len() - log_before;

    // While it floods: shown noisy, with counts over the limit, its tool kept.
    let health = daemon.get("/health").json();
    let entry = noisy_entry(&health).unwrap_or_else(|| panic!("no noisy server in {health}"));
    assert_eq!(entry["state"], "ready", "{entry}");
    assert_eq!(entry["tools"], 1, "{entry}");
    assert_eq!(entry["noisy"], true, "{entry}");
    let minute = &entry["traffic_last_minute"];
    for kind in ["log_messages", "list_changed", "progress", "stderr_lines"] {
        assert!(
            minute[kind].as_u64().unwrap_or(0) > 200,
            "{kind} counted: {entry}"
        );
    }
    // List changes are paced: the first listing, then at most ten a minute.
    let minutes = ready_at.elapsed().as_secs() / 60 + 1;
    let listed = std::fs::read_to_string(markers.path().join("lists"))
        .unwrap_or_default()
        .lines()
        .count() as u64;
    assert!(
        listed <= 2 + 10 * minutes,
        "{listed} tools/list in {:?}: {entry}",
        ready_at.elapsed()
    );
    assert!(
        entry["traffic_total"]["relists"].as_u64() >= Some(1),
        "{entry}"
    );

    // The log: none of the server's text, and no line per message.
    if let Some(line) = log.lines().find(|line| line.contains(MARK)) {
        let line: String = line.chars().take(500).collect();
        panic!("the server's text reached the log at the default level: {line}");
    }
    assert!(
        grown <= LOG_BUDGET,
        "the log grew by {grown} bytes in {FLOOD:?} of flooding: {}",
        log.get(log_before..).unwrap_or_default()
    );

    // Still serving: discovery finds its tool, and a chat calls it.
    let found = daemon
        .post_json(
            "/v1/discover",
            &json!({"task": "shout the word hello back in capital letters"}).to_string(),
        )
        .json();
    assert_eq!(found["match"]["id"], "mcp/noisy/shout", "{found}");
    let response = daemon.post_json(
        "/api/chat",
        &json!({"model": "qwen3:4b", "stream": false,
                "messages": [{"role": "user", "content": "Shout the word hello back in capital letters."}]})
        .to_string(),
    );
    assert_eq!(
        response.status,
        200,
        "{}",
        String::from_utf8_lossy(&response.body)
    );
    let sent = upstream.fake.chat_requests();
    assert_eq!(sent.len(), 2, "one tool round, then the answer");
    let tool_message = support::last_message(&sent[1]);
    assert_eq!(tool_message["tool_name"], "oap_shout", "{tool_message}");
    assert_eq!(tool_message["content"], "HELLO", "{tool_message}");
    assert!(!daemon.log_text().contains(MARK));
}

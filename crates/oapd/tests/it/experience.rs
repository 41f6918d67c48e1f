//! The experience cache end to end: the real daemon with real embeddings,
//! the scripted fake Ollama calling the bundled `wc` tool (run for real),
//! and the `/v1/experience` endpoints.

use crate::support;

use std::time::{Duration, Instant};

use crate::support::{fake, Daemon, Upstream};
use fake_ollama::{Echo, ModelSpec, Script, Turn};
use serde_json::{json, Value};

const TASK: &str = "count the words in this text: one two three four";
const PARAPHRASE: &str = "Count the words in this text: one two three four five six";

fn config(upstream: &Upstream) -> String {
    format!(
        "ollama:\n  base_url: {:?}\nexperience:\n  enabled: true\n  min_similarity: 0.7\n",
        upstream.fake.url()
    )
}

fn chat(daemon: &Daemon, task: &str) -> Value {
    let response = daemon.post_json(
        "/api/chat",
        &json!({"model": "m", "stream": false,
                "messages": [{"role": "user", "content": task}]})
        .to_string(),
    );
    assert_eq!(response.status, 200, "{}", daemon.log_text());
    response.json()
}

fn experience(daemon: &Daemon) -> Value {
    let response = daemon.get("/v1/experience");
    assert_eq!(response.status, 200);
    response.json()
}

fn offered(upstream: &Upstream) -> Vec<String> {
    let sent = upstream.fake.chat_requests();
    oap_bridge::tool_loop::client_tool_names(sent.last().unwrap().as_object().unwrap())
}

fn good_call() -> Turn {
    Turn::tool_call(
        "oap_wc",
        json!({"args": "-w", "stdin": "one two three four"}),
    )
}

/// Waits until the cache file holds `n` entries (writes are coalesced).
fn wait_for_file(daemon: &Daemon, n: usize) -> Value {
    let path = daemon.dir.path().join("data/experience.json");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Ok(bytes) = std::fs::read(&path) {
            if let Ok(file) = serde_json::from_slice::<Value>(&bytes) {
                if file["entries"].as_array().map(Vec::len) == Some(n) {
                    return file;
                }
            }
        }
        assert!(
            Instant::now() < deadline,
            "experience.json never had {n} entries"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_success_is_remembered_reused_degraded_recovered_persisted_and_purged() {
    let upstream = fake(
        Script::new()
            .model(ModelSpec::new("m"))
            // 1: first time, discovery finds wc; it runs and succeeds.
            .turn(good_call())
            .turn(Turn::echo(Echo::LastTool))
            // 2: a paraphrase: served from the cache.
            .turn(Turn::echo(Echo::ToolNames))
            // 3: the same text: served from the cache; this time the call fails.
            .turn(Turn::tool_call(
                "oap_wc",
                json!({"args": "--no-such-flag", "stdin": "x"}),
            ))
            .turn(Turn::echo(Echo::LastTool))
            // 4: the failing entry is not used; discovery runs; success recovers it.
            .turn(good_call())
            .turn(Turn::echo(Echo::LastTool))
            // 5: served from the cache again.
            .turn(Turn::echo(Echo::ToolNames)),
    );
    let daemon = support::daemon().yaml(&config(&upstream)).start();

    let answer = chat(&daemon, TASK);
    assert_eq!(answer["message"]["content"].as_str().unwrap().trim(), "4");
    let state = experience(&daemon);
    let entries = state["entries"].as_array().unwrap();
    assert_eq!(entries.len(), 1, "{state}");
    let entry = &entries[0];
    assert!(entry["manifest_id"].as_str().unwrap().contains("wc"));
    assert_eq!(
        entry["argument_shape"],
        json!({"args": "string", "stdin": "string"})
    );
    assert_eq!(entry["successes"], 1);
    assert_eq!(entry["usable"], true);
    assert!(entry.get("embedding").is_none(), "vectors are not listed");
    let id = entry["id"].as_str().unwrap().to_string();
    assert!(id.starts_with("exp_") && !id.contains("2026"), "{id}");
    assert_eq!(state["counters"]["exact_hits"], 0);

    // 2: the paraphrase hits by similarity; only the cached tool is offered.
    let answer = chat(&daemon, PARAPHRASE);
    assert_eq!(
        answer["message"]["content"],
        "oap_wc",
        "{} {}",
        experience(&daemon),
        daemon.log_text()
    );
    assert_eq!(offered(&upstream), ["oap_wc"]);
    assert_eq!(experience(&daemon)["counters"]["similar_hits"], 1);

    // 3: exact repeat hits; the tool fails; confidence drops below use.
    chat(&daemon, TASK);
    let state = experience(&daemon);
    assert_eq!(state["counters"]["exact_hits"], 1);
    assert_eq!(state["entries"][0]["failures"], 1);
    assert_eq!(state["entries"][0]["usable"], false);

    // 4: not used while failing (discovery ran), and the success recovers it.
    chat(&daemon, TASK);
    let state = experience(&daemon);
    assert_eq!(state["counters"]["exact_hits"], 1, "{state}");
    assert_eq!(state["entries"][0]["successes"], 2);
    assert_eq!(state["entries"][0]["usable"], true);

    // 5: and used again.
    chat(&daemon, TASK);
    assert_eq!(experience(&daemon)["counters"]["exact_hits"], 2);
    assert_eq!(offered(&upstream), ["oap_wc"]);

    // One entry by id; unknown ids and other methods are refused clearly.
    let one = daemon.get(&format!("/v1/experience/{id}"));
    assert_eq!(one.status, 200);
    assert_eq!(one.json()["id"], id.as_str());
    let missing = daemon.get("/v1/experience/exp_nope");
    assert_eq!(missing.status, 404);
    assert!(missing.error().contains("exp_nope"));
    assert_eq!(
        daemon
            .request("DELETE", "/v1/experience/exp_nope", &[], b"")
            .status,
        404
    );
    assert_eq!(daemon.post_json("/v1/experience", "{}").status, 405);

    // Persisted atomically; survives a restart.
    wait_for_file(&daemon, 1);
    let mut daemon = daemon;
    assert!(daemon.terminate().success());
    let dir = std::mem::replace(&mut daemon.dir, tempfile::tempdir().unwrap());
    drop(daemon);
    let daemon = support::daemon()
        .in_dir(dir)
        .yaml(&config(&upstream))
        .start();
    let state = experience(&daemon);
    assert_eq!(state["entries"][0]["id"], id.as_str(), "{state}");
    assert_eq!(state["entries"][0]["successes"], 2);

    // Purge one, then all.
    let deleted = daemon.request("DELETE", &format!("/v1/experience/{id}"), &[], b"");
    assert_eq!(deleted.status, 200);
    assert_eq!(deleted.json()["deleted"], id.as_str());
    assert!(experience(&daemon)["entries"]
        .as_array()
        .unwrap()
        .is_empty());
    let purged = daemon.request("DELETE", "/v1/experience", &[], b"");
    assert_eq!(purged.status, 200);
    assert_eq!(purged.json()["deleted"], 0);
    wait_for_file(&daemon, 0);
}

#[test]
fn an_entry_whose_manifest_changed_or_vanished_is_dropped_not_used() {
    let upstream = fake(
        Script::new()
            .model(ModelSpec::new("m"))
            .turn(good_call())
            .turn(Turn::echo(Echo::LastTool))
            .default_turn(Turn::reply("no tool needed")),
    );
    let daemon = support::daemon().yaml(&config(&upstream)).start();
    chat(&daemon, TASK);
    let mut file = wait_for_file(&daemon, 1);
    let mut daemon = daemon;
    assert!(daemon.terminate().success());
    let dir = std::mem::replace(&mut daemon.dir, tempfile::tempdir().unwrap());
    drop(daemon);

    // The manifest changed since the entry was written (its hash differs),
    // and a second entry names a manifest that no longer exists.
    let mut vanished = file["entries"][0].clone();
    vanished["id"] = json!("exp_vanished");
    vanished["manifest_id"] = json!("local/no-longer-here");
    vanished["normalized"] = json!("a task for a vanished manifest");
    file["entries"][0]["content_hash"] = json!("sha256:stale");
    file["entries"].as_array_mut().unwrap().push(vanished);
    std::fs::write(
        dir.path().join("data/experience.json"),
        serde_json::to_vec(&file).unwrap(),
    )
    .unwrap();

    let daemon = support::daemon()
        .in_dir(dir)
        .yaml(&config(&upstream))
        .start();
    assert_eq!(experience(&daemon)["entries"].as_array().unwrap().len(), 2);
    chat(&daemon, TASK);
    // Discovery ran instead (several tools may be offered, wc among them).
    assert!(offered(&upstream).contains(&"oap_wc".to_string()));
    chat(&daemon, "a task for a vanished manifest");
    let state = experience(&daemon);
    assert_eq!(state["counters"]["exact_hits"], 0, "{state}");
    assert_eq!(state["counters"]["stale_dropped"], 2, "{state}");
    assert!(state["entries"].as_array().unwrap().is_empty(), "{state}");
}

#[test]
fn a_corrupt_cache_file_starts_empty_and_a_disabled_cache_says_so() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("data")).unwrap();
    std::fs::write(dir.path().join("data/experience.json"), b"{\"entries\": [").unwrap();
    let upstream = fake(Script::new().model(ModelSpec::new("m")));
    let daemon = support::daemon()
        .in_dir(dir)
        .yaml(&config(&upstream))
        .start();
    assert!(experience(&daemon)["entries"]
        .as_array()
        .unwrap()
        .is_empty());
    drop(daemon);

    let daemon = support::daemon()
        .yaml(&format!("ollama:\n  base_url: {:?}\n", upstream.fake.url()))
        .start();
    let response = daemon.get("/v1/experience");
    assert_eq!(response.status, 404);
    assert!(response.error().contains("experience.enabled"));
}

#[test]
fn purging_needs_the_token_when_one_is_configured() {
    let upstream = fake(Script::new().model(ModelSpec::new("m")));
    let token = "a-long-operator-token-0123456789";
    let daemon = support::daemon()
        .yaml(&config(&upstream))
        .env("OAP_SERVER_AUTH_TOKEN", token)
        .start_with_auth(token);
    assert_eq!(
        daemon.request("DELETE", "/v1/experience", &[], b"").status,
        401
    );
    let bearer = format!("Bearer {token}");
    let response = daemon.request(
        "DELETE",
        "/v1/experience",
        &[("Authorization", &bearer)],
        b"",
    );
    assert_eq!(response.status, 200);
    assert_eq!(response.json()["deleted"], 0);
}

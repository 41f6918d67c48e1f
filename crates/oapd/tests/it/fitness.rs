//! Small-model fitness on every chat surface: forced tools,
//! URL hygiene, the experience cache in meta mode and meta-tool argument
//! errors, with the real `oapd` binary between a raw loopback client and
//! the scripted fake Ollama; the bundled tools (`wc`, `date`, `grep`) run
//! for real. Last, the experience purge from a LAN client, inside a
//! network namespace the test builds.

use crate::support;

use crate::support::exposure::{
    daemon_with, discover_then_invoke, models, names, FORCED_TASK, FORCE_YAML, MODEL, WC_TASK,
};
use crate::support::{fake, Daemon, Upstream};
use fake_ollama::{Echo, Script, Turn};
use oap_testkit::netns::Netns;
use serde_json::{json, Value};

fn ok(response: support::Response) -> support::Response {
    assert_eq!(
        response.status,
        200,
        "{}",
        String::from_utf8_lossy(&response.body)
    );
    response
}

/// `/api/chat` with `stream:false`: the one JSON answer.
fn ollama_once(daemon: &Daemon, task: &str) -> Value {
    ok(daemon.post_json(
        "/api/chat",
        &json!({"model": MODEL, "stream": false,
                "messages": [{"role": "user", "content": task}]})
        .to_string(),
    ))
    .json()
}

/// `/v1/chat/completions`: the answer text, streamed (SSE deltas) or not.
fn openai_text(daemon: &Daemon, task: &str, stream: bool) -> String {
    let response = ok(daemon.post_json(
        "/v1/chat/completions",
        &json!({"model": MODEL, "stream": stream,
                "messages": [{"role": "user", "content": task}]})
        .to_string(),
    ));
    if !stream {
        return response.json()["choices"][0]["message"]["content"]
            .as_str()
            .unwrap_or_default()
            .to_string();
    }
    let body = String::from_utf8_lossy(&response.body).to_string();
    assert!(body.trim_end().ends_with("data: [DONE]"), "{body}");
    body.lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter_map(|c| {
            c.pointer("/choices/0/delta/content")
                .and_then(Value::as_str)
                .map(str::to_string)
        })
        .collect()
}

/// `/v1/responses`: the answer text, streamed (SSE events) or not.
fn responses_text(daemon: &Daemon, task: &str, stream: bool) -> String {
    let response = ok(daemon.post_json(
        "/v1/responses",
        &json!({"model": MODEL, "stream": stream, "input": task}).to_string(),
    ));
    if !stream {
        return response.json()["output"][0]["content"][0]["text"]
            .as_str()
            .unwrap_or_default()
            .to_string();
    }
    let events: Vec<Value> = String::from_utf8_lossy(&response.body)
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .map(|l| serde_json::from_str::<Value>(l).expect("event data"))
        .collect();
    assert_eq!(
        events.last().unwrap()["type"],
        "response.completed",
        "{events:?}"
    );
    events
        .iter()
        .filter(|e| e["type"] == "response.output_text.delta")
        .filter_map(|e| e["delta"].as_str())
        .collect()
}

// --- forced tools (tool_bridge.force) ------------------------------------------

/// The model ignores the forced tool; the argument extraction answers.
fn ignoring_model() -> Script {
    models()
        .turn(Turn::reply("All fine in the kitchen, I guess."))
        .turn(Turn::reply(r#"{"args": "+%Y"}"#))
        .turn(Turn::echo(Echo::LastTool))
}

fn assert_forced_round_trip(upstream: &Upstream, text: &str) {
    // The answer given without the tool never reached the client; the
    // model echoed date's output (the year).
    assert!(!text.contains("kitchen"), "{text}");
    assert!(text.trim().starts_with("20"), "{text}");
    let sent = upstream.fake.chat_requests();
    assert_eq!(sent.len(), 3, "{sent:?}");
    assert_eq!(sent[1]["stream"], false);
    assert!(sent[1]["format"]["properties"].is_object(), "{}", sent[1]);
    let result = support::last_message(&sent[2]);
    assert_eq!(result["role"], "tool");
    assert_eq!(result["tool_name"], "oap_date");
}

#[test]
fn a_forced_tool_is_called_by_the_bridge_with_stream_false() {
    let upstream = fake(ignoring_model());
    let daemon = daemon_with(&upstream, FORCE_YAML);
    let answer = ollama_once(&daemon, FORCED_TASK);
    assert_eq!(answer["done"], true);
    assert!(answer["message"].get("tool_calls").is_none(), "{answer}");
    assert_eq!(answer["oap_round"], 2);
    assert_forced_round_trip(&upstream, answer["message"]["content"].as_str().unwrap());
}

#[test]
fn a_forced_tool_is_called_by_the_bridge_on_the_openai_surface() {
    let upstream = fake(ignoring_model());
    let daemon = daemon_with(&upstream, FORCE_YAML);
    let text = openai_text(&daemon, FORCED_TASK, false);
    assert_forced_round_trip(&upstream, &text);

    upstream.fake.set_script(ignoring_model());
    let before = upstream.fake.chat_requests().len();
    let text = openai_text(&daemon, FORCED_TASK, true);
    assert!(!text.contains("kitchen"), "{text}");
    assert!(text.trim().starts_with("20"), "{text}");
    let sent = upstream.fake.chat_requests();
    assert_eq!(sent.len() - before, 3);
    let result = support::last_message(sent.last().unwrap());
    assert_eq!(result["tool_name"], "oap_date");
}

/// Matches the force rule and is a task discovery finds `wc` for.
const FORCED_WC_TASK: &str = "Status report: count the words in this text: one two three four";

#[test]
fn a_forced_tool_still_runs_when_the_model_calls_a_different_tool() {
    let upstream = fake(
        models()
            // The model picks wc, not the forced date.
            .turn(Turn::tool_call(
                "oap_wc",
                json!({"args": "-w", "stdin": "one two three four"}),
            ))
            // The argument extraction for date.
            .turn(Turn::reply(r#"{"args": "+%Y"}"#))
            .turn(Turn::reply("done")),
    );
    let daemon = daemon_with(&upstream, FORCE_YAML);
    let answer = ollama_once(&daemon, FORCED_WC_TASK);
    assert_eq!(answer["message"]["content"], "done");
    let sent = upstream.fake.chat_requests();
    let offered = names(&sent[0]["tools"]);
    assert_eq!(offered[0], "oap_date", "{offered:?}");
    assert!(offered.contains(&"oap_wc".to_string()), "{offered:?}");
    assert_eq!(sent.len(), 3, "round, extraction, round: {sent:?}");
    assert_eq!(sent[1]["stream"], false);
    // Both ran: the forced tool first, then the model's own call.
    let messages = sent[2]["messages"].as_array().unwrap();
    let assistant = messages
        .iter()
        .rev()
        .find(|m| m["role"] == "assistant")
        .unwrap();
    let called: Vec<&str> = assistant["tool_calls"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|c| c.pointer("/function/name").and_then(Value::as_str))
        .collect();
    assert_eq!(called, ["oap_date", "oap_wc"]);
    let results: Vec<&Value> = messages.iter().filter(|m| m["role"] == "tool").collect();
    assert_eq!(results.len(), 2);
    assert_eq!(results[0]["tool_name"], "oap_date");
    assert!(
        results[0]["content"]
            .as_str()
            .unwrap()
            .trim()
            .starts_with("20"),
        "{}",
        results[0]
    );
    assert_eq!(results[1]["tool_name"], "oap_wc");
    assert!(
        results[1]["content"].as_str().unwrap().contains('4'),
        "{}",
        results[1]
    );
}

#[test]
fn a_forced_tool_the_model_called_itself_is_not_extracted_again() {
    let upstream = fake(
        models()
            .turn(Turn::tool_call("oap_date", json!({"args": "+%Y"})))
            .turn(Turn::echo(Echo::LastTool)),
    );
    let daemon = daemon_with(&upstream, FORCE_YAML);
    let text = openai_text(&daemon, FORCED_TASK, false);
    assert!(text.trim().starts_with("20"), "{text}");
    let sent = upstream.fake.chat_requests();
    assert_eq!(sent.len(), 2, "no extraction request: {sent:?}");
    assert!(sent.iter().all(|r| r["stream"] == true));
}

#[test]
fn a_continuation_after_the_clients_own_tool_is_not_forced_again() {
    let upstream = fake(models().default_turn(Turn::reply("The kitchen is at 21 degrees.")));
    let daemon = daemon_with(&upstream, FORCE_YAML);
    // The forced turn began earlier; the client now sends its own tool's
    // result back and expects the answer.
    let request = json!({"model": MODEL, "stream": false,
        "tools": [{"type": "function", "function": {"name": "kitchen_sensor",
            "description": "Reads the kitchen sensor", "parameters": {"type": "object", "properties": {}}}}],
        "messages": [
            {"role": "user", "content": FORCED_TASK},
            {"role": "assistant", "content": "", "tool_calls": [
                {"function": {"name": "kitchen_sensor", "arguments": {}}}]},
            {"role": "tool", "tool_name": "kitchen_sensor", "content": "21 C"}]});
    let answer: Value = ok(daemon.post_json("/api/chat", &request.to_string())).json();
    assert_eq!(
        answer["message"]["content"],
        "The kitchen is at 21 degrees."
    );
    let sent = upstream.fake.chat_requests();
    assert_eq!(sent.len(), 1, "no forced round, no extraction: {sent:?}");
    assert!(!names(&sent[0]["tools"]).contains(&"oap_date".to_string()));
    let instructed = sent[0]["messages"].as_array().unwrap().iter().any(|m| {
        m["content"]
            .as_str()
            .is_some_and(|c| c.contains("must be handled with the tool"))
    });
    assert!(!instructed, "{}", sent[0]["messages"]);
}

// --- URL hygiene (tool_bridge.url_policy) ---------------------------------------

const URL_TASK: &str = "summarise https://user.example/doc and count the words in: one two";
const URL_ANSWER: &str = "See https://user.example/doc and https://invented.example/x now";

#[test]
fn invented_urls_are_flagged_in_unstreamed_answers() {
    let upstream = fake(models().default_turn(Turn::reply(URL_ANSWER)));
    let daemon = daemon_with(&upstream, "");
    let flagged =
        "See https://user.example/doc and https://invented.example/x (unverified link) now";
    let answer = ollama_once(&daemon, URL_TASK);
    assert_eq!(answer["message"]["content"], flagged);
    assert_eq!(openai_text(&daemon, URL_TASK, false), flagged);
}

#[test]
fn invented_urls_are_removed_on_the_responses_surface() {
    let upstream = fake(models().default_turn(Turn::reply(URL_ANSWER)));
    let daemon = daemon_with(&upstream, "tool_bridge:\n  url_policy: remove\n");
    let removed = "See https://user.example/doc and [link removed] now";
    assert_eq!(responses_text(&daemon, URL_TASK, false), removed);
    assert_eq!(responses_text(&daemon, URL_TASK, true), removed);
}

#[test]
fn a_per_tool_override_can_relax_the_policy() {
    // grep is offered for this task; its override (off) applies instead of
    // the global remove.
    let task = "find the lines containing docs in this text: docs here\nnothing";
    let answer = "Found https://made.up/x";
    let upstream = fake(models().default_turn(Turn::reply(answer)));
    let daemon = daemon_with(
        &upstream,
        "tool_bridge:\n  url_policy: remove\n  url_policy_tools:\n    local/grep: \"off\"\n",
    );
    let got = ollama_once(&daemon, task);
    let sent = upstream.fake.chat_requests();
    assert!(
        names(&sent[0]["tools"]).contains(&"oap_grep".to_string()),
        "{:?}",
        names(&sent[0]["tools"])
    );
    assert_eq!(got["message"]["content"], answer);
    drop(daemon);
    // The control: without the override the global policy removes it.
    let daemon = daemon_with(&upstream, "tool_bridge:\n  url_policy: remove\n");
    let got = ollama_once(&daemon, task);
    assert_eq!(got["message"]["content"], "Found [link removed]");
}

// --- meta mode -------------------------------------------------------------------

const META_EXPERIENCE_YAML: &str =
    "tool_bridge:\n  exposure: meta\nexperience:\n  enabled: true\n  min_similarity: 0.7\n";

fn listing_of(sent: &Value) -> Value {
    let messages = sent["messages"].as_array().unwrap();
    let listing = messages
        .iter()
        .rev()
        .find(|m| m["role"] == "tool" && m["tool_name"] == "oap_discover")
        .expect("an oap_discover result");
    serde_json::from_str(listing["content"].as_str().unwrap()).unwrap()
}

#[test]
fn meta_mode_feeds_and_consults_the_experience_cache() {
    let upstream = fake(
        // 1: discover, invoke wc (succeeds), answer.
        discover_then_invoke(
            "count words in text",
            "oap_wc",
            json!({"args": "-w", "stdin": "one two three four"}),
        )
        // 2: the same discovery task: answered from the cache.
        .turn(Turn::tool_call(
            "oap_discover",
            json!({"task": "count words in text"}),
        ))
        .turn(Turn::reply("ok")),
    );
    let daemon = daemon_with(&upstream, META_EXPERIENCE_YAML);
    let first = ollama_once(&daemon, WC_TASK);
    assert!(
        first["message"]["content"].as_str().unwrap().contains('4'),
        "{first}"
    );
    let sent = upstream.fake.chat_requests();
    let fresh = listing_of(&sent[1]);
    assert!(
        fresh["tools"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["name"] == "oap_wc"),
        "{fresh}"
    );
    // The successful oap_invoke was recorded.
    let state = daemon.get("/v1/experience").json();
    let entries = state["entries"].as_array().unwrap();
    assert_eq!(entries.len(), 1, "{state}");
    assert!(entries[0]["manifest_id"].as_str().unwrap().contains("wc"));
    assert_eq!(entries[0]["successes"], 1);
    assert_eq!(entries[0]["task"], "count words in text");
    assert_eq!(
        entries[0]["argument_shape"],
        json!({"args": "string", "stdin": "string"})
    );

    // 2: oap_discover is served from the cache: the remembered tool only.
    let second = ollama_once(&daemon, WC_TASK);
    assert_eq!(second["message"]["content"], "ok");
    let sent = upstream.fake.chat_requests();
    let cached = listing_of(sent.last().unwrap());
    let listed: Vec<&str> = cached["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert_eq!(listed, ["oap_wc"], "{cached}");
    let state = daemon.get("/v1/experience").json();
    assert_eq!(state["counters"]["exact_hits"], 1, "{state}");
}

#[test]
fn oap_invoke_with_arguments_of_the_wrong_type_is_a_clear_tool_error() {
    let upstream = fake(discover_then_invoke(
        "count words",
        "oap_wc",
        json!({"args": {"flag": "-w"}, "stdin": "one two"}),
    ));
    let daemon = daemon_with(&upstream, "tool_bridge:\n  exposure: meta\n");
    let answer = ollama_once(&daemon, WC_TASK);
    let text = answer["message"]["content"].as_str().unwrap();
    assert!(
        text.starts_with("Error: oap_wc was not called")
            && text.contains("argument 'args' must be a string"),
        "{text}"
    );
    assert_eq!(daemon.get("/health").status, 200);
}

#[test]
fn a_forced_tool_runs_in_meta_mode_too() {
    let upstream = fake(ignoring_model());
    let daemon = daemon_with(&upstream, &format!("{FORCE_YAML}  exposure: meta\n"));
    let answer = ollama_once(&daemon, FORCED_TASK);
    let sent = upstream.fake.chat_requests();
    assert_eq!(
        names(&sent[0]["tools"]),
        ["oap_date", "oap_discover", "oap_invoke"]
    );
    assert_forced_round_trip(&upstream, answer["message"]["content"].as_str().unwrap());
}

// --- operator routes from a LAN client --------------------------------------------

/// The daemon in a network namespace of this test's own, with a veth pair
/// inside it: a client there connecting to the address of one end is not a
/// loopback client, and no packet leaves the namespace. The daemon listens
/// on that LAN address and on loopback, with the experience cache on and
/// no operator token. Dropping it stops the daemon, then deletes the
/// namespace.
struct LanLab {
    daemon: Daemon,
    _ns: Netns,
}

const LAN_IP: &str = "10.78.0.1";
const LAN_PORT: u16 = 18311;

impl LanLab {
    /// The lab, or why it cannot be built here (then the test is skipped).
    fn new() -> Result<LanLab, String> {
        let ns = Netns::with_lan_address("oapd-fit", LAN_IP)?;
        let daemon = support::daemon()
            .in_netns(ns.name())
            .listen(&[
                &format!("{LAN_IP}:{LAN_PORT}"),
                &format!("127.0.0.1:{LAN_PORT}"),
            ])
            .yaml("ollama:\n  base_url: \"http://127.0.0.1:9\"\nexperience:\n  enabled: true\n")
            .start();
        Ok(LanLab { daemon, _ns: ns })
    }

    fn request(&self, ip: &str, method: &str, path: &str) -> support::Response {
        let addr = format!("{ip}:{LAN_PORT}").parse().unwrap();
        self.daemon
            .try_request_to(addr, method, path, &[("Host", "localhost")], b"")
            .expect("request")
    }

    fn log(&self) -> String {
        self.daemon.log_text()
    }
}

#[test]
fn deleting_experience_from_a_lan_client_without_a_token_is_refused() {
    let lab = match LanLab::new() {
        Ok(lab) => lab,
        Err(why) => {
            eprintln!("skipped: cannot build a network namespace here ({why})");
            return;
        }
    };
    // Reading is open to the LAN; deleting is not, without a token.
    assert_eq!(lab.request(LAN_IP, "GET", "/v1/experience").status, 200);
    for path in ["/v1/experience", "/v1/experience/exp_0123456789abcdef"] {
        let refused = lab.request(LAN_IP, "DELETE", path);
        assert_eq!(refused.status, 403, "{path}: {}", lab.log());
        assert!(refused.error().contains("server.auth_token"), "{path}");
    }
    // The same request from loopback is the operator's.
    let allowed = lab.request("127.0.0.1", "DELETE", "/v1/experience");
    assert_eq!(allowed.status, 200, "{}", lab.log());
    assert_eq!(allowed.json()["deleted"], 0);
}

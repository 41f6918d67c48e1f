//! The tool-listing instruction end to end: the real daemon, the scripted
//! fake Ollama (whose `/api/show` reports each model's size) and the
//! bundled manifests. A small model gets a system message naming oapd's
//! tools, the procedure and the fallback, counted in `oap_tool_tokens`; a
//! large one does not unless the request asks; `oap_tool_instruction`
//! turns it off or on per request.

use crate::support;

use crate::support::{fake, Daemon, Upstream};
use fake_ollama::{ModelSpec, Script, Turn};
use serde_json::{json, Value};

const TASK: &str = "count the words in this text: one two three four";

fn model(name: &str, size: &str) -> ModelSpec {
    ModelSpec {
        parameter_size: Some(size.into()),
        ..ModelSpec::new(name).capabilities(&["completion", "tools"])
    }
}

fn upstream() -> Upstream {
    fake(
        Script::new()
            .model(model("small", "1.2B"))
            .model(model("large", "8.0B"))
            .default_turn(Turn::reply("ok")),
    )
}

fn daemon_for(upstream: &Upstream) -> Daemon {
    support::daemon()
        .yaml(&format!("ollama:\n  base_url: {:?}\n", upstream.fake.url()))
        .start()
}

/// Sends one chat; the request oapd sent Ollama, and the answer.
fn chat(daemon: &Daemon, upstream: &Upstream, extra: Value) -> (Value, Value) {
    let mut body = json!({"model": "small", "stream": false,
                          "messages": [{"role": "system", "content": "Be brief."},
                                       {"role": "user", "content": TASK}]});
    for (key, value) in extra.as_object().unwrap() {
        body[key] = value.clone();
    }
    let before = upstream.fake.chat_requests().len();
    let response = daemon.post_json("/api/chat", &body.to_string());
    assert_eq!(
        response.status,
        200,
        "{}",
        String::from_utf8_lossy(&response.body)
    );
    let sent = upstream.fake.chat_requests();
    assert_eq!(sent.len(), before + 1);
    (sent[before].clone(), response.json())
}

fn instruction_of(sent: &Value) -> Option<String> {
    sent["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "system")
        .filter_map(|m| m["content"].as_str())
        .find(|text| text.starts_with("You can call these tools:"))
        .map(str::to_string)
}

#[test]
fn a_small_model_gets_the_tool_list_counted_in_its_tool_tokens() {
    let upstream = upstream();
    let daemon = daemon_for(&upstream);
    let (sent, answer) = chat(&daemon, &upstream, json!({}));
    let instruction = instruction_of(&sent).expect("a small model gets the instruction");
    let offered: Vec<&str> = sent["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap())
        .collect();
    assert!(offered.contains(&"oap_wc"), "{offered:?}");
    for name in &offered {
        assert!(
            instruction.contains(&format!("- {name}: ")),
            "{name} is listed with its purpose:\n{instruction}"
        );
    }
    assert!(instruction.contains("Call that tool"), "{instruction}");
    assert!(
        instruction.contains("If no tool fits the request, answer directly"),
        "{instruction}"
    );
    // After the client's system prompt, before the user's message.
    let messages = sent["messages"].as_array().unwrap();
    assert_eq!(messages[0]["content"], "Be brief.");
    assert_eq!(messages[1]["content"], instruction);
    assert_eq!(messages[2]["role"], "user");

    // Off per request: the same tools, fewer tool tokens.
    let (plain, plain_answer) = chat(&daemon, &upstream, json!({"oap_tool_instruction": false}));
    assert!(instruction_of(&plain).is_none());
    assert_eq!(plain["tools"], sent["tools"]);
    let with = answer["oap_tool_tokens"].as_u64().unwrap();
    let without = plain_answer["oap_tool_tokens"].as_u64().unwrap();
    let added = with - without;
    assert!(
        added >= oap_bridge::tokens::estimate(&instruction) as u64,
        "{with} vs {without}"
    );
    eprintln!(
        "tool-listing instruction: {} tools, {without} tool tokens without, {with} with (+{added})",
        offered.len()
    );
}

#[test]
fn a_large_model_gets_it_only_when_asked() {
    let upstream = upstream();
    let daemon = daemon_for(&upstream);
    let (sent, _) = chat(&daemon, &upstream, json!({"model": "large"}));
    assert!(instruction_of(&sent).is_none());
    let (asked, _) = chat(
        &daemon,
        &upstream,
        json!({"model": "large", "oap_tool_instruction": true}),
    );
    assert!(instruction_of(&asked).is_some());
    // The field is oapd's: it never reaches Ollama.
    assert!(asked.get("oap_tool_instruction").is_none());
}

#[test]
fn a_tool_instruction_that_is_not_a_boolean_is_refused_by_name() {
    let upstream = upstream();
    let daemon = daemon_for(&upstream);
    let response = daemon.post_json(
        "/api/chat",
        &json!({"model": "small", "oap_tool_instruction": "yes",
                "messages": [{"role": "user", "content": TASK}]})
        .to_string(),
    );
    assert_eq!(response.status, 400);
    let error = response.json()["error"].as_str().unwrap().to_string();
    assert!(error.contains("oap_tool_instruction"), "{error}");
    assert!(upstream.fake.chat_requests().is_empty());
}

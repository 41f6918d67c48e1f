//! oapd's tools are shrunk, then left out, when they would push the
//! client's conversation out of the model's context window: the request's
//! `options.num_ctx`, else what `/api/show` says the model runs with.

use crate::support;

use fake_ollama::{ModelSpec, Script, Turn};
use serde_json::{json, Value};

const TASK: &str = "count the words in this text: one two three four";

fn long_conversation() -> Vec<Value> {
    // About 1,500 estimated tokens of earlier turns.
    let filler = "The quarterly report covers revenue, costs and hiring plans. ".repeat(120);
    vec![
        json!({"role": "user", "content": filler}),
        json!({"role": "assistant", "content": "Noted."}),
        json!({"role": "user", "content": TASK}),
    ]
}

fn chat(daemon: &support::Daemon, model: &str, options: Value) -> Value {
    let response = daemon.post_json(
        "/api/chat",
        &json!({"model": model, "stream": false, "messages": long_conversation(),
                "options": options})
        .to_string(),
    );
    assert_eq!(response.status, 200, "{}", response.error());
    response.json()
}

fn offered(request: &Value) -> usize {
    request["tools"].as_array().map_or(0, Vec::len)
}

#[test]
fn tools_that_would_crowd_out_the_conversation_are_left_out() {
    let upstream = support::fake(
        Script::new()
            .model(ModelSpec::new("qwen3:4b").capabilities(&["completion", "tools"]))
            .model({
                let mut small = ModelSpec::new("small:1b").capabilities(&["completion", "tools"]);
                small.context_length = Some(1024);
                small
            })
            .turn(Turn::reply("ok"))
            .turn(Turn::reply("ok"))
            .turn(Turn::reply("ok")),
    );
    let daemon = support::daemon()
        .yaml(&format!("ollama:\n  base_url: {:?}\n", upstream.fake.url()))
        .start();

    // A window with room: the tools that fit the task are offered.
    let roomy = chat(&daemon, "qwen3:4b", json!({"num_ctx": 32768}));
    assert!(
        roomy["oap_tools_injected"].as_u64().unwrap() >= 1,
        "{roomy}"
    );
    // The same conversation in a window it nearly fills: none.
    let tight = chat(&daemon, "qwen3:4b", json!({"num_ctx": 1500}));
    assert_eq!(tight["oap_tools_injected"], 0, "{tight}");
    // No num_ctx: the model's own window (1024 tokens from /api/show).
    let small = chat(&daemon, "small:1b", json!({}));
    assert_eq!(small["oap_tools_injected"], 0, "{small}");

    let sent = upstream.fake.chat_requests();
    assert_eq!(sent.len(), 3);
    assert!(offered(&sent[0]) >= 1);
    assert_eq!(offered(&sent[1]), 0);
    assert_eq!(offered(&sent[2]), 0);
    // The conversation itself reached Ollama whole.
    assert_eq!(sent[1]["messages"].as_array().unwrap().len(), 3);
    assert!(daemon
        .log_text()
        .contains("shrunk to fit the context window"));
}

/// The tool-listing instruction takes room in the window like the tools
/// do: in the smallest window that holds the conversation and the tools
/// whole, a model that also gets the instruction is offered less, so tools
/// and instruction together stay within the room the tools alone filled.
#[test]
fn the_tool_instruction_is_counted_against_the_context_window() {
    let upstream = support::fake(
        Script::new()
            .model(ModelSpec {
                // Small: the instruction is on by default.
                parameter_size: Some("1.2B".into()),
                ..ModelSpec::new("tiny:1b").capabilities(&["completion", "tools"])
            })
            .default_turn(Turn::reply("ok")),
    );
    let daemon = support::daemon()
        .yaml(&format!("ollama:\n  base_url: {:?}\n", upstream.fake.url()))
        .start();
    let tool_tokens = |num_ctx: u64, instruction: bool| -> u64 {
        let response = daemon.post_json(
            "/api/chat",
            &json!({"model": "tiny:1b", "stream": false, "messages": long_conversation(),
                    "options": {"num_ctx": num_ctx}, "oap_tool_instruction": instruction})
            .to_string(),
        );
        assert_eq!(response.status, 200, "{}", response.error());
        response.json()["oap_tool_tokens"].as_u64().unwrap_or(0)
    };
    let whole = tool_tokens(32768, false);
    assert!(whole > 0, "no tools offered for the task");
    // The smallest window in which the tools alone are offered whole.
    let (mut lo, mut hi) = (1024u64, 32768u64);
    while lo < hi {
        let mid = (lo + hi) / 2;
        if tool_tokens(mid, false) >= whole {
            hi = mid;
        } else {
            lo = mid + 1;
        }
    }
    let with_instruction = tool_tokens(lo, true);
    assert!(
        with_instruction <= whole,
        "in a {lo}-token window the tools alone take {whole} tokens; with the instruction \
         oapd offered {with_instruction}"
    );
}

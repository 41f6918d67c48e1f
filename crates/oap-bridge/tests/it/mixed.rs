//! Mixed turns: a turn that calls oapd's tool and the client's runs oapd's
//! once, and the client's follow-up reaches the model with its result.

use fake_ollama::{Chunk, Script, Turn};
use oap_bridge::hooks::Hooks;
use oap_bridge::payload::Images;
use serde_json::{json, Map, Value};

use crate::{chunks, content, options, tool, Bench};

fn with_client_tool(messages: Value) -> Map<String, Value> {
    json!({"model": "m", "messages": messages,
        "tools": [{"type": "function", "function": {"name": "get_time",
            "parameters": {"type": "object", "properties": {"zone": {"type": "string"}}}}}]})
    .as_object()
    .cloned()
    .unwrap()
}

impl Bench {
    /// Runs one request as the daemon does: the conversation goes through
    /// the mixed-turn memory first.
    async fn chat(&self, mut request: Map<String, Value>) -> Vec<Value> {
        let mut options = options(3);
        options.conversation = self.ctx.mixed_turns.enter(&mut request, &Images::default());
        chunks(
            &self
                .run(request, vec![tool("echo")], options, Hooks::default())
                .await,
        )
    }
}

#[tokio::test]
async fn oapds_call_in_a_mixed_turn_runs_once_and_the_follow_up_carries_its_result() {
    let bench = Bench::start(
        Script::new()
            .turn(Turn::chunks(vec![Chunk::default().with_tool_calls(vec![
                json!({"name": "echo", "arguments": {"text": "hi"}}),
                json!({"name": "get_time", "arguments": {"zone": "UTC"}}),
            ])]))
            .turn(Turn::reply("It is noon and the tool said hi.")),
    )
    .await;
    let first = bench
        .chat(with_client_tool(
            json!([{"role": "user", "content": "echo hi and tell the time"}]),
        ))
        .await;
    // The client gets its own call only.
    let handed: Vec<&Value> = first
        .iter()
        .filter_map(|c| c.pointer("/message/tool_calls"))
        .collect();
    assert_eq!(handed.len(), 1, "{first:#?}");
    assert_eq!(handed[0].as_array().unwrap().len(), 1);
    assert_eq!(handed[0][0]["function"]["name"], "get_time");
    assert_eq!(bench.runner.calls().len(), 1);

    // The client sends its history back as the ollama package keeps it:
    // the assistant message it got (no id, no index) and its result.
    let answer = bench
        .chat(with_client_tool(json!([
            {"role": "user", "content": "echo hi and tell the time"},
            {"role": "assistant", "content": "", "tool_calls": [
                {"function": {"name": "get_time", "arguments": {"zone": "UTC"}}}]},
            {"role": "tool", "content": "12:00", "tool_name": "get_time"}
        ])))
        .await;
    assert_eq!(content(&answer), "It is noon and the tool said hi.");
    // oapd's tool did not run again...
    assert_eq!(bench.runner.calls().len(), 1);
    // ...and the model saw its call and result next to the client's.
    let sent = bench.fake.chat_requests();
    assert_eq!(sent.len(), 2);
    let messages = sent[1]["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 4, "{messages:#?}");
    let names: Vec<&str> = messages[1]["tool_calls"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["function"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["echo", "get_time"]);
    assert_eq!(messages[2]["role"], "tool");
    assert_eq!(messages[2]["tool_name"], "echo");
    assert_eq!(messages[2]["content"], r#"ran echo with {"text":"hi"}"#);
    assert_eq!(messages[3]["content"], "12:00");
    bench.fake.shutdown().await;
}

#[tokio::test]
async fn a_follow_up_from_another_conversation_gets_nothing_spliced_in() {
    let bench = Bench::start(
        Script::new()
            .turn(Turn::chunks(vec![Chunk::default().with_tool_calls(vec![
                json!({"name": "echo", "arguments": {"text": "hi"}}),
                json!({"name": "get_time", "arguments": {"zone": "UTC"}}),
            ])]))
            .turn(Turn::reply("ok")),
    )
    .await;
    bench
        .chat(with_client_tool(
            json!([{"role": "user", "content": "echo hi and tell the time"}]),
        ))
        .await;
    let foreign = json!([
        {"role": "user", "content": "something else entirely"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"function": {"name": "get_time", "arguments": {"zone": "UTC"}}}]},
        {"role": "tool", "content": "12:00", "tool_name": "get_time"}
    ]);
    bench.chat(with_client_tool(foreign.clone())).await;
    let sent = bench.fake.chat_requests();
    assert_eq!(sent[1]["messages"], foreign);
    bench.fake.shutdown().await;
}

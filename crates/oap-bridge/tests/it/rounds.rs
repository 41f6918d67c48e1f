//! Rounds: a call executed and fed back, a client's call handed back, the
//! final tool-less round.

use fake_ollama::{Script, Turn};
use oap_bridge::hooks::Hooks;
use serde_json::{json, Value};

use crate::{chunks, content, offered, options, request, the_final_chunk, tool, Bench};

#[tokio::test]
async fn a_call_to_an_injected_tool_runs_and_its_result_goes_back_to_the_model() {
    let bench = Bench::start(
        Script::new()
            .turn(Turn::tool_call("echo", json!({"text": "hi"})))
            .turn(Turn::reply("The tool said hi.")),
    )
    .await;
    let events = bench
        .run(
            request("say hi"),
            vec![tool("echo")],
            options(3),
            Hooks::default(),
        )
        .await;
    let chunks = chunks(&events);
    assert_eq!(content(&chunks), "The tool said hi.");
    let done = the_final_chunk(&chunks);
    assert_eq!(done["oap_round"], 2);
    assert_eq!(done["oap_tools_injected"], 1);
    // No call of oapd's reaches the client.
    assert!(chunks
        .iter()
        .all(|c| c.pointer("/message/tool_calls").is_none()));

    let calls = bench.runner.calls();
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0].0, "echo");
    assert_eq!(calls[0].1["text"], "hi");

    let sent = bench.fake.chat_requests();
    assert_eq!(sent.len(), 2);
    assert_eq!(offered(&sent[0]), ["echo"]);
    assert_eq!(sent[0]["stream"], true);
    let messages = sent[1]["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 3, "{messages:#?}");
    assert_eq!(messages[1]["role"], "assistant");
    assert_eq!(messages[1]["tool_calls"][0]["function"]["name"], "echo");
    assert_eq!(messages[2]["role"], "tool");
    assert_eq!(messages[2]["tool_name"], "echo");
    assert_eq!(messages[2]["content"], r#"ran echo with {"text":"hi"}"#);
    bench.fake.shutdown().await;
}

#[tokio::test]
async fn a_call_to_a_client_tool_is_handed_back_not_run() {
    let bench =
        Bench::start(Script::new().turn(Turn::tool_call("get_time", json!({"zone": "UTC"})))).await;
    let mut chat = request("what time is it?");
    chat.insert(
        "tools".into(),
        json!([{"type": "function", "function": {"name": "get_time",
            "parameters": {"type": "object", "properties": {"zone": {"type": "string"}}}}}]),
    );
    let events = bench
        .run(chat, vec![tool("echo")], options(3), Hooks::default())
        .await;
    let chunks = chunks(&events);
    let handed: Vec<&Value> = chunks
        .iter()
        .filter_map(|c| c.pointer("/message/tool_calls"))
        .collect();
    assert_eq!(handed.len(), 1, "{chunks:#?}");
    assert_eq!(handed[0][0]["function"]["name"], "get_time");
    assert_eq!(handed[0][0]["function"]["arguments"]["zone"], "UTC");
    assert_eq!(the_final_chunk(&chunks)["oap_round"], 1);
    assert!(bench.runner.calls().is_empty());
    let sent = bench.fake.chat_requests();
    assert_eq!(sent.len(), 1);
    // The client's tool is offered next to oapd's.
    assert_eq!(offered(&sent[0]), ["echo", "get_time"]);
    bench.fake.shutdown().await;
}

#[tokio::test]
async fn when_rounds_are_used_up_a_last_round_without_tools_answers() {
    let bench = Bench::start(
        Script::new()
            .turn(Turn::tool_call("echo", json!({"text": "one"})))
            .turn(Turn::reply("Here is the answer.")),
    )
    .await;
    let events = bench
        .run(
            request("go"),
            vec![tool("echo")],
            options(1),
            Hooks::default(),
        )
        .await;
    let chunks = chunks(&events);
    assert_eq!(content(&chunks), "Here is the answer.");
    assert_eq!(the_final_chunk(&chunks)["oap_round"], 2);
    assert_eq!(bench.runner.calls().len(), 1);
    let sent = bench.fake.chat_requests();
    assert_eq!(sent.len(), 2);
    assert_eq!(offered(&sent[0]), ["echo"]);
    assert!(sent[1].get("tools").is_none(), "{:#}", sent[1]);
    bench.fake.shutdown().await;
}

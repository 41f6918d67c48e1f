//! Thinking models and calls written as text: calls next to streamed
//! thinking, a call inside the thinking, a call printed as the answer.

use fake_ollama::{Chunk, Script, Turn};
use oap_bridge::hooks::Hooks;
use serde_json::{json, Value};

use crate::{chunks, content, options, request, tool, Bench};

fn thinking_of(chunks: &[Value]) -> String {
    chunks
        .iter()
        .filter_map(|c| c.pointer("/message/thinking").and_then(Value::as_str))
        .collect()
}

fn for_model(model: &str, task: &str) -> serde_json::Map<String, Value> {
    let mut chat = request(task);
    chat.insert("model".into(), json!(model));
    chat
}

#[tokio::test]
async fn a_call_in_a_chunk_with_thinking_runs_and_the_thinking_goes_into_the_next_round() {
    let bench = Bench::start(
        Script::new()
            .turn(Turn::chunks(vec![
                Chunk::thinking("The user wants an echo. "),
                Chunk::thinking("I will call it.")
                    .with_tool_calls(vec![json!({"name": "echo", "arguments": {"text": "hi"}})]),
            ]))
            .turn(Turn::reply("It said hi.")),
    )
    .await;
    let events = bench
        .run(
            request("echo hi"),
            vec![tool("echo")],
            options(3),
            Hooks::default(),
        )
        .await;
    let chunks = chunks(&events);
    assert_eq!(content(&chunks), "It said hi.");
    assert_eq!(
        thinking_of(&chunks),
        "The user wants an echo. I will call it."
    );
    assert!(chunks
        .iter()
        .all(|c| c.pointer("/message/tool_calls").is_none()));
    assert_eq!(bench.runner.calls().len(), 1);
    let sent = bench.fake.chat_requests();
    let assistant = &sent[1]["messages"][1];
    assert_eq!(assistant["tool_calls"][0]["function"]["name"], "echo");
    assert_eq!(
        assistant["thinking"],
        "The user wants an echo. I will call it."
    );
    bench.fake.shutdown().await;
}

#[tokio::test]
async fn a_call_written_into_the_thinking_of_an_empty_answer_runs() {
    for thinking in [
        "I should echo.\n<tool_call>\n{\"name\": \"echo\", \"arguments\": {\"text\": \"hi\"}}\n</tool_call>",
        "Calling {\"name\": \"echo\", \"arguments\": {\"text\": \"hi\"}} now.",
    ] {
        let bench = Bench::start(
            Script::new()
                .turn(Turn::chunks(vec![Chunk::thinking(thinking)]))
                .turn(Turn::reply("It said hi.")),
        )
        .await;
        let events = bench
            .run(request("echo hi"), vec![tool("echo")], options(3), Hooks::default())
            .await;
        assert_eq!(content(&chunks(&events)), "It said hi.", "{thinking}");
        assert_eq!(bench.runner.calls().len(), 1, "{thinking}");
        assert_eq!(bench.runner.calls()[0].1["text"], "hi");
        let sent = bench.fake.chat_requests();
        assert_eq!(sent[1]["messages"][1]["tool_calls"][0]["function"]["name"], "echo");
        bench.fake.shutdown().await;
    }
}

#[tokio::test]
async fn a_call_printed_as_the_whole_answer_runs_and_the_client_never_sees_it() {
    for printed in [
        vec![
            "{\"name\": \"echo\", ",
            "\"arguments\": {\"text\": \"hi\"}}",
        ],
        vec![
            "```json\n",
            "{\"name\": \"echo\", \"parameters\": {\"text\": \"hi\"}}\n```",
        ],
        vec![
            "<tool_call>",
            "{\"name\": \"echo\", \"arguments\": {\"text\": \"hi\"}}",
            "</tool_call>",
        ],
    ] {
        let bench = Bench::start(
            Script::new()
                .turn(Turn::chunks(
                    printed.iter().map(|p| Chunk::content(*p)).collect(),
                ))
                .turn(Turn::reply("It said hi.")),
        )
        .await;
        let events = bench
            .run(
                for_model("gemma3:1b", "echo hi"),
                vec![tool("echo")],
                options(3),
                Hooks::default(),
            )
            .await;
        assert_eq!(content(&chunks(&events)), "It said hi.", "{printed:?}");
        assert_eq!(bench.runner.calls().len(), 1, "{printed:?}");
        let sent = bench.fake.chat_requests();
        let assistant = &sent[1]["messages"][1];
        assert_eq!(assistant["content"], "");
        assert_eq!(assistant["tool_calls"][0]["function"]["name"], "echo");
        bench.fake.shutdown().await;
    }
}

#[tokio::test]
async fn printed_calls_are_taken_only_from_listed_models_and_only_as_the_whole_answer() {
    let call = r#"{"name": "echo", "arguments": {"text": "hi"}}"#;
    for (model, answer) in [
        // Not a model that prints its calls.
        ("qwen3:4b", call.to_string()),
        // Only looks like a call.
        ("gemma3:1b", format!("{call} is how you would call it.")),
        // Not oapd's tool.
        (
            "gemma3:1b",
            r#"{"name": "get_time", "arguments": {}}"#.to_string(),
        ),
        // Plain text streams as ever.
        ("gemma3:1b", "Hello there.".to_string()),
    ] {
        let bench =
            Bench::start(Script::new().turn(Turn::chunks(vec![Chunk::content(answer.clone())])))
                .await;
        let events = bench
            .run(
                for_model(model, "echo hi"),
                vec![tool("echo")],
                options(3),
                Hooks::default(),
            )
            .await;
        assert_eq!(content(&chunks(&events)), answer, "{model}");
        assert!(bench.runner.calls().is_empty(), "{model}: {answer}");
        assert_eq!(bench.fake.chat_requests().len(), 1);
        bench.fake.shutdown().await;
    }
}

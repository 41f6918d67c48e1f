//! `format` and `keep_alive` belong to the round that answers, not to the
//! rounds in which oapd's tools are offered.

use std::time::Duration;

use fake_ollama::{Script, Turn};
use oap_bridge::hooks::Hooks;
use serde_json::json;

use crate::{chunks, content, offered, options, request, the_final_chunk, tool, Bench};

#[tokio::test]
async fn format_is_sent_only_on_the_round_that_answers() {
    let bench = Bench::start(
        Script::new()
            .turn(Turn::chunks(vec![
                fake_ollama::Chunk::content("Let me look. "),
                fake_ollama::Chunk::tool_call("echo", json!({"text": "hi"})),
            ]))
            // Answered while oapd's tools were offered: unformatted, dropped.
            .turn(Turn::reply("The tool said hi."))
            .turn(Turn::reply(r#"{"said": "hi"}"#)),
    )
    .await;
    let mut chat = request("say hi as JSON");
    let schema = json!({"type": "object", "properties": {"said": {"type": "string"}}});
    chat.insert("format".into(), schema.clone());
    let events = bench
        .run(chat, vec![tool("echo")], options(3), Hooks::default())
        .await;
    let chunks = chunks(&events);
    // Only the formatted answer reaches the client.
    assert_eq!(content(&chunks), r#"{"said": "hi"}"#);
    assert_eq!(the_final_chunk(&chunks)["oap_round"], 3);
    assert_eq!(bench.runner.calls().len(), 1);
    let sent = bench.fake.chat_requests();
    assert_eq!(sent.len(), 3);
    for round in &sent[..2] {
        assert!(round.get("format").is_none(), "{round:#}");
        assert_eq!(offered(round), ["echo"]);
    }
    assert_eq!(sent[2]["format"], schema);
    assert!(sent[2].get("tools").is_none(), "{:#}", sent[2]);
    // The re-asked round has the tool's result, not the dropped answer.
    let messages = sent[2]["messages"].as_array().unwrap();
    assert_eq!(messages.last().unwrap()["role"], "tool");
    bench.fake.shutdown().await;
}

#[tokio::test]
async fn a_request_with_format_and_no_tools_of_oapds_is_sent_once_with_it() {
    let bench = Bench::start(Script::new().turn(Turn::reply(r#"{"ok": true}"#))).await;
    let mut chat = request("answer as JSON");
    chat.insert("format".into(), json!("json"));
    let events = bench
        .run(chat, Vec::new(), options(3), Hooks::default())
        .await;
    assert_eq!(content(&chunks(&events)), r#"{"ok": true}"#);
    let sent = bench.fake.chat_requests();
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0]["format"], "json");
    bench.fake.shutdown().await;
}

#[tokio::test]
async fn keep_alive_is_left_out_of_tool_rounds_and_applied_when_the_loop_is_over() {
    let bench = Bench::start(
        Script::new()
            .turn(Turn::tool_call("echo", json!({"text": "hi"})))
            .turn(Turn::reply("Done.")),
    )
    .await;
    let mut chat = request("say hi");
    chat.insert("keep_alive".into(), json!(0));
    let events = bench
        .run(chat, vec![tool("echo")], options(3), Hooks::default())
        .await;
    assert_eq!(content(&chunks(&events)), "Done.");
    let sent = bench.fake.chat_requests();
    assert_eq!(sent.len(), 2);
    // keep_alive 0 would have unloaded the model while the tool ran.
    assert!(
        sent.iter().all(|r| r.get("keep_alive").is_none()),
        "{sent:#?}"
    );
    let generate = bench
        .fake
        .wait_for_requests("/api/generate", 1, Duration::from_secs(10))
        .await;
    assert_eq!(generate.len(), 1);
    let body = generate[0].body.clone().unwrap();
    assert_eq!(body["model"], "m");
    assert_eq!(body["keep_alive"], 0);
    assert!(body.get("prompt").is_none());
    bench.fake.shutdown().await;
}

#[tokio::test]
async fn the_final_round_without_tools_carries_keep_alive_itself() {
    let bench = Bench::start(
        Script::new()
            .turn(Turn::tool_call("echo", json!({"text": "hi"})))
            .turn(Turn::reply("Done.")),
    )
    .await;
    let mut chat = request("say hi");
    chat.insert("keep_alive".into(), json!("10m"));
    bench
        .run(chat, vec![tool("echo")], options(1), Hooks::default())
        .await;
    let sent = bench.fake.chat_requests();
    assert!(sent[0].get("keep_alive").is_none());
    assert_eq!(sent[1]["keep_alive"], "10m");
    assert!(bench.fake.requests_to("/api/generate").is_empty());
    bench.fake.shutdown().await;
}

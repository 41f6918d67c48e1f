//! Thinking a model writes into its content between `<think>` and
//! `</think>`, end to end: the scripted fake Ollama streams the tags as
//! plain content (a model whose template does not parse them), and every
//! surface of the real daemon carries the thinking in its own field —
//! `message.thinking` on `/api/chat`, `reasoning_content` (and `reasoning`)
//! on `/v1/chat/completions`, a reasoning item on `/v1/responses` — with a
//! call printed inside the thinking run like one in Ollama's `thinking`.
//! (A chat oapd offers no tool to is passed to Ollama byte for byte, so
//! these chats carry a task that discovers one.)

use crate::support;

use crate::support::{fake, Daemon, Upstream};
use fake_ollama::{Chunk, Echo, ModelSpec, Script, Turn};
use serde_json::{json, Value};

fn daemon_for(upstream: &Upstream) -> Daemon {
    support::daemon()
        .yaml(&format!("ollama:\n  base_url: {:?}\n", upstream.fake.url()))
        .start()
}

fn lines(body: &[u8]) -> Vec<Value> {
    body.split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
        .map(|l| serde_json::from_slice(l).unwrap())
        .collect()
}

fn joined(chunks: &[Value], field: &str) -> String {
    chunks
        .iter()
        .filter_map(|c| c["message"][field].as_str())
        .collect()
}

/// The thinking tag split across three chunks, its closing tag across two,
/// with text before the tag: what a streaming model sends token by token.
fn tagged_answer() -> Turn {
    Turn::chunks(vec![
        Chunk::content("\n"),
        Chunk::content("<th"),
        Chunk::content("in"),
        Chunk::content("k>\nThe user wants a count."),
        Chunk::content(" Four words.</th"),
        Chunk::content("ink>\n\nThere are "),
        Chunk::content("four words."),
    ])
}

fn script(turns: Vec<Turn>) -> Script {
    turns
        .into_iter()
        .fold(Script::new().model(ModelSpec::new("r1")), Script::turn)
}

/// A chat oapd's loop serves (the task discovers the bundled `wc`); a
/// chat with no tool of oapd's to offer is passed to Ollama untouched.
fn chat(stream: bool) -> String {
    json!({"model": "r1", "stream": stream,
           "messages": [{"role": "user", "content": "count the words in this text: one two three four"}]})
    .to_string()
}

#[test]
fn think_tags_split_across_chunks_become_ollamas_thinking_field() {
    let upstream = fake(script(vec![tagged_answer(), tagged_answer()]));
    let daemon = daemon_for(&upstream);

    let streamed = daemon.post_json("/api/chat", &chat(true));
    assert_eq!(streamed.status, 200);
    let chunks = lines(&streamed.body);
    assert_eq!(
        joined(&chunks, "thinking"),
        "The user wants a count. Four words."
    );
    assert_eq!(joined(&chunks, "content"), "There are four words.");
    assert_eq!(
        chunks.iter().filter(|c| c["done"] == true).count(),
        1,
        "one final done"
    );
    for chunk in &chunks {
        let content = chunk["message"]["content"].as_str().unwrap_or_default();
        assert!(!content.contains('<') && !content.contains('>'), "{chunk}");
    }

    let whole = daemon.post_json("/api/chat", &chat(false)).json();
    assert_eq!(
        whole["message"]["thinking"],
        "The user wants a count. Four words."
    );
    assert_eq!(whole["message"]["content"], "There are four words.");
}

#[test]
fn openai_clients_read_the_tagged_thinking_as_reasoning_content() {
    let upstream = fake(script(vec![tagged_answer(), tagged_answer()]));
    let daemon = daemon_for(&upstream);
    let body = |stream: bool| {
        json!({"model": "r1", "stream": stream, "oap_discover": false,
               "messages": [{"role": "user", "content": "how many words?"}]})
        .to_string()
    };

    let whole = daemon
        .post_json("/v1/chat/completions", &body(false))
        .json();
    let message = &whole["choices"][0]["message"];
    assert_eq!(
        message["reasoning_content"],
        "The user wants a count. Four words."
    );
    assert_eq!(message["reasoning"], "The user wants a count. Four words.");
    assert_eq!(message["content"], "There are four words.");

    let streamed = daemon.post_json("/v1/chat/completions", &body(true));
    let text = String::from_utf8_lossy(&streamed.body).to_string();
    let deltas: Vec<Value> = text
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter(|d| *d != "[DONE]")
        .map(|d| serde_json::from_str::<Value>(d).unwrap())
        .map(|c| c["choices"][0]["delta"].clone())
        .collect();
    let field = |name: &str| -> String {
        deltas
            .iter()
            .filter_map(|d| d[name].as_str())
            .collect::<String>()
    };
    assert_eq!(
        field("reasoning_content"),
        "The user wants a count. Four words."
    );
    assert_eq!(field("content"), "There are four words.");
}

#[test]
fn responses_clients_get_the_tagged_thinking_as_a_reasoning_item() {
    let upstream = fake(script(vec![tagged_answer(), tagged_answer()]));
    let daemon = daemon_for(&upstream);
    let body = |stream: bool| {
        json!({"model": "r1", "input": "how many words?", "stream": stream, "oap_discover": false})
            .to_string()
    };

    let whole = daemon.post_json("/v1/responses", &body(false)).json();
    assert_eq!(whole["output"][0]["type"], "reasoning", "{whole}");
    assert_eq!(
        whole["output"][0]["content"][0]["text"],
        "The user wants a count. Four words."
    );
    assert_eq!(
        whole["output"][1]["content"][0]["text"],
        "There are four words."
    );

    let streamed = daemon.post_json("/v1/responses", &body(true));
    let events: Vec<Value> = String::from_utf8_lossy(&streamed.body)
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .map(|d| serde_json::from_str(d).unwrap())
        .collect();
    let deltas = |kind: &str| -> String {
        events
            .iter()
            .filter(|e| e["type"] == kind)
            .filter_map(|e| e["delta"].as_str())
            .collect()
    };
    assert_eq!(
        deltas("response.reasoning_text.delta"),
        "The user wants a count. Four words."
    );
    assert_eq!(
        deltas("response.output_text.delta"),
        "There are four words."
    );
    let done = events.last().unwrap();
    assert_eq!(done["type"], "response.completed");
    assert_eq!(done["response"]["output"][0]["type"], "reasoning");
}

#[test]
fn a_call_printed_inside_think_tags_is_run() {
    // The model thinks, prints its call inside the tags and stops without
    // answering: the call is what it meant to do.
    let thinking_call = Turn::chunks(vec![
        Chunk::content("<think>I should count the words with wc.\n<tool_"),
        Chunk::content(
            "call>{\"name\": \"oap_wc\", \"arguments\": {\"args\": \"-w\", \"stdin\": \"one two three four\"}}</tool_call>\n</thi",
        ),
        Chunk::content("nk>"),
    ]);
    let upstream = fake(
        Script::new()
            .model(ModelSpec::new("r1"))
            .turn(thinking_call)
            .turn(Turn::echo(Echo::LastTool)),
    );
    let daemon = daemon_for(&upstream);
    let response = daemon.post_json(
        "/api/chat",
        &json!({"model": "r1", "stream": false,
                "messages": [{"role": "user", "content": "count the words in this text: one two three four"}]})
        .to_string(),
    );
    assert_eq!(
        response.status,
        200,
        "{}",
        String::from_utf8_lossy(&response.body)
    );
    let answer = response.json();
    assert_eq!(answer["message"]["content"].as_str().unwrap().trim(), "4");
    assert!(answer["message"]["thinking"]
        .as_str()
        .unwrap()
        .starts_with("I should count"));
    let sent = upstream.fake.chat_requests();
    assert_eq!(
        sent.len(),
        2,
        "the printed call ran and the model was asked again"
    );
    let messages = sent[1]["messages"].as_array().unwrap();
    let turn = &messages[messages.len() - 2];
    assert_eq!(turn["tool_calls"][0]["function"]["name"], "oap_wc");
    assert_eq!(turn["content"], "", "no tags are sent back as content");
    assert!(turn["thinking"].as_str().unwrap().contains("<tool_call>"));
    assert_eq!(support::last_message(&sent[1])["role"], "tool");
}

#[test]
fn an_unclosed_think_tag_keeps_what_was_inside_as_thinking() {
    let upstream = fake(script(vec![Turn::chunks(vec![
        Chunk::content("<think>Still weighing "),
        Chunk::content("the options</th"),
    ])]));
    let daemon = daemon_for(&upstream);
    let answer = daemon.post_json("/api/chat", &chat(false)).json();
    assert_eq!(
        answer["message"]["thinking"],
        "Still weighing the options</th"
    );
    assert_eq!(answer["message"]["content"], "");
}

#[test]
fn a_model_that_only_closes_its_thinking_is_split_from_the_start_next_time() {
    // Its template opens `<think>` in the prompt: the answer has only the
    // closing tag. The first answer (the tag in its first chunk) teaches
    // oapd; the next is split from its start although its first pieces
    // carry no tag.
    let upstream = fake(script(vec![
        Turn::chunks(vec![
            Chunk::content("Counting.</think>\n"),
            Chunk::content("Four."),
        ]),
        Turn::chunks(vec![
            Chunk::content("Counting "),
            Chunk::content("again."),
            Chunk::content("</think>Four."),
        ]),
    ]));
    let daemon = daemon_for(&upstream);
    let first = daemon.post_json("/api/chat", &chat(false)).json();
    assert_eq!(first["message"]["thinking"], "Counting.");
    assert_eq!(first["message"]["content"], "Four.");
    let chunks = lines(&daemon.post_json("/api/chat", &chat(true)).body);
    assert_eq!(joined(&chunks, "thinking"), "Counting again.");
    assert_eq!(joined(&chunks, "content"), "Four.");
}

//! Features take part only through hooks: a hook that offers and runs its
//! own tool, one that filters every event, one that holds a round back.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use fake_ollama::{Script, Turn};
use futures_util::future::BoxFuture;
use oap_bridge::hooks::{CallReport, Hook, Hooks, RoundOutcome, RoundStart};
use oap_bridge::{Event, RequestCtx, ToolResult};
use oap_wire::ToolCall;
use serde_json::{json, Value};

use crate::{chunks, content, offered, options, request, the_final_chunk, tool, Bench};

/// Offers `lookup`, owns its calls and answers them itself.
#[derive(Default)]
struct Lookup {
    seen: Arc<Mutex<Vec<String>>>,
}

impl Hook for Lookup {
    fn definitions(&mut self, _cx: &mut RequestCtx) -> Vec<Value> {
        vec![json!({"type": "function", "function": {"name": "lookup",
            "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}})]
    }

    fn owns(&self, name: &str) -> bool {
        name == "lookup"
    }

    fn run_calls<'a>(
        &'a mut self,
        _cx: &'a RequestCtx,
        calls: &'a [ToolCall],
    ) -> Option<BoxFuture<'a, Vec<ToolResult>>> {
        Some(Box::pin(async move {
            calls
                .iter()
                .map(|call| ToolResult {
                    content: format!("looked up {}", call.arguments["q"]),
                    ok: true,
                })
                .collect()
        }))
    }

    fn results_seen(&mut self, _cx: &mut RequestCtx, results: &[ToolResult]) {
        let mut seen = self.seen.lock().unwrap();
        seen.extend(results.iter().map(|r| r.content.clone()));
    }

    fn finish(&mut self, _cx: &mut RequestCtx, done: &mut Value) {
        done["looked_up"] = Value::from(self.seen.lock().unwrap().len());
    }
}

#[tokio::test]
async fn a_hook_offers_a_tool_owns_its_calls_and_runs_them() {
    let bench = Bench::start(
        Script::new()
            .turn(Turn::tool_call("lookup", json!({"q": "rust"})))
            .turn(Turn::reply("Found it.")),
    )
    .await;
    let hook = Lookup::default();
    let seen = hook.seen.clone();
    let events = bench
        .run(
            request("look up rust"),
            vec![tool("echo")],
            options(3),
            Hooks::new(vec![Box::new(hook)]),
        )
        .await;
    let chunks = chunks(&events);
    assert_eq!(content(&chunks), "Found it.");
    let done = the_final_chunk(&chunks);
    assert_eq!(done["looked_up"], 1);
    // Owned: not handed to the client, not given to the tool runner.
    assert!(chunks
        .iter()
        .all(|c| c.pointer("/message/tool_calls").is_none()));
    assert!(bench.runner.calls().is_empty());
    assert_eq!(*seen.lock().unwrap(), [r#"looked up "rust""#]);
    let sent = bench.fake.chat_requests();
    // The hook's definition comes after the injected tools.
    assert_eq!(offered(&sent[0]), ["echo", "lookup"]);
    let tool_message = sent[1]["messages"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert_eq!(tool_message["role"], "tool");
    assert_eq!(tool_message["content"], r#"looked up "rust""#);
    bench.fake.shutdown().await;
}

/// Upper-cases the content of every chunk and counts what it saw.
struct Shout {
    seen: Arc<AtomicUsize>,
}

impl Hook for Shout {
    fn output(&mut self, _cx: &RequestCtx, event: Event) -> Vec<Event> {
        self.seen.fetch_add(1, Ordering::SeqCst);
        match event {
            Event::Chunk(mut chunk) => {
                if let Some(text) = chunk.pointer("/message/content").and_then(Value::as_str) {
                    chunk["message"]["content"] = Value::from(text.to_uppercase());
                }
                vec![Event::Chunk(chunk)]
            }
            error => vec![error],
        }
    }
}

#[tokio::test]
async fn an_output_filter_sees_every_event_of_every_round() {
    let bench = Bench::start(
        Script::new()
            .turn(
                Turn::reply("let me check")
                    .then(fake_ollama::Chunk::tool_call("echo", json!({"text": "x"}))),
            )
            .turn(Turn::reply("all quiet here")),
    )
    .await;
    let seen = Arc::new(AtomicUsize::new(0));
    let events = bench
        .run(
            request("check"),
            vec![tool("echo")],
            options(3),
            Hooks::new(vec![Box::new(Shout { seen: seen.clone() })]),
        )
        .await;
    let chunks = chunks(&events);
    assert_eq!(seen.load(Ordering::SeqCst), chunks.len());
    assert_eq!(content(&chunks), "LET ME CHECKALL QUIET HERE");
    for chunk in &chunks {
        let text = chunk["message"]["content"].as_str().unwrap_or_default();
        assert_eq!(text, text.to_uppercase(), "{chunk}");
    }
    the_final_chunk(&chunks);
    assert_eq!(bench.runner.calls().len(), 1);
    bench.fake.shutdown().await;
}

/// Holds the first round; when the model answered without a tool, drops
/// the answer and has `echo` called instead (what forcing does).
#[derive(Default)]
struct Insist {
    held_rounds: Arc<Mutex<Vec<u32>>>,
}

impl Hook for Insist {
    fn holds_round(&mut self, _cx: &mut RequestCtx, round: &RoundStart) -> bool {
        round.number == 1
    }

    fn after_round<'a>(
        &'a mut self,
        _cx: &'a mut RequestCtx,
        round: &'a mut RoundOutcome,
    ) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            if !round.held {
                return;
            }
            self.held_rounds.lock().unwrap().push(round.number);
            if round.ours.is_empty() && round.theirs.is_empty() {
                round.release_held = false;
                round.content.clear();
                round.ours.push(ToolCall {
                    id: None,
                    index: 0,
                    name: "echo".into(),
                    arguments: json!({"text": "insisted"}).as_object().cloned().unwrap(),
                    arguments_error: None,
                });
            }
        })
    }
}

#[tokio::test]
async fn a_held_round_can_be_dropped_and_replaced_by_a_call() {
    let bench = Bench::start(
        Script::new()
            .turn(Turn::reply("I would rather guess."))
            .turn(Turn::reply("Now with the tool.")),
    )
    .await;
    let insist = Insist::default();
    let held_rounds = insist.held_rounds.clone();
    let events = bench
        .run(
            request("what is in the file?"),
            vec![tool("echo")],
            options(3),
            Hooks::new(vec![Box::new(insist)]),
        )
        .await;
    let chunks = chunks(&events);
    // The held answer never reached the client.
    assert_eq!(content(&chunks), "Now with the tool.");
    assert_eq!(the_final_chunk(&chunks)["oap_round"], 2);
    assert_eq!(*held_rounds.lock().unwrap(), [1]);
    let calls = bench.runner.calls();
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0].1["text"], "insisted");
    let sent = bench.fake.chat_requests();
    let messages = sent[1]["messages"].as_array().unwrap();
    assert_eq!(messages[1]["content"], "");
    assert_eq!(
        messages[2]["content"],
        r#"ran echo with {"text":"insisted"}"#
    );
    bench.fake.shutdown().await;
}

/// A call as an observer heard it: round, name, outcome.
type Heard = (u32, String, &'static str);

/// Hears every call oapd ran: round, name, outcome, and whether it was timed.
#[derive(Default)]
struct Observer {
    heard: Arc<Mutex<Vec<Heard>>>,
    timed: Arc<AtomicUsize>,
}

impl Hook for Observer {
    fn call_finished(&mut self, _cx: &mut RequestCtx, report: &CallReport<'_>) {
        self.heard.lock().unwrap().push((
            report.round,
            report.name.to_string(),
            report.result.outcome(),
        ));
        if report.elapsed > std::time::Duration::ZERO {
            self.timed.fetch_add(1, Ordering::SeqCst);
        }
    }
}

#[tokio::test]
async fn an_observer_hears_each_call_with_its_round_outcome_and_duration() {
    let bench = Bench::start(
        Script::new()
            .turn(Turn::tool_call("echo", json!({"text": "a"})))
            .turn(Turn::tool_call("echo", json!({"text": "b"})))
            .turn(Turn::reply("done")),
    )
    .await;
    let hook = Observer::default();
    let (heard, timed) = (hook.heard.clone(), hook.timed.clone());
    let events = bench
        .run(
            request("echo a"),
            vec![tool("echo")],
            options(3),
            Hooks::new(vec![Box::new(hook)]),
        )
        .await;
    assert_eq!(content(&chunks(&events)), "done");
    assert_eq!(
        *heard.lock().unwrap(),
        vec![(1, "echo".to_string(), "ok"), (2, "echo".to_string(), "ok")]
    );
    assert_eq!(timed.load(Ordering::SeqCst), 2);
    assert_eq!(bench.runner.calls().len(), 2);
}

/// Keeps its per-request state in plain fields: the hook belongs to one
/// request, and every phase lends it `&mut self` and the request's context.
#[derive(Default)]
struct Tally {
    rounds: Vec<u32>,
    events_out: usize,
    model: String,
}

impl Hook for Tally {
    fn holds_round(&mut self, cx: &mut RequestCtx, round: &RoundStart) -> bool {
        self.rounds.push(round.number);
        self.model = cx.model.clone();
        false
    }

    fn output(&mut self, _cx: &RequestCtx, event: Event) -> Vec<Event> {
        self.events_out += 1;
        vec![event]
    }

    fn finish(&mut self, cx: &mut RequestCtx, done: &mut Value) {
        done["tally"] = json!({
            "rounds": self.rounds,
            "events_out": self.events_out,
            "model": self.model,
            "messages": cx.messages.len(),
        });
    }
}

#[tokio::test]
async fn a_hook_keeps_its_request_state_in_its_own_fields_and_reads_the_context() {
    let bench = Bench::start(
        Script::new()
            .turn(Turn::tool_call("echo", json!({"text": "a"})))
            .turn(Turn::reply("done")),
    )
    .await;
    let events = bench
        .run(
            request("echo a"),
            vec![tool("echo")],
            options(3),
            Hooks::new(vec![Box::new(Tally::default())]),
        )
        .await;
    let chunks = chunks(&events);
    let tally = &the_final_chunk(&chunks)["tally"];
    assert_eq!(tally["rounds"], json!([1, 2]));
    assert_eq!(tally["model"], "m");
    // The user's message, then the loop's: the model's call and its result.
    assert_eq!(tally["messages"], 3);
    // Every chunk before the final one passed the output phase before
    // `finish` ran.
    assert_eq!(tally["events_out"], chunks.len() - 1);
    bench.fake.shutdown().await;
}

//! One round against Ollama: the body encoded, the answer streamed.
//!
//! [`stream_round`] forwards visible text as it arrives (through the
//! request's hooks' output phase, or into a held list when a phase holds
//! the round back), keeps the tool calls and the `done` chunk, and keeps
//! back text that may be a printed call (`printed.rs`) until the round is
//! over.
//!
//! Thinking a model wrote into its content between `<think>` tags is moved
//! to the chunk's `thinking` here, as the chunks arrive
//! (`oap_wire::think`), so everything after this point — the client's
//! stream on every surface, the printed calls read from thinking, the
//! conversation of the next round — sees it as if Ollama had parsed it.

use http_body_util::BodyExt;
use hyper::StatusCode;
use oap_wire::think::ThinkSplitter;
use oap_wire::{LineDecoder, ToolCall, ToolCallAccumulator};
use serde_json::{Map, Value};
use tokio::sync::mpsc;

use crate::context::{Event, RequestCtx};
use crate::hooks::Hooks;
use crate::upstream::Upstream;

/// Longest NDJSON line accepted from Ollama (a chunk with a large tool call
/// or an image is still far below this).
const MAX_UPSTREAM_LINE: usize = 8 * 1024 * 1024;

/// Where a round's client-facing events go.
pub(crate) enum Sink<'a> {
    /// To the client now, through the hooks' output phase.
    Live {
        cx: &'a RequestCtx,
        hooks: &'a mut Hooks,
        out: &'a mpsc::Sender<Event>,
    },
    /// Kept until the round is over (a phase held it back).
    Held(Vec<Event>),
}

impl<'a> Sink<'a> {
    /// False when the client is gone.
    async fn send(&mut self, event: Event) -> bool {
        match self {
            Sink::Live { cx, hooks, out } => hooks.send(cx, out, event).await,
            Sink::Held(events) => {
                events.push(event);
                true
            }
        }
    }

    /// The client's channel; `None` for a held round (it finds out the
    /// client is gone when its events are released).
    fn client(&self) -> Option<&'a mpsc::Sender<Event>> {
        match self {
            Sink::Live { out, .. } => Some(*out),
            Sink::Held(_) => None,
        }
    }
}

/// Resolves when the client goes away; never without a client channel.
async fn gone(client: Option<&mpsc::Sender<Event>>) {
    match client {
        Some(out) => out.closed().await,
        None => std::future::pending().await,
    }
}

/// One round's upstream request: the client's fields, the conversation so
/// far, `stream: true` and the offered tools, as byte chunks that share the
/// images with the received body.
pub(crate) fn encode_round(
    cx: &RequestCtx,
    tools: Option<&[Value]>,
    answer_fields: &[(&str, &Value)],
) -> Result<Vec<bytes::Bytes>, String> {
    let (request, messages, images): (&Map<String, Value>, &[Value], _) =
        (&cx.fields, &cx.messages, &cx.held.images);
    use crate::payload::Field;
    const STREAM: Value = Value::Bool(true);
    let fields = request
        .iter()
        .map(|(key, value)| (key.as_str(), Field::Value(value)))
        .chain(
            answer_fields
                .iter()
                .map(|(key, value)| (*key, Field::Value(value))),
        )
        .chain([
            ("messages", Field::Array(messages)),
            ("stream", Field::Value(&STREAM)),
        ])
        .chain(tools.map(|tools| ("tools", Field::Array(tools))));
    crate::payload::encode_object(fields, images)
        .map_err(|err| format!("cannot encode the request for Ollama: {err}"))
}

pub(crate) enum RoundError {
    ClientGone,
    /// Ollama (or the way to it) failed; `status` is what the client
    /// should see if nothing was sent yet.
    Upstream {
        status: StatusCode,
        message: String,
    },
}

fn upstream_failed(message: impl Into<String>) -> RoundError {
    RoundError::Upstream {
        status: StatusCode::BAD_GATEWAY,
        message: message.into(),
    }
}

pub(crate) struct Round {
    /// The streamed `content`, joined.
    pub(crate) content: String,
    /// The streamed `thinking`, joined.
    pub(crate) thinking: String,
    /// The model's calls, as streamed.
    pub(crate) calls: Vec<ToolCall>,
    /// The upstream's final `done:true` chunk, held back from the client.
    pub(crate) done: Option<Value>,
    /// Chunks held back as a possible printed call (`printed.rs`), not sent.
    pub(crate) held: Vec<Value>,
    /// The answer closed `</think>` without opening it: the content before
    /// was thinking (moved there in `content`/`thinking`; already streamed
    /// chunks went out as content).
    pub(crate) thinks_unopened: bool,
}

/// One upstream call: forwards content as it arrives, holds back tool calls
/// and the `done` chunk, and returns what the model asked for.
pub(crate) async fn stream_round(
    upstream: &Upstream,
    body: Vec<bytes::Bytes>,
    sink: &mut Sink<'_>,
    hold_printed: bool,
    mut splitter: ThinkSplitter,
) -> Result<Round, RoundError> {
    let response = match upstream.post_parts("/api/chat", body, None).await {
        Ok(response) => response,
        Err(err) => {
            let status = err.status();
            return Err(RoundError::Upstream {
                status,
                message: err.to_string(),
            });
        }
    };
    let status = response.status();
    let mut upstream_body = response.into_body();
    if !status.is_success() {
        let message = crate::upstream::error_message(upstream_body).await;
        let message = if message.trim().is_empty() {
            format!("Ollama answered {status}")
        } else {
            message
        };
        return Err(RoundError::Upstream { status, message });
    }

    let client = sink.client();
    let mut decoder = LineDecoder::new(MAX_UPSTREAM_LINE);
    let mut calls = ToolCallAccumulator::new();
    let mut content = String::new();
    let mut thinking = String::new();
    let mut holdback = crate::printed::Holdback::new(hold_printed);
    let mut done = None;
    let mut thinks_unopened = false;
    while done.is_none() {
        let frame = tokio::select! {
            frame = upstream_body.frame() => frame,
            _ = gone(client) => return Err(RoundError::ClientGone),
        };
        let (lines, ended) = match frame {
            None => (decoder.finish().into_iter().collect(), true),
            Some(Err(err)) => {
                return Err(upstream_failed(format!(
                    "the connection to Ollama broke mid-answer: {err}"
                )))
            }
            Some(Ok(frame)) => match frame.into_data() {
                Ok(data) => (
                    decoder.push(&data).map_err(|err| {
                        upstream_failed(format!("Ollama sent a bad stream: {err}"))
                    })?,
                    false,
                ),
                Err(_) => continue,
            },
        };
        for line in lines {
            let Ok(mut chunk) = serde_json::from_slice::<Value>(&line) else {
                return Err(upstream_failed("Ollama sent a line that is not JSON"));
            };
            if let Some(error) = chunk.get("error") {
                let message = error
                    .as_str()
                    .map(str::to_string)
                    .unwrap_or_else(|| error.to_string());
                return Err(RoundError::Upstream {
                    status: StatusCode::INTERNAL_SERVER_ERROR,
                    message,
                });
            }
            calls.push_chunk(&chunk);
            let is_done = chunk.get("done").and_then(Value::as_bool) == Some(true);
            if let Some(message) = chunk.get_mut("message").and_then(Value::as_object_mut) {
                message.remove("tool_calls");
                if separate_thinking(message, &mut splitter, is_done) {
                    thinks_unopened = true;
                    // What went before was thinking, too.
                    thinking.push_str(&std::mem::take(&mut content));
                }
                if let Some(text) = message.get("content").and_then(Value::as_str) {
                    content.push_str(text);
                }
                if let Some(text) = message.get("thinking").and_then(Value::as_str) {
                    thinking.push_str(text);
                }
            }
            if is_done {
                // Text on the done chunk goes out on its own chunk, so the
                // final done chunk stays empty, as Ollama's rendered path's is.
                if has_visible_text(&chunk) {
                    let mut piece = chunk.clone();
                    piece["done"] = Value::Bool(false);
                    strip_metrics(&mut piece);
                    for piece in holdback.pass(piece, &content) {
                        if !sink.send(Event::Chunk(piece)).await {
                            return Err(RoundError::ClientGone);
                        }
                    }
                }
                done = Some(chunk);
                break;
            }
            if has_visible_text(&chunk) {
                for piece in holdback.pass(chunk, &content) {
                    if !sink.send(Event::Chunk(piece)).await {
                        return Err(RoundError::ClientGone);
                    }
                }
            }
        }
        if ended && done.is_none() {
            return Err(upstream_failed(
                "Ollama closed the stream before it was done",
            ));
        }
    }
    Ok(Round {
        content,
        thinking,
        calls: calls.finish(),
        done,
        held: holdback.into_held(),
        thinks_unopened,
    })
}

/// Moves tagged thinking in `message.content` to `message.thinking`
/// (after any thinking Ollama parsed itself); at the final chunk the
/// splitter gives up what it held. True when `</think>` came unopened.
fn separate_thinking(
    message: &mut Map<String, Value>,
    splitter: &mut ThinkSplitter,
    is_done: bool,
) -> bool {
    let text = message
        .get("content")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let mut split = splitter.push(text);
    if is_done {
        split.extend(splitter.finish());
    }
    if split.thinking.is_empty() && split.content == text {
        return false;
    }
    if !split.thinking.is_empty() {
        let mut thinking = message
            .get("thinking")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        thinking.push_str(&split.thinking);
        message.insert("thinking".into(), Value::from(thinking));
    }
    message.insert("content".into(), Value::from(split.content));
    split.closed_unopened
}

fn has_visible_text(chunk: &Value) -> bool {
    ["content", "thinking"].iter().any(|key| {
        chunk
            .pointer(&format!("/message/{key}"))
            .and_then(Value::as_str)
            .is_some_and(|s| !s.is_empty())
    }) || chunk.pointer("/message/images").is_some()
}

fn strip_metrics(chunk: &mut Value) {
    if let Some(object) = chunk.as_object_mut() {
        for key in [
            "done_reason",
            "total_duration",
            "load_duration",
            "prompt_eval_count",
            "prompt_eval_duration",
            "eval_count",
            "eval_duration",
        ] {
            object.remove(key);
        }
    }
}

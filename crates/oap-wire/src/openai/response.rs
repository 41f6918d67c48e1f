//! A whole `/api/chat` answer as a `chat.completion`, and what the stream
//! translation shares with it: `finish_reason`, ids, usage, and tool calls
//! in OpenAI's shape.

use std::hash::{BuildHasher, Hasher};

use serde_json::{json, Map, Value};

use crate::merge::{Calls, Partial};

/// OpenAI's `finish_reason`: `length` > `tool_calls` > `stop`.
pub fn finish_reason(done_reason: Option<&str>, has_tool_calls: bool) -> &'static str {
    if done_reason == Some("length") {
        "length"
    } else if has_tool_calls {
        "tool_calls"
    } else {
        "stop"
    }
}

/// A fresh `call_` + 8 lowercase alphanumerics id, the form Ollama uses.
pub fn new_tool_call_id() -> String {
    format!("call_{}", random_alnum(8))
}

/// A fresh `chatcmpl-…` completion id.
pub fn new_completion_id() -> String {
    format!("chatcmpl-{}", random_alnum(12))
}

fn random_alnum(len: usize) -> String {
    const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";
    let mut out = String::with_capacity(len);
    while out.len() < len {
        // std's RandomState is seeded randomly per process and changes for
        // every instance, which is all an id needs.
        let mut bits = std::collections::hash_map::RandomState::new()
            .build_hasher()
            .finish();
        for _ in 0..8 {
            if out.len() == len {
                break;
            }
            out.push(ALPHABET[(bits % 36) as usize] as char);
            bits /= 36;
        }
    }
    out
}

/// Turns Ollama tool calls into whole OpenAI calls with running indexes.
/// Whole calls go through at once; calls streamed in pieces under one
/// `function.index` are held until their arguments parse, or until
/// [`CallMerger::flush`]. The merging itself is [`Calls`]'.
#[derive(Debug, Default)]
pub(super) struct CallMerger {
    calls: Calls,
    emitted: usize,
}

impl CallMerger {
    pub(super) fn push(&mut self, calls: &Value, with_index: bool) -> Vec<Value> {
        let mut out = Vec::new();
        for call in calls.as_array().into_iter().flatten() {
            let Some(pos) = self.calls.push(call) else {
                continue;
            };
            if let Some(whole) = self.calls.emit_if_whole(pos) {
                out.push(openai_call(whole, with_index.then_some(self.emitted)));
                self.emitted += 1;
            }
        }
        out
    }

    pub(super) fn flush(&mut self, with_index: bool) -> Vec<Value> {
        let mut out = Vec::new();
        for call in self.calls.emit_rest() {
            out.push(openai_call(call, with_index.then_some(self.emitted)));
            self.emitted += 1;
        }
        out
    }

    pub(super) fn has_emitted(&self) -> bool {
        self.emitted > 0
    }
}

/// One call in OpenAI's shape (`arguments` as a JSON string, a fresh id
/// when the model gave none).
fn openai_call(call: &Partial, index: Option<usize>) -> Value {
    let mut out = Map::new();
    out.insert(
        "id".into(),
        Value::String(call.id.clone().unwrap_or_else(new_tool_call_id)),
    );
    if let Some(index) = index {
        out.insert("index".into(), Value::from(index));
    }
    out.insert("type".into(), Value::from("function"));
    out.insert(
        "function".into(),
        json!({"name": call.name, "arguments": call.arguments_json()}),
    );
    Value::Object(out)
}

pub(super) fn usage(resp: &Value) -> Value {
    let prompt = resp
        .get("prompt_eval_count")
        .and_then(Value::as_u64)
        .unwrap_or(0);
    let completion = resp.get("eval_count").and_then(Value::as_u64).unwrap_or(0);
    json!({
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    })
}

pub(super) fn str_field<'a>(value: &'a Value, key: &str) -> &'a str {
    value.get(key).and_then(Value::as_str).unwrap_or("")
}

/// A non-streamed `/api/chat` answer as an OpenAI `chat.completion`.
pub fn ollama_to_chat_completion(resp: &Value, id: &str, created: u64) -> Value {
    let message = resp.get("message").unwrap_or(&Value::Null);
    let mut merger = CallMerger::default();
    let mut calls = merger.push(message.get("tool_calls").unwrap_or(&Value::Null), false);
    calls.extend(merger.flush(false));

    let mut out_message = Map::new();
    out_message.insert("role".into(), Value::from("assistant"));
    out_message.insert("content".into(), Value::from(str_field(message, "content")));
    let thinking = str_field(message, "thinking");
    if !thinking.is_empty() {
        // Ollama's own OpenAI endpoint names it `reasoning`; DeepSeek, vLLM
        // and the clients written for them read `reasoning_content`.
        out_message.insert("reasoning".into(), Value::from(thinking));
        out_message.insert("reasoning_content".into(), Value::from(thinking));
    }
    let reason = finish_reason(
        resp.get("done_reason").and_then(Value::as_str),
        !calls.is_empty(),
    );
    if !calls.is_empty() {
        out_message.insert("tool_calls".into(), Value::Array(calls));
    }
    let mut completion = json!({
        "id": id,
        "object": "chat.completion",
        "created": created,
        "model": str_field(resp, "model"),
        "system_fingerprint": "fp_ollama",
        "choices": [{"index": 0, "message": out_message, "finish_reason": reason}],
        "usage": usage(resp),
    });
    // oapd's extension fields (`oap_round`, `oap_tools_injected`, …) ride
    // on the completion as they ride on a stream's finish chunk.
    if let (Some(out), Some(fields)) = (completion.as_object_mut(), resp.as_object()) {
        out.extend(
            fields
                .iter()
                .filter(|(key, _)| key.starts_with("oap_"))
                .map(|(key, value)| (key.clone(), value.clone())),
        );
    }
    completion
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_text_answer_becomes_a_chat_completion() {
        let out = ollama_to_chat_completion(
            &json!({"model": "qwen3:4b", "created_at": "2026-01-01T00:00:00Z",
                "message": {"role": "assistant", "content": "Hello", "thinking": "hmm"},
                "done": true, "done_reason": "stop", "prompt_eval_count": 26, "eval_count": 5}),
            "chatcmpl-1",
            1_700_000_000,
        );
        assert_eq!(
            out,
            json!({
                "id": "chatcmpl-1", "object": "chat.completion", "created": 1_700_000_000u64,
                "model": "qwen3:4b", "system_fingerprint": "fp_ollama",
                "choices": [{"index": 0, "message": {"role": "assistant", "content": "Hello", "reasoning": "hmm",
                             "reasoning_content": "hmm"},
                             "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 26, "completion_tokens": 5, "total_tokens": 31}
            })
        );
    }

    #[test]
    fn tool_calls_get_string_arguments_ids_and_finish_reason() {
        let out = ollama_to_chat_completion(
            &json!({"model": "m", "message": {"role": "assistant", "content": "", "tool_calls": [
                {"id": "call_keepme00", "function": {"index": 0, "name": "a", "arguments": {"x": 1}}},
                {"function": {"index": 1, "name": "b", "arguments": "{\"y\": 2}"}}
            ]}, "done": true, "done_reason": "stop"}),
            "id",
            1,
        );
        let choice = &out["choices"][0];
        assert_eq!(choice["finish_reason"], json!("tool_calls"));
        let calls = choice["message"]["tool_calls"].as_array().unwrap();
        assert_eq!(
            calls[0],
            json!({"id": "call_keepme00", "type": "function", "function": {"name": "a", "arguments": "{\"x\":1}"}})
        );
        assert_eq!(calls[1]["function"]["arguments"], json!("{\"y\":2}"));
        let id = calls[1]["id"].as_str().unwrap();
        assert!(id.len() == 13 && id.starts_with("call_"), "{id}");
        assert!(
            id.bytes()
                .skip(5)
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit()),
            "{id}"
        );
    }

    #[test]
    fn length_beats_tool_calls() {
        let resp = json!({"model": "m", "message": {"content": "", "tool_calls": [
            {"function": {"name": "a", "arguments": {}}}]}, "done": true, "done_reason": "length"});
        assert_eq!(
            ollama_to_chat_completion(&resp, "i", 0)["choices"][0]["finish_reason"],
            json!("length")
        );
        assert_eq!(finish_reason(Some("load"), false), "stop");
        assert_eq!(finish_reason(None, true), "tool_calls");
    }

    #[test]
    fn generated_ids_differ() {
        let ids: std::collections::HashSet<String> = (0..100).map(|_| new_tool_call_id()).collect();
        assert_eq!(ids.len(), 100);
        assert!(new_completion_id().starts_with("chatcmpl-"));
    }

    #[test]
    fn a_completion_carries_the_bridge_figures() {
        let out = ollama_to_chat_completion(
            &json!({"model": "m", "message": {"role": "assistant", "content": "hi"},
                    "done": true, "oap_round": 2, "oap_tools_injected": 3}),
            "i",
            0,
        );
        assert_eq!(out["oap_round"], 2);
        assert_eq!(out["oap_tools_injected"], 3);
    }
}

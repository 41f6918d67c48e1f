//! Turning script turns into the exact lines Ollama writes, and the
//! `stream:false` aggregation Ollama applies (`writeChatResponse`).

use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::{json, Map, Value};
use sha2::{Digest, Sha256};

use crate::script::{Chunk, Echo, Turn};

/// A line to send, after a delay.
#[derive(Debug, Clone, PartialEq)]
pub struct Planned {
    /// Milliseconds to wait before writing the line.
    pub delay_ms: u64,
    /// The NDJSON object written.
    pub line: Value,
}

/// `text` in pieces that each start at a word: "a b" → ["a", " b"].
pub fn split_words(text: &str) -> Vec<String> {
    let mut pieces: Vec<String> = Vec::new();
    let mut current = String::new();
    let mut seen_word = false;
    for c in text.chars() {
        if c.is_whitespace() && seen_word {
            pieces.push(std::mem::take(&mut current));
            seen_word = false;
        }
        if !c.is_whitespace() {
            seen_word = true;
        }
        current.push(c);
    }
    if !current.is_empty() {
        pieces.push(current);
    }
    pieces
}

/// The current time as Ollama writes `created_at` (RFC 3339, nanoseconds).
pub fn now_rfc3339() -> String {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    rfc3339(now.as_secs(), now.subsec_nanos())
}

/// RFC 3339 in UTC for seconds since the epoch.
pub fn rfc3339(secs: u64, nanos: u32) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    // Civil from days (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{nanos:09}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// A pseudo-random `call_` + 8 lowercase alphanumerics id, from a counter.
pub fn call_id(counter: u64) -> String {
    const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";
    // splitmix64
    let mut z = counter.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    let mut id = String::from("call_");
    for _ in 0..8 {
        id.push(ALPHABET[(z % 36) as usize] as char);
        z /= 36;
    }
    id
}

fn last_with_role<'a>(request: &'a Value, role: &str) -> &'a str {
    request
        .get("messages")
        .and_then(Value::as_array)
        .and_then(|messages| {
            messages
                .iter()
                .rev()
                .find(|m| m.get("role").and_then(Value::as_str) == Some(role))
        })
        .and_then(|m| m.get("content"))
        .and_then(Value::as_str)
        .unwrap_or("")
}

/// The text an echo turn answers with.
pub fn echo_text(echo: Echo, request: &Value) -> String {
    match echo {
        Echo::LastUser => last_with_role(request, "user").to_string(),
        Echo::LastTool => last_with_role(request, "tool").to_string(),
        Echo::ToolNames => request
            .get("tools")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|tool| {
                tool.pointer("/function/name")
                    .or_else(|| tool.get("name"))
                    .and_then(Value::as_str)
            })
            .collect::<Vec<_>>()
            .join(","),
        Echo::Messages => request
            .get("messages")
            .cloned()
            .unwrap_or(Value::Null)
            .to_string(),
        Echo::Request => request.to_string(),
    }
}

/// Rough token count of a request's messages, for `prompt_eval_count`.
pub fn prompt_tokens(request: &Value) -> u64 {
    let chars: usize = request
        .get("messages")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|m| m.get("content").and_then(Value::as_str))
        .map(str::len)
        .sum();
    (chars / 4 + 1) as u64
}

/// The metrics Ollama puts on a done line (nanoseconds).
pub fn metrics(prompt_eval_count: u64, eval_count: u64) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert(
        "total_duration".into(),
        json!(250_000_000 + eval_count * 20_000_000),
    );
    m.insert("load_duration".into(), json!(1_334_875));
    m.insert("prompt_eval_count".into(), json!(prompt_eval_count));
    m.insert(
        "prompt_eval_duration".into(),
        json!(prompt_eval_count * 1_000_000),
    );
    m.insert("eval_count".into(), json!(eval_count));
    m.insert("eval_duration".into(), json!(eval_count * 20_000_000));
    m
}

/// Renders a turn's chunks into full `/api/chat` lines for `model`.
/// `ids` numbers the generated call ids. Thinking is dropped when the
/// request says `think: false`, as Ollama does not think then.
pub fn chat_lines(turn: &Turn, request: &Value, model: &str, ids: &mut u64) -> Vec<Planned> {
    let mut chunks: Vec<Chunk> = Vec::new();
    if let Some(reply) = &turn.reply {
        chunks.extend(split_words(reply).into_iter().map(Chunk::content));
    }
    if let Some(echo) = turn.echo {
        chunks.push(Chunk::content(echo_text(echo, request)));
    }
    chunks.extend(turn.chunks.iter().cloned());
    if turn.auto_done && !chunks.last().is_some_and(|c| c.done) {
        chunks.push(Chunk::done());
    }
    let no_thinking = request.get("think") == Some(&Value::Bool(false));
    let prompt = prompt_tokens(request);
    let mut call_index = 0u64;
    let count = chunks.len() as u64;
    chunks
        .iter()
        .map(|chunk| {
            let mut message = Map::new();
            message.insert("role".into(), json!("assistant"));
            message.insert(
                "content".into(),
                json!(chunk.content.clone().unwrap_or_default()),
            );
            if let Some(thinking) = chunk.thinking.as_ref().filter(|t| !t.is_empty()) {
                if !no_thinking {
                    message.insert("thinking".into(), json!(thinking));
                }
            }
            if !chunk.tool_calls.is_empty() {
                let calls = chunk
                    .tool_calls
                    .iter()
                    .map(|call| render_call(call, &mut call_index, ids))
                    .collect();
                message.insert("tool_calls".into(), Value::Array(calls));
            }
            let mut line = Map::new();
            line.insert("model".into(), json!(model));
            line.insert("created_at".into(), json!(now_rfc3339()));
            line.insert("message".into(), Value::Object(message));
            line.insert("done".into(), json!(chunk.done));
            if chunk.done {
                line.insert(
                    "done_reason".into(),
                    json!(chunk.done_reason.clone().unwrap_or_else(|| "stop".into())),
                );
                line.extend(metrics(prompt, count));
            }
            for (key, value) in &chunk.extra {
                match (key.as_str(), value, line.get_mut("message")) {
                    ("message", Value::Object(extra), Some(Value::Object(message))) => {
                        message.extend(extra.clone());
                    }
                    _ => {
                        line.insert(key.clone(), value.clone());
                    }
                }
            }
            Planned {
                delay_ms: chunk.delay_ms.unwrap_or(turn.delay_ms),
                line: Value::Object(line),
            }
        })
        .collect()
}

fn render_call(call: &Value, index: &mut u64, ids: &mut u64) -> Value {
    let Some(short) = call.as_object().filter(|c| !c.contains_key("function")) else {
        return call.clone();
    };
    let Some(name) = short.get("name") else {
        return call.clone();
    };
    let mut out = Map::new();
    match short.get("id") {
        None => {
            *ids += 1;
            out.insert("id".into(), json!(call_id(*ids)));
        }
        Some(Value::Null) => {}
        Some(id) => {
            out.insert("id".into(), id.clone());
        }
    }
    let arguments = short.get("arguments").cloned().unwrap_or_else(|| json!({}));
    out.insert(
        "function".into(),
        json!({"index": *index, "name": name, "arguments": arguments}),
    );
    *index += 1;
    Value::Object(out)
}

/// What Ollama returns for `stream:false`: content and thinking
/// concatenated, tool calls appended from every chunk, the last chunk's
/// metadata. `text_key` is `message` for chat (`response` for generate is
/// handled by [`aggregate_generate`]).
pub fn aggregate_chat(lines: &[Value]) -> Value {
    let Some(last) = lines.last() else {
        return json!({});
    };
    let mut content = String::new();
    let mut thinking = String::new();
    let mut calls = Vec::new();
    for line in lines {
        let message = line.get("message").unwrap_or(&Value::Null);
        content.push_str(message.get("content").and_then(Value::as_str).unwrap_or(""));
        thinking.push_str(
            message
                .get("thinking")
                .and_then(Value::as_str)
                .unwrap_or(""),
        );
        if let Some(more) = message.get("tool_calls").and_then(Value::as_array) {
            calls.extend(more.iter().cloned());
        }
    }
    let mut out = last.clone();
    if let Some(Value::Object(message)) = out.get_mut("message") {
        message.insert("content".into(), json!(content));
        message.remove("thinking");
        message.remove("tool_calls");
        if !thinking.is_empty() {
            message.insert("thinking".into(), json!(thinking));
        }
        if !calls.is_empty() {
            message.insert("tool_calls".into(), Value::Array(calls));
        }
    }
    out
}

/// `stream:false` for `/api/generate`: `response` concatenated.
pub fn aggregate_generate(lines: &[Value]) -> Value {
    let Some(last) = lines.last() else {
        return json!({});
    };
    let response: String = lines
        .iter()
        .filter_map(|l| l.get("response").and_then(Value::as_str))
        .collect();
    let mut out = last.clone();
    out["response"] = json!(response);
    out
}

/// A deterministic embedding of `text` with `dims` values, L2-normalised.
pub fn embedding(text: &str, dims: usize) -> Vec<f64> {
    let mut values = Vec::with_capacity(dims);
    let mut block = 0u32;
    while values.len() < dims {
        let digest = Sha256::new()
            .chain_update(block.to_le_bytes())
            .chain_update(text.as_bytes())
            .finalize();
        for pair in digest.chunks(2) {
            if values.len() == dims {
                break;
            }
            let raw = u16::from_le_bytes([pair[0], pair[1]]);
            values.push(f64::from(raw) / 32_767.5 - 1.0);
        }
        block += 1;
    }
    let norm = values.iter().map(|v| v * v).sum::<f64>().sqrt();
    if norm > 0.0 {
        for v in &mut values {
            *v /= norm;
        }
    }
    values
}

/// `sha256:<hex>` of some bytes.
pub fn digest(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_keep_their_leading_spaces() {
        assert_eq!(
            split_words("Hello there  you"),
            vec!["Hello", " there", "  you"]
        );
        assert_eq!(split_words(" a"), vec![" a"]);
        assert!(split_words("").is_empty());
        assert_eq!(split_words("a b").concat(), "a b");
    }

    #[test]
    fn timestamps_are_rfc3339() {
        assert_eq!(rfc3339(0, 0), "1970-01-01T00:00:00.000000000Z");
        assert_eq!(rfc3339(1_787_126_400, 5), "2026-08-19T08:00:00.000000005Z");
        assert_eq!(rfc3339(951_782_400, 0), "2000-02-29T00:00:00.000000000Z");
    }

    #[test]
    fn call_ids_look_like_ollamas() {
        let a = call_id(1);
        assert_eq!(a.len(), 13);
        assert!(a
            .bytes()
            .skip(5)
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit()));
        assert_ne!(a, call_id(2));
    }

    #[test]
    fn embeddings_are_stable_and_normalised() {
        let a = embedding("hello", 768);
        assert_eq!(a.len(), 768);
        assert_eq!(a, embedding("hello", 768));
        assert_ne!(a, embedding("hellO", 768));
        let norm: f64 = a.iter().map(|v| v * v).sum();
        assert!((norm - 1.0).abs() < 1e-9);
    }

    #[test]
    fn short_calls_get_ids_and_running_indexes_and_raw_calls_pass() {
        let turn = Turn::chunks(vec![
            Chunk::tool_call("a", json!({"x": 1})),
            Chunk::raw_tool_calls(vec![
                json!({"function": {"index": 7, "name": "b", "arguments": "{}"}}),
            ]),
            Chunk::raw_tool_calls(vec![
                json!({"name": "c", "id": null}),
                json!({"name": "d", "id": "mine"}),
            ]),
        ]);
        let mut ids = 0;
        let lines = chat_lines(&turn, &json!({}), "m", &mut ids);
        assert_eq!(lines.len(), 4);
        let call = |i: usize, j: usize| lines[i].line["message"]["tool_calls"][j].clone();
        assert_eq!(
            call(0, 0)["function"],
            json!({"index": 0, "name": "a", "arguments": {"x": 1}})
        );
        assert!(call(0, 0)["id"].as_str().unwrap().starts_with("call_"));
        assert_eq!(
            call(1, 0),
            json!({"function": {"index": 7, "name": "b", "arguments": "{}"}})
        );
        assert_eq!(
            call(2, 0),
            json!({"function": {"index": 1, "name": "c", "arguments": {}}})
        );
        assert_eq!(call(2, 1)["id"], json!("mine"));
        assert_eq!(call(2, 1)["function"]["index"], json!(2));
        assert_eq!(lines[3].line["done"], json!(true));
        assert_eq!(lines[3].line["eval_count"], json!(4));
    }
}

//! Tool calls a model wrote as text instead of as structured calls.
//!
//! Small models (gemma3, llama3.2 1B/3B) often print a call into `content`
//! (`{"name": .., "arguments": ..}`, `{"name": .., "parameters": ..}`,
//! `<tool_call>{..}</tool_call>`, or either inside a json code fence), and
//! thinking models sometimes write the call into their `thinking` and stop.
//! Such text is taken as a call only for oapd's own offered tools:
//! - `content` (for the models `tool_bridge.text_tool_calls` lists) only
//!   when the whole answer, trimmed, is the call: text that merely
//!   contains or resembles one is an answer;
//! - `thinking` only when the model answered nothing else (no content, no
//!   structured call): then a `<tool_call>` block or a bare JSON call for
//!   one of oapd's tools in it is what the model meant to do.
//!
//! While a streamed answer could still turn out to be a printed call it is
//! held back from the client ([`Holdback`]), at most [`MAX_HELD_BYTES`].
//!
//! Two phases of the loop (`tool_loop.rs`): planning a round, it holds
//! content back when the model prints calls and oapd may still run one;
//! after the round, [`read_calls`] turns the text into calls.

use oap_wire::ToolCall;
use serde_json::{Map, Value};

/// Most bytes of content held back while it could still be a printed call;
/// beyond that the text goes to the client and is no call.
pub const MAX_HELD_BYTES: usize = 64 * 1024;

/// Most bytes at the end of `thinking` searched for a call.
const MAX_THINKING_SCAN: usize = 64 * 1024;

/// Most candidate JSON objects tried in `thinking`.
const MAX_CANDIDATES: usize = 64;

const OPEN: &str = "<tool_call>";
const CLOSE: &str = "</tool_call>";

/// Whether a model's name starts with one of `prefixes` (the
/// `tool_bridge.text_tool_calls` list); `registry/` and a `:latest` tag
/// are not needed in the prefix.
pub fn model_prints_calls(prefixes: &[String], model: &str) -> bool {
    let name = model.rsplit('/').next().unwrap_or(model);
    prefixes
        .iter()
        .any(|prefix| !prefix.is_empty() && (model.starts_with(prefix) || name.starts_with(prefix)))
}

/// The printed-calls phase, after a round in which oapd could still run
/// a call but the model streamed none: a call written as text, in the
/// thinking of a model that answered nothing else, or as the whole content
/// of a model that prints its calls (`prints_calls`). Found calls replace
/// `calls`; true when the content was the call (it is cleared, and the
/// text held back during the round never goes out).
pub fn read_calls(
    calls: &mut Vec<ToolCall>,
    content: &mut String,
    thinking: &str,
    prints_calls: bool,
    ours: &dyn Fn(&str) -> bool,
) -> bool {
    if !calls.is_empty() {
        return false;
    }
    if content.trim().is_empty() && !thinking.is_empty() {
        if let Some(found) = thinking_calls(thinking, ours) {
            *calls = found;
        }
        return false;
    }
    if !prints_calls {
        return false;
    }
    match content_calls(content, ours) {
        Some(found) => {
            *calls = found;
            content.clear();
            true
        }
        None => false,
    }
}

/// The calls `content` is, when all of it (trimmed, optionally in a code
/// fence) is one JSON call or `<tool_call>` blocks naming `ours` only.
pub fn content_calls(content: &str, ours: &dyn Fn(&str) -> bool) -> Option<Vec<ToolCall>> {
    let text = unfence(content.trim());
    let calls = if text.starts_with(OPEN) {
        let mut calls = Vec::new();
        let mut rest = text;
        while !rest.is_empty() {
            let inner = rest.strip_prefix(OPEN)?;
            let end = inner.find(CLOSE)?;
            calls.push(call_of(&parse_object(inner.get(..end)?.trim())?)?);
            rest = inner.get(end + CLOSE.len()..)?.trim_start();
        }
        calls
    } else {
        vec![call_of(&parse_object(text)?)?]
    };
    finish(calls, ours)
}

/// The calls in `thinking` of a model that answered nothing else: its
/// `<tool_call>` blocks naming `ours`, or else the last bare JSON call
/// naming one of `ours`.
pub fn thinking_calls(thinking: &str, ours: &dyn Fn(&str) -> bool) -> Option<Vec<ToolCall>> {
    let mut start = thinking.len().saturating_sub(MAX_THINKING_SCAN);
    while !thinking.is_char_boundary(start) {
        start += 1;
    }
    let text = thinking.get(start..)?;
    let mut blocks = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find(OPEN) {
        let inner = rest.get(at + OPEN.len()..)?;
        let Some(end) = inner.find(CLOSE) else {
            // An unclosed block at the end still holds the call.
            if let Some(call) = parse_object(inner.trim()).and_then(|v| call_of(&v)) {
                blocks.push(call);
            }
            break;
        };
        if let Some(call) = parse_object(inner.get(..end)?.trim()).and_then(|v| call_of(&v)) {
            blocks.push(call);
        }
        rest = inner.get(end + CLOSE.len()..)?;
    }
    blocks.retain(|call| ours(&call.name));
    if !blocks.is_empty() {
        return finish(blocks, ours);
    }
    let mut found = None;
    for (tried, (at, _)) in text.match_indices('{').enumerate() {
        if tried >= MAX_CANDIDATES {
            break;
        }
        let Some(candidate) = text.get(at..) else {
            continue;
        };
        let mut values = serde_json::Deserializer::from_str(candidate).into_iter::<Value>();
        if let Some(Ok(value)) = values.next() {
            if let Some(call) = call_of(&value).filter(|call| ours(&call.name)) {
                found = Some(call);
            }
        }
    }
    finish(vec![found?], ours)
}

/// Whether `content` so far (trimmed at the start) could still become a
/// printed call, so it must not reach the client yet.
pub fn could_be_call(content: &str) -> bool {
    let text = content.trim_start();
    if text.is_empty() {
        return true;
    }
    if "```".starts_with(text) {
        return true;
    }
    if let Some(fenced) = text.strip_prefix("```") {
        // Only a json fence (or one without a language) can hold a call.
        let language: String = fenced
            .chars()
            .take_while(char::is_ascii_alphanumeric)
            .collect();
        let rest = fenced.get(language.len()..).unwrap_or_default();
        if !(language.is_empty() || "json".starts_with(&language.to_ascii_lowercase())) {
            return false;
        }
        return rest.trim_start().is_empty() || bare_could_be_call(rest);
    }
    bare_could_be_call(text)
}

fn bare_could_be_call(text: &str) -> bool {
    let text = text.trim_start();
    text.starts_with('{') || text.starts_with(OPEN) || OPEN.starts_with(text)
}

/// Streamed content held back while it could be a printed call.
#[derive(Debug, Default)]
pub struct Holdback {
    /// Whether the answer is still undecided.
    deciding: bool,
    held: Vec<Value>,
    bytes: usize,
}

impl Holdback {
    /// Holding starts undecided when `enabled`; otherwise nothing is held.
    pub fn new(enabled: bool) -> Holdback {
        Holdback {
            deciding: enabled,
            held: Vec::new(),
            bytes: 0,
        }
    }

    /// Takes a chunk on its way to the client, with the round's content so
    /// far: the chunks to send now (in order).
    pub fn pass(&mut self, chunk: Value, content: &str) -> Vec<Value> {
        if !self.deciding {
            return vec![chunk];
        }
        let has_content = chunk
            .pointer("/message/content")
            .and_then(Value::as_str)
            .is_some_and(|s| !s.is_empty());
        if !has_content && self.held.is_empty() {
            return vec![chunk];
        }
        self.bytes += chunk
            .pointer("/message/content")
            .and_then(Value::as_str)
            .map_or(0, str::len);
        self.held.push(chunk);
        if self.bytes > MAX_HELD_BYTES || !could_be_call(content) {
            self.deciding = false;
            return std::mem::take(&mut self.held);
        }
        Vec::new()
    }

    /// What is still held when the round is over.
    pub fn into_held(self) -> Vec<Value> {
        self.held
    }
}

/// A code fence around the text (```json ... ``` or ``` ... ```) removed.
fn unfence(text: &str) -> &str {
    let Some(inner) = text.strip_prefix("```") else {
        return text;
    };
    let Some(body) = inner.strip_suffix("```") else {
        return text;
    };
    let body = body.trim_start_matches(|c: char| c.is_ascii_alphanumeric());
    body.trim()
}

fn parse_object(text: &str) -> Option<Value> {
    match serde_json::from_str::<Value>(text) {
        Ok(value @ Value::Object(_)) => Some(value),
        _ => None,
    }
}

/// `{"name": .., "arguments"|"parameters": {..} or its JSON text}`, and
/// nothing else in the object.
fn call_of(value: &Value) -> Option<ToolCall> {
    let object = value.as_object()?;
    let name = object.get("name")?.as_str()?.trim().to_string();
    if name.is_empty() {
        return None;
    }
    let mut arguments = None;
    for (key, value) in object {
        match key.as_str() {
            "name" => {}
            "arguments" | "parameters" if arguments.is_none() => {
                arguments = Some(match value {
                    Value::Object(map) => map.clone(),
                    Value::String(text) => match serde_json::from_str(text) {
                        Ok(Value::Object(map)) => map,
                        _ => return None,
                    },
                    Value::Null => Map::new(),
                    _ => return None,
                });
            }
            _ => return None,
        }
    }
    Some(ToolCall {
        id: None,
        index: 0,
        name,
        arguments: arguments.unwrap_or_default(),
        arguments_error: None,
    })
}

fn finish(mut calls: Vec<ToolCall>, ours: &dyn Fn(&str) -> bool) -> Option<Vec<ToolCall>> {
    if calls.is_empty() || !calls.iter().all(|call| ours(&call.name)) {
        return None;
    }
    for (index, call) in calls.iter_mut().enumerate() {
        call.index = index;
    }
    Some(calls)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ours(name: &str) -> bool {
        name == "oap_wc"
    }

    fn names(calls: Option<Vec<ToolCall>>) -> Vec<String> {
        calls
            .unwrap_or_default()
            .into_iter()
            .map(|c| format!("{}{}", c.name, Value::Object(c.arguments)))
            .collect()
    }

    #[test]
    fn whole_content_calls_in_every_printed_shape() {
        for text in [
            r#"{"name": "oap_wc", "arguments": {"args": "-w"}}"#,
            r#"  {"name": "oap_wc", "parameters": {"args": "-w"}}  "#,
            "```json\n{\"name\": \"oap_wc\", \"arguments\": {\"args\": \"-w\"}}\n```",
            "<tool_call>\n{\"name\": \"oap_wc\", \"arguments\": \"{\\\"args\\\": \\\"-w\\\"}\"}\n</tool_call>",
        ] {
            assert_eq!(
                names(content_calls(text, &ours)),
                [r#"oap_wc{"args":"-w"}"#],
                "{text}"
            );
        }
    }

    #[test]
    fn text_that_only_looks_like_a_call_is_an_answer() {
        for text in [
            // Not oapd's tool.
            r#"{"name": "get_weather", "arguments": {}}"#,
            // Prose around it.
            r#"Call {"name": "oap_wc", "arguments": {}} to count."#,
            r#"{"name": "oap_wc", "arguments": {}} is how you would call it"#,
            // Other keys: data that happens to have a name.
            r#"{"name": "oap_wc", "arguments": {}, "note": "x"}"#,
            r#"{"name": "oap_wc", "age": 3}"#,
            "<tool_call>{\"name\": \"oap_wc\"}</tool_call> and more",
            "",
            "{}",
        ] {
            assert!(content_calls(text, &ours).is_none(), "{text}");
        }
    }

    #[test]
    fn thinking_calls_are_blocks_or_the_last_bare_call() {
        let block = "I should count.\n<tool_call>{\"name\": \"oap_wc\", \"arguments\": {\"args\": \"-l\"}}</tool_call>";
        assert_eq!(
            names(thinking_calls(block, &ours)),
            [r#"oap_wc{"args":"-l"}"#]
        );
        let bare = "Maybe {\"name\": \"oap_wc\", \"arguments\": {\"args\": \"-c\"}} or rather {\"name\": \"oap_wc\", \"arguments\": {\"args\": \"-w\"}}.";
        assert_eq!(
            names(thinking_calls(bare, &ours)),
            [r#"oap_wc{"args":"-w"}"#]
        );
        assert!(thinking_calls(
            "I will use {\"name\": \"get_weather\", \"arguments\": {}}",
            &ours
        )
        .is_none());
        assert!(thinking_calls("nothing to do", &ours).is_none());
    }

    #[test]
    fn content_is_held_only_while_it_could_be_a_call() {
        assert!(could_be_call("  "));
        assert!(could_be_call("``"));
        assert!(could_be_call("<tool"));
        assert!(could_be_call(" {\"na"));
        assert!(!could_be_call("The answer"));
        assert!(!could_be_call("<b>"));
        assert!(could_be_call("```js"));
        assert!(could_be_call("```json\n{"));
        assert!(!could_be_call("```python\nprint(1)"));
        assert!(!could_be_call("```json\nnot a call"));
        let mut hold = Holdback::new(true);
        let chunk = |text: &str| serde_json::json!({"message": {"content": text}});
        assert!(hold.pass(chunk("{\"name\""), "{\"name\"").is_empty());
        let out = hold.pass(chunk("} no"), "{\"name\"} no");
        assert!(
            out.is_empty(),
            "still a JSON start: held until the round ends"
        );
        assert_eq!(hold.into_held().len(), 2);
        let mut hold = Holdback::new(true);
        assert!(hold.pass(chunk(" "), " ").is_empty());
        assert_eq!(hold.pass(chunk("Hi"), " Hi").len(), 2);
        assert_eq!(hold.pass(chunk("!"), " Hi!").len(), 1);
        assert!(model_prints_calls(&["gemma3".into()], "gemma3:4b"));
        assert!(model_prints_calls(
            &["llama3.2".into()],
            "registry.example/llama3.2:1b"
        ));
        assert!(!model_prints_calls(&["gemma3".into()], "qwen3:4b"));
        assert!(!model_prints_calls(&[String::new()], "qwen3:4b"));
    }
}

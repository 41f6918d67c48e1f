//! Ollama `/api/chat` specifics: tool calls and their accumulation.

use serde::Serialize;
use serde_json::{Map, Value};

/// One tool call the model made, with its arguments complete.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ToolCall {
    /// Ollama's `call_xxxxxxxx` id, when the server sent one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// Position among the calls of this response.
    pub index: usize,
    /// The function name as the model wrote it.
    pub name: String,
    /// The arguments as an object. Empty when they were absent or invalid.
    pub arguments: Map<String, Value>,
    /// Set when the model's arguments were not a JSON object; the bridge
    /// tells the model so instead of running the tool on guesses.
    #[serde(skip)]
    pub arguments_error: Option<String>,
}

impl ToolCall {
    /// The call in Ollama's wire shape (`arguments` as an object; `index`
    /// always present, as Ollama writes it).
    pub fn to_ollama(&self) -> Value {
        let mut function = Map::new();
        function.insert("index".into(), Value::from(self.index));
        function.insert("name".into(), Value::from(self.name.clone()));
        function.insert("arguments".into(), Value::Object(self.arguments.clone()));
        let mut call = Map::new();
        if let Some(id) = &self.id {
            call.insert("id".into(), Value::from(id.clone()));
        }
        call.insert("function".into(), Value::Object(function));
        Value::Object(call)
    }
}

#[derive(Debug, Default)]
struct Partial {
    id: Option<String>,
    wire_index: Option<u64>,
    name: String,
    object: Option<Map<String, Value>>,
    text: String,
}

impl Partial {
    /// Complete enough that a new piece with the same index must be a new
    /// call: it has a name and its arguments parse.
    fn complete(&self) -> bool {
        !self.name.is_empty()
            && (self.object.is_some()
                || self.text.trim().is_empty()
                || serde_json::from_str::<Map<String, Value>>(&self.text).is_ok())
    }
}

/// Collects tool calls from every chunk of a streamed response, including
/// the final `done:true` chunk, in the order they first appear.
///
/// Ollama's rendered path sends each call whole in a `done:false` chunk; its
/// native path (v0.30+) sends all calls in the final chunk; some models
/// stream a call in pieces (name first, argument fragments after) under one
/// `function.index`. Arguments may be an object or a JSON string. All of
/// these end up as one [`ToolCall`] per call.
#[derive(Debug, Default)]
pub struct ToolCallAccumulator {
    calls: Vec<Partial>,
}

impl ToolCallAccumulator {
    /// An accumulator with no calls yet; one per model response.
    pub fn new() -> Self {
        Self::default()
    }

    /// Takes the `tool_calls` array of one chunk's message (any other value
    /// is ignored).
    pub fn push(&mut self, tool_calls: &Value) {
        let Some(calls) = tool_calls.as_array() else {
            return;
        };
        for call in calls {
            self.push_one(call);
        }
    }

    /// Takes the `message.tool_calls` of a whole chunk object.
    pub fn push_chunk(&mut self, chunk: &Value) {
        if let Some(calls) = chunk.get("message").and_then(|m| m.get("tool_calls")) {
            self.push(calls);
        }
    }

    fn push_one(&mut self, call: &Value) {
        if !call.is_object() {
            return;
        }
        let function = call.get("function").unwrap_or(call);
        let wire_index = function
            .get("index")
            .or_else(|| call.get("index"))
            .and_then(Value::as_u64);
        let name = function.get("name").and_then(Value::as_str).unwrap_or("");
        let id = call.get("id").and_then(Value::as_str);
        // Ollama's parser accepts "parameters" for "arguments"; so do we.
        let arguments = function
            .get("arguments")
            .or_else(|| function.get("parameters"));

        let existing = wire_index.and_then(|index| {
            self.calls
                .iter()
                .rposition(|p| p.wire_index == Some(index))
                .filter(|&pos| name.is_empty() || !self.calls[pos].complete())
        });
        let partial = match existing {
            Some(pos) => &mut self.calls[pos],
            None => {
                self.calls.push(Partial {
                    wire_index,
                    ..Partial::default()
                });
                let last = self.calls.len() - 1;
                &mut self.calls[last]
            }
        };
        if partial.id.is_none() {
            partial.id = id.map(str::to_string);
        }
        if !name.is_empty() {
            partial.name = name.to_string();
        }
        match arguments {
            Some(Value::Object(object)) => {
                partial
                    .object
                    .get_or_insert_with(Map::new)
                    .extend(object.iter().map(|(k, v)| (k.clone(), v.clone())));
            }
            Some(Value::String(fragment)) => partial.text.push_str(fragment),
            _ => {}
        }
    }

    /// Whether no chunk carried a tool call so far.
    pub fn is_empty(&self) -> bool {
        self.calls.is_empty()
    }

    /// The calls collected so far, arguments resolved.
    pub fn finish(&self) -> Vec<ToolCall> {
        self.calls
            .iter()
            .enumerate()
            .map(|(index, partial)| {
                let (arguments, arguments_error) = resolve_arguments(partial);
                ToolCall {
                    id: partial.id.clone(),
                    index,
                    name: partial.name.clone(),
                    arguments,
                    arguments_error,
                }
            })
            .collect()
    }
}

fn resolve_arguments(partial: &Partial) -> (Map<String, Value>, Option<String>) {
    let mut arguments = partial.object.clone().unwrap_or_default();
    let text = partial.text.trim();
    if text.is_empty() {
        return (arguments, None);
    }
    match serde_json::from_str::<Value>(text) {
        Ok(Value::Object(object)) => {
            arguments.extend(object);
            (arguments, None)
        }
        // A model that double-encodes: "\"{\\\"a\\\":1}\"".
        Ok(Value::String(inner)) => match serde_json::from_str::<Map<String, Value>>(&inner) {
            Ok(object) => {
                arguments.extend(object);
                (arguments, None)
            }
            Err(err) => (
                arguments,
                Some(format!("arguments are not a JSON object: {err}")),
            ),
        },
        Ok(other) => (
            arguments,
            Some(format!("arguments must be a JSON object, got {other}")),
        ),
        Err(err) => (
            arguments,
            Some(format!("arguments are not valid JSON: {err}")),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn names_and_args(acc: &ToolCallAccumulator) -> Vec<(String, Value)> {
        acc.finish()
            .into_iter()
            .map(|c| (c.name, Value::Object(c.arguments)))
            .collect()
    }

    #[test]
    fn whole_calls_in_separate_chunks_are_all_kept() {
        let mut acc = ToolCallAccumulator::new();
        acc.push_chunk(&json!({"message": {"tool_calls": [
            {"id": "call_a", "function": {"index": 0, "name": "f", "arguments": {"x": 1}}}]}, "done": false}));
        acc.push_chunk(&json!({"message": {"content": "thinking..."}, "done": false}));
        acc.push_chunk(&json!({"message": {"tool_calls": [
            {"id": "call_b", "function": {"index": 1, "name": "g", "arguments": {}}}]}, "done": false}));
        acc.push_chunk(&json!({"message": {"content": ""}, "done": true}));
        let calls = acc.finish();
        assert_eq!(calls.len(), 2);
        assert_eq!(calls[0].id.as_deref(), Some("call_a"));
        assert_eq!(calls[1].name, "g");
        assert_eq!(calls[1].index, 1);
    }

    #[test]
    fn calls_on_the_final_done_chunk_are_collected() {
        let mut acc = ToolCallAccumulator::new();
        acc.push_chunk(&json!({"message": {"content": "Let me check."}, "done": false}));
        acc.push_chunk(&json!({"message": {"content": "", "tool_calls": [
            {"function": {"index": 0, "name": "f", "arguments": {"a": "b"}}},
            {"function": {"index": 1, "name": "f", "arguments": {"a": "c"}}}]}, "done": true}));
        assert_eq!(
            names_and_args(&acc),
            vec![
                ("f".into(), json!({"a": "b"})),
                ("f".into(), json!({"a": "c"}))
            ]
        );
    }

    #[test]
    fn streamed_argument_fragments_are_joined_by_index() {
        let mut acc = ToolCallAccumulator::new();
        acc.push(&json!([{"function": {"index": 0, "name": "weather", "arguments": ""}}]));
        acc.push(&json!([{"function": {"index": 0, "arguments": "{\"city\": \"Pa"}}]));
        acc.push(&json!([{"function": {"index": 1, "name": "time", "arguments": "{}"}}]));
        acc.push(&json!([{"function": {"index": 0, "arguments": "ris\"}"}}]));
        assert_eq!(
            names_and_args(&acc),
            vec![
                ("weather".into(), json!({"city": "Paris"})),
                ("time".into(), json!({}))
            ]
        );
    }

    #[test]
    fn string_arguments_are_parsed_and_bad_ones_reported() {
        let mut acc = ToolCallAccumulator::new();
        acc.push(&json!([
            {"function": {"name": "a", "arguments": "{\"n\": 2}"}},
            {"function": {"name": "b", "arguments": "{not json"}},
            {"function": {"name": "c", "arguments": "[1, 2]"}},
            {"function": {"name": "d", "arguments": "\"{\\\"n\\\": 3}\""}},
            {"function": {"name": "e"}}
        ]));
        let calls = acc.finish();
        assert_eq!(calls.len(), 5, "calls without an index are distinct");
        assert_eq!(Value::Object(calls[0].arguments.clone()), json!({"n": 2}));
        assert!(calls[1]
            .arguments_error
            .as_deref()
            .unwrap()
            .contains("not valid JSON"));
        assert!(calls[2]
            .arguments_error
            .as_deref()
            .unwrap()
            .contains("must be a JSON object"));
        assert_eq!(Value::Object(calls[3].arguments.clone()), json!({"n": 3}));
        assert!(calls[4].arguments.is_empty() && calls[4].arguments_error.is_none());
    }

    #[test]
    fn a_complete_call_reusing_an_index_is_a_new_call() {
        let mut acc = ToolCallAccumulator::new();
        acc.push(&json!([{"function": {"index": 0, "name": "f", "arguments": {"x": 1}}}]));
        acc.push(&json!([{"function": {"index": 0, "name": "f", "arguments": {"x": 2}}}]));
        assert_eq!(acc.finish().len(), 2);
    }

    #[test]
    fn parameters_is_accepted_for_arguments_and_the_wire_shape_round_trips() {
        let mut acc = ToolCallAccumulator::new();
        acc.push(&json!([{"id": "call_1", "function": {"index": 0, "name": "f", "parameters": {"q": "x"}}}]));
        let call = &acc.finish()[0];
        assert_eq!(
            call.to_ollama(),
            json!({"id": "call_1", "function": {"index": 0, "name": "f", "arguments": {"q": "x"}}})
        );
    }

    #[test]
    fn garbage_is_ignored() {
        let mut acc = ToolCallAccumulator::new();
        acc.push(&json!("nope"));
        acc.push(&json!([42, null]));
        acc.push_chunk(&json!({"message": "x"}));
        assert!(acc.is_empty());
    }
}

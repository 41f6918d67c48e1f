//! Ollama `/api/chat` specifics: tool calls and their accumulation.

use serde::Serialize;
use serde_json::{Map, Value};

use crate::merge::Calls;

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

/// Collects tool calls from every chunk of a streamed response, including
/// the final `done:true` chunk, in the order they first appear.
///
/// Ollama's rendered path sends each call whole in a `done:false` chunk; its
/// native path (v0.30+) sends all calls in the final chunk; some models
/// stream a call in pieces (name first, argument fragments after) under one
/// `function.index`. Arguments may be an object or a JSON string. All of
/// these end up as one [`ToolCall`] per call; the merging rules and caps are
/// one merger's (see [`MAX_TOOL_CALLS`](crate::MAX_TOOL_CALLS) and
/// [`MAX_ARGUMENT_BYTES`](crate::MAX_ARGUMENT_BYTES) for its caps).
#[derive(Debug, Default)]
pub struct ToolCallAccumulator {
    calls: Calls,
}

impl ToolCallAccumulator {
    /// An accumulator with no calls yet; one per model response.
    pub fn new() -> Self {
        Self::default()
    }

    /// Takes the `tool_calls` array of one chunk's message (any other value
    /// is ignored).
    pub fn push(&mut self, tool_calls: &Value) {
        for call in tool_calls.as_array().into_iter().flatten() {
            self.calls.push(call);
        }
    }

    /// Takes the `message.tool_calls` of a whole chunk object.
    pub fn push_chunk(&mut self, chunk: &Value) {
        if let Some(calls) = chunk.get("message").and_then(|m| m.get("tool_calls")) {
            self.push(calls);
        }
    }

    /// Whether no chunk carried a tool call so far.
    pub fn is_empty(&self) -> bool {
        self.calls.is_empty()
    }

    /// The calls collected so far, arguments resolved.
    pub fn finish(&self) -> Vec<ToolCall> {
        self.calls
            .all()
            .enumerate()
            .map(|(index, partial)| {
                let (arguments, arguments_error) = partial.arguments();
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
    fn a_repeated_name_with_the_rest_of_the_arguments_is_the_same_call() {
        let mut acc = ToolCallAccumulator::new();
        acc.push(&json!([{"function": {"index": 0, "name": "f"}}]));
        acc.push(&json!([{"id": "call_9", "function": {"index": 0, "name": "f", "arguments": {"q": 1}}}]));
        let calls = acc.finish();
        assert_eq!(calls.len(), 1);
        assert_eq!(calls[0].id.as_deref(), Some("call_9"));
        assert_eq!(Value::Object(calls[0].arguments.clone()), json!({"q": 1}));
    }

    #[test]
    fn pieces_without_a_name_or_arguments_make_no_call() {
        let mut acc = ToolCallAccumulator::new();
        acc.push(&json!([{"function": {"index": 0, "arguments": ""}}, {"id": "call_x"}]));
        assert!(acc.is_empty());
        assert!(acc.finish().is_empty());
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

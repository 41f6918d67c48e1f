//! Streamed `/api/chat` chunks translated, one by one, into OpenAI
//! `chat.completion.chunk` server-sent events.

use serde_json::{json, Map, Value};

use super::error::openai_error;
use super::response::{finish_reason, str_field, usage, CallMerger};
use super::tool_choice;
use crate::sse;

/// One event of an OpenAI stream.
#[derive(Debug, Clone, PartialEq)]
pub enum StreamEvent {
    /// `data: {json}`.
    Data(Value),
    /// `data: [DONE]`.
    Done,
}

impl StreamEvent {
    /// The event as one SSE frame (`data: ...` and the blank line).
    pub fn to_sse(&self) -> Vec<u8> {
        match self {
            StreamEvent::Data(value) => sse::data(value),
            StreamEvent::Done => sse::DONE.to_vec(),
        }
    }
}

fn events_to_sse(events: &[StreamEvent]) -> Vec<u8> {
    events.iter().flat_map(StreamEvent::to_sse).collect()
}

/// Translates a streamed `/api/chat` answer, chunk by chunk, into OpenAI
/// `chat.completion.chunk` events (Ollama v0.32.6+ format):
/// - the first event carries `delta.role: "assistant"`;
/// - `content` → `delta.content`, `thinking` → `delta.reasoning`;
/// - each tool call goes out whole with `arguments` as a JSON string and its
///   own `index`, counting up across the response;
/// - after the `done` chunk: a `delta: {}` event with `finish_reason`
///   (`length` > `tool_calls` if any call was emitted > `stop`), the usage
///   event (`choices: []`) when asked for, and `[DONE]`.
///
/// Every event has the same `id` and `created`.
#[derive(Debug)]
pub struct ChunkTranslator {
    id: String,
    created: u64,
    model: String,
    include_usage: bool,
    started: bool,
    finished: bool,
    calls: CallMerger,
    last_usage: Value,
    /// `oap_*` fields of the done chunk, for the `finish_reason` chunk.
    extensions: Map<String, Value>,
    /// A legacy-dialect client: its one call goes out as `function_call`.
    legacy_functions: bool,
    sent_function_call: bool,
}

impl ChunkTranslator {
    /// A translator for one completion: `id` and `created` go on every
    /// chunk; with `include_usage` a final usage chunk follows the last one.
    pub fn new(id: impl Into<String>, created: u64, include_usage: bool) -> Self {
        ChunkTranslator {
            id: id.into(),
            created,
            model: String::new(),
            include_usage,
            started: false,
            finished: false,
            calls: CallMerger::default(),
            last_usage: json!({"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}),
            extensions: Map::new(),
            legacy_functions: false,
            sent_function_call: false,
        }
    }

    /// A translator for an OpenAI request (`stream_options.include_usage`).
    pub fn for_request(request: &Value, id: impl Into<String>, created: u64) -> Self {
        let include_usage = request
            .pointer("/stream_options/include_usage")
            .and_then(Value::as_bool)
            .unwrap_or(false);
        let mut translator = Self::new(id, created, include_usage);
        translator.legacy_functions = tool_choice::is_legacy(request);
        translator
    }

    /// `finish_reason` in the client's dialect (`function_call` for legacy
    /// clients).
    fn dialect_reason(&self, reason: &'static str) -> &'static str {
        if self.legacy_functions && reason == "tool_calls" {
            "function_call"
        } else {
            reason
        }
    }

    /// True once the final events (`[DONE]` or an error) have been produced.
    pub fn is_finished(&self) -> bool {
        self.finished
    }

    /// Whether any tool call has been emitted so far.
    pub fn emitted_tool_calls(&self) -> bool {
        self.calls.has_emitted()
    }

    fn envelope(&self, choices: Value) -> Map<String, Value> {
        let mut chunk = Map::new();
        chunk.insert("id".into(), Value::from(self.id.clone()));
        chunk.insert("object".into(), Value::from("chat.completion.chunk"));
        chunk.insert("created".into(), Value::from(self.created));
        chunk.insert("model".into(), Value::from(self.model.clone()));
        chunk.insert("system_fingerprint".into(), Value::from("fp_ollama"));
        chunk.insert("choices".into(), choices);
        chunk
    }

    fn delta_event(&mut self, mut delta: Map<String, Value>) -> StreamEvent {
        if !self.started {
            self.started = true;
            let mut first = Map::new();
            first.insert("role".into(), Value::from("assistant"));
            if !delta.contains_key("content") {
                first.insert("content".into(), Value::from(""));
            }
            first.extend(std::mem::take(&mut delta));
            delta = first;
        }
        StreamEvent::Data(Value::Object(self.envelope(json!([
            {"index": 0, "delta": delta, "finish_reason": null}
        ]))))
    }

    /// The events for one Ollama chunk (none for an empty middle chunk).
    pub fn push_events(&mut self, chunk: &Value) -> Vec<StreamEvent> {
        if self.finished {
            return Vec::new();
        }
        if let Some(error) = chunk.get("error") {
            let message = error
                .as_str()
                .map(str::to_string)
                .unwrap_or_else(|| error.to_string());
            return self.error_events(&message);
        }
        if let Some(model) = chunk.get("model").and_then(Value::as_str) {
            self.model = model.to_string();
        }
        let message = chunk.get("message").unwrap_or(&Value::Null);
        let done = chunk.get("done").and_then(Value::as_bool).unwrap_or(false);
        let mut calls = self
            .calls
            .push(message.get("tool_calls").unwrap_or(&Value::Null), true);
        if done {
            calls.extend(self.calls.flush(true));
        }

        let mut delta = Map::new();
        let content = str_field(message, "content");
        if !content.is_empty() {
            delta.insert("content".into(), Value::from(content));
        }
        let thinking = str_field(message, "thinking");
        if !thinking.is_empty() {
            // Both names, as for a whole answer (`response.rs`).
            delta.insert("reasoning".into(), Value::from(thinking));
            delta.insert("reasoning_content".into(), Value::from(thinking));
        }
        if self.legacy_functions {
            // One call per answer in this dialect; the first is the call.
            if let Some(first) = calls.first().filter(|_| !self.sent_function_call) {
                delta.insert("function_call".into(), tool_choice::legacy_call(first));
                self.sent_function_call = true;
            }
        } else if !calls.is_empty() {
            delta.insert("tool_calls".into(), Value::Array(calls));
        }
        let mut events = Vec::new();
        if !delta.is_empty() || !self.started {
            events.push(self.delta_event(delta));
        }
        if chunk.get("eval_count").is_some() || chunk.get("prompt_eval_count").is_some() {
            self.last_usage = usage(chunk);
        }
        if done {
            // oapd's extension fields on Ollama's done chunk (e.g.
            // `oap_tool_tokens`) ride on the chunk carrying `finish_reason`.
            if let Some(object) = chunk.as_object() {
                self.extensions.extend(
                    object
                        .iter()
                        .filter(|(key, _)| key.starts_with("oap_"))
                        .map(|(key, value)| (key.clone(), value.clone())),
                );
            }
            let reason = self.dialect_reason(finish_reason(
                chunk.get("done_reason").and_then(Value::as_str),
                self.calls.has_emitted(),
            ));
            events.extend(self.closing_events(reason));
        }
        events
    }

    fn closing_events(&mut self, reason: &str) -> Vec<StreamEvent> {
        let mut events = Vec::new();
        if !self.started {
            events.push(self.delta_event(Map::new()));
        }
        let mut finish = self.envelope(json!([
            {"index": 0, "delta": {}, "finish_reason": reason}
        ]));
        finish.extend(std::mem::take(&mut self.extensions));
        events.push(StreamEvent::Data(Value::Object(finish)));
        if self.include_usage {
            let mut chunk = self.envelope(json!([]));
            chunk.insert("usage".into(), self.last_usage.clone());
            events.push(StreamEvent::Data(Value::Object(chunk)));
        }
        events.push(StreamEvent::Done);
        self.finished = true;
        events
    }

    /// [`ChunkTranslator::push_events`] as SSE bytes.
    pub fn push(&mut self, chunk: &Value) -> Vec<u8> {
        events_to_sse(&self.push_events(chunk))
    }

    /// The closing events when the upstream stream ended without a `done`
    /// chunk (held tool calls are flushed, `finish_reason` is `tool_calls`
    /// or `stop`). Nothing once finished.
    pub fn finish_events(&mut self) -> Vec<StreamEvent> {
        if self.finished {
            return Vec::new();
        }
        let mut events = Vec::new();
        let calls = self.calls.flush(true);
        if !calls.is_empty() {
            let mut delta = Map::new();
            delta.insert("tool_calls".into(), Value::Array(calls));
            events.push(self.delta_event(delta));
        }
        let reason = self.dialect_reason(finish_reason(None, self.calls.has_emitted()));
        events.extend(self.closing_events(reason));
        events
    }

    /// [`ChunkTranslator::finish_events`] as SSE bytes.
    pub fn finish(&mut self) -> Vec<u8> {
        events_to_sse(&self.finish_events())
    }

    /// An error event in OpenAI's shape (what Ollama's `/v1` writes when the
    /// stream fails midway); ends the stream. Nothing once finished.
    pub fn error_events(&mut self, message: &str) -> Vec<StreamEvent> {
        if self.finished {
            return Vec::new();
        }
        self.finished = true;
        vec![StreamEvent::Data(openai_error(500, message))]
    }

    /// [`ChunkTranslator::error_events`] as SSE bytes.
    pub fn error(&mut self, message: &str) -> Vec<u8> {
        events_to_sse(&self.error_events(message))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(translator: &mut ChunkTranslator, chunks: &[Value]) -> Vec<StreamEvent> {
        chunks
            .iter()
            .flat_map(|c| translator.push_events(c))
            .collect()
    }

    fn data(event: &StreamEvent) -> &Value {
        match event {
            StreamEvent::Data(value) => value,
            StreamEvent::Done => panic!("expected data, got [DONE]"),
        }
    }

    fn deltas(events: &[StreamEvent]) -> Vec<Value> {
        events
            .iter()
            .filter_map(|e| match e {
                StreamEvent::Data(v) => v["choices"].get(0).map(|c| c["delta"].clone()),
                StreamEvent::Done => None,
            })
            .collect()
    }

    fn chunk(content: &str) -> Value {
        json!({"model": "m", "created_at": "2026-01-01T00:00:00Z",
               "message": {"role": "assistant", "content": content}, "done": false})
    }

    fn done(reason: &str) -> Value {
        json!({"model": "m", "message": {"role": "assistant", "content": ""}, "done": true,
               "done_reason": reason, "prompt_eval_count": 10, "eval_count": 3})
    }

    #[test]
    fn a_content_only_stream() {
        let mut t = ChunkTranslator::new("chatcmpl-7", 42, false);
        let events = run(
            &mut t,
            &[chunk("Hel"), chunk(""), chunk("lo"), done("stop")],
        );
        assert_eq!(events.len(), 4);
        assert_eq!(
            deltas(&events),
            vec![
                json!({"role": "assistant", "content": "Hel"}),
                json!({"content": "lo"}),
                json!({})
            ]
        );
        for event in &events[..3] {
            let v = data(event);
            assert_eq!(v["id"], json!("chatcmpl-7"));
            assert_eq!(v["created"], json!(42));
            assert_eq!(v["object"], json!("chat.completion.chunk"));
            assert_eq!(v["model"], json!("m"));
            assert_eq!(v["system_fingerprint"], json!("fp_ollama"));
        }
        assert_eq!(data(&events[0])["choices"][0]["finish_reason"], json!(null));
        assert_eq!(
            data(&events[2])["choices"][0]["finish_reason"],
            json!("stop")
        );
        assert_eq!(events[3], StreamEvent::Done);
        assert!(t.is_finished());
        assert!(t.push_events(&chunk("late")).is_empty());
        assert!(t.finish_events().is_empty());
    }

    #[test]
    fn sse_bytes_are_data_lines() {
        let mut t = ChunkTranslator::new("c", 1, false);
        let mut bytes = t.push(&chunk("Hi"));
        bytes.extend(t.push(&done("stop")));
        let text = String::from_utf8(bytes).unwrap();
        let mut decoder = sse::SseDecoder::new();
        let events = decoder.push(text.as_bytes());
        assert_eq!(events.len(), 3);
        assert!(text.starts_with("data: {\"id\":\"c\""));
        assert!(text.ends_with("\n\ndata: [DONE]\n\n"));
    }

    #[test]
    fn oap_fields_of_the_done_chunk_ride_on_the_finish_chunk_only() {
        let mut t = ChunkTranslator::new("c", 1, false);
        let mut last = done("stop");
        last["oap_tool_tokens"] = json!(123);
        last["other_field"] = json!("not ours");
        let events = t.push_events(&chunk("Hi"));
        let first = match &events[0] {
            StreamEvent::Data(value) => value.clone(),
            other => panic!("{other:?}"),
        };
        assert!(first.get("oap_tool_tokens").is_none());
        let closing = t.push_events(&last);
        let finish = closing
            .iter()
            .find_map(|e| match e {
                StreamEvent::Data(v) if v["choices"][0]["finish_reason"] == json!("stop") => {
                    Some(v.clone())
                }
                _ => None,
            })
            .expect("a finish chunk");
        assert_eq!(finish["oap_tool_tokens"], json!(123));
        assert!(finish.get("other_field").is_none());
    }

    #[test]
    fn an_empty_first_chunk_still_announces_the_role() {
        let mut t = ChunkTranslator::new("c", 1, false);
        let events = run(&mut t, &[chunk(""), chunk("x"), done("stop")]);
        assert_eq!(
            deltas(&events),
            vec![
                json!({"role": "assistant", "content": ""}),
                json!({"content": "x"}),
                json!({})
            ]
        );
    }

    #[test]
    fn thinking_goes_to_reasoning() {
        let mut t = ChunkTranslator::new("c", 1, false);
        let events = run(
            &mut t,
            &[
                json!({"model": "m", "message": {"role": "assistant", "content": "", "thinking": "Hmm"}, "done": false}),
                chunk("Yes"),
                done("stop"),
            ],
        );
        assert_eq!(
            deltas(&events)[..2],
            [
                json!({"role": "assistant", "content": "", "reasoning": "Hmm",
                    "reasoning_content": "Hmm"}),
                json!({"content": "Yes"})
            ]
        );
    }

    #[test]
    fn parallel_tool_calls_get_indexes_0_and_1_and_finish_tool_calls() {
        let mut t = ChunkTranslator::new("c", 1, false);
        let events = run(
            &mut t,
            &[
                json!({"model": "m", "message": {"role": "assistant", "content": "", "tool_calls": [
                    {"id": "call_aaaaaaaa", "function": {"index": 0, "name": "get_weather", "arguments": {"city": "Paris"}}}
                ]}, "done": false}),
                json!({"model": "m", "message": {"role": "assistant", "content": "", "tool_calls": [
                    {"id": "call_bbbbbbbb", "function": {"index": 1, "name": "get_weather", "arguments": {"city": "Rome"}}}
                ]}, "done": false}),
                done("stop"),
            ],
        );
        let d = deltas(&events);
        assert_eq!(
            d[0],
            json!({"role": "assistant", "content": "", "tool_calls": [{"id": "call_aaaaaaaa", "index": 0, "type": "function",
                "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}}]})
        );
        assert_eq!(
            d[1],
            json!({"tool_calls": [{"id": "call_bbbbbbbb", "index": 1, "type": "function",
                "function": {"name": "get_weather", "arguments": "{\"city\":\"Rome\"}"}}]})
        );
        assert_eq!(d[2], json!({}));
        assert_eq!(
            data(&events[2])["choices"][0]["finish_reason"],
            json!("tool_calls")
        );
        assert!(t.emitted_tool_calls());
    }

    #[test]
    fn several_calls_in_one_chunk_get_their_own_indexes() {
        let mut t = ChunkTranslator::new("c", 1, false);
        let events = run(
            &mut t,
            &[
                json!({"model": "m", "message": {"content": "", "tool_calls": [
                {"function": {"index": 0, "name": "a", "arguments": {}}},
                {"function": {"index": 1, "name": "b", "arguments": {"k": "v"}}}
            ]}, "done": false}),
                done("stop"),
            ],
        );
        let calls = deltas(&events)[0]["tool_calls"].clone();
        assert_eq!(calls[0]["index"], json!(0));
        assert_eq!(calls[1]["index"], json!(1));
        assert_eq!(calls[0]["function"]["arguments"], json!("{}"));
    }

    #[test]
    fn calls_arriving_on_the_done_chunk() {
        let mut t = ChunkTranslator::new("c", 1, false);
        let events = run(
            &mut t,
            &[
                chunk("Checking."),
                json!({"model": "m", "message": {"role": "assistant", "content": "", "tool_calls": [
                    {"id": "x1", "function": {"index": 0, "name": "a", "arguments": {"n": 1}}},
                    {"id": "x2", "function": {"index": 1, "name": "b", "arguments": {"n": 2}}}
                ]}, "done": true, "done_reason": "stop"}),
            ],
        );
        let d = deltas(&events);
        assert_eq!(d.len(), 3);
        assert_eq!(d[1]["tool_calls"][0]["index"], json!(0));
        assert_eq!(d[1]["tool_calls"][1]["index"], json!(1));
        assert_eq!(d[1]["tool_calls"][1]["id"], json!("x2"));
        assert_eq!(
            data(&events[2])["choices"][0]["finish_reason"],
            json!("tool_calls")
        );
        assert_eq!(events[3], StreamEvent::Done);
    }

    #[test]
    fn split_argument_deltas_are_joined_into_one_whole_call() {
        // Ollama's streaming shape: name first, argument fragments after, one function.index.
        let mut t = ChunkTranslator::new("c", 1, false);
        let call = |function: Value| json!({"model": "m", "message": {"content": "", "tool_calls": [{"function": function}]}, "done": false});
        let events = run(
            &mut t,
            &[
                call(json!({"index": 0, "name": "get_weather"})),
                call(json!({"index": 0, "arguments": "{\"city\": \"Pa"})),
                call(json!({"index": 1, "name": "get_time", "arguments": "{}"})),
                call(json!({"index": 0, "arguments": "ris\"}"})),
                done("stop"),
            ],
        );
        let calls: Vec<Value> = deltas(&events)
            .into_iter()
            .filter_map(|d| d.get("tool_calls").cloned())
            .flat_map(|c| c.as_array().cloned().unwrap_or_default())
            .collect();
        assert_eq!(calls.len(), 2);
        assert_eq!(
            calls[0]["function"],
            json!({"name": "get_time", "arguments": "{}"})
        );
        assert_eq!(calls[0]["index"], json!(0));
        assert_eq!(
            calls[1]["function"],
            json!({"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"})
        );
        assert_eq!(calls[1]["index"], json!(1));
    }

    #[test]
    fn an_unfinished_fragment_is_flushed_at_done() {
        let mut t = ChunkTranslator::new("c", 1, false);
        let events = run(
            &mut t,
            &[
                json!({"message": {"tool_calls": [{"function": {"index": 0, "name": "f", "arguments": "{\"a\": "}}]}, "done": false}),
                done("stop"),
            ],
        );
        let d = deltas(&events);
        assert_eq!(
            d[1]["tool_calls"][0]["function"]["arguments"],
            json!("{\"a\":")
        );
        assert_eq!(
            data(&events[2])["choices"][0]["finish_reason"],
            json!("tool_calls")
        );
    }

    #[test]
    fn length_wins_even_after_tool_calls() {
        let mut t = ChunkTranslator::new("c", 1, false);
        let events = run(
            &mut t,
            &[
                json!({"message": {"tool_calls": [{"function": {"name": "f", "arguments": {}}}]}, "done": false}),
                done("length"),
            ],
        );
        assert_eq!(
            data(&events[1])["choices"][0]["finish_reason"],
            json!("length")
        );
    }

    #[test]
    fn the_usage_chunk_comes_before_done_when_asked() {
        let request = json!({"stream": true, "stream_options": {"include_usage": true}});
        let mut t = ChunkTranslator::for_request(&request, "c", 9);
        let events = run(&mut t, &[chunk("Hi"), done("stop")]);
        assert_eq!(events.len(), 4);
        assert_eq!(
            data(&events[2]),
            &json!({"id": "c", "object": "chat.completion.chunk", "created": 9, "model": "m",
                    "system_fingerprint": "fp_ollama", "choices": [],
                    "usage": {"prompt_tokens": 10, "completion_tokens": 3, "total_tokens": 13}})
        );
        assert_eq!(events[3], StreamEvent::Done);
        // No usage chunk unless asked.
        let mut t = ChunkTranslator::new("c", 9, false);
        assert_eq!(run(&mut t, &[chunk("Hi"), done("stop")]).len(), 3);
    }

    #[test]
    fn errors_and_truncated_streams() {
        let mut t = ChunkTranslator::new("c", 1, false);
        let events = run(&mut t, &[chunk("Hi"), json!({"error": "model crashed"})]);
        assert_eq!(
            data(&events[1]),
            &json!({"error": {"message": "model crashed", "type": "api_error", "param": null, "code": null}})
        );
        assert!(t.is_finished() && t.finish_events().is_empty());

        let mut t = ChunkTranslator::new("c", 1, false);
        run(
            &mut t,
            &[
                json!({"message": {"tool_calls": [{"function": {"index": 0, "name": "f"}}]}, "done": false}),
            ],
        );
        let events = t.finish_events();
        assert_eq!(
            deltas(&events)[0]["tool_calls"][0]["function"]["arguments"],
            json!("{}")
        );
        assert_eq!(
            data(&events[1])["choices"][0]["finish_reason"],
            json!("tool_calls")
        );
        assert_eq!(events.last(), Some(&StreamEvent::Done));

        let mut t = ChunkTranslator::new("c", 1, false);
        let events = t.finish_events();
        assert_eq!(
            deltas(&events),
            vec![json!({"role": "assistant", "content": ""}), json!({})]
        );
    }

    #[test]
    fn a_legacy_stream_sends_one_function_call() {
        let request = json!({"functions": [{"name": "f"}], "messages": []});
        let mut t = ChunkTranslator::for_request(&request, "c", 1);
        let mut events = t.push_events(&json!({"model": "m", "done": false, "message": {
            "role": "assistant", "content": "",
            "tool_calls": [{"function": {"name": "f", "arguments": {"a": 1}}},
                           {"function": {"name": "g", "arguments": {}}}]}}));
        events.extend(
            t.push_events(&json!({"model": "m", "done": true, "done_reason": "stop",
            "message": {"role": "assistant", "content": ""}})),
        );
        let data: Vec<&Value> = events
            .iter()
            .filter_map(|e| match e {
                StreamEvent::Data(v) => Some(v),
                StreamEvent::Done => None,
            })
            .collect();
        let calls: Vec<&Value> = data
            .iter()
            .filter_map(|v| v.pointer("/choices/0/delta/function_call"))
            .collect();
        assert_eq!(calls, vec![&json!({"name": "f", "arguments": "{\"a\":1}"})]);
        assert!(data
            .iter()
            .all(|v| v.pointer("/choices/0/delta/tool_calls").is_none()));
        assert_eq!(
            data.last().unwrap()["choices"][0]["finish_reason"],
            "function_call"
        );
    }
}

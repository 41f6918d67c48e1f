//! OpenAI's Responses API (`POST /v1/responses`) over the same chat loop.
//!
//! A request is translated to a Chat Completions body (then to `/api/chat`
//! by [`crate::openai`]), and the loop's Ollama chunks back to a `response`
//! object or to the Responses SSE event sequence: `response.created`,
//! `response.in_progress`, `response.output_item.added`,
//! `response.content_part.added`, `response.output_text.delta`…,
//! `response.output_text.done`, `response.content_part.done`,
//! `response.output_item.done`, function-call items with
//! `response.function_call_arguments.delta/done`, and `response.completed`
//! (or `response.failed`). The model's thinking (`message.thinking`, also
//! what it wrote between `<think>` tags: `think.rs`) becomes a `reasoning`
//! item with one `reasoning_text` part, streamed as
//! `response.reasoning_text.delta`…, before the text that follows it.
//! Pure: no I/O.

use serde_json::{json, Map, Value};

use crate::openai::WireError;

fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn wrong(field: impl Into<String>, expected: &'static str, got: &Value) -> WireError {
    WireError::Type {
        field: field.into(),
        expected,
        got: kind(got),
    }
}

fn invalid(field: impl Into<String>, message: impl Into<String>) -> WireError {
    WireError::Invalid {
        field: field.into(),
        message: message.into(),
    }
}

/// The text of a message item's `content`: a string, or parts of type
/// `input_text`/`output_text`/`text` (images become `image_url` parts).
fn content_of(field: &str, content: &Value) -> Result<Value, WireError> {
    match content {
        Value::String(text) => Ok(Value::from(text.clone())),
        Value::Array(parts) => {
            let mut out = Vec::new();
            for (i, part) in parts.iter().enumerate() {
                let at = format!("{field}[{i}]");
                let kind = part.get("type").and_then(Value::as_str).unwrap_or("");
                match kind {
                    "input_text" | "output_text" | "text" => {
                        let text = part
                            .get("text")
                            .and_then(Value::as_str)
                            .ok_or_else(|| invalid(format!("{at}.text"), "a string is required"))?;
                        out.push(json!({"type": "text", "text": text}));
                    }
                    "input_image" => {
                        let url =
                            part.get("image_url")
                                .and_then(Value::as_str)
                                .ok_or_else(|| {
                                    invalid(
                                        format!("{at}.image_url"),
                                        "a data: or http URL is required",
                                    )
                                })?;
                        out.push(json!({"type": "image_url", "image_url": {"url": url}}));
                    }
                    other => {
                        return Err(invalid(
                            format!("{at}.type"),
                            format!("content part type {other:?} is not supported"),
                        ))
                    }
                }
            }
            Ok(Value::Array(out))
        }
        other => Err(wrong(field, "a string or an array of content parts", other)),
    }
}

/// Translates a Responses request into a Chat Completions request.
/// Unknown top-level fields are dropped except `oap_*` extensions.
pub fn request_to_chat(req: &Value) -> Result<Value, WireError> {
    let Some(body) = req.as_object() else {
        return Err(wrong("body", "a JSON object", req));
    };
    let model = match body.get("model") {
        Some(Value::String(model)) if !model.trim().is_empty() => model.clone(),
        None | Some(Value::Null) => return Err(WireError::Missing("model".into())),
        Some(other) => return Err(wrong("model", "a non-empty string", other)),
    };
    let mut messages = Vec::new();
    match body.get("instructions") {
        None | Some(Value::Null) => {}
        Some(Value::String(text)) => messages.push(json!({"role": "system", "content": text})),
        Some(other) => return Err(wrong("instructions", "a string", other)),
    }
    match body.get("input") {
        None | Some(Value::Null) => return Err(WireError::Missing("input".into())),
        Some(Value::String(text)) => messages.push(json!({"role": "user", "content": text})),
        Some(Value::Array(items)) => {
            if items.is_empty() {
                return Err(invalid("input", "must not be empty"));
            }
            for (i, item) in items.iter().enumerate() {
                let at = format!("input[{i}]");
                let Some(object) = item.as_object() else {
                    return Err(wrong(at, "an object", item));
                };
                let kind = object
                    .get("type")
                    .and_then(Value::as_str)
                    .unwrap_or("message");
                match kind {
                    "message" => {
                        let role = object.get("role").and_then(Value::as_str).unwrap_or("");
                        let role = match role {
                            "user" | "assistant" | "system" => role,
                            "developer" => "system",
                            other => {
                                return Err(invalid(
                                    format!("{at}.role"),
                                    format!(
                                    "expected user, assistant, system or developer, got {other:?}"
                                ),
                                ))
                            }
                        };
                        let content = content_of(
                            &format!("{at}.content"),
                            object.get("content").unwrap_or(&Value::Null),
                        )?;
                        messages.push(json!({"role": role, "content": content}));
                    }
                    "function_call" => {
                        let name = object
                            .get("name")
                            .and_then(Value::as_str)
                            .ok_or_else(|| invalid(format!("{at}.name"), "a string is required"))?;
                        let call_id =
                            object
                                .get("call_id")
                                .and_then(Value::as_str)
                                .ok_or_else(|| {
                                    invalid(format!("{at}.call_id"), "a string is required")
                                })?;
                        let arguments = match object.get("arguments") {
                            Some(Value::String(s)) => s.clone(),
                            None | Some(Value::Null) => "{}".into(),
                            Some(other) => other.to_string(),
                        };
                        let call = json!({"id": call_id, "type": "function",
                            "function": {"name": name, "arguments": arguments}});
                        // Consecutive calls belong to one assistant turn.
                        let merged = messages.last_mut().and_then(|last: &mut Value| {
                            (last["role"] == "assistant" && last.get("tool_calls").is_some())
                                .then_some(last)
                        });
                        match merged.and_then(|m| m["tool_calls"].as_array_mut()) {
                            Some(calls) => calls.push(call),
                            None => messages.push(json!({"role": "assistant", "content": "",
                                "tool_calls": [call]})),
                        }
                    }
                    "function_call_output" => {
                        let call_id =
                            object
                                .get("call_id")
                                .and_then(Value::as_str)
                                .ok_or_else(|| {
                                    invalid(format!("{at}.call_id"), "a string is required")
                                })?;
                        let output = match object.get("output") {
                            Some(Value::String(s)) => s.clone(),
                            Some(other) => other.to_string(),
                            None => String::new(),
                        };
                        messages.push(
                            json!({"role": "tool", "tool_call_id": call_id, "content": output}),
                        );
                    }
                    "reasoning" => {}
                    other => {
                        return Err(invalid(
                            format!("{at}.type"),
                            format!("input item type {other:?} is not supported"),
                        ))
                    }
                }
            }
        }
        Some(other) => return Err(wrong("input", "a string or an array of items", other)),
    }

    let mut chat = Map::new();
    chat.insert("model".into(), Value::from(model));
    chat.insert("messages".into(), Value::Array(messages));
    match body.get("stream") {
        None | Some(Value::Null) => {
            chat.insert("stream".into(), Value::Bool(false));
        }
        Some(Value::Bool(stream)) => {
            chat.insert("stream".into(), Value::Bool(*stream));
        }
        Some(other) => return Err(wrong("stream", "a boolean", other)),
    }
    if let Some(tools) = body.get("tools").filter(|t| !t.is_null()) {
        let Some(tools) = tools.as_array() else {
            return Err(wrong("tools", "an array", tools));
        };
        let mut out = Vec::new();
        for (i, tool) in tools.iter().enumerate() {
            let kind = tool.get("type").and_then(Value::as_str).unwrap_or("");
            if kind != "function" {
                return Err(invalid(
                    format!("tools[{i}].type"),
                    format!("only function tools are supported, got {kind:?}"),
                ));
            }
            let name = tool
                .get("name")
                .and_then(Value::as_str)
                .ok_or_else(|| invalid(format!("tools[{i}].name"), "a string is required"))?;
            let mut function = Map::new();
            function.insert("name".into(), Value::from(name));
            for key in ["description", "parameters", "strict"] {
                if let Some(value) = tool.get(key).filter(|v| !v.is_null()) {
                    function.insert(key.into(), value.clone());
                }
            }
            out.push(json!({"type": "function", "function": function}));
        }
        chat.insert("tools".into(), Value::Array(out));
    }
    match body.get("tool_choice") {
        None | Some(Value::Null) => {}
        Some(Value::String(choice)) => {
            chat.insert("tool_choice".into(), Value::from(choice.clone()));
        }
        Some(Value::Object(choice)) => {
            let name = choice
                .get("name")
                .and_then(Value::as_str)
                .ok_or_else(|| invalid("tool_choice.name", "a function name is required"))?;
            chat.insert(
                "tool_choice".into(),
                json!({"type": "function", "function": {"name": name}}),
            );
        }
        Some(other) => return Err(wrong("tool_choice", "a string or an object", other)),
    }
    for (from, to) in [
        ("temperature", "temperature"),
        ("top_p", "top_p"),
        ("max_output_tokens", "max_tokens"),
    ] {
        if let Some(value) = body.get(from).filter(|v| !v.is_null()) {
            chat.insert(to.into(), value.clone());
        }
    }
    for (key, value) in body.iter().filter(|(k, _)| k.starts_with("oap_")) {
        chat.insert(key.clone(), value.clone());
    }
    Ok(Value::Object(chat))
}

/// Ids in OpenAI's style.
pub fn new_id(prefix: &str) -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    format!("{prefix}_{:016x}{:08x}", nanos ^ 0x9e37_79b9_7f4a_7c15, n)
}

/// Fields of the `response` object that echo the request.
#[derive(Debug, Clone)]
pub struct ResponseHead {
    /// The response id (`resp_…`, see [`new_id`]).
    pub id: String,
    /// When the request arrived, in seconds since the Unix epoch.
    pub created_at: u64,
    /// The request's `model` (empty when absent).
    pub model: String,
    /// The request's `instructions`, or `null`.
    pub instructions: Value,
    /// The request's `tools` as sent (the client's own), or `[]`.
    pub tools: Value,
    /// The request's `tool_choice`, or `"auto"`.
    pub tool_choice: Value,
    /// The request's `previous_response_id`, or `null`.
    pub previous_response_id: Value,
    /// Whether the response is kept for a later `previous_response_id`
    /// (the request's `store`, true when absent, as at OpenAI).
    pub store: bool,
}

impl ResponseHead {
    /// Reads the echoed fields from the client's original Responses request.
    pub fn for_request(req: &Value, id: String, created_at: u64) -> ResponseHead {
        ResponseHead {
            id,
            created_at,
            model: req
                .get("model")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string(),
            instructions: req.get("instructions").cloned().unwrap_or(Value::Null),
            tools: req.get("tools").cloned().unwrap_or_else(|| json!([])),
            tool_choice: req
                .get("tool_choice")
                .cloned()
                .unwrap_or_else(|| json!("auto")),
            previous_response_id: req
                .get("previous_response_id")
                .cloned()
                .unwrap_or(Value::Null),
            store: req.get("store").and_then(Value::as_bool).unwrap_or(true),
        }
    }

    fn object(&self, status: &str, output: Vec<Value>, usage: Value) -> Value {
        json!({
            "id": self.id,
            "object": "response",
            "created_at": self.created_at,
            "status": status,
            "error": null,
            "incomplete_details": null,
            "instructions": self.instructions,
            "max_output_tokens": null,
            "model": self.model,
            "output": output,
            "parallel_tool_calls": true,
            "previous_response_id": self.previous_response_id,
            "reasoning": {"effort": null, "summary": null},
            "store": self.store,
            "temperature": null,
            "text": {"format": {"type": "text"}},
            "tool_choice": self.tool_choice,
            "tools": self.tools,
            "top_p": null,
            "truncation": "disabled",
            "usage": usage,
            "metadata": {},
        })
    }
}

fn usage(done: &Value) -> Value {
    let input = done
        .get("prompt_eval_count")
        .and_then(Value::as_u64)
        .unwrap_or(0);
    let output = done.get("eval_count").and_then(Value::as_u64).unwrap_or(0);
    json!({
        "input_tokens": input,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": output,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": input + output,
    })
}

fn message_item(id: &str, text: &str, status: &str) -> Value {
    json!({"type": "message", "id": id, "status": status, "role": "assistant",
           "content": [{"type": "output_text", "text": text, "annotations": []}]})
}

fn reasoning_item(id: &str, text: &str, status: &str) -> Value {
    json!({"type": "reasoning", "id": id, "status": status, "summary": [],
           "content": [{"type": "reasoning_text", "text": text}]})
}

fn function_call_item(call: &Value, status: &str) -> Value {
    let function = call.get("function").unwrap_or(&Value::Null);
    let arguments = match function.get("arguments") {
        Some(Value::String(s)) => s.clone(),
        Some(other) if !other.is_null() => other.to_string(),
        _ => "{}".into(),
    };
    let call_id = call
        .get("id")
        .and_then(Value::as_str)
        .map(str::to_string)
        .unwrap_or_else(|| new_id("call"));
    json!({"type": "function_call", "id": new_id("fc"), "call_id": call_id,
           "name": function.get("name").and_then(Value::as_str).unwrap_or_default(),
           "arguments": arguments, "status": status})
}

/// Copies the bridge's `oap_*` figures (tools injected, rounds, tool
/// tokens) from the final chunk onto the response object, as `/api/chat`
/// carries them on its `done` chunk.
fn copy_extensions(done: &Value, response: &mut Value) {
    let (Some(done), Some(response)) = (done.as_object(), response.as_object_mut()) else {
        return;
    };
    for (key, value) in done.iter().filter(|(k, _)| k.starts_with("oap_")) {
        response.insert(key.clone(), value.clone());
    }
}

fn incomplete(done: &Value) -> bool {
    done.get("done_reason").and_then(Value::as_str) == Some("length")
}

/// A whole `response` object from the loop's aggregated Ollama answer.
pub fn chat_to_response(head: &ResponseHead, answer: &Value) -> Value {
    let mut output = Vec::new();
    let thinking = answer
        .pointer("/message/thinking")
        .and_then(Value::as_str)
        .unwrap_or_default();
    if !thinking.is_empty() {
        output.push(reasoning_item(&new_id("rs"), thinking, "completed"));
    }
    let text = answer
        .pointer("/message/content")
        .and_then(Value::as_str)
        .unwrap_or_default();
    if !text.is_empty() {
        output.push(message_item(&new_id("msg"), text, "completed"));
    }
    for call in answer
        .pointer("/message/tool_calls")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        output.push(function_call_item(call, "completed"));
    }
    let status = if incomplete(answer) {
        "incomplete"
    } else {
        "completed"
    };
    let mut response = head.object(status, output, usage(answer));
    if incomplete(answer) {
        response["incomplete_details"] = json!({"reason": "max_output_tokens"});
    }
    copy_extensions(answer, &mut response);
    response
}

/// Turns the loop's Ollama chunks into Responses SSE events.
pub struct ResponseStream {
    head: ResponseHead,
    sequence: u64,
    started: bool,
    finished: bool,
    message_id: Option<String>,
    text: String,
    /// The open reasoning item's id and its text so far.
    reasoning_id: Option<String>,
    reasoning: String,
    output: Vec<Value>,
}

impl ResponseStream {
    /// A stream echoing `head`; its first output opens with `response.created` and
    /// `response.in_progress`.
    pub fn new(head: ResponseHead) -> ResponseStream {
        ResponseStream {
            head,
            sequence: 0,
            started: false,
            finished: false,
            message_id: None,
            text: String::new(),
            reasoning_id: None,
            reasoning: String::new(),
            output: Vec::new(),
        }
    }

    /// Whether the terminal event (`response.completed`, `response.incomplete` or
    /// `response.failed`) was written; later calls write nothing.
    pub fn is_finished(&self) -> bool {
        self.finished
    }

    fn event(&mut self, out: &mut Vec<u8>, kind: &str, mut data: Value) {
        data["type"] = Value::from(kind);
        data["sequence_number"] = Value::from(self.sequence);
        self.sequence += 1;
        out.extend_from_slice(format!("event: {kind}\ndata: {data}\n\n").as_bytes());
    }

    fn start(&mut self, out: &mut Vec<u8>) {
        if self.started {
            return;
        }
        self.started = true;
        let response = self.head.object("in_progress", Vec::new(), Value::Null);
        self.event(
            out,
            "response.created",
            json!({"response": response.clone()}),
        );
        self.event(out, "response.in_progress", json!({"response": response}));
    }

    fn close_message(&mut self, out: &mut Vec<u8>) {
        let Some(id) = self.message_id.take() else {
            return;
        };
        let index = self.output.len();
        let text = std::mem::take(&mut self.text);
        self.event(
            out,
            "response.output_text.done",
            json!({"item_id": id, "output_index": index,
            "content_index": 0, "text": text, "logprobs": []}),
        );
        self.event(
            out,
            "response.content_part.done",
            json!({"item_id": id, "output_index": index,
            "content_index": 0, "part": {"type": "output_text", "text": text, "annotations": []}}),
        );
        let item = message_item(&id, &text, "completed");
        self.event(
            out,
            "response.output_item.done",
            json!({"output_index": index, "item": item.clone()}),
        );
        self.output.push(item);
    }

    fn close_reasoning(&mut self, out: &mut Vec<u8>) {
        let Some(id) = self.reasoning_id.take() else {
            return;
        };
        let index = self.output.len();
        let text = std::mem::take(&mut self.reasoning);
        self.event(
            out,
            "response.reasoning_text.done",
            json!({"item_id": id, "output_index": index, "content_index": 0, "text": text}),
        );
        self.event(
            out,
            "response.content_part.done",
            json!({"item_id": id, "output_index": index,
            "content_index": 0, "part": {"type": "reasoning_text", "text": text}}),
        );
        let item = reasoning_item(&id, &text, "completed");
        self.event(
            out,
            "response.output_item.done",
            json!({"output_index": index, "item": item.clone()}),
        );
        self.output.push(item);
    }

    /// Thinking streamed: a reasoning item opened (after the text before
    /// it, which is closed) and its delta.
    fn push_reasoning(&mut self, out: &mut Vec<u8>, text: &str) {
        self.close_message(out);
        let index = self.output.len();
        let id = match &self.reasoning_id {
            Some(id) => id.clone(),
            None => {
                let id = new_id("rs");
                self.reasoning_id = Some(id.clone());
                let item = json!({"type": "reasoning", "id": id, "status": "in_progress",
                    "summary": [], "content": []});
                self.event(
                    out,
                    "response.output_item.added",
                    json!({"output_index": index, "item": item}),
                );
                self.event(
                    out,
                    "response.content_part.added",
                    json!({"item_id": id, "output_index": index, "content_index": 0,
                    "part": {"type": "reasoning_text", "text": ""}}),
                );
                id
            }
        };
        self.reasoning.push_str(text);
        self.event(
            out,
            "response.reasoning_text.delta",
            json!({"item_id": id, "output_index": index, "content_index": 0, "delta": text}),
        );
    }

    /// Events for one chunk of the loop.
    pub fn push(&mut self, chunk: &Value) -> Vec<u8> {
        let mut out = Vec::new();
        if self.finished {
            return out;
        }
        self.start(&mut out);
        let thinking = chunk
            .pointer("/message/thinking")
            .and_then(Value::as_str)
            .unwrap_or_default();
        if !thinking.is_empty() {
            self.push_reasoning(&mut out, thinking);
        }
        let text = chunk
            .pointer("/message/content")
            .and_then(Value::as_str)
            .unwrap_or_default();
        if !text.is_empty() {
            self.close_reasoning(&mut out);
            let index = self.output.len();
            let id = match &self.message_id {
                Some(id) => id.clone(),
                None => {
                    let id = new_id("msg");
                    self.message_id = Some(id.clone());
                    let item = json!({"type": "message", "id": id, "status": "in_progress",
                        "role": "assistant", "content": []});
                    self.event(
                        &mut out,
                        "response.output_item.added",
                        json!({"output_index": index, "item": item}),
                    );
                    self.event(
                        &mut out,
                        "response.content_part.added",
                        json!({"item_id": id,
                        "output_index": index, "content_index": 0,
                        "part": {"type": "output_text", "text": "", "annotations": []}}),
                    );
                    id
                }
            };
            self.text.push_str(text);
            self.event(
                &mut out,
                "response.output_text.delta",
                json!({"item_id": id,
                "output_index": index, "content_index": 0, "delta": text, "logprobs": []}),
            );
        }
        if let Some(calls) = chunk
            .pointer("/message/tool_calls")
            .and_then(Value::as_array)
        {
            self.close_reasoning(&mut out);
            self.close_message(&mut out);
            for call in calls {
                let index = self.output.len();
                let done = function_call_item(call, "completed");
                let mut added = done.clone();
                added["status"] = Value::from("in_progress");
                added["arguments"] = Value::from("");
                let id = done["id"].clone();
                let arguments = done["arguments"].clone();
                self.event(
                    &mut out,
                    "response.output_item.added",
                    json!({"output_index": index, "item": added}),
                );
                self.event(
                    &mut out,
                    "response.function_call_arguments.delta",
                    json!({"item_id": id,
                    "output_index": index, "delta": arguments}),
                );
                self.event(
                    &mut out,
                    "response.function_call_arguments.done",
                    json!({"item_id": id,
                    "output_index": index, "arguments": arguments}),
                );
                self.event(
                    &mut out,
                    "response.output_item.done",
                    json!({"output_index": index, "item": done.clone()}),
                );
                self.output.push(done);
            }
        }
        if chunk.get("done").and_then(Value::as_bool) == Some(true) {
            self.close_reasoning(&mut out);
            self.close_message(&mut out);
            let status = if incomplete(chunk) {
                "incomplete"
            } else {
                "completed"
            };
            let mut response = self.head.object(status, self.output.clone(), usage(chunk));
            if incomplete(chunk) {
                response["incomplete_details"] = json!({"reason": "max_output_tokens"});
            }
            copy_extensions(chunk, &mut response);
            let kind = if incomplete(chunk) {
                "response.incomplete"
            } else {
                "response.completed"
            };
            self.event(&mut out, kind, json!({"response": response}));
            self.finished = true;
        }
        out
    }

    /// The loop failed: `response.failed` with the message.
    pub fn error(&mut self, message: &str) -> Vec<u8> {
        let mut out = Vec::new();
        if self.finished {
            return out;
        }
        self.start(&mut out);
        let mut response = self.head.object("failed", self.output.clone(), Value::Null);
        response["error"] = json!({"code": "server_error", "message": message});
        self.event(&mut out, "response.failed", json!({"response": response}));
        self.finished = true;
        out
    }

    /// The loop ended without a final chunk.
    pub fn finish(&mut self) -> Vec<u8> {
        self.error("the answer ended before it was done")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn string_input_and_instructions_become_messages() {
        let chat = request_to_chat(
            &json!({"model": "m", "input": "hi", "instructions": "be brief",
            "max_output_tokens": 50, "oap_top_k": 2, "store": true}),
        )
        .unwrap();
        assert_eq!(
            chat["messages"],
            json!([{"role": "system", "content": "be brief"},
            {"role": "user", "content": "hi"}])
        );
        assert_eq!(chat["stream"], false);
        assert_eq!(chat["max_tokens"], 50);
        assert_eq!(chat["oap_top_k"], 2);
        assert!(chat.get("store").is_none());
    }

    #[test]
    fn items_calls_and_outputs_round_trip_to_chat_messages() {
        let chat = request_to_chat(&json!({"model": "m", "stream": true, "input": [
            {"role": "user", "content": [{"type": "input_text", "text": "weather?"}]},
            {"type": "function_call", "call_id": "c1", "name": "get_weather", "arguments": "{\"city\":\"Paris\"}"},
            {"type": "function_call", "call_id": "c2", "name": "get_time", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c1", "output": "sunny"},
            {"type": "message", "role": "developer", "content": "note"}],
            "tools": [{"type": "function", "name": "get_weather", "parameters": {"type": "object"}}],
            "tool_choice": {"type": "function", "name": "get_weather"}})).unwrap();
        let messages = chat["messages"].as_array().unwrap();
        assert_eq!(messages.len(), 4);
        assert_eq!(
            messages[0]["content"][0],
            json!({"type": "text", "text": "weather?"})
        );
        assert_eq!(messages[1]["tool_calls"].as_array().unwrap().len(), 2);
        assert_eq!(
            messages[2],
            json!({"role": "tool", "tool_call_id": "c1", "content": "sunny"})
        );
        assert_eq!(messages[3]["role"], "system");
        assert_eq!(chat["tools"][0]["function"]["name"], "get_weather");
        assert_eq!(chat["tool_choice"]["function"]["name"], "get_weather");
        assert_eq!(chat["stream"], true);
    }

    #[test]
    fn bad_requests_name_the_field() {
        for (body, field) in [
            (json!({"input": "x"}), "model"),
            (json!({"model": "m"}), "input"),
            (json!({"model": "m", "input": 3}), "input"),
            (json!({"model": "m", "input": []}), "input"),
            (
                json!({"model": "m", "input": [{"role": "robot", "content": "x"}]}),
                "input[0].role",
            ),
            (
                json!({"model": "m", "input": [{"type": "file_search_call"}]}),
                "input[0].type",
            ),
            (
                json!({"model": "m", "input": "x", "tools": [{"type": "web_search"}]}),
                "tools[0].type",
            ),
            (
                json!({"model": "m", "input": "x", "stream": "yes"}),
                "stream",
            ),
            (
                json!({"model": "m", "input": [{"type": "function_call", "name": "f"}]}),
                "input[0].call_id",
            ),
        ] {
            let err = request_to_chat(&body).unwrap_err();
            assert!(err.to_string().contains(field), "{body}: {err}");
        }
    }

    fn head() -> ResponseHead {
        ResponseHead::for_request(&json!({"model": "m"}), "resp_1".into(), 7)
    }

    #[test]
    fn an_aggregated_answer_becomes_a_response_object() {
        let answer = json!({"message": {"role": "assistant", "content": "Hello",
            "tool_calls": [{"id": "call_1", "function": {"name": "f", "arguments": {"a": 1}}}]},
            "done": true, "prompt_eval_count": 10, "eval_count": 3});
        let response = chat_to_response(&head(), &answer);
        assert_eq!(response["object"], "response");
        assert_eq!(response["status"], "completed");
        assert_eq!(response["output"][0]["content"][0]["text"], "Hello");
        assert_eq!(response["output"][1]["type"], "function_call");
        assert_eq!(response["output"][1]["call_id"], "call_1");
        assert_eq!(response["output"][1]["arguments"], "{\"a\":1}");
        assert_eq!(response["usage"]["total_tokens"], 13);
        let cut = chat_to_response(
            &head(),
            &json!({"message": {"content": "x"}, "done": true, "done_reason": "length"}),
        );
        assert_eq!(cut["status"], "incomplete");
    }

    fn events(bytes: &[u8]) -> Vec<Value> {
        String::from_utf8(bytes.to_vec())
            .unwrap()
            .split("\n\n")
            .filter(|e| !e.is_empty())
            .map(|e| {
                let (event, data) = e.split_once('\n').unwrap();
                let data: Value =
                    serde_json::from_str(data.strip_prefix("data: ").unwrap()).unwrap();
                assert_eq!(event.strip_prefix("event: ").unwrap(), data["type"]);
                data
            })
            .collect()
    }

    #[test]
    fn the_stream_follows_the_responses_event_sequence() {
        let mut stream = ResponseStream::new(head());
        let mut bytes = stream.push(&json!({"message": {"content": "Hel"}, "done": false}));
        bytes.extend(stream.push(&json!({"message": {"content": "lo"}, "done": false})));
        bytes.extend(
            stream.push(&json!({"message": {"content": "", "tool_calls": [
            {"function": {"name": "f", "arguments": {"x": true}}}]}, "done": false})),
        );
        bytes.extend(
            stream.push(&json!({"message": {"content": ""}, "done": true, "eval_count": 2})),
        );
        assert!(stream.is_finished());
        assert!(stream.push(&json!({"done": true})).is_empty());
        let events = events(&bytes);
        let kinds: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
        assert_eq!(
            kinds,
            [
                "response.created",
                "response.in_progress",
                "response.output_item.added",
                "response.content_part.added",
                "response.output_text.delta",
                "response.output_text.delta",
                "response.output_text.done",
                "response.content_part.done",
                "response.output_item.done",
                "response.output_item.added",
                "response.function_call_arguments.delta",
                "response.function_call_arguments.done",
                "response.output_item.done",
                "response.completed"
            ]
        );
        let sequence: Vec<u64> = events
            .iter()
            .map(|e| e["sequence_number"].as_u64().unwrap())
            .collect();
        assert_eq!(sequence, (0..14).collect::<Vec<_>>());
        assert_eq!(events[6]["text"], "Hello");
        let done = &events[13]["response"];
        assert_eq!(done["output"][0]["content"][0]["text"], "Hello");
        assert_eq!(done["output"][1]["arguments"], "{\"x\":true}");
        assert_eq!(done["usage"]["output_tokens"], 2);
    }

    #[test]
    fn a_failure_mid_stream_ends_with_response_failed() {
        let mut stream = ResponseStream::new(head());
        let mut bytes = stream.push(&json!({"message": {"content": "a"}, "done": false}));
        bytes.extend(stream.error("Ollama broke"));
        let events = events(&bytes);
        let last = events.last().unwrap();
        assert_eq!(last["type"], "response.failed");
        assert_eq!(last["response"]["error"]["message"], "Ollama broke");
        assert!(stream.is_finished());
    }

    #[test]
    fn thinking_becomes_a_reasoning_item_before_the_text() {
        let answer = json!({"message": {"role": "assistant", "content": "Four.",
            "thinking": "Count them."}, "done": true});
        let response = chat_to_response(&head(), &answer);
        assert_eq!(response["output"][0]["type"], "reasoning");
        assert_eq!(
            response["output"][0]["content"][0]["type"],
            "reasoning_text"
        );
        assert_eq!(response["output"][0]["content"][0]["text"], "Count them.");
        assert_eq!(response["output"][0]["summary"], json!([]));
        assert_eq!(response["output"][1]["content"][0]["text"], "Four.");

        let mut stream = ResponseStream::new(head());
        let mut bytes = Vec::new();
        for chunk in [
            json!({"message": {"content": "", "thinking": "Count"}, "done": false}),
            json!({"message": {"content": "", "thinking": " them."}, "done": false}),
            json!({"message": {"content": "Four."}, "done": false}),
            json!({"message": {"content": ""}, "done": true}),
        ] {
            bytes.extend(stream.push(&chunk));
        }
        let events = events(&bytes);
        let kinds: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
        assert_eq!(
            kinds[2..],
            [
                "response.output_item.added",
                "response.content_part.added",
                "response.reasoning_text.delta",
                "response.reasoning_text.delta",
                "response.reasoning_text.done",
                "response.content_part.done",
                "response.output_item.done",
                "response.output_item.added",
                "response.content_part.added",
                "response.output_text.delta",
                "response.output_text.done",
                "response.content_part.done",
                "response.output_item.done",
                "response.completed"
            ]
        );
        assert_eq!(events[6]["text"], "Count them.");
        assert_eq!(events[9]["output_index"], 1, "the text is the second item");
        let done = &events.last().unwrap()["response"];
        assert_eq!(done["output"][0]["type"], "reasoning");
        assert_eq!(done["output"][0]["content"][0]["text"], "Count them.");
        assert_eq!(done["output"][1]["content"][0]["text"], "Four.");
    }
}

//! The OpenAI Chat Completions wire format and its translation to and from
//! Ollama's `/api/chat`, following Ollama's own `/v1` layer
//! (`openai/openai.go`, `middleware/openai.go`, v0.32.6+ stream format).
//!
//! - [`chat_request_to_ollama`]: a `/v1/chat/completions` body to an
//!   `/api/chat` body.
//! - [`ollama_to_chat_completion`]: a non-streamed `/api/chat` answer to a
//!   `chat.completion` object.
//! - [`ChunkTranslator`]: streamed `/api/chat` chunks to SSE events.
//! - [`openai_error`]: the error shape.
//!
//! Where this differs from Ollama's `/v1` (all deliberate):
//! - a message whose content is an array of parts becomes *one* Ollama
//!   message (text parts joined with `\n`, images in `images`), not one
//!   message per part;
//! - `temperature`/`top_p` are not forced to 1.0 when absent unless
//!   [`RequestOptions::openai_sampling_defaults`] asks for it, so the
//!   model's own defaults apply;
//! - the Ollama-native fields `options`, `keep_alive`, `think` and `format`
//!   are honoured when a client sends them (the OpenAI fields win);
//! - tool calls split into argument fragments under one `function.index`
//!   are joined before they are emitted, so each OpenAI call stays whole.

use std::hash::{BuildHasher, Hasher};

use serde_json::{json, Map, Value};

use crate::merge::{Calls, Partial};
use crate::sse;

pub mod tool_choice;

/// Why an OpenAI request could not be translated. Every variant is a client
/// error (HTTP 400); the message names the offending field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    #[error("{0} is required")]
    Missing(String),
    #[error("[] is too short - 'messages'")]
    EmptyMessages,
    #[error("invalid type for '{field}': expected {expected}, got {got}")]
    Type {
        field: String,
        expected: &'static str,
        got: &'static str,
    },
    #[error("invalid value for '{field}': {message}")]
    Invalid { field: String, message: String },
}

impl WireError {
    /// The request field at fault, for OpenAI's `error.param`.
    pub fn field(&self) -> &str {
        match self {
            WireError::Missing(field)
            | WireError::Type { field, .. }
            | WireError::Invalid { field, .. } => field,
            WireError::EmptyMessages => "messages",
        }
    }

    /// This error as an OpenAI error body (status 400).
    pub fn to_openai(&self) -> Value {
        let mut body = openai_error(400, &self.to_string());
        body["error"]["param"] = Value::from(self.field());
        body
    }
}

fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

fn wrong_type(field: impl Into<String>, expected: &'static str, value: &Value) -> WireError {
    WireError::Type {
        field: field.into(),
        expected,
        got: type_name(value),
    }
}

fn invalid(field: impl Into<String>, message: impl Into<String>) -> WireError {
    WireError::Invalid {
        field: field.into(),
        message: message.into(),
    }
}

/// Choices for [`chat_request_to_ollama_with`].
#[derive(Debug, Clone, Default)]
pub struct RequestOptions {
    /// Set `temperature` and `top_p` to 1.0 when the client leaves them out,
    /// as Ollama's `/v1` does (OpenAI's defaults). Off by default: the
    /// model's own defaults (Modelfile, then 0.8/0.9) apply.
    pub openai_sampling_defaults: bool,
}

/// Translates a `/v1/chat/completions` request body into an `/api/chat`
/// body, with [`RequestOptions::default`].
pub fn chat_request_to_ollama(req: &Value) -> Result<Value, WireError> {
    chat_request_to_ollama_with(req, &RequestOptions::default())
}

/// Translates a `/v1/chat/completions` request body into an `/api/chat`
/// body. `stream` is always written (OpenAI's default is `false`, Ollama's
/// is `true`).
pub fn chat_request_to_ollama_with(
    req: &Value,
    choices: &RequestOptions,
) -> Result<Value, WireError> {
    let Some(body) = req.as_object() else {
        return Err(wrong_type("body", "a JSON object", req));
    };
    let model = match body.get("model") {
        None | Some(Value::Null) => return Err(WireError::Missing("model".into())),
        Some(Value::String(model)) if model.trim().is_empty() => {
            return Err(WireError::Missing("model".into()))
        }
        Some(Value::String(model)) => model.clone(),
        Some(other) => return Err(wrong_type("model", "a string", other)),
    };
    let messages = match body.get("messages") {
        None | Some(Value::Null) => return Err(WireError::Missing("messages".into())),
        Some(Value::Array(messages)) if messages.is_empty() => {
            return Err(WireError::EmptyMessages)
        }
        Some(Value::Array(messages)) => messages,
        Some(other) => return Err(wrong_type("messages", "an array", other)),
    };
    let converted = messages
        .iter()
        .enumerate()
        .map(|(i, message)| convert_message(i, message, &messages[..i]))
        .collect::<Result<Vec<_>, _>>()?;
    let stream = match body.get("stream") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(stream)) => *stream,
        Some(other) => return Err(wrong_type("stream", "a boolean", other)),
    };

    let mut out = Map::new();
    out.insert("model".into(), Value::String(model));
    out.insert("messages".into(), Value::Array(converted));
    out.insert("stream".into(), Value::Bool(stream));
    if let Some(format) = convert_format(body)? {
        out.insert("format".into(), format);
    }
    let options = convert_options(body, choices)?;
    if !options.is_empty() {
        out.insert("options".into(), Value::Object(options));
    }
    tool_choice::apply(
        &mut out,
        tool_choice::client_tools(body)?,
        tool_choice::parse(body)?,
    )?;
    if let Some(think) = convert_think(body)? {
        out.insert("think".into(), think);
    }
    if let Some(keep_alive) = body.get("keep_alive").filter(|v| !v.is_null()) {
        out.insert("keep_alive".into(), keep_alive.clone());
    }
    match body.get("logprobs") {
        None | Some(Value::Null) => {}
        Some(Value::Bool(logprobs)) => {
            out.insert("logprobs".into(), Value::Bool(*logprobs));
        }
        Some(other) => return Err(wrong_type("logprobs", "a boolean", other)),
    }
    if let Some(top) = body.get("top_logprobs").filter(|v| !v.is_null()) {
        if top.as_u64().is_none() {
            return Err(wrong_type("top_logprobs", "a non-negative integer", top));
        }
        out.insert("top_logprobs".into(), top.clone());
    }
    Ok(Value::Object(out))
}

fn convert_message(i: usize, message: &Value, earlier: &[Value]) -> Result<Value, WireError> {
    let field = format!("messages[{i}]");
    let Some(message) = message.as_object() else {
        return Err(wrong_type(field, "an object", message));
    };
    let role = match message.get("role") {
        None | Some(Value::Null) => return Err(WireError::Missing(format!("{field}.role"))),
        Some(Value::String(role)) => role.to_ascii_lowercase(),
        Some(other) => return Err(wrong_type(format!("{field}.role"), "a string", other)),
    };
    let role = match role.as_str() {
        "system" | "developer" => "system",
        "user" => "user",
        "assistant" => "assistant",
        // The legacy dialect's function results are tool results.
        "tool" | "function" => "tool",
        _ => {
            return Err(invalid(
                format!("{field}.role"),
                format!(
                    "unknown role '{role}' (expected system, developer, user, assistant, tool or function)"
                ),
            ))
        }
    };

    let mut images = Vec::new();
    let content = match message.get("content") {
        Some(Value::String(text)) => text.clone(),
        Some(Value::Array(parts)) => {
            let mut texts = Vec::new();
            for (j, part) in parts.iter().enumerate() {
                convert_part(
                    &format!("{field}.content[{j}]"),
                    part,
                    &mut texts,
                    &mut images,
                )?;
            }
            texts.join("\n")
        }
        None | Some(Value::Null) if role == "assistant" => String::new(),
        None => return Err(WireError::Missing(format!("{field}.content"))),
        Some(other) => {
            return Err(wrong_type(
                format!("{field}.content"),
                "a string or an array of content parts",
                other,
            ))
        }
    };

    let mut out = Map::new();
    out.insert("role".into(), Value::from(role));
    out.insert("content".into(), Value::String(content));
    for key in ["reasoning", "reasoning_content"] {
        match message.get(key) {
            None | Some(Value::Null) => {}
            Some(Value::String(thinking)) => {
                if !thinking.is_empty() {
                    out.insert("thinking".into(), Value::String(thinking.clone()));
                }
                break;
            }
            Some(other) => return Err(wrong_type(format!("{field}.{key}"), "a string", other)),
        }
    }
    if !images.is_empty() {
        out.insert("images".into(), Value::Array(images));
    }
    match message.get("tool_calls") {
        None | Some(Value::Null) => {}
        Some(Value::Array(calls)) => {
            let calls = calls
                .iter()
                .enumerate()
                .map(|(j, call)| convert_tool_call(&format!("{field}.tool_calls[{j}]"), j, call))
                .collect::<Result<Vec<_>, _>>()?;
            if !calls.is_empty() {
                out.insert("tool_calls".into(), Value::Array(calls));
            }
        }
        Some(other) => {
            return Err(wrong_type(format!("{field}.tool_calls"), "an array", other));
        }
    }
    // The legacy dialect's one call per assistant message.
    if let Some(call) = message.get("function_call").filter(|c| !c.is_null()) {
        if !out.contains_key("tool_calls") {
            let call = convert_tool_call(
                &format!("{field}.function_call"),
                0,
                &json!({"function": call}),
            )?;
            out.insert("tool_calls".into(), Value::Array(vec![call]));
        }
    }
    if role == "tool" {
        let call_id = match message.get("tool_call_id") {
            None | Some(Value::Null) => None,
            Some(Value::String(id)) => Some(id.as_str()),
            Some(other) => {
                return Err(wrong_type(
                    format!("{field}.tool_call_id"),
                    "a string",
                    other,
                ))
            }
        };
        let name = message
            .get("name")
            .and_then(Value::as_str)
            .filter(|name| !name.is_empty())
            .map(str::to_string)
            .or_else(|| call_id.and_then(|id| tool_name_for_call(earlier, id)));
        if let Some(name) = name {
            out.insert("tool_name".into(), Value::String(name));
        }
        if let Some(id) = call_id {
            out.insert("tool_call_id".into(), Value::from(id));
        }
    }
    Ok(Value::Object(out))
}

/// The function name of the assistant tool call with this id, scanning
/// backwards (the last call with a duplicate id wins, as in Ollama).
fn tool_name_for_call(earlier: &[Value], id: &str) -> Option<String> {
    earlier.iter().rev().find_map(|message| {
        message
            .get("tool_calls")?
            .as_array()?
            .iter()
            .rev()
            .find(|call| call.get("id").and_then(Value::as_str) == Some(id))?
            .get("function")?
            .get("name")?
            .as_str()
            .map(str::to_string)
    })
}

fn convert_part(
    field: &str,
    part: &Value,
    texts: &mut Vec<String>,
    images: &mut Vec<Value>,
) -> Result<(), WireError> {
    let Some(part) = part.as_object() else {
        return Err(wrong_type(field, "a content part object", part));
    };
    let kind = match part.get("type") {
        Some(Value::String(kind)) => kind.as_str(),
        None | Some(Value::Null) => return Err(WireError::Missing(format!("{field}.type"))),
        Some(other) => return Err(wrong_type(format!("{field}.type"), "a string", other)),
    };
    match kind {
        "text" => match part.get("text") {
            Some(Value::String(text)) => texts.push(text.clone()),
            None | Some(Value::Null) => return Err(WireError::Missing(format!("{field}.text"))),
            Some(other) => return Err(wrong_type(format!("{field}.text"), "a string", other)),
        },
        "image_url" => {
            let url = match part.get("image_url") {
                Some(Value::String(url)) => url.as_str(),
                Some(Value::Object(image)) => match image.get("url") {
                    Some(Value::String(url)) => url.as_str(),
                    None | Some(Value::Null) => {
                        return Err(WireError::Missing(format!("{field}.image_url.url")))
                    }
                    Some(other) => {
                        return Err(wrong_type(
                            format!("{field}.image_url.url"),
                            "a string",
                            other,
                        ))
                    }
                },
                None | Some(Value::Null) => {
                    return Err(WireError::Missing(format!("{field}.image_url")))
                }
                Some(other) => {
                    return Err(wrong_type(
                        format!("{field}.image_url"),
                        "an object or a string",
                        other,
                    ))
                }
            };
            images.push(Value::String(image_from_data_uri(
                &format!("{field}.image_url.url"),
                url,
            )?));
        }
        "input_audio" => {
            // Ollama carries audio next to images (its multimodal input list).
            let data = part
                .get("input_audio")
                .and_then(|audio| audio.get("data"))
                .and_then(Value::as_str)
                .ok_or_else(|| WireError::Missing(format!("{field}.input_audio.data")))?;
            images.push(Value::String(checked_base64(
                &format!("{field}.input_audio.data"),
                data,
            )?));
        }
        other => {
            return Err(invalid(
                format!("{field}.type"),
                format!(
                "unsupported content part type '{other}' (expected text, image_url or input_audio)"
            ),
            ))
        }
    }
    Ok(())
}

/// The base64 payload of a `data:[image/...];base64,` URI.
fn image_from_data_uri(field: &str, url: &str) -> Result<String, WireError> {
    let Some(rest) = url.strip_prefix("data:") else {
        return Err(invalid(
            field,
            "only base64 data URIs (data:image/png;base64,...) are supported, not image URLs",
        ));
    };
    let Some((mime, payload)) = rest.split_once(";base64,") else {
        return Err(invalid(
            field,
            "the data URI is not base64 (expected ';base64,')",
        ));
    };
    if !(mime.is_empty() || mime.to_ascii_lowercase().starts_with("image/")) {
        return Err(invalid(field, format!("'{mime}' is not an image type")));
    }
    checked_base64(field, payload)
}

/// The payload with whitespace removed, if it is standard base64.
fn checked_base64(field: &str, payload: &str) -> Result<String, WireError> {
    let cleaned: String = payload
        .chars()
        .filter(|c| !c.is_ascii_whitespace())
        .collect();
    let body = cleaned.trim_end_matches('=');
    let valid = !cleaned.is_empty()
        && cleaned.len() - body.len() <= 2
        && body
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'+' || b == b'/')
        && body.len() % 4 != 1;
    if valid {
        Ok(cleaned)
    } else {
        Err(invalid(field, "not valid base64"))
    }
}

fn convert_tool_call(field: &str, index: usize, call: &Value) -> Result<Value, WireError> {
    let Some(call) = call.as_object() else {
        return Err(wrong_type(field, "an object", call));
    };
    let function = match call.get("function") {
        Some(Value::Object(function)) => function,
        None | Some(Value::Null) => return Err(WireError::Missing(format!("{field}.function"))),
        Some(other) => return Err(wrong_type(format!("{field}.function"), "an object", other)),
    };
    let name = match function.get("name") {
        Some(Value::String(name)) if !name.is_empty() => name.clone(),
        None | Some(Value::Null) | Some(Value::String(_)) => {
            return Err(WireError::Missing(format!("{field}.function.name")))
        }
        Some(other) => {
            return Err(wrong_type(
                format!("{field}.function.name"),
                "a string",
                other,
            ))
        }
    };
    let args_field = format!("{field}.function.arguments");
    let arguments = match function.get("arguments") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(object)) => object.clone(),
        Some(Value::String(text)) if text.trim().is_empty() => Map::new(),
        Some(Value::String(text)) => match serde_json::from_str::<Value>(text) {
            Ok(Value::Object(object)) => object,
            Ok(other) => {
                return Err(invalid(
                    args_field,
                    format!(
                        "invalid tool call arguments: expected a JSON object, got {}",
                        type_name(&other)
                    ),
                ))
            }
            Err(err) => {
                return Err(invalid(
                    args_field,
                    format!("invalid tool call arguments: {err}"),
                ))
            }
        },
        Some(other) => {
            return Err(wrong_type(args_field, "a JSON string or an object", other));
        }
    };
    let mut out = Map::new();
    if let Some(id) = call.get("id").and_then(Value::as_str) {
        out.insert("id".into(), Value::from(id));
    }
    out.insert(
        "function".into(),
        json!({"index": index, "name": name, "arguments": arguments}),
    );
    Ok(Value::Object(out))
}

fn number_option(
    body: &Map<String, Value>,
    key: &str,
    integer: bool,
) -> Result<Option<Value>, WireError> {
    match body.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(n)) if !integer || n.is_i64() || n.is_u64() => {
            Ok(Some(Value::Number(n.clone())))
        }
        Some(other) => Err(wrong_type(
            key,
            if integer { "an integer" } else { "a number" },
            other,
        )),
    }
}

fn convert_options(
    body: &Map<String, Value>,
    choices: &RequestOptions,
) -> Result<Map<String, Value>, WireError> {
    let mut options = match body.get("options") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(options)) => options.clone(),
        Some(other) => return Err(wrong_type("options", "an object", other)),
    };
    match body.get("stop") {
        None | Some(Value::Null) => {}
        Some(Value::String(stop)) => {
            options.insert("stop".into(), json!([stop]));
        }
        Some(Value::Array(stops)) => {
            for (i, stop) in stops.iter().enumerate() {
                if !stop.is_string() {
                    return Err(wrong_type(format!("stop[{i}]"), "a string", stop));
                }
            }
            options.insert("stop".into(), Value::Array(stops.clone()));
        }
        Some(other) => {
            return Err(wrong_type("stop", "a string or an array of strings", other));
        }
    }
    // max_completion_tokens is the newer name; it wins when both are sent.
    let max_tokens = match number_option(body, "max_completion_tokens", true)? {
        Some(n) => Some(n),
        None => number_option(body, "max_tokens", true)?,
    };
    if let Some(n) = max_tokens {
        options.insert("num_predict".into(), n);
    }
    for (key, integer) in [
        ("temperature", false),
        ("top_p", false),
        ("seed", true),
        ("frequency_penalty", false),
        ("presence_penalty", false),
    ] {
        if let Some(value) = number_option(body, key, integer)? {
            options.insert(key.into(), value);
        } else if choices.openai_sampling_defaults
            && matches!(key, "temperature" | "top_p")
            && !options.contains_key(key)
        {
            options.insert(key.into(), json!(1.0));
        }
    }
    Ok(options)
}

fn convert_format(body: &Map<String, Value>) -> Result<Option<Value>, WireError> {
    let format = match body.get("response_format") {
        None | Some(Value::Null) => None,
        Some(Value::Object(format)) => Some(format),
        Some(other) => return Err(wrong_type("response_format", "an object", other)),
    };
    let Some(format) = format else {
        return Ok(body.get("format").filter(|v| !v.is_null()).cloned());
    };
    let kind = match format.get("type") {
        Some(Value::String(kind)) => kind.trim().to_ascii_lowercase(),
        None | Some(Value::Null) => return Err(WireError::Missing("response_format.type".into())),
        Some(other) => return Err(wrong_type("response_format.type", "a string", other)),
    };
    match kind.as_str() {
        "text" => Ok(None),
        "json_object" => Ok(Some(Value::from("json"))),
        "json_schema" => match format.get("json_schema").and_then(|s| s.get("schema")) {
            Some(schema @ Value::Object(_)) => Ok(Some(schema.clone())),
            None | Some(Value::Null) => Err(WireError::Missing(
                "response_format.json_schema.schema".into(),
            )),
            Some(other) => Err(wrong_type(
                "response_format.json_schema.schema",
                "an object",
                other,
            )),
        },
        other => Err(invalid(
            "response_format.type",
            format!("'{other}' (expected text, json_object or json_schema)"),
        )),
    }
}

fn convert_think(body: &Map<String, Value>) -> Result<Option<Value>, WireError> {
    let (field, effort) = match body.get("reasoning") {
        Some(Value::Object(reasoning)) => match reasoning.get("effort") {
            None | Some(Value::Null) => ("reasoning.effort", None),
            Some(Value::String(effort)) => ("reasoning.effort", Some(effort.as_str())),
            Some(other) => return Err(wrong_type("reasoning.effort", "a string", other)),
        },
        None | Some(Value::Null) => ("reasoning_effort", None),
        Some(other) => return Err(wrong_type("reasoning", "an object", other)),
    };
    let (field, effort) = match effort {
        Some(effort) => (field, Some(effort)),
        None => match body.get("reasoning_effort") {
            None | Some(Value::Null) => ("reasoning_effort", None),
            Some(Value::String(effort)) => ("reasoning_effort", Some(effort.as_str())),
            Some(other) => return Err(wrong_type("reasoning_effort", "a string", other)),
        },
    };
    let Some(effort) = effort else {
        // An Ollama-native `think` passes through.
        return Ok(body.get("think").filter(|v| !v.is_null()).cloned());
    };
    let think = match effort.to_ascii_lowercase().as_str() {
        "none" => Value::Bool(false),
        "minimal" | "low" => Value::from("low"),
        "medium" => Value::from("medium"),
        "high" => Value::from("high"),
        "xhigh" | "ultra" | "max" => Value::from("max"),
        _ => {
            return Err(invalid(
                field,
                format!("'{effort}' (expected none, minimal, low, medium, high, xhigh or max)"),
            ))
        }
    };
    Ok(Some(think))
}

// ---------------------------------------------------------------------------
// Responses

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
struct CallMerger {
    calls: Calls,
    emitted: usize,
}

impl CallMerger {
    fn push(&mut self, calls: &Value, with_index: bool) -> Vec<Value> {
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

    fn flush(&mut self, with_index: bool) -> Vec<Value> {
        let mut out = Vec::new();
        for call in self.calls.emit_rest() {
            out.push(openai_call(call, with_index.then_some(self.emitted)));
            self.emitted += 1;
        }
        out
    }

    fn has_emitted(&self) -> bool {
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

fn usage(resp: &Value) -> Value {
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

fn str_field<'a>(value: &'a Value, key: &str) -> &'a str {
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
        out_message.insert("reasoning".into(), Value::from(thinking));
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

/// One event of an OpenAI stream.
#[derive(Debug, Clone, PartialEq)]
pub enum StreamEvent {
    /// `data: {json}`.
    Data(Value),
    /// `data: [DONE]`.
    Done,
}

impl StreamEvent {
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
            delta.insert("reasoning".into(), Value::from(thinking));
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

/// An error body in OpenAI's shape; the `type` follows the status.
pub fn openai_error(status: u16, message: &str) -> Value {
    let kind = match status {
        400 | 413 | 422 => "invalid_request_error",
        401 => "authentication_error",
        403 => "permission_error",
        404 => "not_found_error",
        429 => "rate_limit_error",
        _ => "api_error",
    };
    json!({"error": {"message": message, "type": kind, "param": null, "code": null}})
}

/// An Ollama error answer (`{"error": "..."}` or any other body) in
/// OpenAI's shape.
pub fn openai_error_from_ollama(status: u16, body: &[u8]) -> Value {
    let message = serde_json::from_slice::<Value>(body)
        .ok()
        .and_then(|v| v.get("error").and_then(Value::as_str).map(str::to_string))
        .unwrap_or_else(|| String::from_utf8_lossy(body).trim().to_string());
    openai_error(status, &message)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn convert(req: Value) -> Value {
        chat_request_to_ollama(&req).unwrap()
    }

    fn err(req: Value) -> String {
        chat_request_to_ollama(&req).unwrap_err().to_string()
    }

    // ---- requests -------------------------------------------------------

    #[test]
    fn a_plain_request_maps_model_messages_stream_and_options() {
        let out = convert(json!({
            "model": "qwen3:4b",
            "messages": [
                {"role": "developer", "content": "Be brief."},
                {"role": "User", "content": "Hi"}
            ],
            "max_tokens": 64,
            "temperature": 0.2,
            "top_p": 0.5,
            "seed": 7,
            "stop": "END",
            "frequency_penalty": 0.1,
            "presence_penalty": 0.3
        }));
        assert_eq!(
            out,
            json!({
                "model": "qwen3:4b",
                "messages": [
                    {"role": "system", "content": "Be brief."},
                    {"role": "user", "content": "Hi"}
                ],
                "stream": false,
                "options": {
                    "stop": ["END"], "num_predict": 64, "temperature": 0.2, "top_p": 0.5,
                    "seed": 7, "frequency_penalty": 0.1, "presence_penalty": 0.3
                }
            })
        );
    }

    #[test]
    fn max_completion_tokens_wins_and_stop_arrays_pass() {
        let out = convert(json!({
            "model": "m", "messages": [{"role": "user", "content": "x"}], "stream": true,
            "max_tokens": 10, "max_completion_tokens": 20, "stop": ["a", "b"]
        }));
        assert_eq!(
            out["options"],
            json!({"stop": ["a", "b"], "num_predict": 20})
        );
        assert_eq!(out["stream"], json!(true));
    }

    #[test]
    fn sampling_defaults_only_when_asked() {
        let req = json!({"model": "m", "messages": [{"role": "user", "content": "x"}]});
        assert!(convert(req.clone()).get("options").is_none());
        let out = chat_request_to_ollama_with(
            &req,
            &RequestOptions {
                openai_sampling_defaults: true,
            },
        )
        .unwrap();
        assert_eq!(out["options"], json!({"temperature": 1.0, "top_p": 1.0}));
    }

    #[test]
    fn native_fields_pass_and_openai_fields_win() {
        let out = convert(json!({
            "model": "m", "messages": [{"role": "user", "content": "x"}],
            "options": {"num_ctx": 8192, "temperature": 0.9},
            "temperature": 0.1, "keep_alive": "10m", "think": false, "format": "json"
        }));
        assert_eq!(out["options"], json!({"num_ctx": 8192, "temperature": 0.1}));
        assert_eq!(out["keep_alive"], json!("10m"));
        assert_eq!(out["think"], json!(false));
        assert_eq!(out["format"], json!("json"));
    }

    #[test]
    fn response_format_maps_to_format() {
        let base = |format: Value| json!({"model": "m", "messages": [{"role": "user", "content": "x"}], "response_format": format});
        assert_eq!(
            convert(base(json!({"type": "json_object"})))["format"],
            json!("json")
        );
        let schema = json!({"type": "object", "properties": {"a": {"type": "string"}}});
        assert_eq!(
            convert(base(
                json!({"type": "json_schema", "json_schema": {"name": "x", "schema": schema}})
            ))["format"],
            schema
        );
        assert!(convert(base(json!({"type": "text"})))
            .get("format")
            .is_none());
        assert!(err(base(json!({"type": "yaml"}))).contains("response_format.type"));
        assert!(err(base(json!({"type": "json_schema"})))
            .contains("response_format.json_schema.schema"));
    }

    #[test]
    fn reasoning_effort_maps_to_think() {
        let base = json!({"model": "m", "messages": [{"role": "user", "content": "x"}]});
        let with = |key: &str, value: Value| {
            let mut req = base.clone();
            req[key] = value;
            convert(req)["think"].clone()
        };
        assert_eq!(with("reasoning_effort", json!("none")), json!(false));
        assert_eq!(with("reasoning_effort", json!("minimal")), json!("low"));
        assert_eq!(with("reasoning_effort", json!("high")), json!("high"));
        assert_eq!(with("reasoning_effort", json!("xhigh")), json!("max"));
        assert_eq!(
            with("reasoning", json!({"effort": "medium"})),
            json!("medium")
        );
        assert_eq!(with("reasoning_effort", json!(null)), json!(null));
        let mut bad = base.clone();
        bad["reasoning"] = json!({"effort": "extreme"});
        assert!(err(bad).contains("reasoning.effort"));
    }

    #[test]
    fn tools_pass_unchanged() {
        let tools = json!([{"type": "function", "function": {
            "name": "get_weather", "description": "d",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]);
        let out = convert(json!({
            "model": "m", "messages": [{"role": "user", "content": "x"}], "tools": tools, "tool_choice": "auto"
        }));
        assert_eq!(out["tools"], tools);
        assert!(err(
            json!({"model": "m", "messages": [{"role": "user", "content": "x"}], "tools": {}})
        )
        .contains("'tools'"));
    }

    #[test]
    fn content_parts_become_text_and_images() {
        let out = convert(
            json!({"model": "m", "messages": [{"role": "user", "content": [
                {"type": "text", "text": "What is this?"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
                {"type": "text", "text": "Be short."},
                {"type": "image_url", "image_url": "data:;base64,AAAA"}
            ]}]}),
        );
        assert_eq!(
            out["messages"][0],
            json!({"role": "user", "content": "What is this?\nBe short.", "images": ["iVBORw0KGgo=", "AAAA"]})
        );
    }

    #[test]
    fn image_urls_and_bad_parts_are_refused_with_the_field() {
        let one = |part: Value| {
            err(json!({"model": "m", "messages": [{"role": "user", "content": [part]}]}))
        };
        let e = one(json!({"type": "image_url", "image_url": {"url": "https://x/y.png"}}));
        assert!(
            e.contains("messages[0].content[0].image_url.url") && e.contains("data URI"),
            "{e}"
        );
        assert!(one(
            json!({"type": "image_url", "image_url": {"url": "data:image/png;base64,@@@"}})
        )
        .contains("not valid base64"));
        assert!(one(
            json!({"type": "image_url", "image_url": {"url": "data:text/plain;base64,AAAA"}})
        )
        .contains("not an image type"));
        assert!(one(json!({"type": "video", "video": {}}))
            .contains("unsupported content part type 'video'"));
        assert!(one(json!({"type": "text", "text": 5})).contains("messages[0].content[0].text"));
        assert!(one(json!("text")).contains("messages[0].content[0]"));
    }

    #[test]
    fn request_errors_name_the_field() {
        let user = json!([{"role": "user", "content": "x"}]);
        assert_eq!(err(json!({"messages": user})), "model is required");
        assert_eq!(
            err(json!({"model": "", "messages": user})),
            "model is required"
        );
        assert_eq!(
            err(json!({"model": "m", "messages": []})),
            "[] is too short - 'messages'"
        );
        assert_eq!(err(json!({"model": "m"})), "messages is required");
        assert!(err(json!({"model": 3, "messages": user}))
            .contains("'model': expected a string, got a number"));
        assert!(err(json!({"model": "m", "messages": "hi"})).contains("'messages'"));
        assert!(
            err(json!({"model": "m", "messages": [{"role": "wizard", "content": "x"}]}))
                .contains("messages[0].role")
        );
        assert!(err(json!({"model": "m", "messages": [{"content": "x"}]}))
            .contains("messages[0].role is required"));
        assert!(
            err(json!({"model": "m", "messages": [{"role": "user", "content": 1}]}))
                .contains("messages[0].content")
        );
        assert!(err(json!({"model": "m", "messages": [{"role": "user"}]}))
            .contains("messages[0].content is required"));
        assert!(err(json!({"model": "m", "messages": user, "stream": "yes"})).contains("'stream'"));
        assert!(
            err(json!({"model": "m", "messages": user, "max_tokens": 1.5}))
                .contains("'max_tokens': expected an integer")
        );
        assert!(
            err(json!({"model": "m", "messages": user, "temperature": "hot"}))
                .contains("'temperature'")
        );
        assert!(err(json!({"model": "m", "messages": user, "stop": 1})).contains("'stop'"));
        assert!(err(json!([1])).contains("'body'"));
        let e = chat_request_to_ollama(&json!({"model": "m", "messages": [], "x": 1})).unwrap_err();
        assert_eq!(e.to_openai()["error"]["param"], json!("messages"));
        assert_eq!(
            e.to_openai()["error"]["type"],
            json!("invalid_request_error")
        );
    }

    #[test]
    fn assistant_tool_calls_get_object_arguments_and_tool_results_get_names() {
        let out = convert(json!({"model": "m", "messages": [
            {"role": "user", "content": "Weather in Paris and Rome?"},
            {"role": "assistant", "content": null, "reasoning": "Two calls.", "tool_calls": [
                {"id": "call_aaaaaaaa", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}},
                {"id": "call_bbbbbbbb", "type": "function", "function": {"name": "get_time", "arguments": ""}}
            ]},
            {"role": "tool", "tool_call_id": "call_bbbbbbbb", "content": "12:00"},
            {"role": "tool", "tool_call_id": "call_aaaaaaaa", "content": "sunny"},
            {"role": "tool", "tool_call_id": "call_unknown", "content": "?"},
            {"role": "tool", "name": "explicit", "content": "!"}
        ]}));
        let messages = out["messages"].as_array().unwrap();
        assert_eq!(
            messages[1],
            json!({"role": "assistant", "content": "", "thinking": "Two calls.", "tool_calls": [
                {"id": "call_aaaaaaaa", "function": {"index": 0, "name": "get_weather", "arguments": {"city": "Paris"}}},
                {"id": "call_bbbbbbbb", "function": {"index": 1, "name": "get_time", "arguments": {}}}
            ]})
        );
        assert_eq!(
            messages[2],
            json!({"role": "tool", "content": "12:00", "tool_name": "get_time", "tool_call_id": "call_bbbbbbbb"})
        );
        assert_eq!(messages[3]["tool_name"], json!("get_weather"));
        assert!(messages[4].get("tool_name").is_none());
        assert_eq!(messages[5]["tool_name"], json!("explicit"));
    }

    #[test]
    fn bad_tool_call_arguments_are_refused() {
        let with = |arguments: Value| {
            err(
                json!({"model": "m", "messages": [{"role": "assistant", "tool_calls": [
                {"id": "c", "function": {"name": "f", "arguments": arguments}}]}]}),
            )
        };
        assert!(with(json!("{nope")).contains("messages[0].tool_calls[0].function.arguments"));
        assert!(with(json!("[1]")).contains("expected a JSON object"));
        assert!(with(json!(5)).contains("function.arguments"));
        assert!(err(json!({"model": "m", "messages": [{"role": "assistant", "tool_calls": [{"function": {}}]}]}))
            .contains("messages[0].tool_calls[0].function.name is required"));
    }

    // ---- non-stream responses -------------------------------------------

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
                "choices": [{"index": 0, "message": {"role": "assistant", "content": "Hello", "reasoning": "hmm"},
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
            id[5..]
                .bytes()
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

    // ---- streaming -----------------------------------------------------

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
                json!({"role": "assistant", "content": "", "reasoning": "Hmm"}),
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

    // ---- round trip ----------------------------------------------------

    #[test]
    fn a_conversation_with_tool_calls_round_trips() {
        let tools = json!([{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]);
        let mut messages = vec![json!({"role": "user", "content": "Weather in Paris and Rome?"})];
        let first = convert(json!({"model": "m", "messages": messages, "tools": tools}));
        assert_eq!(
            first["messages"],
            json!([{"role": "user", "content": "Weather in Paris and Rome?"}])
        );

        // Ollama answers with two calls (no ids: the translation makes them).
        let answer = json!({"model": "m", "message": {"role": "assistant", "content": "", "tool_calls": [
            {"function": {"index": 0, "name": "get_weather", "arguments": {"city": "Paris", "unit": "c"}}},
            {"function": {"index": 1, "name": "get_weather", "arguments": {"city": "Rome", "unit": "c"}}}
        ]}, "done": true, "done_reason": "stop"});
        let completion = ollama_to_chat_completion(&answer, "chatcmpl-1", 1);
        let assistant = completion["choices"][0]["message"].clone();
        let ids: Vec<String> = assistant["tool_calls"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["id"].as_str().unwrap().to_string())
            .collect();
        assert_ne!(ids[0], ids[1]);

        // The client sends the calls back with the results, results in reverse order.
        messages.push(assistant);
        messages.push(json!({"role": "tool", "tool_call_id": ids[1], "content": "{\"temp\":25}"}));
        messages.push(json!({"role": "tool", "tool_call_id": ids[0], "content": "{\"temp\":19}"}));
        let second = convert(json!({"model": "m", "messages": messages, "tools": tools}));
        let back = second["messages"].as_array().unwrap();
        assert_eq!(back.len(), 4);
        let calls = back[1]["tool_calls"].as_array().unwrap();
        for (call, original) in calls
            .iter()
            .zip(answer["message"]["tool_calls"].as_array().unwrap())
        {
            assert_eq!(call["function"]["name"], original["function"]["name"]);
            assert_eq!(
                call["function"]["arguments"],
                original["function"]["arguments"]
            );
        }
        assert_eq!(calls[0]["id"], json!(ids[0]));
        assert_eq!(
            back[2],
            json!({"role": "tool", "content": "{\"temp\":25}", "tool_name": "get_weather", "tool_call_id": ids[1]})
        );
        assert_eq!(back[3]["tool_name"], json!("get_weather"));
        assert_eq!(second["tools"], tools);
    }

    // ---- errors and models -----------------------------------------------

    #[test]
    fn error_shapes() {
        assert_eq!(
            openai_error(404, "model \"x\" not found"),
            json!({"error": {"message": "model \"x\" not found", "type": "not_found_error", "param": null, "code": null}})
        );
        assert_eq!(
            openai_error(400, "bad")["error"]["type"],
            json!("invalid_request_error")
        );
        assert_eq!(
            openai_error(500, "boom")["error"]["type"],
            json!("api_error")
        );
        assert_eq!(
            openai_error_from_ollama(400, br#"{"error":"llama3 does not support tools"}"#)["error"]
                ["message"],
            json!("llama3 does not support tools")
        );
        assert_eq!(
            openai_error_from_ollama(502, b"bad gateway\n")["error"]["message"],
            json!("bad gateway")
        );
    }

    #[test]
    fn legacy_function_messages_convert_to_tool_messages() {
        let out = convert(json!({"model": "m",
        "functions": [{"name": "get_weather", "parameters": {"type": "object"}}],
        "function_call": "auto",
        "messages": [
            {"role": "user", "content": "weather?"},
            {"role": "assistant", "content": null,
             "function_call": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}},
            {"role": "function", "name": "get_weather", "content": "sunny"}
        ]}));
        assert_eq!(out["tools"][0]["function"]["name"], "get_weather");
        assert_eq!(
            out["messages"][1]["tool_calls"][0]["function"],
            json!({"index": 0, "name": "get_weather", "arguments": {"city": "Paris"}})
        );
        assert_eq!(out["messages"][2]["role"], "tool");
        assert_eq!(out["messages"][2]["tool_name"], "get_weather");
        assert_eq!(out["messages"][2]["content"], "sunny");
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

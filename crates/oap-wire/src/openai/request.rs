//! `/v1/chat/completions` request bodies translated to `/api/chat` bodies:
//! messages (content parts, images, tool calls and results, the legacy
//! `function` role), sampling options, `response_format` and
//! `reasoning_effort`.

use serde_json::{json, Map, Value};

use super::error::{invalid, type_name, wrong_type, WireError};
use super::tool_choice;

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
    let role = message_role(&field, message)?;
    let (content, images) = message_content(&field, message, role)?;

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
    let calls = message_tool_calls(&field, message)?;
    if !calls.is_empty() {
        out.insert("tool_calls".into(), Value::Array(calls));
    }
    if role == "tool" {
        tool_result_fields(&field, message, earlier, &mut out)?;
    }
    Ok(Value::Object(out))
}

/// A message's role in Ollama's terms.
fn message_role(field: &str, message: &Map<String, Value>) -> Result<&'static str, WireError> {
    let role = match message.get("role") {
        None | Some(Value::Null) => return Err(WireError::Missing(format!("{field}.role"))),
        Some(Value::String(role)) => role.to_ascii_lowercase(),
        Some(other) => return Err(wrong_type(format!("{field}.role"), "a string", other)),
    };
    match role.as_str() {
        "system" | "developer" => Ok("system"),
        "user" => Ok("user"),
        "assistant" => Ok("assistant"),
        // The legacy dialect's function results are tool results.
        "tool" | "function" => Ok("tool"),
        _ => Err(invalid(
            format!("{field}.role"),
            format!(
                "unknown role '{role}' (expected system, developer, user, assistant, tool or function)"
            ),
        )),
    }
}

/// A message's text (parts joined with `\n`) and images.
fn message_content(
    field: &str,
    message: &Map<String, Value>,
    role: &str,
) -> Result<(String, Vec<Value>), WireError> {
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
    Ok((content, images))
}

/// An assistant message's calls: `tool_calls`, or else the legacy
/// dialect's one `function_call`.
fn message_tool_calls(field: &str, message: &Map<String, Value>) -> Result<Vec<Value>, WireError> {
    let calls = match message.get("tool_calls") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(calls)) => calls
            .iter()
            .enumerate()
            .map(|(j, call)| convert_tool_call(&format!("{field}.tool_calls[{j}]"), j, call))
            .collect::<Result<Vec<_>, _>>()?,
        Some(other) => {
            return Err(wrong_type(format!("{field}.tool_calls"), "an array", other));
        }
    };
    if !calls.is_empty() {
        return Ok(calls);
    }
    match message.get("function_call").filter(|c| !c.is_null()) {
        Some(call) => Ok(vec![convert_tool_call(
            &format!("{field}.function_call"),
            0,
            &json!({"function": call}),
        )?]),
        None => Ok(calls),
    }
}

/// A tool result's `tool_name` (its own `name`, or the name of the call it
/// answers) and `tool_call_id`.
fn tool_result_fields(
    field: &str,
    message: &Map<String, Value>,
    earlier: &[Value],
    out: &mut Map<String, Value>,
) -> Result<(), WireError> {
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
    Ok(())
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

#[cfg(test)]
mod tests {
    use super::*;

    fn convert(req: Value) -> Value {
        chat_request_to_ollama(&req).unwrap()
    }

    fn err(req: Value) -> String {
        chat_request_to_ollama(&req).unwrap_err().to_string()
    }

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
}

//! OpenAI's tool-use controls on a chat request: `tool_choice`, and the
//! legacy `functions` / `function_call` fields that older clients (and
//! integrations built on them) still send.
//!
//! Ollama has no `tool_choice`; it is honoured by what the request offers
//! and asks: `none` offers no tools at all (and tells oapd not to add its
//! own), a named function offers only that function, and `required` adds a
//! system instruction to call one of the offered tools. A named or required
//! choice cannot be enforced by grammar on Ollama; the instruction is what
//! a model gets.

use serde_json::{json, Map, Value};

use super::error::{invalid, wrong_type, WireError};

/// What the client asked of tool use this request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolChoice {
    /// The model decides (OpenAI's default).
    Auto,
    /// No tool is offered.
    None,
    /// The model must call at least one tool.
    Required,
    /// The model must call this function.
    Function(String),
}

/// The request's tool choice: `tool_choice`, else the legacy
/// `function_call`, else `None` (the default, [`ToolChoice::Auto`]).
pub fn parse(body: &Map<String, Value>) -> Result<Option<ToolChoice>, WireError> {
    match body.get("tool_choice") {
        None | Some(Value::Null) => {}
        Some(Value::String(choice)) => {
            return match choice.as_str() {
                "auto" => Ok(Some(ToolChoice::Auto)),
                "none" => Ok(Some(ToolChoice::None)),
                "required" => Ok(Some(ToolChoice::Required)),
                other => Err(invalid(
                    "tool_choice",
                    format!("unknown choice '{other}' (expected none, auto, required or an object naming a function)"),
                )),
            };
        }
        Some(Value::Object(choice)) => {
            return named(
                "tool_choice.function.name",
                choice.get("function").and_then(|f| f.get("name")),
            )
            .map(Some)
        }
        Some(other) => return Err(wrong_type("tool_choice", "a string or an object", other)),
    }
    match body.get("function_call") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(choice)) => match choice.as_str() {
            "auto" => Ok(Some(ToolChoice::Auto)),
            "none" => Ok(Some(ToolChoice::None)),
            other => Err(invalid(
                "function_call",
                format!("unknown choice '{other}' (expected none, auto or {{\"name\": ...}})"),
            )),
        },
        Some(Value::Object(choice)) => named("function_call.name", choice.get("name")).map(Some),
        Some(other) => Err(wrong_type("function_call", "a string or an object", other)),
    }
}

fn named(field: &str, name: Option<&Value>) -> Result<ToolChoice, WireError> {
    match name {
        Some(Value::String(name)) if !name.is_empty() => Ok(ToolChoice::Function(name.clone())),
        None | Some(Value::Null) | Some(Value::String(_)) => Err(WireError::Missing(field.into())),
        Some(other) => Err(wrong_type(field, "a string", other)),
    }
}

/// The client's tools: `tools`, else the legacy `functions` (each
/// wrapped as a `function` tool). `None` when the request has neither.
pub fn client_tools(body: &Map<String, Value>) -> Result<Option<Vec<Value>>, WireError> {
    match body.get("tools") {
        None | Some(Value::Null) => {}
        Some(Value::Array(tools)) => {
            for (i, tool) in tools.iter().enumerate() {
                if !tool.is_object() {
                    return Err(wrong_type(format!("tools[{i}]"), "an object", tool));
                }
            }
            return Ok(Some(tools.clone()));
        }
        Some(other) => return Err(wrong_type("tools", "an array", other)),
    }
    match body.get("functions") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Array(functions)) => functions
            .iter()
            .enumerate()
            .map(|(i, function)| {
                let field = format!("functions[{i}]");
                let Some(object) = function.as_object() else {
                    return Err(wrong_type(field, "an object", function));
                };
                match object.get("name") {
                    Some(Value::String(name)) if !name.is_empty() => {}
                    Some(Value::String(_)) | None | Some(Value::Null) => {
                        return Err(WireError::Missing(format!("{field}.name")))
                    }
                    Some(other) => {
                        return Err(wrong_type(format!("{field}.name"), "a string", other))
                    }
                }
                Ok(json!({"type": "function", "function": function}))
            })
            .collect::<Result<Vec<_>, _>>()
            .map(Some),
        Some(other) => Err(wrong_type("functions", "an array", other)),
    }
}

/// Whether the request speaks the legacy function-calling dialect (sends
/// `functions` and no `tools`): its answers carry `function_call`.
pub fn is_legacy(request: &Value) -> bool {
    request.get("tools").is_none_or(Value::is_null)
        && request.get("functions").is_some_and(Value::is_array)
}

fn tool_name(tool: &Value) -> Option<&str> {
    tool.pointer("/function/name").and_then(Value::as_str)
}

/// Writes the client's tools and the effect of its choice into the Ollama
/// request `out` (whose `messages` are already converted).
pub fn apply(
    out: &mut Map<String, Value>,
    tools: Option<Vec<Value>>,
    choice: Option<ToolChoice>,
) -> Result<(), WireError> {
    let instruction = match choice.unwrap_or(ToolChoice::Auto) {
        ToolChoice::Auto => {
            if let Some(tools) = tools {
                out.insert("tools".into(), Value::Array(tools));
            }
            None
        }
        ToolChoice::None => {
            // Neither the client's tools nor oapd's: a plain answer.
            out.insert("oap_discover".into(), Value::Bool(false));
            None
        }
        ToolChoice::Required => {
            if let Some(tools) = tools {
                out.insert("tools".into(), Value::Array(tools));
            }
            Some(
                "Answer by calling one of the available tools; do not answer in text alone."
                    .to_string(),
            )
        }
        ToolChoice::Function(name) => {
            let chosen: Vec<Value> = tools
                .unwrap_or_default()
                .into_iter()
                .filter(|tool| tool_name(tool) == Some(name.as_str()))
                .collect();
            if chosen.is_empty() {
                return Err(invalid(
                    "tool_choice",
                    format!("names the function '{name}', which is not among the request's tools"),
                ));
            }
            out.insert("tools".into(), Value::Array(chosen));
            // The client wants its own function called: oapd adds nothing.
            out.insert("oap_discover".into(), Value::Bool(false));
            Some(format!("Answer by calling the function `{name}`."))
        }
    };
    if let (Some(instruction), Some(Value::Array(messages))) =
        (instruction, out.get_mut("messages"))
    {
        // After the client's own system prompt, so it does not displace it.
        let at = messages
            .iter()
            .take_while(|m| m.get("role").and_then(Value::as_str) == Some("system"))
            .count();
        messages.insert(at, json!({"role": "system", "content": instruction}));
    }
    Ok(())
}

/// Rewrites a `chat.completion` for a legacy client: its first tool call
/// becomes `message.function_call` and `finish_reason` `function_call`.
pub fn to_legacy_completion(completion: &mut Value) {
    let Some(choice) = completion.pointer_mut("/choices/0") else {
        return;
    };
    let Some(first) = choice
        .pointer_mut("/message/tool_calls")
        .and_then(Value::as_array_mut)
        .and_then(|calls| (!calls.is_empty()).then(|| calls.remove(0)))
    else {
        return;
    };
    if let Some(message) = choice.get_mut("message").and_then(Value::as_object_mut) {
        message.remove("tool_calls");
        message.insert("function_call".into(), legacy_call(&first));
    }
    if choice["finish_reason"] == "tool_calls" {
        choice["finish_reason"] = Value::from("function_call");
    }
}

/// `{name, arguments}` of an emitted OpenAI tool call.
pub fn legacy_call(call: &Value) -> Value {
    json!({
        "name": call.pointer("/function/name").cloned().unwrap_or(Value::Null),
        "arguments": call.pointer("/function/arguments").cloned().unwrap_or_else(|| Value::from("{}")),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(value: Value) -> Map<String, Value> {
        value.as_object().cloned().unwrap()
    }

    fn weather() -> Value {
        json!({"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}})
    }

    fn time() -> Value {
        json!({"type": "function", "function": {"name": "get_time", "parameters": {"type": "object"}}})
    }

    fn applied(tools: Vec<Value>, choice: ToolChoice) -> Map<String, Value> {
        let mut out = body(json!({"messages": [
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": "hi"}
        ]}));
        apply(&mut out, Some(tools), Some(choice)).unwrap();
        out
    }

    #[test]
    fn choices_parse_in_both_dialects() {
        for (request, want) in [
            (json!({"tool_choice": "none"}), ToolChoice::None),
            (json!({"tool_choice": "auto"}), ToolChoice::Auto),
            (json!({"tool_choice": "required"}), ToolChoice::Required),
            (
                json!({"tool_choice": {"type": "function", "function": {"name": "f"}}}),
                ToolChoice::Function("f".into()),
            ),
            (json!({"function_call": "none"}), ToolChoice::None),
            (
                json!({"function_call": {"name": "f"}}),
                ToolChoice::Function("f".into()),
            ),
            // tool_choice wins over the legacy field.
            (
                json!({"tool_choice": "auto", "function_call": "none"}),
                ToolChoice::Auto,
            ),
        ] {
            assert_eq!(
                parse(&body(request.clone())).unwrap(),
                Some(want),
                "{request}"
            );
        }
        assert_eq!(parse(&body(json!({}))).unwrap(), None);
    }

    #[test]
    fn bad_choices_name_the_field() {
        let err = parse(&body(json!({"tool_choice": "always"}))).unwrap_err();
        assert_eq!(err.field(), "tool_choice");
        assert!(err.to_string().contains("always"), "{err}");
        let err = parse(&body(json!({"tool_choice": {"type": "function"}}))).unwrap_err();
        assert_eq!(err.field(), "tool_choice.function.name");
        let err = parse(&body(json!({"function_call": 3}))).unwrap_err();
        assert_eq!(err.field(), "function_call");
    }

    #[test]
    fn none_offers_nothing_and_turns_discovery_off() {
        let out = applied(vec![weather()], ToolChoice::None);
        assert!(out.get("tools").is_none());
        assert_eq!(out["oap_discover"], false);
        assert_eq!(out["messages"].as_array().unwrap().len(), 2);
    }

    #[test]
    fn a_named_function_is_the_only_tool_and_the_model_is_told() {
        let out = applied(
            vec![weather(), time()],
            ToolChoice::Function("get_time".into()),
        );
        assert_eq!(out["tools"], json!([time()]));
        assert_eq!(out["oap_discover"], false);
        let messages = out["messages"].as_array().unwrap();
        assert_eq!(messages[0]["content"], "be brief");
        assert_eq!(messages[1]["role"], "system");
        assert!(messages[1]["content"]
            .as_str()
            .unwrap()
            .contains("get_time"));
        assert_eq!(messages[2]["role"], "user");

        let mut out = body(json!({"messages": []}));
        let err = apply(
            &mut out,
            Some(vec![weather()]),
            Some(ToolChoice::Function("nope".into())),
        )
        .unwrap_err();
        assert_eq!(err.field(), "tool_choice");
        assert!(err.to_string().contains("nope"), "{err}");
    }

    #[test]
    fn required_keeps_the_tools_and_asks_for_a_call() {
        let out = applied(vec![weather()], ToolChoice::Required);
        assert_eq!(out["tools"], json!([weather()]));
        assert!(out.get("oap_discover").is_none());
        assert_eq!(out["messages"][1]["role"], "system");
    }

    #[test]
    fn legacy_functions_become_tools() {
        let tools = client_tools(&body(json!({"functions": [
            {"name": "get_weather", "parameters": {"type": "object"}}
        ]})))
        .unwrap()
        .unwrap();
        assert_eq!(tools, vec![weather()]);
        let err = client_tools(&body(json!({"functions": [{"description": "x"}]}))).unwrap_err();
        assert_eq!(err.field(), "functions[0].name");
        assert!(is_legacy(&json!({"functions": []})));
        assert!(!is_legacy(&json!({"functions": [], "tools": []})));
    }

    #[test]
    fn a_legacy_completion_carries_function_call() {
        let mut completion = json!({"choices": [{"index": 0, "finish_reason": "tool_calls",
        "message": {"role": "assistant", "content": "", "tool_calls": [
            {"id": "call_1", "type": "function",
             "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}}
        ]}}]});
        to_legacy_completion(&mut completion);
        let choice = &completion["choices"][0];
        assert_eq!(choice["finish_reason"], "function_call");
        assert!(choice["message"].get("tool_calls").is_none());
        assert_eq!(
            choice["message"]["function_call"],
            json!({"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"})
        );
    }
}

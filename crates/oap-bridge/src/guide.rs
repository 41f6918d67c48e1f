//! The tool-listing instruction: a system message naming each of oapd's
//! offered tools with its purpose, the procedure (identify what is asked,
//! call the tool that covers it, answer from its result) and the fallback
//! when no tool fits.
//!
//! Small models and models that failed `validate-model`'s tool checks
//! often ignore a tool definition they were given, or call one for a
//! greeting; naming the tools in plain words, next to the conversation,
//! is what their chat templates show them best. It costs prompt tokens,
//! so it is counted in the tool-token budget (`assembly.rs` fits the tools
//! into what the instruction leaves), and only added where it helps:
//! - the request's `oap_tool_instruction` (true/false) decides;
//! - without it, the daemon decides per model ([`wanted_by_default`]): on
//!   for a model whose validation record failed a tool check, or whose
//!   `/api/show` size is below [`SMALL_MODEL_BILLIONS`];
//! - never in meta mode (the model discovers tools itself) or when oapd
//!   offers no tool.
//!
//! The message goes after the client's own leading system messages, so a
//! client's system prompt stays first.

use serde_json::{json, Map, Value};

use crate::context::InjectedTool;
use crate::validation::ValidationRecord;

/// Models with fewer parameters than this (in billions, as `/api/show`'s
/// `details.parameter_size` says) get the instruction by default: the
/// models that print their calls as text (`tool_bridge.text_tool_calls`,
/// gemma3 1B/4B, llama3.2 1B/3B) are below it; qwen3 4B, the smallest
/// that passes the tool checks reliably, is not.
pub const SMALL_MODEL_BILLIONS: f64 = 4.0;

/// The validation checks about tools (`validation.rs`): failing any of
/// them turns the instruction on for the model.
const TOOL_CHECKS: &[&str] = &[
    "tool_call",
    "tool_call_stream",
    "pick_tool",
    "no_tool",
    "argument_types",
];

/// Longest purpose line per tool, in characters: the first sentence of the
/// description is the purpose; the definition carries the rest.
const MAX_PURPOSE_CHARS: usize = 160;

/// Whether a model gets the instruction when the request does not say:
/// its validation `record` failed a tool check, or its `parameter_size`
/// (`"3.2B"`, `"600M"`) is below [`SMALL_MODEL_BILLIONS`]. A model with
/// neither known gets none.
pub fn wanted_by_default(record: Option<&ValidationRecord>, parameter_size: Option<&str>) -> bool {
    let failed_tools = record.is_some_and(|record| {
        record
            .checks
            .iter()
            .any(|check| !check.passed && TOOL_CHECKS.contains(&check.name.as_str()))
    });
    let small = parameter_size
        .and_then(billions)
        .is_some_and(|size| size < SMALL_MODEL_BILLIONS);
    failed_tools || small
}

/// `options` with the instruction decided for a model when the request
/// left it open ([`wanted_by_default`]).
pub fn with_default(
    options: &crate::context::ChatOptions,
    record: Option<&ValidationRecord>,
    parameter_size: Option<&str>,
) -> crate::context::ChatOptions {
    let mut options = options.clone();
    options
        .tool_instruction
        .get_or_insert_with(|| wanted_by_default(record, parameter_size));
    options
}

/// `"3.2B"` → 3.2, `"600M"` → 0.6, `"1.5T"` → 1500; `None` when unreadable.
pub fn billions(parameter_size: &str) -> Option<f64> {
    let text = parameter_size.trim();
    let (number, scale) = match text.char_indices().last()? {
        (at, 'B' | 'b') => (text.get(..at)?, 1.0),
        (at, 'M' | 'm') => (text.get(..at)?, 0.001),
        (at, 'K' | 'k') => (text.get(..at)?, 0.000_001),
        (at, 'T' | 't') => (text.get(..at)?, 1000.0),
        _ => (text, 1e-9),
    };
    let value: f64 = number.trim().parse().ok()?;
    (value.is_finite() && value >= 0.0).then_some(value * scale)
}

/// The instruction for `tools` (oapd's offered tools, best first).
pub fn instruction(tools: &[InjectedTool]) -> String {
    let mut text = String::from("You can call these tools:\n");
    for tool in tools {
        let description = tool
            .definition
            .pointer("/function/description")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let purpose = crate::exposure::first_sentence(description, MAX_PURPOSE_CHARS);
        text.push_str(&format!("- {}: {}\n", tool.name, purpose.trim()));
    }
    text.push_str(
        "To answer: 1. Identify what the user asks for and which tool covers it. \
         2. Call that tool with the arguments it needs. \
         3. Answer from the tool's result, not from memory.\n\
         If no tool fits the request, answer directly without calling a tool.",
    );
    text
}

/// Puts `instruction` into the conversation as a system message after the
/// client's leading system messages.
pub fn insert(chat: &mut Map<String, Value>, instruction: &str) {
    let Some(Value::Array(messages)) = chat.get_mut("messages") else {
        return;
    };
    let at = messages
        .iter()
        .position(|m| m.get("role").and_then(Value::as_str) != Some("system"))
        .unwrap_or(messages.len());
    messages.insert(at, json!({"role": "system", "content": instruction}));
}

/// Estimated prompt tokens of the instruction as a chat template renders
/// a system message (its text and a few tokens of role markers).
pub fn tokens(instruction: &str) -> usize {
    const ROLE_MARKERS: usize = 4;
    crate::tokens::estimate(instruction) + ROLE_MARKERS
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::validation::CheckResult;

    fn record(failed: &str) -> ValidationRecord {
        let check = |name: &str| CheckResult {
            name: name.into(),
            passed: name != failed,
            ms: 1,
            detail: String::new(),
        };
        ValidationRecord {
            model: "m:latest".into(),
            digest: None,
            passed: failed.is_empty(),
            full_suite: true,
            checks: vec![check("tool_call"), check("reasoning"), check("pick_tool")],
            total_ms: 3,
            validated_at: 0,
            validated_at_rfc3339: String::new(),
            oapd_version: String::new(),
        }
    }

    #[test]
    fn failed_tool_checks_and_small_models_get_it_by_default() {
        assert!(wanted_by_default(Some(&record("pick_tool")), Some("8.0B")));
        assert!(!wanted_by_default(Some(&record("reasoning")), Some("8.0B")));
        assert!(!wanted_by_default(Some(&record("")), None));
        assert!(wanted_by_default(None, Some("3.2B")));
        assert!(wanted_by_default(None, Some("600M")));
        assert!(!wanted_by_default(None, Some("4.0B")));
        assert!(!wanted_by_default(None, Some("unknown")));
        assert!(!wanted_by_default(None, None));
    }

    #[test]
    fn sizes_read_as_ollama_writes_them() {
        assert_eq!(billions("3.2B"), Some(3.2));
        assert_eq!(billions("600M"), Some(0.6));
        assert_eq!(billions(" 70b "), Some(70.0));
        assert_eq!(billions("B"), None);
        assert_eq!(billions("-1B"), None);
        assert_eq!(billions(""), None);
    }

    #[test]
    fn the_instruction_goes_after_the_clients_system_prompt() {
        let mut chat = json!({"messages": [
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": "hi"}]})
        .as_object()
        .cloned()
        .unwrap();
        insert(&mut chat, "tools…");
        let roles: Vec<&str> = chat["messages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["content"].as_str().unwrap())
            .collect();
        assert_eq!(roles, ["be brief", "tools…", "hi"]);
    }
}

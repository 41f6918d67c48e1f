//! Forced tools (`tool_bridge.force`): a regex over the latest
//! user message names a tool that must be used. Ollama has no
//! `tool_choice`, so the bridge
//! 1. offers that tool even when discovery would not (first, so a token
//!    budget drops it last),
//! 2. adds a system instruction to call it, placed before the user message,
//! 3. holds the model's first round back; if the model did not call the
//!    forced tool, it asks the model for the arguments alone (a non-streamed
//!    `/api/chat` with the tool's parameters schema as `format`), runs the
//!    tool itself through the ordinary checked path, and the loop goes on
//!    with its result. An answer given without any tool call is dropped; if
//!    the model called a different tool, that call is kept and runs after
//!    the forced one (a client's tool goes back to the client as usual). If
//!    extraction fails, the round is sent on as it was.
//!
//! Only a request whose last message is the user's is forced: a client
//! sending its own tool's result back continues a turn already forced, and
//! forcing it again would run the tool twice.

use std::sync::Arc;

use oap_wire::ToolCall;
use regex::{Regex, RegexBuilder};
use serde_json::{json, Map, Value};
use tokio::sync::mpsc;

use crate::bridge::{ChatContext, Event, InjectedTool};
use crate::config::ForceRule;

/// Longest pattern accepted (bytes).
const MAX_PATTERN_BYTES: usize = 1024;
/// Compiled program size cap: a pattern like `(a{100}){100}` is refused at
/// start-up instead of costing memory and time per request.
const MAX_COMPILED_BYTES: usize = 256 * 1024;
/// Cap on the argument-extraction answer.
const MAX_EXTRACTION_BYTES: usize = 256 * 1024;

/// Compiles one rule's pattern, size-limited.
pub fn compile(rule: &ForceRule) -> Result<Regex, String> {
    if rule.pattern.len() > MAX_PATTERN_BYTES {
        return Err(format!("pattern is longer than {MAX_PATTERN_BYTES} bytes"));
    }
    RegexBuilder::new(&rule.pattern)
        .case_insensitive(rule.case_insensitive)
        .size_limit(MAX_COMPILED_BYTES)
        .dfa_size_limit(MAX_COMPILED_BYTES)
        .build()
        .map_err(|e| format!("invalid regular expression {:?}: {e}", rule.pattern))
}

/// The compiled rules.
#[derive(Debug, Clone, Default)]
pub struct ForceSettings {
    rules: Vec<(Regex, String)>,
}

impl ForceSettings {
    /// Rules that do not compile were refused by config validation; any
    /// left here are skipped with an error log.
    pub fn from_config(rules: &[ForceRule]) -> Self {
        let rules = rules
            .iter()
            .filter_map(|rule| match compile(rule) {
                Ok(regex) => Some((regex, rule.tool.trim().to_string())),
                Err(err) => {
                    tracing::error!(pattern = %rule.pattern, error = %err, "force rule skipped");
                    None
                }
            })
            .collect();
        ForceSettings { rules }
    }

    /// The tool the first matching rule names.
    pub fn matching(&self, task: &str) -> Option<&str> {
        self.rules
            .iter()
            .find(|(regex, _)| regex.is_match(task))
            .map(|(_, tool)| tool.as_str())
    }
}

/// The tool a request must use.
#[derive(Debug, Clone)]
pub struct Forced {
    pub name: String,
    pub parameters: Value,
    pub task: String,
    /// The system instruction added to the messages.
    pub instruction: String,
}

impl Forced {
    /// Takes the instruction out again (the tool did not fit the token
    /// budget, so it is not offered).
    pub fn withdraw(&self, chat: &mut Map<String, Value>) {
        if let Some(Value::Array(messages)) = chat.get_mut("messages") {
            messages.retain(|m| {
                !(m.get("role").and_then(Value::as_str) == Some("system")
                    && m.get("content").and_then(Value::as_str) == Some(self.instruction.as_str()))
            });
        }
    }
}

impl crate::chat::ChatService {
    /// Applies the force rules to a request: puts the tool first in `tools`
    /// (injecting it when discovery did not) and the instruction into the
    /// messages. `None` when no rule matches or the tool is unknown.
    pub fn apply_force(
        &self,
        tools: &mut Vec<InjectedTool>,
        chat: &mut Map<String, Value>,
    ) -> Option<Forced> {
        // Only a turn the user just began is forced. When a client sends its
        // own tool's result back, the request still ends the same user turn
        // (the rule was applied when it began); forcing again would run the
        // tool a second time.
        let last_role = chat
            .get("messages")
            .and_then(Value::as_array)
            .and_then(|messages| messages.last())
            .and_then(|message| message.get("role"))
            .and_then(Value::as_str);
        if last_role != Some("user") {
            return None;
        }
        let task = crate::bridge::task_of(chat)?;
        let reference = self.exposure.force.matching(&task)?.to_string();
        let position = tools
            .iter()
            .position(|t| t.record.id == reference || t.name == reference);
        let tool = match position {
            Some(i) => tools.remove(i),
            None => {
                let mut taken = crate::bridge::client_tool_names(chat);
                taken.extend(tools.iter().map(|t| t.name.clone()));
                match self.inject_by_reference(&reference, &taken) {
                    Some(tool) => tool,
                    None => {
                        tracing::warn!(tool = %reference, "force rule names no known manifest; ignored");
                        return None;
                    }
                }
            }
        };
        let forced = Forced {
            name: tool.name.clone(),
            parameters: tool
                .definition
                .pointer("/function/parameters")
                .cloned()
                .unwrap_or_else(|| json!({"type": "object", "properties": {}})),
            task,
            instruction: format!(
                "The user's next request must be handled with the tool {0}. Call {0} with the right arguments before you answer.",
                tool.name
            ),
        };
        tools.insert(0, tool);
        if let Some(Value::Array(messages)) = chat.get_mut("messages") {
            let at = messages
                .iter()
                .rposition(|m| m.get("role").and_then(Value::as_str) == Some("user"))
                .unwrap_or(messages.len());
            messages.insert(at, json!({"role": "system", "content": forced.instruction}));
        }
        tracing::info!(tool = %forced.name, "force rule matched");
        Some(forced)
    }

    fn inject_by_reference(&self, reference: &str, taken: &[String]) -> Option<InjectedTool> {
        let mut ids = vec![reference.to_string()];
        if let Some(rest) = reference.strip_prefix("oap_") {
            ids.push(format!("local/{rest}"));
            ids.push(format!("local/{}", rest.replace('_', "-")));
        }
        let record = ids.iter().find_map(|id| self.engine.get(id))?;
        let manifest: oap_manifest::Manifest = serde_json::from_value(record.manifest.clone())
            .map_err(|err| tracing::error!(id = %record.id, error = %err, "stored manifest does not decode"))
            .ok()?;
        let taken: Vec<&str> = taken.iter().map(String::as_str).collect();
        let name =
            oap_manifest::tool::assign_tool_names(&[(record.id.as_str(), &manifest)], &taken)
                .pop()?;
        Some(InjectedTool {
            definition: oap_manifest::tool::to_tool(&manifest, &name),
            name,
            record: Arc::new(record),
            manifest: Arc::new(manifest),
            on_result: None,
        })
    }
}

/// Runs a round with its client-facing events held back; returns them.
pub(crate) async fn held_round(
    ctx: &ChatContext,
    body: Vec<bytes::Bytes>,
) -> (
    Result<crate::bridge::Round, crate::bridge::RoundError>,
    Vec<Event>,
) {
    let (tx, mut rx) = mpsc::channel(64);
    let run = async move {
        let result = crate::bridge::stream_round(ctx, body, &tx).await;
        drop(tx);
        result
    };
    let collect = async {
        let mut held = Vec::new();
        while let Some(event) = rx.recv().await {
            held.push(event);
        }
        held
    };
    tokio::join!(run, collect)
}

/// Sends held events on; false when the client is gone.
pub(crate) async fn release(out: &mpsc::Sender<Event>, held: Vec<Event>) -> bool {
    for event in held {
        if out.send(event).await.is_err() {
            return false;
        }
    }
    true
}

/// When the model did not call the forced tool (it answered, or called
/// another tool), asks it for the forced tool's arguments and returns the
/// call to run; `None` when it complied or extraction failed.
pub(crate) async fn enforce(
    ctx: &ChatContext,
    forced: &Forced,
    model: &str,
    called_forced: bool,
) -> Option<ToolCall> {
    if called_forced {
        return None;
    }
    let body = json!({
        "model": model,
        "stream": false,
        "format": forced.parameters,
        "options": {"temperature": 0},
        "messages": [
            {"role": "system", "content": format!(
                "Extract the arguments for the tool {} from the user's request. Reply with one JSON object matching this schema and nothing else: {}",
                forced.name, forced.parameters
            )},
            {"role": "user", "content": forced.task},
        ],
    });
    let (status, answer) = match ctx
        .upstream
        .post_json_read("/api/chat", &body, MAX_EXTRACTION_BYTES)
        .await
    {
        Ok(answer) => answer,
        Err(err) => {
            tracing::warn!(tool = %forced.name, error = %err, "forced tool: argument extraction failed");
            return None;
        }
    };
    let content = answer
        .pointer("/message/content")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let arguments = match serde_json::from_str::<Value>(content.trim()) {
        Ok(Value::Object(arguments)) if status.is_success() => arguments,
        _ => {
            tracing::warn!(tool = %forced.name, %status, "forced tool: the model gave no argument object");
            return None;
        }
    };
    tracing::info!(tool = %forced.name, "forced tool: model ignored it; the bridge calls it");
    Some(ToolCall {
        id: None,
        index: 0,
        name: forced.name.clone(),
        arguments,
        arguments_error: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(pattern: &str) -> ForceRule {
        ForceRule {
            pattern: pattern.into(),
            tool: "local/date".into(),
            case_insensitive: true,
        }
    }

    #[test]
    fn patterns_compile_case_insensitively_and_bad_ones_are_refused() {
        let regex = compile(&rule(r"\bwhat time\b")).unwrap();
        assert!(regex.is_match("So, WHAT TIME is it?"));
        assert!(compile(&rule("(unclosed"))
            .unwrap_err()
            .contains("invalid regular expression"));
        assert!(compile(&rule(&"a".repeat(2000)))
            .unwrap_err()
            .contains("longer"));
        assert!(compile(&rule(r"(\w{100}){100}")).is_err());
        let settings = ForceSettings::from_config(&[rule("^status"), rule("(bad")]);
        assert_eq!(settings.matching("Status please"), Some("local/date"));
        assert_eq!(settings.matching("no match"), None);
    }
}

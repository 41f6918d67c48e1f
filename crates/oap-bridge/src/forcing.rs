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

use futures_util::future::BoxFuture;
use oap_discovery::Engine;
use oap_wire::ToolCall;
use regex::{Regex, RegexBuilder};
use serde_json::{json, Map, Value};

use crate::context::{ChatContext, InjectedTool, RequestCtx};
use crate::hooks::{Hook, RoundOutcome, RoundStart};
use crate::settings::ForceRule;

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
    /// Name of the injected tool the model must call.
    pub name: String,
    /// The tool's JSON Schema parameters; the `format` when the bridge asks
    /// the model for the arguments alone.
    pub parameters: Value,
    /// The task that matched the forcing pattern.
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

/// Applies the force rules to a request: puts the tool first in `tools`
/// (injecting it from `engine` when discovery did not) and the instruction
/// into the messages. `None` when no rule matches or the tool is unknown.
pub fn apply_force(
    force: &ForceSettings,
    engine: &Engine,
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
    let task = crate::tool_loop::task_of(chat)?;
    let reference = force.matching(&task)?.to_string();
    let position = tools
        .iter()
        .position(|t| t.record.id == reference || t.name == reference);
    let tool = match position {
        Some(i) => tools.remove(i),
        None => {
            let mut taken = crate::tool_loop::client_tool_names(chat);
            taken.extend(tools.iter().map(|t| t.name.clone()));
            match inject_by_reference(engine, &reference, &taken) {
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

fn inject_by_reference(engine: &Engine, reference: &str, taken: &[String]) -> Option<InjectedTool> {
    let mut ids = vec![reference.to_string()];
    if let Some(rest) = reference.strip_prefix("oap_") {
        ids.push(format!("local/{rest}"));
        ids.push(format!("local/{}", rest.replace('_', "-")));
    }
    let record = ids.iter().find_map(|id| engine.get(id))?;
    crate::tools::from_record(record, taken)
}

/// When the model did not call the forced tool (it answered, or called
/// another tool), asks it for the forced tool's arguments and returns the
/// call to run; `None` when it complied or extraction failed.
pub async fn enforce(
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

/// The forcing feature in one request: holds the first round, and when
/// the model did not call the forced tool, has it called.
pub struct ForceHook {
    forced: Forced,
    /// Set while the hook holds a round.
    holding: bool,
}

impl ForceHook {
    /// A hook forcing `forced` on the request's rounds.
    pub fn new(forced: Forced) -> ForceHook {
        ForceHook {
            forced,
            holding: false,
        }
    }
}

impl Hook for ForceHook {
    /// Only the first round that offers tools, and only when oapd runs
    /// its calls itself.
    fn holds_round(&mut self, _cx: &mut RequestCtx, round: &RoundStart) -> bool {
        self.holding = round.number == 1 && round.offers_tools && round.auto_execute;
        self.holding
    }

    fn after_round<'a>(
        &'a mut self,
        cx: &'a mut RequestCtx,
        round: &'a mut RoundOutcome,
    ) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            if !std::mem::take(&mut self.holding) {
                return;
            }
            let any_call = !round.ours.is_empty() || !round.theirs.is_empty();
            let called_forced = round.ours.iter().any(|call| call.name == self.forced.name);
            match enforce(&cx.shared, &self.forced, &cx.model, called_forced).await {
                Some(call) if !any_call => {
                    // The answer given without the tool is dropped.
                    round.ours = vec![call];
                    round.content = String::new();
                    round.release_held = false;
                }
                Some(call) => {
                    // The model called another tool instead: the forced one
                    // runs first, the model's own calls run (or go back to
                    // the client) as usual.
                    round.ours.insert(0, call);
                }
                None => {}
            }
        })
    }
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

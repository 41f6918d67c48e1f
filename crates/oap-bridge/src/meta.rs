//! Meta-tool exposure (`tool_bridge.exposure: meta`, the "lazy" pattern):
//! the model sees two small tools instead of N full ones.
//!
//! - `oap_discover(task)` runs the same discovery as direct mode and
//!   returns the fitting tools compactly (name, first-sentence description,
//!   parameters schema); with the experience cache on, it consults the
//!   cache first for its `task` (a remembered tool is listed alone) and
//!   a successful `oap_invoke` of a listed tool is remembered for it;
//! - `oap_invoke(tool, arguments)` runs one of them through the same path as
//!   a direct call (argument checking, SSRF policy, stdio only for local
//!   trust, timeouts).
//!
//! Only tools discovery returned earlier in this request can be invoked; any
//! other name is a tool error telling the model what to do instead.

use std::collections::HashMap;
use std::sync::Arc;

use futures_util::future::BoxFuture;
use oap_wire::ToolCall;
use serde_json::{json, Map, Value};

use crate::context::{ChatContext, InjectedTool, RequestCtx, ToolResult};
use crate::hooks::{Hook, ToolsByName};
use crate::tools::ToolSource;

/// Name of the meta-tool that searches oapd's tools for a task.
pub const DISCOVER: &str = "oap_discover";
/// Name of the meta-tool that runs a tool `oap_discover` returned.
pub const INVOKE: &str = "oap_invoke";

/// Longest task `oap_discover` accepts (characters).
const MAX_TASK_CHARS: usize = 2000;

/// True for the two meta-tool names, which client tools may not take.
pub fn is_meta_tool(name: &str) -> bool {
    name == DISCOVER || name == INVOKE
}

/// The two tool definitions the model sees.
pub fn definitions() -> Vec<Value> {
    vec![
        json!({"type": "function", "function": {
            "name": DISCOVER,
            "description": "Find tools for a task. Returns tool names, what they do and their parameters; then call oap_invoke.",
            "parameters": {"type": "object", "properties": {
                "task": {"type": "string", "description": "What needs doing, in a few words"}},
                "required": ["task"]}}}),
        json!({"type": "function", "function": {
            "name": INVOKE,
            "description": "Run a tool that oap_discover returned.",
            "parameters": {"type": "object", "properties": {
                "tool": {"type": "string", "description": "Tool name from oap_discover"},
                "arguments": {"type": "object", "description": "Arguments for that tool's parameters"}},
                "required": ["tool", "arguments"]}}}),
    ]
}

/// The state of one request in meta mode.
pub struct MetaSession {
    source: Arc<dyn ToolSource>,
    top_k: usize,
    /// Names discovery must not hand out (the client's tools, the meta-tools).
    reserved: Vec<String>,
    /// Tools `oap_discover` returned in this request, by name.
    discovered: HashMap<String, Arc<InjectedTool>>,
}

impl MetaSession {
    /// A session discovering up to `top_k` tools per `oap_discover` call;
    /// `client_tools` are names discovery must not hand out.
    pub fn new(source: Arc<dyn ToolSource>, top_k: usize, client_tools: Vec<String>) -> Self {
        let mut reserved = client_tools;
        reserved.extend([DISCOVER.to_string(), INVOKE.to_string()]);
        MetaSession {
            source,
            top_k,
            reserved,
            discovered: HashMap::new(),
        }
    }

    /// Runs the model's calls in order (an `oap_invoke` may depend on an
    /// `oap_discover` earlier in the same turn). `injected` are the tools
    /// offered directly next to the meta-tools (a forced tool).
    pub async fn run_calls(
        &mut self,
        ctx: &ChatContext,
        injected: &ToolsByName<'_>,
        calls: &[ToolCall],
    ) -> Vec<ToolResult> {
        let mut results = Vec::with_capacity(calls.len());
        for call in calls {
            let result = match call.name.as_str() {
                DISCOVER => self.discover(call).await,
                INVOKE => self.invoke(ctx, call).await,
                name if injected.contains_key(name) => {
                    crate::tool_loop::run_calls(ctx, injected, std::slice::from_ref(call))
                        .await
                        .pop()
                        .unwrap_or_else(|| error("the tool produced no result".into()))
                }
                other => error(format!("unknown tool '{other}'")),
            };
            results.push(result);
        }
        results
    }

    async fn discover(&mut self, call: &ToolCall) -> ToolResult {
        let task = call
            .arguments
            .get("task")
            .and_then(Value::as_str)
            .map(str::trim)
            .unwrap_or_default();
        if task.is_empty() {
            return error(format!(
                "{DISCOVER} needs a 'task' string describing what needs doing"
            ));
        }
        let task: String = task.chars().take(MAX_TASK_CHARS).collect();
        // The experience cache answers for the task the model asked about,
        // as it does for the user's message in direct mode: a remembered
        // tool is listed alone, and every listed tool reports its outcome
        // back when `oap_invoke` runs it.
        let tools = self
            .source
            .tools_for_task(task, self.top_k, self.reserved.clone())
            .await;
        if tools.is_empty() {
            return ToolResult {
                content: "No tool fits this task. Answer without tools.".into(),
                ok: true,
            };
        }
        let content = listing(&tools);
        for tool in tools {
            // A name already handed out for another manifest keeps its
            // first meaning; the model was told about that one first.
            self.discovered
                .entry(tool.name.clone())
                .or_insert_with(|| Arc::new(tool));
        }
        ToolResult { content, ok: true }
    }

    async fn invoke(&self, ctx: &ChatContext, call: &ToolCall) -> ToolResult {
        let Some(name) = call.arguments.get("tool").and_then(Value::as_str) else {
            return error(format!(
                "{INVOKE} needs 'tool' (a name returned by {DISCOVER}) and 'arguments'"
            ));
        };
        let arguments: Map<String, Value> = match call.arguments.get("arguments") {
            None | Some(Value::Null) => Map::new(),
            Some(Value::Object(arguments)) => arguments.clone(),
            // Small models often send the arguments as a JSON string.
            Some(Value::String(text)) => match serde_json::from_str::<Value>(text) {
                Ok(Value::Object(arguments)) => arguments,
                _ => {
                    return error(format!(
                        "'arguments' for {name} must be a JSON object, got {text:?}"
                    ))
                }
            },
            Some(other) => {
                return error(format!(
                    "'arguments' for {name} must be a JSON object, got {other}"
                ))
            }
        };
        let Some(tool) = self.discovered.get(name).cloned() else {
            let known: Vec<String> = self.discovered.keys().cloned().collect();
            return error(if known.is_empty() {
                format!("'{name}' is not a tool you can invoke yet. Call {DISCOVER} with the task first, then invoke one of the tools it returns.")
            } else {
                let mut known = known;
                known.sort();
                format!("'{name}' was not returned by {DISCOVER} in this conversation. Invoke one of: {}, or call {DISCOVER} again.", known.join(", "))
            });
        };
        let inner = ToolCall {
            id: call.id.clone(),
            index: call.index,
            name: tool.name.clone(),
            arguments,
            arguments_error: None,
        };
        let by_name: ToolsByName<'_> = HashMap::from([(tool.name.as_str(), tool.as_ref())]);
        crate::tool_loop::run_calls(ctx, &by_name, std::slice::from_ref(&inner))
            .await
            .pop()
            .unwrap_or_else(|| error("the tool produced no result".into()))
    }
}

/// Meta mode in one request: offers the two meta-tools, owns their calls
/// and runs every call of a round in order.
impl Hook for MetaSession {
    fn definitions(&mut self, _cx: &mut RequestCtx) -> Vec<Value> {
        definitions()
    }

    fn owns(&self, name: &str) -> bool {
        is_meta_tool(name)
    }

    fn run_calls<'a>(
        &'a mut self,
        cx: &'a RequestCtx,
        calls: &'a [ToolCall],
    ) -> Option<BoxFuture<'a, Vec<ToolResult>>> {
        Some(Box::pin(async move {
            let injected = cx.tools_by_name();
            MetaSession::run_calls(self, &cx.shared, &injected, calls).await
        }))
    }
}

/// What `oap_discover` returns for `tools`: compact JSON, each tool's name,
/// first-sentence description and parameters schema.
pub fn listing(tools: &[InjectedTool]) -> String {
    let listed: Vec<Value> = tools
        .iter()
        .map(|tool| {
            let mut compact = tool.definition.clone();
            crate::exposure::trim_descriptions(&mut compact);
            json!({
                "name": tool.name,
                "description": compact.pointer("/function/description").cloned().unwrap_or(Value::Null),
                "parameters": compact.pointer("/function/parameters").cloned().unwrap_or_else(|| json!({})),
            })
        })
        .collect();
    json!({"tools": listed}).to_string()
}

fn error(message: String) -> ToolResult {
    ToolResult {
        content: format!("Error: {message}"),
        ok: false,
    }
}

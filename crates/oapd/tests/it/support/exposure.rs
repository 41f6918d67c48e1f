//! Fixtures of the small-model fitness suites (`exposure.rs`,
//! `fitness.rs`): one tool-capable scripted model, the daemon in front of
//! it, and the tasks and force rule both suites use.

use fake_ollama::{Echo, ModelSpec, Script, Turn};
use serde_json::{json, Value};

use super::{daemon, Daemon, Upstream};

/// The model name the scripts answer to.
pub const MODEL: &str = "qwen3:4b";

/// A task discovery finds `wc` for.
pub const WC_TASK: &str = "count the words in this text: one two three four";

/// A force rule: a "status report" must use `date`.
pub const FORCE_YAML: &str =
    "tool_bridge:\n  force:\n    - pattern: \"^status report\\\\b\"\n      tool: local/date\n";
/// Matches [`FORCE_YAML`]; discovery alone would not offer `date` for this.
pub const FORCED_TASK: &str = "Status report for the kitchen, please";

/// An empty script for [`MODEL`], tool-capable, checking the Host header.
pub fn models() -> Script {
    Script::new()
        .model(ModelSpec::new(MODEL).capabilities(&["completion", "tools"]))
        .check_host(true)
}

/// Meta mode's happy path as a script: the model calls `oap_discover` for
/// `task`, then `oap_invoke` of `tool` with `arguments`, then repeats what
/// the tool returned. Later turns can be appended.
pub fn discover_then_invoke(task: &str, tool: &str, arguments: Value) -> Script {
    models()
        .turn(Turn::tool_call("oap_discover", json!({ "task": task })))
        .turn(Turn::tool_call(
            "oap_invoke",
            json!({ "tool": tool, "arguments": arguments }),
        ))
        .turn(Turn::echo(Echo::LastTool))
}

/// The daemon in front of `upstream`, with `yaml` appended to its config.
pub fn daemon_with(upstream: &Upstream, yaml: &str) -> Daemon {
    daemon()
        .yaml(&format!(
            "ollama:\n  base_url: {:?}\n{yaml}",
            upstream.fake.url()
        ))
        .start()
}

/// The function names in a request's `tools`.
pub fn names(tools: &Value) -> Vec<String> {
    tools
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| t.pointer("/function/name").and_then(Value::as_str))
        .map(str::to_string)
        .collect()
}

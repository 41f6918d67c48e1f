//! Lean tool exposure for small models: what oapd's tools cost in prompt
//! tokens, fitting them into `tool_bridge.tool_token_budget`, and the
//! [`TokenReport`] hook that stamps that cost on the final chunk. The
//! settings are applied to a request in `assembly.rs`.
//!
//! Budget degradation order (each step only when still over budget):
//! 1. every description (tool and parameter) is cut to its first sentence
//!    and at most [`TOOL_DESCRIPTION_CHARS`] / [`PARAM_DESCRIPTION_CHARS`];
//! 2. optional parameters are dropped, lowest-ranked tool first;
//! 3. tools are dropped, lowest-ranked first.
//!
//! Required parameters are never dropped (a tool that cannot fit with them
//! is dropped whole), and client-supplied tools are never touched: they are
//! not part of what this module sees.

use std::collections::HashMap;

use serde_json::{Map, Value};

use crate::context::{InjectedTool, RequestCtx};
use crate::hooks::Hook;
use crate::settings::{ToolBridgeConfig, ToolExposure, UrlPolicy};
use crate::tokens;

/// Longest tool description kept in budget mode (characters).
pub const TOOL_DESCRIPTION_CHARS: usize = 120;
/// Longest parameter description kept in budget mode (characters).
pub const PARAM_DESCRIPTION_CHARS: usize = 60;

/// The `tool_bridge` settings this module acts on.
#[derive(Debug, Clone, Default)]
pub struct ExposureSettings {
    /// 0 = unlimited.
    pub tool_token_budget: usize,
    /// Which tools the model sees: the discovered ones, or the meta-tools.
    pub exposure: ToolExposure,
    /// What happens to URLs in answers that no message or tool result gave.
    pub url_policy: UrlPolicy,
    /// Per-tool URL policies by manifest id; the strictest offered one wins.
    pub url_policy_tools: HashMap<String, UrlPolicy>,
    /// Task patterns that force a tool.
    pub force: crate::forcing::ForceSettings,
}

impl ExposureSettings {
    /// Copies the relevant `tool_bridge` keys of a validated config.
    pub fn from_config(config: &ToolBridgeConfig) -> Self {
        ExposureSettings {
            tool_token_budget: config.tool_token_budget,
            exposure: config.exposure,
            url_policy: config.url_policy,
            url_policy_tools: config
                .url_policy_tools
                .iter()
                .map(|(k, v)| (k.clone(), *v))
                .collect(),
            force: crate::forcing::ForceSettings::from_config(&config.force.0),
        }
    }

    /// The URL policy for a request offering `tools`: the strictest
    /// per-tool override among them, else the global policy.
    pub fn url_policy_for(&self, tools: &[InjectedTool]) -> UrlPolicy {
        tools
            .iter()
            .filter_map(|t| self.url_policy_tools.get(&t.record.id).copied())
            .max()
            .unwrap_or(self.url_policy)
    }
}

/// What budget fitting did, for logs and tests.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Fitting {
    /// Estimated tokens of the tool definitions as discovered.
    pub tokens_before: usize,
    /// Estimated tokens after fitting: within the budget (dropping every
    /// tool if need be) unless the budget is 0, i.e. unlimited.
    pub tokens_after: usize,
    /// Whether descriptions were cut to [`TOOL_DESCRIPTION_CHARS`] and
    /// [`PARAM_DESCRIPTION_CHARS`].
    pub descriptions_trimmed: bool,
    /// Optional parameters removed from definitions to fit.
    pub optional_parameters_dropped: usize,
    /// Whole tools dropped (lowest-ranked first) to fit.
    pub tools_dropped: usize,
}

/// Fits `tools` (best-ranked first) into `budget` estimated tokens
/// (0 = unlimited), degrading in the documented order.
pub fn fit_budget(mut tools: Vec<InjectedTool>, budget: usize) -> (Vec<InjectedTool>, Fitting) {
    let mut definitions: Vec<Value> = tools.iter().map(|t| t.definition.clone()).collect();
    let fitting = fit_definitions(&mut definitions, budget);
    tools.truncate(definitions.len());
    for (tool, definition) in tools.iter_mut().zip(definitions) {
        tool.definition = definition;
    }
    (tools, fitting)
}

/// [`fit_budget`] on the definitions alone.
pub fn fit_definitions(definitions: &mut Vec<Value>, budget: usize) -> Fitting {
    let total = |definitions: &[Value]| tokens::tools_tokens(definitions.iter());
    let mut fitting = Fitting {
        tokens_before: total(definitions),
        ..Fitting::default()
    };
    fitting.tokens_after = fitting.tokens_before;
    if budget == 0 || fitting.tokens_before <= budget {
        return fitting;
    }
    definitions.iter_mut().for_each(trim_descriptions);
    fitting.descriptions_trimmed = true;
    for i in (0..definitions.len()).rev() {
        if total(definitions) <= budget {
            break;
        }
        fitting.optional_parameters_dropped += drop_optional_parameters(&mut definitions[i]);
    }
    while !definitions.is_empty() && total(definitions) > budget {
        definitions.pop();
        fitting.tools_dropped += 1;
    }
    fitting.tokens_after = total(definitions);
    fitting
}

/// The first sentence of `text`, cut at a word boundary to `max` chars.
#[allow(
    clippy::string_slice,
    reason = "every index comes from str::find, char_indices or a checked char boundary"
)]
pub fn first_sentence(text: &str, max: usize) -> String {
    let text = text.trim();
    let mut end = text.len();
    for (i, c) in text.char_indices() {
        if matches!(c, '.' | '!' | '?') {
            let next = text[i + c.len_utf8()..].chars().next();
            if next.is_none_or(char::is_whitespace) {
                end = i + c.len_utf8();
                break;
            }
        }
        if c == '\n' {
            end = i;
            break;
        }
    }
    let sentence = text[..end].trim_end();
    if sentence.chars().count() <= max {
        return sentence.to_string();
    }
    let cut: String = sentence.chars().take(max).collect();
    match cut.rfind(' ') {
        Some(space) if space > max / 2 => cut[..space].to_string(),
        _ => cut,
    }
}

/// Step 1: tool description and every description inside the parameters.
pub fn trim_descriptions(definition: &mut Value) {
    if let Some(Value::String(text)) = definition.pointer_mut("/function/description") {
        *text = first_sentence(text, TOOL_DESCRIPTION_CHARS);
    }
    if let Some(parameters) = definition.pointer_mut("/function/parameters") {
        trim_nested(parameters);
    }
}

fn trim_nested(value: &mut Value) {
    match value {
        Value::Object(object) => {
            for (key, child) in object.iter_mut() {
                match child {
                    Value::String(text) if key == "description" => {
                        *text = first_sentence(text, PARAM_DESCRIPTION_CHARS);
                    }
                    _ => trim_nested(child),
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(trim_nested),
        _ => {}
    }
}

/// Step 2: removes the parameters not listed in `required`; returns how many.
pub fn drop_optional_parameters(definition: &mut Value) -> usize {
    let required: Vec<String> = definition
        .pointer("/function/parameters/required")
        .and_then(Value::as_array)
        .map(|r| {
            r.iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default();
    let Some(properties) = definition
        .pointer_mut("/function/parameters/properties")
        .and_then(Value::as_object_mut)
    else {
        return 0;
    };
    let before = properties.len();
    properties.retain(|name, _| required.contains(name));
    before - properties.len()
}

/// Reports the estimated prompt tokens of oapd's offered tools on the
/// final chunk (`oap_tool_tokens`); 0 once they are withdrawn.
pub struct TokenReport {
    tokens: usize,
}

impl TokenReport {
    /// Starts reporting `tokens`.
    pub fn new(tokens: usize) -> TokenReport {
        TokenReport { tokens }
    }
}

impl Hook for TokenReport {
    fn tools_withdrawn(&mut self, _cx: &mut RequestCtx) {
        self.tokens = 0;
    }

    fn finish(&mut self, _cx: &mut RequestCtx, done: &mut Value) {
        done["oap_tool_tokens"] = Value::from(self.tokens);
    }
}

/// The tools' client-side token cost.
pub fn client_tool_tokens(chat: &Map<String, Value>) -> usize {
    chat.get("tools")
        .and_then(Value::as_array)
        .map(|tools| tokens::tools_tokens(tools.iter()))
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn first_sentences_are_cut_at_words() {
        assert_eq!(
            first_sentence("Counts words. Also lines.", 100),
            "Counts words."
        );
        assert_eq!(
            first_sentence("Version 1.5 is here", 100),
            "Version 1.5 is here"
        );
        assert_eq!(first_sentence("line one\nline two", 100), "line one");
        assert_eq!(first_sentence("aaaa bbbb cccc dddd eeee", 12), "aaaa bbbb");
        assert_eq!(first_sentence("Ünïcödé everywhere here", 5), "Ünïcö");
    }

    fn tool(name: &str) -> Value {
        json!({"type": "function", "function": {"name": name,
            "description": "Looks up the weather for a place. It knows every city on earth and many villages, too.",
            "parameters": {"type": "object", "properties": {
                "city": {"type": "string", "description": "The city. Spell it the way locals do, with accents."},
                "units": {"type": "string", "description": "metric or imperial. Defaults to metric."},
                "days": {"type": "integer", "description": "How many days ahead. One to seven."}},
                "required": ["city"]}}})
    }

    #[test]
    fn the_budget_degrades_in_order_and_is_never_exceeded() {
        let full = vec![tool("a"), tool("b"), tool("c")];
        let full_tokens = tokens::tools_tokens(full.iter());
        let mut trimmed = full.clone();
        trimmed.iter_mut().for_each(trim_descriptions);
        let trimmed_tokens = tokens::tools_tokens(trimmed.iter());
        assert!(trimmed_tokens < full_tokens);

        let mut defs = full.clone();
        assert_eq!(fit_definitions(&mut defs, 0).tokens_after, full_tokens);
        assert_eq!(defs, full);
        assert_eq!(
            fit_definitions(&mut defs, full_tokens),
            Fitting {
                tokens_before: full_tokens,
                tokens_after: full_tokens,
                ..Fitting::default()
            }
        );

        let mut defs = full.clone();
        let fitting = fit_definitions(&mut defs, trimmed_tokens);
        assert!(fitting.descriptions_trimmed && fitting.optional_parameters_dropped == 0);
        assert_eq!(defs, trimmed);

        // One token less: the lowest-ranked tool loses its optional
        // parameters first; the best-ranked keeps them.
        let mut defs = full.clone();
        let fitting = fit_definitions(&mut defs, trimmed_tokens - 1);
        assert_eq!(fitting.tools_dropped, 0);
        assert_eq!(fitting.optional_parameters_dropped, 2);
        assert!(defs[2]
            .pointer("/function/parameters/properties/units")
            .is_none());
        assert!(defs[0]
            .pointer("/function/parameters/properties/units")
            .is_some());

        for budget in [1, 20, 40, 60, 80, 100, 150, 200] {
            let mut defs = full.clone();
            let fitting = fit_definitions(&mut defs, budget);
            assert!(fitting.tokens_after <= budget, "{budget}: {fitting:?}");
            assert_eq!(fitting.tokens_after, tokens::tools_tokens(defs.iter()));
            for (i, def) in defs.iter().enumerate() {
                // Kept tools are the best-ranked, each with its required parameter.
                assert_eq!(def["function"]["name"], full[i]["function"]["name"]);
                assert!(def
                    .pointer("/function/parameters/properties/city")
                    .is_some());
            }
        }
    }

    #[test]
    fn optional_parameters_go_required_ones_stay() {
        let mut tool = json!({"type": "function", "function": {"name": "t", "parameters": {
            "type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "string"}},
            "required": ["a"]}}});
        assert_eq!(drop_optional_parameters(&mut tool), 1);
        assert!(tool.pointer("/function/parameters/properties/a").is_some());
        assert!(tool.pointer("/function/parameters/properties/b").is_none());
    }
}

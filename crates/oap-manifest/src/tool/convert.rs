//! A manifest as an Ollama/OpenAI tool: its description and the JSON Schema
//! of its `parameters`, from whichever source the manifest offers (declared
//! parameters, an inline schema, examples, stdio usage, description prose).

use std::collections::HashSet;

use serde_json::{json, Map, Value};

use super::described::{described_fields, MAX_SCANNED_DESCRIPTION_BYTES};
use super::recorded::{recorded_output_fields, recorded_parameters};
use super::text::{group_depth, sentences};
use super::{
    compact_json, truncate_chars, MAX_PARAMETER_DESCRIPTION_CHARS, MAX_SCHEMA_DEPTH,
    MAX_TOOL_DESCRIPTION_CHARS,
};
use crate::model::{InvokeKind, IoSpec, Manifest, Parameter};
use crate::validate::PARAMETER_TYPES;

/// Usage synopses are meant to be one line (<120 chars upstream); cap what is
/// appended so a long one cannot crowd out the description.
const MAX_USAGE_CHARS: usize = 300;

/// JSON-Schema keywords copied from a parameter's extra keys, with the JSON
/// type each must have (anything else is dropped so the output stays a valid
/// schema).
const PASSTHROUGH_KEYWORDS: &[(&str, KeywordKind)] = &[
    ("minimum", KeywordKind::Number),
    ("maximum", KeywordKind::Number),
    ("exclusiveMinimum", KeywordKind::Number),
    ("exclusiveMaximum", KeywordKind::Number),
    ("multipleOf", KeywordKind::Number),
    ("minLength", KeywordKind::Number),
    ("maxLength", KeywordKind::Number),
    ("minItems", KeywordKind::Number),
    ("maxItems", KeywordKind::Number),
    ("uniqueItems", KeywordKind::Bool),
    ("pattern", KeywordKind::String),
    ("format", KeywordKind::String),
    ("additionalProperties", KeywordKind::BoolOrObject),
];

#[derive(Clone, Copy)]
enum KeywordKind {
    Number,
    Bool,
    String,
    BoolOrObject,
}

impl KeywordKind {
    fn accepts(self, v: &Value) -> bool {
        match self {
            Self::Number => v.is_number(),
            Self::Bool => v.is_boolean(),
            Self::String => v.is_string(),
            Self::BoolOrObject => v.is_boolean() || v.is_object(),
        }
    }
}

/// Which rule produced a tool's `parameters` (see [`tool_parameters`]).
/// Exposed for logs, debugging output and tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ParameterSource {
    /// `invoke.method: stdio` -> `{args, stdin}`.
    Stdio,
    /// Non-spec `input.parameters` -> a real JSON Schema.
    Parameters,
    /// The document behind `input.schema`, fetched when the manifest was
    /// indexed (see [`tool_parameters`] rule c).
    FetchedSchema,
    /// An inline JSON Schema object (see [`tool_parameters`] rule c).
    InlineSchema,
    /// Keys of object `examples[*].input`, types inferred from the values.
    Examples,
    /// Quoted field names extracted from a JSON input description.
    DescribedFields,
    /// JSON input without recognisable fields -> `{data: string}`.
    RawJson,
    /// Text input, or no input at all -> `{input: string}`.
    Text,
}

/// The Ollama / OpenAI tool definition for `manifest` under `name`:
/// `{"type":"function","function":{"name","description","parameters"}}`.
///
/// `name` is taken as given (use [`assign_tool_names`] for unique names).
/// The description is `manifest.description` plus `"\nUsage: " + usage` when
/// present (as the reference does: the synopsis is often the most useful line
/// for a small model), capped at [`MAX_TOOL_DESCRIPTION_CHARS`] characters by
/// shortening the description, not the usage line. `parameters` comes from
/// [`tool_parameters`].
pub fn to_tool(manifest: &Manifest, name: &str) -> Value {
    json!({
        "type": "function",
        "function": {
            "name": name,
            "description": tool_description(manifest),
            "parameters": tool_parameters(manifest),
        }
    })
}

fn tool_description(manifest: &Manifest) -> String {
    let usage = manifest
        .usage
        .as_deref()
        .map(str::trim)
        .filter(|u| !u.is_empty())
        .map(|u| format!("\nUsage: {}", truncate_chars(u, MAX_USAGE_CHARS)))
        .unwrap_or_default();
    let returns = returns_line(manifest);
    let budget = MAX_TOOL_DESCRIPTION_CHARS
        .saturating_sub(usage.chars().count())
        .saturating_sub(returns.chars().count());
    let mut desc = truncate_chars(manifest.description.trim(), budget);
    if desc.is_empty() {
        desc = truncate_chars(&format!("OAP capability {}", manifest.name.trim()), budget);
    }
    desc.push_str(&usage);
    desc.push_str(&returns);
    desc
}

/// `"\nReturns: {a, b}"` from the fields `output.schema` declares, when it
/// was fetched: the model then knows what it will get back (and so which
/// tool answers the question) without a round trip. Field names only: a
/// whole output schema would cost more context than it saves.
fn returns_line(manifest: &Manifest) -> String {
    let fields = manifest
        .output
        .as_ref()
        .map(recorded_output_fields)
        .unwrap_or_default();
    if fields.is_empty() {
        return String::new();
    }
    let list = truncate_chars(&fields.join(", "), MAX_USAGE_CHARS);
    format!("\nReturns: {{{list}}}")
}

/// Which rule [`tool_parameters`] applies to `manifest`.
pub fn parameter_source(manifest: &Manifest) -> ParameterSource {
    plan(manifest).0
}

/// JSON Schema for a manifest's tool arguments, always of the form
/// `{"type":"object","properties":{...},"required":[...]}` with `required`
/// naming only existing properties, in property order, and every `array`
/// (at any depth) carrying `items`.
///
/// Rules, first match wins:
///
/// a. **stdio** (`invoke.method` is stdio): `{args: string, stdin: string}`,
///    nothing required. Sentences of `input.description` mentioning
///    "argument" describe `args`, the rest `stdin` (reference behaviour);
///    `usage` is appended to the `args` description, since the synopsis is
///    exactly what a model needs to write the arguments.
/// b. **`input.parameters`** (non-spec, used by nearly every HTTP manifest):
///    each entry's `type` (default and fallback `string`), `description`,
///    `enum`, `default`, `items` (default `{"type":"string"}` for arrays),
///    nested `properties` and common limits (`minimum`, `pattern`, ...).
///    Required = entries whose `required` is true or absent (the reference's
///    convention). Keys seen in object `examples[*].input` but not declared
///    are added as optional strings (reference behaviour).
/// c. **`input.schema`**: the spec's schema is a URL; the crawler fetches
///    it when it indexes the manifest and records the converted parameters
///    in `input` ([`super::schema_doc`]), which this rule reads. Failing that,
///    an **inline schema**: an inline schema object cannot reach a
///    parsed [`Manifest`] through `schema` (validation requires a URL there),
///    so this rule reads either a `schema` string holding a JSON object, or
///    an object under the non-spec keys `inputSchema` / `input_schema` /
///    `json_schema` / `jsonSchema` of `input`; it is used when it is an
///    object schema with `properties`.
/// d. **examples** (input not `text/*`): the keys of object example inputs,
///    in first-seen order, types inferred from the values, all optional
///    (examples show what is possible, not what is mandatory).
/// e. **described fields** (JSON input): quoted field names in
///    `input.description` (single quotes first, then double quotes, plus
///    `field='value'` assignments), skipping quoted *values* and making fields
///    optional unless the text marks them required; see
///    `described_fields` in the source for the heuristics.
/// f. JSON input without such fields: `{data: string}`, required.
/// g. text input or none: `{input: string}`, required.
pub fn tool_parameters(manifest: &Manifest) -> Value {
    let (_, props, required) = plan(manifest);
    let names: HashSet<&str> = props.iter().map(|(k, _)| k.as_str()).collect();
    let mut seen = HashSet::new();
    let required: Vec<Value> = required
        .iter()
        .filter(|r| names.contains(r.as_str()) && seen.insert(r.as_str()))
        .map(|r| Value::String(r.clone()))
        .collect();
    let properties: Map<String, Value> = props.into_iter().collect();
    json!({"type": "object", "properties": properties, "required": required})
}

type Props = Vec<(String, Value)>;

fn plan(m: &Manifest) -> (ParameterSource, Props, Vec<String>) {
    let input = m.input.as_ref();
    let input_desc = input
        .and_then(|i| i.description.as_deref())
        .map(str::trim)
        .filter(|d| !d.is_empty());
    let format = input
        .and_then(|i| i.format.as_deref())
        .unwrap_or("")
        .to_ascii_lowercase();
    let is_json = format.contains("json");
    let is_text = format.starts_with("text/");

    // a. stdio
    if m.invoke_kind() == Some(InvokeKind::Stdio) {
        return (
            ParameterSource::Stdio,
            stdio_props(input_desc, m.usage.as_deref()),
            Vec::new(),
        );
    }
    // b. input.parameters
    if let Some(params) = m.input_parameters() {
        let mut props: Props = params
            .iter()
            .map(|(k, p)| (k.to_string(), parameter_schema(p)))
            .collect();
        let required = params
            .iter()
            .filter(|(_, p)| p.is_required())
            .map(|(k, _)| k.to_string())
            .collect();
        for key in example_keys(m) {
            if !params.contains_key(&key) {
                let desc = format!("The '{key}' value (see examples)");
                props.push((key, json!({"type": "string", "description": desc})));
            }
        }
        return (ParameterSource::Parameters, props, required);
    }
    // c. the fetched `input.schema`, then an inline schema
    if let Some((props, required)) = input
        .and_then(recorded_parameters)
        .and_then(|schema| object_schema(&schema))
    {
        return (ParameterSource::FetchedSchema, props, required);
    }
    if let Some((props, required)) = input.and_then(inline_schema) {
        return (ParameterSource::InlineSchema, props, required);
    }
    // d. examples
    if !is_text {
        let props = example_props(m);
        if !props.is_empty() {
            return (ParameterSource::Examples, props, Vec::new());
        }
    }
    // e. / f. JSON input
    if is_json {
        let fields = input_desc.map(described_fields).unwrap_or_default();
        if !fields.is_empty() {
            let required = fields
                .iter()
                .filter(|f| f.required)
                .map(|f| f.name.clone())
                .collect();
            let props = fields
                .into_iter()
                .map(|f| {
                    let mut desc = format!("The '{}' value", f.name);
                    if let Some(h) = &f.hint {
                        desc.push_str(&format!(" ({h})"));
                    }
                    (f.name, json!({"type": f.type_name, "description": desc}))
                })
                .collect();
            return (ParameterSource::DescribedFields, props, required);
        }
        let desc = input_desc
            .map(cap_param_desc)
            .unwrap_or_else(|| format!("JSON input for {}", m.name.trim()));
        return (
            ParameterSource::RawJson,
            vec![(
                "data".into(),
                json!({"type": "string", "description": desc}),
            )],
            vec!["data".into()],
        );
    }
    // g. text or nothing
    let desc = input_desc
        .map(cap_param_desc)
        .unwrap_or_else(|| format!("Input for {}", m.name.trim()));
    (
        ParameterSource::Text,
        vec![(
            "input".into(),
            json!({"type": "string", "description": desc}),
        )],
        vec!["input".into()],
    )
}

fn cap_param_desc(s: &str) -> String {
    truncate_chars(s.trim(), MAX_PARAMETER_DESCRIPTION_CHARS)
}

fn stdio_props(input_desc: Option<&str>, usage: Option<&str>) -> Props {
    let mut args = Vec::new();
    let mut stdin = Vec::new();
    if let Some(desc) = input_desc {
        let text = crate::clip_bytes(desc, MAX_SCANNED_DESCRIPTION_BYTES);
        let depth = group_depth(text);
        for s in sentences(text, &depth) {
            if s.to_lowercase().contains("argument") {
                args.push(s);
            } else {
                stdin.push(s);
            }
        }
    }
    let mut args_desc = if args.is_empty() {
        "Command-line flags and arguments".to_string()
    } else {
        args.join(" ")
    };
    if let Some(u) = usage.map(str::trim).filter(|u| !u.is_empty()) {
        if !args_desc.ends_with(['.', '!', '?']) {
            args_desc.push('.');
        }
        args_desc.push_str(" Usage: ");
        args_desc.push_str(&truncate_chars(u, MAX_USAGE_CHARS));
    }
    let stdin_desc = if stdin.is_empty() {
        "Data to provide on standard input".to_string()
    } else {
        stdin.join(" ")
    };
    vec![
        (
            "args".into(),
            json!({"type": "string", "description": cap_param_desc(&args_desc)}),
        ),
        (
            "stdin".into(),
            json!({"type": "string", "description": cap_param_desc(&stdin_desc)}),
        ),
    ]
}

/// The declared type if it is one OAP allows, else `string` (an unknown type
/// would make the whole tool list invalid for Ollama's parser).
fn normalize_type(t: &str) -> &'static str {
    let lower = t.trim().to_ascii_lowercase();
    PARAMETER_TYPES
        .iter()
        .copied()
        .find(|p| *p == lower)
        .unwrap_or("string")
}

fn parameter_schema(p: &Parameter) -> Value {
    let t = normalize_type(p.type_or_string());
    let mut s = Map::new();
    s.insert("type".into(), Value::String(t.into()));
    if let Some(d) = p
        .description
        .as_deref()
        .map(str::trim)
        .filter(|d| !d.is_empty())
    {
        s.insert("description".into(), Value::String(cap_param_desc(d)));
    }
    if let Some(e) = p.r#enum.as_ref().filter(|e| !e.is_empty()) {
        s.insert("enum".into(), Value::Array(e.clone()));
    }
    if let Some(d) = &p.default {
        s.insert("default".into(), d.clone());
    }
    if t == "array" {
        let items = match &p.items {
            Some(Value::Object(_)) => p.items.as_ref().map(|i| sanitize_schema(i, 1)),
            _ => None,
        };
        s.insert(
            "items".into(),
            items.unwrap_or_else(|| json!({"type": "string"})),
        );
    }
    if t == "object" {
        if let Some(Value::Object(props)) = p.extra.get("properties") {
            let (props, req) = sanitize_properties(props, p.extra.get("required"), 1);
            s.insert("properties".into(), Value::Object(props));
            if !req.is_empty() {
                s.insert("required".into(), Value::Array(req));
            }
        }
    }
    for (kw, kind) in PASSTHROUGH_KEYWORDS {
        if let Some(v) = p.extra.get(*kw).filter(|v| kind.accepts(v)) {
            let v = match v {
                Value::Object(_) => sanitize_schema(v, 1),
                other => other.clone(),
            };
            s.insert((*kw).into(), v);
        }
    }
    Value::Object(s)
}

/// A copy of a schema taken from a manifest, repaired so Ollama and strict
/// validators accept it: non-object schemas become `{"type":"string"}`,
/// unknown type names become `string`, arrays get `items`, nested `required`
/// keeps only existing property names.
fn sanitize_schema(v: &Value, depth: usize) -> Value {
    let Value::Object(obj) = v else {
        return json!({"type": "string"});
    };
    if depth > MAX_SCHEMA_DEPTH {
        return json!({"type": "string"});
    }
    let mut out = Map::new();
    for (k, val) in obj {
        match k.as_str() {
            "properties" | "required" | "items" => {}
            "type" => {
                let t = match val {
                    Value::String(t) => Value::String(schema_type_name(t).into()),
                    Value::Array(ts) => Value::Array(
                        ts.iter()
                            .filter_map(Value::as_str)
                            .map(|t| Value::String(schema_type_name(t).into()))
                            .collect(),
                    ),
                    _ => Value::String("string".into()),
                };
                out.insert(k.clone(), t);
            }
            "additionalProperties" if val.is_object() => {
                out.insert(k.clone(), sanitize_schema(val, depth + 1));
            }
            "anyOf" | "oneOf" | "allOf" => {
                if let Value::Array(alts) = val {
                    let alts = alts.iter().map(|a| sanitize_schema(a, depth + 1)).collect();
                    out.insert(k.clone(), Value::Array(alts));
                }
            }
            _ => {
                out.insert(k.clone(), val.clone());
            }
        }
    }
    if let Some(Value::Object(props)) = obj.get("properties") {
        let (props, req) = sanitize_properties(props, obj.get("required"), depth + 1);
        out.insert("properties".into(), Value::Object(props));
        if !req.is_empty() {
            out.insert("required".into(), Value::Array(req));
        }
    }
    if schema_is_array(&out) {
        let items = match obj.get("items") {
            Some(i @ Value::Object(_)) => sanitize_schema(i, depth + 1),
            _ => json!({"type": "string"}),
        };
        out.insert("items".into(), items);
    }
    Value::Object(out)
}

pub(super) fn sanitize_properties(
    props: &Map<String, Value>,
    required: Option<&Value>,
    depth: usize,
) -> (Map<String, Value>, Vec<Value>) {
    let out: Map<String, Value> = props
        .iter()
        .map(|(k, v)| (k.clone(), sanitize_schema(v, depth)))
        .collect();
    let mut seen = HashSet::new();
    let req = match required {
        Some(Value::Array(r)) => r
            .iter()
            .filter_map(Value::as_str)
            .filter(|r| out.contains_key(*r) && seen.insert(*r))
            .map(|r| Value::String(r.to_string()))
            .collect(),
        _ => Vec::new(),
    };
    (out, req)
}

/// JSON-Schema type names (OAP's six plus `null`); others become `string`.
fn schema_type_name(t: &str) -> &'static str {
    if t.eq_ignore_ascii_case("null") {
        "null"
    } else {
        normalize_type(t)
    }
}

fn schema_is_array(s: &Map<String, Value>) -> bool {
    match s.get("type") {
        Some(Value::String(t)) => t == "array",
        Some(Value::Array(ts)) => ts.iter().any(|t| t == "array"),
        _ => false,
    }
}

/// Rule c: an inline object schema with `properties`, if the input carries one.
fn inline_schema(input: &IoSpec) -> Option<(Props, Vec<String>)> {
    const KEYS: &[&str] = &["inputSchema", "input_schema", "json_schema", "jsonSchema"];
    let from_string = input
        .schema
        .as_deref()
        .map(str::trim)
        .filter(|s| s.starts_with('{'))
        .and_then(|s| serde_json::from_str::<Value>(s).ok());
    let candidates = from_string
        .into_iter()
        .chain(KEYS.iter().filter_map(|k| input.extra.get(*k).cloned()));
    candidates
        .into_iter()
        .find_map(|schema| object_schema(&schema))
}

/// Properties and required names of an object schema with `properties`,
/// through the same sanitising as every other schema taken from a manifest.
fn object_schema(schema: &Value) -> Option<(Props, Vec<String>)> {
    let Value::Object(obj) = schema else {
        return None;
    };
    let is_object_type = match obj.get("type") {
        None => true,
        Some(Value::String(t)) => t == "object",
        Some(_) => false,
    };
    let Some(Value::Object(props)) = obj.get("properties") else {
        return None;
    };
    if !is_object_type {
        return None;
    }
    let (props, req) = sanitize_properties(props, obj.get("required"), 1);
    let req = req
        .into_iter()
        .filter_map(|r| r.as_str().map(str::to_string))
        .collect();
    Some((props.into_iter().collect(), req))
}

/// Keys of object example inputs, first-seen order.
fn example_keys(m: &Manifest) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for ex in &m.examples {
        if let Some(Value::Object(input)) = &ex.input {
            for k in input.keys() {
                if !out.iter().any(|o| o == k) {
                    out.push(k.clone());
                }
            }
        }
    }
    out
}

/// Rule d: properties from object example inputs, types inferred.
fn example_props(m: &Manifest) -> Props {
    let mut values: Vec<(String, Vec<&Value>)> = Vec::new();
    for ex in &m.examples {
        if let Some(Value::Object(input)) = &ex.input {
            for (k, v) in input {
                match values.iter_mut().find(|(name, _)| name == k) {
                    Some((_, vs)) => vs.push(v),
                    None => values.push((k.clone(), vec![v])),
                }
            }
        }
    }
    values
        .into_iter()
        .map(|(k, vs)| {
            let mut schema = inferred_schema(&vs);
            let sample = vs
                .iter()
                .find(|v| !v.is_null())
                .map(|v| compact_json(v, 60));
            let desc = match sample {
                Some(s) => format!("The '{k}' value, e.g. {s}"),
                None => format!("The '{k}' value (see examples)"),
            };
            if let Value::Object(o) = &mut schema {
                o.insert("description".into(), Value::String(desc));
            }
            (k, schema)
        })
        .collect()
}

fn json_type_of(v: &Value) -> Option<&'static str> {
    match v {
        Value::Null => None,
        Value::Bool(_) => Some("boolean"),
        Value::Number(n) if n.is_i64() || n.is_u64() => Some("integer"),
        Value::Number(_) => Some("number"),
        Value::String(_) => Some("string"),
        Value::Array(_) => Some("array"),
        Value::Object(_) => Some("object"),
    }
}

/// One type for all sample values: equal types stay, integer+number widen to
/// number, anything else mixed (or nothing known) falls back to string.
fn inferred_schema(values: &[&Value]) -> Value {
    let mut ty: Option<&'static str> = None;
    for v in values {
        let Some(t) = json_type_of(v) else { continue };
        ty = Some(match ty {
            None => t,
            Some(prev) if prev == t => t,
            Some("integer") if t == "number" => "number",
            Some("number") if t == "integer" => "number",
            Some(_) => "string",
        });
    }
    let ty = ty.unwrap_or("string");
    if ty == "array" {
        let elems: Vec<&Value> = values
            .iter()
            .filter_map(|v| v.as_array())
            .flatten()
            .collect();
        let mut items = inferred_schema(&elems);
        if let Value::Object(o) = &mut items {
            o.remove("description");
        }
        return json!({"type": "array", "items": items});
    }
    json!({"type": ty})
}

//! Manifest -> LLM tool conversion (Ollama / OpenAI `tools` entries), tool
//! naming with collision handling, pre-execution argument checking, and the
//! `/v1/tools` registry shape.
//!
//! Everything here is pure and deterministic: the same manifests (in the same
//! order) always give byte-identical tools, so responses are cacheable and
//! tests can pin exact schemas.
//!
//! Compared with the reference converter (`tool_converter.py`) this module
//! deliberately fixes its known bugs:
//! - `enum`, `default`, `items` and the usual JSON-Schema limits from
//!   `input.parameters` are kept (the reference drops them; an `array`
//!   without `items` is rejected by several validators and confuses models);
//! - quoted *values* in an input description no longer become required
//!   fields (mynewscast's `"stories"`, `"all"`, ...), and description-derived
//!   fields are optional unless the text says otherwise;
//! - names are capped at 64 characters (OpenAI's `^[a-zA-Z0-9_-]{1,64}$`),
//!   never empty, never double-prefixed, and never collide with each other
//!   or with the client's own tools ([`assign_tool_names`]).
//!
//! Entry points: [`tool_name`], [`assign_tool_names`], [`to_tool`],
//! [`tool_parameters`], [`parameter_source`], [`check_arguments`] /
//! [`inspect_arguments`], [`registry_entry`], [`tools_and_registry`].

use std::collections::HashSet;

use serde_json::{json, Map, Number, Value};

use crate::model::{InvokeKind, IoSpec, Manifest, Parameter};
use crate::validate::PARAMETER_TYPES;

/// Longest tool name: OpenAI's function-name pattern is `^[a-zA-Z0-9_-]{1,64}$`
/// and some Ollama front-ends forward tools to OpenAI-compatible backends.
pub const MAX_TOOL_NAME_CHARS: usize = 64;

/// Longest tool description (characters). Descriptions cost context on every
/// round; small models (4k-8k context) cannot afford a 8,000-char essay per
/// tool, and the first paragraph carries the meaning anyway.
pub const MAX_TOOL_DESCRIPTION_CHARS: usize = 1500;

/// Longest description of a single parameter (characters), for the same reason.
pub const MAX_PARAMETER_DESCRIPTION_CHARS: usize = 1000;

/// Every generated name starts with this, so OAP tools are recognisable next
/// to the client's own tools and in logs.
pub const TOOL_NAME_PREFIX: &str = "oap_";

/// Usage synopses are meant to be one line (<120 chars upstream); cap what is
/// appended so a long one cannot crowd out the description.
const MAX_USAGE_CHARS: usize = 300;

/// Hints taken from description text ("(natural language description)").
const MAX_HINT_CHARS: usize = 200;

/// Description fields beyond this are junk, not a schema.
const MAX_DESCRIBED_FIELDS: usize = 32;

/// Only this much of an input description is scanned for field names: real
/// ones are < 1 KiB, and the cap bounds work on hostile manifests.
const MAX_SCANNED_DESCRIPTION_BYTES: usize = 8 * 1024;

/// Nesting bound when copying schemas from manifests.
const MAX_SCHEMA_DEPTH: usize = 16;

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

// ---------------------------------------------------------------------------
// Naming
// ---------------------------------------------------------------------------

/// Tool name for a manifest name: `oap_` + a snake_case slug.
///
/// Rules (deterministic, so a manifest keeps its name across requests):
/// - ASCII letters are lowercased, digits kept; no camel-case splitting
///   (`"myNewscast"` -> `oap_mynewscast`, as the seed specifies);
/// - Latin letters with diacritics are folded (`"Ünïcode"` -> `unicode`),
///   because a model reading "Ünïcode Tool" is more likely to call
///   `oap_unicode_tool` than the reference's `oap_n_code_tool`; other
///   non-ASCII letters and digits (CJK, Cyrillic, ...) are dropped;
/// - every run of other characters becomes one `_`, trimmed at both ends;
/// - a slug already starting with `oap_` loses it, so `"oap-email"` gives
///   `oap_email`, not the reference's `oap_oap_email` (a doubled prefix reads
///   like a typo to models); a bare `"oap"` stays `oap_oap`;
/// - the whole name is capped at [`MAX_TOOL_NAME_CHARS`] (no trailing `_`);
/// - an empty slug (`"!!!"`) becomes `oap_tool`.
///
/// The result always matches `^[a-z0-9_]{1,64}$`.
pub fn tool_name(name: &str) -> String {
    let mut slug = String::with_capacity(name.len().min(MAX_TOOL_NAME_CHARS));
    let mut pending_sep = false;
    fn emit(s: &str, slug: &mut String, pending: &mut bool) {
        if *pending && !slug.is_empty() {
            slug.push('_');
        }
        *pending = false;
        slug.push_str(s);
    }
    for c in name.chars() {
        if c.is_ascii_alphanumeric() {
            let mut buf = [0u8; 4];
            emit(
                c.to_ascii_lowercase().encode_utf8(&mut buf),
                &mut slug,
                &mut pending_sep,
            );
        } else if let Some(folded) = fold_latin(c) {
            emit(folded, &mut slug, &mut pending_sep);
        } else if c.is_alphanumeric() {
            // Non-Latin letter or digit: dropped, not a word boundary.
        } else {
            pending_sep = true;
        }
        if slug.len() > MAX_TOOL_NAME_CHARS * 2 {
            break; // long enough to decide; the rest would be cut anyway
        }
    }
    if let Some(rest) = slug.strip_prefix(TOOL_NAME_PREFIX) {
        if !rest.is_empty() {
            slug = rest.to_string();
        }
    }
    let max_slug = MAX_TOOL_NAME_CHARS - TOOL_NAME_PREFIX.len();
    slug.truncate(max_slug); // ASCII only, so any byte index is a boundary
    let slug = slug.trim_end_matches('_');
    if slug.is_empty() {
        format!("{TOOL_NAME_PREFIX}tool")
    } else {
        format!("{TOOL_NAME_PREFIX}{slug}")
    }
}

/// ASCII spelling of common Latin letters with diacritics (Latin-1 and
/// Latin Extended-A), lowercased. `None` for anything else.
fn fold_latin(c: char) -> Option<&'static str> {
    const ASCII_LOWER: &str = "abcdefghijklmnopqrstuvwxyz";
    let l = c.to_lowercase().next().unwrap_or(c);
    if l.is_ascii_lowercase() {
        // e.g. 'İ' lowercases to "i̇": keep the ASCII base letter.
        let i = (l as u8 - b'a') as usize;
        return ASCII_LOWER.get(i..i + 1);
    }
    Some(match l {
        'à'..='å' | 'ā' | 'ă' | 'ą' => "a",
        'æ' => "ae",
        'ç' | 'ć' | 'ĉ' | 'ċ' | 'č' => "c",
        'ď' | 'đ' | 'ð' => "d",
        'è'..='ë' | 'ē' | 'ĕ' | 'ė' | 'ę' | 'ě' => "e",
        'ĝ' | 'ğ' | 'ġ' | 'ģ' => "g",
        'ĥ' | 'ħ' => "h",
        'ì'..='ï' | 'ĩ' | 'ī' | 'ĭ' | 'į' | 'ı' => "i",
        'ĵ' => "j",
        'ķ' => "k",
        'ĺ' | 'ļ' | 'ľ' | 'ŀ' | 'ł' => "l",
        'ñ' | 'ń' | 'ņ' | 'ň' => "n",
        'ò'..='ö' | 'ø' | 'ō' | 'ŏ' | 'ő' => "o",
        'œ' => "oe",
        'ŕ' | 'ŗ' | 'ř' => "r",
        'ś' | 'ŝ' | 'ş' | 'š' => "s",
        'ß' => "ss",
        'ţ' | 'ť' | 'ŧ' => "t",
        'þ' => "th",
        'ù'..='ü' | 'ũ' | 'ū' | 'ŭ' | 'ů' | 'ű' | 'ų' => "u",
        'ŵ' => "w",
        'ý' | 'ÿ' | 'ŷ' => "y",
        'ź' | 'ż' | 'ž' => "z",
        _ => return None,
    })
}

/// `base` + `_n`, with `base` shortened (and trailing `_` trimmed) so the
/// result still fits [`MAX_TOOL_NAME_CHARS`].
fn with_suffix(base: &str, n: usize) -> String {
    let suffix = format!("_{n}");
    let keep = MAX_TOOL_NAME_CHARS.saturating_sub(suffix.len());
    let cut: String = base.chars().take(keep).collect();
    format!("{}{suffix}", cut.trim_end_matches('_'))
}

/// Unique tool names for a list of `(id, manifest)` pairs, one per entry, in
/// input order.
///
/// The first manifest with a given [`tool_name`] keeps it; later ones get
/// `_2`, `_3`, ... in input order (the caller sorts by score, then id, so the
/// best match keeps the plain name and the outcome is deterministic). A name
/// is never one of `reserved` (the client's own tool names, compared
/// case-insensitively, because a model that sees `Oap_email` and `oap_email`
/// will mix them up) nor one already assigned, and stays within
/// [`MAX_TOOL_NAME_CHARS`]. The reference has no collision handling: its
/// registry silently kept only the last of two same-named manifests.
///
/// The ids do not influence the names (input order alone decides); they are
/// part of the signature so call sites keep names paired with the ids they
/// came from.
pub fn assign_tool_names(manifests: &[(&str, &Manifest)], reserved: &[&str]) -> Vec<String> {
    let mut taken: HashSet<String> = reserved.iter().map(|r| r.to_ascii_lowercase()).collect();
    let mut out = Vec::with_capacity(manifests.len());
    for (_id, manifest) in manifests {
        let base = tool_name(&manifest.name);
        let mut candidate = base.clone();
        let mut n = 2usize;
        while taken.contains(&candidate) {
            candidate = with_suffix(&base, n);
            n += 1;
        }
        taken.insert(candidate.clone());
        out.push(candidate);
    }
    out
}

// ---------------------------------------------------------------------------
// Conversion
// ---------------------------------------------------------------------------

/// Which rule produced a tool's `parameters` (see [`tool_parameters`]).
/// Exposed for logs, debugging output and tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ParameterSource {
    /// `invoke.method: stdio` -> `{args, stdin}`.
    Stdio,
    /// Non-spec `input.parameters` -> a real JSON Schema.
    Parameters,
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
    let budget = MAX_TOOL_DESCRIPTION_CHARS.saturating_sub(usage.chars().count());
    let mut desc = truncate_chars(manifest.description.trim(), budget);
    if desc.is_empty() {
        desc = truncate_chars(&format!("OAP capability {}", manifest.name.trim()), budget);
    }
    desc.push_str(&usage);
    desc
}

/// `s` cut to at most `max` characters (on a char boundary), ending in `…`
/// when it was cut so the model can tell text is missing.
fn truncate_chars(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        return s.to_string();
    }
    if max == 0 {
        return String::new();
    }
    let mut out: String = s.chars().take(max - 1).collect();
    out.push('…');
    out
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
/// c. **inline schema**: the spec's `input.schema` is a URL and is not
///    fetched at conversion time. An inline schema object cannot reach a
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
    // c. inline schema
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
        let text = clip(desc, MAX_SCANNED_DESCRIPTION_BYTES);
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

fn sanitize_properties(
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
    for schema in candidates {
        let Value::Object(obj) = &schema else {
            continue;
        };
        let is_object_type = match obj.get("type") {
            None => true,
            Some(Value::String(t)) => t == "object",
            Some(_) => false,
        };
        let Some(Value::Object(props)) = obj.get("properties") else {
            continue;
        };
        if !is_object_type {
            continue;
        }
        let (props, req) = sanitize_properties(props, obj.get("required"), 1);
        let req = req
            .into_iter()
            .filter_map(|r| r.as_str().map(str::to_string))
            .collect();
        return Some((props.into_iter().collect(), req));
    }
    None
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

fn compact_json(v: &Value, max: usize) -> String {
    let s = serde_json::to_string(v).unwrap_or_default();
    truncate_chars(&s, max)
}

// ---------------------------------------------------------------------------
// Rule e: field names from description prose
// ---------------------------------------------------------------------------

/// A field found in description prose.
#[derive(Debug, Clone, PartialEq)]
struct DescribedField {
    name: String,
    required: bool,
    type_name: &'static str,
    hint: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Need {
    Required,
    Optional,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Value,
    Field,
}

/// How a token is read from the words before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Mode {
    kind: Kind,
    /// Something marks it as a field name (not just a quoted word).
    explicit: bool,
    /// Inside a "Required: ..." / "Optional: ..." run or after "optional".
    section: Option<Need>,
}

const NEUTRAL: Mode = Mode {
    kind: Kind::Field,
    explicit: false,
    section: None,
};
const VALUE: Mode = Mode {
    kind: Kind::Value,
    explicit: false,
    section: None,
};

struct Token {
    name: String,
    /// Byte offset of the opening quote (or of the identifier for `x=`).
    start: usize,
    /// Byte offset just past the closing quote (or the identifier).
    end: usize,
    /// Found as `name='value'`: certainly a field.
    assignment: bool,
}

struct Occurrence {
    name: String,
    sentence: usize,
    mode: Mode,
    /// Required/optional said right after the token ("(required)", "is optional").
    own: Option<Need>,
    /// Alternative to another field ("'a' or 'b'"): never required alone.
    alternative: bool,
    hint: Option<String>,
}

/// Nouns that say "the quoted word before me is a field".
const FIELD_NOUNS: &[&str] = &[
    "field",
    "fields",
    "parameter",
    "parameters",
    "param",
    "params",
    "key",
    "keys",
    "property",
    "properties",
    "argument",
    "arguments",
];

/// `<word>:` headers introducing a list of *values*.
const VALUE_HEADERS: &[&str] = &[
    "actions",
    "intents",
    "values",
    "options",
    "categories",
    "modes",
    "types",
    "choices",
    "operations",
    "commands",
    "formats",
    "units",
    "enum",
    "allowed",
    "supported",
    "accepted",
    "valid",
    "possible",
    "example",
    "examples",
];

/// Phrases that, right before a quoted word, make it a value.
const VALUE_CUES: &[&str] = &[
    "e.g.",
    "e.g.,",
    "e.g",
    "eg.",
    "eg",
    "i.e.",
    "i.e.,",
    "i.e",
    "like",
    "such as",
    "default",
    "defaults to",
    "default is",
    "default of",
    "default value",
    "intent",
    "value",
    "values",
    "value of",
    "one of",
    "be",
    "as",
    "set to",
    "equal to",
    "equals",
    "for example",
    "example",
    "examples",
];

/// Heuristic extraction of field names from an input description (rule e).
///
/// Tokens are quoted lower-case identifiers (`[a-z][A-Za-z0-9_]*`: snake
/// case, plus lower camel case because real fields are spelled `geoScope`,
/// `topK`), single quotes first and double quotes only if there are none
/// (reference order), plus `name='value'` / `name="value"` assignments.
///
/// A token is a **value**, not a field, when it is inside `(...)`/`[...]`
/// (`'geoScope' ("primary" or "all")`, `'action' (set, list, ...)`), or the
/// words before it are a value cue: `=`, `e.g.`, `like`, `default`, `intent`,
/// `values`, `one of`, `be`, `as`, or a `<word>:` header such as
/// `Actions:` / `Supported intents:` / `Categories:`. A token separated from
/// the previous one only by a comma-list (`'a' (...), 'b'`, `'x' or 'y'`,
/// `'ask' for questions, 'reply' to ...`) inherits its reading. A name that is
/// a value anywhere is dropped unless some occurrence is explicitly a field
/// (`"intent" field`, `optional 'geo'`, `Required: 'lat'`, `fields: 'title'`).
///
/// Requiredness, because a wrongly required field forces the model to invent
/// a value: everything is **optional** unless the text says `Required: ...`,
/// `required 'x'`, `'x' (required)`, `'x' is required` / `must`; "All
/// optional" makes everything optional; fields offered as alternatives
/// (`at least one of 'a' or 'b'`) are never required. One contrast rule:
/// in a sentence that explicitly marks some fields optional
/// (`..., 'when' (...), and optional 'deliver_via'`), the unmarked fields
/// listed with them are required, provided nothing anywhere is marked
/// required explicitly.
///
/// A parenthesised note right after a field becomes its description hint;
/// if the note starts with a type word (`(number)`, `(boolean)`) the field
/// gets that type, otherwise it is a string.
fn described_fields(desc: &str) -> Vec<DescribedField> {
    let text = clip(desc, MAX_SCANNED_DESCRIPTION_BYTES);
    let depth = group_depth(text);
    let groups = group_spans(text);
    let bounds = sentence_bounds(text, &depth);

    let mut tokens = quoted_tokens(text, b'\'');
    if tokens.is_empty() {
        tokens = quoted_tokens(text, b'"');
    }
    tokens.extend(assignment_tokens(text));
    tokens.sort_by_key(|t| t.start);

    let mut occs: Vec<Occurrence> = Vec::new();
    // (index into occs, token end) of the last token outside any group.
    let mut prev_outside: Option<(usize, usize)> = None;
    for tok in &tokens {
        let sentence = sentence_index(&bounds, tok.start);
        let sentence_start = sentence
            .checked_sub(1)
            .and_then(|i| bounds.get(i).copied())
            .unwrap_or(0);
        if depth.get(tok.start).copied().unwrap_or(0) > 0 {
            occs.push(Occurrence {
                name: tok.name.clone(),
                sentence,
                mode: VALUE,
                own: None,
                alternative: false,
                hint: None,
            });
            continue;
        }
        let prev = prev_outside.filter(|(i, _)| occs[*i].sentence == sentence);
        let gap_start = prev.map_or(sentence_start, |(_, end)| end);
        let gap = normalize(&strip_groups(text, &depth, gap_start, tok.start));
        let mut alternative = false;
        let mut mode = match (read_gap(&gap, prev.is_some()), prev) {
            (GapReading::Inherit { or }, Some((pi, _))) => {
                if or {
                    alternative = true;
                    occs[pi].alternative = true;
                }
                occs[pi].mode
            }
            // Inherit is only returned when there is a previous token.
            (GapReading::Inherit { .. }, None) => NEUTRAL,
            (GapReading::Mode(m, alt), _) => {
                alternative = alt;
                m
            }
        };
        if tok.assignment {
            mode.kind = Kind::Field;
            mode.explicit = true;
        }
        // What follows the token: a field noun, `:`, a note in parentheses.
        let after = text.get(tok.end..).unwrap_or("");
        let after_trim = after.trim_start();
        let after_lower = after_trim
            .chars()
            .take(40)
            .collect::<String>()
            .to_lowercase();
        if mode.kind == Kind::Field
            && (starts_with_word(&after_lower, FIELD_NOUNS) || after_lower.starts_with(':'))
        {
            mode.explicit = true;
        }
        let mut own = None;
        let mut hint = None;
        // The note may follow a noun: `"geoScope" parameter ("primary" or "all")`.
        let mut group_open = tok.end + (after.len() - after_trim.len());
        if let Some(noun) = FIELD_NOUNS
            .iter()
            .find(|n| starts_with_phrase(&after_lower, n))
        {
            let past = after_trim.get(noun.len()..).unwrap_or("");
            group_open += noun.len() + (past.len() - past.trim_start().len());
        }
        let mut rest_start = tok.end;
        if let Some(&(open, close)) = groups.iter().find(|(o, _)| *o == group_open) {
            let content = text.get(open + 1..close).unwrap_or("");
            let content_norm = normalize(content);
            if has_required_word(&content_norm) {
                own = Some(Need::Required);
            } else if contains_word(&content_norm, "optional") {
                own = Some(Need::Optional);
            }
            if !content_norm.is_empty() {
                hint = Some(truncate_chars(&collapse_ws(content), MAX_HINT_CHARS));
            }
            rest_start = close + 1;
        }
        let mut rest: String = text
            .get(rest_start..)
            .unwrap_or("")
            .trim_start()
            .chars()
            .take(40)
            .collect::<String>()
            .to_lowercase();
        // "'lang' field is required": look past the noun.
        if let Some(noun) = FIELD_NOUNS.iter().find(|n| starts_with_phrase(&rest, n)) {
            rest = rest[noun.len()..].trim_start().to_string();
        }
        if [
            "is required",
            "are required",
            "required",
            "must",
            "is mandatory",
        ]
        .iter()
        .any(|p| starts_with_phrase(&rest, p))
        {
            own = Some(Need::Required);
        } else if ["is optional", "are optional", "optional"]
            .iter()
            .any(|p| starts_with_phrase(&rest, p))
        {
            own = own.or(Some(Need::Optional));
        }
        occs.push(Occurrence {
            name: tok.name.clone(),
            sentence,
            mode,
            own,
            alternative,
            hint,
        });
        prev_outside = Some((occs.len() - 1, tok.end));
    }

    aggregate(&occs, &normalize(text))
}

fn aggregate(occs: &[Occurrence], whole: &str) -> Vec<DescribedField> {
    let all_optional = [
        "all optional",
        "all parameters are optional",
        "all fields are optional",
        "all are optional",
        "everything is optional",
    ]
    .iter()
    .any(|p| whole.contains(p));

    let mut names: Vec<&str> = Vec::new();
    for o in occs {
        if !names.contains(&o.name.as_str()) {
            names.push(&o.name);
        }
    }
    struct Agg<'a> {
        name: &'a str,
        required_ev: bool,
        optional_ev: bool,
        alternative: bool,
        sentences: Vec<usize>,
        hint: Option<String>,
    }
    let mut fields: Vec<Agg> = Vec::new();
    for name in names {
        let mine: Vec<&Occurrence> = occs.iter().filter(|o| o.name == name).collect();
        let has_value = mine.iter().any(|o| o.mode.kind == Kind::Value);
        let field_occs: Vec<&&Occurrence> =
            mine.iter().filter(|o| o.mode.kind == Kind::Field).collect();
        let explicit = field_occs.iter().any(|o| o.mode.explicit);
        if field_occs.is_empty() || (has_value && !explicit) {
            continue;
        }
        let need = |n: Need| {
            field_occs
                .iter()
                .any(|o| o.mode.section == Some(n) || o.own == Some(n))
        };
        fields.push(Agg {
            name,
            required_ev: need(Need::Required),
            optional_ev: need(Need::Optional),
            alternative: mine.iter().any(|o| o.alternative),
            sentences: field_occs.iter().map(|o| o.sentence).collect(),
            hint: field_occs.iter().find_map(|o| o.hint.clone()),
        });
        if fields.len() >= MAX_DESCRIBED_FIELDS {
            break;
        }
    }
    let contrast_allowed = !all_optional && !fields.iter().any(|f| f.required_ev);
    let optional_sentences: HashSet<usize> = fields
        .iter()
        .filter(|f| f.optional_ev && !f.required_ev)
        .flat_map(|f| f.sentences.iter().copied())
        .collect();
    fields
        .into_iter()
        .map(|f| {
            let required = if all_optional || f.alternative {
                false
            } else if f.required_ev {
                true
            } else if f.optional_ev {
                false
            } else {
                contrast_allowed && f.sentences.iter().any(|s| optional_sentences.contains(s))
            };
            let type_name = f.hint.as_deref().map_or("string", hint_type);
            DescribedField {
                name: f.name.to_string(),
                required,
                type_name,
                hint: f.hint,
            }
        })
        .collect()
}

/// A type named by the first word of a hint: `(number)`, `(boolean, ...)`.
fn hint_type(hint: &str) -> &'static str {
    let hint = hint.trim();
    let first: String = hint
        .chars()
        .take_while(|c| c.is_ascii_alphabetic())
        .collect::<String>()
        .to_ascii_lowercase();
    // "number of results" is prose, not a type: only a bare word, or one
    // followed by punctuation ("number, -90 to 90"), names a type.
    let rest = hint.get(first.len()..).unwrap_or("");
    if !(rest.is_empty() || rest.starts_with([',', ';', ':'])) {
        return "string";
    }
    match first.as_str() {
        "number" | "float" | "double" => "number",
        "integer" | "int" => "integer",
        "boolean" | "bool" => "boolean",
        _ => "string",
    }
}

enum GapReading {
    /// Same reading as the previous token (list continuation); `or` marks
    /// the two as alternatives.
    Inherit { or: bool },
    /// Own reading, and whether it is an alternative (`at least one of`).
    Mode(Mode, bool),
}

/// Read the (group-free, normalised) words between the previous token (or
/// the sentence start) and this one.
fn read_gap(gap: &str, has_prev: bool) -> GapReading {
    let (core, saw_or, saw_comma) = strip_trailing_separators(gap);
    let without_noun = if has_prev {
        strip_leading_noun(core)
    } else {
        core
    };
    if has_prev && without_noun.is_empty() {
        return GapReading::Inherit { or: saw_or };
    }
    if let Some(reading) = read_cue(core) {
        return reading;
    }
    if has_prev && saw_comma {
        return GapReading::Inherit { or: saw_or };
    }
    GapReading::Mode(NEUTRAL, false)
}

fn read_cue(core: &str) -> Option<GapReading> {
    let field = |section| Mode {
        kind: Kind::Field,
        explicit: true,
        section,
    };
    if let Some(head) = core.strip_suffix(':') {
        let words: Vec<&str> = head.split_whitespace().rev().take(3).collect();
        if words.contains(&"optional") {
            return Some(GapReading::Mode(field(Some(Need::Optional)), false));
        }
        if words.contains(&"required") && !head.ends_with("not required") {
            return Some(GapReading::Mode(field(Some(Need::Required)), false));
        }
        let last = words.first().copied().unwrap_or("");
        if FIELD_NOUNS.contains(&last) {
            return Some(GapReading::Mode(field(None), false));
        }
        if VALUE_HEADERS.contains(&last) || head.is_empty() {
            return Some(GapReading::Mode(VALUE, false));
        }
        return Some(GapReading::Mode(NEUTRAL, false));
    }
    if core.ends_with('=') {
        return Some(GapReading::Mode(VALUE, false));
    }
    if ends_with_phrase(core, "at least one of") || ends_with_phrase(core, "any of") {
        return Some(GapReading::Mode(field(None), true));
    }
    if VALUE_CUES.iter().any(|c| ends_with_phrase(core, c)) {
        return Some(GapReading::Mode(VALUE, false));
    }
    let last3: Vec<&str> = core.split_whitespace().rev().take(3).collect();
    if last3.contains(&"optional") || last3.contains(&"optionally") {
        return Some(GapReading::Mode(field(Some(Need::Optional)), false));
    }
    if (last3.contains(&"required") || last3.contains(&"must")) && !last3.contains(&"not") {
        return Some(GapReading::Mode(field(Some(Need::Required)), false));
    }
    if last3.first().is_some_and(|w| FIELD_NOUNS.contains(w)) {
        return Some(GapReading::Mode(field(None), false));
    }
    None
}

/// Drop trailing whitespace, list punctuation and `and` / `or`; report
/// whether an `or` or a comma was among them.
fn strip_trailing_separators(s: &str) -> (&str, bool, bool) {
    let mut cur = s;
    let mut saw_or = false;
    let mut saw_comma = false;
    loop {
        let before = cur.len();
        let trimmed = cur.trim_end_matches(|c: char| {
            c.is_whitespace() || matches!(c, ',' | '+' | '/' | '&' | '|')
        });
        saw_comma |= cur[trimmed.len()..].contains(',');
        cur = trimmed;
        for (word, is_or) in [("and/or", true), ("and", false), ("or", true)] {
            if ends_with_phrase(cur, word) {
                cur = &cur[..cur.len() - word.len()];
                saw_or |= is_or;
                break;
            }
        }
        if cur.len() == before {
            return (cur, saw_or, saw_comma);
        }
    }
}

fn strip_leading_noun(s: &str) -> &str {
    let t = s.trim_start();
    for noun in FIELD_NOUNS {
        if let Some(rest) = t.strip_prefix(noun) {
            if rest.is_empty() || !rest.starts_with(|c: char| c.is_alphanumeric()) {
                let (rest, _, _) = strip_trailing_separators(rest.trim());
                return rest.trim();
            }
        }
    }
    t
}

/// `s` ends with `phrase` at a word boundary.
fn ends_with_phrase(s: &str, phrase: &str) -> bool {
    s.strip_suffix(phrase).is_some_and(|head| {
        head.is_empty()
            || !head.ends_with(|c: char| c.is_alphanumeric())
            || !phrase.starts_with(|c: char| c.is_alphanumeric())
    })
}

/// `s` starts with `phrase` at a word boundary.
fn starts_with_phrase(s: &str, phrase: &str) -> bool {
    s.strip_prefix(phrase)
        .is_some_and(|rest| !rest.starts_with(|c: char| c.is_alphanumeric()))
}

fn starts_with_word(s: &str, words: &[&str]) -> bool {
    words.iter().any(|w| starts_with_phrase(s, w))
}

fn contains_word(s: &str, word: &str) -> bool {
    s.split(|c: char| !c.is_alphanumeric()).any(|w| w == word)
}

fn has_required_word(s: &str) -> bool {
    (contains_word(s, "required") && !s.contains("not required")) || contains_word(s, "must")
}

/// Lowercase, whitespace collapsed, trimmed.
fn normalize(s: &str) -> String {
    collapse_ws(s).to_lowercase()
}

fn collapse_ws(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// `s` cut to at most `max` bytes on a char boundary.
fn clip(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// Matched `(...)` / `[...]` pairs as (open, close) byte offsets; unmatched
/// brackets are ignored so one stray `(` cannot swallow the rest.
fn group_spans(text: &str) -> Vec<(usize, usize)> {
    let mut stack: Vec<(u8, usize)> = Vec::new();
    let mut out = Vec::new();
    for (i, b) in text.bytes().enumerate() {
        match b {
            b'(' | b'[' => stack.push((b, i)),
            b')' | b']' => {
                let want = if b == b')' { b'(' } else { b'[' };
                if let Some(pos) = stack.iter().rposition(|(c, _)| *c == want) {
                    let (_, open) = stack[pos];
                    stack.truncate(pos);
                    out.push((open, i));
                }
            }
            _ => {}
        }
    }
    out.sort_unstable();
    out
}

/// Per byte: how many matched groups contain it (brackets included).
fn group_depth(text: &str) -> Vec<u32> {
    let mut diff = vec![0i64; text.len() + 1];
    for (open, close) in group_spans(text) {
        diff[open] += 1;
        diff[close + 1] -= 1;
    }
    let mut depth = Vec::with_capacity(text.len());
    let mut cur = 0i64;
    for d in diff.iter().take(text.len()) {
        cur += d;
        depth.push(cur.max(0) as u32);
    }
    depth
}

/// The part of `text[from..to]` outside groups.
fn strip_groups(text: &str, depth: &[u32], from: usize, to: usize) -> String {
    let Some(slice) = text.get(from..to) else {
        return String::new();
    };
    slice
        .char_indices()
        .filter(|(i, _)| depth.get(from + i).copied().unwrap_or(0) == 0)
        .map(|(_, c)| c)
        .collect()
}

/// Byte offsets where sentences end (exclusive), ascending. A sentence ends
/// at `.`, `!` or `?` outside brackets, followed by whitespace or the end,
/// unless the word is an abbreviation (`e.g.`, `i.e.`, `etc.`, `U.S.`).
fn sentence_bounds(text: &str, depth: &[u32]) -> Vec<usize> {
    const ABBREV: &[&str] = &[
        "e.g", "i.e", "eg", "ie", "etc", "vs", "approx", "incl", "cf", "esp", "min", "max", "no",
    ];
    let bytes = text.as_bytes();
    let mut out = Vec::new();
    for (i, &b) in bytes.iter().enumerate() {
        if !matches!(b, b'.' | b'!' | b'?') || depth.get(i).copied().unwrap_or(0) > 0 {
            continue;
        }
        let next_ok = bytes.get(i + 1).is_none_or(|n| n.is_ascii_whitespace());
        if !next_ok {
            continue;
        }
        if b == b'.' {
            let word_start = bytes[..i]
                .iter()
                .rposition(|c| !(c.is_ascii_alphabetic() || *c == b'.'))
                .map_or(0, |p| p + 1);
            let word = text.get(word_start..i).unwrap_or("").to_ascii_lowercase();
            if ABBREV.contains(&word.as_str()) || word.contains('.') {
                continue;
            }
        }
        out.push(i + 1);
    }
    out
}

fn sentence_index(bounds: &[usize], pos: usize) -> usize {
    bounds.partition_point(|b| *b <= pos)
}

/// Trimmed, non-empty sentences of `text`.
fn sentences<'a>(text: &'a str, depth: &[u32]) -> Vec<&'a str> {
    let mut out = Vec::new();
    let mut start = 0;
    for end in sentence_bounds(text, depth)
        .into_iter()
        .chain(std::iter::once(text.len()))
    {
        if let Some(s) = text
            .get(start..end)
            .map(str::trim)
            .filter(|s| !s.is_empty())
        {
            out.push(s);
        }
        start = end;
    }
    out
}

fn is_ident_start(b: u8) -> bool {
    b.is_ascii_lowercase()
}

fn is_ident_char(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

/// `'name'` tokens (non-overlapping, left to right, like a regex findall).
/// The opening quote must not follow a letter or digit, so apostrophes
/// ("what's", "Tokyo'") do not open tokens.
fn quoted_tokens(text: &str, q: u8) -> Vec<Token> {
    let bytes = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] != q || (i > 0 && bytes[i - 1].is_ascii_alphanumeric()) {
            i += 1;
            continue;
        }
        let start = i + 1;
        let mut j = start;
        if j < bytes.len() && is_ident_start(bytes[j]) {
            while j < bytes.len() && is_ident_char(bytes[j]) {
                j += 1;
            }
            let closes = bytes.get(j) == Some(&q);
            let boundary = bytes.get(j + 1).is_none_or(|c| !c.is_ascii_alphanumeric());
            if closes && boundary && j - start <= MAX_TOOL_NAME_CHARS {
                out.push(Token {
                    name: text[start..j].to_string(),
                    start: i,
                    end: j + 1,
                    assignment: false,
                });
                i = j + 1;
                continue;
            }
        }
        i += 1;
    }
    out
}

/// `name='value'` / `name="value"`: the name is a field.
fn assignment_tokens(text: &str) -> Vec<Token> {
    let bytes = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        let at_boundary = i == 0 || !is_ident_char(bytes[i - 1]);
        if !(at_boundary && is_ident_start(bytes[i])) {
            i += 1;
            continue;
        }
        let mut j = i;
        while j < bytes.len() && is_ident_char(bytes[j]) {
            j += 1;
        }
        if bytes.get(j) == Some(&b'=')
            && matches!(bytes.get(j + 1), Some(b'\'') | Some(b'"'))
            && j - i <= MAX_TOOL_NAME_CHARS
        {
            out.push(Token {
                name: text[i..j].to_string(),
                start: i,
                end: j,
                assignment: true,
            });
        }
        i = j.max(i + 1);
    }
    out
}

// ---------------------------------------------------------------------------
// Argument checking
// ---------------------------------------------------------------------------

/// Outcome of [`inspect_arguments`].
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ArgumentCheck {
    /// Normalised arguments (coerced values, unknown keys dropped, nulls
    /// removed), in schema order.
    pub arguments: Map<String, Value>,
    /// Problems that must block execution, phrased for the model.
    pub problems: Vec<String>,
    /// Things fixed silently (ignored unknown arguments, renamed keys);
    /// worth logging and worth showing the model alongside problems.
    pub notes: Vec<String>,
}

/// [`inspect_arguments`] as a `Result`: the normalised arguments, or the
/// problems followed by the notes (so a model told "missing required
/// argument 'location'" also learns its `city` was ignored).
pub fn check_arguments(
    schema: &Value,
    args: &Map<String, Value>,
) -> Result<Map<String, Value>, Vec<String>> {
    let check = inspect_arguments(schema, args);
    if check.problems.is_empty() {
        Ok(check.arguments)
    } else {
        let mut all = check.problems;
        all.extend(check.notes);
        Err(all)
    }
}

/// Validate a model's tool-call arguments against a schema from
/// [`tool_parameters`] (or a whole tool from [`to_tool`]) before executing
/// it, so the model gets an actionable message instead of an opaque remote
/// error, and the remote service gets well-typed input.
///
/// Policy (small models are sloppy; be lenient where the intent is clear):
/// - `null` arguments count as absent;
/// - **unknown arguments are dropped**, with a note, not rejected: small
///   models add junk keys, and failing the whole call over them wastes a
///   round; they are kept only if the schema sets `additionalProperties`;
/// - one misnamed key is repaired: if exactly one required property is
///   missing (or, for schemas with at most two properties, exactly one
///   property is missing) and exactly one unknown argument was given, the
///   unknown one is taken as the missing one (`{"text": ..}` for `input`,
///   `{"command": ..}` for stdio `args`), with a note;
/// - coercions: `"5"` -> `5` for integer/number (and `5.0` -> `5` for
///   integer), `"true"`/`"false"` -> booleans, numbers/booleans -> strings
///   for string parameters, a JSON string holding an array (or object) for
///   array (object) parameters, a bare scalar for an array -> `[scalar]`;
///   enum strings match case-insensitively and are replaced by the
///   canonical spelling;
/// - array items and nested object properties are checked the same way;
/// - defaults are **not** injected: the remote service applies its own, and
///   sending a default the model never chose can change behaviour.
pub fn inspect_arguments(schema: &Value, args: &Map<String, Value>) -> ArgumentCheck {
    let params = schema
        .pointer("/function/parameters")
        .or_else(|| {
            schema
                .get("parameters")
                .filter(|_| schema.get("properties").is_none())
        })
        .unwrap_or(schema);
    let mut check = ArgumentCheck::default();
    let Some(props) = params.get("properties").and_then(Value::as_object) else {
        check.arguments = args
            .iter()
            .filter(|(_, v)| !v.is_null())
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        return check;
    };
    let required: Vec<&str> = params
        .get("required")
        .and_then(Value::as_array)
        .map(|r| {
            r.iter()
                .filter_map(Value::as_str)
                .filter(|r| props.contains_key(*r))
                .collect()
        })
        .unwrap_or_default();
    let allow_extra = matches!(
        params.get("additionalProperties"),
        Some(Value::Bool(true)) | Some(Value::Object(_))
    );

    let mut given: Map<String, Value> = args
        .iter()
        .filter(|(_, v)| !v.is_null())
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let unknown: Vec<String> = given
        .keys()
        .filter(|k| !props.contains_key(*k))
        .cloned()
        .collect();
    if !allow_extra && unknown.len() == 1 {
        let missing_required: Vec<&str> = required
            .iter()
            .copied()
            .filter(|r| !given.contains_key(*r))
            .collect();
        let candidates: Vec<&str> = if !missing_required.is_empty() {
            missing_required
        } else if props.len() <= 2 {
            props
                .keys()
                .map(String::as_str)
                .filter(|k| !given.contains_key(*k))
                .collect()
        } else {
            Vec::new()
        };
        if let [target] = candidates[..] {
            let from = &unknown[0];
            if let Some(v) = given.remove(from) {
                check
                    .notes
                    .push(format!("argument '{from}' was taken as '{target}'"));
                given.insert(target.to_string(), v);
            }
        }
    }

    for (name, prop_schema) in props {
        match given.get(name) {
            Some(v) => match check_value(name, prop_schema, v.clone(), 0) {
                Ok(v) => {
                    check.arguments.insert(name.clone(), v);
                }
                Err(mut e) => check.problems.append(&mut e),
            },
            None if required.contains(&name.as_str()) => {
                let ty = prop_schema.get("type").and_then(Value::as_str);
                check.problems.push(match ty {
                    Some(t) => format!("missing required argument '{name}' ({t})"),
                    None => format!("missing required argument '{name}'"),
                });
            }
            None => {}
        }
    }
    let known: Vec<&str> = props.keys().map(String::as_str).collect();
    for (k, v) in given.iter().filter(|(k, _)| !props.contains_key(*k)) {
        if allow_extra {
            check.arguments.insert(k.clone(), v.clone());
        } else {
            check.notes.push(format!(
                "unknown argument '{k}' was ignored (known arguments: {})",
                known.join(", ")
            ));
        }
    }
    check
}

fn type_phrase(t: &str) -> &'static str {
    match t {
        "integer" => "an integer",
        "number" => "a number",
        "boolean" => "a boolean (true or false)",
        "array" => "an array",
        "object" => "an object",
        "null" => "null",
        _ => "a string",
    }
}

fn got(v: &Value) -> String {
    compact_json(v, 60)
}

fn check_value(path: &str, schema: &Value, v: Value, depth: usize) -> Result<Value, Vec<String>> {
    let Some(s) = schema.as_object() else {
        return Ok(v);
    };
    if depth > MAX_SCHEMA_DEPTH {
        return Ok(v);
    }
    let types: Vec<&str> = match s.get("type") {
        Some(Value::String(t)) => vec![t.as_str()],
        Some(Value::Array(ts)) => ts.iter().filter_map(Value::as_str).collect(),
        _ => Vec::new(),
    };
    let mut v = if types.is_empty() {
        v
    } else if let Some(exact) = types.iter().find_map(|t| exact_type(t, &v)) {
        exact
    } else if let Some(c) = types.iter().find_map(|t| coerce(t, &v)) {
        c
    } else {
        let wanted: Vec<&str> = types.iter().map(|t| type_phrase(t)).collect();
        return Err(vec![format!(
            "argument '{path}' must be {}, got {}",
            wanted.join(" or "),
            got(&v)
        )]);
    };

    if let Some(Value::Array(allowed)) = s
        .get("enum")
        .filter(|e| e.as_array().is_some_and(|a| !a.is_empty()))
    {
        if !allowed.contains(&v) {
            let canonical = v.as_str().and_then(|given| {
                allowed.iter().find(|a| {
                    a.as_str()
                        .is_some_and(|a| a.eq_ignore_ascii_case(given.trim()))
                })
            });
            match canonical {
                Some(c) => v = c.clone(),
                None => {
                    let list: Vec<String> = allowed
                        .iter()
                        .map(|a| match a {
                            Value::String(s) => s.clone(),
                            other => other.to_string(),
                        })
                        .collect();
                    return Err(vec![format!(
                        "argument '{path}' must be one of {}, got {}",
                        list.join(", "),
                        got(&v)
                    )]);
                }
            }
        }
    }

    let mut problems = Vec::new();
    match &mut v {
        Value::Array(items) => {
            if let Some(item_schema) = s.get("items").filter(|i| i.is_object()) {
                for (i, item) in items.iter_mut().enumerate() {
                    match check_value(&format!("{path}[{i}]"), item_schema, item.take(), depth + 1)
                    {
                        Ok(x) => *item = x,
                        Err(mut e) => problems.append(&mut e),
                    }
                }
            }
        }
        Value::Object(obj) => {
            if let Some(Value::Object(props)) = s.get("properties") {
                let required: Vec<&str> = s
                    .get("required")
                    .and_then(Value::as_array)
                    .map(|r| r.iter().filter_map(Value::as_str).collect())
                    .unwrap_or_default();
                for (name, sub) in props {
                    let sub_path = format!("{path}.{name}");
                    match obj.get_mut(name) {
                        Some(val) if !val.is_null() => {
                            match check_value(&sub_path, sub, val.take(), depth + 1) {
                                Ok(x) => *val = x,
                                Err(mut e) => problems.append(&mut e),
                            }
                        }
                        _ if required.contains(&name.as_str()) => {
                            problems.push(format!("missing required argument '{sub_path}'"));
                        }
                        _ => {}
                    }
                }
            }
        }
        _ => {}
    }
    if problems.is_empty() {
        Ok(v)
    } else {
        Err(problems)
    }
}

/// `v` already has type `t` (5.0 counts as an integer and becomes 5).
fn exact_type(t: &str, v: &Value) -> Option<Value> {
    let ok = match (t, v) {
        ("string", Value::String(_)) => true,
        ("boolean", Value::Bool(_)) => true,
        ("array", Value::Array(_)) => true,
        ("object", Value::Object(_)) => true,
        ("null", Value::Null) => true,
        ("number", Value::Number(_)) => true,
        ("integer", Value::Number(n)) => {
            return integer_of_number(n).map(Value::from);
        }
        _ => false,
    };
    ok.then(|| v.clone())
}

fn integer_of_number(n: &Number) -> Option<i64> {
    if let Some(i) = n.as_i64() {
        return Some(i);
    }
    if n.is_u64() {
        return None; // > i64::MAX: keep it as is via the u64 branch below
    }
    let f = n.as_f64()?;
    (f.fract() == 0.0 && f.abs() < 9.0e15).then_some(f as i64)
}

/// Lenient conversion of `v` to type `t`, or `None`.
fn coerce(t: &str, v: &Value) -> Option<Value> {
    match (t, v) {
        ("integer", Value::Number(n)) if n.is_u64() => Some(v.clone()),
        ("integer", Value::String(s)) => {
            let s = s.trim();
            if let Ok(i) = s.parse::<i64>() {
                return Some(Value::from(i));
            }
            let f = s.parse::<f64>().ok()?;
            (f.is_finite() && f.fract() == 0.0 && f.abs() < 9.0e15).then(|| Value::from(f as i64))
        }
        ("number", Value::String(s)) => {
            let s = s.trim();
            if let Ok(i) = s.parse::<i64>() {
                return Some(Value::from(i));
            }
            let f = s.parse::<f64>().ok().filter(|f| f.is_finite())?;
            Number::from_f64(f).map(Value::Number)
        }
        ("boolean", Value::String(s)) => match s.trim().to_ascii_lowercase().as_str() {
            "true" => Some(Value::Bool(true)),
            "false" => Some(Value::Bool(false)),
            _ => None,
        },
        ("string", Value::Number(n)) => Some(Value::String(n.to_string())),
        ("string", Value::Bool(b)) => Some(Value::String(b.to_string())),
        ("array", Value::String(s)) => {
            let trimmed = s.trim();
            if trimmed.starts_with('[') {
                if let Ok(Value::Array(a)) = serde_json::from_str::<Value>(trimmed) {
                    return Some(Value::Array(a));
                }
            }
            Some(Value::Array(vec![v.clone()]))
        }
        ("array", Value::Number(_) | Value::Bool(_)) => Some(Value::Array(vec![v.clone()])),
        ("object", Value::String(s)) => match serde_json::from_str::<Value>(s.trim()) {
            Ok(o @ Value::Object(_)) => Some(o),
            _ => None,
        },
        _ => None,
    }
}

// ---------------------------------------------------------------------------
// /v1/tools registry
// ---------------------------------------------------------------------------

/// One value of the `/v1/tools` response's `registry` map (keyed by tool
/// name): `{"tool", "domain", "id", "manifest"}`.
///
/// `domain` is the reference's field name and carries the index id (a
/// domain such as `fingerstring.com` for crawled manifests, `local/<slug>`
/// for local ones), so clients written for the reference keep working; `id`
/// repeats it under our name. `manifest` is the full manifest JSON.
pub fn registry_entry(id: &str, manifest: &Manifest, tool: &Value) -> Value {
    json!({
        "tool": tool,
        "domain": id,
        "id": id,
        "manifest": serde_json::to_value(manifest).unwrap_or(Value::Null),
    })
}

/// The `tools` list and the `registry` map of a `/v1/tools` response for
/// `(id, manifest)` pairs in ranking order, with names from
/// [`assign_tool_names`] (avoiding `reserved`).
pub fn tools_and_registry(
    manifests: &[(&str, &Manifest)],
    reserved: &[&str],
) -> (Vec<Value>, Map<String, Value>) {
    let names = assign_tool_names(manifests, reserved);
    let mut tools = Vec::with_capacity(manifests.len());
    let mut registry = Map::new();
    for ((id, manifest), name) in manifests.iter().zip(names) {
        let tool = to_tool(manifest, &name);
        registry.insert(name, registry_entry(id, manifest, &tool));
        tools.push(tool);
    }
    (tools, registry)
}

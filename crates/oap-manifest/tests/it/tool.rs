//! Manifest -> tool conversion, naming, collisions, argument checks and the
//! registry shape. Real manifests come from tests/fixtures/reference-manifests.

use crate::common::reference_files;
use oap_manifest::tool::TOOL_NAME_PREFIX;
use oap_manifest::{
    assign_tool_names, check_arguments, inspect_arguments, parameter_source, parse, registry_entry,
    to_tool, tool_name, tool_parameters, tools_and_registry, Manifest, ParameterSource,
    MAX_TOOL_DESCRIPTION_CHARS, MAX_TOOL_NAME_CHARS,
};
use serde_json::{json, Map, Value};
use std::collections::HashSet;

// ---------------------------------------------------------------------------
// helpers
// ---------------------------------------------------------------------------

/// Every reference manifest as `(relative path, Manifest)`. Validated via
/// `parse` where possible; kagi-search (refused for its non-spec `auth:
/// "bot"`) is deserialised directly, since conversion must not panic on
/// unvalidated manifests either.
fn reference_manifests() -> Vec<(String, Manifest)> {
    reference_files()
        .into_iter()
        .map(|(rel, bytes)| {
            let v: Value =
                serde_json::from_slice(&bytes).unwrap_or_else(|e| panic!("{rel}: not JSON: {e}"));
            let m = match parse(&serde_json::to_vec(&v).expect("serialise")) {
                Ok(p) => p.manifest,
                Err(_) => serde_json::from_value(v)
                    .unwrap_or_else(|e| panic!("{rel}: not a manifest shape: {e}")),
            };
            (rel, m)
        })
        .collect()
}

fn reference(rel: &str) -> Manifest {
    reference_manifests()
        .into_iter()
        .find(|(r, _)| r == rel)
        .unwrap_or_else(|| panic!("{rel} not among the reference manifests"))
        .1
}

fn manifest(v: Value) -> Manifest {
    serde_json::from_value(v).expect("test manifest deserialises")
}

/// A POST/JSON manifest with the given input block.
fn json_input(name: &str, input: Value) -> Manifest {
    manifest(json!({
        "oap": "1.0",
        "name": name,
        "description": "A test capability.",
        "input": input,
        "invoke": {"method": "POST", "url": "https://api.example.com/v1"}
    }))
}

/// A manifest with a JSON input described only by `desc` (rule e).
fn described(desc: &str) -> Manifest {
    json_input(
        "described",
        json!({"format": "application/json", "description": desc}),
    )
}

fn names_of(schema: &Value) -> Vec<String> {
    schema["properties"]
        .as_object()
        .expect("properties object")
        .keys()
        .cloned()
        .collect()
}

fn required_of(schema: &Value) -> Vec<String> {
    schema["required"]
        .as_array()
        .expect("required array")
        .iter()
        .map(|v| {
            v.as_str()
                .expect("required entries are strings")
                .to_string()
        })
        .collect()
}

fn is_valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
}

/// Every array schema (at any depth) has object `items`, every `type` is a
/// JSON-Schema type name, every `required` names existing properties.
fn assert_schema_sound(path: &str, s: &Value) {
    let obj = s
        .as_object()
        .unwrap_or_else(|| panic!("{path}: schema is not an object: {s}"));
    const TYPES: &[&str] = &[
        "string", "number", "integer", "boolean", "array", "object", "null",
    ];
    let types: Vec<&str> = match obj.get("type") {
        Some(Value::String(t)) => vec![t.as_str()],
        Some(Value::Array(ts)) => ts.iter().map(|t| t.as_str().expect("type name")).collect(),
        None => vec![],
        Some(other) => panic!("{path}: bad type {other}"),
    };
    for t in &types {
        assert!(TYPES.contains(t), "{path}: unknown type {t}");
    }
    if types.contains(&"array") {
        let items = obj
            .get("items")
            .unwrap_or_else(|| panic!("{path}: array without items"));
        assert_schema_sound(&format!("{path}[]"), items);
    }
    if let Some(props) = obj.get("properties") {
        let props = props.as_object().expect("properties is an object");
        for (k, v) in props {
            assert_schema_sound(&format!("{path}.{k}"), v);
        }
        if let Some(req) = obj.get("required") {
            let mut seen = HashSet::new();
            for r in req.as_array().expect("required is an array") {
                let r = r.as_str().expect("required entry is a string");
                assert!(
                    props.contains_key(r),
                    "{path}: required '{r}' not a property"
                );
                assert!(seen.insert(r), "{path}: required '{r}' twice");
            }
        }
    }
}

fn assert_valid_tool(label: &str, tool: &Value) {
    assert_eq!(tool["type"], "function", "{label}");
    let f = &tool["function"];
    let name = f["name"].as_str().expect("name");
    assert!(is_valid_name(name), "{label}: bad name {name:?}");
    let desc = f["description"].as_str().expect("description");
    assert!(!desc.trim().is_empty(), "{label}: empty description");
    assert!(
        desc.chars().count() <= MAX_TOOL_DESCRIPTION_CHARS,
        "{label}: description too long"
    );
    let p = &f["parameters"];
    assert_eq!(p["type"], "object", "{label}");
    assert!(p["properties"].is_object(), "{label}: properties");
    assert!(p["required"].is_array(), "{label}: required");
    assert_eq!(
        p.as_object().expect("object").len(),
        3,
        "{label}: parameters has exactly type/properties/required"
    );
    assert_schema_sound(label, p);
}

fn args(v: Value) -> Map<String, Value> {
    match v {
        Value::Object(m) => m,
        other => panic!("test arguments must be an object, got {other}"),
    }
}

// ---------------------------------------------------------------------------
// every reference manifest
// ---------------------------------------------------------------------------

const STDIO: &[&str] = &[
    "apropos", "awk", "bc", "column", "cut", "date", "grep", "jq", "man", "paste", "sed", "tr",
    "wc",
];
const TEXT: &[&str] = &[
    "wikipedia",
    "country-info",
    "dictionary",
    "exchange-rate",
    "ip-geolocation",
    "zip-lookup",
];

#[test]
fn every_reference_manifest_converts_to_a_valid_tool() {
    let all = reference_manifests();
    assert_eq!(all.len(), 52, "expected 52 reference manifests");
    for (rel, m) in &all {
        let name = tool_name(&m.name);
        let tool = to_tool(m, &name);
        assert_valid_tool(rel, &tool);
        let expected = if STDIO.contains(&m.name.as_str()) {
            ParameterSource::Stdio
        } else if TEXT.contains(&m.name.as_str()) {
            ParameterSource::Text
        } else {
            ParameterSource::Parameters
        };
        assert_eq!(parameter_source(m), expected, "{rel}");
        // Conversion is deterministic.
        assert_eq!(to_tool(m, &name), tool, "{rel}");
        // `input.parameters` manifests: one property per parameter, in
        // document order, required exactly as declared.
        if let Some(params) = m.input_parameters() {
            let p = tool_parameters(m);
            let declared: Vec<String> = params.keys().map(str::to_string).collect();
            assert_eq!(names_of(&p)[..declared.len()], declared[..], "{rel}");
            let req: Vec<String> = params
                .iter()
                .filter(|(_, p)| p.is_required())
                .map(|(k, _)| k.to_string())
                .collect();
            assert_eq!(required_of(&p), req, "{rel}");
        }
    }
}

#[test]
fn all_reference_manifests_together_get_unique_names() {
    let all = reference_manifests();
    let pairs: Vec<(&str, &Manifest)> = all.iter().map(|(r, m)| (r.as_str(), m)).collect();
    let names = assign_tool_names(&pairs, &[]);
    assert_eq!(names.len(), all.len());
    let unique: HashSet<&String> = names.iter().collect();
    assert_eq!(unique.len(), names.len(), "{names:?}");
    for n in &names {
        assert!(is_valid_name(n), "{n}");
    }
    // Both folders hold alpha-vantage: manifest-repo first (sorted paths).
    let pos = |rel: &str| all.iter().position(|(r, _)| r == rel).expect(rel);
    assert_eq!(
        names[pos("manifest-repo/alpha-vantage.json")],
        "oap_alpha_vantage"
    );
    assert_eq!(
        names[pos("oap-dev/alpha-vantage.json")],
        "oap_alpha_vantage_2"
    );
    assert_eq!(names[pos("manifest-repo/oap-email.json")], "oap_email");
    assert_eq!(names[pos("oap-dev/oap-email.json")], "oap_email_2");
    assert_eq!(names[pos("oap-dev/earthquake.json")], "oap_usgs_earthquake");
}

// ---------------------------------------------------------------------------
// exact schemas of real manifests
// ---------------------------------------------------------------------------

#[test]
fn grep_stdio_schema() {
    let m = reference("oap-dev/grep.json");
    assert_eq!(
        to_tool(&m, "oap_grep"),
        json!({
            "type": "function",
            "function": {
                "name": "oap_grep",
                "description": "Search text for lines matching a regular expression pattern. Reads from standard input and prints each line that matches the given pattern. Supports extended regular expressions (-E), case-insensitive matching (-i), inverted matching (-v), line numbers (-n), and count-only mode (-c). Use for filtering log files, finding occurrences of a string, or extracting matching lines from any text stream.\nUsage: grep [-E] [-i] [-v] [-c] [-n] PATTERN [FILE...]",
                "parameters": {
                    "type": "object",
                    "properties": {
                        "args": {
                            "type": "string",
                            "description": "The first argument is the regular expression pattern. Usage: grep [-E] [-i] [-v] [-c] [-n] PATTERN [FILE...]"
                        },
                        "stdin": {
                            "type": "string",
                            "description": "Text to search through, provided on standard input."
                        }
                    },
                    "required": []
                }
            }
        })
    );
}

#[test]
fn stdio_sentences_split_on_real_sentence_ends_only() {
    // "(e.g. '-t', ...)" must not be cut at "e.g.".
    let m = reference("oap-dev/column.json");
    let p = tool_parameters(&m);
    assert_eq!(
        p["properties"]["args"]["description"],
        "The first argument is flags (e.g. '-t', '-t -s,'). Usage: column [-t] [-s DELIM] [FILE...]"
    );
    assert_eq!(
        p["properties"]["stdin"]["description"],
        "Text to format, provided on standard input."
    );
    // wc mentions no argument: reference fallback text plus the usage.
    let p = tool_parameters(&reference("oap-dev/wc.json"));
    assert_eq!(
        p["properties"]["args"]["description"],
        "Command-line flags and arguments. Usage: wc [-l] [-w] [-c] [-m] [FILE...]"
    );
}

#[test]
fn wikipedia_text_schema() {
    let m = reference("oap-dev/wikipedia.json");
    assert_eq!(
        tool_parameters(&m),
        json!({
            "type": "object",
            "properties": {
                "input": {
                    "type": "string",
                    "description": "The Wikipedia article title as a URL path segment. Just the article title, not a full question (e.g. 'Oregon' not 'capital of Oregon'). Use underscores for spaces (e.g. 'Portland,_Oregon', 'Ada_Lovelace')."
                }
            },
            "required": ["input"]
        })
    );
    let desc = to_tool(&m, "oap_wikipedia")["function"]["description"]
        .as_str()
        .expect("description")
        .to_string();
    assert!(desc.starts_with("Look up encyclopedic information"));
    assert!(desc.ends_with("\nUsage: wikipedia Oregon → summary with capital, geography, population; wikipedia Ada_Lovelace → biography summary. Always use the article title, never a question."));
}

#[test]
fn open_meteo_parameters_schema() {
    let m = reference("manifest-repo/open-meteo.json");
    assert_eq!(
        tool_parameters(&m),
        json!({
            "type": "object",
            "properties": {
                "latitude": {"type": "number", "description": "Latitude of the location (-90 to 90)"},
                "longitude": {"type": "number", "description": "Longitude of the location (-180 to 180)"},
                "current": {"type": "string", "description": "Comma-separated current weather variables: temperature_2m, relative_humidity_2m, apparent_temperature, precipitation, rain, weather_code, wind_speed_10m, wind_direction_10m, uv_index"},
                "daily": {"type": "string", "description": "Comma-separated daily forecast variables: temperature_2m_max, temperature_2m_min, precipitation_sum, precipitation_probability_max, sunrise, sunset, uv_index_max, wind_speed_10m_max"},
                "temperature_unit": {"type": "string", "description": "Temperature unit", "enum": ["celsius", "fahrenheit"]},
                "timezone": {"type": "string", "description": "Timezone for daily/hourly data (e.g. 'America/Los_Angeles', 'auto')"},
                "forecast_days": {"type": "integer", "description": "Number of forecast days (1-16)"}
            },
            "required": ["latitude", "longitude"]
        })
    );
}

#[test]
fn mynewscast_keeps_enum_default_items_and_requires_only_intent() {
    let m = reference("oap-dev/mynewscast.org.json");
    assert_eq!(parameter_source(&m), ParameterSource::Parameters);
    let p = tool_parameters(&m);
    assert_eq!(
        names_of(&p),
        [
            "intent",
            "geo",
            "geoScope",
            "jurisdiction",
            "jurisdictions",
            "topics",
            "limit",
            "cursor",
            "query",
            "topK",
            "daysBack",
            "city",
            "minScore",
            "maxScore"
        ]
    );
    assert_eq!(required_of(&p), ["intent"]);
    let props = &p["properties"];
    assert_eq!(
        props["intent"]["enum"],
        json!(["stories", "events", "inspections", "search", "trending"])
    );
    assert_eq!(props["intent"]["type"], "string");
    assert!(props["intent"]["description"]
        .as_str()
        .expect("description")
        .starts_with("Query type. \"stories\" for current news articles"));
    assert_eq!(props["geoScope"]["enum"], json!(["primary", "all"]));
    assert_eq!(props["geoScope"]["default"], "all");
    assert_eq!(
        props["jurisdictions"],
        json!({
            "type": "array",
            "description": "Array of agency slugs to scope a search query. Used with \"search\" intent. When set alongside \"geo\", this takes precedence.",
            "items": {"type": "string"}
        })
    );
    assert_eq!(props["topics"]["items"], json!({"type": "string"}));
    assert_eq!(
        props["limit"],
        json!({"type": "integer", "description": "Maximum number of results to return. Max 50 for events, stories, and inspections."})
    );
    // The reference's junk "fields" from quoted values are gone.
    for junk in ["stories", "events", "primary", "all", "data"] {
        assert!(props.get(junk).is_none(), "{junk}");
    }
}

#[test]
fn spotify_array_without_items_gets_string_items() {
    let p = tool_parameters(&reference("manifest-repo/spotify-add-tracks.json"));
    assert_eq!(p["properties"]["track_uris"]["type"], "array");
    assert_eq!(
        p["properties"]["track_uris"]["items"],
        json!({"type": "string"})
    );
    assert_eq!(required_of(&p), ["playlist_id", "track_uris"]);
}

// ---------------------------------------------------------------------------
// rule e: described fields
// ---------------------------------------------------------------------------

const FINGERSTRING_INPUT: &str = "JSON object with 'action' (set, list, cancel, update), 'reminder' (natural language description), 'when' (natural language time like 'tomorrow at 9am'), and optional 'deliver_via' (webhook, email, sms).";

#[test]
fn fingerstring_seed_example_makes_deliver_via_optional() {
    let m = manifest(json!({
        "oap": "1.0",
        "name": "Fingerstring Reminders",
        "description": "Sets and manages reminders for a user. Accepts a natural language description of what to remember and when.",
        "input": {"format": "application/json", "description": FINGERSTRING_INPUT},
        "invoke": {"method": "POST", "url": "https://fingerstring.com/api/oap"}
    }));
    assert_eq!(parameter_source(&m), ParameterSource::DescribedFields);
    let name = tool_name(&m.name);
    assert_eq!(name, "oap_fingerstring_reminders");
    assert_eq!(
        to_tool(&m, &name),
        json!({
            "type": "function",
            "function": {
                "name": "oap_fingerstring_reminders",
                "description": "Sets and manages reminders for a user. Accepts a natural language description of what to remember and when.",
                "parameters": {
                    "type": "object",
                    "properties": {
                        "action": {"type": "string", "description": "The 'action' value (set, list, cancel, update)"},
                        "reminder": {"type": "string", "description": "The 'reminder' value (natural language description)"},
                        "when": {"type": "string", "description": "The 'when' value (natural language time like 'tomorrow at 9am')"},
                        "deliver_via": {"type": "string", "description": "The 'deliver_via' value (webhook, email, sms)"}
                    },
                    "required": ["action", "reminder", "when"]
                }
            }
        })
    );
}

#[test]
fn mynewscast_description_values_do_not_become_fields() {
    let real = reference("oap-dev/mynewscast.org.json");
    let desc = real
        .input
        .as_ref()
        .and_then(|i| i.description.clone())
        .expect("mynewscast has an input description");
    let p = tool_parameters(&described(&desc));
    // Reference output: intent, stories, events, inspections, search,
    // trending, geo, primary, all, all -- all required.
    assert_eq!(names_of(&p), ["intent", "geo", "geoScope"]);
    assert_eq!(required_of(&p), Vec::<String>::new());
    assert_eq!(
        p["properties"]["geoScope"]["description"],
        "The 'geoScope' value (\"primary\" or \"all\", default \"all\")"
    );
}

#[test]
fn described_fields_required_and_optional_sections_with_types() {
    let open_meteo = reference("oap-dev/open-meteo.json");
    let desc = open_meteo
        .input
        .as_ref()
        .and_then(|i| i.description.clone())
        .expect("description");
    let p = tool_parameters(&described(&desc));
    assert_eq!(
        names_of(&p),
        [
            "latitude",
            "longitude",
            "current",
            "daily",
            "hourly",
            "temperature_unit",
            "wind_speed_unit",
            "forecast_days",
            "timezone"
        ]
    );
    assert_eq!(required_of(&p), ["latitude", "longitude"]);
    assert_eq!(
        p["properties"]["latitude"],
        json!({"type": "number", "description": "The 'latitude' value (number)"})
    );
    assert_eq!(p["properties"]["forecast_days"]["type"], "string");
    // Quoted values in parentheses are not fields.
    for v in ["celsius", "fahrenheit", "kmh", "ms", "mph", "kn"] {
        assert!(p["properties"].get(v).is_none(), "{v}");
    }
}

#[test]
fn described_fields_value_lists_after_headers_and_cues() {
    // oap-dev oap-email: 'list', 'summary', ... are values of 'action'.
    let p = tool_parameters(&described(
        "JSON with 'action' to select operation. Prefer 'list' or 'summary' — they query the local cache (already populated by background scans). Actions: 'list' (search/filter cached messages), 'summary' (activity overview with counts and senders), 'get' (single message by id), 'thread' (all messages in thread), 'scan' (fetch new from IMAP server — rarely needed).",
    ));
    assert_eq!(names_of(&p), ["action"]);
    assert_eq!(required_of(&p), Vec::<String>::new());

    // `field='value'` assignments, and values listed after them.
    let p = tool_parameters(&described(
        "Use action='ask' for questions, 'reply' to reply to a message, 'send' to compose a new email, 'manage' for autonomous inbox management.",
    ));
    assert_eq!(names_of(&p), ["action"]);

    // "should be", "as", "e.g.", "default" cues.
    let p = tool_parameters(&described(
        "Query parameters as JSON. All optional. 'format' should be 'geojson'. 'limit' (max results, default 20), 'orderby' ('time', 'magnitude'). Always send 'mode' as 'fast'.",
    ));
    assert_eq!(names_of(&p), ["format", "limit", "orderby", "mode"]);
    assert_eq!(required_of(&p), Vec::<String>::new());
}

#[test]
fn described_fields_alternatives_and_explicit_requirements() {
    // "At least one of 'a' or 'b' is required": neither alone is required.
    let p = tool_parameters(&described(
        "Query parameters as JSON. At least one of 'country' or 'category' is required. For US headlines use country='us'.",
    ));
    assert_eq!(names_of(&p), ["country", "category"]);
    assert_eq!(required_of(&p), Vec::<String>::new());

    // Per-field markers.
    let p = tool_parameters(&described(
        "Send 'q' (required, the search text) and 'page' (optional). The 'lang' field is required.",
    ));
    assert_eq!(names_of(&p), ["q", "page", "lang"]);
    assert_eq!(required_of(&p), ["q", "lang"]);

    // Unmarked fields in a sentence without an explicit "optional" stay optional.
    let p = tool_parameters(&described("JSON with 'city' and 'units'."));
    assert_eq!(names_of(&p), ["city", "units"]);
    assert_eq!(required_of(&p), Vec::<String>::new());

    // Double quotes are used only when there are no single-quoted fields.
    let p = tool_parameters(&described(
        "JSON with \"text\" (the input) and optional \"lang\" (\"en\" or \"de\").",
    ));
    assert_eq!(names_of(&p), ["text", "lang"]);
    assert_eq!(required_of(&p), ["text"]);
}

#[test]
fn described_fields_ignore_non_identifiers_and_apostrophes() {
    let p = tool_parameters(&described(
        "It's a JSON body: 'Portland,_Oregon' and 'America/Los_Angeles' are not fields, nor is 'GLOBAL_QUOTE' or 'two words'; 'ok_field' is.",
    ));
    assert_eq!(names_of(&p), ["ok_field"]);
}

// ---------------------------------------------------------------------------
// one synthetic manifest per rule
// ---------------------------------------------------------------------------

#[test]
fn rule_a_stdio_fallbacks_and_precedence() {
    let m = manifest(json!({
        "oap": "1.0", "name": "tool", "description": "d",
        "input": {"format": "application/json", "parameters": {"x": {"type": "string"}}},
        "invoke": {"method": "STDIO", "url": "tool"}
    }));
    // stdio wins over input.parameters.
    assert_eq!(parameter_source(&m), ParameterSource::Stdio);
    assert_eq!(
        tool_parameters(&m),
        json!({
            "type": "object",
            "properties": {
                "args": {"type": "string", "description": "Command-line flags and arguments"},
                "stdin": {"type": "string", "description": "Data to provide on standard input"}
            },
            "required": []
        })
    );
}

#[test]
fn rule_b_parameters_full_schema() {
    let m = manifest(json!({
        "oap": "1.0", "name": "b", "description": "d",
        "input": {
            "format": "application/json",
            "parameters": {
                "q": {"description": "  Query  "},
                "n": {"type": "integer", "required": false, "minimum": 1, "maximum": "ten"},
                "tags": {"type": "array", "required": false},
                "ids": {"type": "array", "items": {"type": "array"}, "required": false},
                "filter": {"type": "object", "required": false,
                           "properties": {"from": {"type": "string"}, "list": {"type": "array"}},
                           "additionalProperties": false},
                "weird": {"type": "strange", "required": true, "enum": [], "default": 3}
            }
        },
        "examples": [{"input": {"q": "x", "extra_key": 1}}, {"input": "text example"}],
        "invoke": {"method": "GET", "url": "https://api.example.com/b"}
    }));
    assert_eq!(parameter_source(&m), ParameterSource::Parameters);
    assert_eq!(
        tool_parameters(&m),
        json!({
            "type": "object",
            "properties": {
                "q": {"type": "string", "description": "Query"},
                "n": {"type": "integer", "minimum": 1},
                "tags": {"type": "array", "items": {"type": "string"}},
                "ids": {"type": "array", "items": {"type": "array", "items": {"type": "string"}}},
                "filter": {
                    "type": "object",
                    "properties": {
                        "from": {"type": "string"},
                        "list": {"type": "array", "items": {"type": "string"}}
                    },
                    "additionalProperties": false
                },
                "weird": {"type": "string", "default": 3},
                "extra_key": {"type": "string", "description": "The 'extra_key' value (see examples)"}
            },
            "required": ["q", "weird"]
        })
    );
}

#[test]
fn rule_c_inline_schema() {
    let schema = json!({
        "type": "object",
        "properties": {
            "city": {"type": "string", "description": "City"},
            "days": {"type": ["integer", "null"]},
            "hours": {"type": "array"}
        },
        "required": ["city", "nope", "city"]
    });
    let expected = json!({
        "type": "object",
        "properties": {
            "city": {"type": "string", "description": "City"},
            "days": {"type": ["integer", "null"]},
            "hours": {"type": "array", "items": {"type": "string"}}
        },
        "required": ["city"]
    });
    // As a non-spec inline object next to the spec fields ...
    let m = json_input(
        "c",
        json!({"format": "application/json", "description": "'ignored' here", "input_schema": schema}),
    );
    assert_eq!(parameter_source(&m), ParameterSource::InlineSchema);
    assert_eq!(tool_parameters(&m), expected);
    // ... or as JSON text in `schema`.
    let m = json_input(
        "c",
        json!({"format": "application/json", "schema": schema.to_string()}),
    );
    assert_eq!(parameter_source(&m), ParameterSource::InlineSchema);
    assert_eq!(tool_parameters(&m), expected);
    // A schema URL is not fetched: falls through to the next rules.
    let m = json_input(
        "c",
        json!({"format": "application/json", "schema": "https://example.com/schema.json"}),
    );
    assert_eq!(parameter_source(&m), ParameterSource::RawJson);
}

#[test]
fn rule_d_examples_infer_types() {
    let m = manifest(json!({
        "oap": "1.0", "name": "d", "description": "d",
        "input": {"format": "application/json", "description": "See examples; 'ignored' here."},
        "examples": [
            {"input": {"q": "rust", "n": 5, "ratio": 1, "flag": true, "tags": ["a"], "mixed": 1}},
            {"input": {"q": "go", "ratio": 0.5, "opts": {"x": 1}, "mixed": "one", "none": null}},
            {"input": "a string example is ignored"}
        ],
        "invoke": {"method": "POST", "url": "https://api.example.com/d"}
    }));
    assert_eq!(parameter_source(&m), ParameterSource::Examples);
    assert_eq!(
        tool_parameters(&m),
        json!({
            "type": "object",
            "properties": {
                "q": {"type": "string", "description": "The 'q' value, e.g. \"rust\""},
                "n": {"type": "integer", "description": "The 'n' value, e.g. 5"},
                "ratio": {"type": "number", "description": "The 'ratio' value, e.g. 1"},
                "flag": {"type": "boolean", "description": "The 'flag' value, e.g. true"},
                "tags": {"type": "array", "items": {"type": "string"}, "description": "The 'tags' value, e.g. [\"a\"]"},
                "mixed": {"type": "string", "description": "The 'mixed' value, e.g. 1"},
                "opts": {"type": "object", "description": "The 'opts' value, e.g. {\"x\":1}"},
                "none": {"type": "string", "description": "The 'none' value (see examples)"}
            },
            "required": []
        })
    );
    // Text input never uses example objects: the executor sends one text.
    let mut t = m.clone();
    if let Some(i) = t.input.as_mut() {
        i.format = Some("text/plain".into());
    }
    assert_eq!(parameter_source(&t), ParameterSource::Text);
}

#[test]
fn rule_f_raw_json_and_rule_g_text() {
    let m = json_input(
        "f",
        json!({"format": "application/json", "description": "JSON with search query and optional parameters."}),
    );
    assert_eq!(parameter_source(&m), ParameterSource::RawJson);
    assert_eq!(
        tool_parameters(&m),
        json!({
            "type": "object",
            "properties": {"data": {"type": "string", "description": "JSON with search query and optional parameters."}},
            "required": ["data"]
        })
    );
    let m = json_input("f", json!({"format": "application/json"}));
    assert_eq!(
        tool_parameters(&m)["properties"]["data"]["description"],
        "JSON input for f"
    );

    let m = manifest(json!({
        "oap": "1.0", "name": "Summarize", "description": "Summarizes text.",
        "invoke": {"method": "POST", "url": "https://api.example.com/s"}
    }));
    assert_eq!(parameter_source(&m), ParameterSource::Text);
    assert_eq!(
        tool_parameters(&m),
        json!({
            "type": "object",
            "properties": {"input": {"type": "string", "description": "Input for Summarize"}},
            "required": ["input"]
        })
    );
    let m = json_input(
        "t",
        json!({"format": "text/plain", "description": "The text with 'quoted' words."}),
    );
    assert_eq!(
        tool_parameters(&m),
        json!({
            "type": "object",
            "properties": {"input": {"type": "string", "description": "The text with 'quoted' words."}},
            "required": ["input"]
        })
    );
}

#[test]
fn description_is_capped_but_keeps_usage() {
    let mut m = reference("oap-dev/grep.json");
    m.description = "x".repeat(5000);
    let d = to_tool(&m, "oap_grep")["function"]["description"]
        .as_str()
        .expect("description")
        .to_string();
    assert_eq!(d.chars().count(), MAX_TOOL_DESCRIPTION_CHARS);
    assert!(d.ends_with("…\nUsage: grep [-E] [-i] [-v] [-c] [-n] PATTERN [FILE...]"));

    // Multi-byte text is cut on a char boundary.
    m.description = "é".repeat(3000);
    m.usage = None;
    let d = to_tool(&m, "oap_grep")["function"]["description"]
        .as_str()
        .expect("description")
        .to_string();
    assert_eq!(d.chars().count(), MAX_TOOL_DESCRIPTION_CHARS);

    m.description = "   ".into();
    assert_eq!(
        to_tool(&m, "oap_grep")["function"]["description"],
        "OAP capability grep"
    );
}

// ---------------------------------------------------------------------------
// naming
// ---------------------------------------------------------------------------

#[test]
fn tool_name_cases() {
    let cases = [
        ("Fingerstring Reminders", "oap_fingerstring_reminders"),
        ("Summarize", "oap_summarize"),
        ("myNewscast", "oap_mynewscast"),
        (
            "myNewscast Meeting Processor",
            "oap_mynewscast_meeting_processor",
        ),
        ("oap-email", "oap_email"),
        ("OAP Email", "oap_email"),
        ("oap", "oap_oap"),
        ("oapd", "oap_oapd"),
        ("usgs-earthquake", "oap_usgs_earthquake"),
        ("Ünïcode Tool", "oap_unicode_tool"),
        ("Straße Ærø", "oap_strasse_aero"),
        ("天气 API", "oap_api"),
        ("Wetter—API", "oap_wetter_api"),
        ("!!!", "oap_tool"),
        ("", "oap_tool"),
        ("天气", "oap_tool"),
        ("  --a__b--  ", "oap_a_b"),
        ("v2.1 Search", "oap_v2_1_search"),
    ];
    for (input, want) in cases {
        assert_eq!(tool_name(input), want, "{input:?}");
    }
}

#[test]
fn tool_name_is_capped_at_64_without_trailing_underscore() {
    let long = "word ".repeat(40); // 200 chars
    assert_eq!(long.len(), 200);
    let n = tool_name(&long);
    // 60 slug chars would end in "_": trimmed, so 63 in total.
    assert_eq!(
        n,
        format!("oap_{}", "word_".repeat(12).trim_end_matches('_'))
    );
    assert_eq!(n.len(), 63);
    assert!(n.len() <= MAX_TOOL_NAME_CHARS);
    assert!(n.starts_with(TOOL_NAME_PREFIX));
    assert!(is_valid_name(&n));
    // 60 'a's then '_b': cut exactly at 64.
    let exact = format!("{}{}", "a".repeat(60), " b");
    assert_eq!(tool_name(&exact), format!("oap_{}", "a".repeat(60)));
    let n = tool_name(&"x".repeat(200));
    assert_eq!(n, format!("oap_{}", "x".repeat(60)));
}

fn named(name: &str) -> Manifest {
    manifest(json!({
        "oap": "1.0", "name": name, "description": "d",
        "invoke": {"method": "GET", "url": "https://api.example.com/"}
    }))
}

#[test]
fn collisions_get_numbered_suffixes_in_input_order() {
    let a = named("Weather");
    let b = named("weather!");
    let c = named("WEATHER");
    let d = named("News");
    let list = [("a.com", &a), ("b.com", &b), ("c.com", &c), ("d.com", &d)];
    let names = assign_tool_names(&list, &[]);
    assert_eq!(
        names,
        ["oap_weather", "oap_weather_2", "oap_weather_3", "oap_news"]
    );
    // Deterministic.
    assert_eq!(assign_tool_names(&list, &[]), names);
}

#[test]
fn collisions_avoid_reserved_client_names() {
    let a = named("oap-email");
    let b = named("email");
    let list = [("local/oap-email", &a), ("mail.example", &b)];
    let names = assign_tool_names(&list, &["get_weather", "OAP_Email", "oap_email_2"]);
    assert_eq!(names, ["oap_email_3", "oap_email_4"]);
    // A suffixed base cannot collide with a later natural name either.
    let c = named("x");
    let d = named("x 2");
    let e = named("x");
    let names = assign_tool_names(&[("1", &c), ("2", &d), ("3", &e)], &[]);
    assert_eq!(names, ["oap_x", "oap_x_2", "oap_x_3"]);
}

#[test]
fn long_colliding_names_stay_within_64_chars() {
    let long = named(&"k".repeat(200));
    let list: Vec<(&str, &Manifest)> = (0..12).map(|_| ("id", &long)).collect();
    let names = assign_tool_names(&list, &[]);
    let unique: HashSet<&String> = names.iter().collect();
    assert_eq!(unique.len(), 12);
    for n in &names {
        assert!(is_valid_name(n), "{n}");
    }
    assert_eq!(names[0], format!("oap_{}", "k".repeat(60)));
    assert_eq!(names[1], format!("oap_{}_2", "k".repeat(58)));
    assert_eq!(names[11], format!("oap_{}_12", "k".repeat(57)));
}

// ---------------------------------------------------------------------------
// check_arguments
// ---------------------------------------------------------------------------

fn mynewscast_schema() -> Value {
    tool_parameters(&reference("oap-dev/mynewscast.org.json"))
}

#[test]
fn check_missing_required() {
    let schema = tool_parameters(&reference("oap-dev/open-meteo.json"));
    let err = check_arguments(&schema, &args(json!({"longitude": 1.5}))).unwrap_err();
    assert_eq!(err, ["missing required argument 'latitude' (number)"]);
    let err = check_arguments(&schema, &args(json!({"latitude": null}))).unwrap_err();
    assert_eq!(
        err,
        [
            "missing required argument 'latitude' (number)",
            "missing required argument 'longitude' (number)"
        ]
    );
}

#[test]
fn check_type_errors_and_enum() {
    let schema = mynewscast_schema();
    let err =
        check_arguments(&schema, &args(json!({"intent": "stories", "limit": "ten"}))).unwrap_err();
    assert_eq!(err, ["argument 'limit' must be an integer, got \"ten\""]);

    let err = check_arguments(&schema, &args(json!({"intent": "news"}))).unwrap_err();
    assert_eq!(
        err,
        ["argument 'intent' must be one of stories, events, inspections, search, trending, got \"news\""]
    );

    let err = check_arguments(
        &schema,
        &args(json!({"intent": "events", "topics": ["housing", {"x": 1}], "daysBack": true})),
    )
    .unwrap_err();
    assert_eq!(
        err,
        [
            "argument 'topics[1]' must be a string, got {\"x\":1}",
            "argument 'daysBack' must be an integer, got true"
        ]
    );
}

#[test]
fn check_unknown_arguments_are_dropped_with_a_note() {
    let schema = mynewscast_schema();
    let ok = check_arguments(
        &schema,
        &args(json!({"intent": "stories", "foo": 1, "bar": "x"})),
    )
    .expect("unknown arguments alone do not fail");
    assert_eq!(Value::Object(ok), json!({"intent": "stories"}));
    let check = inspect_arguments(&schema, &args(json!({"intent": "stories", "foo": 1})));
    assert!(check.problems.is_empty());
    assert_eq!(check.notes.len(), 1);
    assert!(
        check.notes[0].starts_with(
            "unknown argument 'foo' was ignored (known arguments: intent, geo, geoScope,"
        ),
        "{}",
        check.notes[0]
    );
    // With a real problem, the notes follow the problems.
    let err =
        check_arguments(&schema, &args(json!({"intent": 3, "foo": 1, "baz": 2}))).unwrap_err();
    assert_eq!(err.len(), 3);
    assert_eq!(err[0], "argument 'intent' must be one of stories, events, inspections, search, trending, got \"3\"");
    assert!(
        err[1].starts_with("unknown argument 'baz' was ignored")
            || err[1].starts_with("unknown argument 'foo' was ignored")
    );
}

#[test]
fn check_coercions() {
    let schema = json!({
        "type": "object",
        "properties": {
            "n": {"type": "integer"},
            "x": {"type": "number"},
            "flag": {"type": "boolean"},
            "off": {"type": "boolean"},
            "tags": {"type": "array", "items": {"type": "string"}},
            "one": {"type": "array", "items": {"type": "string"}},
            "ids": {"type": "array", "items": {"type": "integer"}},
            "s": {"type": "string"},
            "mode": {"type": "string", "enum": ["Fast", "slow"]},
            "obj": {"type": "object", "properties": {"k": {"type": "integer"}}, "required": ["k"]},
            "whole": {"type": "integer"}
        },
        "required": []
    });
    let ok = check_arguments(
        &schema,
        &args(json!({
            "n": " 5 ",
            "x": "2.5",
            "flag": "true",
            "off": "FALSE",
            "tags": "[\"a\", \"b\"]",
            "one": "solo",
            "ids": ["1", 2.0, 3],
            "s": 42,
            "mode": "fast",
            "obj": "{\"k\": \"7\"}",
            "whole": 5.0
        })),
    )
    .expect("all coercible");
    assert_eq!(
        Value::Object(ok),
        json!({
            "n": 5,
            "x": 2.5,
            "flag": true,
            "off": false,
            "tags": ["a", "b"],
            "one": ["solo"],
            "ids": [1, 2, 3],
            "s": "42",
            "mode": "Fast",
            "obj": {"k": 7},
            "whole": 5
        })
    );
    let err =
        check_arguments(&schema, &args(json!({"n": 5.5, "flag": "yes", "obj": {}}))).unwrap_err();
    assert_eq!(
        err,
        [
            "argument 'n' must be an integer, got 5.5",
            "argument 'flag' must be a boolean (true or false), got \"yes\"",
            "missing required argument 'obj.k'"
        ]
    );
}

#[test]
fn check_does_not_inject_defaults() {
    let ok =
        check_arguments(&mynewscast_schema(), &args(json!({"intent": "trending"}))).expect("valid");
    assert_eq!(Value::Object(ok), json!({"intent": "trending"}));
}

#[test]
fn check_repairs_one_misnamed_argument() {
    // Text tool: the model wrote "title" instead of "input".
    let wiki = tool_parameters(&reference("oap-dev/wikipedia.json"));
    let check = inspect_arguments(&wiki, &args(json!({"title": "Oregon"})));
    assert!(check.problems.is_empty());
    assert_eq!(Value::Object(check.arguments), json!({"input": "Oregon"}));
    assert_eq!(check.notes, ["argument 'title' was taken as 'input'"]);

    // stdio: "command" instead of "args" (nothing required, two properties).
    let grep = tool_parameters(&reference("oap-dev/grep.json"));
    let ok = check_arguments(
        &grep,
        &args(json!({"command": "-i error", "stdin": "a\nerror"})),
    )
    .expect("repaired");
    assert_eq!(
        Value::Object(ok),
        json!({"args": "-i error", "stdin": "a\nerror"})
    );

    // One missing required property among many: "lat" -> "latitude".
    let meteo = tool_parameters(&reference("oap-dev/open-meteo.json"));
    let ok = check_arguments(&meteo, &args(json!({"lat": "45.5", "longitude": -122.6})))
        .expect("repaired");
    assert_eq!(
        Value::Object(ok),
        json!({"latitude": 45.5, "longitude": -122.6})
    );

    // Two unknown keys: ambiguous, nothing is guessed.
    let err = check_arguments(&wiki, &args(json!({"title": "Oregon", "lang": "en"}))).unwrap_err();
    assert_eq!(err[0], "missing required argument 'input' (string)");
    assert_eq!(err.len(), 3);
}

#[test]
fn check_accepts_a_whole_tool_and_schemas_allowing_extras() {
    let m = reference("oap-dev/wikipedia.json");
    let tool = to_tool(&m, "oap_wikipedia");
    let ok = check_arguments(&tool, &args(json!({"input": "Mars"}))).expect("valid");
    assert_eq!(Value::Object(ok), json!({"input": "Mars"}));

    let open = json!({"type": "object", "properties": {"a": {"type": "string"}}, "additionalProperties": true});
    let ok = check_arguments(&open, &args(json!({"a": "x", "b": 1}))).expect("valid");
    assert_eq!(Value::Object(ok), json!({"a": "x", "b": 1}));

    // No properties at all: nothing to check, nulls still dropped.
    let ok = check_arguments(&json!({}), &args(json!({"a": 1, "b": null}))).expect("valid");
    assert_eq!(Value::Object(ok), json!({"a": 1}));
}

// ---------------------------------------------------------------------------
// registry
// ---------------------------------------------------------------------------

#[test]
fn registry_entry_shape() {
    let m = reference("oap-dev/grep.json");
    let tool = to_tool(&m, "oap_grep");
    let entry = registry_entry("local/grep", &m, &tool);
    assert_eq!(
        entry,
        json!({
            "tool": tool,
            "domain": "local/grep",
            "id": "local/grep",
            "manifest": serde_json::to_value(&m).expect("manifest serialises")
        })
    );
}

#[test]
fn tools_and_registry_use_assigned_names() {
    let a = reference("manifest-repo/oap-email.json");
    let b = reference("oap-dev/oap-email.json");
    let w = reference("oap-dev/wikipedia.json");
    let (tools, registry) = tools_and_registry(
        &[
            ("local/oap-email", &a),
            ("mail.example", &b),
            ("local/wikipedia", &w),
        ],
        &["oap_wikipedia"],
    );
    let names: Vec<&str> = tools
        .iter()
        .map(|t| t["function"]["name"].as_str().expect("name"))
        .collect();
    assert_eq!(names, ["oap_email", "oap_email_2", "oap_wikipedia_2"]);
    assert_eq!(
        registry.keys().map(String::as_str).collect::<Vec<_>>(),
        names
    );
    assert_eq!(registry["oap_email_2"]["domain"], "mail.example");
    assert_eq!(registry["oap_email_2"]["tool"], tools[1]);
    assert_eq!(registry["oap_wikipedia_2"]["manifest"]["name"], "wikipedia");
    for t in &tools {
        assert_valid_tool("registry", t);
    }
}

// ---------------------------------------------------------------------------
// robustness
// ---------------------------------------------------------------------------

/// Deterministic pseudo-random strings built from the characters the
/// heuristics care about: conversion must never panic and must always give
/// a valid tool, and argument checks must never panic.
#[test]
fn odd_inputs_never_panic_and_stay_valid() {
    const PIECES: &[&str] = &[
        "'",
        "\"",
        "(",
        ")",
        "[",
        "]",
        ". ",
        "e.g. ",
        ", ",
        " or ",
        " and ",
        "optional ",
        "Required: ",
        "Actions: ",
        "=",
        "'a'",
        "'b_c'",
        "\"geoScope\"",
        "x='y'",
        "é",
        "天",
        "İ",
        " ",
        "field ",
        "(required)",
        "default ",
        ":",
        "...",
        "!",
        "?",
        "\n",
        "—",
        "value",
    ];
    let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    for round in 0..2000 {
        let len = (next() % 40) as usize;
        let text: String = (0..len)
            .map(|_| PIECES[(next() % PIECES.len() as u64) as usize])
            .collect();
        let m = described(&text);
        let tool = to_tool(&m, &tool_name(&text));
        assert_valid_tool(&format!("round {round}: {text:?}"), &tool);
        let schema = tool_parameters(&m);
        let _ = inspect_arguments(
            &schema,
            &args(json!({"a": text, "b_c": [1, "2"], "z": null})),
        );
    }
}

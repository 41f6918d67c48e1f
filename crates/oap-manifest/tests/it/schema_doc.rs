//! The document behind `input.schema` / `output.schema`: JSON Schema and
//! OpenAPI 3 documents turned into tool parameters, `$ref`s resolved and
//! cut, failures recorded so the manifest keeps its fallback.

use oap_manifest::tool::schema_doc::{
    resolve_input_schema, resolve_output_fields, resolved_record, schema_errors, SchemaDocError,
    MAX_SCHEMA_DOCUMENT_BYTES, RESOLVED_SCHEMA_KEY,
};
use oap_manifest::{parameter_source, to_tool, tool_parameters, Manifest, ParameterSource};
use serde_json::{json, Value};

const DOC_URL: &str = "https://api.example.org/openapi.json";

fn manifest_with(method: &str, url: &str, input: Value, output: Value) -> Manifest {
    let doc = json!({"oap": "1.0", "name": "weather", "description": "Current weather for a city.",
        "input": input, "output": output,
        "invoke": {"method": method, "url": url}});
    oap_manifest::parse(doc.to_string().as_bytes())
        .unwrap()
        .manifest
}

fn manifest(method: &str, url: &str) -> Manifest {
    manifest_with(
        method,
        url,
        json!({"format": "application/json", "description": "A city.", "schema": DOC_URL}),
        json!({"format": "application/json", "description": "The weather.", "schema": DOC_URL}),
    )
}

/// `m` as the crawler leaves it after fetching: the records under the key.
fn recorded(m: &Manifest, input: Option<Value>, output: Option<Value>) -> Manifest {
    let mut doc = serde_json::to_value(m).unwrap();
    if let Some(r) = input {
        doc["input"][RESOLVED_SCHEMA_KEY] = r;
    }
    if let Some(r) = output {
        doc["output"][RESOLVED_SCHEMA_KEY] = r;
    }
    oap_manifest::parse(doc.to_string().as_bytes())
        .unwrap()
        .manifest
}

fn openapi() -> Value {
    json!({
        "openapi": "3.0.3",
        "servers": [{"url": "https://{host}/v1", "variables": {"host": {"default": "api.example.org"}}}],
        "paths": {
            "/weather/{city}": {
                "parameters": [{"name": "city", "in": "path", "required": true,
                                "description": "City name", "schema": {"type": "string"}}],
                "get": {
                    "parameters": [
                        {"$ref": "#/components/parameters/Units"},
                        {"name": "X-Trace", "in": "header", "schema": {"type": "string"}}
                    ],
                    "responses": {"200": {"content": {"application/json": {
                        "schema": {"$ref": "#/components/schemas/Weather"}}}}}
                },
                "post": {
                    "requestBody": {"content": {"application/json": {"schema": {
                        "$ref": "#/components/schemas/Report"}}}},
                    "responses": {"201": {"description": "stored"}}
                }
            },
            "/forecast": {"get": {"parameters": [{"name": "days", "in": "query", "schema": {"type": "integer"}}]}}
        },
        "components": {
            "parameters": {"Units": {"name": "units", "in": "query",
                "schema": {"type": "string", "enum": ["metric", "imperial"]}}},
            "schemas": {
                "Weather": {"type": "object", "properties": {
                    "temperature": {"type": "number"}, "conditions": {"type": "string"}}},
                "Report": {"type": "object", "required": ["reading", "nope"], "properties": {
                    "reading": {"$ref": "#/components/schemas/Reading"},
                    "note": {"type": "text"}}},
                "Reading": {"type": "object", "properties": {"celsius": {"type": "number"},
                    "tags": {"type": "array"}}}
            }
        }
    })
}

#[test]
fn a_json_schema_becomes_the_tools_parameters_with_refs_resolved() {
    let schema = json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "required": ["city", "ghost"],
        "properties": {
            "city": {"type": "string", "description": "City name"},
            "when": {"$ref": "#/$defs/When"}
        },
        "$defs": {"When": {"type": "object", "properties": {"day": {"type": "date"}}}}
    });
    let m = manifest("GET", "https://api.example.org/weather");
    let resolved = resolve_input_schema(schema.to_string().as_bytes(), DOC_URL, &m).unwrap();
    assert_eq!(
        resolved.parameters,
        json!({"type": "object", "properties": {
            "city": {"type": "string", "description": "City name"},
            // an unknown type name becomes string, as for input.parameters
            "when": {"type": "object", "properties": {"day": {"type": "string"}}}
        }, "required": ["city"]})
    );
    assert!(resolved.notes.is_empty(), "{:?}", resolved.notes);

    // Before the fetch the tool falls back to the heuristic; with the
    // record it offers the schema's fields.
    assert_eq!(parameter_source(&m), ParameterSource::RawJson);
    let record = resolved_record(DOC_URL, Ok(resolved.parameters.clone()), &[]);
    let fetched = recorded(&m, Some(record), None);
    assert_eq!(parameter_source(&fetched), ParameterSource::FetchedSchema);
    assert_eq!(tool_parameters(&fetched), resolved.parameters);
    assert!(schema_errors(&fetched).is_empty());
}

#[test]
fn an_openapi_document_gives_the_matching_operations_parameters_and_body() {
    let doc = openapi().to_string();
    // GET: the path-item's path parameter and the operation's query
    // parameter (through a $ref); headers are not the model's business.
    let get = manifest(
        "GET",
        "https://api.example.org/v1/weather/{city}?units=metric",
    );
    let resolved = resolve_input_schema(doc.as_bytes(), DOC_URL, &get).unwrap();
    assert_eq!(
        resolved.parameters,
        json!({"type": "object", "properties": {
            "units": {"type": "string", "enum": ["metric", "imperial"]},
            "city": {"type": "string", "description": "City name"}
        }, "required": ["city"]})
    );
    // POST on the same path: the JSON body's fields (nested $ref resolved,
    // arrays given items, unknown types made strings, required kept only
    // for fields that exist) next to the path parameter.
    let post = manifest("post", "https://api.example.org/v1/weather/paris");
    let resolved = resolve_input_schema(doc.as_bytes(), DOC_URL, &post).unwrap();
    assert_eq!(
        resolved.parameters,
        json!({"type": "object", "properties": {
            "city": {"type": "string", "description": "City name"},
            "reading": {"type": "object", "properties": {
                "celsius": {"type": "number"},
                "tags": {"type": "array", "items": {"type": "string"}}}},
            "note": {"type": "string"}
        }, "required": ["city", "reading"]})
    );
    // The output: the 200 response's fields, listed in the description.
    let fields = resolve_output_fields(doc.as_bytes(), DOC_URL, &get).unwrap();
    assert_eq!(fields, ["temperature", "conditions"]);
    let fetched = recorded(
        &get,
        None,
        Some(resolved_record(DOC_URL, Ok(json!(fields)), &[])),
    );
    let description = to_tool(&fetched, "oap_weather")["function"]["description"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(
        description,
        "Current weather for a city.\nReturns: {temperature, conditions}"
    );
}

#[test]
fn an_openapi_document_without_the_operation_is_refused_and_the_manifest_falls_back() {
    let doc = openapi().to_string();
    for (method, url) in [
        ("GET", "https://api.example.org/v1/climate"),
        ("POST", "https://api.example.org/v1/forecast"),
        ("GET", "https://other.example.org/v1/forecast"),
        ("GET", "https://api.example.org/v2/forecast"),
    ] {
        let m = manifest(method, url);
        let err = resolve_input_schema(doc.as_bytes(), DOC_URL, &m).unwrap_err();
        assert_eq!(
            err,
            SchemaDocError::NoOperation {
                method: method.into(),
                url: url.into()
            }
        );
        assert_eq!(
            err.to_string(),
            format!("the OpenAPI document has no {method} operation for {url}")
        );
        let fetched = recorded(
            &m,
            Some(resolved_record(DOC_URL, Err(err.to_string()), &[])),
            None,
        );
        assert_eq!(parameter_source(&fetched), ParameterSource::RawJson);
        assert_eq!(
            schema_errors(&fetched),
            [format!(
                "input.schema: the OpenAPI document has no {method} operation for {url}"
            )]
        );
    }
    // A relative server URL is read against the document's own URL.
    let mut relative = openapi();
    relative["servers"] = json!([{"url": "/v1"}]);
    let m = manifest("GET", "https://api.example.org/v1/forecast");
    let resolved = resolve_input_schema(relative.to_string().as_bytes(), DOC_URL, &m).unwrap();
    assert_eq!(
        resolved.parameters["properties"],
        json!({"days": {"type": "integer"}})
    );
}

#[test]
fn a_self_referencing_ref_terminates_with_a_note() {
    let schema = json!({
        "type": "object",
        "properties": {"tree": {"$ref": "#/$defs/Node"}},
        "$defs": {"Node": {"type": "object", "properties": {
            "name": {"type": "string"},
            "children": {"type": "array", "items": {"$ref": "#/$defs/Node"}}
        }}}
    });
    let m = manifest("GET", "https://api.example.org/tree");
    let resolved = resolve_input_schema(schema.to_string().as_bytes(), DOC_URL, &m).unwrap();
    assert_eq!(
        resolved.parameters["properties"]["tree"]["properties"]["children"]["items"],
        json!({"type": "object",
               "description": "recursive #/$defs/Node: same shape as its parent, not expanded"})
    );
    assert_eq!(
        resolved.notes,
        ["$ref \"#/$defs/Node\" refers to itself; cut where it recurs"]
    );
    // References that multiply (each level used twice, twenty levels deep)
    // are cut at the node cap instead of growing to a million nodes.
    let mut defs = serde_json::Map::new();
    for i in 0..20 {
        let next = json!({"$ref": format!("#/$defs/L{}", i + 1)});
        defs.insert(
            format!("L{i}"),
            json!({"type": "object", "properties": {"a": next, "b": next}}),
        );
    }
    defs.insert("L20".into(), json!({"type": "string"}));
    let bomb =
        json!({"type": "object", "properties": {"x": {"$ref": "#/$defs/L0"}}, "$defs": defs});
    let resolved = resolve_input_schema(bomb.to_string().as_bytes(), DOC_URL, &m).unwrap();
    assert!(
        resolved
            .notes
            .iter()
            .any(|n| n.contains("refs nested deeper than 8")),
        "{:?}",
        resolved.notes
    );
    assert!(resolved.parameters.to_string().len() < 200_000);
}

#[test]
fn bad_documents_are_refused_with_the_reason() {
    let m = manifest("GET", "https://api.example.org/run");
    let big = vec![b' '; MAX_SCHEMA_DOCUMENT_BYTES + 1];
    assert_eq!(
        resolve_input_schema(&big, DOC_URL, &m)
            .unwrap_err()
            .to_string(),
        format!(
            "schema document is {} bytes, over the {MAX_SCHEMA_DOCUMENT_BYTES}-byte cap",
            MAX_SCHEMA_DOCUMENT_BYTES + 1
        )
    );
    assert!(matches!(
        resolve_input_schema(b"openapi: 3.0.0\npaths: {}\n", DOC_URL, &m),
        Err(SchemaDocError::NotJson(_))
    ));
    assert_eq!(
        resolve_input_schema(br#"{"type": "string"}"#, DOC_URL, &m),
        Err(SchemaDocError::Unrecognised)
    );
    assert_eq!(
        resolve_input_schema(br#"{"type": "object", "properties": {}}"#, DOC_URL, &m),
        Err(SchemaDocError::NoFields)
    );
}

//! The document behind `input.schema` / `output.schema`: the spec's only
//! structured description of a capability's input is a URL to a JSON Schema
//! or an OpenAPI document. Whoever fetched it (the crawler, at index time,
//! under the manifest's own trust) hands the bytes here; this module turns
//! them into the tool's `parameters` with the same converter and limits as
//! `input.parameters` (`convert::sanitize_properties`), and records the
//! result in the manifest itself, under [`RESOLVED_SCHEMA_KEY`] of `input`
//! and `output`, so it is stored, cached and refreshed with the manifest.
//!
//! Accepted documents:
//! - a JSON Schema: an object with `properties` (and `type` absent or
//!   `object`);
//! - an OpenAPI 3 document: the operation whose server URL, path template
//!   and method match the manifest's `invoke.url` and `invoke.method`; its
//!   query and path `parameters` and its `application/json` request body
//!   become properties.
//!
//! Local `$ref`s (`#/components/schemas/X`, `#/$defs/X`, any `#/` pointer)
//! are resolved; a reference to itself (directly or through others) is cut
//! where it recurs, deeper nesting than [`MAX_REF_DEPTH`] expansions is cut
//! too, and [`MAX_EXPANDED_NODES`] bounds the whole expansion (references
//! used many times over can otherwise multiply). Each cut leaves a note, and
//! a description on the cut property saying why. External references are
//! not followed (another fetch, under nobody's rules).
//!
//! Only `http(s)` schema URLs are fetched, for local manifests too: a
//! `file:` URL would let a manifest read any file the daemon can.

use std::collections::HashSet;

use serde_json::{json, Map, Value};

use super::convert::sanitize_properties;
use super::recorded::MAX_OUTPUT_FIELDS;
pub use super::recorded::{schema_errors, RESOLVED_SCHEMA_KEY};
use crate::model::Manifest;

/// Largest schema document read (OpenAPI documents of whole services are
/// often a few hundred KiB; the converted operation is far smaller).
pub const MAX_SCHEMA_DOCUMENT_BYTES: usize = 1024 * 1024;

/// Deepest nesting accepted in a schema document, checked before a tree is built.
pub const MAX_SCHEMA_DOCUMENT_DEPTH: usize = 64;

/// How many `$ref`s may be expanded one inside another.
pub const MAX_REF_DEPTH: usize = 8;

/// How many schema nodes one resolution may produce.
pub const MAX_EXPANDED_NODES: usize = 5_000;

/// Why a schema document gave no parameters.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SchemaDocError {
    /// Over [`MAX_SCHEMA_DOCUMENT_BYTES`].
    #[error("schema document is {size} bytes, over the {max}-byte cap")]
    TooLarge {
        /// Its size.
        size: usize,
        /// The cap.
        max: usize,
    },
    /// Nested deeper than [`MAX_SCHEMA_DOCUMENT_DEPTH`].
    #[error("schema document nests deeper than {max} levels")]
    TooDeep {
        /// The cap.
        max: usize,
    },
    /// Not JSON (YAML OpenAPI documents are not read).
    #[error("schema document is not JSON: {0}")]
    NotJson(String),
    /// Neither an object JSON Schema with `properties` nor OpenAPI 3.
    #[error("schema document is neither a JSON Schema with properties nor an OpenAPI 3 document")]
    Unrecognised,
    /// An OpenAPI document without an operation for the manifest's call.
    #[error("the OpenAPI document has no {method} operation for {url}")]
    NoOperation {
        /// `invoke.method`, upper case.
        method: String,
        /// `invoke.url` without its query.
        url: String,
    },
    /// The operation or schema declares no input fields.
    #[error("the schema declares no input fields")]
    NoFields,
}

/// The parameters a schema document gives a manifest's tool.
#[derive(Debug, Clone, PartialEq)]
pub struct ResolvedInput {
    /// `{"type":"object","properties":{..},"required":[..]}`, converted.
    pub parameters: Value,
    /// What was cut or skipped (self references, depth, external `$ref`s).
    pub notes: Vec<String>,
}

/// The tool parameters `document` (fetched from `document_url`) gives
/// `manifest`'s input.
pub fn resolve_input_schema(
    document: &[u8],
    document_url: &str,
    manifest: &Manifest,
) -> Result<ResolvedInput, SchemaDocError> {
    let doc = read_document(document)?;
    let mut refs = Refs::new(&doc);
    let (props, required) = if is_openapi(&doc) {
        openapi_input(&doc, document_url, manifest, &mut refs)?
    } else {
        let schema = refs.expand(&doc);
        object_properties(&schema).ok_or(SchemaDocError::Unrecognised)?
    };
    if props.is_empty() {
        return Err(SchemaDocError::NoFields);
    }
    let (props, required) = sanitize_properties(&props, Some(&Value::Array(required)), 1);
    Ok(ResolvedInput {
        parameters: json!({"type": "object", "properties": props, "required": required}),
        notes: refs.notes,
    })
}

/// The top-level field names of the result `document` describes (a JSON
/// Schema object, or an OpenAPI operation's `200`/`201` JSON response).
pub fn resolve_output_fields(
    document: &[u8],
    document_url: &str,
    manifest: &Manifest,
) -> Result<Vec<String>, SchemaDocError> {
    let doc = read_document(document)?;
    let mut refs = Refs::new(&doc);
    let schema = if is_openapi(&doc) {
        let op = find_operation(&doc, document_url, manifest)?;
        let responses = op.get("responses").and_then(Value::as_object);
        let body = ["200", "201", "2XX", "default"]
            .iter()
            .find_map(|code| responses.and_then(|r| r.get(*code)))
            .map(|r| refs.expand(r))
            .and_then(|r| json_media_schema(&r).cloned())
            .ok_or(SchemaDocError::NoFields)?;
        refs.expand(&body)
    } else {
        refs.expand(&doc)
    };
    // A list of records is described by its items' fields.
    let schema = match schema.get("items") {
        Some(items) if schema.get("type") == Some(&json!("array")) => items.clone(),
        _ => schema,
    };
    let (props, _) = object_properties(&schema).ok_or(SchemaDocError::Unrecognised)?;
    if props.is_empty() {
        return Err(SchemaDocError::NoFields);
    }
    Ok(props.keys().take(MAX_OUTPUT_FIELDS).cloned().collect())
}

/// What the fetch of one schema URL left in the manifest (see
/// [`RESOLVED_SCHEMA_KEY`]): `{"url", "parameters"|"fields"|"error", "notes",
/// "etag", "last_modified"}`. `parameters` is kept as a JSON string so the
/// manifest's depth cap is not spent on the schema's nesting.
pub fn resolved_record(url: &str, result: Result<Value, String>, notes: &[String]) -> Value {
    let mut record = Map::new();
    record.insert("url".into(), Value::String(url.to_string()));
    match result {
        Ok(Value::Array(fields)) => {
            record.insert("fields".into(), Value::Array(fields));
        }
        Ok(parameters) => {
            record.insert("parameters".into(), Value::String(parameters.to_string()));
        }
        Err(error) => {
            record.insert("error".into(), Value::String(error));
        }
    }
    if !notes.is_empty() {
        record.insert("notes".into(), json!(notes));
    }
    Value::Object(record)
}

fn read_document(bytes: &[u8]) -> Result<Value, SchemaDocError> {
    if bytes.len() > MAX_SCHEMA_DOCUMENT_BYTES {
        return Err(SchemaDocError::TooLarge {
            size: bytes.len(),
            max: MAX_SCHEMA_DOCUMENT_BYTES,
        });
    }
    let body = bytes.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(bytes);
    if crate::parse::find_too_deep(body, MAX_SCHEMA_DOCUMENT_DEPTH).is_some() {
        return Err(SchemaDocError::TooDeep {
            max: MAX_SCHEMA_DOCUMENT_DEPTH,
        });
    }
    serde_json::from_slice(body).map_err(|e| SchemaDocError::NotJson(e.to_string()))
}

fn is_openapi(doc: &Value) -> bool {
    doc.get("openapi")
        .and_then(Value::as_str)
        .is_some_and(|v| v.starts_with("3."))
        && doc.get("paths").is_some_and(Value::is_object)
}

/// `properties` and `required` of an object schema (`type` absent or `object`).
fn object_properties(schema: &Value) -> Option<(Map<String, Value>, Vec<Value>)> {
    let is_object_type = match schema.get("type") {
        None => true,
        Some(Value::String(t)) => t == "object",
        Some(_) => false,
    };
    let props = schema.get("properties")?.as_object()?;
    if !is_object_type {
        return None;
    }
    let required = schema
        .get("required")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    Some((props.clone(), required))
}

/// The operation matching the manifest's call: a server URL (absolute, or
/// relative to the document's own URL; none means the document's origin)
/// that prefixes `invoke.url`, then a path template matching the rest
/// segment by segment (`{name}` matches one segment), then the method.
fn find_operation<'d>(
    doc: &'d Value,
    document_url: &str,
    manifest: &Manifest,
) -> Result<&'d Value, SchemaDocError> {
    let method = manifest.invoke.method.trim().to_ascii_lowercase();
    let no_operation = || SchemaDocError::NoOperation {
        method: method.to_ascii_uppercase(),
        url: without_query(manifest.invoke.url.trim()).to_string(),
    };
    let invoke = url::Url::parse(manifest.invoke.url.trim()).map_err(|_| no_operation())?;
    let base = url::Url::parse(document_url).ok();
    let servers: Vec<String> = match doc.get("servers").and_then(Value::as_array) {
        Some(list) if !list.is_empty() => list.iter().filter_map(with_default_variables).collect(),
        _ => vec!["/".to_string()],
    };
    let paths = doc.get("paths").and_then(Value::as_object);
    for server in servers {
        let server = match (url::Url::parse(&server), &base) {
            (Ok(abs), _) => abs,
            (Err(_), Some(base)) => match base.join(&server) {
                Ok(abs) => abs,
                Err(_) => continue,
            },
            (Err(_), None) => continue,
        };
        if server.scheme() != invoke.scheme()
            || server.host_str() != invoke.host_str()
            || server.port_or_known_default() != invoke.port_or_known_default()
        {
            continue;
        }
        let prefix = server.path().trim_end_matches('/');
        let Some(rest) = invoke.path().strip_prefix(prefix) else {
            continue;
        };
        if !rest.is_empty() && !rest.starts_with('/') {
            continue;
        }
        for (template, item) in paths.into_iter().flatten() {
            if path_matches(template, rest) {
                if let Some(op) = item.get(&method) {
                    return Ok(op);
                }
            }
        }
    }
    Err(no_operation())
}

fn without_query(url: &str) -> &str {
    url.split(['?', '#']).next().unwrap_or(url)
}

/// A server object's URL with its `{variables}` replaced by their defaults.
fn with_default_variables(server: &Value) -> Option<String> {
    let mut url = server.get("url")?.as_str()?.to_string();
    if let Some(vars) = server.get("variables").and_then(Value::as_object) {
        for (name, var) in vars {
            if let Some(default) = var.get("default").and_then(Value::as_str) {
                url = url.replace(&format!("{{{name}}}"), default);
            }
        }
    }
    Some(url)
}

fn path_matches(template: &str, path: &str) -> bool {
    let template: Vec<&str> = template.trim_matches('/').split('/').collect();
    let path: Vec<&str> = path.trim_matches('/').split('/').collect();
    template.len() == path.len()
        && template
            .iter()
            .zip(&path)
            .all(|(t, p)| (t.starts_with('{') && t.ends_with('}') && !p.is_empty()) || t == p)
}

/// An OpenAPI operation's input: its query and path parameters (path-item
/// ones too, the operation's winning on a clash) and the properties of its
/// JSON request body.
fn openapi_input(
    doc: &Value,
    document_url: &str,
    manifest: &Manifest,
    refs: &mut Refs<'_>,
) -> Result<(Map<String, Value>, Vec<Value>), SchemaDocError> {
    let op = find_operation(doc, document_url, manifest)?;
    let mut props = Map::new();
    let mut required = Vec::new();
    let path_item_params = doc
        .get("paths")
        .and_then(Value::as_object)
        .and_then(|paths| {
            paths.values().find(|item| {
                item.as_object()
                    .is_some_and(|o| o.values().any(|v| v == op))
            })
        })
        .and_then(|item| item.get("parameters"));
    for list in [op.get("parameters"), path_item_params]
        .into_iter()
        .flatten()
    {
        for param in list.as_array().into_iter().flatten() {
            let param = refs.expand(param);
            let location = param.get("in").and_then(Value::as_str).unwrap_or("");
            if !matches!(location, "query" | "path") {
                continue;
            }
            let Some(name) = param.get("name").and_then(Value::as_str) else {
                continue;
            };
            if props.contains_key(name) {
                continue;
            }
            let mut schema = param
                .get("schema")
                .map(|s| refs.expand(s))
                .unwrap_or_else(|| json!({"type": "string"}));
            if let (Some(desc), Value::Object(s)) = (param.get("description"), &mut schema) {
                s.entry("description").or_insert_with(|| desc.clone());
            }
            let is_required =
                location == "path" || param.get("required").and_then(Value::as_bool) == Some(true);
            if is_required {
                required.push(Value::String(name.to_string()));
            }
            props.insert(name.to_string(), schema);
        }
    }
    if let Some(body) = op.get("requestBody") {
        let body = refs.expand(body);
        if let Some(schema) = json_media_schema(&body) {
            let schema = refs.expand(schema);
            if let Some((body_props, body_required)) = object_properties(&schema) {
                for (name, schema) in body_props {
                    if props.contains_key(&name) {
                        refs.notes.push(format!(
                            "request body field {name:?} has the name of a parameter; the parameter is kept"
                        ));
                        continue;
                    }
                    props.insert(name, schema);
                }
                required.extend(body_required);
            }
        }
    }
    Ok((props, required))
}

/// The schema of the `application/json` (or `*/*+json`) entry of `content`.
fn json_media_schema(holder: &Value) -> Option<&Value> {
    let content = holder.get("content")?.as_object()?;
    content
        .iter()
        .find(|(media, _)| {
            let media = media.to_ascii_lowercase();
            media.starts_with("application/json") || media.contains("+json")
        })
        .and_then(|(_, entry)| entry.get("schema"))
}

/// Expands local `$ref`s with the cuts the module docs describe.
struct Refs<'d> {
    doc: &'d Value,
    /// The references being expanded, outermost first.
    stack: Vec<String>,
    nodes: usize,
    notes: Vec<String>,
    noted: HashSet<String>,
}

impl<'d> Refs<'d> {
    fn new(doc: &'d Value) -> Self {
        Self {
            doc,
            stack: Vec::new(),
            nodes: 0,
            notes: Vec::new(),
            noted: HashSet::new(),
        }
    }

    fn note(&mut self, note: String) {
        if self.noted.insert(note.clone()) {
            self.notes.push(note);
        }
    }

    /// `v` with every local reference replaced by what it points at.
    fn expand(&mut self, v: &Value) -> Value {
        self.nodes += 1;
        if self.nodes > MAX_EXPANDED_NODES {
            self.note(format!(
                "schema cut after {MAX_EXPANDED_NODES} nodes (references multiply it)"
            ));
            return json!({"type": "string"});
        }
        match v {
            Value::Object(obj) => {
                if let Some(Value::String(reference)) = obj.get("$ref") {
                    return self.follow(reference);
                }
                Value::Object(
                    obj.iter()
                        .map(|(k, child)| (k.clone(), self.expand(child)))
                        .collect(),
                )
            }
            Value::Array(items) => Value::Array(items.iter().map(|i| self.expand(i)).collect()),
            other => other.clone(),
        }
    }

    fn follow(&mut self, reference: &str) -> Value {
        let Some(pointer) = reference.strip_prefix('#') else {
            self.note(format!("external $ref {reference:?} not followed"));
            return json!({"type": "object", "description": format!("see {reference}")});
        };
        if self.stack.iter().any(|r| r == reference) {
            self.note(format!(
                "$ref {reference:?} refers to itself; cut where it recurs"
            ));
            return json!({
                "type": "object",
                "description": format!("recursive {reference}: same shape as its parent, not expanded"),
            });
        }
        if self.stack.len() >= MAX_REF_DEPTH {
            self.note(format!(
                "$refs nested deeper than {MAX_REF_DEPTH}; cut at {reference:?}"
            ));
            return json!({"type": "object", "description": format!("{reference}, not expanded (too deep)")});
        }
        let Some(target) = self.doc.pointer(pointer) else {
            self.note(format!("$ref {reference:?} points at nothing"));
            return json!({"type": "string"});
        };
        self.stack.push(reference.to_string());
        let out = self.expand(target);
        self.stack.pop();
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn manifest(method: &str, url: &str) -> Manifest {
        let doc = json!({"oap": "1.0", "name": "weather", "description": "Weather.",
            "invoke": {"method": method, "url": url}});
        crate::parse(doc.to_string().as_bytes()).unwrap().manifest
    }

    #[test]
    fn path_templates_match_one_segment_per_variable() {
        assert!(path_matches("/weather/{city}", "/weather/paris"));
        assert!(path_matches("/weather", "/weather/"));
        assert!(!path_matches("/weather/{city}", "/weather"));
        assert!(!path_matches("/weather/{city}", "/weather/a/b"));
    }

    #[test]
    fn a_bom_and_a_deep_document_are_handled_before_parsing() {
        let deep = format!("{}{}", "[".repeat(100), "]".repeat(100));
        let m = manifest("GET", "https://api.example.org/run");
        assert_eq!(
            resolve_input_schema(deep.as_bytes(), "https://x.example/s.json", &m),
            Err(SchemaDocError::TooDeep {
                max: MAX_SCHEMA_DOCUMENT_DEPTH
            })
        );
    }
}

//! What discovery indexes, plus id and change-detection helpers.

use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::model::Manifest;

/// `text` cut to at most `max` bytes, on a char boundary: the one way the
/// manifest's and discovery's text caps cut.
pub fn clip_bytes(text: &str, max: usize) -> &str {
    // The standard library finds the boundary; `get` cannot fail there.
    text.get(..text.floor_char_boundary(max)).unwrap_or(text)
}

/// The text of a manifest that discovery embeds and BM25-indexes, split by
/// field so the ranker can weight them (name and description matter most;
/// the reference embedded only `description`, which misses e.g. tags and
/// parameter names). All strings are copied verbatim from the manifest
/// except example inputs, which are rendered as text.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SearchFields {
    /// `name`.
    pub name: String,
    /// `description`.
    pub description: String,
    /// `tags`, in order.
    pub tags: Vec<String>,
    /// `input.description`, if present and non-blank.
    pub input_description: Option<String>,
    /// `output.description`, if present and non-blank.
    pub output_description: Option<String>,
    /// `usage`, if present and non-blank.
    pub usage: Option<String>,
    /// `input.parameters` as (name, description) in document order; the
    /// description is "" when absent.
    pub parameters: Vec<(String, String)>,
    /// Each example's `input`: strings as-is, objects as `key: value, ...`
    /// (see [`render_compact`]). Examples without input are skipped.
    pub example_inputs: Vec<String>,
    /// Each example's `description`, where present and non-blank.
    pub example_descriptions: Vec<String>,
}

fn non_blank(s: Option<&String>) -> Option<String> {
    s.filter(|s| !s.trim().is_empty()).cloned()
}

impl Manifest {
    /// Extract the searchable text (see [`SearchFields`]).
    pub fn search_fields(&self) -> SearchFields {
        let input = self.input.as_ref();
        SearchFields {
            name: self.name.clone(),
            description: self.description.clone(),
            tags: self.tags.clone(),
            input_description: non_blank(input.and_then(|i| i.description.as_ref())),
            output_description: non_blank(
                self.output.as_ref().and_then(|o| o.description.as_ref()),
            ),
            usage: non_blank(self.usage.as_ref()),
            parameters: self
                .input_parameters()
                .map(|ps| {
                    ps.iter()
                        .map(|(k, p)| (k.to_string(), p.description.clone().unwrap_or_default()))
                        .collect()
                })
                .unwrap_or_default(),
            example_inputs: self
                .examples
                .iter()
                .filter_map(|e| e.input.as_ref())
                .map(render_compact)
                .filter(|s| !s.is_empty())
                .collect(),
            example_descriptions: self
                .examples
                .iter()
                .filter_map(|e| non_blank(e.description.as_ref()))
                .collect(),
        }
    }
}

/// Render a JSON value as compact, tokenizer-friendly text: strings without
/// quotes, objects as `key: value, key: value`, arrays as `[a, b]`, nested
/// objects as `{key: value}`. For example
/// `{"intent":"stories","geo":"portland","limit":10}` becomes
/// `intent: stories, geo: portland, limit: 10`.
pub fn render_compact(v: &Value) -> String {
    match v {
        Value::Object(m) => render_object(m),
        other => render_inner(other),
    }
}

fn render_object(m: &serde_json::Map<String, Value>) -> String {
    m.iter()
        .map(|(k, v)| format!("{k}: {}", render_inner(v)))
        .collect::<Vec<_>>()
        .join(", ")
}

fn render_inner(v: &Value) -> String {
    match v {
        Value::Null => "null".to_string(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::String(s) => s.clone(),
        Value::Array(a) => format!(
            "[{}]",
            a.iter().map(render_inner).collect::<Vec<_>>().join(", ")
        ),
        Value::Object(m) => format!("{{{}}}", render_object(m)),
    }
}

/// Stable, filesystem- and URL-safe id fragment for a manifest name (the
/// daemon uses `"local/" + slug(name)`): ASCII letters lowercased, digits
/// kept, every run of anything else (including non-ASCII letters) becomes
/// one `-`, and leading/trailing `-` are trimmed. An empty result becomes
/// `"unnamed"` so an id is never empty. Matches the reference's tool-name
/// slugging except that it uses `-` instead of `_`.
pub fn slug(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    let mut pending_dash = false;
    for c in name.chars() {
        if c.is_ascii_alphanumeric() {
            if pending_dash && !out.is_empty() {
                out.push('-');
            }
            pending_dash = false;
            out.push(c.to_ascii_lowercase());
        } else {
            pending_dash = true;
        }
    }
    if out.is_empty() {
        "unnamed".to_string()
    } else {
        out
    }
}

/// SHA-256 of the raw document bytes, lowercase hex. Used to detect changed
/// manifests (re-embed only what changed); hash the bytes as read, before
/// any parsing, so formatting changes count as changes.
pub fn content_hash(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

#[cfg(test)]
mod clip_tests {
    use super::clip_bytes;

    #[test]
    fn clipping_stops_before_a_split_character() {
        assert_eq!(clip_bytes("héllo", 2), "h");
        assert_eq!(clip_bytes("héllo", 3), "hé");
        assert_eq!(clip_bytes("abc", 10), "abc");
        assert_eq!(clip_bytes("abc", 0), "");
    }
}

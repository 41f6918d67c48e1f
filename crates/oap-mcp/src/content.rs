//! Turning `tools/list` and `tools/call` answers into bounded, plain data.

use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

/// The text of a `tools/call` result: text blocks joined by newlines,
/// other blocks described in one line, cut to `max_chars` with a note.
pub fn result_text(result: &Value, max_chars: usize) -> String {
    let mut parts: Vec<String> = Vec::new();
    if let Some(blocks) = result.get("content").and_then(Value::as_array) {
        for block in blocks {
            parts.push(describe_block(block));
        }
    }
    if parts.is_empty() {
        if let Some(structured) = result.get("structuredContent") {
            parts.push(structured.to_string());
        }
    }
    let text = if parts.is_empty() {
        "(no content)".to_string()
    } else {
        parts.join("\n")
    };
    cap_chars(text, max_chars)
}

fn describe_block(block: &Value) -> String {
    let kind = block.get("type").and_then(Value::as_str).unwrap_or("");
    let s = |k: &str| block.get(k).and_then(Value::as_str);
    match kind {
        "text" => s("text").unwrap_or("").to_string(),
        "image" | "audio" => format!(
            "[{kind}: {}, {} bytes]",
            s("mimeType").unwrap_or("unknown type"),
            base64_len(s("data").unwrap_or(""))
        ),
        "resource" => {
            let r = block.get("resource").cloned().unwrap_or(Value::Null);
            let uri = r.get("uri").and_then(Value::as_str).unwrap_or("?");
            let mime = r
                .get("mimeType")
                .and_then(Value::as_str)
                .unwrap_or("unknown type");
            match (
                r.get("text").and_then(Value::as_str),
                r.get("blob").and_then(Value::as_str),
            ) {
                (Some(text), _) => format!("[resource: {uri}, {mime}]\n{text}"),
                (None, Some(blob)) => {
                    format!("[resource: {uri}, {mime}, {} bytes]", base64_len(blob))
                }
                _ => format!("[resource: {uri}, {mime}]"),
            }
        }
        "resource_link" => format!(
            "[resource link: {}{}]",
            s("uri").unwrap_or("?"),
            s("mimeType").map(|m| format!(", {m}")).unwrap_or_default()
        ),
        other => format!(
            "[{} content]",
            if other.is_empty() { "unknown" } else { other }
        ),
    }
}

/// Decoded size of base64 text (without decoding it).
fn base64_len(data: &str) -> usize {
    let trimmed = data.trim_end_matches('=');
    trimmed.len() * 3 / 4
}

/// Cut `text` to `max` characters with a visible note.
pub fn cap_chars(text: String, max: usize) -> String {
    oap_exec::truncate_chars(text, max)
}

/// The canonical JSON of a value: object keys sorted at every level.
pub fn canonical(value: &Value) -> Value {
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            let mut out = Map::new();
            for k in keys {
                if let Some(v) = map.get(k) {
                    out.insert(k.clone(), canonical(v));
                }
            }
            Value::Object(out)
        }
        Value::Array(items) => Value::Array(items.iter().map(canonical).collect()),
        other => other.clone(),
    }
}

/// sha256 hex of the canonical JSON of `value`.
pub fn content_hash(value: &Value) -> String {
    let bytes = serde_json::to_vec(&canonical(value)).unwrap_or_default();
    hex::encode(Sha256::digest(&bytes))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn text_is_joined_and_other_content_described() {
        let r = json!({"content": [
            {"type": "text", "text": "hello"},
            {"type": "image", "mimeType": "image/png", "data": "AAAA"},
            {"type": "audio", "mimeType": "audio/wav", "data": "AAAAAA=="},
            {"type": "resource", "resource": {"uri": "file:///a", "mimeType": "text/plain", "text": "body"}},
            {"type": "resource", "resource": {"uri": "file:///b", "blob": "AAAA"}},
            {"type": "resource_link", "uri": "file:///c", "name": "c"},
            {"type": "text", "text": "bye"}
        ]});
        assert_eq!(
            result_text(&r, 1000),
            "hello\n[image: image/png, 3 bytes]\n[audio: audio/wav, 4 bytes]\n\
             [resource: file:///a, text/plain]\nbody\n[resource: file:///b, unknown type, 3 bytes]\n\
             [resource link: file:///c]\nbye"
        );
        let capped = result_text(
            &json!({"content": [{"type": "text", "text": "x".repeat(50)}]}),
            10,
        );
        assert!(
            capped.starts_with("xxxxxxxxxx") && capped.len() < 200,
            "{capped}"
        );
        assert_eq!(result_text(&json!({"content": []}), 100), "(no content)");
        assert_eq!(
            result_text(&json!({"content": [], "structuredContent": {"a": 1}}), 100),
            "{\"a\":1}"
        );
    }

    #[test]
    fn hash_ignores_key_order() {
        let a = json!({"name": "t", "inputSchema": {"type": "object", "properties": {"x": {}, "y": {}}}});
        let b = json!({"inputSchema": {"properties": {"y": {}, "x": {}}, "type": "object"}, "name": "t"});
        assert_eq!(content_hash(&a), content_hash(&b));
        assert_ne!(content_hash(&a), content_hash(&json!({"name": "u"})));
    }
}

//! OpenAI's `/v1/models` answers, as Ollama's `/v1` layer builds them from
//! its model list: the fake serves them from its scripted models.

use serde_json::{json, Value};

/// One `/v1/models` entry.
pub fn model_object(name: &str, modified_at: Option<&str>) -> Value {
    json!({
        "id": name,
        "object": "model",
        "created": modified_at.and_then(parse_rfc3339_unix).unwrap_or(0),
        "owned_by": model_namespace(name),
    })
}

/// `GET /v1/models` from an `/api/tags` answer.
pub fn models_from_tags(tags: &Value) -> Value {
    let data: Vec<Value> = tags
        .get("models")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|model| {
            let name = model
                .get("name")
                .or_else(|| model.get("model"))
                .and_then(Value::as_str)?;
            Some(model_object(
                name,
                model.get("modified_at").and_then(Value::as_str),
            ))
        })
        .collect();
    json!({"object": "list", "data": data})
}

/// The namespace part of `[host/][namespace/]model[:tag]` (`library` when
/// absent), as Ollama's `model.ParseName`.
#[allow(
    clippy::string_slice,
    reason = "every index comes from str::find, char_indices, an ASCII byte scan or a checked char boundary"
)]
fn model_namespace(name: &str) -> String {
    let without_tag = match name.rfind(':') {
        Some(colon) if !name[colon..].contains('/') => &name[..colon],
        _ => name,
    };
    let parts: Vec<&str> = without_tag.split('/').collect();
    match parts.as_slice() {
        [.., namespace, _model] if !namespace.is_empty() => (*namespace).to_string(),
        _ => "library".to_string(),
    }
}

/// Seconds since the Unix epoch of an RFC 3339 timestamp
/// (`2026-08-19T10:00:00.123456789+02:00`).
#[allow(
    clippy::string_slice,
    reason = "every index comes from str::find, char_indices, an ASCII byte scan or a checked char boundary"
)]
fn parse_rfc3339_unix(text: &str) -> Option<i64> {
    let bytes = text.as_bytes();
    if bytes.len() < 19 || bytes.get(4) != Some(&b'-') || bytes.get(7) != Some(&b'-') {
        return None;
    }
    let number = |range: std::ops::Range<usize>| -> Option<i64> {
        let part = text.get(range)?;
        part.bytes()
            .all(|b| b.is_ascii_digit())
            .then(|| part.parse().ok())?
    };
    let (year, month, day) = (number(0..4)?, number(5..7)?, number(8..10)?);
    let (hour, minute, second) = (number(11..13)?, number(14..16)?, number(17..19)?);
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) || hour > 23 || minute > 59 {
        return None;
    }
    let mut rest = &text[19..];
    if let Some(fraction) = rest.strip_prefix('.') {
        let digits = fraction.bytes().take_while(u8::is_ascii_digit).count();
        rest = &fraction[digits..];
    }
    let offset = match rest {
        "Z" | "z" => 0,
        _ => {
            let sign = match rest.as_bytes().first() {
                Some(b'+') => 1,
                Some(b'-') => -1,
                _ => return None,
            };
            let hours: i64 = rest.get(1..3)?.parse().ok()?;
            let minutes: i64 = rest.get(4..6)?.parse().ok()?;
            sign * (hours * 3600 + minutes * 60)
        }
    };
    // Days from civil (Howard Hinnant's algorithm).
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some(days * 86_400 + hour * 3600 + minute * 60 + second - offset)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn models_from_tags_lists_ids_owners_and_times() {
        let tags = json!({"models": [
            {"name": "qwen3:4b", "model": "qwen3:4b", "modified_at": "2026-08-19T10:00:00.5+02:00"},
            {"name": "jmorgan/tiny:latest", "modified_at": "1970-01-02T00:00:00Z"},
            {"name": "registry.example:5000/team/m:v1", "modified_at": "garbage"},
            {"nameless": true}
        ]});
        assert_eq!(
            models_from_tags(&tags),
            json!({"object": "list", "data": [
                {"id": "qwen3:4b", "object": "model", "created": 1_787_126_400i64, "owned_by": "library"},
                {"id": "jmorgan/tiny:latest", "object": "model", "created": 86_400, "owned_by": "jmorgan"},
                {"id": "registry.example:5000/team/m:v1", "object": "model", "created": 0, "owned_by": "team"}
            ]})
        );
        assert_eq!(
            models_from_tags(&json!({})),
            json!({"object": "list", "data": []})
        );
    }
}

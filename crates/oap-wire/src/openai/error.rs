//! Errors in OpenAI's shape: a request that cannot be translated
//! ([`WireError`]) and the `{"error": {...}}` body OpenAI clients expect.

use serde_json::{json, Value};

/// Why an OpenAI request could not be translated. Every variant is a client
/// error (HTTP 400); the message names the offending field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    /// A required field (named, e.g. `model`) is absent.
    #[error("{0} is required")]
    Missing(String),
    /// `messages` is an empty array; the wording is OpenAI's own.
    #[error("[] is too short - 'messages'")]
    EmptyMessages,
    /// A field has the wrong JSON type.
    #[error("invalid type for '{field}': expected {expected}, got {got}")]
    Type {
        /// The field's path in the request (`messages[2].content`).
        field: String,
        /// What the field must be, with its article ("a string").
        expected: &'static str,
        /// What the client sent, with its article ("a number").
        got: &'static str,
    },
    /// A field has the right type but a value oapd cannot translate.
    #[error("invalid value for '{field}': {message}")]
    Invalid {
        /// The field's path in the request.
        field: String,
        /// What is wrong with the value.
        message: String,
    },
}

impl WireError {
    /// The request field at fault, for OpenAI's `error.param`.
    pub fn field(&self) -> &str {
        match self {
            WireError::Missing(field)
            | WireError::Type { field, .. }
            | WireError::Invalid { field, .. } => field,
            WireError::EmptyMessages => "messages",
        }
    }

    /// This error as an OpenAI error body (status 400).
    pub fn to_openai(&self) -> Value {
        let mut body = openai_error(400, &self.to_string());
        body["error"]["param"] = Value::from(self.field());
        body
    }
}

pub(super) fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

pub(super) fn wrong_type(
    field: impl Into<String>,
    expected: &'static str,
    value: &Value,
) -> WireError {
    WireError::Type {
        field: field.into(),
        expected,
        got: type_name(value),
    }
}

pub(super) fn invalid(field: impl Into<String>, message: impl Into<String>) -> WireError {
    WireError::Invalid {
        field: field.into(),
        message: message.into(),
    }
}

/// An error body in OpenAI's shape; the `type` follows the status.
pub fn openai_error(status: u16, message: &str) -> Value {
    let kind = match status {
        400 | 413 | 422 => "invalid_request_error",
        401 => "authentication_error",
        403 => "permission_error",
        404 => "not_found_error",
        429 => "rate_limit_error",
        _ => "api_error",
    };
    json!({"error": {"message": message, "type": kind, "param": null, "code": null}})
}

/// An Ollama error answer (`{"error": "..."}` or any other body) in
/// OpenAI's shape.
pub fn openai_error_from_ollama(status: u16, body: &[u8]) -> Value {
    let message = serde_json::from_slice::<Value>(body)
        .ok()
        .and_then(|v| v.get("error").and_then(Value::as_str).map(str::to_string))
        .unwrap_or_else(|| String::from_utf8_lossy(body).trim().to_string());
    openai_error(status, &message)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_shapes() {
        assert_eq!(
            openai_error(404, "model \"x\" not found"),
            json!({"error": {"message": "model \"x\" not found", "type": "not_found_error", "param": null, "code": null}})
        );
        assert_eq!(
            openai_error(400, "bad")["error"]["type"],
            json!("invalid_request_error")
        );
        assert_eq!(
            openai_error(500, "boom")["error"]["type"],
            json!("api_error")
        );
        assert_eq!(
            openai_error_from_ollama(400, br#"{"error":"llama3 does not support tools"}"#)["error"]
                ["message"],
            json!("llama3 does not support tools")
        );
        assert_eq!(
            openai_error_from_ollama(502, b"bad gateway\n")["error"]["message"],
            json!("bad gateway")
        );
    }
}

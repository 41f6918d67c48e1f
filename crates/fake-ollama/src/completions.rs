//! OpenAI's `/v1/completions` and `/v1/embeddings` as Ollama's `/v1` layer
//! answers them (`openai/openai.go`): the legacy text completion (an
//! `/api/generate` underneath) and embeddings, floats or base64 of
//! little-endian `f32` when `encoding_format` is `base64` (the `openai`
//! Python client asks for that by default).

use serde_json::{json, Map, Value};

use crate::render;

/// Why a request was refused: the status and OpenAI's error object.
pub type Refused = (u16, Value);

fn invalid(message: &str) -> Refused {
    (400, oap_wire::openai::openai_error(400, message))
}

/// The model named by an OpenAI request body.
pub fn model_of(body: &Map<String, Value>) -> Result<String, Refused> {
    match body.get("model") {
        Some(Value::String(model)) if !model.is_empty() => Ok(model.clone()),
        _ => Err(invalid("model is required")),
    }
}

/// A model that is not there, as Ollama's `/v1` layer says it.
pub fn model_not_found(model: &str) -> Refused {
    (
        404,
        oap_wire::openai::openai_error(
            404,
            &format!("model \"{model}\" not found, try pulling it first"),
        ),
    )
}

/// The `input` of an embeddings request as texts.
fn inputs(body: &Map<String, Value>) -> Result<Vec<String>, Refused> {
    let texts = match body.get("input") {
        Some(Value::String(text)) => vec![text.clone()],
        Some(Value::Array(items)) if !items.is_empty() => items
            .iter()
            .map(|item| item.as_str().map(str::to_string))
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| invalid("invalid input type"))?,
        _ => return Err(invalid("invalid input")),
    };
    Ok(texts)
}

/// `POST /v1/embeddings` for a model with `dims` dimensions.
pub fn embeddings(body: &Map<String, Value>, model: &str, dims: usize) -> Result<Value, Refused> {
    let texts = inputs(body)?;
    let base64 = match body.get("encoding_format") {
        None | Some(Value::Null) => false,
        Some(Value::String(format)) if format == "float" => false,
        Some(Value::String(format)) if format == "base64" => true,
        Some(_) => {
            return Err(invalid(
                "invalid encoding_format; must be \"float\" or \"base64\"",
            ))
        }
    };
    let data: Vec<Value> = texts
        .iter()
        .enumerate()
        .map(|(index, text)| {
            let vector = render::embedding(text, dims);
            let embedding = if base64 {
                let bytes: Vec<u8> = vector
                    .iter()
                    .flat_map(|v| (*v as f32).to_le_bytes())
                    .collect();
                Value::String(encode_base64(&bytes))
            } else {
                json!(vector)
            };
            json!({"object": "embedding", "embedding": embedding, "index": index})
        })
        .collect();
    let tokens: usize = texts.iter().map(|t| t.len() / 4 + 1).sum();
    Ok(json!({
        "object": "list",
        "data": data,
        "model": model,
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    }))
}

/// `POST /v1/completions`: the whole answer (`stream: false`), or its SSE
/// events ending in `data: [DONE]` (`stream: true`).
pub fn completion(
    body: &Map<String, Value>,
    model: &str,
    reply: &str,
    created: u64,
) -> Result<Completion, Refused> {
    let prompt = match body.get("prompt") {
        Some(Value::String(prompt)) => prompt.clone(),
        Some(Value::Array(items)) if items.len() == 1 => items[0]
            .as_str()
            .map(str::to_string)
            .ok_or_else(|| invalid("invalid type for 'prompt' field"))?,
        Some(Value::Array(_)) => return Err(invalid("invalid size of 'prompt' field")),
        _ => return Err(invalid("'prompt' is required")),
    };
    let stream = body.get("stream").and_then(Value::as_bool).unwrap_or(false);
    let id = format!("cmpl-{}", created % 1000);
    let prompt_tokens = prompt.len() / 4 + 1;
    let pieces = render::split_words(reply);
    let completion_tokens = pieces.len();
    let usage = json!({
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    });
    if !stream {
        return Ok(Completion::Whole(json!({
            "id": id,
            "object": "text_completion",
            "created": created,
            "model": model,
            "system_fingerprint": "fp_ollama",
            "choices": [{"text": reply, "index": 0, "finish_reason": "stop"}],
            "usage": usage,
        })));
    }
    let chunk = |text: &str, finish: Value| {
        json!({
            "id": id,
            "object": "text_completion",
            "created": created,
            "model": model,
            "system_fingerprint": "fp_ollama",
            "choices": [{"text": text, "index": 0, "finish_reason": finish}],
        })
    };
    let mut events = String::new();
    for piece in &pieces {
        events.push_str(&format!("data: {}\n\n", chunk(piece, Value::Null)));
    }
    events.push_str(&format!("data: {}\n\n", chunk("", json!("stop"))));
    events.push_str("data: [DONE]\n\n");
    Ok(Completion::Events(events))
}

/// A `/v1/completions` answer.
pub enum Completion {
    /// `stream: false`: one JSON object.
    Whole(Value),
    /// `stream: true`: the `text/event-stream` body.
    Events(String),
}

/// Standard base64 with padding.
fn encode_base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for (i, shift) in [18u32, 12, 6, 0].into_iter().enumerate() {
            if i <= chunk.len() {
                out.push(char::from(ALPHABET[((n >> shift) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::encode_base64;

    #[test]
    fn base64_matches_the_standard_alphabet_and_padding() {
        assert_eq!(encode_base64(b""), "");
        assert_eq!(encode_base64(b"f"), "Zg==");
        assert_eq!(encode_base64(b"fo"), "Zm8=");
        assert_eq!(encode_base64(b"foo"), "Zm9v");
        assert_eq!(encode_base64(b"foobar"), "Zm9vYmFy");
        assert_eq!(encode_base64(&[0xff, 0xfe]), "//4=");
    }
}

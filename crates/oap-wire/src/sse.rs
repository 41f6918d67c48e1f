//! Server-sent events framing, as OpenAI's streaming endpoints use it:
//! every event is one `data: <payload>\n\n`, and the stream ends with
//! `data: [DONE]\n\n`.

use serde_json::Value;

/// The event that ends an OpenAI stream.
pub const DONE: &[u8] = b"data: [DONE]\n\n";

/// One `data: {json}\n\n` event.
pub fn data(value: &Value) -> Vec<u8> {
    let json = value.to_string();
    let mut event = Vec::with_capacity(json.len() + 8);
    event.extend_from_slice(b"data: ");
    event.extend_from_slice(json.as_bytes());
    event.extend_from_slice(b"\n\n");
    event
}

/// Splits an SSE byte stream into the `data` payloads of its events,
/// whatever the chunk boundaries. Several `data:` lines in one event are
/// joined with `\n`; `event:`, `id:`, `retry:` and comment lines are
/// skipped. Meant for tests and for reading an upstream OpenAI stream.
#[derive(Debug, Default)]
pub struct SseDecoder {
    line: Vec<u8>,
    data: Option<String>,
}

impl SseDecoder {
    /// A decoder at the start of a stream.
    pub fn new() -> Self {
        Self::default()
    }

    /// Feeds bytes; returns the payloads of the events they complete.
    pub fn push(&mut self, bytes: &[u8]) -> Vec<String> {
        let mut events = Vec::new();
        for &byte in bytes {
            if byte != b'\n' {
                self.line.push(byte);
                continue;
            }
            let mut line = std::mem::take(&mut self.line);
            if line.last() == Some(&b'\r') {
                line.pop();
            }
            if line.is_empty() {
                if let Some(data) = self.data.take() {
                    events.push(data);
                }
                continue;
            }
            let line = String::from_utf8_lossy(&line);
            if let Some(rest) = line.strip_prefix("data:") {
                let rest = rest.strip_prefix(' ').unwrap_or(rest);
                match &mut self.data {
                    Some(data) => {
                        data.push('\n');
                        data.push_str(rest);
                    }
                    None => self.data = Some(rest.to_string()),
                }
            }
        }
        events
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn events_are_framed_and_decoded_across_chunk_boundaries() {
        let mut bytes = data(&json!({"a": 1}));
        bytes.extend_from_slice(b": comment\nevent: x\ndata: line1\ndata: line2\n\n");
        bytes.extend_from_slice(DONE);
        assert!(bytes.starts_with(b"data: {\"a\":1}\n\n"));
        let mut decoder = SseDecoder::new();
        let mut events = Vec::new();
        for piece in bytes.chunks(3) {
            events.extend(decoder.push(piece));
        }
        assert_eq!(events, vec!["{\"a\":1}", "line1\nline2", "[DONE]"]);
    }
}

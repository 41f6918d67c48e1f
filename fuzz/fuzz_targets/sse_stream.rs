//! The SSE decoder (the same bytes in any pieces give the same events) and
//! the Responses stream translation of `/api/chat` chunks: every event it
//! writes is SSE framed JSON, and a finished stream stays finished.
#![no_main]

use libfuzzer_sys::fuzz_target;
use oap_wire::responses::{ResponseHead, ResponseStream};
use oap_wire::sse::SseDecoder;
use serde_json::Value;

/// The first byte sets the piece size; the rest is the stream.
struct Input {
    cuts: Vec<u16>,
    bytes: Vec<u8>,
}

fn decode(pieces: &[&[u8]]) -> Vec<String> {
    let mut d = SseDecoder::new();
    pieces.iter().flat_map(|p| d.push(p)).collect()
}

fuzz_target!(|data: &[u8]| {
    let [stride, bytes @ ..] = data else { return };
    let input = Input {
        cuts: oap_fuzz::cuts(bytes.len(), *stride),
        bytes: bytes.to_vec(),
    };
    let whole = decode(&[&input.bytes]);
    let split = decode(&oap_fuzz::split(&input.bytes, &input.cuts));
    assert_eq!(whole, split, "pieces changed the events");

    // Each event's payload as an `/api/chat` chunk through the Responses
    // stream; what it writes must be SSE that decodes to JSON.
    let head = ResponseHead::for_request(&serde_json::json!({"model": "m"}), "resp_1".into(), 0);
    let mut stream = ResponseStream::new(head);
    let mut out = Vec::new();
    for event in &whole {
        if let Ok(chunk) = serde_json::from_str::<Value>(event) {
            out.extend(stream.push(&chunk));
        }
    }
    out.extend(stream.finish());
    assert!(stream.is_finished());
    let mut d = SseDecoder::new();
    for event in d.push(&out) {
        if event != "[DONE]" {
            let v: Value = serde_json::from_str(&event).unwrap_or_else(|e| panic!("{e}: {event}"));
            assert!(v.get("type").is_some(), "{v}");
        }
    }
});

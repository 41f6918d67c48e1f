//! Streamed chat answers in each wire format (Ollama NDJSON, OpenAI chat
//! SSE, OpenAI Responses SSE), with keep-alives.
//!
//! A slow board can take minutes before the first token: the model loads
//! from an SD card, or the first round is a tool call that oapd runs before
//! asking the model again (those chunks are never shown to the client).
//! The loop's first event is awaited for one keep-alive interval; an error
//! in that time is a real HTTP error. After that the response starts (200)
//! and, whenever nothing was sent for an interval, a frame every client
//! parser accepts and ignores goes out: for NDJSON an empty assistant delta
//! (`"content": ""`, `"done": false`, which Ollama itself sends), for SSE a
//! comment line (`: keep-alive`). Errors after the start travel in the
//! stream as each format carries them. The loop's own deadline
//! (`ollama.chat_deadline`) bounds it all.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, StreamBody};
use hyper::body::Frame;
use hyper::header::{HeaderValue, CONTENT_TYPE};
use hyper::{Response, StatusCode};
use serde_json::{json, Value};
use tokio::sync::mpsc;

use crate::server::transport::http::{Body, BoxError};
use oap_bridge::Event;

/// One wire format's encoding of the loop's events.
pub trait WireEncoder: Send + Sync + 'static {
    /// `Content-Type` of the streamed response.
    const CONTENT_TYPE: &'static str;
    /// Encodes one chunk of the loop as a frame of this format.
    fn chunk(&mut self, chunk: &Value) -> Bytes;
    /// Encodes a mid-stream error (the status line was already sent).
    fn error(&mut self, message: &str) -> Bytes;
    /// The end of the loop's events; what closes the stream.
    fn finish(&mut self) -> Bytes;
    /// True once `finish` closed the stream; nothing follows.
    fn is_finished(&self) -> bool;
    /// A frame clients accept and ignore.
    fn keepalive(&self) -> Bytes;
}

/// Why the stream could not start: answered as a plain HTTP error in the
/// route's own error shape.
pub type StartError = (StatusCode, String);

/// The streamed response for `rx`, or the error that came before anything
/// was produced.
pub async fn stream_events<W: WireEncoder>(
    mut rx: mpsc::Receiver<Event>,
    mut wire: W,
    keepalive: Duration,
) -> Result<Response<Body>, StartError> {
    let first = match tokio::time::timeout(keepalive, rx.recv()).await {
        Ok(Some(Event::Chunk(chunk))) => wire.chunk(&chunk),
        Ok(Some(Event::Error { status, message })) => return Err((status, message)),
        Ok(None) => {
            return Err((
                StatusCode::BAD_GATEWAY,
                "the answer ended before it started".into(),
            ))
        }
        // Slow: start now, so the client sees a live connection.
        Err(_) => wire.keepalive(),
    };
    let first = futures_util::stream::once(async move { Ok::<_, BoxError>(Frame::data(first)) });
    let rest = futures_util::stream::unfold((rx, wire), move |(mut rx, mut wire)| async move {
        loop {
            if wire.is_finished() {
                return None;
            }
            let bytes = match tokio::time::timeout(keepalive, rx.recv()).await {
                Ok(Some(Event::Chunk(chunk))) => wire.chunk(&chunk),
                Ok(Some(Event::Error { message, .. })) => wire.error(&message),
                Ok(None) => wire.finish(),
                Err(_) => wire.keepalive(),
            };
            if !bytes.is_empty() {
                return Some((Ok::<_, BoxError>(Frame::data(bytes)), (rx, wire)));
            }
        }
    });
    use futures_util::StreamExt;
    let mut response = Response::new(BodyExt::boxed(StreamBody::new(first.chain(rest))));
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static(W::CONTENT_TYPE));
    if W::CONTENT_TYPE == "text/event-stream" {
        headers.insert("cache-control", HeaderValue::from_static("no-cache"));
    }
    Ok(response)
}

fn line(value: &Value) -> Bytes {
    let mut bytes = serde_json::to_vec(value).unwrap_or_else(|_| b"{}".to_vec());
    bytes.push(b'\n');
    Bytes::from(bytes)
}

/// Ollama's NDJSON chat stream.
pub struct Ndjson {
    model: String,
    finished: bool,
}

impl Ndjson {
    /// An encoder for a stream of `model`'s answer.
    pub fn new(model: &str) -> Self {
        Ndjson {
            model: model.to_string(),
            finished: false,
        }
    }
}

impl WireEncoder for Ndjson {
    const CONTENT_TYPE: &'static str = "application/x-ndjson";
    fn chunk(&mut self, chunk: &Value) -> Bytes {
        line(chunk)
    }
    fn error(&mut self, message: &str) -> Bytes {
        line(&json!({ "error": message }))
    }
    fn finish(&mut self) -> Bytes {
        self.finished = true;
        Bytes::new()
    }
    fn is_finished(&self) -> bool {
        self.finished
    }
    fn keepalive(&self) -> Bytes {
        line(&json!({
            "model": self.model,
            "created_at": oap_bridge::tool_loop::now_rfc3339(),
            "message": {"role": "assistant", "content": ""},
            "done": false,
        }))
    }
}

const SSE_KEEPALIVE: &[u8] = b": keep-alive\n\n";

impl WireEncoder for oap_wire::openai::ChunkTranslator {
    const CONTENT_TYPE: &'static str = "text/event-stream";
    fn chunk(&mut self, chunk: &Value) -> Bytes {
        Bytes::from(self.push(chunk))
    }
    fn error(&mut self, message: &str) -> Bytes {
        Bytes::from(oap_wire::openai::ChunkTranslator::error(self, message))
    }
    fn finish(&mut self) -> Bytes {
        Bytes::from(oap_wire::openai::ChunkTranslator::finish(self))
    }
    fn is_finished(&self) -> bool {
        oap_wire::openai::ChunkTranslator::is_finished(self)
    }
    fn keepalive(&self) -> Bytes {
        Bytes::from_static(SSE_KEEPALIVE)
    }
}

impl WireEncoder for oap_wire::responses::ResponseStream {
    const CONTENT_TYPE: &'static str = "text/event-stream";
    fn chunk(&mut self, chunk: &Value) -> Bytes {
        Bytes::from(self.push(chunk))
    }
    fn error(&mut self, message: &str) -> Bytes {
        Bytes::from(oap_wire::responses::ResponseStream::error(self, message))
    }
    fn finish(&mut self) -> Bytes {
        Bytes::from(oap_wire::responses::ResponseStream::finish(self))
    }
    fn is_finished(&self) -> bool {
        oap_wire::responses::ResponseStream::is_finished(self)
    }
    fn keepalive(&self) -> Bytes {
        Bytes::from_static(SSE_KEEPALIVE)
    }
}

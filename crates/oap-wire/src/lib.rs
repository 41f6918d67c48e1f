//! The chat wire formats oapd speaks: Ollama's `/api/chat` (NDJSON) and the
//! OpenAI-compatible `/v1/chat/completions` (SSE). Pure: no I/O.
//!
//! Requests are kept as JSON objects rather than typed structs: a drop-in
//! proxy must forward every field a client sends unchanged (`options`,
//! `format`, `keep_alive`, `think`, fields added by future Ollama versions),
//! so only the fields oapd acts on are read, through typed accessors.
//!
//! # Architecture
//!
//! The chat wire formats: NDJSON line framing with a line cap; the tool-call
//! merger (`merge.rs`, the one place streamed call pieces become whole calls:
//! keyed by index, argument text joined, the first id and name win, at most
//! 128 calls per answer and 1 MiB of argument text per call) behind Ollama's
//! `ToolCallAccumulator` and OpenAI's chunk translator; `openai/` (request →
//! `/api/chat` in `request.rs`, whole answers in `response.rs`, SSE chunks in
//! `stream.rs`, errors in OpenAI's shape in `error.rs`, and `tool_choice.rs`:
//! `tool_choice` and the legacy `functions`/`function_call` dialect mapped
//! onto what Ollama can do); and OpenAI's Responses API (`responses.rs`).
//!
//! **Architecture Invariant.** Requests stay JSON objects, so unknown client
//! fields are forwarded untouched; only the fields oapd acts on are read.
//! Nothing here exists only for a test double: the fake Ollama's own shapes
//! (`/v1/models` listings) live in `fake-ollama`.

mod merge;
pub mod ndjson;
pub mod ollama;
pub mod openai;
pub mod responses;
pub mod sse;
pub mod think;

pub use merge::{MAX_ARGUMENT_BYTES, MAX_TOOL_CALLS};
pub use ndjson::{LineDecoder, LineError};
pub use ollama::{ToolCall, ToolCallAccumulator};
pub use openai::{ChunkTranslator, StreamEvent, WireError};

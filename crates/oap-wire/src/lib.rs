//! The chat wire formats oapd speaks: Ollama's `/api/chat` (NDJSON) and the
//! OpenAI-compatible `/v1/chat/completions` (SSE). Pure: no I/O.
//!
//! Requests are kept as JSON objects rather than typed structs: a drop-in
//! proxy must forward every field a client sends unchanged (`options`,
//! `format`, `keep_alive`, `think`, fields added by future Ollama versions),
//! so only the fields oapd acts on are read, through typed accessors.

mod merge;
pub mod ndjson;
pub mod ollama;
pub mod openai;
pub mod responses;
pub mod sse;

pub use merge::{MAX_ARGUMENT_BYTES, MAX_TOOL_CALLS};
pub use ndjson::{LineDecoder, LineError};
pub use ollama::{ToolCall, ToolCallAccumulator};
pub use openai::{ChunkTranslator, StreamEvent, WireError};

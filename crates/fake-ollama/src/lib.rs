//! A scripted fake Ollama: a real HTTP/1.1 server on loopback that speaks
//! Ollama's wire format (`/api/chat` NDJSON streams and `stream:false`
//! aggregation, errors, tool-call shapes of both the rendered and the
//! native path), records every request, and answers `/api/chat` from a
//! script of turns. For testing oapd and the Python clients against it.
//!
//! ```no_run
//! # async fn demo() -> std::io::Result<()> {
//! use fake_ollama::{Chunk, FakeOllama, ModelSpec, Script, Turn};
//! use serde_json::json;
//!
//! let fake = FakeOllama::start(
//!     Script::new()
//!         .model(ModelSpec::new("qwen3:4b"))
//!         .turn(Turn::tool_call("get_weather", json!({"city": "Paris"})))
//!         .turn(Turn::reply("It is sunny in Paris.")),
//! )
//! .await?;
//! // ... point the proxy at fake.url() and talk to it ...
//! let sent = fake.chat_requests();
//! # let _ = sent;
//! fake.shutdown().await;
//! # Ok(())
//! # }
//! ```
//!
//! The binary (`fake-ollama --script FILE --port 0`) prints its address on
//! stdout and serves the same control endpoints: `POST /_fake/script`,
//! `POST|GET /_fake/turns`, `GET|DELETE /_fake/requests[?path=/api/chat]`,
//! `POST /_fake/reset`, `GET /_fake/state`.
//!
//! # Architecture
//!
//! A scripted Ollama on loopback speaking the exact wire format (rendered and
//! native tool-call paths, string and split arguments, mid-stream errors,
//! drops, hangs, Host checks, `/v1/models`, an after-tool turn that answers
//! every tool result so one script repeats a tool round at any concurrency),
//! recording what it receives. Used
//! in-process by the Rust tests and as a binary by the Python client suite,
//! the benchmarks and the image boot test.

// Even a test server never panics on what it is given: errors are values.
mod completions;
mod models;
pub mod render;
pub mod script;
mod server;

pub use script::{canonical_model, Chunk, Echo, HttpError, ModelSpec, Script, StreamError, Turn};
pub use server::{allowed_host_header, Dropped, FakeOllama, Recorded};

//! The script that drives the fake: which models exist and what each
//! `/api/chat` request is answered with. Serde types (the JSON form the
//! binary and `POST /_fake/script` take) with builders for Rust tests.

use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

fn yes() -> bool {
    true
}

fn is_true(value: &bool) -> bool {
    *value
}

fn is_false(value: &bool) -> bool {
    !*value
}

fn is_zero(value: &u64) -> bool {
    *value == 0
}

/// Everything the fake answers with.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Script {
    /// The installed models (`/api/tags`, `/api/show`). When empty, every
    /// model name is accepted and has every capability.
    #[serde(default)]
    pub models: Vec<ModelSpec>,
    /// `/api/chat` answers, consumed in order (a turn with `model` only by
    /// a request for that model).
    #[serde(default)]
    pub turns: Vec<Turn>,
    /// Used, and not consumed, when no turn is left; without it such a
    /// request gets 500 `fake-ollama: no scripted turn left ...`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_turn: Option<Turn>,
    /// Used, and not consumed, for every request whose last message is a
    /// `tool` result, before the queue: with a tool-calling `default_turn`
    /// the fake plays one tool round per chat, any number of times, at any
    /// concurrency.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after_tool_turn: Option<Turn>,
    /// Refuse (403) a Host header Ollama would refuse on loopback.
    #[serde(default = "yes")]
    pub check_host: bool,
    /// Refuse tools (400 `<model> does not support tools`) and thinking the
    /// model lacks, as Ollama does.
    #[serde(default = "yes")]
    pub check_capabilities: bool,
    /// `/api/version`; `0.32.15` when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// The text `/api/generate` streams; a fixed sentence when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generate_reply: Option<String>,
    /// Every route but `/api/chat` (whose turns carry their own delays)
    /// answers only after this many milliseconds, as Ollama does while it
    /// loads a model from an SD card or pulls one.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub route_delay_ms: u64,
}

impl Default for Script {
    fn default() -> Self {
        Script {
            models: Vec::new(),
            turns: Vec::new(),
            default_turn: None,
            after_tool_turn: None,
            check_host: true,
            check_capabilities: true,
            version: None,
            generate_reply: None,
            route_delay_ms: 0,
        }
    }
}

impl Script {
    /// An empty script: any model accepted, no turns, Host and capability checks on.
    pub fn new() -> Self {
        Self::default()
    }

    /// Installs one more model; from the first one on, only installed models are accepted.
    pub fn model(mut self, model: ModelSpec) -> Self {
        self.models.push(model);
        self
    }

    /// Queues one more `/api/chat` answer.
    pub fn turn(mut self, turn: Turn) -> Self {
        self.turns.push(turn);
        self
    }

    /// The answer once the queue is empty (reused, never consumed).
    pub fn default_turn(mut self, turn: Turn) -> Self {
        self.default_turn = Some(turn);
        self
    }

    /// The answer to every request whose last message is a tool result
    /// (reused, never consumed; it comes before the queue).
    pub fn after_tool_turn(mut self, turn: Turn) -> Self {
        self.after_tool_turn = Some(turn);
        self
    }

    /// Whether a Host header Ollama would refuse gets 403.
    pub fn check_host(mut self, check: bool) -> Self {
        self.check_host = check;
        self
    }

    /// Whether tools or thinking the model lacks get 400.
    pub fn check_capabilities(mut self, check: bool) -> Self {
        self.check_capabilities = check;
        self
    }

    /// Delay every route but `/api/chat` by `ms` milliseconds.
    pub fn route_delay_ms(mut self, ms: u64) -> Self {
        self.route_delay_ms = ms;
        self
    }
}

fn default_capabilities() -> Vec<String> {
    vec!["completion".into(), "tools".into()]
}

/// One installed model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelSpec {
    /// `name[:tag]`; a missing tag means `latest`.
    pub name: String,
    /// As `/api/show` reports them: `completion`, `tools`, `thinking`,
    /// `vision`, `embedding`, … Default `["completion", "tools"]`.
    #[serde(default = "default_capabilities")]
    pub capabilities: Vec<String>,
    /// `details.family` in `/api/tags`, `/api/show` and `/api/ps` (default `llama`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub family: Option<String>,
    /// `details.parameter_size` (default `8.0B`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parameter_size: Option<String>,
    /// `details.quantization_level` (default `Q4_K_M`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quantization_level: Option<String>,
    /// Context window in tokens: `/api/show`'s `model_info` (default 131072) and
    /// `/api/ps` (default 4096).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_length: Option<u64>,
    /// Length of `/api/embed` vectors (default 8).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub embedding_length: Option<u64>,
    /// Model size in bytes in `/api/tags` and `/api/ps` (default about 4.9 GB).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<u64>,
}

impl ModelSpec {
    /// A model with `completion` and `tools`.
    pub fn new(name: impl Into<String>) -> Self {
        ModelSpec {
            name: name.into(),
            capabilities: default_capabilities(),
            family: None,
            parameter_size: None,
            quantization_level: None,
            context_length: None,
            embedding_length: None,
            size: None,
        }
    }

    /// Replaces the capabilities.
    pub fn capabilities(mut self, capabilities: &[&str]) -> Self {
        self.capabilities = capabilities.iter().map(|c| c.to_string()).collect();
        self
    }

    /// Only `completion`: `tools` in a request gets 400.
    pub fn without_tools(self) -> Self {
        self.capabilities(&["completion"])
    }

    /// Adds one capability (`thinking`, `vision`, …) unless it is there.
    pub fn with_capability(mut self, capability: &str) -> Self {
        if !self.capabilities.iter().any(|c| c == capability) {
            self.capabilities.push(capability.to_string());
        }
        self
    }

    /// Whether the model has `capability`.
    pub fn has(&self, capability: &str) -> bool {
        self.capabilities.iter().any(|c| c == capability)
    }
}

/// What an echo turn answers with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Echo {
    /// The content of the last `user` message.
    LastUser,
    /// The content of the last `tool` message.
    LastTool,
    /// The names of the offered tools, comma-separated, in request order.
    ToolNames,
    /// The `messages` array as compact JSON.
    Messages,
    /// The whole request body as compact JSON.
    Request,
}

/// An HTTP error answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HttpError {
    /// The HTTP status answered.
    pub status: u16,
    /// Sent as `{"error": "..."}`.
    pub error: String,
}

/// A `{"error": "..."}` line written after `after` chunks (status 200, as
/// Ollama does once streaming has begun). With `stream:false`: 500.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StreamError {
    /// Chunks sent before the error line.
    pub after: usize,
    /// Sent as `{"error": "..."}`.
    pub error: String,
}

/// The answer to one `/api/chat` request.
///
/// The streamed chunks are `reply` (split into words), then the `echo`
/// text, then `chunks`; a final `done:true` chunk is added unless the last
/// one is done or `auto_done` is false. Instead of (or part-way through)
/// the chunks: `http_error`, `error_after`, `drop_after`, `hang`,
/// `hang_after` (the first that applies wins, in that order).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Turn {
    /// Only a request for this model (tag `latest` implied) takes the turn.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Text streamed word by word, first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reply: Option<String>,
    /// Something from the request streamed back after `reply` (see [`Echo`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub echo: Option<Echo>,
    /// Chunks streamed after `reply` and `echo`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub chunks: Vec<Chunk>,
    /// Answer with this status and body instead of streaming.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http_error: Option<HttpError>,
    /// End the stream with an error line part-way through.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_after: Option<StreamError>,
    /// Close the connection after this many chunks (0: before any answer).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drop_after: Option<usize>,
    /// Never answer.
    #[serde(default, skip_serializing_if = "is_false")]
    pub hang: bool,
    /// Send this many chunks, then stall forever.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hang_after: Option<usize>,
    /// Delay before each chunk that has no `delay_ms` of its own.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub delay_ms: u64,
    /// Delay before the response head.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub response_delay_ms: u64,
    /// Add the final `done:true` chunk when the last chunk is not done (default true).
    #[serde(default = "yes", skip_serializing_if = "is_true")]
    pub auto_done: bool,
}

impl Default for Turn {
    fn default() -> Self {
        Turn {
            model: None,
            reply: None,
            echo: None,
            chunks: Vec::new(),
            http_error: None,
            error_after: None,
            drop_after: None,
            hang: false,
            hang_after: None,
            delay_ms: 0,
            response_delay_ms: 0,
            auto_done: true,
        }
    }
}

impl Turn {
    /// A text answer streamed word by word.
    pub fn reply(text: impl Into<String>) -> Self {
        Turn {
            reply: Some(text.into()),
            ..Turn::default()
        }
    }

    /// A turn streaming exactly these chunks (plus the final chunk unless one is done).
    pub fn chunks(chunks: Vec<Chunk>) -> Self {
        Turn {
            chunks,
            ..Turn::default()
        }
    }

    /// One tool call in a `done:false` chunk, then the final chunk
    /// (Ollama's rendered path).
    pub fn tool_call(name: &str, arguments: Value) -> Self {
        Turn::chunks(vec![Chunk::tool_call(name, arguments)])
    }

    /// All calls only on the final `done:true` chunk (the native path).
    pub fn native_tool_calls(calls: Vec<(&str, Value)>) -> Self {
        let calls = calls
            .into_iter()
            .map(|(name, arguments)| json!({"name": name, "arguments": arguments}))
            .collect();
        Turn::chunks(vec![Chunk::done().with_tool_calls(calls)])
    }

    /// A turn that answers with part of the request (see [`Echo`]).
    pub fn echo(echo: Echo) -> Self {
        Turn {
            echo: Some(echo),
            ..Turn::default()
        }
    }

    /// A turn answered with `status` and `{"error": error}`.
    pub fn http_error(status: u16, error: impl Into<String>) -> Self {
        Turn {
            http_error: Some(HttpError {
                status,
                error: error.into(),
            }),
            ..Turn::default()
        }
    }

    /// A turn that never answers: no head, no body.
    pub fn hang() -> Self {
        Turn {
            hang: true,
            ..Turn::default()
        }
    }

    /// Taken only by a request for `model` (tag `latest` implied).
    pub fn for_model(mut self, model: impl Into<String>) -> Self {
        self.model = Some(model.into());
        self
    }

    /// An `{"error": ...}` line after `after` chunks.
    pub fn error_after(mut self, after: usize, error: impl Into<String>) -> Self {
        self.error_after = Some(StreamError {
            after,
            error: error.into(),
        });
        self
    }

    /// Close the connection after `after` chunks (0: before the response head).
    pub fn drop_after(mut self, after: usize) -> Self {
        self.drop_after = Some(after);
        self
    }

    /// Send `after` chunks, then stall forever.
    pub fn hang_after(mut self, after: usize) -> Self {
        self.hang_after = Some(after);
        self
    }

    /// Wait `ms` milliseconds before each chunk that sets no delay of its own.
    pub fn delay_ms(mut self, ms: u64) -> Self {
        self.delay_ms = ms;
        self
    }

    /// Wait `ms` milliseconds before the response head.
    pub fn response_delay_ms(mut self, ms: u64) -> Self {
        self.response_delay_ms = ms;
        self
    }

    /// Send the chunks only: no final `done:true` chunk is added.
    pub fn without_auto_done(mut self) -> Self {
        self.auto_done = false;
        self
    }

    /// Appends a chunk.
    pub fn then(mut self, chunk: Chunk) -> Self {
        self.chunks.push(chunk);
        self
    }
}

/// One streamed chunk, partial: the server fills `model`, `created_at`,
/// `message.role` and, on the done chunk, `done_reason` (default `stop`)
/// and the metrics.
///
/// `tool_calls` entries are sent exactly as written when they have a
/// `function` key (for raw shapes: string arguments, fragments, odd
/// indexes). The short form `{"name": .., "arguments": ..}` becomes
/// `{"id": "call_xxxxxxxx", "function": {"index": n, "name", "arguments"}}`
/// with `n` counting up across the turn (`"id": null` leaves the id out).
/// Any other key is copied to the top level of the line, overriding what
/// the server filled (e.g. `eval_count`); an object under `message` is
/// merged into the message.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Chunk {
    /// `message.content`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
    /// `message.thinking`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thinking: Option<String>,
    /// `message.tool_calls`, in the raw or short form described above.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<Value>,
    /// Marks the final chunk; the server adds `done_reason` and the metrics.
    #[serde(default, skip_serializing_if = "is_false")]
    pub done: bool,
    /// Overrides the default `stop` on the done chunk.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub done_reason: Option<String>,
    /// Milliseconds before this chunk, instead of the turn's `delay_ms`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delay_ms: Option<u64>,
    /// Any other key: copied to the top level of the line (see above).
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl Chunk {
    /// A chunk carrying `text` as `message.content`.
    pub fn content(text: impl Into<String>) -> Self {
        Chunk {
            content: Some(text.into()),
            ..Chunk::default()
        }
    }

    /// A chunk carrying `text` as `message.thinking`.
    pub fn thinking(text: impl Into<String>) -> Self {
        Chunk {
            thinking: Some(text.into()),
            ..Chunk::default()
        }
    }

    /// A short-form call (id and index filled by the server).
    pub fn tool_call(name: &str, arguments: Value) -> Self {
        Chunk::default().with_tool_calls(vec![json!({"name": name, "arguments": arguments})])
    }

    /// Calls sent as given (use the `function` form for exact shapes).
    pub fn raw_tool_calls(calls: Vec<Value>) -> Self {
        Chunk::default().with_tool_calls(calls)
    }

    /// The final chunk.
    pub fn done() -> Self {
        Chunk {
            done: true,
            ..Chunk::default()
        }
    }

    /// Adds tool calls (raw or short form).
    pub fn with_tool_calls(mut self, calls: Vec<Value>) -> Self {
        self.tool_calls.extend(calls);
        self
    }

    /// Sets `message.content`.
    pub fn with_content(mut self, text: impl Into<String>) -> Self {
        self.content = Some(text.into());
        self
    }

    /// Makes this the final chunk, with `reason` as `done_reason`.
    pub fn done_reason(mut self, reason: impl Into<String>) -> Self {
        self.done = true;
        self.done_reason = Some(reason.into());
        self
    }

    /// Milliseconds to wait before this chunk.
    pub fn delay_ms(mut self, ms: u64) -> Self {
        self.delay_ms = Some(ms);
        self
    }

    /// Sets a top-level key of the line (`eval_count`, `message`, …).
    pub fn with(mut self, key: &str, value: Value) -> Self {
        self.extra.insert(key.to_string(), value);
        self
    }
}

/// `name` with `:latest` added when it has no tag.
pub fn canonical_model(name: &str) -> String {
    let last = name.rsplit('/').next().unwrap_or(name);
    if last.contains(':') {
        name.to_string()
    } else {
        format!("{name}:latest")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_documented_example_parses() {
        let script: Script = serde_json::from_str(include_str!("../example-script.json")).unwrap();
        assert_eq!(script.models.len(), 3);
        assert!(!script.models[1].has("tools"));
        assert_eq!(script.turns.len(), 9);
        assert_eq!(script.turns[1].chunks[1].tool_calls.len(), 1);
        assert_eq!(script.turns[4].http_error.as_ref().unwrap().status, 400);
        assert_eq!(script.turns[8].echo, Some(Echo::LastTool));
        assert!(script.check_host);
        // Serialising and parsing again gives the same script.
        let again: Script = serde_json::from_value(serde_json::to_value(&script).unwrap()).unwrap();
        assert_eq!(again, script);
    }

    #[test]
    fn typos_are_refused_and_defaults_apply() {
        assert!(serde_json::from_str::<Script>(r#"{"turnz": []}"#).is_err());
        assert!(serde_json::from_str::<Turn>(r#"{"reply": "x", "delay": 5}"#).is_err());
        let turn: Turn = serde_json::from_str(r#"{"reply": "x"}"#).unwrap();
        assert!(turn.auto_done);
        let model: ModelSpec = serde_json::from_str(r#"{"name": "m"}"#).unwrap();
        assert_eq!(model.capabilities, vec!["completion", "tools"]);
        let chunk: Chunk = serde_json::from_str(r#"{"content": "a", "eval_count": 3}"#).unwrap();
        assert_eq!(chunk.extra["eval_count"], 3);
    }

    #[test]
    fn model_names_get_latest() {
        assert_eq!(canonical_model("llama3"), "llama3:latest");
        assert_eq!(canonical_model("llama3:8b"), "llama3:8b");
        assert_eq!(canonical_model("host:5000/ns/m"), "host:5000/ns/m:latest");
    }
}

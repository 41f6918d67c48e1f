//! The per-request context of the tool loop, and the types every phase
//! speaks in.
//!
//! Two kinds of state, kept apart (the shape of pingora's `ProxyHttp`,
//! whose every phase gets `ctx: &mut Self::CTX`):
//! - [`ChatContext`] is shared by all requests (`Arc`): the Ollama client,
//!   the tool runner, the capability cache, the mixed turns waiting for
//!   their follow-up. Whatever changes in it is behind its own lock,
//!   because many requests use it at once.
//! - [`RequestCtx`] is one request's: what the client sent (split into the
//!   fields forwarded every round, the conversation, the offered tools),
//!   what the loop has added to the conversation, the round count, the
//!   `format`/`keep_alive` fields held for the answering round, whether
//!   the model prints its calls. The loop owns it and hands it to each
//!   phase and each hook as `&mut` (or `&` while calls run concurrently),
//!   so no per-request state needs an atomic or a mutex.
//!
//! A hook's own per-request state lives in the hook itself (hooks are
//! built per request and called with `&mut self`, `hooks.rs`).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use hyper::StatusCode;
use oap_discovery::StoredRecord;
use oap_manifest::Manifest;
use serde_json::{Map, Value};

use crate::answer::AnswerFields;
use crate::capabilities::Capabilities;
use crate::payload::Held;
use crate::upstream::Upstream;

/// The per-request `oap_*` extension fields, validated.
#[derive(Debug, Clone, PartialEq)]
pub struct ChatOptions {
    /// `oap_discover`: whether to inject oapd's tools at all.
    pub discover: bool,
    /// `oap_top_k`: most tools injected.
    pub top_k: usize,
    /// `oap_auto_execute`: whether oapd runs its tools' calls itself.
    pub auto_execute: bool,
    /// `oap_max_rounds`: most model rounds before the loop stops.
    pub max_rounds: u32,
    /// `stream`: NDJSON chunks when true, one JSON answer when false.
    pub stream: bool,
    /// The conversation as the client sent it (`MixedTurns::enter`): set,
    /// a turn that calls oapd's and the client's tools is remembered so
    /// the client's follow-up carries oapd's result (`mixed.rs`).
    pub conversation: Option<crate::mixed::Conversation>,
    /// `oap_tool_instruction`: whether the tool-listing instruction is
    /// added (`guide.rs`); `None` leaves it to the model's default.
    pub tool_instruction: Option<bool>,
}

/// The outcome of running one of oapd's tools.
#[derive(Debug, Clone)]
pub struct ToolResult {
    /// The text the model sees as the tool message.
    pub content: String,
    /// False on a failed execution (non-zero exit, timeout, refused call).
    pub ok: bool,
}

impl ToolResult {
    /// What the call came to, in a word: `ok`, `timeout` (the tool or its
    /// server did not answer in time), `refused` (not run: arguments that
    /// do not fit the schema, an unknown tool, an address or program the
    /// policy refuses, the sandbox) or `error` (it ran and failed). Read
    /// from the text the executor writes for the model.
    pub fn outcome(&self) -> &'static str {
        if self.ok {
            return "ok";
        }
        let text = self.content.get(..512).unwrap_or(self.content.as_str());
        if text.contains("timed out") || text.contains("did not answer within") {
            "timeout"
        } else if [
            "refus",
            "was not called",
            "unknown tool",
            "were not usable",
            "not configured",
        ]
        .iter()
        .any(|needle| text.contains(needle))
        {
            "refused"
        } else {
            "error"
        }
    }
}

/// Runs oapd's tools (the daemon plugs in the real executor; the trait
/// keeps the loop testable and the executor swappable).
pub trait ToolRunner: Send + Sync + 'static {
    /// Runs the capability `record` describes (`manifest` is its manifest,
    /// decoded) with `arguments`, under the record's trust, or on its MCP
    /// server when it is one's tool; never fails: an error becomes a
    /// [`ToolResult`] with `ok: false`.
    fn run(
        &self,
        record: Arc<StoredRecord>,
        manifest: Arc<Manifest>,
        arguments: Map<String, Value>,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = ToolResult> + Send>>;
}

/// One injected tool.
pub struct InjectedTool {
    /// The function name the model calls (unique within the request).
    pub name: String,
    /// The OpenAI-style tool definition sent to the model.
    pub definition: Value,
    /// The index record the tool was discovered from.
    pub record: Arc<StoredRecord>,
    /// The record's manifest, decoded once when the tool is injected.
    pub manifest: Arc<Manifest>,
    /// Told the outcome of every execution (the experience cache learns
    /// from it); `None` for tools nobody watches.
    pub on_result: Option<ResultHook>,
}

/// Called with the arguments a tool ran with and whether it succeeded.
pub type ResultHook = Arc<dyn Fn(&Map<String, Value>, bool) + Send + Sync>;

/// Everything one chat request needs.
pub struct ChatContext {
    /// The Ollama the rounds are sent to.
    pub upstream: Upstream,
    /// Executes tool calls.
    pub runner: Arc<dyn ToolRunner>,
    /// Which models accept tools, cached per model.
    pub capabilities: Arc<Capabilities>,
    /// Wall-clock bound of a whole chat request (all rounds and tools).
    pub deadline: Duration,
    /// Most tool calls of one round run at once (0 counts as 1).
    pub max_parallel_tools: usize,
    /// The mixed turns waiting for their client's follow-up, process-wide.
    pub mixed_turns: crate::mixed::MixedTurns,
    /// Model-name prefixes whose calls printed into `content` are taken as
    /// calls to oapd's tools (`tool_bridge.text_tool_calls`, `printed.rs`).
    pub text_tool_calls: Vec<String>,
}

/// What the loop sends the client: chunks, or one error that ends it.
#[derive(Debug, Clone)]
pub enum Event {
    /// One Ollama-format chunk (the whole answer when not streaming).
    Chunk(Value),
    /// Before the first chunk this becomes the HTTP status of the response;
    /// after it, an `{"error": ...}` line, as Ollama does mid-stream.
    Error {
        /// The status a client sees if nothing was sent yet.
        status: StatusCode,
        /// The text of the `error` field.
        message: String,
    },
}

impl Event {
    /// An [`Event::Error`] with `status` and `message`.
    pub fn error(status: StatusCode, message: impl Into<String>) -> Event {
        Event::Error {
            status,
            message: message.into(),
        }
    }
}

/// What the loop reports next to the chunks.
#[derive(Debug, Clone, Copy, Default)]
pub struct LoopStats {
    /// Tools oapd added to the request (0 when it passed through).
    pub tools_injected: usize,
    /// Model rounds sent upstream.
    pub rounds: u32,
}

/// The tools oapd injected into a request, by name.
pub type ToolsByName<'a> = HashMap<&'a str, &'a InjectedTool>;

/// One request's state, owned by the loop and lent to every phase.
pub struct RequestCtx {
    /// What all requests share: Ollama, the runner, the caches.
    pub shared: Arc<ChatContext>,
    /// The model the client asked for.
    pub model: String,
    /// The request's `oap_*` options.
    pub options: ChatOptions,
    /// The client's other fields, forwarded unchanged every round.
    pub fields: Map<String, Value>,
    /// The conversation: the client's messages, then what the loop added.
    pub messages: Vec<Value>,
    /// How many of [`RequestCtx::messages`] the client sent.
    pub client_messages: usize,
    /// oapd's tools injected into the request.
    pub tools: Vec<InjectedTool>,
    /// The client's own tool definitions (forwarded, never run here).
    pub client_tools: Vec<Value>,
    /// Every definition a tool round offers: oapd's, the hooks', the client's.
    pub offered: Vec<Value>,
    /// Whether oapd offers tools of its own (so a round may be followed by another).
    pub ours_offered: bool,
    /// Tools injected and rounds sent so far.
    pub stats: LoopStats,
    /// The request's images and body-budget share, alive until the loop ends.
    pub held: Held,
    /// `format` and `keep_alive`, kept for the round that answers (`answer.rs`).
    pub answer: AnswerFields,
    /// Whether the model writes its calls as text (`printed.rs`).
    pub prints_calls: bool,
}

impl RequestCtx {
    /// Takes a request apart: the messages, the client's tools and the
    /// answer fields come out of `request` (moved, not copied: each round
    /// encodes them straight into the upstream body, `payload.rs`); what
    /// is left is forwarded as it came.
    pub fn new(
        shared: Arc<ChatContext>,
        mut request: Map<String, Value>,
        tools: Vec<InjectedTool>,
        options: ChatOptions,
        held: Held,
    ) -> RequestCtx {
        let client_tools = match request.remove("tools") {
            Some(Value::Array(tools)) => tools,
            _ => Vec::new(),
        };
        let answer = AnswerFields::take(&mut request);
        let messages = match request.remove("messages") {
            Some(Value::Array(messages)) => messages,
            _ => Vec::new(),
        };
        request.remove("stream");
        let model = request
            .get("model")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        let prints_calls = crate::printed::model_prints_calls(&shared.text_tool_calls, &model);
        RequestCtx {
            model,
            stats: LoopStats {
                tools_injected: tools.len(),
                rounds: 0,
            },
            client_messages: messages.len(),
            messages,
            offered: Vec::new(),
            ours_offered: false,
            tools,
            client_tools,
            fields: request,
            options,
            held,
            answer,
            prints_calls,
            shared,
        }
    }

    /// Offers oapd's tools, then `extra` (the hooks' definitions), then
    /// the client's.
    pub fn offer(&mut self, extra: Vec<Value>) {
        self.offered = self.tools.iter().map(|t| t.definition.clone()).collect();
        self.offered.extend(extra);
        self.ours_offered = !self.offered.is_empty();
        self.offered.extend(self.client_tools.iter().cloned());
    }

    /// The model takes no tools after all: the request starts again as
    /// it came, offering the client's tools only, counting rounds from 1.
    pub fn withdraw_tools(&mut self) {
        self.offered = self.client_tools.clone();
        self.ours_offered = false;
        self.stats.tools_injected = 0;
        self.stats.rounds = 0;
    }

    /// oapd's injected tools by name.
    pub fn tools_by_name(&self) -> ToolsByName<'_> {
        self.tools.iter().map(|t| (t.name.as_str(), t)).collect()
    }

    /// Whether `name` is one of oapd's injected tools.
    pub fn injects(&self, name: &str) -> bool {
        self.tools.iter().any(|t| t.name == name)
    }
}

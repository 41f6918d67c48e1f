//! The tool bridge: Ollama's `/api/chat` with discovered tools injected, the
//! model's calls to them executed, and the loop run until the model answers.
//!
//! The loop produces Ollama chat chunks (JSON objects) for the client, with
//! exactly one `done:true`, last. The surfaces wrap that one stream: NDJSON
//! for `/api/chat`, SSE for `/v1/chat/completions`, or one aggregated JSON
//! for `stream:false`.
//!
//! Ownership of tools is respected: the client's own tools are forwarded
//! next to oapd's, and calls to them are handed back to the client in
//! Ollama's format; only oapd's own tools are executed here.
//!
//! The loop knows no feature: token budgets, meta tools, forcing and URL
//! hygiene take part through the request's [`Hooks`] (`hooks.rs`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use http_body_util::BodyExt;
use hyper::StatusCode;
use oap_discovery::StoredRecord;
use oap_manifest::Manifest;
use oap_wire::{LineDecoder, ToolCall, ToolCallAccumulator};
use serde_json::{json, Map, Value};
use tokio::sync::mpsc;

use crate::hooks::{CallReport, Hooks, RoundOutcome, RoundStart, ToolsByName};
use crate::payload::Held;
use crate::upstream::{Upstream, UpstreamError};

/// Longest NDJSON line accepted from Ollama (a chunk with a large tool call
/// or an image is still far below this).
const MAX_UPSTREAM_LINE: usize = 8 * 1024 * 1024;

/// How long a model's capabilities are trusted before `/api/show` is asked again.
const CAPABILITY_TTL: Duration = Duration::from_secs(300);

/// Bridge settings from the config.
#[derive(Debug, Clone)]
pub struct BridgeSettings {
    /// `tool_bridge.enabled`: off, chat requests pass through untouched.
    pub enabled: bool,
    /// Tools injected per request unless the request sets `oap_top_k`.
    pub default_top_k: usize,
    /// Model rounds per request unless the request sets `oap_max_rounds`.
    pub max_rounds: u32,
}

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
}

/// A client error in the request, answered with 400 before anything runs.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct RequestError(pub String);

/// Splits the `oap_*` extension fields off a chat request (they must not be
/// forwarded: Ollama ignores unknown fields today, but a future version may
/// not) and validates them.
pub fn take_options(
    request: &mut Map<String, Value>,
    settings: &BridgeSettings,
) -> Result<ChatOptions, RequestError> {
    let flag =
        |request: &mut Map<String, Value>, key: &str, default: bool| match request.remove(key) {
            None | Some(Value::Null) => Ok(default),
            Some(Value::Bool(value)) => Ok(value),
            Some(other) => Err(RequestError(format!(
                "{key}: expected true or false, got {other}"
            ))),
        };
    let discover = flag(request, "oap_discover", true)?;
    let auto_execute = flag(request, "oap_auto_execute", true)?;
    let top_k = match request.remove("oap_top_k") {
        None | Some(Value::Null) => settings.default_top_k,
        Some(value) => match value.as_u64() {
            Some(k @ 1..=20) => k as usize,
            _ => {
                return Err(RequestError(format!(
                    "oap_top_k: expected an integer from 1 to 20, got {value}"
                )))
            }
        },
    };
    let max_rounds = match request.remove("oap_max_rounds") {
        None | Some(Value::Null) => settings.max_rounds,
        Some(value) => match value.as_u64() {
            // Clamped to the operator's cap, as the seed specifies.
            Some(n @ 1..=10) => (n as u32).min(settings.max_rounds),
            _ => {
                return Err(RequestError(format!(
                    "oap_max_rounds: expected an integer from 1 to 10, got {value}"
                )))
            }
        },
    };
    let stream = match request.get("stream") {
        None | Some(Value::Null) => true,
        Some(Value::Bool(stream)) => *stream,
        Some(other) => {
            return Err(RequestError(format!(
                "stream: expected true or false, got {other}"
            )))
        }
    };
    match request.get("model") {
        Some(Value::String(_)) => {}
        None | Some(Value::Null) => return Err(RequestError("model is required".into())),
        Some(other) => {
            return Err(RequestError(format!(
                "`model` must be a string, got {other}"
            )))
        }
    }
    match request.get("messages") {
        None | Some(Value::Array(_)) => {}
        Some(_) => return Err(RequestError("messages: expected an array".into())),
    }
    Ok(ChatOptions {
        discover,
        top_k,
        auto_execute,
        max_rounds,
        stream,
        conversation: None,
    })
}

/// The text discovery runs on: the last user message.
pub fn task_of(request: &Map<String, Value>) -> Option<String> {
    request
        .get("messages")?
        .as_array()?
        .iter()
        .rev()
        .find(|m| m.get("role").and_then(Value::as_str) == Some("user"))?
        .get("content")?
        .as_str()
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
}

/// Names of the tools the client sent itself.
pub fn client_tool_names(request: &Map<String, Value>) -> Vec<String> {
    request
        .get("tools")
        .and_then(Value::as_array)
        .map(|tools| {
            tools
                .iter()
                .filter_map(|t| t.pointer("/function/name").and_then(Value::as_str))
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

/// Which models can take tools, from `/api/show`, cached.
#[derive(Default)]
pub struct Capabilities {
    cache: Mutex<HashMap<String, (bool, Instant)>>,
    /// The context window `/api/show` implies per model ([`context_window`]).
    windows: Mutex<HashMap<String, u64>>,
}

/// Ollama's context window when neither the request nor the model's
/// Modelfile sets `num_ctx`.
pub const OLLAMA_DEFAULT_NUM_CTX: u64 = 4096;

/// The context window Ollama runs `model` with when the request sets no
/// `num_ctx`, from its `/api/show` answer: the Modelfile's `num_ctx`
/// parameter, else Ollama's default, never more than the model's own
/// `model_info.*.context_length`.
pub fn context_window(show: &Value) -> u64 {
    let configured = show
        .get("parameters")
        .and_then(Value::as_str)
        .into_iter()
        .flat_map(str::lines)
        .rev()
        .find_map(|line| {
            let mut words = line.split_whitespace();
            (words.next() == Some("num_ctx"))
                .then(|| words.next()?.parse::<u64>().ok())
                .flatten()
        });
    let trained = show
        .get("model_info")
        .and_then(Value::as_object)
        .and_then(|info| {
            info.iter()
                .find(|(key, _)| key.ends_with(".context_length"))
                .and_then(|(_, value)| value.as_u64())
        });
    let window = configured.unwrap_or(OLLAMA_DEFAULT_NUM_CTX);
    trained.map_or(window, |trained| window.min(trained))
}

impl Capabilities {
    /// Whether `model` supports tools. Unknown (older Ollama without a
    /// capabilities list) counts as yes; a 400 "does not support tools"
    /// later corrects the cache.
    pub async fn supports_tools(
        &self,
        upstream: &Upstream,
        model: &str,
    ) -> Result<bool, UpstreamError> {
        if let Some(known) = self.cached(model) {
            return Ok(known);
        }
        let (status, body) = upstream
            .post_json_read("/api/show", &json!({"model": model}), 4 * 1024 * 1024)
            .await?;
        let supports = if status.is_success() {
            if let Ok(mut windows) = self.windows.lock() {
                windows.insert(model.to_string(), context_window(&body));
            }
            match body.get("capabilities").and_then(Value::as_array) {
                Some(caps) => caps.iter().any(|c| c == "tools"),
                None => true,
            }
        } else {
            // Unknown model: let the chat request itself fail with Ollama's 404.
            return Ok(false);
        };
        self.remember(model, supports);
        Ok(supports)
    }

    /// The context window learnt from `model`'s `/api/show` (after
    /// [`Capabilities::supports_tools`] asked), if known.
    pub fn window(&self, model: &str) -> Option<u64> {
        self.windows.lock().ok()?.get(model).copied()
    }

    fn cached(&self, model: &str) -> Option<bool> {
        let cache = self.cache.lock().ok()?;
        cache
            .get(model)
            .filter(|(_, at)| at.elapsed() < CAPABILITY_TTL)
            .map(|(supports, _)| *supports)
    }

    /// Records whether `model` accepts tools, trusted for `CAPABILITY_TTL`;
    /// the loop calls it when Ollama says "does not support tools".
    pub fn remember(&self, model: &str, supports: bool) {
        if let Ok(mut cache) = self.cache.lock() {
            cache.insert(model.to_string(), (supports, Instant::now()));
        }
    }
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

/// Runs the tool loop, sending client-facing Ollama chunks into `out`.
/// Ends with exactly one `done:true` chunk or one `{"error"}` chunk. Stops
/// early (dropping the upstream request and any running tools) when the
/// receiver is gone — a client that disconnected. `held` (the request's
/// images and body-budget share) lives until the loop ends; `hooks` are
/// the request's features, called in their order at every phase.
pub async fn run_loop(
    ctx: Arc<ChatContext>,
    mut request: Map<String, Value>,
    tools: Vec<InjectedTool>,
    options: ChatOptions,
    hooks: Hooks,
    held: Held,
    out: mpsc::Sender<Event>,
) {
    let deadline = ctx.deadline;
    let stats = LoopStats {
        tools_injected: tools.len(),
        rounds: 0,
    };
    let out = hooks.filter_output(out);
    let result = tokio::time::timeout(
        deadline,
        drive(
            &ctx,
            &mut request,
            &tools,
            &options,
            &hooks,
            &held,
            &out,
            stats,
        ),
    )
    .await;
    if result.is_err() {
        let message = format!(
            "the request took longer than the {}s chat deadline (ollama.chat_deadline)",
            deadline.as_secs()
        );
        let _ = out
            .send(Event::error(StatusCode::GATEWAY_TIMEOUT, message))
            .await;
    }
}

#[allow(clippy::too_many_arguments)]
async fn drive(
    ctx: &ChatContext,
    request: &mut Map<String, Value>,
    tools: &[InjectedTool],
    options: &ChatOptions,
    hooks: &Hooks,
    held: &Held,
    out: &mpsc::Sender<Event>,
    mut stats: LoopStats,
) {
    let by_name: ToolsByName<'_> = tools.iter().map(|t| (t.name.as_str(), t)).collect();
    // The messages and tools are taken out of the request, not copied: each
    // round encodes the request's other fields, these and the images
    // straight into the upstream body (payload.rs).
    let client_tools: Vec<Value> = match request.remove("tools") {
        Some(Value::Array(tools)) => tools,
        _ => Vec::new(),
    };
    let mut all_tools: Vec<Value> = tools.iter().map(|t| t.definition.clone()).collect();
    all_tools.extend(hooks.definitions());
    // Whether oapd offers tools of its own (so a round may be followed by another).
    let mut ours_offered = !all_tools.is_empty();
    all_tools.extend(client_tools.iter().cloned());
    // `format` and `keep_alive` belong to the round that answers, which a
    // round offering oapd's tools may not be:
    // - `format` (grammar-constrained decoding) can keep the model from
    //   calling a tool, so it is left out of such rounds and their events
    //   are held back; when one answers without calling oapd's tools, its
    //   answer is dropped and the question asked once more with `format`
    //   and without oapd's tools (the client's stay offered);
    // - `keep_alive` (say 0) would unload the model between rounds, so it
    //   is left out of such rounds too; when one of them turns out to be
    //   the last, the client's value is applied to the model afterwards
    //   with an empty `/api/generate`, Ollama's way to set it alone.
    let format = request.remove("format").filter(|v| !v.is_null());
    let keep_alive = request.remove("keep_alive").filter(|v| !v.is_null());
    let mut format_round = false;
    let mut messages: Vec<Value> = match request.remove("messages") {
        Some(Value::Array(messages)) => messages,
        _ => Vec::new(),
    };
    request.remove("stream");
    // What the loop adds to the conversation starts here.
    let client_messages = messages.len();
    let model = request
        .get("model")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let prints_calls = crate::printed::model_prints_calls(&ctx.text_tool_calls, &model);

    let mut offer_tools = !all_tools.is_empty();
    loop {
        stats.rounds += 1;
        let last_round = stats.rounds > options.max_rounds;
        // Without tools once rounds are used up: one last call, so the user
        // gets an answer instead of a dangling tool call.
        let offered = if format_round {
            (!client_tools.is_empty()).then_some(client_tools.as_slice())
        } else {
            (offer_tools && !last_round).then_some(all_tools.as_slice())
        };
        // After this round oapd may run a call and ask again.
        let may_continue =
            ours_offered && options.auto_execute && offered.is_some() && !format_round;
        let answer_fields: Vec<(&str, &Value)> = if may_continue {
            Vec::new()
        } else {
            [("format", &format), ("keep_alive", &keep_alive)]
                .into_iter()
                .filter_map(|(key, value)| value.as_ref().map(|v| (key, v)))
                .collect()
        };
        let withheld_keep_alive = may_continue.then_some(keep_alive.as_ref()).flatten();
        let body = match encode_round(request, &messages, offered, &answer_fields, &held.images) {
            Ok(body) => body,
            Err(message) => {
                let _ = out
                    .send(Event::error(StatusCode::BAD_REQUEST, message))
                    .await;
                return;
            }
        };
        // A hook may hold the round's events back until it is over.
        let start = RoundStart {
            number: stats.rounds,
            offers_tools: offered.is_some(),
            auto_execute: options.auto_execute,
        };
        let formatting = format.is_some() && may_continue;
        let holding = hooks.holds_round(&start) || formatting;
        // Content that may be a printed call waits until the round is over.
        let hold_printed = prints_calls && may_continue;
        let (result, held_events) = if holding {
            held_round(ctx, body, hold_printed).await
        } else {
            (stream_round(ctx, body, out, hold_printed).await, Vec::new())
        };
        let round = match result {
            Ok(round) => round,
            Err(RoundError::ClientGone) => return,
            Err(RoundError::Upstream { status, message })
                if stats.rounds == 1
                    && stats.tools_injected > 0
                    && status == StatusCode::BAD_REQUEST
                    && message.contains("does not support tools") =>
            {
                // The model's capabilities were unknown or stale: remember,
                // and serve the request as it came, without oapd's tools.
                ctx.capabilities.remember(&model, false);
                all_tools = client_tools.clone();
                offer_tools = !all_tools.is_empty();
                ours_offered = false;
                stats.tools_injected = 0;
                stats.rounds = 0;
                hooks.tools_withdrawn();
                continue;
            }
            Err(RoundError::Upstream { status, message }) => {
                let _ = out.send(Event::error(status, message)).await;
                return;
            }
        };

        let Round {
            mut content,
            thinking,
            mut calls,
            done,
            held: printed_held,
        } = round;
        let is_ours = |name: &str| by_name.contains_key(name) || hooks.owns(name);
        let mut printed = false;
        if calls.is_empty() && may_continue {
            // A call written as text (printed.rs): in the thinking of a
            // model that answered nothing else, or as the whole content of
            // a model that prints its calls.
            if content.trim().is_empty() && !thinking.is_empty() {
                if let Some(found) = crate::printed::thinking_calls(&thinking, &is_ours) {
                    calls = found;
                }
            } else if prints_calls {
                if let Some(found) = crate::printed::content_calls(&content, &is_ours) {
                    calls = found;
                    content.clear();
                    printed = true;
                }
            }
        }
        let (ours, theirs): (Vec<ToolCall>, Vec<ToolCall>) =
            calls.into_iter().partition(|call| is_ours(&call.name));
        let mut outcome = RoundOutcome {
            number: stats.rounds,
            held: holding,
            release_held: true,
            content,
            ours,
            theirs,
        };
        hooks.after_round(ctx, &model, &mut outcome).await;
        if formatting && outcome.theirs.is_empty() {
            // Unformatted text is not what the client asked for: a tool
            // round's text is dropped, and an answer is asked for again.
            outcome.release_held = false;
            if outcome.ours.is_empty() {
                format_round = true;
                continue;
            }
        }
        if holding && outcome.release_held && !release(out, held_events).await {
            return;
        }
        // Text held back as a possible printed call goes out unless it was one.
        if !printed
            && (!holding || outcome.release_held)
            && !release(out, printed_held.into_iter().map(Event::Chunk).collect()).await
        {
            return;
        }
        let RoundOutcome {
            content,
            ours,
            theirs,
            ..
        } = outcome;

        if ours.is_empty() || !options.auto_execute || last_round {
            let mut handed_back = theirs;
            if !options.auto_execute {
                handed_back.extend(ours);
            }
            if let Some(keep_alive) = withheld_keep_alive {
                apply_keep_alive(ctx, &model, keep_alive);
            }
            finish(out, &model, done, handed_back, stats, hooks).await;
            return;
        }

        // Run oapd's calls (bounded parallelism, results in call order).
        // A client that goes away cancels them: dropping the futures kills
        // the tools' process groups and closes their connections.
        let timed = tokio::select! {
            timed = async {
                match hooks.run_calls(ctx, &by_name, &ours) {
                    Some(run) => {
                        let started = Instant::now();
                        let results = run.await;
                        let elapsed = started.elapsed();
                        results
                            .into_iter()
                            .map(|result| (result, elapsed))
                            .collect::<Vec<_>>()
                    }
                    None => run_calls_timed(ctx, &by_name, &ours).await,
                }
            } => timed,
            _ = out.closed() => return,
        };
        for (call, (result, elapsed)) in ours.iter().zip(&timed) {
            hooks.call_finished(&CallReport {
                round: stats.rounds,
                name: &call.name,
                result,
                elapsed: *elapsed,
            });
        }
        let results: Vec<ToolResult> = timed.into_iter().map(|(result, _)| result).collect();
        hooks.results_seen(&results);
        let assistant_calls: Vec<Value> = ours.iter().map(ToolCall::to_ollama).collect();
        let mut assistant = json!({
            "role": "assistant",
            "content": content,
            "tool_calls": assistant_calls,
        });
        if !thinking.is_empty() {
            // The model's reasoning stays with its calls in the next round.
            assistant["thinking"] = Value::from(thinking);
        }
        messages.push(assistant);
        for (call, result) in ours.iter().zip(results) {
            let mut message = json!({
                "role": "tool",
                "content": result.content,
                "tool_name": call.name,
            });
            if let Some(id) = &call.id {
                message["tool_call_id"] = Value::from(id.clone());
            }
            messages.push(message);
        }
        if !theirs.is_empty() {
            // A turn that also called the client's tools: those go back to
            // the client now, which continues the conversation itself; what
            // oapd added waits for that follow-up (mixed.rs).
            if let Some(conversation) = &options.conversation {
                ctx.mixed_turns.remember(
                    conversation,
                    &theirs,
                    messages.get(client_messages..).unwrap_or_default(),
                    messages.get(..client_messages).unwrap_or_default(),
                    &held.images,
                );
            }
            if let Some(keep_alive) = withheld_keep_alive {
                apply_keep_alive(ctx, &model, keep_alive);
            }
            finish(out, &model, done, theirs, stats, hooks).await;
            return;
        }
        if out.is_closed() {
            return;
        }
    }
}

/// One round's upstream request: the client's fields, the conversation so
/// far, `stream: true` and the offered tools, as byte chunks that share the
/// images with the received body.
fn encode_round(
    request: &Map<String, Value>,
    messages: &[Value],
    tools: Option<&[Value]>,
    answer_fields: &[(&str, &Value)],
    images: &crate::payload::Images,
) -> Result<Vec<bytes::Bytes>, String> {
    use crate::payload::Field;
    const STREAM: Value = Value::Bool(true);
    let fields = request
        .iter()
        .map(|(key, value)| (key.as_str(), Field::Value(value)))
        .chain(
            answer_fields
                .iter()
                .map(|(key, value)| (*key, Field::Value(value))),
        )
        .chain([
            ("messages", Field::Array(messages)),
            ("stream", Field::Value(&STREAM)),
        ])
        .chain(tools.map(|tools| ("tools", Field::Array(tools))));
    crate::payload::encode_object(fields, images)
        .map_err(|err| format!("cannot encode the request for Ollama: {err}"))
}

/// Applies the client's `keep_alive` to `model` once the loop is over (it
/// was left out of the last round, which might not have been the last):
/// an empty `/api/generate`, which only sets how long the model stays
/// loaded. In the background: the client does not wait for it.
fn apply_keep_alive(ctx: &ChatContext, model: &str, keep_alive: &Value) {
    let upstream = ctx.upstream.clone();
    let body = json!({"model": model, "keep_alive": keep_alive, "stream": false});
    let model = model.to_string();
    tokio::spawn(async move {
        match upstream
            .post_json_read("/api/generate", &body, 64 * 1024)
            .await
        {
            Ok((status, _)) if status.is_success() => {}
            Ok((status, _)) => {
                tracing::warn!(model = %model, %status, "Ollama refused the client's keep_alive")
            }
            Err(err) => {
                tracing::warn!(model = %model, error = %err, "the client's keep_alive did not reach Ollama")
            }
        }
    });
}

/// Runs oapd's calls with bounded parallelism; results in call order.
/// Arguments are checked against the tool's schema first; a call to a
/// name not in `by_name` is a tool error.
pub async fn run_calls(
    ctx: &ChatContext,
    by_name: &ToolsByName<'_>,
    calls: &[ToolCall],
) -> Vec<ToolResult> {
    run_calls_timed(ctx, by_name, calls)
        .await
        .into_iter()
        .map(|(result, _)| result)
        .collect()
}

/// [`run_calls`], each result with how long its call took.
async fn run_calls_timed(
    ctx: &ChatContext,
    by_name: &ToolsByName<'_>,
    calls: &[ToolCall],
) -> Vec<(ToolResult, Duration)> {
    use futures_util::stream::{self, StreamExt};
    type Job = std::pin::Pin<Box<dyn std::future::Future<Output = (ToolResult, Duration)> + Send>>;
    let mut jobs: Vec<Job> = Vec::with_capacity(calls.len());
    for call in calls {
        let injected = by_name.get(call.name.as_str());
        let tool = injected.map(|t| (t.record.clone(), t.manifest.clone()));
        let schema = injected.and_then(|t| t.definition.pointer("/function/parameters").cloned());
        let runner = ctx.runner.clone();
        let call = call.clone();
        let on_result = injected.and_then(|t| t.on_result.clone());
        let job = async move {
            let Some((record, manifest)) = tool else {
                return ToolResult {
                    content: format!("Error: unknown tool '{}'", call.name),
                    ok: false,
                };
            };
            if let Some(error) = &call.arguments_error {
                return ToolResult {
                    content: format!("Error: the arguments for {} were not usable ({error}). Call it again with a JSON object of arguments.", call.name),
                    ok: false,
                };
            }
            let arguments = match schema {
                Some(schema) => match oap_manifest::tool::check_arguments(&schema, &call.arguments)
                {
                    Ok(arguments) => arguments,
                    Err(problems) => {
                        return ToolResult {
                            content: format!(
                            "Error: {} was not called: {}. Fix the arguments and call it again.",
                            call.name,
                            problems.join("; ")
                        ),
                            ok: false,
                        }
                    }
                },
                None => call.arguments.clone(),
            };
            let result = runner.run(record, manifest, arguments.clone()).await;
            if let Some(hook) = on_result {
                hook(&arguments, result.ok);
            }
            result
        };
        jobs.push(Box::pin(async move {
            let started = Instant::now();
            let result = job.await;
            (result, started.elapsed())
        }));
    }
    stream::iter(jobs)
        .buffered(ctx.max_parallel_tools.max(1))
        .collect()
        .await
}

/// Sends the client the calls it owns (if any) and the one final chunk.
async fn finish(
    out: &mpsc::Sender<Event>,
    model: &str,
    done: Option<Value>,
    handed_back: Vec<ToolCall>,
    stats: LoopStats,
    hooks: &Hooks,
) {
    if !handed_back.is_empty() {
        let calls: Vec<Value> = handed_back
            .iter()
            .enumerate()
            .map(|(index, call)| {
                let mut wire = call.to_ollama();
                wire["function"]["index"] = Value::from(index);
                wire
            })
            .collect();
        let chunk = json!({
            "model": model,
            "created_at": now_rfc3339(),
            "message": {"role": "assistant", "content": "", "tool_calls": calls},
            "done": false,
        });
        if out.send(Event::Chunk(chunk)).await.is_err() {
            return;
        }
    }
    let mut done = done.unwrap_or_else(|| {
        json!({
            "model": model,
            "created_at": now_rfc3339(),
            "message": {"role": "assistant", "content": ""},
            "done": true,
            "done_reason": "stop",
        })
    });
    if let Some(message) = done.get_mut("message").and_then(Value::as_object_mut) {
        message.remove("tool_calls");
        message.insert("content".into(), Value::from(""));
    }
    done["done"] = Value::Bool(true);
    done["oap_tools_injected"] = Value::from(stats.tools_injected);
    done["oap_round"] = Value::from(stats.rounds);
    hooks.finish(&mut done);
    let _ = out.send(Event::Chunk(done)).await;
}

/// Runs a round with its client-facing events held back; returns them.
async fn held_round(
    ctx: &ChatContext,
    body: Vec<bytes::Bytes>,
    hold_printed: bool,
) -> (Result<Round, RoundError>, Vec<Event>) {
    let (tx, mut rx) = mpsc::channel(64);
    let run = async move {
        let result = stream_round(ctx, body, &tx, hold_printed).await;
        drop(tx);
        result
    };
    let collect = async {
        let mut held = Vec::new();
        while let Some(event) = rx.recv().await {
            held.push(event);
        }
        held
    };
    tokio::join!(run, collect)
}

/// Sends held events on; false when the client is gone.
async fn release(out: &mpsc::Sender<Event>, held: Vec<Event>) -> bool {
    for event in held {
        if out.send(event).await.is_err() {
            return false;
        }
    }
    true
}

pub(crate) enum RoundError {
    ClientGone,
    /// Ollama (or the way to it) failed; `status` is what the client
    /// should see if nothing was sent yet.
    Upstream {
        status: StatusCode,
        message: String,
    },
}

fn upstream_failed(message: impl Into<String>) -> RoundError {
    RoundError::Upstream {
        status: StatusCode::BAD_GATEWAY,
        message: message.into(),
    }
}

pub(crate) struct Round {
    content: String,
    /// The streamed `thinking`, joined.
    thinking: String,
    calls: Vec<ToolCall>,
    /// The upstream's final `done:true` chunk, held back from the client.
    done: Option<Value>,
    /// Chunks held back as a possible printed call (`printed.rs`), not sent.
    held: Vec<Value>,
}

/// One upstream call: forwards content as it arrives, holds back tool calls
/// and the `done` chunk, and returns what the model asked for.
pub(crate) async fn stream_round(
    ctx: &ChatContext,
    body: Vec<bytes::Bytes>,
    out: &mpsc::Sender<Event>,
    hold_printed: bool,
) -> Result<Round, RoundError> {
    let response = match ctx.upstream.post_parts("/api/chat", body, None).await {
        Ok(response) => response,
        Err(err) => {
            let status = err.status();
            return Err(RoundError::Upstream {
                status,
                message: err.to_string(),
            });
        }
    };
    let status = response.status();
    let mut upstream_body = response.into_body();
    if !status.is_success() {
        let message = crate::upstream::error_message(upstream_body).await;
        let message = if message.trim().is_empty() {
            format!("Ollama answered {status}")
        } else {
            message
        };
        return Err(RoundError::Upstream { status, message });
    }

    let mut decoder = LineDecoder::new(MAX_UPSTREAM_LINE);
    let mut calls = ToolCallAccumulator::new();
    let mut content = String::new();
    let mut thinking = String::new();
    let mut holdback = crate::printed::Holdback::new(hold_printed);
    let mut done = None;
    while done.is_none() {
        let frame = tokio::select! {
            frame = upstream_body.frame() => frame,
            _ = out.closed() => return Err(RoundError::ClientGone),
        };
        let (lines, ended) = match frame {
            None => (decoder.finish().into_iter().collect(), true),
            Some(Err(err)) => {
                return Err(upstream_failed(format!(
                    "the connection to Ollama broke mid-answer: {err}"
                )))
            }
            Some(Ok(frame)) => match frame.into_data() {
                Ok(data) => (
                    decoder.push(&data).map_err(|err| {
                        upstream_failed(format!("Ollama sent a bad stream: {err}"))
                    })?,
                    false,
                ),
                Err(_) => continue,
            },
        };
        for line in lines {
            let Ok(mut chunk) = serde_json::from_slice::<Value>(&line) else {
                return Err(upstream_failed("Ollama sent a line that is not JSON"));
            };
            if let Some(error) = chunk.get("error") {
                let message = error
                    .as_str()
                    .map(str::to_string)
                    .unwrap_or_else(|| error.to_string());
                return Err(RoundError::Upstream {
                    status: StatusCode::INTERNAL_SERVER_ERROR,
                    message,
                });
            }
            calls.push_chunk(&chunk);
            let is_done = chunk.get("done").and_then(Value::as_bool) == Some(true);
            if let Some(message) = chunk.get_mut("message").and_then(Value::as_object_mut) {
                message.remove("tool_calls");
                if let Some(text) = message.get("content").and_then(Value::as_str) {
                    content.push_str(text);
                }
                if let Some(text) = message.get("thinking").and_then(Value::as_str) {
                    thinking.push_str(text);
                }
            }
            if is_done {
                // Text on the done chunk goes out on its own chunk, so the
                // final done chunk stays empty, as Ollama's rendered path's is.
                if has_visible_text(&chunk) {
                    let mut piece = chunk.clone();
                    piece["done"] = Value::Bool(false);
                    strip_metrics(&mut piece);
                    for piece in holdback.pass(piece, &content) {
                        if out.send(Event::Chunk(piece)).await.is_err() {
                            return Err(RoundError::ClientGone);
                        }
                    }
                }
                done = Some(chunk);
                break;
            }
            if has_visible_text(&chunk) {
                for piece in holdback.pass(chunk, &content) {
                    if out.send(Event::Chunk(piece)).await.is_err() {
                        return Err(RoundError::ClientGone);
                    }
                }
            }
        }
        if ended && done.is_none() {
            return Err(upstream_failed(
                "Ollama closed the stream before it was done",
            ));
        }
    }
    Ok(Round {
        content,
        thinking,
        calls: calls.finish(),
        done,
        held: holdback.into_held(),
    })
}

fn has_visible_text(chunk: &Value) -> bool {
    ["content", "thinking"].iter().any(|key| {
        chunk
            .pointer(&format!("/message/{key}"))
            .and_then(Value::as_str)
            .is_some_and(|s| !s.is_empty())
    }) || chunk.pointer("/message/images").is_some()
}

fn strip_metrics(chunk: &mut Value) {
    if let Some(object) = chunk.as_object_mut() {
        for key in [
            "done_reason",
            "total_duration",
            "load_duration",
            "prompt_eval_count",
            "prompt_eval_duration",
            "eval_count",
            "eval_duration",
        ] {
            object.remove(key);
        }
    }
}

/// `created_at` in Ollama's format (RFC 3339, UTC, nanoseconds).
pub fn now_rfc3339() -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let secs = now.as_secs() as i64;
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{:09}Z",
        rem / 3600,
        (rem % 3600) / 60,
        rem % 60,
        now.subsec_nanos()
    )
}

/// Days since 1970-01-01 to a proleptic Gregorian date (Howard Hinnant's algorithm).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

/// Combines the client-facing chunks into one response, as Ollama does for
/// `stream:false`: content and thinking concatenated, tool calls appended,
/// the final chunk's metadata.
pub fn aggregate(chunks: &[Value]) -> Result<Value, String> {
    let mut content = String::new();
    let mut thinking = String::new();
    let mut tool_calls = Vec::new();
    let mut last = None;
    for chunk in chunks {
        if let Some(error) = chunk.get("error") {
            return Err(error
                .as_str()
                .map(str::to_string)
                .unwrap_or_else(|| error.to_string()));
        }
        if let Some(text) = chunk.pointer("/message/content").and_then(Value::as_str) {
            content.push_str(text);
        }
        if let Some(text) = chunk.pointer("/message/thinking").and_then(Value::as_str) {
            thinking.push_str(text);
        }
        if let Some(calls) = chunk
            .pointer("/message/tool_calls")
            .and_then(Value::as_array)
        {
            tool_calls.extend(calls.iter().cloned());
        }
        if chunk.get("done").and_then(Value::as_bool) == Some(true) {
            last = Some(chunk.clone());
        }
    }
    let mut response = last.ok_or_else(|| "the answer ended before it was done".to_string())?;
    let mut message = Map::new();
    message.insert("role".into(), Value::from("assistant"));
    message.insert("content".into(), Value::from(content));
    if !thinking.is_empty() {
        message.insert("thinking".into(), Value::from(thinking));
    }
    if !tool_calls.is_empty() {
        message.insert("tool_calls".into(), Value::Array(tool_calls));
    }
    response["message"] = Value::Object(message);
    Ok(response)
}

/// Drains the loop's channel (for `stream:false`): the chunks, or the
/// error that ended the loop.
pub async fn collect(mut rx: mpsc::Receiver<Event>) -> Result<Vec<Value>, (StatusCode, String)> {
    let mut chunks = Vec::new();
    while let Some(event) = rx.recv().await {
        match event {
            Event::Chunk(chunk) => chunks.push(chunk),
            Event::Error { status, message } => return Err((status, message)),
        }
    }
    Ok(chunks)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> BridgeSettings {
        BridgeSettings {
            enabled: true,
            default_top_k: 3,
            max_rounds: 3,
        }
    }

    fn request(value: Value) -> Map<String, Value> {
        value.as_object().cloned().unwrap()
    }

    #[test]
    fn extension_fields_are_removed_validated_and_clamped() {
        let mut r = request(
            json!({"model": "m", "messages": [], "oap_top_k": 5, "oap_max_rounds": 9,
            "oap_discover": false, "oap_auto_execute": false, "options": {"num_ctx": 8192}}),
        );
        let options = take_options(&mut r, &settings()).unwrap();
        assert_eq!(
            options,
            ChatOptions {
                discover: false,
                top_k: 5,
                auto_execute: false,
                max_rounds: 3,
                stream: true,
                conversation: None,
            }
        );
        assert!(r.keys().all(|k| !k.starts_with("oap_")));
        assert_eq!(r["options"]["num_ctx"], 8192);
    }

    #[test]
    fn bad_extension_fields_are_refused_with_their_name() {
        for (body, needle) in [
            (json!({"model": "m", "oap_top_k": 0}), "oap_top_k"),
            (json!({"model": "m", "oap_top_k": 21}), "oap_top_k"),
            (
                json!({"model": "m", "oap_max_rounds": "2"}),
                "oap_max_rounds",
            ),
            (json!({"model": "m", "oap_discover": "yes"}), "oap_discover"),
            (json!({"model": "m", "stream": "no"}), "stream"),
            (json!({"messages": []}), "model"),
            (json!({"model": "m", "messages": {}}), "messages"),
        ] {
            let err = take_options(&mut request(body), &settings()).unwrap_err();
            assert!(err.0.contains(needle), "{err}");
        }
    }

    #[test]
    fn the_task_is_the_last_user_message() {
        let r = request(json!({"model": "m", "messages": [
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": "first"},
            {"role": "assistant", "content": "ok"},
            {"role": "user", "content": "  count the words  "},
            {"role": "tool", "content": "3"}]}));
        assert_eq!(task_of(&r).as_deref(), Some("count the words"));
        assert_eq!(task_of(&request(json!({"model": "m"}))), None);
    }

    #[test]
    fn aggregation_matches_ollama() {
        let chunks = vec![
            json!({"model": "m", "message": {"role": "assistant", "content": "Hel", "thinking": "h"}, "done": false}),
            json!({"model": "m", "message": {"role": "assistant", "content": "lo"}, "done": false}),
            json!({"model": "m", "message": {"role": "assistant", "content": "", "tool_calls": [{"function": {"index": 0, "name": "x", "arguments": {}}}]}, "done": false}),
            json!({"model": "m", "message": {"role": "assistant", "content": ""}, "done": true, "eval_count": 7, "oap_round": 2}),
        ];
        let response = aggregate(&chunks).unwrap();
        assert_eq!(response["message"]["content"], "Hello");
        assert_eq!(response["message"]["thinking"], "h");
        assert_eq!(
            response["message"]["tool_calls"][0]["function"]["name"],
            "x"
        );
        assert_eq!(response["eval_count"], 7);
        assert_eq!(response["oap_round"], 2);
        assert!(aggregate(&[json!({"error": "boom"})])
            .unwrap_err()
            .contains("boom"));
        assert!(aggregate(&chunks[..2]).is_err());
    }

    #[test]
    fn a_result_names_its_outcome_in_a_word() {
        let result = |ok: bool, content: &str| ToolResult {
            content: content.into(),
            ok,
        };
        assert_eq!(result(true, "4").outcome(), "ok");
        let timed_out =
            "Error: `wc` timed out after 10s; it and everything it started were killed.";
        assert_eq!(result(false, timed_out).outcome(), "timeout");
        for refused in [
            "Error: oap_wc was not called: text is required. Fix the arguments and call it again.",
            "Error: unknown tool 'x'",
            "Error: refused to connect to h (10.0.0.1): it is a private-network address",
        ] {
            assert_eq!(result(false, refused).outcome(), "refused", "{refused}");
        }
        let failed = "Error: `grep` failed (exit status 2)";
        assert_eq!(result(false, failed).outcome(), "error");
    }

    #[test]
    fn timestamps_look_like_ollamas() {
        let ts = now_rfc3339();
        assert_eq!(ts.len(), 30, "{ts}");
        assert!(ts.ends_with('Z') && ts.as_bytes()[10] == b'T');
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(19_723), (2024, 1, 1));
        assert_eq!(civil_from_days(20_513), (2026, 3, 1));
    }
}

#[cfg(test)]
mod window_tests {
    use super::{context_window, OLLAMA_DEFAULT_NUM_CTX};
    use serde_json::json;

    #[test]
    fn the_window_is_the_modelfile_num_ctx_or_the_default_within_the_trained_length() {
        let show = |parameters: &str, trained: u64| {
            json!({"parameters": parameters,
                   "model_info": {"general.architecture": "qwen3", "qwen3.context_length": trained}})
        };
        assert_eq!(
            context_window(&show("stop \"<|im_end|>\"", 40_960)),
            OLLAMA_DEFAULT_NUM_CTX
        );
        assert_eq!(
            context_window(&show("num_ctx 16384\nstop \"x\"", 40_960)),
            16_384
        );
        assert_eq!(context_window(&show("num_ctx 16384", 2048)), 2048);
        assert_eq!(context_window(&show("", 1024)), 1024);
        assert_eq!(context_window(&json!({})), OLLAMA_DEFAULT_NUM_CTX);
    }
}

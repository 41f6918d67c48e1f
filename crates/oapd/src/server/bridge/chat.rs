//! The Ollama-compatible surface: `/api/chat` with the tool loop, the
//! pass-through routes, and `/v1/tools`. This is the adapter between HTTP
//! and `oap_bridge`: it parses a request, builds its hooks from the
//! settings (`oap_bridge::assembly::prepare`) and turns the loop's events
//! into responses.

use std::sync::Arc;

use futures_util::future::BoxFuture;
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::header::AUTHORIZATION;
use hyper::{Request, Response, StatusCode};
use oap_bridge::assembly::Prepared;
use oap_bridge::hooks::Hooks;
use oap_bridge::payload::{Held, Hold};
use oap_bridge::tool_loop::{self as bridge, BridgeSettings};
use oap_bridge::tools::ToolSource;
use oap_bridge::upstream::{self, UpstreamError};
use oap_bridge::{ChatContext, ChatOptions, Event, InjectedTool};
use oap_discovery::Engine;
use serde_json::{json, Map, Value};
use tokio::sync::mpsc;

use crate::server::transport::http::{self, Body, BoxError};

/// Tokens of the context window kept free for the model's answer when
/// oapd's tools are fitted into it.
const ANSWER_RESERVE_TOKENS: usize = 256;

/// Chunks buffered between the loop and a slow client; back-pressure beyond
/// it slows the loop (and so Ollama) instead of growing memory.
const CHANNEL_DEPTH: usize = 64;

/// Serves `/api/chat` and `/v1/chat/completions` through the tool loop,
/// and passes the rest of Ollama's API through.
pub struct ChatService {
    /// The index tools are discovered from.
    pub engine: Arc<Engine>,
    /// The upstream, tool runner and limits every chat request shares.
    pub ctx: Arc<ChatContext>,
    /// `tool_bridge` defaults the request's `oap_*` fields override.
    pub settings: BridgeSettings,
    /// Cap on chat request bodies (images make them large).
    pub max_request_bytes: usize,
    /// oapd's own bearer token: stripped before forwarding, so it never
    /// reaches Ollama.
    pub strips_authorization: bool,
    /// Token budget, exposure mode and URL policy (`exposure.rs`).
    pub exposure: oap_bridge::exposure::ExposureSettings,
    /// Verdicts of `oapd validate-model`; consulted when
    /// `tool_bridge.only_validated_models` is on.
    pub validation: Arc<oap_bridge::validation::ValidationGate>,
    /// The experience cache, when enabled.
    pub experience: Option<Arc<crate::server::bridge::experience::Experience>>,
    /// What the stdio tool sandbox enforces here.
    pub sandbox: crate::tools::SandboxReport,
    /// Silence after which a streamed answer gets a keep-alive frame
    /// (`tool_bridge.stream_keepalive`).
    pub keepalive: std::time::Duration,
}

impl ChatService {
    /// `POST /api/chat` and `POST /v1/chat`.
    pub async fn ollama_chat(self: &Arc<Self>, request: Request<Incoming>) -> Response<Body> {
        let body = match http::read_body(request.into_body(), self.max_request_bytes).await {
            Ok(body) => body,
            Err(err) => return err.into_response(),
        };
        // The images stay in the received bytes (payload.rs); the budget
        // share goes wherever they go.
        let (bytes, permit) = body.into_parts();
        let (mut chat, images) = match oap_bridge::payload::parse_chat(&bytes) {
            Ok(parsed) => parsed,
            Err(err) => return http::error(StatusCode::BAD_REQUEST, err.to_string()),
        };
        drop(bytes);
        let held = Held {
            images,
            permit: Some(Hold::new(permit)),
        };
        let mut options = match bridge::take_options(&mut chat, &self.settings) {
            Ok(options) => options,
            Err(err) => return http::error(StatusCode::BAD_REQUEST, err.0),
        };
        options.conversation = self.ctx.mixed_turns.enter(&mut chat, &held.images);
        let tools = match self.tools_for(&chat, &options).await {
            Ok(Some(tools)) => tools,
            Ok(None) => return self.forward_chat("/api/chat", chat, held).await,
            Err(response) => return response,
        };
        let (tools, prepared) = self.prepare(Some(tools), &mut chat, &options);
        let tool_tokens = prepared.tool_tokens;
        let model = chat
            .get("model")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        let rx = self.start_loop(chat, tools, options.clone(), prepared, held);
        let mut response = if options.stream {
            let wire = crate::server::bridge::streaming::Ndjson::new(&model);
            crate::server::bridge::streaming::stream_events(rx, wire, self.keepalive)
                .await
                .unwrap_or_else(|(status, message)| http::error(status, message))
        } else {
            match bridge::collect(rx).await.and_then(|chunks| {
                bridge::aggregate(&chunks).map_err(|e| (StatusCode::BAD_GATEWAY, e))
            }) {
                Ok(response) => http::json(StatusCode::OK, &response),
                Err((status, message)) => http::error(status, message),
            }
        };
        set_tokens_header(&mut response, tool_tokens);
        response
    }

    /// `POST /v1/chat/completions`: the same discovery and loop behind
    /// OpenAI's wire format (SSE chunks when streaming).
    pub async fn openai_chat(self: &Arc<Self>, request: Request<Incoming>) -> Response<Body> {
        use oap_wire::openai;
        let (original, permit) =
            match http::read_json_object(request.into_body(), self.max_request_bytes, openai_error)
                .await
            {
                Ok(read) => read,
                Err(answer) => return answer,
            };
        let mut chat = match openai::chat_request_to_ollama(&original) {
            Ok(Value::Object(chat)) => chat,
            Ok(_) => {
                return openai_error(StatusCode::BAD_REQUEST, "request could not be translated")
            }
            Err(err) => return http::json(StatusCode::BAD_REQUEST, &err.to_openai()),
        };
        // Extension fields (sent by OpenAI clients via extra_body).
        if let Some(object) = original.as_object() {
            for (key, value) in object.iter().filter(|(k, _)| k.starts_with("oap_")) {
                chat.insert(key.clone(), value.clone());
            }
        }
        let mut options = match bridge::take_options(&mut chat, &self.settings) {
            Ok(options) => options,
            Err(err) => return openai_error(StatusCode::BAD_REQUEST, &err.0),
        };
        options.conversation = self.ctx.mixed_turns.enter(&mut chat, &Default::default());
        let tools = match self.tools_for(&chat, &options).await {
            Ok(tools) => tools,
            Err(response) => return response,
        };
        let (tools, prepared) = self.prepare(tools, &mut chat, &options);
        let held = Held {
            images: Default::default(),
            permit: Some(Hold::new(permit)),
        };
        let tool_tokens = prepared.tool_tokens;
        let id = openai::new_completion_id();
        let created = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        let translator = openai::ChunkTranslator::for_request(&original, id.clone(), created);
        let legacy_functions = openai::tool_choice::is_legacy(&original);
        // The translated request is all the loop needs.
        drop(original);
        let rx = self.start_loop(chat, tools, options.clone(), prepared, held);
        if !options.stream {
            return match bridge::collect(rx).await.and_then(|chunks| {
                bridge::aggregate(&chunks).map_err(|e| (StatusCode::BAD_GATEWAY, e))
            }) {
                Ok(response) => {
                    let mut completion = openai::ollama_to_chat_completion(&response, &id, created);
                    if legacy_functions {
                        openai::tool_choice::to_legacy_completion(&mut completion);
                    }
                    completion["oap_tool_tokens"] = Value::from(tool_tokens);
                    let mut response = http::json(StatusCode::OK, &completion);
                    set_tokens_header(&mut response, tool_tokens);
                    response
                }
                Err((status, message)) => openai_error(status, &message),
            };
        }
        let mut response =
            match crate::server::bridge::streaming::stream_events(rx, translator, self.keepalive)
                .await
            {
                Ok(response) => response,
                Err((status, message)) => return openai_error(status, &message),
            };
        set_tokens_header(&mut response, tool_tokens);
        response
    }

    /// Applies the exposure settings to one request's discovered tools
    /// (`None`: nothing of oapd's is offered) and builds its hooks.
    pub fn prepare(
        self: &Arc<Self>,
        tools: Option<Vec<InjectedTool>>,
        chat: &mut Map<String, Value>,
        options: &ChatOptions,
    ) -> (Vec<InjectedTool>, Prepared) {
        // The tool-listing instruction, unless the request says, is the
        // model's: its validation record and its size (`guide.rs`). Decided
        // first, since it takes room in the context window too.
        let model = chat.get("model").and_then(Value::as_str).unwrap_or("");
        let options = &oap_bridge::guide::with_default(
            options,
            self.validation.store.get(model).as_ref(),
            self.ctx.capabilities.parameter_size(model).as_deref(),
        );
        let instruction = options.tool_instruction == Some(true);
        let tools = match tools {
            Some(tools) if self.exposure.exposure != oap_bridge::ToolExposure::Meta => {
                Some(self.fit_context(tools, chat, instruction))
            }
            other => other,
        };
        let source: Arc<dyn ToolSource> = self.clone();
        oap_bridge::assembly::prepare(&self.exposure, &self.engine, source, tools, chat, options)
    }

    /// Shrinks oapd's tools (shorter, fewer, none) so that they, the
    /// client's tools, the conversation and room for the answer fit the
    /// context window: the request's `options.num_ctx`, else what
    /// `/api/show` implies for the model, else Ollama's default. Ollama
    /// would otherwise cut the start of the conversation to make room.
    ///
    /// With `instruction`, the tool-listing instruction is counted as part
    /// of the conversation, as written for all of `tools` (fewer tools make
    /// it shorter, so the estimate errs on the side of room).
    fn fit_context(
        &self,
        tools: Vec<InjectedTool>,
        chat: &Map<String, Value>,
        instruction: bool,
    ) -> Vec<InjectedTool> {
        if tools.is_empty() {
            return tools;
        }
        let model = chat.get("model").and_then(Value::as_str).unwrap_or("");
        let window = chat
            .get("options")
            .and_then(|o| o.get("num_ctx"))
            .and_then(Value::as_u64)
            .filter(|n| *n > 0)
            .or_else(|| self.ctx.capabilities.window(model))
            .unwrap_or(bridge::OLLAMA_DEFAULT_NUM_CTX);
        let instruction_tokens = if instruction {
            oap_bridge::guide::tokens(&oap_bridge::guide::instruction(&tools))
        } else {
            0
        };
        let conversation = conversation_tokens(chat)
            + oap_bridge::exposure::client_tool_tokens(chat)
            + instruction_tokens;
        let window = usize::try_from(window).unwrap_or(usize::MAX);
        let room = window.saturating_sub(conversation.saturating_add(ANSWER_RESERVE_TOKENS));
        let offered = tools.len();
        // A budget of 0 means "unlimited" to fit_budget: no room is no tools.
        let tools = if room == 0 {
            Vec::new()
        } else {
            oap_bridge::exposure::fit_budget(tools, room).0
        };
        if tools.len() < offered {
            tracing::info!(
                window,
                conversation_tokens = conversation,
                room,
                offered,
                kept = tools.len(),
                "oapd's tools shrunk to fit the context window"
            );
        }
        tools
    }

    /// Starts the loop on its own task; the returned channel carries its events.
    pub fn start_loop(
        &self,
        chat: Map<String, Value>,
        tools: Vec<InjectedTool>,
        options: ChatOptions,
        prepared: Prepared,
        held: Held,
    ) -> mpsc::Receiver<Event> {
        tracing::info!(
            tools = tools.len(),
            tool_tokens = prepared.tool_tokens,
            client_tool_tokens = prepared.client_tool_tokens,
            meta = prepared.meta,
            "tools offered"
        );
        let (tx, rx) = mpsc::channel(CHANNEL_DEPTH);
        let mut hooks: Hooks = prepared.hooks;
        // Last, so it sees what the other hooks decided and what the
        // client gets.
        let model = chat.get("model").and_then(Value::as_str).unwrap_or("");
        let names = tools.iter().map(|tool| tool.name.clone()).collect();
        hooks.push(Box::new(crate::server::observe::Observer::new(
            model, names, &chat,
        )));
        let run = bridge::run_loop(self.ctx.clone(), chat, tools, options, hooks, held, tx);
        // The loop's task is still this request: its log lines carry the
        // request id, and so do its requests to Ollama.
        let run = tracing::Instrument::in_current_span(run);
        match oap_bridge::upstream::current_request_id() {
            Some(id) => tokio::spawn(oap_bridge::upstream::REQUEST_ID.scope(id, run)),
            None => tokio::spawn(run),
        };
        rx
    }

    /// The tools to inject, or `None` when the request should pass through
    /// untouched (bridge off, discovery off, or a model without tools).
    pub async fn tools_for(
        &self,
        chat: &Map<String, Value>,
        options: &ChatOptions,
    ) -> Result<Option<Vec<InjectedTool>>, Response<Body>> {
        if !self.settings.enabled || !options.discover {
            return Ok(None);
        }
        let model = chat
            .get("model")
            .and_then(Value::as_str)
            .unwrap_or_default();
        if !self.validation.allows(model) {
            return Ok(None);
        }
        match self
            .ctx
            .capabilities
            .supports_tools(&self.ctx.upstream, model)
            .await
        {
            Ok(true) => {}
            Ok(false) => return Ok(None),
            Err(err) => return Err(upstream_error(err)),
        }
        if self.exposure.exposure == oap_bridge::ToolExposure::Meta {
            // Discovery runs when the model asks for it (oap_discover).
            return Ok(Some(Vec::new()));
        }
        let Some(task) = bridge::task_of(chat) else {
            return Ok(Some(Vec::new()));
        };
        let reserved = bridge::client_tool_names(chat);
        Ok(Some(
            self.tools_for_task(task, options.top_k, reserved).await,
        ))
    }

    /// The tools for `task`: what the experience cache remembers for it
    /// when the cache is on (it falls back to discovery itself), else what
    /// discovery finds. Direct mode asks with the user's message, meta mode
    /// with the task the model passes to `oap_discover`.
    pub async fn tools_for_task(
        &self,
        task: String,
        top_k: usize,
        reserved: Vec<String>,
    ) -> Vec<InjectedTool> {
        match &self.experience {
            Some(experience) => experience.tools_for(task, top_k, reserved).await,
            None => self.discover_tools(task, top_k, reserved).await,
        }
    }

    /// Discovers manifests for `task` and converts those that fit into tools.
    pub async fn discover_tools(
        &self,
        task: String,
        top_k: usize,
        reserved: Vec<String>,
    ) -> Vec<InjectedTool> {
        let engine = self.engine.clone();
        let started = std::time::Instant::now();
        let found = tokio::task::spawn_blocking(move || engine.discover(&task, top_k)).await;
        let discovery = match found {
            Ok(Ok(discovery)) => {
                crate::metrics::get().discovery(
                    "chat",
                    started.elapsed(),
                    discovery.best.is_none(),
                );
                discovery
            }
            Ok(Err(err)) => {
                tracing::warn!(error = %err, "discovery failed; no tools injected");
                return Vec::new();
            }
            Err(err) => {
                tracing::error!(error = %err, "discovery task failed");
                return Vec::new();
            }
        };
        self.tools_from_discovery(&discovery, reserved)
    }

    /// The discovered candidates that fit, as tools.
    pub fn tools_from_discovery(
        &self,
        discovery: &oap_discovery::Discovery,
        reserved: Vec<String>,
    ) -> Vec<InjectedTool> {
        oap_bridge::tools::from_discovery(&self.engine, discovery, reserved)
    }

    /// `POST /v1/tools {"task", "top_k"}`: the discovered tools and their
    /// registry, for clients that run their own loop.
    pub async fn tools_endpoint(
        &self,
        request: Request<Incoming>,
        max_task_bytes: usize,
    ) -> Response<Body> {
        let body = match http::read_body(request.into_body(), 1024 * 1024).await {
            Ok(body) => body,
            Err(err) => return err.into_response(),
        };
        let parsed: Value = match serde_json::from_slice(&body) {
            Ok(parsed) => parsed,
            Err(err) => {
                return http::error(StatusCode::BAD_REQUEST, format!("invalid JSON: {err}"))
            }
        };
        let Some(task) = parsed.get("task").and_then(Value::as_str).map(str::trim) else {
            return http::error(StatusCode::BAD_REQUEST, "task: expected a string");
        };
        if task.is_empty() {
            return http::error(StatusCode::BAD_REQUEST, "task: must not be empty");
        }
        if task.len() >= max_task_bytes {
            return http::error(
                StatusCode::BAD_REQUEST,
                format!("task: longer than {max_task_bytes} bytes"),
            );
        }
        let top_k = match parsed.get("top_k") {
            None | Some(Value::Null) => self.settings.default_top_k,
            Some(value) => match value.as_u64() {
                Some(k @ 1..=20) => k as usize,
                _ => {
                    return http::error(
                        StatusCode::BAD_REQUEST,
                        format!("top_k: expected an integer from 1 to 20, got {value}"),
                    )
                }
            },
        };
        let tools = self
            .discover_tools(task.to_string(), top_k, Vec::new())
            .await;
        let (tools, fitting) =
            oap_bridge::exposure::fit_budget(tools, self.exposure.tool_token_budget);
        let mut registry = Map::new();
        for tool in &tools {
            registry.insert(
                tool.name.clone(),
                json!({
                    "tool": tool.definition,
                    "id": tool.record.id,
                    "domain": tool.record.id,
                    "trust": tool.record.trust,
                    "source": tool.record.origin.kind,
                    "manifest": tool.record.manifest,
                }),
            );
        }
        let definitions: Vec<&Value> = tools.iter().map(|t| &t.definition).collect();
        http::json(
            StatusCode::OK,
            &json!({"tools": definitions, "registry": registry,
                    "oap_tool_tokens": fitting.tokens_after}),
        )
    }

    /// Sends a chat to Ollama as it came (its images shared, not copied)
    /// and streams the answer back unchanged; the budget share is returned
    /// once Ollama has read the body.
    pub async fn forward_chat(
        &self,
        path: &str,
        chat: Map<String, Value>,
        held: Held,
    ) -> Response<Body> {
        let parts = match oap_bridge::payload::encode_chat(&chat, &held.images) {
            Ok(parts) => parts,
            Err(err) => {
                return http::error(
                    StatusCode::BAD_REQUEST,
                    format!("cannot encode the request for Ollama: {err}"),
                )
            }
        };
        drop(chat);
        match self.ctx.upstream.post_parts(path, parts, held.permit).await {
            Ok(response) => upstream::stream_back(response),
            Err(err) => upstream_error(err),
        }
    }

    /// Forwards any request to Ollama, streaming both ways (pull progress,
    /// blob uploads), with the Host header rewritten.
    pub async fn passthrough(&self, request: Request<Incoming>) -> Response<Body> {
        let (parts, body) = request.into_parts();
        let path_and_query = parts
            .uri
            .path_and_query()
            .map(|p| p.as_str().to_string())
            .unwrap_or_else(|| "/".into());
        let mut headers = parts.headers;
        if self.strips_authorization {
            headers.remove(AUTHORIZATION);
        }
        let body = body.map_err(|err| Box::new(err) as BoxError).boxed();
        match self
            .ctx
            .upstream
            .send(parts.method, &path_and_query, &headers, body)
            .await
        {
            Ok(response) => upstream::stream_back(response),
            Err(err) => upstream_error(err),
        }
    }
}

/// Meta mode's `oap_discover` and the experience cache ask here.
impl ToolSource for ChatService {
    fn tools_for_task(
        &self,
        task: String,
        top_k: usize,
        reserved: Vec<String>,
    ) -> BoxFuture<'_, Vec<InjectedTool>> {
        Box::pin(ChatService::tools_for_task(self, task, top_k, reserved))
    }
}

/// Estimated prompt tokens of a chat's messages: their text, tool calls
/// and names, a few per message for the template; images are not text
/// (their base64 would count a thousand times what the model sees).
fn conversation_tokens(chat: &Map<String, Value>) -> usize {
    use oap_bridge::tokens::estimate;
    const PER_MESSAGE: usize = 4;
    chat.get("messages")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_object)
        .map(|message| {
            message
                .iter()
                .filter(|(key, _)| key.as_str() != "images")
                .map(|(_, value)| match value {
                    Value::String(text) => estimate(text),
                    other => estimate(&other.to_string()),
                })
                .sum::<usize>()
                + PER_MESSAGE
        })
        .sum()
}

/// An upstream failure as Ollama itself would answer: `{"error": "..."}`,
/// 502 when unreachable, 504 when it did not answer in time.
pub fn upstream_error(err: UpstreamError) -> Response<Body> {
    http::error(err.status(), err.to_string())
}

/// `X-Oap-Tool-Tokens`: the estimated prompt tokens of oapd's tools.
pub fn set_tokens_header(response: &mut Response<Body>, tokens: usize) {
    response.headers_mut().insert(
        "x-oap-tool-tokens",
        hyper::header::HeaderValue::from(tokens),
    );
}

/// Streams the loop's events as NDJSON. The status is decided by the first
/// event: an error before any chunk is a real HTTP error (Ollama does the
/// same); after that, errors are `{"error"}` lines.
fn openai_error(status: StatusCode, message: &str) -> Response<Body> {
    http::json(
        status,
        &oap_wire::openai::openai_error(status.as_u16(), message),
    )
}

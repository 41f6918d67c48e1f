//! `/mcp`: oapd as an MCP server (streamable HTTP, stateless, JSON
//! responses), for MCP clients such as Claude Desktop, Home Assistant or an
//! IDE.
//!
//! Clients see two meta tools instead of the whole index:
//! `oap_discover {task, top_k?}` (the capabilities that fit, each with the
//! input schema the chat bridge would offer) and
//! `oap_invoke {tool, arguments}` (runs one capability by id). Discovery is
//! the same engine call and acceptance rule as the chat bridge
//! (`oap_bridge::tools::from_discovery`); every invocation goes through
//! [`McpTools::invoke_capability`], which checks the arguments as the bridge
//! does and runs the tool through the daemon's `ToolRunner` (trust, SSRF
//! rules, the stdio sandbox, timeouts, output caps).
//!
//! A client that knows its task up front may connect to
//! `/mcp?task=...&top_n=N` (N ≤ 10, default 3): `tools/list` then also
//! lists the top N fitting capabilities under their bridge names and
//! schemas, callable directly (through the same
//! [`McpTools::invoke_capability`]).
//!
//! The route sits behind the router's guards (Host/Origin, bearer token);
//! this module reads the body within the API's size cap and the in-flight
//! byte budget before rmcp's transport sees it, and checks it first
//! ([`check_body`]): rmcp answers a body it cannot use with plain text, a
//! client is owed a JSON-RPC error object (-32700 for a body that is not
//! JSON, -32600 for JSON that is not a message, -32602 for a request whose
//! params do not fit its method). Whatever rmcp still refuses as plain
//! text (an `Accept` without JSON and SSE, say) is turned into the same
//! kind of object.

use std::sync::Arc;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::header::{HeaderValue, CONTENT_TYPE};
use hyper::http::request::Parts;
use hyper::{Request, Response, StatusCode};
use oap_bridge::ToolResult;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ClientJsonRpcMessage,
    ClientNotification, ClientRequest, ContentBlock, Implementation, JsonRpcNotification,
    JsonRpcRequest, ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig,
    Tool,
};
use rmcp::service::RequestContext;
use rmcp::transport::streamable_http_server::session::never::NeverSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::{json, Map, Value};

use crate::server::bridge::chat::ChatService;
use crate::server::transport::http::{self, Body};

/// Name of the discovery meta tool.
pub const DISCOVER_TOOL: &str = "oap_discover";
/// Name of the invocation meta tool.
pub const INVOKE_TOOL: &str = "oap_invoke";
/// Largest `top_k` an `oap_discover` call may ask for.
pub const MAX_TOP_K: u64 = 20;
/// Largest `top_n` of a `/mcp?task=...` hint.
pub const MAX_TOP_N: u64 = 10;
/// Capabilities a task hint lists when it names no `top_n`.
pub const DEFAULT_TOP_N: usize = 3;

/// Limits the MCP surface takes from the config.
#[derive(Debug, Clone)]
pub struct McpSettings {
    /// `server.max_body_bytes`: largest JSON-RPC message accepted (else 413).
    pub max_body_bytes: usize,
    /// `server.max_task_bytes`: an `oap_discover` task this long or longer
    /// is refused.
    pub max_task_bytes: usize,
    /// `discovery.default_top_k`: candidates returned when `top_k` is absent.
    pub default_top_k: usize,
}

/// The `/mcp` endpoint: rmcp's streamable HTTP transport around
/// `McpTools`.
pub struct McpServer {
    service: StreamableHttpService<McpTools, NeverSessionManager>,
    max_body_bytes: usize,
}

impl McpServer {
    /// The endpoint serving `chat`'s engine and tool runner.
    pub fn new(chat: Arc<ChatService>, settings: McpSettings) -> McpServer {
        let tools = McpTools {
            chat,
            settings: settings.clone(),
        };
        // Stateless: no session table to cap or expire, every POST carries
        // its own request. Host and Origin were checked by the router (with
        // the operator's allowed hosts and CORS origins), so rmcp's own
        // loopback-only Host list is off.
        let config = StreamableHttpServerConfig::default()
            .with_legacy_session_mode(false)
            .with_json_response(true)
            .with_sse_keep_alive(None)
            .with_sse_retry(None)
            .disable_allowed_hosts()
            .disable_allowed_origins()
            .with_max_request_body_bytes(settings.max_body_bytes);
        let service = StreamableHttpService::new(
            move || Ok(tools.clone()),
            Arc::new(NeverSessionManager::default()),
            config,
        );
        McpServer {
            service,
            max_body_bytes: settings.max_body_bytes,
        }
    }

    /// `POST /mcp`: one JSON-RPC message in, its answer out.
    pub async fn handle(&self, request: Request<Incoming>) -> Response<Body> {
        let (parts, body) = request.into_parts();
        // Read within the size cap and the in-flight budget; the share is
        // held until the answer is built.
        let body = match http::read_body(body, self.max_body_bytes).await {
            Ok(body) => body,
            Err(err) => return err.into_response(),
        };
        let (bytes, permit) = body.into_parts();
        let response = self.answer(parts, bytes).await;
        drop(permit);
        response
    }

    /// The answer to a `/mcp` POST whose body has been read: the body
    /// check, then rmcp's transport and `McpTools`. Every answer is a
    /// JSON-RPC object, an SSE stream, or an empty 202 for a notification.
    pub async fn answer(&self, parts: Parts, body: Bytes) -> Response<Body> {
        if let Err(problem) = check_body(parts.headers.get(CONTENT_TYPE), &body) {
            tracing::debug!(error = %problem, "mcp body refused");
            return problem.into_response();
        }
        let request = Request::from_parts(parts, Full::new(body));
        let response = self.service.handle(request).await;
        plain_refusal_as_json_rpc(response).await
    }
}

/// JSON-RPC 2.0's code for a body that is not JSON.
pub const PARSE_ERROR: i64 = -32700;
/// JSON-RPC 2.0's code for JSON that is not a valid request.
pub const INVALID_REQUEST: i64 = -32600;
/// JSON-RPC 2.0's code for a request whose params do not fit its method.
pub const INVALID_PARAMS: i64 = -32602;

/// What is wrong with a `/mcp` body, found before rmcp sees it.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum BodyProblem {
    /// The bytes do not parse as JSON (truncated, garbage, not UTF-8).
    #[error("parse error: the body is not JSON: {0}")]
    NotJson(String),
    /// JSON, but not declared as such.
    #[error("invalid request: Content-Type must be application/json, got {0}")]
    ContentType(String),
    /// A JSON array: a batch, which this server (MCP 2025-06-18 and
    /// later, as rmcp) does not take.
    #[error("invalid request: a JSON-RPC batch (a JSON array) is not supported; send one message per POST")]
    Batch,
    /// JSON that is not an object at all (a string, a number, ...).
    #[error("invalid request: expected a JSON-RPC 2.0 message object, got {0}")]
    NotAnObject(&'static str),
    /// An object that is not a JSON-RPC 2.0 message.
    #[error("invalid request: {0}")]
    NotAMessage(String),
    /// A request or notification whose params do not fit its method.
    #[error("invalid params for {method}: {detail}")]
    Params {
        /// The request's id (null for a notification or an unusable id).
        id: Value,
        /// The method named.
        method: String,
        /// What serde found wrong.
        detail: String,
    },
}

impl BodyProblem {
    /// The JSON-RPC error code.
    pub fn code(&self) -> i64 {
        match self {
            BodyProblem::NotJson(_) => PARSE_ERROR,
            BodyProblem::Params { .. } => INVALID_PARAMS,
            BodyProblem::ContentType(_)
            | BodyProblem::Batch
            | BodyProblem::NotAnObject(_)
            | BodyProblem::NotAMessage(_) => INVALID_REQUEST,
        }
    }

    /// 415 for a body not declared as JSON (what rmcp answers too), 400
    /// for the rest, with the JSON-RPC error object as the body.
    pub fn into_response(self) -> Response<Body> {
        let status = match self {
            BodyProblem::ContentType(_) => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            _ => StatusCode::BAD_REQUEST,
        };
        let id = match &self {
            BodyProblem::Params { id, .. } => id.clone(),
            _ => Value::Null,
        };
        json_rpc_error(status, id, self.code(), &self.to_string())
    }
}

/// A JSON-RPC 2.0 error object as the whole answer.
fn json_rpc_error(status: StatusCode, id: Value, code: i64, message: &str) -> Response<Body> {
    http::json(
        status,
        &json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}}),
    )
}

/// Checks a `/mcp` body as rmcp's transport would take it, naming what is
/// wrong: JSON at all, declared as JSON, one JSON-RPC 2.0 message, params
/// that fit the method.
pub fn check_body(content_type: Option<&HeaderValue>, body: &[u8]) -> Result<(), BodyProblem> {
    let value: Value =
        serde_json::from_slice(body).map_err(|err| BodyProblem::NotJson(err.to_string()))?;
    let declared_json = content_type
        .and_then(|value| value.to_str().ok())
        .is_some_and(|value| {
            let essence = value.split(';').next().unwrap_or_default();
            essence.trim().eq_ignore_ascii_case("application/json")
        });
    if !declared_json {
        return Err(BodyProblem::ContentType(match content_type {
            None => "none".to_owned(),
            Some(value) => format!("{:?}", String::from_utf8_lossy(value.as_bytes())),
        }));
    }
    if value.is_array() {
        return Err(BodyProblem::Batch);
    }
    // What rmcp takes passes as it is; only a refusal is diagnosed.
    let Err(err) = serde_json::from_value::<ClientJsonRpcMessage>(value.clone()) else {
        return Ok(());
    };
    let Value::Object(object) = &value else {
        return Err(BodyProblem::NotAnObject(json_kind(&value)));
    };
    if object.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return Err(BodyProblem::NotAMessage(
            "\"jsonrpc\" must be \"2.0\"".to_owned(),
        ));
    }
    let id = object.get("id").cloned();
    if let Some(id) = &id {
        if !matches!(id, Value::String(_) | Value::Number(_)) {
            return Err(BodyProblem::NotAMessage(format!(
                "\"id\" must be a string or a number, got {}",
                json_kind(id)
            )));
        }
    }
    let method = match object.get("method") {
        Some(Value::String(method)) => Some(method.clone()),
        Some(other) => {
            return Err(BodyProblem::NotAMessage(format!(
                "\"method\" must be a string, got {}",
                json_kind(other)
            )))
        }
        None => None,
    };
    let Some(method) = method else {
        return Err(BodyProblem::NotAMessage(
            "an object with neither \"method\" (a request or notification) nor \"result\" \
             or \"error\" (a response)"
                .to_owned(),
        ));
    };
    // The untagged message type only says no variant matched; the request
    // or notification type alone names the field that is wrong.
    let detail = match id {
        Some(_) => serde_json::from_value::<JsonRpcRequest<ClientRequest>>(value).err(),
        None => serde_json::from_value::<JsonRpcNotification<ClientNotification>>(value).err(),
    }
    .map_or_else(|| err.to_string(), |err| err.to_string());
    Err(BodyProblem::Params {
        id: id.unwrap_or(Value::Null),
        method,
        detail,
    })
}

/// How a JSON value's kind is named in an error.
fn json_kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// rmcp's own client-error answers are plain text (406 for an `Accept`
/// without JSON and SSE, say); they become JSON-RPC error objects with
/// the same status and text. JSON answers and streams pass unchanged.
async fn plain_refusal_as_json_rpc(
    response: Response<http_body_util::combinators::BoxBody<Bytes, std::convert::Infallible>>,
) -> Response<Body> {
    let is_json = response
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .is_some_and(|value| value.starts_with("application/json"));
    if !response.status().is_client_error() || is_json {
        return response.map(|body| body.map_err(|never| match never {}).boxed());
    }
    let (parts, mut body) = response.into_parts();
    // rmcp's refusals are one short line; read no more than a few KiB.
    const TEXT_CAP: usize = 4096;
    let mut text = Vec::new();
    while text.len() < TEXT_CAP {
        match body.frame().await {
            Some(Ok(frame)) => {
                if let Ok(data) = frame.into_data() {
                    text.extend_from_slice(&data);
                }
            }
            Some(Err(never)) => match never {},
            None => break,
        }
    }
    text.truncate(TEXT_CAP);
    let text = String::from_utf8_lossy(&text);
    let mut answer = json_rpc_error(parts.status, Value::Null, INVALID_REQUEST, text.trim());
    // Keep what the refusal says besides its text (`Allow`, say).
    for (name, value) in &parts.headers {
        if name != CONTENT_TYPE && name != hyper::header::CONTENT_LENGTH {
            answer.headers_mut().insert(name.clone(), value.clone());
        }
    }
    answer
}

/// The MCP tools over the daemon's engine and tool runner.
#[derive(Clone)]
pub struct McpTools {
    chat: Arc<ChatService>,
    settings: McpSettings,
}

impl McpTools {
    /// The meta tools as `tools/list` shows them.
    fn meta_tools() -> Vec<Tool> {
        vec![
            Tool::new(
                DISCOVER_TOOL,
                "Find the capabilities that fit a task (local commands and web APIs indexed \
                 by oapd). Returns each fitting capability's id, name, description, score and \
                 input schema; an empty list (match: null) when nothing fits. Call oap_invoke \
                 with one of the ids to run it.",
                schema(json!({
                    "type": "object",
                    "properties": {
                        "task": {
                            "type": "string",
                            "description": "What should be done, in plain words"
                        },
                        "top_k": {
                            "type": "integer",
                            "minimum": 1,
                            "maximum": MAX_TOP_K,
                            "description": "Most capabilities to return"
                        }
                    },
                    "required": ["task"],
                    "additionalProperties": false
                })),
            ),
            Tool::new(
                INVOKE_TOOL,
                "Run a capability found by oap_discover: `tool` is its id (e.g. local/wc), \
                 `arguments` an object matching its input schema.",
                schema(json!({
                    "type": "object",
                    "properties": {
                        "tool": {
                            "type": "string",
                            "description": "The capability id as oap_discover returned it"
                        },
                        "arguments": {
                            "type": "object",
                            "description": "Arguments matching the capability's input schema"
                        }
                    },
                    "required": ["tool"],
                    "additionalProperties": false
                })),
            ),
        ]
    }

    /// `oap_discover`: the capabilities that fit `task`, with the schema
    /// the chat bridge would inject, as structured content.
    async fn discover(&self, arguments: &Map<String, Value>) -> CallToolResult {
        let task = match arguments.get("task") {
            Some(Value::String(task)) if !task.trim().is_empty() => task.clone(),
            Some(Value::String(_)) => return tool_error("task: must not be empty"),
            Some(_) => return tool_error("task: expected a string"),
            None => return tool_error("task: missing (what should be done, in plain words)"),
        };
        if task.len() >= self.settings.max_task_bytes {
            return tool_error(format!(
                "task: {} bytes is too long (the limit is {} bytes)",
                task.len(),
                self.settings.max_task_bytes
            ));
        }
        let top_k = match arguments.get("top_k") {
            None | Some(Value::Null) => self.settings.default_top_k,
            Some(value) => match value.as_u64() {
                Some(k @ 1..=MAX_TOP_K) => k as usize,
                _ => {
                    return tool_error(format!(
                        "top_k: expected an integer from 1 to {MAX_TOP_K}, got {value}"
                    ))
                }
            },
        };
        let engine = self.chat.engine.clone();
        let query = task.clone();
        // Embedding is CPU work: keep it off the async workers.
        let discovery =
            match tokio::task::spawn_blocking(move || engine.discover(&query, top_k)).await {
                Ok(Ok(discovery)) => discovery,
                Ok(Err(err)) => return tool_error(format!("discovery failed: {err}")),
                Err(err) => {
                    tracing::error!(error = %err, "discovery task failed");
                    return tool_error("discovery failed");
                }
            };
        // The bridge's acceptance rule: only candidates that count as a
        // match are offered.
        let fitting = self.chat.tools_from_discovery(&discovery, Vec::new());
        let capabilities: Vec<Value> = fitting
            .iter()
            .map(|tool| {
                let candidate = discovery.candidates.iter().find(|c| c.id == tool.record.id);
                json!({
                    "id": tool.record.id,
                    "name": candidate.map(|c| c.name.as_str()).unwrap_or(tool.manifest.name.as_str()),
                    "description": candidate
                        .map(|c| c.description.as_str())
                        .unwrap_or(tool.manifest.description.as_str()),
                    "score": candidate.map(|c| c.score),
                    "trust": tool.record.trust,
                    "tool_name": tool.name,
                    "input_schema": tool
                        .definition
                        .pointer("/function/parameters")
                        .cloned()
                        .unwrap_or_else(|| json!({"type": "object"})),
                })
            })
            .collect();
        let best = capabilities
            .first()
            .and_then(|c| c.get("id"))
            .cloned()
            .unwrap_or(Value::Null);
        CallToolResult::structured(json!({
            "task": task,
            "match": best,
            "capabilities": capabilities,
        }))
    }

    /// `oap_invoke`: its arguments unpacked for [`Self::invoke_capability`].
    async fn invoke(&self, arguments: &Map<String, Value>) -> CallToolResult {
        let id = match arguments.get("tool") {
            Some(Value::String(id)) if !id.trim().is_empty() => id.trim(),
            Some(_) => return tool_error("tool: expected a capability id such as \"local/wc\""),
            None => return tool_error("tool: missing (a capability id from oap_discover)"),
        };
        let call_arguments = match arguments.get("arguments") {
            None | Some(Value::Null) => Map::new(),
            Some(Value::Object(map)) => map.clone(),
            Some(_) => return tool_error("arguments: expected a JSON object"),
        };
        tool_result(self.invoke_capability(id, call_arguments).await)
    }

    /// The capabilities a task hint names, as the chat bridge would offer
    /// them (its names, schemas and acceptance rule).
    async fn hinted_tools(&self, hint: &TaskHint) -> Vec<oap_bridge::InjectedTool> {
        let reserved = vec![DISCOVER_TOOL.to_string(), INVOKE_TOOL.to_string()];
        self.chat
            .discover_tools(hint.task.clone(), hint.top_n, reserved)
            .await
    }

    /// Runs the capability `id` with `arguments`: the one path every MCP
    /// invocation takes. The record is looked up in the engine, the
    /// arguments are checked against the schema the bridge offers, and the
    /// daemon's tool runner executes it under the same policies as a chat's
    /// tool call.
    pub async fn invoke_capability(&self, id: &str, arguments: Map<String, Value>) -> ToolResult {
        let Some(record) = self.chat.engine.get(id) else {
            return failure(format!(
                "no capability with id {id:?} (ids come from oap_discover)"
            ));
        };
        if let Some(reason) = &record.unhealthy {
            return failure(format!("capability {id:?} is unavailable: {reason}"));
        }
        let Some(tool) = oap_bridge::tools::from_record(record, &[]) else {
            return failure(format!("capability {id:?} cannot be run as a tool"));
        };
        let arguments = match tool.definition.pointer("/function/parameters") {
            Some(schema) => match oap_manifest::tool::check_arguments(schema, &arguments) {
                Ok(arguments) => arguments,
                Err(problems) => {
                    return failure(format!(
                        "{id} was not called: {}. Fix the arguments and call it again.",
                        problems.join("; ")
                    ))
                }
            },
            None => arguments,
        };
        tracing::debug!(id, "mcp invocation");
        self.chat
            .ctx
            .runner
            .run(tool.record.clone(), tool.manifest.clone(), arguments)
            .await
    }
}

impl ServerHandler for McpTools {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(
                Implementation::new("oapd", env!("CARGO_PKG_VERSION")).with_title("oapd"),
            )
            .with_instructions(
                "Call oap_discover with the task to find fitting capabilities, then \
                 oap_invoke with one of the returned ids and arguments matching its \
                 input_schema.",
            )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let mut tools = Self::meta_tools();
        if let Some(hint) = task_hint(&context, self.settings.max_task_bytes)? {
            tools.extend(self.hinted_tools(&hint).await.iter().map(|tool| {
                let function = &tool.definition["function"];
                Tool::new(
                    tool.name.clone(),
                    function["description"]
                        .as_str()
                        .unwrap_or_default()
                        .to_string(),
                    schema(function["parameters"].clone()),
                )
            }));
        }
        Ok(ListToolsResult::with_all_items(tools))
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        Self::meta_tools()
            .into_iter()
            .find(|tool| tool.name == name)
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let arguments = request.arguments.unwrap_or_default();
        let result = match request.name.as_ref() {
            DISCOVER_TOOL => self.discover(&arguments).await,
            INVOKE_TOOL => self.invoke(&arguments).await,
            other => {
                // A capability listed for the URL's task hint, called by
                // its tool name: the same discovery names it again.
                let hinted = match task_hint(&context, self.settings.max_task_bytes)? {
                    Some(hint) => self
                        .hinted_tools(&hint)
                        .await
                        .into_iter()
                        .find(|tool| tool.name == other),
                    None => None,
                };
                let Some(tool) = hinted else {
                    return Err(ErrorData::invalid_params(
                        format!(
                            "unknown tool {other:?}: this server has {DISCOVER_TOOL} and {INVOKE_TOOL}"
                        ),
                        None,
                    ));
                };
                tool_result(self.invoke_capability(&tool.record.id, arguments).await)
            }
        };
        Ok(result.into())
    }
}

/// `/mcp?task=...&top_n=N`: list the top N capabilities for `task` as
/// tools of their own.
#[derive(Debug, Clone)]
struct TaskHint {
    task: String,
    top_n: usize,
}

/// The task hint of the request's URL, if any; a bad one is the client's
/// error, named.
fn task_hint(
    context: &RequestContext<RoleServer>,
    max_task_bytes: usize,
) -> Result<Option<TaskHint>, ErrorData> {
    let Some(query) = context
        .extensions
        .get::<hyper::http::request::Parts>()
        .and_then(|parts| parts.uri.query())
    else {
        return Ok(None);
    };
    let mut task = None;
    let mut top_n = None;
    for pair in query.split('&') {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        match key {
            "task" => task = Some(query_decode(value)),
            "top_n" => top_n = Some(query_decode(value)),
            _ => {}
        }
    }
    let Some(task) = task.filter(|t| !t.trim().is_empty()) else {
        return Ok(None);
    };
    if task.len() >= max_task_bytes {
        return Err(ErrorData::invalid_params(
            format!(
                "task: {} bytes is too long (the limit is {max_task_bytes} bytes)",
                task.len()
            ),
            None,
        ));
    }
    let top_n = match top_n {
        None => DEFAULT_TOP_N,
        Some(raw) => match raw.parse::<u64>() {
            Ok(n @ 1..=MAX_TOP_N) => n as usize,
            _ => {
                return Err(ErrorData::invalid_params(
                    format!("top_n: expected an integer from 1 to {MAX_TOP_N}, got {raw:?}"),
                    None,
                ))
            }
        },
    };
    Ok(Some(TaskHint { task, top_n }))
}

/// A query-string value: `+` is a space, `%XX` a byte.
fn query_decode(raw: &str) -> String {
    crate::server::transport::http::percent_decode(&raw.replace('+', " "))
}

fn tool_result(result: ToolResult) -> CallToolResult {
    let content = vec![ContentBlock::text(result.content)];
    if result.ok {
        CallToolResult::success(content)
    } else {
        CallToolResult::error(content)
    }
}

/// A JSON object literal as rmcp's schema type.
fn schema(value: Value) -> Map<String, Value> {
    match value {
        Value::Object(map) => map,
        _ => Map::new(),
    }
}

fn failure(content: String) -> ToolResult {
    ToolResult { content, ok: false }
}

fn tool_error(message: impl Into<String>) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(message.into())])
}

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
//! byte budget before rmcp's transport sees it.

use std::sync::Arc;

use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use oap_bridge::ToolResult;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::transport::streamable_http_server::session::never::NeverSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::{json, Map, Value};

use super::chat::ChatService;
use super::http::{self, Body};

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
/// [`McpTools`].
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

    /// `POST /mcp`: one JSON-RPC message (or batch) in, its answer out.
    pub async fn handle(&self, request: Request<Incoming>) -> Response<Body> {
        let (parts, body) = request.into_parts();
        // Read within the size cap and the in-flight budget; the share is
        // held until the answer is built.
        let body = match http::read_body(body, self.max_body_bytes).await {
            Ok(body) => body,
            Err(err) => return err.into_response(),
        };
        let (bytes, permit) = body.into_parts();
        // rmcp would answer unparsable JSON with a bare 415; a client is
        // owed JSON-RPC's parse error.
        if let Err(err) = serde_json::from_slice::<serde::de::IgnoredAny>(&bytes) {
            return http::json(
                StatusCode::BAD_REQUEST,
                &json!({
                    "jsonrpc": "2.0",
                    "id": null,
                    "error": {"code": -32700, "message": format!("parse error: the body is not JSON: {err}")},
                }),
            );
        }
        let request = Request::from_parts(parts, Full::new(bytes));
        let response = self.service.handle(request).await;
        drop(permit);
        response.map(|body| body.map_err(|never| match never {}).boxed())
    }
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
    super::api::percent_decode(&raw.replace('+', " "))
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

//! The router and the discovery API: `/v1/discover`, `/v1/manifests`,
//! `/health`; what the daemon tells about itself (`/metrics`,
//! `/v1/requests`) and the status page (`/ui`, `/v1/status`) are routed
//! here too.
//!
//! Every error is JSON `{"error": "..."}` with a status that says whose fault
//! it is; bad input never reaches the engine and never disturbs the index.

use std::sync::Arc;

use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::header::{HeaderValue, ALLOW, ORIGIN};
use hyper::{Method, Request, Response, StatusCode};
use oap_discovery::DiscoverError;
use serde::Deserialize;

use crate::server::transport::auth::{self, Client, Scope};
use crate::server::transport::http::{self, percent_decode, Body, Handler};

/// The API's state, defined below the handlers that read it (crawl
/// registration, status) so that they need not depend on the router.
pub use super::state::{Api, ApiSettings};

/// The endpoint a path names: one table for routing and for which
/// deadline bounds a request. oapd answers its own API and the chat routes
/// it bridges; every other path is Ollama's and is forwarded untouched
/// (streamed both ways), after the same Host, Origin and token checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Route {
    Health,
    Discover,
    Mcp,
    /// `/api/chat`, Ollama's own chat.
    OllamaChat,
    /// `/v1/chat`, the same chat under oapd's API.
    BridgeChat,
    OpenAiChat,
    Responses,
    Tools,
    McpStatus,
    CrawlStatus,
    Register,
    Manifests,
    /// `/v1/manifests/<id>`.
    Manifest,
    Validation,
    /// `/v1/validation/<model>`.
    ValidationRecord,
    /// `/v1/experience` and everything under it.
    Experience,
    /// `/v1/status`, the status page's state.
    Status,
    /// `/ui` and its files under `/ui/`: the status page.
    Ui,
    /// `/metrics`, Prometheus' text format.
    Metrics,
    /// `/v1/requests`, the recent bridged requests.
    Requests,
    /// `/v1/generated-requests`, the requests the model wrote per capability.
    GeneratedRequests,
    /// `/v1/clients`, the `server.clients` and their use (never a token).
    Clients,
    /// Anything else: Ollama's.
    Ollama,
}

impl Route {
    fn of(path: &str) -> Route {
        match path {
            "/health" => Route::Health,
            "/v1/discover" => Route::Discover,
            "/mcp" => Route::Mcp,
            "/api/chat" => Route::OllamaChat,
            "/v1/chat" => Route::BridgeChat,
            "/v1/chat/completions" => Route::OpenAiChat,
            "/v1/responses" => Route::Responses,
            "/v1/tools" => Route::Tools,
            "/v1/mcp/status" => Route::McpStatus,
            "/v1/crawl/status" => Route::CrawlStatus,
            "/v1/manifests/register" => Route::Register,
            "/v1/manifests" => Route::Manifests,
            "/v1/validation" => Route::Validation,
            "/v1/experience" => Route::Experience,
            "/v1/status" => Route::Status,
            "/ui" => Route::Ui,
            p if p.starts_with("/ui/") => Route::Ui,
            "/metrics" => Route::Metrics,
            "/v1/requests" => Route::Requests,
            "/v1/generated-requests" => Route::GeneratedRequests,
            "/v1/clients" => Route::Clients,
            p if p.starts_with("/v1/manifests/") => Route::Manifest,
            p if p.starts_with("/v1/validation/") => Route::ValidationRecord,
            p if p.starts_with("/v1/experience/") => Route::Experience,
            _ => Route::Ollama,
        }
    }

    /// The route's name in metrics and `/v1/requests`: its path, with
    /// `{id}` or `{model}` for the variable part, and `ollama` for every
    /// path passed through (a bounded set, whatever clients send).
    fn name(self) -> &'static str {
        match self {
            Route::Health => "/health",
            Route::Discover => "/v1/discover",
            Route::Mcp => "/mcp",
            Route::OllamaChat => "/api/chat",
            Route::BridgeChat => "/v1/chat",
            Route::OpenAiChat => "/v1/chat/completions",
            Route::Responses => "/v1/responses",
            Route::Tools => "/v1/tools",
            Route::McpStatus => "/v1/mcp/status",
            Route::CrawlStatus => "/v1/crawl/status",
            Route::Register => "/v1/manifests/register",
            Route::Manifests => "/v1/manifests",
            Route::Manifest => "/v1/manifests/{id}",
            Route::Validation => "/v1/validation",
            Route::ValidationRecord => "/v1/validation/{model}",
            Route::Experience => "/v1/experience",
            Route::Status => "/v1/status",
            Route::Ui => "/ui",
            Route::Metrics => "/metrics",
            Route::Requests => "/v1/requests",
            Route::GeneratedRequests => "/v1/generated-requests",
            Route::Clients => "/v1/clients",
            Route::Ollama => "ollama",
        }
    }

    /// The `server.clients` scope that opens the route at `path`; `None`
    /// for the routes a client token never opens: the operator's actions
    /// (registration, experience), and what the daemon tells about itself
    /// (`/health`, `/ui`, `/metrics`, `/v1/requests`, the manifests...).
    fn client_scope(self, path: &str) -> Option<Scope> {
        match self {
            Route::OllamaChat
            | Route::BridgeChat
            | Route::OpenAiChat
            | Route::Responses
            | Route::Mcp
            | Route::Discover
            | Route::Tools => Some(Scope::Chat),
            // Ollama's own ways to run the model on a prompt.
            Route::Ollama if matches!(path, "/api/generate" | "/v1/completions") => {
                Some(Scope::Chat)
            }
            Route::Ollama => Some(Scope::Passthrough),
            _ => None,
        }
    }

    /// Whether the request goes to the model: request generation waits
    /// while one is in flight.
    fn uses_the_model(self) -> bool {
        matches!(
            self,
            Route::OllamaChat
                | Route::BridgeChat
                | Route::OpenAiChat
                | Route::Responses
                | Route::Ollama
        )
    }

    /// Whether `server.request_timeout` bounds the request. Chats have
    /// `ollama.chat_deadline`, Ollama's routes `ollama.timeout`, and an MCP
    /// tool call the tool's own timeout.
    fn bounded_by_request_timeout(self) -> bool {
        !matches!(
            self,
            Route::OllamaChat
                | Route::BridgeChat
                | Route::OpenAiChat
                | Route::Responses
                | Route::Mcp
                | Route::Ollama
        )
    }
}

#[derive(Debug, Deserialize)]
struct DiscoverRequest {
    task: serde_json::Value,
    #[serde(default)]
    top_k: Option<serde_json::Value>,
}

impl Handler for Api {
    // Both run before `handle` strips a `/c/<token>` prefix.
    fn bounded_by_request_timeout(&self, request: &Request<Incoming>) -> bool {
        Route::of(auth::routed_path(request.uri().path())).bounded_by_request_timeout()
    }

    fn route_name(&self, request: &Request<Incoming>) -> &'static str {
        Route::of(auth::routed_path(request.uri().path())).name()
    }

    async fn handle(self: Arc<Self>, request: Request<Incoming>) -> Response<Body> {
        // Before anything reads or logs the path: a client token in it
        // goes no further than here.
        let request = self.take_client_prefix(request);
        // Host (DNS rebinding) and Origin (cross-site) first: a refused
        // request reaches no route, not even a preflight or /health.
        let inbound = crate::server::transport::guard::Inbound {
            version: request.version(),
            uri: request.uri(),
            headers: request.headers(),
        };
        if let Err(refusal) = crate::server::transport::guard::check(
            inbound,
            &self.settings.allowed_hosts,
            &self.settings.cors_origins,
        ) {
            tracing::debug!(
                path = %request.uri().path(),
                error = %refusal.message(),
                "request refused"
            );
            return http::error(refusal.status(), refusal.message());
        }
        let origin = request.headers().get(ORIGIN).cloned();
        if request.method() == Method::OPTIONS {
            // CORS preflight: answered without auth (browsers send none).
            return self.cors(origin.as_ref(), preflight());
        }
        let response = self.clone().route(request).await;
        self.cors(origin.as_ref(), response)
    }
}

fn preflight() -> Response<Body> {
    let mut response = Response::new(http::full(Vec::new()));
    *response.status_mut() = StatusCode::NO_CONTENT;
    response
}

impl Api {
    /// Adds CORS headers for configured origins (`*` allows any).
    fn cors(&self, origin: Option<&HeaderValue>, mut response: Response<Body>) -> Response<Body> {
        let Some(origin) = origin else {
            return response;
        };
        let allowed = &self.settings.cors_origins;
        let matches = allowed
            .iter()
            .any(|a| a == "*" || a.as_bytes() == origin.as_bytes());
        if !matches {
            return response;
        }
        let headers = response.headers_mut();
        headers.insert("access-control-allow-origin", origin.clone());
        headers.insert("vary", HeaderValue::from_static("Origin"));
        headers.insert(
            "access-control-allow-methods",
            HeaderValue::from_static("GET, HEAD, POST, DELETE, OPTIONS"),
        );
        headers.insert(
            "access-control-allow-headers",
            HeaderValue::from_static(
                "Authorization, Content-Type, User-Agent, Accept, X-Requested-With, OpenAI-Beta, X-Stainless-Lang, X-Stainless-Package-Version, X-Stainless-OS, X-Stainless-Arch, X-Stainless-Runtime, X-Stainless-Runtime-Version, X-Stainless-Retry-Count, X-Stainless-Timeout",
            ),
        );
        headers.insert("access-control-max-age", HeaderValue::from_static("600"));
        response
    }

    async fn route(self: Arc<Self>, request: Request<Incoming>) -> Response<Body> {
        let path = request.uri().path().to_string();
        let caller = match self.caller(&request) {
            Ok(caller) => caller,
            Err(refusal) => return refusal.response(),
        };
        if let Caller::Client(client) = &caller {
            crate::metrics::get().client_request(&client.name);
            crate::server::observe::set_client(&client.name);
            let scope = Route::of(&path).client_scope(&path);
            if !scope.is_some_and(|scope| client.allows(scope)) {
                return out_of_scope(client, &path, scope);
            }
        }
        // Operator actions need the token itself: a trusted address or a
        // client token is enough to use oapd, not to administer it.
        let operator = matches!(caller, Caller::Operator);
        let client_name = match &caller {
            Caller::Client(client) => Some(client.name.clone()),
            _ => None,
        };
        // Who may see where MCP servers are and what failed.
        let view = super::status::View::of(
            operator,
            self.settings.auth_token.is_some(),
            request.extensions().get::<http::PeerAddr>().map(|p| p.0),
        );
        let method = request.method().clone();
        // Counted until the response body ends (a streamed chat included).
        let model_request = Route::of(&path)
            .uses_the_model()
            .then(crate::request_gen::ModelRequest::start);
        let response = match (Route::of(&path), &method) {
            (Route::Health, &Method::GET) => self.health(view),
            (Route::Health, _) => method_not_allowed("GET"),
            (Route::Discover, &Method::POST) => self.discover(request).await,
            (Route::Discover, _) => method_not_allowed("POST"),
            (Route::Mcp, m) => match &self.mcp {
                None => http::error(
                    StatusCode::NOT_FOUND,
                    "the MCP server is disabled (mcp_server.enabled: false)",
                ),
                // Stateless: no server-sent stream to GET, no session to DELETE.
                Some(_) if m != Method::POST => method_not_allowed("POST"),
                Some(mcp) => mcp.handle(request).await,
            },
            (Route::OllamaChat, &Method::POST) => self.chat.ollama_chat(request).await,
            (Route::BridgeChat | Route::Tools, &Method::POST) if !self.chat.settings.enabled =>
            {
                http::error(
                    StatusCode::NOT_FOUND,
                    "the tool bridge is disabled (tool_bridge.enabled: false)",
                )
            }
            (Route::BridgeChat, &Method::POST) => self.chat.ollama_chat(request).await,
            (Route::OpenAiChat, &Method::POST) => self.chat.openai_chat(request).await,
            (Route::OpenAiChat, _) => method_not_allowed("POST"),
            (Route::Responses, &Method::POST) => {
                crate::server::bridge::responses::handle(&self.chat, request).await
            }
            (Route::Responses, _) => method_not_allowed("POST"),
            (Route::Tools, &Method::POST) => {
                self.chat
                    .tools_endpoint(request, self.settings.max_task_bytes)
                    .await
            }
            (Route::OllamaChat | Route::BridgeChat | Route::Tools, _) => method_not_allowed("POST"),
            (Route::Ollama, _) => self.chat.passthrough(request).await,
            (Route::Validation, &Method::GET) => {
                http::json(StatusCode::OK, &json_records(&self.chat.validation))
            }
            (Route::Validation, _) => method_not_allowed("GET"),
            (Route::ValidationRecord, m) => {
                if m == Method::GET {
                    validation_record(
                        &self.chat.validation,
                        &percent_decode(path.strip_prefix("/v1/validation/").unwrap_or_default()),
                    )
                } else {
                    method_not_allowed("GET")
                }
            }
            (Route::Experience, m) => {
                let peer = request.extensions().get::<http::PeerAddr>().map(|p| p.0);
                match &self.chat.experience {
                    Some(_) if m == Method::DELETE
                        && !crate::server::bridge::experience::operator_allowed(operator, peer) =>
                    {
                        http::error(
                            StatusCode::FORBIDDEN,
                            "deleting experience entries needs server.auth_token (or a loopback client)",
                        )
                    }
                    Some(experience) => {
                        crate::server::bridge::experience::route(
                            experience,
                            m,
                            path.strip_prefix("/v1/experience").unwrap_or_default(),
                        )
                    }
                    None => crate::server::bridge::experience::disabled(),
                }
            }
            (Route::McpStatus, &Method::GET) => {
                let status = self.mcp_servers.status();
                match view {
                    super::status::View::Operator => http::json(StatusCode::OK, &status),
                    super::status::View::Counts => {
                        http::json(StatusCode::OK, &super::status::mcp_status_counts(&status))
                    }
                }
            }
            (Route::McpStatus, _) => method_not_allowed("GET"),
            (Route::CrawlStatus, &Method::GET) => http::json(
                StatusCode::OK,
                &super::crawl::status_json(self.crawler.as_deref(), self.crawler.is_some()),
            ),
            (Route::CrawlStatus, _) => method_not_allowed("GET"),
            (Route::Register, &Method::POST) if self.settings.auth_token.is_some() && !operator =>
            {
                http::error(
                    StatusCode::FORBIDDEN,
                    "registration needs the operator's bearer token (a server.trusted_clients address is not enough)",
                )
            }
            (Route::Register, &Method::POST) => {
                super::crawl::register(self.clone(), request).await
            }
            (Route::Register, _) => method_not_allowed("POST"),
            (Route::Status, &Method::GET) => super::status::handle(&self).await,
            (Route::Status, _) => method_not_allowed("GET"),
            (Route::Ui, &Method::GET) => super::ui::serve(&path),
            (Route::Ui, _) => method_not_allowed("GET"),
            (Route::Metrics, &Method::GET) => self.metrics(),
            (Route::Metrics, _) => method_not_allowed("GET"),
            (Route::Requests, &Method::GET) => recent_requests(),
            (Route::Requests, _) => method_not_allowed("GET"),
            (Route::GeneratedRequests, &Method::GET) => {
                http::json(StatusCode::OK, &self.generator.listing())
            }
            (Route::GeneratedRequests, _) => method_not_allowed("GET"),
            (Route::Clients, &Method::GET) => self.clients(),
            (Route::Clients, _) => method_not_allowed("GET"),
            (Route::Manifests, &Method::GET) => self.list(),
            (Route::Manifests, _) => method_not_allowed("GET"),
            (Route::Manifest, m) => {
                if m == Method::GET {
                    self.get_manifest(path.strip_prefix("/v1/manifests/").unwrap_or_default())
                } else {
                    method_not_allowed("GET")
                }
            }
        };
        tracing::debug!(
            %method,
            %path,
            client = client_name.as_deref(),
            status = response.status().as_u16(),
            "request"
        );
        match model_request {
            Some(held) => response.map(|body| http::Holding::new(body, held).boxed()),
            None => response,
        }
    }

    /// Strips a `/c/<token>` prefix from the request's path and notes in
    /// its extensions which client the token belongs to, or that it
    /// belongs to none ([`Self::caller`] answers 401 then). A request
    /// without the prefix is returned as it came.
    fn take_client_prefix(&self, request: Request<Incoming>) -> Request<Incoming> {
        let Some((token, rest)) = auth::split_client_prefix(request.uri().path()) else {
            return request;
        };
        let named = match auth::client_with_token(&self.settings.clients, token.as_bytes()) {
            Some(client) => PathClient::Known(client),
            None => PathClient::Unknown,
        };
        let path_and_query = match request.uri().query() {
            Some(query) => format!("{rest}?{query}"),
            None => rest.to_owned(),
        };
        let (mut parts, body) = request.into_parts();
        let mut uri = parts.uri.clone().into_parts();
        uri.path_and_query = path_and_query.parse().ok();
        // The rest of a valid path is a valid path; should it not be, the
        // request routes nowhere rather than with the token in it.
        let (uri, named) = match hyper::Uri::from_parts(uri) {
            Ok(uri) => (uri, named),
            Err(_) => (hyper::Uri::from_static("/"), PathClient::Unknown),
        };
        parts.uri = uri;
        parts.extensions.insert(named);
        Request::from_parts(parts, body)
    }

    /// Who sends the request, or the 401 that refuses it. The operator
    /// token wins; then a client named by the path prefix or by its token
    /// in the `Authorization` header; then, without either, any caller when
    /// no token is configured or a `server.trusted_clients` address. A
    /// path prefix that names no client is refused even where no token is
    /// needed: the URL the client was given is wrong, and it should say so.
    fn caller(&self, request: &Request<Incoming>) -> Result<Caller, Unauthorized> {
        let from_path = request.extensions().get::<PathClient>();
        if let Some(PathClient::Unknown) = from_path {
            return Err(Unauthorized::UnknownPrefix);
        }
        if self.carries_token(request) {
            return Ok(Caller::Operator);
        }
        if let Some(PathClient::Known(client)) = from_path {
            return Ok(Caller::Client(client.clone()));
        }
        if let Some(client) =
            auth::client_in_headers(request.headers(), request.method(), &self.settings.clients)
        {
            return Ok(Caller::Client(client));
        }
        if self.settings.auth_token.is_none() || self.trusted_address(request) {
            return Ok(Caller::Unnamed);
        }
        Err(Unauthorized::NoToken {
            page: Route::of(request.uri().path()) == Route::Ui,
        })
    }

    /// Whether the request comes from a `server.trusted_clients` address.
    fn trusted_address(&self, request: &Request<Incoming>) -> bool {
        let Some(peer) = request.extensions().get::<http::PeerAddr>() else {
            return false;
        };
        // A v4 client on a dual-stack listener shows as ::ffff:a.b.c.d.
        let ip = peer.0.ip().to_canonical();
        self.settings
            .trusted_clients
            .iter()
            .any(|range| range.contains(ip))
    }

    /// `GET /v1/clients`: every `server.clients` entry by name, its scopes,
    /// requests and last use; never its token.
    fn clients(&self) -> Response<Body> {
        let used = crate::metrics::get().client_use();
        let clients: Vec<serde_json::Value> = self
            .settings
            .clients
            .iter()
            .map(|client| {
                let usage = used.get(&*client.name).copied().unwrap_or_default();
                serde_json::json!({
                    "name": &*client.name,
                    "scopes": client.scope_names(),
                    "requests": usage.requests,
                    "last_used_unix_ms": (usage.requests > 0).then_some(usage.last_unix_ms),
                })
            })
            .collect();
        http::json(StatusCode::OK, &serde_json::json!({ "clients": clients }))
    }

    /// Whether the operator's token is configured and the request carries it, as a
    /// bearer token or as a browser's Basic password ([`crate::server::transport::auth`]).
    fn carries_token(&self, request: &Request<Incoming>) -> bool {
        self.settings.auth_token.as_deref().is_some_and(|token| {
            crate::server::transport::auth::carries_token(
                request.headers(),
                request.method(),
                token,
            )
        })
    }

    /// `/health`: everything for the operator, counts and states for
    /// anyone else let in ([`super::status::View`]).
    fn health(&self, view: super::status::View) -> Response<Body> {
        let stats = self.engine.stats();
        // Why the daemon is degraded, if it is.
        let mut reasons = Vec::new();
        if !self.model.loaded {
            reasons
                .push("the embedding model is not loaded: retrieval is lexical only".to_string());
        }
        if self.chat.sandbox.blocks_tools() {
            reasons.push(
                "tools.sandbox is require and the kernel cannot confine local tools".to_string(),
            );
        }
        let behind = self.rebuilder.behind_reason();
        reasons.extend(behind.clone());
        if stats.pending_texts > 0 {
            reasons.push(format!(
                "{} texts are being embedded in the background: discovery is lexical until then",
                stats.pending_texts
            ));
        }
        let status = if reasons.is_empty() { "ok" } else { "degraded" };
        let (load_problems, collisions) = self.rebuilder.problem_counts();
        let retrieval = match stats.mode {
            oap_discovery::Mode::Lexical if !self.model.loaded => {
                "lexical only: the embedding model is not loaded"
            }
            oap_discovery::Mode::Lexical if stats.pending_texts > 0 => {
                "lexical while vectors are embedded"
            }
            oap_discovery::Mode::Lexical => "lexical",
            oap_discovery::Mode::Dense => "dense",
            oap_discovery::Mode::Hybrid => "hybrid",
        };
        let mut body = serde_json::json!({
                "status": status,
                "version": env!("CARGO_PKG_VERSION"),
                "retrieval": retrieval,
                "model": self.model,
                "index": {
                    // What is served: while a rebuild is failing, the
                    // count of the old index.
                    "manifests": stats.docs,
                    "rows": stats.rows,
                    "bytes": stats.index_bytes,
                    "dtype": stats.dtype,
                    "pending_texts": stats.pending_texts,
                    "behind": behind.is_some(),
                    "rebuild_failure": self.engine.rebuild_failure(),
                    "watch": self.rebuilder.watch().name(),
                },
                "tool_sandbox": self.chat.sandbox.json(),
                "load_problems": load_problems,
                "collisions": collisions,
                "mcp": self.mcp_servers.status(),
                // Counts only: the requests themselves are at
                // /v1/generated-requests.
                "request_generation": self.generator.status(),
                // `null` on a board without `snapshots.url`.
                "snapshot": self.snapshots.status(),
        });
        if !reasons.is_empty() {
            body["reason"] = serde_json::Value::String(reasons.join("; "));
        }
        match view {
            super::status::View::Operator => http::json(StatusCode::OK, &body),
            super::status::View::Counts => {
                http::json(StatusCode::OK, &super::status::health_counts(&body))
            }
        }
    }

    async fn discover(&self, request: Request<Incoming>) -> Response<Body> {
        let body = match http::read_body(request.into_body(), self.settings.max_body_bytes).await {
            Ok(body) => body,
            Err(err) => return err.into_response(),
        };
        let parsed: DiscoverRequest = match serde_json::from_slice(&body) {
            Ok(parsed) => parsed,
            Err(err) => {
                return http::error(
                    StatusCode::BAD_REQUEST,
                    format!("request body is not a valid discover request: {err}"),
                )
            }
        };
        let task = match parsed.task {
            serde_json::Value::String(task) => task,
            other => {
                return http::error(
                    StatusCode::BAD_REQUEST,
                    format!("task: expected a string, got {}", json_type(&other)),
                )
            }
        };
        if task.trim().is_empty() {
            return http::error(StatusCode::BAD_REQUEST, "task: must not be empty");
        }
        if task.len() >= self.settings.max_task_bytes {
            return http::error(
                StatusCode::BAD_REQUEST,
                format!(
                    "task: {} bytes is too long (the limit is {} bytes)",
                    task.len(),
                    self.settings.max_task_bytes
                ),
            );
        }
        let top_k = match parsed.top_k {
            None | Some(serde_json::Value::Null) => self.settings.default_top_k,
            Some(value) => match value.as_u64() {
                Some(k) if k >= 1 && k <= self.settings.max_top_k as u64 => k as usize,
                _ => {
                    return http::error(
                        StatusCode::BAD_REQUEST,
                        format!(
                            "top_k: expected an integer from 1 to {}, got {value}",
                            self.settings.max_top_k
                        ),
                    )
                }
            },
        };
        let engine = self.engine.clone();
        let started = std::time::Instant::now();
        // Embedding is CPU work: keep it off the async workers.
        let result = tokio::task::spawn_blocking(move || engine.discover(&task, top_k)).await;
        match result {
            Ok(Ok(discovery)) => {
                crate::metrics::get().discovery("api", started.elapsed(), discovery.best.is_none());
                http::json(StatusCode::OK, &discovery)
            }
            Ok(Err(DiscoverError::EmptyTask)) => {
                http::error(StatusCode::BAD_REQUEST, "task: must not be empty")
            }
            Ok(Err(err)) => {
                tracing::error!(error = %err, "discovery failed");
                http::error(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    format!("discovery failed: {err}"),
                )
            }
            Err(err) => {
                tracing::error!(error = %err, "discovery task panicked");
                http::error(StatusCode::INTERNAL_SERVER_ERROR, "discovery failed")
            }
        }
    }

    /// `GET /metrics`: the Prometheus text, gauges read now.
    fn metrics(&self) -> Response<Body> {
        let stats = self.engine.stats();
        let budget = http::body_budget();
        let snapshot = crate::metrics::Snapshot {
            index_manifests: stats.docs as u64,
            index_bytes: stats.index_bytes,
            index_pending_texts: stats.pending_texts as u64,
            inflight_body_bytes: budget.in_flight() as u64,
            inflight_body_capacity: budget.capacity() as u64,
            generation: {
                let g = self.generator.status();
                g.enabled
                    .then_some((g.generated as u64, g.pending as u64, g.failed as u64))
            },
        };
        match crate::metrics::get().render(snapshot) {
            Ok(text) => {
                let mut response = Response::new(http::full(text));
                response.headers_mut().insert(
                    hyper::header::CONTENT_TYPE,
                    HeaderValue::from_static(crate::metrics::CONTENT_TYPE),
                );
                response
            }
            Err(_) => http::error(
                StatusCode::INTERNAL_SERVER_ERROR,
                "cannot encode the metrics",
            ),
        }
    }

    fn list(&self) -> Response<Body> {
        http::json(StatusCode::OK, &self.engine.list())
    }

    fn get_manifest(&self, raw_id: &str) -> Response<Body> {
        let id = percent_decode(raw_id);
        match self.engine.get(&id) {
            Some(record) => http::json(StatusCode::OK, &record),
            None => http::error(StatusCode::NOT_FOUND, format!("no manifest with id {id:?}")),
        }
    }
}

fn json_records(gate: &oap_bridge::validation::ValidationGate) -> serde_json::Value {
    serde_json::json!({
        "only_validated_models": gate.only_validated_models,
        "records": gate.store.records(),
    })
}

fn validation_record(gate: &oap_bridge::validation::ValidationGate, model: &str) -> Response<Body> {
    match gate.store.get(model) {
        Some(record) => http::json(StatusCode::OK, &record),
        None => http::error(
            StatusCode::NOT_FOUND,
            format!("no validation record for model {model:?} (run `oapd validate-model --model {model}`)"),
        ),
    }
}

/// `GET /v1/requests`: the recent bridged requests, newest first.
fn recent_requests() -> Response<Body> {
    let recent = crate::server::observe::recent();
    if !recent.enabled() {
        return http::error(
            StatusCode::NOT_FOUND,
            "the list of recent requests is off (server.recent_requests: 0)",
        );
    }
    http::json(StatusCode::OK, &recent.json())
}

/// Who a request comes from, as [`Api::caller`] decides.
enum Caller {
    /// It carries `server.auth_token`.
    Operator,
    /// It carries a `server.clients` token (prefix or header).
    Client(Arc<Client>),
    /// Neither, where none is needed: no token is configured, or a
    /// `server.trusted_clients` address.
    Unnamed,
}

/// What a `/c/<token>` path prefix named, in the request's extensions.
#[derive(Debug, Clone)]
enum PathClient {
    Known(Arc<Client>),
    Unknown,
}

/// Why [`Api::caller`] refuses a request (401).
enum Unauthorized {
    /// A `/c/<token>` prefix whose token is no client's.
    UnknownPrefix,
    /// No token, or a wrong one; `page`: on the status page.
    NoToken { page: bool },
}

impl Unauthorized {
    fn response(self) -> Response<Body> {
        let message = match self {
            // A browser asks the operator for Basic credentials.
            Unauthorized::NoToken { page: true } => return super::ui::unauthorized(),
            Unauthorized::NoToken { page: false } => {
                "missing or wrong bearer token (Authorization: Bearer <token>)"
            }
            Unauthorized::UnknownPrefix => {
                "the URL's /c/<token> prefix holds no token of server.clients; \
                 copy the client's URL again from the config"
            }
        };
        let mut response = http::error(StatusCode::UNAUTHORIZED, message);
        response
            .headers_mut()
            .insert("www-authenticate", HeaderValue::from_static("Bearer"));
        response
    }
}

/// A 403 naming the client, the route and what would open it.
fn out_of_scope(client: &Client, path: &str, scope: Option<Scope>) -> Response<Body> {
    let holds = client.scope_names().join(", ");
    let message = match scope {
        Some(scope) => format!(
            "client {:?} may use {} routes only; {} needs the scope {:?} in server.clients",
            &*client.name,
            holds,
            path,
            scope.name()
        ),
        None => format!(
            "client {:?} may use {} routes only; {} needs the operator's token (server.auth_token)",
            &*client.name, holds, path
        ),
    };
    http::error(StatusCode::FORBIDDEN, message)
}

fn method_not_allowed(allow: &'static str) -> Response<Body> {
    let mut response = http::error(
        StatusCode::METHOD_NOT_ALLOWED,
        format!("method not allowed; use {allow}"),
    );
    response
        .headers_mut()
        .insert(ALLOW, HeaderValue::from_static(allow));
    response
}

fn json_type(value: &serde_json::Value) -> &'static str {
    match value {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "a boolean",
        serde_json::Value::Number(_) => "a number",
        serde_json::Value::String(_) => "a string",
        serde_json::Value::Array(_) => "an array",
        serde_json::Value::Object(_) => "an object",
    }
}

//! The HTTP server: routing, Ollama's endpoints, the host check, request
//! recording and the `/_fake/*` control endpoints.

use std::collections::{BTreeMap, BTreeSet, HashSet, VecDeque};
use std::convert::Infallible;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::{Frame, Incoming};
use hyper::header::{HeaderValue, CONTENT_TYPE, HOST};
use hyper::http::request::Parts;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio::task::{JoinHandle, JoinSet};

use crate::completions;
use crate::models;
use crate::render::{self, Planned};
use crate::script::{canonical_model, ModelSpec, Script, Turn};

/// Request bodies above this are refused (413).
const MAX_BODY: usize = 64 << 20;
/// Recorded non-JSON bodies are cut to this many bytes.
const MAX_RECORDED_TEXT: usize = 64 << 10;
const DEFAULT_VERSION: &str = "0.32.15";
const MODIFIED_AT: &str = "2026-08-01T12:00:00.000000000Z";

/// The error a response body fails with when the script drops the
/// connection mid-stream (hyper then closes it without finishing).
#[derive(Debug, thiserror::Error)]
#[error("connection dropped by the fake-ollama script")]
pub struct Dropped;

type Body = BoxBody<Bytes, Dropped>;

/// One request as it arrived.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Recorded {
    /// Position among all recorded requests, from 0.
    pub seq: usize,
    /// `GET`, `POST`, …
    pub method: String,
    /// The path without the query string.
    pub path: String,
    /// The query string, without `?`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub query: Option<String>,
    /// Lower-cased names; repeated headers joined with `, `.
    pub headers: BTreeMap<String, String>,
    /// The body parsed as JSON, when it is JSON.
    #[serde(default)]
    pub body: Option<Value>,
    /// The body as text when it is not JSON (cut to 64 KiB).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body_text: Option<String>,
    /// Body length in bytes, as received.
    pub body_len: usize,
    /// The status answered; `None` while pending, or when the script hung
    /// or dropped the connection before a response head.
    #[serde(default)]
    pub status: Option<u16>,
    /// For `/api/chat`: which scripted turn answered (0 = the first turn
    /// taken since the script was loaded); `None` for the default turn.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turn: Option<usize>,
}

impl Recorded {
    /// A header's value by case-insensitive name (repeated ones joined with `, `).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .get(&name.to_ascii_lowercase())
            .map(String::as_str)
    }

    /// The JSON body, or `null`.
    pub fn json(&self) -> &Value {
        self.body.as_ref().unwrap_or(&Value::Null)
    }
}

#[derive(Debug)]
struct State {
    script: Script,
    models: Vec<ModelSpec>,
    turns: VecDeque<(usize, Turn)>,
    requests: Vec<Recorded>,
    loaded: BTreeSet<String>,
    blobs: HashSet<String>,
    ids: u64,
}

impl State {
    fn new(script: Script) -> Self {
        let mut state = State {
            models: Vec::new(),
            turns: VecDeque::new(),
            requests: Vec::new(),
            loaded: BTreeSet::new(),
            blobs: HashSet::new(),
            ids: 0,
            script,
        };
        state.rearm();
        state
    }

    fn rearm(&mut self) {
        self.models = self.script.models.clone();
        self.turns = self.script.turns.iter().cloned().enumerate().collect();
        self.loaded.clear();
        self.blobs.clear();
    }

    fn set_script(&mut self, script: Script) {
        self.script = script;
        self.rearm();
    }

    fn push_turn(&mut self, turn: Turn) {
        let next = self
            .turns
            .back()
            .map(|(n, _)| n + 1)
            .unwrap_or(self.script.turns.len());
        self.turns
            .push_back((next.max(self.script.turns.len()), turn));
    }

    fn find_model(&self, name: &str) -> Option<ModelSpec> {
        if self.models.is_empty() {
            return Some(ModelSpec::new(name).capabilities(&[
                "completion",
                "tools",
                "thinking",
                "vision",
                "embedding",
                "insert",
            ]));
        }
        let wanted = canonical_model(name);
        self.models
            .iter()
            .find(|m| canonical_model(&m.name) == wanted)
            .cloned()
    }

    /// The after-tool turn when the last message is a tool result, else
    /// the first turn for this model (or for any model), or the default.
    fn take_turn(&mut self, model: &str, after_tool: bool) -> Option<(Option<usize>, Turn)> {
        if after_tool {
            if let Some(turn) = &self.script.after_tool_turn {
                return Some((None, turn.clone()));
            }
        }
        let wanted = canonical_model(model);
        let pos = self.turns.iter().position(|(_, turn)| {
            turn.model
                .as_deref()
                .is_none_or(|m| canonical_model(m) == wanted)
        });
        match pos.and_then(|pos| self.turns.remove(pos)) {
            Some((n, turn)) => Some((Some(n), turn)),
            None => self.script.default_turn.clone().map(|turn| (None, turn)),
        }
    }
}

#[derive(Debug)]
struct Shared {
    state: Mutex<State>,
    local: SocketAddr,
}

impl Shared {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn record(&self, parts: &Parts, bytes: &Bytes) -> usize {
        let mut headers: BTreeMap<String, String> = BTreeMap::new();
        for (name, value) in &parts.headers {
            let value = String::from_utf8_lossy(value.as_bytes()).into_owned();
            headers
                .entry(name.as_str().to_string())
                .and_modify(|v| {
                    v.push_str(", ");
                    v.push_str(&value);
                })
                .or_insert(value);
        }
        let body = (!bytes.is_empty())
            .then(|| serde_json::from_slice::<Value>(bytes).ok())
            .flatten();
        let body_text = (body.is_none() && !bytes.is_empty())
            .then(|| std::str::from_utf8(bytes).ok())
            .flatten()
            .map(|text| {
                let mut end = text.len().min(MAX_RECORDED_TEXT);
                while !text.is_char_boundary(end) {
                    end -= 1;
                }
                text.get(..end).unwrap_or_default().to_string()
            });
        let mut state = self.state();
        let seq = state.requests.len();
        state.requests.push(Recorded {
            seq,
            method: parts.method.to_string(),
            path: parts.uri.path().to_string(),
            query: parts.uri.query().map(str::to_string),
            headers,
            body,
            body_text,
            body_len: bytes.len(),
            status: None,
            turn: None,
        });
        seq
    }

    fn update(&self, seq: usize, status: Option<u16>, turn: Option<usize>) {
        let mut state = self.state();
        if let Some(request) = state.requests.get_mut(seq) {
            if status.is_some() {
                request.status = status;
            }
            if turn.is_some() {
                request.turn = turn;
            }
        }
    }
}

/// A running fake Ollama on a loopback port. Dropping it stops the server.
#[derive(Debug)]
pub struct FakeOllama {
    addr: SocketAddr,
    shared: Arc<Shared>,
    task: JoinHandle<()>,
}

impl FakeOllama {
    /// Starts on `127.0.0.1` with a free port.
    pub async fn start(script: Script) -> std::io::Result<FakeOllama> {
        Self::bind(SocketAddr::from(([127, 0, 0, 1], 0)), script).await
    }

    /// Starts on the given address (port 0 picks a free one).
    pub async fn bind(addr: SocketAddr, script: Script) -> std::io::Result<FakeOllama> {
        let listener = TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            state: Mutex::new(State::new(script)),
            local: addr,
        });
        let task = tokio::spawn(serve(listener, shared.clone()));
        Ok(FakeOllama { addr, shared, task })
    }

    /// The address the fake listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Every request so far (control requests excluded), oldest first.
    pub fn requests(&self) -> Vec<Recorded> {
        self.shared.state().requests.clone()
    }

    /// The requests to one path.
    pub fn requests_to(&self, path: &str) -> Vec<Recorded> {
        self.shared
            .state()
            .requests
            .iter()
            .filter(|r| r.path == path)
            .cloned()
            .collect()
    }

    /// The JSON bodies of the `/api/chat` requests.
    pub fn chat_requests(&self) -> Vec<Value> {
        self.requests_to("/api/chat")
            .into_iter()
            .map(|r| r.body.unwrap_or(Value::Null))
            .collect()
    }

    /// Waits until `count` requests to `path` have arrived (or `timeout`
    /// passed) and returns those that did.
    pub async fn wait_for_requests(
        &self,
        path: &str,
        count: usize,
        timeout: Duration,
    ) -> Vec<Recorded> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let found = self.requests_to(path);
            if found.len() >= count || tokio::time::Instant::now() >= deadline {
                return found;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// Forgets the recorded requests; the script's state (turns left) is kept.
    pub fn clear_requests(&self) {
        self.shared.state().requests.clear();
    }

    /// Appends a turn to the queue.
    pub fn push_turn(&self, turn: Turn) {
        self.shared.state().push_turn(turn);
    }

    /// How many scripted turns are left.
    pub fn remaining_turns(&self) -> usize {
        self.shared.state().turns.len()
    }

    /// Replaces the script (models, turns, switches); recorded requests stay.
    pub fn set_script(&self, script: Script) {
        self.shared.state().set_script(script);
    }

    /// Turns the Host check on or off while running.
    pub fn set_check_host(&self, check: bool) {
        self.shared.state().script.check_host = check;
    }

    /// Forgets the requests and restores the script's models and turns.
    pub fn reset(&self) {
        let mut state = self.shared.state();
        state.requests.clear();
        state.rearm();
    }

    /// Stops the server and closes every connection.
    pub async fn shutdown(mut self) {
        self.task.abort();
        let _ = (&mut self.task).await;
    }
}

impl Drop for FakeOllama {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn serve(listener: TcpListener, shared: Arc<Shared>) {
    // Owned here so that aborting this task aborts every connection.
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _peer)) => {
                    // Ollama (Go) sets TCP_NODELAY on every connection; without
                    // it each streamed line waits ~40 ms for delayed ACKs.
                    let _ = stream.set_nodelay(true);
                    let shared = shared.clone();
                    connections.spawn(async move {
                        let service = service_fn(move |req| handle(shared.clone(), req));
                        let _ = http1::Builder::new()
                            .serve_connection(TokioIo::new(stream), service)
                            .await;
                    });
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
            },
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
}

// ---------------------------------------------------------------------------
// Responses

fn full(bytes: impl Into<Bytes>) -> Body {
    Full::new(bytes.into())
        .map_err(|never: Infallible| match never {})
        .boxed()
}

fn respond(
    status: StatusCode,
    content_type: &'static str,
    bytes: impl Into<Bytes>,
) -> Response<Body> {
    let mut response = Response::new(full(bytes));
    *response.status_mut() = status;
    if !content_type.is_empty() {
        response
            .headers_mut()
            .insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    }
    response
}

fn json_response(status: StatusCode, value: &Value) -> Response<Body> {
    respond(status, "application/json; charset=utf-8", value.to_string())
}

fn ok_json(value: Value) -> Response<Body> {
    json_response(StatusCode::OK, &value)
}

fn error(status: StatusCode, message: impl Into<String>) -> Response<Body> {
    json_response(status, &json!({"error": message.into()}))
}

fn empty(status: StatusCode) -> Response<Body> {
    respond(status, "", Bytes::new())
}

fn text(status: StatusCode, body: &'static str) -> Response<Body> {
    respond(status, "text/plain; charset=utf-8", body)
}

/// How a stream ends after its lines.
#[derive(Debug)]
enum StreamEnd {
    Normal,
    ErrorLine(String),
    Drop,
    Hang,
}

/// A body fed by a channel; an `Err` item aborts the connection.
struct ChannelBody {
    rx: mpsc::Receiver<Result<Bytes, Dropped>>,
}

impl hyper::body::Body for ChannelBody {
    type Data = Bytes;
    type Error = Dropped;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Dropped>>> {
        self.rx
            .poll_recv(cx)
            .map(|item| item.map(|result| result.map(Frame::data)))
    }
}

fn ndjson_line(value: &Value) -> Bytes {
    Bytes::from(format!("{value}\n"))
}

/// Streams lines as NDJSON, honouring each line's delay.
fn stream_response(lines: Vec<Planned>, end: StreamEnd) -> Response<Body> {
    let (tx, rx) = mpsc::channel::<Result<Bytes, Dropped>>(16);
    tokio::spawn(async move {
        for planned in lines {
            if planned.delay_ms > 0 {
                tokio::time::sleep(Duration::from_millis(planned.delay_ms)).await;
            }
            if tx.send(Ok(ndjson_line(&planned.line))).await.is_err() {
                return;
            }
        }
        match end {
            StreamEnd::Normal => {}
            StreamEnd::ErrorLine(message) => {
                let _ = tx.send(Ok(ndjson_line(&json!({"error": message})))).await;
            }
            StreamEnd::Drop => {
                // Let hyper flush what was sent (it writes when the body
                // goes pending), then abort the connection.
                tokio::time::sleep(Duration::from_millis(20)).await;
                let _ = tx.send(Err(Dropped)).await;
            }
            StreamEnd::Hang => tx.closed().await,
        }
    });
    let mut response = Response::new(BodyExt::boxed(ChannelBody { rx }));
    response.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("application/x-ndjson"),
    );
    response
}

/// What a route decided.
enum Reply {
    Respond(Response<Body>),
    /// Close the connection without a response.
    Drop,
    /// Never answer.
    Hang,
}

impl From<Response<Body>> for Reply {
    fn from(response: Response<Body>) -> Self {
        Reply::Respond(response)
    }
}

// ---------------------------------------------------------------------------
// Dispatch

async fn handle(shared: Arc<Shared>, req: Request<Incoming>) -> Result<Response<Body>, Dropped> {
    let (parts, body) = req.into_parts();
    #[allow(clippy::disallowed_methods, reason = "the body is `Limited`")]
    let collected = Limited::new(body, MAX_BODY).collect().await;
    let bytes = match collected {
        Ok(collected) => collected.to_bytes(),
        Err(err) => {
            let status = if err.is::<http_body_util::LengthLimitError>() {
                StatusCode::PAYLOAD_TOO_LARGE
            } else {
                StatusCode::BAD_REQUEST
            };
            return Ok(error(status, format!("cannot read request body: {err}")));
        }
    };
    let path = parts.uri.path().to_string();
    if let Some(command) = path.strip_prefix("/_fake/") {
        return Ok(control(&shared, &parts, command, &bytes));
    }
    let seq = shared.record(&parts, &bytes);
    let reply = if !host_allowed(&shared, &parts) {
        Reply::Respond(empty(StatusCode::FORBIDDEN))
    } else {
        route(&shared, &parts, &path, &bytes, seq).await
    };
    match reply {
        Reply::Respond(response) => {
            shared.update(seq, Some(response.status().as_u16()), None);
            Ok(response)
        }
        Reply::Drop => Err(Dropped),
        Reply::Hang => std::future::pending().await,
    }
}

fn method_not_allowed() -> Reply {
    text(StatusCode::METHOD_NOT_ALLOWED, "405 method not allowed").into()
}

async fn route(shared: &Shared, parts: &Parts, path: &str, bytes: &Bytes, seq: usize) -> Reply {
    let method = &parts.method;
    let read = *method == Method::GET || *method == Method::HEAD;
    if *method == Method::OPTIONS {
        return empty(StatusCode::NO_CONTENT).into();
    }
    let delay = shared.state().script.route_delay_ms;
    if delay > 0 && path != "/api/chat" {
        tokio::time::sleep(Duration::from_millis(delay)).await;
    }
    if let Some(digest) = path.strip_prefix("/api/blobs/") {
        return blob(shared, method, digest, bytes).into();
    }
    if let Some(name) = path.strip_prefix("/v1/models/") {
        if !read {
            return method_not_allowed();
        }
        return openai_model(shared, name).into();
    }
    let post = *method == Method::POST;
    match path {
        "/" if read => text(StatusCode::OK, "Ollama is running").into(),
        "/api/version" if read => {
            let version = shared.state().script.version.clone();
            ok_json(json!({"version": version.as_deref().unwrap_or(DEFAULT_VERSION)})).into()
        }
        "/api/status" if read => {
            ok_json(json!({"cloud": {"disabled": true, "source": "config"}})).into()
        }
        "/api/tags" if read => ok_json(tags(shared)).into(),
        "/api/ps" if read => ok_json(ps(shared)).into(),
        "/v1/models" if read => ok_json(models::models_from_tags(&tags(shared))).into(),
        "/api/show" if post => with_body(bytes, |body| show(shared, &body)).into(),
        "/api/chat" if post => match json_body(bytes) {
            Ok(body) => chat(shared, body, seq).await,
            Err(response) => (*response).into(),
        },
        "/api/generate" if post => with_body(bytes, |body| generate(shared, body)).into(),
        "/api/embed" if post => with_body(bytes, |body| embed(shared, &body)).into(),
        "/api/embeddings" if post => with_body(bytes, |body| embeddings(shared, &body)).into(),
        "/api/pull" if post => with_body(bytes, |body| pull(shared, &body, false)).into(),
        "/api/push" if post => with_body(bytes, |body| pull(shared, &body, true)).into(),
        "/api/create" if post => with_body(bytes, |body| create(shared, &body)).into(),
        "/api/copy" if post => with_body(bytes, |body| copy(shared, &body)).into(),
        "/api/delete" if *method == Method::DELETE => {
            with_body(bytes, |body| delete(shared, &body)).into()
        }
        "/v1/embeddings" if post => openai_embeddings(shared, bytes).into(),
        "/v1/completions" if post => openai_completion(shared, bytes).into(),
        "/" | "/api/version" | "/api/status" | "/api/tags" | "/api/ps" | "/v1/models"
        | "/api/show" | "/api/chat" | "/api/generate" | "/api/embed" | "/api/embeddings"
        | "/api/pull" | "/api/push" | "/api/create" | "/api/copy" | "/api/delete"
        | "/v1/embeddings" | "/v1/completions" => method_not_allowed(),
        _ => text(StatusCode::NOT_FOUND, "404 page not found").into(),
    }
}

/// An error answer, boxed to keep `Result`s small.
type Refusal = Box<Response<Body>>;

fn refuse(status: StatusCode, message: impl Into<String>) -> Refusal {
    Box::new(error(status, message))
}

fn json_body(bytes: &Bytes) -> Result<Map<String, Value>, Refusal> {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Err(refuse(StatusCode::BAD_REQUEST, "missing request body"));
    }
    match serde_json::from_slice::<Value>(bytes) {
        Ok(Value::Object(body)) => Ok(body),
        Ok(_) => Err(refuse(
            StatusCode::BAD_REQUEST,
            "request body must be a JSON object",
        )),
        Err(err) => Err(refuse(StatusCode::BAD_REQUEST, err.to_string())),
    }
}

fn with_body(
    bytes: &Bytes,
    f: impl FnOnce(Map<String, Value>) -> Response<Body>,
) -> Response<Body> {
    match json_body(bytes) {
        Ok(body) => f(body),
        Err(response) => *response,
    }
}

/// `model` (or the deprecated `name`) as a non-empty string.
fn model_field(body: &Map<String, Value>) -> Result<String, Refusal> {
    match body.get("model").or_else(|| body.get("name")) {
        Some(Value::String(model)) if !model.is_empty() => Ok(model.clone()),
        None | Some(Value::Null) | Some(Value::String(_)) => {
            Err(refuse(StatusCode::BAD_REQUEST, "model is required"))
        }
        Some(_) => Err(refuse(StatusCode::BAD_REQUEST, "model must be a string")),
    }
}

fn stream_field(body: &Map<String, Value>) -> Result<bool, Refusal> {
    match body.get("stream") {
        None | Some(Value::Null) => Ok(true),
        Some(Value::Bool(stream)) => Ok(*stream),
        Some(_) => Err(refuse(StatusCode::BAD_REQUEST, "stream must be a boolean")),
    }
}

fn not_found(model: &str) -> Response<Body> {
    error(StatusCode::NOT_FOUND, format!("model '{model}' not found"))
}

fn is_zero_keep_alive(body: &Map<String, Value>) -> bool {
    match body.get("keep_alive") {
        Some(Value::Number(n)) => n.as_f64() == Some(0.0),
        Some(Value::String(s)) => {
            let digits = s.trim_end_matches(|c: char| c.is_ascii_alphabetic());
            !digits.is_empty() && digits.parse::<f64>().ok() == Some(0.0)
        }
        _ => false,
    }
}

fn load_reply(model: &str, body: &Map<String, Value>, key: &str) -> Response<Body> {
    let reason = if is_zero_keep_alive(body) {
        "unload"
    } else {
        "load"
    };
    let mut line = Map::new();
    line.insert("model".into(), json!(model));
    line.insert("created_at".into(), json!(render::now_rfc3339()));
    if key == "message" {
        line.insert(
            "message".into(),
            json!({"role": "assistant", "content": ""}),
        );
    } else {
        line.insert("response".into(), json!(""));
    }
    line.insert("done".into(), json!(true));
    line.insert("done_reason".into(), json!(reason));
    ok_json(Value::Object(line))
}

// ---------------------------------------------------------------------------
// /api/chat

async fn chat(shared: &Shared, body: Map<String, Value>, seq: usize) -> Reply {
    let model = match model_field(&body) {
        Ok(model) => model,
        Err(response) => return (*response).into(),
    };
    let stream = match stream_field(&body) {
        Ok(stream) => stream,
        Err(response) => return (*response).into(),
    };
    let (spec, check) = {
        let state = shared.state();
        (state.find_model(&model), state.script.check_capabilities)
    };
    let Some(spec) = spec else {
        return not_found(&model).into();
    };
    let (messages_empty, after_tool) = match body.get("messages") {
        None | Some(Value::Null) => (true, false),
        Some(Value::Array(messages)) => (
            messages.is_empty(),
            messages
                .last()
                .and_then(|m| m.get("role"))
                .and_then(Value::as_str)
                == Some("tool"),
        ),
        Some(_) => {
            return error(StatusCode::BAD_REQUEST, "messages must be an array").into();
        }
    };
    if check {
        if !spec.has("completion") {
            return error(
                StatusCode::BAD_REQUEST,
                format!("{model} does not support chat"),
            )
            .into();
        }
        let has_tools = body
            .get("tools")
            .and_then(Value::as_array)
            .is_some_and(|tools| !tools.is_empty());
        if has_tools && !spec.has("tools") {
            return error(
                StatusCode::BAD_REQUEST,
                format!("{model} does not support tools"),
            )
            .into();
        }
        let thinks = matches!(
            body.get("think"),
            Some(Value::Bool(true)) | Some(Value::String(_))
        );
        if thinks && !spec.has("thinking") {
            return error(
                StatusCode::BAD_REQUEST,
                format!("\"{model}\" does not support thinking"),
            )
            .into();
        }
    }
    if messages_empty {
        return load_reply(&model, &body, "message").into();
    }

    let request = Value::Object(body);
    let taken = {
        let mut state = shared.state();
        state.loaded.insert(canonical_model(&spec.name));
        state.take_turn(&model, after_tool)
    };
    let Some((number, turn)) = taken else {
        return error(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("fake-ollama: no scripted turn left for model '{model}'"),
        )
        .into();
    };
    shared.update(seq, None, number);

    if turn.response_delay_ms > 0 {
        tokio::time::sleep(Duration::from_millis(turn.response_delay_ms)).await;
    }
    if turn.hang {
        return Reply::Hang;
    }
    if let Some(http_error) = &turn.http_error {
        let status =
            StatusCode::from_u16(http_error.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        return error(status, http_error.error.clone()).into();
    }
    let mut lines = {
        let mut state = shared.state();
        render::chat_lines(&turn, &request, &model, &mut state.ids)
    };
    let (keep, end) = if let Some(stream_error) = &turn.error_after {
        (
            stream_error.after,
            StreamEnd::ErrorLine(stream_error.error.clone()),
        )
    } else if let Some(after) = turn.drop_after {
        (after, StreamEnd::Drop)
    } else if let Some(after) = turn.hang_after {
        (after, StreamEnd::Hang)
    } else {
        (lines.len(), StreamEnd::Normal)
    };
    lines.truncate(keep);

    if stream {
        if matches!(end, StreamEnd::Drop) && keep == 0 {
            return Reply::Drop;
        }
        return stream_response(lines, end).into();
    }
    // stream:false answers when generation would have finished.
    let total: u64 = lines.iter().map(|l| l.delay_ms).sum();
    if total > 0 {
        tokio::time::sleep(Duration::from_millis(total)).await;
    }
    match end {
        StreamEnd::Normal => {
            let lines: Vec<Value> = lines.into_iter().map(|l| l.line).collect();
            ok_json(render::aggregate_chat(&lines)).into()
        }
        StreamEnd::ErrorLine(message) => error(StatusCode::INTERNAL_SERVER_ERROR, message).into(),
        StreamEnd::Drop => Reply::Drop,
        StreamEnd::Hang => Reply::Hang,
    }
}

// ---------------------------------------------------------------------------
// Other endpoints

fn details(spec: &ModelSpec) -> Value {
    let family = spec.family.clone().unwrap_or_else(|| "llama".into());
    json!({
        "parent_model": "",
        "format": "gguf",
        "family": family,
        "families": [family],
        "parameter_size": spec.parameter_size.clone().unwrap_or_else(|| "8.0B".into()),
        "quantization_level": spec.quantization_level.clone().unwrap_or_else(|| "Q4_K_M".into()),
    })
}

fn model_digest(spec: &ModelSpec) -> String {
    render::digest(spec.name.as_bytes())
        .trim_start_matches("sha256:")
        .to_string()
}

fn tag_entry(spec: &ModelSpec) -> Value {
    let name = canonical_model(&spec.name);
    json!({
        "name": name,
        "model": name,
        "modified_at": MODIFIED_AT,
        "size": spec.size.unwrap_or(4_920_753_328u64),
        "digest": model_digest(spec),
        "details": details(spec),
        "capabilities": spec.capabilities,
    })
}

fn tags(shared: &Shared) -> Value {
    let models: Vec<Value> = shared.state().models.iter().map(tag_entry).collect();
    json!({"models": models})
}

fn ps(shared: &Shared) -> Value {
    let state = shared.state();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let expires = render::rfc3339(now.as_secs() + 300, 0);
    let models: Vec<Value> = state
        .models
        .iter()
        .filter(|m| state.loaded.contains(&canonical_model(&m.name)))
        .map(|spec| {
            let name = canonical_model(&spec.name);
            let size = spec.size.unwrap_or(4_920_753_328u64);
            json!({
                "name": name, "model": name, "size": size, "digest": model_digest(spec),
                "details": details(spec), "expires_at": expires, "size_vram": size,
                "context_length": spec.context_length.unwrap_or(4096),
            })
        })
        .collect();
    json!({"models": models})
}

fn show(shared: &Shared, body: &Map<String, Value>) -> Response<Body> {
    let model = match model_field(body) {
        Ok(model) => model,
        Err(response) => return *response,
    };
    let state = shared.state();
    let found = state
        .models
        .iter()
        .find(|m| canonical_model(&m.name) == canonical_model(&model))
        .cloned()
        .or_else(|| {
            state
                .models
                .is_empty()
                .then(|| state.find_model(&model))
                .flatten()
        });
    let Some(spec) = found else {
        return not_found(&model);
    };
    let family = spec.family.clone().unwrap_or_else(|| "llama".into());
    let mut model_info = Map::new();
    model_info.insert("general.architecture".into(), json!(family));
    model_info.insert("general.parameter_count".into(), json!(8_030_261_248u64));
    model_info.insert(
        format!("{family}.context_length"),
        json!(spec.context_length.unwrap_or(131_072)),
    );
    model_info.insert(
        format!("{family}.embedding_length"),
        json!(spec.embedding_length.unwrap_or(4096)),
    );
    ok_json(json!({
        "license": "",
        "modelfile": format!("# Modelfile generated by fake-ollama\nFROM {}\n", spec.name),
        "parameters": "stop \"<|eot_id|>\"",
        "template": "{{ .Prompt }}",
        "details": details(&spec),
        "model_info": model_info,
        "capabilities": spec.capabilities,
        "modified_at": MODIFIED_AT,
    }))
}

fn generate(shared: &Shared, body: Map<String, Value>) -> Response<Body> {
    let model = match model_field(&body) {
        Ok(model) => model,
        Err(response) => return *response,
    };
    let stream = match stream_field(&body) {
        Ok(stream) => stream,
        Err(response) => return *response,
    };
    let (spec, check, reply) = {
        let state = shared.state();
        (
            state.find_model(&model),
            state.script.check_capabilities,
            state.script.generate_reply.clone(),
        )
    };
    let Some(spec) = spec else {
        return not_found(&model);
    };
    if check && !spec.has("completion") {
        return error(
            StatusCode::BAD_REQUEST,
            format!("{model} does not support generate"),
        );
    }
    let prompt = body.get("prompt").and_then(Value::as_str).unwrap_or("");
    let has_images = body
        .get("images")
        .and_then(Value::as_array)
        .is_some_and(|images| !images.is_empty());
    if prompt.is_empty() && !has_images {
        return load_reply(&model, &body, "response");
    }
    shared.state().loaded.insert(canonical_model(&spec.name));
    let text = reply.unwrap_or_else(|| "This is a fake generation.".into());
    let pieces = render::split_words(&text);
    let eval_count = pieces.len() as u64 + 1;
    let mut lines: Vec<Value> = pieces
        .into_iter()
        .map(|piece| {
            json!({"model": model, "created_at": render::now_rfc3339(), "response": piece, "done": false})
        })
        .collect();
    let mut last = Map::new();
    last.insert("model".into(), json!(model));
    last.insert("created_at".into(), json!(render::now_rfc3339()));
    last.insert("response".into(), json!(""));
    last.insert("done".into(), json!(true));
    last.insert("done_reason".into(), json!("stop"));
    last.insert("context".into(), json!([1, 2, 3]));
    last.extend(render::metrics((prompt.len() / 4 + 1) as u64, eval_count));
    lines.push(Value::Object(last));
    if stream {
        let planned = lines
            .into_iter()
            .map(|line| Planned { delay_ms: 0, line })
            .collect();
        stream_response(planned, StreamEnd::Normal)
    } else {
        ok_json(render::aggregate_generate(&lines))
    }
}

fn embedding_dims(spec: &ModelSpec) -> usize {
    spec.embedding_length.unwrap_or(8).clamp(1, 8192) as usize
}

fn embed(shared: &Shared, body: &Map<String, Value>) -> Response<Body> {
    let model = match model_field(body) {
        Ok(model) => model,
        Err(response) => return *response,
    };
    let Some(spec) = shared.state().find_model(&model) else {
        return not_found(&model);
    };
    let inputs: Vec<&str> = match body.get("input") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::String(input)) => vec![input.as_str()],
        Some(Value::Array(inputs)) => match inputs.iter().map(Value::as_str).collect() {
            Some(inputs) => inputs,
            None => return error(StatusCode::BAD_REQUEST, "invalid input type"),
        },
        Some(_) => return error(StatusCode::BAD_REQUEST, "invalid input type"),
    };
    let dims = embedding_dims(&spec);
    let embeddings: Vec<Vec<f64>> = inputs.iter().map(|t| render::embedding(t, dims)).collect();
    let tokens: usize = inputs.iter().map(|t| t.len() / 4 + 1).sum();
    shared.state().loaded.insert(canonical_model(&spec.name));
    ok_json(json!({
        "model": model,
        "embeddings": embeddings,
        "total_duration": 14_143_917u64,
        "load_duration": 1_019_500u64,
        "prompt_eval_count": tokens,
    }))
}

fn embeddings(shared: &Shared, body: &Map<String, Value>) -> Response<Body> {
    let model = match model_field(body) {
        Ok(model) => model,
        Err(response) => return *response,
    };
    let Some(spec) = shared.state().find_model(&model) else {
        return not_found(&model);
    };
    let prompt = match body.get("prompt") {
        None | Some(Value::Null) => "",
        Some(Value::String(prompt)) => prompt.as_str(),
        Some(_) => return error(StatusCode::BAD_REQUEST, "prompt must be a string"),
    };
    let embedding = if prompt.is_empty() {
        Vec::new()
    } else {
        render::embedding(prompt, embedding_dims(&spec))
    };
    ok_json(json!({"embedding": embedding}))
}

fn progress(lines: Vec<Value>, stream: bool) -> Response<Body> {
    if stream {
        let planned = lines
            .into_iter()
            .map(|line| Planned { delay_ms: 0, line })
            .collect();
        stream_response(planned, StreamEnd::Normal)
    } else {
        ok_json(json!({"status": "success"}))
    }
}

fn pull(shared: &Shared, body: &Map<String, Value>, push: bool) -> Response<Body> {
    let model = match model_field(body) {
        Ok(model) => model,
        Err(response) => return *response,
    };
    let stream = match stream_field(body) {
        Ok(stream) => stream,
        Err(response) => return *response,
    };
    let digest = render::digest(model.as_bytes());
    let short = digest
        .trim_start_matches("sha256:")
        .get(..12)
        .unwrap_or("")
        .to_string();
    let total = 1_000_000u64;
    let lines = if push {
        if shared.state().find_model(&model).is_none() {
            return not_found(&model);
        }
        vec![
            json!({"status": "retrieving manifest"}),
            json!({"status": format!("pushing {short}"), "digest": digest, "total": total, "completed": total}),
            json!({"status": "pushing manifest"}),
            json!({"status": "success"}),
        ]
    } else {
        let mut state = shared.state();
        if state.find_model(&model).is_none() {
            state.models.push(ModelSpec::new(canonical_model(&model)));
        }
        vec![
            json!({"status": "pulling manifest"}),
            json!({"status": format!("pulling {short}"), "digest": digest, "total": total, "completed": 0}),
            json!({"status": format!("pulling {short}"), "digest": digest, "total": total, "completed": total / 2}),
            json!({"status": format!("pulling {short}"), "digest": digest, "total": total, "completed": total}),
            json!({"status": "verifying sha256 digest"}),
            json!({"status": "writing manifest"}),
            json!({"status": "success"}),
        ]
    };
    progress(lines, stream)
}

fn create(shared: &Shared, body: &Map<String, Value>) -> Response<Body> {
    let model = match model_field(body) {
        Ok(model) => model,
        Err(response) => return *response,
    };
    let stream = match stream_field(body) {
        Ok(stream) => stream,
        Err(response) => return *response,
    };
    let mut state = shared.state();
    let base = match body.get("from").and_then(Value::as_str) {
        Some(from) => match state.find_model(from) {
            Some(base) => Some(base),
            None => return not_found(from),
        },
        None => None,
    };
    let mut spec = base.unwrap_or_else(|| ModelSpec::new(&model));
    spec.name = canonical_model(&model);
    let wanted = spec.name.clone();
    state.models.retain(|m| canonical_model(&m.name) != wanted);
    state.models.push(spec);
    let digest = render::digest(model.as_bytes());
    progress(
        vec![
            json!({"status": format!("using existing layer {digest}")}),
            json!({"status": "writing manifest"}),
            json!({"status": "success"}),
        ],
        stream,
    )
}

fn copy(shared: &Shared, body: &Map<String, Value>) -> Response<Body> {
    let source = body.get("source").and_then(Value::as_str).unwrap_or("");
    let destination = body
        .get("destination")
        .and_then(Value::as_str)
        .unwrap_or("");
    if source.is_empty() || destination.is_empty() {
        return error(
            StatusCode::BAD_REQUEST,
            "source and destination are required",
        );
    }
    let mut state = shared.state();
    let Some(mut spec) = state.find_model(source) else {
        return not_found(source);
    };
    spec.name = canonical_model(destination);
    let wanted = spec.name.clone();
    state.models.retain(|m| canonical_model(&m.name) != wanted);
    state.models.push(spec);
    empty(StatusCode::OK)
}

fn delete(shared: &Shared, body: &Map<String, Value>) -> Response<Body> {
    let model = match model_field(body) {
        Ok(model) => model,
        Err(response) => return *response,
    };
    let mut state = shared.state();
    let wanted = canonical_model(&model);
    let before = state.models.len();
    state.models.retain(|m| canonical_model(&m.name) != wanted);
    if state.models.len() == before {
        return not_found(&model);
    }
    state.loaded.remove(&wanted);
    empty(StatusCode::OK)
}

fn blob(shared: &Shared, method: &Method, digest: &str, bytes: &Bytes) -> Response<Body> {
    let hex = digest
        .strip_prefix("sha256:")
        .or_else(|| digest.strip_prefix("sha256-"));
    let Some(hex) = hex.filter(|h| h.len() == 64 && h.bytes().all(|b| b.is_ascii_hexdigit()))
    else {
        return error(StatusCode::BAD_REQUEST, "invalid digest format");
    };
    let key = format!("sha256:{}", hex.to_ascii_lowercase());
    if *method == Method::HEAD {
        let found = shared.state().blobs.contains(&key);
        empty(if found {
            StatusCode::OK
        } else {
            StatusCode::NOT_FOUND
        })
    } else if *method == Method::POST {
        let actual = render::digest(bytes);
        if actual != key {
            return error(
                StatusCode::BAD_REQUEST,
                format!("digest mismatch, expected \"{key}\", got \"{actual}\""),
            );
        }
        shared.state().blobs.insert(key);
        empty(StatusCode::CREATED)
    } else {
        text(StatusCode::METHOD_NOT_ALLOWED, "405 method not allowed")
    }
}

/// An OpenAI-shaped `/v1` answer or refusal.
fn openai_reply(result: Result<Value, completions::Refused>) -> Response<Body> {
    match result {
        Ok(value) => ok_json(value),
        Err((status, value)) => json_response(
            StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_REQUEST),
            &value,
        ),
    }
}

/// The body and model of a `/v1` request; the model must exist.
fn openai_request(
    shared: &Shared,
    bytes: &Bytes,
) -> Result<(Map<String, Value>, ModelSpec), completions::Refused> {
    let body = match serde_json::from_slice::<Value>(bytes) {
        Ok(Value::Object(body)) => body,
        _ => {
            return Err((
                400,
                oap_wire::openai::openai_error(400, "invalid request body"),
            ))
        }
    };
    let model = completions::model_of(&body)?;
    let spec = shared
        .state()
        .find_model(&model)
        .ok_or_else(|| completions::model_not_found(&model))?;
    Ok((body, spec))
}

fn openai_embeddings(shared: &Shared, bytes: &Bytes) -> Response<Body> {
    openai_reply(openai_request(shared, bytes).and_then(|(body, spec)| {
        let model = body
            .get("model")
            .and_then(Value::as_str)
            .unwrap_or_default();
        completions::embeddings(&body, model, embedding_dims(&spec))
    }))
}

fn openai_completion(shared: &Shared, bytes: &Bytes) -> Response<Body> {
    let (body, _) = match openai_request(shared, bytes) {
        Ok(found) => found,
        Err(refused) => return openai_reply(Err(refused)),
    };
    let model = body
        .get("model")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let reply = shared
        .state()
        .script
        .generate_reply
        .clone()
        .unwrap_or_else(|| "This is a fake generation.".into());
    let created = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    match completions::completion(&body, model, &reply, created) {
        Ok(completions::Completion::Whole(value)) => ok_json(value),
        Ok(completions::Completion::Events(events)) => {
            respond(StatusCode::OK, "text/event-stream", events)
        }
        Err(refused) => openai_reply(Err(refused)),
    }
}

fn openai_model(shared: &Shared, name: &str) -> Response<Body> {
    let state = shared.state();
    let wanted = canonical_model(name);
    match state
        .models
        .iter()
        .find(|m| canonical_model(&m.name) == wanted)
    {
        Some(spec) => ok_json(models::model_object(
            &canonical_model(&spec.name),
            Some(MODIFIED_AT),
        )),
        None => json_response(
            StatusCode::NOT_FOUND,
            &oap_wire::openai::openai_error(404, &format!("model \"{name}\" not found")),
        ),
    }
}

// ---------------------------------------------------------------------------
// Host check (Ollama's allowedHostsMiddleware)

fn host_allowed(shared: &Shared, parts: &Parts) -> bool {
    if !shared.state().script.check_host || !shared.local.ip().is_loopback() {
        return true;
    }
    let host = parts
        .headers
        .get(HOST)
        .and_then(|h| h.to_str().ok())
        .map(str::to_string)
        .or_else(|| parts.uri.authority().map(|a| a.to_string()))
        .unwrap_or_default();
    allowed_host_header(&host)
}

#[allow(clippy::disallowed_methods, reason = "kernel files of a few bytes")]
fn machine_hostname() -> &'static str {
    static HOSTNAME: OnceLock<String> = OnceLock::new();
    HOSTNAME.get_or_init(|| {
        std::fs::read_to_string("/proc/sys/kernel/hostname")
            .or_else(|_| std::fs::read_to_string("/etc/hostname"))
            .map(|h| h.trim().to_ascii_lowercase())
            .unwrap_or_default()
    })
}

/// Whether Ollama listening on loopback accepts a request with this Host
/// header: empty, `localhost`, the machine's hostname, a `*.localhost`,
/// `*.local` or `*.internal` name, or a loopback, private or unspecified IP.
pub fn allowed_host_header(raw: &str) -> bool {
    let raw = raw.trim().to_ascii_lowercase();
    let host = if let Some(rest) = raw.strip_prefix('[') {
        rest.split(']').next().unwrap_or(rest).to_string()
    } else {
        match raw.rsplit_once(':') {
            Some((host, port))
                if !host.contains(':') && port.bytes().all(|b| b.is_ascii_digit()) =>
            {
                host.to_string()
            }
            _ => raw.clone(),
        }
    };
    if let Ok(ip) = host.parse::<IpAddr>() {
        return match ip {
            IpAddr::V4(v4) => v4.is_loopback() || v4.is_private() || v4.is_unspecified(),
            IpAddr::V6(v6) => {
                v6.is_loopback()
                    || v6.is_unspecified()
                    || (v6.segments()[0] & 0xfe00) == 0xfc00
                    || v6
                        .to_ipv4_mapped()
                        .is_some_and(|v4| v4.is_loopback() || v4.is_private())
            }
        };
    }
    host.is_empty()
        || host == "localhost"
        || (!machine_hostname().is_empty() && host == machine_hostname())
        || [".localhost", ".local", ".internal"]
            .iter()
            .any(|tld| host.ends_with(tld))
}

// ---------------------------------------------------------------------------
// Control endpoints

fn query_param(parts: &Parts, key: &str) -> Option<String> {
    parts.uri.query()?.split('&').find_map(|pair| {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        (percent_decode(k) == key).then(|| percent_decode(v))
    })
}

fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' => {
                let hex = text
                    .get(i + 1..i + 3)
                    .and_then(|h| u8::from_str_radix(h, 16).ok());
                match hex {
                    Some(byte) => {
                        out.push(byte);
                        i += 3;
                    }
                    None => {
                        out.push(b'%');
                        i += 1;
                    }
                }
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            byte => {
                out.push(byte);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn control(shared: &Shared, parts: &Parts, command: &str, bytes: &Bytes) -> Response<Body> {
    let method = &parts.method;
    match (command, method) {
        ("script", &Method::POST) => match serde_json::from_slice::<Script>(bytes) {
            Ok(script) => {
                let turns = script.turns.len();
                shared.state().set_script(script);
                ok_json(json!({"ok": true, "turns": turns}))
            }
            Err(err) => error(StatusCode::BAD_REQUEST, format!("invalid script: {err}")),
        },
        ("turns", &Method::POST) => {
            let turns = match serde_json::from_slice::<Value>(bytes) {
                Ok(Value::Array(turns)) => turns,
                Ok(turn) => vec![turn],
                Err(err) => return error(StatusCode::BAD_REQUEST, format!("invalid turn: {err}")),
            };
            let turns = match turns
                .into_iter()
                .map(serde_json::from_value::<Turn>)
                .collect::<Result<Vec<_>, _>>()
            {
                Ok(turns) => turns,
                Err(err) => return error(StatusCode::BAD_REQUEST, format!("invalid turn: {err}")),
            };
            let mut state = shared.state();
            for turn in turns {
                state.push_turn(turn);
            }
            ok_json(json!({"ok": true, "remaining": state.turns.len()}))
        }
        ("turns", &Method::GET) => ok_json(json!({"remaining": shared.state().turns.len()})),
        ("requests", &Method::GET) => {
            let path = query_param(parts, "path");
            let state = shared.state();
            let requests: Vec<&Recorded> = state
                .requests
                .iter()
                .filter(|r| path.as_deref().is_none_or(|p| r.path == p))
                .collect();
            match serde_json::to_value(requests) {
                Ok(value) => ok_json(value),
                Err(err) => error(StatusCode::INTERNAL_SERVER_ERROR, err.to_string()),
            }
        }
        ("requests", &Method::DELETE) => {
            shared.state().requests.clear();
            ok_json(json!({"ok": true}))
        }
        ("reset", &Method::POST) => {
            let mut state = shared.state();
            state.requests.clear();
            state.rearm();
            ok_json(json!({"ok": true, "remaining": state.turns.len()}))
        }
        ("state", &Method::GET) => {
            let state = shared.state();
            let models: Vec<&str> = state.models.iter().map(|m| m.name.as_str()).collect();
            ok_json(json!({
                "remaining_turns": state.turns.len(),
                "requests": state.requests.len(),
                "models": models,
                "check_host": state.script.check_host,
                "check_capabilities": state.script.check_capabilities,
            }))
        }
        ("script" | "turns" | "requests" | "reset" | "state", _) => {
            text(StatusCode::METHOD_NOT_ALLOWED, "405 method not allowed")
        }
        _ => text(StatusCode::NOT_FOUND, "404 page not found"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_ollama_accepts_on_loopback() {
        for host in [
            "",
            "localhost",
            "localhost:11434",
            "LOCALHOST",
            "127.0.0.1",
            "127.0.0.1:11434",
            "[::1]:11434",
            "[::1]",
            "::1",
            "10.0.0.5",
            "192.168.1.20:8080",
            "172.16.3.4",
            "0.0.0.0:11434",
            "ollama.local",
            "box.internal:80",
            "app.localhost",
            "[fd00::1]:11434",
        ] {
            assert!(allowed_host_header(host), "{host} should be allowed");
        }
        for host in [
            "example.com",
            "evil.com:11434",
            "8.8.8.8",
            "ollama",
            "local",
            "[2001:db8::1]:80",
            "localhost.evil.com",
        ] {
            assert!(!allowed_host_header(host), "{host} should be refused");
        }
    }

    #[test]
    fn percent_decoding() {
        assert_eq!(percent_decode("%2Fapi%2fchat"), "/api/chat");
        assert_eq!(percent_decode("a+b%zz"), "a b%zz");
    }

    #[test]
    fn pushed_turns_are_numbered_after_the_script() {
        let mut state = State::new(Script::new().turn(Turn::reply("a")).turn(Turn::reply("b")));
        state.push_turn(Turn::reply("c"));
        assert_eq!(state.take_turn("m", false).map(|(n, _)| n), Some(Some(0)));
        state.push_turn(Turn::reply("d"));
        let numbers: Vec<usize> = state.turns.iter().map(|(n, _)| *n).collect();
        assert_eq!(numbers, vec![1, 2, 3]);
    }

    #[test]
    fn turns_for_other_models_wait() {
        let mut state = State::new(
            Script::new()
                .turn(Turn::reply("for b").for_model("b"))
                .turn(Turn::reply("any")),
        );
        let (n, turn) = state.take_turn("a:latest", false).unwrap();
        assert_eq!((n, turn.reply.as_deref()), (Some(1), Some("any")));
        let (n, _) = state.take_turn("b", false).unwrap();
        assert_eq!(n, Some(0));
        assert!(state.take_turn("b", false).is_none());
    }
}

//! The HTTP/1 server shell: listeners, connection limits, timeouts, graceful
//! shutdown, and the small helpers every handler uses (JSON bodies, capped
//! request bodies, JSON errors).
//!
//! Limits live here so that no handler can forget them: a connection count
//! cap and a cap per client address, a header read deadline that starts at
//! accept (slowloris; the first head is read by [`crate::head`]), a request
//! body cap enforced while reading, a body stall deadline, and a
//! per-request deadline.

use std::collections::HashMap;
use std::convert::Infallible;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::header::{HeaderValue, CONTENT_TYPE};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::{GracefulShutdown, Watcher};
use serde::Serialize;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, OwnedSemaphorePermit, Semaphore};

use crate::head::{self, Head};

pub type BoxError = Box<dyn std::error::Error + Send + Sync>;
/// Response bodies are boxed so handlers can return buffered or streamed bodies.
pub type Body = BoxBody<Bytes, BoxError>;

/// The client's socket address, in every request's extensions.
#[derive(Debug, Clone, Copy)]
pub struct PeerAddr(pub SocketAddr);

/// The local address the connection was accepted on, in every request's
/// extensions (the Host check applies to loopback ones).
#[derive(Debug, Clone, Copy)]
pub struct LocalAddr(pub SocketAddr);

/// Limits that apply to every connection and request.
#[derive(Debug, Clone)]
pub struct Limits {
    pub max_connections: usize,
    /// Connections at once from one client IP address.
    pub max_connections_per_client: usize,
    pub max_body_bytes: usize,
    pub header_read_timeout: Duration,
    pub request_timeout: Duration,
}

/// Something that answers requests.
pub trait Handler: Send + Sync + 'static {
    fn handle(
        self: Arc<Self>,
        request: Request<Incoming>,
    ) -> impl Future<Output = Response<Body>> + Send;

    /// Whether the server-wide request timeout bounds this request. Routes
    /// with their own deadlines (the chat loop, streamed model pulls)
    /// opt out.
    fn bounded_by_request_timeout(&self, _request: &Request<Incoming>) -> bool {
        true
    }
}

/// A full response body from bytes.
pub fn full(bytes: impl Into<Bytes>) -> Body {
    Full::new(bytes.into())
        .map_err(|never: Infallible| match never {})
        .boxed()
}

/// A JSON response.
pub fn json<T: Serialize>(status: StatusCode, value: &T) -> Response<Body> {
    match serde_json::to_vec(value) {
        Ok(bytes) => with_type(status, bytes, "application/json"),
        Err(err) => {
            tracing::error!(error = %err, "cannot serialise response");
            error(
                StatusCode::INTERNAL_SERVER_ERROR,
                "cannot serialise response",
            )
        }
    }
}

/// A JSON error `{"error": "..."}`; every error this daemon returns has this shape.
pub fn error(status: StatusCode, message: impl Into<String>) -> Response<Body> {
    #[derive(Serialize)]
    struct ErrorBody {
        error: String,
    }
    let body = ErrorBody {
        error: message.into(),
    };
    let bytes = serde_json::to_vec(&body).unwrap_or_else(|_| b"{\"error\":\"error\"}".to_vec());
    with_type(status, bytes, "application/json")
}

fn with_type(status: StatusCode, bytes: Vec<u8>, content_type: &'static str) -> Response<Body> {
    let mut response = Response::new(full(bytes));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    response
}

/// Why a request body could not be read.
#[derive(Debug)]
pub enum BodyError {
    TooLarge {
        limit: usize,
    },
    Read(String),
    /// The client stopped sending the body it announced.
    Stalled(String),
}

impl BodyError {
    pub fn status(&self) -> StatusCode {
        match self {
            BodyError::TooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            BodyError::Read(_) => StatusCode::BAD_REQUEST,
            BodyError::Stalled(_) => StatusCode::REQUEST_TIMEOUT,
        }
    }

    pub fn message(&self) -> String {
        match self {
            BodyError::TooLarge { limit } => {
                format!("request body is larger than the {limit} byte limit")
            }
            BodyError::Read(message) => format!("cannot read request body: {message}"),
            BodyError::Stalled(message) => message.clone(),
        }
    }

    pub fn into_response(self) -> Response<Body> {
        error(self.status(), self.message())
    }
}

/// How long a request body may take, for the request being served (a task
/// local, so every handler's [`read_body`] gets it without passing it on).
#[derive(Debug, Clone)]
struct BodyClock {
    /// Longest silence between two pieces of the body.
    stall: Duration,
    /// Longest time for the whole body.
    total: Duration,
    /// Set while [`read_body`] waits, so the request timeout can tell a
    /// stalled client from a slow handler.
    reading: Arc<AtomicBool>,
}

tokio::task_local! {
    static BODY_CLOCK: BodyClock;
}

/// Reads a request body, refusing it as soon as it passes `limit` bytes
/// (a declared Content-Length over the limit is refused before reading).
/// Under [`serve`], a body that stops arriving for `server.header_read_timeout`,
/// or is not complete within `server.request_timeout`, is refused as stalled.
pub async fn read_body(body: Incoming, limit: usize) -> Result<Bytes, BodyError> {
    use hyper::body::Body as _;
    let declared = body.size_hint().exact();
    if body.size_hint().lower() > limit as u64 {
        return Err(BodyError::TooLarge { limit });
    }
    let clock = BODY_CLOCK.try_with(Clone::clone).ok();
    if let Some(clock) = &clock {
        clock.reading.store(true, Ordering::Relaxed);
    }
    let started = tokio::time::Instant::now();
    let mut body = Limited::new(body, limit);
    let mut collected = BytesMut::new();
    let result = loop {
        let next = match &clock {
            None => body.frame().await,
            Some(clock) => {
                let silence = tokio::time::Instant::now() + clock.stall;
                let deadline = silence.min(started + clock.total);
                match tokio::time::timeout_at(deadline, body.frame()).await {
                    Ok(next) => next,
                    Err(_) => {
                        let (limit, key) = if deadline == silence {
                            (clock.stall, "server.header_read_timeout")
                        } else {
                            (clock.total, "server.request_timeout")
                        };
                        break Err(stalled(collected.len(), declared, limit, key));
                    }
                }
            }
        };
        match next {
            None => break Ok(collected.freeze()),
            Some(Ok(frame)) => {
                if let Ok(data) = frame.into_data() {
                    collected.extend_from_slice(&data);
                }
            }
            Some(Err(err)) if err.is::<http_body_util::LengthLimitError>() => {
                break Err(BodyError::TooLarge { limit })
            }
            Some(Err(err)) => break Err(BodyError::Read(err.to_string())),
        }
    };
    if let Some(clock) = &clock {
        clock.reading.store(false, Ordering::Relaxed);
    }
    result
}

fn stalled(received: usize, declared: Option<u64>, limit: Duration, key: &str) -> BodyError {
    let of = declared.map(|d| format!(" of {d}")).unwrap_or_default();
    BodyError::Stalled(format!(
        "the request body stalled: {received}{of} bytes received, then nothing within {} s ({key})",
        limit.as_secs()
    ))
}

/// Binds every listen address; fails on the first that cannot be bound, so
/// a typo in the config is an error at start, not a silent half-deaf daemon.
pub async fn bind(addresses: &[SocketAddr]) -> std::io::Result<Vec<TcpListener>> {
    let mut listeners = Vec::with_capacity(addresses.len());
    for address in addresses {
        let listener = TcpListener::bind(address).await.map_err(|err| {
            std::io::Error::new(err.kind(), format!("cannot listen on {address}: {err}"))
        })?;
        listeners.push(listener);
    }
    Ok(listeners)
}

/// Open connections per client address. A slot is given back when its
/// [`ClientSlot`] is dropped.
#[derive(Debug, Default)]
struct Clients {
    open: Mutex<HashMap<IpAddr, usize>>,
}

struct ClientSlot {
    clients: Arc<Clients>,
    ip: IpAddr,
}

impl Clients {
    /// A slot for `ip`, or `None` when it already has `cap` connections.
    fn enter(self: &Arc<Self>, ip: IpAddr, cap: usize) -> Option<ClientSlot> {
        let ip = ip.to_canonical();
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        let count = open.entry(ip).or_insert(0);
        if *count >= cap {
            return None;
        }
        *count += 1;
        Some(ClientSlot {
            clients: self.clone(),
            ip,
        })
    }
}

impl Drop for ClientSlot {
    fn drop(&mut self) {
        let mut open = self.clients.open.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(count) = open.get_mut(&self.ip) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                open.remove(&self.ip);
            }
        }
    }
}

/// Serves `handler` on `listeners` until `shutdown` resolves, then stops
/// accepting and waits up to `drain` for in-flight requests.
pub async fn serve<H: Handler>(
    listeners: Vec<TcpListener>,
    handler: Arc<H>,
    limits: Limits,
    shutdown: impl Future<Output = ()>,
    drain: Duration,
) {
    // Shared by the accept loops; unwrapped again once they have stopped.
    let graceful = Arc::new(GracefulShutdown::new());
    let permits = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    let clients = Arc::new(Clients::default());
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut accept_tasks = Vec::new();
    for listener in listeners {
        let handler = handler.clone();
        let limits = limits.clone();
        let permits = permits.clone();
        let clients = clients.clone();
        let graceful = graceful.clone();
        let mut stop = stop_rx.clone();
        accept_tasks.push(tokio::spawn(async move {
            loop {
                let (stream, peer) = tokio::select! {
                    _ = stop.changed() => break,
                    accepted = listener.accept() => match accepted {
                        Ok(accepted) => accepted,
                        Err(err) => {
                            // EMFILE and friends: back off instead of spinning.
                            tracing::warn!(error = %err, "accept failed");
                            tokio::time::sleep(Duration::from_millis(100)).await;
                            continue;
                        }
                    },
                };
                // The header deadline runs from here, whatever waits below.
                let deadline = tokio::time::Instant::now() + limits.header_read_timeout;
                // One client cannot take every slot: over its cap it is
                // turned away at once, before it holds a global slot.
                let Some(slot) = clients.enter(peer.ip(), limits.max_connections_per_client) else {
                    tracing::debug!(%peer, "connection refused: too many from this client");
                    turn_away(stream, limits.max_connections_per_client);
                    continue;
                };
                let permit = tokio::select! {
                    _ = stop.changed() => break,
                    permit = permits.clone().acquire_owned() => match permit {
                        Ok(permit) => permit,
                        Err(_) => break,
                    },
                };
                let _ = stream.set_nodelay(true);
                let connection = Connection {
                    stream,
                    peer,
                    deadline,
                    limits: limits.clone(),
                    watcher: graceful.watcher(),
                    _slot: slot,
                    _permit: permit,
                };
                tokio::spawn(connection.run(handler.clone()));
            }
        }));
    }
    shutdown.await;
    tracing::info!("shutting down: no new connections, draining in-flight requests");
    let _ = stop_tx.send(true);
    for task in accept_tasks {
        let _ = task.await;
    }
    let Ok(graceful) = Arc::try_unwrap(graceful) else {
        tracing::warn!("connection tracker still shared; not waiting for in-flight requests");
        return;
    };
    if tokio::time::timeout(drain, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!(
            ?drain,
            "in-flight requests did not finish in time; closing them"
        );
    }
}

/// Answers 503 to a client over its connection cap if the answer fits the
/// socket buffer right away, and closes. Never waits.
fn turn_away(stream: TcpStream, cap: usize) {
    let response = head::error_response(
        StatusCode::SERVICE_UNAVAILABLE,
        &format!(
            "too many connections from your address (server.max_connections_per_client is {cap})"
        ),
    );
    let _ = stream.try_write(&response);
    drop(stream);
}

/// One accepted connection, holding its client slot and global permit
/// until it ends.
struct Connection {
    stream: TcpStream,
    peer: SocketAddr,
    deadline: tokio::time::Instant,
    limits: Limits,
    watcher: Watcher,
    _slot: ClientSlot,
    _permit: OwnedSemaphorePermit,
}

impl Connection {
    async fn run<H: Handler>(mut self, handler: Arc<H>) {
        let peer = self.peer;
        let local = self.stream.local_addr().ok();
        let prefix = match head::read_first(
            &mut self.stream,
            self.deadline,
            self.limits.header_read_timeout,
        )
        .await
        {
            Head::Complete(prefix) => prefix,
            Head::Closed => return,
            Head::Refused(refused) => {
                tracing::debug!(%peer, status = refused.status.as_u16(), error = %refused.message, "request head refused");
                head::refuse(&mut self.stream, &refused).await;
                return;
            }
        };
        let request_timeout = self.limits.request_timeout;
        let body_stall = self.limits.header_read_timeout;
        let service = service_fn(move |mut request: Request<Incoming>| {
            request.extensions_mut().insert(PeerAddr(peer));
            if let Some(local) = local {
                request.extensions_mut().insert(LocalAddr(local));
            }
            let handler = handler.clone();
            // Chats and Ollama pass-through have their own deadlines
            // (ollama.chat_deadline, ollama.timeout): a model loading
            // from an SD card takes longer than any local route.
            let bounded = handler.bounded_by_request_timeout(&request);
            let clock = BodyClock {
                stall: body_stall,
                total: request_timeout,
                reading: Arc::new(AtomicBool::new(false)),
            };
            let reading = clock.reading.clone();
            BODY_CLOCK.scope(clock, async move {
                if !bounded {
                    return Ok::<_, Infallible>(handler.handle(request).await);
                }
                let response =
                    match tokio::time::timeout(request_timeout, handler.handle(request)).await {
                        Ok(response) => response,
                        Err(_) if reading.load(Ordering::Relaxed) => error(
                            StatusCode::REQUEST_TIMEOUT,
                            format!(
                                "the request body stalled: not complete within {} s \
                                 (server.request_timeout)",
                                request_timeout.as_secs()
                            ),
                        ),
                        Err(_) => error(
                            StatusCode::SERVICE_UNAVAILABLE,
                            "request took longer than the server's request timeout \
                             (server.request_timeout)",
                        ),
                    };
                Ok::<_, Infallible>(response)
            })
        });
        let io = TokioIo::new(head::Prefixed::new(prefix, self.stream));
        let connection = http1::Builder::new()
            .timer(TokioTimer::new())
            .header_read_timeout(self.limits.header_read_timeout)
            .max_buf_size(head::MAX_HEAD_BYTES)
            .serve_connection(io, service);
        if let Err(err) = self.watcher.watch(connection).await {
            tracing::debug!(%peer, error = %err, "connection ended with an error");
        }
    }
}

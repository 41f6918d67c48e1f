//! The HTTP/1 server shell: listeners, connection limits, timeouts, graceful
//! shutdown, and the small helpers every handler uses (JSON bodies, capped
//! request bodies, JSON errors).
//!
//! Limits live here so that no handler can forget them: a cap per client
//! address, a budget of connections still sending their head or idle whose
//! oldest is closed when it is full, a separate budget of requests being
//! served (both in [`super::pending`]), a header read deadline that starts
//! at accept (slowloris; the first head is read by [`super::head`]), a
//! request body cap enforced while reading, a body stall deadline, and a
//! per-request deadline.

use std::collections::HashMap;
use std::convert::Infallible;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::header::{HeaderValue, CONTENT_TYPE, RETRY_AFTER};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::{GracefulShutdown, Watcher};
use serde::Serialize;
use serde_json::Value;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Semaphore};

use super::head::{self, Head};
use super::pending::{Occupancy, Pending, Watched};
use crate::server::observe::RequestInfo;
use oap_bridge::upstream::X_REQUEST_ID;
use tracing::Instrument;

/// The error type of response bodies and of the server's plumbing.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;
/// Response bodies are boxed so handlers can return buffered or streamed bodies.
pub type Body = BoxBody<Bytes, BoxError>;

/// A response body that holds `T` (a slot, a counted request) until hyper
/// has written it or dropped it, and is otherwise the body it wraps, size
/// included: a buffered answer keeps its `Content-Length` (a mapped body
/// would lose its size hint and go out chunked).
pub struct Holding<T> {
    body: Body,
    _held: T,
}

impl<T> Holding<T> {
    /// `body`, holding `held` until the body is dropped.
    pub fn new(body: Body, held: T) -> Holding<T> {
        Holding { body, _held: held }
    }
}

impl<T: Unpin> hyper::body::Body for Holding<T> {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Bytes>, BoxError>>> {
        std::pin::Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.body.size_hint()
    }
}

/// The client's socket address, in every request's extensions.
#[derive(Debug, Clone, Copy)]
pub struct PeerAddr(pub SocketAddr);

/// Limits that apply to every connection and request.
#[derive(Debug, Clone)]
pub struct Limits {
    /// `server.max_connections`: requests served at once (from a complete
    /// head until the answer is written); further complete heads wait.
    pub max_connections: usize,
    /// `server.max_pending_connections`: connections sending their head or
    /// idle between requests; when full, the oldest is closed.
    pub max_pending_connections: usize,
    /// Connections at once from one client IP address.
    pub max_connections_per_client: usize,
    /// `server.header_read_timeout`: how long a request head, or a pause in
    /// a body, may take.
    pub header_read_timeout: Duration,
    /// `server.request_timeout`: wall-clock bound of a whole request, unless
    /// the handler opts out.
    pub request_timeout: Duration,
}

/// Something that answers requests.
pub trait Handler: Send + Sync + 'static {
    /// Answers one request; errors are responses (a JSON `error` body), so
    /// the connection keeps serving.
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

    /// The name of the request's route, for metrics and logs: one of a
    /// fixed set (the route table's), never the raw path.
    fn route_name(&self, _request: &Request<Incoming>) -> &'static str {
        "other"
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
/// Why a request body could not be read.
#[derive(Debug)]
pub enum BodyError {
    /// The body exceeds the route's cap; 413.
    TooLarge {
        /// The cap, bytes.
        limit: usize,
    },
    /// The connection failed while the body was read; 400.
    Read(String),
    /// The bodies already in memory leave no room for this one
    /// (`server.max_inflight_body_bytes`); the client should try again later.
    Busy {
        /// `server.max_inflight_body_bytes`; the response is 503 with
        /// `Retry-After`.
        budget: usize,
    },
    /// Larger than the whole in-flight budget: it could never be admitted.
    OverBudget {
        /// `server.max_inflight_body_bytes`; the response is 413.
        budget: usize,
    },
    /// The client stopped sending the body it announced.
    Stalled(String),
}

impl BodyError {
    /// The status and message of this error.
    pub fn parts(&self) -> (StatusCode, String) {
        match self {
            BodyError::TooLarge { limit } => (
                StatusCode::PAYLOAD_TOO_LARGE,
                format!("request body is larger than the {limit} byte limit"),
            ),
            BodyError::Read(message) => (
                StatusCode::BAD_REQUEST,
                format!("cannot read request body: {message}"),
            ),
            BodyError::Busy { budget } => (
                StatusCode::SERVICE_UNAVAILABLE,
                format!(
                    "the server is busy: request bodies in memory have reached \
                     {BODY_BUDGET_KEY} ({budget} bytes); retry in {RETRY_AFTER_SECS} s"
                ),
            ),
            BodyError::OverBudget { budget } => (
                StatusCode::PAYLOAD_TOO_LARGE,
                format!(
                    "request body is larger than {BODY_BUDGET_KEY} ({budget} bytes), \
                     the memory for all request bodies together"
                ),
            ),
            BodyError::Stalled(message) => (StatusCode::REQUEST_TIMEOUT, message.clone()),
        }
    }

    /// The error as a JSON `{"error": ...}` response.
    pub fn into_response(self) -> Response<Body> {
        self.into_response_with(|status, message| error(status, message))
    }

    /// The error in a surface's own shape (`make` builds the body); a busy
    /// answer always carries `Retry-After`.
    pub fn into_response_with(
        self,
        make: impl FnOnce(StatusCode, &str) -> Response<Body>,
    ) -> Response<Body> {
        let (status, message) = self.parts();
        let mut response = make(status, &message);
        if let BodyError::Busy { .. } = self {
            response
                .headers_mut()
                .insert(RETRY_AFTER, HeaderValue::from(RETRY_AFTER_SECS));
        }
        response
    }
}

/// The config key of the in-flight body budget, named in answers.
pub const BODY_BUDGET_KEY: &str = "server.max_inflight_body_bytes";
/// Default in-flight body budget (`server.max_inflight_body_bytes`).
pub use crate::config::DEFAULT_INFLIGHT_BODY_BYTES;
/// What a busy answer tells the client to wait.
pub const RETRY_AFTER_SECS: u32 = 5;
/// A refused body is read and thrown away for at most this long, so the
/// client finishes sending and reads the 503 instead of a reset connection.
const DRAIN_FOR: Duration = Duration::from_secs(30);
/// Bursts whose bodies peaked above this hand freed memory back to the
/// kernel once they are over.
const TRIM_AFTER_PEAK: usize = 8 * 1024 * 1024;
/// At most one trim per this interval.
const TRIM_INTERVAL: Duration = Duration::from_secs(2);

/// Request-body bytes in memory across all connections, capped. A body
/// holds its share ([`BodyPermit`]) for as long as it, or what was parsed
/// from it, is alive; when the last share of a large burst is returned,
/// the allocator hands freed memory back to the kernel.
#[derive(Debug)]
pub struct BodyBudget {
    capacity: AtomicUsize,
    in_flight: AtomicUsize,
    /// The largest `in_flight` since the last trim.
    peak: AtomicUsize,
    last_trim: Mutex<Option<Instant>>,
    trims: AtomicUsize,
}

static BODY_BUDGET: OnceLock<Arc<BodyBudget>> = OnceLock::new();

/// The daemon's one budget, shared by every connection and every handler
/// generation (a reload sets its capacity).
pub fn body_budget() -> &'static Arc<BodyBudget> {
    BODY_BUDGET.get_or_init(|| Arc::new(BodyBudget::new(DEFAULT_INFLIGHT_BODY_BYTES)))
}

impl BodyBudget {
    /// A budget of `capacity` bytes for all request bodies in memory at once.
    pub fn new(capacity: usize) -> BodyBudget {
        BodyBudget {
            capacity: AtomicUsize::new(capacity),
            in_flight: AtomicUsize::new(0),
            peak: AtomicUsize::new(0),
            last_trim: Mutex::new(None),
            trims: AtomicUsize::new(0),
        }
    }

    /// Sets `server.max_inflight_body_bytes` (a reload changes it); bodies
    /// already admitted keep their share.
    pub fn set_capacity(&self, bytes: usize) {
        self.capacity.store(bytes, Ordering::Relaxed);
    }

    /// The current capacity, bytes.
    pub fn capacity(&self) -> usize {
        self.capacity.load(Ordering::Relaxed)
    }

    /// Body bytes held right now.
    pub fn in_flight(&self) -> usize {
        self.in_flight.load(Ordering::Relaxed)
    }

    /// How often freed memory was handed back.
    #[cfg(test)]
    pub fn trims(&self) -> usize {
        self.trims.load(Ordering::Relaxed)
    }

    /// A share of `bytes`, or `None` when that would pass the capacity.
    pub fn reserve(self: &Arc<Self>, bytes: usize) -> Option<BodyPermit> {
        self.take(bytes).then(|| BodyPermit {
            budget: self.clone(),
            bytes,
        })
    }

    fn take(&self, bytes: usize) -> bool {
        let capacity = self.capacity();
        let taken = self
            .in_flight
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |held| {
                held.checked_add(bytes).filter(|&total| total <= capacity)
            });
        match taken {
            Ok(before) => {
                self.peak.fetch_max(before + bytes, Ordering::Relaxed);
                true
            }
            Err(_) => false,
        }
    }

    fn give_back(&self, bytes: usize) {
        let before = self.in_flight.fetch_sub(bytes, Ordering::AcqRel);
        if before == bytes {
            self.settled();
        }
    }

    /// Nothing is in flight: after a large burst, hand the memory glibc
    /// keeps in its free lists back to the kernel (rate-limited; the trim
    /// itself runs on the blocking pool).
    fn settled(&self) {
        if self.peak.load(Ordering::Relaxed) < TRIM_AFTER_PEAK {
            return;
        }
        let Ok(mut last) = self.last_trim.lock() else {
            return;
        };
        if last.is_some_and(|at| at.elapsed() < TRIM_INTERVAL) {
            return;
        }
        *last = Some(Instant::now());
        self.peak.store(0, Ordering::Relaxed);
        self.trims.fetch_add(1, Ordering::Relaxed);
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                runtime.spawn_blocking(oap_embed::return_freed_memory);
            }
            Err(_) => oap_embed::return_freed_memory(),
        }
    }
}

/// Reads a request body that must be one JSON object, under `limit` and
/// the in-flight budget. The parsed bytes are dropped at once; the permit
/// (the body's share of the budget) comes back to be held for as long as
/// what was parsed from it lives. Any failure is the answer to send, built
/// by `make` in the surface's own error shape.
pub async fn read_json_object(
    body: Incoming,
    limit: usize,
    make: impl Fn(StatusCode, &str) -> Response<Body>,
) -> Result<(Value, BodyPermit), Response<Body>> {
    let body = match read_body(body, limit).await {
        Ok(body) => body,
        Err(err) => return Err(err.into_response_with(make)),
    };
    let (bytes, permit) = body.into_parts();
    let parsed = serde_json::from_slice(&bytes);
    drop(bytes);
    match parsed {
        Ok(value @ Value::Object(_)) => Ok((value, permit)),
        Ok(_) => Err(make(
            StatusCode::BAD_REQUEST,
            "request body must be a JSON object",
        )),
        Err(err) => Err(make(
            StatusCode::BAD_REQUEST,
            &format!("invalid JSON: {err}"),
        )),
    }
}

/// A share of the body budget; returned when dropped.
#[derive(Debug)]
pub struct BodyPermit {
    budget: Arc<BodyBudget>,
    bytes: usize,
}

impl BodyPermit {
    /// Bytes of the budget this permit holds.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Takes `more` bytes on top; false when the budget has no room.
    fn grow(&mut self, more: usize) -> bool {
        let grown = self.budget.take(more);
        if grown {
            self.bytes += more;
        }
        grown
    }
}

impl Drop for BodyPermit {
    fn drop(&mut self) {
        self.budget.give_back(self.bytes);
    }
}

/// A request body read into memory, with its share of the body budget.
/// Handlers that keep what they parse from it past their own return (the
/// chat loop) keep the permit with it ([`BodyBytes::into_parts`]).
#[derive(Debug)]
pub struct BodyBytes {
    bytes: Bytes,
    permit: BodyPermit,
}

impl BodyBytes {
    /// The body and its permit, for a handler whose parsed body outlives it.
    pub fn into_parts(self) -> (Bytes, BodyPermit) {
        (self.bytes, self.permit)
    }
}

impl std::ops::Deref for BodyBytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.bytes
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
/// (a declared Content-Length over the limit is refused before reading),
/// within the daemon's body budget: a body the budget has no room for is
/// refused with [`BodyError::Busy`] before it is read (or as soon as it
/// outgrows the room, for a body of unknown length).
pub async fn read_body(body: Incoming, limit: usize) -> Result<BodyBytes, BodyError> {
    read_body_within(body, limit, body_budget()).await
}

/// [`read_body`] against a given budget. Under [`serve`], a body that stops
/// arriving for `server.header_read_timeout`, or is not complete within
/// `server.request_timeout`, is refused as stalled.
pub async fn read_body_within(
    body: Incoming,
    limit: usize,
    budget: &Arc<BodyBudget>,
) -> Result<BodyBytes, BodyError> {
    let clock = BODY_CLOCK.try_with(Clone::clone).ok();
    if let Some(clock) = &clock {
        clock.reading.store(true, Ordering::Relaxed);
    }
    let result = collect_body(body, limit, budget, clock.as_ref()).await;
    if let Some(clock) = &clock {
        clock.reading.store(false, Ordering::Relaxed);
    }
    result
}

async fn collect_body(
    mut body: Incoming,
    limit: usize,
    budget: &Arc<BodyBudget>,
    clock: Option<&BodyClock>,
) -> Result<BodyBytes, BodyError> {
    use hyper::body::Body as _;
    let hint = body.size_hint();
    if hint.lower() > limit as u64 {
        return Err(BodyError::TooLarge { limit });
    }
    let exact = hint.exact();
    // Within `limit`, so it fits a usize.
    let declared = usize::try_from(hint.lower()).unwrap_or(limit);
    let capacity = budget.capacity();
    if declared > capacity {
        return Err(BodyError::OverBudget { budget: capacity });
    }
    let Some(mut permit) = budget.reserve(declared) else {
        drain_refused(body, limit);
        return Err(BodyError::Busy { budget: capacity });
    };
    let started = tokio::time::Instant::now();
    // Frames are copied into one buffer as they arrive, so a body exists
    // once in memory, never as frames plus their concatenation.
    let mut buffer = BytesMut::with_capacity(declared);
    loop {
        let next = match clock {
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
                        return Err(stalled(buffer.len(), exact, limit, key));
                    }
                }
            }
        };
        let Some(frame) = next else {
            break;
        };
        let frame = frame.map_err(|err| BodyError::Read(err.to_string()))?;
        let Ok(data) = frame.into_data() else {
            continue;
        };
        let total = buffer.len() + data.len();
        if total > limit {
            return Err(BodyError::TooLarge { limit });
        }
        if total > permit.bytes() && !permit.grow(total - permit.bytes()) {
            drop(buffer);
            drop(permit);
            drain_refused(body, limit);
            return Err(BodyError::Busy { budget: capacity });
        }
        buffer.extend_from_slice(&data);
    }
    Ok(BodyBytes {
        bytes: buffer.freeze(),
        permit,
    })
}

/// Reads and discards the rest of a refused body in the background (at
/// most `limit` bytes, for at most [`DRAIN_FOR`]), holding none of it: the
/// 503 goes out at once, and a client still sending sees it instead of a
/// connection reset.
fn drain_refused(mut body: Incoming, limit: usize) {
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return;
    };
    runtime.spawn(async move {
        let drain = async {
            let mut seen = 0usize;
            while let Some(Ok(frame)) = body.frame().await {
                if let Some(data) = frame.data_ref() {
                    seen = seen.saturating_add(data.len());
                    if seen > limit {
                        break;
                    }
                }
            }
        };
        let _ = tokio::time::timeout(DRAIN_FOR, drain).await;
    });
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
    let served = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    let pending = Arc::new(Pending::new(limits.max_pending_connections));
    let clients = Arc::new(Clients::default());
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut accept_tasks = Vec::new();
    for listener in listeners {
        let handler = handler.clone();
        let limits = limits.clone();
        let served = served.clone();
        let pending = pending.clone();
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
                // turned away at once, before it counts anywhere else.
                let Some(slot) = clients.enter(peer.ip(), limits.max_connections_per_client) else {
                    tracing::debug!(%peer, "connection refused: too many from this client");
                    turn_away(stream, limits.max_connections_per_client);
                    continue;
                };
                // Never waits: a full pending budget closes its oldest
                // connection instead, so the accept loop keeps taking
                // connections however many trickle their heads.
                let occupancy = Occupancy::admit(&pending, &served);
                let _ = stream.set_nodelay(true);
                let connection = Connection {
                    stream,
                    peer,
                    deadline,
                    limits: limits.clone(),
                    watcher: graceful.watcher(),
                    occupancy,
                    _slot: slot,
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

/// Turned-away connections draining their request at once; past this
/// one is closed at once (a client over its cap cannot hold many).
const MAX_LINGERING: usize = 64;
/// How long, and how many bytes, a turned-away connection's request is
/// read and dropped before the connection is closed.
const LINGER_TIME: Duration = Duration::from_secs(2);
const LINGER_BYTES: usize = 256 * 1024;
static LINGERING: AtomicUsize = AtomicUsize::new(0);

/// Answers 503 to a client over its connection cap if the answer fits the
/// socket buffer right away, and closes. Never waits: the request the
/// client sends is read and dropped by a task of its own (bounded in time
/// and bytes), because closing a socket with unread bytes makes the
/// kernel send a reset, which throws the 503 away before the client reads
/// it.
fn turn_away(stream: TcpStream, cap: usize) {
    let response = head::error_response(
        StatusCode::SERVICE_UNAVAILABLE,
        &format!(
            "too many connections from your address (server.max_connections_per_client is {cap})"
        ),
    );
    // A plain non-blocking write: the socket was just accepted, so its send
    // buffer is empty. (tokio's `try_write` answers WouldBlock until the
    // reactor has seen the new socket writable, which under load it often
    // has not yet, and the client got a bare close.)
    let Ok(mut stream) = stream.into_std() else {
        return;
    };
    let _ = std::io::Write::write(&mut stream, &response);
    let _ = stream.shutdown(std::net::Shutdown::Write);
    if LINGERING.fetch_add(1, Ordering::Relaxed) >= MAX_LINGERING {
        LINGERING.fetch_sub(1, Ordering::Relaxed);
        return;
    }
    match TcpStream::from_std(stream) {
        Ok(stream) => {
            tokio::spawn(linger(stream));
        }
        Err(_) => {
            LINGERING.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

/// Reads and drops what a turned-away client sends, then closes.
async fn linger(mut stream: TcpStream) {
    use tokio::io::AsyncReadExt;
    let mut buf = [0u8; 4096];
    let mut left = LINGER_BYTES;
    let _ = tokio::time::timeout(LINGER_TIME, async {
        while left > 0 {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => left = left.saturating_sub(n),
            }
        }
    })
    .await;
    drop(stream);
    LINGERING.fetch_sub(1, Ordering::Relaxed);
}

/// One accepted connection, holding its client slot until it ends and its
/// place in the pending or served budget as it goes.
struct Connection {
    stream: TcpStream,
    peer: SocketAddr,
    deadline: tokio::time::Instant,
    limits: Limits,
    watcher: Watcher,
    occupancy: Arc<Occupancy>,
    _slot: ClientSlot,
}

impl Connection {
    /// Serves the connection until it ends or, while it has no request in
    /// progress, is shed to admit a newer one (dropping it closes the
    /// socket).
    async fn run<H: Handler>(self, handler: Arc<H>) {
        let peer = self.peer;
        let occupancy = self.occupancy.clone();
        tokio::select! {
            () = occupancy.shed() => {
                tracing::debug!(
                    %peer,
                    "connection closed: the oldest without a request in progress, \
                     server.max_pending_connections reached"
                );
            }
            () = self.serve(handler) => {}
        }
    }

    async fn serve<H: Handler>(mut self, handler: Arc<H>) {
        let peer = self.peer;
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
        let occupancy = self.occupancy.clone();
        let service = service_fn(move |mut request: Request<Incoming>| {
            request.extensions_mut().insert(PeerAddr(peer));
            let handler = handler.clone();
            // Every request has an id: in a span around all it logs, sent
            // to Ollama with it, and in the answer, errors included.
            let info = RequestInfo::start(request.headers(), handler.route_name(&request));
            let id = info.id.clone();
            let route = info.route;
            let started = info.started;
            let span = tracing::info_span!("request", request_id = %id);
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
            let served = BODY_CLOCK.scope(clock, async move {
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
            });
            let served = oap_bridge::upstream::REQUEST_ID.scope(id.clone(), info.scope(served));
            let occupancy = occupancy.clone();
            async move {
                // The head is complete: a slot of the served budget, held by
                // the answer's body until hyper has written it.
                // `None`: shed while waiting for the slot; the connection is
                // being closed, this answer only completes the service.
                let Some(slot) = occupancy.serve().await else {
                    return Ok(error(
                        StatusCode::SERVICE_UNAVAILABLE,
                        "the server is busy: the connection was closed to admit newer ones \
                         (server.max_pending_connections)",
                    ));
                };
                let mut response = served
                    .instrument(span)
                    .await?
                    .map(|body| Holding::new(body, slot).boxed());
                if let Ok(value) = HeaderValue::from_str(&id) {
                    response.headers_mut().insert(X_REQUEST_ID, value);
                }
                crate::metrics::get().http_request(
                    route,
                    response.status().as_u16(),
                    started.elapsed(),
                );
                Ok::<_, Infallible>(response)
            }
        });
        let io = TokioIo::new(Watched::new(
            head::Prefixed::new(prefix, self.stream),
            self.occupancy.clone(),
        ));
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

/// Decodes `%XX` escapes (ids may be sent as `local%2Fgrep`); invalid
/// escapes are kept literally, and invalid UTF-8 is replaced, so a hostile
/// path can only ever produce an id that is not found.
pub(crate) fn percent_decode(raw: &str) -> String {
    let bytes = raw.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            let hex = std::str::from_utf8(&bytes[i + 1..i + 3])
                .ok()
                .and_then(|h| u8::from_str_radix(h, 16).ok());
            if let Some(byte) = hex {
                out.push(byte);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod budget_tests {
    use super::*;

    #[test]
    fn shares_are_capped_grown_and_returned_and_a_burst_ends_in_one_trim() {
        let budget = Arc::new(BodyBudget::new(TRIM_AFTER_PEAK * 2));
        let mut first = budget.reserve(TRIM_AFTER_PEAK).expect("room");
        let second = budget.reserve(TRIM_AFTER_PEAK / 2).expect("room");
        assert!(budget.reserve(TRIM_AFTER_PEAK).is_none(), "over capacity");
        assert!(first.grow(TRIM_AFTER_PEAK / 2));
        assert!(!first.grow(1), "full");
        assert_eq!(budget.in_flight(), TRIM_AFTER_PEAK * 2);
        drop(second);
        assert_eq!(budget.trims(), 0, "not settled while a share is held");
        drop(first);
        assert_eq!(budget.in_flight(), 0);
        assert_eq!(budget.trims(), 1);
        // Small bodies afterwards do not trim again.
        drop(budget.reserve(1024));
        assert_eq!(budget.trims(), 1);
        // An error names the key and a busy answer says when to retry.
        let response = BodyError::Busy { budget: 1 }.into_response();
        assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(response.headers()[RETRY_AFTER], "5");
        assert!(BodyError::Busy { budget: 1 }
            .parts()
            .1
            .contains(BODY_BUDGET_KEY));
    }

    #[test]
    fn percent_decoding_handles_slashes_and_garbage() {
        assert_eq!(percent_decode("local%2Fgrep"), "local/grep");
        assert_eq!(percent_decode("local/grep"), "local/grep");
        assert_eq!(percent_decode("bad%zz"), "bad%zz");
        assert_eq!(percent_decode("trail%2"), "trail%2");
        assert_eq!(percent_decode("%"), "%");
        assert_eq!(percent_decode("%ff"), "\u{fffd}");
    }
}

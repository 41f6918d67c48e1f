//! The HTTP/1 server shell: listeners, connection limits, timeouts, graceful
//! shutdown, and the small helpers every handler uses (JSON bodies, capped
//! request bodies, JSON errors).
//!
//! Limits live here so that no handler can forget them: a connection count
//! cap, a header read timeout (slowloris), a request body cap enforced while
//! reading, and a per-request deadline.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::header::{HeaderValue, CONTENT_TYPE};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use serde::Serialize;
use tokio::net::TcpListener;
use tokio::sync::{watch, Semaphore};

pub type BoxError = Box<dyn std::error::Error + Send + Sync>;
/// Response bodies are boxed so handlers can return buffered or streamed bodies.
pub type Body = BoxBody<Bytes, BoxError>;

/// The client's socket address, in every request's extensions.
#[derive(Debug, Clone, Copy)]
pub struct PeerAddr(pub SocketAddr);

/// Limits that apply to every connection and request.
#[derive(Debug, Clone)]
pub struct Limits {
    pub max_connections: usize,
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
    TooLarge { limit: usize },
    Read(String),
}

impl BodyError {
    pub fn into_response(self) -> Response<Body> {
        match self {
            BodyError::TooLarge { limit } => error(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!("request body is larger than the {limit} byte limit"),
            ),
            BodyError::Read(message) => error(
                StatusCode::BAD_REQUEST,
                format!("cannot read request body: {message}"),
            ),
        }
    }
}

/// Reads a request body, refusing it as soon as it passes `limit` bytes
/// (a declared Content-Length over the limit is refused before reading).
pub async fn read_body(body: Incoming, limit: usize) -> Result<Bytes, BodyError> {
    use hyper::body::Body as _;
    if body.size_hint().lower() > limit as u64 {
        return Err(BodyError::TooLarge { limit });
    }
    match Limited::new(body, limit).collect().await {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(err) if err.is::<http_body_util::LengthLimitError>() => {
            Err(BodyError::TooLarge { limit })
        }
        Err(err) => Err(BodyError::Read(err.to_string())),
    }
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
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut accept_tasks = Vec::new();
    for listener in listeners {
        let handler = handler.clone();
        let limits = limits.clone();
        let permits = permits.clone();
        let graceful = graceful.clone();
        let mut stop = stop_rx.clone();
        accept_tasks.push(tokio::spawn(async move {
            loop {
                let permit = tokio::select! {
                    _ = stop.changed() => break,
                    permit = permits.clone().acquire_owned() => match permit {
                        Ok(permit) => permit,
                        Err(_) => break,
                    },
                };
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
                let _ = stream.set_nodelay(true);
                let handler = handler.clone();
                let request_timeout = limits.request_timeout;
                let service = service_fn(move |mut request: Request<Incoming>| {
                    request.extensions_mut().insert(PeerAddr(peer));
                    let handler = handler.clone();
                    // Chats and Ollama pass-through have their own deadlines
                    // (ollama.chat_deadline, ollama.timeout): a model loading
                    // from an SD card takes longer than any local route.
                    let bounded = handler.bounded_by_request_timeout(&request);
                    async move {
                        if !bounded {
                            return Ok::<_, Infallible>(handler.handle(request).await);
                        }
                        let response =
                            match tokio::time::timeout(request_timeout, handler.handle(request))
                                .await
                            {
                                Ok(response) => response,
                                Err(_) => error(
                                    StatusCode::SERVICE_UNAVAILABLE,
                                    "request took longer than the server's request timeout \
                                     (server.request_timeout)",
                                ),
                            };
                        Ok::<_, Infallible>(response)
                    }
                });
                let connection = http1::Builder::new()
                    .timer(TokioTimer::new())
                    .header_read_timeout(limits.header_read_timeout)
                    .max_buf_size(64 * 1024)
                    .serve_connection(TokioIo::new(stream), service);
                let connection = graceful.watcher().watch(connection);
                tokio::spawn(async move {
                    if let Err(err) = connection.await {
                        tracing::debug!(%peer, error = %err, "connection ended with an error");
                    }
                    drop(permit);
                });
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

//! The connection to Ollama: a pooled HTTP/1 client (over TLS for an
//! `https://` base URL), request forwarding with the Host header rewritten
//! and the operator's upstream credential added, and Ollama-shaped errors
//! when Ollama cannot be reached.
//!
//! Ollama listening on loopback refuses requests whose Host is not a
//! loopback or local name (403), so every forwarded request carries the
//! upstream's own authority as Host, whatever the LAN client sent.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::header::{HeaderName, HeaderValue, AUTHORIZATION, CONNECTION, HOST};
use hyper::{HeaderMap, Method, Request, Response, StatusCode, Uri};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

pub use crate::connect::BoxError;

/// A boxed body, buffered or streamed (the daemon's response body type).
pub type Body = BoxBody<Bytes, BoxError>;

/// A full body from bytes.
pub fn full(bytes: impl Into<Bytes>) -> Body {
    Full::new(bytes.into())
        .map_err(|never: Infallible| match never {})
        .boxed()
}

/// The header that carries the request id to Ollama.
pub const X_REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

/// Headers that describe one hop, never forwarded (RFC 9110 §7.6.1).
const HOP_BY_HOP: &[&str] = &[
    "connection",
    "keep-alive",
    "proxy-connection",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
];

/// Why a request to Ollama failed; [`UpstreamError::status`] is the
/// HTTP status the client gets, with the message as `{"error": ...}`.
#[derive(Debug, thiserror::Error)]
pub enum UpstreamError {
    /// `ollama.base_url` is not `http(s)://host[:port][/prefix]`; config
    /// validation rejects it at start.
    #[error("ollama.base_url {0:?} is not an http or https URL with a host")]
    BadBaseUrl(String),
    /// The TLS settings for an `https://` upstream are unusable (a CA file
    /// without certificates, a host that is no TLS name).
    #[error("ollama.ca_file: {0}")]
    Tls(String),
    /// The upstream credential is not a valid header value.
    #[error("ollama.api_key: not usable in an Authorization header (control characters?)")]
    BadApiKey,
    /// Connecting or sending failed (Ollama down, a TLS certificate it
    /// cannot prove); 502. The message carries every cause.
    #[error("cannot reach Ollama at {base}: {}", causes(source.as_ref()))]
    Unreachable {
        /// The base URL that was tried.
        base: String,
        /// The transport error.
        #[source]
        source: BoxError,
    },
    /// No response head within the head timeout; 504.
    #[error("Ollama did not answer within {0:?}")]
    Timeout(Duration),
    /// The request could not be built (bad path, unserialisable body); 400.
    #[error("cannot build the upstream request: {0}")]
    Request(String),
}

impl UpstreamError {
    /// 502 for an unreachable upstream, so clients can tell it from their
    /// own mistakes; 504 when it did not answer in time.
    pub fn status(&self) -> StatusCode {
        match self {
            UpstreamError::Timeout(_) => StatusCode::GATEWAY_TIMEOUT,
            UpstreamError::Request(_) => StatusCode::BAD_REQUEST,
            _ => StatusCode::BAD_GATEWAY,
        }
    }

    /// A short name of the kind of failure, for metrics labels.
    pub fn kind(&self) -> &'static str {
        match self {
            UpstreamError::BadBaseUrl(_) | UpstreamError::Tls(_) | UpstreamError::BadApiKey => {
                "config"
            }
            UpstreamError::Unreachable { .. } => "unreachable",
            UpstreamError::Timeout(_) => "timeout",
            UpstreamError::Request(_) => "request",
        }
    }
}

/// An error and its causes, `: `-joined (hyper names only the outermost,
/// "client error (Connect)"; the reason is further down).
fn causes(err: &(dyn std::error::Error + 'static)) -> String {
    let mut text = err.to_string();
    let mut next = err.source();
    while let Some(cause) = next {
        let message = cause.to_string();
        if !text.contains(&message) {
            text.push_str(": ");
            text.push_str(&message);
        }
        next = cause.source();
    }
    text
}

/// How oapd reaches an Ollama behind a reverse proxy.
#[derive(Clone, Default)]
pub struct UpstreamOptions {
    /// PEM certificates trusted besides the Mozilla roots (`ollama.ca_file`).
    pub ca_pem: Option<Vec<u8>>,
    /// Sent as `Authorization: Bearer <key>` on every request to Ollama
    /// (`ollama.api_key`); never logged.
    pub api_key: Option<String>,
}

impl std::fmt::Debug for UpstreamOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UpstreamOptions")
            .field("ca_pem", &self.ca_pem.as_ref().map(Vec::len))
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .finish()
    }
}

tokio::task_local! {
    /// The id of the request being served (the daemon sets it around each
    /// request and the tool loop's task): every request to Ollama carries
    /// it as `X-Request-Id`, so an operator can match Ollama's log lines
    /// with oapd's.
    pub static REQUEST_ID: Arc<str>;
}

/// The id of the request being served, if the daemon set one.
pub fn current_request_id() -> Option<Arc<str>> {
    REQUEST_ID.try_with(Arc::clone).ok()
}

/// What one request to Ollama came to, for metrics: which kind of request
/// (`chat`, `show`, `generate`, `other`: a bounded set, never the raw
/// path), how long until its response head, and its status or why it failed.
#[derive(Debug, Clone, Copy)]
pub struct UpstreamExchange<'a> {
    /// `chat`, `show`, `generate` or `other`.
    pub endpoint: &'static str,
    /// Time to the response head (or to the failure).
    pub elapsed: Duration,
    /// The response status, or the error.
    pub result: Result<StatusCode, &'a UpstreamError>,
}

/// Told about every request to Ollama ([`Upstream::with_observer`]).
pub type UpstreamObserver = Arc<dyn Fn(&UpstreamExchange<'_>) + Send + Sync>;

/// A bounded label for an upstream path.
fn endpoint_of(path_and_query: &str) -> &'static str {
    let path = path_and_query
        .split_once('?')
        .map_or(path_and_query, |(path, _)| path);
    match path {
        "/api/chat" => "chat",
        "/api/show" => "show",
        "/api/generate" => "generate",
        _ => "other",
    }
}

/// A client for one Ollama server.
#[derive(Clone)]
pub struct Upstream {
    /// Told about every exchange (metrics); `None`: nobody listens.
    observer: Option<UpstreamObserver>,
    client: Client<crate::connect::UpstreamConnector, Body>,
    /// `Authorization` for every request, from [`UpstreamOptions::api_key`].
    authorization: Option<HeaderValue>,
    base: String,
    authority: HeaderValue,
    scheme_and_authority: String,
    /// Time to the response head; bodies stream for as long as they take.
    head_timeout: Duration,
}

impl Upstream {
    /// A client for the Ollama at `base_url`, waiting `head_timeout` for
    /// each response head (bodies stream without a bound here).
    pub fn new(base_url: &str, head_timeout: Duration) -> Result<Upstream, UpstreamError> {
        Upstream::with_options(base_url, head_timeout, &UpstreamOptions::default())
    }

    /// [`Upstream::new`] with a private CA and an upstream credential.
    pub fn with_options(
        base_url: &str,
        head_timeout: Duration,
        options: &UpstreamOptions,
    ) -> Result<Upstream, UpstreamError> {
        let uri: Uri = base_url
            .parse()
            .map_err(|_| UpstreamError::BadBaseUrl(base_url.into()))?;
        let (Some(scheme), Some(authority)) = (uri.scheme_str(), uri.authority()) else {
            return Err(UpstreamError::BadBaseUrl(base_url.into()));
        };
        let tls = match scheme {
            "http" => None,
            // Ollama behind a TLS-terminating reverse proxy.
            "https" => Some(
                crate::connect::UpstreamTls::new(authority.host(), options.ca_pem.as_deref())
                    .map_err(UpstreamError::Tls)?,
            ),
            _ => return Err(UpstreamError::BadBaseUrl(base_url.into())),
        };
        let authorization = match &options.api_key {
            None => None,
            Some(key) => {
                let mut value = HeaderValue::from_str(&format!("Bearer {key}"))
                    .map_err(|_| UpstreamError::BadApiKey)?;
                value.set_sensitive(true);
                Some(value)
            }
        };
        let authority_value = HeaderValue::from_str(authority.as_str())
            .map_err(|_| UpstreamError::BadBaseUrl(base_url.into()))?;
        let mut connector = HttpConnector::new();
        connector.set_connect_timeout(Some(Duration::from_secs(5)));
        connector.set_nodelay(true);
        let client = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(Duration::from_secs(60))
            .pool_max_idle_per_host(32)
            .build(crate::connect::UpstreamConnector::new(connector, tls));
        let path_prefix = uri.path().trim_end_matches('/');
        Ok(Upstream {
            observer: None,
            client,
            authorization,
            base: base_url.trim_end_matches('/').to_string(),
            authority: authority_value,
            scheme_and_authority: format!("{scheme}://{}{path_prefix}", authority.as_str()),
            head_timeout,
        })
    }

    /// This client, telling `observer` about every request it sends.
    pub fn with_observer(mut self, observer: UpstreamObserver) -> Upstream {
        self.observer = Some(observer);
        self
    }

    /// The base URL, for messages and logs.
    pub fn base_url(&self) -> &str {
        &self.base
    }

    /// Sends a request to `path_and_query` on Ollama; returns the response
    /// with its body still streaming.
    pub async fn send(
        &self,
        method: Method,
        path_and_query: &str,
        headers: &HeaderMap,
        body: Body,
    ) -> Result<Response<Incoming>, UpstreamError> {
        let uri: Uri = format!("{}{}", self.scheme_and_authority, path_and_query)
            .parse()
            .map_err(|err| UpstreamError::Request(format!("bad path {path_and_query:?}: {err}")))?;
        let mut request = Request::builder()
            .method(method)
            .uri(uri)
            .body(body)
            .map_err(|err| UpstreamError::Request(err.to_string()))?;
        let forwarded = request.headers_mut();
        copy_end_to_end_headers(headers, forwarded);
        forwarded.insert(HOST, self.authority.clone());
        if let Some(authorization) = &self.authorization {
            // The operator's credential for the proxy in front of Ollama
            // wins over whatever the client sent.
            forwarded.insert(AUTHORIZATION, authorization.clone());
        }
        // The request's own id wins over one the client sent: it was
        // checked, and it is the one in oapd's log lines.
        if let Some(id) = current_request_id().and_then(|id| HeaderValue::from_str(&id).ok()) {
            forwarded.insert(X_REQUEST_ID, id);
        }
        let started = Instant::now();
        let result =
            match tokio::time::timeout(self.head_timeout, self.client.request(request)).await {
                Ok(Ok(response)) => Ok(response),
                Ok(Err(err)) => Err(UpstreamError::Unreachable {
                    base: self.base.clone(),
                    source: Box::new(err),
                }),
                Err(_) => Err(UpstreamError::Timeout(self.head_timeout)),
            };
        if let Some(observer) = &self.observer {
            observer(&UpstreamExchange {
                endpoint: endpoint_of(path_and_query),
                elapsed: started.elapsed(),
                result: result.as_ref().map(Response::status),
            });
        }
        result
    }

    /// POSTs a JSON body and returns the response, body streaming.
    pub async fn post_json(
        &self,
        path: &str,
        body: &serde_json::Value,
    ) -> Result<Response<Incoming>, UpstreamError> {
        let bytes =
            serde_json::to_vec(body).map_err(|err| UpstreamError::Request(err.to_string()))?;
        let mut headers = HeaderMap::new();
        headers.insert(
            hyper::header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        self.send(Method::POST, path, &headers, full(bytes)).await
    }

    /// POSTs a JSON body already encoded as chunks ([`crate::payload`]),
    /// sent as they are with an exact Content-Length; `held` (the request's
    /// body-budget share, opaque here) lives until Ollama has read the
    /// whole body.
    pub async fn post_parts(
        &self,
        path: &str,
        parts: Vec<Bytes>,
        held: Option<crate::payload::Hold>,
    ) -> Result<Response<Incoming>, UpstreamError> {
        let mut headers = HeaderMap::new();
        headers.insert(
            hyper::header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        let body = crate::payload::PartsBody::new(parts, held)
            .map_err(|never| match never {})
            .boxed();
        self.send(Method::POST, path, &headers, body).await
    }

    /// POSTs JSON and reads a JSON answer of at most `limit` bytes.
    pub async fn post_json_read(
        &self,
        path: &str,
        body: &serde_json::Value,
        limit: usize,
    ) -> Result<(StatusCode, serde_json::Value), UpstreamError> {
        let response = self.post_json(path, body).await?;
        let status = response.status();
        let bytes = read_limited(response.into_body(), limit)
            .await
            .map_err(|source| UpstreamError::Unreachable {
                base: self.base.clone(),
                source,
            })?;
        let value = serde_json::from_slice(&bytes).unwrap_or(serde_json::Value::Null);
        Ok((status, value))
    }
}

/// Reads a body up to `limit` bytes (an error past it).
#[allow(
    clippy::disallowed_methods,
    reason = "the body is `Limited`: this is the capped reader"
)]
pub async fn read_limited(body: Incoming, limit: usize) -> Result<Bytes, BoxError> {
    let collected = http_body_util::Limited::new(body, limit).collect().await?;
    Ok(collected.to_bytes())
}

/// The message of an Ollama error answer: its `{"error": "..."}` text, or
/// the body itself (first 64 KiB) when it is not that shape.
pub async fn error_message(body: Incoming) -> String {
    let bytes = read_limited(body, 64 * 1024).await.unwrap_or_default();
    serde_json::from_slice::<serde_json::Value>(&bytes)
        .ok()
        .and_then(|v| v.get("error").and_then(|e| e.as_str()).map(str::to_string))
        .unwrap_or_else(|| String::from_utf8_lossy(&bytes).into_owned())
}

/// Copies headers that describe the message, not the hop. `Authorization`
/// is kept: a client may be talking to an Ollama behind its own auth; the
/// caller strips it when it was oapd's own token.
fn copy_end_to_end_headers(from: &HeaderMap, to: &mut HeaderMap) {
    let listed_in_connection: Vec<String> = from
        .get_all(CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(',').map(|s| s.trim().to_ascii_lowercase()))
        .collect();
    for (name, value) in from {
        let lower = name.as_str();
        if lower == "host"
            || lower == "content-length"
            || HOP_BY_HOP.contains(&lower)
            || listed_in_connection.iter().any(|c| c == lower)
        {
            continue;
        }
        to.append(name.clone(), value.clone());
    }
}

/// A streaming response from Ollama, forwarded as it arrives.
pub fn stream_back(response: Response<Incoming>) -> Response<Body> {
    let (mut parts, body) = response.into_parts();
    let hop: Vec<HeaderName> = parts
        .headers
        .keys()
        .filter(|name| HOP_BY_HOP.contains(&name.as_str()))
        .cloned()
        .collect();
    for name in hop {
        parts.headers.remove(name);
    }
    Response::from_parts(parts, body.map_err(|err| Box::new(err) as BoxError).boxed())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base_urls_are_checked() {
        for bad in ["", "ollama:11434", "/api", "ftp://x"] {
            assert!(Upstream::new(bad, Duration::from_secs(1)).is_err(), "{bad}");
        }
        let upstream = Upstream::new("http://127.0.0.1:11434/", Duration::from_secs(1)).unwrap();
        assert_eq!(upstream.base_url(), "http://127.0.0.1:11434");
        assert_eq!(upstream.authority, "127.0.0.1:11434");
        assert!(Upstream::new("https://ollama.example.org/", Duration::from_secs(1)).is_ok());
        let no_ca = UpstreamOptions {
            ca_pem: Some(b"not pem".to_vec()),
            api_key: None,
        };
        let err =
            Upstream::with_options("https://ollama.example.org", Duration::from_secs(1), &no_ca)
                .err()
                .unwrap();
        assert!(err.to_string().contains("ollama.ca_file"), "{err}");
        let control = UpstreamOptions {
            ca_pem: None,
            api_key: Some("a\nb".into()),
        };
        assert!(
            Upstream::with_options("http://127.0.0.1:1", Duration::from_secs(1), &control).is_err()
        );
    }

    #[test]
    fn hop_by_hop_headers_are_not_forwarded() {
        let mut from = HeaderMap::new();
        from.insert("host", HeaderValue::from_static("oapd.local:8300"));
        from.insert(
            "connection",
            HeaderValue::from_static("keep-alive, x-secret"),
        );
        from.insert("x-secret", HeaderValue::from_static("1"));
        from.insert("keep-alive", HeaderValue::from_static("timeout=5"));
        from.insert("content-length", HeaderValue::from_static("10"));
        from.insert(
            "user-agent",
            HeaderValue::from_static("ollama-python/0.6.3"),
        );
        from.insert("authorization", HeaderValue::from_static("Bearer x"));
        let mut to = HeaderMap::new();
        copy_end_to_end_headers(&from, &mut to);
        let names: Vec<&str> = to.keys().map(|k| k.as_str()).collect();
        assert_eq!(names, ["user-agent", "authorization"]);
    }
}

//! The streamable HTTP client rmcp drives: hyper over a connection the
//! address rule allowed. The host is resolved once, every address checked
//! against the server's trust (oap-exec's `check_address`), and only an
//! allowed address is connected to; https uses rustls (ring) with the
//! compiled-in Mozilla roots. Bodies and event streams are size-capped.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use futures_util::stream::BoxStream;
use futures_util::StreamExt;
use http_body_util::{BodyExt, Full};
use hyper::header::{HeaderName, HeaderValue};
use hyper::{Method, Request, StatusCode};
use hyper_util::rt::TokioIo;
use oap_exec::{ExecPolicy, Resolver, Trust};
use rmcp::model::{ClientJsonRpcMessage, ServerJsonRpcMessage};
use rmcp::transport::streamable_http_client::{
    StreamableHttpClient, StreamableHttpError, StreamableHttpPostResponse,
};
use sse_stream::{Sse, SseStream};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tracing::warn;

use crate::context::HubContext;

const SESSION_HEADER: &str = "Mcp-Session-Id";
const LAST_EVENT_ID: &str = "Last-Event-Id";

/// Why a request could not be made.
#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    /// The address rule refused every address of the host.
    #[error("{0}")]
    Refused(String),
    /// Resolution, connection, TLS or HTTP failed.
    #[error("{0}")]
    Io(String),
}

/// One server's HTTP client.
#[derive(Clone)]
pub struct Client {
    resolver: Arc<dyn Resolver>,
    policy: Arc<ExecPolicy>,
    trust: Trust,
    host: String,
    port: u16,
    https: bool,
    headers: Vec<(HeaderName, HeaderValue)>,
    tls: Arc<rustls::ClientConfig>,
    max_body: usize,
    /// The last address refusal, so the hub reports it instead of a
    /// generic initialize failure.
    refusal: Arc<Mutex<Option<String>>>,
    /// The entry's secrets: the host may have come from `${env:}`.
    redaction: Arc<crate::redact::Redaction>,
}

trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}

impl Client {
    /// A client for `url` with the spec's `headers` and `trust`; adds the
    /// credential store's bearer for the host unless `Authorization` is set.
    pub(crate) fn new(
        ctx: &HubContext,
        url: &url::Url,
        headers: &BTreeMap<String, String>,
        trust: Trust,
        max_body: usize,
    ) -> Result<Self, String> {
        let host = url.host_str().ok_or("the URL has no host")?.to_string();
        let port = url.port_or_known_default().ok_or("the URL has no port")?;
        let mut out = Vec::new();
        for (k, v) in headers {
            let name = HeaderName::from_bytes(k.as_bytes()).map_err(|e| e.to_string())?;
            let value = HeaderValue::from_str(v).map_err(|e| e.to_string())?;
            out.push((name, value));
        }
        let has_auth = out.iter().any(|(k, _)| k == hyper::header::AUTHORIZATION);
        if !has_auth {
            let bare = host.trim_start_matches('[').trim_end_matches(']');
            if let Some(cred) = ctx.credentials.as_ref().and_then(|c| c.get(bare)) {
                let value = HeaderValue::from_str(&format!("Bearer {}", cred.secret()))
                    .map_err(|_| "the stored credential is not a valid header value")?;
                out.push((hyper::header::AUTHORIZATION, value));
            }
        }
        let tls = match &ctx.tls {
            Some(tls) => tls.clone(),
            None => oap_exec::tls_config(&[]).map_err(|e| e.to_string())?,
        };
        Ok(Self {
            resolver: ctx.resolver.clone(),
            policy: Arc::new(ctx.policy.clone()),
            trust,
            host,
            port,
            https: url.scheme() == "https",
            headers: out,
            tls,
            max_body,
            refusal: Arc::new(Mutex::new(None)),
            redaction: Arc::default(),
        })
    }

    /// Scrub the entry's secrets from what this client logs.
    pub(crate) fn with_redaction(mut self, redaction: crate::redact::Redaction) -> Self {
        self.redaction = Arc::new(redaction);
        self
    }

    /// The address refusal that stopped the last connection, if any.
    pub(crate) fn refusal(&self) -> Option<String> {
        self.refusal
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Resolve once, check every address, connect to the first allowed.
    async fn connect(&self) -> Result<Box<dyn Io>, HttpError> {
        let bare = self.host.trim_start_matches('[').trim_end_matches(']');
        let addrs: Vec<SocketAddr> = match bare.parse::<IpAddr>() {
            Ok(ip) => vec![SocketAddr::new(ip, self.port)],
            Err(_) => self
                .resolver
                .resolve(bare, self.port)
                .await
                .map_err(|e| HttpError::Io(format!("cannot resolve {bare}: {e}")))?,
        };
        let mut refused = Vec::new();
        let allowed: Vec<SocketAddr> = addrs
            .into_iter()
            .filter(|a| match self.policy.check_address(self.trust, a.ip()) {
                Ok(()) => true,
                Err(r) => {
                    refused.push(format!("{} ({})", r.ip, r.class.describe()));
                    false
                }
            })
            .collect();
        if allowed.is_empty() {
            let message = if refused.is_empty() {
                format!("{bare} has no addresses")
            } else {
                format!(
                    "{bare} resolves to {}, which {} server may not reach; set \"trust\" for this server or add the address to allow_private",
                    refused.join(", "),
                    self.trust.with_article()
                )
            };
            warn!(host = %self.redaction.scrub(bare), "MCP server address refused: {}", self.redaction.scrub(&message));
            *self.refusal.lock().unwrap_or_else(|p| p.into_inner()) = Some(message.clone());
            return Err(HttpError::Refused(message));
        }
        let mut last = String::new();
        for addr in allowed {
            match TcpStream::connect(addr).await {
                Ok(tcp) => {
                    if !self.https {
                        return Ok(Box::new(tcp));
                    }
                    let name = rustls::pki_types::ServerName::try_from(bare.to_string())
                        .map_err(|e| HttpError::Io(e.to_string()))?;
                    let tls = tokio_rustls::TlsConnector::from(self.tls.clone())
                        .connect(name, tcp)
                        .await
                        .map_err(|e| HttpError::Io(format!("TLS with {bare}: {e}")))?;
                    return Ok(Box::new(tls));
                }
                Err(e) => last = format!("cannot connect to {addr}: {e}"),
            }
        }
        Err(HttpError::Io(last))
    }

    async fn send(
        &self,
        mut request: Request<Full<Bytes>>,
    ) -> Result<hyper::Response<hyper::body::Incoming>, HttpError> {
        let host_header = if (self.https && self.port == 443) || (!self.https && self.port == 80) {
            self.host.clone()
        } else {
            format!("{}:{}", self.host, self.port)
        };
        let headers = request.headers_mut();
        if let Ok(v) = HeaderValue::from_str(&host_header) {
            headers.insert(hyper::header::HOST, v);
        }
        if let Ok(v) = HeaderValue::from_str(&self.policy.user_agent) {
            headers.insert(hyper::header::USER_AGENT, v);
        }
        for (k, v) in &self.headers {
            headers.insert(k.clone(), v.clone());
        }
        let io = self.connect().await?;
        let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(io))
            .await
            .map_err(|e| HttpError::Io(e.to_string()))?;
        tokio::spawn(async move {
            let _ = conn.await;
        });
        sender
            .send_request(request)
            .await
            .map_err(|e| HttpError::Io(e.to_string()))
    }

    fn path(uri: &str) -> String {
        match url::Url::parse(uri) {
            Ok(u) => match u.query() {
                Some(q) => format!("{}?{q}", u.path()),
                None => u.path().to_string(),
            },
            Err(_) => "/".into(),
        }
    }

    async fn read_body(
        &self,
        body: hyper::body::Incoming,
    ) -> Result<Vec<u8>, StreamableHttpError<HttpError>> {
        let mut out = Vec::new();
        let mut stream = body.into_data_stream();
        while let Some(chunk) = stream.next().await {
            let chunk =
                chunk.map_err(|e| StreamableHttpError::Client(HttpError::Io(e.to_string())))?;
            if out.len() + chunk.len() > self.max_body {
                return Err(StreamableHttpError::ResponseBodyTooLarge {
                    max_size: self.max_body,
                });
            }
            out.extend_from_slice(&chunk);
        }
        Ok(out)
    }

    /// An SSE stream over `body`, failing once it carried more than the
    /// body cap in a single event's worth of bytes without a blank line.
    fn sse(
        &self,
        body: hyper::body::Incoming,
    ) -> BoxStream<'static, Result<Sse, sse_stream::Error>> {
        let cap = self.max_body;
        let mut since_event = 0usize;
        let bytes = body.into_data_stream().map(move |chunk| {
            let chunk = chunk.map_err(|e| std::io::Error::other(e.to_string()))?;
            if chunk.windows(2).any(|w| w == b"\n\n") {
                since_event = 0;
            }
            since_event += chunk.len();
            if since_event > cap {
                return Err(std::io::Error::other(format!(
                    "an event stream event exceeded {cap} bytes"
                )));
            }
            Ok::<Bytes, std::io::Error>(chunk)
        });
        SseStream::from_bytes_stream(bytes).boxed()
    }
}

fn header_err(e: impl std::fmt::Display) -> StreamableHttpError<HttpError> {
    StreamableHttpError::Client(HttpError::Io(e.to_string()))
}

impl StreamableHttpClient for Client {
    type Error = HttpError;

    async fn post_message(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<StreamableHttpPostResponse, StreamableHttpError<Self::Error>> {
        let body = serde_json::to_vec(&message)?;
        let mut builder = Request::builder()
            .method(Method::POST)
            .uri(Self::path(&uri))
            .header(hyper::header::CONTENT_TYPE, "application/json")
            .header(hyper::header::ACCEPT, "application/json, text/event-stream");
        builder = with_auth_and_headers(builder, auth_header, custom_headers);
        let had_session = session_id.is_some();
        if let Some(sid) = session_id {
            builder = builder.header(SESSION_HEADER, sid.as_ref());
        }
        let request = builder
            .body(Full::new(Bytes::from(body)))
            .map_err(header_err)?;
        let response = self
            .send(request)
            .await
            .map_err(StreamableHttpError::Client)?;
        let status = response.status();
        if matches!(status, StatusCode::ACCEPTED | StatusCode::NO_CONTENT) {
            return Ok(StreamableHttpPostResponse::Accepted);
        }
        if status == StatusCode::NOT_FOUND && had_session {
            return Err(StreamableHttpError::SessionExpired);
        }
        let session = response
            .headers()
            .get(SESSION_HEADER)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let content_type = response
            .headers()
            .get(hyper::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_ascii_lowercase();
        if !status.is_success() {
            let body = self
                .read_body(response.into_body())
                .await
                .unwrap_or_default();
            let text = String::from_utf8_lossy(&body);
            if let Ok(msg @ ServerJsonRpcMessage::Error(_)) =
                serde_json::from_slice::<ServerJsonRpcMessage>(&body)
            {
                return Ok(StreamableHttpPostResponse::Json(msg, session));
            }
            return Err(StreamableHttpError::UnexpectedServerResponse(Cow::Owned(
                format!(
                    "HTTP {status}: {}",
                    crate::content::cap_chars(text.into_owned(), 500)
                ),
            )));
        }
        let no_reply = !matches!(message, ClientJsonRpcMessage::Request(_));
        if content_type.starts_with("text/event-stream") {
            return Ok(StreamableHttpPostResponse::Sse(
                self.sse(response.into_body()),
                session,
            ));
        }
        let body = self.read_body(response.into_body()).await?;
        if no_reply && body.iter().all(u8::is_ascii_whitespace) {
            return Ok(StreamableHttpPostResponse::Accepted);
        }
        match serde_json::from_slice::<ServerJsonRpcMessage>(&body) {
            Ok(msg) => Ok(StreamableHttpPostResponse::Json(msg, session)),
            Err(_) if no_reply => Ok(StreamableHttpPostResponse::Accepted),
            Err(e) => Err(StreamableHttpError::Deserialize(e)),
        }
    }

    async fn delete_session(
        &self,
        uri: Arc<str>,
        session_id: Arc<str>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<(), StreamableHttpError<Self::Error>> {
        let mut builder = Request::builder()
            .method(Method::DELETE)
            .uri(Self::path(&uri))
            .header(SESSION_HEADER, session_id.as_ref());
        builder = with_auth_and_headers(builder, auth_header, custom_headers);
        let request = builder.body(Full::new(Bytes::new())).map_err(header_err)?;
        let response = self
            .send(request)
            .await
            .map_err(StreamableHttpError::Client)?;
        if response.status() == StatusCode::METHOD_NOT_ALLOWED {
            return Err(StreamableHttpError::ServerDoesNotSupportDeleteSession);
        }
        Ok(())
    }

    async fn get_stream(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<BoxStream<'static, Result<Sse, sse_stream::Error>>, StreamableHttpError<Self::Error>>
    {
        let mut builder = Request::builder()
            .method(Method::GET)
            .uri(Self::path(&uri))
            .header(hyper::header::ACCEPT, "text/event-stream");
        if let Some(sid) = session_id {
            builder = builder.header(SESSION_HEADER, sid.as_ref());
        }
        if let Some(id) = last_event_id {
            builder = builder.header(LAST_EVENT_ID, id);
        }
        builder = with_auth_and_headers(builder, auth_header, custom_headers);
        let request = builder.body(Full::new(Bytes::new())).map_err(header_err)?;
        let response = self
            .send(request)
            .await
            .map_err(StreamableHttpError::Client)?;
        let status = response.status();
        if status == StatusCode::METHOD_NOT_ALLOWED {
            return Err(StreamableHttpError::ServerDoesNotSupportSse);
        }
        if !status.is_success() {
            return Err(StreamableHttpError::UnexpectedServerResponse(Cow::Owned(
                format!("HTTP {status} for the event stream"),
            )));
        }
        let is_sse = response
            .headers()
            .get(hyper::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|ct| ct.to_ascii_lowercase().starts_with("text/event-stream"));
        if !is_sse {
            return Err(StreamableHttpError::ServerDoesNotSupportSse);
        }
        Ok(self.sse(response.into_body()))
    }
}

/// The legacy HTTP+SSE transport (MCP 2024-11-05): a GET opens an event
/// stream whose first `endpoint` event names the URL to POST JSON-RPC
/// messages to; answers arrive as `message` events on the stream. The
/// endpoint must be on the same origin as the stream (a server cannot send
/// the client's messages elsewhere), and every connection goes through the
/// same address check as streamable HTTP.
pub(crate) struct LegacySse {
    client: Client,
    endpoint: Arc<str>,
    events: BoxStream<'static, Result<Sse, sse_stream::Error>>,
}

impl LegacySse {
    /// Open the stream at `url` and wait for its `endpoint` event.
    pub(crate) async fn connect(client: Client, url: &url::Url) -> Result<Self, HttpError> {
        let request = Request::builder()
            .method(Method::GET)
            .uri(Client::path(url.as_str()))
            .header(hyper::header::ACCEPT, "text/event-stream")
            .body(Full::new(Bytes::new()))
            .map_err(|e| HttpError::Io(e.to_string()))?;
        let response = client.send(request).await?;
        if !response.status().is_success() {
            return Err(HttpError::Io(format!(
                "HTTP {} for the event stream",
                response.status()
            )));
        }
        let mut events = client.sse(response.into_body());
        let endpoint = loop {
            match events.next().await {
                None => {
                    return Err(HttpError::Io(
                        "the event stream ended before its endpoint event".into(),
                    ))
                }
                Some(Err(e)) => return Err(HttpError::Io(format!("event stream: {e}"))),
                Some(Ok(event)) if event.event.as_deref() == Some("endpoint") => {
                    break event.data.unwrap_or_default();
                }
                Some(Ok(_)) => {}
            }
        };
        let target = url
            .join(endpoint.trim())
            .map_err(|e| HttpError::Io(format!("bad endpoint {endpoint:?}: {e}")))?;
        if target.origin() != url.origin() {
            return Err(HttpError::Refused(format!(
                "the server named a message endpoint on another origin ({}); refused",
                target.origin().ascii_serialization()
            )));
        }
        Ok(Self {
            client,
            endpoint: Arc::from(target.as_str()),
            events,
        })
    }
}

impl rmcp::transport::Transport<rmcp::RoleClient> for LegacySse {
    type Error = HttpError;

    fn send(
        &mut self,
        item: ClientJsonRpcMessage,
    ) -> impl std::future::Future<Output = Result<(), Self::Error>> + Send + 'static {
        let client = self.client.clone();
        let endpoint = self.endpoint.clone();
        async move {
            let body = serde_json::to_vec(&item).map_err(|e| HttpError::Io(e.to_string()))?;
            let request = Request::builder()
                .method(Method::POST)
                .uri(Client::path(&endpoint))
                .header(hyper::header::CONTENT_TYPE, "application/json")
                .body(Full::new(Bytes::from(body)))
                .map_err(|e| HttpError::Io(e.to_string()))?;
            let response = client.send(request).await?;
            let status = response.status();
            // The answer comes on the stream; the body is only an ack.
            let _ = client.read_body(response.into_body()).await;
            if status.is_success() {
                Ok(())
            } else {
                Err(HttpError::Io(format!("HTTP {status} for a message")))
            }
        }
    }

    async fn receive(&mut self) -> Option<ServerJsonRpcMessage> {
        loop {
            match self.events.next().await? {
                Err(e) => {
                    warn!(error = %e, "legacy SSE stream failed");
                    return None;
                }
                Ok(event) => {
                    if !matches!(event.event.as_deref(), None | Some("message")) {
                        continue;
                    }
                    let Some(data) = event.data else { continue };
                    match serde_json::from_str::<ServerJsonRpcMessage>(&data) {
                        Ok(msg) => return Some(msg),
                        // serde's error may quote the server's text, and a
                        // server can repeat it endlessly: content, debug only.
                        Err(e) => tracing::debug!(target: oap_exec::CONTENT_LOG_TARGET,
                            error = %oap_exec::content_excerpt(&e.to_string()),
                            "legacy SSE: not a JSON-RPC message"),
                    }
                }
            }
        }
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        Ok(())
    }
}

/// The bearer (rmcp's `auth_header`) and the spec's headers on a request.
fn with_auth_and_headers(
    mut builder: hyper::http::request::Builder,
    auth_header: Option<String>,
    custom_headers: HashMap<HeaderName, HeaderValue>,
) -> hyper::http::request::Builder {
    if let Some(auth) = auth_header {
        builder = builder.header(hyper::header::AUTHORIZATION, format!("Bearer {auth}"));
    }
    for (k, v) in custom_headers {
        builder = builder.header(k, v);
    }
    builder
}

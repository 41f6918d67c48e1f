//! HTTP tools: building the request from a manifest, and sending it over a
//! connection to an address that was resolved once and checked.

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::header::{self, HeaderMap, HeaderName, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use oap_manifest::{AuthIn, AuthKind, InvokeKind, Manifest};
use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};
use serde_json::{Map, Value};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio::task::JoinHandle;
use tracing::{debug, warn};
use url::{Host, Url};

use crate::credentials::normalize_host;
use crate::error::ToolError;
use crate::policy::Trust;
use crate::{Executor, Reply};

/// How much of an error response body is shown.
const ERROR_EXCERPT_CHARS: usize = 500;
/// How much of an error response body is read at most.
const ERROR_READ_BYTES: usize = 16 * 1024;
/// Resolved addresses considered per hop.
const MAX_ADDRESSES: usize = 16;
/// Per-address connect timeout (the whole call has its own deadline too).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Header block limit for responses (hyper's read buffer).
const MAX_HEADER_BUF: usize = 64 * 1024;

/// Characters kept as they are in a path segment appended from input:
/// RFC 3986 unreserved plus `,` `:` `@`. Everything else, including `/`,
/// `?`, `#`, `%` and `\`, is percent-encoded.
const SEGMENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~')
    .remove(b',')
    .remove(b':')
    .remove(b'@');

/// Headers a manifest may never set: connection management, framing, and
/// anything that would redirect the request.
const FORBIDDEN_HEADERS: &[&str] = &[
    "host",
    "content-length",
    "transfer-encoding",
    "connection",
    "keep-alive",
    "proxy-connection",
    "proxy-authorization",
    "proxy-authenticate",
    "te",
    "trailer",
    "upgrade",
    "expect",
];

/// A credential and the single origin it may be sent to.
#[derive(Clone)]
pub(crate) struct BoundCredential {
    host: String,
    port: u16,
    https: bool,
    placement: Placement,
    secret: String,
}

#[derive(Clone)]
enum Placement {
    Header(HeaderName, HeaderValue),
    Query(String, String),
}

impl BoundCredential {
    /// Same host and port, and never from https down to http.
    fn applies_to(&self, url: &Url) -> bool {
        let host = url.host_str().map(normalize_host);
        host.as_deref() == Some(self.host.as_str())
            && url.port_or_known_default() == Some(self.port)
            && (url.scheme() == "https" || !self.https)
    }
}

/// A request ready to send: everything derived from the manifest and the
/// arguments, before any network activity.
pub(crate) struct Prepared {
    pub(crate) method: Method,
    /// Without the credential (safe to log).
    pub(crate) url: Url,
    pub(crate) headers: HeaderMap,
    pub(crate) body: Option<Bytes>,
    pub(crate) credential: Option<BoundCredential>,
    /// Notes for the log (ignored headers and the like).
    pub(crate) notes: Vec<String>,
}

fn input_format(manifest: &Manifest) -> String {
    manifest
        .input
        .as_ref()
        .and_then(|i| i.format.as_deref())
        .map(|f| f.trim().to_ascii_lowercase())
        .unwrap_or_default()
}

/// Text of a JSON value as it goes into a query string or a path: strings
/// verbatim, other scalars in JSON notation, `null` omitted.
fn value_text(v: &Value) -> Option<String> {
    match v {
        Value::Null => None,
        Value::String(s) => Some(s.clone()),
        other => Some(other.to_string()),
    }
}

/// Replace every pair named `key` with the values of `v` (arrays repeat the
/// key, as most query-string APIs expect).
fn set_pairs(pairs: &mut Vec<(String, String)>, key: &str, v: &Value) {
    pairs.retain(|(k, _)| k != key);
    match v {
        Value::Array(items) => {
            for item in items {
                if let Some(t) = value_text(item) {
                    pairs.push((key.to_string(), t));
                }
            }
        }
        other => {
            if let Some(t) = value_text(other) {
                pairs.push((key.to_string(), t));
            }
        }
    }
}

fn write_query(url: &mut Url, pairs: &[(String, String)]) {
    if pairs.is_empty() {
        url.set_query(None);
    } else {
        url.query_pairs_mut().clear().extend_pairs(pairs);
    }
}

/// Parse and vet a URL the executor is about to request.
pub(crate) fn check_url(raw: &str) -> Result<Url, ToolError> {
    let bad = |reason: &str| ToolError::BadUrl {
        url: raw.chars().take(200).collect(),
        reason: reason.to_string(),
    };
    let mut url = Url::parse(raw.trim()).map_err(|e| bad(&e.to_string()))?;
    match url.scheme() {
        "http" | "https" => {}
        other => {
            return Err(bad(&format!(
                "only http and https are allowed, not {other}:"
            )))
        }
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(bad("URLs with a user name or password are refused"));
    }
    if url.host().is_none() {
        return Err(bad("no host"));
    }
    url.set_fragment(None);
    Ok(url)
}

/// The text/plain path-append case (Wikipedia, dictionary, country-info):
/// a GET whose input is plain text, which declares no named parameters,
/// whose URL path ends in `/`, called with exactly one scalar argument.
fn path_append_value(
    manifest: &Manifest,
    url: &Url,
    arguments: &Map<String, Value>,
) -> Option<String> {
    if !input_format(manifest).starts_with("text/") {
        return None;
    }
    if manifest.input_parameters().is_some_and(|p| !p.is_empty()) {
        return None;
    }
    if !url.path().ends_with('/') || arguments.len() != 1 {
        return None;
    }
    match arguments.values().next()? {
        Value::String(s) => Some(s.clone()),
        v @ (Value::Number(_) | Value::Bool(_)) => Some(v.to_string()),
        _ => None,
    }
}

/// Append `value` to the path: split at `/` (zip-lookup takes `us/97201`),
/// empty pieces skipped, `.` and `..` refused, every piece percent-encoded so
/// `?`, `#`, `%` and `\` stay inside the path.
fn append_path(url: &mut Url, value: &str) -> Result<(), ToolError> {
    let mut path = url.path().trim_end_matches('/').to_string();
    let mut any = false;
    for piece in value.split('/') {
        if piece.is_empty() {
            continue;
        }
        if piece == "." || piece == ".." {
            return Err(ToolError::Arguments(
                "the input may not contain `.` or `..` path segments".into(),
            ));
        }
        path.push('/');
        path.extend(utf8_percent_encode(piece, SEGMENT));
        any = true;
    }
    if any {
        url.set_path(&path);
    }
    Ok(())
}

fn header_value(text: &str) -> Option<HeaderValue> {
    HeaderValue::from_str(text).ok()
}

/// Build the request for an HTTP manifest. Pure: no I/O.
pub(crate) fn prepare(
    exec: &Executor,
    manifest: &Manifest,
    trust: Trust,
    arguments: &Map<String, Value>,
) -> Result<Prepared, ToolError> {
    let kind = manifest.invoke_kind();
    let method = match kind {
        Some(InvokeKind::Get) => Method::GET,
        Some(InvokeKind::Post) => Method::POST,
        _ => return Err(ToolError::UnsupportedMethod(manifest.invoke.method.clone())),
    };
    let invoke = &manifest.invoke;
    let mut url = check_url(&invoke.url)?;
    let format = input_format(manifest);
    let mut notes = Vec::new();

    // Credential first: its query parameter and header win over everything.
    let credential = bind_credential(exec, manifest, trust, &url)?;
    let cred_query = credential.as_ref().and_then(|c| match &c.placement {
        Placement::Query(name, _) => Some(name.clone()),
        Placement::Header(..) => None,
    });
    let cred_header = credential.as_ref().and_then(|c| match &c.placement {
        Placement::Header(name, _) => Some(name.clone()),
        Placement::Query(..) => None,
    });

    // Query: what the URL already has, then invoke.params, then (GET) the
    // arguments; a later source replaces an earlier one key by key.
    let mut pairs: Vec<(String, String)> = url.query_pairs().into_owned().collect();
    if let Some(params) = &invoke.params {
        for (k, v) in params {
            set_pairs(&mut pairs, k, v);
        }
    }
    let mut body = None;
    let mut content_type = None;
    if method == Method::GET {
        if let Some(value) = path_append_value(manifest, &url, arguments) {
            append_path(&mut url, &value)?;
        } else {
            for (k, v) in arguments {
                if cred_query.as_deref() == Some(k.as_str()) {
                    notes.push(format!("argument {k:?} dropped: it names the credential"));
                    continue;
                }
                set_pairs(&mut pairs, k, v);
            }
        }
    } else if format.starts_with("text/") {
        let text = match arguments.get("input") {
            Some(Value::String(s)) => s.clone(),
            _ => match arguments.values().find_map(|v| v.as_str()) {
                Some(s) => s.to_string(),
                None => Value::Object(arguments.clone()).to_string(),
            },
        };
        body = Some(Bytes::from(text));
        content_type = Some(
            manifest
                .input
                .as_ref()
                .and_then(|i| i.format.as_deref())
                .and_then(header_value)
                .unwrap_or(HeaderValue::from_static("text/plain; charset=utf-8")),
        );
    } else if format.starts_with("application/x-www-form-urlencoded") {
        let mut form = Vec::new();
        for (k, v) in arguments {
            set_pairs(&mut form, k, v);
        }
        let encoded = url::form_urlencoded::Serializer::new(String::new())
            .extend_pairs(&form)
            .finish();
        body = Some(Bytes::from(encoded));
        content_type = Some(HeaderValue::from_static(
            "application/x-www-form-urlencoded",
        ));
    } else {
        let json = serde_json::to_vec(&Value::Object(arguments.clone()))
            .map_err(|e| ToolError::Arguments(e.to_string()))?;
        body = Some(Bytes::from(json));
        let declared = manifest
            .input
            .as_ref()
            .and_then(|i| i.format.as_deref())
            .filter(|f| f.to_ascii_lowercase().contains("json"))
            .and_then(header_value);
        content_type = Some(declared.unwrap_or(HeaderValue::from_static("application/json")));
    }
    if let Some(name) = &cred_query {
        pairs.retain(|(k, _)| k != name);
    }
    write_query(&mut url, &pairs);

    let mut headers = HeaderMap::new();
    if let Some(ua) = header_value(&exec.policy.user_agent) {
        headers.insert(header::USER_AGENT, ua);
    }
    if let Some(accept) = manifest.output.as_ref().and_then(|o| o.format.as_deref()) {
        match header_value(accept) {
            Some(v) => {
                headers.insert(header::ACCEPT, v);
            }
            None => notes.push(format!(
                "output.format {accept:?} is not a valid Accept value"
            )),
        }
    }
    if let Some(ct) = content_type {
        headers.insert(header::CONTENT_TYPE, ct);
    }
    if let Some(extra) = &invoke.headers {
        for (name, value) in extra {
            let parsed_name = HeaderName::from_bytes(name.trim().as_bytes())
                .map_err(|_| ToolError::BadHeader(name.clone()))?;
            let parsed_value = HeaderValue::from_str(value.trim())
                .map_err(|_| ToolError::BadHeader(name.clone()))?;
            if FORBIDDEN_HEADERS.contains(&parsed_name.as_str())
                || cred_header.as_ref() == Some(&parsed_name)
            {
                warn!(header = %parsed_name, "manifest header ignored: it may not be overridden");
                notes.push(format!("header {parsed_name} from invoke.headers ignored"));
                continue;
            }
            headers.insert(parsed_name, parsed_value);
        }
    }
    Ok(Prepared {
        method,
        url,
        headers,
        body,
        credential,
        notes,
    })
}

/// Look up and place the credential a manifest's `auth` asks for.
fn bind_credential(
    exec: &Executor,
    manifest: &Manifest,
    trust: Trust,
    url: &Url,
) -> Result<Option<BoundCredential>, ToolError> {
    let invoke = &manifest.invoke;
    let kind = invoke
        .auth_kind()
        .ok_or_else(|| ToolError::UnsupportedAuth(invoke.auth.clone().unwrap_or_default()))?;
    if kind == AuthKind::None {
        return Ok(None);
    }
    let location = invoke
        .auth_location()
        .ok_or_else(|| ToolError::UnsupportedAuthIn(invoke.auth_in.clone().unwrap_or_default()))?;
    let host = url.host_str().map(normalize_host).unwrap_or_default();
    let store = exec
        .credentials
        .as_ref()
        .ok_or_else(|| ToolError::NoCredentialStore { host: host.clone() })?;
    let secret = store
        .get(&host)
        .ok_or_else(|| ToolError::NoCredential {
            host: host.clone(),
            store: store.path().display().to_string(),
        })?
        .secret()
        .to_string();
    let https = url.scheme() == "https";
    if !https && trust == Trust::Internet {
        return Err(ToolError::CleartextCredential { host });
    }
    let bearer = matches!(kind, AuthKind::Bearer | AuthKind::OAuth2);
    let placement = match location {
        AuthIn::Header => {
            let name = invoke.auth_param_name().unwrap_or("Authorization");
            let name = HeaderName::from_bytes(name.trim().as_bytes())
                .map_err(|_| ToolError::BadHeader(name.to_string()))?;
            if FORBIDDEN_HEADERS.contains(&name.as_str()) {
                return Err(ToolError::BadHeader(format!(
                    "{name} (auth_name may not name a connection or framing header)"
                )));
            }
            let text = if bearer {
                format!("Bearer {secret}")
            } else {
                secret.clone()
            };
            let mut value = HeaderValue::from_str(&text)
                .map_err(|_| ToolError::BadCredential { host: host.clone() })?;
            value.set_sensitive(true);
            Placement::Header(name, value)
        }
        AuthIn::Query => {
            let name = match (&invoke.auth_name, bearer) {
                (Some(n), _) => n.clone(),
                // RFC 6750 §2.3 for bearer tokens in the query.
                (None, true) => "access_token".to_string(),
                (None, false) => invoke.auth_param_name().unwrap_or("X-API-Key").to_string(),
            };
            Placement::Query(name, secret.clone())
        }
    };
    let port = url
        .port_or_known_default()
        .unwrap_or(if https { 443 } else { 80 });
    Ok(Some(BoundCredential {
        host,
        port,
        https,
        placement,
        secret,
    }))
}

/// Aborts the connection task when the exchange is over or abandoned.
struct ConnGuard(JoinHandle<()>);

impl Drop for ConnGuard {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// A response whose body has not been read yet.
pub(crate) struct Exchange {
    pub(crate) response: Response<Incoming>,
    _conn: ConnGuard,
}

async fn handshake_and_send<IO>(
    io: IO,
    request: Request<Full<Bytes>>,
) -> Result<Exchange, hyper::Error>
where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (mut sender, conn) = hyper::client::conn::http1::Builder::new()
        .max_buf_size(MAX_HEADER_BUF)
        .handshake(TokioIo::new(io))
        .await?;
    let conn = ConnGuard(tokio::spawn(async move {
        if let Err(e) = conn.await {
            debug!(error = %e, "connection ended with an error");
        }
    }));
    let response = sender.send_request(request).await?;
    Ok(Exchange {
        response,
        _conn: conn,
    })
}

/// Read at most `cap` bytes of a body; `true` when there was more.
pub(crate) async fn read_capped(
    body: &mut Incoming,
    cap: usize,
) -> Result<(Vec<u8>, bool), hyper::Error> {
    let mut buf = Vec::new();
    while let Some(frame) = body.frame().await {
        let Ok(data) = frame?.into_data() else {
            continue;
        };
        let room = cap.saturating_sub(buf.len());
        if data.len() > room {
            buf.extend_from_slice(&data[..room]);
            return Ok((buf, true));
        }
        buf.extend_from_slice(&data);
    }
    Ok((buf, false))
}

impl Executor {
    /// Resolve a URL's host once and check every address against the policy.
    pub(crate) async fn resolve_checked(
        &self,
        trust: Trust,
        url: &Url,
    ) -> Result<Vec<SocketAddr>, ToolError> {
        let host_label = url.host_str().unwrap_or_default().to_string();
        let port = url.port_or_known_default().unwrap_or(80);
        let addrs: Vec<SocketAddr> =
            match url.host() {
                Some(Host::Ipv4(ip)) => vec![SocketAddr::new(IpAddr::V4(ip), port)],
                Some(Host::Ipv6(ip)) => vec![SocketAddr::new(IpAddr::V6(ip), port)],
                Some(Host::Domain(name)) => {
                    let name = name.strip_suffix('.').unwrap_or(name);
                    let mut found = self.resolver.resolve(name, port).await.map_err(|e| {
                        ToolError::Resolve {
                            host: host_label.clone(),
                            error: e.to_string(),
                        }
                    })?;
                    found.dedup();
                    found.truncate(MAX_ADDRESSES);
                    found
                }
                None => {
                    return Err(ToolError::BadUrl {
                        url: url.to_string(),
                        reason: "no host".into(),
                    })
                }
            };
        if addrs.is_empty() {
            return Err(ToolError::Resolve {
                host: host_label,
                error: "no addresses".into(),
            });
        }
        for addr in &addrs {
            if let Err(refusal) = self.policy.check_address(trust, addr.ip()) {
                warn!(host = %host_label, ip = %refusal.ip, class = ?refusal.class, %trust, "address refused");
                return Err(ToolError::AddressRefused {
                    host: host_label,
                    ip: refusal.ip,
                    class: refusal.class.describe(),
                    trust,
                });
            }
        }
        // Requests carry the port; a resolver returning other ports is ignored.
        Ok(addrs
            .into_iter()
            .map(|a| SocketAddr::new(a.ip(), port))
            .collect())
    }

    async fn connect(&self, host: &str, addrs: &[SocketAddr]) -> Result<TcpStream, ToolError> {
        let mut last = None;
        for addr in addrs {
            if let Some(observer) = &self.connect_observer {
                if let Err(e) = observer(*addr) {
                    last = Some(e);
                    continue;
                }
            }
            debug!(%host, %addr, "connecting");
            match tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(addr)).await {
                Ok(Ok(stream)) => {
                    let _ = stream.set_nodelay(true);
                    return Ok(stream);
                }
                Ok(Err(e)) => last = Some(e),
                Err(_) => last = Some(io::Error::new(io::ErrorKind::TimedOut, "connect timed out")),
            }
        }
        Err(ToolError::Connect {
            host: host.to_string(),
            error: last
                .map(|e| e.to_string())
                .unwrap_or_else(|| "no address".into()),
        })
    }

    /// One request/response over a fresh connection to a checked address.
    pub(crate) async fn exchange(
        &self,
        addrs: &[SocketAddr],
        url: &Url,
        method: &Method,
        headers: &HeaderMap,
        body: Option<&Bytes>,
    ) -> Result<Exchange, ToolError> {
        let host = url.host_str().unwrap_or_default().to_string();
        let mut target = url.path().to_string();
        if let Some(q) = url.query() {
            target.push('?');
            target.push_str(q);
        }
        let host_header = match url.port() {
            Some(p) => format!("{host}:{p}"),
            None => host.clone(),
        };
        let mut builder = Request::builder().method(method.clone()).uri(target);
        if let Some(h) = builder.headers_mut() {
            h.clone_from(headers);
            let host_value =
                HeaderValue::from_str(&host_header).map_err(|_| ToolError::BadUrl {
                    url: url.to_string(),
                    reason: "host is not a valid header value".into(),
                })?;
            h.insert(header::HOST, host_value);
        }
        let request = builder
            .body(Full::new(body.cloned().unwrap_or_default()))
            .map_err(|e| ToolError::Http {
                host: host.clone(),
                error: e.to_string(),
            })?;

        let tcp = self.connect(&host, addrs).await?;
        let http_err = |e: hyper::Error| ToolError::Http {
            host: host.clone(),
            error: e.to_string(),
        };
        if url.scheme() == "https" {
            let server_name = match url.host() {
                Some(Host::Domain(d)) => {
                    rustls::pki_types::ServerName::try_from(d.trim_end_matches('.').to_string())
                        .map_err(|e| ToolError::Tls {
                            host: host.clone(),
                            error: e.to_string(),
                        })?
                }
                Some(Host::Ipv4(ip)) => {
                    rustls::pki_types::ServerName::IpAddress(IpAddr::V4(ip).into())
                }
                Some(Host::Ipv6(ip)) => {
                    rustls::pki_types::ServerName::IpAddress(IpAddr::V6(ip).into())
                }
                None => {
                    return Err(ToolError::BadUrl {
                        url: url.to_string(),
                        reason: "no host".into(),
                    })
                }
            };
            let tls = tokio_rustls::TlsConnector::from(Arc::clone(&self.tls))
                .connect(server_name, tcp)
                .await
                .map_err(|e| ToolError::Tls {
                    host: host.clone(),
                    error: e.to_string(),
                })?;
            handshake_and_send(tls, request).await.map_err(http_err)
        } else {
            handshake_and_send(tcp, request).await.map_err(http_err)
        }
    }

    /// Run an HTTP manifest: prepare, then follow at most `max_redirects`
    /// redirects, re-resolving and re-checking every hop.
    pub(crate) async fn run_http(
        &self,
        manifest: &Manifest,
        trust: Trust,
        arguments: &Map<String, Value>,
    ) -> Result<Reply, ToolError> {
        let prepared = prepare(self, manifest, trust, arguments)?;
        let host = prepared.url.host_str().unwrap_or_default().to_string();
        let secret = prepared.credential.as_ref().map(|c| c.secret.clone());
        let limit = self.policy.http_timeout;
        let result = match tokio::time::timeout(limit, self.follow(trust, prepared)).await {
            Ok(result) => result,
            Err(_) => Err(ToolError::Timeout { host, after: limit }),
        };
        // A server may echo the secret (in a body, an error, a Location);
        // the model must not see it, or it could pass it to another tool.
        let Some(secret) = secret else {
            return result;
        };
        Ok(match result {
            Ok(reply) => Reply {
                ok: reply.ok,
                content: redact(&reply.content, &secret),
                detail: reply.detail.map(|d| redact(&d, &secret)),
            },
            Err(e) => {
                let text = redact(&e.to_string(), &secret);
                Reply {
                    ok: false,
                    content: format!("Error: {text}"),
                    detail: Some(text),
                }
            }
        })
    }

    async fn follow(&self, trust: Trust, prepared: Prepared) -> Result<Reply, ToolError> {
        let Prepared {
            mut method,
            mut url,
            mut headers,
            mut body,
            credential,
            notes,
        } = prepared;
        let mut hops = 0usize;
        loop {
            let addrs = self.resolve_checked(trust, &url).await?;
            let mut hop_url = url.clone();
            let mut hop_headers = headers.clone();
            let mut sent_credential = false;
            if let Some(cred) = credential.as_ref().filter(|c| c.applies_to(&url)) {
                match &cred.placement {
                    Placement::Header(name, value) => {
                        hop_headers.insert(name.clone(), value.clone());
                    }
                    Placement::Query(name, value) => {
                        let mut pairs: Vec<(String, String)> =
                            hop_url.query_pairs().into_owned().collect();
                        pairs.retain(|(k, _)| k != name);
                        pairs.push((name.clone(), value.clone()));
                        write_query(&mut hop_url, &pairs);
                    }
                }
                sent_credential = true;
            }
            // The URL carries the model's arguments (path and query).
            debug!(%method, host = url.host_str().unwrap_or_default(),
                   credential = sent_credential, hop = hops, "sending");
            debug!(target: crate::CONTENT_LOG_TARGET, %method,
                   url = %crate::content_excerpt(url.as_str()), "sending");
            let mut exchange = self
                .exchange(&addrs, &hop_url, &method, &hop_headers, body.as_ref())
                .await?;
            let status = exchange.response.status();
            let location = exchange
                .response
                .headers()
                .get(header::LOCATION)
                .map(|v| v.to_str().map(str::to_string));
            let is_redirect = is_redirect(status);
            if is_redirect {
                if let Some(location) = location {
                    let location = location.map_err(|_| {
                        ToolError::BadRedirect("the Location header is not valid text".into())
                    })?;
                    if hops >= self.policy.max_redirects {
                        return Err(ToolError::TooManyRedirects {
                            limit: self.policy.max_redirects,
                        });
                    }
                    hops += 1;
                    let joined = url
                        .join(&location)
                        .map_err(|e| ToolError::BadRedirect(e.to_string()))?;
                    let mut next = check_url(joined.as_str())
                        .map_err(|e| ToolError::BadRedirect(e.to_string()))?;
                    if let Some(cred) = &credential {
                        if !cred.applies_to(&next) {
                            // Never carry the secret to another origin, even
                            // if the server echoed it into the Location.
                            let pairs: Vec<(String, String)> = next
                                .query_pairs()
                                .into_owned()
                                .filter(|(_, v)| v != &cred.secret)
                                .collect();
                            if next.query().is_some() {
                                write_query(&mut next, &pairs);
                            }
                        }
                    }
                    let to_get = status == StatusCode::SEE_OTHER
                        || (method == Method::POST
                            && matches!(status, StatusCode::MOVED_PERMANENTLY | StatusCode::FOUND));
                    if to_get && method != Method::GET {
                        method = Method::GET;
                        body = None;
                        headers.remove(header::CONTENT_TYPE);
                    }
                    debug!(%status, from = url.host_str().unwrap_or_default(),
                           to = next.host_str().unwrap_or_default(), "redirect");
                    debug!(target: crate::CONTENT_LOG_TARGET, %status,
                           from = %crate::content_excerpt(url.as_str()),
                           to = %crate::content_excerpt(next.as_str()), "redirect");
                    url = next;
                    continue;
                }
            }
            let host = url.host_str().unwrap_or_default().to_string();
            let content_type = exchange
                .response
                .headers()
                .get(header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("")
                .to_string();
            let http_err = |e: hyper::Error| ToolError::Http {
                host: host.clone(),
                error: e.to_string(),
            };
            if !status.is_success() {
                let cap = ERROR_READ_BYTES.min(self.policy.max_response_bytes);
                let (bytes, _) = read_capped(exchange.response.body_mut(), cap)
                    .await
                    .unwrap_or_default();
                let text = String::from_utf8_lossy(&bytes);
                let excerpt: String = text.trim().chars().take(ERROR_EXCERPT_CHARS).collect();
                return Err(ToolError::Status {
                    host,
                    status: status.as_u16(),
                    reason: status.canonical_reason().unwrap_or("").to_string(),
                    excerpt,
                });
            }
            let cap = self.policy.max_response_bytes;
            let (bytes, truncated) = read_capped(exchange.response.body_mut(), cap)
                .await
                .map_err(http_err)?;
            drop(exchange);
            let mut content = match String::from_utf8(bytes) {
                Ok(text) => text,
                Err(e) if looks_textual(&content_type) || truncated => {
                    String::from_utf8_lossy(e.as_bytes()).into_owned()
                }
                Err(e) => format!(
                    "[binary response: {} bytes of {}]",
                    e.as_bytes().len(),
                    if content_type.is_empty() {
                        "unknown type"
                    } else {
                        &content_type
                    }
                ),
            };
            if content.trim().is_empty() {
                content = format!(
                    "(empty response, HTTP {} {})",
                    status.as_u16(),
                    status.canonical_reason().unwrap_or("")
                );
            }
            if truncated {
                content.push_str(&format!("\n[response truncated at {cap} bytes]"));
            }
            let mut detail = format!(
                "{} {} -> {} ({} redirects{})",
                method,
                url,
                status.as_u16(),
                hops,
                if sent_credential {
                    ", credential sent"
                } else {
                    ""
                }
            );
            for note in &notes {
                detail.push_str("; ");
                detail.push_str(note);
            }
            return Ok(Reply {
                ok: true,
                content,
                detail: Some(detail),
            });
        }
    }
}

/// Secrets shorter than this are not redacted from output (replacing every
/// occurrence of a three-letter key would mangle the text).
const MIN_REDACTED_SECRET: usize = 6;

/// Replace `secret`, raw and percent/form-encoded, with `[redacted]`.
fn redact(text: &str, secret: &str) -> String {
    if secret.len() < MIN_REDACTED_SECRET {
        return text.to_string();
    }
    let mut out = text.replace(secret, "[redacted]");
    let form: String = url::form_urlencoded::byte_serialize(secret.as_bytes()).collect();
    if form != secret {
        out = out.replace(&form, "[redacted]");
    }
    let pct = utf8_percent_encode(secret, NON_ALPHANUMERIC).to_string();
    if pct != secret {
        out = out.replace(&pct, "[redacted]");
    }
    out
}

fn looks_textual(content_type: &str) -> bool {
    let ct = content_type.to_ascii_lowercase();
    ct.starts_with("text/")
        || ct.contains("json")
        || ct.contains("xml")
        || ct.contains("javascript")
}

/// The statuses this crate follows as redirects (each hop re-checked).
pub(crate) fn is_redirect(status: StatusCode) -> bool {
    matches!(
        status,
        StatusCode::MOVED_PERMANENTLY
            | StatusCode::FOUND
            | StatusCode::SEE_OTHER
            | StatusCode::TEMPORARY_REDIRECT
            | StatusCode::PERMANENT_REDIRECT
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ExecPolicy;

    fn manifest(json: &str) -> Manifest {
        oap_manifest::parse(json.as_bytes()).unwrap().manifest
    }

    fn exec() -> Executor {
        Executor::new(ExecPolicy::default()).unwrap()
    }

    fn args(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn get_merges_baked_query_params_and_arguments() {
        let m = manifest(
            r#"{"oap":"1.0","name":"w","description":"d",
            "input":{"format":"application/json","description":"x"},
            "output":{"format":"application/json","description":"x"},
            "invoke":{"method":"GET","url":"https://api.test/v1/forecast?temperature_unit=fahrenheit&x=1#frag",
                      "params":{"limit":10,"fields":"a,b"}}}"#,
        );
        let p = prepare(
            &exec(),
            &m,
            Trust::Internet,
            &args(
                serde_json::json!({"latitude": 45.5, "x": "2", "tags": ["a", "b"], "none": null}),
            ),
        )
        .unwrap();
        assert_eq!(p.method, Method::GET);
        assert_eq!(
            p.url.as_str(),
            "https://api.test/v1/forecast?temperature_unit=fahrenheit&limit=10&fields=a%2Cb&latitude=45.5&x=2&tags=a&tags=b"
        );
        assert!(p.body.is_none());
        assert_eq!(p.headers[header::ACCEPT], "application/json");
        assert!(p.headers.get(header::CONTENT_TYPE).is_none());
    }

    #[test]
    fn path_append_encodes_segments() {
        let m = manifest(
            r#"{"oap":"1.0","name":"wikipedia","description":"d",
            "input":{"format":"text/plain","description":"title"},
            "invoke":{"method":"GET","url":"https://en.wikipedia.org/api/rest_v1/page/summary/"}}"#,
        );
        let cases = [
            ("Ada_Lovelace", "/api/rest_v1/page/summary/Ada_Lovelace"),
            (
                "Portland,_Oregon",
                "/api/rest_v1/page/summary/Portland,_Oregon",
            ),
            (
                "a b?c#d%2e\\",
                "/api/rest_v1/page/summary/a%20b%3Fc%23d%252e%5C",
            ),
            ("us/97201", "/api/rest_v1/page/summary/us/97201"),
            ("/8.8.8.8/json/", "/api/rest_v1/page/summary/8.8.8.8/json"),
        ];
        for (input, path) in cases {
            let p = prepare(
                &exec(),
                &m,
                Trust::Internet,
                &args(serde_json::json!({ "input": input })),
            )
            .unwrap();
            assert_eq!(p.url.path(), path, "{input}");
            assert_eq!(p.url.query(), None);
        }
        for bad in ["..", "a/../b", "./x"] {
            assert!(prepare(
                &exec(),
                &m,
                Trust::Internet,
                &args(serde_json::json!({ "input": bad }))
            )
            .is_err());
        }
    }

    #[test]
    fn credential_is_bound_to_one_origin() {
        let cred = BoundCredential {
            host: "a.test".into(),
            port: 443,
            https: true,
            placement: Placement::Query("k".into(), "v".into()),
            secret: "v".into(),
        };
        let ok = |u: &str| cred.applies_to(&Url::parse(u).unwrap());
        assert!(ok("https://a.test/x"));
        assert!(ok("https://A.TEST./y?z=1"));
        assert!(ok("https://a.test:443/"));
        assert!(!ok("http://a.test/x"), "https -> http downgrade");
        assert!(!ok("http://a.test:443/x"), "https -> http downgrade");
        assert!(!ok("https://a.test:8443/x"), "other port");
        assert!(!ok("https://b.test/x"), "other host");
        assert!(!ok("https://x.a.test/x"), "subdomain");
        assert!(!ok("https://a.test.evil/x"), "suffix");
        let plain = BoundCredential {
            https: false,
            port: 80,
            ..cred.clone()
        };
        assert!(plain.applies_to(&Url::parse("http://a.test/").unwrap()));
        assert!(plain.applies_to(&Url::parse("https://a.test:80/").unwrap()));
    }

    #[test]
    fn redaction() {
        assert_eq!(
            redact("key=S3CR3T/+ and S3CR3T%2F%2B and S3CR3T%2F+", "S3CR3T/+"),
            "key=[redacted] and [redacted] and S3CR3T%2F+"
        );
        assert_eq!(redact("abc abc", "abc"), "abc abc");
    }

    #[test]
    fn bad_urls_refused() {
        for url in [
            "file:///etc/passwd",
            "ftp://a.test/",
            "https://user:pw@a.test/",
            "not a url",
            "gopher://a.test/",
        ] {
            assert!(check_url(url).is_err(), "{url}");
        }
        assert_eq!(
            check_url("http://2130706433/").unwrap().host(),
            Some(Host::Ipv4("127.0.0.1".parse().unwrap()))
        );
    }
}

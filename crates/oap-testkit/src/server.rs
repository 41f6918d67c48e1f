//! Loopback HTTP(S) servers for tests: a hyper server that records every
//! request and answers through a handler, a raw TLS server that hands the
//! stream to the handler (for answers no well-behaved server sends: slow,
//! endless), and servers that never answer or flood.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::header::HeaderMap;
use hyper::service::service_fn;
use hyper::{Request, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// What a test handler answers.
pub type HttpResponse = hyper::Response<Full<Bytes>>;

/// A request as the test server saw it.
#[derive(Debug, Clone)]
pub struct Recorded {
    /// Request method.
    pub method: String,
    /// Request target as sent.
    pub target: String,
    /// Path part of the target.
    pub path: String,
    /// Query part of the target, if any.
    pub query: Option<String>,
    /// Header fields.
    pub headers: HeaderMap,
    /// The whole body.
    pub body: Bytes,
}

impl Recorded {
    /// The query's `key=value` pairs, percent-decoded.
    pub fn query_pairs(&self) -> Vec<(String, String)> {
        url::form_urlencoded::parse(self.query.as_deref().unwrap_or("").as_bytes())
            .into_owned()
            .collect()
    }
    /// A header's value, if present and UTF-8.
    pub fn header(&self, name: &str) -> Option<String> {
        self.headers
            .get(name)
            .map(|v| v.to_str().unwrap().to_string())
    }
}

/// Answers one recorded request.
pub type Handler = Arc<dyn Fn(&Recorded) -> HttpResponse + Send + Sync>;

/// A loopback HTTP(S) server that records what it receives.
pub struct TestServer {
    /// Where it listens.
    pub addr: SocketAddr,
    /// Every request so far, in arrival order.
    pub requests: Arc<Mutex<Vec<Recorded>>>,
}

impl TestServer {
    /// The port it listens on.
    pub fn port(&self) -> u16 {
        self.addr.port()
    }
    /// A copy of the requests so far.
    pub fn requests(&self) -> Vec<Recorded> {
        self.requests.lock().unwrap().clone()
    }
}

/// A response with this status and body.
pub fn response(status: u16, body: impl Into<Bytes>) -> HttpResponse {
    hyper::Response::builder()
        .status(StatusCode::from_u16(status).unwrap())
        .body(Full::new(body.into()))
        .unwrap()
}

/// A redirect with this status to `location`.
pub fn redirect(status: u16, location: &str) -> HttpResponse {
    hyper::Response::builder()
        .status(StatusCode::from_u16(status).unwrap())
        .header("location", location)
        .body(Full::new(Bytes::new()))
        .unwrap()
}

async fn handle(
    req: Request<Incoming>,
    handler: Handler,
    log: Arc<Mutex<Vec<Recorded>>>,
) -> Result<HttpResponse, Infallible> {
    let (parts, body) = req.into_parts();
    let body = body
        .collect()
        .await
        .map(|c| c.to_bytes())
        .unwrap_or_default();
    let rec = Recorded {
        method: parts.method.to_string(),
        target: parts.uri.to_string(),
        path: parts.uri.path().to_string(),
        query: parts.uri.query().map(str::to_string),
        headers: parts.headers,
        body,
    };
    log.lock().unwrap().push(rec.clone());
    Ok(handler(&rec))
}

/// An HTTP/1.1 server on 127.0.0.1 with an ephemeral port.
pub async fn serve<F>(handler: F) -> TestServer
where
    F: Fn(&Recorded) -> HttpResponse + Send + Sync + 'static,
{
    serve_inner(Arc::new(handler), None).await
}

/// The same over TLS.
pub async fn serve_tls<F>(handler: F, config: Arc<rustls::ServerConfig>) -> TestServer
where
    F: Fn(&Recorded) -> HttpResponse + Send + Sync + 'static,
{
    serve_inner(Arc::new(handler), Some(config)).await
}

async fn serve_inner(handler: Handler, tls: Option<Arc<rustls::ServerConfig>>) -> TestServer {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let requests = Arc::new(Mutex::new(Vec::new()));
    let log = Arc::clone(&requests);
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            let handler = Arc::clone(&handler);
            let log = Arc::clone(&log);
            let tls = tls.clone();
            tokio::spawn(async move {
                let svc =
                    service_fn(move |req| handle(req, Arc::clone(&handler), Arc::clone(&log)));
                let builder = hyper::server::conn::http1::Builder::new();
                match tls {
                    Some(config) => {
                        let acceptor = tokio_rustls::TlsAcceptor::from(config);
                        if let Ok(stream) = acceptor.accept(stream).await {
                            let _ = builder.serve_connection(TokioIo::new(stream), svc).await;
                        }
                    }
                    None => {
                        let _ = builder.serve_connection(TokioIo::new(stream), svc).await;
                    }
                }
            });
        }
    });
    TestServer { addr, requests }
}

/// Accepts connections and never answers. Returns the address and a
/// counter of accepted connections.
pub async fn serve_silent() -> (SocketAddr, Arc<Mutex<usize>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let count = Arc::new(Mutex::new(0usize));
    let c = Arc::clone(&count);
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((stream, _)) = listener.accept().await {
            *c.lock().unwrap() += 1;
            held.push(stream);
        }
    });
    (addr, count)
}

/// Answers every request with a `total`-byte body, written in 64 KiB
/// chunks until the client goes away. Returns the address and the number of
/// body bytes actually written.
pub async fn serve_flood(total: usize) -> (SocketAddr, Arc<Mutex<usize>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let written = Arc::new(Mutex::new(0usize));
    let w = Arc::clone(&written);
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let w = Arc::clone(&w);
            tokio::spawn(async move {
                let mut buf = [0u8; 4096];
                let _ = stream.read(&mut buf).await;
                let head = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: {total}\r\n\r\n"
                );
                if stream.write_all(head.as_bytes()).await.is_err() {
                    return;
                }
                let chunk = vec![b'a'; 64 * 1024];
                let mut sent = 0usize;
                while sent < total {
                    let n = chunk.len().min(total - sent);
                    if stream.write_all(&chunk[..n]).await.is_err() {
                        break;
                    }
                    sent += n;
                    *w.lock().unwrap() = sent;
                }
            });
        }
    });
    (addr, written)
}

/// The head of a request the raw TLS server read.
#[derive(Debug, Clone)]
pub struct RequestHead {
    /// Request path.
    pub path: String,
    /// The Host header without its port.
    pub host: String,
    /// Every header, names as sent.
    pub headers: Vec<(String, String)>,
}

impl RequestHead {
    /// A header's value (case-insensitive name).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// A server-side TLS connection.
pub type TlsStream = tokio_rustls::server::TlsStream<TcpStream>;

/// Accepts TLS connections on `listener` until it fails, reads each
/// request head (at most 64 KiB) and hands the stream and the head to
/// `handler`, which answers (see [`write_response`]) and closes.
pub async fn serve_tls_raw<F, Fut>(
    listener: TcpListener,
    config: Arc<rustls::ServerConfig>,
    handler: F,
) where
    F: Fn(TlsStream, RequestHead) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    let acceptor = tokio_rustls::TlsAcceptor::from(config);
    loop {
        let Ok((tcp, _)) = listener.accept().await else {
            return;
        };
        let (acceptor, handler) = (acceptor.clone(), handler.clone());
        tokio::spawn(async move {
            let Ok(mut tls) = acceptor.accept(tcp).await else {
                return;
            };
            let mut buf = Vec::new();
            let mut chunk = [0u8; 4096];
            while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
                match tls.read(&mut chunk).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => buf.extend_from_slice(&chunk[..n]),
                }
                if buf.len() > 65536 {
                    return;
                }
            }
            let text = String::from_utf8_lossy(&buf).to_string();
            let mut lines = text.split("\r\n");
            let path = lines
                .next()
                .and_then(|l| l.split(' ').nth(1))
                .unwrap_or("/")
                .to_string();
            let headers: Vec<(String, String)> = lines
                .take_while(|l| !l.is_empty())
                .filter_map(|l| l.split_once(':'))
                .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
                .collect();
            let host = headers
                .iter()
                .find(|(k, _)| k.eq_ignore_ascii_case("host"))
                .map(|(_, v)| v.split(':').next().unwrap_or("").to_string())
                .unwrap_or_default();
            handler(
                tls,
                RequestHead {
                    path,
                    host,
                    headers,
                },
            )
            .await;
        });
    }
}

/// Writes a whole response with `connection: close` and its
/// `content-length`; errors are ignored (the client may be gone).
pub async fn write_response<W: AsyncWrite + Unpin>(
    w: &mut W,
    status: &str,
    headers: &[(&str, String)],
    body: &[u8],
) {
    let mut head = format!(
        "HTTP/1.1 {status}\r\nconnection: close\r\ncontent-length: {}\r\n",
        body.len()
    );
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    let _ = w.write_all(head.as_bytes()).await;
    let _ = w.write_all(body).await;
}

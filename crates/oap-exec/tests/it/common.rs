//! Test helpers: a stub resolver, a connection log that refuses anything but
//! loopback (so no test can send traffic elsewhere, even through a bug), and
//! loopback HTTP servers.

#![allow(dead_code)]

use std::collections::HashMap;
use std::convert::Infallible;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::header::HeaderMap;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use oap_exec::{BoxFuture, ConnectObserver, ExecPolicy, Executor, Resolver};
use oap_manifest::Manifest;
use serde_json::{Map, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// Answers from a fixed table; records every query.
#[derive(Default)]
pub struct StubResolver {
    pub table: HashMap<String, Vec<IpAddr>>,
    pub queries: Mutex<Vec<String>>,
}

impl StubResolver {
    pub fn new(entries: &[(&str, &[&str])]) -> Arc<Self> {
        let table = entries
            .iter()
            .map(|(h, ips)| {
                (
                    h.to_string(),
                    ips.iter().map(|ip| ip.parse().unwrap()).collect(),
                )
            })
            .collect();
        Arc::new(Self {
            table,
            queries: Mutex::new(Vec::new()),
        })
    }

    pub fn queries(&self) -> Vec<String> {
        self.queries.lock().unwrap().clone()
    }
}

impl Resolver for StubResolver {
    fn resolve<'a>(
        &'a self,
        host: &'a str,
        port: u16,
    ) -> BoxFuture<'a, io::Result<Vec<SocketAddr>>> {
        self.queries.lock().unwrap().push(host.to_string());
        let found = self.table.get(host).cloned();
        Box::pin(async move {
            match found {
                Some(ips) => Ok(ips
                    .into_iter()
                    .map(|ip| SocketAddr::new(ip, port))
                    .collect()),
                None => Err(io::Error::new(
                    io::ErrorKind::NotFound,
                    "no such host (stub)",
                )),
            }
        })
    }
}

/// Every connection attempt, in order. The observer refuses any address
/// that is not loopback, so tests cannot reach the network.
#[derive(Clone, Default)]
pub struct Connects(pub Arc<Mutex<Vec<SocketAddr>>>);

impl Connects {
    pub fn observer(&self) -> ConnectObserver {
        let log = Arc::clone(&self.0);
        Arc::new(move |addr: SocketAddr| {
            log.lock().unwrap().push(addr);
            if addr.ip().is_loopback() {
                Ok(())
            } else {
                Err(io::Error::new(
                    io::ErrorKind::PermissionDenied,
                    "test guard: only loopback connections",
                ))
            }
        })
    }

    pub fn all(&self) -> Vec<SocketAddr> {
        self.0.lock().unwrap().clone()
    }
}

pub fn executor(policy: ExecPolicy, resolver: Arc<StubResolver>) -> (Executor, Connects) {
    let connects = Connects::default();
    let exec = Executor::new(policy)
        .unwrap()
        .with_resolver(resolver)
        .with_connect_observer(connects.observer());
    (exec, connects)
}

pub fn manifest(json: &str) -> Manifest {
    match oap_manifest::parse(json.as_bytes()) {
        Ok(p) => p.manifest,
        Err(e) => panic!("test manifest invalid: {e}\n{json}"),
    }
}

/// A manifest that skips validation (to test what validation would stop).
pub fn raw_manifest(v: Value) -> Manifest {
    serde_json::from_value(v).unwrap()
}

pub fn args(v: Value) -> Map<String, Value> {
    v.as_object().unwrap().clone()
}

/// A request as the test server saw it.
#[derive(Debug, Clone)]
pub struct Recorded {
    pub method: String,
    pub target: String,
    pub path: String,
    pub query: Option<String>,
    pub headers: HeaderMap,
    pub body: Bytes,
}

impl Recorded {
    pub fn query_pairs(&self) -> Vec<(String, String)> {
        url::form_urlencoded::parse(self.query.as_deref().unwrap_or("").as_bytes())
            .into_owned()
            .collect()
    }
    pub fn header(&self, name: &str) -> Option<String> {
        self.headers
            .get(name)
            .map(|v| v.to_str().unwrap().to_string())
    }
}

pub type Handler = Arc<dyn Fn(&Recorded) -> Response<Full<Bytes>> + Send + Sync>;

pub struct TestServer {
    pub addr: SocketAddr,
    pub requests: Arc<Mutex<Vec<Recorded>>>,
}

impl TestServer {
    pub fn port(&self) -> u16 {
        self.addr.port()
    }
    pub fn requests(&self) -> Vec<Recorded> {
        self.requests.lock().unwrap().clone()
    }
}

pub fn response(status: u16, body: impl Into<Bytes>) -> Response<Full<Bytes>> {
    Response::builder()
        .status(StatusCode::from_u16(status).unwrap())
        .body(Full::new(body.into()))
        .unwrap()
}

pub fn redirect(status: u16, location: &str) -> Response<Full<Bytes>> {
    Response::builder()
        .status(StatusCode::from_u16(status).unwrap())
        .header("location", location)
        .body(Full::new(Bytes::new()))
        .unwrap()
}

async fn handle(
    req: Request<Incoming>,
    handler: Handler,
    log: Arc<Mutex<Vec<Recorded>>>,
) -> Result<Response<Full<Bytes>>, Infallible> {
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
    F: Fn(&Recorded) -> Response<Full<Bytes>> + Send + Sync + 'static,
{
    serve_inner(Arc::new(handler), None).await
}

/// The same over TLS.
pub async fn serve_tls<F>(handler: F, config: Arc<rustls::ServerConfig>) -> TestServer
where
    F: Fn(&Recorded) -> Response<Full<Bytes>> + Send + Sync + 'static,
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

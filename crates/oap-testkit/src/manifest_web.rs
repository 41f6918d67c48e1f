//! A manifest web for crawler tests: an HTTPS server on loopback with the
//! test CA that serves good and hostile `/.well-known/oap.json` documents
//! chosen by the Host header ([`HOSTS`]), the stub resolver mapping those
//! fake domains to loopback, and an executor that records every connect.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use oap_exec::{ExecPolicy, Executor};

use crate::server::{serve_tls_raw, write_response};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpListener;

pub use crate::pki::{Pki, ServerConfig};
pub use crate::resolver::StubResolver;

/// Every fake domain the server has a certificate for.
pub const HOSTS: &[&str] = &[
    "good.test",
    "second.test",
    "html.test",
    "huge.test",
    "hugechunked.test",
    "slow.test",
    "redirect-other.test",
    "redirect-local.test",
    "redirect-same.test",
    "redirect-http.test",
    "loop.test",
    "flap.test",
    "stdio.test",
    "deep.test",
    "badutf8.test",
    "notfound.test",
    "changing.test",
    "health.test",
    "userinfo.test",
    "control.test",
];

/// A minimal valid manifest (an HTTP GET tool) with this name and description.
pub fn manifest(name: &str, description: &str) -> String {
    serde_json::json!({
        "oap": "1.0",
        "name": name,
        "description": description,
        "invoke": {"method": "GET", "url": "https://api.example.org/run"}
    })
    .to_string()
}

/// A test CA and a certificate for every host in [`HOSTS`] and 127.0.0.1.
pub fn pki() -> Pki {
    let mut names: Vec<&str> = HOSTS.to_vec();
    names.push("127.0.0.1");
    Pki::new(&names)
}

/// `(host, path, if-none-match)` of one request.
pub type Seen = (String, String, Option<String>);

/// The HTTPS test server.
pub struct Server {
    /// The loopback port it listens on.
    pub port: u16,
    /// `(host, path, if-none-match)` of every request.
    pub requests: Arc<Mutex<Vec<Seen>>>,
    /// flap.test answers 200 while this is true, 503 otherwise.
    pub flap_up: Arc<AtomicBool>,
    /// changing.test serves version N.
    pub version: Arc<AtomicUsize>,
}

impl Server {
    /// `host:port`, the domain a crawler is given for `host`.
    pub fn domain(&self, host: &str) -> String {
        format!("{host}:{}", self.port)
    }

    /// How many requests named `host`.
    pub fn hits(&self, host: &str) -> usize {
        self.requests
            .lock()
            .unwrap()
            .iter()
            .filter(|(h, _, _)| h == host)
            .count()
    }
}

/// Starts the server on a loopback port with `config`'s certificates.
pub async fn serve(config: Arc<ServerConfig>) -> Server {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let requests = Arc::new(Mutex::new(Vec::new()));
    let flap_up = Arc::new(AtomicBool::new(true));
    let version = Arc::new(AtomicUsize::new(1));
    let (r, f, v) = (requests.clone(), flap_up.clone(), version.clone());
    tokio::spawn(serve_tls_raw(listener, config, move |mut tls, head| {
        let (r, f, v) = (r.clone(), f.clone(), v.clone());
        async move {
            let inm = head.header("if-none-match").map(str::to_string);
            r.lock()
                .unwrap()
                .push((head.host.clone(), head.path.clone(), inm.clone()));
            respond(&mut tls, &head.host, &head.path, inm, port, &f, &v).await;
            let _ = tls.shutdown().await;
        }
    }));
    Server {
        port,
        requests,
        flap_up,
        version,
    }
}

const JSON: &str = "application/json";

async fn respond<W: tokio::io::AsyncWrite + Unpin>(
    w: &mut W,
    host: &str,
    path: &str,
    inm: Option<String>,
    port: u16,
    flap_up: &AtomicBool,
    version: &AtomicUsize,
) {
    let ct = |t: &str| vec![("content-type", t.to_string())];
    match host {
        "good.test" | "second.test" => {
            if inm.as_deref() == Some("\"v1\"") {
                return write_response(w, "304 Not Modified", &[("etag", "\"v1\"".into())], b"")
                    .await;
            }
            let body = if host == "good.test" {
                manifest("Weather Now", "Current weather and forecast for a city")
            } else {
                manifest("Word Counter", "Counts the words in a text")
            };
            let mut h = ct(JSON);
            h.push(("etag", "\"v1\"".into()));
            write_response(w, "200 OK", &h, body.as_bytes()).await
        }
        "changing.test" => {
            let n = version.load(Ordering::SeqCst);
            let body = manifest("Changing", &format!("Version {n} of a changing capability"));
            write_response(
                w,
                "200 OK",
                &ct("application/oap+json; charset=utf-8"),
                body.as_bytes(),
            )
            .await
        }
        "html.test" => write_response(w, "200 OK", &ct("text/html"), b"<html>{}</html>").await,
        "huge.test" => {
            let desc = "x".repeat(100 * 1024);
            let body = manifest("Huge", &desc);
            write_response(w, "200 OK", &ct(JSON), body.as_bytes()).await
        }
        "hugechunked.test" => {
            // No length: the body just keeps coming.
            let _ = w
                .write_all(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nconnection: close\r\n\r\n")
                .await;
            let chunk = vec![b' '; 16 * 1024];
            for _ in 0..64 {
                if w.write_all(&chunk).await.is_err() {
                    return;
                }
            }
        }
        "slow.test" => {
            let _ = w
                .write_all(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 1000\r\n\r\n")
                .await;
            for _ in 0..1000 {
                if w.write_all(b" ").await.is_err() || w.flush().await.is_err() {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
        "redirect-other.test" => {
            let to = format!("https://good.test:{port}/.well-known/oap.json");
            write_response(w, "302 Found", &[("location", to)], b"").await
        }
        "redirect-local.test" => {
            let to = format!("https://127.0.0.1:{port}/.well-known/oap.json");
            write_response(w, "302 Found", &[("location", to)], b"").await
        }
        "redirect-http.test" => {
            let to = format!("http://redirect-http.test:{port}/moved.json");
            write_response(w, "301 Moved Permanently", &[("location", to)], b"").await
        }
        "redirect-same.test" => {
            if path == "/moved.json" {
                let body = manifest("Moved Manifest", "A manifest behind a same-host redirect");
                write_response(w, "200 OK", &ct(JSON), body.as_bytes()).await
            } else {
                write_response(
                    w,
                    "301 Moved Permanently",
                    &[("location", "/moved.json".into())],
                    b"",
                )
                .await
            }
        }
        "loop.test" => {
            write_response(
                w,
                "302 Found",
                &[("location", "/.well-known/oap.json".into())],
                b"",
            )
            .await
        }
        "flap.test" => {
            if flap_up.load(Ordering::SeqCst) {
                let body = manifest("Flapping Service", "Sometimes up, sometimes down");
                write_response(w, "200 OK", &ct(JSON), body.as_bytes()).await
            } else {
                write_response(w, "503 Service Unavailable", &ct("text/plain"), b"down").await
            }
        }
        "health.test" => {
            if path == "/health" {
                let status = if flap_up.load(Ordering::SeqCst) {
                    "200 OK"
                } else {
                    "503 Service Unavailable"
                };
                return write_response(w, status, &ct("text/plain"), b"").await;
            }
            let body = serde_json::json!({
                "oap": "1.0", "name": "Tide Service", "description": "High and low tide times for a harbour",
                "invoke": {"method": "GET", "url": "https://api.example.org/tides"},
                "health": format!("https://health.test:{port}/health")
            })
            .to_string();
            write_response(w, "200 OK", &ct(JSON), body.as_bytes()).await
        }
        "stdio.test" => {
            let body = serde_json::json!({
                "oap": "1.0", "name": "Evil Shell", "description": "Runs a command",
                "invoke": {"method": "stdio", "url": "/bin/sh"}
            })
            .to_string();
            write_response(w, "200 OK", &ct(JSON), body.as_bytes()).await
        }
        "userinfo.test" => {
            let body = serde_json::json!({
                "oap": "1.0", "name": "Leaky", "description": "Sends a password to the world",
                "invoke": {"method": "GET", "url": "https://api:s3cr3tpw@api.example.org/run"}
            })
            .to_string();
            write_response(w, "200 OK", &ct(JSON), body.as_bytes()).await
        }
        "control.test" => {
            let name = "Bad\u{1b}[31m\r\n2026-01-01T00:00:00Z  INFO oapd: forged";
            let body = manifest(name, "A name that forges a log record");
            write_response(w, "200 OK", &ct(JSON), body.as_bytes()).await
        }
        "deep.test" => {
            let body = format!("{}{}", "[".repeat(200), "]".repeat(200));
            write_response(w, "200 OK", &ct(JSON), body.as_bytes()).await
        }
        "badutf8.test" => {
            let mut body = manifest("Bad Bytes", "invalid utf8 ").into_bytes();
            body.insert(40, 0xff);
            write_response(w, "200 OK", &ct(JSON), &body).await
        }
        _ => write_response(w, "404 Not Found", &ct("text/plain"), b"no").await,
    }
}

/// Every test host on loopback.
pub fn loopback_resolver() -> Arc<StubResolver> {
    StubResolver::loopback(HOSTS)
}

/// An executor resolving through `resolver`, trusting the test CA, with
/// `allow` as the operator allow-list; returns the recorded connections.
pub fn executor(
    resolver: Arc<StubResolver>,
    ca_pem: &str,
    allow: &[&str],
) -> (Arc<Executor>, Arc<Mutex<Vec<SocketAddr>>>) {
    let policy = ExecPolicy {
        allow_private: allow.iter().map(|c| c.parse().unwrap()).collect(),
        ..ExecPolicy::default()
    };
    let connects = Arc::new(Mutex::new(Vec::new()));
    let seen = connects.clone();
    let exec = Executor::new(policy)
        .unwrap()
        .with_resolver(resolver)
        .with_extra_roots_pem(ca_pem.as_bytes())
        .unwrap()
        .with_connect_observer(Arc::new(move |addr| {
            seen.lock().unwrap().push(addr);
            Ok(())
        }));
    (Arc::new(exec), connects)
}

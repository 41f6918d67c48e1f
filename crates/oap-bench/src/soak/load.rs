//! The soak's load: one request per tick on its own fresh connection, each
//! outcome judged (answered, answered with a clear error, or not answered)
//! and recorded.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use oap_testkit::http::{parse_response, request_bytes};
use serde_json::{json, Value};
use std::io::Write;

use super::{Outcome, Shared, MAX_IN_FLIGHT, REQUEST_TIMEOUT, TASKS};

/// One request on a fresh connection, the response read to its end.
pub(super) fn send(
    addr: SocketAddr,
    path: &str,
    body: &str,
) -> std::io::Result<oap_testkit::http::Response> {
    use std::io::Read;
    let raw = request_bytes(
        "POST",
        path,
        &addr.to_string(),
        &[("Content-Type", "application/json")],
        body.as_bytes(),
    );
    let mut stream = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(5))?;
    stream.set_read_timeout(Some(REQUEST_TIMEOUT))?;
    stream.write_all(&raw)?;
    let mut buf = Vec::new();
    stream.read_to_end(&mut buf)?;
    if buf.is_empty() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::UnexpectedEof,
            "closed without a response",
        ));
    }
    parse_response(&buf)
}

pub(super) fn io_kind(err: &std::io::Error) -> &'static str {
    use std::io::ErrorKind as K;
    match err.kind() {
        K::ConnectionRefused => "refused",
        K::ConnectionReset | K::ConnectionAborted | K::BrokenPipe => "reset",
        K::UnexpectedEof => "closed",
        K::WouldBlock | K::TimedOut => "timeout",
        K::InvalidData => "malformed",
        _ => "io",
    }
}

pub(super) fn has_json_error(body: &[u8]) -> bool {
    serde_json::from_slice::<Value>(body).is_ok_and(|v| v.get("error").is_some())
}

/// Judges a response of `route`.
pub(super) fn judge(route: &str, result: std::io::Result<oap_testkit::http::Response>) -> Outcome {
    let response = match result {
        Ok(response) => response,
        Err(err) => return Outcome::Failed(io_kind(&err).to_string(), err.to_string()),
    };
    let text = String::from_utf8_lossy(&response.body);
    if response.status >= 400 {
        return if has_json_error(&response.body) {
            Outcome::Answered(format!("http_{}", response.status))
        } else {
            Outcome::Failed(
                format!("http_{}_without_json", response.status),
                text.chars().take(200).collect(),
            )
        };
    }
    let complete = match route {
        "openai_stream" => {
            if text.lines().any(|l| {
                l.strip_prefix("data: ")
                    .is_some_and(|d| d.contains("\"error\""))
            }) {
                return Outcome::Answered("stream_error".into());
            }
            text.contains("data: [DONE]")
        }
        "chat" | "probe" => match serde_json::from_slice::<Value>(&response.body) {
            Ok(v) if v.get("error").is_some() => return Outcome::Answered("error_body".into()),
            Ok(v) => v.get("message").is_some() && v["done"] == true,
            Err(_) => false,
        },
        _ => serde_json::from_slice::<Value>(&response.body).is_ok(),
    };
    if complete {
        Outcome::Ok
    } else {
        Outcome::Failed(
            "incomplete".into(),
            text.chars()
                .rev()
                .take(200)
                .collect::<String>()
                .chars()
                .rev()
                .collect(),
        )
    }
}

/// Sends one request and records its outcome.
pub(super) fn request(shared: &Shared, route: &str, path: &str, body: &str) {
    let epoch = shared.epoch.load(Ordering::SeqCst);
    let was_down = shared.down.load(Ordering::SeqCst);
    let started = Instant::now();
    let outcome = judge(route, send(shared.addr, path, body));
    let ms = started.elapsed().as_secs_f64() * 1000.0;
    shared.record(route, epoch, was_down, outcome, ms);
}

/// A load generator: `body(i)` to `path` at `rate` per second until stop.
pub(super) fn pacer(
    shared: Arc<Shared>,
    route: &'static str,
    path: &'static str,
    rate: f64,
    body: fn(u64) -> String,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        if rate <= 0.0 {
            return;
        }
        let in_flight = Arc::new(AtomicUsize::new(0));
        let begin = Instant::now();
        let mut i: u64 = 0;
        let mut workers = Vec::new();
        while !shared.stop.load(Ordering::SeqCst) {
            let due = begin + Duration::from_secs_f64(i as f64 / rate);
            if let Some(wait) = due.checked_duration_since(Instant::now()) {
                std::thread::sleep(wait);
            }
            if in_flight.load(Ordering::SeqCst) >= MAX_IN_FLIGHT {
                let epoch = shared.epoch.load(Ordering::SeqCst);
                shared.record(
                    route,
                    epoch,
                    false,
                    Outcome::Failed("backlog".into(), format!("{MAX_IN_FLIGHT} in flight")),
                    0.0,
                );
            } else {
                in_flight.fetch_add(1, Ordering::SeqCst);
                let (shared, in_flight) = (shared.clone(), in_flight.clone());
                let text = body(i);
                workers.push(std::thread::spawn(move || {
                    request(&shared, route, path, &text);
                    in_flight.fetch_sub(1, Ordering::SeqCst);
                }));
            }
            workers.retain(|w| !w.is_finished());
            i += 1;
        }
        for worker in workers {
            let _ = worker.join();
        }
    })
}

pub(super) fn discover_body(i: u64) -> String {
    json!({"task": TASKS[i as usize % TASKS.len()], "top_k": 5}).to_string()
}

pub(super) fn chat_body(i: u64) -> String {
    json!({"model": "soak", "stream": false, "messages": [
        {"role": "user", "content": format!("count the words in this text: one two three {i}")}]})
    .to_string()
}

pub(super) fn stream_body(i: u64) -> String {
    json!({"model": "soak", "stream": true, "messages": [
        {"role": "user", "content": format!("count the words in this paragraph: alpha beta {i}")}]})
    .to_string()
}

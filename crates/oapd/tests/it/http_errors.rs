//! What a broken or stalled client gets at the HTTP level: a JSON error
//! naming the problem (a malformed request line or header, a request target
//! over the limit, a head over the buffer, a body that stopped arriving),
//! and the connection closed; the daemon keeps serving.

use crate::support;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use crate::support::{send_raw, Daemon};

fn daemon() -> Daemon {
    support::daemon().without_model().start()
}

/// The error of a JSON error response, after checking its status.
fn json_error(response: &support::Response, status: u16) -> String {
    assert_eq!(
        response.status,
        status,
        "{}",
        String::from_utf8_lossy(&response.body)
    );
    assert_eq!(response.header("content-type"), Some("application/json"));
    response.error()
}

#[test]
fn a_malformed_request_line_or_header_is_a_json_400() {
    let daemon = daemon();
    for (raw, expected) in [
        (&b"GARBAGE\r\n\r\n"[..], "malformed request line"),
        (
            b"GET / HTTP/9.9\r\nHost: localhost\r\n\r\n",
            "HTTP/1.0 or HTTP/1.1",
        ),
        (b"GET /health HTTP/1.1\r\nHost localhost\r\n\r\n", "header"),
        (
            b"GET /he alth HTTP/1.1\r\nHost: localhost\r\n\r\n",
            "request line",
        ),
        (
            b"POST /v1/discover HTTP/1.1\r\nHost: localhost\r\nContent-Length: ten\r\n\r\n",
            "Content-Length",
        ),
    ] {
        let response = send_raw(daemon.addr, raw).unwrap();
        let error = json_error(&response, 400);
        assert!(
            error.contains(expected),
            "{:?}: {error}",
            String::from_utf8_lossy(raw)
        );
    }
    assert_eq!(daemon.get("/health").status, 200);
}

#[test]
fn a_request_target_over_the_limit_is_a_json_414() {
    let daemon = daemon();
    let raw = format!(
        "GET /v1/manifests/{} HTTP/1.1\r\nHost: localhost\r\n\r\n",
        "a".repeat(9000)
    );
    let error = json_error(&send_raw(daemon.addr, raw.as_bytes()).unwrap(), 414);
    assert!(error.contains("8192 bytes"), "{error}");
    // Even before the line ends.
    let raw = format!("GET /{}", "a".repeat(20_000));
    let error = json_error(&send_raw(daemon.addr, raw.as_bytes()).unwrap(), 414);
    assert!(error.contains("URI"), "{error}");
    // A long target under the limit is an ordinary request.
    let id = "a".repeat(8000);
    assert_eq!(daemon.get(&format!("/v1/manifests/{id}")).status, 404);
}

#[test]
fn a_request_head_over_the_buffer_is_a_json_431() {
    let daemon = daemon();
    let mut raw = String::from("GET /health HTTP/1.1\r\nHost: localhost\r\n");
    for i in 0..70 {
        raw.push_str(&format!("X-Pad-{i}: {}\r\n", "p".repeat(1000)));
    }
    raw.push_str("\r\n");
    let error = json_error(&send_raw(daemon.addr, raw.as_bytes()).unwrap(), 431);
    assert!(error.contains("65536 bytes"), "{error}");

    let mut raw = String::from("GET /health HTTP/1.1\r\nHost: localhost\r\n");
    for i in 0..120 {
        raw.push_str(&format!("X-Many-{i}: 1\r\n"));
    }
    raw.push_str("\r\n");
    let error = json_error(&send_raw(daemon.addr, raw.as_bytes()).unwrap(), 431);
    assert!(error.contains("header fields"), "{error}");
    assert_eq!(daemon.get("/health").status, 200);
}

#[test]
fn requests_after_the_first_on_a_connection_are_still_served() {
    let daemon = daemon();
    // Two requests in one write: the second arrives with the first head.
    let body = r#"{"task": "count the words"}"#;
    let raw = format!(
        "POST /v1/discover HTTP/1.1\r\nHost: localhost\r\nContent-Length: {}\r\n\r\n{body}\
         GET /health HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n",
        body.len()
    );
    let mut stream = TcpStream::connect(daemon.addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    stream.write_all(raw.as_bytes()).unwrap();
    let mut all = Vec::new();
    stream.read_to_end(&mut all).unwrap();
    let text = String::from_utf8_lossy(&all);
    assert_eq!(text.matches("HTTP/1.1 200 OK").count(), 2, "{text}");
    assert!(text.contains("\"candidates\""), "{text}");
    assert!(text.contains("\"status\""), "{text}");
}

#[test]
fn a_request_line_sent_byte_by_byte_is_cut_at_the_header_deadline() {
    // header_read_timeout is 2 s in the test daemons; one byte every
    // 250 ms would take 25 s for this line.
    let daemon = daemon();
    let line = format!("GET /health?{} HTTP/1.1\r\n", "a".repeat(80));
    let mut stream = TcpStream::connect(daemon.addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_millis(250)))
        .unwrap();
    let mut sent = 0;
    let mut answer = Vec::new();
    for byte in line.bytes() {
        if stream.write_all(&[byte]).is_err() {
            break;
        }
        sent += 1;
        let mut buf = [0u8; 1024];
        match stream.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => answer.extend_from_slice(&buf[..n]),
            Err(err) if err.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(err) if err.kind() == std::io::ErrorKind::TimedOut => {}
            Err(_) => break,
        }
    }
    assert!(sent < line.len(), "the whole line got through");
    let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
    let _ = stream.read_to_end(&mut answer);
    let text = String::from_utf8_lossy(&answer);
    assert!(text.starts_with("HTTP/1.1 408 "), "{text}");
    assert!(text.contains("server.header_read_timeout"), "{text}");
}

/// Sends a head declaring a 100-byte body, then 10 bytes, then nothing.
fn stall(daemon: &Daemon, path: &str) -> support::Response {
    let mut stream = TcpStream::connect(daemon.addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    write!(
        stream,
        "POST {path} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n\
         Content-Length: 100\r\n\r\n{{\"task\": "
    )
    .unwrap();
    let mut all = Vec::new();
    let _ = stream.read_to_end(&mut all);
    let head_end = all
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or_else(|| panic!("{path}: no answer: {}", String::from_utf8_lossy(&all)));
    let head = String::from_utf8_lossy(&all[..head_end]).to_string();
    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
    support::Response {
        status,
        headers: Vec::new(),
        body: all[head_end + 4..].to_vec(),
    }
}

#[test]
fn a_stalled_request_body_is_a_json_408() {
    let daemon = daemon();
    for path in ["/v1/discover", "/api/chat", "/v1/tools", "/v1/responses"] {
        let response = stall(&daemon, path);
        assert_eq!(
            response.status,
            408,
            "{path}: {}",
            String::from_utf8_lossy(&response.body)
        );
        let body = response.json();
        let error = body["error"]
            .as_str()
            .or_else(|| body["error"]["message"].as_str())
            .unwrap_or_else(|| panic!("{path}: {body}"));
        assert!(error.contains("body stalled"), "{path}: {error}");
        assert!(error.contains("9 of 100 bytes"), "{path}: {error}");
    }
    let openai = stall(&daemon, "/v1/chat/completions");
    assert_eq!(openai.status, 408);
    let message = openai.json()["error"]["message"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(message.contains("body stalled"), "{message}");
    assert_eq!(daemon.get("/health").status, 200);
}

//! The first request head of every connection, read by oapd before hyper
//! sees the connection.
//!
//! Two reasons. The header-read deadline starts at accept and covers the
//! request line too, so a client that trickles a request line byte by byte
//! holds its connection for `server.header_read_timeout` at most. And a
//! malformed head, a request target over [`MAX_URI_BYTES`] or a head over
//! [`MAX_HEAD_BYTES`] gets a JSON error (400, 414, 431) like every other
//! error of the daemon, where hyper would answer with an empty body.
//!
//! A complete head is handed to hyper unchanged through [`Prefixed`], which
//! replays the bytes already read. Follow-up requests on a keep-alive
//! connection are parsed by hyper alone (its own header timeout and buffer
//! cap apply; its errors there have empty bodies).

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Buf, BufMut, Bytes};
use hyper::StatusCode;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::time::Instant;

/// The largest request head (request line and headers), as hyper's buffer.
pub const MAX_HEAD_BYTES: usize = 64 * 1024;
/// The longest request target. oapd's paths are short; Ollama's API takes
/// its arguments in bodies.
pub const MAX_URI_BYTES: usize = 8 * 1024;
/// Header fields per request, as hyper's default.
pub const MAX_HEADERS: usize = 100;
/// Empty lines tolerated before the request line (RFC 9112 §2.2 asks for one).
const MAX_LEADING_EMPTY_LINES: usize = 8;

/// Why a head was refused: the status and the message of its JSON error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    /// The status the client gets (400, 414, 431, ...).
    pub status: StatusCode,
    /// The text of the JSON `error` field.
    pub message: String,
}

impl Refused {
    fn new(status: StatusCode, message: impl Into<String>) -> Self {
        Refused {
            status,
            message: message.into(),
        }
    }
}

/// What reading the first head gave.
#[derive(Debug)]
pub enum Head {
    /// A complete head (and whatever followed it), to replay to hyper.
    Complete(Bytes),
    /// The client sent nothing before closing or before the deadline.
    Closed,
    /// Answer this error and close.
    Refused(Refused),
}

/// Reads until the head is complete, refused, or `deadline` passes.
/// `timeout` is only named in the error message.
pub async fn read_first<S: AsyncRead + Unpin>(
    stream: &mut S,
    deadline: Instant,
    timeout: Duration,
) -> Head {
    let mut buf: Vec<u8> = Vec::with_capacity(2048);
    let mut seen_newline = false;
    loop {
        let room = MAX_HEAD_BYTES - buf.len();
        let before = buf.len();
        let read = {
            let mut limited = (&mut buf).limit(room);
            tokio::time::timeout_at(deadline, stream.read_buf(&mut limited)).await
        };
        match read {
            Err(_) if buf.is_empty() => return Head::Closed,
            Err(_) => {
                return Head::Refused(Refused::new(
                    StatusCode::REQUEST_TIMEOUT,
                    format!(
                        "the request head (request line and headers) was not received within {} s \
                         (server.header_read_timeout)",
                        timeout.as_secs()
                    ),
                ))
            }
            Ok(Err(_)) => return Head::Closed,
            Ok(Ok(0)) if buf.is_empty() => return Head::Closed,
            Ok(Ok(0)) => {
                return Head::Refused(match inspect(&buf) {
                    Err(refused) => refused,
                    Ok(_) => Refused::new(
                        StatusCode::BAD_REQUEST,
                        "the connection was closed before the request head was complete",
                    ),
                })
            }
            Ok(Ok(_)) => {}
        }
        let fresh_newline = buf[before..].contains(&b'\n');
        // Parsing again only when a line ends keeps the work per head
        // bounded: a head has at most MAX_HEADERS + 1 lines before it is
        // refused, however slowly it arrives.
        if fresh_newline || (!seen_newline && buf.len() > MAX_URI_BYTES + 32) {
            seen_newline |= fresh_newline;
            match inspect(&buf) {
                Ok(true) => return Head::Complete(Bytes::from(buf)),
                Ok(false) => {}
                Err(refused) => return Head::Refused(refused),
            }
        }
        if buf.len() >= MAX_HEAD_BYTES {
            return Head::Refused(Refused::new(
                StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
                format!("the request head is larger than {MAX_HEAD_BYTES} bytes"),
            ));
        }
    }
}

/// Whether `buf` holds a complete, acceptable request head (`Ok(false)`:
/// not yet complete).
pub fn inspect(buf: &[u8]) -> Result<bool, Refused> {
    let mut rest = buf;
    let mut empty_lines = 0;
    loop {
        match rest {
            [b'\r', b'\n', tail @ ..] | [b'\n', tail @ ..] => {
                rest = tail;
                empty_lines += 1;
            }
            [b'\r'] | [] => return Ok(false),
            _ => break,
        }
        if empty_lines > MAX_LEADING_EMPTY_LINES {
            return Err(Refused::new(
                StatusCode::BAD_REQUEST,
                "malformed request: empty lines instead of a request line",
            ));
        }
    }
    let line_end = rest.iter().position(|b| *b == b'\n');
    let line = &rest[..line_end.unwrap_or(rest.len())];
    let target = line.split(|b| *b == b' ').nth(1).unwrap_or_default();
    if target.len() > MAX_URI_BYTES || (line_end.is_none() && line.len() > MAX_URI_BYTES + 32) {
        return Err(Refused::new(
            StatusCode::URI_TOO_LONG,
            format!("the request target (URI) is longer than {MAX_URI_BYTES} bytes"),
        ));
    }
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut request = httparse::Request::new(&mut headers);
    match request.parse(rest) {
        Ok(httparse::Status::Partial) => Ok(false),
        Ok(httparse::Status::Complete(_)) => check_parsed(&request).map(|()| true),
        Err(httparse::Error::TooManyHeaders) => Err(Refused::new(
            StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            format!("the request has more than {MAX_HEADERS} header fields"),
        )),
        Err(err) => Err(Refused::new(
            StatusCode::BAD_REQUEST,
            match err {
                httparse::Error::Token => {
                    "malformed request line: invalid method or request target".to_owned()
                }
                httparse::Error::Version => {
                    "malformed request line: the version is not HTTP/1.0 or HTTP/1.1".to_owned()
                }
                httparse::Error::HeaderName => "malformed header: invalid header name".to_owned(),
                httparse::Error::HeaderValue => "malformed header: invalid header value".to_owned(),
                httparse::Error::NewLine => "malformed request: invalid line ending".to_owned(),
                other => format!("malformed request: {other}"),
            },
        )),
    }
}

/// What hyper would refuse with an empty 400 after parsing: a target that
/// is not a URI, a bad Content-Length, a Transfer-Encoding not ending in
/// chunked.
fn check_parsed(request: &httparse::Request<'_, '_>) -> Result<(), Refused> {
    let bad = |message: String| Err(Refused::new(StatusCode::BAD_REQUEST, message));
    let target = request.path.unwrap_or_default();
    if target.parse::<hyper::Uri>().is_err() {
        return bad("malformed request line: the request target is not a valid URI".into());
    }
    let mut length: Option<&str> = None;
    for header in request.headers.iter() {
        let value = std::str::from_utf8(header.value).unwrap_or("\u{fffd}");
        if header.name.eq_ignore_ascii_case("content-length") {
            for item in value.split(',').map(str::trim) {
                let digits = !item.is_empty() && item.bytes().all(|b| b.is_ascii_digit());
                if !digits || item.parse::<u64>().is_err() || length.is_some_and(|l| l != item) {
                    return bad(format!("invalid Content-Length header: {value:?}"));
                }
                length = Some(item);
            }
        }
        if header.name.eq_ignore_ascii_case("transfer-encoding") {
            if request.version == Some(0) {
                return bad("Transfer-Encoding is not allowed in an HTTP/1.0 request".into());
            }
            let last = value.rsplit(',').next().unwrap_or_default().trim();
            if !last.eq_ignore_ascii_case("chunked") {
                return bad(format!(
                    "unsupported Transfer-Encoding {value:?} (the last coding must be chunked)"
                ));
            }
        }
    }
    Ok(())
}

/// A complete HTTP/1.1 error response with a JSON body, closing the
/// connection. It carries a fresh `x-request-id` like every other answer
/// (no client id is taken from a head that was refused unread).
pub fn error_response(status: StatusCode, message: &str) -> Vec<u8> {
    let body = serde_json::json!({ "error": message }).to_string();
    format!(
        "HTTP/1.1 {} {}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\
         x-request-id: {}\r\nconnection: close\r\n\r\n{body}",
        status.as_u16(),
        status.canonical_reason().unwrap_or(""),
        body.len(),
        crate::server::observe::new_request_id(),
    )
    .into_bytes()
}

/// Answers `refused` and closes: the answer is written (for a few seconds
/// at most), the sending side shut, and what the client still sends is read
/// and dropped for a moment, so the close does not reset the connection
/// before the client has read the answer.
pub async fn refuse<S: AsyncRead + AsyncWrite + Unpin>(stream: &mut S, refused: &Refused) {
    const WRITE: Duration = Duration::from_secs(5);
    const LINGER: Duration = Duration::from_secs(2);
    let response = error_response(refused.status, &refused.message);
    let written = tokio::time::timeout(WRITE, async {
        stream.write_all(&response).await?;
        stream.shutdown().await
    })
    .await;
    if !matches!(written, Ok(Ok(()))) {
        return;
    }
    let mut sink = [0u8; 4096];
    let until = Instant::now() + LINGER;
    let mut drained = 0usize;
    while drained < 1024 * 1024 {
        match tokio::time::timeout_at(until, stream.read(&mut sink)).await {
            Ok(Ok(n)) if n > 0 => drained += n,
            _ => break,
        }
    }
}

/// An IO that first yields `prefix`, then reads from `inner`; writes go to
/// `inner`.
pub struct Prefixed<S> {
    prefix: Bytes,
    inner: S,
}

impl<S> Prefixed<S> {
    /// Yields `prefix` (bytes already read from `inner`) before `inner`.
    pub fn new(prefix: Bytes, inner: S) -> Self {
        Prefixed { prefix, inner }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Prefixed<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if !this.prefix.is_empty() {
            let n = this.prefix.len().min(buf.remaining());
            buf.put_slice(&this.prefix[..n]);
            this.prefix.advance(n);
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut this.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Prefixed<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(buf: &[u8]) -> Option<u16> {
        inspect(buf).err().map(|r| r.status.as_u16())
    }

    #[test]
    fn complete_partial_and_malformed_heads() {
        assert_eq!(
            inspect(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n"),
            Ok(true)
        );
        assert_eq!(
            inspect(b"\r\nGET / HTTP/1.1\r\nHost: x\r\n\r\nbody"),
            Ok(true)
        );
        assert_eq!(inspect(b"GET /health HTTP/1.1\r\nHost: x\r\n"), Ok(false));
        assert_eq!(inspect(b"GET /hea"), Ok(false));
        assert_eq!(inspect(b"\r\n\r"), Ok(false));
        assert_eq!(status(b"GARBAGE\r\n"), Some(400));
        assert_eq!(status(b"GET / HTTP/2.0\r\n\r\n"), Some(400));
        assert_eq!(status(b"GET / HTTP/1.1\r\nBad Name: x\r\n\r\n"), Some(400));
        assert_eq!(status(&b"\r\n".repeat(20)), Some(400));
        assert_eq!(
            status(b"POST / HTTP/1.1\r\nContent-Length: 1x\r\n\r\n"),
            Some(400)
        );
        assert_eq!(
            status(b"POST / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n"),
            Some(400)
        );
        assert_eq!(
            inspect(b"POST / HTTP/1.1\r\nContent-Length: 5, 5\r\n\r\n"),
            Ok(true)
        );
        assert_eq!(
            status(b"POST / HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n"),
            Some(400)
        );
    }

    #[test]
    fn long_targets_and_many_headers() {
        let long = format!("GET /{} HTTP/1.1\r\n", "a".repeat(MAX_URI_BYTES));
        assert_eq!(status(long.as_bytes()), Some(414));
        let unfinished = format!("GET /{}", "a".repeat(MAX_URI_BYTES + 40));
        assert_eq!(status(unfinished.as_bytes()), Some(414));
        let mut many = String::from("GET / HTTP/1.1\r\n");
        for i in 0..=MAX_HEADERS {
            many.push_str(&format!("X-{i}: 1\r\n"));
        }
        many.push_str("\r\n");
        assert_eq!(status(many.as_bytes()), Some(431));
    }

    #[test]
    fn error_responses_are_json() {
        let raw = error_response(StatusCode::URI_TOO_LONG, "too \"long\"");
        let text = String::from_utf8(raw).unwrap();
        assert!(text.starts_with("HTTP/1.1 414 URI Too Long\r\n"), "{text}");
        let body = text.split("\r\n\r\n").nth(1).unwrap();
        let value: serde_json::Value = serde_json::from_str(body).unwrap();
        assert_eq!(value["error"], "too \"long\"");
        assert!(text.contains(&format!("content-length: {}\r\n", body.len())));
        let id = text
            .lines()
            .find_map(|line| line.strip_prefix("x-request-id: "))
            .expect("an id on a refused head");
        assert_eq!(id.len(), 16, "{id}");
        assert!(id.bytes().all(|b| b.is_ascii_hexdigit()), "{id}");
        let again = String::from_utf8(error_response(StatusCode::URI_TOO_LONG, "x")).unwrap();
        assert!(
            !again.contains(&format!("x-request-id: {id}\r\n")),
            "ids repeat"
        );
    }

    #[tokio::test]
    #[allow(
        clippy::disallowed_methods,
        reason = "a test reading 11 bytes it wrote"
    )]
    async fn the_prefix_is_replayed_before_the_stream() {
        let (mut client, server) = tokio::io::duplex(64);
        client.write_all(b" world").await.unwrap();
        drop(client);
        let mut io = Prefixed::new(Bytes::from_static(b"hello"), server);
        let mut all = String::new();
        io.read_to_string(&mut all).await.unwrap();
        assert_eq!(all, "hello world");
    }

    #[tokio::test]
    async fn a_head_sent_in_pieces_is_read_whole() {
        let (mut client, mut server) = tokio::io::duplex(1024);
        let writer = tokio::spawn(async move {
            for piece in [
                &b"GET /he"[..],
                b"alth HTTP/1.1\r\nHo",
                b"st: x\r\n\r\nrest",
            ] {
                client.write_all(piece).await.unwrap();
                tokio::task::yield_now().await;
            }
            client
        });
        let deadline = Instant::now() + Duration::from_secs(5);
        let head = read_first(&mut server, deadline, Duration::from_secs(5)).await;
        let _client = writer.await.unwrap();
        match head {
            Head::Complete(bytes) => assert!(bytes.starts_with(b"GET /health HTTP/1.1")),
            other => panic!("{other:?}"),
        }
    }

    #[tokio::test]
    async fn a_stalled_head_times_out_with_408_and_silence_with_nothing() {
        let (mut client, mut server) = tokio::io::duplex(1024);
        let deadline = Instant::now() + Duration::from_millis(50);
        assert!(matches!(
            read_first(&mut server, deadline, Duration::from_secs(1)).await,
            Head::Closed
        ));
        client.write_all(b"GET / HT").await.unwrap();
        let deadline = Instant::now() + Duration::from_millis(50);
        match read_first(&mut server, deadline, Duration::from_secs(1)).await {
            Head::Refused(refused) => assert_eq!(refused.status, StatusCode::REQUEST_TIMEOUT),
            other => panic!("{other:?}"),
        }
    }
}

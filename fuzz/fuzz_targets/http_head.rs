//! oapd's own reader of a connection's first request head
//! (`server::head`): the bytes a client sends, split into arbitrary pieces,
//! go through `read_first` over an in-memory stream; an accepted head goes
//! on, replayed by `Prefixed`, through hyper's HTTP/1 server and the Host
//! and Origin guard, as a real connection does.
//!
//! Input: the wire bytes, optionally followed by a line of three NULs and
//! the pieces' sizes (one byte each, used in turn; 0 is a read that finds
//! nothing yet). Without it the bytes come in one piece. An odd first size
//! byte makes the stream stall after the last byte instead of closing.
//!
//! Invariants: no panic; a refusal has a 4xx status and a message, and its
//! answer parses as an HTTP response with that status; the reader never
//! takes more than `MAX_HEAD_BYTES` from the stream; an accepted head is
//! one `inspect` accepts; everything ends in bounded (virtual) time.
//! Builds the whole daemon, so it is behind the `daemon` feature.
#![no_main]

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use http_body_util::{BodyExt, Full, Limited};
use hyper::body::{Bytes, Incoming};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::{TokioIo, TokioTimer};
use libfuzzer_sys::fuzz_target;
use oapd::harness::guard::{self, Inbound};
use oapd::harness::head::{self, Head, Prefixed, MAX_HEAD_BYTES};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// The client's bytes as a stream that hands them out in the given pieces;
/// what the server writes back is dropped.
struct Pieces<'a> {
    data: &'a [u8],
    sizes: &'a [u8],
    next_size: usize,
    /// Bytes handed out so far.
    taken: usize,
    /// Stall after the last byte instead of closing.
    stall: bool,
    /// Reads that found nothing yet: the reader is woken at once (a
    /// zero-size piece is a spurious wake-up, not the end).
    empty_reads: usize,
}

impl AsyncRead for Pieces<'_> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let rest = &this.data[this.taken..];
        if rest.is_empty() {
            return if this.stall {
                Poll::Pending
            } else {
                Poll::Ready(Ok(()))
            };
        }
        let size = match this.sizes.get(this.next_size % this.sizes.len().max(1)) {
            Some(&size) => usize::from(size),
            None => rest.len(),
        };
        this.next_size += 1;
        if size == 0 && this.empty_reads < 64 {
            this.empty_reads += 1;
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        let n = size.max(1).min(rest.len()).min(buf.remaining());
        buf.put_slice(&rest[..n]);
        this.taken += n;
        Poll::Ready(Ok(()))
    }
}

impl AsyncWrite for Pieces<'_> {
    fn poll_write(self: Pin<&mut Self>, _: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

/// The configured header deadline (`server.header_read_timeout`'s default).
const HEADER_TIMEOUT: Duration = Duration::from_secs(10);
/// Everything one input does must end within this much virtual time.
const BOUND: Duration = Duration::from_secs(120);

fn check_refusal(status: hyper::StatusCode, message: &str) {
    assert!(status.is_client_error(), "refused with {status}");
    assert!(!message.is_empty(), "refused with {status} and no message");
    let answer = head::error_response(status, message);
    let mut headers = [httparse::EMPTY_HEADER; 16];
    let mut parsed = httparse::Response::new(&mut headers);
    assert!(
        matches!(parsed.parse(&answer), Ok(httparse::Status::Complete(_))),
        "the refusal's answer does not parse"
    );
    assert_eq!(parsed.code, Some(status.as_u16()));
}

async fn one_connection(data: &[u8], sizes: &[u8], stall: bool) {
    let mut stream = Pieces {
        data,
        sizes,
        next_size: 0,
        taken: 0,
        stall,
        empty_reads: 0,
    };
    let deadline = tokio::time::Instant::now() + HEADER_TIMEOUT;
    let head = head::read_first(&mut stream, deadline, HEADER_TIMEOUT).await;
    assert!(
        stream.taken <= MAX_HEAD_BYTES,
        "read {} bytes of a head",
        stream.taken
    );
    assert!(tokio::time::Instant::now() <= deadline + Duration::from_millis(1));
    let prefix = match head {
        Head::Closed => return,
        Head::Refused(refused) => {
            check_refusal(refused.status, &refused.message);
            return;
        }
        Head::Complete(prefix) => prefix,
    };
    assert_eq!(head::inspect(&prefix), Ok(true), "accepted an incomplete head");
    let service = service_fn(|request: Request<Incoming>| async move {
        let (parts, body) = request.into_parts();
        let inbound = Inbound {
            version: parts.version,
            uri: &parts.uri,
            headers: &parts.headers,
        };
        let allowed = ["pi.example.org".to_owned()];
        let cors = ["https://app.example".to_owned()];
        if let Err(refusal) = guard::check(inbound, &allowed, &cors) {
            check_refusal(refusal.status(), &refusal.message());
        }
        // Read the body as a handler would (chunked, Content-Length).
        let _ = Limited::new(body, MAX_HEAD_BYTES).collect().await;
        Ok::<_, std::convert::Infallible>(Response::new(Full::new(Bytes::from_static(b"{}"))))
    });
    let connection = http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_TIMEOUT)
        .max_buf_size(MAX_HEAD_BYTES)
        .serve_connection(TokioIo::new(Prefixed::new(prefix, stream)), service);
    // A body that stalls has no deadline in hyper (the daemon's handlers
    // bring their own): bounded here.
    let _ = tokio::time::timeout(BOUND, connection).await;
}

fuzz_target!(|input: &[u8]| {
    let (data, sizes) = match input.windows(4).rposition(|w| w == b"\0\0\0\n") {
        Some(at) => (&input[..at], &input[at + 4..]),
        None => (input, &[][..]),
    };
    let stall = sizes.first().is_some_and(|first| first % 2 == 1);
    // A paused clock: deadlines pass at once when nothing else can run, so
    // a stalled stream costs no real time.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("a runtime");
    runtime.block_on(async {
        let began = tokio::time::Instant::now();
        one_connection(data, sizes, stall).await;
        assert!(began.elapsed() <= BOUND + HEADER_TIMEOUT, "took {:?}", began.elapsed());
    });
});

//! Notices stdio messages over the size cap.
//!
//! rmcp drops a line longer than its cap without buffering it (memory
//! stays bounded) and keeps the connection, which is right for noise but
//! leaves the call whose answer was dropped waiting for its deadline.
//! [`LineWatch`] sits between the child's stdout and rmcp, passes every
//! byte through unchanged and counts the lines that outgrow the cap, so a
//! call in flight can fail at once with the reason.

use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, ReadBuf};
use tokio::sync::watch;

/// A reader that counts its over-long lines into a watch channel.
pub(crate) struct LineWatch<R> {
    inner: R,
    max_line: usize,
    /// Bytes of the current line so far.
    line_len: usize,
    /// Whether the current line was already counted.
    counted: bool,
    oversized: watch::Sender<u64>,
}

impl<R> LineWatch<R> {
    /// Wraps `inner`; lines longer than `max_line` bytes (newline not
    /// counted) bump the returned receiver's value.
    pub(crate) fn new(inner: R, max_line: usize) -> (Self, watch::Receiver<u64>) {
        let (oversized, seen) = watch::channel(0);
        (
            Self {
                inner,
                max_line,
                line_len: 0,
                counted: false,
                oversized,
            },
            seen,
        )
    }

    fn scan(&mut self, mut bytes: &[u8]) {
        while !bytes.is_empty() {
            let (segment, newline) = match bytes.iter().position(|&b| b == b'\n') {
                Some(at) => (at, true),
                None => (bytes.len(), false),
            };
            self.line_len = self.line_len.saturating_add(segment);
            if self.line_len > self.max_line && !self.counted {
                self.counted = true;
                self.oversized.send_modify(|n| *n += 1);
            }
            if newline {
                self.line_len = 0;
                self.counted = false;
                bytes = bytes.get(segment + 1..).unwrap_or_default();
            } else {
                bytes = &[];
            }
        }
    }
}

impl<R: AsyncRead + Unpin> AsyncRead for LineWatch<R> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let polled = Pin::new(&mut this.inner).poll_read(cx, buf);
        if let Poll::Ready(Ok(())) = polled {
            this.scan(buf.filled().get(before..).unwrap_or_default());
        }
        polled
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::AsyncReadExt;

    use super::LineWatch;

    #[tokio::test]
    async fn counts_each_over_long_line_once_and_passes_every_byte() {
        let text = format!("short\n{}\nok\n{}", "x".repeat(25), "y".repeat(11));
        let (mut reader, seen) = LineWatch::new(text.as_bytes(), 10);
        let mut out = Vec::new();
        // Small reads split the long lines across calls.
        let mut chunk = [0u8; 4];
        loop {
            let n = reader.read(&mut chunk).await.unwrap();
            if n == 0 {
                break;
            }
            out.extend_from_slice(&chunk[..n]);
        }
        assert_eq!(out, text.as_bytes());
        assert_eq!(*seen.borrow(), 2);
    }

    #[tokio::test]
    async fn a_line_at_the_cap_is_not_counted() {
        let text = format!("{}\n", "z".repeat(10));
        let (mut reader, seen) = LineWatch::new(text.as_bytes(), 10);
        let mut out = [0u8; 64];
        let n = reader.read(&mut out).await.unwrap();
        assert_eq!(n, 11);
        assert_eq!(*seen.borrow(), 0);
    }
}

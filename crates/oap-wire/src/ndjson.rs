//! Incremental newline-delimited JSON framing.

/// Why a line could not be produced.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LineError {
    /// The peer sent a line (or an unterminated tail) longer than the limit;
    /// the line was not kept, so the framing is lost and the caller ends the stream.
    #[error("a line exceeds the {limit} byte limit")]
    TooLong {
        /// The decoder's limit, in bytes.
        limit: usize,
    },
}

/// Splits a byte stream into lines as chunks arrive, whatever the chunk
/// boundaries (a JSON object may be split across TCP reads, and one read
/// may hold several objects). Empty lines are skipped. A line longer than
/// the limit is an error, so a peer cannot make the proxy buffer without
/// bound.
#[derive(Debug)]
pub struct LineDecoder {
    buffer: Vec<u8>,
    limit: usize,
}

impl LineDecoder {
    /// A decoder refusing lines over `limit` bytes (newline excluded).
    pub fn new(limit: usize) -> Self {
        LineDecoder {
            buffer: Vec::new(),
            limit,
        }
    }

    /// Feeds bytes; returns the complete lines they finish (without the
    /// newline, a trailing `\r` removed).
    pub fn push(&mut self, bytes: &[u8]) -> Result<Vec<Vec<u8>>, LineError> {
        let mut lines = Vec::new();
        let mut rest = bytes;
        while let Some(pos) = rest.iter().position(|&b| b == b'\n') {
            if self.buffer.len() + pos > self.limit {
                return Err(LineError::TooLong { limit: self.limit });
            }
            self.buffer.extend_from_slice(&rest[..pos]);
            rest = &rest[pos + 1..];
            let mut line = std::mem::take(&mut self.buffer);
            if line.last() == Some(&b'\r') {
                line.pop();
            }
            if !line.iter().all(u8::is_ascii_whitespace) {
                lines.push(line);
            }
        }
        if self.buffer.len() + rest.len() > self.limit {
            return Err(LineError::TooLong { limit: self.limit });
        }
        self.buffer.extend_from_slice(rest);
        Ok(lines)
    }

    /// The unterminated last line at end of stream, if any (Ollama ends its
    /// streams with a newline, but a peer that does not must not lose data).
    pub fn finish(&mut self) -> Option<Vec<u8>> {
        let line = std::mem::take(&mut self.buffer);
        (!line.iter().all(u8::is_ascii_whitespace)).then_some(line)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_split_across_chunks_are_joined() {
        let mut d = LineDecoder::new(1024);
        assert!(d.push(b"{\"a\":").unwrap().is_empty());
        assert_eq!(
            d.push(b"1}\n{\"b\":2}\n{\"c\"").unwrap(),
            vec![b"{\"a\":1}".to_vec(), b"{\"b\":2}".to_vec()]
        );
        assert_eq!(
            d.push(b":3}\r\n\n  \n").unwrap(),
            vec![b"{\"c\":3}".to_vec()]
        );
        assert_eq!(d.finish(), None);
    }

    #[test]
    fn an_unterminated_last_line_is_returned_at_the_end() {
        let mut d = LineDecoder::new(1024);
        assert!(d.push(b"{\"done\":true}").unwrap().is_empty());
        assert_eq!(d.finish(), Some(b"{\"done\":true}".to_vec()));
    }

    #[test]
    fn overlong_lines_are_refused_with_or_without_a_newline() {
        let mut d = LineDecoder::new(8);
        assert_eq!(
            d.push(b"0123456789\n"),
            Err(LineError::TooLong { limit: 8 })
        );
        let mut d = LineDecoder::new(8);
        assert!(d.push(b"0123").is_ok());
        assert_eq!(d.push(b"456789"), Err(LineError::TooLong { limit: 8 }));
    }
}

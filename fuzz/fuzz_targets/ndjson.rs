//! NDJSON framing of a model's stream: the same bytes in any pieces give
//! the same lines; no line holds a newline or exceeds the cap; an overlong
//! line is refused whole or in pieces.
#![no_main]

use libfuzzer_sys::fuzz_target;
use oap_wire::{LineDecoder, LineError};

/// The first byte sets the line cap (x 8), the second the piece size; the
/// rest is the stream, so a recorded stream is a seed as it is.
struct Input {
    limit: u8,
    cuts: Vec<u16>,
    bytes: Vec<u8>,
}

fn decode(limit: usize, pieces: &[&[u8]]) -> Result<Vec<Vec<u8>>, LineError> {
    let mut d = LineDecoder::new(limit);
    let mut lines = Vec::new();
    for piece in pieces {
        lines.extend(d.push(piece)?);
    }
    lines.extend(d.finish());
    Ok(lines)
}

fuzz_target!(|data: &[u8]| {
    let [limit, stride, bytes @ ..] = data else {
        return;
    };
    let input = Input {
        limit: *limit,
        cuts: oap_fuzz::cuts(bytes.len(), *stride),
        bytes: bytes.to_vec(),
    };
    let limit = usize::from(input.limit) * 8;
    let whole = decode(limit, &[&input.bytes]);
    let pieces = oap_fuzz::split(&input.bytes, &input.cuts);
    let split = decode(limit, &pieces);
    // The model: lines of the whole input, the CR of a CRLF stripped
    // (an unterminated last line is returned as it is), blank ones skipped.
    let segments: Vec<&[u8]> = input.bytes.split(|&b| b == b'\n').collect();
    let last = segments.len() - 1;
    let expected: Vec<Vec<u8>> = segments
        .iter()
        .enumerate()
        .map(|(i, l)| {
            if i < last {
                l.strip_suffix(b"\r").unwrap_or(l)
            } else {
                l
            }
            .to_vec()
        })
        .filter(|l| !l.iter().all(u8::is_ascii_whitespace))
        .collect();
    let longest = input
        .bytes
        .split(|&b| b == b'\n')
        .map(<[u8]>::len)
        .max()
        .unwrap_or(0);
    if longest > limit {
        assert!(
            whole.is_err(),
            "a {longest}-byte line passed a {limit}-byte cap"
        );
        assert!(
            split.is_err(),
            "a {longest}-byte line passed a {limit}-byte cap in pieces"
        );
        return;
    }
    assert_eq!(whole.as_ref(), Ok(&expected));
    assert_eq!(split.as_ref(), Ok(&expected));
    for line in expected {
        assert!(line.len() <= limit && !line.contains(&b'\n'));
    }
});

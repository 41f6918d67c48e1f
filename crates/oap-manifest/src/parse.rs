//! Bytes -> validated [`Manifest`], with hard limits for untrusted input.

use serde_json::Value;

use crate::diag::{Diagnostic, Report};
use crate::model::Manifest;
use crate::validate::validate;

/// Largest manifest `parse` accepts. Real manifests are 1–10 KiB; the cap
/// bounds memory and CPU for crawled or hostile documents.
pub const MAX_MANIFEST_BYTES: usize = 64 * 1024;

/// Deepest `[`/`{` nesting `parse` accepts. Real manifests nest at most 5
/// levels; the cap is checked before JSON parsing, so deeply nested input is
/// refused cheaply with a located error instead of hitting serde_json's
/// recursion limit.
pub const MAX_JSON_DEPTH: usize = 32;

/// A manifest that passed validation, plus the warnings it produced.
#[derive(Debug, Clone, PartialEq)]
pub struct Parsed {
    /// The typed manifest (unknown fields kept in `extra`).
    pub manifest: Manifest,
    /// Warnings only (by construction there are no errors).
    pub warnings: Report,
}

/// Why a manifest was refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ManifestError {
    /// Input larger than [`MAX_MANIFEST_BYTES`].
    #[error("manifest is {size} bytes, over the {max}-byte limit")]
    TooLarge {
        /// Actual size in bytes.
        size: usize,
        /// The limit.
        max: usize,
    },
    /// Nesting deeper than [`MAX_JSON_DEPTH`].
    #[error("JSON nested deeper than {max} levels at line {line}, column {column}")]
    TooDeep {
        /// The limit.
        max: usize,
        /// 1-based line of the bracket that went too deep.
        line: usize,
        /// 1-based byte column of that bracket.
        column: usize,
    },
    /// Not well-formed JSON (or not UTF-8).
    #[error("invalid JSON at line {line}, column {column}: {message}")]
    Json {
        /// 1-based line (0 if the error is not tied to a position).
        line: usize,
        /// 1-based column.
        column: usize,
        /// serde_json's explanation, without its own position suffix.
        message: String,
    },
    /// Well-formed JSON that breaks the rules. The report holds every error
    /// and warning found, so a publisher can fix everything in one pass.
    #[error("{}", invalid_message(.0))]
    Invalid(Report),
}

fn invalid_message(report: &Report) -> String {
    let n = report.error_count();
    let mut s = format!(
        "invalid manifest: {n} error{}",
        if n == 1 { "" } else { "s" }
    );
    for d in report.errors() {
        s.push_str("\n  ");
        s.push_str(&d.to_string());
    }
    s
}

impl ManifestError {
    /// The error as a [`Report`], so a linter can print every failure kind
    /// the same way (`Invalid` returns its report; the others become one
    /// whole-document error).
    pub fn report(&self) -> Report {
        match self {
            ManifestError::Invalid(r) => r.clone(),
            other => Report {
                diagnostics: vec![Diagnostic::error("", other.to_string())],
            },
        }
    }
}

/// Parse and validate raw manifest bytes (UTF-8 JSON; a leading UTF-8 BOM is
/// tolerated with a warning).
///
/// Order of checks: size, nesting depth, JSON syntax, validation, typed
/// decoding. Any validation error refuses the whole document.
pub fn parse(bytes: &[u8]) -> Result<Parsed, ManifestError> {
    if bytes.len() > MAX_MANIFEST_BYTES {
        return Err(ManifestError::TooLarge {
            size: bytes.len(),
            max: MAX_MANIFEST_BYTES,
        });
    }
    let (body, had_bom) = match bytes.strip_prefix(b"\xEF\xBB\xBF") {
        Some(rest) => (rest, true),
        None => (bytes, false),
    };
    if let Some((line, column)) = find_too_deep(body, MAX_JSON_DEPTH) {
        return Err(ManifestError::TooDeep {
            max: MAX_JSON_DEPTH,
            line,
            column,
        });
    }
    let doc: Value = serde_json::from_slice(body).map_err(json_error)?;
    let mut parsed = parse_value(doc)?;
    if had_bom {
        parsed
            .warnings
            .diagnostics
            .insert(0, Diagnostic::warning("", "UTF-8 byte order mark ignored"));
    }
    Ok(parsed)
}

/// Validate and decode an already-parsed JSON value (e.g. one embedded in a
/// larger document). Size and depth limits are the caller's business here.
pub fn parse_value(doc: Value) -> Result<Parsed, ManifestError> {
    let report = validate(&doc);
    if report.has_errors() {
        return Err(ManifestError::Invalid(report));
    }
    match serde_json::from_value::<Manifest>(doc) {
        Ok(manifest) => Ok(Parsed {
            manifest,
            warnings: report.only_warnings(),
        }),
        // Validation is meant to reject everything decoding would; if the
        // two ever disagree, still refuse with a report rather than panic.
        Err(e) => {
            let mut report = report;
            report.push(Diagnostic::error(
                "",
                format!("could not decode manifest: {e}"),
            ));
            Err(ManifestError::Invalid(report))
        }
    }
}

fn json_error(e: serde_json::Error) -> ManifestError {
    let full = e.to_string();
    let suffix = format!(" at line {} column {}", e.line(), e.column());
    let message = full.strip_suffix(&suffix).unwrap_or(&full).to_string();
    ManifestError::Json {
        line: e.line(),
        column: e.column(),
        message,
    }
}

/// Position (1-based line, 1-based byte column) of the first `[` or `{` that
/// opens nesting level `max + 1`, ignoring brackets inside strings. Input that
/// is not valid JSON is scanned on a best-effort basis; serde_json reports
/// the syntax error afterwards.
pub(crate) fn find_too_deep(bytes: &[u8], max: usize) -> Option<(usize, usize)> {
    let mut depth = 0usize;
    let mut in_string = false;
    let mut escaped = false;
    let mut line = 1usize;
    let mut line_start = 0usize;
    for (i, &b) in bytes.iter().enumerate() {
        if b == b'\n' {
            line += 1;
            line_start = i + 1;
        }
        if in_string {
            if escaped {
                escaped = false;
            } else if b == b'\\' {
                escaped = true;
            } else if b == b'"' {
                in_string = false;
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                if depth > max {
                    return Some((line, i - line_start + 1));
                }
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn depth_scanner_ignores_strings() {
        let s = format!("{{\"a\": \"{}\"}}", "[".repeat(100));
        assert_eq!(find_too_deep(s.as_bytes(), 2), None);
        let s = "{\"a\": \"\\\"[[[[\"}";
        assert_eq!(find_too_deep(s.as_bytes(), 1), None);
        assert_eq!(find_too_deep(b"[[[]]]", 3), None);
        assert_eq!(find_too_deep(b"[[[[]]]]", 3), Some((1, 4)));
        assert_eq!(find_too_deep(b"{\n  \"a\": [\n   [1]]}", 2), Some((3, 4)));
    }
}

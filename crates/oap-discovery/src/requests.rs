//! Requests as rows: what people say when they want a capability, embedded
//! beside its description.
//!
//! A description says what a tool does in its publisher's words ("Count
//! lines, words, and characters in text"); people ask in theirs ("how many
//! words are in this"). A request row is one such request, embedded as a
//! row of the capability's document, so a request worded like it finds the
//! tool even when the description shares few of its words. Request rows
//! come from outside the manifest: shipped with the bundled tools, or
//! generated once per tool by the co-located language model and cached.
//! Either way they are data, not the publisher's text: they are checked
//! here (no control characters, capped in length and count), never shown
//! as the tool's own description, and never offered to a model as part of
//! its tool definition.

use std::fmt;

use crate::catalog::CatalogEntry;

/// At most this many request rows per capability.
pub const MAX_REQUEST_ROWS: usize = 8;

/// Longest request row, in bytes (cut on a char boundary): a spoken
/// request is a sentence; a longer text is not one.
pub const MAX_REQUEST_TEXT: usize = 200;

/// Gives the request rows of a catalog entry. Implementations decide by
/// what they know of the entry (its id, origin and content hash), so a
/// request written for one version of a manifest is not attached to a
/// changed one unless the provider means it to be.
pub trait RequestRows: Send + Sync + fmt::Debug {
    /// Requests for `entry`, best first; the engine keeps at most
    /// [`MAX_REQUEST_ROWS`] that pass [`accept`].
    fn requests(&self, entry: &CatalogEntry) -> Vec<String>;
}

/// The request as it is embedded, or `None` when it is refused: empty
/// after trimming, or holding a control character (a line break included:
/// a request row is one line). Longer ones are cut to
/// [`MAX_REQUEST_TEXT`] bytes.
pub fn accept(text: &str) -> Option<String> {
    let text = text.trim();
    if text.is_empty() || text.chars().any(char::is_control) {
        return None;
    }
    Some(crate::document::truncate_on_char_boundary(text, MAX_REQUEST_TEXT).to_string())
}

/// The accepted requests of `requests`, in order, without repeats, at most
/// [`MAX_REQUEST_ROWS`].
pub fn accepted(requests: Vec<String>) -> Vec<String> {
    let mut kept: Vec<String> = Vec::new();
    for request in requests {
        if kept.len() == MAX_REQUEST_ROWS {
            break;
        }
        if let Some(text) = accept(&request) {
            if !kept.contains(&text) {
                kept.push(text);
            }
        }
    }
    kept
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_and_blank_requests_are_refused() {
        assert_eq!(accept("  how many words  "), Some("how many words".into()));
        assert_eq!(accept("   "), None);
        assert_eq!(accept("count\nthe words"), None);
        assert_eq!(accept("count\u{1b}[31m words"), None);
        assert_eq!(accept("zero\u{0}width"), None);
    }

    #[test]
    fn long_requests_are_cut_and_the_count_is_capped() {
        let long = "ü".repeat(MAX_REQUEST_TEXT);
        let cut = accept(&long).unwrap_or_default();
        assert!(cut.len() <= MAX_REQUEST_TEXT && cut.chars().all(|c| c == 'ü'));
        let many: Vec<String> = (0..20).map(|i| format!("request {i}")).collect();
        let kept = accepted(many);
        assert_eq!(kept.len(), MAX_REQUEST_ROWS);
        assert_eq!(kept[0], "request 0");
    }

    #[test]
    fn repeats_are_kept_once() {
        let kept = accepted(vec!["a b".into(), " a b ".into(), "c d".into()]);
        assert_eq!(kept, vec!["a b".to_string(), "c d".to_string()]);
    }
}

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
//!
//! [`RequestTable`] is a provider read from a JSON file (manifest name →
//! requests) for the origins it names; [`RequestChain`] asks several
//! providers in turn (shipped rows first, generated ones after).

use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::de::{Deserializer, MapAccess, Visitor};

use crate::entry::CatalogEntry;

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
    Some(oap_manifest::clip_bytes(text, MAX_REQUEST_TEXT).to_string())
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

/// Largest requests file read: eight full rows for each of 10,000
/// manifests is about 17 MB of JSON.
pub const MAX_TABLE_BYTES: u64 = 64 * 1024 * 1024;

/// Which catalog entries a [`RequestTable`] gives rows to, by the kind of
/// their origin ([`crate::catalog::Origin::kind`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AppliesTo {
    /// Every entry whose manifest has a listed name, wherever it came from.
    AnyOrigin,
    /// Only entries whose origin kind is one of these (`bundled`, `dir`,
    /// `lan`, `crawl`, `snapshot`, `mcp`).
    OriginKinds(Vec<String>),
}

impl AppliesTo {
    fn admits(&self, kind: &str) -> bool {
        match self {
            AppliesTo::AnyOrigin => true,
            AppliesTo::OriginKinds(kinds) => kinds.iter().any(|k| k == kind),
        }
    }
}

/// Why a requests file cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum RequestTableError {
    /// The file could not be read.
    #[error("requests file {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why (missing, not a regular file, larger than the cap, ...).
        source: oap_store::StoreError,
    },
    /// The text is not a requests table, or one request would not be
    /// embedded as written.
    #[error("requests file {origin}: {problem}")]
    Format {
        /// The file, or what the bytes are.
        origin: String,
        /// What is wrong, naming the tool and request.
        problem: String,
    },
}

/// Request rows by manifest name, read from JSON: an object whose keys are
/// manifest `name`s and whose values are lists of requests, best first:
///
/// ```json
/// {"wc": ["how many words are in this: the cat sat on the mat", "..."]}
/// ```
///
/// The file is refused as a whole, with the tool and request named, when a
/// request would not be embedded as written (blank, holding a control
/// character, over [`MAX_REQUEST_TEXT`] bytes, past the
/// [`MAX_REQUEST_ROWS`]th, or a repeat) or a name is listed twice: a
/// request dropped silently is a mistake nobody sees.
#[derive(Debug, Clone)]
pub struct RequestTable {
    by_name: HashMap<String, Vec<String>>,
    applies_to: AppliesTo,
}

impl RequestTable {
    /// Reads a requests file (at most [`MAX_TABLE_BYTES`]).
    pub fn load(path: &Path, applies_to: AppliesTo) -> Result<RequestTable, RequestTableError> {
        let bytes = oap_store::read_capped(path, MAX_TABLE_BYTES).map_err(|source| {
            RequestTableError::Read {
                path: path.to_path_buf(),
                source,
            }
        })?;
        RequestTable::parse(&bytes, &path.display().to_string(), applies_to)
    }

    /// Parses a requests table; `origin` names it in errors.
    pub fn parse(
        bytes: &[u8],
        origin: &str,
        applies_to: AppliesTo,
    ) -> Result<RequestTable, RequestTableError> {
        let bad = |problem: String| RequestTableError::Format {
            origin: origin.to_string(),
            problem,
        };
        let mut deserializer = serde_json::Deserializer::from_slice(bytes);
        let entries = deserializer
            .deserialize_map(EntriesVisitor)
            .map_err(|err| {
                bad(format!(
                    "not an object of manifest names to request lists: {err}"
                ))
            })?;
        deserializer
            .end()
            .map_err(|err| bad(format!("text after the table: {err}")))?;
        let mut by_name = HashMap::with_capacity(entries.len());
        for (name, value) in entries {
            if name.trim().is_empty() {
                return Err(bad("a manifest name is empty".into()));
            }
            let serde_json::Value::Array(items) = value else {
                return Err(bad(format!("{name:?}: expected a list of requests")));
            };
            if items.len() > MAX_REQUEST_ROWS {
                return Err(bad(format!(
                    "{name:?}: {} requests, at most {MAX_REQUEST_ROWS} are kept",
                    items.len()
                )));
            }
            let mut requests: Vec<String> = Vec::with_capacity(items.len());
            for (n, item) in items.into_iter().enumerate() {
                let at = format!("{name:?} request {}", n + 1);
                let serde_json::Value::String(text) = item else {
                    return Err(bad(format!("{at}: expected a string")));
                };
                let Some(kept) = accept(&text) else {
                    return Err(bad(format!(
                        "{at}: blank or holding a control character (a request is one line)"
                    )));
                };
                if kept.len() < text.trim().len() {
                    return Err(bad(format!(
                        "{at}: {} bytes, over the {MAX_REQUEST_TEXT}-byte cap",
                        text.trim().len()
                    )));
                }
                if requests.contains(&kept) {
                    return Err(bad(format!("{at}: repeats an earlier request")));
                }
                requests.push(kept);
            }
            if by_name.insert(name.clone(), requests).is_some() {
                return Err(bad(format!("{name:?} is listed twice")));
            }
        }
        Ok(RequestTable {
            by_name,
            applies_to,
        })
    }

    /// The manifest names the table has requests for.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.by_name.keys().map(String::as_str)
    }

    /// The requests listed for a manifest name, whatever the origin.
    pub fn get(&self, name: &str) -> Option<&[String]> {
        self.by_name.get(name).map(Vec::as_slice)
    }
}

impl RequestRows for RequestTable {
    fn requests(&self, entry: &CatalogEntry) -> Vec<String> {
        // The origin first: decoding every crawled manifest for a table
        // that only serves the bundled ones would cost a rebuild for nothing.
        if !self.applies_to.admits(&entry.origin.kind) {
            return Vec::new();
        }
        match entry.manifest() {
            Ok(manifest) => self
                .by_name
                .get(&manifest.name)
                .cloned()
                .unwrap_or_default(),
            Err(_) => Vec::new(),
        }
    }
}

/// The top-level object's entries in file order, repeats kept, so that a
/// name listed twice is reported instead of the first list being dropped.
struct EntriesVisitor;

impl<'de> Visitor<'de> for EntriesVisitor {
    type Value = Vec<(String, serde_json::Value)>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut entries = Vec::new();
        while let Some(entry) = map.next_entry::<String, serde_json::Value>()? {
            entries.push(entry);
        }
        Ok(entries)
    }
}

/// Several providers asked in turn: an entry's requests are the first
/// provider's, then the next one's, and so on (repeats and the cap are
/// applied once, by [`accepted`]). The daemon puts its shipped rows before
/// the generated ones, so a tool that has both keeps the hand-written ones
/// when the cap cuts.
#[derive(Debug, Clone, Default)]
pub struct RequestChain {
    providers: Vec<Arc<dyn RequestRows>>,
}

impl RequestChain {
    /// An empty chain (no rows for anything).
    pub fn new() -> RequestChain {
        RequestChain::default()
    }

    /// Adds a provider after the ones already in the chain.
    #[must_use]
    pub fn then(mut self, provider: Arc<dyn RequestRows>) -> RequestChain {
        self.providers.push(provider);
        self
    }
}

impl RequestRows for RequestChain {
    fn requests(&self, entry: &CatalogEntry) -> Vec<String> {
        self.providers
            .iter()
            .flat_map(|provider| provider.requests(entry))
            .collect()
    }
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

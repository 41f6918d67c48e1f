//! The installed snapshot's request rows, attached to its tools the way
//! generated rows are: the builder's co-located model wrote them, keyed by
//! the builder's content hash, and the install maps them onto the ids its
//! tools get on this board. Reloaded at start and after every install.
//!
//! One [`SnapshotRows`] per daemon (held by [`super::Snapshots`]), shared by
//! its handler generations' engines: two daemons in one process never see
//! each other's rows.

use std::collections::HashMap;
use std::path::Path;
use std::sync::RwLock;

use oap_discovery::{CatalogEntry, RequestRows};

/// Requests by the board's catalog id of a snapshot tool.
#[derive(Debug, Default)]
pub struct SnapshotRows {
    pub(super) by_id: RwLock<HashMap<String, Vec<String>>>,
}

impl RequestRows for SnapshotRows {
    fn requests(&self, entry: &CatalogEntry) -> Vec<String> {
        self.by_id
            .read()
            .ok()
            .and_then(|map| map.get(&entry.id).cloned())
            .unwrap_or_default()
    }
}

/// The file inside a snapshot directory that maps the board's ids to the
/// rows (written by the install beside the `tools` directory: inside it,
/// the engine would take it for an envelope and report it unreadable).
pub(super) const ROWS_BY_ID_FILE: &str = "rows-by-id.json";

/// Largest rows-by-id file read (the builder's cache is capped alike).
const MAX_ROWS_BY_ID_BYTES: u64 = 64 << 20;

impl SnapshotRows {
    /// Loads the rows of the snapshot installed in `dir` (none when it has
    /// none, or when the file is unreadable: rows only help ranking).
    pub(super) fn load(&self, dir: &Path) {
        let path = dir.join(ROWS_BY_ID_FILE);
        let map = match oap_store::read_capped(&path, MAX_ROWS_BY_ID_BYTES) {
            Ok(bytes) => serde_json::from_slice(&bytes).unwrap_or_else(|err| {
                tracing::warn!(path = %path.display(), error = %err, "snapshot request rows unreadable, left out");
                HashMap::new()
            }),
            Err(err) if err.is_not_found() => HashMap::new(),
            Err(err) => {
                tracing::warn!(path = %path.display(), error = %err, "snapshot request rows unreadable, left out");
                HashMap::new()
            }
        };
        if let Ok(mut by_id) = self.by_id.write() {
            *by_id = map;
        }
    }

    /// No rows (no subscription).
    pub(super) fn clear(&self) {
        if let Ok(mut by_id) = self.by_id.write() {
            by_id.clear();
        }
    }
}

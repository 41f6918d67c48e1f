//! The generated requests on disk: one JSON file in the data directory,
//! keyed by the tool's content hash and the model that wrote them,
//! written with the store's durable atomic write and read back (checked
//! again) at start, so a restart asks the model nothing it asked before.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// The file's name in the data directory.
pub const FILE_NAME: &str = "generated-requests.json";

/// Format of the file; another version is read as empty (and rewritten).
const FORMAT: u32 = 1;

/// Tools kept at most. An entry is under 2 KB, so the file stays a few
/// megabytes even on a crawled catalog of thousands.
pub const MAX_ENTRIES: usize = 4096;

/// Largest file read: [`MAX_ENTRIES`] entries with room to spare.
const MAX_FILE_BYTES: u64 = 16 * 1024 * 1024;

/// Largest file a builder reads whole ([`Cache::load_all`]): a catalog of
/// a million tools at about 700 bytes an entry, with room to spare.
pub const MAX_BUILD_FILE_BYTES: u64 = 4 << 30;

/// An entry whose tool no catalog load has seen for this long is dropped:
/// the tool left the index (a crawled domain gone, an MCP server removed).
pub const RETAIN_UNSEEN_SECS: u64 = 14 * 24 * 3600;

/// The requests one model wrote for one version of one tool.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Entry {
    /// SHA-256 of the tool's document ([`oap_discovery::CatalogEntry::content_hash`]).
    pub content_hash: String,
    /// The model that wrote them: `name@digest`.
    pub model: String,
    /// The catalog id the tool had (for the status page).
    pub id: String,
    /// The accepted requests.
    pub requests: Vec<String>,
    /// When they were written, seconds since the Unix epoch.
    pub generated_unix: u64,
    /// When a catalog load last asked for them.
    pub last_seen_unix: u64,
}

#[derive(Debug, Serialize, Deserialize)]
struct File {
    format: u32,
    entries: Vec<Entry>,
}

/// The entries in memory.
#[derive(Debug, Default)]
pub struct Cache {
    /// By content hash, then by model key.
    entries: HashMap<String, HashMap<String, Entry>>,
}

/// Why the file was not read (it is then started afresh, never fatal).
#[derive(Debug, thiserror::Error)]
pub enum CacheError {
    /// Reading or writing the file failed.
    #[error("{0}")]
    Store(#[from] oap_store::StoreError),
    /// The file is not the JSON this daemon writes.
    #[error("{path} is not a generated-requests file: {source}")]
    Format {
        /// The file.
        path: PathBuf,
        /// What the parser said.
        source: serde_json::Error,
    },
    /// Serialising failed (never, for these types).
    #[error("cannot encode the generated requests: {0}")]
    Encode(serde_json::Error),
}

impl Cache {
    /// The cache file of `data_dir`.
    pub fn path(data_dir: &Path) -> PathBuf {
        data_dir.join(FILE_NAME)
    }

    /// Reads `path`; a missing file is an empty cache. Every request is
    /// checked again: the file is data like the answers it came from.
    pub fn load(path: &Path) -> Result<Cache, CacheError> {
        let mut cache = Cache::read(path, MAX_FILE_BYTES)?;
        cache.cap();
        Ok(cache)
    }

    /// Reads `path` as [`Cache::load`] does, checks included, but keeps
    /// every entry: a builder's file (`oapd requests generate`) covers a
    /// whole crawled catalog, far past the daemon's [`MAX_ENTRIES`].
    pub fn load_all(path: &Path) -> Result<Cache, CacheError> {
        Cache::read(path, MAX_BUILD_FILE_BYTES)
    }

    fn read(path: &Path, max_bytes: u64) -> Result<Cache, CacheError> {
        let bytes = match oap_store::read_capped(path, max_bytes) {
            Ok(bytes) => bytes,
            Err(err) if err.is_not_found() => return Ok(Cache::default()),
            Err(err) => return Err(err.into()),
        };
        let file: File = serde_json::from_slice(&bytes).map_err(|source| CacheError::Format {
            path: path.to_path_buf(),
            source,
        })?;
        let mut cache = Cache::default();
        if file.format != FORMAT {
            return Ok(cache);
        }
        for mut entry in file.entries {
            entry.requests = oap_discovery::requests::accepted(entry.requests);
            if !entry.requests.is_empty() {
                cache.insert(entry);
            }
        }
        Ok(cache)
    }

    /// Writes the cache to `path` atomically, after dropping what is
    /// unseen for too long and capping the count.
    pub fn save(&mut self, path: &Path, now_unix: u64) -> Result<(), CacheError> {
        self.drop_unseen(now_unix);
        self.cap();
        self.write(path)
    }

    /// Writes every entry to `path` atomically, neither dropping nor
    /// capping: the builder's file, which boards receive inside a signed
    /// snapshot rather than grow themselves.
    pub fn save_all(&self, path: &Path) -> Result<(), CacheError> {
        self.write(path)
    }

    fn write(&self, path: &Path) -> Result<(), CacheError> {
        let mut entries: Vec<Entry> = self
            .entries
            .values()
            .flat_map(|m| m.values())
            .cloned()
            .collect();
        entries.sort_by(|a, b| (&a.id, &a.model).cmp(&(&b.id, &b.model)));
        let bytes = serde_json::to_vec_pretty(&File {
            format: FORMAT,
            entries,
        })
        .map_err(CacheError::Encode)?;
        oap_store::write_atomic(path, &bytes)?;
        Ok(())
    }

    /// Adds or replaces the entry for its content hash and model.
    pub fn insert(&mut self, entry: Entry) {
        self.entries
            .entry(entry.content_hash.clone())
            .or_default()
            .insert(entry.model.clone(), entry);
    }

    /// The requests for a tool's version: `model`'s when it wrote some,
    /// else the newest any model wrote (served until `model` has written
    /// its own). Marks the entry seen at `now_unix`.
    pub fn lookup(
        &mut self,
        content_hash: &str,
        model: Option<&str>,
        now_unix: u64,
    ) -> Option<&Entry> {
        let by_model = self.entries.get_mut(content_hash)?;
        let key = match model.filter(|m| by_model.contains_key(*m)) {
            Some(model) => model.to_string(),
            None => by_model
                .values()
                .max_by_key(|e| (e.generated_unix, e.model.clone()))?
                .model
                .clone(),
        };
        let entry = by_model.get_mut(&key)?;
        entry.last_seen_unix = now_unix;
        Some(entry)
    }

    /// Whether `model` wrote requests for this version of a tool.
    pub fn has(&self, content_hash: &str, model: &str) -> bool {
        self.entries
            .get(content_hash)
            .is_some_and(|m| m.contains_key(model))
    }

    /// Every entry (for the status page).
    pub fn entries(&self) -> impl Iterator<Item = &Entry> {
        self.entries.values().flat_map(|m| m.values())
    }

    /// Model names of the entries, most entries first.
    pub fn model_names(&self) -> Vec<String> {
        let mut counts: HashMap<&str, usize> = HashMap::new();
        for entry in self.entries() {
            *counts
                .entry(super::ask::ModelId::name_of_key(&entry.model))
                .or_default() += 1;
        }
        let mut names: Vec<(&str, usize)> = counts.into_iter().collect();
        names.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
        names
            .into_iter()
            .map(|(name, _)| name.to_string())
            .collect()
    }

    /// Entries held.
    pub fn len(&self) -> usize {
        self.entries.values().map(HashMap::len).sum()
    }

    /// Whether no entry is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn drop_unseen(&mut self, now_unix: u64) {
        let oldest = now_unix.saturating_sub(RETAIN_UNSEEN_SECS);
        for by_model in self.entries.values_mut() {
            by_model.retain(|_, e| e.last_seen_unix >= oldest);
        }
        self.entries.retain(|_, m| !m.is_empty());
    }

    /// Past [`MAX_ENTRIES`], the entries seen longest ago go first.
    fn cap(&mut self) {
        let len = self.len();
        if len <= MAX_ENTRIES {
            return;
        }
        let mut seen: Vec<(u64, String, String)> = self
            .entries()
            .map(|e| (e.last_seen_unix, e.content_hash.clone(), e.model.clone()))
            .collect();
        seen.sort();
        for (_, hash, model) in seen.into_iter().take(len - MAX_ENTRIES) {
            if let Some(by_model) = self.entries.get_mut(&hash) {
                by_model.remove(&model);
            }
        }
        self.entries.retain(|_, m| !m.is_empty());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(hash: &str, model: &str, generated: u64, seen: u64) -> Entry {
        Entry {
            content_hash: hash.into(),
            model: model.into(),
            id: format!("local/{hash}"),
            requests: vec![format!("a request for {hash}")],
            generated_unix: generated,
            last_seen_unix: seen,
        }
    }

    #[test]
    fn a_saved_cache_loads_back_and_prefers_the_current_model() {
        let dir = tempfile::tempdir().unwrap();
        let path = Cache::path(dir.path());
        let mut cache = Cache::default();
        cache.insert(entry("h1", "a@1", 10, 100));
        cache.insert(entry("h1", "b@2", 20, 100));
        cache.save(&path, 100).unwrap();
        let mut loaded = Cache::load(&path).unwrap();
        assert_eq!(loaded.len(), 2);
        assert_eq!(loaded.lookup("h1", Some("a@1"), 101).unwrap().model, "a@1");
        // Unknown model: the newest rows serve until it writes its own.
        assert_eq!(loaded.lookup("h1", Some("c@3"), 101).unwrap().model, "b@2");
        assert_eq!(loaded.lookup("h1", None, 101).unwrap().model, "b@2");
        assert!(loaded.lookup("h2", None, 101).is_none());
    }

    #[test]
    fn unseen_entries_go_and_the_count_is_capped() {
        let dir = tempfile::tempdir().unwrap();
        let path = Cache::path(dir.path());
        let mut cache = Cache::default();
        let now = RETAIN_UNSEEN_SECS * 2;
        cache.insert(entry("old", "m", 1, 1));
        cache.insert(entry("new", "m", 1, now));
        cache.save(&path, now).unwrap();
        assert_eq!(Cache::load(&path).unwrap().len(), 1);
        let mut big = Cache::default();
        for i in 0..MAX_ENTRIES + 10 {
            big.insert(entry(&format!("h{i}"), "m", 1, i as u64));
        }
        big.save(&path, MAX_ENTRIES as u64).unwrap();
        let loaded = Cache::load(&path).unwrap();
        assert_eq!(loaded.len(), MAX_ENTRIES);
        assert!(!loaded.has("h0", "m") && loaded.has(&format!("h{}", MAX_ENTRIES + 9), "m"));
    }

    /// A builder's file over a big catalog keeps every entry, written and
    /// read back; the daemon's own load of it still caps.
    #[test]
    fn a_builders_file_keeps_every_entry_past_the_daemons_cap() {
        let dir = tempfile::tempdir().unwrap();
        let path = Cache::path(dir.path());
        let mut big = Cache::default();
        for i in 0..MAX_ENTRIES + 10 {
            big.insert(entry(&format!("h{i}"), "m", 1, 1));
        }
        big.save_all(&path).unwrap();
        let all = Cache::load_all(&path).unwrap();
        assert_eq!(all.len(), MAX_ENTRIES + 10);
        assert!(all.has("h0", "m"));
        assert_eq!(Cache::load(&path).unwrap().len(), MAX_ENTRIES);
    }

    #[test]
    fn a_tampered_file_is_checked_again_or_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = Cache::path(dir.path());
        let mut bad = entry("h", "m", 1, 1);
        bad.requests = vec!["ok one".into(), "evil\u{1b}[2J".into()];
        std::fs::write(
            &path,
            serde_json::to_vec(&serde_json::json!({"format": 1, "entries": [bad]})).unwrap(),
        )
        .unwrap();
        let mut loaded = Cache::load(&path).unwrap();
        assert_eq!(
            loaded.lookup("h", None, 1).unwrap().requests,
            vec!["ok one"]
        );
        std::fs::write(&path, b"{not json").unwrap();
        assert!(matches!(Cache::load(&path), Err(CacheError::Format { .. })));
    }
}

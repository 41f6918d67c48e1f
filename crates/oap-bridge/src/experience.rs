//! The experience cache ("procedural memory"): when one of oapd's tools
//! succeeds for a task, remember the task's embedding, the manifest and the
//! shape of the arguments (keys and JSON types, never values). A later task
//! that is the same text, or close enough in embedding space, skips
//! retrieval and gets that tool injected directly.
//!
//! Deliberately unlike the OAP reference implementation's procedural memory
//! (whose entry ids include the date, so a daily task never repeats):
//! - an entry's id is a hash of the normalised task text and the manifest
//!   id — no date — so a task asked every day keeps hitting one entry;
//! - the first success makes an entry usable (no "confirmed twice" rule);
//! - confidence halves on a failure (the entry stops being used below
//!   [`MIN_CONFIDENCE`]) and recovers on the next success, whether that
//!   success came through the cache or through fresh discovery;
//! - an entry whose manifest is gone from the index, or whose manifest
//!   content changed (content hash), is dropped when it would be used;
//! - entries expire (`experience.ttl`, refreshed on success), the number of
//!   entries is bounded (`experience.max_entries`, least recently used go
//!   first), and vectors from another embedding model are never compared.
//!
//! The cache core ([`Cache`]) is pure and takes the time as an argument so
//! its rules are unit-tested without sleeping; [`Experience`] adds the
//! engine, the locking and the atomic persistence in the state directory.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use oap_discovery::{Engine, StoredRecord};
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

use crate::context::{InjectedTool, ResultHook};
use crate::settings::ExperienceConfig;
use crate::state;

/// File name of the cache inside `index.data_dir`.
pub const STORE_FILE: &str = "experience.json";
/// Below this confidence an entry is kept (it may recover) but not used.
pub const MIN_CONFIDENCE: f32 = 0.5;
/// Confidence of an entry after its first success.
pub const FIRST_CONFIDENCE: f32 = 0.75;
/// Bytes of the task text kept for inspection.
const MAX_TASK_BYTES: usize = 300;
/// Upper bound of the cache file (entries × a 384-float vector each).
const MAX_STORE_BYTES: u64 = 256 * 1024 * 1024;
/// Writes are coalesced: a burst of successes causes one write.
const FLUSH_DELAY: Duration = Duration::from_millis(200);

/// `experience:` settings.
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    /// Lowest cosine similarity at which another task's entry is reused.
    pub min_similarity: f32,
    /// Seconds an entry lives after its last success; each success renews it.
    pub ttl_secs: u64,
    /// Most entries kept; beyond it the least recently used are evicted.
    pub max_entries: usize,
}

/// One remembered success.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Entry {
    /// Derived from the normalised task and the manifest (see [`entry_id`]),
    /// so the same pair always updates the same entry.
    pub id: String,
    /// The task that first succeeded (clipped), for operators.
    pub task: String,
    /// Lower-cased, whitespace-collapsed task: repeats match without embedding.
    pub normalized: String,
    /// The manifest whose tool succeeded.
    pub manifest_id: String,
    /// Content hash of the manifest when it succeeded; a change drops the entry.
    pub content_hash: String,
    /// Argument names and their JSON types, e.g. `{"args": "string"}`.
    pub argument_shape: BTreeMap<String, String>,
    /// 0..=1; below [`MIN_CONFIDENCE`] the entry is kept but not served.
    pub confidence: f32,
    /// Successful executions recorded for this entry.
    pub successes: u32,
    /// Failed executions recorded for this entry; they lower the confidence.
    pub failures: u32,
    /// Times the entry was served instead of discovery.
    pub hits: u32,
    /// Unix seconds of the first success.
    pub created_at: u64,
    /// Unix seconds of the last success, failure or hit (eviction order).
    pub last_used: u64,
    /// Unix seconds after which the entry is neither served nor loaded.
    pub expires_at: u64,
    /// The task's embedding, compared by cosine for similar hits.
    pub embedding: Vec<f32>,
}

impl Entry {
    fn usable(&self, now: u64) -> bool {
        self.confidence >= MIN_CONFIDENCE && self.expires_at > now
    }

    /// The entry without its vector, as the API shows it.
    pub fn summary(&self) -> Value {
        json!({
            "id": self.id,
            "task": self.task,
            "manifest_id": self.manifest_id,
            "content_hash": self.content_hash,
            "argument_shape": self.argument_shape,
            "confidence": self.confidence,
            "usable": self.confidence >= MIN_CONFIDENCE,
            "successes": self.successes,
            "failures": self.failures,
            "hits": self.hits,
            "created_at": self.created_at,
            "last_used": self.last_used,
            "expires_at": self.expires_at,
            "embedding_dim": self.embedding.len(),
        })
    }
}

/// How a lookup was answered.
#[derive(Debug, Clone, PartialEq)]
pub enum Hit {
    /// The same task text.
    Exact(Entry),
    /// A task this close (cosine).
    Similar(Entry, f32),
}

impl Hit {
    /// The entry that answered, whichever way it matched.
    pub fn entry(&self) -> &Entry {
        match self {
            Hit::Exact(entry) | Hit::Similar(entry, _) => entry,
        }
    }
}

/// Lower case, single spaces, trimmed.
pub fn normalize(task: &str) -> String {
    task.split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .to_lowercase()
}

/// The entry id: the normalised task and the manifest, nothing else (no
/// date: a daily task must keep hitting the same entry).
pub fn entry_id(normalized: &str, manifest_id: &str) -> String {
    use sha2::{Digest, Sha256};
    let mut hasher = Sha256::new();
    hasher.update(manifest_id.as_bytes());
    hasher.update([0u8]);
    hasher.update(normalized.as_bytes());
    let digest = hasher.finalize();
    let hex: String = digest[..8].iter().map(|b| format!("{b:02x}")).collect();
    format!("exp_{hex}")
}

/// Keys and JSON types of arguments (values are never stored: they may be
/// private, and they are specific to one task).
pub fn argument_shape(arguments: &Map<String, Value>) -> BTreeMap<String, String> {
    arguments
        .iter()
        .take(64)
        .map(|(key, value)| {
            let kind = match value {
                Value::Null => "null",
                Value::Bool(_) => "boolean",
                Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
                Value::Number(_) => "number",
                Value::String(_) => "string",
                Value::Array(_) => "array",
                Value::Object(_) => "object",
            };
            (key.chars().take(64).collect(), kind.to_string())
        })
        .collect()
}

/// The cache's entries and rules.
#[derive(Debug, Clone)]
pub struct Cache {
    /// The rules the cache applies; read on every lookup and record.
    pub settings: Settings,
    entries: Vec<Entry>,
}

impl Cache {
    /// An empty cache.
    pub fn new(settings: Settings) -> Cache {
        Cache {
            settings,
            entries: Vec::new(),
        }
    }

    /// Loads entries, keeping only sound, unexpired ones of dimension `dim`.
    pub fn with_entries(settings: Settings, entries: Vec<Entry>, dim: usize, now: u64) -> Cache {
        let mut cache = Cache::new(settings);
        cache.entries = entries
            .into_iter()
            .filter(|e| {
                e.expires_at > now
                    && e.embedding.len() == dim
                    && e.embedding.iter().all(|x| x.is_finite())
                    && e.confidence.is_finite()
            })
            .collect();
        cache.evict();
        cache
    }

    /// All entries, usable or not, in storage order.
    pub fn entries(&self) -> &[Entry] {
        &self.entries
    }

    /// Number of entries, usable or not.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when the cache holds no entry.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The entry with this id (see [`entry_id`]).
    pub fn get(&self, id: &str) -> Option<&Entry> {
        self.entries.iter().find(|e| e.id == id)
    }

    /// Drops the entry with this id; false when there was none.
    pub fn remove(&mut self, id: &str) -> bool {
        let before = self.entries.len();
        self.entries.retain(|e| e.id != id);
        self.entries.len() != before
    }

    /// Drops every entry; returns how many there were.
    pub fn clear(&mut self) -> usize {
        let n = self.entries.len();
        self.entries.clear();
        n
    }

    fn expire(&mut self, now: u64) {
        self.entries.retain(|e| e.expires_at > now);
    }

    /// The best usable entry for the exact task text, if any.
    pub fn lookup_exact(&mut self, normalized: &str, now: u64) -> Option<Hit> {
        self.expire(now);
        let best = self
            .entries
            .iter_mut()
            .filter(|e| e.usable(now) && e.normalized == normalized)
            .max_by(|a, b| a.confidence.total_cmp(&b.confidence))?;
        best.hits += 1;
        best.last_used = now;
        Some(Hit::Exact(best.clone()))
    }

    /// The usable entry most similar to `vector`, if at least `min_similarity`.
    pub fn lookup_similar(&mut self, vector: &[f32], now: u64) -> Option<Hit> {
        self.expire(now);
        let min = self.settings.min_similarity;
        let (best, similarity) = self
            .entries
            .iter_mut()
            .filter(|e| e.usable(now) && e.embedding.len() == vector.len())
            .map(|e| {
                let similarity = oap_embed::cosine(&e.embedding, vector);
                (e, similarity)
            })
            .filter(|(_, s)| *s >= min)
            .max_by(|a, b| a.1.total_cmp(&b.1))?;
        best.hits += 1;
        best.last_used = now;
        Some(Hit::Similar(best.clone(), similarity))
    }

    /// Entries for `manifest_id` that this task is: the hit entry, the
    /// same text, or a task at least `min_similarity` close.
    fn matching(&self, task: &Observed, manifest_id: &str) -> Vec<usize> {
        self.entries
            .iter()
            .enumerate()
            .filter(|(_, e)| e.manifest_id == manifest_id)
            .filter(|(_, e)| {
                task.hit.as_deref() == Some(e.id.as_str())
                    || e.normalized == task.normalized
                    || task.vector.as_deref().is_some_and(|v| {
                        v.len() == e.embedding.len()
                            && oap_embed::cosine(&e.embedding, v) >= self.settings.min_similarity
                    })
            })
            .map(|(i, _)| i)
            .collect()
    }

    /// A tool succeeded for the task: strengthen the entries it matches,
    /// or remember a new one (needs the task's vector).
    pub fn record_success(
        &mut self,
        task: &Observed,
        manifest_id: &str,
        content_hash: &str,
        shape: BTreeMap<String, String>,
        now: u64,
    ) {
        let ttl = self.settings.ttl_secs;
        let matching = self.matching(task, manifest_id);
        if matching.is_empty() {
            let Some(vector) = task.vector.as_deref() else {
                return;
            };
            self.entries.push(Entry {
                id: entry_id(&task.normalized, manifest_id),
                task: oap_manifest::clip_bytes(&task.text, MAX_TASK_BYTES).to_string(),
                normalized: task.normalized.clone(),
                manifest_id: manifest_id.to_string(),
                content_hash: content_hash.to_string(),
                argument_shape: shape,
                confidence: FIRST_CONFIDENCE,
                successes: 1,
                failures: 0,
                hits: 0,
                created_at: now,
                last_used: now,
                expires_at: now.saturating_add(ttl),
                embedding: vector.to_vec(),
            });
            self.evict();
            return;
        }
        for i in matching {
            let entry = &mut self.entries[i];
            entry.successes = entry.successes.saturating_add(1);
            entry.confidence += (1.0 - entry.confidence) * 0.5;
            entry.content_hash = content_hash.to_string();
            entry.argument_shape = shape.clone();
            entry.last_used = now;
            entry.expires_at = now.saturating_add(ttl);
        }
    }

    /// A tool failed for the task: halve the confidence of matching entries.
    pub fn record_failure(&mut self, task: &Observed, manifest_id: &str, now: u64) {
        for i in self.matching(task, manifest_id) {
            let entry = &mut self.entries[i];
            entry.failures = entry.failures.saturating_add(1);
            entry.confidence *= 0.5;
            entry.last_used = now;
        }
    }

    /// Least recently used entries go first beyond `max_entries`.
    fn evict(&mut self) {
        let max = self.settings.max_entries;
        if self.entries.len() > max {
            self.entries
                .sort_by_key(|e| std::cmp::Reverse((e.last_used, e.created_at)));
            self.entries.truncate(max);
        }
    }
}

/// What is known about the task of one request, for recording outcomes.
#[derive(Debug, Clone)]
pub struct Observed {
    /// The task as the request gave it.
    pub text: String,
    /// The task lower-cased and whitespace-collapsed: the exact-match key.
    pub normalized: String,
    /// The task's embedding; `None` when the exact match made it unnecessary
    /// or embedding failed (then no similar match is recorded).
    pub vector: Option<Arc<Vec<f32>>>,
    /// The entry that was served, on a hit.
    pub hit: Option<String>,
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct StoreFile {
    version: u32,
    /// The embedding model the vectors come from.
    model_id: String,
    entries: Vec<Entry>,
}

/// Lookup counters since start.
#[derive(Debug, Default, Clone, Copy, Serialize)]
pub struct Counters {
    /// Lookups asked for, hit or miss.
    pub lookups: u64,
    /// Lookups answered by an entry of the same task text.
    pub exact_hits: u64,
    /// Lookups answered by a similar task's entry.
    pub similar_hits: u64,
    /// Entries dropped at lookup because their manifest was gone or changed.
    pub stale_dropped: u64,
}

struct Inner {
    cache: Cache,
    counters: Counters,
}

/// The daemon's experience cache.
pub struct Experience {
    engine: Arc<Engine>,
    model_id: String,
    path: PathBuf,
    inner: Mutex<Inner>,
    dirty: Arc<tokio::sync::Notify>,
}

/// The result of asking the cache for a task's tools.
pub struct Lookup {
    /// The entry to serve instead of discovery; `None` on a miss.
    pub hit: Option<Hit>,
    /// The task, kept to record the outcome of the tools it leads to.
    pub observed: Observed,
}

impl Experience {
    /// The cache for `config`, or `None` when disabled or when there is no
    /// embedding model (without vectors only exact repeats could hit; the
    /// cache is off rather than half-working).
    /// The file lives in `data_dir` (`index.data_dir`).
    pub fn open(
        ex: &ExperienceConfig,
        data_dir: &Path,
        engine: Arc<Engine>,
    ) -> Option<Arc<Experience>> {
        if !ex.enabled {
            return None;
        }
        let Some(model_id) = engine.model_id().map(str::to_string) else {
            tracing::warn!("experience cache disabled: no embedding model is loaded");
            return None;
        };
        let settings = Settings {
            min_similarity: ex.min_similarity,
            ttl_secs: ex.ttl,
            max_entries: ex.max_entries,
        };
        let path = data_dir.join(STORE_FILE);
        let dim = engine
            .query_vector("probe")
            .ok()
            .flatten()
            .map(|v| v.len())
            .unwrap_or(0);
        let entries = match state::read_json::<StoreFile>(&path, MAX_STORE_BYTES) {
            Ok(Some(file)) if file.model_id == model_id => file.entries,
            Ok(Some(_)) => {
                tracing::warn!(
                    "experience cache was built with another embedding model; starting empty"
                );
                Vec::new()
            }
            Ok(None) => Vec::new(),
            Err(err) => {
                tracing::error!(error = %err, "experience cache unreadable; starting empty");
                Vec::new()
            }
        };
        let cache = Cache::with_entries(settings, entries, dim, state::unix_now());
        tracing::info!(entries = cache.len(), "experience cache loaded");
        let experience = Arc::new(Experience {
            engine,
            model_id,
            path,
            inner: Mutex::new(Inner {
                cache,
                counters: Counters::default(),
            }),
            dirty: Arc::new(tokio::sync::Notify::new()),
        });
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            // The flusher holds only a weak reference: it ends with the cache.
            let weak = Arc::downgrade(&experience);
            let dirty = experience.dirty.clone();
            handle.spawn(async move {
                loop {
                    dirty.notified().await;
                    tokio::time::sleep(FLUSH_DELAY).await;
                    let Some(experience) = weak.upgrade() else {
                        return;
                    };
                    let _ = tokio::task::spawn_blocking(move || experience.persist()).await;
                }
            });
        }
        Some(experience)
    }

    /// The cache file in the data directory (for logs and the API).
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Writes the cache now (atomically).
    pub fn persist(&self) {
        let file = {
            let inner = self.lock();
            StoreFile {
                version: 1,
                model_id: self.model_id.clone(),
                entries: inner.cache.entries().to_vec(),
            }
        };
        if let Err(err) = state::write_json_atomic(&self.path, &file) {
            tracing::error!(error = %err, "cannot write the experience cache");
        }
    }

    fn changed(&self) {
        self.dirty.notify_one();
    }

    /// Looks `task` up; on a miss the task's vector is in `observed` for
    /// the discovery that follows (so it is embedded once). Blocking (it
    /// may embed): call from `spawn_blocking`.
    pub fn lookup(&self, task: &str) -> Lookup {
        let normalized = normalize(task);
        let mut observed = Observed {
            text: task.to_string(),
            normalized: normalized.clone(),
            vector: None,
            hit: None,
        };
        let now = state::unix_now();
        let exact = {
            let mut inner = self.lock();
            inner.counters.lookups += 1;
            inner.cache.lookup_exact(&normalized, now)
        };
        let mut hit = exact;
        if hit.is_none() {
            observed.vector = match self.engine.query_vector(task) {
                Ok(vector) => vector.map(Arc::new),
                Err(err) => {
                    tracing::warn!(error = %err, "cannot embed the task for the experience cache");
                    None
                }
            };
            if let Some(vector) = &observed.vector {
                hit = self.lock().cache.lookup_similar(vector, now);
            }
        }
        // An entry whose manifest is gone or changed is dropped, not used.
        if let Some(found) = &hit {
            let entry = found.entry();
            let current = self.engine.get(&entry.manifest_id);
            if current.as_ref().map(|r| r.content_hash.as_str()) != Some(&entry.content_hash) {
                tracing::info!(id = %entry.id, manifest = %entry.manifest_id,
                    "experience entry dropped: its manifest is gone or changed");
                let mut inner = self.lock();
                inner.cache.remove(&entry.id);
                inner.counters.stale_dropped += 1;
                drop(inner);
                self.changed();
                return self.lookup_after_drop(task, observed);
            }
        }
        if let Some(found) = &hit {
            let mut inner = self.lock();
            match found {
                Hit::Exact(_) => inner.counters.exact_hits += 1,
                Hit::Similar(..) => inner.counters.similar_hits += 1,
            }
            observed.hit = Some(found.entry().id.clone());
        }
        Lookup { hit, observed }
    }

    /// After dropping a stale entry: one more similarity lookup (bounded
    /// recursion is avoided by not checking staleness again — a second
    /// stale entry is simply a miss).
    fn lookup_after_drop(&self, task: &str, mut observed: Observed) -> Lookup {
        if observed.vector.is_none() {
            observed.vector = self.engine.query_vector(task).ok().flatten().map(Arc::new);
        }
        let now = state::unix_now();
        let hit = observed.vector.as_ref().and_then(|vector| {
            let mut inner = self.lock();
            let hit = inner.cache.lookup_similar(vector, now)?;
            let fresh = self
                .engine
                .get(&hit.entry().manifest_id)
                .is_some_and(|r| r.content_hash == hit.entry().content_hash);
            fresh.then(|| {
                inner.counters.similar_hits += 1;
                hit
            })
        });
        observed.hit = hit.as_ref().map(|h| h.entry().id.clone());
        Lookup { hit, observed }
    }

    /// A hook that teaches the cache the outcome of `record`'s tool for
    /// the observed task.
    pub fn hook(self: &Arc<Self>, observed: &Observed, record: &StoredRecord) -> ResultHook {
        let experience = Arc::downgrade(self);
        let observed = observed.clone();
        let manifest_id = record.id.clone();
        let content_hash = record.content_hash.clone();
        Arc::new(move |arguments: &Map<String, Value>, ok: bool| {
            let Some(experience) = experience.upgrade() else {
                return;
            };
            let now = state::unix_now();
            {
                let mut inner = experience.lock();
                if ok {
                    inner.cache.record_success(
                        &observed,
                        &manifest_id,
                        &content_hash,
                        argument_shape(arguments),
                        now,
                    );
                } else {
                    inner.cache.record_failure(&observed, &manifest_id, now);
                }
            }
            tracing::debug!(manifest = %manifest_id, ok, "experience recorded");
            experience.changed();
        })
    }

    /// The tools for a chat request: the cached tool on a hit (discovery
    /// skipped), else discovery with the already computed vector; every
    /// injected tool reports its outcome back here.
    pub async fn tools_for(
        self: &Arc<Self>,
        task: String,
        top_k: usize,
        reserved: Vec<String>,
    ) -> Vec<InjectedTool> {
        let experience = self.clone();
        let started = Instant::now();
        let found = tokio::task::spawn_blocking(move || {
            let lookup = experience.lookup(&task);
            if lookup.hit.is_some() {
                return (lookup, None);
            }
            let vector = lookup.observed.vector.as_deref().cloned();
            let discovery = experience.engine.discover_with_vector(&task, top_k, vector);
            (lookup, Some(discovery))
        })
        .await;
        let (lookup, discovery) = match found {
            Ok(found) => found,
            Err(err) => {
                tracing::error!(error = %err, "experience lookup task failed");
                return Vec::new();
            }
        };
        let mut tools = match (&lookup.hit, discovery) {
            (Some(hit), _) => {
                let entry = hit.entry();
                tracing::info!(id = %entry.id, manifest = %entry.manifest_id,
                    elapsed_us = started.elapsed().as_micros() as u64, "experience hit: discovery skipped");
                match self.engine.get(&entry.manifest_id) {
                    Some(record) => crate::tools::from_record(record, &reserved)
                        .into_iter()
                        .collect(),
                    None => Vec::new(),
                }
            }
            (None, Some(Ok(discovery))) => {
                crate::tools::from_discovery(&self.engine, &discovery, reserved)
            }
            (None, Some(Err(err))) => {
                tracing::warn!(error = %err, "discovery failed; no tools injected");
                Vec::new()
            }
            (None, None) => Vec::new(),
        };
        for tool in &mut tools {
            tool.on_result = Some(self.hook(&lookup.observed, &tool.record));
        }
        tools
    }

    /// `GET /v1/experience`: settings, counters and every entry.
    pub fn summary(&self) -> Value {
        let inner = self.lock();
        let entries: Vec<Value> = inner.cache.entries().iter().map(Entry::summary).collect();
        json!({
            "enabled": true,
            "min_similarity": inner.cache.settings.min_similarity,
            "ttl": inner.cache.settings.ttl_secs,
            "max_entries": inner.cache.settings.max_entries,
            "counters": inner.counters,
            "entries": entries,
        })
    }

    /// One entry's summary.
    pub fn entry(&self, id: &str) -> Option<Value> {
        self.lock().cache.get(id).map(Entry::summary)
    }

    /// Deletes every entry (written at once); returns how many.
    pub fn clear(&self) -> usize {
        let deleted = self.lock().cache.clear();
        self.persist();
        deleted
    }

    /// Deletes one entry (written at once); false when there is none.
    pub fn delete(&self, id: &str) -> bool {
        let removed = self.lock().cache.remove(id);
        if removed {
            self.persist();
        }
        removed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> Settings {
        Settings {
            min_similarity: 0.9,
            ttl_secs: 100,
            max_entries: 3,
        }
    }

    fn observed(text: &str, vector: &[f32], hit: Option<&str>) -> Observed {
        Observed {
            text: text.into(),
            normalized: normalize(text),
            vector: Some(Arc::new(vector.to_vec())),
            hit: hit.map(str::to_string),
        }
    }

    fn shape() -> BTreeMap<String, String> {
        argument_shape(
            json!({"args": "-w", "n": 3, "x": 1.5, "f": true})
                .as_object()
                .unwrap(),
        )
    }

    #[test]
    fn ids_carry_no_date_and_shapes_no_values() {
        assert_eq!(entry_id("count words", "wc"), entry_id("count words", "wc"));
        assert_ne!(
            entry_id("count words", "wc"),
            entry_id("count words", "grep")
        );
        assert_eq!(normalize("  Count   the WORDS "), "count the words");
        let shape = shape();
        assert_eq!(shape["args"], "string");
        assert_eq!(shape["n"], "integer");
        assert_eq!(shape["x"], "number");
        assert_eq!(shape["f"], "boolean");
        assert!(!serde_json::to_string(&shape).unwrap().contains("-w"));
    }

    #[test]
    fn a_success_is_usable_at_once_and_a_daily_repeat_hits_every_day() {
        let mut cache = Cache::new(settings());
        let task = observed("what is the weather today", &[1.0, 0.0], None);
        cache.record_success(&task, "weather", "h1", shape(), 0);
        for day in 0..10u64 {
            let now = day * 50;
            let hit = cache.lookup_exact(&normalize("What is the weather  today"), now);
            let hit = hit.expect("a daily task keeps hitting");
            // Each day's success refreshes the TTL (100 s here, 50 s apart).
            let task = observed(
                "what is the weather today",
                &[1.0, 0.0],
                Some(&hit.entry().id),
            );
            cache.record_success(&task, "weather", "h1", shape(), now);
        }
        assert_eq!(cache.len(), 1);
        assert_eq!(cache.entries()[0].successes, 11);
        assert_eq!(cache.entries()[0].hits, 10);
    }

    #[test]
    fn similarity_threshold_decides_a_hit() {
        let mut cache = Cache::new(settings());
        cache.record_success(
            &observed("count words", &[1.0, 0.0], None),
            "wc",
            "h",
            shape(),
            0,
        );
        let close = [0.95f32, 0.312_25];
        let far = [0.6f32, 0.8];
        match cache.lookup_similar(&close, 1) {
            Some(Hit::Similar(entry, similarity)) => {
                assert_eq!(entry.manifest_id, "wc");
                assert!(similarity >= 0.9);
            }
            other => panic!("expected a similar hit, got {other:?}"),
        }
        assert!(cache.lookup_similar(&far, 1).is_none());
        assert!(
            cache.lookup_similar(&[1.0, 0.0, 0.0], 1).is_none(),
            "other dimension"
        );
    }

    #[test]
    fn a_failure_stops_use_and_a_later_success_recovers() {
        let mut cache = Cache::new(settings());
        let task = observed("count words", &[1.0, 0.0], None);
        cache.record_success(&task, "wc", "h", shape(), 0);
        cache.record_failure(&task, "wc", 1);
        assert!(cache.entries()[0].confidence < MIN_CONFIDENCE);
        assert!(cache.lookup_exact("count words", 2).is_none());
        assert!(cache.lookup_similar(&[1.0, 0.0], 2).is_none());
        // Fresh discovery found the tool again and it worked: usable again.
        cache.record_success(&task, "wc", "h", shape(), 3);
        assert!(cache.entries()[0].confidence >= MIN_CONFIDENCE);
        assert!(cache.lookup_exact("count words", 4).is_some());
        // A failure of another manifest does not touch this entry.
        let before = cache.entries()[0].confidence;
        cache.record_failure(&task, "grep", 5);
        assert_eq!(cache.entries()[0].confidence, before);
    }

    #[test]
    fn entries_expire_and_the_least_recently_used_go_first() {
        let mut cache = Cache::new(settings());
        for (i, v) in [[1.0f32, 0.0], [0.0, 1.0], [-1.0, 0.0], [0.0, -1.0]]
            .iter()
            .enumerate()
        {
            cache.record_success(
                &observed(&format!("task {i}"), v, None),
                "m",
                "h",
                shape(),
                i as u64,
            );
        }
        assert_eq!(cache.len(), 3, "bounded");
        assert!(cache.lookup_exact("task 0", 10).is_none(), "oldest evicted");
        assert!(cache.lookup_exact("task 3", 10).is_some());
        assert!(cache.lookup_exact("task 3", 200).is_none(), "expired");
        assert!(cache.is_empty());
    }

    #[test]
    fn loading_drops_expired_foreign_and_corrupt_entries() {
        let mut cache = Cache::new(settings());
        cache.record_success(&observed("a", &[1.0, 0.0], None), "m", "h", shape(), 0);
        cache.record_success(&observed("b", &[0.0, 1.0], None), "m", "h", shape(), 50);
        let mut entries = cache.entries().to_vec();
        let mut nan = entries[1].clone();
        nan.id = "nan".into();
        nan.embedding = vec![f32::NAN, 0.0];
        entries.push(nan);
        let loaded = Cache::with_entries(settings(), entries.clone(), 2, 120);
        assert_eq!(loaded.len(), 1, "a expired, nan dropped");
        assert!(
            Cache::with_entries(settings(), entries, 3, 0).is_empty(),
            "wrong dimension"
        );
    }
}

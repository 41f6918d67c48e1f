//! Recent query embeddings, so a repeated query text skips the encoder.
//!
//! A voice assistant's follow-up requests carry the same user sentence, and a
//! client's tool turn may discover with the sentence it discovered with a
//! moment before; embedding it again costs ~10 ms of both cores for the same
//! vector. [`QueryCache`] keeps the vectors of the last texts embedded,
//! keyed by the exact text the encoder sees (the query's dense view), bounded
//! in entries and in bytes, and least recently used first out.
//!
//! The cache is split into shards by the text's hash, each behind its own
//! mutex held only to look up, insert or evict (a shard holds at most a few
//! dozen entries, so eviction scans it); the encoder always runs outside any
//! lock.

use std::collections::hash_map::DefaultHasher;
use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex};

/// Upper bound on shards; fewer when the cache holds fewer entries, so each
/// shard holds at least one.
const MAX_SHARDS: usize = 8;

/// Bytes allowed per configured entry: the cache's byte cap is this times
/// the entry cap. A query vector is 1.5 KiB (384 floats); the rest is room
/// for the text. An entry larger than a shard's byte share is not kept.
pub const BYTES_PER_ENTRY: usize = 4096;

/// Bookkeeping bytes charged per entry besides its text and vector.
const ENTRY_OVERHEAD: usize = 64;

struct Entry {
    vector: Arc<[f32]>,
    bytes: usize,
    last_used: u64,
}

#[derive(Default)]
struct Shard {
    entries: HashMap<String, Entry>,
    bytes: usize,
    clock: u64,
}

/// A bounded, thread-safe LRU of query texts to their embeddings.
pub struct QueryCache {
    shards: Vec<Mutex<Shard>>,
    /// Entries per shard.
    entries_per_shard: usize,
    /// Bytes per shard.
    bytes_per_shard: usize,
}

impl std::fmt::Debug for QueryCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QueryCache")
            .field("shards", &self.shards.len())
            .field("entries_per_shard", &self.entries_per_shard)
            .field("bytes_per_shard", &self.bytes_per_shard)
            .finish()
    }
}

impl QueryCache {
    /// A cache of at most `entries` vectors and `entries ×`
    /// [`BYTES_PER_ENTRY`] bytes; `None` for 0 (disabled).
    pub fn new(entries: usize) -> Option<Self> {
        if entries == 0 {
            return None;
        }
        let shards = entries.min(MAX_SHARDS);
        // Rounded down, so the total never exceeds `entries`.
        let entries_per_shard = entries / shards;
        Some(Self {
            shards: (0..shards).map(|_| Mutex::new(Shard::default())).collect(),
            entries_per_shard,
            bytes_per_shard: entries_per_shard.saturating_mul(BYTES_PER_ENTRY),
        })
    }

    /// Most entries held at once.
    pub fn capacity(&self) -> usize {
        self.entries_per_shard * self.shards.len()
    }

    fn shard(&self, text: &str) -> Option<&Mutex<Shard>> {
        let mut h = DefaultHasher::new();
        text.hash(&mut h);
        let i = usize::try_from(h.finish() % self.shards.len() as u64).unwrap_or(0);
        self.shards.get(i)
    }

    /// The cached vector for `text`, marking it recently used.
    pub fn get(&self, text: &str) -> Option<Vec<f32>> {
        let mut shard = self.shard(text)?.lock().ok()?;
        shard.clock += 1;
        let now = shard.clock;
        let entry = shard.entries.get_mut(text)?;
        entry.last_used = now;
        Some(entry.vector.to_vec())
    }

    /// Keeps `vector` for `text`, evicting the least recently used entries
    /// of its shard while it is over its entry or byte share.
    pub fn insert(&self, text: &str, vector: &[f32]) {
        let bytes = text.len() + std::mem::size_of_val(vector) + ENTRY_OVERHEAD;
        if bytes > self.bytes_per_shard {
            return;
        }
        let Some(Ok(mut shard)) = self.shard(text).map(Mutex::lock) else {
            return;
        };
        shard.clock += 1;
        let now = shard.clock;
        if let Some(old) = shard.entries.remove(text) {
            shard.bytes -= old.bytes;
        }
        while !shard.entries.is_empty()
            && (shard.entries.len() >= self.entries_per_shard
                || shard.bytes + bytes > self.bytes_per_shard)
        {
            let oldest = shard
                .entries
                .iter()
                .min_by_key(|(_, e)| e.last_used)
                .map(|(k, _)| k.clone());
            match oldest.and_then(|k| shard.entries.remove(&k)) {
                Some(gone) => shard.bytes -= gone.bytes,
                None => break,
            }
        }
        shard.bytes += bytes;
        shard.entries.insert(
            text.to_string(),
            Entry {
                vector: vector.into(),
                bytes,
                last_used: now,
            },
        );
    }

    /// Entries held now.
    pub fn len(&self) -> usize {
        self.shards
            .iter()
            .filter_map(|s| s.lock().ok().map(|s| s.entries.len()))
            .sum()
    }

    /// Whether nothing is cached.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes charged for the entries held now.
    pub fn bytes(&self) -> usize {
        self.shards
            .iter()
            .filter_map(|s| s.lock().ok().map(|s| s.bytes))
            .sum()
    }

    /// Bytes the cache may hold at most.
    pub fn byte_capacity(&self) -> usize {
        self.bytes_per_shard * self.shards.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_disables() {
        assert!(QueryCache::new(0).is_none());
    }

    #[test]
    fn hit_after_insert_and_lru_eviction_within_a_shard() {
        // One shard: eviction order is exact.
        let c = QueryCache::new(1).unwrap();
        c.insert("a", &[1.0, 2.0]);
        assert_eq!(c.get("a"), Some(vec![1.0, 2.0]));
        c.insert("b", &[3.0]);
        assert_eq!(c.get("a"), None);
        assert_eq!(c.get("b"), Some(vec![3.0]));
        assert_eq!(c.len(), 1);
    }

    #[test]
    fn never_holds_more_than_its_entries() {
        for cap in [1, 3, 8, 20, 256] {
            let c = QueryCache::new(cap).unwrap();
            assert!(c.capacity() <= cap);
            for i in 0..cap * 5 {
                c.insert(&format!("query {i}"), &[i as f32; 4]);
                assert!(c.len() <= cap, "cap {cap}: {} entries", c.len());
            }
            assert!(c.len() >= c.capacity() / 2, "cap {cap}: kept {}", c.len());
        }
    }

    #[test]
    fn recently_used_entries_survive() {
        let c2 = QueryCache::new(MAX_SHARDS * 2).unwrap();
        // With two entries per shard, touching the older one makes the
        // newer one the one evicted.
        let shard_mates: Vec<String> = (0..1000)
            .map(|i| format!("t{i}"))
            .filter(|t| std::ptr::eq(c2.shard(t).unwrap(), c2.shard("t0").unwrap()))
            .take(3)
            .collect();
        c2.insert(&shard_mates[0], &[0.0]);
        c2.insert(&shard_mates[1], &[1.0]);
        assert!(c2.get(&shard_mates[0]).is_some());
        c2.insert(&shard_mates[2], &[2.0]);
        assert!(c2.get(&shard_mates[0]).is_some());
        assert!(c2.get(&shard_mates[1]).is_none());
        assert!(c2.get(&shard_mates[2]).is_some());
    }

    #[test]
    fn bytes_are_capped_too() {
        let c = QueryCache::new(16).unwrap();
        // Texts of ~3 KiB with a 1.5 KiB vector: about one per 4 KiB share.
        let vector = vec![0.5f32; 384];
        for i in 0..200 {
            let text = format!("{i} {}", "word ".repeat(600));
            c.insert(&text, &vector);
            assert!(c.bytes() <= c.byte_capacity());
        }
        // Larger than a shard's whole share: not kept at all.
        let huge = "x".repeat(c.byte_capacity());
        c.insert(&huge, &vector);
        assert_eq!(c.get(&huge), None);
    }
}

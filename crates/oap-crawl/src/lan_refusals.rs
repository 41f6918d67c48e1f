//! The LAN browser's memory of refused advertisements: the newest
//! [`MAX_LAN_REFUSALS`], each with why, for `/v1/crawl/status`.
//!
//! Its own module because both sides hold it: the [`crate::Crawler`] owns
//! the log (it is the daemon's one shared crawl object) and the mDNS side
//! ([`crate::mdns`]) writes to it. Neither has to reach into the other.

use std::collections::VecDeque;
use std::sync::Mutex;

use serde::Serialize;

use crate::now_ms;

/// How many refused advertisements are remembered (oldest dropped first).
pub const MAX_LAN_REFUSALS: usize = 32;

/// One refused advertisement, for `/v1/crawl/status`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LanRefusalRecord {
    /// The advertised name (cut to 128 characters).
    pub name: String,
    /// Why, as text (a refusal, a full target list, or the failures that
    /// dropped the target), cut to 512 characters.
    pub reason: String,
    /// When, in milliseconds since the Unix epoch.
    pub at_ms: u64,
}

/// The bounded log of refusals; one name appears once, at its latest.
#[derive(Debug, Default)]
pub(crate) struct LanRefusals {
    records: Mutex<VecDeque<LanRefusalRecord>>,
}

impl LanRefusals {
    /// Remembers a refusal of `name`, replacing an older one of the same
    /// name and dropping the oldest past [`MAX_LAN_REFUSALS`].
    pub(crate) fn note(&self, name: &str, reason: &str) {
        let name = cut(name, 128);
        let mut records = self.records.lock().unwrap_or_else(|e| e.into_inner());
        records.retain(|r| r.name != name);
        if records.len() >= MAX_LAN_REFUSALS {
            records.pop_front();
        }
        records.push_back(LanRefusalRecord {
            name,
            reason: cut(reason, 512),
            at_ms: now_ms(),
        });
    }

    /// The remembered refusals, oldest first.
    pub(crate) fn list(&self) -> Vec<LanRefusalRecord> {
        let records = self.records.lock().unwrap_or_else(|e| e.into_inner());
        records.iter().cloned().collect()
    }
}

/// The first `max_chars` characters of `text` (never splits a character).
pub(crate) fn cut(text: &str, max_chars: usize) -> String {
    text.chars().take(max_chars).collect()
}

//! Per-domain crawl state and when each domain is due again.
//!
//! Success: due again after `interval`, jittered by ±`jitter` so a fleet of
//! boards does not hit a domain in step. Failure: retried after
//! `retry_base * 2^(failures-1)`, capped at `interval`, jittered too; after
//! `max_failures` consecutive failures its manifest is removed from the
//! index (the domain stays listed and keeps being retried at the cap, so a
//! domain that comes back is picked up again).
//!
//! The state is one JSON file written atomically; it holds no manifest
//! bodies (those are the envelopes), so losing an update to a crash costs
//! at most one unnecessary refetch, never an indexed manifest.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use oap_store::{StoreError, Trust};
use serde::{Deserialize, Serialize};

use crate::fetch::Validators;
use crate::txt::TxtHint;

/// The state file cannot be larger than this (it is read whole).
pub const MAX_STATE_BYTES: u64 = 64 << 20;

/// Timing of the schedule.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ScheduleSettings {
    /// Recrawl interval after a success.
    pub interval: Duration,
    /// Relative jitter, 0.0..=0.5 (0.1 = ±10%).
    pub jitter: f64,
    /// First retry delay after a failure; doubles per consecutive failure.
    pub retry_base: Duration,
    /// Consecutive failures after which the manifest is removed.
    pub max_failures: u32,
}

impl Default for ScheduleSettings {
    fn default() -> Self {
        Self {
            interval: Duration::from_secs(6 * 3600),
            jitter: 0.1,
            retry_base: Duration::from_secs(60),
            max_failures: 5,
        }
    }
}

/// How a domain came to be crawled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AddedBy {
    /// `crawler.seeds` / `crawler.seeds_file`.
    Seed,
    /// `POST /v1/manifests/register`.
    Register,
    /// `oapd crawl DOMAIN`.
    Cli,
    /// Advertised on the LAN over mDNS/DNS-SD (`crawler.mdns`).
    Mdns,
}

/// Everything known about one domain (shown by `GET /v1/crawl/status`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DomainState {
    /// The normalised domain, or `<label>.local` for a LAN target (the schedule key).
    pub domain: String,
    /// Who asked for it; seeds dropped from the config are purged at start.
    pub added_by: AddedBy,
    /// `Internet` for domains, `Lan` for mDNS targets; the executor's rules follow it.
    pub trust: Trust,
    /// The manifest URL fetched: `https://<domain>/.well-known/oap.json`, or a LAN `http://` URL.
    pub url: String,
    /// Last attempt (ms since the epoch).
    #[serde(default)]
    pub last_fetch_ms: Option<u64>,
    /// `updated`, `unchanged`, `not modified` or `error: ...`.
    #[serde(default)]
    pub last_result: Option<String>,
    /// Last fetch that stored or confirmed the manifest (ms since the epoch).
    #[serde(default)]
    pub last_success_ms: Option<u64>,
    /// When the next fetch is due (ms since the epoch): jittered interval after
    /// success, backoff after failure.
    pub next_due_ms: u64,
    /// Failed fetches since the last success; at `max_failures` the manifest is removed.
    #[serde(default)]
    pub consecutive_failures: u32,
    /// The id of its manifest in the index, while it has one.
    #[serde(default)]
    pub manifest_id: Option<String>,
    /// SHA-256 (hex) of the stored manifest's bytes, to tell "unchanged" from "updated".
    #[serde(default)]
    pub content_hash: Option<String>,
    /// ETag/Last-Modified of the stored copy; cleared when it is removed, so a
    /// 304 never stands in for a missing manifest.
    #[serde(default)]
    pub validators: Validators,
    /// Set when the manifest was removed after too many failures.
    #[serde(default)]
    pub removed_reason: Option<String>,
    /// What the `_oap.<domain>` TXT lookup said last.
    #[serde(default = "not_checked")]
    pub txt_hint: TxtHint,
    /// The last health verdict of its manifest.
    #[serde(default)]
    pub health: Option<String>,
    /// LAN targets: the advertised DNS-SD service name
    /// (`<instance>._oap._tcp.local.`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mdns_name: Option<String>,
}

fn not_checked() -> TxtHint {
    TxtHint::NotChecked
}

impl DomainState {
    /// A domain never fetched, due now.
    pub fn new(domain: String, url: String, added_by: AddedBy, trust: Trust, now_ms: u64) -> Self {
        Self {
            domain,
            added_by,
            trust,
            url,
            last_fetch_ms: None,
            last_result: None,
            last_success_ms: None,
            next_due_ms: now_ms,
            consecutive_failures: 0,
            manifest_id: None,
            content_hash: None,
            validators: Validators::default(),
            removed_reason: None,
            txt_hint: TxtHint::NotChecked,
            health: None,
            mdns_name: None,
        }
    }
}

/// All domains, by name.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Schedule {
    /// Keyed by [`DomainState::domain`].
    pub domains: BTreeMap<String, DomainState>,
}

/// `base` scaled by a random factor in `1 ± jitter`.
pub fn jittered(base: Duration, jitter: f64) -> Duration {
    let jitter = jitter.clamp(0.0, 0.5);
    let factor = 1.0 + jitter * (fastrand::f64() * 2.0 - 1.0);
    base.mul_f64(factor)
}

/// Delay before the next attempt after `failures` consecutive failures
/// (before jitter).
pub fn backoff(settings: &ScheduleSettings, failures: u32) -> Duration {
    let exponent = failures.saturating_sub(1).min(30);
    settings
        .retry_base
        .saturating_mul(1u32 << exponent)
        .min(settings.interval)
}

impl Schedule {
    /// Loads the state file; a missing file is an empty schedule, a damaged
    /// one is reported and replaced by an empty schedule (every domain is
    /// then simply due — the stored manifests stay indexed).
    pub fn load(path: &Path) -> (Schedule, Option<String>) {
        let bytes = match oap_store::read_capped(path, MAX_STATE_BYTES) {
            Ok(bytes) => bytes,
            Err(e) if e.is_not_found() => return (Schedule::default(), None),
            Err(StoreError::TooLarge { size, .. }) => {
                return (
                    Schedule::default(),
                    Some(format!("{size} bytes is larger than the state limit")),
                )
            }
            Err(StoreError::Io {
                op: "inspecting",
                source,
                ..
            }) => return (Schedule::default(), Some(format!("cannot stat: {source}"))),
            Err(e) => return (Schedule::default(), Some(e.to_string())),
        };
        match serde_json::from_slice::<Schedule>(&bytes) {
            Ok(schedule) => (schedule, None),
            Err(e) => (Schedule::default(), Some(e.to_string())),
        }
    }

    /// Writes the state file atomically (its directory is created if
    /// missing).
    pub fn save(&self, path: &Path) -> Result<(), StoreError> {
        let bytes = serde_json::to_vec_pretty(self).map_err(|e| StoreError::Invalid {
            path: path.to_path_buf(),
            message: e.to_string(),
        })?;
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(|source| StoreError::Io {
                op: "creating",
                path: dir.to_path_buf(),
                source,
            })?;
        }
        oap_store::write_atomic(path, &bytes)?;
        Ok(())
    }

    /// Domains due at `now_ms`, soonest first.
    pub fn due(&self, now_ms: u64) -> Vec<String> {
        let mut due: Vec<&DomainState> = self
            .domains
            .values()
            .filter(|d| d.next_due_ms <= now_ms)
            .collect();
        due.sort_by_key(|d| d.next_due_ms);
        due.into_iter().map(|d| d.domain.clone()).collect()
    }

    /// When the next domain is due, if any.
    pub fn next_due_ms(&self) -> Option<u64> {
        self.domains.values().map(|d| d.next_due_ms).min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_and_caps() {
        let s = ScheduleSettings {
            interval: Duration::from_secs(600),
            retry_base: Duration::from_secs(10),
            ..ScheduleSettings::default()
        };
        assert_eq!(backoff(&s, 1), Duration::from_secs(10));
        assert_eq!(backoff(&s, 2), Duration::from_secs(20));
        assert_eq!(backoff(&s, 4), Duration::from_secs(80));
        assert_eq!(backoff(&s, 7), Duration::from_secs(600));
        assert_eq!(backoff(&s, 1000), Duration::from_secs(600));
    }

    #[test]
    fn jitter_stays_in_band() {
        for _ in 0..1000 {
            let d = jittered(Duration::from_secs(100), 0.1);
            assert!(
                d >= Duration::from_secs(90) && d <= Duration::from_secs(110),
                "{d:?}"
            );
        }
        assert_eq!(
            jittered(Duration::from_secs(5), 0.0),
            Duration::from_secs(5)
        );
    }
}

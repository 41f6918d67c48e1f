//! The crawler: finds OAP manifests at `https://<domain>/.well-known/oap.json`,
//! keeps them fresh, and keeps hostile documents out.
//!
//! - [`domain`]: what counts as a crawlable domain (a DNS name, optionally
//!   with a port; never an IP literal, never a path).
//! - [`fetch`]: one manifest fetch with every safety check — HTTPS only, the
//!   executor's SSRF rules (resolve once, check, connect to the checked
//!   address), a whole-fetch deadline that defeats slowloris, a 64 KiB body
//!   cap, content type, UTF-8, depth-capped parsing, no `stdio` from a
//!   network source, conditional requests.
//! - [`schedule`]: per-domain state (last fetch, result, validators, next
//!   due with jitter, consecutive failures with exponential backoff, removal
//!   after N failures), persisted atomically.
//! - [`crawler`]: ties them to the discovery engine: fetched manifests are
//!   written as envelopes into the remote directory
//!   ([`oap_store::envelope`]) and the engine rebuilds incrementally.
//! - [`sink`]: what the crawler needs from that engine ([`CatalogSink`]),
//!   so this crate depends on the store only, not on the engine (nor on the
//!   embedding model the engine runs) unless the `engine` feature adds the
//!   adapter for it, `sink::EngineSink`.
//! - [`txt`]: the optional `_oap.<domain> TXT "v=oap1"` hint, through a
//!   resolver trait.
//! - [`mdns`]: LAN discovery's pure part: a resolved `_oap._tcp.local.`
//!   service becomes a `lan` trust target (validated address, port, TXT
//!   path, capped sizes); the daemon runs the mDNS browser.

pub mod crawler;
pub mod domain;
pub mod fetch;
pub mod mdns;
pub mod schedule;
pub mod sink;
pub mod txt;

pub use crawler::{CrawlReport, Crawler, CrawlerSettings};
pub use domain::{normalize_domain, DomainError};
pub use fetch::{FetchLimits, FetchOutcome, ManifestFetchError, Validators};
pub use schedule::{AddedBy, DomainState, Schedule, ScheduleSettings};
pub use sink::CatalogSink;
pub use txt::{TxtHint, TxtResolver};

/// Path of the manifest on a domain (spec, "Discovery").
pub const WELL_KNOWN_PATH: &str = "/.well-known/oap.json";

/// Milliseconds since the epoch (0 if the clock is before it).
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

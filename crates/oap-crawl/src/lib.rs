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
//! - [`schema`]: the documents behind a fetched manifest's `input.schema`
//!   and `output.schema`, fetched with it under its trust and recorded in
//!   it, so they are stored, cached and refreshed together.
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
//!
//! # Architecture
//!
//! Finds manifests at `https://<domain>/.well-known/oap.json` and on the LAN
//! and keeps them fresh.
//! - `domain.rs`: what a crawlable domain is (a DNS name with an optional
//!   port; never an IP literal, URL, path or `.local` mDNS name).
//! - `fetch.rs`: one manifest fetch through `Executor::fetch` with internet
//!   trust, then the document checks: status 200 (304 when validators were
//!   sent), content type `application/json` or `application/*+json`, UTF-8,
//!   `oap_manifest::parse`, and no `stdio`; then `schema.rs` fetches the
//!   manifest's schema URLs under the same trust (each hop checked, 1 MiB,
//!   own deadline, conditional on the copy it replaces) and records the
//!   converted parameters, or why not, in the manifest.
//! - `schedule.rs`: per-domain state (last fetch, result, validators, next
//!   due, consecutive failures, health, TXT hint) in one JSON file; jittered
//!   interval after success, `retry_base * 2^(n-1)` after failure, manifest
//!   removed after `max_failures` consecutive failures (the domain stays).
//! - `crawler.rs`: a pass over due (or named) domains with bounded concurrency
//!   and a pass deadline; accepted manifests become envelopes, health URLs are
//!   probed, and the index is rebuilt per slice of `max(256, indexed / 4)`
//!   domains, so a 10k first crawl becomes discoverable slice by slice.
//! - `sink.rs`: `CatalogSink`, all the crawler asks of the index (its size and
//!   a rebuild), and behind the `engine` feature (the daemon's and the
//!   end-to-end tests') `EngineSink`, the one adapter for the engine.
//! - `txt.rs`: the `_oap.<domain> TXT "v=oap1"` hint behind a resolver trait
//!   (the daemon's is a hickory stub resolver, tests use a stub).
//! - `mdns.rs`: LAN discovery's pure part. A resolved `_oap._tcp.local.`
//!   service becomes a `lan` target `http://<address>:<port><path>` or is
//!   refused with a reason (instance ≤ 63 bytes, TXT ≤ 1 KiB, `path` ≤ 200
//!   bytes; private IPv4, then ULA, then public; loopback, link-local,
//!   multicast, CGNAT, reserved refused — the executor's `lan` rules check
//!   again at connect). At most 64 LAN targets, keyed `<instance>.local`,
//!   which no internet registration can take.
//!
//! **Architecture Invariant.** The crawler does not compile the discovery
//! engine or the model (only the `engine` feature's adapter does): it writes
//! envelopes through `oap-store` and calls `CatalogSink`. Nothing fetched is stored before every check passed. A
//! domain's manifest comes from that domain: redirects to another host, to
//! plain http, or past 3 hops are refused. Validators are sent only while the
//! stored copy exists, so a 304 never stands in for a missing manifest. The
//! schedule file holds no manifest, so losing its last update costs one
//! refetch.

pub mod crawler;
pub mod domain;
pub mod fetch;
mod lan_refusals;
pub mod mdns;
mod request;
pub mod schedule;
pub mod schema;
pub mod sink;
pub mod txt;

pub use crawler::{CrawlReport, Crawler, CrawlerSettings};
pub use domain::{normalize_domain, DomainError};
pub use fetch::{
    fetch_manifest, fetch_manifest_replacing, FetchLimits, FetchOutcome, ManifestFetchError,
    Validators,
};
pub use schedule::{AddedBy, DomainState, Schedule, ScheduleSettings};
pub use schema::SchemaLimits;
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

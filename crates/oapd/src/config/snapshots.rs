//! The `snapshots:` section: where a board pulls its signed index snapshot
//! from and whom it trusts to sign one. Pulling is `crate::snapshots`'
//! business; this is only the data and its checks.
//!
//! Without `url` nothing is pulled and the board behaves as one that never
//! heard of snapshots (no task, no file, `"snapshot": null` in `/health`).
//! A snapshot is always fetched with internet trust: private and loopback
//! addresses are refused unless `allow_private` names them, as for the
//! crawler.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// Default seconds between two checks of the published snapshot: 6 h.
pub const DEFAULT_INTERVAL_SECS: u64 = 6 * 3600;
/// Default cap on the bytes a snapshot's files may add up to: 1 GiB.
pub const DEFAULT_MAX_BYTES: u64 = 1 << 30;

/// `snapshots:` section.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SnapshotsConfig {
    /// HTTPS base URL of a published snapshot directory (the one holding
    /// `snapshot.json`); unset: no snapshot is pulled (default).
    pub url: Option<String>,
    /// Minisign public keys (the `RW...` line or a `.pub` file's text) a
    /// snapshot must be signed by one of; required with `url`.
    pub public_keys: Vec<String>,
    /// Seconds between checks for a newer snapshot (default 6 h).
    pub interval: u64,
    /// Most bytes a snapshot's files may add up to (default 1 GiB); a
    /// listing claiming more is refused before any file is fetched.
    pub max_bytes: u64,
    /// Seconds one request (the listing, or one piece of a file) may take.
    pub fetch_timeout: u64,
    /// Address ranges the snapshot host may resolve to despite being
    /// private or loopback (CIDR). Default: public addresses only.
    pub allow_private: Vec<String>,
    /// Extra CA certificates (PEM) trusted for the snapshot host.
    pub ca_file: Option<PathBuf>,
}

impl Default for SnapshotsConfig {
    fn default() -> Self {
        Self {
            url: None,
            public_keys: Vec::new(),
            interval: DEFAULT_INTERVAL_SECS,
            max_bytes: DEFAULT_MAX_BYTES,
            fetch_timeout: 60,
            allow_private: Vec::new(),
            ca_file: None,
        }
    }
}

impl SnapshotsConfig {
    /// Problems as `(key, message)`.
    pub fn problems(&self) -> Vec<(String, String)> {
        let mut out = Vec::new();
        let mut range = |key: &str, value: u64, min: u64, max: u64| {
            if value < min || value > max {
                out.push((
                    format!("snapshots.{key}"),
                    format!("must be between {min} and {max}, got {value}"),
                ));
            }
        };
        range("interval", self.interval, 1, 30 * 86400);
        range("max_bytes", self.max_bytes, 1, 1 << 40);
        range("fetch_timeout", self.fetch_timeout, 1, 3600);
        if let Some(url) = &self.url {
            if let Err(message) = check_base_url(url) {
                out.push(("snapshots.url".into(), message));
            }
            if self.public_keys.is_empty() {
                out.push((
                    "snapshots.public_keys".into(),
                    "a snapshot URL needs at least one public key to trust".into(),
                ));
            }
        }
        for (i, key) in self.public_keys.iter().enumerate() {
            if let Err(err) = oap_snapshot::TrustedKeys::parse(&[key]) {
                out.push((format!("snapshots.public_keys[{i}]"), err.to_string()));
            }
        }
        for (i, range) in self.allow_private.iter().enumerate() {
            if range.parse::<oap_exec::Cidr>().is_err() {
                out.push((
                    format!("snapshots.allow_private[{i}]"),
                    format!("expected an address or CIDR range like 192.168.1.0/24, got {range:?}"),
                ));
            }
        }
        out
    }
}

/// A snapshot base URL: `https://`, a host, no query, fragment or
/// credentials (the listing's paths are joined onto it).
pub(crate) fn check_base_url(raw: &str) -> Result<(), String> {
    let uri: hyper::Uri = raw
        .parse()
        .map_err(|err| format!("not a URL ({err}): {raw:?}"))?;
    if uri.scheme_str() != Some("https") {
        return Err(format!(
            "must be an https:// URL (a snapshot is fetched over TLS), got {raw:?}"
        ));
    }
    let Some(authority) = uri.authority() else {
        return Err(format!("has no host: {raw:?}"));
    };
    if authority.as_str().contains('@') {
        return Err(format!("may carry no credentials: {raw:?}"));
    }
    if uri.query().is_some() || raw.contains('#') {
        return Err(format!("may have no query or fragment: {raw:?}"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_url_is_valid_and_a_url_needs_https_and_a_key() {
        assert!(SnapshotsConfig::default().problems().is_empty());
        let plain = SnapshotsConfig {
            url: Some("http://snapshots.example/oapd/".into()),
            ..SnapshotsConfig::default()
        };
        let problems = plain.problems();
        assert!(
            problems
                .iter()
                .any(|(k, m)| k == "snapshots.url" && m.contains("https://")),
            "{problems:?}"
        );
        assert!(
            problems
                .iter()
                .any(|(k, m)| k == "snapshots.public_keys" && m.contains("at least one")),
            "{problems:?}"
        );
        let bad_key = SnapshotsConfig {
            url: Some("https://snapshots.example/oapd/".into()),
            public_keys: vec!["RWnot-a-key".into()],
            ..SnapshotsConfig::default()
        };
        let problems = bad_key.problems();
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert_eq!(problems[0].0, "snapshots.public_keys[0]");
    }
}

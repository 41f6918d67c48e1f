//! How far a manifest is trusted.

use serde::{Deserialize, Serialize};

/// How far a manifest is trusted. Stored with every indexed manifest and
/// every crawled envelope, shown in discovery results; execution policy
/// (stdio is allowed only for local manifests) keys off it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Trust {
    /// Installed on this machine by the operator or shipped with the daemon.
    Local,
    /// Advertised on the local network (mDNS).
    Lan,
    /// Fetched from a domain on the internet.
    Internet,
}

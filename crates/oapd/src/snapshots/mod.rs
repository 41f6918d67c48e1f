//! A board subscribed to a signed index snapshot (`snapshots.url`): it
//! checks the published directory every `snapshots.interval`, downloads a
//! newer snapshot, verifies it, swaps it in and merges it with its own
//! tools; a snapshot that fails anything leaves the running index and the
//! installed snapshot as they were.
//!
//! One check ([`pull::check`]):
//!
//! 1. `snapshot.json` with a conditional GET (its `ETag` and
//!    `Last-Modified` from the last check; a 304 ends the check), then
//!    `snapshot.json.minisig`, both over HTTPS through the executor's
//!    pinned-address SSRF guard with internet trust (`fetch.rs`);
//! 2. the signature and the listing's and the board's rules
//!    (`oap_snapshot::verify_listing`: trusted key, plain paths, the bytes
//!    it claims under `snapshots.max_bytes`, the board's encoder, a version
//!    newer than the installed one) — before a byte of any file;
//! 3. each listed file into `DATA/snapshots/staging`, in `Range` pieces
//!    never past the listed size, so a board that lost power resumes where
//!    it stopped (a server that ignores `Range` gets that file fetched again
//!    whole, still capped at its listed size);
//! 4. every check again on the staged directory (`oap_snapshot::verify_dir`,
//!    sizes and SHA-256 included);
//! 5. the swap (`install.rs`): the catalog becomes envelopes with internet
//!    trust (`staging/tools`: HTTP tools of remote manifests; a local
//!    command, bundled or MCP entry of the builder is left out), `current`
//!    becomes `previous`, `staging` becomes `current`, and the index is
//!    rebuilt, with the snapshot's `index.oapx` as a vector donor (nothing
//!    the builder embedded is embedded again) and its request rows attached
//!    like generated ones. A rebuild that fails swaps `previous` back.
//!
//! What the board shows: `/health` `snapshot` (`null` without a URL),
//! the status page's snapshot line, `/metrics` `oapd_snapshot_version` and
//! `oapd_snapshot_pulls_total{outcome}`.

mod error;
mod fetch;
mod install;
mod pull;
mod rows;
mod status;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use tokio::task::JoinHandle;

use crate::config::Config;
use crate::rebuild::Rebuilder;

pub use rows::SnapshotRows;
pub use status::SnapshotStatus;

/// One daemon's snapshot state, made once at start and shared by its
/// handler generations (as the request generator is): the installed
/// snapshot's request rows, which its engines ask, and the subscription's
/// status, which `/health` shows. Nothing of it is process-global, so two
/// daemons in one process (a test kit's) never share it.
#[derive(Debug, Default)]
pub struct Snapshots {
    rows: Arc<SnapshotRows>,
    status: status::StatusCell,
}

impl Snapshots {
    /// No rows, no status (until `prepare` and `start`).
    pub fn new() -> Arc<Snapshots> {
        Arc::default()
    }

    /// The rows provider the engine asks (empty until a snapshot is
    /// installed).
    pub fn rows(&self) -> Arc<dyn oap_discovery::RequestRows> {
        self.rows.clone()
    }

    /// The subscription's status, `None` without `snapshots.url`.
    pub fn status(&self) -> Option<SnapshotStatus> {
        self.status.get()
    }
}

/// The directory of everything snapshot-related inside the data dir.
pub const DIR: &str = "snapshots";
/// The installed snapshot, inside [`DIR`].
pub const CURRENT: &str = "current";
/// The snapshot installed before it (for rollback), inside [`DIR`].
pub const PREVIOUS: &str = "previous";
/// A download in progress, inside [`DIR`].
pub const STAGING: &str = "staging";
/// The catalog as envelopes, inside a snapshot directory (derived on
/// install, not listed).
pub const TOOLS: &str = "tools";

/// `DATA/snapshots`.
pub fn root(data_dir: &Path) -> PathBuf {
    data_dir.join(DIR)
}

/// The installed snapshot's tools as a manifest source, when the board is
/// subscribed (a missing directory is an empty source).
pub fn tools_dir(config: &Config) -> Option<PathBuf> {
    config.snapshots.url.as_ref()?;
    Some(root(&config.index.data_dir).join(CURRENT).join(TOOLS))
}

/// The installed snapshot's index as a vector donor, when the board is
/// subscribed.
pub fn donor(config: &Config) -> Option<PathBuf> {
    config.snapshots.url.as_ref()?;
    Some(
        root(&config.index.data_dir)
            .join(CURRENT)
            .join(oap_discovery::engine::INDEX_FILE),
    )
}

/// Starts the puller of this handler generation; `None` (and `/health`
/// `snapshot: null`) without `snapshots.url`. The installed snapshot's
/// request rows are loaded first ([`prepare`]), so the engine opened before
/// this has them at its next rebuild.
pub fn start(
    config: &Config,
    rebuilder: &Arc<Rebuilder>,
    snapshots: &Arc<Snapshots>,
) -> anyhow::Result<Option<JoinHandle<()>>> {
    let Some(puller) = pull::Puller::new(config, rebuilder.clone(), snapshots.clone())? else {
        snapshots.status.clear();
        return Ok(None);
    };
    Ok(Some(tokio::spawn(puller.run())))
}

/// Loads the installed snapshot's request rows into `snapshots` (before
/// the engine opens, so its first build has them) and restores `current`
/// from `previous` when a swap was cut short; nothing without
/// `snapshots.url`.
pub fn prepare(config: &Config, snapshots: &Snapshots) {
    if config.snapshots.url.is_none() {
        snapshots.rows.clear();
        return;
    }
    let root = root(&config.index.data_dir);
    install::recover(&root);
    snapshots.rows.load(&root.join(CURRENT));
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two daemons in one process (a test kit's) each keep their own
    /// subscription: one's status and rows are not the other's.
    #[test]
    fn two_daemons_state_is_their_own() {
        let one = Snapshots::new();
        let two = Snapshots::new();
        one.status
            .update("https://one.example/", |s| s.version = Some(3));
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join(rows::ROWS_BY_ID_FILE),
            r#"{"snapshot.tide/tide": ["when is high tide"]}"#,
        )
        .unwrap();
        one.rows.load(dir.path());
        assert_eq!(one.status().map(|s| s.version), Some(Some(3)));
        assert!(two.status().is_none());
        assert!(two.rows.by_id.read().unwrap().is_empty());
        assert_eq!(one.rows.by_id.read().unwrap().len(), 1);
    }
}

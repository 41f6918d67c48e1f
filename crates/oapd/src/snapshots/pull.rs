//! The puller: one check of the published snapshot (see the module docs
//! of `crate::snapshots` for the order of the steps) every
//! `snapshots.interval`, the first right after start.
//!
//! The validators of the last listing are kept in `DATA/snapshots/state.json`
//! and sent only once the listing they belong to was installed or refused
//! for good (signature, rules, encoder, version, a file that failed its
//! hash): a check cut short by the network asks again in full and resumes
//! the staged files.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use oap_snapshot::{Expect, TrustedKeys};
use serde::{Deserialize, Serialize};

use super::error::PullError;
use super::fetch::{self, Source};
use super::{install, Snapshots, CURRENT, STAGING};
use crate::config::Config;
use crate::rebuild::Rebuilder;
use oap_crawl::Validators;

/// The persisted state's file name inside `DATA/snapshots`.
const STATE_FILE: &str = "state.json";
/// Largest state file read.
const MAX_STATE_BYTES: u64 = 64 << 10;

/// What `state.json` keeps across restarts.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct State {
    #[serde(default)]
    validators: Validators,
    #[serde(default)]
    installed_at: Option<String>,
    #[serde(default)]
    key_id: Option<String>,
}

/// One board's subscription.
pub(super) struct Puller {
    url: String,
    source: Source,
    keys: TrustedKeys,
    interval: Duration,
    max_bytes: u64,
    root: PathBuf,
    rebuilder: Arc<Rebuilder>,
    /// The daemon's rows and status this puller keeps up to date.
    snapshots: Arc<Snapshots>,
}

impl Puller {
    /// `None` without `snapshots.url`.
    pub fn new(
        config: &Config,
        rebuilder: Arc<Rebuilder>,
        snapshots: Arc<Snapshots>,
    ) -> anyhow::Result<Option<Puller>> {
        let Some(url) = config.snapshots.url.clone() else {
            return Ok(None);
        };
        let keys = TrustedKeys::parse(&config.snapshots.public_keys)?;
        let source = Source::new(config, &url)?;
        let root = super::root(&config.index.data_dir);
        let puller = Puller {
            url,
            source,
            keys,
            interval: Duration::from_secs(config.snapshots.interval),
            max_bytes: config.snapshots.max_bytes,
            root,
            rebuilder,
            snapshots,
        };
        puller.show_installed();
        Ok(Some(puller))
    }

    /// Checks now, then every interval, until the generation ends.
    pub async fn run(self) {
        tracing::info!(url = %self.url, every_secs = self.interval.as_secs(), "snapshot subscription started");
        loop {
            self.check_and_report().await;
            tokio::time::sleep(self.interval).await;
        }
    }

    async fn check_and_report(&self) {
        let outcome = self.check().await;
        let now = oap_bridge::tool_loop::now_rfc3339();
        let metrics = crate::metrics::get();
        match &outcome {
            Ok(word) => {
                metrics.snapshot_pull(word);
                self.snapshots.status.update(&self.url, |s| {
                    s.last_check = Some(now);
                    // A 304 says the listing judged last is still the
                    // published one: its outcome stands.
                    if *word == "installed" {
                        s.last_error = None;
                        s.last_outcome = Some((*word).to_owned());
                        s.pulls_ok += 1;
                    }
                });
                self.show_installed();
            }
            Err(err) => {
                let reason = err.reason();
                tracing::warn!(url = %self.url, reason, error = %err, "snapshot not installed; the installed one keeps serving");
                metrics.snapshot_pull(reason);
                self.snapshots.status.update(&self.url, |s| {
                    s.last_check = Some(now);
                    s.last_error = Some(err.to_string());
                    s.last_outcome = Some(reason.to_owned());
                    s.pulls_failed += 1;
                });
            }
        }
    }

    /// One check: `Ok("installed")`, `Ok("not_modified")`, or why not.
    async fn check(&self) -> Result<&'static str, PullError> {
        let mut state = self.load_state();
        let installed_bytes = installed_listing_bytes(&self.root.join(CURRENT));
        let installed = installed_bytes
            .as_deref()
            .and_then(|b| oap_snapshot::Listing::parse(b).ok());
        // Validators only while their listing's outcome stands (installed
        // or refused for good); see the module docs.
        let (bytes, signature, validators) = match self.source.listing(&state.validators).await? {
            fetch::Listing::NotModified => return Ok("not_modified"),
            fetch::Listing::Fetched {
                bytes,
                signature,
                validators,
            } => (bytes, signature, validators),
        };
        // A host that sends no validators answers every check with the
        // whole listing: the one installed (verified when it was) is
        // nothing new, not a replay to refuse.
        if installed_bytes.is_some_and(|current| current == bytes) {
            return Ok("not_modified");
        }
        let model_id = self.rebuilder.engine().model_id().map(str::to_owned);
        let Some(model_id) = model_id else {
            return Err(PullError::Install(
                "this board has no encoder loaded, and a snapshot's vectors need one".into(),
            ));
        };
        let expect = Expect {
            model_id: &model_id,
            installed_version: installed.as_ref().map(|l| l.version),
            max_bytes: self.max_bytes,
        };
        match self.download_and_install(&bytes, &signature, &expect).await {
            Ok(verified) => {
                state.validators = validators;
                state.installed_at = Some(oap_bridge::tool_loop::now_rfc3339());
                state.key_id = Some(verified.key_id);
                self.save_state(&state);
                Ok("installed")
            }
            Err(err) => {
                if err.is_final() {
                    state.validators = validators;
                    self.save_state(&state);
                    // Nothing of a refused snapshot is resumed from.
                    let _ = std::fs::remove_dir_all(self.root.join(STAGING));
                }
                Err(err)
            }
        }
    }

    async fn download_and_install(
        &self,
        listing_bytes: &[u8],
        signature: &str,
        expect: &Expect<'_>,
    ) -> Result<oap_snapshot::Verified, PullError> {
        // Nothing unsigned or against the board's rules reaches the disk.
        let verified = oap_snapshot::verify_listing(listing_bytes, signature, &self.keys, expect)?;
        let staging = self.root.join(STAGING);
        self.prepare_staging(&staging, listing_bytes, signature)?;
        let mut fetched = 0u64;
        for file in &verified.listing.files {
            let target = staging.join(&file.path);
            if let Some(parent) = target.parent() {
                std::fs::create_dir_all(parent)
                    .map_err(|e| PullError::Install(format!("{}: {e}", parent.display())))?;
            }
            fetched += self.source.file(file, &target).await?;
        }
        // Every check again, on the files as they are on disk.
        let check_dir = staging.clone();
        let keys = self.keys.clone();
        let model_id = expect.model_id.to_owned();
        let installed_version = expect.installed_version;
        let max_bytes = expect.max_bytes;
        let checked = tokio::task::spawn_blocking(move || {
            let expect = Expect {
                model_id: &model_id,
                installed_version,
                max_bytes,
            };
            oap_snapshot::verify_dir(&check_dir, &keys, &expect)
        })
        .await
        .map_err(|e| PullError::Install(e.to_string()))?;
        let verified = match checked {
            Ok(verified) => verified,
            Err(err) => {
                // A file that fails its hash is not resumed from.
                let _ = std::fs::remove_dir_all(&staging);
                return Err(err.into());
            }
        };
        let converted =
            install::convert_catalog(&staging, &self.url).map_err(PullError::Install)?;
        install::swap_in(&self.root, &staging)
            .map_err(|e| PullError::Install(format!("swap: {e}")))?;
        self.snapshots.rows.load(&self.root.join(CURRENT));
        tracing::info!(
            version = verified.listing.version,
            key = %verified.key_id,
            tools = converted.tools,
            left_out = converted.skipped,
            fetched_bytes = fetched,
            "snapshot swapped in; rebuilding the index with it"
        );
        if self.rebuilder.rebuild("snapshot installed").await {
            crate::metrics::get().snapshot_version(verified.listing.version);
            return Ok(verified);
        }
        if let Err(err) = install::roll_back(&self.root) {
            tracing::error!(error = %err, "snapshot rollback failed");
        }
        self.snapshots.rows.load(&self.root.join(CURRENT));
        self.rebuilder.rebuild("snapshot rolled back").await;
        Err(PullError::Rebuild)
    }

    /// Keeps a staged download of this very listing (resume); anything
    /// else staged is dropped.
    fn prepare_staging(
        &self,
        staging: &Path,
        listing: &[u8],
        signature: &str,
    ) -> Result<(), PullError> {
        let io = |e: std::io::Error| PullError::Install(format!("{}: {e}", staging.display()));
        let listing_path = staging.join(oap_snapshot::LISTING_FILE);
        let same = oap_store::read_capped(&listing_path, oap_snapshot::MAX_LISTING_BYTES)
            .is_ok_and(|staged| staged == listing);
        if !same && staging.exists() {
            std::fs::remove_dir_all(staging).map_err(io)?;
        }
        std::fs::create_dir_all(staging).map_err(io)?;
        oap_store::write_atomic(&listing_path, listing)
            .map_err(|e| PullError::Install(e.to_string()))?;
        oap_store::write_atomic(
            &staging.join(oap_snapshot::SIGNATURE_FILE),
            signature.as_bytes(),
        )
        .map_err(|e| PullError::Install(e.to_string()))?;
        Ok(())
    }

    /// The installed snapshot into `/health` and `/metrics`.
    fn show_installed(&self) {
        let listing = installed_listing(&self.root.join(CURRENT));
        let state = self.load_state();
        crate::metrics::get().snapshot_version(listing.as_ref().map_or(0, |l| l.version));
        let tools_dir = self.root.join(CURRENT).join(super::TOOLS);
        let tools = listing.as_ref().and_then(|_| {
            oap_store::envelope_paths(&tools_dir, usize::MAX)
                .ok()
                .map(|paths| paths.len())
        });
        self.snapshots.status.update(&self.url, |s| {
            s.version = listing.as_ref().map(|l| l.version);
            s.model = listing.as_ref().map(|l| l.model_id.clone());
            s.created = listing.as_ref().map(|l| l.created.clone());
            s.installed_at = listing.as_ref().and(state.installed_at.clone());
            s.key_id = listing.as_ref().and(state.key_id.clone());
            s.tools = tools;
        });
    }

    fn load_state(&self) -> State {
        oap_store::read_capped(&self.root.join(STATE_FILE), MAX_STATE_BYTES)
            .ok()
            .and_then(|bytes| serde_json::from_slice(&bytes).ok())
            .unwrap_or_default()
    }

    fn save_state(&self, state: &State) {
        let written = std::fs::create_dir_all(&self.root)
            .map_err(|e| e.to_string())
            .and_then(|()| serde_json::to_vec_pretty(state).map_err(|e| e.to_string()))
            .and_then(|bytes| {
                oap_store::write_atomic(&self.root.join(STATE_FILE), &bytes)
                    .map_err(|e| e.to_string())
            });
        if let Err(err) = written {
            tracing::warn!(error = %err, "snapshot state not saved; the next check asks in full");
        }
    }
}

/// The listing of the snapshot installed in `dir` (it was verified when it
/// was installed), if any.
fn installed_listing(dir: &Path) -> Option<oap_snapshot::Listing> {
    oap_snapshot::Listing::parse(&installed_listing_bytes(dir)?).ok()
}

/// The installed listing's bytes, as they were signed.
fn installed_listing_bytes(dir: &Path) -> Option<Vec<u8>> {
    oap_store::read_capped(
        &dir.join(oap_snapshot::LISTING_FILE),
        oap_snapshot::MAX_LISTING_BYTES,
    )
    .ok()
}

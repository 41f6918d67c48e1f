//! Fetching a published snapshot over HTTPS through the executor's fetch:
//! the crawler's guard (resolve once, refuse private and loopback addresses
//! unless `snapshots.allow_private` names them, connect to the checked
//! address), redirects only on the same host and only to https, a deadline
//! per request, and a body cap per request.
//!
//! A file is fetched in `Range` pieces of at most [`PIECE_BYTES`], each
//! capped at what is still missing of its listed size, appended to the
//! staged file and synced: memory holds one piece, a server can never make
//! the board read past the listed size, and a board that loses power
//! resumes from the staged length. A server that ignores `Range` (a 200,
//! or a body bigger than the piece asked for) gets the file fetched again
//! whole, capped at its listed size.

use std::fs::File;
use std::io::Write;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use oap_crawl::Validators;
use oap_exec::{ExecPolicy, Executor, FetchError, FetchRequest, FetchResponse, Trust};
use oap_snapshot::FileEntry;

use super::error::PullError;
use crate::config::Config;

/// Largest piece of a file asked for in one request.
pub const PIECE_BYTES: u64 = 4 << 20;
/// Largest signature file read.
const MAX_SIGNATURE_BYTES: usize = 4 << 10;

/// The snapshot host as the board reaches it.
pub(super) struct Source {
    executor: Arc<Executor>,
    /// The base URL, ending in `/`.
    base: String,
    timeout: Duration,
}

/// What asking for the listing gave.
pub(super) enum Listing {
    /// 304: the listing seen last is still the published one.
    NotModified,
    /// A listing with its signature and validators.
    Fetched {
        bytes: Vec<u8>,
        signature: String,
        validators: Validators,
    },
}

impl Source {
    /// The host of `snapshots.url`, under the snapshot section's address
    /// rules and extra CA.
    pub fn new(config: &Config, url: &str) -> anyhow::Result<Source> {
        use anyhow::Context;
        let s = &config.snapshots;
        let policy = ExecPolicy {
            max_redirects: 3,
            allow_private: s
                .allow_private
                .iter()
                .map(|r| r.parse())
                .collect::<Result<_, _>>()
                .context("snapshots.allow_private")?,
            ..ExecPolicy::default()
        };
        let mut executor = Executor::new(policy)?;
        if let Some(ca_file) = &s.ca_file {
            let pem = crate::files::read_ca_file("snapshots.ca_file", ca_file)?;
            executor = executor
                .with_extra_roots_pem(&pem)
                .with_context(|| format!("snapshots.ca_file {}", ca_file.display()))?;
        }
        let base = if url.ends_with('/') {
            url.to_owned()
        } else {
            format!("{url}/")
        };
        Ok(Source {
            executor: Arc::new(executor),
            base,
            timeout: Duration::from_secs(s.fetch_timeout),
        })
    }

    async fn get(
        &self,
        path: &str,
        headers: Vec<(String, String)>,
        max_body_bytes: usize,
    ) -> Result<FetchResponse, FetchError> {
        let request = FetchRequest {
            url: format!("{}{path}", self.base),
            trust: Trust::Internet,
            headers,
            max_body_bytes,
            timeout: self.timeout,
            https_only: true,
            same_host_only: true,
        };
        self.executor.fetch(&request).await
    }

    /// `snapshot.json` (conditional on `validators`) and its signature.
    pub async fn listing(&self, validators: &Validators) -> Result<Listing, PullError> {
        let headers = validators.headers();
        let max = usize::try_from(oap_snapshot::MAX_LISTING_BYTES).unwrap_or(usize::MAX);
        let response = self
            .get(oap_snapshot::LISTING_FILE, headers, max)
            .await
            .map_err(|err| PullError::fetch(oap_snapshot::LISTING_FILE, err))?;
        if response.status == 304 && !validators.is_empty() {
            return Ok(Listing::NotModified);
        }
        ok_status(oap_snapshot::LISTING_FILE, &response, 200)?;
        let validators = Validators::of(&response);
        let signature = self
            .get(
                oap_snapshot::SIGNATURE_FILE,
                Vec::new(),
                MAX_SIGNATURE_BYTES,
            )
            .await
            .map_err(|err| PullError::fetch(oap_snapshot::SIGNATURE_FILE, err))?;
        ok_status(oap_snapshot::SIGNATURE_FILE, &signature, 200)?;
        let signature = String::from_utf8(signature.body).map_err(|_| {
            PullError::Refused(oap_snapshot::SnapshotError::SignatureFormat(
                "not text".into(),
            ))
        })?;
        Ok(Listing::Fetched {
            bytes: response.body,
            signature,
            validators,
        })
    }

    /// Brings `target` to the listed size of `file`, resuming from what it
    /// holds already. Returns the bytes fetched now.
    pub async fn file(&self, file: &FileEntry, target: &Path) -> Result<u64, PullError> {
        let io = |err: std::io::Error| PullError::Install(format!("{}: {err}", target.display()));
        let mut have = match std::fs::symlink_metadata(target) {
            Ok(meta) if meta.file_type().is_file() && meta.len() <= file.bytes => meta.len(),
            // More than listed, or not a plain file: start it again.
            Ok(_) => {
                remove_any(target).map_err(io)?;
                0
            }
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => 0,
            Err(err) => return Err(io(err)),
        };
        if have > 0 {
            tracing::info!(file = %file.path, have, listed = file.bytes, "snapshot download resumed");
        }
        let started_with = have;
        let mut output = File::options()
            .create(true)
            .append(true)
            .open(target)
            .map_err(io)?;
        while have < file.bytes {
            let want = (file.bytes - have).min(PIECE_BYTES);
            let range = format!("bytes={have}-{}", have + want - 1);
            let max = usize::try_from(want).unwrap_or(usize::MAX);
            let piece = match self
                .get(&file.path, vec![("range".into(), range)], max)
                .await
            {
                Ok(response) if response.status == 206 => {
                    check_content_range(&file.path, &response, have)?;
                    response.body
                }
                // The server sent the whole file: fine if that is all it
                // has and nothing was staged; else fetch it again whole.
                Ok(response) if response.status == 200 => {
                    if have == 0 && response.body.len() as u64 == file.bytes {
                        response.body
                    } else {
                        return self.whole(file, target, started_with).await;
                    }
                }
                // Asked past the end: the server has less than listed.
                Ok(response) if response.status == 416 => {
                    return Err(PullError::Refused(
                        oap_snapshot::SnapshotError::SizeMismatch {
                            path: file.path.clone(),
                            listed: file.bytes,
                            found: have,
                        },
                    ));
                }
                Ok(response) => {
                    ok_status(&file.path, &response, 206)?;
                    Vec::new()
                }
                Err(FetchError::TooLarge { .. }) => {
                    return self.whole(file, target, started_with).await;
                }
                Err(err) => return Err(PullError::fetch(&file.path, err)),
            };
            if piece.is_empty() {
                return Err(PullError::Fetch(format!(
                    "{}: an empty piece at byte {have} of {}",
                    file.path, file.bytes
                )));
            }
            output.write_all(&piece).map_err(io)?;
            // Synced per piece: what a power cut leaves is what resumes.
            output.sync_data().map_err(io)?;
            have += piece.len() as u64;
        }
        Ok(have - started_with)
    }

    /// The whole file without `Range`, capped at its listed size, replacing
    /// whatever was staged.
    async fn whole(
        &self,
        file: &FileEntry,
        target: &Path,
        started_with: u64,
    ) -> Result<u64, PullError> {
        tracing::info!(file = %file.path, "the snapshot server ignores Range: fetching the file again whole");
        let max = usize::try_from(file.bytes).unwrap_or(usize::MAX);
        let response = self
            .get(&file.path, Vec::new(), max)
            .await
            .map_err(|err| PullError::fetch(&file.path, err))?;
        ok_status(&file.path, &response, 200)?;
        oap_store::write_atomic(target, &response.body)
            .map_err(|err| PullError::Install(err.to_string()))?;
        Ok((response.body.len() as u64).saturating_sub(started_with))
    }
}

fn remove_any(path: &Path) -> std::io::Result<()> {
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.is_dir() => std::fs::remove_dir_all(path),
        Ok(_) => std::fs::remove_file(path),
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(err) => Err(err),
    }
}

fn ok_status(what: &str, response: &FetchResponse, expected: u16) -> Result<(), PullError> {
    if response.status == expected {
        Ok(())
    } else {
        Err(PullError::Fetch(format!(
            "{what}: {} answered {} (expected {expected})",
            response.final_url, response.status
        )))
    }
}

/// A 206 must start where the board asked it to.
fn check_content_range(what: &str, response: &FetchResponse, have: u64) -> Result<(), PullError> {
    let start = response
        .headers
        .get("content-range")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("bytes "))
        .and_then(|v| v.split('-').next())
        .and_then(|v| v.trim().parse::<u64>().ok());
    if start == Some(have) {
        Ok(())
    } else {
        Err(PullError::Fetch(format!(
            "{what}: a 206 whose Content-Range does not start at byte {have}"
        )))
    }
}

//! Manifests fetched from the network, as the crawler stores them.
//!
//! Each fetched manifest is one envelope file `<key>.json` in the remote
//! directory: the publishing host, the URL it came from, its trust level and
//! the document exactly as fetched (so its content hash is the fetched
//! bytes'). Envelopes are written to a temporary file, synced and renamed
//! into place, and the directory is synced: a crash or `kill -9` at any
//! moment leaves either the old or the new envelope, never half of one, and
//! never loses one already written. The engine re-reads the directory on
//! every rebuild, like an operator directory.

use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use oap_manifest::MAX_MANIFEST_BYTES;
use serde::{Deserialize, Serialize};

use crate::catalog::{read_capped_to, Catalog, Origin, Trust};

/// An envelope holds the body as a JSON string, so escaping can grow it;
/// anything bigger than this cannot hold a manifest under the cap.
pub const MAX_ENVELOPE_BYTES: usize = 8 * MAX_MANIFEST_BYTES;

/// One stored remote manifest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RemoteDocument {
    /// The publishing host (a domain, or `<instance>.local` for the LAN).
    pub host: String,
    /// Where the document was fetched from.
    pub url: String,
    /// `internet` or `lan`; an envelope claiming `local` is refused.
    pub trust: Trust,
    /// When it was fetched (seconds since the epoch).
    pub fetched_at_unix: u64,
    /// The document exactly as served (UTF-8, at most 64 KiB).
    pub body: String,
    /// Set while the manifest's `health` URL fails: why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unhealthy: Option<String>,
}

/// The file name for `host`'s envelope: the host reduced to
/// `[a-z0-9.-]`, so no name can leave the directory.
pub fn envelope_name(host: &str) -> String {
    let cleaned: String = host
        .chars()
        .map(|c| match c.to_ascii_lowercase() {
            c @ ('a'..='z' | '0'..='9' | '.' | '-') => c,
            _ => '_',
        })
        .collect();
    let cleaned = cleaned.trim_start_matches('.');
    format!("{cleaned}.json")
}

/// Writes `doc` atomically (temp file, fsync, rename, fsync of the
/// directory). Returns the envelope's path.
pub fn write_envelope(dir: &Path, doc: &RemoteDocument) -> io::Result<PathBuf> {
    fs::create_dir_all(dir)?;
    let bytes = serde_json::to_vec(doc).map_err(io::Error::other)?;
    let path = dir.join(envelope_name(&doc.host));
    write_atomic(&path, &bytes)?;
    Ok(path)
}

/// Removes `host`'s envelope (absent is fine).
pub fn remove_envelope(dir: &Path, host: &str) -> io::Result<bool> {
    match fs::remove_file(dir.join(envelope_name(host))) {
        Ok(()) => {
            sync_dir(dir);
            Ok(true)
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(e),
    }
}

/// Reads `host`'s envelope, if there is a valid one.
pub fn read_envelope(dir: &Path, host: &str) -> Option<RemoteDocument> {
    let bytes = read_capped_to(&dir.join(envelope_name(host)), MAX_ENVELOPE_BYTES).ok()?;
    serde_json::from_slice(&bytes).ok()
}

/// Writes `bytes` to `path` so that readers see the old or the new content.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let mut tmp = tempfile_in(dir, path)?;
    let result = (|| {
        tmp.1.write_all(bytes)?;
        tmp.1.sync_all()?;
        fs::rename(&tmp.0, path)
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp.0);
    }
    result?;
    sync_dir(dir);
    Ok(())
}

fn tempfile_in(dir: &Path, target: &Path) -> io::Result<(PathBuf, fs::File)> {
    let name = target
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = dir.join(format!(".{name}.{}.tmp", std::process::id()));
    let file = fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(&tmp)?;
    Ok((tmp, file))
}

fn sync_dir(dir: &Path) {
    // A directory fsync makes the rename durable; failure only weakens
    // durability (not atomicity), so it is logged, not fatal.
    if let Err(err) = fs::File::open(dir).and_then(|d| d.sync_all()) {
        tracing::debug!(dir = %dir.display(), error = %err, "directory fsync failed");
    }
}

/// Adds every envelope in `dir` to `catalog` (files in byte order).
pub(crate) fn load_into(catalog: &mut Catalog, dir: &Path) {
    let listing = match fs::read_dir(dir) {
        Ok(listing) => listing,
        Err(err) if err.kind() == io::ErrorKind::NotFound => return,
        Err(err) => {
            catalog.problem(
                dir.display().to_string(),
                format!("cannot read directory: {err}"),
            );
            return;
        }
    };
    let mut files: Vec<PathBuf> = listing
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|path| {
            path.extension().is_some_and(|ext| ext == "json")
                && !path
                    .file_name()
                    .is_some_and(|n| n.to_string_lossy().starts_with('.'))
        })
        .collect();
    files.sort();
    files.truncate(crate::catalog::MAX_FILES_PER_DIR);
    for path in files {
        let location = path.display().to_string();
        let doc: RemoteDocument = match read_capped_to(&path, MAX_ENVELOPE_BYTES)
            .and_then(|b| serde_json::from_slice(&b).map_err(|e| e.to_string()))
        {
            Ok(doc) => doc,
            Err(message) => {
                catalog.problem(location, format!("unreadable crawl envelope: {message}"));
                continue;
            }
        };
        if doc.trust == Trust::Local {
            catalog.problem(
                location,
                "crawl envelope claims local trust; remote manifests are lan or internet".into(),
            );
            continue;
        }
        let origin = Origin {
            kind: match doc.trust {
                Trust::Lan => "lan".into(),
                _ => "crawl".into(),
            },
            location: doc.url.clone(),
        };
        let count = catalog.entries.len();
        catalog.add_document_with(doc.body.as_bytes(), origin, doc.trust, Some(&doc.host));
        if catalog.entries.len() > count {
            if let Some(entry) = catalog.entries.last_mut() {
                entry.unhealthy = doc.unhealthy.clone();
            }
        }
    }
}

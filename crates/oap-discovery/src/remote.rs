//! Manifests fetched from the network, as the crawler stores them: the
//! engine reads the envelopes of the remote directory (format and writing:
//! [`oap_store::envelope`]) into the catalog on every rebuild, like an
//! operator directory.

use std::path::Path;

use oap_store::{envelope_paths, read_envelope_at, StoreError, Trust};

use crate::entry::{read_problem, LoadProblem, Origin, MAX_FILES_PER_DIR};

// oap-store cannot see oap-manifest's cap; this keeps the two in step: an
// envelope must be able to hold any manifest under the cap.
const _: () = assert!(oap_store::MAX_ENVELOPE_BYTES >= 8 * oap_manifest::MAX_MANIFEST_BYTES);

/// One thing found in the crawl store, in the order the catalog must add
/// it (files in byte order, so that precedence is stable).
pub(crate) enum RemoteItem {
    /// A directory or envelope that could not be used, and why.
    Problem(LoadProblem),
    /// A stored manifest, ready to validate and add.
    Manifest(StoredManifest),
}

/// A manifest as the crawler stored it, with what the catalog needs to
/// place it.
pub(crate) struct StoredManifest {
    /// The manifest document as fetched.
    pub(crate) body: String,
    /// `lan`, `crawl` or `snapshot`, and the URL it came from.
    pub(crate) origin: Origin,
    /// Never local (such an envelope is a problem instead).
    pub(crate) trust: Trust,
    /// The host whose name prefixes the manifest's id.
    pub(crate) host: String,
    /// The crawler's health verdict, when the manifest is down.
    pub(crate) unhealthy: Option<String>,
}

/// Hands every envelope in `dir` to `each`, one at a time (files in byte
/// order): a crawl of 10,000 manifests is never held in memory twice.
/// `internet_kind` is the origin kind of an internet-trust envelope
/// (`crawl`, or `snapshot` for a snapshot's tools); LAN ones are `lan`.
pub(crate) fn read_each(dir: &Path, internet_kind: &str, mut each: impl FnMut(RemoteItem)) {
    let problem =
        |location: String, message: String| RemoteItem::Problem(LoadProblem { location, message });
    let files = match envelope_paths(dir, MAX_FILES_PER_DIR) {
        Ok(files) => files,
        Err(err) => {
            let message = match err {
                StoreError::Io { source, .. } => source.to_string(),
                other => other.to_string(),
            };
            each(problem(
                dir.display().to_string(),
                format!("cannot read directory: {message}"),
            ));
            return;
        }
    };
    for path in files {
        let location = path.display().to_string();
        let doc = match read_envelope_at(&path) {
            Ok(doc) => doc,
            Err(err) => {
                let message = match err {
                    StoreError::Invalid { message, .. } => message,
                    other => read_problem(other, oap_store::MAX_ENVELOPE_BYTES),
                };
                each(problem(
                    location,
                    format!("unreadable crawl envelope: {message}"),
                ));
                continue;
            }
        };
        if doc.trust == Trust::Local {
            each(problem(
                location,
                "crawl envelope claims local trust; remote manifests are lan or internet".into(),
            ));
            continue;
        }
        let origin = Origin {
            kind: match doc.trust {
                Trust::Lan => "lan".into(),
                _ => internet_kind.into(),
            },
            location: doc.url,
        };
        each(RemoteItem::Manifest(StoredManifest {
            body: doc.body,
            origin,
            trust: doc.trust,
            host: doc.host,
            unhealthy: doc.unhealthy,
        }));
    }
}

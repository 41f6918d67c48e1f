//! Manifests fetched from the network, as the crawler stores them: the
//! engine reads the envelopes of the remote directory (format and writing:
//! [`oap_store::envelope`]) into the catalog on every rebuild, like an
//! operator directory.

use std::path::Path;

use oap_store::{envelope_paths, read_envelope_at, StoreError};

use crate::catalog::{read_problem, Catalog, Origin, Trust};

// oap-store cannot see oap-manifest's cap; this keeps the two in step: an
// envelope must be able to hold any manifest under the cap.
const _: () = assert!(oap_store::MAX_ENVELOPE_BYTES >= 8 * oap_manifest::MAX_MANIFEST_BYTES);

/// Adds every envelope in `dir` to `catalog` (files in byte order).
pub(crate) fn load_into(catalog: &mut Catalog, dir: &Path) {
    let files = match envelope_paths(dir, crate::catalog::MAX_FILES_PER_DIR) {
        Ok(files) => files,
        Err(err) => {
            let message = match err {
                StoreError::Io { source, .. } => source.to_string(),
                other => other.to_string(),
            };
            catalog.problem(
                dir.display().to_string(),
                format!("cannot read directory: {message}"),
            );
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

//! Manifests fetched from the network, as the crawler stores them.
//!
//! Each fetched manifest is one envelope file `<key>.json` in the remote
//! directory: the publishing host, the URL it came from, its trust level and
//! the document exactly as fetched (so its content hash is the fetched
//! bytes'). Envelopes are written with [`write_atomic`](crate::write_atomic)
//! and removals are followed by a directory fsync: a crash or `kill -9` at
//! any moment leaves either the old or the new envelope, never half of one,
//! and never loses one already written. Files starting with a dot are
//! temporary files, never envelopes. The discovery engine re-reads the
//! directory on every rebuild, like an operator directory.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::atomic::sync_dir;
use crate::{read_capped, write_atomic, StoreError, Trust};

/// An envelope holds the body as a JSON string, so escaping can grow it;
/// anything bigger than this cannot hold a manifest under oap-manifest's
/// 64 KiB cap (eight times that cap).
pub const MAX_ENVELOPE_BYTES: usize = 8 * 64 * 1024;

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

/// Longest envelope file name, in bytes: a file name holds 255, and the
/// atomic write's temporary name adds a dot, the process id and `.tmp`.
pub const MAX_ENVELOPE_NAME: usize = 200;

/// The file name for `host`'s envelope: the host reduced to
/// `[a-z0-9.-]`, so no name can leave the directory, and at most
/// [`MAX_ENVELOPE_NAME`] bytes. A longer one (a domain may have 253 bytes)
/// keeps its beginning and ends in a hash of the whole reduced host, so
/// two long hosts still get two files.
pub fn envelope_name(host: &str) -> String {
    const SUFFIX: &str = ".json";
    let cleaned: String = host
        .chars()
        .map(|c| match c.to_ascii_lowercase() {
            c @ ('a'..='z' | '0'..='9' | '.' | '-') => c,
            _ => '_',
        })
        .collect();
    let cleaned = cleaned.trim_start_matches('.');
    if cleaned.len() + SUFFIX.len() <= MAX_ENVELOPE_NAME {
        return format!("{cleaned}{SUFFIX}");
    }
    let digest = Sha256::digest(cleaned.as_bytes());
    let hash: String = digest[..8].iter().map(|b| format!("{b:02x}")).collect();
    // ASCII only: characters are bytes.
    let keep = MAX_ENVELOPE_NAME - SUFFIX.len() - 1 - hash.len();
    let start: String = cleaned.chars().take(keep).collect();
    format!("{start}-{hash}{SUFFIX}")
}

/// Writes `doc` atomically into `dir` (created if missing). Returns the
/// envelope's path.
pub fn write_envelope(dir: &Path, doc: &RemoteDocument) -> Result<PathBuf, StoreError> {
    fs::create_dir_all(dir).map_err(StoreError::io("creating", dir))?;
    let path = dir.join(envelope_name(&doc.host));
    let bytes = serde_json::to_vec(doc).map_err(|err| StoreError::Invalid {
        path: path.clone(),
        message: err.to_string(),
    })?;
    write_atomic(&path, &bytes)?;
    Ok(path)
}

/// Removes `host`'s envelope; whether there was one (absent is fine).
pub fn remove_envelope(dir: &Path, host: &str) -> Result<bool, StoreError> {
    let path = dir.join(envelope_name(host));
    match fs::remove_file(&path) {
        Ok(()) => {
            sync_dir(dir);
            Ok(true)
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(StoreError::io("removing", path)(e)),
    }
}

/// Reads `host`'s envelope, if there is a valid one.
pub fn read_envelope(dir: &Path, host: &str) -> Option<RemoteDocument> {
    read_envelope_at(&dir.join(envelope_name(host))).ok()
}

/// Reads and parses the envelope file at `path` (at most
/// [`MAX_ENVELOPE_BYTES`]).
pub fn read_envelope_at(path: &Path) -> Result<RemoteDocument, StoreError> {
    let bytes = read_capped(path, MAX_ENVELOPE_BYTES as u64)?;
    serde_json::from_slice(&bytes).map_err(|err| StoreError::Invalid {
        path: path.to_path_buf(),
        message: err.to_string(),
    })
}

/// The envelope files in `dir` (`*.json`, no dot files), in byte order of
/// their names, at most `max` of them. A missing directory holds none.
pub fn envelope_paths(dir: &Path, max: usize) -> Result<Vec<PathBuf>, StoreError> {
    let listing = match fs::read_dir(dir) {
        Ok(listing) => listing,
        Err(err) if err.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(err) => return Err(StoreError::io("listing", dir)(err)),
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
    files.truncate(max);
    Ok(files)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Found by fuzzing: a host with a 63-byte label and more made a file
    /// name past the 255 bytes a file system takes, so the envelope could
    /// not be written.
    #[test]
    fn a_host_of_the_longest_domain_length_is_stored_and_distinct_from_its_neighbour() {
        let label = "a".repeat(63);
        let longest = format!("{label}.{label}.{label}.{}", "b".repeat(61));
        assert_eq!(longest.len(), 253);
        let neighbour: String = longest.chars().take(252).chain(['c']).collect();
        let dir = tempfile::tempdir().unwrap();
        let mut names = Vec::new();
        for host in [&longest, &neighbour] {
            let written = write_envelope(dir.path(), &doc(host)).expect("written");
            let name = written.file_name().unwrap().to_str().unwrap().to_string();
            assert!(name.len() <= MAX_ENVELOPE_NAME, "{name}");
            assert!(
                name.starts_with(&label) && name.ends_with(".json"),
                "{name}"
            );
            assert_eq!(read_envelope(dir.path(), host), Some(doc(host)));
            names.push(name);
        }
        assert_ne!(names[0], names[1]);
        // Short hosts keep the names they always had.
        assert_eq!(envelope_name("Example.COM"), "example.com.json");
        let at_the_limit = "d".repeat(MAX_ENVELOPE_NAME - ".json".len());
        assert_eq!(envelope_name(&at_the_limit), format!("{at_the_limit}.json"));
    }

    fn doc(host: &str) -> RemoteDocument {
        RemoteDocument {
            host: host.into(),
            url: format!("https://{host}/.well-known/oap.json"),
            trust: Trust::Internet,
            fetched_at_unix: 1,
            body: "{\"name\": \"x\"}".into(),
            unhealthy: None,
        }
    }

    #[test]
    fn names_cannot_leave_the_directory() {
        assert_eq!(envelope_name("Example.ORG:8443"), "example.org_8443.json");
        assert_eq!(envelope_name("../../etc/passwd"), "_.._etc_passwd.json");
        assert_eq!(envelope_name("..hidden"), "hidden.json");
    }

    #[test]
    fn envelopes_round_trip_and_temporary_files_are_not_listed() {
        let dir = tempfile::tempdir().unwrap();
        let remote = dir.path().join("crawled");
        assert!(envelope_paths(&remote, 10).unwrap().is_empty());
        let mut lan = doc("kitchen.local");
        lan.trust = Trust::Lan;
        lan.unhealthy = Some("health answered 503".into());
        let path = write_envelope(&remote, &lan).unwrap();
        write_envelope(&remote, &doc("b.example")).unwrap();
        fs::write(remote.join(".b.example.json.1.tmp"), b"{").unwrap();
        fs::write(remote.join("notes.txt"), b"x").unwrap();

        assert_eq!(read_envelope(&remote, "kitchen.local"), Some(lan));
        assert_eq!(
            envelope_paths(&remote, 10).unwrap(),
            vec![remote.join("b.example.json"), path]
        );
        assert_eq!(envelope_paths(&remote, 1).unwrap().len(), 1);

        assert!(remove_envelope(&remote, "kitchen.local").unwrap());
        assert!(!remove_envelope(&remote, "kitchen.local").unwrap());
        assert_eq!(read_envelope(&remote, "kitchen.local"), None);
    }

    #[test]
    fn damaged_envelopes_are_errors_naming_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.json");
        fs::write(&path, b"{\"host\": 1}").unwrap();
        let err = read_envelope_at(&path).unwrap_err();
        assert!(matches!(err, StoreError::Invalid { .. }), "{err:?}");
        assert!(err.to_string().contains("x.json"), "{err}");
        fs::write(&path, vec![b' '; MAX_ENVELOPE_BYTES + 1]).unwrap();
        assert!(matches!(
            read_envelope_at(&path),
            Err(StoreError::TooLarge { .. })
        ));
        assert_eq!(read_envelope(dir.path(), "x"), None);
    }
}

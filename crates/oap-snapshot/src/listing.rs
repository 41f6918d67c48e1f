//! `snapshot.json`: what a snapshot holds, and what a valid listing is.
//!
//! The listing is the one thing signed; everything else is trusted through
//! it. So its rules are strict where a hostile listing could hurt a board:
//! a path must stay inside the snapshot directory (relative, plain
//! components, no `..`, no absolute path, no backslash or control
//! character), the number of files and the bytes they add up to are
//! capped before anything is downloaded, and a hash must be a SHA-256.
//! Unknown fields are ignored so that a later snapshot can add some; a
//! change that older boards must not misread raises [`FORMAT`].

use std::collections::HashSet;

use serde::{Deserialize, Serialize};

use crate::error::SnapshotError;

/// The listing's file name inside a snapshot directory.
pub const LISTING_FILE: &str = "snapshot.json";
/// The minisign signature of [`LISTING_FILE`].
pub const SIGNATURE_FILE: &str = "snapshot.json.minisig";
/// The catalog's file name inside a snapshot (one JSON record per
/// capability, as `oapd snapshot build` writes it).
pub const CATALOG_FILE: &str = "catalog.jsonl";
/// The listing format this build reads and writes.
pub const FORMAT: u32 = 1;
/// Largest listing read (a million-tool catalog is split into a few
/// files, not listed tool by tool, so this is generous).
pub const MAX_LISTING_BYTES: u64 = 8 << 20;
/// Most files one snapshot may list.
pub const MAX_FILES: usize = 10_000;
/// Longest listed path, in bytes.
const MAX_PATH_BYTES: usize = 255;
/// Deepest listed path, in components.
const MAX_DEPTH: usize = 4;
/// Longest model id or generator name.
const MAX_NAME_BYTES: usize = 512;

/// The parsed `snapshot.json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Listing {
    /// [`FORMAT`] of the writer.
    pub format: u32,
    /// Grows with every snapshot a signer publishes; a board refuses one
    /// that is not newer than what it has (replay protection).
    pub version: u64,
    /// When it was built (RFC 3339, UTC); shown, not trusted for ordering.
    pub created: String,
    /// The encoder the vectors were made with (the engine's model id); a
    /// board with another encoder cannot use them.
    pub model_id: String,
    /// What wrote the request rows (a model name), if any were generated.
    #[serde(default)]
    pub generator: Option<String>,
    /// Every file of the snapshot.
    pub files: Vec<FileEntry>,
}

/// One file of a snapshot.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileEntry {
    /// Relative path inside the snapshot directory (`/`-separated).
    pub path: String,
    /// Exact size.
    pub bytes: u64,
    /// SHA-256 of the content, lower-case hex.
    pub sha256: String,
}

impl Listing {
    /// Parses and checks a listing (see [`Listing::check`]).
    pub fn parse(bytes: &[u8]) -> Result<Listing, SnapshotError> {
        let listing: Listing = serde_json::from_slice(bytes)
            .map_err(|err| SnapshotError::Listing(format!("not a snapshot listing: {err}")))?;
        listing.check()?;
        Ok(listing)
    }

    /// The listing's rules: a known format, a model id, at most
    /// [`MAX_FILES`] files, each at a path inside the snapshot (see
    /// [`check_path`]) listed once, with a SHA-256.
    pub fn check(&self) -> Result<(), SnapshotError> {
        if self.format != FORMAT {
            return Err(SnapshotError::Listing(format!(
                "format {} is not the format {FORMAT} this oapd reads (a newer oapd may)",
                self.format
            )));
        }
        if self.model_id.trim().is_empty() || self.model_id.len() > MAX_NAME_BYTES {
            return Err(SnapshotError::Listing(format!(
                "model_id must name the encoder (1 to {MAX_NAME_BYTES} bytes)"
            )));
        }
        if self
            .generator
            .as_ref()
            .is_some_and(|g| g.len() > MAX_NAME_BYTES)
        {
            return Err(SnapshotError::Listing(format!(
                "generator is longer than {MAX_NAME_BYTES} bytes"
            )));
        }
        if self.files.len() > MAX_FILES {
            return Err(SnapshotError::Listing(format!(
                "{} files listed, at most {MAX_FILES}",
                self.files.len()
            )));
        }
        let mut seen = HashSet::new();
        for file in &self.files {
            check_path(&file.path)?;
            if !seen.insert(file.path.as_str()) {
                return Err(SnapshotError::Listing(format!(
                    "{:?} is listed twice",
                    file.path
                )));
            }
            if file.sha256.len() != 64
                || !file
                    .sha256
                    .bytes()
                    .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
            {
                return Err(SnapshotError::Listing(format!(
                    "{:?}: sha256 must be 64 lower-case hex digits",
                    file.path
                )));
            }
        }
        // A file may not also be a directory of another ("a" and "a/b"):
        // the second could never be written.
        for file in &self.files {
            let mut prefix = file.path.as_str();
            while let Some((parent, _)) = prefix.rsplit_once('/') {
                if seen.contains(parent) {
                    return Err(SnapshotError::Listing(format!(
                        "{:?} is listed as a file and as the directory of {:?}",
                        parent, file.path
                    )));
                }
                prefix = parent;
            }
        }
        Ok(())
    }

    /// Every listed byte, saturating (a hostile listing may claim
    /// `u64::MAX` several times).
    pub fn total_bytes(&self) -> u64 {
        self.files
            .iter()
            .fold(0u64, |sum, file| sum.saturating_add(file.bytes))
    }

    /// The entry for `path`, if listed.
    pub fn file(&self, path: &str) -> Option<&FileEntry> {
        self.files.iter().find(|file| file.path == path)
    }
}

/// A listed path must be a plain relative path that stays inside the
/// snapshot directory on every system: `/`-separated components of
/// letters, digits, `.`, `_` and `-`, none of them empty, `.` or `..`, none
/// starting with `.` (no hidden files, no `..` spelled any way), at most
/// [`MAX_DEPTH`] deep and [`MAX_PATH_BYTES`] long. The listing and its
/// signature are not files of the snapshot.
pub fn check_path(path: &str) -> Result<(), SnapshotError> {
    let outside = |why| {
        Err(SnapshotError::PathOutside {
            path: path.to_owned(),
            why,
        })
    };
    if path.is_empty() {
        return outside("empty");
    }
    if path.len() > MAX_PATH_BYTES {
        return outside("longer than 255 bytes");
    }
    if path.starts_with('/') {
        return outside("absolute");
    }
    let components: Vec<&str> = path.split('/').collect();
    if components.len() > MAX_DEPTH {
        return outside("more than 4 levels deep");
    }
    for component in &components {
        if component.is_empty() {
            return outside("an empty component (`//` or a trailing `/`)");
        }
        if *component == ".." {
            return outside("`..` leaves the directory");
        }
        if component.starts_with('.') {
            return outside("a component starting with `.`");
        }
        if !component
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
        {
            return outside("characters other than letters, digits, `.`, `_` and `-`");
        }
    }
    if path == LISTING_FILE || path == SIGNATURE_FILE {
        return outside("the listing and its signature are not files of the snapshot");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn listing(files: Vec<FileEntry>) -> Listing {
        Listing {
            format: FORMAT,
            version: 1,
            created: "2026-12-07T08:00:00Z".into(),
            model_id: "all-MiniLM-L6-v2".into(),
            generator: None,
            files,
        }
    }

    fn entry(path: &str) -> FileEntry {
        FileEntry {
            path: path.into(),
            bytes: 1,
            sha256: "0".repeat(64),
        }
    }

    #[test]
    fn plain_paths_pass_and_every_way_out_is_refused_by_name() {
        for good in ["index.oapx", "catalog/part-0001.jsonl", "a/b/c/d.json"] {
            assert!(check_path(good).is_ok(), "{good}");
        }
        let cases = [
            ("", "empty"),
            ("/etc/passwd", "absolute"),
            ("../index.oapx", "`..`"),
            ("catalog/../../x", "`..`"),
            ("catalog//x", "empty component"),
            ("catalog/", "empty component"),
            (".ssh/authorized_keys", "starting with `.`"),
            ("a\\..\\b", "characters"),
            ("a/b/c/d/e", "4 levels"),
            ("caf\u{e9}", "characters"),
            ("x\ny", "characters"),
            ("snapshot.json", "not files of the snapshot"),
        ];
        for (path, why) in cases {
            let err = check_path(path).expect_err(path).to_string();
            assert!(err.contains(why), "{path:?}: {err}");
        }
        let long = "a".repeat(256);
        assert!(check_path(&long).is_err());
    }

    #[test]
    fn a_listing_with_a_duplicate_a_file_as_directory_or_a_bad_hash_is_refused() {
        assert!(listing(vec![entry("index.oapx")]).check().is_ok());
        let twice = listing(vec![entry("a"), entry("a")]).check().unwrap_err();
        assert!(twice.to_string().contains("twice"), "{twice}");
        let nested = listing(vec![entry("a"), entry("a/b")]).check().unwrap_err();
        assert!(
            nested
                .to_string()
                .contains("as a file and as the directory"),
            "{nested}"
        );
        let mut upper = entry("a");
        upper.sha256 = "A".repeat(64);
        let hash = listing(vec![upper]).check().unwrap_err();
        assert!(hash.to_string().contains("sha256"), "{hash}");
        let mut no_model = listing(vec![]);
        no_model.model_id = " ".into();
        assert!(no_model
            .check()
            .unwrap_err()
            .to_string()
            .contains("model_id"));
        let mut newer = listing(vec![]);
        newer.format = 2;
        assert!(newer.check().unwrap_err().to_string().contains("format 2"));
    }

    #[test]
    fn total_bytes_saturates_instead_of_wrapping() {
        let mut a = entry("a");
        a.bytes = u64::MAX;
        let mut b = entry("b");
        b.bytes = u64::MAX;
        assert_eq!(listing(vec![a, b]).total_bytes(), u64::MAX);
    }

    #[test]
    fn unknown_fields_are_ignored_and_a_missing_field_is_named() {
        let with_extra =
            br#"{"format":1,"version":3,"created":"x","model_id":"m","files":[],"later":true}"#;
        assert_eq!(Listing::parse(with_extra).unwrap().version, 3);
        let missing = br#"{"format":1,"created":"x","model_id":"m","files":[]}"#;
        let err = Listing::parse(missing).unwrap_err().to_string();
        assert!(err.contains("version"), "{err}");
    }
}

//! Why a snapshot was refused: every variant names what was wrong, so an
//! operator reading `/health` or the log knows which file or field to fix.

use std::path::PathBuf;

use oap_store::StoreError;

/// A snapshot that could not be built, read or trusted.
#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    /// Reading or writing a file failed.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// What the system said.
        source: std::io::Error,
    },
    /// A capped read or an atomic write failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The signature file is not a minisign signature.
    #[error("snapshot.json.minisig is not a minisign signature: {0}")]
    SignatureFormat(String),
    /// The signature was made by a key the board does not trust.
    #[error("the snapshot is signed by key {key_id}, which is none of the {trusted} trusted public keys")]
    UnknownKey {
        /// The signer's key id (as minisign prints it).
        key_id: String,
        /// How many keys the board trusts.
        trusted: usize,
    },
    /// The signature does not match the listing.
    #[error("bad signature by key {key_id}: {reason}")]
    BadSignature {
        /// The signer's key id.
        key_id: String,
        /// What minisign said.
        reason: String,
    },
    /// The listing is not a valid snapshot listing.
    #[error("snapshot.json: {0}")]
    Listing(String),
    /// The listing names a path that would leave the snapshot directory.
    #[error("snapshot.json names {path:?}, which is not a plain path inside the snapshot: {why}")]
    PathOutside {
        /// The path as listed.
        path: String,
        /// What is wrong with it.
        why: &'static str,
    },
    /// The listing claims more bytes than the board accepts.
    #[error("the snapshot claims {claimed} bytes, more than the {cap} bytes this board accepts")]
    TooLarge {
        /// What the listing adds up to.
        claimed: u64,
        /// The board's cap.
        cap: u64,
    },
    /// The vectors were made with another encoder than the board's.
    #[error("the snapshot's vectors were made by the encoder {snapshot:?}; this board embeds with {board:?}, so they cannot be used")]
    ModelMismatch {
        /// The snapshot's model id.
        snapshot: String,
        /// The board's model id.
        board: String,
    },
    /// A snapshot that is not newer than the one installed.
    #[error("snapshot version {offered} is not newer than the installed version {installed}: an older or replayed snapshot is refused")]
    Replayed {
        /// The version offered.
        offered: u64,
        /// The version installed.
        installed: u64,
    },
    /// A file's size differs from the listing.
    #[error("{path}: {found} bytes where snapshot.json lists {listed} (truncated or altered)")]
    SizeMismatch {
        /// The file, as listed.
        path: String,
        /// The size listed.
        listed: u64,
        /// The size found.
        found: u64,
    },
    /// A file's content differs from the listing.
    #[error("{path}: SHA-256 {found} where snapshot.json lists {listed} (altered)")]
    HashMismatch {
        /// The file, as listed.
        path: String,
        /// The hash listed.
        listed: String,
        /// The hash found.
        found: String,
    },
    /// A listed path is a symlink, a directory or a device.
    #[error("{path}: not a regular file")]
    NotAFile {
        /// The file, as listed.
        path: String,
    },
    /// A key file could not be read or made.
    #[error("key: {0}")]
    Key(String),
}

impl SnapshotError {
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> SnapshotError {
        SnapshotError::Io {
            path: path.into(),
            source,
        }
    }
}

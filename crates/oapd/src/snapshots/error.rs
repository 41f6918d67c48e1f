//! Why a snapshot check installed nothing, and the word `/metrics`
//! counts it under: shared by the fetch and the pull that drives it.

use oap_snapshot::SnapshotError;

/// Why a check installed nothing.
#[derive(Debug, thiserror::Error)]
pub enum PullError {
    /// The snapshot host could not be reached or answered wrongly.
    #[error("fetch: {0}")]
    Fetch(String),
    /// The snapshot failed a check.
    #[error("refused: {0}")]
    Refused(#[from] SnapshotError),
    /// The board could not stage or swap it in.
    #[error("install: {0}")]
    Install(String),
    /// The index could not be rebuilt with it (the previous one is back).
    #[error("rebuild with the new snapshot failed; the previous snapshot serves again")]
    Rebuild,
}

impl PullError {
    pub(super) fn fetch(what: &str, err: oap_exec::FetchError) -> PullError {
        PullError::Fetch(format!("{what}: {err}"))
    }

    /// The short word `/metrics` counts it under.
    pub fn reason(&self) -> &'static str {
        match self {
            PullError::Fetch(_) => "fetch",
            PullError::Install(_) => "install",
            PullError::Rebuild => "rebuild",
            PullError::Refused(err) => match err {
                SnapshotError::SignatureFormat(_)
                | SnapshotError::UnknownKey { .. }
                | SnapshotError::BadSignature { .. }
                | SnapshotError::Key(_) => "signature",
                SnapshotError::Listing(_) => "listing",
                SnapshotError::PathOutside { .. } => "path",
                SnapshotError::TooLarge { .. } => "too_large",
                SnapshotError::ModelMismatch { .. } => "model",
                SnapshotError::Replayed { .. } => "replayed",
                SnapshotError::SizeMismatch { .. } | SnapshotError::NotAFile { .. } => "size",
                SnapshotError::HashMismatch { .. } => "hash",
                SnapshotError::Io { .. } | SnapshotError::Store(_) => "install",
            },
        }
    }

    /// Whether asking again for the same listing cannot help (its
    /// validators are kept, so the next check is a cheap 304).
    pub(super) fn is_final(&self) -> bool {
        matches!(self, PullError::Refused(err) if !matches!(err, SnapshotError::Io { .. } | SnapshotError::Store(_)))
    }
}

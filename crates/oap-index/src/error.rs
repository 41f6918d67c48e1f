//! Error type for the index crate.

use std::io;
use std::path::PathBuf;

/// Everything that can go wrong when building, writing, opening or querying an index.
///
/// `Corrupt` is deliberately a single variant with a human-readable `reason`: a torn,
/// truncated or hostile file is never something the caller can repair field by field,
/// but the log line must say *what* is wrong so an operator can tell a bad disk from a
/// format bug.
#[derive(Debug, thiserror::Error)]
pub enum IndexError {
    /// The index file does not exist (first start, or it was removed).
    #[error("index file {path} not found")]
    NotFound {
        /// Path that was opened.
        path: PathBuf,
    },

    /// The index file exists but fails a structural or checksum check.
    #[error("index file {path} is corrupt: {reason}")]
    Corrupt {
        /// Path that was opened.
        path: PathBuf,
        /// What check failed (section name, offsets, counts...).
        reason: String,
    },

    /// An operating-system I/O error, with the operation that failed.
    #[error("I/O error while {op} {path}: {source}")]
    Io {
        /// Which step failed ("creating", "renaming", "fsyncing directory of" ...).
        op: &'static str,
        /// Path the step was operating on.
        path: PathBuf,
        /// Underlying error.
        #[source]
        source: io::Error,
    },

    /// A vector (document row or query) has the wrong number of components.
    #[error("vector dimension mismatch: index has dim {expected}, got {got}")]
    DimMismatch {
        /// Index dimension.
        expected: usize,
        /// Length supplied by the caller.
        got: usize,
    },

    /// Two documents share an id (ids are the lookup key, they must be unique).
    #[error("duplicate document id {id:?}")]
    DuplicateId {
        /// The offending id.
        id: String,
    },

    /// A field exceeds a documented cap.
    #[error("{what} is {len} bytes, above the cap of {max} bytes")]
    TooLarge {
        /// Which field ("document id", "record", "meta", "term").
        what: &'static str,
        /// Supplied length.
        len: usize,
        /// Cap.
        max: usize,
    },

    /// Any other invalid argument (NaN component, negative weight, empty id, bad JSON...).
    #[error("invalid input: {reason}")]
    InvalidInput {
        /// What is wrong.
        reason: String,
    },
}

impl IndexError {
    pub(crate) fn io(op: &'static str, path: impl Into<PathBuf>, source: io::Error) -> Self {
        IndexError::Io {
            op,
            path: path.into(),
            source,
        }
    }

    pub(crate) fn invalid(reason: impl Into<String>) -> Self {
        IndexError::InvalidInput {
            reason: reason.into(),
        }
    }
}

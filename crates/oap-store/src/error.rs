//! Error type of the store: every variant names the file it concerns.

use std::io;
use std::path::PathBuf;

/// What went wrong writing or reading a stored file.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The target path ends in `..` or `/` (or is empty): there is no file
    /// name to write.
    #[error("{} has no file name", path.display())]
    NoFileName {
        /// The path given.
        path: PathBuf,
    },

    /// An operating-system error, with the step that failed.
    #[error("{op} {}: {source}", path.display())]
    Io {
        /// The step: "creating", "writing", "fsyncing", "renaming temp file
        /// over", "removing", "listing", "inspecting", "opening", "reading".
        op: &'static str,
        /// The file (or directory) the step worked on.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: io::Error,
    },

    /// The path exists but is a directory, FIFO, device or socket.
    #[error("{} is not a regular file", path.display())]
    NotAFile {
        /// The path read.
        path: PathBuf,
    },

    /// The file is larger than the caller's cap; nothing of it was read.
    #[error("{} is {size} bytes, larger than the {limit} byte limit", path.display())]
    TooLarge {
        /// The path read.
        path: PathBuf,
        /// Its size when inspected.
        size: u64,
        /// The cap.
        limit: u64,
    },

    /// The file grew past the cap between the size check and the read.
    #[error("{} grew past the {limit} byte limit while reading", path.display())]
    GrewPastLimit {
        /// The path read.
        path: PathBuf,
        /// The cap.
        limit: u64,
    },

    /// The file was read but its content is not what it should be.
    #[error("{} is not valid: {message}", path.display())]
    Invalid {
        /// The path read.
        path: PathBuf,
        /// What is wrong with it.
        message: String,
    },
}

impl StoreError {
    pub(crate) fn io(op: &'static str, path: impl Into<PathBuf>) -> impl FnOnce(io::Error) -> Self {
        let path = path.into();
        move |source| StoreError::Io { op, path, source }
    }

    /// Whether the file (or directory) does not exist.
    pub fn is_not_found(&self) -> bool {
        matches!(self, StoreError::Io { source, .. } if source.kind() == io::ErrorKind::NotFound)
    }
}

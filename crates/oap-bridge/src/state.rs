//! Small JSON documents the daemon keeps in its state directory (the
//! validation store, the experience cache): written atomically so a crash
//! or a power cut mid-write leaves either the old file or the new one,
//! never a torn one, and read with a size cap.

use std::path::{Path, PathBuf};

/// Why a state file could not be read or written. Callers log it; a
/// file that cannot be read counts as empty, so the daemon keeps serving.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    /// The file system refused an operation.
    #[error("{action} {path}: {source}")]
    Io {
        /// What was being done ("reading", "writing", "renaming", ...).
        action: &'static str,
        /// The file or directory concerned.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// The file is larger than the reader's cap (it is not read).
    #[error("{path} is {size} bytes, over the {limit} byte limit")]
    TooLarge {
        /// The file concerned.
        path: PathBuf,
        /// Its size, bytes.
        size: u64,
        /// The cap, bytes.
        limit: u64,
    },
    /// The file is not the JSON document expected.
    #[error("{path} is not valid: {message}")]
    Invalid {
        /// The file concerned.
        path: PathBuf,
        /// What the parser objected to.
        message: String,
    },
}

fn io<'a>(action: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> StateError + 'a {
    move |source| StateError::Io {
        action,
        path: path.to_path_buf(),
        source,
    }
}

/// Writes `value` as JSON through `oap_store::write_atomic` (a temporary
/// file named after the process id, fsync, rename, directory fsync), so the
/// daemon and a concurrent `oapd validate-model` never write the same
/// temporary file and a crash leaves the old file or the new one.
pub fn write_json_atomic<T: serde::Serialize>(path: &Path, value: &T) -> Result<(), StateError> {
    let bytes = serde_json::to_vec(value).map_err(|err| StateError::Invalid {
        path: path.to_path_buf(),
        message: err.to_string(),
    })?;
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir.to_path_buf(),
        _ => PathBuf::from("."),
    };
    std::fs::create_dir_all(&dir).map_err(io("creating", &dir))?;
    oap_store::write_atomic(path, &bytes)
        .map(|_| ())
        .map_err(|err| from_store(path, err))
}

/// Reads and parses a JSON state file of at most `limit` bytes; `Ok(None)`
/// when it does not exist. Read through `oap_store::read_capped`: never
/// more than `limit` bytes in memory, never blocked by a FIFO.
pub fn read_json<T: serde::de::DeserializeOwned>(
    path: &Path,
    limit: u64,
) -> Result<Option<T>, StateError> {
    let bytes = match oap_store::read_capped(path, limit) {
        Ok(bytes) => bytes,
        Err(err) if err.is_not_found() => return Ok(None),
        Err(err) => return Err(from_store(path, err)),
    };
    serde_json::from_slice(&bytes)
        .map(Some)
        .map_err(|err| StateError::Invalid {
            path: path.to_path_buf(),
            message: err.to_string(),
        })
}

/// The store's error in this module's terms (the messages name the file).
fn from_store(path: &Path, err: oap_store::StoreError) -> StateError {
    match err {
        oap_store::StoreError::Io { op, path, source } => StateError::Io {
            action: op,
            path,
            source,
        },
        oap_store::StoreError::TooLarge { path, size, limit } => {
            StateError::TooLarge { path, size, limit }
        }
        other => StateError::Invalid {
            path: path.to_path_buf(),
            message: other.to_string(),
        },
    }
}

/// Modification time of `path`, to notice another process's writes.
pub fn modified(path: &Path) -> Option<std::time::SystemTime> {
    std::fs::metadata(path).and_then(|m| m.modified()).ok()
}

/// Seconds since the Unix epoch.
pub fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_atomically_and_reads_back() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub/store.json");
        assert!(read_json::<serde_json::Value>(&path, 1024)
            .unwrap()
            .is_none());
        write_json_atomic(&path, &serde_json::json!({"a": 1})).unwrap();
        write_json_atomic(&path, &serde_json::json!({"a": 2})).unwrap();
        let back: serde_json::Value = read_json(&path, 1024).unwrap().unwrap();
        assert_eq!(back["a"], 2);
        // No temporary file is left behind.
        let names: Vec<_> = std::fs::read_dir(path.parent().unwrap())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names.len(), 1, "{names:?}");
    }

    #[test]
    fn oversized_and_corrupt_files_are_errors_not_panics() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("store.json");
        std::fs::write(&path, vec![b' '; 2048]).unwrap();
        assert!(matches!(
            read_json::<serde_json::Value>(&path, 1024),
            Err(StateError::TooLarge { .. })
        ));
        std::fs::write(&path, b"{not json").unwrap();
        let err = read_json::<serde_json::Value>(&path, 1024).unwrap_err();
        assert!(err.to_string().contains("not valid"), "{err}");
    }
}

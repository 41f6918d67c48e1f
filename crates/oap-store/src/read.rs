//! Reading a stored file with a size cap.

use std::fs;
use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use crate::StoreError;

/// Reads the regular file at `path`, refusing it when it is larger than
/// `limit` bytes, without reading more than `limit + 1` bytes of it (a 10 GB
/// file where a small one belongs must not exhaust memory). Anything but a
/// regular file (a directory, FIFO, device, socket) is refused before it is
/// opened, so a FIFO cannot block the reader. A missing file is an
/// [`StoreError::Io`] for which [`StoreError::is_not_found`] holds.
pub fn read_capped(path: &Path, limit: u64) -> Result<Vec<u8>, StoreError> {
    let meta = fs::metadata(path).map_err(StoreError::io("inspecting", path))?;
    if !meta.is_file() {
        return Err(StoreError::NotAFile {
            path: path.to_path_buf(),
        });
    }
    if meta.len() > limit {
        return Err(StoreError::TooLarge {
            path: path.to_path_buf(),
            size: meta.len(),
            limit,
        });
    }
    // Without waiting for a FIFO's writer, should one replace the file
    // between the check above and this open; checked again on the handle.
    let file = fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
        .map_err(StoreError::io("opening", path))?;
    let meta = file
        .metadata()
        .map_err(StoreError::io("inspecting", path))?;
    if !meta.is_file() {
        return Err(StoreError::NotAFile {
            path: path.to_path_buf(),
        });
    }
    let mut bytes = Vec::with_capacity(usize::try_from(meta.len()).unwrap_or(0));
    #[allow(
        clippy::disallowed_methods,
        reason = "the reader is `take(limit + 1)`: this is the capped reader"
    )]
    file.take(limit.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(StoreError::io("reading", path))?;
    if bytes.len() as u64 > limit {
        return Err(StoreError::GrewPastLimit {
            path: path.to_path_buf(),
            limit,
        });
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_files_up_to_the_limit_and_refuses_larger_ones() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        fs::write(&path, b"12345").unwrap();
        assert_eq!(read_capped(&path, 5).unwrap(), b"12345");
        match read_capped(&path, 4) {
            Err(StoreError::TooLarge { size, limit, .. }) => assert_eq!((size, limit), (5, 4)),
            other => panic!("expected TooLarge, got {other:?}"),
        }
    }

    #[test]
    fn missing_files_and_non_files_are_told_apart() {
        let dir = tempfile::tempdir().unwrap();
        let missing = read_capped(&dir.path().join("missing"), 10).unwrap_err();
        assert!(missing.is_not_found(), "{missing:?}");
        let not_a_file = read_capped(dir.path(), 10).unwrap_err();
        assert!(matches!(not_a_file, StoreError::NotAFile { .. }));
        assert!(!not_a_file.is_not_found());
        assert!(not_a_file.to_string().ends_with("is not a regular file"));
    }

    #[test]
    #[cfg(unix)]
    fn a_fifo_is_refused_without_blocking() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        let status = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap();
        assert!(status.success());
        assert!(matches!(
            read_capped(&fifo, 10),
            Err(StoreError::NotAFile { .. })
        ));
    }
}

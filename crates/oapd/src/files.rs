//! Reading the operator's files (config, seeds, manifests to lint) without
//! ever blocking on one that is not a regular file.
//!
//! `open(2)` on a FIFO waits for a writer, and reading a character device or
//! a socket may never end; a config path pointing at one would hang `oapd
//! config` or the daemon's start and reload. So the path is `stat`ed first
//! and refused unless it is a regular file, then opened with `O_NONBLOCK`
//! (`open` returns at once even if it was swapped for a FIFO in between) and
//! `O_NOCTTY`, checked again with `fstat` (the file checked is the file
//! read), and read to at most `cap + 1` bytes.

use std::fs::{File, FileType, OpenOptions};
use std::io::Read;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::Path;

/// Why a file was not read.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// `stat`, `open` or `read` failed (including: it does not exist).
    #[error("{0}")]
    Io(#[from] std::io::Error),
    /// A FIFO, directory, socket, device: refused before anything is read.
    #[error("it is {0}, not a regular file")]
    NotRegular(&'static str),
    /// Larger than the cap (its size when known).
    #[error("it is larger than the {cap}-byte limit")]
    TooLarge {
        /// The size `stat` reported, if it did.
        size: Option<u64>,
        /// The limit.
        cap: u64,
    },
}

/// What kind of file `ft` is, with its article, for messages.
pub fn describe(ft: FileType) -> &'static str {
    if ft.is_file() {
        "a regular file"
    } else if ft.is_dir() {
        "a directory"
    } else if ft.is_fifo() {
        "a FIFO (named pipe)"
    } else if ft.is_socket() {
        "a socket"
    } else if ft.is_char_device() {
        "a character device"
    } else if ft.is_block_device() {
        "a block device"
    } else if ft.is_symlink() {
        "a symbolic link"
    } else {
        "an unknown kind of file"
    }
}

/// Largest CA bundle read for `ollama.ca_file`, `tools.ca_file` and
/// `crawler.ca_file` (a PEM bundle of every public root is about 200 KiB).
pub const MAX_CA_FILE_BYTES: u64 = 1 << 20;

/// Reads the PEM bundle the operator configured under `key` (for example
/// `tools.ca_file`); the error names the key and the path.
pub fn read_ca_file(key: &str, path: &Path) -> anyhow::Result<Vec<u8>> {
    read_regular(path, MAX_CA_FILE_BYTES)
        .map_err(|e| anyhow::anyhow!("{key}: cannot read {}: {e}", path.display()))
}

/// Reads `path` (symbolic links followed) if it is a regular file of at
/// most `cap` bytes.
#[allow(
    clippy::disallowed_methods,
    reason = "the reader is `take(cap + 1)`: this is the capped reader"
)]
pub fn read_regular(path: &Path, cap: u64) -> Result<Vec<u8>, ReadError> {
    let meta = std::fs::metadata(path)?;
    if !meta.is_file() {
        return Err(ReadError::NotRegular(describe(meta.file_type())));
    }
    if meta.len() > cap {
        return Err(ReadError::TooLarge {
            size: Some(meta.len()),
            cap,
        });
    }
    let file = open_nonblocking(path)?;
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Err(ReadError::NotRegular(describe(meta.file_type())));
    }
    let mut bytes = Vec::new();
    file.take(cap + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > cap {
        return Err(ReadError::TooLarge { size: None, cap });
    }
    Ok(bytes)
}

/// Opens for reading without waiting for a FIFO's writer and without making
/// a terminal the controlling one. `O_NONBLOCK` changes nothing for reads of
/// a regular file.
fn open_nonblocking(path: &Path) -> std::io::Result<File> {
    OpenOptions::new()
        .read(true)
        .custom_flags(nix::libc::O_NONBLOCK | nix::libc::O_NOCTTY)
        .open(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_a_regular_file_up_to_the_cap() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, b"12345").unwrap();
        assert_eq!(read_regular(&path, 5).unwrap(), b"12345");
        assert!(matches!(
            read_regular(&path, 4),
            Err(ReadError::TooLarge {
                size: Some(5),
                cap: 4
            })
        ));
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&path, &link).unwrap();
        assert_eq!(read_regular(&link, 5).unwrap(), b"12345");
    }

    #[test]
    fn refuses_special_files_without_blocking() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        let made = std::process::Command::new("mkfifo").arg(&fifo).status();
        assert!(made.unwrap().success());
        let err = read_regular(&fifo, 1024).unwrap_err();
        assert_eq!(
            err.to_string(),
            "it is a FIFO (named pipe), not a regular file"
        );
        let err = read_regular(dir.path(), 1024).unwrap_err();
        assert_eq!(err.to_string(), "it is a directory, not a regular file");
        let err = read_regular(Path::new("/dev/zero"), 1024).unwrap_err();
        assert_eq!(
            err.to_string(),
            "it is a character device, not a regular file"
        );
        let socket = dir.path().join("sock");
        let _listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
        let err = read_regular(&socket, 1024).unwrap_err();
        assert_eq!(err.to_string(), "it is a socket, not a regular file");
    }
}

//! The one way this crate reads a file's bytes to know its size and
//! SHA-256: in 64 KiB pieces, never the whole file in memory, optionally
//! copying each piece on to a writer (building a snapshot copies and hashes
//! in one pass; verifying only hashes).

use std::fs::File;
use std::io::{Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use sha2::{Digest, Sha256};

use crate::error::SnapshotError;

/// Size and SHA-256 (lower-case hex) of a file, read without following a
/// symlink at its last component.
pub fn file_sha256(path: &Path) -> Result<(u64, String), SnapshotError> {
    read_hashing(path, None)
}

/// Reads `source` to its end (refusing a symlink at its last component),
/// writing every byte to `copy` when given (errors there name `copy_path`),
/// and returns the bytes read and their SHA-256.
pub(crate) fn read_hashing(
    source: &Path,
    mut copy: Option<(&mut File, &Path)>,
) -> Result<(u64, String), SnapshotError> {
    let mut input = File::options()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(source)
        .map_err(|e| SnapshotError::io(source, e))?;
    let mut hasher = Sha256::new();
    let mut buffer = vec![0u8; 1 << 16];
    let mut total = 0u64;
    loop {
        let read = input
            .read(&mut buffer)
            .map_err(|e| SnapshotError::io(source, e))?;
        if read == 0 {
            break;
        }
        hasher.update(&buffer[..read]);
        if let Some((output, path)) = copy.as_mut() {
            output
                .write_all(&buffer[..read])
                .map_err(|e| SnapshotError::io(*path, e))?;
        }
        total += read as u64;
    }
    Ok((total, hex::encode(hasher.finalize())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hashing_alone_and_hashing_while_copying_agree_and_the_copy_is_exact() {
        let dir = tempfile::tempdir().unwrap();
        let source = dir.path().join("a");
        // More than one 64 KiB piece, so the loop runs several times.
        let content: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
        std::fs::write(&source, &content).unwrap();
        let target = dir.path().join("b");
        let mut output = File::create(&target).unwrap();
        let copied = read_hashing(&source, Some((&mut output, &target))).unwrap();
        drop(output);
        assert_eq!(file_sha256(&source).unwrap(), copied);
        assert_eq!(copied.0, 200_000);
        assert_eq!(
            copied.1,
            hex::encode(Sha256::digest(&content)),
            "the SHA-256 of the bytes"
        );
        assert_eq!(oap_store::read_capped(&target, 1 << 20).unwrap(), content);
    }

    #[test]
    fn a_symlink_is_refused_not_followed() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("real"), b"x").unwrap();
        std::os::unix::fs::symlink(dir.path().join("real"), dir.path().join("link")).unwrap();
        assert!(file_sha256(&dir.path().join("link")).is_err());
    }
}

//! The durable atomic write: temporary file in the same directory, write,
//! fsync the file, rename it over the target, fsync the directory.

use std::ffi::OsStr;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use crate::StoreError;

/// How the temporary file next to the target is named.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TempName {
    /// `.<name>.<pid>.tmp`: hidden (directory scanners skip dot files), and
    /// distinct per process, so two processes writing the same file (the
    /// daemon and a command-line run beside it) never share a temporary
    /// file. For small files written by several owners.
    #[default]
    PerProcess,
    /// `<name>.tmp`: one fixed name, so the temporary file a crash leaves
    /// is overwritten by the next write instead of piling up. For large
    /// files with a single writer (the index).
    Fixed,
}

impl TempName {
    /// The temporary path for `file_name` in `dir`.
    fn path(self, dir: &Path, file_name: &OsStr) -> PathBuf {
        let mut name = std::ffi::OsString::new();
        match self {
            TempName::PerProcess => {
                name.push(".");
                name.push(file_name);
                name.push(format!(".{}.tmp", std::process::id()));
            }
            TempName::Fixed => {
                name.push(file_name);
                name.push(".tmp");
            }
        }
        dir.join(name)
    }
}

/// What a successful write did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Written {
    /// Whether the directory was fsynced after the rename. False only when
    /// the filesystem refused: the new file is in place either way, but the
    /// rename may not survive a power cut.
    pub dir_synced: bool,
}

/// Writes `bytes` to `path` so that readers see the old or the new content,
/// never a mix (temporary name [`TempName::PerProcess`]). The directory must
/// exist.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<Written, StoreError> {
    write_atomic_with(path, TempName::PerProcess, |file| file.write_all(bytes))
}

/// The durable atomic write, with the content streamed by `write` into the
/// temporary file (buffer it if it writes in small pieces). `write`'s error,
/// a failed fsync or a failed rename leave `path` as it was and remove the
/// temporary file. Readers that opened or mapped the old file keep it whole
/// (its inode lives until they let go).
///
/// One writer per path and temporary name at a time: two threads writing
/// the same path would share the temporary file.
pub fn write_atomic_with(
    path: &Path,
    temp: TempName,
    write: impl FnOnce(&mut File) -> io::Result<()>,
) -> Result<Written, StoreError> {
    let Some(file_name) = path.file_name() else {
        return Err(StoreError::NoFileName {
            path: path.to_path_buf(),
        });
    };
    let dir = parent_dir(path);
    let tmp = temp.path(dir, file_name);
    // Nothing to clean up if this fails: whatever is at `tmp` (even a
    // directory someone put there) is not ours.
    let mut file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(&tmp)
        .map_err(StoreError::io("creating", &tmp))?;
    let result = write(&mut file)
        .map_err(StoreError::io("writing", &tmp))
        .and_then(|()| file.sync_all().map_err(StoreError::io("fsyncing", &tmp)));
    drop(file);
    let result = result.and_then(|()| {
        fs::rename(&tmp, path).map_err(StoreError::io("renaming temp file over", path))
    });
    if let Err(err) = result {
        let _ = fs::remove_file(&tmp);
        return Err(err);
    }
    Ok(Written {
        dir_synced: sync_dir(dir),
    })
}

/// The directory holding `path` (`.` for a bare file name).
fn parent_dir(path: &Path) -> &Path {
    match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    }
}

/// fsyncs `dir`, so a rename or removal in it is durable. A failure only
/// weakens durability (not atomicity), so it is logged, not fatal.
pub(crate) fn sync_dir(dir: &Path) -> bool {
    match File::open(dir).and_then(|d| d.sync_all()) {
        Ok(()) => true,
        Err(err) => {
            tracing::debug!(dir = %dir.display(), error = %err, "directory fsync failed");
            false
        }
    }
}

#[cfg(test)]
#[allow(
    clippy::disallowed_methods,
    reason = "tests read back the small files they wrote"
)]
mod tests {
    use super::*;

    fn names(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    #[test]
    fn the_write_replaces_the_file_and_leaves_no_temporary_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.json");
        fs::write(&path, b"old").unwrap();
        // A reader holding the old file keeps reading the old content.
        let held = File::open(&path).unwrap();

        let written = write_atomic(&path, b"new content").unwrap();
        assert!(written.dir_synced);
        assert_eq!(fs::read(&path).unwrap(), b"new content");
        assert_eq!(names(dir.path()), ["state.json"]);
        assert_eq!(io::read_to_string(held).unwrap(), "old");

        // The fixed temporary name works the same way.
        write_atomic_with(&path, TempName::Fixed, |f| f.write_all(b"third")).unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"third");
        assert_eq!(names(dir.path()), ["state.json"]);
    }

    #[test]
    fn a_failed_write_leaves_the_old_file_and_removes_the_temporary_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("index");
        fs::write(&path, b"old").unwrap();
        for temp in [TempName::PerProcess, TempName::Fixed] {
            let err = write_atomic_with(&path, temp, |f| {
                f.write_all(b"half of the new")?;
                Err(io::Error::other("disk full"))
            })
            .unwrap_err();
            match &err {
                StoreError::Io { op, path: p, .. } => {
                    assert_eq!(*op, "writing");
                    assert_eq!(p, &temp.path(dir.path(), OsStr::new("index")));
                }
                other => panic!("expected an I/O error, got {other:?}"),
            }
            assert!(err.to_string().contains("disk full"), "{err}");
            assert_eq!(fs::read(&path).unwrap(), b"old");
            assert_eq!(names(dir.path()), ["index"], "{temp:?}");
        }
    }

    #[test]
    fn a_failed_rename_removes_the_temporary_file() {
        let dir = tempfile::tempdir().unwrap();
        // A non-empty directory where the file should go: rename refuses.
        let path = dir.path().join("target");
        fs::create_dir(&path).unwrap();
        fs::write(path.join("keep"), b"x").unwrap();
        let err = write_atomic(&path, b"new").unwrap_err();
        assert!(
            matches!(
                err,
                StoreError::Io {
                    op: "renaming temp file over",
                    ..
                }
            ),
            "{err:?}"
        );
        assert_eq!(names(dir.path()), ["target"]);
        assert!(path.join("keep").exists());
    }

    #[test]
    fn something_in_the_way_of_the_temporary_file_is_not_removed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("index");
        fs::write(&path, b"old").unwrap();
        let tmp = dir.path().join("index.tmp");
        fs::create_dir(&tmp).unwrap();
        fs::write(tmp.join("keep"), b"x").unwrap();
        match write_atomic_with(&path, TempName::Fixed, |f| f.write_all(b"new")) {
            Err(StoreError::Io { op, path: p, .. }) => {
                assert_eq!(op, "creating");
                assert_eq!(p, tmp);
            }
            other => panic!("expected an I/O error, got {other:?}"),
        }
        assert!(tmp.join("keep").exists());
        assert_eq!(fs::read(&path).unwrap(), b"old");
    }

    #[test]
    fn a_stale_fixed_temporary_file_is_overwritten() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("index");
        fs::write(dir.path().join("index.tmp"), vec![0xAB; 100_000]).unwrap();
        write_atomic_with(&path, TempName::Fixed, |f| f.write_all(b"short")).unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"short");
        assert_eq!(names(dir.path()), ["index"]);
    }

    #[test]
    fn temporary_names_are_hidden_and_per_process_or_fixed() {
        let dir = Path::new("/d");
        let name = OsStr::new("crawl-state.json");
        assert_eq!(
            TempName::PerProcess.path(dir, name),
            dir.join(format!(".crawl-state.json.{}.tmp", std::process::id()))
        );
        assert_eq!(
            TempName::Fixed.path(dir, name),
            dir.join("crawl-state.json.tmp")
        );
    }

    #[test]
    fn paths_without_a_file_name_or_directory_are_errors() {
        let dir = tempfile::tempdir().unwrap();
        assert!(matches!(
            write_atomic(&dir.path().join(".."), b"x"),
            Err(StoreError::NoFileName { .. })
        ));
        let err = write_atomic(&dir.path().join("no/such/dir/file"), b"x").unwrap_err();
        assert!(
            matches!(err, StoreError::Io { op: "creating", .. }),
            "{err:?}"
        );
        assert!(err.is_not_found());
        assert!(names(dir.path()).is_empty());
    }
}

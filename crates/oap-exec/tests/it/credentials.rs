//! Loading the credential store: ownership and permission checks.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use oap_exec::{CredentialError, CredentialStore};

fn write(path: &Path, text: &str, mode: u32) {
    std::fs::write(path, text).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

#[test]
fn owner_only_files_load() {
    let dir = tempfile::tempdir().unwrap();
    let yaml = dir.path().join("credentials.yaml");
    write(
        &yaml,
        "api.example.com:\n  token: T1\nb.test:\n  key: K2\n",
        0o600,
    );
    let store = CredentialStore::load(&yaml).unwrap();
    assert_eq!(store.len(), 2);
    assert_eq!(store.get("api.example.com").unwrap().secret(), "T1");
    assert_eq!(
        store.domains().collect::<Vec<_>>(),
        ["api.example.com", "b.test"]
    );
    assert_eq!(store.path(), yaml);

    write(&yaml, "a.test:\n  key: K\n", 0o400);
    assert!(CredentialStore::load(&yaml).is_ok());

    let json = dir.path().join("credentials.json");
    write(&json, r#"{"a.test": {"token": "T"}}"#, 0o600);
    assert_eq!(
        CredentialStore::load(&json)
            .unwrap()
            .get("a.test")
            .unwrap()
            .secret(),
        "T"
    );
}

#[test]
fn group_or_world_access_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("credentials.yaml");
    for mode in [0o644, 0o640, 0o604, 0o660, 0o700 | 0o001] {
        write(&path, "a.test:\n  key: SECRET\n", mode);
        let err = CredentialStore::load(&path).unwrap_err();
        assert!(
            matches!(err, CredentialError::Permissions { .. }),
            "{mode:o}: {err}"
        );
        let text = err.to_string();
        assert!(
            text.contains(&format!("chmod 600 {}", path.display())),
            "{text}"
        );
        assert!(!text.contains("SECRET"));
    }
}

#[test]
fn other_owner_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("credentials.yaml");
    write(&path, "a.test:\n  key: K\n", 0o600);
    let me = nix::unistd::geteuid().as_raw();
    let other = if me == 65534 { 65533 } else { 65534 };
    if std::os::unix::fs::chown(&path, Some(other), None).is_err() {
        // Only root can give a file away; as another user, the file we can
        // create is always ours, which is the case tested above.
        assert_ne!(me, 0, "chown failed as root");
        return;
    }
    let err = CredentialStore::load(&path).unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "credentials file {} is owned by uid {other}, not by the daemon's user (uid {me}); \
             chown it to that user",
            path.display()
        )
    );
}

#[test]
fn missing_directory_and_oversized_files_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nope.yaml");
    let err = CredentialStore::load(&missing).unwrap_err();
    assert!(matches!(err, CredentialError::Io { .. }));
    assert!(err.to_string().contains(&missing.display().to_string()));

    let sub = dir.path().join("sub");
    std::fs::create_dir(&sub).unwrap();
    std::fs::set_permissions(&sub, std::fs::Permissions::from_mode(0o700)).unwrap();
    assert!(matches!(
        CredentialStore::load(&sub).unwrap_err(),
        CredentialError::NotRegularFile { .. }
    ));

    let err = CredentialStore::load(&sub).unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "credentials file {} is a directory, not a regular file",
            sub.display()
        )
    );

    let big = dir.path().join("big.yaml");
    write(&big, &format!("# {}\n", "x".repeat(1 << 20)), 0o600);
    assert!(matches!(
        CredentialStore::load(&big).unwrap_err(),
        CredentialError::TooLarge { .. }
    ));
}

#[test]
fn a_fifo_is_refused_without_blocking() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("credentials.yaml");
    let made = std::process::Command::new("mkfifo")
        .args(["-m", "600"])
        .arg(&fifo)
        .status();
    assert!(made.unwrap().success());
    // On another thread, so a load that blocks fails the test instead of
    // hanging it.
    let (tx, rx) = std::sync::mpsc::channel();
    let path = fifo.clone();
    std::thread::spawn(move || {
        let _ = tx.send(CredentialStore::load(&path).map(|_| ()));
    });
    let err = rx
        .recv_timeout(std::time::Duration::from_secs(10))
        .expect("CredentialStore::load blocked on a FIFO")
        .unwrap_err();
    assert!(
        matches!(
            err,
            CredentialError::NotRegularFile {
                kind: "a FIFO (named pipe)",
                ..
            }
        ),
        "{err:?}"
    );
    assert_eq!(
        err.to_string(),
        format!(
            "credentials file {} is a FIFO (named pipe), not a regular file",
            fifo.display()
        )
    );
}

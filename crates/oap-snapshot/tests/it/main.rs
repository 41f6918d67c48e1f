//! A snapshot built and verified as a board would, and every hostile
//! variant of one refused with its reason: a bad signature, a truncated or
//! altered file, a symlink, a wrong encoder, paths outside the directory,
//! a 10 GB claim, a replayed older version, an untrusted key. The
//! reference `minisign` tool checks what oapd signs.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::disallowed_methods,
    missing_docs,
    reason = "test code: a failed assumption is a failed test, and tests read their own fixtures whole"
)]

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use oap_snapshot::{
    build, verify_dir, BuildInput, BuildMeta, Expect, FileEntry, Listing, SigningKey,
    SnapshotError, TrustedKeys, FORMAT, LISTING_FILE, SIGNATURE_FILE,
};

const MODEL: &str = "sentence-transformers/all-MiniLM-L6-v2";
const GIB: u64 = 1 << 30;

fn expect(installed: Option<u64>) -> Expect<'static> {
    Expect {
        model_id: MODEL,
        installed_version: installed,
        max_bytes: GIB,
    }
}

struct Fixture {
    _tmp: tempfile::TempDir,
    snapshot: PathBuf,
    key: SigningKey,
    keys: TrustedKeys,
}

/// A snapshot of three files (an index, a catalog part, request rows),
/// version 7.
fn fixture() -> Fixture {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src");
    fs::create_dir_all(&src).unwrap();
    fs::write(src.join("index.oapx"), vec![7u8; 100_000]).unwrap();
    fs::write(src.join("part-0.jsonl"), b"{\"id\":\"weather\"}\n").unwrap();
    fs::write(
        src.join("requests.json"),
        b"{\"weather\":[\"will it rain\"]}",
    )
    .unwrap();
    let inputs = [
        ("index.oapx", "index.oapx"),
        ("catalog/part-0.jsonl", "part-0.jsonl"),
        ("requests.json", "requests.json"),
    ]
    .map(|(path, source)| BuildInput {
        path: path.into(),
        source: src.join(source),
    });
    let key = SigningKey::generate().unwrap();
    let snapshot = tmp.path().join("snapshot");
    let meta = BuildMeta {
        version: 7,
        created: "2026-12-07T08:00:00Z".into(),
        model_id: MODEL.into(),
        generator: Some("qwen3:4b".into()),
    };
    build(&snapshot, &inputs, &meta, &key).unwrap();
    let keys = TrustedKeys::parse(&[key.public_key()]).unwrap();
    Fixture {
        _tmp: tmp,
        snapshot,
        key,
        keys,
    }
}

/// Replaces the listing with `listing`, signed by `key` (a hostile signer
/// the board trusts, or a compromised build: the file rules must hold
/// even for signed listings).
fn resign(dir: &Path, listing: &Listing, key: &SigningKey) {
    let text = serde_json::to_vec(listing).unwrap();
    fs::write(dir.join(LISTING_FILE), &text).unwrap();
    fs::write(dir.join(SIGNATURE_FILE), key.sign(&text, "test").unwrap()).unwrap();
}

fn listing_of(dir: &Path) -> Listing {
    serde_json::from_slice(&fs::read(dir.join(LISTING_FILE)).unwrap()).unwrap()
}

#[test]
fn a_built_snapshot_verifies_and_lists_every_file() {
    let f = fixture();
    let verified = verify_dir(&f.snapshot, &f.keys, &expect(Some(6))).unwrap();
    assert_eq!(verified.key_id, f.key.key_id());
    assert_eq!(verified.listing.version, 7);
    assert_eq!(verified.listing.generator.as_deref(), Some("qwen3:4b"));
    let paths: Vec<&str> = verified
        .listing
        .files
        .iter()
        .map(|f| f.path.as_str())
        .collect();
    assert_eq!(
        paths,
        ["index.oapx", "catalog/part-0.jsonl", "requests.json"]
    );
    assert_eq!(verified.listing.file("index.oapx").unwrap().bytes, 100_000);
    // First install: no version yet.
    assert!(verify_dir(&f.snapshot, &f.keys, &expect(None)).is_ok());
}

#[test]
fn the_reference_minisign_tool_accepts_the_signature() {
    let f = fixture();
    let output = Command::new("minisign")
        .arg("-V")
        .arg("-m")
        .arg(f.snapshot.join(LISTING_FILE))
        .arg("-P")
        .arg(f.key.public_key())
        .output()
        .expect("minisign is installed (xtask/debian-packages.txt)");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(stdout.contains("oapd snapshot version:7"), "{stdout}");
    // And refuses it once the listing changes.
    let listing = f.snapshot.join(LISTING_FILE);
    let mut text = fs::read(&listing).unwrap();
    text.push(b' ');
    fs::write(&listing, text).unwrap();
    let status = Command::new("minisign")
        .args(["-V", "-q", "-m"])
        .arg(&listing)
        .arg("-P")
        .arg(f.key.public_key())
        .status()
        .unwrap();
    assert!(!status.success());
}

#[test]
fn a_listing_changed_after_signing_is_refused() {
    let f = fixture();
    let path = f.snapshot.join(LISTING_FILE);
    let text = fs::read_to_string(&path)
        .unwrap()
        .replace("\"version\": 7", "\"version\": 9");
    fs::write(&path, text).unwrap();
    let err = verify_dir(&f.snapshot, &f.keys, &expect(None)).unwrap_err();
    assert!(matches!(err, SnapshotError::BadSignature { .. }), "{err}");
    assert!(err.to_string().contains(&f.key.key_id()), "{err}");
}

#[test]
fn a_snapshot_signed_by_an_untrusted_key_is_refused_naming_the_key() {
    let f = fixture();
    let stranger = SigningKey::generate().unwrap();
    resign(&f.snapshot, &listing_of(&f.snapshot), &stranger);
    let err = verify_dir(&f.snapshot, &f.keys, &expect(None)).unwrap_err();
    assert!(err.to_string().contains(&stranger.key_id()), "{err}");
    assert!(
        matches!(err, SnapshotError::UnknownKey { trusted: 1, .. }),
        "{err}"
    );
    // Trusting both (a key rotation) accepts it.
    let both = TrustedKeys::parse(&[f.key.public_key(), stranger.public_key()]).unwrap();
    assert!(verify_dir(&f.snapshot, &both, &expect(None)).is_ok());
}

#[test]
fn a_truncated_or_altered_file_is_refused_naming_it() {
    let f = fixture();
    let index = f.snapshot.join("index.oapx");
    let bytes = fs::read(&index).unwrap();
    fs::write(&index, &bytes[..bytes.len() / 2]).unwrap();
    let err = verify_dir(&f.snapshot, &f.keys, &expect(None)).unwrap_err();
    assert!(
        matches!(&err, SnapshotError::SizeMismatch { path, listed: 100_000, found: 50_000 } if path == "index.oapx"),
        "{err}"
    );
    let mut altered = bytes.clone();
    altered[99_999] ^= 1;
    fs::write(&index, altered).unwrap();
    let err = verify_dir(&f.snapshot, &f.keys, &expect(None)).unwrap_err();
    assert!(
        matches!(&err, SnapshotError::HashMismatch { path, .. } if path == "index.oapx"),
        "{err}"
    );
    fs::remove_file(f.snapshot.join("requests.json")).unwrap();
    fs::write(&index, bytes).unwrap();
    let err = verify_dir(&f.snapshot, &f.keys, &expect(None)).unwrap_err();
    assert!(err.to_string().contains("requests.json"), "{err}");
}

#[test]
fn a_listed_file_that_is_a_symlink_is_refused_not_followed() {
    let f = fixture();
    let outside = f.snapshot.parent().unwrap().join("secret");
    fs::write(&outside, b"{\"weather\":[\"will it rain\"]}").unwrap();
    let rows = f.snapshot.join("requests.json");
    fs::remove_file(&rows).unwrap();
    std::os::unix::fs::symlink(&outside, &rows).unwrap();
    let err = verify_dir(&f.snapshot, &f.keys, &expect(None)).unwrap_err();
    assert!(
        matches!(&err, SnapshotError::NotAFile { path } if path == "requests.json"),
        "{err}"
    );
}

#[test]
fn another_encoder_is_refused_before_any_file_is_read() {
    let f = fixture();
    fs::remove_file(f.snapshot.join("index.oapx")).unwrap();
    let board = Expect {
        model_id: "intfloat/multilingual-e5-small",
        ..expect(None)
    };
    let err = verify_dir(&f.snapshot, &f.keys, &board).unwrap_err();
    let SnapshotError::ModelMismatch { snapshot, board } = &err else {
        panic!("{err}")
    };
    assert_eq!(snapshot, MODEL);
    assert_eq!(board, "intfloat/multilingual-e5-small");
    assert!(err.to_string().contains("cannot be used"), "{err}");
}

#[test]
fn an_older_or_replayed_version_is_refused() {
    let f = fixture();
    for installed in [7, 8, u64::MAX] {
        let err = verify_dir(&f.snapshot, &f.keys, &expect(Some(installed))).unwrap_err();
        assert!(
            matches!(err, SnapshotError::Replayed { offered: 7, installed: i } if i == installed),
            "{err}"
        );
    }
}

#[test]
fn a_signed_listing_naming_paths_outside_the_snapshot_is_refused() {
    let f = fixture();
    let original = listing_of(&f.snapshot);
    for path in [
        "../outside",
        "/etc/passwd",
        "catalog/../../x",
        ".hidden",
        "a/b/c/d/e",
    ] {
        let mut listing = original.clone();
        listing.files.push(FileEntry {
            path: path.into(),
            bytes: 1,
            sha256: "0".repeat(64),
        });
        resign(&f.snapshot, &listing, &f.key);
        let err = verify_dir(&f.snapshot, &f.keys, &expect(None)).unwrap_err();
        assert!(
            matches!(&err, SnapshotError::PathOutside { path: p, .. } if p == path),
            "{path}: {err}"
        );
    }
}

#[test]
fn a_claimed_10_gb_is_refused_before_any_file_is_read() {
    let f = fixture();
    let mut listing = listing_of(&f.snapshot);
    listing.files[0].bytes = 10_000_000_000;
    resign(&f.snapshot, &listing, &f.key);
    // The file on disk is not even looked at: the claim alone is refused.
    fs::remove_file(f.snapshot.join("index.oapx")).unwrap();
    let err = verify_dir(&f.snapshot, &f.keys, &expect(None)).unwrap_err();
    assert!(
        matches!(err, SnapshotError::TooLarge { cap: GIB, claimed } if claimed > 10_000_000_000),
        "{err}"
    );
}

#[test]
fn a_listing_of_another_format_or_not_a_listing_is_refused_by_name() {
    let f = fixture();
    let mut listing = listing_of(&f.snapshot);
    listing.format = FORMAT + 1;
    resign(&f.snapshot, &listing, &f.key);
    let err = verify_dir(&f.snapshot, &f.keys, &expect(None)).unwrap_err();
    assert!(err.to_string().contains("format 2"), "{err}");
    let junk = b"[1,2,3]";
    fs::write(f.snapshot.join(LISTING_FILE), junk).unwrap();
    fs::write(
        f.snapshot.join(SIGNATURE_FILE),
        f.key.sign(junk, "t").unwrap(),
    )
    .unwrap();
    let err = verify_dir(&f.snapshot, &f.keys, &expect(None)).unwrap_err();
    assert!(err.to_string().contains("not a snapshot listing"), "{err}");
}

#[test]
fn a_missing_or_garbled_signature_is_refused() {
    let f = fixture();
    fs::write(
        f.snapshot.join(SIGNATURE_FILE),
        "untrusted comment: x\nnot base64\n",
    )
    .unwrap();
    let err = verify_dir(&f.snapshot, &f.keys, &expect(None)).unwrap_err();
    assert!(matches!(err, SnapshotError::SignatureFormat(_)), "{err}");
    fs::remove_file(f.snapshot.join(SIGNATURE_FILE)).unwrap();
    let err = verify_dir(&f.snapshot, &f.keys, &expect(None)).unwrap_err();
    assert!(err.to_string().contains(SIGNATURE_FILE), "{err}");
}

#[test]
fn building_over_a_snapshot_or_with_a_bad_path_fails() {
    let f = fixture();
    let meta = BuildMeta {
        version: 8,
        created: "2026-12-07T09:00:00Z".into(),
        model_id: MODEL.into(),
        generator: None,
    };
    let err = build(&f.snapshot, &[], &meta, &f.key).unwrap_err();
    assert!(err.to_string().contains("not empty"), "{err}");
    let fresh = f.snapshot.parent().unwrap().join("fresh");
    let bad = BuildInput {
        path: "../escape".into(),
        source: f.snapshot.join("index.oapx"),
    };
    let err = build(&fresh, &[bad], &meta, &f.key).unwrap_err();
    assert!(matches!(err, SnapshotError::PathOutside { .. }), "{err}");
    assert!(!f.snapshot.parent().unwrap().join("escape").exists());
}

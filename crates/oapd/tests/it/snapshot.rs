//! `oapd snapshot keygen|build|verify` with the real binary and the real
//! model: a snapshot of the bundled set built, checked by `verify` and by
//! the reference `minisign` tool, and refused once it is altered, signed
//! by an unknown key, replayed or checked against another encoder.

use std::path::Path;
use std::process::Output;

use crate::support;

fn config(dir: &Path) -> std::path::PathBuf {
    let path = dir.join("oapd.yaml");
    let yaml = format!(
        "index:\n  data_dir: {:?}\nembedding:\n  model_dir: {:?}\n",
        dir.join("data"),
        support::require_model()
    );
    std::fs::write(&path, yaml).unwrap();
    path
}

fn oapd(config: &Path, args: &[&str]) -> Output {
    support::oapd()
        .arg("--config")
        .arg(config)
        .arg("snapshot")
        .args(args)
        .output()
        .unwrap()
}

fn text(output: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

#[test]
fn a_snapshot_of_the_bundled_set_is_built_verified_and_refused_once_altered() {
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path());
    let keys = dir.path().join("keys");
    let keys_arg = keys.to_str().unwrap();

    let made = oapd(&config, &["keygen", "--out", keys_arg]);
    assert!(made.status.success(), "{}", text(&made));
    let public = std::fs::read_to_string(keys.join("snapshot.pub")).unwrap();
    let public_line = public.lines().last().unwrap().to_owned();
    assert!(text(&made).contains(&public_line), "{}", text(&made));
    // A second keygen never overwrites the key.
    let again = oapd(&config, &["keygen", "--out", keys_arg]);
    assert!(!again.status.success());
    assert!(text(&again).contains("snapshot.key"), "{}", text(&again));
    assert_eq!(
        std::fs::read_to_string(keys.join("snapshot.pub")).unwrap(),
        public
    );

    let snapshot = dir.path().join("snapshot");
    let snapshot_arg = snapshot.to_str().unwrap();
    let secret = keys.join("snapshot.key");
    let built = oapd(
        &config,
        &[
            "build",
            "--key",
            secret.to_str().unwrap(),
            "--out",
            snapshot_arg,
            "--version",
            "5",
        ],
    );
    assert!(built.status.success(), "{}", text(&built));
    assert!(text(&built).contains("13 capabilities"), "{}", text(&built));
    let listing: serde_json::Value =
        serde_json::from_slice(&std::fs::read(snapshot.join("snapshot.json")).unwrap()).unwrap();
    assert_eq!(listing["version"], 5);
    let files: Vec<&str> = listing["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["path"].as_str().unwrap())
        .collect();
    assert_eq!(files, ["index.oapx", "catalog.jsonl"], "{listing}");
    // The index in the snapshot is the one the configuration's data
    // directory serves, byte for byte.
    assert_eq!(
        std::fs::read(snapshot.join("index.oapx")).unwrap(),
        std::fs::read(dir.path().join("data/index.oapx")).unwrap()
    );
    let catalog = std::fs::read_to_string(snapshot.join("catalog.jsonl")).unwrap();
    assert_eq!(catalog.lines().count(), 13);
    let first: serde_json::Value = serde_json::from_str(catalog.lines().next().unwrap()).unwrap();
    assert!(first["manifest"]["name"].is_string(), "{first}");

    let verified = oapd(
        &config,
        &["verify", snapshot_arg, "--public-key", &public_line],
    );
    assert!(verified.status.success(), "{}", text(&verified));
    assert!(
        text(&verified).contains("snapshot version 5"),
        "{}",
        text(&verified)
    );
    // The key file works as well as the key line; the reference tool agrees.
    let by_file = oapd(
        &config,
        &[
            "verify",
            snapshot_arg,
            "--public-key",
            keys.join("snapshot.pub").to_str().unwrap(),
        ],
    );
    assert!(by_file.status.success(), "{}", text(&by_file));
    let minisign = std::process::Command::new("minisign")
        .args(["-V", "-m"])
        .arg(snapshot.join("snapshot.json"))
        .arg("-p")
        .arg(keys.join("snapshot.pub"))
        .output()
        .expect("minisign is installed (xtask/debian-packages.txt)");
    assert!(minisign.status.success(), "{}", text(&minisign));

    // Replayed, another encoder, an unknown key: refused, by reason.
    let replayed = oapd(
        &config,
        &[
            "verify",
            snapshot_arg,
            "--public-key",
            &public_line,
            "--installed-version",
            "5",
        ],
    );
    assert!(!replayed.status.success());
    assert!(
        text(&replayed).contains("not newer than the installed version 5"),
        "{}",
        text(&replayed)
    );
    let other_model = oapd(
        &config,
        &[
            "verify",
            snapshot_arg,
            "--public-key",
            &public_line,
            "--model-id",
            "intfloat/multilingual-e5-small",
        ],
    );
    assert!(!other_model.status.success());
    assert!(
        text(&other_model).contains("cannot be used"),
        "{}",
        text(&other_model)
    );
    let stranger = dir.path().join("stranger");
    assert!(
        oapd(&config, &["keygen", "--out", stranger.to_str().unwrap()])
            .status
            .success()
    );
    let stranger_public = std::fs::read_to_string(stranger.join("snapshot.pub")).unwrap();
    let unknown = oapd(
        &config,
        &[
            "verify",
            snapshot_arg,
            "--public-key",
            stranger_public.lines().last().unwrap(),
        ],
    );
    assert!(!unknown.status.success());
    assert!(
        text(&unknown).contains("none of the 1 trusted public keys"),
        "{}",
        text(&unknown)
    );

    // One byte of the index changed.
    let index = snapshot.join("index.oapx");
    let mut bytes = std::fs::read(&index).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0x55;
    std::fs::write(&index, bytes).unwrap();
    let altered = oapd(
        &config,
        &["verify", snapshot_arg, "--public-key", &public_line],
    );
    assert!(!altered.status.success());
    assert!(
        text(&altered).contains("index.oapx: SHA-256"),
        "{}",
        text(&altered)
    );
}

#[test]
fn a_build_without_the_encoder_or_with_a_bad_key_says_why() {
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path());
    let not_a_key = dir.path().join("not-a-key");
    std::fs::write(&not_a_key, "hello").unwrap();
    let out = dir.path().join("snapshot");
    let built = oapd(
        &config,
        &[
            "build",
            "--key",
            not_a_key.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
        ],
    );
    assert!(!built.status.success());
    assert!(text(&built).contains("not-a-key"), "{}", text(&built));
    assert!(!out.exists());

    let keys = dir.path().join("keys");
    assert!(oapd(&config, &["keygen", "--out", keys.to_str().unwrap()])
        .status
        .success());
    let lexical = dir.path().join("lexical.yaml");
    std::fs::write(
        &lexical,
        format!(
            "index:\n  data_dir: {:?}\nembedding:\n  enabled: false\n",
            dir.path().join("data")
        ),
    )
    .unwrap();
    let built = oapd(
        &lexical,
        &[
            "build",
            "--key",
            keys.join("snapshot.key").to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
        ],
    );
    assert!(!built.status.success());
    assert!(text(&built).contains("carries vectors"), "{}", text(&built));
    assert!(!out.exists());
}

//! The supply-chain check: `cargo deny check` (licences, advisories, bans,
//! sources; deny.toml) against a vendored snapshot of the RustSec advisory
//! database, so that it runs offline, and the command that refreshes that
//! snapshot from a checkout of the database.
//!
//! cargo-deny reads an advisory database only from a git checkout under
//! `db-path` named after the database's URL. The snapshot is committed as
//! plain files (supply-chain/advisory-db); `cargo xtask deny` makes a git
//! repository of them under target/advisory-dbs whose commit and `HEAD`
//! carry the snapshot's date, so cargo-deny's staleness limit
//! (deny.toml's `maximum-db-staleness`) measures the snapshot's real age.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, ensure, Context};

use crate::command::{cargo, run_in_root};
use crate::repo_root;

/// Where the snapshot lives in the repository.
const SNAPSHOT: &str = "supply-chain/advisory-db";
/// deny.toml's `db-urls` entry. Never fetched (`--offline`): it only names
/// the directory cargo-deny opens under `db-path`.
const DB_URL: &str = "https://github.com/rustsec/advisory-db";
/// deny.toml's `db-path`, relative to the repository root.
const DB_PATH: &str = "target/advisory-dbs";
/// The lock files whose crates the snapshot covers.
const LOCK_FILES: [&str; 2] = ["Cargo.lock", "fuzz/Cargo.lock"];

/// `cargo xtask deny`: `cargo deny check` for the workspace and the fuzz
/// workspace against the vendored advisories, the database never fetched.
pub fn deny(args: &[String]) -> anyhow::Result<()> {
    ensure!(args.is_empty(), "deny takes no arguments");
    let root = repo_root();
    let snapshot = root.join(SNAPSHOT);
    let covered = read_names(&snapshot.join("covered-crates.txt"))?;
    let mut uncovered = BTreeSet::new();
    for lock in LOCK_FILES {
        let text = std::fs::read_to_string(root.join(lock)).with_context(|| lock.to_owned())?;
        uncovered.extend(lock_names(&text).difference(&covered).cloned());
    }
    ensure!(
        uncovered.is_empty(),
        "the advisory snapshot does not cover {} (new dependencies): refresh it with \
         `cargo xtask advisories --from <advisory-db checkout>`",
        uncovered.into_iter().collect::<Vec<_>>().join(", ")
    );
    let date = snapshot_date(&snapshot)?;
    materialize(
        &snapshot,
        &root.join(DB_PATH).join(db_dir_name(DB_URL)),
        &date,
    )?;
    for manifest in ["Cargo.toml", "fuzz/Cargo.toml"] {
        // The crates themselves come from crates.io, which CI reaches:
        // fetched first, so that cargo-deny's offline run finds them all.
        run_in_root(cargo().args(["fetch", "--locked", "--manifest-path", manifest]))?;
        // `--frozen`: `--locked` and `--offline`, which is cargo-deny's
        // switch for not fetching the advisory database either.
        run_in_root(cargo().args([
            "deny",
            "--frozen",
            "--manifest-path",
            manifest,
            "--config",
            "deny.toml",
            "check",
        ]))?;
    }
    Ok(())
}

/// `cargo xtask advisories --from DIR`: replaces the snapshot with the
/// advisories in the advisory-db checkout at DIR that concern a crate of
/// either lock file, and records that checkout's commit and date.
pub fn refresh(args: &[String]) -> anyhow::Result<()> {
    let [flag, from] = args else {
        bail!("usage: advisories --from <advisory-db checkout>");
    };
    ensure!(flag == "--from", "unknown argument {flag}");
    let from = Path::new(from);
    ensure!(
        from.join("crates").is_dir(),
        "{} has no crates/ directory: not an advisory-db checkout",
        from.display()
    );
    let root = repo_root();
    let mut names = BTreeSet::new();
    for lock in LOCK_FILES {
        let text = std::fs::read_to_string(root.join(lock)).with_context(|| lock.to_owned())?;
        names.extend(lock_names(&text));
    }
    let head = git_output(from, &["log", "-1", "--format=%H %cI"])?;
    let snapshot = root.join(SNAPSHOT);
    let crates = snapshot.join("crates");
    if crates.exists() {
        std::fs::remove_dir_all(&crates)?;
    }
    let mut copied = 0;
    for name in &names {
        let dir = from.join("crates").join(name);
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries {
            let path = entry?.path();
            if path.extension().is_some_and(|e| e == "md") {
                let to = crates.join(name);
                std::fs::create_dir_all(&to)?;
                std::fs::copy(&path, to.join(path.file_name().unwrap_or_default()))?;
                copied += 1;
            }
        }
    }
    std::fs::copy(from.join("LICENSE.txt"), snapshot.join("LICENSE.txt"))
        .context("the database's LICENSE.txt (CC0-1.0)")?;
    std::fs::write(snapshot.join("SNAPSHOT"), format!("{}\n", head.trim()))?;
    let mut listing =
        String::from("# crates of Cargo.lock and fuzz/Cargo.lock this snapshot covers\n");
    for name in &names {
        listing.push_str(name);
        listing.push('\n');
    }
    std::fs::write(snapshot.join("covered-crates.txt"), listing)?;
    println!(
        "{copied} advisories for {} crates from {} ({}); update the date in {SNAPSHOT}/README.md",
        names.len(),
        from.display(),
        head.trim()
    );
    Ok(())
}

/// Package names of a Cargo.lock.
fn lock_names(lock: &str) -> BTreeSet<String> {
    lock.lines()
        .filter_map(|l| l.strip_prefix("name = \""))
        .filter_map(|l| l.strip_suffix('"'))
        .map(str::to_owned)
        .collect()
}

/// One name a line, `#` comments and blank lines skipped.
fn read_names(path: &Path) -> anyhow::Result<BTreeSet<String>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    Ok(text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(str::to_owned)
        .collect())
}

/// The snapshot's commit date (ISO 8601), from its SNAPSHOT file
/// (`<commit> <date>`).
fn snapshot_date(snapshot: &Path) -> anyhow::Result<String> {
    let path = snapshot.join("SNAPSHOT");
    let text = std::fs::read_to_string(&path).with_context(|| path.display().to_string())?;
    let date = text.split_whitespace().nth(1);
    date.map(str::to_owned)
        .with_context(|| format!("{}: expected `<commit> <date>`", path.display()))
}

/// A git repository at `to` holding the snapshot's files in one commit
/// dated `date`, its `HEAD` file's time set to that date too (cargo-deny
/// takes the newer of the two as the database's age). Made afresh each
/// time: it is a copy, never edited.
fn materialize(snapshot: &Path, to: &Path, date: &str) -> anyhow::Result<()> {
    if to.exists() {
        std::fs::remove_dir_all(to)?;
    }
    std::fs::create_dir_all(to)?;
    copy_tree(&snapshot.join("crates"), &to.join("crates"))?;
    let git = |args: &[&str]| -> anyhow::Result<()> {
        let status = Command::new("git")
            .arg("-C")
            .arg(to)
            .args(args)
            .env("GIT_AUTHOR_DATE", date)
            .env("GIT_COMMITTER_DATE", date)
            .env("GIT_AUTHOR_NAME", "advisory snapshot")
            .env("GIT_AUTHOR_EMAIL", "snapshot@localhost")
            .env("GIT_COMMITTER_NAME", "advisory snapshot")
            .env("GIT_COMMITTER_EMAIL", "snapshot@localhost")
            .status()
            .context("running git")?;
        ensure!(status.success(), "git {} failed: {status}", args.join(" "));
        Ok(())
    };
    git(&["init", "-q", "-b", "main"])?;
    git(&["add", "-A"])?;
    git(&["commit", "-q", "--no-gpg-sign", "-m", "advisory snapshot"])?;
    let touched = Command::new("touch")
        .args(["-d", date])
        .arg(to.join(".git/HEAD"))
        .status()
        .context("running touch")?;
    ensure!(touched.success(), "touch -d {date} failed");
    Ok(())
}

fn copy_tree(from: &Path, to: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from).with_context(|| from.display().to_string())? {
        let path = entry?.path();
        let target = to.join(path.file_name().unwrap_or_default());
        if path.is_dir() {
            copy_tree(&path, &target)?;
        } else {
            std::fs::copy(&path, &target)?;
        }
    }
    Ok(())
}

fn git_output(dir: &Path, args: &[&str]) -> anyhow::Result<String> {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .output()
        .context("running git")?;
    ensure!(
        out.status.success(),
        "git {} failed in {}",
        args.join(" "),
        dir.display()
    );
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The directory cargo-deny opens for the database at `url`: the URL's last
/// path segment and the XXH64 (initial value 0xca80de71) of the lower-cased URL.
fn db_dir_name(url: &str) -> PathBuf {
    let url = url.to_lowercase();
    let name = url.rsplit('/').next().unwrap_or("empty_");
    PathBuf::from(format!(
        "{name}-{:016x}",
        xxh64(url.as_bytes(), 0xca80_de71)
    ))
}

/// XXH64, the hash cargo-deny names database directories with.
fn xxh64(input: &[u8], seed: u64) -> u64 {
    const P1: u64 = 0x9E37_79B1_85EB_CA87;
    const P2: u64 = 0xC2B2_AE3D_27D4_EB4F;
    const P3: u64 = 0x1656_67B1_9E37_79F9;
    const P4: u64 = 0x85EB_CA77_C2B2_AE63;
    const P5: u64 = 0x27D4_EB2F_1656_67C5;
    let word = |b: &[u8]| {
        b.iter()
            .rev()
            .fold(0u64, |acc, x| (acc << 8) | u64::from(*x))
    };
    let round = |acc: u64, lane: u64| {
        acc.wrapping_add(lane.wrapping_mul(P2))
            .rotate_left(31)
            .wrapping_mul(P1)
    };
    let merge = |acc: u64, v: u64| (acc ^ round(0, v)).wrapping_mul(P1).wrapping_add(P4);
    let mut rest = input;
    let mut hash = if input.len() >= 32 {
        let mut v = [
            seed.wrapping_add(P1).wrapping_add(P2),
            seed.wrapping_add(P2),
            seed,
            seed.wrapping_sub(P1),
        ];
        while rest.len() >= 32 {
            for (i, lane) in v.iter_mut().enumerate() {
                *lane = round(*lane, word(&rest[i * 8..i * 8 + 8]));
            }
            rest = &rest[32..];
        }
        let mut h = v[0]
            .rotate_left(1)
            .wrapping_add(v[1].rotate_left(7))
            .wrapping_add(v[2].rotate_left(12))
            .wrapping_add(v[3].rotate_left(18));
        for lane in v {
            h = merge(h, lane);
        }
        h
    } else {
        seed.wrapping_add(P5)
    };
    hash = hash.wrapping_add(input.len() as u64);
    while rest.len() >= 8 {
        hash = (hash ^ round(0, word(&rest[..8])))
            .rotate_left(27)
            .wrapping_mul(P1)
            .wrapping_add(P4);
        rest = &rest[8..];
    }
    if rest.len() >= 4 {
        hash = (hash ^ word(&rest[..4]).wrapping_mul(P1))
            .rotate_left(23)
            .wrapping_mul(P2)
            .wrapping_add(P3);
        rest = &rest[4..];
    }
    for byte in rest {
        hash = (hash ^ u64::from(*byte).wrapping_mul(P5))
            .rotate_left(11)
            .wrapping_mul(P1);
    }
    hash ^= hash >> 33;
    hash = hash.wrapping_mul(P2);
    hash ^= hash >> 29;
    hash = hash.wrapping_mul(P3);
    hash ^ (hash >> 32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn xxh64_matches_the_reference_vectors() {
        // From the xxHash reference implementation's sanity checks.
        assert_eq!(xxh64(b"", 0), 0xEF46_DB37_51D8_E999);
        assert_eq!(xxh64(b"a", 0), 0xD24E_C4F1_A98C_6E5B);
        assert_eq!(
            xxh64(b"Nobody inspects the spammish repetition", 0),
            0xFBCE_A83C_8A37_8BF1
        );
    }

    #[test]
    fn lock_names_are_the_package_names() {
        let lock =
            "[[package]]\nname = \"anyhow\"\nversion = \"1\"\n\n[[package]]\nname = \"oapd\"\n\
                    dependencies = [\n \"anyhow\",\n]\n";
        let names: Vec<String> = lock_names(lock).into_iter().collect();
        assert_eq!(names, ["anyhow", "oapd"]);
    }
}

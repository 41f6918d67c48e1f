//! Writes the Debian package with Debian's own `dpkg-deb --build` from a
//! staged tree: the files of [`ASSETS`], a stripped binary, the control
//! file, conffiles, md5sums and the hand-written maintainer scripts.
//!
//! Why not cargo-deb: it has to be compiled from source on every fresh CI
//! machine (minutes of two cores) only to write an `ar` archive that
//! dpkg-deb, already installed for the package checks, writes as well.
//! What the package holds is listed here, next to the code that checks it
//! (`package.rs`), instead of in the daemon crate's manifest.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{ensure, Context, Result};

use crate::repo_root;
use crate::tasks::run_in_root;

/// The package's control fields that do not depend on the build.
const PACKAGE: &str = "oapd";
const MAINTAINER: &str = "oapd developers <oapd@example.invalid>";
const SECTION: &str = "net";
const PRIORITY: &str = "optional";
/// Explicit, not computed from the binary: the cross sysroot's libc is newer
/// (2.36) than what the binary needs. `cargo xtask deb` and `check-glibc`
/// fail when a shipped binary needs more than the oldest supported system
/// has (`install_check::SUPPORTED`: Ubuntu 22.04 / JetPack 6 2.35, Debian
/// bookworm 2.36, Raspberry Pi OS on trixie 2.41); the binaries need 2.34.
///
/// JetPack 5 (Ubuntu 20.04, glibc 2.31) is not a target of the package:
/// building every shipped binary against 2.31 takes a second toolchain
/// (cargo-zigbuild and zig's C compiler for ring and simsimd instead of the
/// gcc the tests run with), a second full build per architecture, and a
/// bigger binary, for a base system whose standard support ended in April
/// 2025. Jetson Xavier boards, which cannot leave JetPack 5, get a binary
/// by hand with `cargo xtask cross --jetpack5`.
const DEPENDS: &str = "libc6 (>= 2.34), libgcc-s1, systemd | adduser";
const RECOMMENDS: &str = "jq, bc, man-db, bsdextrautils";
/// What `oapd-setup ollama` downloads and unpacks the Ollama release with.
const SUGGESTS: &str = "curl, ca-certificates, zstd";
const SUMMARY: &str = "OAP manifest discovery and Ollama tool bridge for edge boards";
const DESCRIPTION: &str = "oapd indexes OAP manifests (one JSON document per capability) and \
answers which capability fits a task with local embeddings and BM25, and bridges the fitting \
capabilities to Ollama as tools (a drop-in proxy for /api/chat and /v1/chat/completions). \
Ships the all-MiniLM-L6-v2 embedding model.";
const COPYRIGHT: &str = "oapd developers; all-MiniLM-L6-v2: Apache-2.0 \
(see /usr/share/oapd/models/all-MiniLM-L6-v2/LICENSE)";
const LICENSE: &str = "Apache-2.0";

/// Configuration files dpkg keeps when the operator changed them.
const CONFFILES: &[&str] = &["/etc/oapd/config.yaml"];

/// Hand-written maintainer scripts with debhelper's systemd snippets
/// (`packaging/debian/postinst` says why not generated ones).
const MAINTAINER_SCRIPTS: &[&str] = &["postinst", "prerm", "postrm"];

/// Where the binary goes; the source is the release build for the target.
const BINARY_DESTINATION: &str = "usr/bin/oapd";

/// The most the stripped daemon may weigh, on either architecture: it is
/// most of what a board downloads and keeps, and the size is a budget that
/// only grows by decision (the workspace Cargo.toml's size section says
/// what keeps it there). Checked where the package strips the binary, so
/// `cargo xtask deb` (amd64 and arm64) fails the day a change crosses it.
/// The x86_64 binary, the larger, is 24.8 MB (aarch64 21.6 MB); the budget
/// only shrinks.
const MAX_STRIPPED_BINARY_BYTES: u64 = 25_000_000;

/// `(source relative to the repository, destination in the package, mode)`;
/// a source ending in `/*.json` is every JSON file of that directory.
const ASSETS: &[(&str, &str, u32)] = &[
    ("packaging/debian/oapd-setup", "usr/sbin/oapd-setup", 0o755),
    (
        "packaging/debian/config.yaml",
        "etc/oapd/config.yaml",
        0o644,
    ),
    (
        "systemd/oapd.service",
        "usr/lib/systemd/system/oapd.service",
        0o644,
    ),
    (
        "systemd/oapd.socket",
        "usr/lib/systemd/system/oapd.socket",
        0o644,
    ),
    (
        "systemd/oapd.sysusers",
        "usr/lib/sysusers.d/oapd.conf",
        0o644,
    ),
    (
        "systemd/oapd.tmpfiles",
        "usr/lib/tmpfiles.d/oapd.conf",
        0o644,
    ),
    (
        "models/all-MiniLM-L6-v2/config.json",
        "usr/share/oapd/models/all-MiniLM-L6-v2/config.json",
        0o644,
    ),
    (
        "models/all-MiniLM-L6-v2/tokenizer.json",
        "usr/share/oapd/models/all-MiniLM-L6-v2/tokenizer.json",
        0o644,
    ),
    (
        "models/all-MiniLM-L6-v2/model.safetensors",
        "usr/share/oapd/models/all-MiniLM-L6-v2/model.safetensors",
        0o644,
    ),
    (
        "models/all-MiniLM-L6-v2/SHA256SUMS",
        "usr/share/oapd/models/all-MiniLM-L6-v2/SHA256SUMS",
        0o644,
    ),
    (
        "models/all-MiniLM-L6-v2/LICENSE",
        "usr/share/oapd/models/all-MiniLM-L6-v2/LICENSE",
        0o644,
    ),
    (
        "models/all-MiniLM-L6-v2/NOTICE",
        "usr/share/oapd/models/all-MiniLM-L6-v2/NOTICE",
        0o644,
    ),
    (
        "manifests/bundled/*.json",
        "usr/share/oapd/manifests",
        0o644,
    ),
    ("README.md", "usr/share/doc/oapd/README.md", 0o644),
    ("systemd/README.md", "usr/share/doc/oapd/systemd.md", 0o644),
    (
        "docs/config.example.yaml",
        "usr/share/doc/oapd/config.example.yaml",
        0o644,
    ),
];

/// Writes `out_dir/oapd_VERSION-1_ARCH.deb` from `binary`; returns its path.
/// `strip` is the binutils `strip` that reads the binary's architecture.
pub(crate) fn write(
    binary: &Path,
    strip: &str,
    arch: &str,
    version: &str,
    out_dir: &Path,
) -> Result<PathBuf> {
    let root = repo_root();
    let stage = out_dir.join(format!("stage-{arch}"));
    if stage.exists() {
        fs::remove_dir_all(&stage).with_context(|| format!("cannot clear {}", stage.display()))?;
    }
    let installed = |destination: &str| stage.join(destination);

    place(binary, &installed(BINARY_DESTINATION), 0o755)?;
    run_in_root(
        Command::new(strip)
            .arg("--strip-unneeded")
            .arg(installed(BINARY_DESTINATION)),
    )
    .with_context(|| format!("cannot strip the binary with {strip}"))?;
    check_stripped_size(&installed(BINARY_DESTINATION), MAX_STRIPPED_BINARY_BYTES)?;
    for (source, destination, mode) in ASSETS {
        match source.strip_suffix("/*.json") {
            Some(dir) => {
                let mut files: Vec<PathBuf> = fs::read_dir(root.join(dir))
                    .with_context(|| format!("cannot list {dir}"))?
                    .filter_map(|entry| entry.ok().map(|e| e.path()))
                    .filter(|p| p.extension().is_some_and(|e| e == "json"))
                    .collect();
                files.sort();
                ensure!(!files.is_empty(), "{dir} holds no JSON file");
                for file in files {
                    let name = file.file_name().context("a file without a name")?;
                    place(&file, &installed(destination).join(name), *mode)?;
                }
            }
            None => place(&root.join(source), &installed(destination), *mode)?,
        }
    }
    let doc = installed("usr/share/doc/oapd/copyright");
    write_file(
        &doc,
        &format!(
            "Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/\n\
             Upstream-Name: {PACKAGE}\n\n\
             Files: *\nCopyright: {COPYRIGHT}\nLicense: {LICENSE}\n"
        ),
        0o644,
    )?;

    let mut payload = Vec::new();
    collect_files(&stage, &stage, &mut payload)?;
    payload.sort();
    let installed_bytes: u64 = payload
        .iter()
        .map(|p| fs::metadata(stage.join(p)).map(|m| m.len()))
        .sum::<std::io::Result<u64>>()?;

    let control_dir = stage.join("DEBIAN");
    fs::create_dir_all(&control_dir)?;
    write_file(
        &control_dir.join("control"),
        &control(arch, version, installed_bytes.div_ceil(1024)),
        0o644,
    )?;
    let conffiles: String = CONFFILES.iter().map(|c| format!("{c}\n")).collect();
    write_file(&control_dir.join("conffiles"), &conffiles, 0o644)?;
    for script in MAINTAINER_SCRIPTS {
        place(
            &root.join("packaging/debian").join(script),
            &control_dir.join(script),
            0o755,
        )?;
    }
    let md5sums = Command::new("md5sum")
        .args(&payload)
        .current_dir(&stage)
        .output()
        .context("cannot run md5sum")?;
    ensure!(
        md5sums.status.success(),
        "md5sum failed: {}",
        String::from_utf8_lossy(&md5sums.stderr)
    );
    fs::write(control_dir.join("md5sums"), &md5sums.stdout)?;

    let deb = out_dir.join(format!("{PACKAGE}_{version}-1_{arch}.deb"));
    // xz at level 1: the model's weights barely compress, so a higher level
    // costs tens of seconds for a few hundred kilobytes.
    run_in_root(
        Command::new("dpkg-deb")
            .args(["--root-owner-group", "-Zxz", "-z1", "--build"])
            .arg(&stage)
            .arg(&deb),
    )?;
    fs::remove_dir_all(&stage).with_context(|| format!("cannot remove {}", stage.display()))?;
    Ok(deb)
}

/// Fails when the stripped `binary` is over `limit` bytes, naming both.
fn check_stripped_size(binary: &Path, limit: u64) -> Result<()> {
    let bytes = fs::metadata(binary)
        .with_context(|| format!("cannot read the size of {}", binary.display()))?
        .len();
    ensure!(
        bytes <= limit,
        "the stripped daemon {} is {bytes} bytes, over its budget of {limit} bytes: \
         find what grew (`nm --size-sort`, `cargo bloat --crates`) before packaging it",
        binary.display()
    );
    Ok(())
}

/// The control file; the long description folded into lines of at most 79
/// columns, each starting with a space, as Debian's policy wants.
fn control(arch: &str, version: &str, installed_kib: u64) -> String {
    let mut text = format!(
        "Package: {PACKAGE}\nVersion: {version}-1\nArchitecture: {arch}\n\
         Maintainer: {MAINTAINER}\nInstalled-Size: {installed_kib}\n\
         Depends: {DEPENDS}\nRecommends: {RECOMMENDS}\nSuggests: {SUGGESTS}\n\
         Section: {SECTION}\nPriority: {PRIORITY}\nDescription: {SUMMARY}\n"
    );
    let mut line = String::new();
    for word in DESCRIPTION.split_whitespace() {
        if !line.is_empty() && line.len() + 1 + word.len() > 78 {
            text.push_str(&format!(" {line}\n"));
            line.clear();
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(word);
    }
    if !line.is_empty() {
        text.push_str(&format!(" {line}\n"));
    }
    text
}

fn place(source: &Path, destination: &Path, mode: u32) -> Result<()> {
    if let Some(parent) = destination.parent() {
        fs::create_dir_all(parent)
            .with_context(|| format!("cannot create {}", parent.display()))?;
    }
    fs::copy(source, destination).with_context(|| {
        format!(
            "cannot copy {} to {}",
            source.display(),
            destination.display()
        )
    })?;
    fs::set_permissions(destination, fs::Permissions::from_mode(mode))?;
    Ok(())
}

fn write_file(path: &Path, text: &str, mode: u32) -> Result<()> {
    if let Some(parent) = path.parent() {
        fs::create_dir_all(parent)?;
    }
    fs::write(path, text).with_context(|| format!("cannot write {}", path.display()))?;
    fs::set_permissions(path, fs::Permissions::from_mode(mode))?;
    Ok(())
}

/// Every regular file under `dir`, relative to `stage`.
fn collect_files(stage: &Path, dir: &Path, out: &mut Vec<PathBuf>) -> Result<()> {
    for entry in fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            collect_files(stage, &path, out)?;
        } else {
            out.push(path.strip_prefix(stage)?.to_path_buf());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_binary_over_the_size_budget_is_refused_and_one_at_it_passes() {
        let dir = tempfile::tempdir().unwrap();
        let binary = dir.path().join("oapd");
        fs::write(&binary, vec![0u8; 1000]).unwrap();
        check_stripped_size(&binary, 1000).unwrap();
        let err = check_stripped_size(&binary, 999).unwrap_err().to_string();
        assert!(
            err.contains("1000 bytes, over its budget of 999 bytes"),
            "{err}"
        );
    }

    #[test]
    fn the_control_file_folds_the_description_and_names_every_field() {
        let text = control("arm64", "0.1.0", 12345);
        for field in [
            "Package: oapd\n",
            "Version: 0.1.0-1\n",
            "Architecture: arm64\n",
            "Installed-Size: 12345\n",
            "Depends: libc6 (>= 2.34)",
        ] {
            assert!(text.contains(field), "{field:?} missing in\n{text}");
        }
        let description: Vec<&str> = text
            .lines()
            .skip_while(|l| !l.starts_with("Description:"))
            .skip(1)
            .collect();
        assert!(description.len() >= 3, "{text}");
        for line in description {
            assert!(line.starts_with(' ') && line.len() <= 80, "{line:?}");
        }
    }
}

//! Packaging tasks: `cargo xtask deb` (the Debian package, checked) and
//! `cargo xtask check-units` (systemd unit verification and the sandboxing
//! exposure score). Neither installs anything: `.ci/run` installs systemd
//! and dpkg-dev first; the package itself is written by `debfile.rs`.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, ensure, Context, Result};

use crate::repo_root;
use crate::tasks::{cargo, run_in_root};

/// The highest `systemd-analyze security` exposure accepted (systemd calls
/// everything up to 2.0 "OK").
const MAX_EXPOSURE: f64 = 2.0;

/// Units shipped in `systemd/` and verified.
const UNITS: &[&str] = &["oapd.service", "oapd.socket"];

/// Debian architecture → Rust target (`None`: the host's own build).
fn rust_target(arch: &str) -> Result<Option<&'static str>> {
    let host = host_deb_arch();
    match arch {
        a if a == host && a == "amd64" => Ok(None),
        a if a == host && a == "arm64" => Ok(None),
        "amd64" => Ok(Some("x86_64-unknown-linux-gnu")),
        "arm64" => Ok(Some("aarch64-unknown-linux-gnu")),
        other => bail!("--arch {other}: expected amd64 or arm64"),
    }
}

fn host_deb_arch() -> &'static str {
    match std::env::consts::ARCH {
        "aarch64" => "arm64",
        _ => "amd64",
    }
}

/// The cargo profile the shipped binary is built with: the one the tests
/// build, so packaging reuses their build (a whole-program-LTO profile
/// for size was tried and its single-unit build did not finish within
/// CI's budget on 2 cores).
pub(crate) const SHIPPED_PROFILE: &str = "release";

/// Where `cargo build` puts the binary of `profile` for `target`.
pub(crate) fn built_binary(target: Option<&str>, profile: &str) -> PathBuf {
    let mut path = repo_root().join("target");
    if let Some(target) = target {
        path.push(target);
    }
    path.join(profile).join("oapd")
}

/// Where `cargo build` puts the release binary for `target`.
pub(crate) fn release_binary(target: Option<&str>) -> PathBuf {
    built_binary(target, "release")
}

/// The binary `cargo xtask deb --arch ARCH` packages.
pub(crate) fn shipped_binary(arch: &str) -> Result<PathBuf> {
    Ok(built_binary(rust_target(arch)?, SHIPPED_PROFILE))
}

/// The package `cargo xtask deb --arch ARCH` writes.
pub(crate) fn deb_path(arch: &str) -> Result<PathBuf> {
    rust_target(arch)?;
    Ok(repo_root().join(format!(
        "target/debian/oapd_{}-1_{arch}.deb",
        workspace_version()?
    )))
}

/// Files the package must contain (paths as `dpkg-deb -c` lists them).
const EXPECTED_FILES: &[&str] = &[
    "./usr/bin/oapd",
    "./etc/oapd/config.yaml",
    "./usr/lib/systemd/system/oapd.service",
    "./usr/lib/systemd/system/oapd.socket",
    "./usr/lib/sysusers.d/oapd.conf",
    "./usr/lib/tmpfiles.d/oapd.conf",
    "./usr/share/oapd/models/all-MiniLM-L6-v2/config.json",
    "./usr/share/oapd/models/all-MiniLM-L6-v2/tokenizer.json",
    "./usr/share/oapd/models/all-MiniLM-L6-v2/model.safetensors",
    "./usr/share/oapd/models/all-MiniLM-L6-v2/SHA256SUMS",
    "./usr/share/oapd/models/all-MiniLM-L6-v2/LICENSE",
    "./usr/share/oapd/manifests/grep.json",
    "./usr/share/doc/oapd/config.example.yaml",
];

/// `cargo xtask deb [--arch amd64|arm64] [--no-build]`
pub fn deb(args: &[String]) -> Result<()> {
    let mut arch = host_deb_arch().to_owned();
    let mut build = true;
    let mut iter = args.iter();
    while let Some(arg) = iter.next() {
        match arg.as_str() {
            "--arch" => {
                arch = iter
                    .next()
                    .context("--arch needs a value (amd64 or arm64)")?
                    .clone()
            }
            "--no-build" => build = false,
            other => {
                bail!("unknown argument {other:?}; usage: deb [--arch amd64|arm64] [--no-build]")
            }
        }
    }
    let target = rust_target(&arch)?;
    crate::model::run(&[])?;
    if build {
        let mut command = cargo();
        command.args(["build", "--profile", SHIPPED_PROFILE, "--package", "oapd"]);
        if let Some(target) = target {
            command.args(["--target", target]);
        }
        run_in_root(&mut command)?;
    }
    let binary = built_binary(target, SHIPPED_PROFILE);
    ensure!(
        binary.is_file(),
        "{} is missing: build it first or drop --no-build",
        binary.display()
    );
    // A binary that needs a newer glibc than the oldest supported system
    // has would install there and then fail to start.
    crate::glibc::check_binary_glibc(&binary)?;
    let out_dir = repo_root().join("target/debian");
    fs::create_dir_all(&out_dir)?;
    // binutils' strip reads only its own architecture: the cross build's
    // comes with Debian's gcc-aarch64-linux-gnu.
    let strip = match target {
        Some("aarch64-unknown-linux-gnu") => "aarch64-linux-gnu-strip",
        Some("x86_64-unknown-linux-gnu") => "x86_64-linux-gnu-strip",
        _ => "strip",
    };
    let deb = crate::debfile::write(&binary, strip, &arch, &workspace_version()?, &out_dir)?;
    check_deb(&deb, &arch)?;
    println!(
        "deb: {} ({} bytes) checked",
        deb.display(),
        fs::metadata(&deb)?.len()
    );
    Ok(())
}

fn workspace_version() -> Result<String> {
    let text = fs::read_to_string(repo_root().join("Cargo.toml"))?;
    text.lines()
        .find_map(|line| {
            let rest = line
                .trim()
                .strip_prefix("version")?
                .trim()
                .strip_prefix('=')?;
            Some(rest.trim().trim_matches('"').to_owned())
        })
        .context("no version in the workspace Cargo.toml")
}

fn output(command: &mut Command) -> Result<String> {
    let shown = format!("{command:?}");
    let out = command
        .output()
        .with_context(|| format!("cannot start {shown}"))?;
    ensure!(
        out.status.success(),
        "{shown} failed: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Checks a built package: contents, control fields, conffiles, maintainer
/// scripts, the model's checksums, and (for the host's architecture) that the
/// packaged binary with the packaged config and model answers a discovery.
pub fn check_deb(deb: &Path, arch: &str) -> Result<()> {
    let listing = output(Command::new("dpkg-deb").arg("-c").arg(deb))?;
    let paths: Vec<&str> = listing
        .lines()
        .filter_map(|line| line.split_whitespace().nth(5))
        .collect();
    for expected in EXPECTED_FILES {
        ensure!(
            paths.contains(expected),
            "{} lacks {expected}; it has:\n{listing}",
            deb.display()
        );
    }
    let field = |name: &str| -> Result<String> {
        Ok(
            output(Command::new("dpkg-deb").args(["-f"]).arg(deb).arg(name))?
                .trim()
                .to_owned(),
        )
    };
    ensure!(field("Package")? == "oapd", "Package is not oapd");
    ensure!(
        field("Architecture")? == arch,
        "Architecture is {:?}, expected {arch}",
        field("Architecture")?
    );
    let depends = field("Depends")?;
    ensure!(depends.contains("libc6"), "Depends lacks libc6: {depends}");

    let control = tempfile::tempdir()?;
    output(
        Command::new("dpkg-deb")
            .arg("-e")
            .arg(deb)
            .arg(control.path()),
    )?;
    let conffiles = fs::read_to_string(control.path().join("conffiles")).unwrap_or_default();
    ensure!(
        conffiles
            .lines()
            .any(|l| l.trim() == "/etc/oapd/config.yaml"),
        "/etc/oapd/config.yaml is not a conffile: {conffiles:?}"
    );
    for script in ["postinst", "prerm", "postrm"] {
        let path = control.path().join(script);
        ensure!(path.is_file(), "maintainer script {script} missing");
        output(Command::new("sh").arg("-n").arg(&path))
            .with_context(|| format!("{script} is not valid sh"))?;
        let text = fs::read_to_string(&path)?;
        ensure!(
            !text.contains("#DEBHELPER#"),
            "{script}: unreplaced #DEBHELPER#"
        );
    }
    let postinst = fs::read_to_string(control.path().join("postinst"))?;
    ensure!(
        postinst.contains("deb-systemd-helper enable 'oapd.service'")
            && postinst.contains("deb-systemd-invoke $_dh_action 'oapd.service'"),
        "postinst does not enable and start oapd.service"
    );
    ensure!(
        !postinst.contains("deb-systemd-invoke $_dh_action 'oapd.socket'"),
        "postinst must not start oapd.socket"
    );
    let postrm = fs::read_to_string(control.path().join("postrm"))?;
    ensure!(
        postrm.contains("rm -rf \"${DPKG_ROOT}/var/lib/oapd\""),
        "postrm does not remove the state on purge"
    );

    let root = tempfile::tempdir()?;
    output(Command::new("dpkg-deb").arg("-x").arg(deb).arg(root.path()))?;
    let model = root.path().join("usr/share/oapd/models/all-MiniLM-L6-v2");
    output(
        Command::new("sha256sum")
            .args(["--check", "--strict", "SHA256SUMS"])
            .current_dir(&model),
    )
    .context("the packaged model does not match its SHA256SUMS")?;
    let config = fs::read_to_string(root.path().join("etc/oapd/config.yaml"))?;
    for needle in [
        "/usr/share/oapd/models/all-MiniLM-L6-v2",
        "/var/lib/oapd",
        "127.0.0.1:8300",
    ] {
        ensure!(config.contains(needle), "packaged config lacks {needle}");
    }

    if arch == host_deb_arch() {
        smoke_packaged_binary(root.path())?;
    } else {
        let file = output(Command::new("file").arg(root.path().join("usr/bin/oapd")))?;
        ensure!(
            file.contains("ARM aarch64"),
            "packaged binary is not aarch64: {file}"
        );
    }
    Ok(())
}

/// The extracted binary, with the packaged config whose absolute paths are
/// redirected into the extracted tree (environment overrides), loads the
/// packaged model and finds a bundled capability.
fn smoke_packaged_binary(root: &Path) -> Result<()> {
    let state = tempfile::tempdir()?;
    let binary = root.join("usr/bin/oapd");
    let config = root.join("etc/oapd/config.yaml");
    let configured = |command: &mut Command| {
        command
            .arg("--config")
            .arg(&config)
            .env(
                "OAP_EMBEDDING_MODEL_DIR",
                root.join("usr/share/oapd/models/all-MiniLM-L6-v2"),
            )
            .env("OAP_INDEX_DATA_DIR", state.path())
            .env("OAP_MANIFESTS_DIRS", root.join("usr/share/oapd/manifests"))
            .env_remove("RUST_LOG");
    };
    let mut lint = Command::new(&binary);
    lint.args(["manifest", "lint"]);
    for entry in fs::read_dir(root.join("usr/share/oapd/manifests"))? {
        lint.arg(entry?.path());
    }
    output(&mut lint).context("the packaged manifests do not lint clean")?;
    let mut discover = Command::new(&binary);
    configured(&mut discover);
    discover.args(["discover", "--json", "count the words in this paragraph"]);
    let answer = output(&mut discover)?;
    let value: serde_json::Value =
        serde_json::from_str(&answer).context("discover --json printed no JSON")?;
    ensure!(
        value["meta"]["mode"] == "hybrid",
        "the packaged model did not load (mode {})",
        value["meta"]["mode"]
    );
    let best = value["match"]["id"].as_str().unwrap_or_default();
    ensure!(
        best.ends_with("wc"),
        "expected wc for word counting, got {best:?}"
    );
    Ok(())
}

/// `cargo xtask check-units`: `systemd-analyze verify` on the units,
/// sysusers.d and tmpfiles.d applied to a scratch root, and the offline
/// `systemd-analyze security` exposure (fails above [`MAX_EXPOSURE`]).
pub fn check_units(args: &[String]) -> Result<()> {
    ensure!(args.is_empty(), "check-units takes no arguments");
    let units_dir = repo_root().join("systemd");
    let scratch = tempfile::tempdir()?;

    // verify checks that ExecStart's binary exists: point it at a real one.
    let stand_in = [release_binary(None), PathBuf::from("/bin/true")]
        .into_iter()
        .find(|p| p.is_file())
        .context("no stand-in executable for ExecStart")?;
    let mut copies = Vec::new();
    for unit in UNITS {
        let text = fs::read_to_string(units_dir.join(unit))
            .with_context(|| format!("cannot read systemd/{unit}"))?;
        let text = text.replace("/usr/bin/oapd", &stand_in.display().to_string());
        let copy = scratch.path().join(unit);
        fs::write(&copy, text)?;
        copies.push(copy);
    }
    let verify = Command::new("systemd-analyze")
        .arg("verify")
        .args(&copies)
        .output()
        .context("cannot run systemd-analyze (apt-get install systemd)")?;
    let complaints = String::from_utf8_lossy(&verify.stderr).into_owned();
    ensure!(
        verify.status.success() && complaints.trim().is_empty(),
        "systemd-analyze verify: {}\n{complaints}",
        verify.status
    );
    println!("systemd-analyze verify: {} units clean", UNITS.len());

    // sysusers then tmpfiles into a scratch root: the user exists and the
    // directories get their owners and modes.
    let root = scratch.path().join("root");
    fs::create_dir_all(root.join("etc"))?;
    let sysusers = units_dir.join("oapd.sysusers");
    output(
        Command::new("systemd-sysusers")
            .arg(format!("--root={}", root.display()))
            .arg(&sysusers),
    )?;
    let passwd = fs::read_to_string(root.join("etc/passwd"))?;
    ensure!(
        passwd.lines().any(|l| l.starts_with("oapd:")),
        "systemd-sysusers created no oapd user: {passwd}"
    );
    output(
        Command::new("systemd-tmpfiles")
            .arg(format!("--root={}", root.display()))
            .arg("--create")
            .arg(units_dir.join("oapd.tmpfiles")),
    )?;
    ensure!(
        root.join("var/lib/oapd").is_dir(),
        "tmpfiles created no /var/lib/oapd"
    );
    ensure!(
        root.join("etc/oapd/manifests").is_dir(),
        "tmpfiles created no /etc/oapd/manifests"
    );
    println!("sysusers.d and tmpfiles.d: applied to a scratch root");

    let security = Command::new("systemd-analyze")
        .args([
            "security",
            "--offline=true",
            "--no-pager",
            "--threshold=100",
        ])
        .arg(units_dir.join("oapd.service"))
        .output()
        .context("cannot run systemd-analyze security")?;
    let report = String::from_utf8_lossy(&security.stdout).into_owned();
    let exposure = report
        .lines()
        .find_map(|line| {
            let rest = line
                .split("Overall exposure level for oapd.service:")
                .nth(1)?;
            rest.split_whitespace().next()?.parse::<f64>().ok()
        })
        .with_context(|| format!("no exposure level in:\n{report}"))?;
    for line in report.lines().filter(|l| l.starts_with('✗')) {
        if let Some(setting) = line.split_whitespace().nth(1) {
            println!("  not set: {setting}");
        }
    }
    println!("systemd-analyze security --offline=true: oapd.service exposure {exposure:.1}");
    ensure!(
        exposure <= MAX_EXPOSURE,
        "oapd.service exposure {exposure} is above {MAX_EXPOSURE}"
    );
    Ok(())
}

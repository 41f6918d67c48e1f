//! Home Assistant core for the end-to-end suite: a venv under
//! target/ha-venv with tests/python/home-assistant.txt installed (every
//! package pinned), on a CPython 3.13 (3.13.2 or later) found on the machine
//! or, when there is none, built from Debian's source of it (the upstream
//! tarball, checked by sha256) into target/python3.13 and reused from there.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context};
use sha2::{Digest, Sha256};

use crate::repo_root;
use crate::tasks::run_in_root;

/// The CPython 3.13 source Debian ships (trixie's python3.13), used only
/// when the machine has no CPython 3.13 new enough.
const SOURCE_URL: &str =
    "http://deb.debian.org/debian/pool/main/p/python3.13/python3.13_3.13.5.orig.tar.xz";
const SOURCE_SHA256: &str = "93e583f243454e6e9e4588ca2c2662206ad961659863277afcdb96801647d640";

/// Where the venv's pins are recorded: the venv is reused while they match.
const STAMP: &str = "oapd-pins.sha256";

/// Makes (or reuses) target/ha-venv and returns its path.
pub(crate) fn venv() -> anyhow::Result<PathBuf> {
    let root = repo_root();
    let venv = root.join("target/ha-venv");
    let pins = std::fs::read(root.join("tests/python/home-assistant.txt"))
        .context("reading tests/python/home-assistant.txt")?;
    let python = python()?;
    let want = format!(
        "{}  {}\n",
        hex::encode(Sha256::digest(&pins)),
        python.display()
    );
    let stamp = venv.join(STAMP);
    if venv.join("bin/hass").is_file() && std::fs::read_to_string(&stamp).ok() == Some(want.clone())
    {
        println!("Home Assistant venv {} is up to date", venv.display());
        return Ok(venv);
    }
    if venv.exists() {
        std::fs::remove_dir_all(&venv).with_context(|| format!("removing {}", venv.display()))?;
    }
    run_in_root(Command::new(&python).args(["-m", "venv"]).arg(&venv))?;
    crate::tasks::pip_install(
        &venv.join("bin/python"),
        &root.join("tests/python/home-assistant.txt"),
    )?;
    std::fs::write(&stamp, want)?;
    Ok(venv)
}

/// The oldest CPython Home Assistant's pinned release runs on.
const MIN_PYTHON: (u32, u32, u32) = (3, 13, 2);

/// A CPython 3.13.2 or later: `OAPD_HA_PYTHON` if set (`source` forces
/// the build), else `python3.13` on PATH, else pyenv's newest 3.13, else
/// target/python3.13 (built here before), else built now. Older 3.13s are
/// passed over with the reason printed.
fn python() -> anyhow::Result<PathBuf> {
    let root = repo_root();
    let built = root.join("target/python3.13/bin/python3.13");
    match std::env::var("OAPD_HA_PYTHON") {
        Ok(forced) if forced == "source" => {
            if usable(&built).is_err() {
                build(&root.join("target/python3.13"))?;
            }
            return Ok(built);
        }
        Ok(given) => {
            let given = PathBuf::from(given);
            if let Err(why) = usable(&given) {
                bail!("OAPD_HA_PYTHON={}: {why}", given.display());
            }
            return Ok(given);
        }
        Err(_) => {}
    }
    for candidate in candidates() {
        match usable(&candidate) {
            Ok(()) => return Ok(candidate),
            Err(Unusable::Missing) => {}
            Err(why) => println!("not using {}: {why}", candidate.display()),
        }
    }
    println!(
        "no CPython {}.{}.{} or later 3.13 on this machine: building one from Debian's source",
        MIN_PYTHON.0, MIN_PYTHON.1, MIN_PYTHON.2
    );
    build(&root.join("target/python3.13"))?;
    Ok(built)
}

/// Whether [`python`] would have to build CPython from source (which needs
/// the `ha-build` packages of xtask/debian-packages.txt).
pub(crate) fn needs_build() -> bool {
    match std::env::var("OAPD_HA_PYTHON") {
        Ok(forced) if forced == "source" => {
            usable(&repo_root().join("target/python3.13/bin/python3.13")).is_err()
        }
        Ok(_) => false,
        Err(_) => !candidates().iter().any(|c| usable(c).is_ok()),
    }
}

/// Where a CPython 3.13 may be, in order of preference.
fn candidates() -> Vec<PathBuf> {
    let built = repo_root().join("target/python3.13/bin/python3.13");
    let mut candidates = vec![PathBuf::from("python3.13")];
    let pyenv = std::env::var_os("PYENV_ROOT")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|home| Path::new(&home).join(".pyenv")));
    if let Some(versions) = pyenv.map(|p| p.join("versions")) {
        let mut found: Vec<PathBuf> = std::fs::read_dir(versions)
            .map(|dir| {
                dir.flatten()
                    .filter(|e| e.file_name().to_string_lossy().starts_with("3.13"))
                    .map(|e| e.path().join("bin/python3.13"))
                    .collect()
            })
            .unwrap_or_default();
        found.sort();
        candidates.extend(found.into_iter().rev());
    }
    candidates.push(built);
    candidates
}

/// Why a Python will not do for Home Assistant.
#[derive(Debug, PartialEq)]
enum Unusable {
    /// It does not run (not there, not a Python).
    Missing,
    /// A 3.13 older than [`MIN_PYTHON`], or not a 3.13 at all.
    Version(String),
    /// A 3.13 without a module Home Assistant imports.
    Modules(String),
}

impl std::fmt::Display for Unusable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (major, minor, micro) = MIN_PYTHON;
        match self {
            Unusable::Missing => write!(f, "does not run"),
            Unusable::Version(version) => write!(
                f,
                "is CPython {version}; Home Assistant (tests/python/home-assistant.txt) \
                 needs CPython {major}.{minor}.{micro} or a later {major}.{minor}"
            ),
            Unusable::Modules(version) => write!(
                f,
                "is CPython {version} without ssl, sqlite3, zlib or ctypes, which Home Assistant imports"
            ),
        }
    }
}

/// Whether `python` is a CPython 3.13 at or past [`MIN_PYTHON`] with the
/// modules Home Assistant needs.
fn usable(python: &Path) -> Result<(), Unusable> {
    let out = Command::new(python)
        .args(["-c", "import sys; print('%d.%d.%d' % sys.version_info[:3])"])
        .output()
        .map_err(|_| Unusable::Missing)?;
    if !out.status.success() {
        return Err(Unusable::Missing);
    }
    let version = String::from_utf8_lossy(&out.stdout).trim().to_string();
    if !version_fits(&version) {
        return Err(Unusable::Version(version));
    }
    let modules = Command::new(python)
        .args(["-c", "import ssl, sqlite3, zlib, ctypes"])
        .output()
        .map(|out| out.status.success())
        .unwrap_or(false);
    if modules {
        Ok(())
    } else {
        Err(Unusable::Modules(version))
    }
}

/// `major.minor.micro` is a 3.13 at or past [`MIN_PYTHON`].
fn version_fits(version: &str) -> bool {
    let parts: Vec<u32> = version.split('.').filter_map(|p| p.parse().ok()).collect();
    match parts.as_slice() {
        [major, minor, micro] => {
            (*major, *minor) == (MIN_PYTHON.0, MIN_PYTHON.1) && *micro >= MIN_PYTHON.2
        }
        _ => false,
    }
}

/// Downloads, checks and builds CPython 3.13 into `prefix` (no PGO: a
/// few minutes on two cores instead of half an hour). The compile runs
/// niced: `cargo xtask test` builds the workspace meanwhile.
fn build(prefix: &Path) -> anyhow::Result<()> {
    let work = tempfile::tempdir()?;
    let tarball = work.path().join("python3.13.orig.tar.xz");
    run_in_root(
        Command::new("curl")
            .args([
                "--fail",
                "--silent",
                "--show-error",
                "--location",
                "--output",
            ])
            .arg(&tarball)
            .arg(SOURCE_URL),
    )?;
    let got = hex::encode(Sha256::digest(std::fs::read(&tarball)?));
    if got != SOURCE_SHA256 {
        bail!("{SOURCE_URL} has sha256 {got}, expected {SOURCE_SHA256}");
    }
    let source = work.path().join("src");
    std::fs::create_dir_all(&source)?;
    run_in_root(
        Command::new("tar")
            .arg("xJf")
            .arg(&tarball)
            .arg("-C")
            .arg(&source)
            .arg("--strip-components=1"),
    )?;
    let jobs = std::thread::available_parallelism().map_or(2, |n| n.get());
    let mut configure = Command::new("./configure");
    configure
        .arg(format!("--prefix={}", prefix.display()))
        .args(["--disable-test-modules", "--with-ensurepip=no"])
        .current_dir(&source);
    in_dir(&mut configure)?;
    in_dir(
        Command::new("nice")
            .args(["-n", "10", "make"])
            .arg(format!("-j{jobs}"))
            .current_dir(&source),
    )?;
    in_dir(Command::new("make").arg("install").current_dir(&source))?;
    let built = prefix.join("bin/python3.13");
    if let Err(why) = usable(&built) {
        bail!(
            "the CPython built in {} will not do: {why} (for the modules: \
             apt-get install libssl-dev libsqlite3-dev zlib1g-dev libffi-dev)",
            prefix.display()
        );
    }
    Ok(())
}

/// Runs a command in its own directory (quietly: output only on failure).
fn in_dir(command: &mut Command) -> anyhow::Result<()> {
    let shown = format!("{command:?}");
    println!("$ {shown}");
    let out = command
        .output()
        .with_context(|| format!("cannot start {shown}"))?;
    if !out.status.success() {
        let tail = |bytes: &[u8]| {
            let text = String::from_utf8_lossy(bytes).into_owned();
            let lines: Vec<&str> = text.lines().collect();
            lines[lines.len().saturating_sub(30)..].join("\n")
        };
        bail!(
            "{shown} failed: {}\n{}\n{}",
            out.status,
            tail(&out.stdout),
            tail(&out.stderr)
        );
    }
    Ok(())
}

/// `cargo xtask bench-ha [--runs N]`: one Home Assistant voice turn
/// through oapd vs straight to the fake Ollama, interleaved in one run
/// (bench/ha_turn.py).
pub fn bench(args: &[String]) -> anyhow::Result<()> {
    crate::model::run(&[])?;
    run_in_root(crate::tasks::cargo().args([
        "build",
        "--release",
        "--package",
        "oapd",
        "--package",
        "fake-ollama",
        "--bins",
    ]))?;
    crate::tasks::python_venv()?;
    let venv = venv()?;
    let root = repo_root();
    run_in_root(
        Command::new(root.join("target/pyclients/bin/python"))
            .arg(root.join("bench/ha_turn.py"))
            .args(args)
            .env("OAPD_HA_VENV", venv),
    )
}

#[cfg(test)]
mod tests {
    use super::version_fits;

    #[test]
    fn only_a_313_from_313_2_on_will_do() {
        assert!(version_fits("3.13.2"));
        assert!(version_fits("3.13.5"));
        assert!(!version_fits("3.13.0"));
        assert!(!version_fits("3.13.1"));
        assert!(!version_fits("3.12.9"));
        assert!(!version_fits("3.14.0"));
        assert!(!version_fits("3.13"));
        assert!(!version_fits("not a version"));
    }
}

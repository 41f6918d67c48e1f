//! `cargo xtask cross [--test] [--jetpack5]`: the aarch64 (Raspberry Pi 4/5,
//! Jetson) release binary, built without Docker: rustup's aarch64 std plus
//! Debian's `gcc-aarch64-linux-gnu` as linker and C compiler (simsimd,
//! ring). Checks the result is an aarch64 ELF needing at most
//! [`GLIBC_FLOOR`], and with `--test` runs the test suites that do no candle
//! inference under `qemu-aarch64-static` (candle's matmul hangs under
//! qemu-user).
//!
//! `--jetpack5` builds instead with cargo-zigbuild + zig (hash-pinned wheels
//! from PyPI, installed under `target/zig-tools`) against glibc 2.31, the
//! floor of Ubuntu 20.04 / JetPack 5 (Jetson Xavier cannot move past it),
//! into `target/zig/`; one binary then runs on JetPack 5 and 6 and on
//! Raspberry Pi OS.

use std::path::Path;
use std::process::Command;
use std::time::Instant;

use anyhow::{bail, ensure, Context, Result};

use crate::repo_root;
use crate::tasks::{cargo, run_in_root};

pub(crate) const TARGET: &str = "aarch64-unknown-linux-gnu";

/// Highest glibc symbol version the binary may need: 2.34 runs on Raspberry
/// Pi OS bookworm (2.36) and JetPack 6 / Ubuntu 22.04 (2.35). JetPack 5
/// (Ubuntu 20.04, 2.31) needs a zigbuild binary (docs/BENCHMARKS.md).
pub(crate) const GLIBC_FLOOR: (u32, u32) = (2, 34);

/// The floor of the `--jetpack5` build: Ubuntu 20.04's glibc.
const JETPACK5_GLIBC: (u32, u32) = (2, 31);

/// `requirements.txt` lines (hash-pinned) for the zig toolchain.
const ZIG_TOOLS: &[&str] = &[
    "cargo-zigbuild==0.24.0 --hash=sha256:484412e39e4c6039474535ce97ee75a22bab22d58233056f8ec8a8f9034bb957",
    "ziglang==0.17.0 --hash=sha256:97079827064a7492cce5541ceb438ae8003ce1e54e399676da2d62fb7a5dc08b",
];

/// Debian's aarch64 sysroot, for qemu-user to find the dynamic loader.
const SYSROOT: &str = "/usr/aarch64-linux-gnu";

/// Test runs under qemu: (cargo test arguments, test binary arguments).
/// Left out: oap-embed-candle and oap-discovery's engine tests (candle inference),
/// oapd's daemon and bridge tests (they load the model): of oapd's one
/// integration-test binary only the `config` and `lifecycle` modules run.
/// Skipped: `rlimits_are_applied`, because qemu-user does not pass
/// RLIMIT_AS on to the host kernel (the emulator needs its own address
/// space), so `ulimit -v` reads "unlimited" under emulation only.
const QEMU_SUITES: &[(&[&str], &[&str])] = &[
    (
        &["-p", "oap-manifest", "-p", "oap-wire", "-p", "oap-index"],
        &[],
    ),
    (&["-p", "oap-exec"], &["--skip", "rlimits_are_applied"]),
    // The binary test execs the aarch64 fake-ollama directly (no runner).
    (
        &["-p", "fake-ollama"],
        &[
            "--skip",
            "the_binary_prints_its_address_and_serves_the_script",
        ],
    ),
    (&["-p", "oapd", "--lib"], &[]),
    (
        &["-p", "oapd", "--test", "it"],
        &["config::", "lifecycle::"],
    ),
];

fn runner() -> String {
    format!("qemu-aarch64-static -L {SYSROOT}")
}

fn need(binary: &str, package: &str) -> Result<()> {
    let found = Command::new("sh")
        .arg("-c")
        .arg(format!("command -v {binary}"))
        .output()
        .is_ok_and(|o| o.status.success());
    ensure!(found, "{binary} is missing: apt-get install {package}");
    Ok(())
}

fn ensure_target() -> Result<()> {
    let installed = Command::new("rustup")
        .args(["target", "list", "--installed"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).contains(TARGET))
        .unwrap_or(false);
    if !installed {
        run_in_root(Command::new("rustup").args(["target", "add", TARGET]))
            .context("the aarch64 standard library is not installed and rustup cannot add it")?;
    }
    Ok(())
}

pub fn run(args: &[String]) -> Result<()> {
    let mut test = false;
    let mut jetpack5 = false;
    for arg in args {
        match arg.as_str() {
            "--test" => test = true,
            "--jetpack5" => jetpack5 = true,
            other => bail!("unknown argument {other:?}; usage: cross [--test] [--jetpack5]"),
        }
    }
    ensure_target()?;
    if jetpack5 {
        ensure!(
            !test,
            "--jetpack5 builds the binary only; run --test on its own"
        );
        return build_jetpack5();
    }
    need("aarch64-linux-gnu-gcc", "gcc-aarch64-linux-gnu")?;
    let started = Instant::now();
    run_in_root(cargo().args([
        "build",
        "--release",
        "--package",
        "oapd",
        "--target",
        TARGET,
    ]))?;
    let built_in = started.elapsed();
    let binary = repo_root().join(format!("target/{TARGET}/release/oapd"));
    check_binary(&binary, GLIBC_FLOOR)?;
    println!(
        "cross: {} ({} bytes), built in {:.0} s",
        binary.display(),
        std::fs::metadata(&binary)?.len(),
        built_in.as_secs_f64()
    );
    if test {
        need("qemu-aarch64-static", "qemu-user-static")?;
        let started = Instant::now();
        for (suite, test_args) in QEMU_SUITES {
            run_in_root(
                cargo()
                    .args(["test", "--release", "--target", TARGET])
                    .args(*suite)
                    .arg("--")
                    .args(*test_args)
                    .env("CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUNNER", runner())
                    // Tests that start the daemon run it through qemu too.
                    .env("OAPD_TEST_RUNNER", runner()),
            )?;
        }
        println!(
            "cross --test: aarch64 suites under qemu-user passed in {:.0} s",
            started.elapsed().as_secs_f64()
        );
    }
    Ok(())
}

/// The zig toolchain under `target/zig-tools` (installed once, from
/// hash-pinned wheels); returns its directory.
fn zig_tools() -> Result<std::path::PathBuf> {
    let dir = repo_root().join("target/zig-tools");
    if dir.join("bin/cargo-zigbuild").is_file() && dir.join("ziglang").is_dir() {
        return Ok(dir);
    }
    std::fs::create_dir_all(&dir)?;
    let requirements = dir.join("requirements.txt");
    std::fs::write(&requirements, ZIG_TOOLS.join("\n") + "\n")?;
    run_in_root(
        Command::new("python3")
            .args([
                "-m",
                "pip",
                "install",
                "--quiet",
                "--no-deps",
                "--require-hashes",
            ])
            .args(["--only-binary=:all:", "--upgrade", "--target"])
            .arg(&dir)
            .arg("-r")
            .arg(&requirements),
    )
    .context("cannot install cargo-zigbuild and ziglang from PyPI")?;
    Ok(dir)
}

/// The glibc-2.31 build (see the module docs).
fn build_jetpack5() -> Result<()> {
    let tools = zig_tools()?;
    let path = format!(
        "{}:{}",
        tools.join("bin").display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let target_dir = repo_root().join("target/zig");
    let started = Instant::now();
    run_in_root(
        Command::new(tools.join("bin/cargo-zigbuild"))
            .args(["zigbuild", "--release", "--package", "oapd", "--target"])
            .arg(format!(
                "{TARGET}.{}.{}",
                JETPACK5_GLIBC.0, JETPACK5_GLIBC.1
            ))
            .env("PATH", path)
            // cargo-zigbuild runs zig as `python3 -m ziglang` from here.
            .env("PYTHONPATH", &tools)
            .env("CARGO_TARGET_DIR", &target_dir),
    )?;
    let binary = target_dir.join(format!("{TARGET}/release/oapd"));
    check_binary(&binary, JETPACK5_GLIBC)?;
    println!(
        "cross --jetpack5: {} ({} bytes), built in {:.0} s",
        binary.display(),
        std::fs::metadata(&binary)?.len(),
        started.elapsed().as_secs_f64()
    );
    if Command::new("sh")
        .args(["-c", "command -v qemu-aarch64-static"])
        .output()
        .is_ok_and(|o| o.status.success())
    {
        let output = Command::new("qemu-aarch64-static")
            .args(["-L", SYSROOT])
            .arg(&binary)
            .arg("--version")
            .output()?;
        ensure!(
            output.status.success(),
            "the binary does not run under qemu-aarch64-static: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        println!(
            "cross --jetpack5: runs under qemu-aarch64-static: {}",
            String::from_utf8_lossy(&output.stdout).trim()
        );
    }
    Ok(())
}

/// An aarch64 ELF whose newest glibc symbol version is at most `floor`.
pub(crate) fn check_binary(binary: &Path, floor: (u32, u32)) -> Result<()> {
    let file = Command::new("file").arg(binary).output()?;
    let file = String::from_utf8_lossy(&file.stdout);
    ensure!(
        file.contains("ELF 64-bit") && file.contains("ARM aarch64"),
        "not an aarch64 ELF: {file}"
    );
    let versions = Command::new("readelf")
        .args(["--version-info", "--wide"])
        .arg(binary)
        .output()?;
    ensure!(
        versions.status.success(),
        "readelf failed on {}",
        binary.display()
    );
    let text = String::from_utf8_lossy(&versions.stdout);
    let newest = max_glibc(&text).context("no GLIBC_ versions found: not dynamically linked?")?;
    println!(
        "cross: needs GLIBC_{}.{} (floor {}.{})",
        newest.0, newest.1, floor.0, floor.1
    );
    ensure!(
        newest <= floor,
        "the binary needs GLIBC_{}.{}, newer than the floor {}.{}",
        newest.0,
        newest.1,
        floor.0,
        floor.1
    );
    Ok(())
}

/// The highest `GLIBC_x.y[.z]` in readelf's version output.
fn max_glibc(readelf: &str) -> Option<(u32, u32)> {
    readelf
        .split(|c: char| c.is_whitespace() || c == '(' || c == ')')
        .filter_map(|word| word.strip_prefix("GLIBC_"))
        .filter_map(|version| {
            let mut parts = version.split('.');
            let major = parts.next()?.parse().ok()?;
            let minor = parts.next()?.parse().ok()?;
            Some((major, minor))
        })
        .max()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn newest_glibc_version_wins() {
        let text = "  0x0010:   Name: GLIBC_2.17  Flags: none  Version: 3\n\
                    Name: GLIBC_2.34 Flags\n Name: GLIBC_2.9\n (GLIBC_2.28)\n GLIBC_PRIVATE";
        assert_eq!(max_glibc(text), Some((2, 34)));
        assert_eq!(max_glibc("nothing"), None);
    }
}

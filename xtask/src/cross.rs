//! `cargo xtask cross [--test] [--jetpack5]`: the aarch64 (Raspberry Pi 4/5,
//! Jetson) release binary, built without Docker: rustup's aarch64 std plus
//! Debian's `gcc-aarch64-linux-gnu` as linker and C compiler (simsimd,
//! ring). Checks the result is an aarch64 ELF needing at most
//! [`GLIBC_FLOOR`].
//!
//! `--test` builds the test binaries of [`GUEST_PACKAGES`] in one
//! `cargo test --no-run` (one feature resolution: shared crates compile
//! once) and runs them inside a `qemu-system-aarch64` guest (TCG,
//! `-cpu cortex-a72`, Debian's arm64 kernel, a busybox initramfs; see
//! `guest.rs`): candle inference on NEON, simsimd's NEON kernels and the
//! daemon end to end, which qemu-user could not run (candle's matmul hangs
//! there). A failing suite, or one still running at the deadline, fails the
//! task by name; each suite's time is printed. `--suite NAME` (e.g.
//! `oap-sandbox/it`) runs only the named suites and builds only their
//! packages' tests.
//!
//! `--jetpack5` builds instead with cargo-zigbuild + zig (hash-pinned wheels
//! from PyPI, installed under `target/zig-tools`) against glibc 2.31, the
//! floor of Ubuntu 20.04 / JetPack 5 (Jetson Xavier cannot move past it),
//! into `target/zig/`; one binary then runs on JetPack 5 and 6 and on
//! Raspberry Pi OS.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};

use crate::guest::Suite;
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

/// The packages whose test binaries run in the arm64 guest: all of them
/// are built by one `cargo test --no-run` (one feature resolution, so
/// shared crates compile once).
const GUEST_PACKAGES: &[&str] = &[
    "oap-manifest",
    "oap-wire",
    "oap-index",
    "oap-exec",
    "oap-sandbox",
    "fake-ollama",
    "oap-embed-candle",
    "oap-discovery",
    "oapd",
];

/// Test binary arguments by suite (`package/target`); a suite not listed
/// runs whole. Under TCG one real-model index of the bundled manifests
/// takes minutes, so the suites that build one per test
/// (oap-discovery's `abstention`, the daemon and bridge tests with the model)
/// are left to `cargo xtask test`, as are the embedder tests that embed long
/// or many texts; what runs here proves inference on arm64: the embedder's
/// reference scores of sentence-transformers and its load errors, discovery
/// picking the fitting reference manifest with the real model, and the
/// daemon's start-up, config, lifecycle and lexical discovery.
/// Skipped: `socket_activation_serves_on_the_inherited_socket` (the guest
/// has no systemd-socket-activate), `nonzero_exit_reports_stderr` (it
/// expects GNU ls's exit status 2; busybox's ls exits 1).
const GUEST_ARGS: &[(&str, &[&str])] = &[
    ("oap-exec/it", &["--skip", "nonzero_exit_reports_stderr"]),
    (
        "oap-embed-candle/it",
        &[
            "--skip",
            "background_embedding_matches_and_runs_in_the_idle_class",
            "--skip",
            "batch_equals_single_and_keeps_input_order",
            "--skip",
            "batch_size_does_not_change_results",
            "--skip",
            "long_input_is_truncated_not_rejected",
            // A padded pass of 19 texts at 256 tokens: about four minutes
            // under TCG. The packed pass it checks is what the reference
            // scores' batch runs here too.
            "--skip",
            "a_packed_batch_of_uneven_texts_equals_each_text_alone_bit_for_bit",
            // multilingual-e5-small (470 MB, twelve layers) is not copied
            // into the guest; its tests run in `cargo xtask test`.
            "--skip",
            "e5::",
        ],
    ),
    (
        "oap-discovery/it",
        &["engine::discovers_the_fitting_tool_and_says_when_none_fits"],
    ),
    (
        "oapd/it",
        &[
            "config::",
            "lifecycle::",
            "daemon::without_the_model_the_daemon_serves_lexical_results_and_says_so",
            "--skip",
            "socket_activation_serves_on_the_inherited_socket",
        ],
    ),
];

/// The whole guest run may take this long (TCG is slow; a hung test must
/// still fail the task).
const GUEST_DEADLINE: Duration = Duration::from_secs(20 * 60);

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
    let mut only: Vec<String> = Vec::new();
    let mut test_args: Option<Vec<String>> = None;
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--" => {
                test_args = Some(args.by_ref().cloned().collect());
            }
            "--test" => test = true,
            "--jetpack5" => jetpack5 = true,
            "--suite" => only.push(
                args.next()
                    .context("--suite needs a suite name such as oapd/it")?
                    .clone(),
            ),
            other => bail!(
                "unknown argument {other:?}; usage: cross [--test [--suite NAME]... [-- TEST ARGS]] [--jetpack5]"
            ),
        }
    }
    ensure!(
        (only.is_empty() && test_args.is_none()) || test,
        "--suite and test arguments are for --test; add --test"
    );
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
        test_in_guest(&only, test_args.as_deref())?;
    }
    Ok(())
}

/// Builds every test binary of [`GUEST_PACKAGES`] in one cargo run and
/// runs them in the arm64 guest (crate::guest); `only`, when not empty,
/// names the suites to run, and `test_args` replace their arguments.
fn test_in_guest(only: &[String], test_args: Option<&[String]>) -> Result<()> {
    need("qemu-system-aarch64", "qemu-system-arm")?;
    need("gpgv", "gpgv")?;
    need("aarch64-linux-gnu-strip", "binutils-aarch64-linux-gnu")?;
    let started = Instant::now();
    // With --suite, only those suites' packages are built.
    let packages: Vec<&str> = GUEST_PACKAGES
        .iter()
        .copied()
        .filter(|package| {
            only.is_empty()
                || only
                    .iter()
                    .any(|suite| suite.split('/').next() == Some(*package))
        })
        .collect();
    ensure!(
        !packages.is_empty(),
        "no guest package has the suites {only:?}; the packages are {GUEST_PACKAGES:?}"
    );
    let mut command = cargo();
    command
        .args(["test", "--no-run", "--release", "--target", TARGET])
        .args(packages.iter().flat_map(|p| ["-p", p]))
        .args(["--message-format", "json-render-diagnostics"])
        .current_dir(repo_root())
        .stdout(Stdio::piped());
    println!("$ {command:?}");
    let output = command.spawn()?.wait_with_output()?;
    ensure!(
        output.status.success(),
        "building the aarch64 test binaries failed: {}",
        output.status
    );
    let mut suites = suites_from_messages(&String::from_utf8_lossy(&output.stdout))?;
    if !only.is_empty() {
        for name in only {
            ensure!(
                suites.iter().any(|s| &s.name == name),
                "no suite {name}; the suites are: {}",
                suites
                    .iter()
                    .map(|s| s.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
        suites.retain(|s| only.contains(&s.name));
    }
    if let Some(test_args) = test_args {
        for suite in &mut suites {
            suite.args = test_args.to_vec();
        }
    }
    println!(
        "cross --test: {} aarch64 test binaries built in {:.0} s",
        suites.len(),
        started.elapsed().as_secs_f64()
    );
    let release = repo_root().join(format!("target/{TARGET}/release"));
    let also = [release.join("oapd"), release.join("fake-ollama")];
    let started = Instant::now();
    let outcomes = crate::guest::run(&suites, &also, GUEST_DEADLINE)?;
    println!("cross --test: suites in the arm64 guest (qemu-system-aarch64, TCG):");
    for outcome in &outcomes {
        println!(
            "  {:<28} {:>6.1} s  {}",
            outcome.name,
            outcome.took.as_secs_f64(),
            outcome.summary
        );
    }
    println!(
        "cross --test: all passed; guest run {:.0} s",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// The test executables in cargo's JSON messages, as guest suites.
fn suites_from_messages(messages: &str) -> Result<Vec<Suite>> {
    let mut suites = Vec::new();
    for line in messages.lines() {
        let Ok(message) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        if message["reason"] != "compiler-artifact" || message["profile"]["test"] != true {
            continue;
        }
        let Some(exe) = message["executable"].as_str() else {
            continue;
        };
        let package = message["manifest_path"]
            .as_str()
            .map(Path::new)
            .and_then(Path::parent)
            .context("an artifact without manifest_path")?;
        let crate_name = package
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let target = message["target"]["name"].as_str().unwrap_or_default();
        let kind = message["target"]["kind"][0].as_str().unwrap_or_default();
        let name = match kind {
            "lib" => format!("{crate_name}/lib"),
            "test" => format!("{crate_name}/{target}"),
            other => format!("{crate_name}/{other}-{target}"),
        };
        let args = GUEST_ARGS
            .iter()
            .find(|(suite, _)| *suite == name)
            .map(|(_, args)| args.iter().map(|a| (*a).to_owned()).collect())
            .unwrap_or_default();
        suites.push(Suite {
            name,
            exe: PathBuf::from(exe),
            cwd: package.to_path_buf(),
            args,
        });
    }
    ensure!(!suites.is_empty(), "cargo reported no test executables");
    suites.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(suites)
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

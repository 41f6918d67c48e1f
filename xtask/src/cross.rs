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
//! there). The bridge, sandbox, MCP and crawler suites run whole, and
//! discovery's but for its multilingual module: Landlock's network rules on
//! trixie's kernel, the MCP SDK's Python servers and the npm one on Node,
//! and discovery's index building with document vectors recorded on the
//! host first ([`record_document_vectors`]; the guest embeds the queries).
//! What the guest cannot run (the multilingual model, GNU `ls`'s exit
//! status, `systemd-socket-activate`) or what takes minutes under TCG is
//! skipped by name in one list, [`GUEST_SKIPS`], each with its reason,
//! printed in the guest's console.
//! A failing suite, or one still running at the deadline, fails the task
//! by name; each suite's time is printed. `--suite NAME` (e.g.
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
/// shared crates compile once). The bridge, sandbox, MCP and crawler suites
/// run whole here; discovery's but for its multilingual module
/// ([`GUEST_SKIPS`]).
const GUEST_PACKAGES: &[&str] = &[
    "oap-manifest",
    "oap-wire",
    "oap-index",
    "oap-exec",
    "oap-sandbox",
    "fake-ollama",
    "oap-embed-candle",
    "oap-discovery",
    "oap-mcp",
    "oap-crawl",
    "oap-bridge",
    "oapd",
];

/// A test the arm64 guest leaves out, and why: printed in the guest's
/// console before its suite runs, so a skipped test is never silent.
#[derive(Debug)]
pub(crate) struct GuestSkip {
    /// `package/target`, e.g. `oap-mcp/it`.
    pub(crate) suite: &'static str,
    /// The test's path in its binary (a libtest filter: every test whose
    /// name contains it is skipped, so module paths like `e5::` skip a
    /// whole module).
    pub(crate) test: &'static str,
    pub(crate) reason: &'static str,
}

const fn skip(suite: &'static str, test: &'static str, reason: &'static str) -> GuestSkip {
    GuestSkip {
        suite,
        test,
        reason,
    }
}

/// Why a test with the multilingual model cannot run in the guest.
const NO_E5: &str = "multilingual-e5-small (470 MB, twelve layers) is not copied into the guest";

/// Every test the arm64 guest skips, with the reason; everything else of
/// the guest's suites runs. The guest sets `OAPD_REQUIRE_MCP_SERVERS=1`,
/// so a test needing an MCP server the guest lacks fails there instead of
/// skipping itself quietly: it must be listed here.
pub(crate) const GUEST_SKIPS: &[GuestSkip] = &[
    skip(
        "oap-exec/it",
        "nonzero_exit_reports_stderr",
        "expects GNU ls's exit status 2; the guest's busybox ls exits 1",
    ),
    skip(
        "oap-embed-candle/it",
        "background_embedding_matches_and_runs_in_the_idle_class",
        "embeds long texts: minutes under TCG",
    ),
    skip(
        "oap-embed-candle/it",
        "batch_equals_single_and_keeps_input_order",
        "embeds many texts: minutes under TCG",
    ),
    skip(
        "oap-embed-candle/it",
        "batch_size_does_not_change_results",
        "embeds many texts: minutes under TCG",
    ),
    skip(
        "oap-embed-candle/it",
        "long_input_is_truncated_not_rejected",
        "embeds a text of the full 256 tokens: minutes under TCG",
    ),
    skip(
        "oap-embed-candle/it",
        "a_packed_batch_of_uneven_texts_equals_each_text_alone_bit_for_bit",
        "a padded pass of 19 texts at 256 tokens, about four minutes under TCG; \
         the packed pass it checks is what the reference scores' batch runs here too",
    ),
    skip("oap-embed-candle/it", "e5::", NO_E5),
    skip("oap-discovery/it", "multilingual::", NO_E5),
    skip(
        "oapd/it",
        "socket_activation_serves_on_the_inherited_socket",
        "the guest has no systemd-socket-activate",
    ),
];

/// Suites that run only the named tests in the guest. Under TCG one
/// real-model index of the bundled manifests takes minutes, so of oapd's
/// suite (whose daemon tests each start a daemon and index) the guest runs
/// config and lifecycle and the daemon tests that start without the model
/// (lexical discovery, the HTTP and MCP error paths, the host guard,
/// request generation, crawling and the directory watch); the rest is left
/// to `cargo xtask test`.
const GUEST_ONLY: &[(&str, &[&str])] = &[(
    "oapd/it",
    &[
        "config::",
        "lifecycle::",
        "daemon::without_the_model_the_daemon_serves_lexical_results_and_says_so",
        "http_errors::",
        "mcp_bodies::",
        "host_guard::a_missing_or_repeated_host_is_a_bad_request",
        "host_guard::the_bearer_scheme_is_case_insensitive",
        "request_generation::hostile_answers_are_refused_or_capped_and_a_failed_tool_is_retried",
        "request_generation::ollama_down_leaves_the_daemon_ready_and_serving",
        "request_generation::readiness_does_not_wait_for_a_model_that_never_answers",
        "request_generation::with_generation_off_the_model_is_never_asked",
        "crawl::registration_is_refused_without_an_operator_token",
        "crawl::the_directory_watch_picks_up_added_changed_and_removed_manifests",
        "crawl::kill_9_during_a_crawl_loses_nothing_already_indexed",
        "watch::a_new_manifest_is_discoverable_before_the_poll_interval",
        "watch::touching_one_bad_file_among_many_logs_that_file_only",
    ],
)];

/// The test binary's arguments for `suite` in the guest: its filters of
/// [`GUEST_ONLY`], then a `--skip` for each of its [`GUEST_SKIPS`].
fn guest_args(suite: &str) -> Vec<String> {
    let mut args: Vec<String> = GUEST_ONLY
        .iter()
        .filter(|(name, _)| *name == suite)
        .flat_map(|(_, filters)| filters.iter().map(|f| (*f).to_owned()))
        .collect();
    for skip in GUEST_SKIPS.iter().filter(|s| s.suite == suite) {
        args.push("--skip".to_owned());
        args.push(skip.test.to_owned());
    }
    args
}

/// The skips of `suite` as (test, reason), for the guest's console.
fn guest_skips(suite: &str) -> Vec<(String, String)> {
    GUEST_SKIPS
        .iter()
        .filter(|s| s.suite == suite)
        .map(|s| (s.test.to_owned(), s.reason.to_owned()))
        .collect()
}

/// The whole guest run may take this long (TCG is slow; a hung test must
/// still fail the task).
const GUEST_DEADLINE: Duration = Duration::from_secs(45 * 60);

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
    // With --suite, only those suites' packages are built, and fake-ollama,
    // whose binary every guest gets.
    let packages: Vec<&str> = GUEST_PACKAGES
        .iter()
        .copied()
        .filter(|package| {
            only.is_empty()
                || *package == "fake-ollama"
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
            // The given arguments replace the skips too.
            suite.skips.clear();
        }
    }
    println!(
        "cross --test: {} aarch64 test binaries built in {:.0} s",
        suites.len(),
        started.elapsed().as_secs_f64()
    );
    let mut data = Vec::new();
    if let Some(discovery) = suites.iter_mut().find(|s| s.name == RECORDED_SUITE) {
        let dir = record_document_vectors(&discovery.args)?;
        data.push(dir.join(RECORDING_FILE));
        discovery
            .env
            .push((REPLAY_VAR.to_owned(), dir.display().to_string()));
    }
    let release = repo_root().join(format!("target/{TARGET}/release"));
    let also = [release.join("oapd"), release.join("fake-ollama")];
    let started = Instant::now();
    let outcomes = crate::guest::run(&suites, &also, &data, GUEST_DEADLINE)?;
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

/// The suite whose document vectors are recorded on the host and replayed
/// in the guest (crates/oap-discovery/tests/it/recorded_vectors.rs).
const RECORDED_SUITE: &str = "oap-discovery/it";
/// The test kit's variables and file: the host records into the directory
/// of the first, the guest replays from the directory of the second.
const RECORD_VAR: &str = "OAPD_TEST_RECORD_VECTORS";
const REPLAY_VAR: &str = "OAPD_TEST_REPLAY_VECTORS";
const RECORDING_FILE: &str = "document-vectors.bin";

/// Runs [`RECORDED_SUITE`] on this (x86_64) host with the guest's
/// arguments, recording every document vector its engines embed; returns
/// the recording's directory. The guest then embeds only its queries and
/// any document text the host did not see: under TCG one catalog of the
/// real model takes one to eight minutes, its queries seconds.
fn record_document_vectors(args: &[String]) -> Result<PathBuf> {
    let dir = repo_root().join("target/arm64-guest/document-vectors");
    if dir.exists() {
        std::fs::remove_dir_all(&dir)?;
    }
    std::fs::create_dir_all(&dir)?;
    let started = Instant::now();
    let mut command = cargo();
    command
        .args([
            "test",
            "--release",
            "-p",
            "oap-discovery",
            "--test",
            "it",
            "--",
        ])
        .args(args)
        .env(RECORD_VAR, &dir)
        .env_remove(REPLAY_VAR)
        .current_dir(repo_root());
    run_in_root(&mut command).context("recording the discovery suite's document vectors")?;
    let file = dir.join(RECORDING_FILE);
    ensure!(
        file.is_file(),
        "the discovery suite ran but recorded nothing in {}",
        file.display()
    );
    println!(
        "cross --test: {RECORDED_SUITE} recorded {} KB of document vectors on the host in {:.0} s",
        std::fs::metadata(&file)?.len() >> 10,
        started.elapsed().as_secs_f64()
    );
    Ok(dir)
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
        suites.push(Suite {
            args: guest_args(&name),
            skips: guest_skips(&name),
            env: Vec::new(),
            name,
            exe: PathBuf::from(exe),
            cwd: package.to_path_buf(),
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
    fn every_guest_skip_names_a_guest_suite_and_says_why() {
        for skip in GUEST_SKIPS {
            let package = skip.suite.split('/').next().unwrap_or_default();
            assert!(
                GUEST_PACKAGES.contains(&package),
                "{skip:?}: not a guest package"
            );
            assert!(!skip.test.is_empty() && !skip.reason.is_empty(), "{skip:?}");
        }
    }

    #[test]
    fn a_suites_filters_come_before_its_skips() {
        let args = guest_args("oapd/it");
        assert_eq!(args[0], "config::");
        assert_eq!(
            &args[args.len() - 2..],
            ["--skip", "socket_activation_serves_on_the_inherited_socket"]
        );
        let candle = guest_args("oap-embed-candle/it");
        assert!(
            candle.chunks(2).all(|pair| pair[0] == "--skip"),
            "{candle:?}"
        );
        assert_eq!(
            guest_skips("oap-embed-candle/it").len() * 2,
            candle.len(),
            "one --skip per listed test"
        );
        assert!(guest_args("oap-bridge/it").is_empty());
    }

    #[test]
    fn discovery_and_mcp_run_whole_but_for_what_the_guest_lacks() {
        assert_eq!(
            guest_args(RECORDED_SUITE),
            ["--skip", "multilingual::"],
            "discovery's index-building modules run on recorded document vectors"
        );
        for suite in [
            "oap-mcp/it",
            "oap-bridge/it",
            "oap-sandbox/it",
            "oap-crawl/it",
        ] {
            assert!(
                guest_args(suite).is_empty(),
                "{suite} runs whole: the SDK's servers, Node's and Landlock's network rules too"
            );
        }
    }

    #[test]
    fn newest_glibc_version_wins() {
        let text = "  0x0010:   Name: GLIBC_2.17  Flags: none  Version: 3\n\
                    Name: GLIBC_2.34 Flags\n Name: GLIBC_2.9\n (GLIBC_2.28)\n GLIBC_PRIVATE";
        assert_eq!(max_glibc(text), Some((2, 34)));
        assert_eq!(max_glibc("nothing"), None);
    }
}

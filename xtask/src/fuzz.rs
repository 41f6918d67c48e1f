//! `cargo xtask fuzz TARGET|--all [--seconds N] [--build-only] [-- LIBFUZZER ARGS]`:
//! coverage-guided fuzzing of the parsers of outside input (fuzz/).
//! `--build-only` builds the instrumented targets and runs none (CI builds
//! them in the background while the tests run, then runs the smoke).
//!
//! The engine is libFuzzer (the `libfuzzer-sys` crate compiles it from its
//! bundled source with the system C++ compiler) on the stable toolchain:
//! the coverage instrumentation is LLVM's SanitizerCoverage pass, enabled
//! with the stable codegen flags `-Cpasses=sancov-module` and
//! `-Cllvm-args=-sanitizer-coverage-*`, so neither nightly, cargo-fuzz nor
//! `RUSTC_BOOTSTRAP` is needed. The fuzz package is kept out of the
//! workspace and builds into target/fuzz/ with those flags only.
//!
//! Seeds (committed) are in fuzz/seeds/TARGET/, dictionaries in
//! fuzz/dicts/TARGET.dict; the growing corpus lives in
//! target/fuzz/corpus/TARGET and crashing inputs in
//! target/fuzz/artifacts/TARGET/. A run that finds a crash fails and names
//! the input and the command that replays it.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{bail, Context, Result};

use crate::repo_root;
use crate::tasks::cargo;

/// The targets `--all` runs, in order (fuzz/Cargo.toml's bins).
pub const TARGETS: &[&str] = &[
    "manifest",
    "arguments",
    "ndjson",
    "tool_calls",
    "sse_stream",
    "openai_request",
    "index_reader",
    "envelope",
    "crawl",
    "exec_input",
    "mcp",
    "query",
];

/// Targets that link the whole daemon (fuzz/Cargo.toml's `daemon`
/// feature): the instrumented build of candle, tokenizers and the server
/// takes several times longer than all of [`TARGETS`], so they run only
/// when named, not in `--all` (and so not in CI's smoke run).
pub const DAEMON_TARGETS: &[&str] = &["config", "http_head", "mcp_body"];

/// SanitizerCoverage as libFuzzer wants it: 8-bit edge counters with a PC
/// table, and comparison tracing so the fuzzer learns magic values. All
/// stable `-C` options. Debug assertions and overflow checks are on, so an
/// arithmetic overflow in a parser is a crash.
const RUSTFLAGS: &[&str] = &[
    "--cfg",
    "fuzzing",
    "-Cpasses=sancov-module",
    "-Cllvm-args=-sanitizer-coverage-level=4",
    "-Cllvm-args=-sanitizer-coverage-inline-8bit-counters",
    "-Cllvm-args=-sanitizer-coverage-pc-table",
    "-Cllvm-args=-sanitizer-coverage-trace-compares",
    "-Cdebug-assertions",
    "-Coverflow-checks",
];

struct Options {
    targets: Vec<String>,
    seconds: u64,
    build_only: bool,
    extra: Vec<String>,
}

fn parse(args: &[String]) -> Result<Options> {
    let mut targets = Vec::new();
    let mut seconds = 60;
    let mut extra = Vec::new();
    let mut build_only = false;
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--all" => targets.extend(TARGETS.iter().map(|t| t.to_string())),
            "--build-only" => build_only = true,
            "--seconds" => {
                let value = it.next().context("--seconds needs a number")?;
                seconds = value
                    .parse()
                    .with_context(|| format!("--seconds: `{value}` is not a number"))?;
            }
            "--list" => {
                for t in TARGETS.iter().chain(DAEMON_TARGETS) {
                    println!("{t}");
                }
                return Ok(Options {
                    targets: Vec::new(),
                    seconds,
                    build_only,
                    extra,
                });
            }
            "--" => extra.extend(it.by_ref().cloned()),
            name if TARGETS.contains(&name) || DAEMON_TARGETS.contains(&name) => {
                targets.push(name.to_string())
            }
            other => bail!(
                "unknown fuzz target or option `{other}` (targets: {}, {})",
                TARGETS.join(", "),
                DAEMON_TARGETS.join(", ")
            ),
        }
    }
    if targets.is_empty() && args.iter().all(|a| a != "--list") {
        bail!("name a target or --all (targets: {})", TARGETS.join(", "));
    }
    Ok(Options {
        targets,
        seconds,
        build_only,
        extra,
    })
}

/// The host's target triple: building for it explicitly keeps RUSTFLAGS
/// (the instrumentation) off build scripts and proc macros.
fn host_triple() -> Result<String> {
    let out = Command::new("rustc")
        .arg("-vV")
        .output()
        .context("cannot run rustc -vV")?;
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .find_map(|l| l.strip_prefix("host: "))
        .map(str::to_string)
        .context("rustc -vV printed no host triple")
}

/// Builds the instrumented targets; returns the directory of the binaries.
pub fn build(targets: &[String]) -> Result<PathBuf> {
    let root = repo_root();
    let triple = host_triple()?;
    let target_dir = root.join("target/fuzz");
    let mut command = cargo();
    command
        .args(["build", "--release", "--manifest-path"])
        .arg(root.join("fuzz/Cargo.toml"))
        .args(["--target", &triple])
        .arg("--target-dir")
        .arg(&target_dir)
        .env("RUSTFLAGS", RUSTFLAGS.join(" "))
        .env_remove("CARGO_ENCODED_RUSTFLAGS");
    if targets.iter().any(|t| DAEMON_TARGETS.contains(&t.as_str())) {
        command.args(["--features", "daemon"]);
    }
    for t in targets {
        command.args(["--bin", t]);
    }
    crate::tasks::run_in_root(&mut command)?;
    Ok(target_dir.join(triple).join("release"))
}

/// What one run did, from libFuzzer's final statistics.
#[derive(Default)]
struct Summary {
    execs: u64,
    seconds: u64,
    cov: u64,
    features: u64,
    corpus: u64,
}

impl Summary {
    fn read(log: &str) -> Summary {
        let mut s = Summary::default();
        for line in log.lines() {
            let num = |key: &str| {
                line.strip_prefix(key)
                    .and_then(|v| v.trim().parse::<u64>().ok())
            };
            if let Some(v) = num("stat::number_of_executed_units:") {
                s.execs = v;
            }
            if let Some(v) = line
                .strip_prefix("Done ")
                .and_then(|r| r.split(" in ").nth(1))
                .and_then(|r| r.split_whitespace().next())
                .and_then(|v| v.parse().ok())
            {
                s.seconds = v;
            }
            // Progress lines: "#N  REDUCE cov: C ft: F corp: K/..."
            let mut words = line.split_whitespace();
            while let Some(w) = words.next() {
                match w {
                    "cov:" => s.cov = parse_next(&mut words).unwrap_or(s.cov),
                    "ft:" => s.features = parse_next(&mut words).unwrap_or(s.features),
                    "corp:" => s.corpus = parse_next(&mut words).unwrap_or(s.corpus),
                    _ => {}
                }
            }
        }
        s
    }
}

fn parse_next<'a>(words: &mut impl Iterator<Item = &'a str>) -> Option<u64> {
    words.next()?.split('/').next()?.parse().ok()
}

/// Runs one built target for `seconds`; the log goes to target/fuzz/logs.
fn run_one(bins: &Path, target: &str, seconds: u64, extra: &[String]) -> Result<Summary> {
    let root = repo_root();
    let fuzz_dir = root.join("target/fuzz");
    let corpus = fuzz_dir.join("corpus").join(target);
    let artifacts = fuzz_dir.join("artifacts").join(target);
    let logs = fuzz_dir.join("logs");
    for dir in [&corpus, &artifacts, &logs] {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    }
    let log_path = logs.join(format!("{target}.log"));
    let log = std::fs::File::create(&log_path)
        .with_context(|| format!("cannot create {}", log_path.display()))?;
    let mut command = Command::new(bins.join(target));
    command
        .arg(&corpus)
        .arg(format!("-max_total_time={seconds}"))
        .arg(format!("-artifact_prefix={}/", artifacts.display()))
        .arg("-print_final_stats=1")
        .arg("-timeout=10")
        .arg("-rss_limit_mb=2048")
        .arg("-max_len=65536");
    let dict = root.join("fuzz/dicts").join(format!("{target}.dict"));
    if dict.is_file() {
        command.arg(format!("-dict={}", dict.display()));
    }
    command.args(extra);
    let seeds = root.join("fuzz/seeds").join(target);
    if seeds.is_dir() {
        command.arg(&seeds);
    }
    println!("$ {command:?}");
    let status = command
        .current_dir(&root)
        .stdout(log.try_clone()?)
        .stderr(log)
        .stdin(Stdio::null())
        .status()
        .with_context(|| format!("cannot start the {target} fuzz target"))?;
    let text = std::fs::read_to_string(&log_path).unwrap_or_default();
    if !status.success() {
        let tail: Vec<&str> = text.lines().rev().take(40).collect();
        for line in tail.iter().rev() {
            eprintln!("  {line}");
        }
        bail!(
            "fuzz target {target} failed ({status}); crashing input in {} \
             (replay: {} FILE), log {}",
            artifacts.display(),
            bins.join(target).display(),
            log_path.display()
        );
    }
    Ok(Summary::read(&text))
}

/// `cargo xtask fuzz TARGET... | --all [--seconds N] [--build-only] [-- LIBFUZZER ARGS]`.
pub fn run(args: &[String]) -> Result<()> {
    let options = parse(args)?;
    if options.targets.is_empty() {
        return Ok(());
    }
    let bins = build(&options.targets)?;
    if options.build_only {
        println!(
            "built {} fuzz targets in {}",
            options.targets.len(),
            bins.display()
        );
        return Ok(());
    }
    let mut failed = Vec::new();
    let mut rows = Vec::new();
    for target in &options.targets {
        match run_one(&bins, target, options.seconds, &options.extra) {
            Ok(s) => rows.push((target.clone(), s)),
            Err(e) => {
                eprintln!("xtask fuzz: {e:#}");
                failed.push(target.clone());
            }
        }
    }
    println!(
        "{:<16} {:>8} {:>12} {:>10} {:>8} {:>8} {:>7}",
        "target", "seconds", "execs", "execs/s", "cov", "ft", "corpus"
    );
    for (t, s) in &rows {
        println!(
            "{:<16} {:>8} {:>12} {:>10} {:>8} {:>8} {:>7}",
            t,
            s.seconds,
            s.execs,
            s.execs / s.seconds.max(1),
            s.cov,
            s.features,
            s.corpus
        );
    }
    if !failed.is_empty() {
        bail!("crashes in: {}", failed.join(", "));
    }
    println!("{} passed, 0 failed (fuzz targets)", rows.len());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::parse;

    fn args(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn build_only_builds_every_target_and_runs_none() {
        let options = parse(&args(&["--all", "--build-only"])).unwrap();
        assert!(options.build_only);
        assert_eq!(options.targets.len(), super::TARGETS.len());
        assert!(!parse(&args(&["--all"])).unwrap().build_only);
    }

    #[test]
    fn a_bad_option_or_number_is_refused_by_name() {
        let unknown = parse(&args(&["--all", "--buildonly"])).err().unwrap();
        assert!(unknown.to_string().contains("--buildonly"), "{unknown}");
        let number = parse(&args(&["--all", "--seconds", "six"])).err().unwrap();
        assert!(format!("{number:#}").contains("six"), "{number:#}");
        let nothing = parse(&args(&["--build-only"])).err().unwrap();
        assert!(nothing.to_string().contains("name a target"), "{nothing}");
    }
}

//! `cargo xtask bench-memory`: what a burst of large chat bodies costs
//! oapd in resident memory, and whether it gives it back.
//!
//! The runner: builds `oap-bench`, the fake Ollama and (unless `--oapd
//! PATH` names another build) oapd; per daemon build starts the fake and
//! `oapd serve` in front of it with the built-in defaults (bundled
//! manifests, the real embedding model) and runs `oap-bench memory-burst`
//! against them, which measures (its module doc says what; its options
//! `--clients`, `--mb`, `--delay-ms` and `--settle` are passed on as
//! given). `--against PATH` measures a second build (the figures before a
//! change) in the same run, first, with the same warm-up and burst; the
//! table has a column per build and the verdicts of the last.
//!
//! Every process is killed when this task ends, also on error.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use oap_bench::report::MemoryBurstReport;

use oap_bench::machine::{loadavg, machine_description, now_utc};

use crate::bench_procs::{fake_script, start_fake_with, start_oapd_with};
use crate::bench_run::{self, build_fake_ollama, TempDir};
use crate::repo_root;
use crate::tasks::{cargo, run_in_root};

const TARGET_PEAK_MB: f64 = 400.0;
/// RSS after settling may be at most this much above idle.
const TARGET_SETTLED_RATIO: f64 = 1.2;

/// The runner's own options, the daemon builds to measure; every other
/// argument is `oap-bench memory-burst`'s.
struct Builds {
    oapd: Option<PathBuf>,
    against: Option<PathBuf>,
    burst: Vec<String>,
}

fn builds(args: &[String]) -> Result<Builds> {
    let mut builds = Builds {
        oapd: None,
        against: None,
        burst: Vec::new(),
    };
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        let slot = match arg.as_str() {
            "--oapd" => &mut builds.oapd,
            "--against" => &mut builds.against,
            _ => {
                builds.burst.push(arg.clone());
                continue;
            }
        };
        let path = it.next().with_context(|| format!("{arg} needs a path"))?;
        *slot = Some(PathBuf::from(path));
    }
    Ok(builds)
}

pub fn run(args: &[String]) -> Result<()> {
    if bench_run::wants_help(args) {
        println!(
            "cargo xtask bench-memory [--oapd PATH] [--against PATH] [memory-burst options]\n  \
             --oapd PATH     the daemon binary to measure (default: target/release/oapd, built)\n  \
             --against PATH  another daemon binary (say, main's) measured first in the same run\n"
        );
        return bench_run::show_help("memory-burst");
    }
    let builds = builds(args)?;
    println!("machine: {}", machine_description());
    println!("date: {}", now_utc());
    println!("load average at start (1/5/15 min): {}", loadavg());
    // Each package built alone, as before the measuring moved into
    // `oap-bench`, so that each build is the one earlier runs cached.
    if builds.oapd.is_none() {
        run_in_root(cargo().args(["build", "--release", "-p", "oapd", "--bin", "oapd"]))?;
    }
    build_fake_ollama()?;
    let bench = bench_run::build(&[])?;
    let oapd_bin = builds
        .oapd
        .clone()
        .unwrap_or_else(|| repo_root().join("target/release/oapd"));
    let model_dir = bench_run::model_dir()?;
    let mut columns = Vec::new();
    if let Some(against) = &builds.against {
        if !against.is_file() {
            bail!("--against {}: no such file", against.display());
        }
        columns.push((
            against.clone(),
            measure(&bench, &builds, against, &model_dir)?,
        ));
    }
    columns.push((
        oapd_bin.clone(),
        measure(&bench, &builds, &oapd_bin, &model_dir)?,
    ));
    report(&columns);
    println!("\nload average at end: {}", loadavg());
    Ok(())
}

/// Starts the fake Ollama and `oapd_bin` in front of it and runs
/// `oap-bench memory-burst` against them; both processes end with it.
fn measure(
    bench: &Path,
    builds: &Builds,
    oapd_bin: &Path,
    model_dir: &Path,
) -> Result<MemoryBurstReport> {
    let tmp = TempDir::new("memory")?;
    let fake = start_fake_with(
        &repo_root().join("target/release/fake-ollama"),
        &tmp.0,
        &fake_script(),
    )?;
    let oapd = start_oapd_with(oapd_bin, fake.addr, model_dir, "")?;
    let pid = oapd.child.id();
    println!("oapd {} on {} (pid {pid})", oapd_bin.display(), oapd.addr);
    let mut command = bench_run::command(bench, "memory-burst");
    command
        .arg("--addr")
        .arg(oapd.addr.to_string())
        .args(["--pid", &pid.to_string()])
        .arg("--fake")
        .arg(fake.addr.to_string())
        .args(&builds.burst);
    let figures: MemoryBurstReport = bench_run::report(&mut command)?;
    for outcome in &figures.unexpected {
        println!("unexpected answer: {outcome}");
    }
    Ok(figures)
}

/// One table, a column per daemon build, the verdicts of the last (this
/// tree's) column.
fn report(columns: &[(PathBuf, MemoryBurstReport)]) {
    let verdict = |ok: bool| if ok { "met" } else { "MISSED" };
    let row =
        |name: &str, cell: &dyn Fn(&MemoryBurstReport) -> String, target: &str, verdict: &str| {
            let cells: Vec<String> = columns.iter().map(|(_, f)| cell(f)).collect();
            println!("| {name} | {} | {target} | {verdict} |", cells.join(" | "));
        };
    let Some((_, last)) = columns.last() else {
        return;
    };
    println!("\n== figures (MB = 10^6 bytes, VmRSS of oapd)");
    let names: Vec<String> = columns
        .iter()
        .map(|(bin, _)| format!("`{}`", bin.display()))
        .collect();
    println!("| figure | {} | target | verdict |", names.join(" | "));
    println!("|---|{}---|---|", "---|".repeat(columns.len()));
    row(
        "idle (after one small chat)",
        &|f| format!("{:.1} MB", f.idle_mb),
        "-",
        "-",
    );
    row(
        "peak during the burst (sampled every 10 ms; VmHWM)",
        &|f| format!("{:.1} MB ({:.1})", f.peak_mb, f.hwm_mb),
        &format!("≤ {TARGET_PEAK_MB} MB"),
        verdict(last.peak_mb <= TARGET_PEAK_MB),
    );
    row(
        "right after the last answer",
        &|f| format!("{:.1} MB", f.after_burst_mb),
        "-",
        "-",
    );
    row(
        &format!("{} s later", last.settle_s),
        &|f| {
            format!(
                "{:.1} MB ({:+.0} % of idle)",
                f.settled_mb,
                (f.settled_mb / f.idle_mb - 1.0) * 100.0
            )
        },
        "≤ idle + 20 %",
        verdict(last.settled_mb <= last.idle_mb * TARGET_SETTLED_RATIO),
    );
    row(
        "answers: 200 / 503 with Retry-After / other / broken connections",
        &|f| format!("{} / {} / {} / {}", f.ok, f.busy, f.other, f.broken),
        "no other, none broken",
        verdict(last.other == 0 && last.broken == 0),
    );
    row(
        "burst wall time",
        &|f| format!("{:.1} s", f.burst_s),
        "-",
        "-",
    );
    row(
        "daemon alive afterwards",
        &|f| f.alive.to_string(),
        "yes",
        verdict(last.alive),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn the_builds_are_the_runners_and_the_rest_goes_to_the_burst() {
        let builds = builds(&args(&[
            "--clients",
            "4",
            "--against",
            "/tmp/old",
            "--mb",
            "5",
            "--oapd",
            "/tmp/new",
        ]))
        .expect("parsed");
        assert_eq!(builds.against, Some(PathBuf::from("/tmp/old")));
        assert_eq!(builds.oapd, Some(PathBuf::from("/tmp/new")));
        assert_eq!(builds.burst, args(&["--clients", "4", "--mb", "5"]));
    }

    #[test]
    fn a_build_option_without_its_path_is_refused_by_name() {
        let err = builds(&args(&["--against"])).err().expect("refused");
        assert!(err.to_string().contains("--against needs a path"), "{err}");
    }
}

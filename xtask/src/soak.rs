//! `cargo xtask soak [--bin-dir DIR] [--no-plot] [soak options]`
//! (`--replot DIR` draws a finished run's plot again): the whole appliance
//! under LAN load with faults. The runner builds `oapd`, `fake-ollama` and
//! `oap-bench` (or takes them from `--bin-dir`, so a long run is not
//! disturbed by rebuilds), runs `oap-bench soak` with every other option as
//! given (`--minutes`, `--catalog`, `--crawl`, `--out`, ...: see its help;
//! it generates its corpus, runs the load and the faults, records, and
//! judges the pass criteria: see its module doc), writes its summary beside
//! its records as `summary.json` and has `oap-bench soak-plot` draw them
//! into `soak.png`. Fails naming every criterion missed.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use oap_bench::report::SoakReport;

use crate::bench_run::{self, build_fake_ollama, RunnerArgs};
use crate::repo_root;

pub fn run(args: &[String]) -> Result<()> {
    if bench_run::wants_help(args) {
        println!(
            "cargo xtask soak [--bin-dir DIR] [--no-plot] [--replot DIR] [soak options]\n  \
             --bin-dir DIR  oapd, fake-ollama and oap-bench already built (nothing is built)\n  \
             --no-plot      no soak.png\n  \
             --replot DIR   draw a finished run's plot again, and nothing else\n"
        );
        return bench_run::show_help("soak");
    }
    let runner = RunnerArgs::split(args, &["--bin-dir", "--replot"], &["--no-plot"])?;
    if let Some(dir) = runner.value("--replot") {
        let bench = bench_run::build(&[])?;
        return plot(&bench, &Path::new(dir).join("soak.jsonl"));
    }
    let bin = match runner.value("--bin-dir") {
        Some(dir) => PathBuf::from(dir),
        None => {
            build_fake_ollama()?;
            bench_run::build(&[("oapd", "oapd")])?;
            repo_root().join("target/release")
        }
    };
    let (report, ok): (SoakReport, bool) = bench_run::report_and_status(
        bench_run::command(&bin.join("oap-bench"), "soak")
            .arg("--oapd")
            .arg(bin.join("oapd"))
            .arg("--fake-ollama")
            .arg(bin.join("fake-ollama"))
            .args(&runner.rest),
        || {},
    )?;
    // The records' directory is the run's (`--out`, by default target/soak).
    let jsonl = repo_root().join(&report.jsonl);
    let out = jsonl
        .parent()
        .with_context(|| format!("{}: no directory", jsonl.display()))?;
    let summary = out.join("summary.json");
    std::fs::write(&summary, serde_json::to_string_pretty(&report)? + "\n")
        .with_context(|| format!("cannot write {}", summary.display()))?;
    println!("\n{}", render(&report));
    println!(
        "summary: {}\nper minute: {}",
        summary.display(),
        report.jsonl
    );
    if !runner.flag("--no-plot") {
        plot(&bin.join("oap-bench"), &jsonl)?;
    }
    if !ok || !report.passed {
        bail!(
            "the soak failed:\n  {}",
            if report.failures.is_empty() {
                "oap-bench soak exited with an error".to_string()
            } else {
                report.failures.join("\n  ")
            }
        );
    }
    Ok(())
}

/// `oap-bench soak-plot`: the records at `jsonl` drawn into `soak.png`
/// beside them.
fn plot(bench: &Path, jsonl: &Path) -> Result<()> {
    let png = jsonl.with_file_name("soak.png");
    crate::tasks::run_in_root(
        bench_run::command(bench, "soak-plot")
            .arg("--jsonl")
            .arg(jsonl)
            .arg("--png")
            .arg(&png),
    )?;
    println!("plot: {}", png.display());
    Ok(())
}

/// The summary as people read it.
fn render(r: &SoakReport) -> String {
    let mut s = format!(
        "soak: {:.1} min of load after {:.0} s of setup ({} manifests indexed): {}\n\n\
         | route | requests | ok | answered error | during our restarts | not answered | p50 ms | p99 ms |\n\
         |---|---|---|---|---|---|---|---|\n",
        r.ran_s / 60.0,
        r.setup_s,
        r.manifests_at_start,
        if r.passed { "PASSED" } else { "FAILED" }
    );
    for (route, t) in &r.routes {
        s.push_str(&format!(
            "| {route} | {} | {} | {} | {} | {} | {:.1} | {:.1} |\n",
            t.requests, t.ok, t.answered_error, t.during_restart, t.failed, t.p50_ms, t.p99_ms
        ));
    }
    s.push_str("\nfaults: ");
    s.push_str(
        &r.faults
            .iter()
            .map(|(k, n)| format!("{k} ×{n}"))
            .collect::<Vec<_>>()
            .join(", "),
    );
    s.push_str("\nrestarts (manifests before → after, ready s, all back s, hybrid again s):");
    for x in &r.restarts {
        s.push_str(&format!(
            "\n  {} at {:.0} s: {} → {}, {:.1}, {:.1}, {:.1}",
            x.kind, x.at_s, x.before, x.after, x.ready_s, x.recovered_s, x.hybrid_s
        ));
    }
    s.push_str(&format!(
        "\nleaks ({}):\n  pid: born → warmed up → end s | RSS MB, open files, threads, tool processes, data files, index MB (the minute after warming up → the last minute)\n",
        r.drift.basis
    ));
    for p in &r.drift.processes {
        let (a, b) = (&p.warm, &p.last);
        s.push_str(&format!(
            "  {}: {:.0} → {:.0} → {:.0}{} | {:.1} → {:.1}, {} → {}, {} → {}, {} → {}, {} → {}, {:.3} → {:.3}\n",
            p.pid,
            p.born_s,
            p.warm_s,
            p.end_s,
            if p.judged_self { "" } else { " (too short to judge itself)" },
            a.rss_mb,
            b.rss_mb,
            a.fds,
            b.fds,
            a.threads,
            b.threads,
            a.children,
            b.children,
            a.data_files,
            b.data_files,
            a.index_mb,
            b.index_mb
        ));
    }
    s.push_str(&format!(
        "crashes {}, tool processes past their deadline {}\n",
        r.crashes, r.lingering_children
    ));
    for note in &r.notes {
        s.push_str(&format!("note: {note}\n"));
    }
    for f in &r.failures {
        s.push_str(&format!("FAILED: {f}\n"));
    }
    for e in &r.failure_samples {
        s.push_str(&format!("  e.g. {e}\n"));
    }
    s
}

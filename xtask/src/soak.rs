//! `cargo xtask soak [--minutes N] [--out DIR] [--no-plot] [--bin-dir DIR]`
//! (`--replot DIR` draws a finished run's plot again):
//! the whole appliance under LAN load with faults. Builds `oapd`,
//! `fake-ollama` and `oap-bench` (or takes them from `--bin-dir`, so a long
//! run is not disturbed by rebuilds), generates the corpus (`oap-bench
//! make-corpus`), runs `oap-bench soak` (the load, the faults, the
//! recording and the pass criteria: see its module doc), writes its
//! summary to `OUT/summary.json` and plots `OUT/soak.jsonl` into
//! `OUT/soak.png`. Fails naming every criterion missed.

use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use oap_bench::report::SoakReport;

use crate::bench_proxy::build_fake_ollama;
use crate::bench_run;
use crate::repo_root;
use crate::tasks::run_in_root;

pub fn run(args: &[String]) -> Result<()> {
    let mut minutes = String::from("3");
    let mut catalog = 2000usize;
    let mut crawl = 200usize;
    let mut plot = true;
    let mut out = None;
    let mut bin_dir = None;
    let mut iter = args.iter();
    while let Some(arg) = iter.next() {
        let mut value = |name: &str| iter.next().with_context(|| format!("{name} needs a value"));
        match arg.as_str() {
            "--minutes" => {
                minutes = value("--minutes")?.clone();
                let parsed: f64 = minutes.parse().context("--minutes")?;
                if !(parsed > 0.0 && parsed.is_finite()) {
                    bail!("--minutes: expected a positive number, got {minutes}");
                }
            }
            "--catalog" => catalog = value("--catalog")?.parse().context("--catalog")?,
            "--crawl" => crawl = value("--crawl")?.parse().context("--crawl")?,
            "--out" => out = Some(PathBuf::from(value("--out")?)),
            "--bin-dir" => bin_dir = Some(PathBuf::from(value("--bin-dir")?)),
            "--no-plot" => plot = false,
            "--replot" => {
                // A finished run's directory: plot its records again.
                let dir = PathBuf::from(value("--replot")?);
                let png = dir.join("soak.png");
                crate::soak_plot::plot(&dir.join("soak.jsonl"), &png)?;
                println!("plot: {}", png.display());
                return Ok(());
            }
            other => bail!("unknown argument {other}"),
        }
    }
    let root = repo_root();
    let out = out.unwrap_or_else(|| root.join("target/soak"));
    let bin = match bin_dir {
        Some(dir) => dir,
        None => {
            build_fake_ollama()?;
            bench_run::build(&[("oapd", "oapd")])?;
            root.join("target/release")
        }
    };
    let bench = bin.join("oap-bench");
    let corpus = root.join("target/soak-corpus");
    // About 40 % of the generated corpus declares stdio, which is not
    // crawlable: three times the crawl past the catalog leaves enough.
    run_in_root(
        bench_run::command(&bench, "make-corpus")
            .arg("--out")
            .arg(&corpus)
            .args(["--count", &(catalog + 3 * crawl).to_string()]),
    )?;
    let (report, ok): (SoakReport, bool) = bench_run::report_and_status(
        bench_run::command(&bench, "soak")
            .arg("--oapd")
            .arg(bin.join("oapd"))
            .arg("--fake-ollama")
            .arg(bin.join("fake-ollama"))
            .arg("--corpus")
            .arg(&corpus)
            .arg("--model")
            .arg(root.join("models/all-MiniLM-L6-v2"))
            .arg("--out")
            .arg(&out)
            .args(["--minutes", &minutes])
            .args(["--catalog", &catalog.to_string()])
            .args(["--crawl", &crawl.to_string()]),
        || {},
    )?;
    let summary = out.join("summary.json");
    std::fs::write(&summary, serde_json::to_string_pretty(&report)? + "\n")
        .with_context(|| format!("cannot write {}", summary.display()))?;
    println!("\n{}", render(&report));
    println!(
        "summary: {}\nper minute: {}",
        summary.display(),
        report.jsonl
    );
    if plot {
        let png = out.join("soak.png");
        crate::soak_plot::plot(&out.join("soak.jsonl"), &png)?;
        println!("plot: {}", png.display());
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

//! `oap-bench proxy`: the latency `oapd` adds in front of Ollama, side by
//! side in one run, and its memory over a long pure-proxy run.
//!
//! Starts the fake Ollama (a `default_turn` of 20 content chunks, no tool
//! calls) on a free loopback port, `oapd serve` in front of it through the
//! kit's `DaemonBuilder` (`RUST_LOG=warn`, bundled manifests, the real
//! embedding model) and, with `--peer`, the Python peer `ollama-mcp-bridge`
//! with an empty MCP config in front of the same fake. Then the
//! `proxy-load` generator sends the same requests to each: `stream:false`
//! (latency, req/s) and `stream:true` (time to the first NDJSON line) at
//! concurrency 1, 16 and 64: directly to the fake, through oapd with
//! `"oap_discover": false` (pure proxy), through oapd with discovery on
//! (the default) and through the peer. Last, oapd's VmRSS/VmHWM before,
//! during (sampled every 50 ms) and after `--leak` pure-proxy requests at
//! concurrency 16, read after the first 10,000 and after all of them.
//!
//! Progress goes to stderr; the JSON is a [`ProxyBenchReport`], whose
//! `render` is the tables `cargo xtask bench-proxy` prints. Every process
//! started here is killed when the run ends, also on error.

mod load;

use std::path::PathBuf;

use oap_bench::machine::loadavg;
use oap_bench::proxy_report::{
    ProxyBenchLine, ProxyBenchMemory, ProxyBenchReport, LEAK_BASELINE_REQUESTS,
};

use crate::procs;
use load::{Load, Target};

/// The model the fake offers and every request asks for.
const MODEL: &str = "bench";
/// The peer's config: no MCP servers, pure proxying.
const EMPTY_SERVERS: &str = "{\"mcpServers\": {}}\n";
/// Clients of the latency runs.
const CONCURRENCY: &[usize] = &[1, 16, 64];

/// oapd (and the peer) in front of a fake Ollama: added latency,
/// first-chunk time, memory.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// `--oapd`, `--fake-ollama`, `--model-dir`.
    #[command(flatten)]
    bins: procs::Binaries,
    /// `ollama-mcp-bridge` to measure too (a missing one is a note, not an
    /// error).
    #[arg(long)]
    peer: Option<PathBuf>,
    /// Fewer requests per run (300 instead of 2000) and a 20k memory run.
    #[arg(long)]
    quick: bool,
    /// Requests in the memory run (default 100000; 20000 with --quick).
    #[arg(long, value_parser = leak_requests)]
    leak: Option<usize>,
}

/// `--leak`: the first 10,000 are the baseline, so at least twice that.
fn leak_requests(value: &str) -> Result<usize, String> {
    let n: usize = value.parse().map_err(|e| format!("{e}"))?;
    if n < 2 * LEAK_BASELINE_REQUESTS {
        return Err("at least 20000 (the first 10000 are the baseline)".into());
    }
    Ok(n)
}

impl Args {
    fn leak(&self) -> usize {
        self.leak
            .unwrap_or(if self.quick { 20_000 } else { 100_000 })
    }

    /// Timed requests and seconds at most per latency run.
    fn per_run(&self) -> (usize, f64) {
        if self.quick {
            (300, 4.0)
        } else {
            (2000, 10.0)
        }
    }
}

/// Starts the processes, runs every latency run, then the memory run.
pub fn run(args: Args) -> anyhow::Result<ProxyBenchReport> {
    let tmp = tempfile::tempdir()?;
    let fake = procs::start_fake(
        &args.bins.fake_ollama,
        tmp.path(),
        &procs::fake_script(MODEL),
    )?;
    eprintln!("fake Ollama on {}", fake.addr);
    let oapd = procs::start_oapd(&args.bins.oapd, fake.addr, &args.bins.model_dir, "")?;
    let oapd_pid = oapd.child.id();
    let rss_start = procs::rss_of(oapd_pid)?;
    eprintln!("oapd on {} (pid {oapd_pid})", oapd.addr);
    let mut notes = Vec::new();
    let peer = match &args.peer {
        Some(bin) => match procs::start_peer(bin, tmp.path(), fake.addr, EMPTY_SERVERS) {
            Ok(peer) => {
                eprintln!("ollama-mcp-bridge on {}", peer.addr);
                Some(peer)
            }
            Err(err) => {
                let note = format!("ollama-mcp-bridge not measured: {err:#}");
                eprintln!("{note}");
                notes.push(note);
                None
            }
        },
        None => None,
    };
    let mut targets = vec![
        Target::new("direct (fake Ollama)", fake.addr, false),
        Target::new("oapd, oap_discover:false", oapd.addr, true),
        Target::new("oapd, discovery on", oapd.addr, false),
    ];
    if let Some(peer) = &peer {
        targets.push(Target::new("ollama-mcp-bridge", peer.addr, false));
    }
    let mut load = Load::new(fake.addr, MODEL);
    let lines = latency_runs(&mut load, &targets, args.per_run())?;
    let mut memory = memory_run(&mut load, &targets[1], oapd_pid, args.leak())?;
    memory.rss_start_mb = rss_start.0;
    Ok(ProxyBenchReport {
        targets: targets.iter().map(|t| t.label.to_string()).collect(),
        lines,
        memory,
        notes,
    })
}

/// Every mode at every concurrency against every target.
fn latency_runs(
    load: &mut Load,
    targets: &[Target],
    (requests, duration): (usize, f64),
) -> anyhow::Result<Vec<ProxyBenchLine>> {
    let mut lines = Vec::new();
    for mode in ["chat", "stream"] {
        for &concurrency in CONCURRENCY {
            eprintln!(
                "\n== {mode}, concurrency {concurrency} (load average {})",
                loadavg()
            );
            let mut runs = Vec::new();
            for target in targets {
                let (row, _) = load.run(target, mode, concurrency, (requests, duration), None)?;
                runs.push(row);
            }
            lines.push(ProxyBenchLine {
                mode: mode.to_string(),
                concurrency,
                runs,
            });
        }
    }
    Ok(lines)
}

/// `leak` pure-proxy requests at concurrency 16: the first 10,000 as the
/// baseline, then the rest, oapd's memory read around both and sampled
/// during them.
fn memory_run(
    load: &mut Load,
    pure: &Target,
    pid: u32,
    leak: usize,
) -> anyhow::Result<ProxyBenchMemory> {
    eprintln!(
        "\n== memory: {leak} pure-proxy requests at concurrency 16 (load average {})",
        loadavg()
    );
    let rss_before = procs::rss_of(pid)?;
    let first = (LEAK_BASELINE_REQUESTS, 300.0);
    let (first_row, peak1) = load.run(pure, "chat", 16, first, Some(pid))?;
    let rss_10k = procs::rss_of(pid)?;
    let rest = (leak - LEAK_BASELINE_REQUESTS, 600.0);
    let (rest_row, peak2) = load.run(pure, "chat", 16, rest, Some(pid))?;
    let rss_end = procs::rss_of(pid)?;
    Ok(ProxyBenchMemory {
        leak,
        rss_start_mb: f64::NAN,
        rss_before_mb: rss_before.0,
        rss_10k_mb: rss_10k.0,
        rss_end_mb: rss_end.0,
        rss_peak_mb: peak1.max(peak2),
        hwm_end_mb: rss_end.1,
        requests: first_row.requests + rest_row.requests,
        errors: first_row.errors + rest_row.errors,
        first_requests_per_s: first_row.requests_per_s,
        rest_requests_per_s: rest_row.requests_per_s,
    })
}

#[cfg(test)]
mod tests {
    use super::leak_requests;

    #[test]
    fn a_memory_run_needs_more_than_its_baseline() {
        assert_eq!(leak_requests("20000"), Ok(20_000));
        let err = leak_requests("19999").expect_err("below the baseline twice");
        assert!(err.contains("at least 20000"), "{err}");
        assert!(leak_requests("many").is_err());
    }
}

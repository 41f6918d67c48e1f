//! The measurements of `oap-bench mcp`, in this process: `proxy-load` and
//! `discover-load` runs with the options their command lines would take,
//! the CPU a run cost each program, the tools a bridge offered
//! (`request-tokens` over the request the fake recorded) and memory.

use std::net::SocketAddr;
use std::path::Path;

use anyhow::{Context, Result};
use oap_bench::mcp_report::{McpBenchReport, McpCpu, McpMemory, McpRun};
use oap_bench::report::{DiscoverLoadReport, ProxyLoadReport, RequestTokensReport};
use serde_json::json;

use super::bridge::{chat_once, chat_requests, forget_requests};
use super::{MODEL, PROMPT};
use crate::{discover_load, procs, proxy_load, request_tokens};

/// Requests each load run sends before it starts timing.
const WARMUP_REQUESTS: usize = 20;

/// A subcommand's options parsed from `argv` as its command line would be,
/// through the same checks.
fn parsed<T: clap::Args + clap::FromArgMatches>(argv: &[String]) -> Result<T> {
    let command = T::augment_args(clap::Command::new("oap-bench").no_binary_name(true));
    let matches = command.try_get_matches_from(argv)?;
    Ok(T::from_arg_matches(&matches)?)
}

fn argv(args: &[&str]) -> Vec<String> {
    args.iter().map(|a| (*a).to_string()).collect()
}

/// The load runs of one benchmark and the report they fill.
pub(super) struct Runner {
    pub(super) fake: SocketAddr,
    pub(super) fake_pid: u32,
    pub(super) requests: usize,
    pub(super) duration: f64,
    pub(super) report: McpBenchReport,
}

impl Runner {
    /// Records oapd's (and the peer's) memory after `configuration`'s runs.
    pub(super) fn record_memory(
        &mut self,
        configuration: &str,
        oapd: u32,
        peer: Option<u32>,
    ) -> Result<()> {
        let used = memory(configuration, oapd, peer)?;
        self.report.memory.push(used);
        Ok(())
    }

    /// A `proxy-load` run on `addr` at `concurrency`, recorded under `key`
    /// (`configuration/target/c`).
    pub(super) fn load(
        &mut self,
        key: &str,
        addr: SocketAddr,
        concurrency: usize,
        no_discover: bool,
    ) -> Result<ProxyLoadReport> {
        // The fake records every request; forget them between runs.
        forget_requests(self.fake)?;
        let (addr, concurrency) = (addr.to_string(), concurrency.to_string());
        let (requests, duration) = (self.requests.to_string(), self.duration.to_string());
        let warmup = WARMUP_REQUESTS.to_string();
        let mut args = argv(&[
            "--addr",
            &addr,
            "--mode",
            "chat",
            "--model",
            MODEL,
            "--prompt",
            PROMPT,
            "--concurrency",
            &concurrency,
            "--requests",
            &requests,
            "--duration",
            &duration,
            "--warmup",
            &warmup,
            "--label",
            key,
        ]);
        if no_discover {
            args.push("--no-discover".into());
        }
        let row = proxy_load::run(parsed(&args)?)?;
        eprintln!("{}", row.table_row());
        if row.errors > 0 {
            eprintln!(
                "(warning: {key}: {} errors: {:?})",
                row.errors, row.error_samples
            );
        }
        self.report.runs.push(McpRun {
            key: key.to_string(),
            load: row.clone(),
        });
        Ok(row)
    }

    /// [`Runner::load`] with the CPU each program spent on it, in ms per
    /// request: the bridge with its MCP server (`bridge_pid` and its
    /// descendants), the fake Ollama, and the whole machine (the rest is
    /// the load generator and whatever else ran). On a machine whose cores
    /// every program shares, requests/s follows the machine's CPU per
    /// request; the bridge's own share says what it would do with the cores
    /// to itself.
    pub(super) fn load_with_cpu(
        &mut self,
        key: &str,
        addr: SocketAddr,
        concurrency: usize,
        bridge_pid: u32,
    ) -> Result<()> {
        use oap_testkit::cpu::{machine_busy_seconds, process_cpu_seconds, tree_cpu_seconds};
        let fake_pid = self.fake_pid;
        let sample = |pid: u32| -> Result<[f64; 4]> {
            Ok([
                tree_cpu_seconds(pid).with_context(|| format!("CPU of process {pid}"))?,
                process_cpu_seconds(pid).with_context(|| format!("CPU of process {pid}"))?,
                tree_cpu_seconds(fake_pid).context("CPU of the fake Ollama")?,
                machine_busy_seconds().context("CPU of the machine")?,
            ])
        };
        let before = sample(bridge_pid)?;
        let row = self.load(key, addr, concurrency, false)?;
        let after = sample(bridge_pid)?;
        // Warm-up requests count: their CPU is inside the interval.
        let answered = (row.requests + WARMUP_REQUESTS)
            .saturating_sub(row.errors)
            .max(1) as f64;
        let per_request = |i: usize| (after[i] - before[i]) * 1000.0 / answered;
        let cpu = McpCpu {
            key: key.to_string(),
            bridge_ms: per_request(0),
            bridge_alone_ms: per_request(1),
            fake_ms: per_request(2),
            machine_ms: per_request(3),
        };
        eprintln!(
            "CPU per request, {key}: bridge and its MCP server {:.2} ms (the bridge alone {:.2} ms), \
             fake Ollama {:.2} ms, whole machine {:.2} ms",
            cpu.bridge_ms, cpu.bridge_alone_ms, cpu.fake_ms, cpu.machine_ms
        );
        self.report.cpu.push(cpu);
        Ok(())
    }

    /// `discover-load` at concurrency 1 with the benchmark's task.
    pub(super) fn discovery_alone(
        &self,
        dir: &Path,
        addr: SocketAddr,
    ) -> Result<DiscoverLoadReport> {
        let tasks = dir.join("prompt-task.jsonl");
        std::fs::write(&tasks, format!("{}\n", json!({"query": PROMPT})))
            .context("writing the task file")?;
        let (addr, tasks) = (addr.to_string(), tasks.display().to_string());
        let (requests, duration) = (self.requests.to_string(), self.duration.to_string());
        let row = discover_load::run(parsed(&argv(&[
            "--addr",
            &addr,
            "--tasks",
            &tasks,
            "--concurrency",
            "1",
            "--requests",
            &requests,
            "--duration",
            &duration,
            "--warmup",
            "20",
            "--label",
            "home/oapd/discover-c1",
        ]))?)?;
        eprintln!("{}", row.table_row());
        if row.errors > 0 {
            eprintln!("(warning: discovery alone: {} errors)", row.errors);
        }
        Ok(row)
    }
}

/// The tools a bridge put into the model request for one fitting chat,
/// counted by `request-tokens` (the text script must be active); the
/// recorded request is kept in `file`.
pub(super) fn injected(
    fake: SocketAddr,
    addr: SocketAddr,
    file: &Path,
) -> Result<RequestTokensReport> {
    forget_requests(fake)?;
    chat_once(addr)?;
    let first = chat_requests(fake)?
        .into_iter()
        .next()
        .context("the fake recorded no chat request")?;
    std::fs::write(file, serde_json::to_vec_pretty(&first)?)?;
    let file = file.display().to_string();
    request_tokens::run(parsed(&argv(&["--request", &file]))?)
}

/// VmRSS and VmHWM (MB) of oapd and of the peer after `configuration`.
fn memory(configuration: &str, oapd: u32, peer: Option<u32>) -> Result<McpMemory> {
    let (rss, hwm) = procs::rss_of(oapd)?;
    eprintln!("after the {configuration} runs: oapd VmRSS {rss:.1} MB, VmHWM {hwm:.1} MB");
    let mut memory = McpMemory {
        configuration: configuration.to_string(),
        oapd_rss_mb: rss,
        oapd_hwm_mb: hwm,
        peer_rss_mb: None,
        peer_hwm_mb: None,
    };
    if let Some(pid) = peer {
        let (rss, hwm) = procs::rss_of(pid)?;
        eprintln!(
            "after the {configuration} runs: ollama-mcp-bridge VmRSS {rss:.1} MB, VmHWM {hwm:.1} MB"
        );
        memory.peer_rss_mb = Some(rss);
        memory.peer_hwm_mb = Some(hwm);
    }
    Ok(memory)
}

//! `oap-bench mcp`'s report ([`McpBenchReport`]) and the tables
//! `cargo xtask bench-mcp` prints from it: every load run side by side
//! with the added latency over its baseline, then the goals against the
//! peer `ollama-mcp-bridge`.

use serde::{Deserialize, Serialize};

use crate::report::{DiscoverLoadReport, ProxyLoadReport, RequestTokensReport};

/// The peer's pinned release: what the runner installs and the benchmark
/// checks it measured.
pub const PEER_VERSION: &str = "0.12.2";

/// oapd's requests/s over the peer's, at concurrency 16.
pub const GOAL_THROUGHPUT_RATIO: f64 = 20.0;
/// oapd's added latency on the tool round as a share of the peer's.
pub const GOAL_LATENCY_SHARE: f64 = 0.2;
/// Tools injected of the fifty.
pub const GOAL_TOOLS: usize = 5;

/// One load run, keyed `configuration/target/cN` (`home/oapd/c16`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct McpRun {
    /// `configuration/target/cN`.
    pub key: String,
    /// Its `proxy-load` report.
    pub load: ProxyLoadReport,
}

/// The CPU a load run cost, in ms per answered request (warm-up included).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct McpCpu {
    /// The run's key.
    pub key: String,
    /// The bridge and its descendants (its MCP server).
    pub bridge_ms: f64,
    /// The bridge's own process.
    pub bridge_alone_ms: f64,
    /// The fake Ollama.
    pub fake_ms: f64,
    /// The whole machine (the load generator and whatever else ran too).
    pub machine_ms: f64,
}

/// The tools a bridge put into the model request for one fitting chat.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct McpOffered {
    /// `configuration/bridge` (`office/peer`).
    pub key: String,
    /// The forecast tool under the name this bridge offered it, when it did.
    pub forecast_tool: Option<String>,
    /// The recorded request's tools, counted by `request-tokens`.
    pub tools: RequestTokensReport,
}

/// VmRSS and VmHWM (MB) of oapd and the peer's Python process (their MCP
/// server children not included) after one configuration's runs.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct McpMemory {
    /// The configuration.
    pub configuration: String,
    /// oapd's VmRSS.
    pub oapd_rss_mb: f64,
    /// oapd's VmHWM.
    pub oapd_hwm_mb: f64,
    /// The peer's VmRSS, when it ran.
    pub peer_rss_mb: Option<f64>,
    /// The peer's VmHWM, when it ran.
    pub peer_hwm_mb: Option<f64>,
}

/// `oap-bench mcp`: oapd and the peer side by side on the same
/// `mcpServers` files in front of the same fake Ollama.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct McpBenchReport {
    /// `lscpu`'s model, cores and memory.
    pub machine: String,
    /// When the run started (UTC).
    pub date: String,
    /// `--quick`.
    pub quick: bool,
    /// Timed requests per load run at most.
    pub requests_per_run: usize,
    /// The user message of every request.
    pub prompt: String,
    /// The peer's version, when it was measured.
    pub peer: Option<String>,
    /// Every load run, in the order run.
    pub runs: Vec<McpRun>,
    /// The CPU of the tool-round runs at concurrency 16.
    pub cpu: Vec<McpCpu>,
    /// Discovery of the task alone on the one-server daemon, concurrency 1.
    pub oapd_discover_c1: Option<DiscoverLoadReport>,
    /// What each bridge offered the model, per configuration.
    pub offered: Vec<McpOffered>,
    /// Memory after each configuration.
    pub memory: Vec<McpMemory>,
    /// What was not measured and why.
    pub notes: Vec<String>,
}

fn ratio(a: f64, b: f64) -> f64 {
    if b > 0.0 {
        a / b
    } else {
        f64::NAN
    }
}

fn verdict(ok: bool) -> &'static str {
    if ok {
        "met"
    } else {
        "MISSED"
    }
}

impl McpBenchReport {
    /// The run recorded under `key`.
    pub fn run(&self, key: &str) -> Option<&ProxyLoadReport> {
        self.runs.iter().find(|r| r.key == key).map(|r| &r.load)
    }

    fn cpu(&self, key: &str) -> Option<&McpCpu> {
        self.cpu.iter().find(|c| c.key == key)
    }

    fn offered(&self, key: &str) -> Option<&RequestTokensReport> {
        self.offered.iter().find(|o| o.key == key).map(|o| &o.tools)
    }

    /// The side-by-side table, the goals and the notes.
    pub fn render(&self) -> String {
        let mut out = self.side_by_side();
        out.push_str(&self.goals());
        for note in &self.notes {
            out.push_str(&format!("\nnote: {note}\n"));
        }
        out
    }

    /// Every run with its added latency: bridge p50 minus the direct p50
    /// of the same concurrency, twice for a tool round (two model turns).
    fn side_by_side(&self) -> String {
        let mut out = String::from("\n== side by side (ms; added = bridge p50 - baseline p50)\n");
        out.push_str("| configuration | concurrency | bridge | p50 | p99 | req/s | added p50 |\n");
        out.push_str("|---|---|---|---|---|---|---|\n");
        for (config, rounds) in [("empty", 1.0), ("home", 2.0), ("office", 2.0)] {
            for c in [1, 16] {
                let Some(direct) = self
                    .run(&format!("{config}/direct/c{c}"))
                    .or_else(|| self.run(&format!("home/direct/c{c}")))
                else {
                    continue;
                };
                let baseline = rounds * direct.p50_ms;
                for target in ["direct", "oapd", "oapd-no-discover", "peer"] {
                    if config == "office" && target == "direct" {
                        continue;
                    }
                    if let Some(r) = self.run(&format!("{config}/{target}/c{c}")) {
                        let added = if target == "direct" {
                            "-".to_string()
                        } else {
                            format!("{:+.3}", r.p50_ms - baseline)
                        };
                        out.push_str(&format!(
                            "| {config} | {c} | {target} | {:.3} | {:.3} | {:.0} | {added} |\n",
                            r.p50_ms, r.p99_ms, r.requests_per_s
                        ));
                    }
                }
            }
        }
        out
    }

    /// The goals against the peer, each with its verdict, and figures
    /// beside them that are not goals.
    fn goals(&self) -> String {
        let mut out = String::from("\n== goals\n");
        out.push_str("| goal | oapd | ollama-mcp-bridge | ratio | verdict |\n");
        out.push_str("|---|---|---|---|---|\n");
        for (what, key) in [
            ("requests/s, tool round, c=16", "home"),
            ("requests/s, pure proxy, c=16", "empty"),
        ] {
            if let (Some(ours), Some(theirs)) = (
                self.run(&format!("{key}/oapd/c16")),
                self.run(&format!("{key}/peer/c16")),
            ) {
                let r = ratio(ours.requests_per_s, theirs.requests_per_s);
                out.push_str(&format!(
                    "| {what} (≥ {GOAL_THROUGHPUT_RATIO}x) | {:.0} | {:.0} | {r:.1}x | {} |\n",
                    ours.requests_per_s,
                    theirs.requests_per_s,
                    verdict(r >= GOAL_THROUGHPUT_RATIO)
                ));
            }
        }
        if let (Some(ours), Some(theirs), Some(direct)) = (
            self.run("home/oapd/c1"),
            self.run("home/peer/c1"),
            self.run("home/direct/c1"),
        ) {
            let baseline = 2.0 * direct.p50_ms;
            let (a, b) = (ours.p50_ms - baseline, theirs.p50_ms - baseline);
            let share = ratio(a, b);
            out.push_str(&format!(
                "| added latency, tool round, c=1, p50 (≤ 1/5 of the peer's) | {a:+.3} ms | {b:+.3} ms | {share:.2} | {} |\n",
                verdict(share <= GOAL_LATENCY_SHARE)
            ));
            let (a99, b99) = (ours.p99_ms - baseline, theirs.p99_ms - baseline);
            out.push_str(&format!(
                "| added latency, tool round, c=1, p99 (not a goal) | {a99:+.3} ms | {b99:+.3} ms | {:.2} | - |\n",
                ratio(a99, b99)
            ));
            if let Some(discover) = &self.oapd_discover_c1 {
                out.push_str(&format!(
                    "| of oapd's added latency: discovery of the task alone (p50, not a goal) | {:.3} ms | - | {:.2} | - |\n",
                    discover.p50_ms,
                    ratio(discover.p50_ms, a)
                ));
            }
        }
        // Work per request of the tool round at c=16, each bridge with its
        // MCP server: what requests/s would follow on cores to itself.
        if let (Some(ours), Some(theirs)) = (self.cpu("home/oapd/c16"), self.cpu("home/peer/c16")) {
            out.push_str(&format!(
                "| CPU per tool round, c=16, bridge + its MCP server (not a goal) | {:.2} ms | {:.2} ms | {:.1}x less | - |\n",
                ours.bridge_ms,
                theirs.bridge_ms,
                ratio(theirs.bridge_ms, ours.bridge_ms)
            ));
            out.push_str(&format!(
                "| CPU per tool round, c=16, whole machine (load generator and fake included) | {:.2} ms | {:.2} ms | {:.1}x less | - |\n",
                ours.machine_ms,
                theirs.machine_ms,
                ratio(theirs.machine_ms, ours.machine_ms)
            ));
        }
        let ours = self.offered("office/oapd");
        let ours_tools = ours.map_or(usize::MAX, |o| o.tools);
        out.push_str(&format!(
            "| tools injected of 50, fitting task (≤ {GOAL_TOOLS}) | {ours_tools} ({} tokens) | {} | - | {} |\n",
            ours.map_or_else(|| "null".to_string(), |o| o.tool_tokens.to_string()),
            self.offered("office/peer")
                .map(|o| format!("{} ({} tokens)", o.tools, o.tool_tokens))
                .unwrap_or_else(|| "-".into()),
            verdict(ours_tools <= GOAL_TOOLS)
        ));
        out
    }
}

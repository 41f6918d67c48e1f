//! `cargo xtask bench-proxy`: the latency `oapd` adds in front of Ollama,
//! side by side in one run.
//!
//! Starts the fake Ollama (`fake-ollama`, a `default_turn` of 20 content
//! chunks, no tool calls) on a free loopback port, `oapd serve` in front of
//! it (temporary config, `RUST_LOG=warn`, bundled manifests, the real
//! embedding model) and, when `target/peer-venv/bin/ollama-mcp-bridge`
//! exists, the Python peer `ollama-mcp-bridge` with an empty MCP config in
//! front of the same fake. Then `oap-bench proxy-load` sends the same requests to
//! each: `stream:false` (latency, req/s) and `stream:true` (time to the
//! first NDJSON line) at concurrency 1, 16 and 64: directly to the fake,
//! through oapd with discovery on (the default), through oapd with
//! `"oap_discover": false` (pure proxy) and through the peer. Last, oapd's
//! VmRSS/VmHWM before, during and after 100,000 pure-proxy requests at
//! concurrency 16 (after 10k and after 100k, to show no leak).
//!
//! Every process is killed when this task ends, also on error.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use crate::net::free_port;
use crate::repo_root;
use oap_bench::report::ProxyLoadReport;
use oap_testkit::{Daemon, DaemonBuilder};

use crate::bench_run::{self, shown, TempDir};
use crate::tasks::{cargo, run_in_root};

const USAGE: &str = "usage: cargo xtask bench-proxy [--quick] [--no-peer] [--leak N]\n  \
    --quick    fewer requests per run (300 instead of 2000) and a 20k leak run\n  \
    --no-peer  skip ollama-mcp-bridge even if target/peer-venv has it\n  \
    --leak N   requests in the memory run (default 100000)";

const TARGET_ADDED_P50_MS: f64 = 1.0;
const TARGET_FIRST_TOKEN_MS: f64 = 2.0;
/// VmRSS growth allowed between 10k and `--leak` requests.
const TARGET_LEAK_MB: f64 = 5.0;

const MODEL: &str = "bench";
const CONCURRENCY: &[usize] = &[1, 16, 64];

struct Options {
    quick: bool,
    peer: bool,
    leak: usize,
}

fn parse(args: &[String]) -> Result<Options> {
    let mut options = Options {
        quick: false,
        peer: true,
        leak: 100_000,
    };
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--quick" => {
                options.quick = true;
                options.leak = 20_000;
            }
            "--no-peer" => options.peer = false,
            "--leak" => {
                let value = it.next().context("--leak needs a value")?;
                options.leak = value.parse().context("--leak")?;
                if options.leak < 20_000 {
                    bail!("--leak: at least 20000 (the first 10000 are the baseline)");
                }
            }
            "-h" | "--help" => {
                println!("{USAGE}");
                std::process::exit(0);
            }
            other => bail!("unknown argument {other}\n{USAGE}"),
        }
    }
    Ok(options)
}

/// A child process, killed (SIGKILL) and reaped on drop.
pub(crate) struct Proc {
    pub(crate) child: Child,
    pub(crate) addr: SocketAddr,
    log: PathBuf,
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Proc {
    fn wait_ready(&mut self, path: &str, limit: Duration) -> Result<()> {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(status) = self.child.try_wait()? {
                bail!(
                    "exited early ({status}):\n{}",
                    std::fs::read_to_string(&self.log).unwrap_or_default()
                );
            }
            if let Ok((200, _)) = http(self.addr, "GET", path) {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!("not ready after {limit:?} (log: {})", self.log.display());
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

fn http(addr: SocketAddr, method: &str, path: &str) -> std::io::Result<(u16, String)> {
    crate::net::http(addr, method, path, Duration::from_secs(30))
}

/// `VmRSS` and `VmHWM` of a process, in MB (10^6 bytes).
pub(crate) fn rss_of(pid: u32) -> Result<(f64, f64)> {
    oap_testkit::rss::rss_hwm_mb(pid).with_context(|| format!("read /proc/{pid}/status"))
}

/// Builds the scripted fake Ollama (release) for the benches and the
/// image boot test; it lands in `target/release/fake-ollama`.
pub(crate) fn build_fake_ollama() -> Result<()> {
    run_in_root(cargo().args([
        "build",
        "--release",
        "-p",
        "fake-ollama",
        "--bin",
        "fake-ollama",
    ]))
}

pub(crate) fn machine_description() -> String {
    let lscpu = Command::new("lscpu")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    let model = lscpu
        .lines()
        .find_map(|l| l.strip_prefix("Model name:"))
        .map(str::trim)
        .unwrap_or("unknown CPU");
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let mem_gb = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines()
                .find_map(|l| l.strip_prefix("MemTotal:"))
                .and_then(|v| v.split_whitespace().next())
                .and_then(|v| v.parse::<f64>().ok())
        })
        .map_or(0.0, |kb| kb / 1024.0 / 1024.0);
    format!("{model}, {cores} cores, {mem_gb:.1} GiB RAM")
}

pub(crate) fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".into())
}

pub(crate) fn now_utc() -> String {
    Command::new("date")
        .args(["-u", "+%Y-%m-%d %H:%M UTC"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default()
}

/// The fake's script: one tools-capable model, every chat answered with 20
/// content chunks and the final chunk, no tool calls.
pub(crate) fn fake_script() -> String {
    let chunks: Vec<String> = (0..20)
        .map(|i| format!("{{\"content\": \"word{i} \"}}"))
        .collect();
    format!(
        "{{\"models\": [{{\"name\": \"{MODEL}\", \"capabilities\": [\"completion\", \"tools\"]}}],\n \
         \"check_host\": false,\n \"default_turn\": {{\"chunks\": [{}]}}}}\n",
        chunks.join(", ")
    )
}

fn start_fake(bin: &Path, tmp: &Path) -> Result<Proc> {
    start_fake_with(bin, tmp, &fake_script())
}

/// The fake Ollama on a free loopback port, driven by `script` (JSON).
pub(crate) fn start_fake_with(bin: &Path, tmp: &Path, script_json: &str) -> Result<Proc> {
    let script = tmp.join("fake-script.json");
    std::fs::write(&script, script_json)?;
    let log = tmp.join("fake.log");
    let mut command = Command::new(bin);
    command
        .arg("--script")
        .arg(&script)
        .args(["--port", "0", "--no-host-check"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&log)?);
    println!("$ {}", shown(&command));
    let mut child = command.spawn().context("cannot start fake-ollama")?;
    let mut line = String::new();
    let read = child
        .stdout
        .take()
        .map(|out| BufReader::new(out).read_line(&mut line));
    let addr = match read {
        Some(Ok(_)) => line.trim().parse::<SocketAddr>().ok(),
        _ => None,
    };
    let Some(addr) = addr else {
        let _ = child.kill();
        let _ = child.wait();
        bail!(
            "fake-ollama printed no address ({line:?}): {}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
    };
    let mut fake = Proc { child, addr, log };
    fake.wait_ready("/api/version", Duration::from_secs(10))?;
    Ok(fake)
}

fn start_oapd(bin: &Path, upstream: SocketAddr, model_dir: &Path) -> Result<Daemon> {
    start_oapd_with(bin, upstream, model_dir, "")
}

/// `oapd serve` in front of `upstream` (the kit's launcher: its config,
/// data and log in a fresh directory), with `extra_yaml` (whole top-level
/// sections) appended to the config. It logs at warn, so it does not
/// report a port: one is picked.
pub(crate) fn start_oapd_with(
    bin: &Path,
    upstream: SocketAddr,
    model_dir: &Path,
    extra_yaml: &str,
) -> Result<Daemon> {
    let port = free_port()?;
    println!(
        "$ RUST_LOG=warn {} --config <state dir>/config.yaml serve (127.0.0.1:{port})",
        bin.display()
    );
    let daemon = DaemonBuilder::new(bin)
        .model_dir(model_dir)
        .listen(&[&format!("127.0.0.1:{port}")])
        .default_header_read_timeout()
        .yaml(&format!(
            "ollama:\n  base_url: \"http://{upstream}\"\nlog:\n  level: warn\n{extra_yaml}"
        ))
        .env_remove("RAYON_NUM_THREADS")
        .env_remove("CANDLE_NUM_THREADS")
        .env("RUST_LOG", "warn")
        // Every chat embeds its task as before the query cache, so the
        // figures stay comparable with earlier runs.
        .env("OAP_DISCOVERY_QUERY_CACHE", "0")
        .ready_within(Duration::from_secs(300))
        .try_start()
        .map_err(|err| anyhow::anyhow!("oapd: {err}"))?;
    println!("oapd log: {}", daemon.log.display());
    Ok(daemon)
}

/// `ollama-mcp-bridge` from `target/peer-venv`, in front of `upstream`,
/// with `{"mcpServers": {}}`.
fn start_peer(tmp: &Path, upstream: SocketAddr) -> Result<Proc> {
    start_peer_with(tmp, upstream, "{\"mcpServers\": {}}\n")
}

/// `ollama-mcp-bridge` from `target/peer-venv`, in front of `upstream`,
/// reading `servers_json` (an `mcpServers` file) as its config; its config
/// and logs go to `tmp`. Ready once `/health` answers (it connects to its
/// MCP servers before it serves).
pub(crate) fn start_peer_with(
    tmp: &Path,
    upstream: SocketAddr,
    servers_json: &str,
) -> Result<Proc> {
    let bin = repo_root().join("target/peer-venv/bin/ollama-mcp-bridge");
    if !bin.exists() {
        bail!(
            "{} missing (python3 -m venv target/peer-venv && \
             target/peer-venv/bin/pip install ollama-mcp-bridge)",
            bin.display()
        );
    }
    let config = tmp.join("mcp-config.json");
    std::fs::write(&config, servers_json)?;
    let port = free_port()?;
    let log = tmp.join("peer.log");
    let mut command = Command::new(&bin);
    command
        .arg("--config")
        .arg(&config)
        .args(["--host", "127.0.0.1", "--port", &port.to_string()])
        .arg("--ollama-url")
        .arg(format!("http://{upstream}"))
        // Its start-up update check asks pypi.org over https: send it to a
        // dead proxy so the run stays on loopback (the check then fails
        // quietly); plain-http loopback requests are not proxied.
        .env("HTTPS_PROXY", "http://127.0.0.1:9")
        .env("NO_PROXY", "127.0.0.1,localhost")
        .current_dir(tmp)
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&log)?)
        .stderr(std::fs::File::create(tmp.join("peer.err.log"))?);
    println!("$ {}", shown(&command));
    let child = command.spawn().context("cannot start ollama-mcp-bridge")?;
    let mut peer = Proc {
        child,
        addr: SocketAddr::from(([127, 0, 0, 1], port)),
        log: tmp.join("peer.err.log"),
    };
    peer.wait_ready("/health", Duration::from_secs(60))
        .context("ollama-mcp-bridge")?;
    Ok(peer)
}

/// One `oap-bench proxy-load` report.
type Row = ProxyLoadReport;

struct Load<'a> {
    /// `oap-bench`.
    bin: &'a Path,
    fake: SocketAddr,
    requests: usize,
    duration: f64,
    header_printed: bool,
}

impl Load<'_> {
    /// Runs `oap-bench proxy-load`; returns its row and, with `watch`, the largest
    /// VmRSS of that process sampled every 50 ms meanwhile.
    fn run(
        &mut self,
        target: &Target,
        mode: &str,
        concurrency: usize,
        requests: usize,
        duration: f64,
        watch: Option<u32>,
    ) -> Result<(Row, f64)> {
        // The fake records every request; forget them between runs.
        let _ = http(self.fake, "DELETE", "/_fake/requests");
        let mut command = bench_run::command(self.bin, "proxy-load");
        command
            .arg("--quiet")
            .arg("--addr")
            .arg(target.addr.to_string())
            .args(["--mode", mode, "--model", MODEL])
            .args(["--concurrency", &concurrency.to_string()])
            .args(["--requests", &requests.to_string()])
            .args(["--duration", &duration.to_string()])
            .args(["--warmup", "30", "--label", target.label]);
        if target.no_discover {
            command.arg("--no-discover");
        }
        let shown = shown(&command);
        let mut peak: f64 = 0.0;
        let (row, ok): (Row, bool) = bench_run::report_and_status(&mut command, || {
            if let Some(pid) = watch {
                if let Ok((rss, _)) = rss_of(pid) {
                    peak = peak.max(rss);
                }
            }
        })?;
        if !self.header_printed {
            println!("{}", Row::TABLE_HEADER);
            self.header_printed = true;
        }
        println!("{}", row.table_row());
        if !ok {
            println!("(warning: {shown} reported {} errors)", row.errors);
        }
        Ok((row, peak))
    }
}

/// What the proxy-shaped benchmarks share before they measure: the machine
/// header printed, `oap-bench`, oapd and the fake Ollama built, and the
/// model checked. Returns the `oap-bench` binary, `target/release` and the
/// model directory.
pub(crate) fn prologue() -> Result<(PathBuf, PathBuf, PathBuf)> {
    println!("machine: {}", machine_description());
    println!("date: {}", now_utc());
    println!("load average at start (1/5/15 min): {}", loadavg());
    let bench = bench_run::build(&[("oapd", "oapd")])?;
    build_fake_ollama()?;
    let bin = repo_root().join("target/release");
    Ok((bench, bin, bench_run::model_dir()?))
}

struct Target {
    label: &'static str,
    addr: SocketAddr,
    no_discover: bool,
}

pub fn run(args: &[String]) -> Result<()> {
    let options = parse(args)?;
    let started = Instant::now();
    let (bench, bin, model_dir) = prologue()?;

    let tmp = TempDir::new("proxy")?;

    let fake = start_fake(&bin.join("fake-ollama"), &tmp.0)?;
    println!("fake Ollama on {}", fake.addr);
    let oapd = start_oapd(&bin.join("oapd"), fake.addr, &model_dir)?;
    let oapd_pid = oapd.child.id();
    let rss_start = rss_of(oapd_pid)?;
    println!("oapd on {} (pid {oapd_pid})", oapd.addr);
    let mut notes = Vec::new();
    let peer = if options.peer {
        match start_peer(&tmp.0, fake.addr) {
            Ok(peer) => {
                println!("ollama-mcp-bridge on {}", peer.addr);
                Some(peer)
            }
            Err(err) => {
                let note = format!("ollama-mcp-bridge not measured: {err:#}");
                println!("{note}");
                notes.push(note);
                None
            }
        }
    } else {
        None
    };

    let mut targets = vec![
        Target {
            label: "direct (fake Ollama)",
            addr: fake.addr,
            no_discover: false,
        },
        Target {
            label: "oapd, oap_discover:false",
            addr: oapd.addr,
            no_discover: true,
        },
        Target {
            label: "oapd, discovery on",
            addr: oapd.addr,
            no_discover: false,
        },
    ];
    if let Some(peer) = &peer {
        targets.push(Target {
            label: "ollama-mcp-bridge",
            addr: peer.addr,
            no_discover: false,
        });
    }

    let (requests, duration) = if options.quick {
        (300, 4.0)
    } else {
        (2000, 10.0)
    };
    let mut load = Load {
        bin: &bench,
        fake: fake.addr,
        requests,
        duration,
        header_printed: false,
    };
    // rows[mode][concurrency][target]
    let mut rows: Vec<(String, usize, Vec<Row>)> = Vec::new();
    for mode in ["chat", "stream"] {
        for &c in CONCURRENCY {
            println!("\n== {mode}, concurrency {c} (load average {})", loadavg());
            let mut line = Vec::new();
            for target in &targets {
                let (row, _) = load.run(target, mode, c, load.requests, load.duration, None)?;
                line.push(row);
            }
            rows.push((mode.to_string(), c, line));
        }
    }

    // Memory: pure proxy, concurrency 16, 10k then the rest.
    println!(
        "\n== memory: {} pure-proxy requests at concurrency 16 (load average {})",
        options.leak,
        loadavg()
    );
    let pure = &targets[1];
    let rss_before = rss_of(oapd_pid)?;
    let (first_row, peak1) = load.run(pure, "chat", 16, 10_000, 300.0, Some(oapd_pid))?;
    let rss_10k = rss_of(oapd_pid)?;
    let (rest_row, peak2) = load.run(
        pure,
        "chat",
        16,
        options.leak - 10_000,
        600.0,
        Some(oapd_pid),
    )?;
    let rss_end = rss_of(oapd_pid)?;
    let leak_errors = first_row.errors + rest_row.errors;
    let leak_done = first_row.requests + rest_row.requests;

    // Summary.
    let by = |mode: &str, c: usize| -> &[Row] {
        rows.iter()
            .find(|(m, cc, _)| m == mode && *cc == c)
            .map_or(&[][..], |(_, _, rows)| rows.as_slice())
    };
    println!("\n== side by side (ms; added = proxy - direct; ratio = proxy / direct)");
    println!(
        "| mode | concurrency | target | p50 | p99 | first line p50 | first line p99 | req/s | \
         added p50 | added first line p50 | p50 ratio | req/s ratio |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|");
    for (mode, c, line) in &rows {
        let direct = &line[0];
        for (target, row) in targets.iter().zip(line) {
            println!(
                "| {mode} | {c} | {} | {:.3} | {:.3} | {:.3} | {:.3} | {:.0} | {:+.3} | {:+.3} | {:.2}x | {:.2}x |",
                target.label,
                row.p50_ms,
                row.p99_ms,
                row.first_line_p50_ms,
                row.first_line_p99_ms,
                row.requests_per_s,
                row.p50_ms - direct.p50_ms,
                row.first_line_p50_ms - direct.first_line_p50_ms,
                row.p50_ms / direct.p50_ms,
                row.requests_per_s / direct.requests_per_s,
            );
        }
    }

    println!("\n== figures vs targets");
    println!("| figure | value | target | verdict |");
    println!("|---|---|---|---|");
    let verdict = |ok: bool| if ok { "met" } else { "MISSED" };
    for &c in CONCURRENCY {
        let chat = by("chat", c);
        let stream = by("stream", c);
        for (i, what) in [(1, "pure proxy overhead"), (2, "bridge with discovery")] {
            let added = chat[i].p50_ms - chat[0].p50_ms;
            let added99 = chat[i].p99_ms - chat[0].p99_ms;
            let first = stream[i].first_line_p50_ms - stream[0].first_line_p50_ms;
            let first99 = stream[i].first_line_p99_ms - stream[0].first_line_p99_ms;
            let judged = c == 1 && i == 1;
            println!(
                "| {what}: added latency, stream:false, c={c}: p50 / p99 | {added:+.3} / {added99:+.3} ms | ≤ {TARGET_ADDED_P50_MS} ms (p50) | {} |",
                if judged { verdict(added <= TARGET_ADDED_P50_MS) } else { "-" }
            );
            println!(
                "| {what}: first-chunk overhead, stream:true, c={c}: p50 / p99 | {first:+.3} / {first99:+.3} ms | ≤ {TARGET_FIRST_TOKEN_MS} ms (p50) | {} |",
                if judged { verdict(first <= TARGET_FIRST_TOKEN_MS) } else { "-" }
            );
            println!(
                "| {what}: req/s, stream:false, c={c} (direct) | {:.0} ({:.0}) | - | - |",
                chat[i].requests_per_s, chat[0].requests_per_s
            );
        }
    }
    let growth = rss_end.0 - rss_10k.0;
    println!(
        "| oapd VmRSS: after start / before memory run / after 10k / after {}k (peak sampled; VmHWM) | {:.1} / {:.1} / {:.1} / {:.1} MB ({:.1}; {:.1}) | growth 10k→{}k ≤ {TARGET_LEAK_MB} MB | {} |",
        options.leak / 1000,
        rss_start.0,
        rss_before.0,
        rss_10k.0,
        rss_end.0,
        peak1.max(peak2),
        rss_end.1,
        options.leak / 1000,
        verdict(growth <= TARGET_LEAK_MB && leak_errors == 0)
    );
    println!(
        "| memory run: requests / errors / req/s (10k part, rest) | {leak_done} / {leak_errors} / {:.0}, {:.0} | 0 errors | {} |",
        first_row.requests_per_s,
        rest_row.requests_per_s,
        verdict(leak_errors == 0)
    );
    for note in &notes {
        println!("\nnote: {note}");
    }
    println!(
        "\nload average at end: {}; total {:.0} s",
        loadavg(),
        started.elapsed().as_secs_f64()
    );
    drop(peer);
    drop(oapd);
    drop(fake);
    Ok(())
}

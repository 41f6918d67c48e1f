//! The processes the proxy-shaped benchmarks that still start their own
//! (`bench-mcp`, `bench-memory`, `bench-fitness`) measure: the fake Ollama
//! and the Python peer as children killed on drop, oapd through the kit's
//! launcher, and what they share before they measure.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use oap_bench::machine::{loadavg, machine_description, now_utc};
use oap_testkit::{Daemon, DaemonBuilder};

use crate::bench_run::{self, build_fake_ollama, shown};
use crate::net::free_port;
use crate::repo_root;

/// The model the fake offers.
const MODEL: &str = "bench";

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

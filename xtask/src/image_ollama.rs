//! Ollama beside oapd: the stand-in release archive `oapd-setup ollama`
//! installs in tests, the loopback server that hands it out, and the image
//! boot test's checks of the first-boot install (image/README.md, "Ollama
//! on the board").
//!
//! No Ollama release can be downloaded in CI, so the mechanism is tested
//! with an archive laid out like the official one (`bin/ollama`,
//! `lib/ollama/...`, `.tar.zst`) whose `bin/ollama` is a stand-in: a shell
//! script that runs the workspace's `fake-ollama` (Ollama's wire format) for
//! `ollama serve` on `$OLLAMA_HOST`, and asks it to pull for `ollama pull`.

use std::fs;
use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use sha2::{Digest, Sha256};

use crate::repo_root;

/// The release asset name `oapd-setup` downloads on an amd64 machine.
pub(crate) const AMD64_ASSET: &str = "ollama-linux-amd64.tar.zst";

/// A relay between stdin/stdout (the guest's connection, as qemu hands it
/// over) and a loopback TCP port.
pub(crate) const RELAY_PY: &str = r#"import os, socket, sys, threading
upstream = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
def to_upstream():
    while True:
        data = os.read(0, 65536)
        if not data:
            upstream.shutdown(socket.SHUT_WR)
            return
        upstream.sendall(data)
threading.Thread(target=to_upstream, daemon=True).start()
while True:
    data = upstream.recv(65536)
    if not data:
        break
    os.write(1, data)
"#;

/// The stand-in `bin/ollama`.
const STANDIN_OLLAMA: &str = r#"#!/bin/sh
# Test stand-in for Ollama's `ollama` command (oapd's xtask tests and image
# boot test): `serve` runs fake-ollama on $OLLAMA_HOST with the script
# beside it, `pull MODEL` asks the running server to pull MODEL.
set -eu
lib=$(dirname "$(readlink -f "$0")")/../lib/ollama
host=${OLLAMA_HOST:-127.0.0.1:11434}
host=${host#http://}
case ${1:-} in
    serve) exec "$lib/fake-ollama" --host "${host%:*}" --port "${host##*:}" --script "$lib/standin-script.json" ;;
    pull) exec curl -sSf -d "{\"model\":\"$2\",\"stream\":false}" "http://$host/api/pull" ;;
    *) echo "stand-in ollama: expected serve or pull MODEL" >&2; exit 2 ;;
esac
"#;

/// `target/release/fake-ollama`, built when missing.
pub(crate) fn fake_ollama() -> Result<PathBuf> {
    let bin = repo_root().join("target/release/fake-ollama");
    if !bin.is_file() {
        crate::bench_run::build_fake_ollama()?;
    }
    ensure!(bin.is_file(), "{} was not built", bin.display());
    Ok(bin)
}

/// A stand-in release archive's sha256 (hex).
pub(crate) struct StandIn {
    pub(crate) sha256: String,
}

/// Writes `dir/<asset>`: `bin/ollama` (the stand-in), `lib/ollama/fake-ollama`
/// and the fake's script, as a zstd-compressed tar owned by root like the
/// official archives.
pub(crate) fn standin_archive(
    dir: &Path,
    asset: &str,
    fake: &Path,
    script_json: &str,
) -> Result<StandIn> {
    let tree = dir.join(format!("{asset}.tree"));
    let _ = fs::remove_dir_all(&tree);
    let lib = tree.join("lib/ollama");
    fs::create_dir_all(tree.join("bin"))?;
    fs::create_dir_all(&lib)?;
    let bin = tree.join("bin/ollama");
    fs::write(&bin, STANDIN_OLLAMA)?;
    fs::set_permissions(&bin, fs::Permissions::from_mode(0o755))?;
    fs::copy(fake, lib.join("fake-ollama"))
        .with_context(|| format!("cannot copy {}", fake.display()))?;
    fs::write(lib.join("standin-script.json"), script_json)?;
    let archive = dir.join(asset);
    let status = Command::new("tar")
        .args(["--zstd", "--owner=0", "--group=0", "--sort=name", "-cf"])
        .arg(&archive)
        .arg("-C")
        .arg(&tree)
        .args(["bin", "lib"])
        .status()
        .context("cannot run tar (and zstd)")?;
    ensure!(status.success(), "tar --zstd failed: {status}");
    fs::remove_dir_all(&tree)?;
    let sha256 = hex::encode(Sha256::digest(fs::read(&archive)?));
    Ok(StandIn { sha256 })
}

/// A plain HTTP/1.1 file server on a loopback port: `GET /<name>` answers
/// the file `dir/<name>` (no subdirectories), anything else 404. Records
/// each request's path. Stops when dropped.
pub(crate) struct FileServer {
    pub(crate) addr: SocketAddr,
    requests: Arc<Mutex<Vec<String>>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl FileServer {
    pub(crate) fn start(dir: &Path) -> Result<FileServer> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let addr = listener.local_addr()?;
        let requests = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (dir, seen, stopped) = (dir.to_path_buf(), requests.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            for stream in listener.incoming() {
                if stopped.load(Ordering::SeqCst) {
                    break;
                }
                if let Ok(stream) = stream {
                    let (dir, seen) = (dir.clone(), seen.clone());
                    std::thread::spawn(move || {
                        let _ = serve_one(stream, &dir, &seen);
                    });
                }
            }
        });
        Ok(FileServer {
            addr,
            requests,
            stop,
            thread: Some(thread),
        })
    }

    /// The paths asked for so far.
    pub(crate) fn requests(&self) -> Vec<String> {
        self.requests.lock().map(|r| r.clone()).unwrap_or_default()
    }
}

impl Drop for FileServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(self.addr);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn serve_one(stream: TcpStream, dir: &Path, seen: &Mutex<Vec<String>>) -> Result<()> {
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut request_line = String::new();
    reader.read_line(&mut request_line)?;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line)? == 0 || line == "\r\n" || line == "\n" {
            break;
        }
    }
    let mut parts = request_line.split_whitespace();
    let (method, path) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    if let Ok(mut seen) = seen.lock() {
        seen.push(path.to_owned());
    }
    let name = path.strip_prefix('/').unwrap_or("");
    let file = (method == "GET" && !name.is_empty() && !name.contains('/') && name != "..")
        .then(|| dir.join(name))
        .filter(|p| p.is_file());
    let mut stream = stream;
    match file {
        Some(file) => {
            let mut body = fs::File::open(&file)?;
            let len = body.metadata()?.len();
            write!(
                stream,
                "HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\n\
                 Content-Length: {len}\r\nConnection: close\r\n\r\n"
            )?;
            std::io::copy(&mut body, &mut stream)?;
        }
        None => {
            stream.write_all(
                b"HTTP/1.1 404 Not Found\r\nContent-Length: 10\r\nConnection: close\r\n\r\nnot found\n",
            )?;
        }
    }
    stream.flush()?;
    Ok(())
}

// ---------------------------------------------------------------------------
// Boot test
// ---------------------------------------------------------------------------

/// The release server's address as the guest sees it: only qemu's
/// forwarding rule answers there.
const GUEST_RELEASES: &str = "10.0.2.100:80";

/// The model the stand-in serves in the guest: call the bundled `wc` tool,
/// then answer with what it returned.
pub(crate) const MODEL_SCRIPT: &str = r#"{
  "models": [{"name": "qwen3:4b", "capabilities": ["completion", "tools"]}],
  "turns": [
    {"chunks": [{"tool_calls": [{"name": "oap_wc", "arguments": {"args": "-w", "stdin": "one two three four five"}}]}]},
    {"echo": "last_tool"}
  ]
}"#;

/// Where the guest's oapd finds its model server in the boot test: Ollama
/// installed on first boot from a stand-in release served on host loopback
/// (oapd talks to it on the guest's 127.0.0.1:11434, its default), carrying
/// a `fake-ollama` built for the guest's architecture.
pub(crate) struct GuestOllama {
    forward: ReleaseForward,
}

impl GuestOllama {
    /// `arm64`: the stand-in carries the aarch64 `fake-ollama` (built with
    /// the cross toolchain when missing) under the arm64 asset name, so the
    /// install on the Pi image runs the same steps as on amd64.
    pub(crate) fn start(arm64: bool, work: &Path) -> Result<GuestOllama> {
        let (asset, fake) = if arm64 {
            (ARM64_ASSET, fake_ollama_aarch64()?)
        } else {
            (AMD64_ASSET, fake_ollama()?)
        };
        Ok(GuestOllama {
            forward: ReleaseForward::start(work, asset, &fake)?,
        })
    }

    /// The `guestfwd` part of qemu's `-nic user` option.
    pub(crate) fn nic_rule(&self) -> String {
        self.forward.nic_rule()
    }

    /// Lines for the first-boot settings file.
    pub(crate) fn firstboot_lines(&self) -> String {
        self.forward.firstboot_lines()
    }

    /// Once oapd answers: waits until it reaches the installed Ollama.
    pub(crate) fn wait_until_reachable(
        &self,
        addr: SocketAddr,
        auth: &str,
        deadline: Instant,
        console: &dyn Fn() -> String,
    ) -> Result<()> {
        wait_for_ollama(addr, auth, &self.forward, deadline, console)
    }

    /// The install's lines of the console report.
    pub(crate) fn check_report(&self, console: &str) -> Result<()> {
        check_report(console)
    }
}

/// The release asset name `oapd-setup` downloads on an arm64 machine.
pub(crate) const ARM64_ASSET: &str = "ollama-linux-arm64.tar.zst";

/// `target/aarch64-unknown-linux-gnu/release/fake-ollama` (left there by
/// `cargo xtask cross --test`), built with the cross toolchain when missing.
fn fake_ollama_aarch64() -> Result<PathBuf> {
    let bin = repo_root().join("target/aarch64-unknown-linux-gnu/release/fake-ollama");
    if !bin.is_file() {
        // The linker comes from .cargo/config.toml, as for `cargo xtask cross`.
        let status = crate::tasks::cargo()
            .current_dir(repo_root())
            .args([
                "build",
                "--release",
                "--package",
                "fake-ollama",
                "--target",
                "aarch64-unknown-linux-gnu",
            ])
            .status()
            .context("cannot run cargo to build the aarch64 fake-ollama")?;
        ensure!(
            status.success(),
            "building the aarch64 fake-ollama failed: {status}"
        );
    }
    ensure!(bin.is_file(), "{} was not built", bin.display());
    Ok(bin)
}

/// The stand-in release served on host loopback, and the relay qemu starts
/// for each guest connection to [`GUEST_RELEASES`].
pub(crate) struct ReleaseForward {
    server: FileServer,
    relay: PathBuf,
    sha256: String,
    asset: &'static str,
}

impl ReleaseForward {
    pub(crate) fn start(work: &Path, asset: &'static str, fake: &Path) -> Result<ReleaseForward> {
        let dir = work.join("ollama-release");
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir)?;
        let standin = standin_archive(&dir, asset, fake, MODEL_SCRIPT)?;
        let server = FileServer::start(&dir)?;
        let relay = work.join("release-relay.py");
        fs::write(&relay, RELAY_PY)?;
        Ok(ReleaseForward {
            server,
            relay,
            sha256: standin.sha256,
            asset,
        })
    }

    /// The `guestfwd` part of qemu's `-nic user` option.
    pub(crate) fn nic_rule(&self) -> String {
        format!(
            "guestfwd=tcp:{GUEST_RELEASES}-cmd:python3 {} {}",
            self.relay.display(),
            self.server.addr.port()
        )
    }

    /// The first-boot settings that install Ollama from the stand-in.
    pub(crate) fn firstboot_lines(&self) -> String {
        format!(
            "ollama_install: true\nollama_release_url: http://{}/{}\n\
             ollama_release_sha256: {}\n",
            GUEST_RELEASES.trim_end_matches(":80"),
            self.asset,
            self.sha256
        )
    }
}

/// Waits until oapd in the guest reports Ollama reachable with the
/// stand-in's model (`/v1/status`, asked live): the first-boot unit has
/// downloaded, verified and installed the archive and `ollama.service`
/// serves, while oapd, started before it, kept running.
pub(crate) fn wait_for_ollama(
    addr: SocketAddr,
    auth: &str,
    forward: &ReleaseForward,
    deadline: Instant,
    console: &dyn Fn() -> String,
) -> Result<()> {
    let started = Instant::now();
    let mut last = String::new();
    loop {
        if let Ok((200, body)) =
            crate::image_guest::http(addr, "GET", "/v1/status", Some(auth), None)
        {
            let status: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
            let ollama = &status["ollama"];
            let has_model = ollama["models"]
                .as_array()
                .is_some_and(|m| m.iter().any(|m| m["name"] == "qwen3:4b"));
            if ollama["reachable"] == true && has_model {
                break;
            }
            last = ollama.to_string();
        }
        if Instant::now() > deadline {
            bail!(
                "oapd never saw the Ollama installed on first boot (last /v1/status ollama: {last}; \
                 release server saw {:?}); console:\n{}",
                forward.server.requests(),
                crate::image_guest::tail(&console(), 60)
            );
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    let asked = forward.server.requests();
    ensure!(
        asked.iter().any(|p| p == &format!("/{}", forward.asset)),
        "Ollama answers in the guest but the release server saw no download: {asked:?}"
    );
    println!(
        "image-boot: Ollama installed on first boot from the stand-in release, reachable through oapd \
         {:.1} s after oapd answered",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// The `OAPD-BOOTCHECK ollama-*` lines of the console report.
pub(crate) fn check_report(console: &str) -> Result<()> {
    let lines: Vec<&str> = console
        .lines()
        .filter_map(|l| l.split_once("OAPD-BOOTCHECK ").map(|(_, r)| r.trim_end()))
        .collect();
    let fail = |what: &str| -> anyhow::Error {
        anyhow::anyhow!("boot check (Ollama): {what}\nreport:\n{}", lines.join("\n"))
    };
    if !lines.contains(&"ollama-install success inactive") {
        return Err(fail("oapd-ollama-install.service did not succeed"));
    }
    if !lines.contains(&"ollama-env absent") {
        return Err(fail(
            "/etc/oapd/ollama-install.env is still there after the install (it must run once)",
        ));
    }
    if !lines.contains(&"ollama-service active running ollama enabled") {
        return Err(fail(
            "ollama.service is not enabled and active/running as the ollama user",
        ));
    }
    let listeners: Vec<&str> = lines
        .iter()
        .filter_map(|l| l.strip_prefix("ollama-listen "))
        .collect();
    if listeners != ["127.0.0.1:11434"] {
        return Err(fail(&format!(
            "Ollama must listen on 127.0.0.1:11434 only, found {listeners:?}"
        )));
    }
    Ok(())
}

#[cfg(test)]
#[allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "test code: a failed assumption is a failed test"
)]
mod tests {
    use super::*;
    use std::process::Output;

    /// A model the stand-in lists, so a test can tell two builds apart.
    fn script(model: &str) -> String {
        format!(r#"{{"models": [{{"name": "{model}"}}]}}"#)
    }

    fn setup(root: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
        let mut command = Command::new(repo_root().join("packaging/debian/oapd-setup"));
        command
            .arg("ollama")
            .args(args)
            .env("OAPD_SETUP_ROOT", root)
            .env_remove("OLLAMA_HOST")
            .env_remove("OAPD_SETUP_MAX_BYTES");
        for (key, value) in env {
            command.env(key, value);
        }
        command.output().expect("run oapd-setup")
    }

    fn text(output: &Output) -> String {
        format!(
            "exit {}\nstdout:\n{}\nstderr:\n{}",
            output.status,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        )
    }

    fn leftovers(root: &Path) -> Vec<String> {
        let mut found = Vec::new();
        for dir in ["var/tmp", "usr/local"] {
            if let Ok(entries) = fs::read_dir(root.join(dir)) {
                for entry in entries.flatten() {
                    let name = entry.file_name().to_string_lossy().into_owned();
                    if name.starts_with("oapd-setup") || name.starts_with(".oapd-setup") {
                        found.push(format!("{dir}/{name}"));
                    }
                }
            }
        }
        found
    }

    /// One fixture: a release directory with the stand-in archive, served
    /// on loopback.
    struct Release {
        dir: tempfile::TempDir,
        server: FileServer,
        standin: StandIn,
    }

    fn release(model: &str) -> Release {
        let dir = tempfile::tempdir().unwrap();
        let standin = standin_archive(
            dir.path(),
            AMD64_ASSET,
            &fake_ollama().unwrap(),
            &script(model),
        )
        .unwrap();
        let server = FileServer::start(dir.path()).unwrap();
        Release {
            dir,
            server,
            standin,
        }
    }

    impl Release {
        fn url(&self) -> String {
            format!("http://{}/{AMD64_ASSET}", self.server.addr)
        }
        fn downloads(&self) -> usize {
            let path = format!("/{AMD64_ASSET}");
            self.server
                .requests()
                .iter()
                .filter(|p| **p == path)
                .count()
        }
    }

    fn get(addr: SocketAddr, path: &str) -> std::io::Result<(u16, String)> {
        crate::net::http(addr, "GET", path, Duration::from_secs(5))
    }

    #[test]
    fn installs_the_release_like_ollamas_installer_and_a_rerun_downloads_nothing() {
        if !cfg!(target_arch = "x86_64") {
            return; // the stand-in carries this machine's fake-ollama as the amd64 asset
        }
        let release = release("standin:1b");
        let root = tempfile::tempdir().unwrap();
        let root = root.path();
        let url = release.url();
        let args = [
            "--url",
            url.as_str(),
            "--sha256",
            &release.standin.sha256,
            "--no-systemctl",
        ];
        let first = setup(root, &args, &[]);
        assert!(first.status.success(), "{}", text(&first));
        assert_eq!(release.downloads(), 1);

        let bin = root.join("usr/local/bin/ollama");
        let mode = fs::metadata(&bin).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o755, "bin/ollama mode {mode:o}");
        assert!(root.join("usr/local/lib/ollama/fake-ollama").is_file());
        let unit = fs::read_to_string(root.join("etc/systemd/system/ollama.service")).unwrap();
        for line in [
            "ExecStart=/usr/local/bin/ollama serve",
            "User=ollama",
            "Group=ollama",
            "Restart=always",
            "Environment=OLLAMA_HOST=127.0.0.1:11434",
            "Environment=OLLAMA_MAX_LOADED_MODELS=1",
            "Environment=OLLAMA_NUM_PARALLEL=1",
            "WantedBy=multi-user.target",
        ] {
            assert!(unit.lines().any(|l| l == line), "no `{line}` in:\n{unit}");
        }
        let stamp = fs::read_to_string(root.join("var/lib/oapd-setup/ollama.sha256")).unwrap();
        assert!(stamp.starts_with(&release.standin.sha256), "{stamp}");
        assert_eq!(leftovers(root), Vec::<String>::new());

        // Same hash again: no download, same files, still success.
        let again = setup(root, &args, &[]);
        assert!(again.status.success(), "{}", text(&again));
        assert!(
            String::from_utf8_lossy(&again.stdout).contains("nothing to download"),
            "{}",
            text(&again)
        );
        assert_eq!(release.downloads(), 1, "{:?}", release.server.requests());
        assert_eq!(
            fs::read_to_string(root.join("etc/systemd/system/ollama.service")).unwrap(),
            unit
        );

        // The installed command is what the unit runs: `ollama serve` on
        // OLLAMA_HOST answers Ollama's API, and `--pull` goes through it.
        let port = crate::net::free_port().unwrap();
        let host = format!("127.0.0.1:{port}");
        let mut serve = Command::new(&bin)
            .arg("serve")
            .env("OLLAMA_HOST", &host)
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let addr: SocketAddr = host.parse().unwrap();
        let pulled = setup(
            root,
            &[&args[..], &["--pull", "pulled-model:3b"]].concat(),
            &[("OLLAMA_HOST", host.as_str())],
        );
        let (status, tags) = get(addr, "/api/tags").unwrap_or_default();
        let _ = serve.kill();
        let _ = serve.wait();
        assert!(pulled.status.success(), "{}", text(&pulled));
        assert_eq!(status, 200, "{tags}");
        assert!(
            tags.contains("standin:1b") && tags.contains("pulled-model:3b"),
            "{tags}"
        );
        assert_eq!(release.downloads(), 1);
    }

    #[test]
    fn a_new_hash_upgrades_in_place() {
        if !cfg!(target_arch = "x86_64") {
            return;
        }
        let old = release("old-model:1b");
        let root = tempfile::tempdir().unwrap();
        let root = root.path();
        let out = setup(
            root,
            &[
                "--url",
                &old.url(),
                "--sha256",
                &old.standin.sha256,
                "--no-systemctl",
            ],
            &[],
        );
        assert!(out.status.success(), "{}", text(&out));
        fs::write(
            root.join("usr/local/lib/ollama/stale.so"),
            "from the old release",
        )
        .unwrap();
        let new = release("new-model:1b");
        // Upper-case hex is the same hash.
        let upper = new.standin.sha256.to_uppercase();
        let out = setup(
            root,
            &["--url", &new.url(), "--sha256", &upper, "--no-systemctl"],
            &[],
        );
        assert!(out.status.success(), "{}", text(&out));
        assert_eq!(new.downloads(), 1);
        let script =
            fs::read_to_string(root.join("usr/local/lib/ollama/standin-script.json")).unwrap();
        assert!(script.contains("new-model:1b"), "{script}");
        assert!(
            !root.join("usr/local/lib/ollama/stale.so").exists(),
            "the old lib/ollama must be replaced, not merged"
        );
        let stamp = fs::read_to_string(root.join("var/lib/oapd-setup/ollama.sha256")).unwrap();
        assert!(stamp.starts_with(&new.standin.sha256), "{stamp}");
        assert_eq!(leftovers(root), Vec::<String>::new());
    }

    #[test]
    fn a_wrong_checksum_installs_nothing_and_removes_the_download() {
        let release = release("standin:1b");
        let root = tempfile::tempdir().unwrap();
        let root = root.path();
        let wrong = "0".repeat(64);
        let out = setup(
            root,
            &[
                "--url",
                &release.url(),
                "--sha256",
                &wrong,
                "--no-systemctl",
            ],
            &[],
        );
        assert_eq!(out.status.code(), Some(1), "{}", text(&out));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains("checksum mismatch")
                && stderr.contains(&wrong)
                && stderr.contains(&release.standin.sha256)
                && stderr.contains("nothing installed"),
            "{}",
            text(&out)
        );
        assert_eq!(release.downloads(), 1, "it was downloaded, then refused");
        assert!(!root.join("usr/local/bin/ollama").exists());
        assert!(!root.join("usr/local/lib/ollama").exists());
        assert!(!root.join("etc/systemd/system/ollama.service").exists());
        assert!(!root.join("var/lib/oapd-setup/ollama.sha256").exists());
        assert_eq!(leftovers(root), Vec::<String>::new());
        assert_eq!(
            fs::read_dir(root.join("var/tmp")).unwrap().count(),
            0,
            "the download must be removed"
        );
    }

    /// Arguments, environment, the exit code and what stderr must say.
    type Refusal<'a> = (&'a [&'a str], &'a [(&'a str, &'a str)], i32, &'a str);

    #[test]
    fn refusals_name_the_problem_and_download_nothing() {
        let release = release("standin:1b");
        let root = tempfile::tempdir().unwrap();
        let root = root.path();
        let url = release.url();
        let sha = release.standin.sha256.as_str();
        let cases: &[Refusal] = &[
            // plain http is for a LAN mirror with a known hash
            (
                &["--url", &url, "--no-systemctl"],
                &[],
                2,
                "give its --sha256 too",
            ),
            (
                &["--url", &url, "--sha256", "abc", "--no-systemctl"],
                &[],
                2,
                "64 hexadecimal digits",
            ),
            (
                &[
                    "--url",
                    "ftp://mirror/x.tar.zst",
                    "--sha256",
                    sha,
                    "--no-systemctl",
                ],
                &[],
                2,
                "--url: expected an https://",
            ),
            (
                &["--version", "0.1.0", "--url", &url, "--no-systemctl"],
                &[],
                2,
                "exclude each other",
            ),
            (
                &["--version", "latest", "--no-systemctl"],
                &[],
                2,
                "--version: expected a release number",
            ),
            (
                &[
                    "--pull",
                    "bad model",
                    "--url",
                    &url,
                    "--sha256",
                    sha,
                    "--no-systemctl",
                ],
                &[],
                2,
                "--pull: expected a model name",
            ),
            (&["--frobnicate"], &[], 2, "unknown option '--frobnicate'"),
            // a root override must not touch this machine's systemd
            (
                &["--url", &url, "--sha256", sha],
                &[],
                2,
                "needs --no-systemctl",
            ),
            (
                &["--url", &url, "--sha256", sha, "--no-systemctl"],
                &[("OAPD_SETUP_MAX_BYTES", "100")],
                1,
                "larger than 100 bytes",
            ),
        ];
        for (args, env, code, needle) in cases {
            let out = setup(root, args, env);
            assert_eq!(out.status.code(), Some(*code), "{args:?}: {}", text(&out));
            assert!(
                String::from_utf8_lossy(&out.stderr).contains(needle),
                "{args:?}: expected `{needle}` in {}",
                text(&out)
            );
            assert!(!root.join("usr/local/bin/ollama").exists(), "{args:?}");
        }
        // Only the capped attempt reached the server.
        assert!(release.downloads() <= 1, "{:?}", release.server.requests());
        let missing = format!("http://{}/ollama-linux-arm64.tar.zst", release.server.addr);
        let out = setup(
            root,
            &["--url", &missing, "--sha256", sha, "--no-systemctl"],
            &[],
        );
        assert_eq!(out.status.code(), Some(1), "{}", text(&out));
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("the server answered an error"),
            "{}",
            text(&out)
        );
        assert_eq!(leftovers(root), Vec::<String>::new());
        drop(release.dir);
    }

    #[test]
    fn an_archive_for_the_other_architecture_is_refused() {
        if !cfg!(target_arch = "x86_64") {
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let tree = dir.path().join("tree");
        fs::create_dir_all(tree.join("bin")).unwrap();
        fs::create_dir_all(tree.join("lib/ollama")).unwrap();
        // An ELF header whose e_machine is aarch64 (0xb7).
        let mut elf = vec![0u8; 64];
        elf[..4].copy_from_slice(b"\x7fELF");
        elf[18] = 0xb7;
        fs::write(tree.join("bin/ollama"), &elf).unwrap();
        let served = dir.path().join("served");
        fs::create_dir_all(&served).unwrap();
        let archive = served.join("ollama-linux-arm64.tar.zst");
        let status = Command::new("tar")
            .args(["--zstd", "-cf"])
            .arg(&archive)
            .arg("-C")
            .arg(&tree)
            .args(["bin", "lib"])
            .status()
            .unwrap();
        assert!(status.success());
        let sha = hex::encode(Sha256::digest(fs::read(&archive).unwrap()));
        let server = FileServer::start(&served).unwrap();
        let root = tempfile::tempdir().unwrap();
        let url = format!("http://{}/ollama-linux-arm64.tar.zst", server.addr);
        let out = setup(
            root.path(),
            &["--url", &url, "--sha256", &sha, "--no-systemctl"],
            &[],
        );
        assert_eq!(out.status.code(), Some(1), "{}", text(&out));
        assert!(
            String::from_utf8_lossy(&out.stderr)
                .contains("built for arm64, this machine is amd64; nothing installed"),
            "{}",
            text(&out)
        );
        assert!(!root.path().join("usr/local/bin/ollama").exists());
        assert!(!root.path().join("usr/local/lib/ollama").exists());
        assert_eq!(leftovers(root.path()), Vec::<String>::new());
    }

    #[test]
    fn the_boot_report_lines_are_required() {
        let good = "OAPD-BOOTCHECK ollama-install success inactive\n\
                    OAPD-BOOTCHECK ollama-env absent\n\
                    OAPD-BOOTCHECK ollama-service active running ollama enabled\n\
                    OAPD-BOOTCHECK ollama-listen 127.0.0.1:11434\n";
        check_report(good).unwrap();
        let exposed = good.replace("listen 127.0.0.1:11434", "listen 0.0.0.0:11434");
        assert!(check_report(&exposed).is_err());
        let again = good.replace("env absent", "env present");
        assert!(check_report(&again).is_err());
    }
}

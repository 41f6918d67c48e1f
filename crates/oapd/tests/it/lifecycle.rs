//! The daemon under a service manager, with the real binary: sd_notify
//! messages on a real unix datagram socket (READY, STATUS, WATCHDOG,
//! RELOADING, STOPPING), SIGTERM draining in-flight requests within
//! `server.shutdown_grace`, SIGHUP reload of config and manifests, and
//! socket activation through systemd-socket-activate.
//!
//! These tests run without the embedding model (lexical mode): they are
//! about the process lifecycle, not about retrieval, and stay cheap in the
//! emulated arm64 guest of `cargo xtask cross --test`.

use crate::support;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::{free_port, oapd_argv, Daemon, DaemonBuilder};
use fake_ollama::{FakeOllama, Script, Turn};

/// A NOTIFY_SOCKET the test reads, as systemd would.
struct NotifySocket {
    socket: UnixDatagram,
    path: PathBuf,
    seen: Vec<String>,
}

impl NotifySocket {
    fn new(dir: &Path) -> Self {
        let path = dir.join("notify.sock");
        let socket = UnixDatagram::bind(&path).expect("bind notify socket");
        socket
            .set_read_timeout(Some(Duration::from_millis(200)))
            .expect("timeout");
        NotifySocket {
            socket,
            path,
            seen: Vec::new(),
        }
    }

    /// A message containing `needle`, already received or the next one.
    fn seen_or_wait(&mut self, needle: &str, within: Duration) -> String {
        if let Some(message) = self.seen.iter().find(|m| m.contains(needle)) {
            return message.clone();
        }
        self.wait_for(needle, within)
    }

    /// Waits for a new message containing `needle`; returns it.
    fn wait_for(&mut self, needle: &str, within: Duration) -> String {
        let deadline = Instant::now() + within;
        let mut buf = vec![0u8; 4096];
        while Instant::now() < deadline {
            if let Ok(n) = self.socket.recv(&mut buf) {
                let message = String::from_utf8_lossy(&buf[..n]).into_owned();
                self.seen.push(message.clone());
                if message.contains(needle) {
                    return message;
                }
            }
        }
        panic!("no notification with {needle:?}; got {:?}", self.seen);
    }
}

/// The daemon without the model (lexical mode), its state in `dir`.
fn daemon_in(dir: tempfile::TempDir) -> DaemonBuilder {
    support::daemon().embedding_disabled().in_dir(dir)
}

/// The daemon's config file and its text without `section` (the end the
/// test appended), for a test that rewrites it before a reload.
fn config_and_base(daemon: &Daemon, section: &str) -> (PathBuf, String) {
    let config = daemon.dir.path().join("config.yaml");
    let text = std::fs::read_to_string(&config).unwrap();
    let base = text
        .strip_suffix(section)
        .unwrap_or_else(|| panic!("the config does not end with {section:?}: {text}"))
        .to_string();
    (config, base)
}

/// A daemon ready for SIGHUP tests: manifests from `first` (holding
/// `alpha-tool`) through `section(first)`, the end of its config, and an
/// empty `second` to move to; READY=1 already seen on `notify`.
struct Reloadable {
    daemon: Daemon,
    notify: NotifySocket,
    /// The config file, and its text without the `section` the test rewrites.
    config: PathBuf,
    base: String,
    first: PathBuf,
    second: PathBuf,
}

fn reloadable(section: &dyn Fn(&Path) -> String) -> Reloadable {
    let dir = tempfile::tempdir().unwrap();
    let first = dir.path().join("first");
    let second = dir.path().join("second");
    std::fs::create_dir_all(&first).unwrap();
    std::fs::create_dir_all(&second).unwrap();
    std::fs::write(
        first.join("alpha.json"),
        support::stdio_manifest("alpha-tool", "Reverses the lines of a text file."),
    )
    .unwrap();
    let mut notify = NotifySocket::new(dir.path());
    let notify_path = notify.path.to_string_lossy().into_owned();
    let daemon = daemon_in(dir)
        .yaml(&section(&first))
        .env("NOTIFY_SOCKET", &notify_path)
        .spawn();
    let (config, base) = config_and_base(&daemon, &section(&first));
    notify.wait_for("READY=1", Duration::from_secs(60));
    Reloadable {
        daemon,
        notify,
        config,
        base,
        first,
        second,
    }
}

/// A config for the daemon started by another program (socket
/// activation, a wrapper): listening on `port`, lexical mode.
fn write_config(dir: &Path, port: u16, extra: &str) -> PathBuf {
    let config = format!(
        "server:\n  listen: [\"127.0.0.1:{port}\"]\n  header_read_timeout: 2\n{extra}\
         index:\n  data_dir: {data:?}\n\
         embedding:\n  enabled: false\n",
        data = dir.join("data"),
    );
    let path = dir.join("config.yaml");
    std::fs::write(&path, config).expect("write config");
    path
}

#[test]
fn notifies_ready_status_watchdog_and_stopping() {
    let dir = tempfile::tempdir().unwrap();
    let mut notify = NotifySocket::new(dir.path());
    let notify_path = notify.path.to_string_lossy().into_owned();
    let mut daemon = daemon_in(dir)
        .yaml("ollama:\n  base_url: http://127.0.0.1:9\n")
        .env("NOTIFY_SOCKET", &notify_path)
        // 400 ms: pings every 200 ms.
        .env("WATCHDOG_USEC", "400000")
        .spawn();
    let ready = notify.wait_for("READY=1", Duration::from_secs(60));
    assert!(
        ready.contains("STATUS=13 manifests indexed, no model (lexical only)"),
        "{ready}"
    );
    // READY comes after listening and after the index is open.
    assert_eq!(daemon.get("/health").status, 200);
    for _ in 0..3 {
        notify.wait_for("WATCHDOG=1", Duration::from_secs(2));
    }
    // Nothing listens on port 9 (discard) on loopback: upstream unreachable.
    let status = notify.seen_or_wait("Ollama unreachable", Duration::from_secs(5));
    assert!(status.contains("Ollama unreachable"), "{status}");

    daemon.signal("TERM");
    notify.wait_for("STOPPING=1", Duration::from_secs(5));
    let (status, _) = daemon.wait_exit(Duration::from_secs(10));
    assert!(status.success(), "exit {status}:\n{}", daemon.log_text());
}

#[test]
fn without_notify_socket_nothing_is_sent_and_the_daemon_serves() {
    let dir = tempfile::tempdir().unwrap();
    // A watchdog without a socket must not crash or spin.
    let mut daemon = daemon_in(dir).env("WATCHDOG_USEC", "100000").spawn();
    daemon.wait_ready(None);
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(daemon.get("/health").status, 200);
    daemon.signal("INT");
    let (status, _) = daemon.wait_exit(Duration::from_secs(10));
    assert!(status.success(), "exit {status}");
    assert!(
        !daemon.log_text().contains("cannot notify"),
        "{}",
        daemon.log_text()
    );
}

/// Starts a streamed pass-through request and returns the open stream after
/// its response head arrived.
fn start_streaming(addr: SocketAddr) -> TcpStream {
    let mut stream = TcpStream::connect(addr).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let body = r#"{"model":"m","messages":[{"role":"user","content":"hi"}],"oap_discover":false}"#;
    let raw = format!(
        "POST /api/chat HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(raw.as_bytes()).unwrap();
    let mut first = [0u8; 12];
    stream.read_exact(&mut first).expect("response head");
    assert_eq!(&first, b"HTTP/1.1 200");
    stream
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

#[test]
fn sigterm_lets_an_in_flight_stream_finish_and_refuses_new_connections() {
    let rt = runtime();
    // Ten words, 300 ms apart: the answer takes ~3 s.
    let fake = rt
        .block_on(FakeOllama::start(Script::new().turn(
            Turn::reply("one two three four five six seven eight nine ten").delay_ms(300),
        )))
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut daemon = daemon_in(dir)
        .server("shutdown_grace", "20")
        .yaml(&format!(
            "ollama:\n  base_url: {}\ntool_bridge:\n  enabled: false\n",
            fake.url()
        ))
        .spawn();
    daemon.wait_ready(None);
    let mut stream = start_streaming(daemon.addr);

    daemon.signal("TERM");
    // New connections are refused while the stream drains.
    let deadline = Instant::now() + Duration::from_secs(2);
    loop {
        match TcpStream::connect(daemon.addr) {
            Err(err) => {
                assert_eq!(err.kind(), std::io::ErrorKind::ConnectionRefused);
                break;
            }
            Ok(_) => {
                assert!(Instant::now() < deadline, "still accepting after SIGTERM");
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }
    assert!(
        daemon.child.try_wait().unwrap().is_none(),
        "exited before the in-flight request finished"
    );
    let mut rest = Vec::new();
    stream.read_to_end(&mut rest).expect("stream completes");
    let text = String::from_utf8_lossy(&rest);
    assert!(text.contains("ten"), "stream cut short: {text}");
    assert!(text.contains("\"done\":true"), "no final chunk: {text}");
    let (status, _) = daemon.wait_exit(Duration::from_secs(10));
    assert!(status.success(), "exit {status}:\n{}", daemon.log_text());
    rt.block_on(fake.shutdown());
}

#[test]
fn sigterm_cuts_a_hung_request_at_the_shutdown_grace() {
    let rt = runtime();
    let fake = rt
        .block_on(FakeOllama::start(
            Script::new().turn(Turn::reply("a b c").hang_after(1)),
        ))
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut daemon = daemon_in(dir)
        .server("shutdown_grace", "1")
        .yaml(&format!(
            "ollama:\n  base_url: {}\ntool_bridge:\n  enabled: false\n",
            fake.url()
        ))
        .spawn();
    daemon.wait_ready(None);
    let mut stream = start_streaming(daemon.addr);

    daemon.signal("TERM");
    let (status, took) = daemon.wait_exit(Duration::from_secs(10));
    assert!(status.success(), "exit {status}:\n{}", daemon.log_text());
    // The grace (1 s) plus the runtime's bounded shutdown, not forever.
    assert!(took < Duration::from_secs(6), "took {took:?}");
    assert!(daemon.log_text().contains("did not finish in time"));
    // The client sees its connection end.
    let mut rest = Vec::new();
    let _ = stream.read_to_end(&mut rest);
    rt.block_on(fake.shutdown());
}

#[test]
fn sighup_reloads_manifest_dirs_and_keeps_the_old_config_when_the_new_one_is_bad() {
    let section = |d: &Path| format!("manifests:\n  bundled: false\n  dirs: [{d:?}]\n");
    let Reloadable {
        mut daemon,
        mut notify,
        config,
        base,
        first,
        second,
    } = reloadable(&section);
    std::fs::write(
        second.join("beta.json"),
        support::stdio_manifest("beta-tool", "Shuffles the lines of a text file."),
    )
    .unwrap();
    let ids = |d: &Daemon| d.get("/v1/manifests").json().to_string();
    assert!(ids(&daemon).contains("alpha-tool"));
    assert!(!ids(&daemon).contains("beta-tool"));

    // A good new config: the second directory replaces the first.
    std::fs::write(&config, format!("{base}{}", section(&second))).unwrap();
    daemon.signal("HUP");
    notify.wait_for("RELOADING=1", Duration::from_secs(10));
    notify.wait_for("READY=1", Duration::from_secs(30));
    let now = ids(&daemon);
    assert!(
        now.contains("beta-tool") && !now.contains("alpha-tool"),
        "{now}"
    );

    // A broken config: refused, logged, the running one stays.
    std::fs::write(&config, "server: [this is not a mapping\n").unwrap();
    daemon.signal("HUP");
    notify.wait_for("reload refused", Duration::from_secs(10));
    notify.wait_for("READY=1", Duration::from_secs(10));
    assert!(ids(&daemon).contains("beta-tool"));
    assert_eq!(daemon.get("/health").status, 200);
    assert!(daemon.log_text().contains("reload refused"));

    // An invalid value is refused the same way, naming the key.
    std::fs::write(
        &config,
        format!("{base}{}discovery:\n  default_top_k: 0\n", section(&first)),
    )
    .unwrap();
    daemon.signal("HUP");
    let refused = notify.wait_for("reload refused", Duration::from_secs(10));
    assert!(refused.contains("discovery.default_top_k"), "{refused}");
    assert!(ids(&daemon).contains("beta-tool"));

    daemon.signal("TERM");
    let (status, _) = daemon.wait_exit(Duration::from_secs(10));
    assert!(status.success());
}

/// Each reload generation owns its directory watch: after SIGHUP moves
/// `manifests.dirs`, a file added to the new directory is picked up without
/// another signal, and the old directory's watch is gone with its engine.
#[test]
fn after_sighup_the_directory_watch_follows_the_new_dirs() {
    let section = |d: &Path| {
        format!("manifests:\n  bundled: false\n  dirs: [{d:?}]\ncrawler:\n  watch_interval: 1\n")
    };
    let Reloadable {
        daemon,
        mut notify,
        config,
        base,
        first,
        second,
    } = reloadable(&section);
    let ids = |d: &Daemon| d.get("/v1/manifests").json().to_string();
    let wait_until = |d: &Daemon, want: &dyn Fn(&str) -> bool| {
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        loop {
            let now = ids(d);
            if want(&now) {
                return now;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "manifests never became as expected: {now}\n{}",
                d.log_text()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    };

    std::fs::write(&config, format!("{base}{}", section(&second))).unwrap();
    daemon.signal("HUP");
    notify.wait_for("RELOADING=1", Duration::from_secs(10));
    notify.wait_for("READY=1", Duration::from_secs(30));
    assert!(!ids(&daemon).contains("alpha-tool"));

    // Added to the new directory after the reload: the new watch sees it.
    std::fs::write(
        second.join("gamma.json"),
        support::stdio_manifest("gamma-tool", "Sorts the lines of a text file."),
    )
    .unwrap();
    wait_until(&daemon, &|now| now.contains("gamma-tool"));

    // Added to the old directory: nothing watches it any more (and it is not
    // a source of the live engine), so it never appears.
    std::fs::write(
        first.join("delta.json"),
        support::stdio_manifest("delta-tool", "Counts the lines of a text file."),
    )
    .unwrap();
    std::thread::sleep(Duration::from_secs(3));
    let now = ids(&daemon);
    assert!(
        !now.contains("delta-tool") && !now.contains("alpha-tool"),
        "{now}"
    );
    assert_eq!(daemon.get("/health").status, 200);
}

#[test]
fn socket_activation_serves_on_the_inherited_socket() {
    if Command::new("systemd-socket-activate")
        .arg("--help")
        .stdout(Stdio::null())
        .status()
        .is_err()
    {
        panic!("systemd-socket-activate is missing: apt-get install systemd");
    }
    let dir = tempfile::tempdir().unwrap();
    let activated = free_port();
    let configured = free_port();
    let config = write_config(dir.path(), configured, "");
    let log = dir.path().join("oapd.log");
    let child = Command::new("systemd-socket-activate")
        .arg("--listen")
        .arg(format!("127.0.0.1:{activated}"))
        .args(oapd_argv())
        .arg("--config")
        .arg(&config)
        .arg("serve")
        .env("RUST_LOG", "info")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .expect("systemd-socket-activate");
    let addr = SocketAddr::from(([127, 0, 0, 1], activated));
    let mut daemon = Daemon {
        child,
        addr,
        addrs: vec![addr],
        dir,
        log,
        netns: None,
        ready_within: Duration::from_secs(60),
    };
    daemon.wait_ready(None);
    assert!(daemon.log_text().contains("socket activation"));
    // server.listen is ignored: the configured port stays free.
    assert!(TcpStream::connect(("127.0.0.1", configured)).is_err());
    daemon.signal("TERM");
    let (status, _) = daemon.wait_exit(Duration::from_secs(10));
    assert!(status.success(), "exit {status}:\n{}", daemon.log_text());
}

#[test]
fn hostile_listen_fds_is_a_clear_start_error() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let config = write_config(dir.path(), port, "");
    // LISTEN_PID must be the daemon's own pid: set it from a wrapper that
    // execs the daemon in its place.
    let output = Command::new("sh")
        .arg("-c")
        .arg("config=$1; shift; LISTEN_PID=$$ LISTEN_FDS=lots exec \"$@\" --config \"$config\" serve")
        .arg("sh")
        .arg(&config)
        .args(oapd_argv())
        .env("RUST_LOG", "info")
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("LISTEN_FDS"), "{stderr}");
    // It never fell back to binding the configured port.
    assert!(TcpStream::connect(("127.0.0.1", port)).is_err());
}

#[test]
fn journald_format_without_a_journal_falls_back_to_stderr_and_serves() {
    let dir = tempfile::tempdir().unwrap();
    // journald's socket is at a fixed path; on a machine without it the
    // daemon must say so and keep logging to stderr.
    if Path::new("/run/systemd/journal/socket").exists() {
        eprintln!("journald is running here: the fallback path is not reachable");
        return;
    }
    let mut daemon = daemon_in(dir).yaml("log:\n  format: journald\n").spawn();
    daemon.wait_ready(None);
    daemon.signal("TERM");
    let (status, _) = daemon.wait_exit(Duration::from_secs(10));
    assert!(status.success());
    let log = daemon.log_text();
    assert!(log.contains("journald is not reachable"), "{log}");
    assert!(log.contains("listening"), "{log}");
}

#[test]
fn a_journal_stream_that_is_not_our_stderr_keeps_text_logs() {
    let dir = tempfile::tempdir().unwrap();
    // Inherited from a parent whose stderr was the journal, but ours is a file.
    let mut daemon = daemon_in(dir).env("JOURNAL_STREAM", "8:12345").spawn();
    daemon.wait_ready(None);
    daemon.signal("TERM");
    let (status, _) = daemon.wait_exit(Duration::from_secs(10));
    assert!(status.success());
    let log = daemon.log_text();
    assert!(log.contains("INFO") && log.contains("listening"), "{log}");
    assert!(!log.contains("journald is not reachable"), "{log}");
}

/// Ollama starts after oapd on a board (the first-boot install, a slow
/// `ollama.service`): oapd must become ready and serve without it, say it
/// is unreachable, and chat through it once it listens, without a restart.
#[test]
fn becomes_ready_without_ollama_and_chats_once_it_comes_up_later() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let mut notify = NotifySocket::new(dir.path());
    let notify_path = notify.path.to_string_lossy().into_owned();
    let daemon = daemon_in(dir)
        .yaml(&format!("ollama:\n  base_url: http://127.0.0.1:{port}\n"))
        .env("NOTIFY_SOCKET", &notify_path)
        .spawn();
    notify.wait_for("READY=1", Duration::from_secs(60));
    let status = notify.seen_or_wait("Ollama unreachable", Duration::from_secs(5));
    assert!(status.contains("Ollama unreachable"), "{status}");
    assert_eq!(daemon.get("/health").status, 200);
    let ollama = daemon.get("/v1/status").json()["ollama"].clone();
    assert_eq!(ollama["reachable"], false, "{ollama}");
    let chat =
        r#"{"model":"qwen2.5:3b","stream":false,"messages":[{"role":"user","content":"hello"}]}"#;
    let refused = daemon.post_json("/api/chat", chat);
    assert_eq!(
        refused.status,
        502,
        "{}",
        String::from_utf8_lossy(&refused.body)
    );
    assert!(
        refused
            .error()
            .contains(&format!("cannot reach Ollama at http://127.0.0.1:{port}")),
        "the error names the unreachable Ollama: {}",
        String::from_utf8_lossy(&refused.body)
    );

    // Ollama comes up on the configured port.
    let rt = runtime();
    let _fake = rt
        .block_on(FakeOllama::bind(
            ([127, 0, 0, 1], port).into(),
            Script::new()
                .model(fake_ollama::ModelSpec::new("qwen2.5:3b"))
                .turn(Turn::reply("hello from the Ollama that came later")),
        ))
        .unwrap();
    let ollama = daemon.get("/v1/status").json()["ollama"].clone();
    assert_eq!(ollama["reachable"], true, "{ollama}");
    assert_eq!(ollama["models"][0]["name"], "qwen2.5:3b", "{ollama}");
    let answer = daemon.post_json("/api/chat", chat);
    assert_eq!(
        answer.status,
        200,
        "{}",
        String::from_utf8_lossy(&answer.body)
    );
    assert_eq!(
        answer.json()["message"]["content"],
        "hello from the Ollama that came later",
        "{}",
        String::from_utf8_lossy(&answer.body)
    );
    // systemd's status line follows (the reachability probe runs every 15 s).
    let status = notify.seen_or_wait("Ollama reachable", Duration::from_secs(30));
    assert!(status.contains("Ollama reachable"), "{status}");
    assert_eq!(daemon.get("/health").status, 200, "{}", daemon.log_text());
}

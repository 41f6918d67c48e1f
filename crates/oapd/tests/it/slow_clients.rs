//! Slot exhaustion by slow clients: hundreds of sockets from one address
//! that trickle a request line byte by byte and reconnect whenever they are
//! closed. The per-client cap (`server.max_connections_per_client`) turns
//! most of them away at accept without a global slot, and the header
//! deadline (`server.header_read_timeout`, from accept) cuts the rest, so a
//! client on another address is answered at once.
//!
//! Any 127/8 address is loopback: the attack comes from 127.0.0.1, the
//! honest client binds 127.0.0.2 before connecting.

use crate::support;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::support::Daemon;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Sockets in the attack (more than the 256 of `server.max_connections`).
const ATTACKERS: usize = 300;

struct Attack {
    stop: Arc<AtomicBool>,
    /// Connections the daemon closed (turned away or cut at the deadline).
    closed: Arc<AtomicUsize>,
    runtime: tokio::runtime::Runtime,
}

impl Attack {
    /// Starts `ATTACKERS` slow clients from 127.0.0.1 against `addr`.
    fn start(addr: SocketAddr) -> Attack {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let closed = Arc::new(AtomicUsize::new(0));
        for _ in 0..ATTACKERS {
            runtime.spawn(slow_client(addr, stop.clone(), closed.clone()));
        }
        Attack {
            stop,
            closed,
            runtime,
        }
    }

    fn stop(self) -> usize {
        self.stop.store(true, Ordering::Relaxed);
        self.runtime.shutdown_timeout(Duration::from_secs(2));
        self.closed.load(Ordering::Relaxed)
    }
}

/// Trickles a request line that never ends, one byte every 100 ms, and
/// reconnects (after 50 ms, to keep the test's own CPU use sane) whenever
/// the daemon answers or closes.
async fn slow_client(addr: SocketAddr, stop: Arc<AtomicBool>, closed: Arc<AtomicUsize>) {
    let line = format!("GET /health?{} HTTP/1.1\r\n", "a".repeat(4000)).into_bytes();
    while !stop.load(Ordering::Relaxed) {
        let Ok(mut stream) = tokio::net::TcpStream::connect(addr).await else {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        let (mut reader, mut writer) = stream.split();
        let mut sink = [0u8; 1024];
        for byte in line.iter().cycle() {
            if stop.load(Ordering::Relaxed) {
                return;
            }
            tokio::select! {
                _ = reader.read(&mut sink) => break,
                _ = tokio::time::sleep(Duration::from_millis(100)) => {
                    if writer.write_all(&[*byte]).await.is_err() {
                        break;
                    }
                }
            }
        }
        closed.fetch_add(1, Ordering::Relaxed);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// One `GET /health` from 127.0.0.2: the time from connect to the whole
/// answer, and its status.
fn health_from_another_address(addr: SocketAddr) -> (Duration, u16) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let started = Instant::now();
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.bind("127.0.0.2:0".parse().unwrap()).unwrap();
        let mut stream = tokio::time::timeout(Duration::from_secs(30), socket.connect(addr))
            .await
            .expect("connect in time")
            .expect("connect");
        let request = format!("GET /health HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
        stream.write_all(request.as_bytes()).await.unwrap();
        let mut answer = Vec::new();
        tokio::time::timeout(Duration::from_secs(30), stream.read_to_end(&mut answer))
            .await
            .expect("answer in time")
            .expect("read");
        let text = String::from_utf8_lossy(&answer);
        let status = text
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("no status in {text:?}"));
        (started.elapsed(), status)
    })
}

/// `calls` health checks from 127.0.0.2, 100 ms apart; their latencies sorted.
fn latencies(daemon: &Daemon, calls: usize) -> Vec<Duration> {
    let mut all: Vec<Duration> = (0..calls)
        .map(|_| {
            let (elapsed, status) = health_from_another_address(daemon.addr);
            assert_eq!(status, 200);
            std::thread::sleep(Duration::from_millis(100));
            elapsed
        })
        .collect();
    all.sort();
    all
}

fn attacked_daemon(per_client: Option<&str>) -> Daemon {
    let mut builder = support::daemon().without_model();
    if let Some(cap) = per_client {
        builder = builder.env("OAP_SERVER_MAX_CONNECTIONS_PER_CLIENT", cap);
    }
    builder.start()
}

#[test]
fn another_address_is_answered_while_one_address_trickles_requests() {
    let daemon = attacked_daemon(None);
    let attack = Attack::start(daemon.addr);
    // Let every attacker connect and the turned-away ones come back.
    std::thread::sleep(Duration::from_secs(3));
    let measured = latencies(&daemon, 7);
    let closed = attack.stop();
    // Every one of the calls, not just most: a slot freed by chance now
    // and then is not enough.
    let slowest = measured[measured.len() - 1];
    assert!(
        slowest < Duration::from_millis(100),
        "/health from 127.0.0.2 took {measured:?} (max {slowest:?}) during the attack"
    );
    // The attack was real: the daemon turned sockets away and cut slow ones.
    assert!(
        closed > ATTACKERS,
        "only {closed} attacker connections closed"
    );
    assert_eq!(daemon.get("/health").status, 200);
}

/// A blocking connection to `addr` from source address `from`.
fn connect_from(from: &str, addr: SocketAddr) -> std::net::TcpStream {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.bind(format!("{from}:0").parse().unwrap()).unwrap();
        let stream = socket.connect(addr).await.unwrap().into_std().unwrap();
        stream.set_nonblocking(false).unwrap();
        stream
    })
}

#[test]
fn a_connection_over_the_per_client_cap_is_turned_away() {
    let daemon = attacked_daemon(Some("4"));
    // From an address of their own: the readiness checks' connections
    // from 127.0.0.1 may still be closing and must not count here.
    const CLIENT: &str = "127.0.0.3";
    let idle: Vec<std::net::TcpStream> =
        (0..4).map(|_| connect_from(CLIENT, daemon.addr)).collect();
    // Accepted connections are counted once the daemon took them: the
    // fifth is answered 503 and closed without sending anything.
    let deadline = Instant::now() + Duration::from_secs(10);
    let refused = loop {
        let mut stream = connect_from(CLIENT, daemon.addr);
        stream
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        let mut answer = Vec::new();
        let _ = std::io::Read::read_to_end(&mut stream, &mut answer);
        if !answer.is_empty() {
            break String::from_utf8_lossy(&answer).into_owned();
        }
        assert!(Instant::now() < deadline, "never turned away");
    };
    assert!(refused.starts_with("HTTP/1.1 503 "), "{refused}");
    assert!(
        refused.contains("server.max_connections_per_client"),
        "{refused}"
    );
    // Another address is not affected.
    assert_eq!(health_from_another_address(daemon.addr).1, 200);
    // A slot given back is usable again.
    drop(idle);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Ok(response) = daemon.try_request("GET", "/health", &[], b"") {
            if response.status == 200 {
                break;
            }
        }
        assert!(Instant::now() < deadline, "slots were not given back");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_request_over_the_per_client_cap_reads_its_503_instead_of_a_reset() {
    let daemon = attacked_daemon(Some("2"));
    const CLIENT: &str = "127.0.0.4";
    let _idle: Vec<std::net::TcpStream> =
        (0..2).map(|_| connect_from(CLIENT, daemon.addr)).collect();
    // Every client sends its request before it reads. Closing a socket
    // with those bytes unread makes the kernel answer with a reset, which
    // throws the 503 away: the daemon reads and drops them first.
    let body = format!("{{\"task\": \"{}\"}}", "count the words ".repeat(400));
    let request = format!(
        "POST /v1/discover HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        daemon.addr,
        body.len()
    );
    let mut answers = Vec::new();
    for _ in 0..10 {
        let mut stream = connect_from(CLIENT, daemon.addr);
        stream
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        let answer = std::io::Write::write_all(&mut stream, request.as_bytes()).and_then(|()| {
            let mut answer = Vec::new();
            std::io::Read::read_to_end(&mut stream, &mut answer).map(|_| answer)
        });
        answers.push(match answer {
            Ok(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
            Err(err) => format!("error: {err}"),
        });
    }
    for answer in &answers {
        assert!(answer.starts_with("HTTP/1.1 503 "), "{answers:#?}");
        assert!(
            answer.contains("server.max_connections_per_client"),
            "{answer}"
        );
    }
}

#[test]
fn the_per_client_cap_is_checked_at_start() {
    let output = support::oapd()
        .arg("config")
        .env("OAP_SERVER_MAX_CONNECTIONS_PER_CLIENT", "0")
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("server.max_connections_per_client: must be between 1 and 65536, got 0"),
        "{stderr}"
    );
}

/// The figures in docs/BENCHMARKS.md ("Slow clients"): /health latency from
/// 127.0.0.2 during the attack, with the default cap and with the cap
/// lifted (65536). Run with
/// `cargo test --release -p oapd --test it -- --ignored --nocapture slow_clients::`.
#[test]
#[ignore]
fn bench_health_latency_during_the_attack() {
    for (label, cap) in [
        ("cap 32 (default)", None),
        ("no cap (65536)", Some("65536")),
    ] {
        let daemon = attacked_daemon(cap);
        let idle = latencies(&daemon, 7);
        let attack = Attack::start(daemon.addr);
        std::thread::sleep(Duration::from_secs(3));
        let attacked = latencies(&daemon, 15);
        let closed = attack.stop();
        let ms = |d: &Duration| d.as_secs_f64() * 1000.0;
        println!(
            "{label}: idle median {:.1} ms; attacked median {:.1} ms, max {:.1} ms \
             ({} calls); attacker connections closed: {closed}",
            ms(&idle[idle.len() / 2]),
            ms(&attacked[attacked.len() / 2]),
            ms(attacked.last().unwrap()),
            attacked.len()
        );
    }
}

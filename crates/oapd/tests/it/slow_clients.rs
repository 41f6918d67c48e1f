//! Slot exhaustion by slow clients: hundreds of sockets from one address
//! that trickle a request line byte by byte and reconnect whenever they are
//! closed. The per-client cap (`server.max_connections_per_client`) turns
//! most of them away at accept without a global slot, and the header
//! deadline (`server.header_read_timeout`, from accept) cuts the rest, so a
//! client on another address is answered at once.
//!
//! Any 127/8 address is loopback: the attack comes from 127.0.0.1, the
//! honest client binds 127.0.0.2 before connecting.
//!
//! Spread over many addresses (IPv6 hands an attacker plenty), the
//! per-client cap no longer bounds the attack: 20 addresses × 32
//! trickling connections would hold every served slot. Connections still
//! sending their head have their own budget
//! (`server.max_pending_connections`) whose oldest is closed to admit a
//! new one, so the honest client is still answered at once.

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
/// answer, and its status (a minute at most: the figures of the daemon
/// without a pending budget reach 20 s).
fn health_from_another_address(addr: SocketAddr) -> (Duration, u16) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let started = Instant::now();
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.bind("127.0.0.2:0".parse().unwrap()).unwrap();
        let mut stream = tokio::time::timeout(Duration::from_secs(60), socket.connect(addr))
            .await
            .expect("connect in time")
            .expect("connect");
        let request = format!("GET /health HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
        stream.write_all(request.as_bytes()).await.unwrap();
        let mut answer = Vec::new();
        tokio::time::timeout(Duration::from_secs(60), stream.read_to_end(&mut answer))
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

/// The spread attack's source addresses, 127.0.0.10 to 127.0.0.29 (loopback
/// on Linux without any setup).
const SPREAD_ADDRESSES: std::ops::Range<u8> = 10..30;
/// Connections per address: `server.max_connections_per_client`'s default,
/// so none is turned away at accept.
const PER_ADDRESS: usize = 32;
/// Seconds between two trickled header bytes.
const TRICKLE_EVERY: Duration = Duration::from_millis(200);

/// Trickling connections from many addresses; `open[i]` is whether the
/// `i`-th connection made (the oldest first) is still open.
struct SpreadAttack {
    stop: Arc<AtomicBool>,
    open: Vec<Arc<AtomicBool>>,
    /// Connections the daemon closed, counting reconnections.
    closed: Arc<AtomicUsize>,
    runtime: tokio::runtime::Runtime,
}

impl SpreadAttack {
    /// Opens `addresses` × [`PER_ADDRESS`] connections to `addr`, one after
    /// the other, the source address taken in turn (so a connection's age
    /// says nothing about its address), each trickling a request line that
    /// never ends. With `reconnect`, a closed connection is made again at
    /// once, as an attacker would; without, it stays closed, so which ones
    /// the daemon closed can be seen.
    fn start(addr: SocketAddr, addresses: usize, reconnect: bool) -> SpreadAttack {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let closed = Arc::new(AtomicUsize::new(0));
        let sources: Vec<std::net::IpAddr> = SPREAD_ADDRESSES
            .take(addresses)
            .map(|last| std::net::IpAddr::from([127, 0, 0, last]))
            .collect();
        let mut open = Vec::new();
        runtime.block_on(async {
            for i in 0..sources.len() * PER_ADDRESS {
                let from = sources[i % sources.len()];
                // An attacker does not wait for a handshake the daemon's
                // full backlog drops: it tries again later.
                let stream = if reconnect {
                    tokio::time::timeout(Duration::from_secs(1), try_connect_trickler(from, addr))
                        .await
                        .ok()
                        .and_then(Result::ok)
                } else {
                    Some(connect_trickler(from, addr).await)
                };
                let flag = Arc::new(AtomicBool::new(true));
                open.push(flag.clone());
                let (stop, closed) = (stop.clone(), closed.clone());
                tokio::spawn(async move {
                    let mut stream = stream;
                    while !stop.load(Ordering::Relaxed) {
                        let current = match stream.take() {
                            Some(stream) => stream,
                            // A daemon whose backlog is full drops the
                            // handshake: try again, as an attacker would.
                            None => match try_connect_trickler(from, addr).await {
                                Ok(stream) => stream,
                                Err(_) => {
                                    tokio::time::sleep(Duration::from_millis(50)).await;
                                    continue;
                                }
                            },
                        };
                        trickle(current, &stop).await;
                        if stop.load(Ordering::Relaxed) {
                            break;
                        }
                        closed.fetch_add(1, Ordering::Relaxed);
                        if !reconnect {
                            flag.store(false, Ordering::Relaxed);
                            break;
                        }
                    }
                });
            }
        });
        SpreadAttack {
            stop,
            open,
            closed,
            runtime,
        }
    }

    /// Stops the attack; connections the daemon closed.
    fn stop(self) -> usize {
        self.stop.store(true, Ordering::Relaxed);
        self.runtime.shutdown_timeout(Duration::from_secs(2));
        self.closed.load(Ordering::Relaxed)
    }
}

async fn connect_trickler(from: std::net::IpAddr, addr: SocketAddr) -> tokio::net::TcpStream {
    try_connect_trickler(from, addr).await.unwrap()
}

async fn try_connect_trickler(
    from: std::net::IpAddr,
    addr: SocketAddr,
) -> std::io::Result<tokio::net::TcpStream> {
    let socket = tokio::net::TcpSocket::new_v4()?;
    socket.bind(SocketAddr::new(from, 0))?;
    socket.connect(addr).await
}

/// Sends a request line one byte every [`TRICKLE_EVERY`] until the daemon
/// answers or closes, or the attack stops.
async fn trickle(mut stream: tokio::net::TcpStream, stop: &AtomicBool) {
    let line = format!("GET /health?{} HTTP/1.1\r\n", "a".repeat(4000)).into_bytes();
    let (mut reader, mut writer) = stream.split();
    let mut sink = [0u8; 1024];
    for byte in line.iter().cycle() {
        if stop.load(Ordering::Relaxed) {
            return;
        }
        tokio::select! {
            _ = reader.read(&mut sink) => return,
            _ = tokio::time::sleep(TRICKLE_EVERY) => {
                if writer.write_all(&[*byte]).await.is_err() {
                    return;
                }
            }
        }
    }
}

/// `calls` health checks from 127.0.0.2 at once, each given 20 s at most
/// (a call that gets no answer in time counts as 20 s); their latencies
/// sorted.
fn concurrent_latencies(daemon: &Daemon, calls: usize) -> Vec<Duration> {
    const WITHIN: Duration = Duration::from_secs(20);
    let addr = daemon.addr;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut all = runtime.block_on(async {
        let one = || async {
            let started = Instant::now();
            let call = async {
                let socket = tokio::net::TcpSocket::new_v4().unwrap();
                socket.bind("127.0.0.2:0".parse().unwrap()).unwrap();
                let mut stream = socket.connect(addr).await.unwrap();
                let request =
                    format!("GET /health HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
                stream.write_all(request.as_bytes()).await.unwrap();
                let mut answer = Vec::new();
                stream.read_to_end(&mut answer).await.unwrap();
                assert!(answer.starts_with(b"HTTP/1.1 200 "), "{answer:?}");
            };
            match tokio::time::timeout(WITHIN, call).await {
                Ok(()) => started.elapsed(),
                Err(_) => WITHIN,
            }
        };
        let calls: Vec<_> = (0..calls).map(|_| one()).collect();
        futures_util::future::join_all(calls).await
    });
    all.sort();
    all
}

/// A daemon whose header deadline (a minute) cannot be what frees slots
/// during the test, so only the pending budget can.
fn spread_daemon() -> Daemon {
    support::daemon()
        .without_model()
        .env("OAP_SERVER_HEADER_READ_TIMEOUT", "60")
        .start()
}

#[test]
fn a_prompt_client_is_answered_while_twenty_addresses_trickle_and_the_oldest_are_shed() {
    let daemon = spread_daemon();
    let attack = SpreadAttack::start(daemon.addr, SPREAD_ADDRESSES.len(), false);
    let made = attack.open.len();
    // Every connection accepted and trickling.
    std::thread::sleep(Duration::from_secs(2));
    let measured = concurrent_latencies(&daemon, 7);
    // A shed connection sees its close within one trickle period.
    std::thread::sleep(TRICKLE_EVERY * 3);
    let open: Vec<bool> = attack
        .open
        .iter()
        .map(|flag| flag.load(Ordering::Relaxed))
        .collect();
    attack.stop();
    // The one timed assertion, because the requirement is a latency
    // bound: a client that sends its head promptly is served in under
    // 100 ms whatever slow clients do. Without the pending budget it waits
    // for the header deadline (here a minute). The median of 7 leaves room
    // for a hiccup of the shared machine; the bound is generous against
    // the ~1 ms this takes unattacked. The calls are made at once, so a
    // first call that waits for the attack to end cannot leave the others
    // a quiet server.
    let median = measured[measured.len() / 2];
    assert!(
        median < Duration::from_millis(100),
        "/health from 127.0.0.2 took {measured:?} (median {median:?}) while \
         {made} connections trickled"
    );
    // Shed oldest first: the closed ones are exactly the oldest, the
    // newest (at most the pending budget, 64 by default) still open.
    let still_open = open.iter().filter(|open| **open).count();
    let first_open = open.iter().position(|open| *open).unwrap_or(made);
    assert!(
        open[first_open..].iter().all(|open| *open),
        "a newer connection was closed before an older one: {open:?}"
    );
    assert!(
        (1..=64).contains(&still_open),
        "{still_open} of {made} trickling connections still open"
    );
    assert_eq!(daemon.get("/health").status, 200);
}

/// One `GET /health` from 127.0.0.2 given `within`: its latency, or what
/// went wrong (no answer in time, closed without an answer, another status).
fn health_attempt(addr: SocketAddr, within: Duration) -> Result<Duration, String> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let started = Instant::now();
        let call = async {
            let socket = tokio::net::TcpSocket::new_v4().map_err(|e| e.to_string())?;
            socket
                .bind("127.0.0.2:0".parse().unwrap())
                .map_err(|e| e.to_string())?;
            let mut stream = socket.connect(addr).await.map_err(|e| e.to_string())?;
            let request =
                format!("GET /health HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
            stream
                .write_all(request.as_bytes())
                .await
                .map_err(|e| e.to_string())?;
            let mut answer = Vec::new();
            stream
                .read_to_end(&mut answer)
                .await
                .map_err(|e| e.to_string())?;
            if answer.starts_with(b"HTTP/1.1 200 ") {
                Ok(started.elapsed())
            } else {
                Err(format!(
                    "answer {:?}",
                    String::from_utf8_lossy(&answer[..answer.len().min(40)])
                ))
            }
        };
        tokio::time::timeout(within, call)
            .await
            .unwrap_or_else(|_| Err(format!("no answer within {within:?}")))
    })
}

/// The figures in docs/BENCHMARKS.md ("Slow clients from many
/// addresses"): `/health` latency from 127.0.0.2 with no attack, 10 × 32
/// and 20 × 32 trickling connections that reconnect when closed, the
/// daemon at its default header deadline (10 s). Run with
/// `cargo test --release -p oapd --test it -- --ignored --nocapture bench_spread`.
#[test]
#[ignore]
fn bench_spread_health_latency() {
    for addresses in [0, 10, 20] {
        let daemon = support::daemon()
            .without_model()
            .env("OAP_SERVER_HEADER_READ_TIMEOUT", "10")
            .start();
        let attack = SpreadAttack::start(daemon.addr, addresses, true);
        std::thread::sleep(Duration::from_secs(3));
        let mut answered = Vec::new();
        let mut failed = Vec::new();
        for _ in 0..7 {
            match health_attempt(daemon.addr, Duration::from_secs(60)) {
                Ok(latency) => answered.push(latency),
                Err(why) => failed.push(why),
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        answered.sort();
        let closed = attack.stop();
        let ms = |d: &Duration| d.as_secs_f64() * 1000.0;
        println!(
            "{addresses} x {PER_ADDRESS} tricklers: median {:.1} ms, max {:.1} ms of {} answered; \
             failed: {failed:?}; attacker connections closed: {closed}",
            answered.get(answered.len() / 2).map_or(f64::NAN, ms),
            answered.last().map_or(f64::NAN, ms),
            answered.len()
        );
    }
}

#[test]
fn an_idle_keep_alive_connection_counts_as_pending_and_is_shed_when_oldest() {
    // A minute of header deadline: hyper's own idle close must not be what
    // ends the keep-alive connection.
    let daemon = support::daemon()
        .without_model()
        .env("OAP_SERVER_MAX_PENDING_CONNECTIONS", "2")
        .env("OAP_SERVER_HEADER_READ_TIMEOUT", "60")
        .start();
    // From an address of their own, as above.
    const CLIENT: &str = "127.0.0.5";
    let mut idle = connect_from(CLIENT, daemon.addr);
    idle.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let request = format!("GET /health HTTP/1.1\r\nHost: {}\r\n\r\n", daemon.addr);
    std::io::Write::write_all(&mut idle, request.as_bytes()).unwrap();
    // The whole answer, nothing more.
    let mut answer = Vec::new();
    let mut piece = [0u8; 4096];
    let response = loop {
        let n = std::io::Read::read(&mut idle, &mut piece).unwrap();
        assert!(n > 0, "closed before the answer");
        answer.extend_from_slice(&piece[..n]);
        // A chunked body parses only once complete.
        if let Ok(response) = oap_testkit::http::parse_response(&answer) {
            let length = response
                .header("content-length")
                .and_then(|l| l.parse().ok());
            if length.is_none_or(|length: usize| length == response.body.len()) {
                break response;
            }
        }
    };
    assert_eq!(response.status, 200);
    assert_ne!(response.header("connection"), Some("close"));
    // Answered and kept alive, it waits for its next request: pending
    // again, and the oldest when two newer connections arrive.
    let _newer: Vec<std::net::TcpStream> =
        (0..2).map(|_| connect_from(CLIENT, daemon.addr)).collect();
    let closed = std::io::Read::read(&mut idle, &mut piece);
    assert!(
        matches!(closed, Ok(0))
            || closed.is_err_and(|err| !matches!(
                err.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            )),
        "the idle connection was not closed"
    );
}

#[test]
fn the_pending_budget_is_checked_at_start() {
    let output = support::oapd()
        .arg("config")
        .env("OAP_SERVER_MAX_PENDING_CONNECTIONS", "0")
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("server.max_pending_connections: must be between 1 and 65536, got 0"),
        "{stderr}"
    );
}

//! The faults the soak injects: daemon restarts (one with a damaged index
//! file), signals, probe tools that hang or flood, catalog churn.

use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use oap_bench::report::SoakRestart;
use oap_testkit::http::exchange;
use serde_json::json;

use super::load::request;
use super::procs::{indexed, wait_indexed, Setup};
use super::{Result, Shared, UNREADY_LIMIT_S};

/// Kills the daemon with SIGKILL (damaging its index file when
/// `corrupt`), starts it again on the same state and checks that every
/// manifest indexed before is back.
pub(super) fn restart(shared: &Shared, setup: &Setup, corrupt: bool) -> Result<()> {
    let kind = if corrupt {
        "index_corrupt_restart"
    } else {
        "daemon_sigkill"
    };
    let before = indexed(shared.addr).unwrap_or(0);
    let at = shared.t();
    shared.fault(kind);
    shared.down.store(true, Ordering::SeqCst);
    shared.epoch.fetch_add(1, Ordering::SeqCst);
    let killed = Instant::now();
    let mut daemon = shared
        .daemon
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .take()
        .ok_or("no daemon to kill")?;
    let _ = daemon.child.kill();
    let _ = daemon.child.wait();
    setup.keep_log(&daemon);
    if corrupt {
        damage(&shared.index_file)?;
    }
    let dir = std::mem::replace(&mut daemon.dir, tempfile::tempdir()?);
    drop(daemon);
    let daemon = setup.start(dir)?;
    let ready_s = killed.elapsed().as_secs_f64();
    shared.pid.store(daemon.pid(), Ordering::SeqCst);
    *shared.daemon.lock().unwrap_or_else(|e| e.into_inner()) = Some(daemon);
    *shared.back_at.lock().unwrap_or_else(|e| e.into_inner()) = Some(Instant::now());
    shared.epoch.fetch_add(1, Ordering::SeqCst);
    shared.down.store(false, Ordering::SeqCst);
    let limit = if corrupt { 1800 } else { 600 };
    let (back, most) = wait_indexed(shared.addr, before, Duration::from_secs(limit));
    let recovered_s = back.map_or(f64::NAN, |_| killed.elapsed().as_secs_f64());
    eprintln!(
        "  {:6.0} s  {kind}: {before} manifests before, {most} after; ready after {ready_s:.1} s, \
         all back after {recovered_s:.1} s",
        shared.t()
    );
    if back.is_none() {
        shared.fail(format!(
            "{kind} at {at:.0} s lost manifests: {before} indexed before, at most {most} within {limit} s after"
        ));
    }
    if corrupt && ready_s > UNREADY_LIMIT_S {
        shared.fail(format!(
            "{kind} at {at:.0} s: the daemon was unready for {ready_s:.1} s, more than \
             {UNREADY_LIMIT_S} s (it must serve lexically while the vectors are rebuilt)"
        ));
    }
    shared.stats().restarts.push(SoakRestart {
        kind: kind.to_string(),
        at_s: at,
        before,
        after: most,
        ready_s,
        recovered_s,
        // Filled in at the end from the new process's samples.
        hybrid_s: f64::NAN,
        pid: shared.pid.load(Ordering::SeqCst),
    });
    Ok(())
}

/// Flips 64 bytes in the middle of the index file, written beside it and
/// renamed over it (as a disk error would leave it; never in place, as
/// the running daemon maps it).
pub(super) fn damage(path: &Path) -> Result<()> {
    let mut bytes = std::fs::read(path)?;
    let mid = bytes.len() / 2;
    for b in bytes.iter_mut().skip(mid).take(64) {
        *b ^= 0xff;
    }
    let tmp = path.with_extension("soak-damaged");
    std::fs::write(&tmp, bytes)?;
    std::fs::rename(&tmp, path)?;
    Ok(())
}

pub(super) fn signal(pid: u32, name: &str) -> Result<()> {
    let status = Command::new("kill")
        .args([&format!("-{name}"), &pid.to_string()])
        .status()?;
    if !status.success() {
        return Err(format!("kill -{name} {pid} failed").into());
    }
    Ok(())
}

/// A bridged chat whose model calls `tool` with `args`; the fake's turn for
/// the model `model` is queued first.
pub(super) fn probe(
    shared: &Shared,
    ollama: SocketAddr,
    model: &str,
    tool: &str,
    args: &str,
    task: &str,
) {
    let turn = json!({"model": model, "chunks": [
        {"tool_calls": [{"name": tool, "arguments": {"args": args}}]}]});
    let _ = exchange(
        ollama,
        "POST",
        "/_fake/turns",
        &turn.to_string(),
        Duration::from_secs(10),
    );
    let body = json!({"model": model, "stream": false,
        "messages": [{"role": "user", "content": task}]})
    .to_string();
    request(shared, "probe", "/api/chat", &body);
}

pub(super) fn churn_manifest(description: &str) -> String {
    oap_testkit::manifest_web::manifest("soakchurn", description)
}

/// Waits until the index holds `want` manifests; a failure past 60 s.
pub(super) fn expect_count(shared: &Shared, what: &str, want: u64) {
    let started = Instant::now();
    loop {
        let now = indexed(shared.addr);
        if now == Some(want) {
            return;
        }
        if started.elapsed() > Duration::from_secs(60) {
            shared.fail(format!(
                "{what}: the index holds {now:?} manifests 60 s later, {want} expected"
            ));
            return;
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

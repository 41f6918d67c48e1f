//! What the soak records while it runs: every 10 s a `sample` line of the
//! daemon's resources, every minute a `minute` line with latencies, errors
//! and faults; daemon exits it did not cause, and tool processes past their
//! deadline.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use oap_testkit::rss::ProcStatus;
use serde_json::{json, Value};

use super::procs::{health, indexed, Setup};
use super::report::{percentile, round1};
use super::{Sample, Shared, CHILD_SLACK_S, FLOOD_WORD, HANG_SECONDS, TOOL_DEADLINE_S};

/// The processes of the machine: pid -> (ppid, age in seconds, cmdline).
pub(super) fn processes() -> BTreeMap<u32, (u32, f64, String)> {
    let uptime: f64 = std::fs::read_to_string("/proc/uptime")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(0.0);
    let mut out = BTreeMap::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return out;
    };
    for entry in entries.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // Fields after the command name, which may hold spaces.
        let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r) else {
            continue;
        };
        let fields: Vec<&str> = rest.split_whitespace().collect();
        let ppid = fields.get(1).and_then(|s| s.parse().ok()).unwrap_or(0);
        // starttime is field 22 of stat, the 20th after the name; clock ticks of 100 Hz.
        let start: f64 = fields.get(19).and_then(|s| s.parse().ok()).unwrap_or(0.0);
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline"))
            .map(|b| String::from_utf8_lossy(&b).replace('\0', " "))
            .unwrap_or_default();
        out.insert(
            pid,
            (ppid, uptime - start / 100.0, cmdline.trim().to_string()),
        );
    }
    out
}

/// Descendants of `root` and the probe tools anywhere (an orphan too).
pub(super) fn watched_children(root: u32) -> Vec<(u32, f64, String)> {
    let procs = processes();
    let mut out = Vec::new();
    for (&pid, (_, age, cmdline)) in &procs {
        let mut up = pid;
        let mut descendant = false;
        for _ in 0..64 {
            match procs.get(&up) {
                Some((ppid, _, _)) if *ppid == root => {
                    descendant = true;
                    break;
                }
                Some((ppid, _, _)) if *ppid > 1 => up = *ppid,
                _ => break,
            }
        }
        let probe =
            cmdline == &format!("sleep {HANG_SECONDS}") || cmdline == &format!("yes {FLOOD_WORD}");
        if descendant || probe {
            out.push((pid, *age, cmdline.clone()));
        }
    }
    out
}

pub(super) fn count_fds(pid: u32) -> f64 {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| d.count() as f64)
        .unwrap_or(f64::NAN)
}

/// Every 10 s a sample line; every minute a minute line; checks children
/// and daemon exits every second.
pub(super) fn recorder(shared: Arc<Shared>, setup: Arc<Setup>) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let mut next_sample = 0.0;
        let mut next_minute = 60.0;
        let mut minute = 0u64;
        while !shared.stop.load(Ordering::SeqCst) {
            watch_daemon(&shared, &setup);
            check_children(&shared);
            let t = shared.t();
            if t >= next_sample {
                sample(&shared);
                next_sample += 10.0;
            }
            if t >= next_minute {
                minute += 1;
                minute_line(&shared, minute);
                next_minute += 60.0;
            }
            std::thread::sleep(Duration::from_secs(1));
        }
    })
}

/// A daemon exit the soak did not cause: a crash; it is started again.
pub(super) fn watch_daemon(shared: &Shared, setup: &Setup) {
    if shared.down.load(Ordering::SeqCst) {
        return;
    }
    let mut guard = shared.daemon.lock().unwrap_or_else(|e| e.into_inner());
    let Some(daemon) = guard.as_mut() else { return };
    let Ok(Some(status)) = daemon.child.try_wait() else {
        return;
    };
    shared.down.store(true, Ordering::SeqCst);
    shared.epoch.fetch_add(1, Ordering::SeqCst);
    setup.keep_log(daemon);
    shared.stats().crashes += 1;
    let Some(mut daemon) = guard.take() else {
        return;
    };
    drop(guard);
    shared.fail(format!(
        "the daemon exited on its own ({status}) at {:.0} s; its log is in {}",
        shared.t(),
        setup.log.display()
    ));
    let started = tempfile::tempdir()
        .map_err(|e| e.to_string())
        .and_then(|spare| {
            setup
                .start(std::mem::replace(&mut daemon.dir, spare))
                .map_err(|e| e.to_string())
        });
    match started {
        Ok(daemon) => {
            shared.pid.store(daemon.pid(), Ordering::SeqCst);
            *shared.daemon.lock().unwrap_or_else(|e| e.into_inner()) = Some(daemon);
        }
        Err(err) => shared.fail(format!("the daemon did not start again: {err}")),
    }
    *shared.back_at.lock().unwrap_or_else(|e| e.into_inner()) = Some(Instant::now());
    shared.epoch.fetch_add(1, Ordering::SeqCst);
    shared.down.store(false, Ordering::SeqCst);
}

pub(super) fn check_children(shared: &Shared) {
    let pid = shared.pid.load(Ordering::SeqCst);
    for (child, age, cmdline) in watched_children(pid) {
        if age > TOOL_DEADLINE_S + CHILD_SLACK_S {
            let mut stats = shared.stats();
            if !stats.lingering_seen.contains(&child) {
                stats.lingering_seen.push(child);
                stats.lingering += 1;
                drop(stats);
                shared.fail(format!(
                    "process {child} (`{cmdline}`) alive {age:.0} s, past the tool deadline \
                     of {TOOL_DEADLINE_S} s + {CHILD_SLACK_S} s"
                ));
            }
        }
    }
}

/// Files in the daemon's data directory (the index, its temporaries,
/// the crawl state, the experience cache): a leak across restarts
/// (temporaries a killed writer left, say) grows it.
pub(super) fn data_files(shared: &Shared) -> f64 {
    shared
        .index_file
        .parent()
        .and_then(|dir| std::fs::read_dir(dir).ok())
        .map_or(f64::NAN, |entries| entries.count() as f64)
}

pub(super) fn resources(shared: &Shared) -> (f64, f64, f64, f64, u64) {
    let pid = shared.pid.load(Ordering::SeqCst);
    let status = ProcStatus::of(pid).ok();
    let rss = status
        .as_ref()
        .and_then(|s| s.mb("VmRSS"))
        .unwrap_or(f64::NAN);
    let threads = status
        .as_ref()
        .and_then(|s| s.raw("Threads")?.trim().parse::<f64>().ok())
        .unwrap_or(f64::NAN);
    let children = watched_children(pid).len() as f64;
    let index = std::fs::metadata(&shared.index_file)
        .map(|m| m.len())
        .unwrap_or(0);
    (rss, count_fds(pid), threads, children, index)
}

/// The daemon's resident memory split into anonymous (heap) and mapped
/// files (binary, index), MB: a step in RSS is read as a leak only if it
/// is in the heap.
pub(super) fn rss_split(shared: &Shared) -> (f64, f64) {
    let status = ProcStatus::of(shared.pid.load(Ordering::SeqCst)).ok();
    let of = |key| status.as_ref().and_then(|s| s.mb(key)).unwrap_or(f64::NAN);
    (of("RssAnon"), of("RssFile"))
}

pub(super) fn sample(shared: &Shared) {
    if shared.down.load(Ordering::SeqCst) {
        return;
    }
    let (rss_mb, fds, threads, children, index_bytes) = resources(shared);
    let files = data_files(shared);
    let pending = health(shared.addr)
        .and_then(|h| h["index"]["pending_texts"].as_u64())
        .map_or(f64::NAN, |n| n as f64);
    let t = shared.t();
    let (anon_mb, file_mb) = rss_split(shared);
    shared.line(
        &json!({"type": "sample", "t_s": round1(t), "pid": shared.pid.load(Ordering::SeqCst),
        "rss_mb": round1(rss_mb), "rss_anon_mb": round1(anon_mb), "rss_file_mb": round1(file_mb),
        "fds": fds, "threads": threads, "children": children,
        "index_bytes": index_bytes, "data_files": files, "pending_texts": pending}),
    );
    shared
        .samples
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push(Sample {
            t,
            pid: shared.pid.load(Ordering::SeqCst),
            rss_mb,
            fds,
            threads,
            children,
            data_files: files,
            index_mb: index_bytes as f64 / 1e6,
            pending,
        });
}

pub(super) fn minute_line(shared: &Shared, minute: u64) {
    let drips = shared.drips.load(Ordering::SeqCst);
    let counted = shared.drips_counted.swap(drips, Ordering::SeqCst);
    for _ in counted..drips {
        shared.fault("manifest_server_drip");
    }
    let window = std::mem::take(&mut shared.stats().window);
    let (rss_mb, fds, threads, children, index_bytes) = resources(shared);
    let routes: serde_json::Map<String, Value> = window
        .latencies
        .iter()
        .map(|(route, l)| {
            (
                route.clone(),
                json!({"n": l.len(), "p50_ms": round1(percentile(l, 50.0)),
                       "p99_ms": round1(percentile(l, 99.0))}),
            )
        })
        .collect();
    let faults: Vec<Value> = window
        .faults
        .iter()
        .map(|(t, kind)| json!({"t_s": round1(*t), "kind": kind}))
        .collect();
    let (anon_mb, file_mb) = rss_split(shared);
    let line = json!({"type": "minute", "minute": minute, "t_s": round1(shared.t()),
        "daemon_pid": shared.pid.load(Ordering::SeqCst),
        "rss_mb": round1(rss_mb), "rss_anon_mb": round1(anon_mb), "rss_file_mb": round1(file_mb),
        "fds": fds, "threads": threads, "children": children,
        "index_bytes": index_bytes, "manifests": indexed(shared.addr),
        "routes": routes, "errors": window.errors, "faults": faults});
    eprintln!("  minute {minute}: {line}");
    shared.line(&line);
}

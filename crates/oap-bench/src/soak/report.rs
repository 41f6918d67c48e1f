//! The soak's verdict on leaks: medians of each daemon process's samples
//! per window, each process against itself once it warmed up and later
//! processes against the first at the same age.

use oap_bench::report::{SoakDrift, SoakLevels, SoakProcess};
use oap_testkit::stats::{nearest_rank, sorted};

use super::{Sample, DRIFT_LIMIT_PCT, SELF_SPAN_S, SETTLE_S, WINDOW_S};

pub(super) fn percentile(samples: &[f64], p: f64) -> f64 {
    nearest_rank(&sorted(samples.to_vec()), p).unwrap_or(f64::NAN)
}

pub(super) fn round1(x: f64) -> f64 {
    (x * 10.0).round() / 10.0
}

/// Median of `values`' finite entries.
pub(super) fn median(values: impl Iterator<Item = f64>) -> f64 {
    let values: Vec<f64> = values.filter(|v| v.is_finite()).collect();
    percentile(&values, 50.0)
}

/// Medians of one process's samples with `t` in `[from, to]`.
pub(super) fn levels(samples: &[&Sample], from: f64, to: f64) -> SoakLevels {
    let window: Vec<&&Sample> = samples
        .iter()
        .filter(|s| s.t >= from && s.t <= to)
        .collect();
    let of = |get: fn(&Sample) -> f64| median(window.iter().map(|s| get(s)));
    SoakLevels {
        rss_mb: round1(of(|s| s.rss_mb)),
        fds: of(|s| s.fds),
        threads: of(|s| s.threads),
        children: of(|s| s.children),
        data_files: of(|s| s.data_files),
        index_mb: (of(|s| s.index_mb) * 1000.0).round() / 1000.0,
    }
}

/// What may grow by chance and is no leak: counts of things a fault in
/// flight holds for seconds (a flood or a hang holds pipes, a socket and
/// a child; a chat holds a connection to Ollama), in absolute units, on
/// top of [`DRIFT_LIMIT_PCT`].
pub(super) struct Metric {
    name: &'static str,
    get: fn(&SoakLevels) -> f64,
    slack: f64,
}

impl Metric {
    const fn new(name: &'static str, get: fn(&SoakLevels) -> f64, slack: f64) -> Metric {
        Metric { name, get, slack }
    }
}

// Each metric once, with its slack, whichever lists judge it: open files
// are judged both per process and across processes, with the same slack.
const RSS_MB: Metric = Metric::new("RSS (MB)", |l| l.rss_mb, 0.0);
const OPEN_FILES: Metric = Metric::new("open files", |l| l.fds, 2.0);
const THREADS: Metric = Metric::new("threads", |l| l.threads, 2.0);
const TOOL_PROCESSES: Metric = Metric::new("tool processes", |l| l.children, 1.0);
const DATA_FILES: Metric = Metric::new("files in the data directory", |l| l.data_files, 1.0);
const INDEX_MB: Metric = Metric::new("index size (MB)", |l| l.index_mb, 0.0);

/// Judged per process, from its settle point to its end.
pub(super) const SELF_METRICS: &[Metric] = &[RSS_MB, OPEN_FILES, THREADS];

/// Judged across processes at the same age (the minute after each
/// settled): what a restart could leave behind for the next process.
/// Threads and RSS are not: each process's Tokio blocking pool keeps the
/// peak its own start-up reached, which differs from start to start.
pub(super) const ACROSS_METRICS: &[Metric] = &[OPEN_FILES, TOOL_PROCESSES, DATA_FILES, INDEX_MB];

/// Whether `to` is more than the allowed growth over `from`.
pub(super) fn grew(from: f64, to: f64, slack: f64) -> bool {
    from.is_finite()
        && to.is_finite()
        && to - from > (from.abs() * DRIFT_LIMIT_PCT / 100.0).max(slack)
}

/// Leaks, from the samples of every daemon process: each process against
/// itself (the minute after it settled vs its last minute, when it ran
/// [`SELF_SPAN_S`] after settling) and each later process against the first
/// at the same age (the minute after each settled). Returns the report
/// and the failures; `notes` says what could not be judged.
/// `warm_up_s`: how long after its start a process is first judged against
/// itself (one cycle of the soak's faults, so that the first rebuilds and
/// reload, which take the allocator to its working size, fall before it).
pub(super) fn drift(
    samples: &[Sample],
    warm_up_s: f64,
    notes: &mut Vec<String>,
) -> (SoakDrift, Vec<String>) {
    let mut pids: Vec<u32> = Vec::new();
    for sample in samples {
        if !pids.contains(&sample.pid) {
            pids.push(sample.pid);
        }
    }
    let mut processes = Vec::new();
    let mut failures = Vec::new();
    for pid in pids {
        let own: Vec<&Sample> = samples.iter().filter(|s| s.pid == pid).collect();
        let (Some(first), Some(last)) = (own.first(), own.last()) else {
            continue;
        };
        let (born, end) = (first.t, last.t);
        // Settled: a minute in, and no vectors pending from then on.
        let last_pending = own.iter().rposition(|s| s.pending > 0.0);
        let settled = own
            .iter()
            .enumerate()
            .find(|(i, s)| s.t >= born + SETTLE_S && last_pending.is_none_or(|p| *i > p))
            .map_or(f64::NAN, |(_, s)| s.t);
        let warm = own
            .iter()
            .map(|s| s.t)
            .find(|t| *t >= settled && *t >= born + warm_up_s)
            .unwrap_or(f64::NAN);
        let judged_self = warm.is_finite() && end - warm >= SELF_SPAN_S;
        let window = |from: f64| {
            if from.is_finite() {
                levels(&own, from, from + WINDOW_S)
            } else {
                SoakLevels::default()
            }
        };
        let (at_settle, at_warm) = (window(settled), window(warm));
        let at_end = levels(&own, end - WINDOW_S, end);
        if judged_self {
            for m in SELF_METRICS {
                let (a, b) = ((m.get)(&at_warm), (m.get)(&at_end));
                if grew(a, b, m.slack) {
                    failures.push(format!(
                        "process {pid} leaks: {} {a} -> {b} from the minute after it warmed up \
                         ({warm:.0} s) to its last ({end:.0} s), more than {DRIFT_LIMIT_PCT} % \
                         (or {} absolute)",
                        m.name, m.slack
                    ));
                }
            }
        }
        processes.push(SoakProcess {
            pid,
            born_s: round1(born),
            settled_s: round1(settled),
            end_s: round1(end),
            warm_s: round1(warm),
            judged_self,
            settled: at_settle,
            warm: at_warm,
            last: at_end,
        });
    }
    // At the same age: the minute after settling, for those that had it.
    let comparable: Vec<&SoakProcess> = processes
        .iter()
        .filter(|p| p.settled_s.is_finite() && p.end_s - p.settled_s >= WINDOW_S)
        .collect();
    if let Some((base, later)) = comparable.split_first() {
        for p in later {
            for m in ACROSS_METRICS {
                let (a, b) = ((m.get)(&base.settled), (m.get)(&p.settled));
                if grew(a, b, m.slack) {
                    failures.push(format!(
                        "a leak across restarts: {} {a} in process {} and {b} in process {} \
                         (each in the minute after it settled), more than {DRIFT_LIMIT_PCT} % \
                         (or {} absolute)",
                        m.name, base.pid, p.pid, m.slack
                    ));
                }
            }
        }
    }
    let selves = processes.iter().filter(|p| p.judged_self).count();
    let across = comparable.len().saturating_sub(1);
    if selves == 0 {
        notes.push(format!(
            "no daemon process ran {SELF_SPAN_S:.0} s after it warmed up ({warm_up_s:.0} s after \
             its start): growth within a process was not judged"
        ));
    }
    if across == 0 {
        notes.push("fewer than two settled daemon processes: no comparison across restarts".into());
    }
    (
        SoakDrift {
            basis: format!(
                "{selves} of {} processes against themselves (the minute after warming up, \
                 {warm_up_s:.0} s after start, vs their last), {across} later processes against \
                 the first at the same age",
                processes.len()
            ),
            judged: selves + across > 0,
            processes,
        },
        failures,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Samples every 10 s of one process living `from..to` seconds, with
    /// `at(t)` giving (rss MB, open files, threads, data files).
    fn life(pid: u32, from: f64, to: f64, at: impl Fn(f64) -> (f64, f64, f64, f64)) -> Vec<Sample> {
        let mut out = Vec::new();
        let mut t = from;
        while t < to {
            let (rss_mb, fds, threads, data_files) = at(t - from);
            out.push(Sample {
                t,
                pid,
                rss_mb,
                fds,
                threads,
                children: 0.0,
                data_files,
                index_mb: 7.5,
                pending: 0.0,
            });
            t += 10.0;
        }
        out
    }

    #[test]
    fn flat_processes_at_different_levels_pass() {
        // The one-hour run's shape: each process flat after its start-up,
        // at its own thread count (9, then 24), restarts in between.
        let mut samples = life(100, 0.0, 330.0, |_| (140.0, 15.0, 9.0, 3.0));
        samples.extend(life(200, 335.0, 900.0, |age| {
            (if age < 30.0 { 190.0 } else { 145.0 }, 17.0, 24.0, 3.0)
        }));
        let mut notes = Vec::new();
        let (drift, failures) = drift(&samples, SETTLE_S, &mut notes);
        assert!(failures.is_empty(), "{failures:?}");
        assert!(drift.judged);
        assert_eq!(drift.processes.len(), 2);
        assert!(drift.processes.iter().all(|p| p.judged_self));
    }

    #[test]
    fn a_process_whose_threads_climb_fails() {
        let samples = life(100, 0.0, 600.0, |age| (140.0, 15.0, 9.0 + age / 30.0, 3.0));
        let (_, failures) = drift(&samples, SETTLE_S, &mut Vec::new());
        assert_eq!(failures.len(), 1, "{failures:?}");
        assert!(failures[0].contains("threads"), "{failures:?}");
    }

    #[test]
    fn a_process_whose_memory_climbs_fails() {
        let samples = life(100, 0.0, 600.0, |age| (140.0 + age / 20.0, 15.0, 9.0, 3.0));
        let (_, failures) = drift(&samples, SETTLE_S, &mut Vec::new());
        assert!(failures.iter().any(|f| f.contains("RSS")), "{failures:?}");
    }

    #[test]
    fn files_left_behind_by_each_restart_fail_across_processes() {
        // Each process is flat, but each starts with more files in its data
        // directory and more open: what a leak across restarts looks like.
        let mut samples = Vec::new();
        for n in 0..3 {
            let from = n as f64 * 200.0;
            samples.extend(life(100 + n, from, from + 190.0, move |_| {
                (140.0, 15.0 + 3.0 * n as f64, 9.0, 3.0 + 3.0 * n as f64)
            }));
        }
        let mut notes = Vec::new();
        let (drift, failures) = drift(&samples, SETTLE_S, &mut notes);
        assert!(
            failures.iter().any(|f| f.contains("data directory")),
            "{failures:?}"
        );
        assert!(
            failures.iter().any(|f| f.contains("open files")),
            "{failures:?}"
        );
        // Too short-lived to judge themselves, said in the notes.
        assert!(drift.processes.iter().all(|p| !p.judged_self));
        assert!(notes.iter().any(|n| n.contains("not judged")), "{notes:?}");
    }

    #[test]
    fn a_step_in_the_first_cycle_is_warm_up_and_growth_after_it_a_leak() {
        // The one-hour run's first process stepped from 140 to 151 MB at
        // its first round of rebuilds and reload; its last process took the
        // same step (at minute 9 of its life) and stayed flat for 25
        // minutes after. Judged from one cycle (600 s) after its start: no
        // leak.
        let step = |age: f64| if age < 540.0 { 140.0 } else { 151.0 };
        let samples = life(100, 1540.0, 3600.0, |age| (step(age), 15.0, 9.0, 3.0));
        let (report, failures) = drift(&samples, 600.0, &mut Vec::new());
        assert!(failures.is_empty(), "{failures:?}");
        assert!(report.processes[0].judged_self);
        assert!(report.processes[0].warm_s >= 2140.0);
        // The same step judged from a minute after start is growth.
        let (_, failures) = drift(&samples, SETTLE_S, &mut Vec::new());
        assert!(failures.iter().any(|f| f.contains("RSS")), "{failures:?}");
        // And a process that keeps growing after its first cycle fails.
        let climbing = life(100, 1540.0, 3600.0, |age| {
            (141.0 + age / 120.0, 15.0, 9.0, 3.0)
        });
        let (_, failures) = drift(&climbing, 600.0, &mut Vec::new());
        assert!(failures.iter().any(|f| f.contains("RSS")), "{failures:?}");
    }

    #[test]
    fn a_process_is_judged_from_when_its_vectors_are_complete() {
        // Embedding in the background for 5 minutes (more memory, more
        // threads), then flat: no leak.
        let mut samples = life(100, 0.0, 900.0, |age| {
            if age < 300.0 {
                (300.0, 20.0, 30.0, 4.0)
            } else {
                (150.0, 15.0, 10.0, 3.0)
            }
        });
        for s in samples.iter_mut().filter(|s| s.t < 300.0) {
            s.pending = 1000.0 - s.t;
        }
        let (drift, failures) = drift(&samples, SETTLE_S, &mut Vec::new());
        assert!(failures.is_empty(), "{failures:?}");
        assert!(drift.processes[0].settled_s >= 300.0);
        assert!(drift.processes[0].judged_self);
    }
}

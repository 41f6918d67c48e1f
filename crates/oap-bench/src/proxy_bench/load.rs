//! One `proxy-load` run against one target, in this process, with oapd's
//! resident memory sampled meanwhile when asked.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use oap_bench::report::ProxyLoadReport;

use crate::proxy_load;

/// Where the load goes and whether discovery is switched off per request.
pub(super) struct Target {
    pub(super) label: &'static str,
    pub(super) addr: SocketAddr,
    no_discover: bool,
}

impl Target {
    pub(super) fn new(label: &'static str, addr: SocketAddr, no_discover: bool) -> Self {
        Self {
            label,
            addr,
            no_discover,
        }
    }
}

/// The load runs of one benchmark: the fake they all end at, the model,
/// and whether the table's header was printed yet.
pub(super) struct Load {
    fake: SocketAddr,
    model: &'static str,
    header_printed: bool,
}

impl Load {
    pub(super) fn new(fake: SocketAddr, model: &'static str) -> Self {
        Self {
            fake,
            model,
            header_printed: false,
        }
    }

    /// One run of at most `requests` timed requests or `seconds`; with
    /// `watch`, also the largest VmRSS of that process sampled every 50 ms.
    pub(super) fn run(
        &mut self,
        target: &Target,
        mode: &str,
        concurrency: usize,
        (requests, seconds): (usize, f64),
        watch: Option<u32>,
    ) -> anyhow::Result<(ProxyLoadReport, f64)> {
        // The fake records every request; forget them between runs.
        let _ = oap_testkit::http::exchange(
            self.fake,
            "DELETE",
            "/_fake/requests",
            "",
            Duration::from_secs(30),
        );
        let args = proxy_load::Args::for_run(proxy_load::Run {
            addr: target.addr,
            stream: mode == "stream",
            concurrency,
            requests,
            duration: Duration::from_secs_f64(seconds),
            model: self.model.to_string(),
            no_discover: target.no_discover,
            label: target.label.to_string(),
        })?;
        let sampler = watch.map(PeakSampler::start);
        let row = proxy_load::run(args)?;
        let peak = sampler.map_or(0.0, PeakSampler::stop);
        if !self.header_printed {
            eprintln!("{}", ProxyLoadReport::TABLE_HEADER);
            self.header_printed = true;
        }
        eprintln!("{}", row.table_row());
        if row.errors > 0 {
            eprintln!("(warning: {} reported {} errors)", target.label, row.errors);
        }
        Ok((row, peak))
    }
}

/// A thread reading a process's VmRSS every 50 ms, keeping the largest.
struct PeakSampler {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<f64>,
}

impl PeakSampler {
    fn start(pid: u32) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut peak: f64 = 0.0;
            while !flag.load(Ordering::Relaxed) {
                if let Ok((rss, _)) = oap_testkit::rss::rss_hwm_mb(pid) {
                    peak = peak.max(rss);
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            peak
        });
        Self { stop, thread }
    }

    /// The largest VmRSS seen (0 if none could be read).
    fn stop(self) -> f64 {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().unwrap_or(0.0)
    }
}

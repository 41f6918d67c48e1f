//! Queries in flight, so that background index work can step aside.
//!
//! Idle-class scheduling (`oap_embed::lower_current_thread_priority`) gives
//! a query the cores the moment it wants them, but not everything a rebuild
//! does is CPU time the scheduler can take back: a forward pass already
//! running keeps the caches and memory bus busy, and allocating, writing or
//! mapping a large file takes kernel locks a query's own page faults then
//! wait on. On a 2-core board that was what kept the discovery tail at
//! 1.6–1.7× its idle value during a 10k crawl (docs/BENCHMARKS.md,
//! "Crawler"). So a background rebuild also checks, between small units of
//! work, whether a query is running, and waits for it to finish first.
//!
//! A query takes milliseconds, so the waits are short; a bound on each wait
//! keeps a rebuild moving even when queries never stop.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// How long one unit of background work waits for running queries at most.
/// Under saturating load the rebuild then still gets a unit in per pause.
pub(crate) const MAX_PAUSE: Duration = Duration::from_millis(100);

/// How often a waiting rebuild looks again.
const POLL: Duration = Duration::from_millis(1);

/// Count of queries in flight.
#[derive(Debug, Default)]
pub(crate) struct QueryActivity {
    in_flight: AtomicUsize,
}

/// Marks one query as running until dropped.
#[derive(Debug)]
pub(crate) struct Running<'a>(&'a QueryActivity);

impl Drop for Running<'_> {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::Release);
    }
}

impl QueryActivity {
    /// Registers a query for as long as the returned guard lives.
    pub(crate) fn enter(&self) -> Running<'_> {
        self.in_flight.fetch_add(1, Ordering::Acquire);
        Running(self)
    }

    pub(crate) fn in_flight(&self) -> usize {
        self.in_flight.load(Ordering::Acquire)
    }

    /// Waits until no query runs, or `max_pause` has passed; returns how
    /// long it waited.
    pub(crate) fn yield_to_queries(&self, max_pause: Duration) -> Duration {
        let started = Instant::now();
        while self.in_flight() > 0 && started.elapsed() < max_pause {
            std::thread::sleep(POLL);
        }
        started.elapsed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rebuild_waits_while_a_query_runs_and_not_longer() {
        let activity = std::sync::Arc::new(QueryActivity::default());
        assert!(activity.yield_to_queries(MAX_PAUSE) < Duration::from_millis(5));

        let query = activity.enter();
        assert_eq!(activity.in_flight(), 1);
        let waiter = {
            let activity = std::sync::Arc::clone(&activity);
            std::thread::spawn(move || activity.yield_to_queries(Duration::from_secs(10)))
        };
        std::thread::sleep(Duration::from_millis(50));
        drop(query);
        let waited = waiter.join().unwrap();
        assert!(waited >= Duration::from_millis(45), "{waited:?}");
        assert!(waited < Duration::from_secs(5), "{waited:?}");
        assert_eq!(activity.in_flight(), 0);
    }

    #[test]
    fn a_query_that_never_ends_delays_a_rebuild_only_by_the_bound() {
        let activity = QueryActivity::default();
        let _stuck = activity.enter();
        let waited = activity.yield_to_queries(Duration::from_millis(30));
        assert!(waited >= Duration::from_millis(30), "{waited:?}");
        assert!(waited < Duration::from_secs(2), "{waited:?}");
    }
}

//! What a server sends unasked, counted instead of logged.
//!
//! A server may send log notifications, progress, list changes and stderr
//! lines as fast as it can write. None of that text reaches the log at info
//! or warn: each message only bumps a counter here (one atomic add, so a
//! flood costs the daemon little), the text itself goes to the content
//! target at debug. A ticker ([`watch`]) closes a window every
//! [`HubSettings::noise_window`]; a server that sent more than
//! [`HubSettings::noisy_messages`] in a window is *noisy* until a whole
//! window passes under that limit. Once a minute a server that was noisy
//! gets one summary line with its counts, so the log grows by at most one
//! line per server per minute whatever the server does.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use serde::Serialize;
use tokio::sync::watch as signal;
use tracing::{debug, info};

use crate::context::HubSettings;

/// Counts of what a server sent (and of the re-lists it caused).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Traffic {
    /// `notifications/message` (MCP log messages).
    pub log_messages: u64,
    /// `notifications/progress`.
    pub progress: u64,
    /// `notifications/tools/list_changed`.
    pub list_changed: u64,
    /// Every other notification (resources, prompts, cancellations, custom).
    pub other_notifications: u64,
    /// Lines a stdio server wrote to stderr.
    pub stderr_lines: u64,
    /// `tools/list` re-listings made after list changes (debounced).
    pub relists: u64,
}

impl Traffic {
    /// Messages the server sent (re-lists are the hub's, not counted).
    pub fn messages(&self) -> u64 {
        self.log_messages
            + self.progress
            + self.list_changed
            + self.other_notifications
            + self.stderr_lines
    }

    fn minus(&self, earlier: &Traffic) -> Traffic {
        Traffic {
            log_messages: self.log_messages.saturating_sub(earlier.log_messages),
            progress: self.progress.saturating_sub(earlier.progress),
            list_changed: self.list_changed.saturating_sub(earlier.list_changed),
            other_notifications: self
                .other_notifications
                .saturating_sub(earlier.other_notifications),
            stderr_lines: self.stderr_lines.saturating_sub(earlier.stderr_lines),
            relists: self.relists.saturating_sub(earlier.relists),
        }
    }

    fn plus(&self, other: &Traffic) -> Traffic {
        Traffic {
            log_messages: self.log_messages + other.log_messages,
            progress: self.progress + other.progress,
            list_changed: self.list_changed + other.list_changed,
            other_notifications: self.other_notifications + other.other_notifications,
            stderr_lines: self.stderr_lines + other.stderr_lines,
            relists: self.relists + other.relists,
        }
    }
}

/// What kind of message arrived.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    LogMessage,
    Progress,
    ListChanged,
    OtherNotification,
    StderrLine,
    Relist,
}

/// A server's counters: totals since it was configured, and the windows
/// the noisy flag and the minute summary are computed from.
#[derive(Debug, Default)]
pub(crate) struct Noise {
    log_messages: AtomicU64,
    progress: AtomicU64,
    list_changed: AtomicU64,
    other_notifications: AtomicU64,
    stderr_lines: AtomicU64,
    relists: AtomicU64,
    windows: Mutex<Windows>,
}

/// The closed windows of the last minute and the noisy state.
#[derive(Debug, Default)]
struct Windows {
    /// Totals when the current window opened.
    opened_at: Traffic,
    /// The last minute's closed windows, newest last.
    closed: VecDeque<Traffic>,
    /// Over the limit in the last closed window.
    noisy: bool,
    /// Noisy at any time since the last summary.
    noisy_since_summary: bool,
    /// Windows closed since the last summary.
    since_summary: usize,
}

/// What `/health` shows of a server's traffic.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct NoiseStatus {
    pub(crate) noisy: bool,
    pub(crate) last_minute: Traffic,
    pub(crate) total: Traffic,
}

impl Noise {
    /// Counts one message.
    pub(crate) fn record(&self, kind: Kind) {
        let counter = match kind {
            Kind::LogMessage => &self.log_messages,
            Kind::Progress => &self.progress,
            Kind::ListChanged => &self.list_changed,
            Kind::OtherNotification => &self.other_notifications,
            Kind::StderrLine => &self.stderr_lines,
            Kind::Relist => &self.relists,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    fn totals(&self) -> Traffic {
        Traffic {
            log_messages: self.log_messages.load(Ordering::Relaxed),
            progress: self.progress.load(Ordering::Relaxed),
            list_changed: self.list_changed.load(Ordering::Relaxed),
            other_notifications: self.other_notifications.load(Ordering::Relaxed),
            stderr_lines: self.stderr_lines.load(Ordering::Relaxed),
            relists: self.relists.load(Ordering::Relaxed),
        }
    }

    fn windows(&self) -> MutexGuard<'_, Windows> {
        self.windows.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The noisy flag and the counts: the last minute is the closed windows
    /// within it plus the open one. A server is noisy as soon as the open
    /// window is over the limit, not only once it closes.
    pub(crate) fn status(&self, settings: &HubSettings) -> NoiseStatus {
        let total = self.totals();
        let windows = self.windows();
        let open = total.minus(&windows.opened_at);
        let keep = windows_per_minute(settings).saturating_sub(1);
        let skip = windows.closed.len().saturating_sub(keep);
        let last_minute = windows
            .closed
            .iter()
            .skip(skip)
            .fold(open, |sum, w| sum.plus(w));
        NoiseStatus {
            noisy: windows.noisy || open.messages() > settings.noisy_messages,
            last_minute,
            total,
        }
    }

    /// Closes the open window: updates the noisy flag, and once a minute
    /// writes the summary of a server that was noisy in it.
    fn close_window(&self, server: &str, settings: &HubSettings) {
        let total = self.totals();
        let per_minute = windows_per_minute(settings);
        let mut windows = self.windows();
        let window = total.minus(&windows.opened_at);
        windows.opened_at = total;
        windows.closed.push_back(window);
        while windows.closed.len() > per_minute {
            windows.closed.pop_front();
        }
        windows.noisy = window.messages() > settings.noisy_messages;
        windows.noisy_since_summary |= windows.noisy;
        windows.since_summary += 1;
        if windows.since_summary < per_minute {
            return;
        }
        let minute = windows
            .closed
            .iter()
            .fold(Traffic::default(), |sum, w| sum.plus(w));
        let noisy = std::mem::take(&mut windows.noisy_since_summary);
        windows.since_summary = 0;
        let still_noisy = windows.noisy;
        drop(windows);
        if minute == Traffic::default() {
            return;
        }
        // The one line per server per minute; only counts, never the
        // server's text. A quiet server's counts are for debugging.
        if noisy {
            info!(
                server,
                noisy = still_noisy,
                "MCP server {server} sent {} log messages, {} list changes, {} progress \
                 notifications, {} other notifications and {} stderr lines in the last minute \
                 ({} tool re-lists)",
                minute.log_messages,
                minute.list_changed,
                minute.progress,
                minute.other_notifications,
                minute.stderr_lines,
                minute.relists
            );
        } else {
            debug!(server, ?minute, "MCP server traffic in the last minute");
        }
    }
}

fn windows_per_minute(settings: &HubSettings) -> usize {
    let window = settings.noise_window.max(Duration::from_millis(100));
    usize::try_from(Duration::from_secs(60).as_millis() / window.as_millis())
        .unwrap_or(1)
        .max(1)
}

/// Closes `noise`'s windows every [`HubSettings::noise_window`] until
/// `stop` is set (the server removed) or its sender is gone.
pub(crate) async fn watch(
    server: String,
    settings: HubSettings,
    noise: Arc<Noise>,
    mut stop: signal::Receiver<bool>,
) {
    let period = settings.noise_window.max(Duration::from_millis(100));
    let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = ticks.tick() => noise.close_window(&server, &settings),
            _ = stop.wait_for(|s| *s) => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> HubSettings {
        HubSettings {
            noise_window: Duration::from_secs(10),
            noisy_messages: 100,
            ..HubSettings::default()
        }
    }

    #[test]
    fn a_flood_is_noisy_at_once_and_calm_after_a_quiet_window() {
        let settings = settings();
        let noise = Noise::default();
        for _ in 0..101 {
            noise.record(Kind::LogMessage);
        }
        noise.record(Kind::ListChanged);
        let status = noise.status(&settings);
        assert!(status.noisy, "over the limit in the open window");
        assert_eq!(status.last_minute.log_messages, 101);
        assert_eq!(status.last_minute.list_changed, 1);
        noise.close_window("s", &settings);
        assert!(noise.status(&settings).noisy, "the closed window was over");
        noise.record(Kind::StderrLine);
        noise.close_window("s", &settings);
        let status = noise.status(&settings);
        assert!(!status.noisy, "a whole window under the limit clears it");
        assert_eq!(status.last_minute.stderr_lines, 1);
        assert_eq!(status.total.log_messages, 101);
    }

    #[test]
    fn the_last_minute_forgets_older_windows() {
        let settings = settings();
        let noise = Noise::default();
        noise.record(Kind::Progress);
        for _ in 0..6 {
            noise.close_window("s", &settings);
        }
        let status = noise.status(&settings);
        assert_eq!(status.last_minute.progress, 0);
        assert_eq!(status.total.progress, 1);
    }
}

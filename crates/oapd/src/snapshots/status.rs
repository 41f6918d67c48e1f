//! What `/health` and the status page say about the subscription: one
//! record per daemon (held by [`super::Snapshots`]; a reload's new puller
//! takes it over), `null` while no `snapshots.url` is set.

use std::sync::{Mutex, MutexGuard};

use serde::Serialize;

/// The subscription as `/health` shows it.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct SnapshotStatus {
    /// The subscribed URL.
    pub url: String,
    /// Version of the installed snapshot (`None`: none yet).
    pub version: Option<u64>,
    /// The encoder its vectors were made with.
    pub model: Option<String>,
    /// The key that signed it.
    pub key_id: Option<String>,
    /// When its builder made it (RFC 3339).
    pub created: Option<String>,
    /// When this board installed it (RFC 3339).
    pub installed_at: Option<String>,
    /// When the published directory was last asked (RFC 3339).
    pub last_check: Option<String>,
    /// Why the last check did not install anything, when it failed or
    /// refused a snapshot (cleared by an install or a 304).
    pub last_error: Option<String>,
    /// Short word of the last outcome (`installed`, `not_modified`, or the
    /// refusal's reason as `/metrics` counts it).
    pub last_outcome: Option<String>,
    /// Snapshots installed since start.
    pub pulls_ok: u64,
    /// Checks that failed or refused a snapshot since start.
    pub pulls_failed: u64,
    /// Tools the installed snapshot adds to this board's catalog (its
    /// network tools; `None`: none installed).
    pub tools: Option<usize>,
}

/// The subscription's status of one daemon.
#[derive(Debug, Default)]
pub struct StatusCell(Mutex<Option<SnapshotStatus>>);

impl StatusCell {
    fn lock(&self) -> MutexGuard<'_, Option<SnapshotStatus>> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The subscription's status, `None` without one.
    pub fn get(&self) -> Option<SnapshotStatus> {
        self.lock().clone()
    }

    /// No subscription (any more).
    pub(super) fn clear(&self) {
        *self.lock() = None;
    }

    /// Changes the status (made for `url` when there was none or another).
    pub(super) fn update(&self, url: &str, change: impl FnOnce(&mut SnapshotStatus)) {
        let mut guard = self.lock();
        let status = guard.get_or_insert_with(SnapshotStatus::default);
        if status.url != url {
            *status = SnapshotStatus {
                url: url.to_owned(),
                ..SnapshotStatus::default()
            };
        }
        change(status);
    }
}

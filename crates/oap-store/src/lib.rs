//! `oap-store`: the files the daemon keeps, written and read one way.
//!
//! A leaf crate (it depends on no other crate of the workspace), so the
//! index, the engine, the crawler and the daemon's state files all share
//! one implementation of each of these:
//!
//! - [`write_atomic`] / [`write_atomic_with`]: the durable atomic write.
//!   A temporary file in the same directory is written and fsynced, renamed
//!   over the target, and the directory is fsynced: a crash or `kill -9` at
//!   any moment leaves either the old or the new content, never a torn file,
//!   and never loses a rename that returned. A failed write leaves the old
//!   file as it was and removes its temporary file.
//! - [`read_capped`]: reads a regular file of at most a given size without
//!   ever holding more than that in memory, and without blocking on a FIFO
//!   or a device put where a file was expected.
//! - [`envelope`]: the crawler's store of fetched manifests, one envelope
//!   file per publishing host ([`RemoteDocument`]), written by the crawler
//!   and read by the discovery engine.
//! - [`Trust`]: how far a manifest is trusted, which both sides record.
//!
//! # Architecture
//!
//! The files the daemon keeps, written and read one way: `write_atomic` (temp
//! file in the same directory, fsync, rename, fsync of the directory),
//! `read_capped` (a regular file up to a cap, never a FIFO or device, never
//! more than the cap in memory), the crawler's envelope format
//! (`RemoteDocument`, one file per publishing host, its name the host reduced
//! to `[a-z0-9.-]` and at most 200 bytes, a hash ending a longer one) and
//! `Trust`.
//!
//! **Architecture Invariant.** This is the only atomic write in the workspace:
//! the index writer, the crawl schedule and envelopes and the bridge's state
//! files all use it, so a crash or `kill -9` at any moment leaves the old or
//! the new file, never a torn one, and a failed write removes its temporary
//! file. It depends on no other crate of the workspace.

mod atomic;
pub mod envelope;
mod error;
mod read;
mod trust;

pub use atomic::{write_atomic, write_atomic_with, TempName, Written};
pub use envelope::{
    envelope_name, envelope_paths, read_envelope, read_envelope_at, remove_envelope,
    write_envelope, RemoteDocument, MAX_ENVELOPE_BYTES,
};
pub use error::StoreError;
pub use read::read_capped;
pub use trust::Trust;

//! Structured logging via `tracing`; `RUST_LOG` overrides the configured level.

use std::io::IsTerminal;

use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::EnvFilter;

use crate::config::{LogConfig, LogFormat};

/// Prefix of oapd's own journald fields (`OAPD_MANIFESTS=13`), so they can
/// never clash with journald's trusted fields and are easy to filter on.
const JOURNAL_FIELD_PREFIX: &str = "OAPD";

/// Installs the global subscriber. Logs go to stderr, so stdout stays clean
/// for command output; under systemd (`log.format: journald`, or `text`
/// with stderr connected to the journal) they go to journald natively, with
/// every tracing field as a journal field.
pub fn init(config: &LogConfig) {
    let filter = || {
        EnvFilter::try_from_default_env()
            .unwrap_or_else(|_| EnvFilter::new(format!("{},hyper=warn", config.level)))
    };
    let journald_wanted = match config.format {
        LogFormat::Journald => true,
        LogFormat::Text => stderr_is_journal(),
        LogFormat::Json => false,
    };
    let mut journald_error = None;
    if journald_wanted {
        match tracing_journald::layer() {
            Ok(layer) => {
                let layer = layer.with_field_prefix(Some(JOURNAL_FIELD_PREFIX.to_owned()));
                // A second init (tests, embedding the library) is not an error worth failing on.
                let _ = tracing_subscriber::registry()
                    .with(filter())
                    .with(layer)
                    .try_init();
                return;
            }
            Err(err) => journald_error = Some(err),
        }
    }
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter())
        .with_writer(std::io::stderr)
        // Colour codes only for a person at a terminal, never in journald or files.
        .with_ansi(std::io::stderr().is_terminal());
    let _ = match config.format {
        LogFormat::Json => builder.json().try_init(),
        LogFormat::Text | LogFormat::Journald => builder.try_init(),
    };
    if let Some(err) = journald_error {
        tracing::warn!(error = %err, "journald is not reachable; logging to stderr");
    }
}

/// Whether stderr is the stream systemd connected to the journal: systemd
/// sets `JOURNAL_STREAM=<device>:<inode>` of that stream, and a child that
/// redirected stderr elsewhere keeps the variable but not the stream.
pub fn stderr_is_journal() -> bool {
    let Some(value) = std::env::var_os("JOURNAL_STREAM") else {
        return false;
    };
    let Some((device, inode)) = value.to_str().and_then(|v| v.split_once(':')) else {
        return false;
    };
    let (Ok(device), Ok(inode)) = (device.parse::<u64>(), inode.parse::<u64>()) else {
        return false;
    };
    use std::os::fd::AsFd;
    use std::os::unix::fs::MetadataExt;
    // fstat on a duplicate of fd 2 (a File closes only its duplicate).
    let stat = std::io::stderr()
        .as_fd()
        .try_clone_to_owned()
        .map(std::fs::File::from)
        .and_then(|file| file.metadata());
    match stat {
        Ok(stat) => stat.dev() == device && stat.ino() == inode,
        Err(_) => false,
    }
}

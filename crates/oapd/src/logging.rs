//! Structured logging via `tracing`; `RUST_LOG` overrides the configured level.

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

use crate::config::{LogConfig, LogFormat};

/// Installs the global subscriber. Logs go to stderr (journald captures it
/// under systemd), so stdout stays clean for command output.
pub fn init(config: &LogConfig) {
    let filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new(format!("{},hyper=warn", config.level)));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        // Colour codes only for a person at a terminal, never in journald or files.
        .with_ansi(std::io::stderr().is_terminal());
    // A second init (tests, embedding the library) is not an error worth failing on.
    let _ = match config.format {
        LogFormat::Json => builder.json().try_init(),
        LogFormat::Text => builder.try_init(),
    };
}

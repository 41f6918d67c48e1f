//! `oapd serve`: run the daemon on a multi-threaded runtime until it is told
//! to stop.

use std::path::PathBuf;

use anyhow::Context;

use crate::config::Config;

/// Serves until SIGINT or SIGTERM; `config_path` is re-read on SIGHUP.
pub fn run(config: Config, config_path: Option<PathBuf>) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let served = runtime.block_on(crate::server::run::lifecycle::serve(config, config_path));
    // Requests still running after the shutdown grace are cut here:
    // dropping their tasks kills their tool process groups. Blocking
    // work (an embedding batch) gets a moment, never a hang.
    runtime.shutdown_timeout(std::time::Duration::from_secs(2));
    served
}

//! `oapd validate-model`: check that an Ollama model calls tools correctly,
//! and record the verdict in the validation store.

use std::time::Duration;

use anyhow::Context;

use crate::config::Config;

/// `oapd validate-model`: runs the checks, prints the report, records the
/// verdict. Exit code 0 on pass, 1 on a failed check, 2 when no verdict
/// could be reached (Ollama down, model not installed); nothing is recorded then.
pub fn run(
    config: &Config,
    model: &str,
    full_suite: bool,
    timeout_secs: u64,
) -> anyhow::Result<std::process::ExitCode> {
    let check_timeout = Duration::from_secs(timeout_secs);
    let upstream = crate::server::run::start::upstream(
        config,
        check_timeout.min(Duration::from_secs(config.ollama.timeout)),
    )?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let outcome = runtime.block_on(oap_bridge::validation::validate(
        &upstream,
        model,
        full_suite,
        check_timeout,
    ));
    let record = match outcome {
        Ok(record) => record,
        Err(err) => {
            eprintln!("oapd: validate-model: no verdict: {err}");
            return Ok(std::process::ExitCode::from(2));
        }
    };
    print!("{}", oap_bridge::validation::render(&record));
    let store = oap_bridge::validation::ValidationStore::in_dir(&config.index.data_dir);
    let passed = record.passed;
    store
        .put(record)
        .with_context(|| format!("cannot record the verdict in {}", store.path().display()))?;
    println!("recorded in {}", store.path().display());
    Ok(if passed {
        std::process::ExitCode::SUCCESS
    } else {
        std::process::ExitCode::FAILURE
    })
}

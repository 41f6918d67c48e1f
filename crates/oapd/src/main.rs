//! `oapd`: OAP manifest discovery and tool bridge for local LLMs.
//!
//! The binary is thin: the command line, loading the config and setting up
//! logging live in the library (`oapd::cli`).

// Product code never panics on what it is given: errors are values.
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

fn main() -> std::process::ExitCode {
    oapd::cli::main()
}

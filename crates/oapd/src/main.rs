//! `oapd`: OAP manifest discovery and tool bridge for local LLMs.
//!
//! The binary is thin: the command line, loading the config and setting up
//! logging live in the library (`oapd::main`).

fn main() -> std::process::ExitCode {
    oapd::main()
}

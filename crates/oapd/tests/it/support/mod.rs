//! What oapd's tests share: the kit (`oap-testkit`) pointed at this
//! crate's binary, and manifests the tests install.

pub mod exposure;

use std::process::Command;

pub use oap_testkit::daemon::free_port;
pub use oap_testkit::model::{reference_manifest, require_model};
pub use oap_testkit::upstream::{fake, Upstream};
pub use oap_testkit::{send_raw, Daemon, DaemonBuilder, Response};

/// The binary under test.
pub const OAPD: &str = env!("CARGO_BIN_EXE_oapd");

/// A daemon of the binary under test, to configure and start.
pub fn daemon() -> DaemonBuilder {
    DaemonBuilder::new(OAPD)
}

/// The binary under test as a command, configured only by what the test
/// passes.
pub fn oapd() -> Command {
    oap_testkit::daemon::command(OAPD)
}

/// The argv that runs the binary under test (behind `OAPD_TEST_RUNNER`).
pub fn oapd_argv() -> Vec<std::ffi::OsString> {
    oap_testkit::daemon::argv(OAPD)
}

/// The last message of a chat request oapd sent upstream (after a tool
/// ran: its result).
pub fn last_message(request: &serde_json::Value) -> serde_json::Value {
    request["messages"]
        .as_array()
        .and_then(|messages| messages.last())
        .cloned()
        .unwrap_or_else(|| panic!("no messages in {request}"))
}

/// An operator manifest directory holding a `perl` stdio tool: a program
/// that can open sockets, start processes and sleep, for the tests that
/// need a tool to do what the bundled text tools cannot.
pub fn perl_manifest_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("perl.json"),
        serde_json::json!({
            "oap": "1.0",
            "name": "perl",
            "description": "Runs a Perl program given as command-line arguments.",
            "input": {"format": "text/plain", "description": "Perl arguments, e.g. -e CODE"},
            "output": {"format": "text/plain", "description": "what the program prints"},
            "invoke": {"method": "stdio", "url": "perl"}
        })
        .to_string(),
    )
    .unwrap();
    dir
}

/// A minimal valid stdio manifest (`true` as its program), as JSON text.
pub fn stdio_manifest(name: &str, description: &str) -> String {
    serde_json::json!({
        "oap": "1.0",
        "name": name,
        "description": description,
        "input": {"format": "text/plain", "description": "The text."},
        "output": {"format": "text/plain", "description": "The result."},
        "invoke": {"method": "stdio", "url": "true"}
    })
    .to_string()
}

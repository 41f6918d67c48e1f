//! A test server run as a child script that prints `PORT <n>` on its first
//! line once it listens (tests/mcp/echo_server.py does), killed on drop.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};

/// The running script; the child is killed and reaped on drop.
pub struct ScriptServer {
    child: Child,
    /// The loopback port it reported.
    pub port: u16,
    /// Where the PEM files of [`ScriptServer::start_tls`] live (removed on drop).
    _tls_dir: Option<tempfile::TempDir>,
}

impl ScriptServer {
    /// Runs `python script args…` and waits for its `PORT <n>` line.
    pub fn start(python: &str, script: &Path, args: &[&str]) -> ScriptServer {
        let mut child = Command::new(python)
            .arg(script)
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", script.display()));
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let port = line
            .trim()
            .strip_prefix("PORT ")
            .unwrap_or_else(|| panic!("{} printed {line:?}, not PORT <n>", script.display()))
            .parse()
            .unwrap();
        ScriptServer {
            child,
            port,
            _tls_dir: None,
        }
    }

    /// Runs `python script https CERT KEY` with a server certificate of
    /// `pki` (for 127.0.0.1) written to a temporary directory.
    #[cfg(feature = "tls")]
    pub fn start_tls(python: &str, script: &Path, pki: &crate::pki::Pki) -> ScriptServer {
        let dir = tempfile::tempdir().unwrap();
        let cert = dir.path().join("cert.pem");
        let key = dir.path().join("key.pem");
        std::fs::write(&cert, &pki.cert_pem).unwrap();
        std::fs::write(&key, &pki.key_pem).unwrap();
        let mut server = ScriptServer::start(
            python,
            script,
            &["https", cert.to_str().unwrap(), key.to_str().unwrap()],
        );
        server._tls_dir = Some(dir);
        server
    }
}

impl Drop for ScriptServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

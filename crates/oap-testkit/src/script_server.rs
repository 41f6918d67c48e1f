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
        // Its stderr goes to a file, read only when the script fails to
        // start: a server that dies before listening says why (in an
        // emulated guest there is no other way to see it).
        let stderr = tempfile::tempfile().unwrap();
        let mut child = Command::new(python)
            .arg(script)
            .args(args)
            .stdout(Stdio::piped())
            .stderr(stderr.try_clone().unwrap())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", script.display()));
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let Some(port) = line.trim().strip_prefix("PORT ") else {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "{} printed {line:?}, not PORT <n>; its stderr ended with:\n{}",
                script.display(),
                tail_of(stderr, 4096)
            );
        };
        let port = port.parse().unwrap();
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

/// The last `max` bytes of `file` (from its start), as text.
fn tail_of(mut file: std::fs::File, max: u64) -> String {
    use std::io::{Read, Seek, SeekFrom};
    let len = file.seek(SeekFrom::End(0)).unwrap_or(0);
    let _ = file.seek(SeekFrom::Start(len.saturating_sub(max)));
    let mut bytes = Vec::new();
    let _ = file.read_to_end(&mut bytes);
    String::from_utf8_lossy(&bytes).into_owned()
}

impl Drop for ScriptServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_script_that_dies_before_listening_says_why() {
        let dir = tempfile::tempdir().unwrap();
        let script = dir.path().join("dies.py");
        std::fs::write(
            &script,
            "import sys\nsys.stderr.write('ModuleNotFoundError: mcp\\n')\nsys.exit(3)\n",
        )
        .unwrap();
        let failed = std::panic::catch_unwind(|| ScriptServer::start("python3", &script, &[]));
        let panic = failed.err().expect("a script that exits must not start");
        let message = panic.downcast_ref::<String>().unwrap();
        assert!(message.contains("ModuleNotFoundError: mcp"), "{message}");
    }
}

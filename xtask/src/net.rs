//! Loopback HTTP helpers shared by the benchmark tasks (the test kit's).

use std::net::SocketAddr;
use std::time::Duration;

/// `METHOD path` with no body over a fresh connection (`Connection:
/// close`): the status and the body as text.
pub(crate) fn http(
    addr: SocketAddr,
    method: &str,
    path: &str,
    read_timeout: Duration,
) -> std::io::Result<(u16, String)> {
    oap_testkit::http::exchange(addr, method, path, "", read_timeout)
}

/// A free loopback port (bound and released; the caller binds it next).
pub(crate) fn free_port() -> anyhow::Result<u16> {
    Ok(oap_testkit::daemon::try_free_port()?)
}

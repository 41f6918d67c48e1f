//! Loopback HTTP helpers of the image tasks and their tests (the test kit's).

/// `METHOD path` with no body over a fresh connection (`Connection:
/// close`): the status and the body as text.
#[cfg(test)]
pub(crate) fn http(
    addr: std::net::SocketAddr,
    method: &str,
    path: &str,
    read_timeout: std::time::Duration,
) -> std::io::Result<(u16, String)> {
    oap_testkit::http::exchange(addr, method, path, "", read_timeout)
}

/// A free loopback port (bound and released; the caller binds it next).
pub(crate) fn free_port() -> anyhow::Result<u16> {
    Ok(oap_testkit::daemon::try_free_port()?)
}

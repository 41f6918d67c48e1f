//! What the two HTTP load generators share: their keep-alive connection,
//! argument checks, percentiles and error samples.

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::client::conn::http1;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

/// Timed requests when neither `--requests` nor `--duration` is given.
pub const DEFAULT_REQUESTS: usize = 500;

/// One HTTP/1.1 keep-alive connection.
pub type Sender = http1::SendRequest<Full<Bytes>>;

/// POSTs `body` as JSON to `path` on an open connection, waiting for the
/// connection to be ready; the response's head, body not yet read.
pub async fn post_json(
    sender: &mut Sender,
    addr: SocketAddr,
    path: &str,
    body: Bytes,
) -> Result<hyper::Response<hyper::body::Incoming>, String> {
    sender
        .ready()
        .await
        .map_err(|e| format!("connection: {e}"))?;
    let request = hyper::Request::builder()
        .method(hyper::Method::POST)
        .uri(path)
        .header("host", addr.to_string())
        .header("content-type", "application/json")
        .body(Full::new(body))
        .map_err(|e| e.to_string())?;
    sender
        .send_request(request)
        .await
        .map_err(|e| format!("request: {e}"))
}

/// Connects to `addr` (no Nagle delay); the connection task runs on the
/// current runtime.
pub async fn connect(addr: SocketAddr) -> Result<Sender, String> {
    let stream = TcpStream::connect(addr)
        .await
        .map_err(|e| format!("connect {addr}: {e}"))?;
    let _ = stream.set_nodelay(true);
    let (sender, connection) = http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| format!("handshake: {e}"))?;
    tokio::spawn(async move {
        let _ = connection.await;
    });
    Ok(sender)
}

/// A loopback socket address (these are benchmarks, not load-testing tools).
pub fn loopback(value: &str) -> Result<SocketAddr, String> {
    let addr: SocketAddr = value.parse().map_err(|e| format!("{e}"))?;
    if !addr.ip().is_loopback() {
        return Err(format!("{addr}: only loopback addresses are allowed"));
    }
    Ok(addr)
}

/// A positive, finite number of seconds.
pub fn positive_seconds(value: &str) -> Result<Duration, String> {
    let secs: f64 = value.parse().map_err(|e| format!("{e}"))?;
    if !(secs > 0.0 && secs.is_finite()) {
        return Err("must be a positive number of seconds".into());
    }
    Ok(Duration::from_secs_f64(secs))
}

/// Percentile `p` (0..1) of sorted samples, nearest rank; NaN for none.
pub fn pct(sorted: &[f64], p: f64) -> f64 {
    oap_testkit::stats::nearest_rank(sorted, p * 100.0).unwrap_or(f64::NAN)
}

/// Up to five distinct messages, in the order first seen.
pub fn error_samples(errors: &[String]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for err in errors {
        if out.len() == 5 {
            break;
        }
        if !out.contains(err) {
            out.push(err.clone());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    /// Every benchmark figure uses the test kit's one percentile
    /// definition, nearest rank: the median of 1..=10 is 5, not 6.
    #[test]
    fn percentiles_are_nearest_rank() {
        let samples: Vec<f64> = (1..=10).map(f64::from).collect();
        assert_eq!(super::pct(&samples, 0.5), 5.0);
        assert_eq!(super::pct(&samples, 0.95), 10.0);
        assert!(super::pct(&[], 0.5).is_nan());
    }
}

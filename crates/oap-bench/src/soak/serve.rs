//! The crawled side of the soak: manifest `i` served over loopback HTTPS for
//! `c<i>.soak.bench`, and the drip domain that sends its manifest one byte
//! every 500 ms.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use oap_testkit::pki::ServerConfig;
use oap_testkit::server::{serve_tls_raw, write_response};
use tokio::io::AsyncWriteExt;

use super::{DRIP, ZONE};

pub(super) fn domain(i: usize) -> String {
    format!("c{i:05}.{ZONE}")
}

/// Serves crawled manifest `i` for `c<i>.soak.bench`, the drip domain one
/// byte every 500 ms, 404 otherwise.
pub(super) async fn serve_manifests(
    listener: tokio::net::TcpListener,
    config: Arc<ServerConfig>,
    bodies: Arc<Vec<Vec<u8>>>,
    drips: Arc<AtomicUsize>,
) {
    serve_tls_raw(listener, config, move |mut tls, head| {
        let (bodies, drips) = (bodies.clone(), drips.clone());
        async move {
            if head.host == DRIP {
                drips.fetch_add(1, Ordering::SeqCst);
                let body = oap_testkit::manifest_web::manifest(
                    "dripfeed",
                    "A manifest served one byte at a time.",
                );
                let head = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
                    body.len()
                );
                let _ = tls.write_all(head.as_bytes()).await;
                for byte in body.as_bytes() {
                    if tls.write_all(&[*byte]).await.is_err() || tls.flush().await.is_err() {
                        return;
                    }
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
                return;
            }
            let index = head
                .host
                .strip_suffix(&format!(".{ZONE}"))
                .and_then(|name| name.strip_prefix('c')?.parse::<usize>().ok())
                .filter(|i| *i < bodies.len());
            match index {
                Some(i) => {
                    let headers = [("content-type", "application/json".to_string())];
                    write_response(&mut tls, "200 OK", &headers, &bodies[i]).await;
                }
                None => write_response(&mut tls, "404 Not Found", &[], b"").await,
            }
            let _ = tls.shutdown().await;
        }
    })
    .await
}

//! The transport to Ollama: plain TCP for `http://`, TLS (rustls with ring,
//! the compiled-in Mozilla roots plus the operator's `ollama.ca_file`) for
//! an Ollama behind an `https://` reverse proxy. The certificate must name
//! the host of `ollama.base_url`.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use hyper::Uri;
use hyper_util::client::legacy::connect::{Connected, Connection, HttpConnector};
use hyper_util::rt::TokioIo;
use rustls::pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;
use tokio_rustls::TlsConnector;

/// The error type of boxed bodies.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// TLS settings for an `https://` upstream.
#[derive(Clone)]
pub struct UpstreamTls {
    connector: TlsConnector,
    name: ServerName<'static>,
}

impl UpstreamTls {
    /// Trusts the Mozilla roots and `extra_roots_pem` (PEM certificates, a
    /// private CA) for `host`.
    pub fn new(host: &str, extra_roots_pem: Option<&[u8]>) -> Result<UpstreamTls, String> {
        use rustls::pki_types::pem::PemObject;
        use rustls::pki_types::CertificateDer;
        let mut roots = rustls::RootCertStore::empty();
        roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
        if let Some(pem) = extra_roots_pem {
            let mut added = 0;
            for cert in CertificateDer::pem_slice_iter(pem) {
                let cert = cert.map_err(|err| format!("not a PEM certificate: {err}"))?;
                roots
                    .add(cert)
                    .map_err(|err| format!("not a usable CA certificate: {err}"))?;
                added += 1;
            }
            if added == 0 {
                return Err("holds no PEM certificate".into());
            }
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|err| err.to_string())?
            .with_root_certificates(roots)
            .with_no_client_auth();
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        let bare = host.trim_start_matches('[').trim_end_matches(']');
        let name = ServerName::try_from(bare.to_string())
            .map_err(|err| format!("{host:?} is not a TLS server name: {err}"))?;
        Ok(UpstreamTls {
            connector: TlsConnector::from(Arc::new(config)),
            name,
        })
    }
}

/// Connects to Ollama, with TLS when the base URL is `https://`.
#[derive(Clone)]
pub struct UpstreamConnector {
    http: HttpConnector,
    tls: Option<UpstreamTls>,
}

impl UpstreamConnector {
    /// TCP with `http`'s settings, then TLS when `tls` is given.
    pub fn new(mut http: HttpConnector, tls: Option<UpstreamTls>) -> UpstreamConnector {
        // The scheme is checked when the upstream is built; here an
        // `https` URI only means "wrap the socket".
        http.enforce_http(false);
        UpstreamConnector { http, tls }
    }
}

impl tower_service::Service<Uri> for UpstreamConnector {
    type Response = TokioIo<UpstreamStream>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.http
            .poll_ready(cx)
            .map_err(|err| Box::new(err) as BoxError)
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        let connecting = self.http.call(uri);
        let tls = self.tls.clone();
        Box::pin(async move {
            let tcp = connecting.await?.into_inner();
            match tls {
                None => Ok(TokioIo::new(UpstreamStream::Plain(tcp))),
                Some(tls) => {
                    let stream = tls
                        .connector
                        .connect(tls.name.clone(), tcp)
                        .await
                        .map_err(|err| Box::new(TlsFailed(err)) as BoxError)?;
                    Ok(TokioIo::new(UpstreamStream::Tls(Box::new(stream))))
                }
            }
        })
    }
}

/// A failed TLS handshake, named as such in the client's error.
#[derive(Debug, thiserror::Error)]
#[error("TLS handshake failed: {0}")]
struct TlsFailed(io::Error);

/// A connection to Ollama, plain or TLS.
pub enum UpstreamStream {
    /// `http://`.
    Plain(TcpStream),
    /// `https://`.
    Tls(Box<TlsStream<TcpStream>>),
}

impl Connection for UpstreamStream {
    fn connected(&self) -> Connected {
        match self {
            UpstreamStream::Plain(tcp) => tcp.connected(),
            UpstreamStream::Tls(tls) => tls.get_ref().0.connected(),
        }
    }
}

impl AsyncRead for UpstreamStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            UpstreamStream::Plain(tcp) => Pin::new(tcp).poll_read(cx, buf),
            UpstreamStream::Tls(tls) => Pin::new(tls.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for UpstreamStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            UpstreamStream::Plain(tcp) => Pin::new(tcp).poll_write(cx, buf),
            UpstreamStream::Tls(tls) => Pin::new(tls.as_mut()).poll_write(cx, buf),
        }
    }

    // Vectored writes are what lets hyper send a request body's chunks as
    // they are (its "queue" strategy). A stream that does not say it
    // supports them gets every chunk copied into the connection's write
    // buffer, which then keeps the capacity of the largest body sent (a
    // 30 MB image) for as long as the pooled connection lives.
    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            UpstreamStream::Plain(tcp) => Pin::new(tcp).poll_write_vectored(cx, bufs),
            UpstreamStream::Tls(tls) => Pin::new(tls.as_mut()).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            UpstreamStream::Plain(tcp) => tcp.is_write_vectored(),
            UpstreamStream::Tls(tls) => tls.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            UpstreamStream::Plain(tcp) => Pin::new(tcp).poll_flush(cx),
            UpstreamStream::Tls(tls) => Pin::new(tls.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            UpstreamStream::Plain(tcp) => Pin::new(tcp).poll_shutdown(cx),
            UpstreamStream::Tls(tls) => Pin::new(tls.as_mut()).poll_shutdown(cx),
        }
    }
}

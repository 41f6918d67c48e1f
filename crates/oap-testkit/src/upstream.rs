//! The scripted fake Ollama on its own runtime (its tasks keep running in
//! the background while the test thread blocks on plain sockets).

/// A running fake Ollama and the runtime it runs on.
pub struct Upstream {
    /// The fake Ollama serving the script.
    pub fake: fake_ollama::FakeOllama,
    _runtime: tokio::runtime::Runtime,
}

/// Starts a fake Ollama with `script` on a runtime of its own.
pub fn fake(script: fake_ollama::Script) -> Upstream {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let fake = runtime
        .block_on(fake_ollama::FakeOllama::start(script))
        .expect("fake ollama");
    Upstream {
        fake,
        _runtime: runtime,
    }
}

/// A fake Ollama behind a TLS-terminating proxy on loopback, as an Ollama
/// behind a reverse proxy with HTTPS is reached.
#[cfg(feature = "tls")]
pub struct TlsUpstream {
    /// The fake Ollama itself (plain HTTP, on its own port).
    pub fake: fake_ollama::FakeOllama,
    /// Where the TLS side listens (127.0.0.1).
    pub tls_addr: std::net::SocketAddr,
    /// The CA that signed the proxy's certificate, PEM.
    pub ca_pem: String,
    _runtime: tokio::runtime::Runtime,
}

#[cfg(feature = "tls")]
impl TlsUpstream {
    /// `https://<name>:<port>` for the proxy, `name` one of the
    /// certificate's names that resolves to loopback (`localhost`, `127.0.0.1`).
    pub fn url(&self, name: &str) -> String {
        format!("https://{name}:{}", self.tls_addr.port())
    }
}

/// Starts a fake Ollama with `script` and, in front of it, a TLS
/// terminator whose certificate (from a fresh test CA) names `localhost`
/// and `127.0.0.1`; every accepted connection is decrypted and piped to
/// the fake.
#[cfg(feature = "tls")]
pub fn fake_behind_tls(script: fake_ollama::Script) -> TlsUpstream {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let pki = crate::pki::Pki::new(&["localhost", "127.0.0.1"]);
    let fake = runtime
        .block_on(fake_ollama::FakeOllama::start(script))
        .expect("fake ollama");
    let target = fake.addr();
    let acceptor = tokio_rustls::TlsAcceptor::from(pki.server.clone());
    let listener = runtime
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .unwrap();
    let tls_addr = listener.local_addr().unwrap();
    runtime.spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                // A client that refuses the certificate ends here.
                let Ok(mut tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let Ok(mut plain) = tokio::net::TcpStream::connect(target).await else {
                    return;
                };
                let _ = tokio::io::copy_bidirectional(&mut tls, &mut plain).await;
            });
        }
    });
    TlsUpstream {
        fake,
        tls_addr,
        ca_pem: pki.ca_pem,
        _runtime: runtime,
    }
}

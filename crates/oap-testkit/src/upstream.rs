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

//! What the crawler needs from the discovery engine.
//!
//! The crawler writes envelopes into the remote directory (`oap-store`);
//! the engine reads them. All the crawler asks of the engine beyond that is
//! how big the index is and to rebuild it after a change, so that is all
//! this trait holds: the crawler does not compile the engine (nor the
//! embedding model behind it). The adapter for the engine, [`EngineSink`],
//! is here behind the `engine` feature, which the daemon (and this crate's
//! end-to-end tests) turn on.

/// The index the crawler feeds.
pub trait CatalogSink: Send + Sync {
    /// Manifests in the index now; sizes the rebuild slices
    /// ([`crate::crawler::slice_len`]).
    fn indexed(&self) -> usize;

    /// Re-reads the sources (the remote directory among them) and rebuilds
    /// the index incrementally. Blocking and CPU-heavy: the crawler calls it
    /// off the async workers, and an implementation runs it at background
    /// priority so that queries go first. `Ok` carries the rebuild's report
    /// for [`crate::CrawlReport::rebuild`], `Err` why it failed (the old
    /// index keeps serving).
    fn rebuild(&self) -> Result<serde_json::Value, String>;
}

/// The discovery engine, as the crawler sees it (feature `engine`).
#[cfg(feature = "engine")]
pub struct EngineSink(pub std::sync::Arc<oap_discovery::Engine>);

#[cfg(feature = "engine")]
impl CatalogSink for EngineSink {
    fn indexed(&self) -> usize {
        self.0.stats().docs
    }

    fn rebuild(&self) -> Result<serde_json::Value, String> {
        // Background priority: queries go first (Engine::rebuild).
        let report = self.0.rebuild(false).map_err(|err| err.to_string())?;
        serde_json::to_value(report).map_err(|err| err.to_string())
    }
}

/// `engine` as the crawler's catalog sink (feature `engine`).
#[cfg(feature = "engine")]
pub fn engine_sink(
    engine: &std::sync::Arc<oap_discovery::Engine>,
) -> std::sync::Arc<dyn CatalogSink> {
    std::sync::Arc::new(EngineSink(std::sync::Arc::clone(engine)))
}

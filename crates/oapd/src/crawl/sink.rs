//! The crawler's view of the discovery engine: [`oap_crawl::CatalogSink`]
//! for [`Engine`], so that oap-crawl needs neither the engine nor the
//! embedding model behind it.

use std::sync::Arc;

use oap_crawl::CatalogSink;
use oap_discovery::Engine;

/// An engine, as the crawler sees it.
pub struct EngineSink(pub Arc<Engine>);

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

/// `engine` as the crawler's catalog sink.
pub fn sink(engine: &Arc<Engine>) -> Arc<dyn CatalogSink> {
    Arc::new(EngineSink(Arc::clone(engine)))
}

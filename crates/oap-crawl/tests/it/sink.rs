//! The real discovery engine as the crawler's catalog sink (the daemon's
//! adapter, `oapd::crawl::sink`, does the same).

use std::sync::Arc;

use oap_crawl::CatalogSink;
use oap_discovery::Engine;

struct EngineSink(Arc<Engine>);

impl CatalogSink for EngineSink {
    fn indexed(&self) -> usize {
        self.0.stats().docs
    }

    fn rebuild(&self) -> Result<serde_json::Value, String> {
        let report = self.0.rebuild(false).map_err(|err| err.to_string())?;
        serde_json::to_value(report).map_err(|err| err.to_string())
    }
}

/// `engine` as the crawler's catalog sink.
pub fn sink(engine: &Arc<Engine>) -> Arc<dyn CatalogSink> {
    Arc::new(EngineSink(Arc::clone(engine)))
}

//! What the crawler needs from the discovery engine.
//!
//! The crawler writes envelopes into the remote directory (`oap-store`);
//! the engine reads them. All the crawler asks of the engine beyond that is
//! how big the index is and to rebuild it after a change, so that is all
//! this trait holds: the crawler does not compile the engine (nor the
//! embedding model behind it), and the daemon implements the trait for its
//! engine with a few lines of adapter.

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

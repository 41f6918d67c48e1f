//! Discovery: from configured manifest sources to ranked capabilities.
//!
//! [`adapter`] maps query embeddings toward tool descriptions,
//! [`catalog`] loads and de-duplicates manifests, [`document`] decides what
//! is embedded and matched lexically, [`query`] separates a task's
//! instruction from its inline data (with [`spoken_numbers`] finding
//! arithmetic said in words), [`intents`] cuts a request with
//! several asks into them, [`query_cache`] keeps recent query
//! embeddings, [`requests`] checks the request rows given from outside a
//! manifest, [`scoring`] fuses dense and lexical scores, and [`engine`]
//! ties them to the memory-mapped index.

mod activity;
pub mod adapter;
pub mod catalog;
pub mod document;
pub mod engine;
pub mod intents;
pub mod query;
pub mod query_cache;
mod remote;
pub mod requests;
pub mod scoring;
pub mod spoken_numbers;

pub use adapter::{AdapterError, QueryAdapter};
pub use catalog::{
    mcp_id, Catalog, CatalogEntry, Collision, LoadProblem, McpBinding, McpToolDoc, McpTools,
    Origin, Source, Trust,
};
pub use engine::{
    BuildReport, Candidate, DiscoverError, Discovery, Engine, EngineConfig, EngineError,
    EngineStats, LastBuild, ManifestSummary, Priority, RebuildFailure, StoredRecord,
    DEFAULT_QUERY_CACHE,
};
pub use requests::{AppliesTo, RequestChain, RequestRows, RequestTable, RequestTableError};
pub use scoring::{Mode, ScoreParts, Scoring};

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
//!
//! # Architecture
//!
//! From sources to ranked capabilities.
//! - `catalog.rs`: loads the bundled set, operator directories and the
//!   crawler's envelopes (`Source::Remote`, ids `<host>/<slug>`; a signed
//!   snapshot's, same format, as `Source::Snapshot`, origin `snapshot`), skips and
//!   reports invalid or oversized files, resolves name collisions; `stdio`
//!   manifests and envelopes claiming local trust are refused for remote
//!   sources. `Source::Mcp` asks an `McpTools` (the daemon's MCP hub) for the
//!   configured MCP servers' tools at every load: each becomes `mcp/<server>/<tool>`
//!   with a manifest made for search and listings (`invoke.method: mcp`) and an
//!   `McpBinding` (server, tool, the `inputSchema` verbatim) that the stored
//!   record carries; the tool's content hash comes from the hub, so an
//!   unchanged tool keeps its vectors.
//! - `document.rs`: which texts of a manifest are embedded (rows: the
//!   description with its inputs, each example's description, at most 8
//!   and 300 bytes each, and its request rows, weight 0.7) and which
//!   weighted terms feed BM25 (request words at 0.1). A document scores as
//!   its best weighted row.
//! - `requests.rs`: request rows, what people say when they want a
//!   capability, given from outside its manifest through the `RequestRows`
//!   trait: `RequestTable` (the bundled tools' shipped requests, a bench's
//!   stand-in file), `RequestChain` (shipped first, then the daemon's
//!   generated ones). **Architecture Invariant:** a request row is data:
//!   one line, no control characters, at most 8 of 200 bytes, attached at
//!   every catalog load and part of the fingerprint, never shown as the
//!   tool's text nor offered to a model.
//! - `spoken_numbers.rs`: arithmetic said in words ("fifteen percent of
//!   eighty"), bounded in work; `query.rs` cuts it out of both views and
//!   describes it by its shape, like inline data.
//! - `query.rs`: separates a task's instruction from its inline data and
//!   describes the data's shape instead of embedding it; can drop leading
//!   filler ("hey", "could you please") and put a fixed phrase before the
//!   embedded text only ("I need a tool to …"), both off by default (the
//!   first did not help on the tuning data, the second lowered an evaluation
//!   half).
//! - `intents.rs`: cuts a request with several asks ("… and then set a
//!   timer") where a new ask plainly starts (a connective before an
//!   imperative verb or question word, or a sentence that opens with one);
//!   the engine embeds the asks in one batch with the request, and `rank`
//!   ranks the request and each ask, then `merge` gives each ask's best tool
//!   a slot after the whole request's best when it fits its ask
//!   (`QueryOptions::split_asks`, on). `oap-bench retrieval` calls the same
//!   `rank`, so its figures are the engine's.
//!   **Architecture Invariant:** with one ask the ranking is exactly the
//!   request's own; with several, the first slot is the request's best unless
//!   it does not fit and an ask's best does, and every listed candidate
//!   carries the scores of the text it was ranked for, so "fits" means the
//!   same in the bridge as in the ranking.
//! - `adapter.rs`: an optional linear map of query vectors only,
//!   `normalise(q + U Vᵀ q)`, read from an `.oqa` file
//!   (`EngineConfig::query_adapter`; none is shipped or on by default: the
//!   ones trained so far rank unseen tools worse). Documents never pass
//!   through it, so it is not part of the index fingerprint.
//!   **Architecture Invariant:** an adapter is applied only to vectors of the
//!   model it was trained for (the model id's sha256 prefix and dimension);
//!   `Engine::open` drops a mismatched one with a warning.
//! - `scoring.rs`: fuses the cosine with the BM25 evidence; per-mode
//!   thresholds decide "no fitting capability". **Architecture Invariant:**
//!   each candidate's reported `score` is `Scoring::decision_score` and
//!   `meta.threshold` is `Scoring::decision_threshold`, so `fits` ⇔ `score >=
//!   threshold` and `match` is the first candidate when it fits; candidates
//!   are ranked by `scores.fused`. The thresholds are compared with a score of the
//!   best candidate alone (in hybrid mode its cosine plus capped word
//!   evidence whose idf is relative to a word found in one document, without
//!   length normalisation), never with the rest of the catalog: manifests
//!   that share none of the query's words do not change the decision.
//! - `query_cache.rs`: the embeddings of recent query texts (keyed by the
//!   exact text embedded, bounded in entries and bytes, least recently used
//!   out, sharded mutexes held only around the map), so a repeated query
//!   skips the encoder (`discovery.query_cache`, 0 disables).
//! - `engine.rs`: builds/opens the index and answers queries; `activity.rs`
//!   counts queries in flight so a background rebuild waits for them between
//!   its steps (at most 100 ms per step).
//!
//! **Architecture Invariant.** Loading never fails as a whole: one bad file is
//! one `LoadProblem`. No parsed document can become an MCP server's tool:
//! `invoke.method: mcp` is not OAP and `parse` refuses it, so only
//! `Source::Mcp` makes records with an `McpBinding`, and only such a record is
//! ever sent to an MCP server. This crate knows nothing of MCP transports. The first source wins a collision (operator directories
//! in configured order, then the bundled set; within a directory, file names
//! in byte order). The index is rebuilt only when the catalog fingerprint
//! (ids, content hashes, origins, trust, model id, dtype, recipe version)
//! changes, and a rebuild reuses the vectors of unchanged texts (keys are
//! `sha256(model id, text)`), read straight from the old mapping. Readers
//! never block: the mapped index sits behind an `ArcSwap`; a failed rebuild
//! leaves the old snapshot serving and is remembered
//! (`Engine::rebuild_failure`) until one succeeds; how the last build ended,
//! either way, is `Engine::last_build`. A build keeps the catalog
//! and the texts it must embed, not the index: each manifest's record, rows
//! and terms go to the stream writer one at a time. The catalog itself holds
//! each validated manifest as compact JSON, decoded when the build reaches it
//! (the parsed form was a 10,000-manifest rebuild's largest allocation). `Engine::rebuild` (crawler,
//! directory watch) runs at background priority and steps aside for queries;
//! start-up and `oapd index` build at foreground priority with every core.
//! A start that would embed more than `EngineConfig::start_embed_limit` texts
//! (the daemon sets `index.start_embed_limit`, default 128; `oapd index` and
//! the benchmarks set none) writes the index without the missing vectors,
//! keeping every vector still valid, and its meta counts the texts pending
//! (`pending_texts`); while any are pending, queries run lexically with the
//! lexical threshold, `Engine::mode` says so, and the next rebuild embeds
//! them (in the background, writing what it has every 60 s, so a crash
//! resumes from there; an `Engine::retire`d engine, which a reload
//! replaced, stops at its next step). A start that finds such a file with
//! the same fingerprint maps it as it is and leaves the rest to the same
//! background rebuild. While vectors are pending, a rebuild that finds the
//! catalog changed (directory watch, crawl, MCP tools) first serves the new
//! catalog lexically (one index write, no embedding) and only then embeds,
//! and a background embedding steps aside for a rebuild waiting on the build
//! lock, or for a newer catalog announced with `Engine::note_newer_catalog`,
//! without waiting for its batch in flight (the batch runs on a thread
//! of its own and is dropped; the rebuild writes what it has and the waiting
//! one carries on from that file): a change shows at once, not after an hour
//! of idle-class embedding on a small board, nor after one batch that a busy
//! CPU starves. A hybrid index never steps aside (that would publish missing
//! vectors). Only the embedding runs in the idle class: a background
//! rebuild's catalog parse and index write (about a second at 2,000
//! manifests) run at normal priority, the write pausing for running queries,
//! so a changed catalog is served while Ollama or anything else keeps the
//! cores busy (at idle class or nice 10 a busy CPU held a removal back for
//! over a minute). Index writes in one process
//! take a lock, so the old
//! and new generations around a reload never share the writer's temporary
//! files.
//! Unhealthy crawled manifests stay indexed and listed with the reason but are
//! left out of results, and discovery widens its ranking to fill `top_k` past
//! them. Without a model the engine serves lexical results and says so; it
//! never pretends to be hybrid.
//!
//! **API Boundary.** `Engine` (`open`, `discover`, `rebuild`, `snapshot`),
//! `Source`, `EngineConfig`, `BuildReport`. The engine sees the model only as
//! `Arc<dyn oap_embed::Embedder>`.

mod activity;
pub mod adapter;
pub mod catalog;
pub mod document;
pub mod engine;
mod entry;
pub mod intents;
pub mod query;
pub mod query_cache;
mod remote;
pub mod requests;
pub mod scoring;
pub mod spoken_numbers;

pub use adapter::{AdapterError, QueryAdapter};
pub use catalog::{
    mcp_id, Catalog, CatalogEntry, Collision, DirManifests, LoadProblem, McpBinding, McpToolDoc,
    McpTools, Origin, Source, Trust,
};
pub use engine::{
    BuildReport, Candidate, DiscoverError, Discovery, Engine, EngineConfig, EngineError,
    EngineStats, LastBuild, ManifestSummary, Priority, RebuildFailure, StoredRecord,
    DEFAULT_QUERY_CACHE,
};
pub use requests::{AppliesTo, RequestChain, RequestRows, RequestTable, RequestTableError};
pub use scoring::{Mode, ScoreParts, Scoring};

//! The options of `oap-bench retrieval`, and the request-row files that it
//! and `oap-bench relevance` give the engine.

use std::path::PathBuf;
use std::sync::Arc;

use oap_discovery::{
    AppliesTo, Catalog, CatalogEntry, EngineConfig, RequestChain, RequestRows, RequestTable, Source,
};

/// Recall@k, MRR and abstention of the three retrieval modes.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The labelled task set (JSONL: `id`, `query`, `expected`).
    #[arg(long)]
    pub(crate) tasks: PathBuf,
    /// Manifest directories (at least one).
    #[arg(long = "dir", required = true)]
    pub(crate) dirs: Vec<PathBuf>,
    /// The embedding model directory.
    #[arg(long, default_value = "models/all-MiniLM-L6-v2")]
    pub(crate) model: PathBuf,
    /// Score `name#k` manifests by their base name (BFCL corpus).
    #[arg(long)]
    pub(crate) base_names: bool,
    /// Vector type of the index.
    #[arg(long, value_parser = ["f32", "i8"], default_value = "f32")]
    pub(crate) dtype: String,
    /// List the tasks hybrid misses at 3.
    #[arg(long)]
    pub(crate) misses: bool,
    /// Which rows are embedded (default: the engine's).
    #[arg(long, value_parser = ["desc", "desc+examples", "all"])]
    pub(crate) rows: Option<String>,
    /// Leave the input parameters out of the description row.
    #[arg(long = "no-inputs-row")]
    pub(crate) no_inputs: bool,
    /// Demotion of near variants (a cosine above 1 turns it off).
    #[arg(long)]
    pub(crate) variant_similarity: Option<f32>,
    /// Demotion of near duplicates (a cosine above 1 turns it off).
    #[arg(long)]
    pub(crate) duplicate_similarity: Option<f32>,
    /// Hybrid weight(s); with several, one hybrid row per weight.
    #[arg(long = "lexical-weight", value_delimiter = ',')]
    pub(crate) lexical_weights: Vec<f32>,
    /// Leave the data-shape words out of the embedded text.
    #[arg(long)]
    pub(crate) no_hint: bool,
    /// Leave the data-shape words out of the lexical text.
    #[arg(long)]
    pub(crate) no_lexical_hint: bool,
    /// Negatives known to conflict with the corpus, reported apart.
    #[arg(long, value_delimiter = ',')]
    pub(crate) soft_negatives: Vec<String>,
    /// Positives and negatives rejected per threshold.
    #[arg(long)]
    pub(crate) curve: bool,
    /// Reuse embeddings across runs through this file.
    #[arg(long)]
    pub(crate) embed_cache: Option<PathBuf>,
    /// Per task, the top 32 hybrid candidates with their score parts, as
    /// JSON lines.
    #[arg(long)]
    pub(crate) dump: Option<PathBuf>,
    /// Only the tasks of this split (`tuning` or `evaluation`; tasks
    /// without a `split` field are left out).
    #[arg(long)]
    pub(crate) split: Option<String>,
    /// Drop leading filler ("hey", "could you please") from the query.
    #[arg(long)]
    pub(crate) strip_filler: bool,
    /// Rank every request as one text, also in the default row.
    #[arg(long)]
    pub(crate) no_split_asks: bool,
    /// Put these words before the embedded query text (not the lexical
    /// one) in the default row; adds a "Hybrid (no prefix)" row.
    #[arg(long)]
    pub(crate) dense_prefix: Option<String>,
    /// The default row's "no fitting capability" threshold (hybrid and
    /// dense), as the daemon's `discovery.min_score` sets it.
    #[arg(long)]
    pub(crate) min_score: Option<f32>,
    /// Load the model without the compiled-in tool-retrieval tuning (the
    /// daemon's `embedding.tool_tuning: false`), with its thresholds; by
    /// default it is merged, as the daemon does.
    #[arg(long)]
    pub(crate) plain_model: bool,
    /// Also rank with the query adapter in this file.
    #[arg(long)]
    pub(crate) adapter: Option<PathBuf>,
    /// Document row vectors and query vectors, as JSON lines.
    #[arg(long)]
    pub(crate) dump_vectors: Option<PathBuf>,
    /// How words become lexical terms, in the index and the queries:
    /// `snowball` (the engine's default) or `light` (the previous default).
    #[arg(long, default_value = "snowball")]
    pub(crate) stemmer: oap_index::Stemmer,
    #[command(flatten)]
    pub(crate) requests: RequestArgs,
}

/// Request rows given to the engine from files (`oap-bench retrieval` and
/// `oap-bench relevance`).
#[derive(clap::Args, Debug)]
pub(crate) struct RequestArgs {
    /// Request rows (JSON: manifest name → requests), attached by manifest
    /// name whatever the origin; repeatable, earlier files first.
    #[arg(long = "request-rows")]
    pub(crate) files: Vec<PathBuf>,
    /// The request rows' weight (default: the engine's).
    #[arg(long)]
    pub(crate) request_weight: Option<f32>,
    /// The weight of request words among the BM25 terms (default: the
    /// engine's).
    #[arg(long)]
    pub(crate) request_terms: Option<f32>,
}

impl RequestArgs {
    /// The request rows of the files, earlier files first; `None` without
    /// any.
    pub(crate) fn provider(&self) -> anyhow::Result<Option<Arc<dyn RequestRows>>> {
        if self.files.is_empty() {
            return Ok(None);
        }
        let mut chain = RequestChain::new();
        for file in &self.files {
            chain = chain.then(Arc::new(RequestTable::load(file, AppliesTo::AnyOrigin)?));
        }
        Ok(Some(Arc::new(chain)))
    }

    /// Sets `provider` and the request weights in `config`.
    pub(crate) fn configure(
        &self,
        config: &mut EngineConfig,
        provider: Option<&Arc<dyn RequestRows>>,
    ) {
        if let Some(weight) = self.request_weight {
            config.row_weights.request = weight;
        }
        if let Some(weight) = self.request_terms {
            config.row_weights.request_terms = weight;
        }
        config.request_rows = provider.cloned();
    }
}

/// How many manifests of `sources` get request rows from `provider`, and
/// how many rows: said on stderr, so that a file whose names match nothing
/// does not pass for a measured change.
pub(crate) fn with_request_rows(provider: &dyn RequestRows, sources: &[Source]) -> (usize, usize) {
    let mut catalog = Catalog::load(sources);
    catalog.attach_requests(provider);
    let with_rows: Vec<&CatalogEntry> = catalog
        .entries
        .iter()
        .filter(|e| !e.requests.is_empty())
        .collect();
    (
        with_rows.len(),
        with_rows.iter().map(|e| e.requests.len()).sum(),
    )
}

//! One struct per measuring subcommand: what it writes as JSON.

use serde::{Deserialize, Deserializer, Serialize};

/// serde_json writes NaN as `null`; this reads it back as NaN.
fn nan_if_null<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    Ok(Option::<f64>::deserialize(d)?.unwrap_or(f64::NAN))
}

/// A missing number read as NaN (fields added to a report later).
fn nan() -> f64 {
    f64::NAN
}

/// `oap-bench embed`: the embedding model's load time, query latency and
/// batch throughput, as the daemon would see them.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct EmbedReport {
    /// The model directory measured.
    pub model_dir: String,
    /// `--threads` (None: the library's default).
    pub threads: Option<usize>,
    /// `RAYON_NUM_THREADS` in the environment, if set.
    pub rayon_num_threads: Option<String>,
    /// The model's id and vector length.
    pub model_id: String,
    /// Vector length.
    pub dim: usize,
    /// Three loads (read + parse + hash on a 2nd thread): the first in a
    /// fresh process, then two reloads.
    pub load_ms: Vec<f64>,
    /// Size of the three model files.
    pub model_files_mb: f64,
    /// Reading them (page cache warm).
    #[serde(deserialize_with = "nan_if_null")]
    pub read_ms: f64,
    /// sha256 over them.
    #[serde(deserialize_with = "nan_if_null")]
    pub hash_ms: f64,
    /// One query of ~10 tokens, `runs` times after 10 warm-up calls.
    pub single_query: Latency,
    /// 256 texts of 8-80 words in one `embed` call.
    pub batch: BatchRate,
    /// 32 texts of 12 words (~16 tokens), best of 5 calls.
    pub short_batch: BatchRate,
    /// VmRSS right after the first load.
    pub rss_after_first_load_mb: Option<f64>,
    /// VmRSS and VmHWM at the end.
    pub rss_end_mb: Option<f64>,
    /// Peak VmRSS of the process (VmHWM) at the end.
    pub rss_peak_mb: Option<f64>,
}

/// Latency percentiles of repeated calls.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Latency {
    /// Timed calls.
    pub runs: usize,
    /// Median.
    #[serde(deserialize_with = "nan_if_null")]
    pub p50_ms: f64,
    /// 99th percentile.
    #[serde(deserialize_with = "nan_if_null")]
    pub p99_ms: f64,
    /// Fastest.
    #[serde(deserialize_with = "nan_if_null")]
    pub min_ms: f64,
    /// Slowest.
    #[serde(deserialize_with = "nan_if_null")]
    pub max_ms: f64,
}

/// A batch embedding's throughput.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BatchRate {
    /// Texts in the batch.
    pub texts: usize,
    /// The model's batch size.
    pub batch_size: usize,
    /// Wall time of the (best) call.
    #[serde(deserialize_with = "nan_if_null")]
    pub elapsed_ms: f64,
    /// Texts per second.
    #[serde(deserialize_with = "nan_if_null")]
    pub texts_per_s: f64,
}

/// `oap-bench search`: dense and BM25 search over synthetic indexes.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SearchReport {
    /// Vector length.
    pub dim: usize,
    /// Hits asked for.
    pub k: usize,
    /// Timed queries per figure.
    pub queries: usize,
    /// The index's default search threads.
    pub threads: usize,
    /// Whether simsimd picks its kernels at run time.
    pub simsimd_dynamic_dispatch: bool,
    /// One row per size and vector type.
    pub rows: Vec<SearchRow>,
}

/// One index size and vector type.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SearchRow {
    /// Documents (one vector row each).
    pub rows: usize,
    /// `F32` or `I8`.
    pub dtype: String,
    /// Index file size.
    pub file_mb: f64,
    /// File bytes per row.
    pub bytes_per_row: f64,
    /// Building the rows in memory.
    pub build_s: f64,
    /// Writing the file.
    pub write_s: f64,
    /// Opening it (full validation).
    pub open_ms: f64,
    /// `dense_search(k)`, default threads.
    pub dense_p50_ms: f64,
    /// Same, 99th percentile.
    pub dense_p99_ms: f64,
    /// `dense_search(k)` on one thread.
    pub dense_one_thread_p50_ms: f64,
    /// `lexical_search(k)` (BM25).
    pub lexical_p50_ms: f64,
    /// Same, 99th percentile.
    pub lexical_p99_ms: f64,
}

/// `oap-bench discover-load`: `POST /v1/discover` under load.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DiscoverLoadReport {
    /// `--label`.
    pub label: String,
    /// Workers, one keep-alive connection each.
    pub concurrency: usize,
    /// Timed requests sent (answered or not).
    pub requests: usize,
    /// Requests that failed or timed out.
    pub errors: usize,
    /// Client-side latency percentiles and maximum.
    #[serde(deserialize_with = "nan_if_null")]
    pub p50_ms: f64,
    /// 90th percentile.
    #[serde(deserialize_with = "nan_if_null")]
    pub p90_ms: f64,
    /// 99th percentile.
    #[serde(deserialize_with = "nan_if_null")]
    pub p99_ms: f64,
    /// Slowest.
    #[serde(deserialize_with = "nan_if_null")]
    pub max_ms: f64,
    /// Answered requests per second of wall time.
    #[serde(deserialize_with = "nan_if_null")]
    pub requests_per_s: f64,
    /// Medians of the daemon's own `meta.total_ms`, `embed_ms`, `search_ms`.
    #[serde(deserialize_with = "nan_if_null")]
    pub server_total_p50_ms: f64,
    /// `meta.embed_ms` median.
    #[serde(deserialize_with = "nan_if_null")]
    pub server_embed_p50_ms: f64,
    /// `meta.search_ms` median.
    #[serde(deserialize_with = "nan_if_null")]
    pub server_search_p50_ms: f64,
    /// Up to five distinct error messages.
    pub error_samples: Vec<String>,
}

impl DiscoverLoadReport {
    /// The markdown table header matching [`Self::table_row`].
    pub const TABLE_HEADER: &'static str = "| run | concurrency | requests | errors | p50 ms | \
        p90 ms | p99 ms | max ms | req/s | server total p50 ms | embed p50 ms | search p50 ms |\n\
        |---|---|---|---|---|---|---|---|---|---|---|---|";

    /// This run as one markdown table row.
    pub fn table_row(&self) -> String {
        format!(
            "| {} | {} | {} | {} | {:.2} | {:.2} | {:.2} | {:.2} | {:.1} | {:.2} | {:.2} | {:.2} |",
            self.label,
            self.concurrency,
            self.requests,
            self.errors,
            self.p50_ms,
            self.p90_ms,
            self.p99_ms,
            self.max_ms,
            self.requests_per_s,
            self.server_total_p50_ms,
            self.server_embed_p50_ms,
            self.server_search_p50_ms,
        )
    }
}

/// `oap-bench proxy-load`: `POST /api/chat` under load.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ProxyLoadReport {
    /// `--label`.
    pub label: String,
    /// `chat` (whole answer) or `stream` (NDJSON).
    pub mode: String,
    /// Workers, one keep-alive connection each.
    pub concurrency: usize,
    /// Timed requests sent (answered or not).
    pub requests: usize,
    /// Requests that failed or timed out.
    pub errors: usize,
    /// Latency of the whole answer.
    #[serde(deserialize_with = "nan_if_null")]
    pub p50_ms: f64,
    /// 99th percentile.
    #[serde(deserialize_with = "nan_if_null")]
    pub p99_ms: f64,
    /// Slowest.
    #[serde(deserialize_with = "nan_if_null")]
    pub max_ms: f64,
    /// Latency of the first line of the answer.
    #[serde(deserialize_with = "nan_if_null")]
    pub first_line_p50_ms: f64,
    /// 99th percentile.
    #[serde(deserialize_with = "nan_if_null")]
    pub first_line_p99_ms: f64,
    /// Answered requests per second of wall time.
    #[serde(deserialize_with = "nan_if_null")]
    pub requests_per_s: f64,
    /// Up to five distinct error messages.
    pub error_samples: Vec<String>,
}

impl ProxyLoadReport {
    /// The markdown table header matching [`Self::table_row`].
    pub const TABLE_HEADER: &'static str = "| run | mode | concurrency | requests | errors | \
        p50 ms | p99 ms | max ms | first line p50 ms | first line p99 ms | req/s |\n\
        |---|---|---|---|---|---|---|---|---|---|---|";

    /// This run as one markdown table row.
    pub fn table_row(&self) -> String {
        format!(
            "| {} | {} | {} | {} | {} | {:.3} | {:.3} | {:.3} | {:.3} | {:.3} | {:.1} |",
            self.label,
            self.mode,
            self.concurrency,
            self.requests,
            self.errors,
            self.p50_ms,
            self.p99_ms,
            self.max_ms,
            self.first_line_p50_ms,
            self.first_line_p99_ms,
            self.requests_per_s,
        )
    }
}

/// `oap-bench crawl-load`: crawling a corpus from loopback HTTPS.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CrawlLoadReport {
    /// Manifests served and crawled.
    pub manifests: usize,
    /// Bundled manifests indexed before the crawl.
    pub bundled: u64,
    /// Spawn to ready of the crawling daemon.
    pub ready_ms: f64,
    /// Ready to every manifest fetched (None: not seen).
    pub fetched_s: Option<f64>,
    /// Ready to every manifest in the index.
    pub crawl_s: f64,
    /// `manifests / crawl_s`.
    pub manifests_per_s: f64,
    /// Largest VmRSS sampled every 50 ms while crawling.
    pub rss_peak_mb: f64,
    /// Its anonymous part (heap) at that moment.
    pub rss_peak_anon_part_mb: f64,
    /// Its file-backed part (model, index) at that moment.
    pub rss_peak_file_part_mb: f64,
    /// Largest anonymous memory sampled at any time.
    pub anon_peak_mb: f64,
    /// The index file at the end (None: not reported).
    pub index_mb: Option<f64>,
    /// VmRSS at the end.
    pub rss_end_mb: f64,
    /// VmHWM at the end.
    pub hwm_mb: f64,
    /// Discover requests per second in every phase (0: back to back).
    pub discover_rate_per_s: f64,
    /// `/v1/discover` with the crawler off, bundled manifests only.
    pub idle_before: Phase,
    /// `/v1/discover` while the crawl runs.
    pub during: Phase,
    /// `/v1/discover` after the crawl, full index.
    pub idle_after: Phase,
}

/// `/v1/discover` latency over one phase.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Phase {
    /// Answered requests.
    pub requests: usize,
    /// Median.
    #[serde(deserialize_with = "nan_if_null")]
    pub p50_ms: f64,
    /// 99th percentile.
    #[serde(deserialize_with = "nan_if_null")]
    pub p99_ms: f64,
}

/// `oap-bench request-tokens`: the tools one chat request offers.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RequestTokensReport {
    /// Tool definitions in the request.
    pub tools: usize,
    /// Their estimated prompt tokens (`oap_bridge::tokens::tools_tokens`).
    pub tool_tokens: usize,
    /// Their compact JSON, in bytes.
    pub tools_json_bytes: usize,
    /// Their function names, in request order.
    pub names: Vec<String>,
}

/// `oap-bench tool-tokens`: estimated prompt tokens of the tools offered
/// per request under each exposure, over a labelled task set.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TokensReport {
    /// Tasks replayed.
    pub tasks: usize,
    /// Of which with a labelled tool.
    pub labelled_tasks: usize,
    /// Manifests in the index.
    pub manifests: usize,
    /// Tools discovered per request.
    pub top_k: usize,
    /// Direct, direct with the tool instruction, each budget, then the
    /// two meta-tool figures.
    pub columns: Vec<ExposureColumn>,
    /// The token estimator against other counts, over the direct tool text.
    pub calibration: TokenCalibration,
}

/// One exposure's tool tokens per request and what it still offers.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ExposureColumn {
    /// The exposure.
    pub label: String,
    /// Tool tokens per round: mean, median, 95th percentile, maximum.
    pub tokens_mean: f64,
    /// Median.
    pub tokens_p50: usize,
    /// 95th percentile.
    pub tokens_p95: usize,
    /// Maximum.
    pub tokens_max: usize,
    /// Requests offering at least one tool, percent of all.
    pub offering_pct: f64,
    /// Labelled tasks with any labelled tool offered, percent.
    pub labelled_any_offered_pct: f64,
    /// Labelled tasks with every labelled tool offered, percent.
    pub labelled_all_offered_pct: f64,
    /// Requests where budget fitting dropped optional parameters, percent.
    pub params_dropped_pct: f64,
    /// Requests where budget fitting dropped tools, percent.
    pub tools_dropped_pct: f64,
}

/// Token counts of the direct tool text of all tasks.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TokenCalibration {
    /// Characters.
    pub chars: usize,
    /// The bridge's estimator.
    pub estimator_tokens: usize,
    /// The MiniLM WordPiece tokenizer.
    pub wordpiece_tokens: usize,
}

impl TokensReport {
    /// The report as the summary and markdown table developers read.
    pub fn table(&self) -> String {
        let mut out = format!(
            "tasks: {} ({} with a labelled tool); manifests: {}; top_k {}\n\n\
             | exposure | tool tokens per round: mean | p50 | p95 | max | requests offering ≥1 tool \
             | labelled tool offered (any) | all labelled offered | optional params dropped \
             | tools dropped |\n|---|---|---|---|---|---|---|---|---|---|\n",
            self.tasks, self.labelled_tasks, self.manifests, self.top_k
        );
        for c in &self.columns {
            out.push_str(&format!(
                "| {} | {:.0} | {} | {} | {} | {:.1} % | {:.1} % | {:.1} % | {:.1} % | {:.1} % |\n",
                c.label,
                c.tokens_mean,
                c.tokens_p50,
                c.tokens_p95,
                c.tokens_max,
                c.offering_pct,
                c.labelled_any_offered_pct,
                c.labelled_all_offered_pct,
                c.params_dropped_pct,
                c.tools_dropped_pct,
            ));
        }
        let cal = &self.calibration;
        out.push_str(&format!(
            "\ncalibration over the direct tool text of all tasks ({} chars): estimator {} tokens; \
             chars/4 {}; MiniLM WordPiece {} (estimator / WordPiece = {:.2})",
            cal.chars,
            cal.estimator_tokens,
            cal.chars / 4,
            cal.wordpiece_tokens,
            cal.estimator_tokens as f64 / cal.wordpiece_tokens.max(1) as f64
        ));
        out
    }
}

/// `oap-bench experience-replay`: the experience cache over a replayed
/// task log (each labelled task, then a repeat or paraphrase of each).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ExperienceReport {
    /// Manifests in the index.
    pub manifests: usize,
    /// Requests in the log (two passes over the tasks).
    pub log_requests: usize,
    /// Labelled tasks.
    pub tasks: usize,
    /// Discovery on every request, no cache.
    pub baseline: ExperienceBaseline,
    /// One row per `experience.min_similarity`.
    pub thresholds: Vec<ThresholdRow>,
}

/// Discovery on every request.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ExperienceBaseline {
    /// Requests whose best tool was right, percent.
    pub correct_tool_pct: f64,
    /// Tools accepted per request.
    pub tools_injected_per_request: f64,
    /// The discovery step: mean, median, 95th percentile.
    pub step_mean_ms: f64,
    /// Median.
    pub step_p50_ms: f64,
    /// 95th percentile.
    pub step_p95_ms: f64,
}

/// The cache at one similarity threshold.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ThresholdRow {
    /// `experience.min_similarity`.
    pub min_similarity: f32,
    /// Cache hits, exact plus similar.
    pub hits: usize,
    /// Exact hits.
    pub exact_hits: usize,
    /// Similar hits.
    pub similar_hits: usize,
    /// Hits, percent of requests.
    pub hit_rate_pct: f64,
    /// Hits whose tool was wrong.
    pub wrong_hits: usize,
    /// Wrong hits, percent of hits.
    pub wrong_hits_pct_of_hits: f64,
    /// Hits in the second pass, percent of its requests.
    pub second_pass_hit_rate_pct: f64,
    /// Requests whose chosen tool was right, percent.
    pub correct_tool_pct: f64,
    /// Tools injected per request.
    pub tools_injected_per_request: f64,
    /// The step (lookup, and discovery on a miss): mean over all requests.
    pub step_mean_ms: f64,
    /// Mean over exact hits (0 without any).
    pub exact_hit_step_mean_ms: f64,
    /// Mean over similar hits (0 without any).
    pub similar_hit_step_mean_ms: f64,
    /// Mean over misses (0 without any).
    pub miss_step_mean_ms: f64,
    /// The baseline's discovery time of the requests that hit.
    pub hits_discovery_mean_ms: f64,
    /// Baseline step mean minus this step mean.
    pub saved_per_request_ms: f64,
}

impl ExperienceReport {
    /// The report as the summary and markdown table developers read.
    pub fn table(&self) -> String {
        let b = &self.baseline;
        let mut out = format!(
            "baseline (discovery every request): correct tool {:.1} %, tools injected \
             {:.2}/request, discovery step mean {:.2} ms, p50 {:.2} ms, p95 {:.2} ms\n\n\
             | min_similarity | hits (exact + similar) | hit rate | wrong hits | hit rate, 2nd pass \
             | correct tool | tools injected/request | step mean ms | exact-hit step mean ms \
             | similar-hit step mean ms | misses step mean ms | same requests as hits, discovery \
             mean ms | saved per request ms |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|",
            b.correct_tool_pct,
            b.tools_injected_per_request,
            b.step_mean_ms,
            b.step_p50_ms,
            b.step_p95_ms
        );
        for r in &self.thresholds {
            out.push_str(&format!(
                "\n| {:.2} | {} ({} + {}) | {:.1} % | {} ({:.1} % of hits) | {:.1} % | {:.1} % \
                 | {:.2} | {:.2} | {:.3} | {:.2} | {:.2} | {:.2} | {:.2} |",
                r.min_similarity,
                r.hits,
                r.exact_hits,
                r.similar_hits,
                r.hit_rate_pct,
                r.wrong_hits,
                r.wrong_hits_pct_of_hits,
                r.second_pass_hit_rate_pct,
                r.correct_tool_pct,
                r.tools_injected_per_request,
                r.step_mean_ms,
                r.exact_hit_step_mean_ms,
                r.similar_hit_step_mean_ms,
                r.miss_step_mean_ms,
                r.hits_discovery_mean_ms,
                r.saved_per_request_ms,
            ));
        }
        out
    }
}

/// `oap-bench retrieval`: retrieval quality over a labelled task set.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RetrievalReport {
    /// Manifests indexed.
    pub manifests: usize,
    /// Embedded rows.
    pub rows: usize,
    /// Manifests that did not load.
    pub load_problems: usize,
    /// Name collisions.
    pub collisions: usize,
    /// Indexing time (embedding included, unless cached).
    pub index_s: f64,
    /// Tasks evaluated.
    pub tasks: usize,
    /// Lexical, dense, hybrid, then hybrid at each further weight.
    pub modes: Vec<ModeRow>,
    /// `Engine::discover_with` in hybrid mode over every task.
    pub engine_latency: EngineLatency,
    /// Tasks hybrid misses at 3 (with `--misses`).
    pub misses: Vec<String>,
    /// Threshold curves (with `--curve`).
    pub curves: Vec<Curve>,
}

/// One retrieval mode's quality; fractions are of the positive tasks.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ModeRow {
    /// The mode (and weight).
    pub label: String,
    /// Recall@1.
    pub recall_at_1: f64,
    /// Recall@3.
    pub recall_at_3: f64,
    /// Recall@5.
    pub recall_at_5: f64,
    /// Mean reciprocal rank.
    pub mrr: f64,
    /// nDCG@10, binary relevance.
    #[serde(default)]
    pub ndcg_at_10: f64,
    /// Recall over all expected names at 3.
    pub all_at_3: f64,
    /// Negative tasks.
    pub negatives: usize,
    /// Of which no candidate was accepted.
    pub negatives_rejected: usize,
    /// Positives whose accepted best candidate is expected.
    pub positives_matched_right: f64,
    /// Positives with no accepted candidate.
    pub positives_rejected: f64,
    /// AUROC of the best candidate's score, positives vs negatives.
    #[serde(deserialize_with = "nan_if_null")]
    pub auroc: f64,
    /// Engine latency median (the default hybrid row only).
    pub p50_ms: Option<f64>,
}

/// The engine's own latency over the task set.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct EngineLatency {
    /// Tasks answered.
    pub tasks: usize,
    /// Whole discovery: median.
    #[serde(deserialize_with = "nan_if_null")]
    pub p50_ms: f64,
    /// 90th percentile.
    #[serde(deserialize_with = "nan_if_null")]
    pub p90_ms: f64,
    /// Search and scoring: median.
    #[serde(deserialize_with = "nan_if_null")]
    pub search_p50_ms: f64,
    /// Tasks where the engine's ranking and this evaluation's differ
    /// (None: not comparable under the query options given).
    pub rankings_differ: Option<usize>,
}

/// Rejections per abstention threshold for one mode.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Curve {
    /// The mode (and weight).
    pub label: String,
    /// The threshold the engine is configured with.
    pub configured_threshold: f32,
    /// Negatives not known to conflict with the corpus.
    pub hard_negatives: usize,
    /// Negatives known to conflict with it.
    pub soft_negatives: usize,
    /// One point per threshold.
    pub points: Vec<CurvePoint>,
}

/// Rejections at one threshold.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CurvePoint {
    /// The threshold.
    pub threshold: f32,
    /// Hard negatives scoring below it.
    pub hard_negatives_rejected: usize,
    /// Soft negatives scoring below it.
    pub soft_negatives_rejected: usize,
    /// Fraction of positives below it.
    pub positives_rejected: f64,
    /// Fraction of positives at or above it with the right best candidate.
    pub positives_accepted_right: f64,
}

impl RetrievalReport {
    /// The report as the tables developers read.
    pub fn table(&self) -> String {
        let mut out = String::from(
            "\n| mode | R@1 | R@3 | R@5 | MRR | nDCG@10 | all@3 | no-fit abstained | pos. matched right \
             | fitting abstained | AUROC(abstention score) | p50 ms |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n",
        );
        for m in &self.modes {
            let abstained = if m.negatives > 0 {
                format!(" ({:.3})", m.negatives_rejected as f64 / m.negatives as f64)
            } else {
                String::new()
            };
            out.push_str(&format!(
                "| {} | {:.3} | {:.3} | {:.3} | {:.3} | {:.3} | {:.3} | {}/{}{} | {:.3} | {:.3} | {:.3} | {} |\n",
                m.label,
                m.recall_at_1,
                m.recall_at_3,
                m.recall_at_5,
                m.mrr,
                m.ndcg_at_10,
                m.all_at_3,
                m.negatives_rejected,
                m.negatives,
                abstained,
                m.positives_matched_right,
                m.positives_rejected,
                m.auroc,
                m.p50_ms.map_or("-".to_string(), |v| format!("{v:.1}")),
            ));
        }
        let l = &self.engine_latency;
        out.push_str(&format!(
            "engine hybrid latency: p50 {:.1} ms, p90 {:.1} ms (search and scoring p50 {:.2} ms) \
             over {} tasks{}",
            l.p50_ms,
            l.p90_ms,
            l.search_p50_ms,
            l.tasks,
            l.rankings_differ.map_or(String::new(), |n| format!(
                "; engine and eval rankings differ on {n} tasks"
            ))
        ));
        for miss in &self.misses {
            out.push_str(&format!("\n{miss}"));
        }
        for c in &self.curves {
            out.push_str(&format!(
                "\n\n{}: threshold curve (configured {:.2}); hard/soft negatives {}/{}\n\
                 | threshold | hard neg. rejected | soft neg. rejected | pos. rejected \
                 | pos. accepted with right top-1 |\n|---|---|---|---|---|",
                c.label, c.configured_threshold, c.hard_negatives, c.soft_negatives
            ));
            for p in &c.points {
                out.push_str(&format!(
                    "\n| {:.2} | {}/{} | {}/{} | {:.3} | {:.3} |",
                    p.threshold,
                    p.hard_negatives_rejected,
                    c.hard_negatives,
                    p.soft_negatives_rejected,
                    c.soft_negatives,
                    p.positives_rejected,
                    p.positives_accepted_right,
                ));
            }
        }
        out
    }
}

/// `oap-bench catalog-size`: the "nothing fits" decision for the same
/// queries against a small catalog and against it plus a large corpus.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CatalogSizeReport {
    /// Manifests in the small catalog.
    pub small_manifests: usize,
    /// Manifests in the small catalog plus the corpus.
    pub large_manifests: usize,
    /// Queries some manifest of the small catalog fits.
    pub fitting: usize,
    /// Queries nothing fits.
    pub no_fit: usize,
    /// Queries whose best candidate is the same manifest in both catalogs.
    pub same_best: usize,
    /// Fitting queries with an expected manifest in the top 3, small catalog.
    pub small_recall_at_3: f64,
    /// The same with the corpus added.
    pub large_recall_at_3: f64,
    /// One row per abstention rule, the default first.
    pub rules: Vec<CatalogSizeRow>,
}

/// One abstention rule in both catalogs; shares are of the fitting or of
/// the no-fit queries.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CatalogSizeRow {
    /// The rule.
    pub rule: String,
    /// Fitting queries abstained on, small catalog.
    pub small_fitting_abstained: f64,
    /// No-fit queries abstained on, small catalog.
    pub small_no_fit_abstained: f64,
    /// Fitting queries abstained on, with the corpus.
    pub large_fitting_abstained: f64,
    /// No-fit queries abstained on, with the corpus.
    pub large_no_fit_abstained: f64,
    /// Decisions that differ between the catalogs among the queries whose
    /// best candidate is the same manifest in both.
    pub flips: usize,
    /// Those queries, with what changed.
    pub flipped: Vec<String>,
    /// Mean absolute change of the abstention score between the catalogs,
    /// over the queries whose best candidate is the same manifest in both.
    pub mean_score_shift: f64,
    /// The largest such change.
    pub max_score_shift: f64,
}

impl CatalogSizeReport {
    /// The report as the table developers read.
    pub fn table(&self) -> String {
        let mut out = format!(
            "\n{} manifests, then {} with the corpus; {} fitting and {} no-fit queries; \
             same best candidate in both: {}; R@3 {:.3} -> {:.3}\n\n\
             | rule | fitting abstained | no-fit abstained | fitting abstained (corpus) \
             | no-fit abstained (corpus) | flips (same best) | score shift mean / max |\n\
             |---|---|---|---|---|---|---|\n",
            self.small_manifests,
            self.large_manifests,
            self.fitting,
            self.no_fit,
            self.same_best,
            self.small_recall_at_3,
            self.large_recall_at_3,
        );
        for row in &self.rules {
            out.push_str(&format!(
                "| {} | {:.3} | {:.3} | {:.3} | {:.3} | {} | {:.4} / {:.4} |\n",
                row.rule,
                row.small_fitting_abstained,
                row.small_no_fit_abstained,
                row.large_fitting_abstained,
                row.large_no_fit_abstained,
                row.flips,
                row.mean_score_shift,
                row.max_score_shift,
            ));
        }
        for row in &self.rules {
            for flip in &row.flipped {
                out.push_str(&format!("{}: {flip}\n", row.rule));
            }
        }
        out
    }
}

/// `oap-bench relevance`: "nothing fits" when each task brings its own
/// small catalog.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RelevanceReport {
    /// The encoder's model id.
    pub model: String,
    /// The hybrid threshold a best candidate's abstention score must reach.
    pub threshold: f32,
    /// Distinct catalogs.
    pub catalogs: usize,
    /// Manifests that did not load, over all catalogs.
    pub load_problems: usize,
    /// Per half of the corpus (`tuning`, `evaluation`), then `all`.
    pub halves: Vec<RelevanceHalf>,
}

/// One half of a relevance corpus; shares are of its fitting or no-fit tasks.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RelevanceHalf {
    /// `tuning`, `evaluation` or `all`.
    pub half: String,
    /// Tasks one tool of their catalog fits.
    pub fitting: usize,
    /// Tasks no tool of their catalog fits.
    pub no_fit: usize,
    /// AUROC of the best candidate's abstention score, fitting against
    /// no-fit (none without tasks of both kinds).
    pub auroc: Option<f64>,
    /// No-fit tasks answered without a match.
    pub no_fit_abstained: f64,
    /// Fitting tasks answered without a match.
    pub fitting_abstained: f64,
    /// Fitting tasks whose best candidate is their tool.
    pub fitting_best_right: f64,
    /// No-fit tasks whose catalog holds more than one tool.
    pub no_fit_in_larger_catalogs: usize,
    /// Those answered without a match.
    pub no_fit_in_larger_catalogs_abstained: f64,
}

impl RelevanceReport {
    /// The report as the table developers read.
    pub fn table(&self) -> String {
        let mut out = format!(
            "\n{}, hybrid threshold {:.2}; {} catalogs, {} load problems\n\n\
             | half | fitting | no-fit | AUROC | no-fit abstained | fitting abstained \
             | fitting best right | no-fit, 2+ tools: abstained |\n\
             |---|---|---|---|---|---|---|---|\n",
            self.model, self.threshold, self.catalogs, self.load_problems,
        );
        for h in &self.halves {
            out.push_str(&format!(
                "| {} | {} | {} | {} | {:.3} | {:.3} | {:.3} | {:.3} of {} |\n",
                h.half,
                h.fitting,
                h.no_fit,
                h.auroc.map_or("–".to_string(), |a| format!("{a:.3}")),
                h.no_fit_abstained,
                h.fitting_abstained,
                h.fitting_best_right,
                h.no_fit_in_larger_catalogs_abstained,
                h.no_fit_in_larger_catalogs,
            ));
        }
        out
    }
}

/// `oap-bench soak`: the whole appliance under load with faults. The
/// per-minute records are in the JSON-lines file it names.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SoakReport {
    /// Minutes of load asked for.
    pub minutes: f64,
    /// Seconds the load actually ran.
    pub ran_s: f64,
    /// Whether every pass criterion held.
    pub passed: bool,
    /// What failed, one sentence each (empty when `passed`).
    pub failures: Vec<String>,
    /// Notes on what could not be checked as asked (short runs).
    pub notes: Vec<String>,
    /// Faults injected, by kind.
    pub faults: std::collections::BTreeMap<String, u64>,
    /// Per route: requests, outcomes and latency over the whole run.
    pub routes: std::collections::BTreeMap<String, SoakRoute>,
    /// Every error by kind (`http_502`, `during_restart:refused`, ...).
    pub errors: std::collections::BTreeMap<String, u64>,
    /// Up to 20 examples of requests that were not answered.
    pub failure_samples: Vec<String>,
    /// Manifests indexed before and after each daemon restart.
    pub restarts: Vec<SoakRestart>,
    /// Daemon exits the soak did not cause.
    pub crashes: u64,
    /// Tool processes seen alive past their deadline (plus slack).
    pub lingering_children: u64,
    /// Resource drift per process and across processes (see [`SoakDrift`]).
    pub drift: SoakDrift,
    /// Where the per-minute JSON lines are.
    pub jsonl: String,
    /// Manifests indexed when the load started.
    pub manifests_at_start: u64,
    /// Seconds from the first daemon start to a complete index (bundled,
    /// catalog and crawl).
    pub setup_s: f64,
}

/// One route's totals in a soak.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct SoakRoute {
    /// Requests sent.
    pub requests: u64,
    /// Answered with success.
    pub ok: u64,
    /// Answered with a clear error (an HTTP error with a JSON body, or an
    /// error line in a stream).
    pub answered_error: u64,
    /// Refused, reset or cut while the soak had the daemon down (expected).
    pub during_restart: u64,
    /// Not answered: reset, hung, cut or an error without a JSON body.
    pub failed: u64,
    /// Latency of answered requests (ms).
    #[serde(deserialize_with = "nan_if_null")]
    pub p50_ms: f64,
    /// 99th percentile (ms).
    #[serde(deserialize_with = "nan_if_null")]
    pub p99_ms: f64,
}

/// Manifests indexed around one daemon restart.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SoakRestart {
    /// `kill` (SIGKILL) or `corrupt` (SIGKILL, index file damaged, start).
    pub kind: String,
    /// Seconds into the run.
    pub at_s: f64,
    /// Indexed just before the kill.
    pub before: u64,
    /// Indexed once the daemon was back (the most seen while waiting).
    pub after: u64,
    /// Seconds from the kill until `/health` answered again.
    pub ready_s: f64,
    /// Seconds from the kill until every manifest was back (NaN: never).
    #[serde(deserialize_with = "nan_if_null")]
    pub recovered_s: f64,
    /// Seconds from the kill until discovery was hybrid again (every vector
    /// embedded; NaN: not within the wait).
    #[serde(default = "f64_nan", deserialize_with = "nan_if_null")]
    pub hybrid_s: f64,
    /// The process started by this restart.
    #[serde(default)]
    pub pid: u32,
}

fn f64_nan() -> f64 {
    f64::NAN
}

/// Leaks, judged per daemon process and across processes (the soak kills
/// and restarts the daemon, so its samples belong to several processes).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SoakDrift {
    /// What is compared with what, in words.
    pub basis: String,
    /// Whether any comparison was long enough to be judged.
    pub judged: bool,
    /// Every daemon process sampled, in the order they ran.
    pub processes: Vec<SoakProcess>,
}

/// One daemon process's life in a soak.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SoakProcess {
    /// Its process id.
    pub pid: u32,
    /// Its first sample (seconds into the run).
    pub born_s: f64,
    /// When it had settled: a minute after start and its index complete
    /// (no vectors pending). NaN: never within its life.
    #[serde(deserialize_with = "nan_if_null")]
    pub settled_s: f64,
    /// Its last sample.
    pub end_s: f64,
    /// When it had warmed up: settled, and one cycle of the soak's faults
    /// after its start (every rebuild and reload seen once). Its own growth
    /// is judged from here. NaN: never within its life.
    #[serde(default = "nan", deserialize_with = "nan_if_null")]
    pub warm_s: f64,
    /// It ran long enough after warming up for its own growth to be judged.
    pub judged_self: bool,
    /// Medians over the minute after it settled (compared across processes).
    pub settled: SoakLevels,
    /// Medians over the minute after it warmed up (compared with `last`).
    #[serde(default)]
    pub warm: SoakLevels,
    /// Medians over its last minute.
    pub last: SoakLevels,
}

/// Resource levels (medians over a window of samples).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct SoakLevels {
    /// Resident memory (MB).
    #[serde(deserialize_with = "nan_if_null")]
    pub rss_mb: f64,
    /// Open file descriptors.
    #[serde(deserialize_with = "nan_if_null")]
    pub fds: f64,
    /// Threads.
    #[serde(deserialize_with = "nan_if_null")]
    pub threads: f64,
    /// Tool processes (the daemon's descendants and probe tools anywhere).
    #[serde(deserialize_with = "nan_if_null")]
    pub children: f64,
    /// Files in the data directory.
    #[serde(deserialize_with = "nan_if_null")]
    pub data_files: f64,
    /// Size of the index file (MB).
    #[serde(deserialize_with = "nan_if_null")]
    pub index_mb: f64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_figure_without_samples_survives_the_round_trip_as_nan() {
        let phase = Phase {
            requests: 0,
            p50_ms: f64::NAN,
            p99_ms: 1.5,
        };
        let text = serde_json::to_string(&phase).unwrap();
        assert!(text.contains("\"p50_ms\":null"), "{text}");
        let back: Phase = serde_json::from_str(&text).unwrap();
        assert!(back.p50_ms.is_nan());
        assert_eq!(back.p99_ms, 1.5);
    }

    fn variant(label: &str, first: f64, total: f64) -> FitnessVariant {
        FitnessVariant {
            label: label.into(),
            note: String::new(),
            n: 40,
            first_p50_ms: first,
            first_p95_ms: first * 2.0,
            total_p50_ms: total,
            total_p95_ms: total * 2.0,
        }
    }

    #[test]
    fn a_fitness_table_gives_each_variant_its_ratio_to_the_first() {
        let group = FitnessGroup {
            title: "(b) endpoints".into(),
            with_first: false,
            load_average: "1.00 0.50 0.25".into(),
            variants: vec![
                variant("/api/chat", 1.0, 10.0),
                variant("/v1/responses", 1.0, 15.0),
            ],
        };
        let table = group.table();
        assert!(
            table.starts_with("\n== (b) endpoints (ms; ratio = p50 / baseline p50; load average 1.00 0.50 0.25)\n"),
            "{table}"
        );
        assert!(
            table.contains("| /api/chat | 40 | 10.0 | 20.0 | 1.00x |  |\n"),
            "{table}"
        );
        assert!(
            table.contains("| /v1/responses | 40 | 15.0 | 30.0 | 1.50x |  |\n"),
            "{table}"
        );
        let streamed = FitnessGroup {
            with_first: true,
            ..group
        };
        assert!(
            streamed.table().contains(
                "| /v1/responses | 40 | 1.00 | 2.00 | 15.00 | 30.00 | 1.00x | 1.50x |  |\n"
            ),
            "{}",
            streamed.table()
        );
    }
}

/// `oap-bench embed-batches`: CPU and wall time per text of realistic
/// queries embedded B at a time, for several B, interleaved over rounds.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct EmbedBatchesReport {
    /// The model directory measured.
    pub model_dir: String,
    /// `RAYON_NUM_THREADS` in the environment, if set.
    pub rayon_num_threads: Option<String>,
    /// Texts embedded per (path, size, round).
    pub texts: usize,
    /// Rounds over every (path, size).
    pub rounds: usize,
    /// Load average (1 min) at the start and at the end.
    pub loadavg: [Option<f64>; 2],
    /// One row per (path, size, round), in the order they ran.
    pub rows: Vec<EmbedBatchRow>,
}

/// Every text of the set embedded `size` at a time along one path.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct EmbedBatchRow {
    /// `packed` (the embedder's batch pass) or `padded` (the former pass,
    /// every text padded to the batch's longest).
    pub path: String,
    /// Texts per `embed` call.
    pub size: usize,
    /// Round number, from 0.
    pub round: usize,
    /// CPU time of every thread of the process, per text.
    #[serde(deserialize_with = "nan_if_null")]
    pub cpu_ms_per_text: f64,
    /// Wall time per text.
    #[serde(deserialize_with = "nan_if_null")]
    pub wall_ms_per_text: f64,
    /// Real tokens over all texts (`[CLS]` and `[SEP]` included).
    pub tokens: usize,
    /// Token rows a padded pass computes (each call's texts times its longest).
    pub padded_tokens: usize,
}

/// `oap-bench fitness`: what the small-model features cost a request, each
/// group's first variant its baseline.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FitnessReport {
    /// (a) URL sanitisation per `url_policy`, streamed.
    pub url: FitnessGroup,
    /// Answers in (a) where the policy marked or removed a link.
    pub url_policy_acted: usize,
    /// Answers in (a) through the two acting policies.
    pub url_answers: usize,
    /// (b) the chat endpoints, `stream:false`.
    pub endpoints_plain: FitnessGroup,
    /// (b) the chat endpoints, `stream:true`.
    pub endpoints_stream: FitnessGroup,
    /// (c) forced tools.
    pub forced: FitnessGroup,
    /// (d) `oapd validate-model`, process wall time.
    pub validate: FitnessGroup,
}

/// One figure's variants, measured interleaved.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FitnessGroup {
    /// What the group measures.
    pub title: String,
    /// Whether the time to the first body byte is a figure too.
    pub with_first: bool,
    /// The 1/5/15 minute load averages as the group ended.
    pub load_average: String,
    /// The baseline first.
    pub variants: Vec<FitnessVariant>,
}

/// One variant's request times.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FitnessVariant {
    /// What differs.
    pub label: String,
    /// Rounds to Ollama, what the policy did, … (may be empty).
    pub note: String,
    /// Requests timed.
    pub n: usize,
    /// Time to the first body byte, median.
    #[serde(deserialize_with = "nan_if_null")]
    pub first_p50_ms: f64,
    /// Time to the first body byte, 95th percentile.
    #[serde(deserialize_with = "nan_if_null")]
    pub first_p95_ms: f64,
    /// Time to the end of the answer, median.
    #[serde(deserialize_with = "nan_if_null")]
    pub total_p50_ms: f64,
    /// Time to the end of the answer, 95th percentile.
    #[serde(deserialize_with = "nan_if_null")]
    pub total_p95_ms: f64,
}

impl FitnessReport {
    /// Every group's table, (a) with how often the policies acted.
    pub fn render(&self) -> String {
        let mut out = self.url.table();
        out.push_str(&format!(
            "(answers where the policy acted: {} of {})\n",
            self.url_policy_acted, self.url_answers
        ));
        for group in [
            &self.endpoints_plain,
            &self.endpoints_stream,
            &self.forced,
            &self.validate,
        ] {
            out.push_str(&group.table());
        }
        out
    }
}

impl FitnessGroup {
    /// The group as a Markdown table under a `==` title line, ratios to
    /// the first variant's p50.
    pub fn table(&self) -> String {
        let mut out = format!(
            "\n== {} (ms; ratio = p50 / baseline p50; load average {})\n",
            self.title, self.load_average
        );
        if self.with_first {
            out.push_str("| variant | n | first byte p50 | first byte p95 | total p50 | total p95 | first ratio | total ratio | note |\n");
            out.push_str("|---|---|---|---|---|---|---|---|---|\n");
        } else {
            out.push_str("| variant | n | p50 | p95 | ratio | note |\n");
            out.push_str("|---|---|---|---|---|---|\n");
        }
        let Some(base) = self.variants.first() else {
            return out;
        };
        for v in &self.variants {
            let row = if self.with_first {
                format!(
                    "| {} | {} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2}x | {:.2}x | {} |\n",
                    v.label,
                    v.n,
                    v.first_p50_ms,
                    v.first_p95_ms,
                    v.total_p50_ms,
                    v.total_p95_ms,
                    v.first_p50_ms / base.first_p50_ms,
                    v.total_p50_ms / base.total_p50_ms,
                    v.note
                )
            } else {
                format!(
                    "| {} | {} | {:.1} | {:.1} | {:.2}x | {} |\n",
                    v.label,
                    v.n,
                    v.total_p50_ms,
                    v.total_p95_ms,
                    v.total_p50_ms / base.total_p50_ms,
                    v.note
                )
            };
            out.push_str(&row);
        }
        out
    }
}

/// `oap-bench memory-burst`: one daemon's resident memory around a burst
/// of large chat bodies (VmRSS, MB = 10^6 bytes).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct MemoryBurstReport {
    /// After one small chat.
    pub idle_mb: f64,
    /// The largest VmRSS sampled every 10 ms during the burst.
    pub peak_mb: f64,
    /// VmHWM right after the burst.
    pub hwm_mb: f64,
    /// Right after the last answer.
    pub after_burst_mb: f64,
    /// `settle_s` after the last answer.
    pub settled_mb: f64,
    /// How long after the burst `settled_mb` was read.
    pub settle_s: u64,
    /// Answers 200.
    pub ok: usize,
    /// Answers 503 with `Retry-After` (over the in-flight body cap).
    pub busy: usize,
    /// Any other answer.
    pub other: usize,
    /// Connections broken before an answer.
    pub broken: usize,
    /// The other and broken outcomes, as seen.
    pub unexpected: Vec<String>,
    /// Wall time of the burst.
    pub burst_s: f64,
    /// Whether the daemon was still running after settling.
    pub alive: bool,
}

/// `bench-memory`'s peak target: VmRSS during the burst, MB.
pub const TARGET_MEMORY_PEAK_MB: f64 = 400.0;
/// VmRSS after settling may be at most this much above idle.
pub const TARGET_SETTLED_RATIO: f64 = 1.2;

/// `oap-bench memory`: the burst against one daemon build after another.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct MemoryReport {
    /// A column per build, the one measured against first; the last one's
    /// verdicts count.
    pub columns: Vec<MemoryColumn>,
}

/// One daemon build's figures.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct MemoryColumn {
    /// The daemon binary, as given.
    pub oapd: String,
    /// Its burst.
    pub figures: MemoryBurstReport,
}

fn met(ok: bool) -> &'static str {
    if ok {
        "met"
    } else {
        "MISSED"
    }
}

impl MemoryReport {
    /// One Markdown table, a column per build, the verdicts of the last.
    pub fn render(&self) -> String {
        let Some(last) = self.columns.last().map(|c| &c.figures) else {
            return String::new();
        };
        let mut out = String::new();
        let mut row = |name: &str,
                       cell: &dyn Fn(&MemoryBurstReport) -> String,
                       target: &str,
                       verdict: &str| {
            let cells: Vec<String> = self.columns.iter().map(|c| cell(&c.figures)).collect();
            out.push_str(&format!(
                "| {name} | {} | {target} | {verdict} |\n",
                cells.join(" | ")
            ));
        };
        row(
            "idle (after one small chat)",
            &|f| format!("{:.1} MB", f.idle_mb),
            "-",
            "-",
        );
        row(
            "peak during the burst (sampled every 10 ms; VmHWM)",
            &|f| format!("{:.1} MB ({:.1})", f.peak_mb, f.hwm_mb),
            &format!("≤ {TARGET_MEMORY_PEAK_MB} MB"),
            met(last.peak_mb <= TARGET_MEMORY_PEAK_MB),
        );
        row(
            "right after the last answer",
            &|f| format!("{:.1} MB", f.after_burst_mb),
            "-",
            "-",
        );
        row(
            &format!("{} s later", last.settle_s),
            &|f| {
                format!(
                    "{:.1} MB ({:+.0} % of idle)",
                    f.settled_mb,
                    (f.settled_mb / f.idle_mb - 1.0) * 100.0
                )
            },
            "≤ idle + 20 %",
            met(last.settled_mb <= last.idle_mb * TARGET_SETTLED_RATIO),
        );
        row(
            "answers: 200 / 503 with Retry-After / other / broken connections",
            &|f| format!("{} / {} / {} / {}", f.ok, f.busy, f.other, f.broken),
            "no other, none broken",
            met(last.other == 0 && last.broken == 0),
        );
        row(
            "burst wall time",
            &|f| format!("{:.1} s", f.burst_s),
            "-",
            "-",
        );
        row(
            "daemon alive afterwards",
            &|f| f.alive.to_string(),
            "yes",
            met(last.alive),
        );
        let names: Vec<String> = self
            .columns
            .iter()
            .map(|c| format!("`{}`", c.oapd))
            .collect();
        let unexpected: String = self
            .columns
            .iter()
            .flat_map(|c| &c.figures.unexpected)
            .map(|outcome| format!("unexpected answer: {outcome}\n"))
            .collect();
        format!(
            "{unexpected}\n== figures (MB = 10^6 bytes, VmRSS of oapd)\n\
             | figure | {} | target | verdict |\n|---|{}---|---|\n{out}",
            names.join(" | "),
            "---|".repeat(self.columns.len())
        )
    }
}

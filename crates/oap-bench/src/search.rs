//! Synthetic benchmark for oap-index.
//!
//! ```text
//! oap-bench search [--sizes 1000,10000,100000,1000000] [--queries 50] [--dim 384]
//! ```
//!
//! For each size and dtype (f32, i8) it builds an index of random L2-normalised
//! vectors (one row per document) plus a synthetic Zipf-like vocabulary, writes it
//! under `target/oap-index-bench-<pid>/`, opens it (full validation) and times
//! `dense_search(k = 10)` (default threads and 1 thread) and `lexical_search(k = 10)`.
//! Files are deleted afterwards. The table goes to stderr; the result is a
//! [`SearchReport`].

use std::path::PathBuf;
use std::time::{Duration, Instant};

use oap_bench::report::{SearchReport, SearchRow};
use oap_index::{DocInput, Index, RowInput, SearchConfig, StreamWriter, VectorDtype};

struct Rng(u64);

impl Rng {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn sym(&mut self) -> f32 {
        (self.next_u64() >> 40) as f32 / (1u64 << 23) as f32 - 1.0
    }

    fn unit_vec(&mut self, dim: usize) -> Vec<f32> {
        let mut v: Vec<f32> = (0..dim).map(|_| self.sym()).collect();
        let n = v.iter().map(|x| x * x).sum::<f32>().sqrt();
        v.iter_mut().for_each(|x| *x /= n);
        v
    }

    /// Zipf-ish term rank in [0, vocab): frequent terms are much more likely.
    fn zipf(&mut self, vocab: usize) -> usize {
        let u = (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
        ((vocab as f64).powf(u) - 1.0) as usize % vocab
    }
}

/// Percentile `p` (0..1) of sorted durations, nearest rank; zero for none.
fn pct(sorted: &[Duration], p: f64) -> Duration {
    oap_testkit::stats::nearest_rank(sorted, p * 100.0).unwrap_or_default()
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn time_queries(n: usize, mut f: impl FnMut(usize)) -> (Duration, Duration) {
    for i in 0..3 {
        f(i); // warm-up
    }
    let mut t: Vec<Duration> = (0..n)
        .map(|i| {
            let s = Instant::now();
            f(i + 3);
            s.elapsed()
        })
        .collect();
    t.sort();
    (pct(&t, 0.5), pct(&t, 0.99))
}

/// Dense and BM25 search over synthetic indexes.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Index sizes (rows), comma-separated.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "1000,10000,100000,1000000"
    )]
    sizes: Vec<usize>,
    /// Timed queries per figure.
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u32).range(1..))]
    queries: u32,
    /// Vector length.
    #[arg(long, default_value_t = 384, value_parser = clap::value_parser!(u32).range(1..))]
    dim: u32,
}

/// Builds, opens and searches one index per size and vector type.
pub fn run(args: Args) -> anyhow::Result<SearchReport> {
    let sizes = args.sizes;
    let queries = args.queries as usize;
    let dim = args.dim as usize;
    // One directory per run, so that two runs at once do not remove each
    // other's files.
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(format!(
        "../../target/oap-index-bench-{}",
        std::process::id()
    ));
    std::fs::create_dir_all(&dir).expect("create bench dir");
    let threads = SearchConfig::default().threads;
    let vocab_size = 50_000;
    let vocab: Vec<String> = (0..vocab_size).map(|i| format!("t{i}")).collect();

    let dynamic_dispatch = simsimd::capabilities::uses_dynamic_dispatch();
    eprintln!(
        "dim {dim}, k = 10, {queries} queries, default threads = {threads}, simsimd dynamic dispatch = {dynamic_dispatch}"
    );
    let mut rows = Vec::new();
    eprintln!(
        "| rows | dtype | file MB | bytes/row | build s | write s | open ms | dense p50 ms | dense p99 ms | dense 1-thr p50 ms | lexical p50 ms | lexical p99 ms |"
    );
    eprintln!("|---|---|---|---|---|---|---|---|---|---|---|---|");
    for &n in &sizes {
        for dtype in [VectorDtype::F32, VectorDtype::I8] {
            let path = dir.join(format!("bench-{n}-{dtype:?}.oapi"));
            let mut rng = Rng(n as u64 * 31 + dtype as u64);
            let t0 = Instant::now();
            // The daemon's own writer: the benchmark needs no test-only code
            // of oap-index, so the workspace build resolves oap-index as
            // `cargo build -p oapd` does.
            let mut w = StreamWriter::create(&path, dim, dtype, br#"{"model":"bench"}"#.to_vec())
                .expect("writer");
            for i in 0..n {
                let lexical = (0..8)
                    .map(|j| {
                        (
                            vocab[rng.zipf(vocab_size)].clone(),
                            if j < 2 { 3.0 } else { 1.0 },
                        )
                    })
                    .collect();
                w.add(DocInput {
                    id: format!("doc-{i:08}"),
                    record: Vec::new(),
                    rows: vec![RowInput {
                        key: [0; 16],
                        weight: 1.0,
                        vector: rng.unit_vec(dim),
                    }],
                    lexical,
                })
                .expect("add");
            }
            let build = t0.elapsed();
            let stats = w.finish().expect("write");
            let t1 = Instant::now();
            let mut idx = Index::open(&path).expect("open");
            let open = t1.elapsed();

            let qs: Vec<Vec<f32>> = (0..queries + 3).map(|_| rng.unit_vec(dim)).collect();
            let (d50, d99) = time_queries(queries, |i| {
                let h = idx.dense_search(&qs[i], 10).expect("search");
                std::hint::black_box(h);
            });
            idx.set_search_config(SearchConfig {
                threads: 1,
                ..SearchConfig::default()
            });
            let (s50, _) = time_queries(queries, |i| {
                let h = idx.dense_search(&qs[i], 10).expect("search");
                std::hint::black_box(h);
            });
            let lq: Vec<Vec<String>> = (0..queries + 3)
                .map(|_| (0..3).map(|_| vocab[rng.zipf(2_000)].clone()).collect())
                .collect();
            let (l50, l99) = time_queries(queries, |i| {
                std::hint::black_box(idx.lexical_search(&lq[i], 10));
            });
            let row = SearchRow {
                rows: n,
                dtype: format!("{dtype:?}"),
                file_mb: stats.bytes as f64 / 1e6,
                bytes_per_row: stats.bytes as f64 / n as f64,
                build_s: build.as_secs_f64(),
                write_s: stats.elapsed.as_secs_f64(),
                open_ms: ms(open),
                dense_p50_ms: ms(d50),
                dense_p99_ms: ms(d99),
                dense_one_thread_p50_ms: ms(s50),
                lexical_p50_ms: ms(l50),
                lexical_p99_ms: ms(l99),
            };
            eprintln!(
                "| {n} | {dtype:?} | {:.1} | {:.0} | {:.2} | {:.2} | {:.3} | {:.3} | {:.3} | {:.3} | {:.3} | {:.3} |",
                row.file_mb,
                row.bytes_per_row,
                row.build_s,
                row.write_s,
                row.open_ms,
                row.dense_p50_ms,
                row.dense_p99_ms,
                row.dense_one_thread_p50_ms,
                row.lexical_p50_ms,
                row.lexical_p99_ms,
            );
            rows.push(row);
            drop(idx);
            std::fs::remove_file(&path).expect("remove bench file");
        }
    }
    let _ = std::fs::remove_dir(&dir);
    Ok(SearchReport {
        dim,
        k: 10,
        queries,
        threads,
        simsimd_dynamic_dispatch: dynamic_dispatch,
        rows,
    })
}

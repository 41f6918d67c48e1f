//! Retrieval quality benchmark: Recall@1/3/5 and MRR of the lexical, dense
//! and hybrid modes over a labelled task set, plus how well the "no fitting
//! capability" threshold separates negatives from positives.
//!
//! ```text
//! cargo run --release -p oap-discovery --example retrieval_eval -- \
//!     --tasks ../shared/bench/discovery-tasks.jsonl \
//!     --dir ../shared/manifests/reference/oap-dev --dir ../shared/manifests/reference/manifest-repo
//! ```
//! Options: `--model DIR` (default models/all-MiniLM-L6-v2), `--base-names`
//! (score `name#k` manifests by their base name, for the BFCL corpus),
//! `--dtype i8`, `--misses` (print the tasks hybrid misses at 3).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use oap_discovery::{Engine, EngineConfig, Mode, Source};
use oap_embed::{BertEmbedder, EmbedOptions, Embedder};

struct Task {
    id: String,
    query: String,
    expected: Vec<String>,
}

struct Args {
    tasks: PathBuf,
    dirs: Vec<PathBuf>,
    model: PathBuf,
    base_names: bool,
    dtype_i8: bool,
    misses: bool,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        tasks: PathBuf::new(),
        dirs: Vec::new(),
        model: PathBuf::from("models/all-MiniLM-L6-v2"),
        base_names: false,
        dtype_i8: false,
        misses: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--tasks" => args.tasks = it.next().ok_or("--tasks needs a file")?.into(),
            "--dir" => args
                .dirs
                .push(it.next().ok_or("--dir needs a directory")?.into()),
            "--model" => args.model = it.next().ok_or("--model needs a directory")?.into(),
            "--base-names" => args.base_names = true,
            "--dtype" => args.dtype_i8 = it.next().as_deref() == Some("i8"),
            "--misses" => args.misses = true,
            other => return Err(format!("unknown argument {other}")),
        }
    }
    if args.dirs.is_empty() || args.tasks.as_os_str().is_empty() {
        return Err("need --tasks FILE and at least one --dir DIR".into());
    }
    Ok(args)
}

fn load_tasks(path: &PathBuf) -> Result<Vec<Task>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut tasks = Vec::new();
    for (n, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let v: serde_json::Value =
            serde_json::from_str(line).map_err(|e| format!("line {}: {e}", n + 1))?;
        tasks.push(Task {
            id: v["id"].as_str().unwrap_or_default().to_string(),
            query: v["query"].as_str().unwrap_or_default().to_string(),
            expected: v["expected"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(|x| x.as_str().map(str::to_string))
                        .collect()
                })
                .unwrap_or_default(),
        });
    }
    Ok(tasks)
}

fn base_name(name: &str) -> &str {
    match name.rsplit_once('#') {
        Some((base, suffix)) if suffix.chars().all(|c| c.is_ascii_digit()) => base,
        _ => name,
    }
}

#[derive(Default)]
struct Tally {
    positives: usize,
    hits: [usize; 3], // @1, @3, @5
    mrr: f64,
    negatives: usize,
    negatives_rejected: usize,
    positives_matched_right: usize,
    positives_rejected: usize,
    // (top score, is positive) for AUROC of the abstention signal
    top_scores: Vec<(f32, bool)>,
    latency_ms: Vec<f64>,
}

fn auroc(scores: &[(f32, bool)]) -> f64 {
    let pos: Vec<f32> = scores.iter().filter(|s| s.1).map(|s| s.0).collect();
    let neg: Vec<f32> = scores.iter().filter(|s| !s.1).map(|s| s.0).collect();
    if pos.is_empty() || neg.is_empty() {
        return f64::NAN;
    }
    let mut wins = 0.0;
    for p in &pos {
        for n in &neg {
            wins += if p > n {
                1.0
            } else if p == n {
                0.5
            } else {
                0.0
            };
        }
    }
    wins / (pos.len() * neg.len()) as f64
}

fn main() {
    let args = match parse_args() {
        Ok(args) => args,
        Err(err) => {
            eprintln!("retrieval_eval: {err}");
            std::process::exit(2);
        }
    };
    let tasks = load_tasks(&args.tasks).unwrap_or_else(|e| {
        eprintln!("retrieval_eval: {e}");
        std::process::exit(2)
    });
    let embedder: Arc<dyn Embedder> = Arc::new(
        BertEmbedder::load(&args.model, EmbedOptions::default()).unwrap_or_else(|e| {
            eprintln!("retrieval_eval: model: {e}");
            std::process::exit(2)
        }),
    );
    let data = std::env::temp_dir().join(format!("oapd-eval-{}", std::process::id()));
    let mut config = EngineConfig::new(&data);
    if let Ok(w) = std::env::var("OAPD_LEXW") {
        config.scoring.lexical_weight = w.parse().unwrap_or(0.3);
    }
    if args.dtype_i8 {
        config.dtype = oap_index::VectorDtype::I8;
    }
    let sources: Vec<Source> = args.dirs.iter().cloned().map(Source::Dir).collect();
    let started = Instant::now();
    let (engine, report) = Engine::open(config, sources, Some(embedder)).unwrap_or_else(|e| {
        eprintln!("retrieval_eval: index: {e}");
        std::process::exit(2)
    });
    println!(
        "corpus: {} manifests ({} rows), {} load problems, {} collisions; indexed in {:.1} s",
        report.docs,
        report.rows,
        report.problems.len(),
        report.collisions.len(),
        started.elapsed().as_secs_f64()
    );
    println!("tasks: {} ({})", tasks.len(), args.tasks.display());
    println!();
    println!("| mode | R@1 | R@3 | R@5 | MRR | neg. rejected | pos. matched right | pos. rejected | AUROC(top score) | p50 ms |");
    println!("|---|---|---|---|---|---|---|---|---|---|");
    for mode in [Mode::Lexical, Mode::Dense, Mode::Hybrid] {
        let mut tally = Tally::default();
        let mut misses = Vec::new();
        for task in &tasks {
            let Ok(found) = engine.discover_with(&task.query, 5, mode) else {
                continue;
            };
            tally.latency_ms.push(found.meta.total_ms);
            let names: Vec<&str> = found
                .candidates
                .iter()
                .map(|c| {
                    if args.base_names {
                        base_name(&c.name)
                    } else {
                        c.name.as_str()
                    }
                })
                .collect();
            let expected: Vec<&str> = task
                .expected
                .iter()
                .map(|e| {
                    if args.base_names {
                        base_name(e)
                    } else {
                        e.as_str()
                    }
                })
                .collect();
            let top = found.candidates.first().map_or(f32::MIN, |c| c.score);
            if expected.is_empty() {
                tally.negatives += 1;
                tally.negatives_rejected += found.best.is_none() as usize;
                tally.top_scores.push((top, false));
                continue;
            }
            tally.positives += 1;
            tally.top_scores.push((top, true));
            let rank = names.iter().position(|n| expected.contains(n));
            for (slot, k) in [1, 3, 5].iter().enumerate() {
                if rank.is_some_and(|r| r < *k) {
                    tally.hits[slot] += 1;
                }
            }
            if let Some(r) = rank {
                tally.mrr += 1.0 / (r + 1) as f64;
            }
            match &found.best {
                None => tally.positives_rejected += 1,
                Some(_) if rank == Some(0) => tally.positives_matched_right += 1,
                Some(_) => {}
            }
            if mode == Mode::Hybrid && args.misses && rank.is_none_or(|r| r >= 3) {
                misses.push(format!(
                    "  {} {:?} expected {:?} got {:?}",
                    task.id,
                    task.query.lines().next().unwrap_or_default(),
                    expected,
                    &names[..names.len().min(3)]
                ));
            }
        }
        tally.latency_ms.sort_by(f64::total_cmp);
        let p50 = tally
            .latency_ms
            .get(tally.latency_ms.len() / 2)
            .copied()
            .unwrap_or(f64::NAN);
        let p = tally.positives.max(1) as f64;
        println!(
            "| {:?} | {:.3} | {:.3} | {:.3} | {:.3} | {}/{} | {:.3} | {:.3} | {:.3} | {:.1} |",
            mode,
            tally.hits[0] as f64 / p,
            tally.hits[1] as f64 / p,
            tally.hits[2] as f64 / p,
            tally.mrr / p,
            tally.negatives_rejected,
            tally.negatives,
            tally.positives_matched_right as f64 / p,
            tally.positives_rejected as f64 / p,
            auroc(&tally.top_scores),
            p50
        );
        for miss in misses {
            println!("{miss}");
        }
    }
    let _ = std::fs::remove_dir_all(&data);
}

//! Synthesises a large, varied corpus of valid OAP manifests for start-up
//! and footprint benchmarks (`cargo xtask bench-speed` uses 10,000).
//!
//! ```text
//! oap-bench make-corpus --out DIR [--count 10000] [--from DIR]...
//! ```
//!
//! Base manifests are every valid `*.json` in the `--from` directories
//! (default: the BFCL-derived corpus `target/bench/bfcl/manifests` made by
//! `python3 bench/bfcl_corpus.py --out target/bench/bfcl`, the bundled
//! manifests, and `tests/fixtures/reference-manifests/{oap-dev,manifest-repo}`
//! when present). Output manifest `i` is base `i mod B`, unchanged in the
//! first round and, in later rounds, republished by a fictitious vendor: a
//! vendor-qualified name, the real description plus one sentence about the
//! vendor's edition (region, limits, formats: combinations from a small
//! vocabulary), vendor tags, a vendor URL and a version. So every name and
//! every embedded text is distinct, descriptions stay real prose, and the
//! index holds as many rows as a real catalogue of this size would.
//!
//! Deterministic: the same bases and count give byte-identical files; files
//! that are already identical are not rewritten, other `*.json` in `--out`
//! are removed. Every manifest is checked with the same parser as `oapd
//! manifest lint`; the run fails on any error. Not a measurement: it
//! writes no JSON, only a line of what it did (stderr).

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use serde_json::{json, Map, Value};

const VENDORS: &[(&str, &str)] = &[
    ("acme", "Acme Cloud"),
    ("globex", "Globex"),
    ("initech", "Initech"),
    ("umbrella", "Umbrella Data"),
    ("hooli", "Hooli"),
    ("stark", "Stark Industries"),
    ("wayne", "Wayne Enterprises"),
    ("tyrell", "Tyrell Systems"),
    ("cyberdyne", "Cyberdyne"),
    ("soylent", "Soylent Labs"),
    ("vandelay", "Vandelay Industries"),
    ("wonka", "Wonka Works"),
    ("aperture", "Aperture Science"),
    ("massive", "Massive Dynamic"),
    ("oscorp", "Oscorp"),
    ("gringotts", "Gringotts Data"),
];

const REGIONS: &[&str] = &[
    "Frankfurt",
    "Dublin",
    "Virginia",
    "Oregon",
    "Singapore",
    "Tokyo",
    "Sydney",
    "São Paulo",
    "Mumbai",
    "Stockholm",
    "Toronto",
    "Johannesburg",
];

const LIMITS: &[&str] = &[
    "rate-limited to 60 requests per minute",
    "rate-limited to 10 requests per second",
    "free for up to 1,000 calls a day",
    "billed per call",
    "answers are cached for five minutes",
    "answers are cached for one hour",
    "typical latency under 200 ms",
    "batch requests of up to 100 items are accepted",
    "requires an API key",
    "no authentication needed",
];

const FORMATS: &[&str] = &[
    "returns JSON",
    "returns JSON or CSV",
    "returns compact JSON with ISO-8601 timestamps",
    "returns UTF-8 JSON with metric units",
    "returns JSON with imperial units",
    "returns paginated JSON (50 items per page)",
    "returns JSON; errors follow RFC 7807",
];

const TEMPLATES: &[&str] = &[
    "{vendor} edition, hosted in {region}; {limit}; {format}.",
    "Operated by {vendor} from {region}: {limit}, {format}.",
    "This is the {vendor} mirror ({region} data centre); it {format} and is {limit}.",
    "{vendor} hosts this service in {region}. Note: {limit}.",
    "Provided by {vendor}. {format_cap}; {limit}.",
];

/// Writes a deterministic corpus of valid manifests.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Output directory (other `*.json` in it are removed).
    #[arg(long)]
    out: PathBuf,
    /// Manifests to write.
    #[arg(long, default_value_t = 10_000)]
    count: usize,
    /// Base manifest directories (default: the BFCL corpus, the bundled and
    /// the reference manifests, those present).
    #[arg(long)]
    from: Vec<PathBuf>,
}

impl Args {
    /// `count` manifests into `out` from the default bases: what a
    /// benchmark that needs a corpus generates when given none.
    pub(crate) fn generated(out: PathBuf, count: usize) -> Args {
        Args {
            out,
            count,
            from: Vec::new(),
        }
    }
}

/// Valid manifests of `dirs`, as JSON objects without unknown top-level
/// fields, sorted by name (then file) for a stable order.
fn load_bases(dirs: &[PathBuf]) -> Result<Vec<Map<String, Value>>, String> {
    let mut bases: Vec<(String, PathBuf, Map<String, Value>)> = Vec::new();
    let mut skipped = 0;
    for dir in dirs {
        let entries = std::fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        for entry in entries {
            let path = entry.map_err(|e| e.to_string())?.path();
            if path.extension().and_then(|e| e.to_str()) != Some("json") {
                continue;
            }
            let bytes = std::fs::read(&path).map_err(|e| format!("{}: {e}", path.display()))?;
            if oap_manifest::parse(&bytes).is_err() {
                skipped += 1;
                continue;
            }
            let Ok(Value::Object(mut doc)) = serde_json::from_slice::<Value>(&bytes) else {
                skipped += 1;
                continue;
            };
            doc.retain(|k, _| oap_manifest::KNOWN_TOP_LEVEL_FIELDS.contains(&k.as_str()));
            let name = doc["name"].as_str().unwrap_or_default().to_string();
            bases.push((name, path, doc));
        }
    }
    bases.sort_by(|a, b| (&a.0, &a.1).cmp(&(&b.0, &b.1)));
    eprintln!(
        "oap-bench make-corpus: {} base manifests from {} directories ({skipped} invalid skipped)",
        bases.len(),
        dirs.len()
    );
    Ok(bases.into_iter().map(|(_, _, doc)| doc).collect())
}

fn capitalise(s: &str) -> String {
    let mut chars = s.chars();
    match chars.next() {
        Some(first) => first.to_uppercase().chain(chars).collect(),
        None => String::new(),
    }
}

/// Base `i mod B`, republished by a vendor in round `i / B` (round 0 is the
/// base itself). `taken` holds the slugs already used, so ids stay unique.
fn variant(base: &Map<String, Value>, i: usize, b: usize, taken: &mut HashSet<String>) -> Value {
    let round = i / b;
    let mut doc = base.clone();
    let base_name = base["name"].as_str().unwrap_or("tool").to_string();
    if round == 0 && taken.insert(oap_manifest::slug(&base_name)) {
        return Value::Object(doc);
    }
    // Different vendors for the rounds of one base, spread over the bases.
    let v = (i % b + round * 5) % VENDORS.len();
    let (vendor, vendor_name) = VENDORS[v];
    let region = REGIONS[(i / 3 + round) % REGIONS.len()];
    let limit = LIMITS[(i * 7 + round) % LIMITS.len()];
    let format = FORMATS[(i * 5 + round * 3) % FORMATS.len()];
    let template = TEMPLATES[(i + round) % TEMPLATES.len()];
    let sentence = template
        .replace("{vendor}", vendor_name)
        .replace("{region}", region)
        .replace("{limit}", limit)
        .replace("{format_cap}", &capitalise(format))
        .replace("{format}", format);

    let mut name = format!("{vendor}.{base_name}");
    let mut n = 2;
    while !taken.insert(oap_manifest::slug(&name)) {
        name = format!("{vendor}.{base_name}.r{n}");
        n += 1;
    }
    let description = base["description"].as_str().unwrap_or_default().trim();
    let mut description = format!("{description} {sentence}");
    if description.chars().count() > oap_manifest::SPEC_DESCRIPTION_CHARS {
        description = description
            .chars()
            .take(oap_manifest::SPEC_DESCRIPTION_CHARS)
            .collect();
    }
    doc.insert("name".into(), json!(name));
    doc.insert("description".into(), json!(description));
    let mut tags: Vec<Value> = doc
        .get("tags")
        .and_then(|t| t.as_array())
        .cloned()
        .unwrap_or_default();
    tags.push(json!(vendor));
    tags.push(json!(region.to_lowercase()));
    doc.insert("tags".into(), Value::Array(tags));
    doc.insert("version".into(), json!(format!("{round}.{}.0", i % 10)));
    doc.insert(
        "publisher".into(),
        json!({"name": vendor_name, "url": format!("https://{vendor}.example")}),
    );
    // HTTP endpoints move to the vendor's host; stdio tools stay as they are.
    if let Some(Value::Object(invoke)) = doc.get_mut("invoke") {
        if let Some(url) = invoke.get("url").and_then(|u| u.as_str()) {
            if let Some(rest) = url
                .strip_prefix("https://")
                .or_else(|| url.strip_prefix("http://"))
            {
                let path = rest.find('/').map_or("/", |p| &rest[p..]);
                let url = format!("https://api.{vendor}.example/r{round}{path}");
                invoke.insert("url".into(), json!(url));
            }
        }
    }
    Value::Object(doc)
}

/// Writes the corpus.
pub fn run(mut args: Args) -> anyhow::Result<()> {
    write(&mut args).map_err(anyhow::Error::msg)
}

fn write(args: &mut Args) -> Result<(), String> {
    if args.from.is_empty() {
        let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        args.from = [
            "target/bench/bfcl/manifests",
            "manifests/bundled",
            "tests/fixtures/reference-manifests/oap-dev",
            "tests/fixtures/reference-manifests/manifest-repo",
        ]
        .iter()
        .map(|d| repo.join(d))
        .filter(|d| d.is_dir())
        .collect();
    }
    if args.from.is_empty() {
        return Err(
            "no base manifest directories (run `python3 bench/bfcl_corpus.py \
                    --out target/bench/bfcl` or pass --from DIR)"
                .into(),
        );
    }
    let bases = load_bases(&args.from)?;
    if bases.is_empty() {
        return Err("no valid base manifests".into());
    }
    std::fs::create_dir_all(&args.out).map_err(|e| format!("{}: {e}", args.out.display()))?;
    let mut taken = HashSet::new();
    let mut warnings = 0;
    let mut bytes_total = 0;
    let mut changed = 0;
    let mut written = HashSet::new();
    for i in 0..args.count {
        let doc = variant(&bases[i % bases.len()], i, bases.len(), &mut taken);
        let mut bytes = serde_json::to_vec_pretty(&doc).map_err(|e| e.to_string())?;
        bytes.push(b'\n');
        match oap_manifest::parse(&bytes) {
            Ok(parsed) => warnings += parsed.warnings.diagnostics.len(),
            Err(err) => {
                return Err(format!(
                    "generated manifest {i} is invalid:\n{}",
                    oap_manifest::lint_text(&format!("#{i}"), &err.report())
                ))
            }
        }
        let name = doc["name"].as_str().unwrap_or_default();
        let file = args
            .out
            .join(format!("{i:05}-{}.json", oap_manifest::slug(name)));
        bytes_total += bytes.len();
        // Identical files are left alone (the cached index stays valid and
        // the page cache undisturbed); stale ones are removed below.
        if std::fs::read(&file).ok().as_deref() != Some(&bytes[..]) {
            std::fs::write(&file, &bytes).map_err(|e| format!("{}: {e}", file.display()))?;
            changed += 1;
        }
        written.insert(file);
    }
    let mut removed = 0;
    for entry in std::fs::read_dir(&args.out).map_err(|e| e.to_string())? {
        let path = entry.map_err(|e| e.to_string())?.path();
        if path.extension().and_then(|e| e.to_str()) == Some("json") && !written.contains(&path) {
            std::fs::remove_file(&path).map_err(|e| format!("{}: {e}", path.display()))?;
            removed += 1;
        }
    }
    eprintln!(
        "{} manifests ({:.1} MB, {} validation warnings) in {}: {changed} written, \
         {} unchanged, {removed} stale removed",
        args.count,
        bytes_total as f64 / 1e6,
        warnings,
        args.out.display(),
        args.count - changed,
    );
    Ok(())
}

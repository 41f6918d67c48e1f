//! The snapshot pipeline (pipeline/oapd_pipeline.py) on a two-node Ray
//! cluster on this machine (pipeline/local_cluster.py: a head and a
//! worker node, real separate processes, both on 127.0.0.1), end to end:
//! manifests served over loopback HTTPS under one domain each (a test CA,
//! `crawler.hosts` mapping the domains to 127.0.0.1), request rows from
//! the scripted fake Ollama, the real `oapd` in every step. The snapshot
//! must verify with `oapd snapshot verify` and the reference `minisign`,
//! hold every served tool and the fake's request rows, and carry exactly
//! the vectors one machine computes for the same manifests with `oapd
//! crawl`, `oapd requests generate` and `oapd index`; both nodes must have
//! run shard tasks, and the assembly must have embedded nothing.
//!
//! It needs the Ray venv (pipeline/requirements.txt in target/pipeline-venv,
//! or the Python named by `OAPD_PIPELINE_PYTHON`): `cargo xtask
//! pipeline-check` makes it and runs this test, and `cargo xtask test`
//! does both after the suite. No traffic leaves loopback.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::support;
use fake_ollama::{ModelSpec, Script, Turn};
use oap_testkit::pki::Pki;
use oap_testkit::server::{serve_tls_raw, write_response};
use serde_json::{json, Value};

const MODEL: &str = "qwen3:4b";

/// The zone the test CA's wildcard certificate covers.
const ZONE: &str = "pipeline.test";

/// Domains served: more than the shards, so every shard crawls several;
/// `OAPD_PIPELINE_DOMAINS` serves more (to measure throughput).
fn domain_count() -> usize {
    std::env::var("OAPD_PIPELINE_DOMAINS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(10)
}

/// Shards: more than the two nodes, so both run some.
const SHARDS: usize = 4;

/// What the fake model writes for every tool.
const WRITTEN: [&str; 3] = [
    "look up the opening hours of a shop",
    "what time does the bakery close",
    "is the post office open on sunday",
];

fn python() -> PathBuf {
    let python = std::env::var_os("OAPD_PIPELINE_PYTHON").map_or_else(
        || repo_root().join("target/pipeline-venv/bin/python"),
        PathBuf::from,
    );
    assert!(
        python.is_file(),
        "{} is missing: `cargo xtask pipeline-check` installs pipeline/requirements.txt there",
        python.display()
    );
    python
}

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The manifest `host` serves: tool N; tool 0 has an example request of
/// its own, so it gets no rows written.
fn manifest_of(host: &str) -> Option<String> {
    let number: usize = host
        .strip_suffix(&format!(".{ZONE}"))?
        .strip_prefix('t')?
        .parse()
        .ok()?;
    let mut manifest = json!({
        "oap": "1.0",
        "name": format!("opening-hours-{number}"),
        "description": format!("Opening hours of the shops of district {number}, from the city's register."),
        "invoke": {"method": "GET", "url": "https://api.example.org/hours"}
    });
    if number == 0 {
        manifest["examples"] =
            json!([{"input": "x", "description": "when does the pharmacy open"}]);
    }
    Some(manifest.to_string())
}

fn text(output: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

fn run(command: &mut Command) -> Output {
    let output = command.output().unwrap();
    assert!(output.status.success(), "{command:?}:\n{}", text(&output));
    output
}

/// One embedded row: its key and its vector's bits.
type Row = ([u8; 16], Vec<u32>);

/// Every document's rows of an index file, by document id, in the index's
/// order.
fn vectors(path: &Path) -> BTreeMap<String, Vec<Row>> {
    let index = oap_index::Index::open(path).unwrap();
    (0..u32::try_from(index.len()).unwrap())
        .map(|doc| {
            let rows = index
                .rows_of(doc)
                .map(|row| (row.key, row.vector.iter().map(|v| v.to_bits()).collect()))
                .collect();
            (index.doc_id(doc).unwrap().to_owned(), rows)
        })
        .collect()
}

#[test]
#[ignore = "needs the Ray venv: `cargo xtask pipeline-check` makes it and runs this"]
fn ray_pipeline_builds_a_signed_snapshot_on_two_nodes_with_the_vectors_of_one_machine() {
    let python = python();
    let domain_count = domain_count();
    let dir = tempfile::tempdir().unwrap();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let pki = Pki::new(&[format!("*.{ZONE}")]);
    let listener = runtime
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .unwrap();
    let port = listener.local_addr().unwrap().port();
    runtime.spawn(serve_tls_raw(
        listener,
        pki.server.clone(),
        |mut tls, head| async move {
            match manifest_of(&head.host).filter(|_| head.path == "/.well-known/oap.json") {
                Some(body) => {
                    let headers = [("content-type", "application/json".to_string())];
                    write_response(&mut tls, "200 OK", &headers, body.as_bytes()).await;
                }
                None => write_response(&mut tls, "404 Not Found", &[], b"").await,
            }
        },
    ));
    let upstream = support::fake(
        Script::new()
            .model(ModelSpec::new(MODEL).capabilities(&["completion", "tools"]))
            .default_turn(Turn::reply(json!({ "requests": WRITTEN }).to_string())),
    );

    let hosts: Vec<String> = (0..domain_count).map(|n| format!("t{n}.{ZONE}")).collect();
    let domains: Vec<String> = hosts.iter().map(|h| format!("{h}:{port}")).collect();
    let ca_file = dir.path().join("ca.pem");
    std::fs::write(&ca_file, &pki.ca_pem).unwrap();
    let host_map: Vec<String> = hosts.iter().map(|h| format!("\"{h}=127.0.0.1\"")).collect();
    let config = dir.path().join("builder.yaml");
    std::fs::write(
        &config,
        format!(
            "manifests:\n  bundled: false\nembedding:\n  model_dir: {:?}\n\
             crawler:\n  ca_file: {ca_file:?}\n  allow_private: [\"127.0.0.0/8\"]\n  hosts: [{}]\n  fetch_timeout: 10\n",
            support::require_model(),
            host_map.join(", ")
        ),
    )
    .unwrap();
    let domain_list = dir.path().join("domains.txt");
    std::fs::write(
        &domain_list,
        format!("# the test's domains\n{}\n", domains.join("\n")),
    )
    .unwrap();
    let keys = dir.path().join("keys");
    run(support::oapd()
        .args(["snapshot", "keygen", "--out"])
        .arg(&keys));

    let snapshot = dir.path().join("snapshot");
    let report = dir.path().join("report.json");
    let pipeline = repo_root().join("pipeline");
    let ran = Command::new(&python)
        .arg(pipeline.join("local_cluster.py"))
        .arg("--domains")
        .arg(&domain_list)
        .args(["--shards", &SHARDS.to_string(), "--work"])
        .arg(dir.path().join("work"))
        .args(["--oapd", support::OAPD, "--config"])
        .arg(&config)
        .arg("--key")
        .arg(keys.join("snapshot.key"))
        .arg("--out")
        .arg(&snapshot)
        .args([
            "--version",
            "7",
            "--ollama",
            &upstream.fake.url(),
            "--model",
            MODEL,
        ])
        .arg("--report")
        .arg(&report)
        .current_dir(&pipeline)
        .output()
        .unwrap();
    assert!(ran.status.success(), "the pipeline failed:\n{}", text(&ran));
    let report: Value = serde_json::from_slice(&std::fs::read(&report).unwrap()).unwrap();

    // Both nodes ran shard tasks; no domain failed; the assembly took every
    // vector from the shards.
    assert_eq!(report["nodes"].as_array().unwrap().len(), 2, "{report:#}");
    let shards = report["shards"].as_array().unwrap();
    assert_eq!(shards.len(), SHARDS, "{report:#}");
    for shard in shards {
        assert_eq!(shard["crawl"]["failed"], 0, "{report:#}");
        assert!(
            shard["index"]["embedded"].as_u64().unwrap() > 0,
            "{report:#}"
        );
    }
    assert_eq!(
        report["assembly"]["index"]["manifests"], domain_count,
        "{report:#}"
    );
    assert_eq!(report["assembly"]["index"]["embedded"], 0, "{report:#}");

    // Signed: the reference minisign and oapd's own check accept it.
    run(Command::new("minisign")
        .args(["-V", "-m"])
        .arg(snapshot.join("snapshot.json"))
        .arg("-p")
        .arg(keys.join("snapshot.pub")));
    let verified = run(support::oapd()
        .env("OAP_EMBEDDING_MODEL_DIR", support::require_model())
        .args(["snapshot", "verify"])
        .arg(&snapshot)
        .arg("--public-key")
        .arg(keys.join("snapshot.pub")));
    assert!(
        text(&verified).contains("snapshot version 7"),
        "{}",
        text(&verified)
    );

    // Every served tool is in the catalog.
    let catalog = std::fs::read_to_string(snapshot.join("catalog.jsonl")).unwrap();
    let mut ids: Vec<String> = catalog
        .lines()
        .map(|line| {
            serde_json::from_str::<Value>(line).unwrap()["id"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();
    ids.sort();
    let mut served: Vec<String> = (0..domain_count)
        .map(|n| format!("t{n}.{ZONE}:{port}/opening-hours-{n}"))
        .collect();
    served.sort();
    assert_eq!(ids, served);

    // The fake's rows, for every tool but the one with its own request.
    let rows: Value =
        serde_json::from_slice(&std::fs::read(snapshot.join("generated-requests.json")).unwrap())
            .unwrap();
    let entries = rows["entries"].as_array().unwrap();
    assert_eq!(entries.len(), domain_count - 1, "{rows:#}");
    assert!(
        entries.iter().all(|e| e["requests"] == json!(WRITTEN)),
        "{rows:#}"
    );

    // One machine, no Ray, no donors: the same vectors, bit for bit.
    let single = dir.path().join("single");
    let on_one_machine = |command: &mut Command| {
        run(command
            .env("OAPD_CONFIG", &config)
            .env("OAP_INDEX_DATA_DIR", &single))
    };
    on_one_machine(support::oapd().args(["crawl", "--once"]).args(&domains));
    on_one_machine(
        support::oapd()
            .args(["requests", "generate", "--crawled"])
            .arg(single.join("crawled"))
            .arg("--out")
            .arg(single.join("generated-requests.json"))
            .args(["--ollama", &upstream.fake.url(), "--model", MODEL]),
    );
    on_one_machine(support::oapd().arg("index"));
    let expected = vectors(&single.join("index.oapx"));
    let shipped = vectors(&snapshot.join("index.oapx"));
    assert_eq!(expected.len(), domain_count);
    // The request rows are embedded too: the tools written for have three
    // more rows than the one with a request of its own.
    let rows_of = |n: usize| expected[&format!("t{n}.{ZONE}:{port}/opening-hours-{n}")].len();
    assert_eq!(rows_of(1), rows_of(0) - 1 + WRITTEN.len());
    assert!(
        shipped == expected,
        "the snapshot's vectors differ from one machine's"
    );
}

//! What a caller of `oap-bench` relies on: one JSON document per measuring
//! run (stdout or `--json FILE`), the human table on stderr only, and bad
//! arguments refused with a message naming them.

use std::process::{Command, Output};

use oap_bench::report::SearchReport;

fn oap_bench(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_oap-bench"))
        .args(args)
        .output()
        .expect("run oap-bench")
}

const SMALL_SEARCH: &[&str] = &["search", "--sizes", "1000", "--queries", "3", "--dim", "16"];

#[test]
fn search_writes_one_json_report_on_stdout_and_its_table_on_stderr() {
    let out = oap_bench(SMALL_SEARCH);
    assert!(out.status.success(), "{out:?}");
    let report: SearchReport = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!((report.dim, report.k, report.queries), (16, 10, 3));
    let kinds: Vec<(usize, &str)> = report
        .rows
        .iter()
        .map(|row| (row.rows, row.dtype.as_str()))
        .collect();
    assert_eq!(kinds, [(1000, "F32"), (1000, "I8")]);
    assert!(report
        .rows
        .iter()
        .all(|row| row.dense_p50_ms > 0.0 && row.dense_p99_ms >= row.dense_p50_ms));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("| rows | dtype |"), "{stderr}");
}

#[test]
fn json_flag_writes_the_report_to_the_file_and_nothing_on_stdout() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("search.json");
    let mut args = SMALL_SEARCH.to_vec();
    let path_arg = path.to_string_lossy().into_owned();
    args.extend(["--json", &path_arg]);
    let out = oap_bench(&args);
    assert!(out.status.success(), "{out:?}");
    assert!(out.stdout.is_empty(), "{out:?}");
    let report: SearchReport = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    assert_eq!(report.rows.len(), 2);
}

#[test]
fn a_load_run_refuses_an_address_off_loopback_before_connecting() {
    // Refused while the arguments are read: nothing is sent anywhere.
    let out = oap_bench(&["discover-load", "--addr", "203.0.113.7:80"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(out.stdout.is_empty());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("--addr") && stderr.contains("only loopback addresses are allowed"),
        "{stderr}"
    );
}

#[test]
fn a_bad_number_names_the_flag() {
    let out = oap_bench(&["proxy-load", "--concurrency", "0"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("--concurrency"), "{stderr}");
}

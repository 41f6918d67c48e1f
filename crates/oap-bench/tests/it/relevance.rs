//! `oap-bench relevance`: each task is answered against its own catalog by
//! the real engine and model, and a task file it cannot read is refused
//! with the line named.

use std::path::{Path, PathBuf};
use std::process::Command;

use oap_bench::report::RelevanceReport;
use oap_testkit::model::{require_model, workspace_root};

fn bundled(name: &str) -> PathBuf {
    workspace_root().join(format!("manifests/bundled/{name}.json"))
}

/// A catalog directory holding the named bundled manifests.
fn catalog(root: &Path, dir: &str, tools: &[&str]) {
    let at = root.join("catalogs").join(dir);
    std::fs::create_dir_all(&at).unwrap();
    for tool in tools {
        std::fs::copy(bundled(tool), at.join(format!("{tool}.json"))).unwrap();
    }
}

fn relevance(root: &Path, tasks: &str) -> std::process::Output {
    std::fs::write(root.join("tasks.jsonl"), tasks).unwrap();
    let model = require_model();
    Command::new(env!("CARGO_BIN_EXE_oap-bench"))
        .arg("relevance")
        .arg("--tasks")
        .arg(root.join("tasks.jsonl"))
        .arg("--catalogs")
        .arg(root.join("catalogs"))
        .arg("--model")
        .arg(model)
        .output()
        .expect("run oap-bench")
}

#[test]
fn each_task_is_answered_against_its_own_catalog() {
    let dir = tempfile::tempdir().unwrap();
    catalog(dir.path(), "words", &["wc"]);
    catalog(dir.path(), "text", &["wc", "tr", "date"]);
    // "book a flight" has no tool in its catalog; "uppercase" finds `tr`
    // among three, and only in the catalog it was given.
    let out = relevance(
        dir.path(),
        concat!(
            r#"{"id":"fits","query":"convert this text to uppercase","catalog":"text","expected":["tr"],"split":"tuning"}"#,
            "\n",
            r#"{"id":"no-fit","query":"book me a flight to Lisbon next Tuesday","catalog":"words","expected":[],"split":"evaluation"}"#,
            "\n",
            r#"{"id":"other-catalog","query":"convert this text to uppercase","catalog":"words","expected":["tr"],"split":"evaluation"}"#,
            "\n",
        ),
    );
    assert!(out.status.success(), "{out:?}");
    let report: RelevanceReport = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!((report.catalogs, report.load_problems), (2, 0));
    let half = |name: &str| report.halves.iter().find(|h| h.half == name).unwrap();
    let tuning = half("tuning");
    assert_eq!((tuning.fitting, tuning.no_fit), (1, 0));
    assert_eq!(tuning.auroc, None, "one kind of task only");
    assert_eq!(tuning.fitting_best_right, 1.0);
    assert_eq!(tuning.fitting_abstained, 0.0);
    let evaluation = half("evaluation");
    assert_eq!((evaluation.fitting, evaluation.no_fit), (1, 1));
    // With only `wc` in its catalog, the uppercase request's best candidate
    // is not its tool.
    assert_eq!(evaluation.fitting_best_right, 0.0);
    assert_eq!(evaluation.no_fit_abstained, 1.0);
    let all = half("all");
    assert_eq!((all.fitting, all.no_fit), (2, 1));
    // The flight request scores below the uppercase request answered by
    // `tr`; against `wc` alone the two may come either way.
    assert!(evaluation.auroc.is_some());
    let auroc = all.auroc.unwrap();
    assert!((0.5..=1.0).contains(&auroc), "{auroc}");
}

#[test]
fn a_task_with_two_fitting_tools_is_refused_with_its_line() {
    let dir = tempfile::tempdir().unwrap();
    catalog(dir.path(), "text", &["wc", "tr"]);
    let out = relevance(
        dir.path(),
        concat!(
            r#"{"id":"a","query":"count words","catalog":"text","expected":["wc"],"split":"tuning"}"#,
            "\n",
            r#"{"id":"b","query":"count words","catalog":"text","expected":["wc","tr"],"split":"tuning"}"#,
            "\n",
        ),
    );
    assert!(!out.status.success(), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("line 2") && stderr.contains("one tool or none"),
        "{stderr}"
    );
}

#[test]
fn a_task_without_its_catalog_is_refused_with_the_field_named() {
    let dir = tempfile::tempdir().unwrap();
    catalog(dir.path(), "text", &["wc"]);
    let out = relevance(
        dir.path(),
        r#"{"id":"a","query":"count words","expected":["wc"],"split":"tuning"}"#,
    );
    assert!(!out.status.success(), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("line 1") && stderr.contains("catalog"),
        "{stderr}"
    );
}

#[test]
fn a_catalog_directory_that_is_not_there_is_named() {
    let dir = tempfile::tempdir().unwrap();
    catalog(dir.path(), "text", &["wc"]);
    let out = relevance(
        dir.path(),
        r#"{"id":"a","query":"count words","catalog":"gone","expected":["wc"],"split":"tuning"}"#,
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{out:?}");
    assert!(stderr.contains("gone"), "{stderr}");
}

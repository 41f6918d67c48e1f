//! Manifests compiled into the binary, so a fresh install answers
//! discovery requests before the operator has configured anything.
//!
//! They are the Unix command-line tools of the OAP reference corpus (CC0,
//! see manifests/bundled/README.md). They are `stdio` manifests, trusted
//! because they ship with the daemon, never because a document said so.

macro_rules! bundled {
    ($($file:literal),* $(,)?) => {
        &[$(($file, include_bytes!(concat!("../../../manifests/bundled/", $file)))),*]
    };
}

/// `(file name, bytes)` of every bundled manifest.
pub const MANIFESTS: &[(&str, &[u8])] = bundled![
    "apropos.json",
    "awk.json",
    "bc.json",
    "column.json",
    "cut.json",
    "date.json",
    "grep.json",
    "jq.json",
    "man.json",
    "paste.json",
    "sed.json",
    "tr.json",
    "wc.json",
];

/// The bundled set as a catalog source.
pub fn source() -> oap_discovery::Source {
    oap_discovery::Source::Bundled(
        MANIFESTS
            .iter()
            .map(|(name, bytes)| (name.to_string(), bytes.to_vec()))
            .collect(),
    )
}

/// Requests people say for the bundled tools, by manifest name
/// (manifests/bundled-requests.json, see manifests/bundled/README.md).
/// Kept beside the manifests' directory, not in it: everything that reads
/// that directory takes each `*.json` there for a manifest.
pub const REQUESTS: &[u8] = include_bytes!("../../../manifests/bundled-requests.json");

/// The bundled tools' request rows, for the bundled manifests only.
///
/// An operator's manifest that overrides a bundled one (same `name`, in a
/// `manifests.dirs` directory; origin `dir`) gets none of them: the rows
/// were written for the shipped description, and the operator's file may
/// describe another tool under the same name, which rows saying what the
/// shipped tool does would draw requests to.
pub fn request_rows() -> Result<oap_discovery::RequestTable, oap_discovery::RequestTableError> {
    oap_discovery::RequestTable::parse(
        REQUESTS,
        "bundled-requests.json (compiled in)",
        oap_discovery::AppliesTo::OriginKinds(vec!["bundled".into()]),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bundled_requests_parse_and_name_every_bundled_tool_only() {
        let table = request_rows().unwrap_or_else(|e| panic!("{e}"));
        let mut names: Vec<String> = MANIFESTS
            .iter()
            .map(|(file, bytes)| {
                oap_manifest::parse(bytes)
                    .unwrap_or_else(|e| panic!("{file}: {e}"))
                    .manifest
                    .name
            })
            .collect();
        names.sort();
        let mut listed: Vec<String> = table.names().map(str::to_string).collect();
        listed.sort();
        assert_eq!(listed, names, "one list of requests per bundled manifest");
        for name in &names {
            let count = table.get(name).map_or(0, <[String]>::len);
            assert!(
                (6..=oap_discovery::requests::MAX_REQUEST_ROWS).contains(&count),
                "{name}: {count} requests, 6 to 8 wanted"
            );
        }
    }

    #[test]
    fn every_bundled_manifest_is_valid_and_listed() {
        let on_disk = std::fs::read_dir(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../manifests/bundled"
        ))
        .expect("bundled dir")
        .filter_map(|e| e.ok())
        .filter(|e| e.path().extension().is_some_and(|x| x == "json"))
        .count();
        assert_eq!(
            on_disk,
            MANIFESTS.len(),
            "a file in manifests/bundled is not compiled in"
        );
        for (name, bytes) in MANIFESTS {
            let parsed = oap_manifest::parse(bytes).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(parsed.manifest.invoke.method, "stdio", "{name}");
        }
    }
}

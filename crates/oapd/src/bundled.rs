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

#[cfg(test)]
mod tests {
    use super::*;

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

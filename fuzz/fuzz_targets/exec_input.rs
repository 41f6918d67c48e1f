//! oap-exec's outside input:
//! - the credentials file (YAML or JSON, written by a person): any bytes
//!   load or are refused with a message, never a panic; a loaded store
//!   answers for each of its hosts with a non-empty secret, in any case and
//!   with a trailing dot;
//! - a stdio tool's argument string from a model: split into words without
//!   expansion; words quoted back and split again give the same words.
#![no_main]

use std::os::unix::fs::PermissionsExt;

use libfuzzer_sys::fuzz_target;
use oap_exec::{split_words, CredentialStore};

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    match mode % 3 {
        0 | 1 => {
            let name = if mode % 3 == 0 {
                "credentials.yaml"
            } else {
                "credentials.json"
            };
            let path = oap_fuzz::scratch().join(name);
            std::fs::write(&path, rest).unwrap();
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
            match CredentialStore::load(&path) {
                Ok(store) => {
                    let domains: Vec<String> = store.domains().map(str::to_string).collect();
                    assert_eq!(domains.len(), store.len());
                    for d in &domains {
                        let secret = store.get(d).expect("a listed host has a secret").secret();
                        assert!(!secret.is_empty());
                        assert!(
                            store.get(&format!("{}.", d.to_ascii_uppercase())).is_some(),
                            "{d}"
                        );
                    }
                }
                Err(e) => assert!(!e.to_string().is_empty()),
            }
        }
        _ => {
            let Ok(text) = std::str::from_utf8(rest) else {
                return;
            };
            let Ok(words) = split_words(text) else { return };
            let quoted: Vec<String> = words
                .iter()
                .map(|w| format!("'{}'", w.replace('\'', "'\\''")))
                .collect();
            assert_eq!(
                split_words(&quoted.join(" ")).as_ref(),
                Ok(&words),
                "{text:?}"
            );
        }
    }
});

//! The crawler's envelope files (a remote manifest stored with its origin)
//! read back from disk: arbitrary bytes are refused with an error or give a
//! document that writes back to the same document under a file name that
//! stays in its directory. (An envelope claiming local trust parses; the
//! catalog that loads envelopes refuses it, oap-discovery's remote.rs.)
#![no_main]

use libfuzzer_sys::fuzz_target;
use oap_store::{envelope_name, read_envelope_at, write_envelope, MAX_ENVELOPE_BYTES};

fuzz_target!(|data: &[u8]| {
    let dir = oap_fuzz::scratch();
    let path = dir.join("input.json");
    std::fs::write(&path, data).unwrap();
    let Ok(doc) = read_envelope_at(&path) else {
        return;
    };
    assert!(
        data.len() <= MAX_ENVELOPE_BYTES,
        "{} bytes read past the cap",
        data.len()
    );
    let name = envelope_name(&doc.host);
    assert!(!name.contains('/') && name != "." && name != "..", "{name}");
    let sub = dir.join("out");
    std::fs::create_dir_all(&sub).unwrap();
    let written = write_envelope(&sub, &doc).unwrap();
    assert_eq!(written.parent(), Some(sub.as_path()));
    assert_eq!(read_envelope_at(&written).unwrap(), doc);
    std::fs::remove_file(written).unwrap();
});

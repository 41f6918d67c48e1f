//! A torn, truncated or hostile file must give `Corrupt { reason }`, never a panic.

use oap_index::{Index, IndexError, VectorDtype};

use crate::common::{
    exercise, fix_all_crcs, fix_header_crc, open_bytes, section, wr_u32, wr_u64, write_small, Rng,
    HEADER_LEN, N_SECTIONS, SECTION_NAMES,
};

fn reason(r: Result<Index, IndexError>) -> String {
    match r {
        Err(IndexError::Corrupt { reason, .. }) => reason,
        Err(e) => panic!("expected Corrupt, got {e}"),
        Ok(_) => panic!("expected Corrupt, file opened fine"),
    }
}

fn fixture(dtype: VectorDtype) -> (tempfile::TempDir, Vec<u8>) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("good");
    write_small(&path, dtype);
    let bytes = std::fs::read(&path).unwrap();
    (dir, bytes)
}

#[test]
fn flip_a_byte_in_each_section() {
    for dtype in [VectorDtype::F32, VectorDtype::I8] {
        let (dir, good) = fixture(dtype);
        let p = dir.path().join("bad");
        for (i, name) in SECTION_NAMES.iter().enumerate() {
            let (off, len) = section(&good, i);
            assert!(len > 0, "fixture section {name} is empty");
            for at in [off, off + len / 2, off + len - 1] {
                let mut b = good.clone();
                b[at] ^= 0x40;
                let r = reason(open_bytes(&p, &b));
                assert!(r.contains(name) && r.contains("crc"), "{name}: {r}");
            }
        }
        // Header field and padding bytes.
        for at in [9, 21, 40, 130, 600, 637] {
            let mut b = good.clone();
            b[at] ^= 1;
            let r = reason(open_bytes(&p, &b));
            assert!(
                r.contains("crc") || r.contains("version"),
                "header byte {at}: {r}"
            );
        }
        let (off0, len0) = section(&good, 0);
        let (off1, _) = section(&good, 1);
        if off0 + len0 < off1 {
            let mut b = good.clone();
            b[off1 - 1] = 1;
            assert!(reason(open_bytes(&p, &b)).contains("padding"));
        }
    }
}

#[test]
fn truncation_and_extension() {
    let (dir, good) = fixture(VectorDtype::F32);
    let p = dir.path().join("bad");
    let n = good.len();
    for cut in [
        0,
        1,
        8,
        100,
        HEADER_LEN - 1,
        HEADER_LEN,
        HEADER_LEN + 1,
        n / 2,
        n - 64,
        n - 1,
    ] {
        let r = reason(open_bytes(&p, &good[..cut]));
        assert!(
            r.contains("shorter") || r.contains("truncated"),
            "cut {cut}: {r}"
        );
    }
    let mut longer = good.clone();
    longer.push(0);
    assert!(reason(open_bytes(&p, &longer)).contains("truncated or extended"));
}

#[test]
fn garbage_magic_version() {
    let (dir, good) = fixture(VectorDtype::F32);
    let p = dir.path().join("bad");
    let mut rng = Rng(3);
    let garbage: Vec<u8> = (0..4096).map(|_| rng.next_u64() as u8).collect();
    assert!(reason(open_bytes(&p, &garbage)).contains("magic"));
    assert!(reason(open_bytes(&p, &vec![0u8; 10_000])).contains("magic"));

    let mut b = good.clone();
    b[..8].copy_from_slice(b"OAPINDEY");
    fix_header_crc(&mut b);
    assert!(reason(open_bytes(&p, &b)).contains("magic"));

    let mut b = good.clone();
    wr_u32(&mut b, 8, 2);
    fix_header_crc(&mut b);
    let r = reason(open_bytes(&p, &b));
    assert!(r.contains("unsupported format version 2"), "{r}");
}

/// Header fields patched to absurd values with a *valid* header crc: only bounds
/// checks can catch these.
#[test]
fn absurd_header_fields_with_valid_crc() {
    let (dir, good) = fixture(VectorDtype::F32);
    let p = dir.path().join("bad");
    type Patch = Box<dyn Fn(&mut Vec<u8>)>;
    let patches: Vec<(&str, Patch)> = vec![
        ("n_docs max", Box::new(|b| wr_u64(b, 32, u64::MAX))),
        (
            "n_docs 2^32-1",
            Box::new(|b| wr_u64(b, 32, u64::from(u32::MAX))),
        ),
        (
            "n_docs +1",
            Box::new(|b| {
                let v = crate::common::rd_u64(b, 32);
                wr_u64(b, 32, v + 1)
            }),
        ),
        ("n_docs 0", Box::new(|b| wr_u64(b, 32, 0))),
        ("n_rows max", Box::new(|b| wr_u64(b, 40, u64::MAX))),
        ("n_rows huge", Box::new(|b| wr_u64(b, 40, 1 << 40))),
        (
            "n_rows +1",
            Box::new(|b| {
                let v = crate::common::rd_u64(b, 40);
                wr_u64(b, 40, v + 1)
            }),
        ),
        ("n_terms max", Box::new(|b| wr_u64(b, 48, u64::MAX))),
        (
            "n_terms -1",
            Box::new(|b| {
                let v = crate::common::rd_u64(b, 48);
                wr_u64(b, 48, v - 1)
            }),
        ),
        ("n_postings max", Box::new(|b| wr_u64(b, 56, u64::MAX))),
        ("avgdl nan", Box::new(|b| wr_u64(b, 64, f64::NAN.to_bits()))),
        (
            "avgdl neg",
            Box::new(|b| wr_u64(b, 64, (-1.0f64).to_bits())),
        ),
        ("file_len", Box::new(|b| wr_u64(b, 72, 1 << 50))),
        ("dim 0", Box::new(|b| wr_u32(b, 20, 0))),
        ("dim max", Box::new(|b| wr_u32(b, 20, u32::MAX))),
        ("dim 65536", Box::new(|b| wr_u32(b, 20, 65_536))),
        ("dtype", Box::new(|b| wr_u32(b, 24, 7))),
        ("dtype i8", Box::new(|b| wr_u32(b, 24, 1))),
        ("section count", Box::new(|b| wr_u32(b, 28, 15))),
        ("header len", Box::new(|b| wr_u32(b, 12, 64))),
        ("flags", Box::new(|b| wr_u32(b, 16, 1))),
        (
            "kind swap",
            Box::new(|b| {
                wr_u32(b, 128, 1);
                wr_u32(b, 160, 0)
            }),
        ),
    ];
    let mut all = patches;
    for (i, name) in SECTION_NAMES.iter().enumerate() {
        let at = 128 + i * 32;
        let leak = |s: String| -> &'static str { Box::leak(s.into_boxed_str()) };
        all.push((
            leak(format!("{name} offset max")),
            Box::new(move |b| wr_u64(b, at + 8, u64::MAX)),
        ));
        all.push((
            leak(format!("{name} offset +64")),
            Box::new(move |b| {
                let v = crate::common::rd_u64(b, at + 8);
                wr_u64(b, at + 8, v + 64)
            }),
        ));
        all.push((
            leak(format!("{name} offset 0")),
            Box::new(move |b| wr_u64(b, at + 8, 0)),
        ));
        all.push((
            leak(format!("{name} len max")),
            Box::new(move |b| wr_u64(b, at + 16, u64::MAX)),
        ));
        all.push((
            leak(format!("{name} len +1")),
            Box::new(move |b| {
                let v = crate::common::rd_u64(b, at + 16);
                wr_u64(b, at + 16, v + 1)
            }),
        ));
        all.push((
            leak(format!("{name} len 0")),
            Box::new(move |b| wr_u64(b, at + 16, 0)),
        ));
    }
    for (what, patch) in all {
        let mut b = good.clone();
        patch(&mut b);
        fix_header_crc(&mut b);
        let r = reason(open_bytes(&p, &b));
        assert!(
            !r.contains("header crc"),
            "{what}: caught by crc, not bounds: {r}"
        );
        // Same mutation with every crc recomputed too.
        let mut b2 = good.clone();
        patch(&mut b2);
        fix_all_crcs(&mut b2);
        let _ = reason(open_bytes(&p, &b2));
    }
}

/// Content-level hostility with all crcs valid: unsorted dictionaries, out-of-range
/// doc numbers, bad UTF-8, invalid JSON, non-finite floats.
#[test]
fn hostile_contents_with_valid_crcs() {
    let (dir, good) = fixture(VectorDtype::F32);
    let p = dir.path().join("bad");
    let sec = |i: usize| section(&good, i);
    let mut cases: Vec<(&str, Vec<u8>)> = Vec::new();

    let mut b = good.clone();
    b[sec(0).0] = b'{' ^ 0xff;
    cases.push(("meta", b));

    let (off, _) = sec(2);
    let mut b = good.clone();
    b[off] = 0xff;
    cases.push(("UTF-8", b));

    let (off, _) = sec(5);
    let mut b = good.clone();
    b.swap(off, off + 4);
    b.swap(off + 1, off + 5);
    cases.push(("id_sorted", b));

    let mut b = good.clone();
    wr_u32(&mut b, off, 999);
    cases.push(("id_sorted", b));

    let (off, _) = sec(1);
    let mut b = good.clone();
    wr_u64(&mut b, off + 8, 1 << 40);
    cases.push(("id_offsets", b));

    let (off, len) = sec(6);
    let mut b = good.clone();
    wr_u64(&mut b, off + len - 8, 1);
    cases.push(("row_offsets", b));

    let (off, _) = sec(7);
    let mut b = good.clone();
    wr_u32(&mut b, off + 16, f32::NAN.to_bits());
    cases.push(("row_meta", b));

    let (off, _) = sec(10);
    let mut b = good.clone();
    b.swap(off, off + 1);
    b[off] = b'z';
    cases.push(("term", b));

    let (off, _) = sec(12);
    let mut b = good.clone();
    wr_u32(&mut b, off, 1_000_000);
    cases.push(("posting", b));

    let mut b = good.clone();
    wr_u32(&mut b, off + 4, (-1.0f32).to_bits());
    cases.push(("tf", b));

    let (off, _) = sec(13);
    let mut b = good.clone();
    wr_u32(&mut b, off, f32::INFINITY.to_bits());
    cases.push(("doc_lens", b));

    for (needle, mut b) in cases {
        fix_all_crcs(&mut b);
        let r = reason(open_bytes(&p, &b));
        assert!(r.contains(needle), "expected {needle:?} in {r:?}");
    }
}

/// Bounded, deterministic fuzz loop: random byte mutations, truncations and header
/// rewrites, half of them with all crcs recomputed so the structural checks (not the
/// crc) have to catch them. Open must never panic; whatever opens must be queryable.
#[test]
fn fuzz_mutations_never_panic() {
    for dtype in [VectorDtype::F32, VectorDtype::I8] {
        let (dir, good) = fixture(dtype);
        let p = dir.path().join("fuzz");
        let mut rng = Rng(0xF00D + dtype as u64);
        let mut opened = 0;
        for iter in 0..1500 {
            let mut b = good.clone();
            match rng.below(4) {
                0 => {
                    for _ in 0..1 + rng.below(8) {
                        let at = rng.below(b.len() as u64) as usize;
                        b[at] = rng.next_u64() as u8;
                    }
                }
                1 => {
                    // Header/table only.
                    for _ in 0..1 + rng.below(4) {
                        let at = rng.below(HEADER_LEN as u64) as usize;
                        b[at] ^= 1 << rng.below(8);
                    }
                }
                2 => {
                    // Small integer nudges in the table (off-by-some lengths/offsets).
                    let i = rng.below(N_SECTIONS as u64) as usize;
                    let at = 128 + i * 32 + 8 + 8 * rng.below(2) as usize;
                    let v = crate::common::rd_u64(&b, at);
                    wr_u64(&mut b, at, v.wrapping_add(rng.below(200)).wrapping_sub(100));
                }
                _ => {
                    let cut = rng.below(b.len() as u64) as usize;
                    b.truncate(cut);
                }
            }
            if iter % 2 == 0 {
                fix_all_crcs(&mut b);
            }
            match open_bytes(&p, &b) {
                Ok(idx) => {
                    opened += 1;
                    exercise(&idx);
                }
                Err(IndexError::Corrupt { .. }) => {}
                Err(e) => panic!("unexpected error kind: {e}"),
            }
        }
        // Mutations inside vectors/records with fixed crcs open fine: make sure the
        // "opened but hostile" path was exercised at all.
        assert!(opened > 10, "only {opened} mutated files opened");
    }
}

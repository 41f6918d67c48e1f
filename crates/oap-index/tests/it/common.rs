//! Shared helpers: deterministic RNG, vector generation, corpus builders, raw file
//! patching (with crc fix-up) for corruption tests.

use std::path::Path;

use oap_index::{DocInput, Index, IndexWriter, RowInput, VectorDtype};

/// SplitMix64: tiny, deterministic, good enough for test data.
pub struct Rng(pub u64);

impl Rng {
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, n).
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            self.next_u64() % n
        }
    }

    /// Uniform in [-1, 1).
    pub fn sym(&mut self) -> f32 {
        (self.next_u64() >> 40) as f32 / (1u64 << 23) as f32 - 1.0
    }

    pub fn unit_vec(&mut self, dim: usize) -> Vec<f32> {
        normalize((0..dim).map(|_| self.sym()).collect())
    }

    pub fn key(&mut self) -> [u8; 16] {
        let mut k = [0u8; 16];
        k[..8].copy_from_slice(&self.next_u64().to_le_bytes());
        k[8..].copy_from_slice(&self.next_u64().to_le_bytes());
        k
    }
}

pub fn normalize(mut v: Vec<f32>) -> Vec<f32> {
    let n = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    if n > 0.0 {
        for x in &mut v {
            *x /= n;
        }
    }
    v
}

pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    a.iter()
        .zip(b)
        .map(|(x, y)| f64::from(*x) * f64::from(*y))
        .sum::<f64>() as f32
}

pub fn meta() -> Vec<u8> {
    br#"{"model":"test-model","dim_hint":8}"#.to_vec()
}

/// A small corpus where every section is non-empty; some docs have 0 or 2 rows.
pub fn small_corpus(dtype: VectorDtype, dim: usize, seed: u64) -> (IndexWriter, Vec<DocInput>) {
    let mut rng = Rng(seed);
    let mut w = IndexWriter::new(dim, dtype, meta()).expect("writer");
    let words = [
        "convert", "pdf", "image", "resize", "text", "merge", "audio", "video",
    ];
    let mut docs = Vec::new();
    for i in 0..12u32 {
        let n_rows = (i % 3) as usize; // 0, 1, 2 rows
        let rows = (0..n_rows)
            .map(|_| RowInput {
                key: rng.key(),
                weight: 0.5 + rng.below(4) as f32 * 0.25,
                vector: rng.unit_vec(dim),
            })
            .collect();
        let lexical = (0..3 + rng.below(4))
            .map(|_| {
                let t = words[rng.below(words.len() as u64) as usize].to_string();
                (t, if rng.below(2) == 0 { 1.0 } else { 3.0 })
            })
            .collect();
        let record: Vec<u8> = (0..rng.below(40)).map(|_| rng.next_u64() as u8).collect();
        let doc = DocInput {
            id: format!("tool-{:02}", (i * 7) % 12),
            record,
            rows,
            lexical,
        };
        w.add(doc.clone()).expect("add");
        docs.push(doc);
    }
    (w, docs)
}

pub fn write_small(path: &Path, dtype: VectorDtype) -> Vec<DocInput> {
    let (w, docs) = small_corpus(dtype, 8, 42);
    w.write_atomic(path).expect("write");
    docs
}

// ---- raw file helpers (layout knowledge duplicated on purpose: tests the spec) ----

pub const HEADER_LEN: usize = 640;
pub const N_SECTIONS: usize = 14;
pub const SECTION_NAMES: [&str; N_SECTIONS] = [
    "meta",
    "id_offsets",
    "id_bytes",
    "record_offsets",
    "record_bytes",
    "id_sorted",
    "row_offsets",
    "row_meta",
    "vectors",
    "term_offsets",
    "term_bytes",
    "posting_offsets",
    "postings",
    "doc_lens",
];

pub fn rd_u64(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().unwrap())
}

pub fn wr_u64(b: &mut [u8], at: usize, v: u64) {
    b[at..at + 8].copy_from_slice(&v.to_le_bytes());
}

pub fn wr_u32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_le_bytes());
}

/// (offset, len) of section `i` from the section table.
pub fn section(b: &[u8], i: usize) -> (usize, usize) {
    let at = 128 + i * 32;
    (rd_u64(b, at + 8) as usize, rd_u64(b, at + 16) as usize)
}

/// Recomputes the header crc (after patching header fields).
pub fn fix_header_crc(b: &mut [u8]) {
    let crc = crc32fast::hash(&b[..HEADER_LEN - 4]);
    wr_u32(b, HEADER_LEN - 4, crc);
}

/// Recomputes every section crc that is in bounds, then the header crc, so that only
/// structural/content validation can catch a mutation.
pub fn fix_all_crcs(b: &mut [u8]) {
    if b.len() < HEADER_LEN {
        return;
    }
    for i in 0..N_SECTIONS {
        let at = 128 + i * 32;
        let off = rd_u64(b, at + 8);
        let len = rd_u64(b, at + 16);
        if let Some(end) = off.checked_add(len) {
            if end <= b.len() as u64 {
                let crc = crc32fast::hash(&b[off as usize..end as usize]);
                wr_u32(b, at + 24, crc);
            }
        }
    }
    fix_header_crc(b);
}

/// Opens `bytes` written to `path`, returning the error reason or "ok".
pub fn open_bytes(path: &Path, bytes: &[u8]) -> Result<Index, oap_index::IndexError> {
    std::fs::write(path, bytes).expect("write bytes");
    Index::open(path)
}

/// Exercises every read path; must never panic whatever the (validated) content.
pub fn exercise(idx: &Index) {
    let dim = idx.dim();
    let mut q = vec![0f32; dim];
    q[0] = 1.0;
    let _ = idx.dense_search(&q, 5).expect("dense");
    let _ = idx
        .dense_scores_for(&q, &[0, 1, 2, u32::MAX])
        .expect("scores");
    let _ = idx.lexical_search(&["pdf", "convert", "zzz"], 5);
    let _ = idx.bm25_scores_for(&["pdf", "image"], &[0, 1, u32::MAX]);
    let _ = idx.meta();
    for d in 0..idx.len() as u32 + 1 {
        let _ = idx.doc_id(d);
        let _ = idx.record(d);
        let _ = idx.rows_of(d).count();
    }
    let _ = idx.find("tool-03");
    let _ = idx.find("");
}

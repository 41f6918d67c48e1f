//! What both writers share: the document a caller adds, the checks every
//! document passes, int8 quantisation, term frequencies and what a write
//! reports.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::time::Duration;

use oap_store::StoreError;

use crate::format::{MAX_ID_LEN, MAX_RECORD_LEN, MAX_TERM_LEN};
use crate::IndexError;

/// One embedding row of a document.
#[derive(Clone, Debug, PartialEq)]
pub struct RowInput {
    /// Caller key, typically a hash of the embedded text, so a rebuild can reuse the
    /// stored vector when the text did not change (see [`crate::Index::rows_of`]).
    pub key: [u8; 16],
    /// Multiplier applied to this row's cosine (finite, >= 0).
    pub weight: f32,
    /// The vector, L2-normalised by the caller; length must equal the index dim.
    pub vector: Vec<f32>,
}

/// One document to add.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DocInput {
    /// Unique, non-empty id (<= [`MAX_ID_LEN`] bytes).
    pub id: String,
    /// Opaque record bytes returned by [`crate::Index::record`] (<= [`MAX_RECORD_LEN`]).
    pub record: Vec<u8>,
    /// Embedding rows (0..n).
    pub rows: Vec<RowInput>,
    /// Terms (normally from [`crate::tokenize`]) with per-occurrence field weights; a
    /// term's BM25 tf is the sum of its weights and the document length is the sum of
    /// all weights (BM25F-style field boosting).
    pub lexical: Vec<(String, f32)>,
}

/// What a write (`StreamWriter::finish`, `IndexWriter::write_atomic`) did.
#[derive(Clone, Debug, PartialEq)]
pub struct WriteStats {
    /// Final path.
    pub path: PathBuf,
    /// File size in bytes.
    pub bytes: u64,
    /// Documents written.
    pub docs: u32,
    /// Embedding rows written.
    pub rows: u64,
    /// Distinct lexical terms.
    pub terms: u64,
    /// Postings (term, doc) pairs.
    pub postings: u64,
    /// Whether the containing directory was fsynced after the rename (false only if
    /// the filesystem refused; the new file is in place either way, but the rename may
    /// not survive a power cut).
    pub dir_synced: bool,
    /// Wall time of the write.
    pub elapsed: Duration,
}

/// Symmetric per-row int8 quantisation: `scale = max|x| / 127`, `q = round(x / scale)`.
/// Returns the scale (0 for an all-zero vector, whose codes are all 0).
pub(crate) fn quantize_into(v: &[f32], out: &mut Vec<i8>) -> f32 {
    let max_abs = v.iter().fold(0f32, |m, x| m.max(x.abs()));
    let inv = 127.0 / max_abs;
    if max_abs == 0.0 || !inv.is_finite() {
        out.extend(std::iter::repeat_n(0i8, v.len()));
        return 0.0;
    }
    out.extend(
        v.iter()
            .map(|x| (x * inv).round().clamp(-127.0, 127.0) as i8),
    );
    max_abs / 127.0
}

/// Checks one document against the caps and the writer's state (`docs` added so
/// far, `ids` taken); shared by both writers so they accept exactly the same input.
#[allow(
    clippy::too_many_arguments,
    reason = "the parts of one destructured DocInput"
)]
pub(crate) fn check_doc(
    dim: usize,
    docs: usize,
    ids: &HashSet<String>,
    id: &str,
    record: &[u8],
    rows: &[RowInput],
    lexical: &[(String, f32)],
) -> Result<(), IndexError> {
    if docs >= (u32::MAX - 1) as usize {
        return Err(IndexError::invalid("index is full (2^32 - 2 documents)"));
    }
    if id.is_empty() {
        return Err(IndexError::invalid("document id is empty"));
    }
    if id.len() > MAX_ID_LEN {
        return Err(IndexError::TooLarge {
            what: "document id",
            len: id.len(),
            max: MAX_ID_LEN,
        });
    }
    if ids.contains(id) {
        return Err(IndexError::DuplicateId { id: id.to_string() });
    }
    if record.len() > MAX_RECORD_LEN {
        return Err(IndexError::TooLarge {
            what: "record",
            len: record.len(),
            max: MAX_RECORD_LEN,
        });
    }
    for (i, row) in rows.iter().enumerate() {
        if row.vector.len() != dim {
            return Err(IndexError::DimMismatch {
                expected: dim,
                got: row.vector.len(),
            });
        }
        if let Some(j) = row.vector.iter().position(|x| !x.is_finite()) {
            return Err(IndexError::invalid(format!(
                "document {id:?} row {i} component {j} is not finite"
            )));
        }
        if !row.weight.is_finite() || row.weight < 0.0 {
            return Err(IndexError::invalid(format!(
                "document {id:?} row {i} weight {} is not a finite non-negative number",
                row.weight
            )));
        }
    }
    for (term, w) in lexical {
        if term.is_empty() {
            return Err(IndexError::invalid(format!(
                "document {id:?} has an empty lexical term"
            )));
        }
        if term.len() > MAX_TERM_LEN {
            return Err(IndexError::TooLarge {
                what: "term",
                len: term.len(),
                max: MAX_TERM_LEN,
            });
        }
        if !w.is_finite() || *w < 0.0 {
            return Err(IndexError::invalid(format!(
                "document {id:?} term {term:?} weight {w} is not a finite non-negative number"
            )));
        }
    }

    Ok(())
}

/// A document's BM25 term frequencies, summed per term in first-occurrence order
/// (deterministic f32 sums), and its weighted length.
pub(crate) fn term_frequencies(lexical: &[(String, f32)]) -> (Vec<(String, f32)>, f32) {
    let mut tf: Vec<(String, f32)> = Vec::new();
    let mut slot: HashMap<&str, usize> = HashMap::new();
    let mut doc_len = 0f32;
    for (term, w) in lexical {
        doc_len += *w;
        match slot.get(term.as_str()) {
            Some(&i) => {
                if let Some(e) = tf.get_mut(i) {
                    e.1 += *w;
                }
            }
            None => {
                slot.insert(term.as_str(), tf.len());
                tf.push((term.clone(), *w));
            }
        }
    }
    (tf, doc_len)
}

/// The index's error for a failed atomic write.
pub(crate) fn store_error(err: StoreError) -> IndexError {
    match err {
        StoreError::Io { op, path, source } => IndexError::Io { op, path, source },
        other => IndexError::invalid(other.to_string()),
    }
}

//! The model's weights, read from the safetensors file one tensor at a time.
//!
//! Loading used to read the whole file (91 MB for all-MiniLM-L6-v2) into one
//! buffer and copy every tensor out of it, so the file and the model existed
//! in memory at once; with the linear layers then repacked into panels
//! (`kernel.rs`) there were briefly three copies. Here only the small JSON
//! header is kept; [`WeightsFile`] reads a tensor's bytes with positional
//! reads when the encoder asks for it, straight into the tensor's own buffer
//! (for `F32`), and the encoder drops what it has packed. The load's peak is
//! then about one copy of the model.
//!
//! Positional reads rather than a memory map: a mapped file counts in the
//! resident set as it is touched just like a copy, and reading avoids what a
//! map risks if the file is rewritten while mapped.
//!
//! One table is never read whole: the word embeddings (`[vocab, hidden]`,
//! 47 MB of all-MiniLM-L6-v2's 91 MB) of which a query needs a dozen rows.
//! [`RowsOnDisk`] reads the rows a forward pass asks for, so the table stays
//! in the kernel's page cache (shared, clean, reclaimable) instead of the
//! daemon's heap.

use std::collections::HashMap;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::sync::Mutex;

use candle_core::{DType, Device, Result, Shape, Tensor};
use candle_nn::var_builder::SimpleBackend;

/// Largest JSON header accepted. Real headers are a few tens of KiB (one
/// entry per tensor); safetensors itself refuses above 100 MB.
const MAX_HEADER_BYTES: u64 = 16 << 20;

/// Bytes read per call while filling a tensor.
const CHUNK_BYTES: usize = 1 << 20;

/// Where one tensor sits in the file.
#[derive(Debug, Clone)]
struct Entry {
    dtype: DType,
    shape: Vec<usize>,
    /// Absolute file offset of the first byte.
    start: u64,
    /// Byte length: the element count times the dtype's size.
    len: usize,
}

/// The rows of one 2-D `F32` tensor, read from the file when a forward pass
/// asks for them ([`RowsOnDisk::gather`]).
pub(crate) struct RowsOnDisk {
    /// Its own handle: positional reads need no lock and no shared cursor.
    file: File,
    start: u64,
    rows: usize,
    cols: usize,
}

impl RowsOnDisk {
    /// Rows of the table.
    pub(crate) fn rows(&self) -> usize {
        self.rows
    }

    /// Floats per row.
    pub(crate) fn cols(&self) -> usize {
        self.cols
    }

    /// Rows `ids` of the table, back to back (`ids.len() * cols` floats).
    /// An id past the table is an error naming it.
    pub(crate) fn gather(&self, ids: &[u32]) -> Result<Vec<f32>> {
        use std::os::unix::fs::FileExt;
        let row_bytes = self.cols * 4;
        let mut out = Vec::with_capacity(ids.len() * self.cols);
        let mut buf = vec![0u8; row_bytes];
        for &id in ids {
            let row = id as usize;
            if row >= self.rows {
                candle_core::bail!(
                    "token id {id} is past the {}-row embedding table",
                    self.rows
                );
            }
            // The byte range was checked against the file at open.
            let offset = self.start + (row * row_bytes) as u64;
            self.file.read_exact_at(&mut buf, offset)?;
            out.extend(
                buf.chunks_exact(4)
                    .map(|q| f32::from_le_bytes(<[u8; 4]>::try_from(q).unwrap_or_default())),
            );
        }
        Ok(out)
    }
}

/// A safetensors file whose tensors are read on demand.
pub(crate) struct WeightsFile {
    file: Mutex<File>,
    tensors: HashMap<String, Entry>,
}

/// The header's description of one tensor.
#[derive(serde::Deserialize)]
struct HeaderEntry {
    dtype: String,
    shape: Vec<usize>,
    data_offsets: [u64; 2],
}

fn dtype_of(name: &str) -> Option<DType> {
    Some(match name {
        "F32" => DType::F32,
        "F16" => DType::F16,
        "BF16" => DType::BF16,
        "F64" => DType::F64,
        "U8" => DType::U8,
        "U32" => DType::U32,
        "I64" => DType::I64,
        _ => return None,
    })
}

impl WeightsFile {
    /// Reads `file`'s header and checks it: every tensor's dtype is known, its
    /// byte range lies inside the file and matches its shape. The error says
    /// what is wrong (the caller names the file).
    pub(crate) fn new(mut file: File) -> std::result::Result<Self, String> {
        let file_len = file.metadata().map_err(|e| e.to_string())?.len();
        let mut prefix = [0u8; 8];
        file.read_exact(&mut prefix)
            .map_err(|_| "shorter than the 8-byte header length".to_string())?;
        let header_len = u64::from_le_bytes(prefix);
        if header_len > MAX_HEADER_BYTES {
            return Err(format!(
                "header of {header_len} bytes is over the {MAX_HEADER_BYTES}-byte cap"
            ));
        }
        let data_start = 8 + header_len;
        if data_start > file_len {
            return Err(format!(
                "header of {header_len} bytes runs past the end of the {file_len}-byte file \
                 (truncated?)"
            ));
        }
        let mut header = vec![0u8; usize::try_from(header_len).map_err(|e| e.to_string())?];
        file.read_exact(&mut header)
            .map_err(|e| format!("cannot read the header: {e}"))?;
        let raw: HashMap<String, serde_json::Value> =
            serde_json::from_slice(&header).map_err(|e| format!("header is not JSON: {e}"))?;
        let data_len = file_len - data_start;
        let mut tensors = HashMap::with_capacity(raw.len());
        for (name, value) in raw {
            if name == "__metadata__" {
                continue;
            }
            let entry: HeaderEntry = serde_json::from_value(value)
                .map_err(|e| format!("tensor {name}: bad header entry: {e}"))?;
            let dtype = dtype_of(&entry.dtype)
                .ok_or_else(|| format!("tensor {name}: unsupported dtype {}", entry.dtype))?;
            let [begin, end] = entry.data_offsets;
            if begin > end || end > data_len {
                return Err(format!(
                    "tensor {name}: bytes {begin}..{end} are outside the {data_len} bytes of \
                     data (truncated?)"
                ));
            }
            let elements = entry
                .shape
                .iter()
                .try_fold(1usize, |n, d| n.checked_mul(*d))
                .ok_or_else(|| format!("tensor {name}: shape {:?} overflows", entry.shape))?;
            let len = elements
                .checked_mul(dtype.size_in_bytes())
                .ok_or_else(|| format!("tensor {name}: shape {:?} overflows", entry.shape))?;
            if u64::try_from(len).ok() != Some(end - begin) {
                return Err(format!(
                    "tensor {name}: shape {:?} of {} needs {len} bytes, the file gives {}",
                    entry.shape,
                    entry.dtype,
                    end - begin
                ));
            }
            tensors.insert(
                name,
                Entry {
                    dtype,
                    shape: entry.shape,
                    start: data_start + begin,
                    len,
                },
            );
        }
        Ok(Self {
            file: Mutex::new(file),
            tensors,
        })
    }

    /// Tensor `name` as rows read on demand, when it is a 2-D `F32` tensor
    /// of `rows × cols`; `None` otherwise (the caller then loads it whole).
    pub(crate) fn rows_on_disk(
        &self,
        name: &str,
        rows: usize,
        cols: usize,
    ) -> std::io::Result<Option<RowsOnDisk>> {
        let Some(entry) = self.tensors.get(name) else {
            return Ok(None);
        };
        if entry.dtype != DType::F32 || entry.shape.as_slice() != [rows, cols] {
            return Ok(None);
        }
        let file = self
            .file
            .lock()
            .map_err(|_| std::io::Error::other("weights file lock poisoned"))?
            .try_clone()?;
        Ok(Some(RowsOnDisk {
            file,
            start: entry.start,
            rows,
            cols,
        }))
    }

    /// Reads one tensor's bytes and calls `sink` with successive chunks.
    fn read_chunks(&self, entry: &Entry, mut sink: impl FnMut(&[u8])) -> Result<()> {
        let mut file = self
            .file
            .lock()
            .map_err(|_| candle_core::Error::msg("weights file lock poisoned"))?;
        file.seek(SeekFrom::Start(entry.start))?;
        let mut buf = vec![0u8; CHUNK_BYTES.min(entry.len)];
        let mut left = entry.len;
        while left > 0 {
            let n = left.min(buf.len());
            let chunk = buf
                .get_mut(..n)
                .ok_or_else(|| candle_core::Error::msg("chunk out of range"))?;
            file.read_exact(chunk)?;
            sink(chunk);
            left -= n;
        }
        Ok(())
    }

    fn entry(&self, name: &str) -> Result<&Entry> {
        self.tensors
            .get(name)
            .ok_or_else(|| candle_core::Error::CannotFindTensor {
                path: name.to_string(),
            })
    }

    fn load(&self, name: &str, dtype: DType, dev: &Device) -> Result<Tensor> {
        let entry = self.entry(name)?;
        let tensor = if entry.dtype == DType::F32 {
            // Straight into the tensor's own buffer: no byte copy of the
            // whole tensor (the word embeddings are 47 MB).
            let mut values = Vec::with_capacity(entry.len / 4);
            // Every chunk is a multiple of 4 bytes: 1 MiB, or the rest of a
            // tensor whose length is a multiple of 4 (checked at open).
            self.read_chunks(entry, |chunk| {
                values.extend(
                    chunk
                        .chunks_exact(4)
                        .map(|q| f32::from_le_bytes(<[u8; 4]>::try_from(q).unwrap_or_default())),
                );
            })?;
            Tensor::from_vec(values, entry.shape.as_slice(), dev)?
        } else {
            let mut bytes = Vec::with_capacity(entry.len);
            self.read_chunks(entry, |chunk| bytes.extend_from_slice(chunk))?;
            Tensor::from_raw_buffer(&bytes, entry.dtype, &entry.shape, dev)?
        };
        tensor.to_dtype(dtype)
    }
}

impl SimpleBackend for WeightsFile {
    fn get(
        &self,
        s: Shape,
        name: &str,
        _h: candle_nn::Init,
        dtype: DType,
        dev: &Device,
    ) -> Result<Tensor> {
        let entry = self.entry(name)?;
        if entry.shape.as_slice() != s.dims() {
            return Err(candle_core::Error::UnexpectedShape {
                msg: format!("shape mismatch for {name}"),
                expected: s,
                got: entry.shape.clone().into(),
            }
            .bt());
        }
        self.load(name, dtype, dev)
    }

    fn get_unchecked(&self, name: &str, dtype: DType, dev: &Device) -> Result<Tensor> {
        self.load(name, dtype, dev)
    }

    fn contains_tensor(&self, name: &str) -> bool {
        self.tensors.contains_key(name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A safetensors file with the given header JSON and data bytes.
    fn file_with(header: &str, data: &[u8]) -> tempfile::NamedTempFile {
        use std::io::Write;
        let mut f = tempfile::NamedTempFile::new().unwrap();
        f.write_all(&(header.len() as u64).to_le_bytes()).unwrap();
        f.write_all(header.as_bytes()).unwrap();
        f.write_all(data).unwrap();
        f
    }

    /// Six floats as little-endian bytes, then 1.0 and -0.5 as IEEE half.
    fn six_floats_then_two_halves() -> Vec<u8> {
        let mut data: Vec<u8> = [1.5f32, -2.0, 3.25, 0.0, 7.0, 8.0]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        data.extend_from_slice(&[0x00u8, 0x3c, 0x00, 0xb8]);
        data
    }

    #[test]
    fn reads_f32_and_f16_tensors_by_name() {
        let data = six_floats_then_two_halves();
        let header = r#"{"__metadata__":{"format":"pt"},"a":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]},"h":{"dtype":"F16","shape":[2],"data_offsets":[24,28]}}"#;
        let f = file_with(header, &data);
        let w = WeightsFile::new(File::open(f.path()).unwrap()).unwrap();
        let dev = Device::Cpu;
        assert!(w.contains_tensor("a") && !w.contains_tensor("b"));
        let a = w
            .get(
                (2, 3).into(),
                "a",
                candle_nn::Init::Const(0.0),
                DType::F32,
                &dev,
            )
            .unwrap();
        assert_eq!(
            a.to_vec2::<f32>().unwrap(),
            vec![vec![1.5, -2.0, 3.25], vec![0.0, 7.0, 8.0]]
        );
        let h = w.get_unchecked("h", DType::F32, &dev).unwrap();
        assert_eq!(h.to_vec1::<f32>().unwrap(), vec![1.0, -0.5]);
        let wrong = w.get(
            (3, 2).into(),
            "a",
            candle_nn::Init::Const(0.0),
            DType::F32,
            &dev,
        );
        assert!(wrong
            .unwrap_err()
            .to_string()
            .contains("shape mismatch for a"));
        assert!(w.get_unchecked("b", DType::F32, &dev).is_err());
    }

    #[test]
    fn rows_on_disk_read_the_rows_asked_for_and_refuse_ids_past_the_table() {
        let data = six_floats_then_two_halves();
        let header = r#"{"a":{"dtype":"F32","shape":[3,2],"data_offsets":[0,24]},"h":{"dtype":"F16","shape":[2],"data_offsets":[24,28]}}"#;
        let f = file_with(header, &data);
        let w = WeightsFile::new(File::open(f.path()).unwrap()).unwrap();
        let rows = w.rows_on_disk("a", 3, 2).unwrap().unwrap();
        assert_eq!((rows.rows(), rows.cols()), (3, 2));
        assert_eq!(
            rows.gather(&[2, 0, 2]).unwrap(),
            vec![7.0, 8.0, 1.5, -2.0, 7.0, 8.0]
        );
        assert_eq!(rows.gather(&[]).unwrap(), Vec::<f32>::new());
        let past = rows.gather(&[1, 3]).unwrap_err().to_string();
        assert!(
            past.contains("token id 3") && past.contains("3-row"),
            "{past}"
        );
        // Another shape, another dtype or no such tensor: loaded whole instead.
        assert!(w.rows_on_disk("a", 2, 3).unwrap().is_none());
        assert!(w.rows_on_disk("h", 2, 1).unwrap().is_none());
        assert!(w.rows_on_disk("b", 3, 2).unwrap().is_none());
    }

    #[test]
    fn refuses_bad_headers_with_the_reason() {
        let cases: [(&str, &[u8], &str); 4] = [
            (
                r#"{"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}}"#,
                &[0u8; 8],
                "outside",
            ),
            (
                r#"{"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}}"#,
                &[0u8; 8],
                "needs 12 bytes",
            ),
            (
                r#"{"a":{"dtype":"Q4","shape":[2],"data_offsets":[0,8]}}"#,
                &[0u8; 8],
                "unsupported dtype",
            ),
            ("{ not json", &[], "not JSON"),
        ];
        for (header, data, want) in cases {
            let f = file_with(header, data);
            let err = WeightsFile::new(File::open(f.path()).unwrap())
                .err()
                .unwrap();
            assert!(err.contains(want), "{header}: {err}");
        }
        // A header length past the end of the file.
        let mut f = tempfile::NamedTempFile::new().unwrap();
        std::io::Write::write_all(&mut f, &1000u64.to_le_bytes()).unwrap();
        let err = WeightsFile::new(File::open(f.path()).unwrap())
            .err()
            .unwrap();
        assert!(err.contains("past the end"), "{err}");
    }
}

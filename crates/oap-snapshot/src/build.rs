//! Writing a snapshot directory: the files copied in (hashed on the way),
//! then `snapshot.json`, then its signature — each written atomically, the
//! signature last, so a half-written snapshot never verifies.

use std::fs::File;
use std::path::{Path, PathBuf};

use crate::error::SnapshotError;
use crate::hash::read_hashing;
use crate::keys::SigningKey;
use crate::listing::{check_path, FileEntry, Listing, FORMAT, LISTING_FILE, SIGNATURE_FILE};

/// One file to put into a snapshot.
#[derive(Debug, Clone)]
pub struct BuildInput {
    /// Where it goes inside the snapshot (see [`check_path`]).
    pub path: String,
    /// Where it is now.
    pub source: PathBuf,
}

/// What a snapshot says about itself.
#[derive(Debug, Clone)]
pub struct BuildMeta {
    /// Must grow with every snapshot of one signer.
    pub version: u64,
    /// When it was built (RFC 3339, UTC).
    pub created: String,
    /// The encoder its vectors were made with.
    pub model_id: String,
    /// What wrote its request rows, if a model did.
    pub generator: Option<String>,
}

/// Writes a signed snapshot of `inputs` into `out_dir`, which must be
/// empty or not exist yet (a snapshot is never built over another).
pub fn build(
    out_dir: &Path,
    inputs: &[BuildInput],
    meta: &BuildMeta,
    key: &SigningKey,
) -> Result<Listing, SnapshotError> {
    if out_dir.exists() {
        let mut entries = std::fs::read_dir(out_dir).map_err(|e| SnapshotError::io(out_dir, e))?;
        if entries.next().is_some() {
            return Err(SnapshotError::io(
                out_dir,
                std::io::Error::new(
                    std::io::ErrorKind::AlreadyExists,
                    "not empty: a snapshot is built into a new directory",
                ),
            ));
        }
    }
    std::fs::create_dir_all(out_dir).map_err(|e| SnapshotError::io(out_dir, e))?;
    let mut files = Vec::with_capacity(inputs.len());
    for input in inputs {
        check_path(&input.path)?;
        let target = out_dir.join(&input.path);
        if let Some(parent) = target.parent() {
            std::fs::create_dir_all(parent).map_err(|e| SnapshotError::io(parent, e))?;
        }
        let (bytes, sha256) = copy_hashing(&input.source, &target)?;
        files.push(FileEntry {
            path: input.path.clone(),
            bytes,
            sha256,
        });
    }
    let listing = Listing {
        format: FORMAT,
        version: meta.version,
        created: meta.created.clone(),
        model_id: meta.model_id.clone(),
        generator: meta.generator.clone(),
        files,
    };
    listing.check()?;
    let mut text = serde_json::to_vec_pretty(&listing)
        .map_err(|err| SnapshotError::Listing(err.to_string()))?;
    text.push(b'\n');
    let signature = key.sign(
        &text,
        &format!(
            "oapd snapshot version:{} model:{}",
            listing.version, listing.model_id
        ),
    )?;
    oap_store::write_atomic(&out_dir.join(LISTING_FILE), &text)?;
    oap_store::write_atomic(&out_dir.join(SIGNATURE_FILE), signature.as_bytes())?;
    Ok(listing)
}

/// Copies `source` to a new file `target`, returning its size and SHA-256.
fn copy_hashing(source: &Path, target: &Path) -> Result<(u64, String), SnapshotError> {
    let mut output = File::options()
        .write(true)
        .create_new(true)
        .open(target)
        .map_err(|e| SnapshotError::io(target, e))?;
    let copied = read_hashing(source, Some((&mut output, target)))?;
    output
        .sync_all()
        .map_err(|e| SnapshotError::io(target, e))?;
    Ok(copied)
}

//! What a board checks before it uses a snapshot, in this order:
//!
//! 1. the listing's size (capped before it is read) and its signature by
//!    one of the trusted keys — nothing unsigned is parsed;
//! 2. the listing's rules ([`Listing::check`]), then the board's own:
//!    the bytes it claims under the board's cap (before a byte of a file
//!    is fetched), the encoder equal to the board's, the version newer than
//!    the one installed;
//! 3. every file: a regular file (a symlink is refused, not followed) of
//!    the listed size and SHA-256.
//!
//! Each refusal is a [`SnapshotError`] naming what was wrong; the caller
//! keeps serving what it had.

use std::path::Path;

use crate::error::SnapshotError;
use crate::hash::file_sha256;
use crate::keys::TrustedKeys;
use crate::listing::{Listing, LISTING_FILE, MAX_LISTING_BYTES, SIGNATURE_FILE};

/// Largest signature file read.
const MAX_SIGNATURE_BYTES: u64 = 4 << 10;

/// What the board requires of a snapshot beside its signature.
#[derive(Debug, Clone)]
pub struct Expect<'a> {
    /// The board's encoder (the engine's model id).
    pub model_id: &'a str,
    /// The version installed now; the offered one must be greater.
    pub installed_version: Option<u64>,
    /// Most bytes the snapshot's files may add up to.
    pub max_bytes: u64,
}

/// A snapshot that passed every check.
#[derive(Debug, Clone)]
pub struct Verified {
    /// Its listing.
    pub listing: Listing,
    /// The id of the key that signed it.
    pub key_id: String,
}

/// Step 1 and 2: the signature over `listing_bytes` and the listing's and
/// the board's rules. No file is looked at.
pub fn verify_listing(
    listing_bytes: &[u8],
    signature: &str,
    keys: &TrustedKeys,
    expect: &Expect<'_>,
) -> Result<Verified, SnapshotError> {
    if listing_bytes.len() as u64 > MAX_LISTING_BYTES {
        return Err(SnapshotError::Listing(format!(
            "{} bytes, more than the {MAX_LISTING_BYTES} a listing may have",
            listing_bytes.len()
        )));
    }
    let key_id = keys.verify(listing_bytes, signature)?;
    let listing = Listing::parse(listing_bytes)?;
    let claimed = listing.total_bytes();
    if claimed > expect.max_bytes {
        return Err(SnapshotError::TooLarge {
            claimed,
            cap: expect.max_bytes,
        });
    }
    if listing.model_id != expect.model_id {
        return Err(SnapshotError::ModelMismatch {
            snapshot: listing.model_id.clone(),
            board: expect.model_id.to_owned(),
        });
    }
    if let Some(installed) = expect.installed_version {
        if listing.version <= installed {
            return Err(SnapshotError::Replayed {
                offered: listing.version,
                installed,
            });
        }
    }
    Ok(Verified { listing, key_id })
}

/// Step 3: every listed file under `dir`, by size and SHA-256.
pub fn verify_files(dir: &Path, listing: &Listing) -> Result<(), SnapshotError> {
    for file in &listing.files {
        let path = dir.join(&file.path);
        let metadata = std::fs::symlink_metadata(&path).map_err(|e| SnapshotError::io(&path, e))?;
        if !metadata.file_type().is_file() {
            return Err(SnapshotError::NotAFile {
                path: file.path.clone(),
            });
        }
        if metadata.len() != file.bytes {
            return Err(SnapshotError::SizeMismatch {
                path: file.path.clone(),
                listed: file.bytes,
                found: metadata.len(),
            });
        }
        let (bytes, sha256) = file_sha256(&path)?;
        if bytes != file.bytes {
            return Err(SnapshotError::SizeMismatch {
                path: file.path.clone(),
                listed: file.bytes,
                found: bytes,
            });
        }
        if sha256 != file.sha256 {
            return Err(SnapshotError::HashMismatch {
                path: file.path.clone(),
                listed: file.sha256.clone(),
                found: sha256,
            });
        }
    }
    Ok(())
}

/// Every check on a snapshot directory: [`verify_listing`] on its
/// `snapshot.json` and `snapshot.json.minisig`, then [`verify_files`].
pub fn verify_dir(
    dir: &Path,
    keys: &TrustedKeys,
    expect: &Expect<'_>,
) -> Result<Verified, SnapshotError> {
    let listing_bytes = oap_store::read_capped(&dir.join(LISTING_FILE), MAX_LISTING_BYTES)?;
    let signature_path = dir.join(SIGNATURE_FILE);
    let signature = oap_store::read_capped(&signature_path, MAX_SIGNATURE_BYTES)?;
    let signature = String::from_utf8(signature)
        .map_err(|_| SnapshotError::SignatureFormat("not text".into()))?;
    let verified = verify_listing(&listing_bytes, &signature, keys, expect)?;
    verify_files(dir, &verified.listing)?;
    Ok(verified)
}

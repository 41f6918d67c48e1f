//! Signed index snapshots: an index built once, off the boards, and
//! pulled by every board that trusts its signer.
//!
//! A snapshot is a directory published as is (over HTTPS, say):
//!
//! - [`LISTING_FILE`] (`snapshot.json`): what the snapshot holds — its
//!   format, a `version` that only grows, the encoder's model id its vectors
//!   were made with, the generator of its request rows, and every file with
//!   its size and SHA-256;
//! - [`SIGNATURE_FILE`] (`snapshot.json.minisig`): a minisign signature
//!   (ed25519) of exactly those bytes, so `minisign -Vm snapshot.json -P KEY`
//!   checks a snapshot without oapd;
//! - the files the listing names (the index file as oapd writes it, the
//!   catalog, the request rows), at relative paths inside the directory.
//!
//! Signing the listing and hashing every file in it makes one signature
//! cover everything: a file that differs from the listing by one byte is
//! refused.
//!
//! ## Architecture
//!
//! - `listing.rs`: the listing's shape and what a valid one is (paths that
//!   stay inside the snapshot, sizes under the caps).
//! - `keys.rs`: the trusted public keys (several may be), the signing key,
//!   and the signature over the listing.
//! - `verify.rs`: the order of the checks a board makes before it uses
//!   anything: signature first (nothing unsigned is even parsed), then the
//!   listing, the encoder and the version, then every file.
//! - `build.rs`: writing a snapshot directory from files and signing it.
//! - `hash.rs`: the one read-and-hash loop both building (copy and hash)
//!   and verifying (hash only) use.
//!
//! **Architecture Invariant:** nothing here fetches or installs; the crate
//! answers "is this directory the snapshot its signer published, and may
//! this board use it". Downloading, swapping in and rolling back belong to
//! the daemon.

mod build;
mod error;
mod hash;
mod keys;
mod listing;
mod verify;

pub use build::{build, BuildInput, BuildMeta};
pub use error::SnapshotError;
pub use hash::file_sha256;
pub use keys::{key_id, SigningKey, TrustedKeys};
pub use listing::{
    check_path, FileEntry, Listing, CATALOG_FILE, FORMAT, LISTING_FILE, MAX_FILES,
    MAX_LISTING_BYTES, SIGNATURE_FILE,
};
pub use verify::{verify_dir, verify_files, verify_listing, Expect, Verified};

//! `oapd snapshot keygen|build|verify`: the signed index a builder makes
//! once and boards pull (the format and its checks: `oap_snapshot`).
//!
//! `build` opens the index exactly as `oapd index` does, from the
//! configuration's manifest sources and with its encoder, so the vectors
//! are the ones a board computes for the same texts; the configured MCP
//! servers are left out (they are each board's own). The snapshot holds:
//!
//! - `index.oapx`: the index file as written;
//! - `catalog.jsonl`: every indexed capability (id, trust, origin,
//!   manifest), one JSON object a line, for boards and people to read
//!   without the index format;
//! - `generated-requests.json`: the request rows the co-located model
//!   wrote, when there are any.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context};
use clap::Subcommand;
use oap_snapshot::{BuildInput, BuildMeta, Expect, SigningKey, TrustedKeys};

use crate::app::{load_embedder, open_engine_with};
use crate::config::Config;
use crate::request_gen::cache;

/// The secret key file `keygen` writes.
pub const SECRET_KEY_FILE: &str = "snapshot.key";
/// The public key file `keygen` writes.
pub const PUBLIC_KEY_FILE: &str = "snapshot.pub";
/// Default cap of `verify --max-bytes`: 4 GiB.
const DEFAULT_MAX_BYTES: u64 = 4 << 30;

/// `oapd snapshot ...`.
#[derive(Debug, Subcommand)]
pub enum SnapshotCommand {
    /// Make a signing key pair: DIR/snapshot.key (secret, keep it off the
    /// boards) and DIR/snapshot.pub (what boards trust).
    Keygen {
        /// Directory for the two files (created; existing files are not overwritten).
        #[arg(long, value_name = "DIR")]
        out: PathBuf,
    },
    /// Index the configured manifests and write a signed snapshot of the index.
    Build {
        /// The minisign secret key (`oapd snapshot keygen`, or `minisign -G`; a key
        /// made with a password is opened with OAPD_SNAPSHOT_KEY_PASSWORD).
        #[arg(long, value_name = "FILE")]
        key: PathBuf,
        /// A new directory for the snapshot.
        #[arg(long, value_name = "DIR")]
        out: PathBuf,
        /// The snapshot's version; must grow with every snapshot you
        /// publish (default: the current Unix time in seconds).
        #[arg(long)]
        version: Option<u64>,
    },
    /// Check a snapshot directory: signature, listing, encoder, every file.
    Verify {
        /// The snapshot directory.
        dir: PathBuf,
        /// A trusted public key (the `RW...` line, or a .pub file); repeat for several.
        #[arg(long = "public-key", value_name = "KEY|FILE", required = true)]
        public_keys: Vec<String>,
        /// The encoder the vectors must come from (default: this configuration's).
        #[arg(long)]
        model_id: Option<String>,
        /// Refuse a snapshot that is not newer than this version.
        #[arg(long)]
        installed_version: Option<u64>,
        /// Refuse a snapshot whose files add up to more bytes.
        #[arg(long, default_value_t = DEFAULT_MAX_BYTES)]
        max_bytes: u64,
    },
}

/// Runs one `oapd snapshot` subcommand.
pub fn run(config: &Config, command: SnapshotCommand) -> anyhow::Result<()> {
    match command {
        SnapshotCommand::Keygen { out } => keygen(&out),
        SnapshotCommand::Build { key, out, version } => build(config, &key, &out, version),
        SnapshotCommand::Verify {
            dir,
            public_keys,
            model_id,
            installed_version,
            max_bytes,
        } => verify(
            config,
            &dir,
            &public_keys,
            model_id,
            installed_version,
            max_bytes,
        ),
    }
}

fn keygen(out: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(out).with_context(|| out.display().to_string())?;
    let key = SigningKey::generate()?;
    write_new(&out.join(SECRET_KEY_FILE), &key.secret_file_text()?, 0o600)?;
    write_new(&out.join(PUBLIC_KEY_FILE), &key.public_file_text()?, 0o644)?;
    println!(
        "key {}: secret {}, public {}\npublic key (snapshots.public_keys on the boards): {}",
        key.key_id(),
        out.join(SECRET_KEY_FILE).display(),
        out.join(PUBLIC_KEY_FILE).display(),
        key.public_key()
    );
    Ok(())
}

/// Creates `path` with `text`, refusing to replace a file (a key
/// overwritten by mistake cannot be recovered).
fn write_new(path: &Path, text: &str, mode: u32) -> anyhow::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut file = std::fs::File::options()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(path)
        .with_context(|| format!("{}: not written", path.display()))?;
    file.write_all(text.as_bytes())
        .and_then(|()| file.sync_all())
        .with_context(|| path.display().to_string())
}

fn build(config: &Config, key_path: &Path, out: &Path, version: Option<u64>) -> anyhow::Result<()> {
    let password = std::env::var("OAPD_SNAPSHOT_KEY_PASSWORD").ok();
    let key = SigningKey::from_file(key_path, password)?;
    let (embedder, model) = load_embedder(config);
    let Some(embedder) = embedder else {
        bail!(
            "a snapshot carries vectors, and the encoder is not loaded: {}",
            model.error.unwrap_or_else(|| "unknown reason".into())
        );
    };
    let (engine, report) = open_engine_with(config, Some(embedder), None)?;
    let model_id = engine
        .model_id()
        .context("the index was built without an encoder")?
        .to_owned();
    if report.docs == 0 {
        bail!("nothing is indexed: a snapshot of an empty catalog would replace the boards' with nothing");
    }
    let staging = tempfile_dir(out)?;
    let catalog = staging.join(oap_snapshot::CATALOG_FILE);
    write_catalog(&engine, &catalog)?;
    let mut inputs = vec![
        BuildInput {
            path: oap_discovery::engine::INDEX_FILE.into(),
            source: config
                .index
                .data_dir
                .join(oap_discovery::engine::INDEX_FILE),
        },
        BuildInput {
            path: oap_snapshot::CATALOG_FILE.into(),
            source: catalog,
        },
    ];
    let rows = cache::Cache::path(&config.index.data_dir);
    let generator = generator_of(&rows)?;
    if generator.is_some() {
        inputs.push(BuildInput {
            path: cache::FILE_NAME.into(),
            source: rows,
        });
    }
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let meta = BuildMeta {
        version: version.unwrap_or(now),
        created: oap_bridge::tool_loop::now_rfc3339(),
        model_id,
        generator,
    };
    let built = oap_snapshot::build(out, &inputs, &meta, &key);
    let _ = std::fs::remove_dir_all(&staging);
    let listing = built?;
    println!(
        "snapshot version {} in {}: {} capabilities, {} rows, {} files, {} bytes, encoder {}, signed by key {}",
        listing.version,
        out.display(),
        report.docs,
        report.rows,
        listing.files.len(),
        listing.total_bytes(),
        listing.model_id,
        key.key_id()
    );
    Ok(())
}

/// A scratch directory beside `out` (same filesystem, removed after).
fn tempfile_dir(out: &Path) -> anyhow::Result<PathBuf> {
    let parent = out
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let name = format!(
        ".{}.staging-{}",
        out.file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("snapshot"),
        std::process::id()
    );
    let dir = parent.join(name);
    std::fs::create_dir_all(&dir).with_context(|| dir.display().to_string())?;
    Ok(dir)
}

/// One JSON object a line: every capability as the index stores it.
fn write_catalog(engine: &oap_discovery::Engine, path: &Path) -> anyhow::Result<()> {
    let file = std::fs::File::create(path).with_context(|| path.display().to_string())?;
    let mut writer = std::io::BufWriter::new(file);
    for summary in engine.list() {
        let Some(record) = engine.get(&summary.id) else {
            continue;
        };
        serde_json::to_writer(&mut writer, &record)?;
        writer.write_all(b"\n")?;
    }
    writer
        .into_inner()
        .map_err(|err| err.into_error())
        .and_then(|file| file.sync_all())
        .with_context(|| path.display().to_string())
}

/// The models that wrote the cached request rows (`None`: no rows), read
/// whole (a builder's file covers a catalog past the daemon's cap) by the
/// daemon's own cache reader, so the two never disagree on the file.
fn generator_of(rows: &Path) -> anyhow::Result<Option<String>> {
    if !rows.exists() {
        return Ok(None);
    }
    let cache = cache::Cache::load_all(rows)?;
    let models = cache.model_names();
    Ok((!models.is_empty()).then(|| models.join(", ")))
}

fn verify(
    config: &Config,
    dir: &Path,
    public_keys: &[String],
    model_id: Option<String>,
    installed_version: Option<u64>,
    max_bytes: u64,
) -> anyhow::Result<()> {
    let keys = TrustedKeys::from_keys_or_files(public_keys)?;
    let model_id = match model_id {
        Some(id) => id,
        None => {
            let (embedder, model) = load_embedder(config);
            match embedder {
                Some(embedder) => embedder.model_id().to_owned(),
                None => bail!(
                    "the encoder is not loaded ({}): give --model-id",
                    model.error.unwrap_or_else(|| "unknown reason".into())
                ),
            }
        }
    };
    let expect = Expect {
        model_id: &model_id,
        installed_version,
        max_bytes,
    };
    let verified = oap_snapshot::verify_dir(dir, &keys, &expect)
        .with_context(|| format!("{}: refused", dir.display()))?;
    println!(
        "{}: snapshot version {} of {}, {} files, {} bytes, encoder {}, signed by key {}",
        dir.display(),
        verified.listing.version,
        verified.listing.created,
        verified.listing.files.len(),
        verified.listing.total_bytes(),
        verified.listing.model_id,
        verified.key_id
    );
    Ok(())
}

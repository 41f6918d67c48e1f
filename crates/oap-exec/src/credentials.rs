//! The credential store: secrets keyed by host name, loaded from a file only
//! its owner can read.
//!
//! ```yaml
//! # /etc/oapd/credentials.yaml  (owner: the daemon's user, mode 0600)
//! api.example.com:
//!   token: "s3cr3t"        # bearer / oauth2 access token
//! www.alphavantage.co:
//!   key: "ABCDEF"          # api key
//! ```
//!
//! A JSON file (`.json`) with the same shape works too. Each entry holds
//! exactly one of `token` or `key`; both mean "the secret", the manifest's
//! `invoke.auth`, `auth_in` and `auth_name` decide how it is sent. Keys are
//! exact host names (no scheme, port, path or wildcard): a secret is only
//! ever sent to the host it is filed under.

use std::collections::BTreeMap;
use std::fmt;
use std::fs::{FileType, OpenOptions};
use std::io::Read;
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use serde_json::Value;

/// Largest credentials file read.
pub const MAX_CREDENTIALS_FILE_BYTES: u64 = 1 << 20;

/// A secret. Its `Debug` output is redacted.
#[derive(Clone, PartialEq, Eq)]
pub struct Credential {
    secret: String,
}

impl Credential {
    /// The raw secret.
    pub fn secret(&self) -> &str {
        &self.secret
    }
}

impl fmt::Debug for Credential {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Credential(<redacted>)")
    }
}

/// Why a credentials file was refused. Messages never contain a secret.
#[derive(Debug, thiserror::Error)]
pub enum CredentialError {
    /// The file could not be opened or read.
    #[error("credentials file {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// Not a regular file (a directory, device, FIFO, ...); refused before
    /// it is opened for reading, so a FIFO cannot block the daemon.
    #[error("credentials file {path} is {kind}, not a regular file")]
    NotRegularFile {
        /// The file.
        path: PathBuf,
        /// What it is instead ("a FIFO (named pipe)", "a directory", ...).
        kind: &'static str,
    },
    /// Larger than [`MAX_CREDENTIALS_FILE_BYTES`].
    #[error("credentials file {path} is {size} bytes; the limit is {MAX_CREDENTIALS_FILE_BYTES}")]
    TooLarge {
        /// The file.
        path: PathBuf,
        /// Its size.
        size: u64,
    },
    /// Owned by another user.
    #[error(
        "credentials file {path} is owned by uid {owner}, not by the daemon's user (uid {expected}); \
         chown it to that user"
    )]
    WrongOwner {
        /// The file.
        path: PathBuf,
        /// Its owner.
        owner: u32,
        /// The effective uid of this process.
        expected: u32,
    },
    /// Group or others have any permission on it.
    #[error(
        "credentials file {path} has mode {mode:04o}; it must be readable by its owner only \
         (chmod 600 {path})"
    )]
    Permissions {
        /// The file.
        path: PathBuf,
        /// Its permission bits.
        mode: u32,
    },
    /// Not YAML/JSON, or not the expected shape.
    #[error("credentials file {path}: {message}")]
    Format {
        /// The file.
        path: PathBuf,
        /// What is wrong (never includes a secret).
        message: String,
    },
}

/// What kind of file `ft` is, with its article, for messages.
fn file_kind(ft: FileType) -> &'static str {
    if ft.is_dir() {
        "a directory"
    } else if ft.is_fifo() {
        "a FIFO (named pipe)"
    } else if ft.is_socket() {
        "a socket"
    } else if ft.is_char_device() {
        "a character device"
    } else if ft.is_block_device() {
        "a block device"
    } else {
        "an unknown kind of file"
    }
}

/// Secrets keyed by exact host name. Load with [`CredentialStore::load`].
/// Two stores are equal when they were read from the same path and hold the
/// same secrets, however the file was formatted.
#[derive(Clone, PartialEq, Eq)]
pub struct CredentialStore {
    path: PathBuf,
    entries: BTreeMap<String, Credential>,
}

impl fmt::Debug for CredentialStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CredentialStore")
            .field("path", &self.path)
            .field("domains", &self.entries.keys().collect::<Vec<_>>())
            .finish()
    }
}

/// Lower-case and strip one trailing dot, the form hosts are compared in.
pub(crate) fn normalize_host(host: &str) -> String {
    host.strip_suffix('.').unwrap_or(host).to_ascii_lowercase()
}

impl CredentialStore {
    /// Read a credentials file. Refused unless it is a regular file of at
    /// most 1 MiB, owned by the effective user of this process, with no
    /// permission bits for group or others (mode 0600 or stricter). Files
    /// ending in `.json` are parsed as JSON, anything else as YAML.
    pub fn load(path: impl AsRef<Path>) -> Result<Self, CredentialError> {
        let path = path.as_ref().to_path_buf();
        let io = |source| CredentialError::Io {
            path: path.clone(),
            source,
        };
        // `open` blocks on a FIFO until a writer comes: refuse anything
        // that is not a regular file from its stat, then open without
        // blocking and check the metadata of the opened file, not of the
        // path, so the file checked is the file read.
        let meta = std::fs::metadata(&path).map_err(io)?;
        if !meta.file_type().is_file() {
            let kind = file_kind(meta.file_type());
            return Err(CredentialError::NotRegularFile { path, kind });
        }
        let file = OpenOptions::new()
            .read(true)
            .custom_flags(nix::libc::O_NONBLOCK | nix::libc::O_NOCTTY)
            .open(&path)
            .map_err(io)?;
        let meta = file.metadata().map_err(io)?;
        if !meta.file_type().is_file() {
            let kind = file_kind(meta.file_type());
            return Err(CredentialError::NotRegularFile { path, kind });
        }
        if meta.len() > MAX_CREDENTIALS_FILE_BYTES {
            return Err(CredentialError::TooLarge {
                path,
                size: meta.len(),
            });
        }
        let expected = nix::unistd::geteuid().as_raw();
        if meta.uid() != expected {
            return Err(CredentialError::WrongOwner {
                path,
                owner: meta.uid(),
                expected,
            });
        }
        let mode = meta.mode() & 0o7777;
        if mode & 0o077 != 0 {
            return Err(CredentialError::Permissions { path, mode });
        }
        let mut text = String::new();
        #[allow(
            clippy::disallowed_methods,
            reason = "the reader is `take(cap)` on the file whose owner and mode were just checked"
        )]
        file.take(MAX_CREDENTIALS_FILE_BYTES)
            .read_to_string(&mut text)
            .map_err(io)?;
        let is_json = path
            .extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("json"));
        Self::parse(path, &text, is_json)
    }

    fn parse(path: PathBuf, text: &str, is_json: bool) -> Result<Self, CredentialError> {
        let format = |message: String| CredentialError::Format {
            path: path.clone(),
            message,
        };
        // Parse into a generic tree first and walk it by hand: typed serde
        // errors quote the offending value, which may be a secret.
        let value: Value = if is_json {
            serde_json::from_str(text).map_err(|e| {
                format(format!(
                    "not valid JSON (line {}, column {})",
                    e.line(),
                    e.column()
                ))
            })?
        } else if text.trim().is_empty() {
            Value::Object(Default::default())
        } else {
            serde_saphyr::from_str(text).map_err(|e| {
                format(match e.location() {
                    Some(l) => format!("not valid YAML (line {}, column {})", l.line(), l.column()),
                    None => "not valid YAML".to_string(),
                })
            })?
        };
        let map = match value {
            Value::Object(map) => map,
            Value::Null => Default::default(),
            _ => {
                return Err(format(
                    "expected a mapping of host name -> {token: ...} or {key: ...}".into(),
                ))
            }
        };
        let mut entries = BTreeMap::new();
        for (host, entry) in map {
            let domain = normalize_host(host.trim());
            if domain.is_empty()
                || domain.contains(['/', ':', '@', '*', ' ', '?', '#'])
                || domain.starts_with('.')
            {
                return Err(format(format!(
                    "key {host:?}: expected a bare host name such as api.example.com \
                     (no scheme, port, path or wildcard)"
                )));
            }
            let Value::Object(fields) = entry else {
                return Err(format(format!(
                    "{host}: expected a mapping with `token` or `key`"
                )));
            };
            let mut secret = None;
            for (field, value) in fields {
                if field != "token" && field != "key" {
                    return Err(format(format!(
                        "{host}: unknown field `{field}`; an entry holds only `token` or `key` \
                         (how it is sent comes from the manifest's auth, auth_in and auth_name)"
                    )));
                }
                let Value::String(s) = value else {
                    return Err(format(format!("{host}.{field}: expected a string")));
                };
                if s.is_empty() {
                    return Err(format(format!("{host}.{field}: empty secret")));
                }
                if s.chars().any(|c| c.is_control()) {
                    return Err(format(format!(
                        "{host}.{field}: the secret contains control characters"
                    )));
                }
                if secret.replace(s).is_some() {
                    return Err(format(format!(
                        "{host}: give either `token` or `key`, not both"
                    )));
                }
            }
            let Some(secret) = secret else {
                return Err(format(format!("{host}: missing `token` or `key`")));
            };
            if entries
                .insert(domain.clone(), Credential { secret })
                .is_some()
            {
                return Err(format(format!("{domain}: listed twice")));
            }
        }
        Ok(Self { path, entries })
    }

    /// The secret filed under exactly this host (case-insensitive, a
    /// trailing dot ignored).
    pub fn get(&self, host: &str) -> Option<&Credential> {
        self.entries.get(&normalize_host(host))
    }

    /// The file the store was loaded from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Host names with a credential.
    pub fn domains(&self) -> impl Iterator<Item = &str> {
        self.entries.keys().map(String::as_str)
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when the store holds no credential.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str, json: bool) -> Result<CredentialStore, CredentialError> {
        CredentialStore::parse(PathBuf::from("/x/creds"), text, json)
    }

    #[test]
    fn yaml_and_json() {
        let s = parse(
            "API.Example.com.:\n  token: abc\nb.test:\n  key: k\n",
            false,
        )
        .unwrap();
        assert_eq!(s.get("api.example.com").unwrap().secret(), "abc");
        assert_eq!(s.get("API.EXAMPLE.COM.").unwrap().secret(), "abc");
        assert_eq!(s.get("b.test").unwrap().secret(), "k");
        assert!(s.get("example.com").is_none());
        assert!(s.get("x.api.example.com").is_none());
        let j = parse(r#"{"a.test": {"key": "k1"}}"#, true).unwrap();
        assert_eq!(j.get("a.test").unwrap().secret(), "k1");
        assert!(parse("", false).unwrap().is_empty());
    }

    #[test]
    fn errors_never_quote_secrets() {
        let cases = [
            ("a.test:\n  token: SECRET1\n  key: SECRET2\n", "not both"),
            ("a.test: SECRET\n", "expected a mapping"),
            ("a.test:\n  api_key: SECRET\n", "unknown field `api_key`"),
            ("a.test:\n  token: [SECRET]\n", "expected a string"),
            ("https://a.test/:\n  token: SECRET\n", "bare host name"),
            ("a.test:\n  token: \"SECRET\n", "not valid YAML"),
            ("- SECRET\n", "expected a mapping of host name"),
            ("a.test: {}\n", "missing `token` or `key`"),
        ];
        for (text, want) in cases {
            let err = parse(text, false).unwrap_err().to_string();
            assert!(err.contains(want), "{text:?}: {err}");
            assert!(!err.contains("SECRET"), "{text:?}: {err}");
        }
        let err = parse(r#"{"a.test": {"token": "SECRET"#, true)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("not valid JSON") && !err.contains("SECRET"),
            "{err}"
        );
    }

    #[test]
    fn debug_is_redacted() {
        let s = parse("a.test:\n  token: SECRET\n", false).unwrap();
        assert!(!format!("{s:?}").contains("SECRET"));
        assert!(!format!("{:?}", s.get("a.test").unwrap()).contains("SECRET"));
    }
}

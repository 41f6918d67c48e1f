//! Why a configuration is refused: [`ConfigError`] and the pieces it is
//! made of ([`Problem`], [`Position`]).

use std::fmt;
use std::path::PathBuf;

/// One semantic problem found by [`Config::validate`](super::Config::validate).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// Dotted key path, e.g. `tool_bridge.max_rounds` or `server.listen[1]`.
    pub key: String,
    /// What is wrong, e.g. `must be between 1 and 10, got 11`.
    pub message: String,
    /// The environment variable that set the key, if it came from the environment.
    pub env_var: Option<String>,
}

impl Problem {
    pub(super) fn new(key: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            key: key.into(),
            message: message.into(),
            env_var: None,
        }
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.key, self.message)?;
        if let Some(var) = &self.env_var {
            write!(f, " (set by {var})")?;
        }
        Ok(())
    }
}

/// A line/column position in the config file (1-based).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Position {
    /// 1-based line.
    pub line: u64,
    /// 1-based column.
    pub column: u64,
}

impl fmt::Display for Position {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line {}, column {}", self.line, self.column)
    }
}

fn at(pos: &Option<Position>) -> String {
    pos.map(|p| format!(" at {p}")).unwrap_or_default()
}

fn did_you_mean(suggestion: &Option<String>) -> String {
    suggestion
        .as_ref()
        .map(|s| format!(" (did you mean \"{s}\"?)"))
        .unwrap_or_default()
}

/// Why the configuration could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The config file could not be opened or read (including: it does not exist).
    #[error("{}: cannot read config file: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The config path is a FIFO, directory, socket or device: refused
    /// before it is opened for reading, so it cannot block.
    #[error("{}: the config file is {kind}, not a regular file", path.display())]
    NotRegularFile {
        /// The path given.
        path: PathBuf,
        /// What it is ("a FIFO (named pipe)", "a directory", ...).
        kind: &'static str,
    },
    /// The config file exceeds [`MAX_CONFIG_FILE_BYTES`](super::MAX_CONFIG_FILE_BYTES).
    #[error(
        "{}: config file is too large ({}; the limit is {limit} bytes)",
        path.display(),
        size.map_or_else(|| "more than the limit".to_owned(), |s| format!("{s} bytes"))
    )]
    TooLarge {
        /// The file (or `config.yaml` for inline text).
        path: PathBuf,
        /// Its size, when known.
        size: Option<u64>,
        /// The limit in bytes.
        limit: u64,
    },
    /// The config file is not UTF-8.
    #[error("{}: config file is not valid UTF-8 (first bad byte at offset {offset})", path.display())]
    NotUtf8 {
        /// The file.
        path: PathBuf,
        /// Byte offset of the first invalid byte.
        offset: usize,
    },
    /// YAML syntax error, or a document that is not a mapping of sections.
    #[error("{source_name}: {message}{}", at(position))]
    Syntax {
        /// File name as given (or `config.yaml` for inline text).
        source_name: String,
        /// What the parser reported.
        message: String,
        /// Where.
        position: Option<Position>,
    },
    /// A key in the file that the configuration does not have.
    #[error(
        "{source_name}: unknown key \"{key}\"{}{}",
        did_you_mean(suggestion),
        at(position)
    )]
    UnknownKey {
        /// File name as given.
        source_name: String,
        /// Full dotted path of the unknown key, e.g. `tool_bridge.max_round`.
        key: String,
        /// The closest valid key name in the same section, if one is close.
        suggestion: Option<String>,
        /// Where.
        position: Option<Position>,
    },
    /// A value in the file has the wrong type or spelling.
    #[error("{source_name}: {key}: {message}{}", at(position))]
    InvalidValue {
        /// File name as given.
        source_name: String,
        /// Full dotted path, e.g. `tool_bridge.max_rounds`.
        key: String,
        /// e.g. `expected an integer, got "three"`.
        message: String,
        /// Where.
        position: Option<Position>,
    },
    /// A bad `OAP_*` environment variable: unknown key of a known section, or a
    /// value of the wrong type.
    #[error("{var}: {message}")]
    Env {
        /// The variable, e.g. `OAP_TOOL_BRIDGE_MAX_ROUNDS`.
        var: String,
        /// e.g. `expected an integer, got "x"`.
        message: String,
    },
    /// Values that parse but are out of range or inconsistent (all problems found).
    #[error("invalid configuration: {}", join_problems(.0))]
    Invalid(Vec<Problem>),
}

fn join_problems(problems: &[Problem]) -> String {
    problems
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

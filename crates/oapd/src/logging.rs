//! Structured logging via `tracing`; `RUST_LOG` overrides the configured level.
//!
//! Field values come from outside (manifest fields, file names, URLs, Host
//! headers, model names, error text from remote servers). In the plain-text
//! format one record is one line, so every field value, the message
//! included, goes through [`EscapedFields`]: control characters become
//! escapes (`\n`, `\r`, `\t`, `\u{1b}`) and cannot end the record early,
//! forge a record after it, or send escape sequences to a terminal. That is
//! done once here rather than at each of the many call sites. The JSON format
//! escapes by construction and journald keeps each field separate.
//!
//! # Architecture
//!
//! `tracing` with key/value fields; stderr, no ANSI codes unless stderr is a
//! terminal; `RUST_LOG` overrides `log.level` (one that is non-ASCII or
//! holds a field filter, `{…}`, is ignored: the filter parser panics on some
//! non-ASCII directives, compiles field values as patterns whose DFA can take
//! minutes, and breaks an invariant on a repeated literal one; `log.level`
//! refuses both when the configuration loads, and every filter matches field
//! values as literal text). In the text format one record
//! is one line whatever its fields hold: the field formatter
//! (`logging::EscapedFields`) writes control characters in every value, the
//! message included, as escapes (`\r`, `\n`, `\u{1b}`), so a manifest field,
//! file name, URL, Host header, model name or remote error text can neither
//! forge a record nor send escape sequences to a terminal. Call sites need not
//! escape anything; the JSON format escapes by construction. Under systemd
//! (stderr is the journal per `JOURNAL_STREAM`, or `log.format: journald`)
//! records go to journald natively, fields as `OAPD_*` journal fields (each
//! field its own, so nothing there needs escaping).
//!
//! Content stays out of the logs: message text, a model's tool arguments (a
//! stdio tool's argv, an HTTP tool's URL with its query string), tool output
//! and an MCP server's stderr are logged only at debug, under the target
//! `oap_content` (`oap_exec::CONTENT_LOG_TARGET`), each value cut to 256
//! characters; `logging::content_filter` turns that target off unless
//! `server.log_content` is true, a directive more specific than any level
//! `RUST_LOG` sets for all targets. rmcp is off unless `RUST_LOG` names it and
//! content is allowed: it quotes what servers send (every notification at
//! info), so a server could fill the log through it. Lines at info and warn
//! name tools, trust, times and outcomes.
//! Every request's lines carry its id (the `request{request_id=...}` span).

use std::fmt;
use std::io::IsTerminal;

use tracing::field::{Field, Visit};
use tracing_subscriber::field::RecordFields;
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FormatFields, MakeWriter};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::EnvFilter;

use crate::config::{parse_log_filter, LogConfig, LogFormat};

/// Prefix of oapd's own journald fields (`OAPD_MANIFESTS=13`), so they can
/// never clash with journald's trusted fields and are easy to filter on.
const JOURNAL_FIELD_PREFIX: &str = "OAPD";

/// Installs the global subscriber. Logs go to stderr, so stdout stays clean
/// for command output; under systemd (`log.format: journald`, or `text`
/// with stderr connected to the journal) they go to journald natively, with
/// every tracing field as a journal field.
pub fn init(config: &LogConfig, log_content: bool) {
    let filter = || {
        content_filter(
            // `RUST_LOG` when it is set and passes the checks `log.level`
            // passed when the configuration loaded; else that level.
            std::env::var(EnvFilter::DEFAULT_ENV)
                .ok()
                .and_then(|directives| parse_log_filter(&directives).ok())
                .or_else(|| parse_log_filter(&format!("{},hyper=warn", config.level)).ok())
                .unwrap_or_else(|| EnvFilter::new("info,hyper=warn")),
            log_content,
        )
    };
    let journald_wanted = match config.format {
        LogFormat::Journald => true,
        LogFormat::Text => stderr_is_journal(),
        LogFormat::Json => false,
    };
    let mut journald_error = None;
    if journald_wanted {
        match tracing_journald::layer() {
            Ok(layer) => {
                let layer = layer.with_field_prefix(Some(JOURNAL_FIELD_PREFIX.to_owned()));
                // A second init (tests, embedding the library) is not an error worth failing on.
                let _ = tracing_subscriber::registry()
                    .with(filter())
                    .with(layer)
                    .try_init();
                return;
            }
            Err(err) => journald_error = Some(err),
        }
    }
    // Colour codes only for a person at a terminal, never in journald or files.
    let ansi = std::io::stderr().is_terminal();
    // A second init (tests, embedding the library) is not an error worth failing on.
    let _ = match config.format {
        LogFormat::Json => tracing_subscriber::fmt()
            .with_env_filter(filter())
            .with_writer(std::io::stderr)
            .with_ansi(ansi)
            .json()
            .try_init()
            .is_ok(),
        LogFormat::Text | LogFormat::Journald => text_subscriber(filter(), std::io::stderr, ansi)
            .try_init()
            .is_ok(),
    };
    if let Some(err) = journald_error {
        tracing::warn!(error = %err, "journald is not reachable; logging to stderr");
    }
}

/// The target of every log line that carries content: message text, a
/// model's tool arguments (a stdio tool's argv, an HTTP tool's URL with its
/// query string), tool output. Such lines are debug only, cut to
/// `oap_exec::CONTENT_LOG_CHARS`, and written only with `server.log_content: true`.
pub use oap_exec::CONTENT_LOG_TARGET;

/// `filter` with content lines off unless `log_content`: the directive is
/// more specific than any level a `RUST_LOG` sets for all targets, so
/// `RUST_LOG=debug` alone never shows content.
///
/// rmcp (the MCP library) is off unless the operator names it in
/// `RUST_LOG` or `log.level` *and* allows content: it quotes what MCP
/// servers send in its own lines (every incoming notification at info, a
/// message before the handshake at warn, each over-long line at error), so
/// a server sending in a loop would fill the log through it. The hub logs
/// what an operator needs itself (a server started, ready, lost, not
/// started; a minute summary of a noisy one).
pub fn content_filter(filter: EnvFilter, log_content: bool) -> EnvFilter {
    let rmcp_asked_for = filter
        .to_string()
        .split(',')
        .any(|directive| directive.trim_start().starts_with("rmcp"));
    let mut directives = Vec::new();
    if !log_content {
        directives.push(format!("{CONTENT_LOG_TARGET}=off"));
    }
    if !(log_content && rmcp_asked_for) {
        directives.push("rmcp=off".to_string());
    }
    let mut filter = filter;
    for directive in directives {
        if let Ok(directive) = directive.parse() {
            filter = filter.add_directive(directive);
        }
    }
    filter
}

/// The plain-text subscriber: tracing's usual line format (time, level,
/// target, spans, fields) with every field value escaped by
/// [`EscapedFields`], writing to `writer`.
pub fn text_subscriber<W>(
    filter: EnvFilter,
    writer: W,
    ansi: bool,
) -> impl tracing::Subscriber + Send + Sync + 'static
where
    W: for<'w> MakeWriter<'w> + Send + Sync + 'static,
{
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(writer)
        .with_ansi(ansi)
        .fmt_fields(EscapedFields)
        .finish()
}

/// Formats fields as `message key=value key=value`, like tracing's default,
/// except that control characters in values (and the Unicode line and
/// paragraph separators) are written as escapes. The record's own trailing
/// newline is written by the event formatter, outside the fields, so it
/// stays; colour codes the formatter adds around names stay too.
#[derive(Debug, Clone, Copy, Default)]
pub struct EscapedFields;

impl<'writer> FormatFields<'writer> for EscapedFields {
    fn format_fields<R: RecordFields>(&self, writer: Writer<'writer>, fields: R) -> fmt::Result {
        let mut visitor = EscapingVisitor {
            writer,
            first: true,
            result: Ok(()),
        };
        fields.record(&mut visitor);
        visitor.result
    }
}

struct EscapingVisitor<'w> {
    writer: Writer<'w>,
    first: bool,
    result: fmt::Result,
}

impl EscapingVisitor<'_> {
    fn write(&mut self, field: &Field, value: fmt::Arguments<'_>) {
        if self.result.is_err() {
            return;
        }
        self.result = self.write_inner(field, value);
    }

    fn write_inner(&mut self, field: &Field, value: fmt::Arguments<'_>) -> fmt::Result {
        if !std::mem::take(&mut self.first) {
            self.writer.write_char(' ')?;
        }
        let name = field.name();
        if name != "message" {
            let name = name.strip_prefix("r#").unwrap_or(name);
            if self.writer.has_ansi_escapes() {
                // Italic name, dimmed '=' (tracing's own styling).
                write!(self.writer, "\x1b[3m{name}\x1b[0m\x1b[2m=\x1b[0m")?;
            } else {
                write!(self.writer, "{name}=")?;
            }
        }
        fmt::Write::write_fmt(&mut Escaper(&mut self.writer), value)
    }
}

impl Visit for EscapingVisitor<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.write(field, format_args!("{value}"));
        } else {
            self.write(field, format_args!("{value:?}"));
        }
    }

    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        self.write(field, format_args!("{value}"));
        let mut source = value.source();
        while let Some(cause) = source {
            if self.result.is_ok() {
                self.result = fmt::Write::write_fmt(
                    &mut Escaper(&mut self.writer),
                    format_args!(": {cause}"),
                );
            }
            source = cause.source();
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.write(field, format_args!("{value:?}"));
    }
}

/// Displays `T` with control characters escaped as in log fields, for text
/// printed outside a log record (lint output naming a file).
pub struct Escaped<T>(pub T);

impl<T: fmt::Display> fmt::Display for Escaped<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Write::write_fmt(&mut Escaper(f), format_args!("{}", self.0))
    }
}

/// Writes through to `W`, replacing control characters and the Unicode line
/// separators with escapes. Debug-formatted strings arrive already escaped
/// and pass unchanged; a backslash is not doubled, so such values read the
/// same whether a call site used `%` or `?`.
struct Escaper<'a, W: fmt::Write>(&'a mut W);

impl<W: fmt::Write> fmt::Write for Escaper<'_, W> {
    #[allow(
        clippy::string_slice,
        reason = "every index comes from str::find, char_indices or a checked char boundary"
    )]
    fn write_str(&mut self, s: &str) -> fmt::Result {
        let mut rest = s;
        while let Some(at) = rest.find(needs_escape) {
            self.0.write_str(&rest[..at])?;
            let c = rest[at..].chars().next().unwrap_or_default();
            match c {
                '\n' => self.0.write_str("\\n")?,
                '\r' => self.0.write_str("\\r")?,
                '\t' => self.0.write_str("\\t")?,
                c => write!(self.0, "\\u{{{:x}}}", u32::from(c))?,
            }
            rest = &rest[at + c.len_utf8()..];
        }
        self.0.write_str(rest)
    }
}

fn needs_escape(c: char) -> bool {
    c.is_control() || c == '\u{2028}' || c == '\u{2029}'
}

/// Whether stderr is the stream systemd connected to the journal: systemd
/// sets `JOURNAL_STREAM=<device>:<inode>` of that stream, and a child that
/// redirected stderr elsewhere keeps the variable but not the stream.
pub fn stderr_is_journal() -> bool {
    let Some(value) = std::env::var_os("JOURNAL_STREAM") else {
        return false;
    };
    let Some((device, inode)) = value.to_str().and_then(|v| v.split_once(':')) else {
        return false;
    };
    let (Ok(device), Ok(inode)) = (device.parse::<u64>(), inode.parse::<u64>()) else {
        return false;
    };
    use std::os::fd::AsFd;
    use std::os::unix::fs::MetadataExt;
    // fstat on a duplicate of fd 2 (a File closes only its duplicate).
    let stat = std::io::stderr()
        .as_fd()
        .try_clone_to_owned()
        .map(std::fs::File::from)
        .and_then(|file| file.metadata());
    match stat {
        Ok(stat) => stat.dev() == device && stat.ino() == inode,
        Err(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;

    /// A `MakeWriter` collecting everything written.
    #[derive(Clone, Default)]
    struct Capture(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Capture {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl<'w> MakeWriter<'w> for Capture {
        type Writer = Capture;
        fn make_writer(&'w self) -> Capture {
            self.clone()
        }
    }

    #[derive(Debug)]
    struct Remote(&'static str);
    impl fmt::Display for Remote {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str(self.0)
        }
    }
    impl std::error::Error for Remote {}

    const FORGED: &str =
        "x\r\n2026-01-01T00:00:00.000000Z  INFO oapd: forged\u{1b}[31m red\u{85}\u{2028}";

    /// Every way a call site records an outside string, in an event and in a span.
    fn log_everything(ansi: bool) -> String {
        let capture = Capture::default();
        let subscriber = text_subscriber(EnvFilter::new("info"), capture.clone(), ansi);
        tracing::subscriber::with_default(subscriber, || {
            let span = tracing::info_span!("request", host = %FORGED);
            let _entered = span.enter();
            let error = Remote(FORGED);
            tracing::warn!(
                location = %FORGED,
                name = FORGED,
                debug = ?FORGED,
                error = &error as &(dyn std::error::Error + 'static),
                r#type = %FORGED,
                "manifest {} skipped",
                FORGED
            );
        });
        let bytes = capture.0.lock().unwrap().clone();
        String::from_utf8(bytes).unwrap()
    }

    #[test]
    fn a_record_with_forging_fields_stays_one_escaped_line() {
        let out = log_everything(false);
        assert!(out.ends_with('\n'), "{out:?}");
        assert_eq!(out.matches('\n').count(), 1, "{out:?}");
        assert!(
            !out.contains(['\r', '\u{1b}', '\u{85}', '\u{2028}']),
            "{out:?}"
        );
        let escaped =
            r"x\r\n2026-01-01T00:00:00.000000Z  INFO oapd: forged\u{1b}[31m red\u{85}\u{2028}";
        for expected in [
            format!("manifest {escaped} skipped"),
            format!("location={escaped}"),
            format!("error={escaped}"),
            format!("type={escaped}"),
            format!("request{{host={escaped}}}"),
        ] {
            assert!(out.contains(&expected), "{expected:?} missing in {out:?}");
        }
        // Strings recorded as values are quoted, `?` ones Debug-escaped: both
        // are single-line and look the same.
        let quoted = format!("{FORGED:?}");
        assert!(out.contains(&format!("name={quoted}")), "{out:?}");
        assert!(out.contains(&format!("debug={quoted}")), "{out:?}");
        assert!(out.contains(" WARN "), "{out:?}");
    }

    #[test]
    fn at_a_terminal_only_the_formatter_itself_writes_escape_sequences() {
        let out = log_everything(true);
        assert_eq!(out.matches('\n').count(), 1, "{out:?}");
        assert!(!out.contains('\r'), "{out:?}");
        // The formatter's own colours are there; the field's red is not.
        assert!(out.contains("\u{1b}[3mlocation\u{1b}[0m"), "{out:?}");
        assert!(!out.contains("\u{1b}[31m"), "{out:?}");
        assert!(out.contains(r"forged\u{1b}[31m red"), "{out:?}");
    }

    /// What gets through `content_filter(directives, log_content)` of
    /// rmcp's line about an incoming notification, a content line and an
    /// ordinary info line.
    fn filtered(directives: &str, log_content: bool) -> String {
        let capture = Capture::default();
        let filter = content_filter(EnvFilter::new(directives), log_content);
        let subscriber = text_subscriber(filter, capture.clone(), false);
        tracing::subscriber::with_default(subscriber, || {
            tracing::info!(target: "rmcp::service", notification = "server text", "received notification");
            tracing::warn!(target: "rmcp::service::client", message = "server text", "Received unexpected message");
            tracing::debug!(target: CONTENT_LOG_TARGET, "log message: server text");
            tracing::info!("MCP server ready");
        });
        let bytes = capture.0.lock().unwrap().clone();
        String::from_utf8(bytes).unwrap()
    }

    #[test]
    fn rmcp_lines_quoting_servers_are_off_unless_asked_for_with_content() {
        for (directives, log_content) in [
            ("info", false),
            ("info", true),
            ("debug", false),
            ("debug", true),
            ("info,rmcp=info", false),
        ] {
            let out = filtered(directives, log_content);
            // rmcp's own lines quote the server: never without both asks.
            assert!(
                !out.contains("received notification") && !out.contains("unexpected message"),
                "{directives} {log_content}: {out}"
            );
            // The server's text reaches the log only through the content
            // target, at debug, with `server.log_content`.
            let content_expected = log_content && directives.starts_with("debug");
            assert_eq!(
                out.contains("server text"),
                content_expected,
                "{directives} {log_content}: {out}"
            );
            assert!(out.contains("MCP server ready"), "{out}");
        }
        // The operator asks for rmcp and allows content: both show.
        let out = filtered("debug,rmcp=info", true);
        assert!(out.contains("received notification"), "{out}");
        assert!(out.contains("log message: server text"), "{out}");
    }

    #[test]
    fn ordinary_values_are_written_as_before() {
        let capture = Capture::default();
        let subscriber = text_subscriber(EnvFilter::new("info"), capture.clone(), false);
        tracing::subscriber::with_default(subscriber, || {
            tracing::info!(manifests = 13, path = %"/srv/m/a b.json", task = "count words", "index ready");
        });
        let out = String::from_utf8(capture.0.lock().unwrap().clone()).unwrap();
        assert!(
            out.ends_with(
                r#"index ready manifests=13 path=/srv/m/a b.json task="count words"
"#
            ),
            "{out:?}"
        );
    }
}

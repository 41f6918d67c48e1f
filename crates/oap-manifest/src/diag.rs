//! Located diagnostics produced by validation.

use std::fmt;

/// How bad a finding is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Severity {
    /// The manifest is refused.
    Error,
    /// The manifest is accepted but something is off (spec limit exceeded,
    /// recommended field missing, unknown field kept, ...).
    Warning,
}

impl Severity {
    /// `error` / `warning`, as printed by the linter.
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Error => "error",
            Severity::Warning => "warning",
        }
    }
}

impl fmt::Display for Severity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One finding, located by a JSON path such as `invoke.method`,
/// `examples[2].input` or `input.parameters.limit.type` so a publisher can
/// fix it without guessing. Keys that are not plain identifiers are written
/// `parent["odd key"]`. The empty path means the whole document.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diagnostic {
    /// Error or warning.
    pub severity: Severity,
    /// Location inside the document ("" = whole document).
    pub path: String,
    /// Human-readable explanation, quoting the offending value.
    pub message: String,
}

impl Diagnostic {
    /// Build an error.
    pub fn error(path: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            severity: Severity::Error,
            path: path.into(),
            message: message.into(),
        }
    }

    /// Build a warning.
    pub fn warning(path: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            severity: Severity::Warning,
            path: path.into(),
            message: message.into(),
        }
    }

    /// True for [`Severity::Error`].
    pub fn is_error(&self) -> bool {
        self.severity == Severity::Error
    }
}

impl fmt::Display for Diagnostic {
    /// `path: message`, or just `message` for the whole document.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.path.is_empty() {
            f.write_str(&self.message)
        } else {
            write!(f, "{}: {}", self.path, self.message)
        }
    }
}

/// All findings for one document, in the order validation found them
/// (fields in a fixed order, then unknown-field warnings).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Report {
    /// Errors and warnings, interleaved in the order they were found.
    pub diagnostics: Vec<Diagnostic>,
}

impl Report {
    /// Empty report.
    pub fn new() -> Self {
        Self::default()
    }

    /// Only the errors.
    pub fn errors(&self) -> impl Iterator<Item = &Diagnostic> {
        self.diagnostics
            .iter()
            .filter(|d| d.severity == Severity::Error)
    }

    /// Only the warnings.
    pub fn warnings(&self) -> impl Iterator<Item = &Diagnostic> {
        self.diagnostics
            .iter()
            .filter(|d| d.severity == Severity::Warning)
    }

    /// True when at least one error was found (the manifest is refused).
    pub fn has_errors(&self) -> bool {
        self.errors().next().is_some()
    }

    /// Number of errors.
    pub fn error_count(&self) -> usize {
        self.errors().count()
    }

    /// Number of warnings.
    pub fn warning_count(&self) -> usize {
        self.warnings().count()
    }

    /// True when there is nothing to report.
    pub fn is_empty(&self) -> bool {
        self.diagnostics.is_empty()
    }

    /// Append one finding.
    pub fn push(&mut self, d: Diagnostic) {
        self.diagnostics.push(d);
    }

    /// A copy holding only the warnings (what [`crate::Parsed`] carries).
    pub fn only_warnings(&self) -> Report {
        Report {
            diagnostics: self.warnings().cloned().collect(),
        }
    }

    /// First diagnostic at exactly `path`, handy in tests and callers that
    /// want to react to one field.
    pub fn find(&self, path: &str) -> Option<&Diagnostic> {
        self.diagnostics.iter().find(|d| d.path == path)
    }
}

impl fmt::Display for Report {
    /// One `severity: path: message` line per diagnostic, no trailing newline.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, d) in self.diagnostics.iter().enumerate() {
            if i > 0 {
                f.write_str("\n")?;
            }
            write!(f, "{}: {}", d.severity, d)?;
        }
        Ok(())
    }
}

/// Render a report the way `oapd manifest lint FILE...` prints it: one
/// `FILE: error: path: message` line per diagnostic, each ending in `\n`.
/// Empty string for a clean report. The caller does the file I/O.
pub fn lint_text(file: &str, report: &Report) -> String {
    let mut out = String::new();
    for d in &report.diagnostics {
        out.push_str(file);
        out.push_str(": ");
        out.push_str(d.severity.as_str());
        out.push_str(": ");
        out.push_str(&d.to_string());
        out.push('\n');
    }
    out
}

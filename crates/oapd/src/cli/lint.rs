//! `oapd manifest lint`: check manifest files without a config, model or
//! index. A file's `input.schema` / `output.schema` references are
//! resolved as the daemon resolves a local manifest's (fetched under
//! local trust, or read beside the file), so a reference that would not
//! be used is reported with its reason.

use std::path::Path;

/// Lints manifest files, printing `FILE: severity: path: message` lines
/// (or `FILE: ok`); returns whether any file had errors.
pub fn lint(paths: &[impl AsRef<Path>], out: &mut impl std::io::Write) -> std::io::Result<bool> {
    let mut any_error = false;
    for path in paths {
        let path = path.as_ref();
        // One line per finding even for a file name with a line break or an
        // escape sequence in it.
        let shown = crate::logging::Escaped(path.display()).to_string();
        let max = oap_manifest::MAX_MANIFEST_BYTES;
        // A FIFO or device named on the command line is refused, not waited on.
        let report = match crate::files::read_regular(path, max as u64) {
            Ok(bytes) => match oap_manifest::parse(&bytes) {
                Ok(parsed) => {
                    let mut warnings = parsed.warnings;
                    // A stored copy (a crawl envelope's body) says why its
                    // schema was not used: the tool falls back.
                    // A manifest file's own references are resolved as
                    // the daemon resolves those of `manifests.dirs`.
                    let mut errors = oap_manifest::tool::schema_errors(&parsed.manifest);
                    errors.extend(crate::local_schemas::lint_references(path, &bytes));
                    for line in errors {
                        let (field, reason) = line.split_once(": ").unwrap_or(("", &line));
                        warnings.push(oap_manifest::Diagnostic::warning(
                            field,
                            format!("not used ({reason}); the tool has the fallback parameters"),
                        ));
                    }
                    warnings
                }
                Err(err) => err.report(),
            },
            Err(crate::files::ReadError::TooLarge {
                size: Some(size), ..
            }) => oap_manifest::ManifestError::TooLarge {
                size: usize::try_from(size).unwrap_or(usize::MAX),
                max,
            }
            .report(),
            Err(err) => {
                writeln!(out, "{shown}: error: cannot read: {err}")?;
                any_error = true;
                continue;
            }
        };
        any_error |= report.has_errors();
        if report.is_empty() {
            writeln!(out, "{shown}: ok")?;
        } else {
            write!(out, "{}", oap_manifest::lint_text(&shown, &report))?;
        }
    }
    Ok(any_error)
}

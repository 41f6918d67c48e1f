//! The real `_oap.<domain> TXT` lookup for the crawler's participation
//! hint (`crawler.check_txt`): hickory's stub resolver with the system
//! configuration (/etc/resolv.conf), one attempt, a bounded timeout.
//!
//! The hint is only recorded, never required, so every failure maps to a
//! recorded state, never an error: no such name or no TXT record →
//! `absent` (`NotFound`), anything else → `failed` with the reason. Names
//! from `crawler.hosts` are local by definition: they are not looked up
//! (`not_checked`), which also keeps tests and benchmarks off real DNS.

use std::collections::HashSet;
use std::io;
use std::time::Duration;

use hickory_resolver::proto::rr::RData;
use hickory_resolver::TokioResolver;
use oap_crawl::TxtResolver;
use oap_exec::BoxFuture;
use tokio::sync::OnceCell;

/// Longest one TXT lookup may take (the crawl goes on either way).
pub const TXT_TIMEOUT: Duration = Duration::from_secs(3);

/// Most bytes of one TXT record kept (a participation hint is tiny).
const MAX_RECORD_BYTES: usize = 1024;

/// DNS TXT lookups through the system's resolvers.
pub struct DnsTxtResolver {
    /// Built on first use, inside the runtime; an error (e.g. no
    /// /etc/resolv.conf) is kept and reported for every lookup.
    resolver: OnceCell<Result<TokioResolver, String>>,
    /// `crawler.hosts` names (lowercase): never looked up.
    local_names: HashSet<String>,
}

impl DnsTxtResolver {
    /// A resolver that never looks up `local_names` (the `crawler.hosts`
    /// names; they are lower-cased by the caller).
    pub fn new(local_names: impl IntoIterator<Item = String>) -> Self {
        Self {
            resolver: OnceCell::new(),
            local_names: local_names.into_iter().collect(),
        }
    }

    async fn resolver(&self) -> &Result<TokioResolver, String> {
        self.resolver
            .get_or_init(|| async {
                let mut builder = TokioResolver::builder_tokio()
                    .map_err(|e| format!("no system DNS configuration: {e}"))?;
                builder.options_mut().timeout = TXT_TIMEOUT;
                builder.options_mut().attempts = 1;
                builder
                    .build()
                    .map_err(|e| format!("cannot set up the DNS resolver: {e}"))
            })
            .await
    }

    async fn lookup(&self, name: &str) -> io::Result<Vec<String>> {
        let host = name.strip_prefix("_oap.").unwrap_or(name);
        if self.local_names.contains(&host.to_ascii_lowercase()) {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "a crawler.hosts name is not looked up in DNS",
            ));
        }
        let resolver = self
            .resolver()
            .await
            .as_ref()
            .map_err(|e| io::Error::other(e.clone()))?;
        // Fully qualified: no search-domain expansion.
        let fqdn = format!("{}.", name.trim_end_matches('.'));
        let lookup = match tokio::time::timeout(TXT_TIMEOUT, resolver.txt_lookup(fqdn)).await {
            Err(_) => return Err(io::Error::new(io::ErrorKind::TimedOut, "DNS timed out")),
            Ok(Err(e)) if e.is_no_records_found() || e.is_nx_domain() => {
                return Err(io::Error::new(io::ErrorKind::NotFound, e.to_string()))
            }
            Ok(Err(e)) => return Err(io::Error::other(e.to_string())),
            Ok(Ok(lookup)) => lookup,
        };
        Ok(lookup
            .answers()
            .iter()
            .filter_map(|record| match &record.data {
                RData::TXT(txt) => Some(record_text(&txt.txt_data)),
                _ => None,
            })
            .collect())
    }
}

impl TxtResolver for DnsTxtResolver {
    fn txt<'a>(&'a self, name: &'a str) -> BoxFuture<'a, io::Result<Vec<String>>> {
        Box::pin(self.lookup(name))
    }
}

/// One TXT record's character-strings joined (RFC 7208 §3.3 style: a long
/// value is split into 255-byte strings), invalid UTF-8 replaced, capped.
fn record_text(strings: &[Box<[u8]>]) -> String {
    let mut bytes = Vec::new();
    for s in strings {
        let room = MAX_RECORD_BYTES.saturating_sub(bytes.len());
        bytes.extend_from_slice(&s[..s.len().min(room)]);
    }
    String::from_utf8_lossy(&bytes).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(parts: &[&[u8]]) -> Vec<Box<[u8]>> {
        parts
            .iter()
            .map(|p| p.to_vec().into_boxed_slice())
            .collect()
    }

    #[test]
    fn record_strings_are_joined_and_capped() {
        assert_eq!(record_text(&strings(&[b"v=oap1"])), "v=oap1");
        assert_eq!(record_text(&strings(&[b"v=oa", b"p1; x=1"])), "v=oap1; x=1");
        assert_eq!(record_text(&strings(&[b"v=\xffoap1"])), "v=\u{fffd}oap1");
        let long = vec![b'a'; 4000];
        assert_eq!(
            record_text(&strings(&[&long, &long])).len(),
            MAX_RECORD_BYTES
        );
        assert_eq!(record_text(&[]), "");
    }

    #[tokio::test]
    async fn hosts_names_are_never_looked_up() {
        let resolver = DnsTxtResolver::new(["good.test".to_string()]);
        let err = resolver.txt("_oap.GOOD.test").await.unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::Unsupported);
        assert_eq!(
            oap_crawl::txt::check(Some(&resolver), "good.test:8443").await,
            oap_crawl::TxtHint::NotChecked
        );
        // Nothing was built: no DNS configuration was even read.
        assert!(resolver.resolver.get().is_none());
    }
}

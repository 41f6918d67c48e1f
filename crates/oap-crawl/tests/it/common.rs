//! Test harness: the kit's manifest web (an HTTPS server on loopback that
//! serves good and hostile manifests by Host header, the stub resolver, a
//! connect-recording executor) and a stub TXT resolver.

use std::collections::HashMap;
use std::io;

use oap_crawl::TxtResolver;
use oap_exec::BoxFuture;

pub use oap_testkit::manifest_web::*;

/// TXT records by name.
pub struct StubTxt(pub HashMap<String, Vec<String>>);

impl TxtResolver for StubTxt {
    fn txt<'a>(&'a self, name: &'a str) -> BoxFuture<'a, io::Result<Vec<String>>> {
        let found = self.0.get(name).cloned();
        Box::pin(
            async move { found.ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "NXDOMAIN")) },
        )
    }
}

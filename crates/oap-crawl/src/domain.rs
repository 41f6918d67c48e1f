//! Crawlable domains: `example.com` or `example.com:8443`, normalised to
//! lower case without a trailing dot. IP literals, paths, user info and
//! schemes are refused: a crawled manifest is identified by its domain, and
//! an address is not one.

/// Why a domain was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid domain {given:?}: {reason}")]
pub struct DomainError {
    /// What was given (cut to 100 characters).
    pub given: String,
    /// Why it is not a crawlable domain.
    pub reason: String,
}

/// Normalises a domain (`Example.COM.` → `example.com`), or says why it is not one.
pub fn normalize_domain(raw: &str) -> Result<String, DomainError> {
    let fail = |reason: &str| DomainError {
        given: raw.chars().take(100).collect(),
        reason: reason.to_string(),
    };
    let text = raw.trim();
    if text.is_empty() {
        return Err(fail("empty"));
    }
    if text.len() > 260 {
        return Err(fail("longer than a DNS name can be"));
    }
    if text.contains("://") {
        return Err(fail("give the domain only (example.com), not a URL"));
    }
    if text.contains(['/', '@', '?', '#', '\\', ' ']) {
        return Err(fail(
            "a domain has no path, user, query or spaces (example.com)",
        ));
    }
    let (host, port) = match text.rsplit_once(':') {
        Some((host, port)) => {
            let port: u16 = port
                .parse()
                .ok()
                .filter(|p| *p > 0)
                .ok_or_else(|| fail("the port must be a number from 1 to 65535"))?;
            (host, Some(port))
        }
        None => (text, None),
    };
    if host.starts_with('[') || host.parse::<std::net::IpAddr>().is_ok() {
        return Err(fail("an IP address is not a domain"));
    }
    let host = host.strip_suffix('.').unwrap_or(host).to_ascii_lowercase();
    if host.len() > 253 {
        return Err(fail("longer than 253 characters"));
    }
    let labels: Vec<&str> = host.split('.').collect();
    if labels.len() < 2 {
        return Err(fail("a domain needs at least two labels (example.com)"));
    }
    for label in &labels {
        if label.is_empty() || label.len() > 63 {
            return Err(fail("every label must be 1 to 63 characters"));
        }
        if !label
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-')
            || label.starts_with('-')
            || label.ends_with('-')
        {
            return Err(fail(
                "labels may hold only letters, digits and inner hyphens (use punycode for IDNs)",
            ));
        }
    }
    if labels
        .last()
        .is_some_and(|tld| tld.bytes().all(|b| b.is_ascii_digit()))
    {
        return Err(fail("an IP address is not a domain"));
    }
    // `.local` is multicast DNS (RFC 6762), never an internet domain; LAN
    // services are keyed `<instance>.local`, so refusing it here also keeps
    // a registered "domain" from taking a LAN device's key.
    if labels.last() == Some(&"local") {
        return Err(fail(
            ".local names are LAN (mDNS) names, not internet domains (see crawler.mdns)",
        ));
    }
    Ok(match port {
        Some(443) | None => host,
        Some(port) => format!("{host}:{port}"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalises() {
        assert_eq!(normalize_domain("Example.COM.").unwrap(), "example.com");
        assert_eq!(normalize_domain(" a.b.c ").unwrap(), "a.b.c");
        assert_eq!(normalize_domain("x.test:8443").unwrap(), "x.test:8443");
        assert_eq!(normalize_domain("x.test:443").unwrap(), "x.test");
        assert_eq!(
            normalize_domain("xn--bcher-kva.ch").unwrap(),
            "xn--bcher-kva.ch"
        );
    }

    #[test]
    fn refuses() {
        for bad in [
            "",
            "localhost",
            "127.0.0.1",
            "[::1]",
            "::1",
            "10.0.0.1:443",
            "https://example.com",
            "example.com/path",
            "user@example.com",
            "exa mple.com",
            "-bad.com",
            "a..b",
            "example.com:0",
            "example.com:99999",
            "example.com:http",
            "bücher.ch",
            "1.2.3.4.5",
            "printer.local",
            "Hub.LOCAL.",
            "hub.local:8080",
        ] {
            assert!(normalize_domain(bad).is_err(), "{bad:?} accepted");
        }
        let err = normalize_domain("127.0.0.1").unwrap_err();
        assert!(err.to_string().contains("IP address"), "{err}");
    }
}

//! Who may talk to the daemon, checked before any route runs.
//!
//! **Host (DNS rebinding).** A web page can make a browser send requests to
//! oapd by pointing its own name at oapd's address (127.0.0.1, or the
//! machine's LAN address); the browser then treats oapd as that page's
//! origin, reads the answers, and makes every Origin check below see the
//! page's own `http://<Host>`. Such requests carry the page's name as Host,
//! so on every listener only Hosts that cannot be rebound are served: any
//! IP literal (a page loaded from an IP has that IP as its origin, there is
//! no name to point elsewhere), `localhost`, the machine's hostname,
//! `*.localhost`, `*.local`, `*.internal` (names that resolve only on this
//! machine or its LAN), plus the operator's `server.allowed_hosts`. A
//! bearer token or a `server.trusted_clients` address does not lift the
//! rule: a rebinding page runs in a trusted client's browser.
//!
//! **Origin (cross-site requests).** A page may send "simple" requests
//! (a POST with `Content-Type: text/plain`) to any address without a CORS
//! preflight; the browser only hides the answer, the tool has already run.
//! So a request whose `Origin` is neither listed in `server.cors_origins` nor
//! the request's own `http://<Host>` is refused before anything runs. The
//! own-origin case counts only for a Host that passed the Host rule, so a
//! rebound name never vouches for itself. Clients that are not browsers
//! send no Origin and are not affected.

use std::net::IpAddr;
use std::sync::OnceLock;

use hyper::header::{HOST, ORIGIN};
use hyper::{HeaderMap, StatusCode, Uri, Version};

/// Why a request was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// HTTP/1.1 without a Host header.
    MissingHost,
    /// More than one Host header.
    ManyHosts,
    /// A Host that is neither an IP literal, nor a name of this machine,
    /// nor in `server.allowed_hosts`.
    Host(String),
    /// An Origin that is neither allowed nor the request's own.
    Origin(String),
}

impl Refusal {
    /// 400 for a missing or repeated Host, 403 for a refused Host or Origin.
    pub fn status(&self) -> StatusCode {
        match self {
            Refusal::MissingHost | Refusal::ManyHosts => StatusCode::BAD_REQUEST,
            Refusal::Host(_) | Refusal::Origin(_) => StatusCode::FORBIDDEN,
        }
    }

    /// The `error` text the client gets, naming the config key that would
    /// allow the request.
    pub fn message(&self) -> String {
        match self {
            Refusal::MissingHost => "the request has no Host header (required by HTTP/1.1)".into(),
            Refusal::ManyHosts => "the request has more than one Host header".into(),
            Refusal::Host(host) => format!(
                "Host {host:?} is not allowed (DNS rebinding protection): oapd answers to IP \
                 addresses, localhost, its hostname and *.localhost, *.local, *.internal names; \
                 to reach it by this name, add it to server.allowed_hosts \
                 (OAP_SERVER_ALLOWED_HOSTS)"
            ),
            Refusal::Origin(origin) => format!(
                "Origin {origin:?} is not allowed (cross-site request protection); \
                 to let pages from it call oapd, add it to server.cors_origins \
                 (OAP_SERVER_CORS_ORIGINS)"
            ),
        }
    }
}

/// What the checks look at in a request.
#[derive(Debug, Clone, Copy)]
pub struct Inbound<'a> {
    /// The request's HTTP version (HTTP/1.0 may omit Host).
    pub version: Version,
    /// The request target; an absolute-form URI carries the authority.
    pub uri: &'a Uri,
    /// The request's headers (Host, Origin).
    pub headers: &'a HeaderMap,
}

/// The Host and Origin checks, in that order, the same on every listener.
pub fn check(
    request: Inbound<'_>,
    allowed_hosts: &[String],
    cors_origins: &[String],
) -> Result<(), Refusal> {
    let mut hosts = request.headers.get_all(HOST).iter();
    let header = hosts.next();
    if hosts.next().is_some() {
        return Err(Refusal::ManyHosts);
    }
    // An absolute-form target (`GET http://name/ HTTP/1.1`) names the host
    // itself, and a server must use it rather than the Host header.
    let host: Option<String> = match (request.uri.authority(), header) {
        (Some(authority), _) => Some(authority.as_str().to_owned()),
        (None, Some(value)) => Some(String::from_utf8_lossy(value.as_bytes()).into_owned()),
        (None, None) if request.version >= Version::HTTP_11 => return Err(Refusal::MissingHost),
        // HTTP/1.0 without Host: nothing a browser sends, nothing to rebind.
        (None, None) => None,
    };
    // Only a Host that passed the rule may vouch for an Origin: a rebound
    // name would otherwise make the attacker's page its own origin.
    let checked_host = match host {
        Some(host) if host_allowed(&host, allowed_hosts) => Some(host),
        Some(host) => return Err(Refusal::Host(host)),
        None => None,
    };
    for origin in request.headers.get_all(ORIGIN) {
        let origin = String::from_utf8_lossy(origin.as_bytes());
        if !origin_allowed(&origin, checked_host.as_deref(), cors_origins) {
            return Err(Refusal::Origin(origin.into_owned()));
        }
    }
    Ok(())
}

/// Whether `origin` may call: listed (or `*` listed), or the request's own
/// origin (`http://<Host>`, the daemon serving a page of its own). `host`
/// must be one [`host_allowed`] accepted.
pub fn origin_allowed(origin: &str, host: Option<&str>, cors_origins: &[String]) -> bool {
    if cors_origins
        .iter()
        .any(|allowed| allowed == "*" || allowed == origin)
    {
        return true;
    }
    let Some(host) = host.filter(|h| !h.is_empty()) else {
        return false;
    };
    let Some(origin_host) = origin
        .get(..7)
        .filter(|scheme| scheme.eq_ignore_ascii_case("http://"))
        .and(origin.get(7..))
    else {
        return false;
    };
    let without_default_port = |h: &str| h.strip_suffix(":80").map(str::to_owned);
    origin_host.eq_ignore_ascii_case(host)
        || without_default_port(host).is_some_and(|h| origin_host.eq_ignore_ascii_case(&h))
}

/// Whether a listener accepts this Host header value: any IP literal, a
/// name of this machine, or one of the operator's `extra` names.
pub fn host_allowed(raw: &str, extra: &[String]) -> bool {
    let Some(host) = host_part(raw) else {
        return false;
    };
    if host.is_empty() {
        // Ollama accepts an empty Host: no browser sends one.
        return true;
    }
    // Any IP literal: what the browser shows as the origin is that
    // address itself, so no foreign page can share it.
    if host.parse::<IpAddr>().is_ok() {
        return true;
    }
    let name = host.strip_suffix('.').unwrap_or(&host);
    if name == "localhost" || machine_hostname().is_some_and(|own| own == name) {
        return true;
    }
    let local_suffix = [".localhost", ".local", ".internal"]
        .iter()
        .any(|tld| name.len() > tld.len() && name.ends_with(tld));
    local_suffix
        || extra.iter().any(|allowed| {
            let allowed = allowed.trim_start_matches('[').trim_end_matches(']');
            allowed.eq_ignore_ascii_case(name)
        })
}

/// The host of a Host value without its port, lower-cased; `None` when the
/// value is not a host (with an optional numeric port) at all.
fn host_part(raw: &str) -> Option<String> {
    let raw = raw.trim().to_ascii_lowercase();
    let digits = |port: &str| port.len() <= 5 && port.bytes().all(|b| b.is_ascii_digit());
    if let Some(rest) = raw.strip_prefix('[') {
        let (inside, after) = rest.split_once(']')?;
        inside.parse::<std::net::Ipv6Addr>().ok()?;
        let port_ok = after.is_empty() || after.strip_prefix(':').is_some_and(digits);
        return port_ok.then(|| inside.to_owned());
    }
    if raw.matches(':').count() > 1 {
        // A bare IPv6 address (no brackets, so no port).
        return raw
            .parse::<std::net::Ipv6Addr>()
            .is_ok()
            .then_some(raw.clone());
    }
    let host = match raw.split_once(':') {
        Some((host, port)) if digits(port) => host,
        Some(_) => return None,
        None => raw.as_str(),
    };
    host.bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_'))
        .then(|| host.to_owned())
}

/// The machine's hostname (lower-cased), once.
fn machine_hostname() -> Option<&'static str> {
    static HOSTNAME: OnceLock<Option<String>> = OnceLock::new();
    HOSTNAME
        .get_or_init(|| {
            let name = nix::unistd::gethostname().ok()?;
            let name = name.to_str()?.trim().trim_end_matches('.');
            (!name.is_empty()).then(|| name.to_ascii_lowercase())
        })
        .as_deref()
}

#[cfg(test)]
mod tests {
    use super::*;
    use hyper::header::HeaderValue;

    #[test]
    fn hosts_that_name_this_machine_are_allowed() {
        for host in [
            "",
            "localhost",
            "localhost:8300",
            "LOCALHOST",
            "localhost.",
            "127.0.0.1",
            "127.0.0.1:8300",
            "127.1.2.3",
            "[::1]:8300",
            "[::1]",
            "::1",
            "[::ffff:127.0.0.1]:8300",
            "10.0.0.5",
            "192.168.1.20:8300",
            "172.16.3.4",
            "0.0.0.0:8300",
            "[::]:8300",
            "[fd00::1]:8300",
            // Any IP literal: a page loaded from an IP has that IP as its
            // origin, there is no name to rebind.
            "8.8.8.8",
            "203.0.113.7:8300",
            "169.254.169.254",
            "[2001:db8::1]:8300",
            "oapd.local",
            "oapd.local:8300",
            "box.internal:80",
            "app.localhost",
        ] {
            assert!(host_allowed(host, &[]), "{host} should be allowed");
        }
    }

    #[test]
    fn foreign_and_malformed_hosts_are_refused() {
        for host in [
            "evil.example",
            "evil.example:8300",
            "evil.com:18377",
            "8.8.8.8.evil.example",
            "0x7f.1",
            "2130706433",
            "[evil.example]:8300",
            "local",
            ".local",
            "localhost.evil.example",
            "127.0.0.1.nip.io",
            "localhost:port",
            "localhost:8300:1",
            "[::1",
            "[::1]x",
            "evil.example/x",
            "user@localhost",
            "oapd",
        ] {
            assert!(!host_allowed(host, &[]), "{host} should be refused");
        }
    }

    #[test]
    fn the_machine_hostname_is_allowed() {
        let Some(own) = machine_hostname() else {
            eprintln!("skipped: this machine has no hostname");
            return;
        };
        assert!(host_allowed(own, &[]));
        assert!(host_allowed(&format!("{}:8300", own.to_uppercase()), &[]));
    }

    #[test]
    fn operator_names_are_allowed_with_any_port() {
        let extra = vec!["Pi.Example.org".to_owned(), "[2001:db8::1]".to_owned()];
        assert!(host_allowed("pi.example.org", &extra));
        assert!(host_allowed("PI.example.org:8300", &extra));
        assert!(host_allowed("[2001:db8::1]:8300", &extra));
        assert!(!host_allowed("evil.pi.example.org", &extra));
        assert!(!host_allowed("pi.example.org.evil", &extra));
    }

    #[test]
    fn origins_must_be_listed_or_the_requests_own() {
        let none: Vec<String> = Vec::new();
        assert!(!origin_allowed(
            "http://evil.example",
            Some("localhost:8300"),
            &none
        ));
        assert!(!origin_allowed("null", Some("localhost:8300"), &none));
        assert!(origin_allowed(
            "http://localhost:8300",
            Some("localhost:8300"),
            &none
        ));
        assert!(origin_allowed(
            "http://LOCALHOST:8300",
            Some("localhost:8300"),
            &none
        ));
        assert!(origin_allowed(
            "http://localhost",
            Some("localhost:80"),
            &none
        ));
        assert!(!origin_allowed(
            "https://localhost:8300",
            Some("localhost:8300"),
            &none
        ));
        assert!(!origin_allowed(
            "http://localhost:8301",
            Some("localhost:8300"),
            &none
        ));
        assert!(!origin_allowed("http://localhost:8300", None, &none));
        let listed = vec!["https://app.example".to_owned()];
        assert!(origin_allowed("https://app.example", Some("x"), &listed));
        assert!(!origin_allowed(
            "https://app.example.evil",
            Some("x"),
            &listed
        ));
        assert!(origin_allowed(
            "http://evil.example",
            None,
            &["*".to_owned()]
        ));
    }

    fn inbound<'a>(headers: &'a HeaderMap, uri: &'a Uri) -> Inbound<'a> {
        Inbound {
            version: Version::HTTP_11,
            uri,
            headers,
        }
    }

    #[test]
    fn a_foreign_host_is_refused_and_listed_names_are_served() {
        let mut headers = HeaderMap::new();
        headers.insert(HOST, HeaderValue::from_static("evil.example"));
        let uri: Uri = "/health".parse().unwrap();
        assert_eq!(
            check(inbound(&headers, &uri), &[], &[]),
            Err(Refusal::Host("evil.example".into()))
        );
        let allowed = ["evil.example".to_owned()];
        assert_eq!(check(inbound(&headers, &uri), &allowed, &[]), Ok(()));
        headers.insert(HOST, HeaderValue::from_static("192.168.1.5:8300"));
        assert_eq!(check(inbound(&headers, &uri), &[], &[]), Ok(()));
    }

    #[test]
    fn a_rebound_name_does_not_vouch_for_its_own_origin() {
        // What a page at http://evil.com:8300 sends once evil.com points at
        // the daemon: its Host and Origin agree, and both are the attacker's.
        let mut headers = HeaderMap::new();
        headers.insert(HOST, HeaderValue::from_static("evil.com:8300"));
        headers.insert(ORIGIN, HeaderValue::from_static("http://evil.com:8300"));
        let uri: Uri = "/api/chat".parse().unwrap();
        let refusal = check(inbound(&headers, &uri), &[], &[]).unwrap_err();
        assert_eq!(refusal, Refusal::Host("evil.com:8300".into()));
        assert_eq!(refusal.status(), StatusCode::FORBIDDEN);
        let message = refusal.message();
        assert!(message.contains("server.allowed_hosts"), "{message}");
        assert!(!message.contains("loopback listener"), "{message}");
        // A name the operator listed is the daemon's own: its page may call.
        let listed = ["evil.com".to_owned()];
        assert_eq!(check(inbound(&headers, &uri), &listed, &[]), Ok(()));
        // Without a Host (HTTP/1.0) no Origin is the request's own.
        let mut old_headers = HeaderMap::new();
        old_headers.insert(ORIGIN, HeaderValue::from_static("http://evil.com:8300"));
        let old = Inbound {
            version: Version::HTTP_10,
            ..inbound(&old_headers, &uri)
        };
        assert!(matches!(check(old, &[], &[]), Err(Refusal::Origin(_))));
    }

    #[test]
    fn absolute_targets_missing_and_repeated_hosts() {
        let mut headers = HeaderMap::new();
        headers.insert(HOST, HeaderValue::from_static("localhost"));
        let absolute: Uri = "http://evil.example/health".parse().unwrap();
        assert!(matches!(
            check(inbound(&headers, &absolute), &[], &[]),
            Err(Refusal::Host(_))
        ));
        let uri: Uri = "/health".parse().unwrap();
        let empty = HeaderMap::new();
        assert_eq!(
            check(inbound(&empty, &uri), &[], &[]),
            Err(Refusal::MissingHost)
        );
        let old = Inbound {
            version: Version::HTTP_10,
            ..inbound(&empty, &uri)
        };
        assert_eq!(check(old, &[], &[]), Ok(()));
        headers.append(HOST, HeaderValue::from_static("localhost"));
        assert_eq!(
            check(inbound(&headers, &uri), &[], &[]),
            Err(Refusal::ManyHosts)
        );
    }

    #[test]
    fn a_foreign_origin_is_refused_on_every_listener() {
        let mut headers = HeaderMap::new();
        headers.insert(HOST, HeaderValue::from_static("localhost:8300"));
        headers.insert(ORIGIN, HeaderValue::from_static("http://evil.example"));
        let uri: Uri = "/api/chat".parse().unwrap();
        for host in ["localhost:8300", "192.168.1.5:8300"] {
            headers.insert(HOST, HeaderValue::from_str(host).unwrap());
            assert_eq!(
                check(inbound(&headers, &uri), &[], &[]),
                Err(Refusal::Origin("http://evil.example".into()))
            );
        }
        headers.insert(HOST, HeaderValue::from_static("localhost:8300"));
        headers.insert(ORIGIN, HeaderValue::from_static("http://localhost:8300"));
        assert_eq!(check(inbound(&headers, &uri), &[], &[]), Ok(()));
    }
}

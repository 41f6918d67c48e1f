//! LAN discovery over mDNS/DNS-SD, the part without sockets: an advertised
//! `_oap._tcp.local.` service becomes a crawl target with `lan` trust, or is
//! refused with a reason.
//!
//! A device advertises `<instance>._oap._tcp.local.` with an SRV record (host,
//! port), addresses, and optionally TXT `path=/.well-known/oap.json` (that is
//! the default). The target is `http://<address>:<port><path>`: plain HTTP is
//! allowed for LAN targets only (LAN devices rarely have certificates);
//! internet domains stay HTTPS-only.
//!
//! Everything an advertiser sends is hostile input:
//! - the instance name is capped at 63 bytes (one DNS label), the TXT record
//!   at [`MAX_TXT_BYTES`], the path at [`MAX_PATH_BYTES`] and must start with
//!   a single `/`, printable ASCII without spaces, `\` or `#`;
//! - the address is picked here, before anything connects: private IPv4
//!   first, then private IPv6 (ULA), then public; loopback, unspecified,
//!   multicast, link-local (cloud metadata), CGNAT and reserved addresses are
//!   refused with the reason (the executor's `lan` trust refuses them again
//!   at connect time);
//! - the key is `<instance label>.local`, which no internet domain can take
//!   ([`crate::normalize_domain`] refuses `.local`), and which a local
//!   manifest (`local/<slug>`) never has; two instances whose labels clash
//!   get a hash suffix, so one advertiser cannot overwrite another's entry;
//! - at most [`MAX_LAN_SERVICES`] targets are tracked: a flooding advertiser
//!   is refused past the cap (and only the last [`MAX_LAN_REFUSALS`]
//!   refusals are remembered).

use std::net::IpAddr;

use oap_exec::AddressClass;
use oap_store::envelope;
use oap_store::Trust;

use crate::crawler::{AddError, Crawler};
use crate::fetch::Validators;
use crate::lan_refusals::cut;
use crate::schedule::{AddedBy, DomainState, Schedule};
use crate::{now_ms, WELL_KNOWN_PATH};

/// The DNS-SD service type browsed.
pub const SERVICE_TYPE: &str = "_oap._tcp.local.";
/// Most LAN services tracked at once.
pub const MAX_LAN_SERVICES: usize = 64;
/// Longest instance name (one DNS label).
pub const MAX_INSTANCE_BYTES: usize = 63;
/// Longest TXT `path`.
pub const MAX_PATH_BYTES: usize = 200;
/// Largest TXT record (all keys and values).
pub const MAX_TXT_BYTES: usize = 1024;
pub use crate::lan_refusals::{LanRefusalRecord, MAX_LAN_REFUSALS};

/// A resolved DNS-SD service, as the browser saw it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AdvertisedService {
    /// `<instance>._oap._tcp.local.`
    pub fullname: String,
    /// The SRV port.
    pub port: u16,
    /// Every address advertised for the SRV host.
    pub addresses: Vec<IpAddr>,
    /// The TXT `path` value: `None` when there is no `path` key (the default
    /// path applies), the raw bytes otherwise (empty for a key without value).
    pub path: Option<Vec<u8>>,
    /// Size of the whole TXT record (keys, `=`, values).
    pub txt_bytes: usize,
}

/// An accepted advertisement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LanTarget {
    /// The advertised service name.
    pub fullname: String,
    /// The instance part of it (as advertised, UTF-8).
    pub instance: String,
    /// The schedule key and manifest host: `<label>.local`.
    pub key: String,
    /// The address the target is fetched from.
    pub address: IpAddr,
    /// The SRV port (never 0).
    pub port: u16,
    /// The TXT `path`, checked, or `/.well-known/oap.json` when none was given.
    pub path: String,
    /// `http://<address>:<port><path>`.
    pub url: String,
}

/// Why an advertisement was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LanRefusal {
    /// The full name does not end in `._oap._tcp.local.`.
    #[error("not a {SERVICE_TYPE} service name")]
    NotOapService,
    /// The instance label is empty, longer than [`MAX_INSTANCE_BYTES`] or holds
    /// control characters; the value says which.
    #[error("instance name: {0}")]
    Instance(String),
    /// The SRV record names port 0.
    #[error("advertises port 0")]
    PortZero,
    /// The TXT record is over [`MAX_TXT_BYTES`].
    #[error("TXT record is {bytes} bytes; the cap is {MAX_TXT_BYTES}")]
    TxtTooLarge {
        /// Size of the advertised TXT record.
        bytes: usize,
    },
    /// The TXT `path` is unusable (too long, not UTF-8, not starting with a
    /// single `/`, a forbidden character).
    #[error("TXT path {path:?}: {reason}")]
    Path {
        /// The advertised path, lossily decoded and cut to 100 characters.
        path: String,
        /// What is wrong with it.
        reason: String,
    },
    /// No advertised address may be fetched from; the value lists each address
    /// with its class (at most 8), or says none was advertised.
    #[error("no usable address: {0}")]
    NoUsableAddress(String),
}

/// The instance part of `fullname` (`My Hub._oap._tcp.local.` → `My Hub`).
#[allow(
    clippy::string_slice,
    reason = "every index comes from str::find, char_indices or a checked char boundary"
)]
pub fn instance_of(fullname: &str) -> Result<&str, LanRefusal> {
    let name = fullname.strip_suffix('.').unwrap_or(fullname);
    let suffix = SERVICE_TYPE.trim_end_matches('.');
    let split = name
        .len()
        .checked_sub(suffix.len() + 1)
        .ok_or(LanRefusal::NotOapService)?;
    if !name.is_char_boundary(split)
        || !name[split..].starts_with('.')
        || !name[split + 1..].eq_ignore_ascii_case(suffix)
    {
        return Err(LanRefusal::NotOapService);
    }
    let instance = &name[..split];
    if instance.is_empty() {
        return Err(LanRefusal::Instance("empty".into()));
    }
    if instance.len() > MAX_INSTANCE_BYTES {
        return Err(LanRefusal::Instance(format!(
            "{} bytes; the cap is {MAX_INSTANCE_BYTES}",
            instance.len()
        )));
    }
    if instance.chars().any(char::is_control) {
        return Err(LanRefusal::Instance("contains control characters".into()));
    }
    Ok(instance)
}

/// The key label of an instance name: lower-case ASCII letters and digits,
/// every other run of characters one `-` (`Living Room Hub` →
/// `living-room-hub`); `device` when nothing is left.
pub fn key_label(instance: &str) -> String {
    let mut label = String::new();
    for c in instance.chars() {
        if c.is_ascii_alphanumeric() {
            label.push(c.to_ascii_lowercase());
        } else if !label.is_empty() && !label.ends_with('-') {
            label.push('-');
        }
    }
    let mut label = label.trim_end_matches('-').to_string();
    label.truncate(MAX_INSTANCE_BYTES);
    let label = label.trim_end_matches('-');
    if label.is_empty() {
        "device".into()
    } else {
        label.to_string()
    }
}

/// The key of `instance` with a suffix derived from `fullname`, for when
/// the plain key is taken by another service.
fn suffixed_key(label: &str, fullname: &str) -> String {
    // sha256 in hex: the first 6 digits.
    let hash = oap_manifest::content_hash(fullname.to_ascii_lowercase().as_bytes());
    let short: String = hash.chars().take(6).collect();
    let mut base = label.to_string();
    base.truncate(MAX_INSTANCE_BYTES - 7);
    format!("{}-{short}.local", base.trim_end_matches('-'))
}

fn check_path(raw: Option<&[u8]>) -> Result<String, LanRefusal> {
    let Some(raw) = raw else {
        return Ok(WELL_KNOWN_PATH.to_string());
    };
    let shown = cut(&String::from_utf8_lossy(raw), 100);
    let fail = |reason: &str| LanRefusal::Path {
        path: shown.clone(),
        reason: reason.to_string(),
    };
    if raw.len() > MAX_PATH_BYTES {
        return Err(fail(&format!(
            "{} bytes; the cap is {MAX_PATH_BYTES}",
            raw.len()
        )));
    }
    let path = std::str::from_utf8(raw).map_err(|_| fail("not UTF-8"))?;
    if !path.starts_with('/') {
        return Err(fail("must start with /"));
    }
    if path.starts_with("//") {
        return Err(fail("must not start with // (that names another host)"));
    }
    if !path.bytes().all(|b| b.is_ascii_graphic()) || path.contains(['\\', '#']) {
        return Err(fail(
            "only printable ASCII without spaces, backslashes or fragments",
        ));
    }
    Ok(path.to_string())
}

fn address_rank(class: AddressClass, ip: IpAddr) -> Option<u8> {
    match (class, ip) {
        (AddressClass::Private, IpAddr::V4(_)) => Some(0),
        (AddressClass::Private, IpAddr::V6(_)) => Some(1),
        (AddressClass::Global, IpAddr::V4(_)) => Some(2),
        (AddressClass::Global, IpAddr::V6(_)) => Some(3),
        _ => None,
    }
}

/// The address to fetch from: private IPv4 first, then private IPv6, then
/// public; everything else refused (see the module docs).
pub fn pick_address(addresses: &[IpAddr]) -> Result<IpAddr, LanRefusal> {
    let mut refused = Vec::new();
    let mut best: Option<(u8, IpAddr)> = None;
    for &ip in addresses {
        let class = oap_exec::classify(ip);
        match address_rank(class, ip) {
            Some(rank) => {
                if best.is_none_or(|b| (rank, ip) < b) {
                    best = Some((rank, ip));
                }
            }
            None => refused.push(format!("{ip} is {}", class.describe())),
        }
    }
    match best {
        Some((_, ip)) => Ok(ip),
        None if refused.is_empty() => Err(LanRefusal::NoUsableAddress("none advertised".into())),
        None => {
            refused.sort();
            refused.truncate(8);
            Err(LanRefusal::NoUsableAddress(refused.join("; ")))
        }
    }
}

/// Validates an advertisement and turns it into a target (the key before
/// collision handling, see [`Crawler::add_lan_target`]).
pub fn lan_target(service: &AdvertisedService) -> Result<LanTarget, LanRefusal> {
    let instance = instance_of(&service.fullname)?;
    if service.port == 0 {
        return Err(LanRefusal::PortZero);
    }
    if service.txt_bytes > MAX_TXT_BYTES {
        return Err(LanRefusal::TxtTooLarge {
            bytes: service.txt_bytes,
        });
    }
    let path = check_path(service.path.as_deref())?;
    let address = pick_address(&service.addresses)?;
    let host = match address {
        IpAddr::V4(v4) => v4.to_string(),
        IpAddr::V6(v6) => format!("[{v6}]"),
    };
    let url = format!("http://{host}:{}{path}", service.port);
    // The URL must parse back to exactly this host and port.
    let parsed = url::Url::parse(&url).map_err(|e| LanRefusal::Path {
        path: cut(&path, 100),
        reason: format!("does not make a valid URL: {e}"),
    })?;
    if parsed.port_or_known_default() != Some(service.port)
        || parsed.host_str() != Some(host.as_str())
    {
        return Err(LanRefusal::Path {
            path: cut(&path, 100),
            reason: "changes the URL's host or port".into(),
        });
    }
    Ok(LanTarget {
        fullname: service.fullname.clone(),
        instance: instance.to_string(),
        key: format!("{}.local", key_label(instance)),
        address,
        port: service.port,
        path,
        url,
    })
}

/// What [`Crawler::add_lan_target`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LanUpdate {
    /// A new target, due now.
    New(String),
    /// The target's URL changed (new address, port or path); due now.
    Changed(String),
    /// Already tracked as is.
    Unchanged(String),
}

impl LanUpdate {
    /// The target's schedule key (`<label>.local`), whatever happened.
    pub fn key(&self) -> &str {
        match self {
            LanUpdate::New(k) | LanUpdate::Changed(k) | LanUpdate::Unchanged(k) => k,
        }
    }
}

/// Removes every LAN target from `schedule` and every LAN envelope
/// (`*.local.json`: only LAN keys end in `.local`) from `remote_dir`, also
/// those the schedule lost track of; returns how many envelopes existed.
pub fn purge_lan(schedule: &mut Schedule, remote_dir: &std::path::Path) -> usize {
    let mut keys: Vec<String> = schedule
        .domains
        .values()
        .filter(|s| s.trust == Trust::Lan)
        .map(|s| s.domain.clone())
        .collect();
    for key in &keys {
        schedule.domains.remove(key);
    }
    if let Ok(listing) = std::fs::read_dir(remote_dir) {
        for entry in listing.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if let Some(key) = name.strip_suffix(".json") {
                if key.ends_with(".local")
                    && !key.starts_with('.')
                    && !keys.iter().any(|k| k == key)
                {
                    keys.push(key.to_string());
                }
            }
        }
    }
    let mut removed = 0;
    for key in keys {
        match envelope::remove_envelope(remote_dir, &key) {
            Ok(existed) => removed += usize::from(existed),
            Err(err) => tracing::error!(%key, error = %err, "cannot remove a LAN manifest"),
        }
    }
    removed
}

impl Crawler {
    /// Tracks an accepted advertisement (due at once when new or changed).
    /// A service keeps its key for as long as it is tracked; a clashing
    /// label from another service gets a hash suffix.
    pub fn add_lan_target(&self, target: &LanTarget) -> Result<LanUpdate, AddError> {
        let now = now_ms();
        let mut schedule = self.lock();
        let existing = schedule
            .domains
            .values_mut()
            .find(|s| s.trust == Trust::Lan && s.mdns_name.as_deref() == Some(&target.fullname));
        if let Some(state) = existing {
            if state.url == target.url {
                return Ok(LanUpdate::Unchanged(state.domain.clone()));
            }
            state.url = target.url.clone();
            state.validators = Validators::default();
            state.next_due_ms = now;
            state.consecutive_failures = 0;
            return Ok(LanUpdate::Changed(state.domain.clone()));
        }
        let tracked = schedule
            .domains
            .values()
            .filter(|s| s.trust == Trust::Lan)
            .count();
        if tracked >= MAX_LAN_SERVICES {
            return Err(AddError::LanFull(MAX_LAN_SERVICES));
        }
        let mut key = target.key.clone();
        if schedule.domains.contains_key(&key) {
            key = suffixed_key(key.trim_end_matches(".local"), &target.fullname);
            if schedule.domains.contains_key(&key) {
                return Err(AddError::LanKeyTaken(key));
            }
        }
        let mut state = DomainState::new(
            key.clone(),
            target.url.clone(),
            AddedBy::Mdns,
            Trust::Lan,
            now,
        );
        state.mdns_name = Some(target.fullname.clone());
        schedule.domains.insert(key.clone(), state);
        Ok(LanUpdate::New(key))
    }

    /// Forgets the LAN service `fullname` (it said goodbye, or now
    /// advertises something refused) and removes its manifest. Returns its
    /// key and whether a stored manifest was removed (then rebuild).
    pub fn remove_lan_target(&self, fullname: &str) -> Option<(String, bool)> {
        // Under the schedule lock: a pass finishing a fetch of this target
        // writes its envelope under the same lock and only while the entry
        // exists, so a removed service cannot come back from a late fetch.
        let mut schedule = self.lock();
        let key = schedule
            .domains
            .values()
            .find(|s| s.trust == Trust::Lan && s.mdns_name.as_deref() == Some(fullname))?
            .domain
            .clone();
        schedule.domains.remove(&key);
        let existed = match envelope::remove_envelope(&self.settings.remote_dir, &key) {
            Ok(existed) => existed,
            Err(err) => {
                tracing::error!(%key, error = %err, "cannot remove a LAN manifest");
                false
            }
        };
        drop(schedule);
        if let Err(err) = self.save() {
            tracing::error!(error = %err, "cannot save the crawl state");
        }
        Some((key, existed))
    }

    /// Removes every LAN target (LAN discovery is off); returns how many
    /// stored manifests were removed.
    pub fn purge_lan_targets(&self) -> usize {
        let (removed, changed) = {
            let mut schedule = self.lock();
            let before = schedule.domains.len();
            let removed = purge_lan(&mut schedule, &self.settings.remote_dir);
            (removed, schedule.domains.len() != before)
        };
        if changed {
            if let Err(err) = self.save() {
                tracing::error!(error = %err, "cannot save the crawl state");
            }
        }
        removed
    }

    /// Remembers a refused advertisement (the newest [`MAX_LAN_REFUSALS`]).
    pub fn note_lan_refusal(&self, name: &str, reason: &str) {
        self.lan_refusals.note(name, reason);
    }

    /// Refused advertisements, oldest first.
    pub fn lan_refusals(&self) -> Vec<LanRefusalRecord> {
        self.lan_refusals.list()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{Ipv4Addr, Ipv6Addr};

    fn service(instance: &str, addresses: &[&str], path: Option<&str>) -> AdvertisedService {
        AdvertisedService {
            fullname: format!("{instance}._oap._tcp.local."),
            port: 8080,
            addresses: addresses.iter().map(|a| a.parse().unwrap()).collect(),
            path: path.map(|p| p.as_bytes().to_vec()),
            txt_bytes: path.map_or(0, |p| p.len() + 5),
        }
    }

    #[test]
    fn good_service_becomes_a_lan_target() {
        let target = lan_target(&service("Living Room Hub", &["192.168.1.20"], None)).unwrap();
        assert_eq!(target.key, "living-room-hub.local");
        assert_eq!(target.instance, "Living Room Hub");
        assert_eq!(target.url, "http://192.168.1.20:8080/.well-known/oap.json");
        let target = lan_target(&service("x", &["10.0.0.5"], Some("/api/oap.json?v=1"))).unwrap();
        assert_eq!(target.url, "http://10.0.0.5:8080/api/oap.json?v=1");
        // Case of the service type does not matter; the trailing dot is optional.
        let mut s = service("a", &["10.0.0.5"], None);
        s.fullname = "A._OAP._tcp.LOCAL".into();
        assert_eq!(lan_target(&s).unwrap().key, "a.local");
    }

    #[test]
    fn address_preference() {
        let pick = |addrs: &[&str]| {
            pick_address(&addrs.iter().map(|a| a.parse().unwrap()).collect::<Vec<_>>())
        };
        assert_eq!(
            pick(&["2001:4860::1", "fd00::5", "8.8.8.8", "192.168.1.9"]).unwrap(),
            IpAddr::V4(Ipv4Addr::new(192, 168, 1, 9))
        );
        assert_eq!(
            pick(&["2001:4860::1", "fd00::5", "8.8.8.8"]).unwrap(),
            "fd00::5".parse::<IpAddr>().unwrap()
        );
        assert_eq!(
            pick(&["127.0.0.1", "8.8.8.8"]).unwrap(),
            "8.8.8.8".parse::<IpAddr>().unwrap()
        );
        // Deterministic among equals.
        assert_eq!(
            pick(&["10.0.0.9", "10.0.0.2"]).unwrap(),
            IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2))
        );
        let v6 = lan_target(&service("v6", &["fd00::5"], None)).unwrap();
        assert_eq!(v6.url, "http://[fd00::5]:8080/.well-known/oap.json");
        assert_eq!(
            v6.address,
            IpAddr::V6("fd00::5".parse::<Ipv6Addr>().unwrap())
        );
    }

    #[test]
    fn hostile_addresses_are_refused_with_the_reason() {
        for (addr, words) in [
            ("127.0.0.1", "loopback"),
            ("::1", "loopback"),
            ("169.254.169.254", "metadata"),
            ("fe80::1", "link-local"),
            ("0.0.0.0", "unspecified"),
            ("224.0.0.251", "multicast"),
            ("ff02::fb", "multicast"),
            ("100.64.0.1", "carrier-grade NAT"),
            ("255.255.255.255", "broadcast"),
            ("::ffff:127.0.0.1", "loopback"),
            ("192.0.2.1", "reserved"),
        ] {
            let err = lan_target(&service("evil", &[addr], None)).unwrap_err();
            let text = err.to_string();
            assert!(
                text.starts_with("no usable address") && text.contains(words),
                "{addr}: {text}"
            );
        }
        let err = lan_target(&service("evil", &[], None)).unwrap_err();
        assert_eq!(err.to_string(), "no usable address: none advertised");
    }

    #[test]
    fn hostile_paths_are_refused() {
        for (path, words) in [
            ("oap.json", "must start with /"),
            ("", "must start with /"),
            ("//evil.example/oap.json", "//"),
            ("/a b", "printable ASCII"),
            ("/a\\b", "printable ASCII"),
            ("/a#frag", "printable ASCII"),
            ("/caf\u{e9}", "printable ASCII"),
            ("/a\r\nHost: x", "printable ASCII"),
        ] {
            let err = lan_target(&service("p", &["10.0.0.1"], Some(path))).unwrap_err();
            assert!(err.to_string().contains(words), "{path:?}: {err}");
        }
        let long = format!("/{}", "a".repeat(MAX_PATH_BYTES));
        let err = lan_target(&service("p", &["10.0.0.1"], Some(&long))).unwrap_err();
        assert!(err.to_string().contains("the cap is 200"), "{err}");
        let mut s = service("p", &["10.0.0.1"], None);
        s.path = Some(vec![0xff, 0xfe]);
        assert!(lan_target(&s).unwrap_err().to_string().contains("UTF-8"));
    }

    #[test]
    fn caps_on_names_txt_and_port() {
        let mut s = service("ok", &["10.0.0.1"], None);
        s.txt_bytes = MAX_TXT_BYTES + 1;
        assert_eq!(
            lan_target(&s).unwrap_err(),
            LanRefusal::TxtTooLarge {
                bytes: MAX_TXT_BYTES + 1
            }
        );
        let mut s = service("ok", &["10.0.0.1"], None);
        s.port = 0;
        assert_eq!(lan_target(&s).unwrap_err(), LanRefusal::PortZero);
        let long = "x".repeat(MAX_INSTANCE_BYTES + 1);
        let err = lan_target(&service(&long, &["10.0.0.1"], None)).unwrap_err();
        assert!(err.to_string().contains("the cap is 63"), "{err}");
        let err = lan_target(&service("a\u{7}b", &["10.0.0.1"], None)).unwrap_err();
        assert!(err.to_string().contains("control"), "{err}");
        for name in [
            "x._http._tcp.local.",
            "_oap._tcp.local.",
            "._oap._tcp.local.",
            "",
            "x._oap._tcp.example.com.",
        ] {
            let mut s = service("x", &["10.0.0.1"], None);
            s.fullname = name.into();
            assert!(lan_target(&s).is_err(), "{name:?} accepted");
        }
    }

    #[test]
    fn key_labels_are_dns_safe() {
        assert_eq!(key_label("Living Room Hub"), "living-room-hub");
        assert_eq!(key_label("  --Printer__2 "), "printer-2");
        assert_eq!(key_label("../../etc/passwd"), "etc-passwd");
        assert_eq!(key_label("日本語"), "device");
        assert_eq!(key_label(&"a".repeat(80)).len(), 63);
        let key = suffixed_key("living-room-hub", "Living Room Hub._oap._tcp.local.");
        assert!(key.starts_with("living-room-hub-") && key.ends_with(".local"));
        assert_eq!(key.len(), "living-room-hub-".len() + 6 + ".local".len());
        // A key is never an internet domain and never `local`.
        assert!(crate::normalize_domain("living-room-hub.local").is_err());
    }
}

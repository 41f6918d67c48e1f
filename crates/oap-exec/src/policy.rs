//! Execution policy: limits, trust levels and the address (SSRF) rules.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

/// Where a manifest came from; decides which addresses it may reach and
/// whether it may run a local command. See the crate docs for the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Trust {
    /// Bundled or from an operator directory: may reach any address and run
    /// stdio tools.
    Local,
    /// Found on the local network: may reach public and private (RFC 1918,
    /// ULA) addresses, never loopback or link-local; no stdio.
    Lan,
    /// Fetched from the internet: public addresses only; no stdio.
    Internet,
}

impl Trust {
    /// Lower-case name (`local`, `lan`, `internet`).
    pub fn as_str(self) -> &'static str {
        match self {
            Trust::Local => "local",
            Trust::Lan => "lan",
            Trust::Internet => "internet",
        }
    }

    /// The name with its indefinite article, for messages: `a local`,
    /// `a lan`, `an internet`.
    pub fn with_article(self) -> &'static str {
        match self {
            Trust::Local => "a local",
            Trust::Lan => "a lan",
            Trust::Internet => "an internet",
        }
    }
}

impl fmt::Display for Trust {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Resource limits for stdio tools (applied with `setrlimit` in the child).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StdioLimits {
    /// `RLIMIT_CPU` in seconds (soft; the hard limit is one second more).
    pub cpu_secs: u64,
    /// `RLIMIT_AS` in bytes (address space, not resident memory).
    pub memory_bytes: u64,
    /// `RLIMIT_NPROC`. The kernel counts every process *and thread* of the
    /// real user id, not only the tool's descendants, so this must leave room
    /// for the daemon's own threads when it runs as a dedicated user. Root is
    /// exempt, so a daemon running as root runs each tool as a per-call
    /// unprivileged uid ([`oap_sandbox::CallUser`]), where it binds per call.
    pub max_processes: u64,
    /// `RLIMIT_NOFILE`.
    pub max_open_files: u64,
    /// `RLIMIT_FSIZE`: the largest file the tool may write (its working
    /// directory is a fresh temporary directory).
    pub max_file_bytes: u64,
    /// Total bytes the tool may write below its scratch directory. A daemon
    /// that may mount (root) makes the directory a tmpfs of this size, so
    /// writes past it fail with `ENOSPC`; otherwise the directory's size is
    /// watched and the tool stopped past it. Either way the result says so.
    pub max_scratch_bytes: u64,
    /// Largest `stdin` accepted; a larger one is refused before anything runs.
    pub max_stdin_bytes: usize,
    /// Cap for stdout and for stderr, each. Reaching it stops reading and
    /// kills the process group; the result says so.
    pub max_output_bytes: usize,
}

impl Default for StdioLimits {
    fn default() -> Self {
        Self {
            cpu_secs: 10,
            memory_bytes: 1 << 30,
            max_processes: 256,
            max_open_files: 64,
            max_file_bytes: 16 << 20,
            max_scratch_bytes: 64 << 20,
            max_stdin_bytes: 1 << 20,
            max_output_bytes: 1 << 20,
        }
    }
}

/// Everything the executor enforces. `Default` gives the documented defaults.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecPolicy {
    /// Deadline for one whole HTTP tool call: every resolution, connection,
    /// TLS handshake, redirect hop, header and body read (default 30 s).
    pub http_timeout: Duration,
    /// Deadline for one stdio tool call; at expiry the whole process group is
    /// killed (default 10 s).
    pub stdio_timeout: Duration,
    /// Response bodies are read up to this many bytes, then the connection is
    /// dropped and the result notes the truncation (default 1 MiB).
    pub max_response_bytes: usize,
    /// What the model sees is cut to this many characters with a visible
    /// note (default 16,000).
    pub max_result_chars: usize,
    /// Redirect hops followed, each re-validated (default 3).
    pub max_redirects: usize,
    /// Operator allow-list: addresses in these ranges are reachable whatever
    /// the trust level (default empty).
    pub allow_private: Vec<Cidr>,
    /// Directories stdio executables may live in (default `/usr/bin`, `/bin`,
    /// `/usr/local/bin`). Also the child's `PATH`.
    pub stdio_dirs: Vec<PathBuf>,
    /// Resource limits for stdio tools.
    pub stdio_limits: StdioLimits,
    /// Kernel confinement of stdio tools (Landlock, seccomp). The
    /// directories in [`Self::stdio_dirs`] are readable inside it too.
    pub sandbox: oap_sandbox::Policy,
    /// `User-Agent` sent unless the manifest's headers set one.
    pub user_agent: String,
}

impl Default for ExecPolicy {
    fn default() -> Self {
        Self {
            http_timeout: Duration::from_secs(30),
            stdio_timeout: Duration::from_secs(10),
            max_response_bytes: 1 << 20,
            max_result_chars: 16_000,
            max_redirects: 3,
            allow_private: Vec::new(),
            stdio_dirs: vec![
                PathBuf::from("/usr/bin"),
                PathBuf::from("/bin"),
                PathBuf::from("/usr/local/bin"),
            ],
            stdio_limits: StdioLimits::default(),
            sandbox: oap_sandbox::Policy::default(),
            user_agent: concat!("oapd/", env!("CARGO_PKG_VERSION")).to_string(),
        }
    }
}

/// An address range such as `10.0.0.0/8`, `192.168.1.20` or `fd00::/8`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Cidr {
    addr: IpAddr,
    prefix: u8,
}

/// A malformed [`Cidr`] text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid address range {0:?}: expected ADDRESS or ADDRESS/PREFIX, e.g. 10.0.0.0/8")]
pub struct CidrError(pub String);

impl Cidr {
    /// A range from an address and a prefix length; `None` when the prefix
    /// is longer than the address. Host bits are cleared.
    pub fn new(addr: IpAddr, prefix: u8) -> Option<Self> {
        let max = if addr.is_ipv4() { 32 } else { 128 };
        if prefix > max {
            return None;
        }
        let addr = match addr {
            IpAddr::V4(a) => IpAddr::V4(Ipv4Addr::from(mask32(u32::from(a), prefix))),
            IpAddr::V6(a) => IpAddr::V6(Ipv6Addr::from(mask128(u128::from(a), prefix))),
        };
        Some(Self { addr, prefix })
    }

    /// Whether `ip` lies in the range. An IPv4-mapped IPv6 address
    /// (`::ffff:a.b.c.d`) is compared as the IPv4 address it maps.
    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self.addr, ip.to_canonical()) {
            (IpAddr::V4(net), IpAddr::V4(a)) => mask32(u32::from(a), self.prefix) == u32::from(net),
            (IpAddr::V6(net), IpAddr::V6(a)) => {
                mask128(u128::from(a), self.prefix) == u128::from(net)
            }
            _ => false,
        }
    }
}

fn mask32(v: u32, prefix: u8) -> u32 {
    if prefix == 0 {
        0
    } else {
        v & (u32::MAX << (32 - u32::from(prefix)))
    }
}

fn mask128(v: u128, prefix: u8) -> u128 {
    if prefix == 0 {
        0
    } else {
        v & (u128::MAX << (128 - u32::from(prefix)))
    }
}

impl FromStr for Cidr {
    type Err = CidrError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = || CidrError(s.to_string());
        let (addr, prefix) = match s.split_once('/') {
            Some((a, p)) => (a, Some(p)),
            None => (s, None),
        };
        let addr: IpAddr = addr.trim().parse().map_err(|_| err())?;
        let prefix = match prefix {
            Some(p) => p.trim().parse::<u8>().map_err(|_| err())?,
            None if addr.is_ipv4() => 32,
            None => 128,
        };
        Cidr::new(addr, prefix).ok_or_else(err)
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)
    }
}

/// What kind of destination an address is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AddressClass {
    /// Publicly routable unicast.
    Global,
    /// 10/8, 172.16/12, 192.168/16, fc00::/7 (ULA), fec0::/10.
    Private,
    /// 127/8, ::1.
    Loopback,
    /// 169.254/16 (including 169.254.169.254 cloud metadata), fe80::/10.
    LinkLocal,
    /// 100.64/10 carrier-grade NAT (also Tailscale-style overlays).
    SharedCgnat,
    /// 224/4, ff00::/8.
    Multicast,
    /// 255.255.255.255.
    Broadcast,
    /// 0/8, ::.
    Unspecified,
    /// Documentation, benchmarking, protocol-assignment, future-use and
    /// deprecated ranges (192.0.0/24, 192.0.2/24, 198.18/15, 198.51.100/24,
    /// 203.0.113/24, 240/4, 2001:db8::/32, 2001::/23, 100::/64, ...).
    Reserved,
}

impl AddressClass {
    /// Human wording for error messages.
    pub fn describe(self) -> &'static str {
        match self {
            AddressClass::Global => "a public address",
            AddressClass::Private => "a private-network address",
            AddressClass::Loopback => "a loopback address",
            AddressClass::LinkLocal => "a link-local address (includes cloud metadata)",
            AddressClass::SharedCgnat => "a carrier-grade NAT address (100.64.0.0/10)",
            AddressClass::Multicast => "a multicast address",
            AddressClass::Broadcast => "the broadcast address",
            AddressClass::Unspecified => "an unspecified address",
            AddressClass::Reserved => "a reserved or documentation address",
        }
    }
}

fn in4(a: Ipv4Addr, net: [u8; 4], prefix: u8) -> bool {
    mask32(u32::from(a), prefix) == u32::from(Ipv4Addr::from(net))
}

fn in6(a: Ipv6Addr, net: u128, prefix: u8) -> bool {
    mask128(u128::from(a), prefix) == net
}

/// Classify an IPv4 address.
pub fn classify_v4(a: Ipv4Addr) -> AddressClass {
    use AddressClass::*;
    if a == Ipv4Addr::BROADCAST {
        return Broadcast;
    }
    let table: &[([u8; 4], u8, AddressClass)] = &[
        ([0, 0, 0, 0], 8, Unspecified),
        ([10, 0, 0, 0], 8, Private),
        ([100, 64, 0, 0], 10, SharedCgnat),
        ([127, 0, 0, 0], 8, Loopback),
        ([169, 254, 0, 0], 16, LinkLocal),
        ([172, 16, 0, 0], 12, Private),
        ([192, 0, 0, 0], 24, Reserved),
        ([192, 0, 2, 0], 24, Reserved),
        ([192, 31, 196, 0], 24, Reserved),
        ([192, 52, 193, 0], 24, Reserved),
        ([192, 88, 99, 0], 24, Reserved),
        ([192, 168, 0, 0], 16, Private),
        ([192, 175, 48, 0], 24, Reserved),
        ([198, 18, 0, 0], 15, Reserved),
        ([198, 51, 100, 0], 24, Reserved),
        ([203, 0, 113, 0], 24, Reserved),
        ([224, 0, 0, 0], 4, Multicast),
        ([240, 0, 0, 0], 4, Reserved),
    ];
    for (net, prefix, class) in table {
        if in4(a, *net, *prefix) {
            return *class;
        }
    }
    Global
}

/// Classify an address. IPv4-mapped (`::ffff:0:0/96`), NAT64
/// (`64:ff9b::/96`) and 6to4 (`2002::/16`) addresses are classified by the
/// IPv4 address they embed; other IPv4-embedding forms are reserved.
pub fn classify(ip: IpAddr) -> AddressClass {
    use AddressClass::*;
    let v6 = match ip {
        IpAddr::V4(a) => return classify_v4(a),
        IpAddr::V6(a) => a,
    };
    if let Some(v4) = v6.to_ipv4_mapped() {
        return classify_v4(v4);
    }
    let bits = u128::from(v6);
    let low32 = Ipv4Addr::from((bits & 0xffff_ffff) as u32);
    if v6.is_unspecified() {
        return Unspecified;
    }
    if v6.is_loopback() {
        return Loopback;
    }
    // NAT64 well-known prefix: the gateway forwards to the embedded IPv4.
    if in6(v6, 0x0064_ff9b_0000_0000_0000_0000_0000_0000, 96) {
        return classify_v4(low32);
    }
    // 6to4: 2002:AABB:CCDD::/48 is the site behind IPv4 AA.BB.CC.DD.
    if in6(v6, 0x2002_0000_0000_0000_0000_0000_0000_0000, 16) {
        let embedded = Ipv4Addr::from(((bits >> 80) & 0xffff_ffff) as u32);
        return classify_v4(embedded);
    }
    let table: &[(u128, u8, AddressClass)] = &[
        (0, 96, Reserved), // IPv4-compatible (deprecated), ::/96
        (0x0064_ff9b_0001_0000_0000_0000_0000_0000, 48, Private), // local-use NAT64
        (0x0100_0000_0000_0000_0000_0000_0000_0000, 64, Reserved), // discard-only
        (0x2001_0db8_0000_0000_0000_0000_0000_0000, 32, Reserved), // documentation
        (0x2001_0000_0000_0000_0000_0000_0000_0000, 23, Reserved), // IETF (Teredo, ORCHID, ...)
        (0x3fff_0000_0000_0000_0000_0000_0000_0000, 20, Reserved), // documentation (RFC 9637)
        (0xfc00_0000_0000_0000_0000_0000_0000_0000, 7, Private), // ULA
        (0xfe80_0000_0000_0000_0000_0000_0000_0000, 10, LinkLocal),
        (0xfec0_0000_0000_0000_0000_0000_0000_0000, 10, Private), // site-local (deprecated)
        (0xff00_0000_0000_0000_0000_0000_0000_0000, 8, Multicast),
    ];
    for (net, prefix, class) in table {
        if in6(v6, *net, *prefix) {
            return *class;
        }
    }
    // Only 2000::/3 is allocated global unicast.
    if in6(v6, 0x2000_0000_0000_0000_0000_0000_0000_0000, 3) {
        Global
    } else {
        Reserved
    }
}

/// Whether `trust` may reach an address of `class` without an allow-list
/// entry.
pub fn trust_permits(trust: Trust, class: AddressClass) -> bool {
    match trust {
        Trust::Local => true,
        Trust::Lan => matches!(class, AddressClass::Global | AddressClass::Private),
        Trust::Internet => class == AddressClass::Global,
    }
}

/// Why an address was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AddressRefusal {
    /// The refused address.
    pub ip: IpAddr,
    /// Its class.
    pub class: AddressClass,
}

impl ExecPolicy {
    /// The SSRF rule: is `ip` reachable for a manifest of `trust`? Allowed
    /// when the trust table permits its class or an `allow_private` entry
    /// contains it (for NAT64 addresses the embedded IPv4 counts too).
    pub fn check_address(&self, trust: Trust, ip: IpAddr) -> Result<(), AddressRefusal> {
        let class = classify(ip);
        if trust_permits(trust, class) {
            return Ok(());
        }
        let nat64_v4 = match ip {
            IpAddr::V6(v6) if in6(v6, 0x0064_ff9b_0000_0000_0000_0000_0000_0000, 96) => Some(
                IpAddr::V4(Ipv4Addr::from((u128::from(v6) & 0xffff_ffff) as u32)),
            ),
            _ => None,
        };
        let listed = self
            .allow_private
            .iter()
            .any(|c| c.contains(ip) || nat64_v4.is_some_and(|v4| c.contains(v4)));
        if listed {
            Ok(())
        } else {
            Err(AddressRefusal { ip, class })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(s: &str) -> AddressClass {
        classify(s.parse().unwrap())
    }

    #[test]
    fn classifies_v4() {
        assert_eq!(c("8.8.8.8"), AddressClass::Global);
        assert_eq!(c("10.0.0.5"), AddressClass::Private);
        assert_eq!(c("172.16.0.1"), AddressClass::Private);
        assert_eq!(c("172.31.255.255"), AddressClass::Private);
        assert_eq!(c("172.32.0.1"), AddressClass::Global);
        assert_eq!(c("192.168.1.1"), AddressClass::Private);
        assert_eq!(c("127.0.0.1"), AddressClass::Loopback);
        assert_eq!(c("127.255.0.9"), AddressClass::Loopback);
        assert_eq!(c("169.254.169.254"), AddressClass::LinkLocal);
        assert_eq!(c("100.64.1.1"), AddressClass::SharedCgnat);
        assert_eq!(c("100.128.0.1"), AddressClass::Global);
        assert_eq!(c("224.0.0.1"), AddressClass::Multicast);
        assert_eq!(c("255.255.255.255"), AddressClass::Broadcast);
        assert_eq!(c("0.0.0.0"), AddressClass::Unspecified);
        assert_eq!(c("0.1.2.3"), AddressClass::Unspecified);
        assert_eq!(c("192.0.2.10"), AddressClass::Reserved);
        assert_eq!(c("198.51.100.1"), AddressClass::Reserved);
        assert_eq!(c("203.0.113.1"), AddressClass::Reserved);
        assert_eq!(c("198.19.0.1"), AddressClass::Reserved);
        assert_eq!(c("240.0.0.1"), AddressClass::Reserved);
    }

    #[test]
    fn classifies_v6() {
        assert_eq!(c("::1"), AddressClass::Loopback);
        assert_eq!(c("::"), AddressClass::Unspecified);
        assert_eq!(c("fd12:3456::1"), AddressClass::Private);
        assert_eq!(c("fc00::1"), AddressClass::Private);
        assert_eq!(c("fe80::1"), AddressClass::LinkLocal);
        assert_eq!(c("ff02::1"), AddressClass::Multicast);
        assert_eq!(c("::ffff:192.168.1.1"), AddressClass::Private);
        assert_eq!(c("::ffff:127.0.0.1"), AddressClass::Loopback);
        assert_eq!(c("::ffff:8.8.8.8"), AddressClass::Global);
        assert_eq!(c("64:ff9b::10.0.0.1"), AddressClass::Private);
        assert_eq!(c("64:ff9b::169.254.169.254"), AddressClass::LinkLocal);
        assert_eq!(c("64:ff9b::8.8.8.8"), AddressClass::Global);
        assert_eq!(c("2002:0a00:0001::1"), AddressClass::Private);
        assert_eq!(c("2002:0808:0808::1"), AddressClass::Global);
        assert_eq!(c("2001:db8::1"), AddressClass::Reserved);
        assert_eq!(c("2001::1"), AddressClass::Reserved);
        assert_eq!(c("::127.0.0.1"), AddressClass::Reserved);
        assert_eq!(c("2606:4700::1111"), AddressClass::Global);
        assert_eq!(c("4000::1"), AddressClass::Reserved);
    }

    #[test]
    fn trust_table() {
        use AddressClass::*;
        for class in [
            Global,
            Private,
            Loopback,
            LinkLocal,
            SharedCgnat,
            Multicast,
            Broadcast,
            Unspecified,
            Reserved,
        ] {
            assert!(trust_permits(Trust::Local, class));
            assert_eq!(
                trust_permits(Trust::Lan, class),
                matches!(class, Global | Private)
            );
            assert_eq!(trust_permits(Trust::Internet, class), class == Global);
        }
    }

    #[test]
    fn cidr_parse_and_contains() {
        let net: Cidr = "127.0.0.0/8".parse().unwrap();
        assert!(net.contains("127.0.0.1".parse().unwrap()));
        assert!(net.contains("::ffff:127.1.2.3".parse().unwrap()));
        assert!(!net.contains("128.0.0.1".parse().unwrap()));
        assert!(!net.contains("::1".parse().unwrap()));
        let host: Cidr = "192.168.1.20".parse().unwrap();
        assert_eq!(host.to_string(), "192.168.1.20/32");
        assert!(host.contains("192.168.1.20".parse().unwrap()));
        assert!(!host.contains("192.168.1.21".parse().unwrap()));
        let v6: Cidr = "fd00::/8".parse().unwrap();
        assert!(v6.contains("fd12::1".parse().unwrap()));
        let norm: Cidr = "10.1.2.3/8".parse().unwrap();
        assert_eq!(norm.to_string(), "10.0.0.0/8");
        let all: Cidr = "0.0.0.0/0".parse().unwrap();
        assert!(all.contains("1.2.3.4".parse().unwrap()));
        for bad in ["", "10.0.0.0/33", "::/129", "foo", "10.0.0.0/x", "10.0.0/8"] {
            assert!(bad.parse::<Cidr>().is_err(), "{bad}");
        }
    }

    #[test]
    fn allow_list_overrides() {
        let mut p = ExecPolicy::default();
        let meta: IpAddr = "169.254.169.254".parse().unwrap();
        assert!(p.check_address(Trust::Internet, meta).is_err());
        assert!(p.check_address(Trust::Lan, meta).is_err());
        assert!(p.check_address(Trust::Local, meta).is_ok());
        let lan: IpAddr = "192.168.1.20".parse().unwrap();
        assert!(p.check_address(Trust::Lan, lan).is_ok());
        let err = p.check_address(Trust::Internet, lan).unwrap_err();
        assert_eq!(err.class, AddressClass::Private);
        p.allow_private.push("192.168.1.0/24".parse().unwrap());
        assert!(p.check_address(Trust::Internet, lan).is_ok());
        assert!(p
            .check_address(Trust::Internet, "::ffff:192.168.1.7".parse().unwrap())
            .is_ok());
        assert!(p
            .check_address(Trust::Internet, "64:ff9b::192.168.1.7".parse().unwrap())
            .is_ok());
        assert!(p
            .check_address(Trust::Internet, "192.168.2.7".parse().unwrap())
            .is_err());
    }
}

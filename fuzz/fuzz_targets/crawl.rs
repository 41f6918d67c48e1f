//! The crawler's inputs from the network and its own state file:
//! - a domain typed or advertised: normalising is idempotent and never
//!   accepts a URL, path or address;
//! - DNS TXT records for `_oap.<domain>` (from a stub resolver): the hint is
//!   Present exactly when some record has a `v=oap1` part;
//! - an mDNS/DNS-SD advertisement: an accepted one yields an `http://` URL
//!   whose host and port are the advertised address and port, on a LAN or
//!   global address, with a `.local` key;
//! - the schedule state file: arbitrary bytes load (or are reported) without
//!   a panic, and a loaded schedule saves and loads back the same.
#![no_main]

use std::future::Future;
use std::io;
use std::net::IpAddr;
use std::task::{Context, Poll, Waker};

use arbitrary::{Arbitrary, Unstructured};
use libfuzzer_sys::fuzz_target;
use oap_crawl::mdns::{lan_target, AdvertisedService};
use oap_crawl::txt::{check, TxtHint, TxtResolver};
use oap_crawl::{normalize_domain, Schedule};
use oap_exec::{AddressClass, BoxFuture};

#[derive(Debug, Arbitrary)]
enum Input {
    Domain(String),
    Txt {
        domain: String,
        records: Vec<String>,
        error: Option<u8>,
    },
    Mdns {
        instance: String,
        suffix: bool,
        fullname: String,
        port: u16,
        addresses: Vec<IpAddr>,
        path: Option<Vec<u8>>,
        txt_bytes: u16,
    },
    State(Vec<u8>),
}

struct Stub(Result<Vec<String>, io::ErrorKind>);

impl TxtResolver for Stub {
    fn txt<'a>(&'a self, _name: &'a str) -> BoxFuture<'a, io::Result<Vec<String>>> {
        let answer = self.0.clone().map_err(|k| io::Error::new(k, "stub"));
        Box::pin(async move { answer })
    }
}

/// The stub answers at once, so one poll completes the check.
fn ready<F: Future>(f: F) -> F::Output {
    let mut f = std::pin::pin!(f);
    match f.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(v) => v,
        Poll::Pending => panic!("the TXT check waited on a stub that answers at once"),
    }
}

fuzz_target!(|data: &[u8]| {
    let Ok(input) = Input::arbitrary_take_rest(Unstructured::new(data)) else {
        return;
    };
    match input {
        Input::Domain(raw) => {
            if let Ok(domain) = normalize_domain(&raw) {
                assert_eq!(
                    normalize_domain(&domain).as_deref(),
                    Ok(domain.as_str()),
                    "not idempotent"
                );
                assert!(
                    !domain.contains(['/', '@', '?', '#', ' ']) && !domain.contains("://"),
                    "{domain}"
                );
                let host = domain.rsplit_once(':').map_or(domain.as_str(), |(h, _)| h);
                assert!(
                    host.parse::<IpAddr>().is_err(),
                    "an address accepted as a domain: {domain}"
                );
                assert_eq!(domain, domain.to_ascii_lowercase());
            }
        }
        Input::Txt {
            domain,
            records,
            error,
        } => {
            let answer = match error {
                None => Ok(records.clone()),
                Some(0) => Err(io::ErrorKind::NotFound),
                Some(1) => Err(io::ErrorKind::Unsupported),
                Some(_) => Err(io::ErrorKind::TimedOut),
            };
            let stub = Stub(answer);
            let hint = ready(check(Some(&stub), &domain));
            let present = error.is_none()
                && records.iter().any(|r| {
                    r.split(|c: char| c == ';' || c.is_whitespace())
                        .any(|p| p.trim().eq_ignore_ascii_case("v=oap1"))
                });
            assert_eq!(hint == TxtHint::Present, present);
            if let TxtHint::Failed(why) = &hint {
                assert!(why.chars().count() <= 200);
            }
            assert_eq!(ready(check(None, &domain)), TxtHint::NotChecked);
        }
        Input::Mdns {
            instance,
            suffix,
            fullname,
            port,
            addresses,
            path,
            txt_bytes,
        } => {
            let fullname = if suffix {
                format!("{instance}._oap._tcp.local.")
            } else {
                fullname
            };
            let service = AdvertisedService {
                fullname,
                port,
                addresses,
                path,
                txt_bytes: usize::from(txt_bytes),
            };
            if let Ok(target) = lan_target(&service) {
                let url =
                    url::Url::parse(&target.url).expect("an accepted advertisement gives a URL");
                assert_eq!(url.scheme(), "http");
                assert_eq!(url.port_or_known_default(), Some(port));
                assert_ne!(port, 0);
                let host = match target.address {
                    IpAddr::V4(v4) => v4.to_string(),
                    IpAddr::V6(v6) => format!("[{v6}]"),
                };
                assert_eq!(url.host_str(), Some(host.as_str()), "{}", target.url);
                assert!(service.addresses.contains(&target.address));
                assert!(matches!(
                    oap_exec::classify(target.address),
                    AddressClass::Private | AddressClass::Global
                ));
                assert!(target.path.starts_with('/') && !target.path.starts_with("//"));
                assert!(target.key.ends_with(".local"));
                assert!(
                    target.key.bytes().all(|b| b.is_ascii_lowercase()
                        || b.is_ascii_digit()
                        || b == b'-'
                        || b == b'.'),
                    "{}",
                    target.key
                );
            }
        }
        Input::State(bytes) => {
            let dir = oap_fuzz::scratch();
            let path = dir.join("crawl-state.json");
            std::fs::write(&path, &bytes).unwrap();
            let (schedule, problem) = Schedule::load(&path);
            if let Some(problem) = problem {
                assert!(!problem.is_empty());
                return;
            }
            let _ = schedule.due(0);
            let _ = schedule.due(u64::MAX);
            let _ = schedule.next_due_ms();
            let again_path = dir.join("crawl-state-again.json");
            schedule.save(&again_path).unwrap();
            let (again, problem) = Schedule::load(&again_path);
            assert_eq!(problem, None);
            assert_eq!(
                serde_json::to_value(&again).unwrap(),
                serde_json::to_value(&schedule).unwrap(),
                "the state file did not round-trip"
            );
        }
    }
});

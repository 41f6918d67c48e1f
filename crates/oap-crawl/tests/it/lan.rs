//! LAN (mDNS) targets in the crawler, against a plain-HTTP server on
//! loopback (the executor allow-lists 127.0.0.0/8 for these tests, as a LAN
//! device's private address would be allowed by `lan` trust). Keys, the
//! cap, removal, the purge, and which targets the schedule crawls.

use crate::common;

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use common::{executor, manifest, StubResolver};
use oap_crawl::crawler::AddError;
use oap_crawl::mdns::{lan_target, AdvertisedService, LanTarget, LanUpdate, MAX_LAN_SERVICES};
use oap_crawl::sink::engine_sink as sink;
use oap_crawl::{AddedBy, Crawler, CrawlerSettings};
use oap_discovery::{Engine, EngineConfig, Source, Trust};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Plain HTTP on 127.0.0.1: `/stdio.json` declares a local command, any
/// other path serves a manifest named after the path.
async fn plain_http() -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buf = vec![0u8; 4096];
                let n = stream.read(&mut buf).await.unwrap_or(0);
                let head = String::from_utf8_lossy(&buf[..n]).to_string();
                let path = head.split_whitespace().nth(1).unwrap_or("/").to_string();
                let body = if path == "/stdio.json" {
                    serde_json::json!({
                        "oap": "1.0", "name": "lan shell", "description": "runs a shell",
                        "invoke": {"method": "stdio", "url": "/bin/sh"}
                    })
                    .to_string()
                } else {
                    let name = path.trim_start_matches('/').trim_end_matches(".json");
                    manifest(
                        &format!("device {name}"),
                        &format!("A LAN device called {name}"),
                    )
                };
                let response = format!(
                    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = stream.write_all(response.as_bytes()).await;
            });
        }
    });
    addr
}

struct Lan {
    crawler: Arc<Crawler>,
    engine: Arc<Engine>,
    sink: Arc<dyn oap_crawl::CatalogSink>,
    addr: SocketAddr,
    connects: Arc<std::sync::Mutex<Vec<SocketAddr>>>,
    _dir: tempfile::TempDir,
}

fn settings(dir: &std::path::Path) -> CrawlerSettings {
    let mut s = CrawlerSettings::new(dir.join("state"));
    s.fetch.timeout = Duration::from_secs(2);
    s.schedule.retry_base = Duration::from_millis(10);
    s.schedule.max_failures = 2;
    s.lan = true;
    s
}

async fn lan(allow: &[&str]) -> Lan {
    let addr = plain_http().await;
    let dir = tempfile::tempdir().unwrap();
    let settings = settings(dir.path());
    let (executor, connects) = executor(StubResolver::new(&[]), &common::pki().ca_pem, allow);
    let engine = Engine::open(
        EngineConfig::new(dir.path().join("data")),
        vec![Source::Remote(settings.remote_dir.clone())],
        None,
    )
    .unwrap()
    .0;
    let engine = Arc::new(engine);
    Lan {
        crawler: Arc::new(Crawler::new(settings, executor, None)),
        sink: sink(&engine),
        engine,
        addr,
        connects,
        _dir: dir,
    }
}

/// A target as the browser would produce it, but at `addr` (loopback,
/// which the validation refuses: built by hand here).
fn target(instance: &str, addr: SocketAddr, path: &str) -> LanTarget {
    let good = lan_target(&AdvertisedService {
        fullname: format!("{instance}._oap._tcp.local."),
        port: addr.port(),
        addresses: vec![IpAddr::V4(Ipv4Addr::new(192, 168, 1, 2))],
        path: Some(path.as_bytes().to_vec()),
        txt_bytes: path.len() + 5,
    })
    .unwrap();
    LanTarget {
        address: addr.ip(),
        url: format!("http://{addr}{path}"),
        ..good
    }
}

fn ids(engine: &Engine) -> Vec<String> {
    engine.list().into_iter().map(|m| m.id).collect()
}

#[tokio::test]
async fn lan_target_is_fetched_over_plain_http_with_lan_trust() {
    let f = lan(&["127.0.0.0/8"]).await;
    let t = target("Kitchen Hub", f.addr, "/hub.json");
    assert_eq!(
        f.crawler.add_lan_target(&t).unwrap(),
        LanUpdate::New("kitchen-hub.local".into())
    );
    // Due at once: the schedule's own pass picks it up.
    let report = f.crawler.crawl_pass(None, Some(&f.sink)).await;
    assert_eq!(report.updated, 1, "{report:?}");
    assert_eq!(ids(&f.engine), vec!["kitchen-hub.local/device-hub"]);
    let record = f.engine.get("kitchen-hub.local/device-hub").unwrap();
    assert_eq!(record.trust, Trust::Lan);
    assert_eq!(record.origin.kind, "lan");
    assert_eq!(record.origin.location, t.url);
    let state = &f.crawler.status()[0];
    assert_eq!(state.added_by, AddedBy::Mdns);
    assert_eq!(state.trust, Trust::Lan);
    assert_eq!(
        state.mdns_name.as_deref(),
        Some("Kitchen Hub._oap._tcp.local.")
    );
    assert_eq!(state.txt_hint, oap_crawl::TxtHint::NotChecked);

    // The same advertisement again changes nothing; a new address does.
    assert!(matches!(
        f.crawler.add_lan_target(&t).unwrap(),
        LanUpdate::Unchanged(_)
    ));
    let moved = target("Kitchen Hub", f.addr, "/hub2.json");
    assert_eq!(
        f.crawler.add_lan_target(&moved).unwrap(),
        LanUpdate::Changed("kitchen-hub.local".into())
    );
    f.crawler.crawl_pass(None, Some(&f.sink)).await;
    assert_eq!(ids(&f.engine), vec!["kitchen-hub.local/device-hub2"]);

    // Goodbye: the manifest and the entry go.
    let (key, existed) = f
        .crawler
        .remove_lan_target("Kitchen Hub._oap._tcp.local.")
        .unwrap();
    assert_eq!((key.as_str(), existed), ("kitchen-hub.local", true));
    f.engine.rebuild(false).unwrap();
    assert!(ids(&f.engine).is_empty());
    assert!(f.crawler.status().is_empty());
    assert!(f
        .crawler
        .remove_lan_target("Kitchen Hub._oap._tcp.local.")
        .is_none());
}

#[tokio::test]
async fn lan_targets_are_still_checked_by_the_executor_and_the_manifest_rules() {
    // Without the allow-list, lan trust refuses loopback at connect time:
    // the early filter is not the only guard.
    let f = lan(&[]).await;
    f.crawler
        .add_lan_target(&target("Sneaky", f.addr, "/a.json"))
        .unwrap();
    let report = f.crawler.crawl_pass(None, Some(&f.sink)).await;
    assert_eq!(report.failed, 1, "{report:?}");
    assert!(report.errors[0].1.contains("loopback"), "{report:?}");
    assert!(f.connects.lock().unwrap().is_empty());

    // stdio from the LAN is refused like from the internet.
    let f = lan(&["127.0.0.0/8"]).await;
    f.crawler
        .add_lan_target(&target("Shell", f.addr, "/stdio.json"))
        .unwrap();
    let report = f.crawler.crawl_pass(None, Some(&f.sink)).await;
    assert_eq!(report.failed, 1, "{report:?}");
    assert!(
        report.errors[0].1.contains("declares invoke.method stdio"),
        "{report:?}"
    );
    assert!(ids(&f.engine).is_empty());
    assert_eq!(f.crawler.status().len(), 1);

    // After max_failures (2) a LAN target is dropped, so a dead or hostile
    // device does not hold a capped slot; the reason stays visible.
    f.crawler
        .crawl_pass(Some(&["shell.local".to_string()]), Some(&f.sink))
        .await;
    assert!(f.crawler.status().is_empty());
    let refusals = f.crawler.lan_refusals();
    assert_eq!(refusals.len(), 1, "{refusals:?}");
    assert_eq!(refusals[0].name, "Shell._oap._tcp.local.");
    assert!(
        refusals[0]
            .reason
            .starts_with("removed after 2 consecutive failures; last: ")
            && refusals[0].reason.contains("stdio"),
        "{refusals:?}"
    );
}

#[tokio::test]
async fn clashing_names_get_their_own_keys_and_the_cap_holds() {
    let f = lan(&["127.0.0.0/8"]).await;
    let first = f
        .crawler
        .add_lan_target(&target("Hub", f.addr, "/one.json"))
        .unwrap();
    // Another service whose label is the same cannot take (overwrite) it.
    let second = f
        .crawler
        .add_lan_target(&target("HUB!", f.addr, "/two.json"))
        .unwrap();
    assert_eq!(first.key(), "hub.local");
    assert_ne!(second.key(), "hub.local");
    assert!(
        second.key().starts_with("hub-") && second.key().ends_with(".local"),
        "{second:?}"
    );
    f.crawler.crawl_pass(None, Some(&f.sink)).await;
    let mut found = ids(&f.engine);
    found.sort();
    assert_eq!(
        found,
        vec![
            format!("{}/device-two", second.key()),
            "hub.local/device-one".to_string()
        ]
    );

    for i in 2..MAX_LAN_SERVICES {
        f.crawler
            .add_lan_target(&target(&format!("flood {i}"), f.addr, "/x.json"))
            .unwrap();
    }
    let err = f
        .crawler
        .add_lan_target(&target("one too many", f.addr, "/x.json"))
        .unwrap_err();
    assert_eq!(err, AddError::LanFull(MAX_LAN_SERVICES));
    assert_eq!(f.crawler.status().len(), MAX_LAN_SERVICES);

    // Refusals are remembered, bounded.
    for i in 0..100 {
        f.crawler.note_lan_refusal(&format!("bad {i}"), "because");
    }
    let refusals = f.crawler.lan_refusals();
    assert_eq!(refusals.len(), oap_crawl::mdns::MAX_LAN_REFUSALS);
    assert_eq!(refusals.last().unwrap().name, "bad 99");
}

#[tokio::test]
async fn the_schedule_crawls_each_kind_only_when_it_is_on_and_purge_removes_lan() {
    let f = lan(&["127.0.0.0/8"]).await;
    f.crawler
        .add_lan_target(&target("Lamp", f.addr, "/lamp.json"))
        .unwrap();
    f.crawler.add_domain("example.org", AddedBy::Cli).unwrap();
    f.crawler.crawl_pass(None, Some(&f.sink)).await;
    assert_eq!(ids(&f.engine), vec!["lamp.local/device-lamp"]);
    f.crawler.save().unwrap();
    let settings = f.crawler.settings().clone();

    // Internet off: registering is refused, internet domains are not
    // crawled (no connection attempted), LAN targets still are.
    let (exec, connects) = executor(
        StubResolver::new(&[]),
        &common::pki().ca_pem,
        &["127.0.0.0/8"],
    );
    let lan_only = Crawler::new(
        CrawlerSettings {
            internet: false,
            ..settings.clone()
        },
        exec,
        None,
    );
    assert_eq!(
        lan_only.add_domain("example.com", AddedBy::Register),
        Err(AddError::InternetDisabled)
    );
    let due = lan_only.next_due_ms().unwrap();
    // Only the LAN target counts (the internet one is due now, retried).
    assert!(due > oap_crawl::now_ms(), "{due}");
    let report = lan_only.crawl_pass(None, Some(&f.sink)).await;
    assert_eq!(report.attempted, 0, "{report:?}");
    assert!(connects.lock().unwrap().is_empty());

    // LAN off: LAN targets are not crawled, and the purge removes them and
    // their manifests, leaving internet domains alone.
    let (exec, _) = executor(
        StubResolver::new(&[]),
        &common::pki().ca_pem,
        &["127.0.0.0/8"],
    );
    let no_lan = Crawler::new(
        CrawlerSettings {
            lan: false,
            ..settings
        },
        exec,
        None,
    );
    assert_eq!(no_lan.purge_lan_targets(), 1);
    f.engine.rebuild(false).unwrap();
    assert!(ids(&f.engine).is_empty());
    let left: Vec<String> = no_lan.status().into_iter().map(|s| s.domain).collect();
    assert_eq!(left, vec!["example.org"]);
    assert_eq!(no_lan.purge_lan_targets(), 0);
}

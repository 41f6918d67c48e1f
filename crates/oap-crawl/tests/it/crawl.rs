//! The crawler against a real HTTPS server on loopback (test CA), with a
//! stub resolver mapping fake domains to it. Every case asserts the index
//! before and after. No traffic leaves loopback: the SSRF test's stub
//! answers private, metadata and CGNAT addresses and asserts that nothing
//! was connected to.

use crate::common;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::*;
use oap_crawl::sink::engine_sink as sink;
use oap_crawl::{AddedBy, Crawler, CrawlerSettings, TxtHint};
use oap_discovery::{Engine, EngineConfig, Source, Trust};

struct Fixture {
    server: Server,
    crawler: Arc<Crawler>,
    engine: Arc<Engine>,
    sink: Arc<dyn oap_crawl::CatalogSink>,
    dir: tempfile::TempDir,
    connects: Arc<std::sync::Mutex<Vec<std::net::SocketAddr>>>,
    resolver: Arc<StubResolver>,
}

fn settings(dir: &std::path::Path) -> CrawlerSettings {
    let mut s = CrawlerSettings::new(dir.join("state"));
    s.fetch.timeout = Duration::from_secs(2);
    s.schedule.retry_base = Duration::from_millis(10);
    s.schedule.interval = Duration::from_secs(3600);
    s.schedule.max_failures = 3;
    s
}

fn open_engine(dir: &std::path::Path, settings: &CrawlerSettings) -> Engine {
    let local = dir.join("local");
    std::fs::create_dir_all(&local).unwrap();
    std::fs::write(
        local.join("echo.json"),
        manifest("Local Echo", "Echoes its input back"),
    )
    .unwrap();
    let sources = vec![
        Source::Dir(local),
        Source::Remote(settings.remote_dir.clone()),
    ];
    Engine::open(EngineConfig::new(dir.join("data")), sources, None)
        .unwrap()
        .0
}

async fn fixture() -> Fixture {
    fixture_with(loopback_resolver(), &["127.0.0.0/8"], None).await
}

async fn fixture_with(
    resolver: Arc<StubResolver>,
    allow: &[&str],
    txt: Option<Arc<dyn oap_crawl::TxtResolver>>,
) -> Fixture {
    let pki = pki();
    let server = serve(pki.server.clone()).await;
    let (executor, connects) = executor(resolver.clone(), &pki.ca_pem, allow);
    let dir = tempfile::tempdir().unwrap();
    let settings = settings(dir.path());
    let engine = Arc::new(open_engine(dir.path(), &settings));
    let crawler = Arc::new(Crawler::new(settings, executor, txt));
    Fixture {
        server,
        crawler,
        sink: sink(&engine),
        engine,
        dir,
        connects,
        resolver,
    }
}

fn ids(engine: &Engine) -> Vec<String> {
    engine.list().into_iter().map(|m| m.id).collect()
}

impl Fixture {
    fn add(&self, host: &str) -> String {
        self.crawler
            .add_domain(&self.server.domain(host), AddedBy::Cli)
            .unwrap()
    }

    async fn crawl(&self, domains: &[String]) -> oap_crawl::CrawlReport {
        self.crawler
            .crawl_pass(Some(domains), Some(&self.sink))
            .await
    }

    fn state(&self, domain: &str) -> oap_crawl::DomainState {
        self.crawler
            .status()
            .into_iter()
            .find(|s| s.domain == domain)
            .unwrap()
    }
}

#[tokio::test]
async fn good_manifest_is_indexed_with_internet_trust_and_its_domain() {
    let f = fixture().await;
    assert_eq!(ids(&f.engine), vec!["local/local-echo"]);
    let domain = f.add("good.test");
    let report = f.crawl(std::slice::from_ref(&domain)).await;
    assert_eq!(report.updated, 1, "{report:?}");
    assert!(report.rebuild.is_some(), "{report:?}");
    let id = format!("{domain}/weather-now");
    assert_eq!(ids(&f.engine), vec![id.clone(), "local/local-echo".into()]);

    let record = f.engine.get(&id).unwrap();
    assert_eq!(record.trust, Trust::Internet);
    assert_eq!(record.origin.kind, "crawl");
    assert_eq!(
        record.origin.location,
        format!("https://{domain}/.well-known/oap.json")
    );
    let found = f
        .engine
        .discover("what is the weather forecast", 3)
        .unwrap();
    let best = &found.candidates[0];
    assert_eq!(best.id, id);
    assert_eq!(best.trust, Trust::Internet);
    assert_eq!(best.domain, domain);

    let state = f.state(&domain);
    assert_eq!(state.last_result.as_deref(), Some("updated"));
    assert_eq!(state.manifest_id.as_deref(), Some(id.as_str()));
    assert_eq!(state.validators.etag.as_deref(), Some("\"v1\""));
    assert!(state.next_due_ms > oap_crawl::now_ms() + 3000 * 1000);
    // Only loopback was ever connected to.
    assert!(f
        .connects
        .lock()
        .unwrap()
        .iter()
        .all(|a| a.ip().is_loopback()));
}

#[tokio::test]
async fn recrawl_is_conditional_and_a_304_keeps_the_manifest() {
    let f = fixture().await;
    let domain = f.add("good.test");
    f.crawl(std::slice::from_ref(&domain)).await;
    let before = ids(&f.engine);
    let report = f.crawl(std::slice::from_ref(&domain)).await;
    assert_eq!((report.updated, report.unchanged), (0, 1), "{report:?}");
    assert!(report.rebuild.is_none(), "a 304 must not rebuild the index");
    let requests = f.server.requests.lock().unwrap().clone();
    assert_eq!(requests.len(), 2);
    assert_eq!(requests[0].2, None);
    assert_eq!(requests[1].2.as_deref(), Some("\"v1\""));
    assert_eq!(
        f.state(&domain).last_result.as_deref(),
        Some("not modified")
    );
    assert_eq!(ids(&f.engine), before);

    // The stored copy vanished (operator wiped it): the next fetch must be
    // unconditional, or a 304 would stand in for nothing.
    std::fs::remove_dir_all(&f.crawler.settings().remote_dir).unwrap();
    let report = f.crawl(std::slice::from_ref(&domain)).await;
    assert_eq!(report.updated, 1, "{report:?}");
    assert_eq!(f.server.requests.lock().unwrap()[2].2, None);
}

/// Each hostile document is refused with a reason naming the problem, and
/// the index is exactly what it was.
#[tokio::test]
async fn hostile_documents_are_refused_and_the_index_is_untouched() {
    let f = fixture().await;
    let good = f.add("good.test");
    f.crawl(std::slice::from_ref(&good)).await;
    let before = ids(&f.engine);
    assert_eq!(before.len(), 2);

    let cases: &[(&str, &str)] = &[
        ("html.test", "not JSON"),
        ("huge.test", "larger than the 65536 byte limit"),
        ("hugechunked.test", "larger than the 65536 byte limit"),
        ("slow.test", "timed out after 2.0s"),
        (
            "redirect-other.test",
            "to another host (good.test) is refused",
        ),
        (
            "redirect-local.test",
            "to another host (127.0.0.1) is refused",
        ),
        ("redirect-http.test", "leaves https"),
        ("loop.test", "too many redirects (the limit is 3)"),
        ("stdio.test", "may never run a local command"),
        ("deep.test", "not a valid manifest"),
        (
            "userinfo.test",
            "invoke.url: must not contain a user name or password",
        ),
        (
            "control.test",
            "name: contains a control character (\\u001b) at byte 3",
        ),
        ("badutf8.test", "not valid UTF-8 (byte 40)"),
        ("notfound.test", "HTTP 404"),
    ];
    let domains: Vec<String> = cases.iter().map(|(h, _)| f.add(h)).collect();
    let report = f.crawl(&domains).await;
    assert_eq!(report.failed, cases.len(), "{report:#?}");
    assert_eq!(report.updated, 0);
    assert!(report.rebuild.is_none());
    for ((host, expected), domain) in cases.iter().zip(&domains) {
        let state = f.state(domain);
        let result = state.last_result.unwrap_or_default();
        assert!(
            result.starts_with("error: ") && result.contains(expected),
            "{host}: expected {expected:?} in {result:?}"
        );
        assert!(!result.contains("s3cr3tpw"), "{host}: {result}");
        assert_eq!(state.consecutive_failures, 1, "{host}");
        assert!(state.manifest_id.is_none(), "{host}");
    }
    assert_eq!(ids(&f.engine), before);
    // The redirect loop stopped at the limit: 1 + 3 hops.
    assert_eq!(f.server.hits("loop.test"), 4);
    // The redirect to 127.0.0.1 was never followed.
    assert!(f
        .server
        .requests
        .lock()
        .unwrap()
        .iter()
        .all(|(h, _, _)| h != "127.0.0.1"));
}

#[tokio::test]
async fn a_same_host_redirect_is_followed_and_recorded() {
    let f = fixture().await;
    let domain = f.add("redirect-same.test");
    let report = f.crawl(std::slice::from_ref(&domain)).await;
    assert_eq!(report.updated, 1, "{report:?}");
    let record = f.engine.get(&format!("{domain}/moved-manifest")).unwrap();
    assert_eq!(
        record.origin.location,
        format!("https://{domain}/moved.json")
    );
}

/// The SSRF guard: names answering private, metadata, CGNAT, loopback
/// (without an allow-list entry) and ULA addresses are refused before any
/// connection is attempted.
#[tokio::test]
async fn ssrf_refuses_internal_answers_without_connecting() {
    let resolver = StubResolver::new(&[
        ("private.test", &["10.0.0.7"]),
        ("home.test", &["192.168.1.1"]),
        ("metadata.test", &["169.254.169.254"]),
        ("cgnat.test", &["100.64.0.1"]),
        ("loopback.test", &["127.0.0.1"]),
        ("ula.test", &["fd00::1"]),
        ("mapped.test", &["::ffff:10.0.0.1"]),
        ("multicast.test", &["224.0.0.251"]),
    ]);
    let f = fixture_with(resolver, &[], None).await;
    let before = ids(&f.engine);
    let names = [
        "private.test",
        "home.test",
        "metadata.test",
        "cgnat.test",
        "loopback.test",
        "ula.test",
        "mapped.test",
        "multicast.test",
    ];
    let domains: Vec<String> = names
        .iter()
        .map(|n| f.crawler.add_domain(n, AddedBy::Register).unwrap())
        .collect();
    let report = f.crawl(&domains).await;
    assert_eq!(report.failed, names.len(), "{report:#?}");
    for domain in &domains {
        let result = f.state(domain).last_result.unwrap();
        assert!(
            result.contains("refused to connect")
                && result.contains("which an internet manifest may not reach"),
            "{domain}: {result}"
        );
    }
    assert!(
        f.connects.lock().unwrap().is_empty(),
        "connections attempted: {:?}",
        f.connects.lock().unwrap()
    );
    assert_eq!(f.resolver.queries.lock().unwrap().len(), names.len());
    assert_eq!(ids(&f.engine), before);
}

#[tokio::test]
async fn a_flapping_domain_backs_off_is_removed_after_n_failures_and_comes_back() {
    let f = fixture().await;
    let domain = f.add("flap.test");
    let id = format!("{domain}/flapping-service");
    f.crawl(std::slice::from_ref(&domain)).await;
    assert!(ids(&f.engine).contains(&id));

    f.server.flap_up.store(false, Ordering::SeqCst);
    let mut delays = Vec::new();
    for failure in 1..=2u32 {
        let report = f.crawl(std::slice::from_ref(&domain)).await;
        assert_eq!(report.failed, 1);
        let state = f.state(&domain);
        assert_eq!(state.consecutive_failures, failure);
        assert!(state.last_result.unwrap().contains("HTTP 503"));
        delays.push(state.next_due_ms - state.last_fetch_ms.unwrap());
        // Still indexed: a transient failure does not drop a manifest.
        assert!(ids(&f.engine).contains(&id), "removed too early");
    }
    // retry_base 10 ms, doubling, ±10% jitter.
    assert!((9..=11).contains(&delays[0]), "{delays:?}");
    assert!((18..=22).contains(&delays[1]), "{delays:?}");

    let report = f.crawl(std::slice::from_ref(&domain)).await;
    assert_eq!(report.removed, 1, "{report:?}");
    assert!(!ids(&f.engine).contains(&id));
    let state = f.state(&domain);
    assert!(state
        .removed_reason
        .unwrap()
        .contains("removed after 3 consecutive failures"));
    assert!(state.manifest_id.is_none());

    f.server.flap_up.store(true, Ordering::SeqCst);
    let report = f.crawl(std::slice::from_ref(&domain)).await;
    assert_eq!(report.updated, 1, "{report:?}");
    assert!(ids(&f.engine).contains(&id));
    assert_eq!(f.state(&domain).consecutive_failures, 0);
    assert!(f.state(&domain).removed_reason.is_none());
}

#[tokio::test]
async fn due_domains_only_and_a_changed_manifest_replaces_the_old() {
    let f = fixture().await;
    let domain = f.add("changing.test");
    let other = f.add("second.test");
    let report = f.crawler.crawl_pass(None, Some(&f.sink)).await;
    assert_eq!(report.updated, 2);
    // Nothing is due now: a scheduled pass fetches nothing.
    let report = f.crawler.crawl_pass(None, Some(&f.sink)).await;
    assert_eq!(report.attempted, 0);
    assert_eq!(f.server.hits("second.test"), 1);

    let id = format!("{domain}/changing");
    let hash_before = f.engine.get(&id).unwrap().content_hash;
    f.server.version.store(2, Ordering::SeqCst);
    let report = f.crawl(std::slice::from_ref(&domain)).await;
    assert_eq!(report.updated, 1);
    let record = f.engine.get(&id).unwrap();
    assert_ne!(record.content_hash, hash_before);
    assert!(record.manifest["description"]
        .as_str()
        .unwrap()
        .contains("Version 2"));
    assert!(ids(&f.engine).contains(&format!("{other}/word-counter")));
}

#[tokio::test]
async fn the_txt_hint_is_checked_and_recorded() {
    let mut records = HashMap::new();
    records.insert("_oap.good.test".to_string(), vec!["v=oap1".to_string()]);
    records.insert(
        "_oap.second.test".to_string(),
        vec!["v=spf1 -all".to_string()],
    );
    let txt: Arc<dyn oap_crawl::TxtResolver> = Arc::new(StubTxt(records));
    let f = fixture_with(loopback_resolver(), &["127.0.0.0/8"], Some(txt)).await;
    let a = f.add("good.test");
    let b = f.add("second.test");
    let c = f.add("flap.test");
    f.crawl(&[a.clone(), b.clone(), c.clone()]).await;
    assert_eq!(f.state(&a).txt_hint, TxtHint::Present);
    assert_eq!(f.state(&b).txt_hint, TxtHint::Absent);
    assert_eq!(f.state(&c).txt_hint, TxtHint::Absent);

    let g = fixture().await;
    let d = g.add("good.test");
    g.crawl(std::slice::from_ref(&d)).await;
    assert_eq!(g.state(&d).txt_hint, TxtHint::NotChecked);
}

/// What was indexed survives a restart, a damaged state file and stray
/// temporary files from a write cut short.
#[tokio::test]
async fn indexed_manifests_survive_restart_and_damaged_state() {
    let f = fixture().await;
    let domain = f.add("good.test");
    f.crawl(std::slice::from_ref(&domain)).await;
    let before = ids(&f.engine);
    let settings = f.crawler.settings().clone();

    // A write that was cut short leaves a temporary file; it is ignored.
    std::fs::write(
        settings.remote_dir.join(".evil.test.json.123.tmp"),
        b"{\"host\":",
    )
    .unwrap();
    // Reopen, as after kill -9.
    let engine = open_engine(f.dir.path(), &settings);
    assert_eq!(ids(&engine), before);
    let crawler = Crawler::new(settings.clone(), f.crawler_executor(), None);
    assert_eq!(
        crawler.status()[0].validators.etag.as_deref(),
        Some("\"v1\"")
    );

    // A damaged state file: the schedule starts afresh, the index does not.
    std::fs::write(&settings.state_path, b"{ not json").unwrap();
    let crawler = Crawler::new(settings.clone(), f.crawler_executor(), None);
    assert!(crawler.status().is_empty());
    let engine = open_engine(f.dir.path(), &settings);
    assert_eq!(ids(&engine), before);

    // A hand-planted envelope claiming local trust, or carrying a stdio
    // manifest, is refused at load.
    let evil = oap_store::RemoteDocument {
        host: "evil.test".into(),
        url: "https://evil.test/.well-known/oap.json".into(),
        trust: Trust::Lan,
        fetched_at_unix: 0,
        body: serde_json::json!({"oap":"1.0","name":"Sneaky","description":"x",
            "invoke":{"method":"stdio","url":"sh"}})
        .to_string(),
        unhealthy: None,
    };
    oap_store::write_envelope(&settings.remote_dir, &evil).unwrap();
    let (engine, report) = Engine::open(
        EngineConfig::new(f.dir.path().join("data")),
        vec![Source::Remote(settings.remote_dir.clone())],
        None,
    )
    .unwrap();
    assert!(!ids(&engine).iter().any(|i| i.starts_with("evil.test")));
    assert!(
        report
            .problems
            .iter()
            .any(|p| p.message.contains("stdio is refused")),
        "{:?}",
        report.problems
    );
}

impl Fixture {
    fn crawler_executor(&self) -> Arc<oap_exec::Executor> {
        let pki = pki();
        executor(loopback_resolver(), &pki.ca_pem, &["127.0.0.0/8"]).0
    }
}

/// Queries keep being answered while crawls rebuild the index, each from a
/// whole snapshot (the old or the new document count, nothing in between).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queries_keep_being_served_during_a_crawl() {
    let f = fixture().await;
    let stop = Arc::new(AtomicBool::new(false));
    let answered = Arc::new(AtomicUsize::new(0));
    let engine = f.engine.clone();
    let (s, a) = (stop.clone(), answered.clone());
    let reader = std::thread::spawn(move || {
        let mut counts = std::collections::BTreeSet::new();
        while !s.load(Ordering::SeqCst) {
            let found = engine.discover("weather forecast for a city", 5).unwrap();
            counts.insert(found.meta.index_docs);
            a.fetch_add(1, Ordering::SeqCst);
        }
        counts
    });
    let domains: Vec<String> = [
        "good.test",
        "second.test",
        "changing.test",
        "redirect-same.test",
    ]
    .iter()
    .map(|h| f.add(h))
    .collect();
    for domain in &domains {
        let report = f.crawl(std::slice::from_ref(domain)).await;
        assert_eq!(report.updated, 1, "{report:?}");
        f.server.version.fetch_add(1, Ordering::SeqCst);
    }
    let before = answered.load(Ordering::SeqCst);
    f.crawl(&domains[2..3]).await;
    stop.store(true, Ordering::SeqCst);
    let counts = reader.join().unwrap();
    assert!(answered.load(Ordering::SeqCst) > before.min(1));
    // Every answer saw a whole index: 1 local + 0..=4 crawled.
    assert!(counts.iter().all(|c| (1..=5).contains(c)), "{counts:?}");
    assert_eq!(ids(&f.engine).len(), 5);
}

#[tokio::test]
async fn bad_domains_are_refused_with_a_reason() {
    let f = fixture().await;
    for (raw, why) in [
        ("127.0.0.1", "IP address"),
        ("https://good.test", "not a URL"),
        ("good.test/x", "no path"),
        ("localhost", "two labels"),
        ("", "empty"),
    ] {
        let err = f.crawler.add_domain(raw, AddedBy::Register).unwrap_err();
        assert!(err.to_string().contains(why), "{raw}: {err}");
    }
    assert!(f.crawler.status().is_empty());
}

/// A manifest whose `health` URL fails is left out of discovery, stays
/// listed with the reason, and comes back when healthy.
#[tokio::test]
async fn unhealthy_manifests_are_left_out_with_the_reason_shown() {
    let f = fixture().await;
    let domain = f.add("health.test");
    let id = format!("{domain}/tide-service");
    let found = |f: &Fixture| -> bool {
        f.engine
            .discover("high and low tide times", 5)
            .unwrap()
            .candidates
            .iter()
            .any(|c| c.id == id)
    };
    // Matches both manifests, the tide service best.
    let mixed = "high and low tide times, tide tables, or echo my input back";
    let first = |f: &Fixture| -> Vec<String> {
        f.engine
            .discover(mixed, 1)
            .unwrap()
            .candidates
            .into_iter()
            .map(|c| c.id)
            .collect()
    };
    f.crawl(std::slice::from_ref(&domain)).await;
    assert!(found(&f));
    assert_eq!(first(&f), vec![id.clone()]);
    assert!(f.engine.get(&id).unwrap().unhealthy.is_none());
    assert_eq!(f.server.hits("health.test"), 2);

    f.server.flap_up.store(false, Ordering::SeqCst);
    let report = f.crawl(std::slice::from_ref(&domain)).await;
    assert!(report.rebuild.is_some(), "{report:?}");
    assert!(!found(&f), "an unhealthy manifest was offered");
    // top_k healthy ones still come back: the next best fills the place.
    assert_eq!(first(&f), vec!["local/local-echo".to_string()]);
    let reason = f.engine.get(&id).unwrap().unhealthy.unwrap();
    assert!(reason.contains("answered HTTP 503"), "{reason}");
    assert!(ids(&f.engine).contains(&id), "still listed");
    assert!(f.state(&domain).health.unwrap().starts_with("unhealthy"));

    f.server.flap_up.store(true, Ordering::SeqCst);
    f.crawl(std::slice::from_ref(&domain)).await;
    assert!(found(&f));
    assert!(f.engine.get(&id).unwrap().unhealthy.is_none());
}

/// A seed deleted from the config takes its manifest with it at the next
/// start; registered (and command-line) domains stay.
#[tokio::test]
async fn a_seed_dropped_from_the_config_leaves_the_index() {
    let f = fixture().await;
    let seed = f
        .crawler
        .add_domain(&f.server.domain("good.test"), AddedBy::Seed)
        .unwrap();
    let registered = f
        .crawler
        .add_domain(&f.server.domain("second.test"), AddedBy::Register)
        .unwrap();
    let report = f.crawl(&[seed.clone(), registered.clone()]).await;
    assert_eq!(report.updated, 2, "{report:?}");
    assert_eq!(ids(&f.engine).len(), 3, "{:?}", ids(&f.engine));

    // Still a seed: nothing changes.
    assert!(f
        .crawler
        .retain_seeds(std::slice::from_ref(&seed))
        .is_empty());
    assert_eq!(f.crawler.status().len(), 2);

    // Seed list now empty: the seed goes, the registered domain stays.
    assert_eq!(f.crawler.retain_seeds(&[]), vec![seed.clone()]);
    let left: Vec<String> = f.crawler.status().into_iter().map(|s| s.domain).collect();
    assert_eq!(left, vec![registered.clone()]);
    f.engine.rebuild(false).unwrap();
    let now = ids(&f.engine);
    assert!(
        !now.iter().any(|id| id.starts_with(&format!("{seed}/"))),
        "{now:?}"
    );
    assert!(
        now.iter()
            .any(|id| id.starts_with(&format!("{registered}/"))),
        "{now:?}"
    );
    assert!(now.contains(&"local/local-echo".to_string()));

    // The schedule file agrees after a restart.
    let reopened = Crawler::new(f.crawler.settings().clone(), f.crawler_executor(), None);
    let left: Vec<String> = reopened.status().into_iter().map(|s| s.domain).collect();
    assert_eq!(left, vec![registered]);
}

//! Property tests of the crawl schedule's timing: the retry backoff doubles
//! from its base, never shrinks as failures add up and never exceeds the
//! recrawl interval; jitter stays within its clamped band.

use std::time::Duration;

use oap_crawl::schedule::{backoff, jittered};
use oap_crawl::ScheduleSettings;
use proptest::prelude::*;

fn settings() -> impl Strategy<Value = ScheduleSettings> {
    (
        0u64..=86_400_000,
        0u64..=864_000_000,
        0.0f64..=1.0,
        0u32..=20,
    )
        .prop_map(
            |(base_ms, interval_ms, jitter, max_failures)| ScheduleSettings {
                interval: Duration::from_millis(interval_ms),
                jitter,
                retry_base: Duration::from_millis(base_ms),
                max_failures,
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1024, ..ProptestConfig::default() })]

    #[test]
    fn backoff_doubles_from_its_base_and_is_capped_by_the_interval(s in settings(), failures in 0u32..=200) {
        let delay = backoff(&s, failures);
        prop_assert!(delay <= s.interval, "{:?} over the interval {:?}", delay, s.interval);
        prop_assert!(delay <= backoff(&s, failures.saturating_add(1)), "shrank after failure {}", failures);
        let doublings = failures.saturating_sub(1).min(30);
        let model = s.retry_base.saturating_mul(1 << doublings).min(s.interval);
        prop_assert_eq!(delay, model);
        if failures <= 1 {
            prop_assert_eq!(delay, s.retry_base.min(s.interval));
        }
    }

    #[test]
    fn jitter_stays_inside_its_clamped_band(base_ms in 0u64..=864_000_000, jitter in -1.0f64..=2.0) {
        let base = Duration::from_millis(base_ms);
        let j = jitter.clamp(0.0, 0.5);
        let got = jittered(base, jitter).as_secs_f64();
        let b = base.as_secs_f64();
        prop_assert!(got >= b * (1.0 - j) - 1e-6 && got <= b * (1.0 + j) + 1e-6,
            "{} outside {} ± {}", got, b, j);
    }
}

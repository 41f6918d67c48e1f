//! Property tests of the SSRF rule on generated addresses: the classes
//! against the ranges they name, IPv4 embedded in IPv6 (mapped, NAT64,
//! 6to4) classed as the IPv4 address it reaches, and the trust table that
//! `ExecPolicy::check_address` applies.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use oap_exec::{classify, trust_permits, AddressClass, Cidr, ExecPolicy, Trust};
use proptest::prelude::*;

fn v4() -> impl Strategy<Value = Ipv4Addr> {
    // Half uniform, half inside the special ranges, so each class is hit.
    prop_oneof![
        any::<u32>().prop_map(Ipv4Addr::from),
        (
            prop::sample::select(vec![
                0u8, 10, 100, 127, 169, 172, 192, 198, 203, 224, 240, 255
            ]),
            any::<[u8; 3]>()
        )
            .prop_map(|(a, [b, c, d])| Ipv4Addr::new(a, b, c, d)),
    ]
}

fn v6() -> impl Strategy<Value = Ipv6Addr> {
    prop_oneof![
        any::<u128>().prop_map(Ipv6Addr::from),
        (
            prop::sample::select(vec![
                0u16, 0x64, 0x100, 0x2001, 0x2002, 0x2a00, 0x3fff, 0xfc00, 0xfd12, 0xfe80, 0xfec0,
                0xff02
            ]),
            any::<u128>()
        )
            .prop_map(|(top, rest)| Ipv6Addr::from((u128::from(top) << 112) | (rest >> 16))),
    ]
}

fn trust() -> impl Strategy<Value = Trust> {
    prop::sample::select(vec![Trust::Local, Trust::Lan, Trust::Internet])
}

/// The ranges the classes are documented to cover.
fn expected_v4(a: Ipv4Addr) -> Option<AddressClass> {
    let o = a.octets();
    Some(match o {
        [10, ..] | [192, 168, ..] => AddressClass::Private,
        [172, b, ..] if (16..32).contains(&b) => AddressClass::Private,
        [127, ..] => AddressClass::Loopback,
        [169, 254, ..] => AddressClass::LinkLocal,
        [100, b, ..] if (64..128).contains(&b) => AddressClass::SharedCgnat,
        [255, 255, 255, 255] => AddressClass::Broadcast,
        [0, ..] => AddressClass::Unspecified,
        [a, ..] if (224..240).contains(&a) => AddressClass::Multicast,
        [192, 0, 2, _] | [198, 51, 100, _] | [203, 0, 113, _] => AddressClass::Reserved,
        [a, ..] if a >= 240 => AddressClass::Reserved,
        [198, b, ..] if b == 18 || b == 19 => AddressClass::Reserved,
        _ => return None,
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2048, ..ProptestConfig::default() })]

    #[test]
    fn ipv4_classes_match_their_ranges(a in v4()) {
        let class = classify(IpAddr::V4(a));
        if let Some(want) = expected_v4(a) {
            prop_assert_eq!(class, want, "{}", a);
        }
        // Global only for what std also calls globally routable unicast.
        if class == AddressClass::Global {
            prop_assert!(!a.is_private() && !a.is_loopback() && !a.is_link_local()
                && !a.is_multicast() && !a.is_broadcast() && !a.is_unspecified()
                && !a.is_documentation(), "{}", a);
        }
    }

    #[test]
    fn ipv4_inside_ipv6_is_classed_as_the_ipv4_it_reaches(a in v4()) {
        let want = classify(IpAddr::V4(a));
        let bits = u128::from(u32::from(a));
        let mapped = IpAddr::V6(a.to_ipv6_mapped());
        let nat64 = IpAddr::V6(Ipv6Addr::from((0x0064_ff9b_u128 << 96) | bits));
        let six_to_four = IpAddr::V6(Ipv6Addr::from((0x2002_u128 << 112) | (bits << 80) | 1));
        prop_assert_eq!(classify(mapped), want, "{}", mapped);
        prop_assert_eq!(classify(nat64), want, "{}", nat64);
        prop_assert_eq!(classify(six_to_four), want, "{}", six_to_four);
    }

    #[test]
    fn ipv6_classes_match_their_ranges(a in v6()) {
        let class = classify(IpAddr::V6(a));
        let top = a.segments()[0];
        if a.to_ipv4_mapped().is_none() && !(top == 0x64 && a.segments()[1] == 0xff9b) && top != 0x2002 {
            if top & 0xfe00 == 0xfc00 { prop_assert_eq!(class, AddressClass::Private, "{}", a); }
            if top & 0xffc0 == 0xfe80 { prop_assert_eq!(class, AddressClass::LinkLocal, "{}", a); }
            if top & 0xff00 == 0xff00 { prop_assert_eq!(class, AddressClass::Multicast, "{}", a); }
            if top == 0x2001 && a.segments()[1] == 0x0db8 { prop_assert_eq!(class, AddressClass::Reserved, "{}", a); }
            if top & 0xe000 != 0x2000 && top & 0xfe00 != 0xfc00 && top & 0xffc0 != 0xfe80 {
                prop_assert_ne!(class, AddressClass::Global, "{} is outside 2000::/3", a);
            }
        }
        if a.is_loopback() { prop_assert_eq!(class, AddressClass::Loopback); }
        if a.is_unspecified() { prop_assert_eq!(class, AddressClass::Unspecified); }
    }

    #[test]
    fn the_trust_table_and_check_address_agree(
        ip in prop_oneof![v4().prop_map(IpAddr::V4), v6().prop_map(IpAddr::V6)],
        trust in trust(),
    ) {
        let class = classify(ip);
        let permitted = trust_permits(trust, class);
        match trust {
            Trust::Local => prop_assert!(permitted),
            Trust::Lan => prop_assert_eq!(permitted, matches!(class, AddressClass::Global | AddressClass::Private)),
            Trust::Internet => prop_assert_eq!(permitted, class == AddressClass::Global),
        }
        // Without allow_private entries, check_address is the table.
        let policy = ExecPolicy::default();
        prop_assert_eq!(policy.check_address(trust, ip).is_ok(), permitted, "{} for {:?}", ip, trust);
        // Loopback, link-local (cloud metadata) and unspecified are never
        // reachable from a remote manifest.
        if matches!(class, AddressClass::Loopback | AddressClass::LinkLocal | AddressClass::Unspecified) {
            prop_assert!(trust == Trust::Local || policy.check_address(trust, ip).is_err());
        }
    }

    #[test]
    fn an_allow_private_entry_opens_exactly_its_range(a in v4(), b in v4(), prefix in 8u8..=32, trust in trust()) {
        let cidr = Cidr::new(IpAddr::V4(a), prefix).unwrap();
        let policy = ExecPolicy { allow_private: vec![cidr], ..ExecPolicy::default() };
        let ip = IpAddr::V4(b);
        let inside = prefix == 0 || (u32::from(a) ^ u32::from(b)) >> (32 - u32::from(prefix)) == 0;
        prop_assert_eq!(cidr.contains(ip), inside);
        let want = trust_permits(trust, classify(ip)) || inside;
        prop_assert_eq!(policy.check_address(trust, ip).is_ok(), want, "{} in {}", b, cidr);
    }
}

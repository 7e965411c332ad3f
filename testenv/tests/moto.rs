//! The Route53 emulator helper: installed by `cargo xtask setup`, started once
//! per test binary on loopback, answering moto's API.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use flotilla_testenv::aws::moto;

#[test]
fn shared_moto_answers_and_resets() {
    let m = moto::shared();
    assert!(m.endpoint.starts_with("http://127.0.0.1:"), "{}", m.endpoint);
    // A second call gives the same server.
    assert_eq!(moto::shared().endpoint, m.endpoint);
    let env = m.aws_env();
    assert!(env.iter().any(|(k, v)| *k == "AWS_ENDPOINT_URL_ROUTE_53" && *v == m.endpoint));
    // The reset on a server of this test's own: resetting the shared one
    // would take the zones of the tests running beside this one.
    let dir = std::env::temp_dir().join(format!("flotilla-moto-reset-{:08x}", rand_suffix()));
    let mut own = moto::MotoServer::start(&dir, flotilla_testenv::cluster::process::Lifetime::DieWithParent)
        .expect("a moto server of its own");
    let port: u16 = own.endpoint.rsplit(':').next().and_then(|p| p.parse().ok()).unwrap_or(0);
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect to moto");
    use std::io::{Read, Write};
    write!(s, "POST /moto-api/reset HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nConnection: close\r\n\r\n").unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    assert!(out.starts_with("HTTP/1.1 200"), "{out}");
    own.reset().expect("reset");
    own.stop();
}

#[test]
fn install_is_idempotent() {
    // Installed by `cargo xtask setup`; a missing moto fails here, saying so.
    if let Err(e) = moto::locate() {
        panic!("{e}");
    }
    let lines = std::sync::Mutex::new(Vec::new());
    let bin = moto::ensure(&|l: &str| lines.lock().unwrap().push(l.to_string())).expect("moto installed");
    assert!(bin.ends_with("bin/moto_server"));
    let lines = lines.into_inner().unwrap();
    assert!(lines.iter().any(|l| l.contains("(cached)")), "{lines:?}");
}

#[test]
fn rest_helpers_create_a_zone_and_list_it() {
    let m = moto::shared();
    let domain = format!("rest-{:08x}.example.com", rand_suffix());
    let zone = moto::route53::create_hosted_zone(&m.endpoint, &domain).expect("zone");
    let sets = moto::route53::list_record_sets(&m.endpoint, &zone).expect("list");
    // A new zone holds its SOA and NS.
    assert!(sets.iter().any(|(n, t, _)| n == &domain && t == "SOA"), "{sets:?}");
    assert!(sets.iter().any(|(n, t, _)| n == &domain && t == "NS"), "{sets:?}");
    assert!(moto::route53::find(&m.endpoint, &zone, &domain, "NS").expect("find").is_some());
    assert!(moto::route53::find(&m.endpoint, &zone, &format!("nope.{domain}"), "A").expect("find").is_none());
}

fn rand_suffix() -> u32 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.subsec_nanos()).unwrap_or(0)
}

/// A batch naming many names is checked against the whole zone read page by
/// page (not a read per name): a CREATE of a name on the zone's last page is
/// refused and a DELETE of one there is accepted, so the pages after the
/// first were read.
/// A fresh zone `<prefix>-<random>.example.com` on the shared moto, and a
/// Route53-faithful proxy in front of it: (domain, zone id, proxy).
fn zone_behind_proxy(prefix: &str) -> (String, String, flotilla_testenv::aws::route53_proxy::Route53Proxy) {
    let m = moto::shared();
    let domain = format!("{prefix}-{:08x}.example.com", rand_suffix());
    let zone = moto::route53::create_hosted_zone(&m.endpoint, &domain).expect("zone");
    let proxy = flotilla_testenv::aws::route53_proxy::Route53Proxy::start(&m.endpoint).expect("proxy");
    (domain, zone, proxy)
}

/// POSTs `(action, record set)` changes to `zone` at `endpoint`: (status, body).
fn post_changes(
    endpoint: &str,
    zone: &str,
    changes: &[(&str, &flotilla_testenv::aws::route53_proxy::xml::Rrset)],
) -> (u16, String) {
    use flotilla_testenv::aws::route53_proxy::xml;
    let changes: Vec<xml::Change> =
        changes.iter().map(|(a, r)| xml::Change { action: a.to_string(), rrset: (*r).clone() }).collect();
    let path = format!("/2013-04-01/hostedzone/{zone}/rrset/");
    moto::route53::call(endpoint, "POST", &path, &xml::change_request(&changes, "test")).expect("call")
}

#[test]
fn the_proxy_checks_a_large_batch_against_every_page_of_the_zone() {
    use flotilla_testenv::aws::route53_proxy::xml;
    let m = moto::shared();
    let (domain, zone, proxy) = zone_behind_proxy("pages");
    let a = |name: &str| xml::Rrset {
        name: format!("{name}.{domain}"),
        rtype: "A".into(),
        ttl: Some(300),
        values: vec!["10.0.0.1".into()],
        ..xml::Rrset::default()
    };
    let batch = |action: &str, names: &[String]| {
        let sets: Vec<xml::Rrset> = names.iter().map(|n| a(n)).collect();
        let changes: Vec<(&str, &xml::Rrset)> = sets.iter().map(|r| (action, r)).collect();
        post_changes(&proxy.endpoint, &zone, &changes)
    };
    // 2,100 record sets: three of the proxy's pages.
    let many: Vec<String> = (0..2100).map(|i| format!("n-{i:04}")).collect();
    for chunk in many.chunks(700) {
        let (status, text) = batch("CREATE", chunk);
        assert_eq!(status, 200, "{text}");
    }
    assert_eq!(moto::route53::list_record_sets(&m.endpoint, &zone).expect("list").len(), 2102);

    // 19 new names and one that exists, on the last page.
    let mut names: Vec<String> = (0..19).map(|i| format!("new-{i:02}")).collect();
    names.push("n-2099".into());
    let (status, text) = batch("CREATE", &names);
    assert_eq!(status, 400, "{text}");
    assert!(text.contains("already exists") && text.contains("n-2099"), "{text}");
    assert!(moto::route53::find(&m.endpoint, &zone, &format!("new-00.{domain}"), "A").expect("find").is_none());

    // Deleting 20 sets spread over every page finds each of them.
    let spread: Vec<String> = (0..20).map(|i| format!("n-{:04}", i * 105)).collect();
    let (status, text) = batch("DELETE", &spread);
    assert_eq!(status, 200, "{text}");
    assert_eq!(moto::route53::list_record_sets(&m.endpoint, &zone).expect("list").len(), 2082);
}

/// A record set created, deleted and created again — an ALIAS switched to
/// a CNAME and back, an A to a CNAME and back — is taken, as Route53 takes
/// it. moto alone refuses the second CREATE ("already exists") whenever
/// any record set sorts after it (here the CNAME at the same name), because
/// its journal still holds the first CREATE; `moto_indexed.py` forgets a
/// CREATE once its record set is deleted.
#[test]
fn a_record_set_created_again_after_its_delete_is_taken() {
    use flotilla_testenv::aws::route53_proxy::xml::{AliasTarget, Rrset};
    let m = moto::shared();
    let domain = format!("again-{:08x}.example.com", rand_suffix());
    let zone = moto::route53::create_hosted_zone(&m.endpoint, &domain).expect("zone");
    let name = format!("web.{domain}");
    let alias = Rrset {
        name: name.clone(),
        rtype: "A".into(),
        alias: Some(AliasTarget {
            zone_id: "Z32O12XQLNTSW2".into(),
            dns_name: "web-1.eu-west-1.elb.amazonaws.com".into(),
            evaluate_target_health: true,
        }),
        ..Rrset::default()
    };
    let cname = Rrset {
        name: name.clone(),
        rtype: "CNAME".into(),
        ttl: Some(300),
        values: vec!["web-1.eu-west-1.elb.amazonaws.com".into()],
        ..Rrset::default()
    };
    // Straight to moto: its own journal is what this is about.
    let send = |changes: &[(&str, &Rrset)]| {
        let (status, text) = post_changes(&m.endpoint, &zone, changes);
        assert_eq!(status, 200, "{text}");
    };
    send(&[("CREATE", &alias)]);
    send(&[("DELETE", &alias), ("CREATE", &cname)]);
    send(&[("DELETE", &cname), ("CREATE", &alias)]);
    assert!(moto::route53::find(&m.endpoint, &zone, &name, "A").expect("find").is_some());
    assert!(moto::route53::find(&m.endpoint, &zone, &name, "CNAME").expect("find").is_none());
}

/// Weighted and failover sets through the proxy, as Route53 keeps them: a
/// set is (name, type, identifier) and keeps its policy when listed;
/// deleting one set leaves the other sets at the name and every other
/// record of the same identifier (moto alone deleted every set of that
/// identifier in the zone; `moto_indexed.py` mends it); a set beside a
/// record of no policy is refused.
#[test]
fn routing_sets_are_kept_and_deleted_one_by_one() {
    use flotilla_testenv::aws::route53_proxy::xml;
    let (domain, zone, proxy) = zone_behind_proxy("sets");
    let set = |name: &str, rtype: &str, id: &str, weight: i64, value: &str| xml::Rrset {
        name: format!("{name}.{domain}"),
        rtype: rtype.into(),
        set_id: Some(id.into()),
        weight: Some(weight),
        ttl: Some(60),
        values: vec![value.into()],
        ..xml::Rrset::default()
    };
    let send = |changes: &[(&str, &xml::Rrset)]| post_changes(&proxy.endpoint, &zone, changes);
    let listed = || {
        let (status, text) = moto::route53::call(
            &proxy.endpoint,
            "GET",
            &format!("/2013-04-01/hostedzone/{zone}/rrset?maxitems=300"),
            "",
        )
        .expect("list");
        assert_eq!(status, 200, "{text}");
        let mut sets: Vec<(String, String, Option<String>, Option<i64>)> = xml::rrsets(&text)
            .into_iter()
            .filter(|r| r.rtype != "SOA" && r.rtype != "NS")
            .map(|r| (r.name.trim_end_matches(&format!(".{domain}")).to_string(), r.rtype, r.set_id, r.weight))
            .collect();
        sets.sort();
        sets
    };
    let (www_a, www_b) = (set("www", "A", "a", 10, "10.0.0.1"), set("www", "A", "b", 0, "10.0.0.2"));
    let (txt_a, api_a) = (set("_o.www", "TXT", "a", 10, "\"a\""), set("api", "A", "a", 1, "10.0.0.3"));
    let (status, text) = send(&[("CREATE", &www_a), ("CREATE", &www_b), ("CREATE", &txt_a), ("CREATE", &api_a)]);
    assert_eq!(status, 200, "{text}");
    let s = |n: &str, t: &str, id: &str, w: i64| (n.to_string(), t.to_string(), Some(id.to_string()), Some(w));
    assert_eq!(
        listed(),
        [s("_o.www", "TXT", "a", 10), s("api", "A", "a", 1), s("www", "A", "a", 10), s("www", "A", "b", 0)]
    );

    let (status, text) = send(&[("DELETE", &www_a)]);
    assert_eq!(status, 200, "{text}");
    assert_eq!(listed(), [s("_o.www", "TXT", "a", 10), s("api", "A", "a", 1), s("www", "A", "b", 0)]);

    let plain = xml::Rrset { set_id: None, weight: None, ..www_a.clone() };
    let (status, text) = send(&[("CREATE", &plain)]);
    assert_eq!(status, 400, "a record of no policy beside a weighted set: {text}");
    assert!(text.contains("routed set"), "{text}");
}

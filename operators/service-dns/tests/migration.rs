//! Switching from external-dns: records in external-dns's exact TXT
//! registry formats (typed `a-`/`cname-` names, the older untyped name, a
//! `--txt-prefix`), adopted for the same Service with
//! `--adopt-external-dns-owner`, everything else left alone; and
//! external-dns's hostname/ttl annotations accepted as aliases.
#![allow(clippy::expect_used, clippy::unwrap_used)]

mod common;

use aws_sdk_route53::types::RrType;
use common::*;
use service_dns::extdns::txt_value;
use service_dns::model::RecordType;

#[tokio::test]
async fn external_dns_records_are_adopted_for_the_same_service_only() {
    let env = flotilla_testenv::shared();
    let client = env.client().await;
    let moto = moto();
    let proxy = faithful(&moto);
    let r53 = route53(&moto.endpoint);
    let (zone, domain) = create_zone(&r53, "adopt").await;
    let ns = env.namespace("adopt").await.expect("namespace");
    grant(&client, &ns, Some(&format!("shop.{domain}, cart.{domain}"))).await;
    let (web, api, other, gone) = (
        format!("kube-web.{domain}"),
        format!("kube-api.{domain}"),
        format!("kube-other.{domain}"),
        format!("kube-gone.{domain}"),
    );
    // What external-dns (owner "ext", --txt-prefix=reg.) left: web with
    // its typed TXT and the older untyped one, api with a typed TXT only;
    // other is another external-dns owner's; gone is a Service that no
    // longer exists here.
    let ext = |resource: &str| txt_value("ext", &format!("service/{ns}/{resource}"));
    put_records(
        &r53,
        &zone,
        &[
            (web.clone(), RrType::A, vec!["192.0.2.10".into()]),
            (format!("reg.a-kube-web.{domain}"), RrType::Txt, vec![ext("web")]),
            (format!("reg.kube-web.{domain}"), RrType::Txt, vec![ext("web")]),
            (api.clone(), RrType::A, vec!["192.0.2.11".into()]),
            (format!("reg.a-kube-api.{domain}"), RrType::Txt, vec![ext("api")]),
            (other.clone(), RrType::A, vec!["192.0.2.12".into()]),
            (
                format!("reg.a-kube-other.{domain}"),
                RrType::Txt,
                vec![txt_value("someone-else", &format!("service/{ns}/other"))],
            ),
            (gone.clone(), RrType::A, vec!["192.0.2.13".into()]),
            (format!("reg.a-kube-gone.{domain}"), RrType::Txt, vec![ext("gone")]),
        ],
    )
    .await;
    let web_svc = create_service(&client, &ns, &service("web", "ClusterIP", &[])).await;
    let api_svc = create_service(&client, &ns, &service("api", "ClusterIP", &[])).await;
    create_service(&client, &ns, &service("other", "ClusterIP", &[])).await;
    // external-dns's own annotations still name the record.
    let aliased = create_service(
        &client,
        &ns,
        &service(
            "aliased",
            "ClusterIP",
            &[
                ("external-dns.alpha.kubernetes.io/hostname", &format!("shop.{domain}")),
                ("external-dns.alpha.kubernetes.io/ttl", "120"),
            ],
        ),
    )
    .await;
    // And those of external-dns v0.22 and later (the prefix without `alpha`).
    let aliased_ga = create_service(
        &client,
        &ns,
        &service(
            "aliased-ga",
            "ClusterIP",
            &[
                ("external-dns.kubernetes.io/hostname", &format!("cart.{domain}")),
                ("external-dns.kubernetes.io/ttl", "90"),
            ],
        ),
    )
    .await;

    let _op = Operator::start(
        &env,
        &proxy.endpoint,
        &[
            zone_args(&zone, &domain),
            vec![
                format!("--watch-namespace={ns}"),
                "--owner-id=flo".into(),
                "--adopt-external-dns-owner=ext".into(),
                "--adopt-external-dns-txt-prefix=reg.".into(),
            ],
        ]
        .concat(),
    );
    wait_record(&r53, &zone, &web, RecordType::A, &[&cluster_ip(&web_svc)]).await;
    wait_record(&r53, &zone, &api, RecordType::A, &[&cluster_ip(&api_svc)]).await;
    let shop = wait_record(&r53, &zone, &format!("shop.{domain}"), RecordType::A, &[&cluster_ip(&aliased)]).await;
    assert_eq!(shop.ttl, 120);
    let cart = wait_record(&r53, &zone, &format!("cart.{domain}"), RecordType::A, &[&cluster_ip(&aliased_ga)]).await;
    assert_eq!(cart.ttl, 90);
    wait_event(&client, &ns, "other", "DnsRecordConflict", &other).await;

    let zone_now = user_records(&r53, &zone).await;
    let has = |name: &str| zone_now.iter().any(|r| &*r.name == name);
    for adopted in [&web, &api] {
        let txt = find(&r53, &zone, &format!("_flotilla-owner.{adopted}"), RecordType::Txt).await.expect("our TXT");
        assert!(txt.values[0].contains("owner=flo"), "{txt:?}");
    }
    for removed in
        [format!("reg.a-kube-web.{domain}"), format!("reg.kube-web.{domain}"), format!("reg.a-kube-api.{domain}")]
    {
        assert!(!has(&removed), "external-dns's {removed} removed with the takeover: {zone_now:?}");
    }
    // Left alone: another owner's name, and a name no Service here wants.
    for (name, ip) in [(&other, "192.0.2.12"), (&gone, "192.0.2.13")] {
        assert_eq!(find(&r53, &zone, name, RecordType::A).await.map(|r| values(&r)), Some(vec![ip.to_string()]));
    }
    assert!(has(&format!("reg.a-kube-other.{domain}")) && has(&format!("reg.a-kube-gone.{domain}")));
    assert!(!has(&format!("_flotilla-owner.{other}")) && !has(&format!("_flotilla-owner.{gone}")));
}

//! `CopyRequest` against a real control plane (issue 31, "Pull, with
//! consent on both sides"): a copy is made in the request's namespace only
//! while the source's owner allows that namespace (annotation
//! `flotilla.dev/allow-pull-to`), kept in sync, and pruned when the
//! permission or the request goes; an object in the way is never
//! overwritten; a source that does not exist and one that does not allow
//! the namespace read the same; and an attacker's request for a protected
//! namespace's Secret copies nothing.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeMap;

use common::*;
use config_copier::crd::CopyRequest;
use flotilla_testenv::wait_for;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::json;

const ALLOW: &str = "flotilla.dev/allow-pull-to";
const REQUEST_LABEL: &str = "flotilla.dev/copy-request";

async fn annotate(client: &Client, ns: &str, name: &str, value: Option<&str>) {
    Api::<ConfigMap>::namespaced(client.clone(), ns)
        .patch(name, &PatchParams::default(), &Patch::Merge(json!({"metadata": {"annotations": {ALLOW: value}}})))
        .await
        .unwrap();
}

/// A ConfigMap `name` in `ns` whose owner allows pulls into `allow` (if any).
async fn offered(client: &Client, ns: &str, name: &str, allow: Option<&str>, data: &[(&str, &str)]) {
    configmap(client, ns, name, &[], data).await;
    if allow.is_some() {
        annotate(client, ns, name, allow).await;
    }
}

async fn request(client: &Client, ns: &str, name: &str, source: serde_json::Value) {
    let r: CopyRequest = serde_json::from_value(json!({
        "apiVersion": "flotilla.dev/v1alpha1", "kind": "CopyRequest",
        "metadata": {"name": name, "namespace": ns},
        "spec": source,
    }))
    .unwrap();
    Api::<CopyRequest>::namespaced(client.clone(), ns).create(&PostParams::default(), &r).await.unwrap();
}

/// Requests served per namespace by this binary's operator: few, so that
/// the limit's test needs few.
const LIMIT: usize = 3;

/// [`setup`], the operator started with `--max-requests-per-namespace` [`LIMIT`].
async fn setup_limited(prefix: &str) -> (Client, String) {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| OPERATOR_ENV.lock().unwrap().push(("MAX_REQUESTS_PER_NAMESPACE", LIMIT.to_string())));
    setup(prefix).await
}

fn ready(r: &CopyRequest) -> Option<(&str, &str, &str)> {
    let c = r.status.as_ref()?.conditions.iter().find(|c| c.type_ == "Ready")?;
    Some((c.status.as_str(), c.reason.as_str(), c.message.as_str()))
}

async fn wait_request(client: &Client, ns: &str, name: &str, check: impl Fn(&CopyRequest) -> bool) -> CopyRequest {
    let api: Api<CopyRequest> = Api::namespaced(client.clone(), ns);
    let check = &check;
    wait_for(&format!("CopyRequest {ns}/{name}"), T, || {
        let api = api.clone();
        async move { Ok::<_, kube::Error>(api.get_opt(name).await?.filter(|r| check(r))) }
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\noperator log tail:\n{}", log_tail()))
}

async fn wait_reason(client: &Client, ns: &str, name: &str, reason: &str) -> CopyRequest {
    wait_request(client, ns, name, |r| ready(r).is_some_and(|(_, why, _)| why == reason)).await
}

/// An allowed pull copies the source into the request's namespace (under
/// spec.name when set), says so, and follows the source's changes and
/// hand edits of the copy.
#[tokio::test]
async fn an_allowed_pull_is_copied_and_kept_in_sync() {
    let (client, team) = setup_limited("creq-team").await;
    let app = target("creq-app").await;
    offered(&client, &team, "ca", Some(&format!("other-ns, {}*", &app[..app.len() - 3])), &[("ca.crt", "pem-1")]).await;
    request(&client, &app, "ca", json!({"source": {"kind": "ConfigMap", "namespace": team, "name": "ca"}})).await;
    let copy = wait_cm(&client, &app, "ca", |c| data(c, "ca.crt") == Some("pem-1")).await;
    assert_eq!(label(&copy.metadata, REQUEST_LABEL), Some(format!("{app}.ca").as_str()));
    let annotations = copy.metadata.annotations.clone().unwrap_or_default();
    assert!(!annotations.contains_key(ALLOW), "the copy does not offer itself on: {annotations:?}");
    let r = wait_request(&client, &app, "ca", |r| ready(r).is_some_and(|(s, _, _)| s == "True")).await;
    assert_eq!(r.status.unwrap().copy.as_deref(), Some("ca"));

    // The source changes: the copy follows.
    Api::<ConfigMap>::namespaced(client.clone(), &team)
        .patch("ca", &PatchParams::default(), &Patch::Merge(json!({"data": {"ca.crt": "pem-2"}})))
        .await
        .unwrap();
    wait_cm(&client, &app, "ca", |c| data(c, "ca.crt") == Some("pem-2")).await;
    // A hand edit of the copy is repaired, a key added by hand removed.
    Api::<ConfigMap>::namespaced(client.clone(), &app)
        .patch("ca", &PatchParams::default(), &Patch::Merge(json!({"data": {"ca.crt": "forged", "extra": "x"}})))
        .await
        .unwrap();
    wait_cm(&client, &app, "ca", |c| data(c, "ca.crt") == Some("pem-2") && data(c, "extra").is_none()).await;

    // A Secret, under a local name.
    let s = Secret {
        metadata: kube::api::ObjectMeta {
            name: Some("db".into()),
            annotations: Some(BTreeMap::from([(ALLOW.to_string(), app.clone())])),
            ..Default::default()
        },
        data: Some(BTreeMap::from([("password".to_string(), ByteString(b"s3cret".to_vec()))])),
        ..Default::default()
    };
    Api::<Secret>::namespaced(client.clone(), &team).create(&PostParams::default(), &s).await.unwrap();
    request(
        &client,
        &app,
        "db",
        json!({"source": {"kind": "Secret", "namespace": team, "name": "db"}, "name": "team-db"}),
    )
    .await;
    wait_secret(&client, &app, "team-db", |s| {
        s.data.as_ref().and_then(|d| d.get("password")).is_some_and(|p| p.0 == b"s3cret")
    })
    .await;
}

/// Not allowed: nothing is copied, Ready=False NotAllowed with a Warning;
/// and the requester cannot tell a source that exists but does not allow
/// it from one that does not exist (same reason, same message).
#[tokio::test]
async fn a_pull_not_allowed_copies_nothing_and_reads_as_an_absent_source() {
    let (client, team) = setup_limited("creq-deny-team").await;
    let app = target("creq-deny-app").await;
    offered(&client, &team, "only-for-others", Some("someone-else"), &[("k", "v")]).await;
    offered(&client, &team, "unannotated", None, &[("k", "v")]).await;
    for (req, source) in [("others", "only-for-others"), ("plain", "unannotated"), ("absent", "no-such-object")] {
        let spec = json!({"source": {"kind": "ConfigMap", "namespace": team, "name": source}, "name": "copy"});
        request(&client, &app, req, spec).await;
    }
    let mut said = Vec::new();
    for (req, source) in [("others", "only-for-others"), ("plain", "unannotated"), ("absent", "no-such-object")] {
        let r = wait_reason(&client, &app, req, "NotAllowed").await;
        let (status, _, message) = ready(&r).unwrap();
        assert_eq!(status, "False");
        said.push(message.replace(source, "<name>"));
        wait_event(&client, &app, req, "NotAllowed").await;
    }
    assert!(said.windows(2).all(|w| w[0] == w[1]), "the requester can tell them apart: {said:?}");
    assert_cm_absent(&client, &app, "copy").await;
}

/// The source's owner withdraws the permission: the copy is pruned.
#[tokio::test]
async fn a_withdrawn_permission_prunes_the_copy() {
    let (client, team) = setup_limited("creq-withdraw-team").await;
    let app = target("creq-withdraw-app").await;
    offered(&client, &team, "cfg", Some(&app), &[("k", "v")]).await;
    request(&client, &app, "cfg", json!({"source": {"kind": "ConfigMap", "namespace": team, "name": "cfg"}})).await;
    wait_cm(&client, &app, "cfg", |c| data(c, "k") == Some("v")).await;
    annotate(&client, &team, "cfg", None).await;
    wait_cm_gone(&client, &app, "cfg").await;
    wait_reason(&client, &app, "cfg", "NotAllowed").await;
    // Allowed again: copied again.
    annotate(&client, &team, "cfg", Some("*")).await;
    wait_cm(&client, &app, "cfg", |c| data(c, "k") == Some("v")).await;
}

/// The request is deleted: its copy is pruned, and the request goes.
#[tokio::test]
async fn a_deleted_request_prunes_its_copy() {
    let (client, team) = setup_limited("creq-delete-team").await;
    let app = target("creq-delete-app").await;
    offered(&client, &team, "cfg", Some(&app), &[("k", "v")]).await;
    request(&client, &app, "cfg", json!({"source": {"kind": "ConfigMap", "namespace": team, "name": "cfg"}})).await;
    wait_cm(&client, &app, "cfg", |c| data(c, "k") == Some("v")).await;
    let requests: Api<CopyRequest> = Api::namespaced(client.clone(), &app);
    requests.delete("cfg", &DeleteParams::default()).await.unwrap();
    wait_cm_gone(&client, &app, "cfg").await;
    wait_for("the request to be gone", T, || {
        let requests = requests.clone();
        async move { Ok::<_, kube::Error>(requests.get_opt("cfg").await?.is_none().then_some(())) }
    })
    .await
    .unwrap();
    // The source is untouched.
    let src = Api::<ConfigMap>::namespaced(client.clone(), &team).get("cfg").await.unwrap();
    assert_eq!(data(&src, "k"), Some("v"));
}

/// An object of the copy's name that the request did not make is never
/// overwritten nor deleted: Ready=False Conflict, with a Warning.
#[tokio::test]
async fn an_object_in_the_way_is_left_alone() {
    let (client, team) = setup_limited("creq-conflict-team").await;
    let app = target("creq-conflict-app").await;
    offered(&client, &team, "cfg", Some(&app), &[("k", "from the source")]).await;
    configmap(&client, &app, "cfg", &[], &[("k", "mine")]).await;
    request(&client, &app, "cfg", json!({"source": {"kind": "ConfigMap", "namespace": team, "name": "cfg"}})).await;
    wait_reason(&client, &app, "cfg", "Conflict").await;
    wait_event(&client, &app, "cfg", "Conflict").await;
    // Deleting the request leaves it alone too.
    Api::<CopyRequest>::namespaced(client.clone(), &app).delete("cfg", &DeleteParams::default()).await.unwrap();
    let requests: Api<CopyRequest> = Api::namespaced(client.clone(), &app);
    wait_for("the request to be gone", T, || {
        let requests = requests.clone();
        async move { Ok::<_, kube::Error>(requests.get_opt("cfg").await?.is_none().then_some(())) }
    })
    .await
    .unwrap();
    let cm = Api::<ConfigMap>::namespaced(client.clone(), &app).get("cfg").await.unwrap();
    assert_eq!(data(&cm, "k"), Some("mine"));
    assert_eq!(label(&cm.metadata, REQUEST_LABEL), None);
}

/// The attack: a tenant asks for a protected namespace's Secret (the
/// operator's own namespace, kube-system), whose annotation even says
/// "everyone". Refused exactly as an absent source is, and nothing is
/// copied. And a request placed in a protected namespace writes nothing
/// there.
#[tokio::test]
async fn a_request_for_a_protected_namespace_secret_is_refused() {
    let (client, attacker) = setup_limited("creq-attacker").await;
    let name = format!("creq-loot-{}", rand_suffix());
    for ns in [OPERATOR_NAMESPACE, "kube-system"] {
        let s = Secret {
            metadata: kube::api::ObjectMeta {
                name: Some(name.clone()),
                annotations: Some(BTreeMap::from([(ALLOW.to_string(), "*".to_string())])),
                ..Default::default()
            },
            data: Some(BTreeMap::from([("key".to_string(), ByteString(b"crown-jewels".to_vec()))])),
            ..Default::default()
        };
        Api::<Secret>::namespaced(client.clone(), ns).create(&PostParams::default(), &s).await.unwrap();
    }
    let absent = format!("{name}-absent");
    for (req, ns, source) in
        [("op", OPERATOR_NAMESPACE, &name), ("sys", "kube-system", &name), ("none", "kube-system", &absent)]
    {
        let spec =
            json!({"source": {"kind": "Secret", "namespace": ns, "name": source}, "name": format!("loot-{req}")});
        request(&client, &attacker, req, spec).await;
    }
    let mut said = Vec::new();
    for (req, source) in [("op", &name), ("sys", &name), ("none", &absent)] {
        let r = wait_reason(&client, &attacker, req, "NotAllowed").await;
        said.push(
            ready(&r)
                .unwrap()
                .2
                .replace(OPERATOR_NAMESPACE, "<ns>")
                .replace("kube-system", "<ns>")
                .replace(source.as_str(), "<name>"),
        );
    }
    assert!(said.windows(2).all(|w| w[0] == w[1]), "a protected Secret's existence shows: {said:?}");
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &attacker);
    for req in ["op", "sys", "none"] {
        assert!(
            secrets.get_opt(&format!("loot-{req}")).await.unwrap().is_none(),
            "{req}: a protected Secret was copied"
        );
    }

    // A request in a protected namespace pulling an allowed source: nothing written there.
    let (_, team) = (client.clone(), target("creq-protected-team").await);
    offered(&client, &team, &name, Some("*"), &[("k", "v")]).await;
    request(
        &client,
        OPERATOR_NAMESPACE,
        &name,
        json!({"source": {"kind": "ConfigMap", "namespace": team, "name": name}}),
    )
    .await;
    wait_reason(&client, OPERATOR_NAMESPACE, &name, "ProtectedNamespace").await;
    assert_cm_absent(&client, OPERATOR_NAMESPACE, &name).await;
    for ns in [OPERATOR_NAMESPACE, "kube-system"] {
        let _ = Api::<Secret>::namespaced(client.clone(), ns).delete(&name, &DeleteParams::default()).await;
    }
    let _ = Api::<CopyRequest>::namespaced(client.clone(), OPERATOR_NAMESPACE)
        .delete(&name, &DeleteParams::default())
        .await;
}

/// One namespace's requests past `--max-requests-per-namespace` wait: the
/// oldest are served, the next is Ready=False TooManyRequests (with a
/// Warning) and nothing is read or written for it, and it is served as soon
/// as a served request of its namespace goes.
#[tokio::test]
async fn a_namespace_past_its_request_limit_waits_its_turn() {
    let (client, team) = setup_limited("creq-limit-team").await;
    let app = target("creq-limit-app").await;
    for i in 0..=LIMIT {
        offered(&client, &team, &format!("cfg-{i}"), Some(&app), &[("k", "v")]).await;
    }
    // Created in order; within a second, the names keep that order.
    for i in 0..=LIMIT {
        let source = json!({"source": {"kind": "ConfigMap", "namespace": team, "name": format!("cfg-{i}")}});
        request(&client, &app, &format!("r-{i}"), source).await;
    }
    for i in 0..LIMIT {
        wait_cm(&client, &app, &format!("cfg-{i}"), |c| data(c, "k") == Some("v")).await;
    }
    let last = format!("r-{LIMIT}");
    let waiting = wait_reason(&client, &app, &last, "TooManyRequests").await;
    let (_, _, message) = ready(&waiting).unwrap();
    assert!(message.contains(&format!("more than {LIMIT} CopyRequests")), "{message}");
    wait_event(&client, &app, &last, "TooManyRequests").await;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &app);
    assert!(cms.get_opt(&format!("cfg-{LIMIT}")).await.unwrap().is_none(), "a waiting request made its copy");

    // The reconciles its own status write caused are over (they come within
    // a second): what serves it next is the wake when a served request goes.
    tokio::time::sleep(std::time::Duration::from_secs(3)).await;
    // A served request goes: the waiting one is served.
    Api::<CopyRequest>::namespaced(client.clone(), &app).delete("r-0", &DeleteParams::default()).await.unwrap();
    wait_cm_gone(&client, &app, "cfg-0").await;
    wait_cm(&client, &app, &format!("cfg-{LIMIT}"), |c| data(c, "k") == Some("v")).await;
    wait_reason(&client, &app, &last, "Copied").await;
}

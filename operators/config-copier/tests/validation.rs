//! CopyRule admission on the test control plane for what `spec.target`
//! can get wrong and the schema can know (issue 31): a name together with
//! a prefix or suffix, a name for several listed sources, a prefix or
//! suffix that would make an invalid object name, names over 253
//! characters. The rules a correct spec writes are accepted. (What only
//! the operator can know — a selector matching several sources — is in
//! `copy_names.rs`.)
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use flotilla_testenv::shared;
use serde_json::{Value, json};

fn rejected(r: Result<Value, kube::Error>, what: &str) -> String {
    match r {
        Err(kube::Error::Api(s)) if s.code == 422 => s.message,
        other => panic!("{what} was not rejected at admission: {other:?}"),
    }
}

#[tokio::test]
async fn admission_rejects_copy_names_that_cannot_be() {
    let env = shared();
    OPERATOR.install_crds(&env).await;
    let client = env.client().await;
    let ns = env.namespace("cc-names-admission").await.unwrap();
    let spec =
        |target: Value| json!({"kind": "ConfigMap", "selector": {"matchLabels": {"copy": "yes"}}, "target": target});
    let listed = |names: Value, target: Value| json!({"kind": "ConfigMap", "names": names, "target": target});
    let long = "a".repeat(200);
    let cases = [
        ("name with a prefix", spec(json!({"name": "x", "namePrefix": "p-"})), "mutually exclusive"),
        ("name with a suffix", spec(json!({"name": "x", "nameSuffix": "-s"})), "mutually exclusive"),
        ("name for two listed sources", listed(json!(["a", "b"]), json!({"name": "x"})), "at most one source name"),
        ("an invalid name", spec(json!({"name": "Not_A_Name"})), "spec.target.name"),
        ("a prefix with capitals", spec(json!({"namePrefix": "Team-"})), "spec.target.namePrefix"),
        ("a prefix ending '-.'", spec(json!({"namePrefix": "team-."})), "spec.target.namePrefix"),
        ("a prefix starting '-'", spec(json!({"namePrefix": "-team"})), "spec.target.namePrefix"),
        ("a suffix ending '-'", spec(json!({"nameSuffix": "-team-"})), "spec.target.nameSuffix"),
        ("an empty prefix", spec(json!({"namePrefix": ""})), "spec.target.namePrefix"),
        (
            "prefix and suffix leaving no room",
            spec(json!({"namePrefix": format!("{long}-"), "nameSuffix": format!("-{}", "b".repeat(60))})),
            "leave room",
        ),
        (
            "a listed source's copy name over 253",
            listed(json!([format!("{long}.x")]), json!({"namePrefix": format!("{}-", "p".repeat(60))})),
            "at most 253",
        ),
    ];
    for (i, (what, spec, expect)) in cases.into_iter().enumerate() {
        let msg = rejected(raw_rule(&client, &ns, &format!("bad-{i}"), spec).await, what);
        assert!(msg.contains(expect), "{what}: {msg}");
    }
    // What a correct spec writes passes, up to exactly 253 characters.
    let good = [
        listed(json!([format!("{long}.x")]), json!({"namePrefix": format!("{}-", "p".repeat(50))})),
        spec(json!({"namePrefix": "team-a-"})),
        spec(json!({"namePrefix": "team-a."})),
        spec(json!({"nameSuffix": "-team-a"})),
        spec(json!({"namePrefix": "team-a--", "nameSuffix": ".v1"})),
        spec(json!({"name": "platform-ca"})),
        listed(json!(["ca-crt"]), json!({"name": "platform-ca"})),
        listed(json!(["a", "b"]), json!({"namePrefix": "p-"})),
        spec(json!({})),
    ];
    for (i, spec) in good.into_iter().enumerate() {
        let ok = raw_rule(&client, &ns, &format!("good-{i}"), spec.clone()).await;
        assert!(ok.is_ok(), "{spec} was refused: {ok:?}");
    }
}

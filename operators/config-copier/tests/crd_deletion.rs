//! Issue 27: deleting the CopyRule CRD prunes nothing the README does not
//! warn about ("Deleting the CopyRule CRD"): while the operator runs, the
//! copies of `prune: true` rules go, those of `prune: false` rules stay,
//! and nothing else is touched — not the sources, not an object of the
//! same name in a namespace no rule copied into. The CRD's deletion
//! completes (the operator removes its finalizers). Its own test binary:
//! the CRD is gone for a while, which the other suites must not see.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Api;
use serde_json::json;

#[tokio::test]
async fn deleting_the_crd_prunes_only_the_copies_of_prune_true_rules() {
    let env = flotilla_testenv::shared();
    let (client, src) = setup("crddel-src").await;
    let dst = target("crddel-dst").await;
    let untouched = target("crddel-other").await;
    configmap(&client, &src, "pruned", &[("copy", "yes"), ("set", "a")], &[("k", "a")]).await;
    configmap(&client, &src, "kept", &[("copy", "yes"), ("set", "b")], &[("k", "b")]).await;
    // Same name as a copy, in a namespace no rule copies into.
    configmap(&client, &untouched, "pruned", &[], &[("k", "someone else's")]).await;
    let by_set = |set: &str| json!({"kind": "ConfigMap", "selector": {"matchLabels": {"copy": "yes", "set": set}}, "namespaces": {"include": [dst]}});
    rule(&client, &src, "prunes", by_set("a")).await.unwrap();
    let mut keeps = by_set("b");
    keeps["prune"] = json!(false);
    rule(&client, &src, "keeps", keeps).await.unwrap();
    wait_cm(&client, &dst, "pruned", |_| true).await;
    wait_cm(&client, &dst, "kept", |_| true).await;

    let crds: Api<CustomResourceDefinition> = Api::all(env.client().await);
    crds.delete("copyrules.flotilla.dev", &Default::default()).await.unwrap();
    flotilla_testenv::wait_for("the CRD to be gone (its rules' finalizers removed)", T * 3, || {
        let crds = crds.clone();
        async move { Ok::<_, kube::Error>(crds.get_opt("copyrules.flotilla.dev").await?.is_none().then_some(())) }
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\noperator log tail:\n{}", log_tail()));

    wait_cm_gone(&client, &dst, "pruned").await;
    let kept = Api::<ConfigMap>::namespaced(client.clone(), &dst).get("kept").await.unwrap();
    assert_eq!(data(&kept, "k"), Some("b"), "a prune: false rule's copy stays");
    for (ns, name, value) in [(&src, "pruned", "a"), (&src, "kept", "b"), (&untouched, "pruned", "someone else's")] {
        let cm = Api::<ConfigMap>::namespaced(client.clone(), ns).get(name).await.unwrap();
        assert_eq!(data(&cm, "k"), Some(value), "{ns}/{name} touched");
    }
    // Back for the suites that run after this one.
    OPERATOR.install_crds(&env).await;
}

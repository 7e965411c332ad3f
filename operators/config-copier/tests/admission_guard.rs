//! Issue 27's attack on a missing admission policy: the CopyRule policy is
//! what lets only cluster admins write `onConflict: Overwrite` or a rule
//! without an explicit list of target names. Rendered without it (an older
//! cluster, a GitOps render without the API, a deleted policy), any rule
//! author had those powers. With `REQUIRE_ADMISSION_POLICY` (the chart's
//! `--require-admission-policy`) the operator refuses them while the policy
//! or its binding is missing, and grants them again once both are back.
//! Its own test binary: the operator here runs with settings the other
//! suites must not see. The settings go as environment variables, so the
//! same test runs against an older build (`CONFIG_COPIER_TEST_BINARY`),
//! which ignores them — and overwrites at once.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use serde_json::json;

const POLICY: &str = "test-config-copier-copyrules";

#[tokio::test]
async fn overwrite_and_open_target_lists_are_refused_while_the_policy_is_missing() {
    OPERATOR_ENV.lock().unwrap().extend([
        ("REQUIRE_ADMISSION_POLICY", POLICY.to_string()),
        ("ADMISSION_POLICY_CHECK_INTERVAL", "1s".to_string()),
    ]);
    let (client, src) = setup("guard-src").await;
    let dst =
        namespace(&client, &format!("guard-dst-{}", rand_suffix()), &[("flotilla.dev/accept-overwrite", "true")]).await;
    configmap(&client, &src, "settings", &[("copy", "yes")], &[("mode", "from-the-rule")]).await;
    configmap(&client, &src, "plain", &[("plain", "yes")], &[("k", "v")]).await;
    // The victim: someone else's ConfigMap of the same name in the target.
    configmap(&client, &dst, "settings", &[], &[("mode", "the-owners")]).await;

    copy_rule(&client, &src, "overwrite", "ConfigMap", &[&dst], json!({"onConflict": "Overwrite"})).await;
    // A rule that asks for no guarded power goes on meanwhile.
    rule(
        &client,
        &src,
        "plain",
        json!({"kind": "ConfigMap", "selector": {"matchLabels": {"plain": "yes"}}, "namespaces": {"include": [dst]}}),
    )
    .await
    .unwrap();
    wait_cm(&client, &dst, "plain", |_| true).await;

    let refused = wait_rule(&client, &src, "overwrite", |r| {
        condition(r, "Ready").is_some_and(|c| c.status == "False" && c.reason == "AdmissionPolicyMissing")
    })
    .await;
    let message = &condition(&refused, "Ready").unwrap().message;
    assert!(message.contains("onConflict: Overwrite") && message.contains(POLICY), "{message}");
    wait_event(&client, &src, "overwrite", "AdmissionPolicyMissing").await;
    let victim = Api::<ConfigMap>::namespaced(client.clone(), &dst).get("settings").await.unwrap();
    assert_eq!(data(&victim, "mode"), Some("the-owners"), "overwritten while the policy was missing");

    // The policy and a denying binding come (back): the rule is honoured.
    flotilla_testenv::admission_policy::install(&client, POLICY, "flotilla.dev", &["copyrules"]).await.unwrap();
    wait_cm(&client, &dst, "settings", |cm| data(cm, "mode") == Some("from-the-rule")).await;
    flotilla_testenv::admission_policy::remove(&client, POLICY).await;
}

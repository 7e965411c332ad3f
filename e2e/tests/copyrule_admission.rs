//! The config-copier chart's ValidatingAdmissionPolicy and CopyRule
//! ClusterRoles (issue 14), on the real API server (RBAC, aggregation,
//! ValidatingAdmissionPolicy GA): a namespace user given `edit` writes
//! CopyRules that target explicitly named namespaces, is refused
//! `onConflict: Overwrite` and rules without a list of names, and may
//! write them once granted `flotilla-copyrule-admin`. Requests are made as
//! that user by impersonation.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::time::Duration;

use flotilla_e2e::{apply_chart_template, apply_crds};
use flotilla_testenv::{shared, wait_for};
use k8s_openapi::api::rbac::v1::RoleBinding;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, PostParams};
use kube::{Api, Client};
use serde_json::{Value, json};

fn copyrules(client: &Client, ns: &str) -> Api<DynamicObject> {
    let ar = ApiResource::from_gvk(&GroupVersionKind::gvk("flotilla.dev", "v1alpha1", "CopyRule"));
    Api::namespaced_with(client.clone(), ns, &ar)
}

fn rule(name: &str, spec: Value) -> DynamicObject {
    serde_json::from_value(
        json!({"apiVersion": "flotilla.dev/v1alpha1", "kind": "CopyRule", "metadata": {"name": name}, "spec": spec}),
    )
    .unwrap()
}

/// Applies the chart's access objects (roles, policy, binding) as rendered.
async fn apply_chart_access(admin: &Client) {
    let kinds = apply_chart_template(admin, "config-copier", "vap", "templates/copyrule-access.yaml").await.unwrap();
    assert_eq!(
        kinds,
        ["ClusterRole", "ClusterRole", "ClusterRole", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"]
    );
}

async fn bind(admin: &Client, ns: &str, user: &str, cluster_role: &str) {
    let rb: RoleBinding = serde_json::from_value(json!({
        "metadata": {"name": format!("{user}-{cluster_role}")},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": cluster_role},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}]
    }))
    .unwrap();
    Api::<RoleBinding>::namespaced(admin.clone(), ns).create(&PostParams::default(), &rb).await.unwrap();
}

fn refused(r: Result<DynamicObject, kube::Error>, what: &str) -> String {
    match r {
        Err(kube::Error::Api(s)) if s.code == 403 || s.code == 422 => s.message,
        other => panic!("{what} was not refused: {other:?}"),
    }
}

#[tokio::test]
async fn only_copyrule_admins_write_overwrite_or_unlisted_rules() {
    let env = shared();
    let admin = env.client().await;
    apply_crds(&admin).await.unwrap();
    apply_chart_access(&admin).await;
    let ns = env.namespace("vap").await.unwrap();
    let user = format!("alice-{ns}");
    bind(&admin, &ns, &user, "edit").await;
    let alice = env.impersonating(&user, &["system:authenticated"]).await.unwrap();
    let rules = copyrules(&alice, &ns);
    let named = json!({"kind": "ConfigMap", "selector": {}, "namespaces": {"include": ["team-b"]}});

    // `edit` carries CopyRules once the aggregation controller has run, and
    // the policy applies once the API server has loaded it.
    wait_for("edit to carry copyrules and the policy to apply", Duration::from_secs(60), || {
        let rules = rules.clone();
        async move {
            let probe = rule("probe", json!({"kind": "ConfigMap", "selector": {}}));
            match rules.create(&PostParams::default(), &probe).await {
                Err(kube::Error::Api(s)) if s.message.contains("flotilla-copyrule-admin") => Ok::<_, String>(Some(())),
                Err(kube::Error::Api(s)) if s.code == 403 => Ok(None),
                Ok(_) => {
                    let _ = rules.delete("probe", &Default::default()).await;
                    Ok(None)
                }
                Err(e) => Err(e.to_string()),
            }
        }
    })
    .await
    .unwrap();

    rules.create(&PostParams::default(), &rule("named", named.clone())).await.unwrap();
    let mut overwrite = named.clone();
    overwrite["onConflict"] = json!("Overwrite");
    let msg = refused(rules.create(&PostParams::default(), &rule("overwrite", overwrite.clone())).await, "Overwrite");
    assert!(msg.contains("flotilla-copyrule-admin"), "{msg}");
    let glob = json!({"kind": "ConfigMap", "selector": {}, "namespaces": {"include": ["team-*"]}});
    refused(rules.create(&PostParams::default(), &rule("glob", glob)).await, "a glob");
    let selector =
        json!({"kind": "ConfigMap", "selector": {}, "namespaces": {"selector": {"matchLabels": {"a": "b"}}}});
    refused(rules.create(&PostParams::default(), &rule("selector", selector)).await, "a namespace selector");
    // Turning an allowed rule into an Overwrite one is refused too.
    let mut existing = rules.get("named").await.unwrap();
    existing.data["spec"]["onConflict"] = json!("Overwrite");
    refused(rules.replace("named", &PostParams::default(), &existing).await, "an update to Overwrite");

    bind(&admin, &ns, &user, "flotilla-copyrule-admin").await;
    wait_for("the admin grant to apply", Duration::from_secs(30), || {
        let rules = rules.clone();
        let overwrite = overwrite.clone();
        async move {
            match rules.create(&PostParams::default(), &rule("overwrite", overwrite)).await {
                Ok(_) => Ok::<_, String>(Some(())),
                Err(kube::Error::Api(s)) if s.code == 403 || s.code == 422 => Ok(None),
                Err(e) => Err(e.to_string()),
            }
        }
    })
    .await
    .unwrap();
    rules
        .create(&PostParams::default(), &rule("everywhere", json!({"kind": "ConfigMap", "selector": {}})))
        .await
        .unwrap();
}

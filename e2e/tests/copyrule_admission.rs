//! The config-copier chart's ValidatingAdmissionPolicy and CopyRule
//! ClusterRoles (issues 14 and 27), on the real API server (RBAC,
//! aggregation, ValidatingAdmissionPolicy GA): a namespace user given `edit`
//! writes CopyRules that target explicitly named namespaces, is refused
//! `onConflict: Overwrite` and rules without a list of names — also when
//! granted `flotilla-copyrule-admin` in their namespace only, or every verb
//! on everything there — and may write them once granted it cluster-wide.
//! Nobody copies what they cannot read: a rule needs get and list on its
//! kind in its namespace; nobody pulls what they could not make: a
//! CopyRequest needs create on its kind in its namespace (issue 31).
//! Requests are made as that user by impersonation.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::time::Duration;

use flotilla_e2e::access::{bind, create_settled, grant};
use flotilla_e2e::{apply_chart_template, apply_crds};
use flotilla_testenv::{shared, wait_for};
use k8s_openapi::api::authorization::v1::SubjectAccessReview;
use k8s_openapi::api::rbac::v1::ClusterRoleBinding;
use kube::api::{ApiResource, DeleteParams, DynamicObject, GroupVersionKind, PostParams};
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

/// Binds `cluster_role` to `user` cluster-wide; returns the binding's name (the caller deletes it).
async fn bind_cluster_wide(admin: &Client, user: &str, cluster_role: &str) -> String {
    let name = format!("{user}-{cluster_role}");
    let crb: ClusterRoleBinding = serde_json::from_value(json!({
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": cluster_role},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}]
    }))
    .unwrap();
    Api::<ClusterRoleBinding>::all(admin.clone()).create(&PostParams::default(), &crb).await.unwrap();
    name
}

/// Whether the authorizer says `user` may `verb` `group/resource` in `ns`
/// (a positive signal that a grant took effect before asserting a refusal).
async fn may(admin: &Client, user: &str, ns: &str, group: &str, resource: &str, verb: &str) -> bool {
    let review: SubjectAccessReview = serde_json::from_value(json!({
        "spec": {"user": user, "groups": ["system:authenticated"],
                 "resourceAttributes": {"namespace": ns, "group": group, "resource": resource, "verb": verb}}
    }))
    .unwrap();
    let done = Api::<SubjectAccessReview>::all(admin.clone()).create(&PostParams::default(), &review).await.unwrap();
    done.status.is_some_and(|s| s.allowed)
}

/// Waits until the policy is loaded: a rule without names is refused as
/// needing flotilla-copyrule-admin (also waits for `rules` to be writable).
async fn wait_for_policy(rules: &Api<DynamicObject>) {
    wait_for("copyrules to be writable and the policy to apply", Duration::from_secs(60), || {
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
    bind(&admin, &ns, &user, "ClusterRole", "edit").await;
    let alice = env.impersonating(&user, &["system:authenticated"]).await.unwrap();
    let rules = copyrules(&alice, &ns);
    let named = json!({"kind": "ConfigMap", "selector": {}, "namespaces": {"include": ["team-b"]}});

    // `edit` carries CopyRules once the aggregation controller has run, and
    // the policy applies once the API server has loaded it.
    wait_for_policy(&rules).await;

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

    // Granted in the namespace only: still not an admin (issue 27).
    bind(&admin, &ns, &user, "ClusterRole", "flotilla-copyrule-admin").await;
    wait_for("the namespace grant to apply", Duration::from_secs(30), || async {
        Ok::<_, String>(may(&admin, &user, &ns, "flotilla.dev", "copyrules", "override").await.then_some(()))
    })
    .await
    .unwrap();
    let msg = refused(
        rules.create(&PostParams::default(), &rule("overwrite", overwrite.clone())).await,
        "Overwrite with a namespace grant",
    );
    assert!(msg.contains("cluster-wide"), "{msg}");

    let crb = bind_cluster_wide(&admin, &user, "flotilla-copyrule-admin").await;
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
    let _ = Api::<ClusterRoleBinding>::all(admin.clone()).delete(&crb, &DeleteParams::default()).await;
}

/// Issue 27: `override` was asked of the authorizer in the rule's
/// namespace, so a namespace Role granting every verb on every resource
/// there passed it. A namespace owner with such a Role is refused
/// Overwrite and rules without a list of names.
#[tokio::test]
async fn a_namespace_wildcard_role_is_no_copyrule_admin() {
    let env = shared();
    let admin = env.client().await;
    apply_crds(&admin).await.unwrap();
    apply_chart_access(&admin).await;
    let ns = env.namespace("vap-star").await.unwrap();
    let user = format!("owner-{ns}");
    grant(&admin, &ns, &user, "everything", json!([{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}])).await;
    let owner = env.impersonating(&user, &["system:authenticated"]).await.unwrap();
    let rules = copyrules(&owner, &ns);
    // The policy is loaded (seen by a plain `edit` user), and the Role is in force.
    let plain = format!("plain-{ns}");
    bind(&admin, &ns, &plain, "ClusterRole", "edit").await;
    wait_for_policy(&copyrules(&env.impersonating(&plain, &["system:authenticated"]).await.unwrap(), &ns)).await;
    wait_for("the wildcard Role to apply", Duration::from_secs(30), || async {
        Ok::<_, String>(may(&admin, &user, &ns, "flotilla.dev", "copyrules", "override").await.then_some(()))
    })
    .await
    .unwrap();

    let named = json!({"kind": "Secret", "selector": {}, "namespaces": {"include": ["team-b"]}});
    rules.create(&PostParams::default(), &rule("named", named.clone())).await.unwrap();
    let mut overwrite = named;
    overwrite["onConflict"] = json!("Overwrite");
    let msg = refused(rules.create(&PostParams::default(), &rule("overwrite", overwrite)).await, "Overwrite");
    assert!(msg.contains("flotilla-copyrule-admin"), "{msg}");
    let everywhere = json!({"kind": "Secret", "selector": {}});
    refused(rules.create(&PostParams::default(), &rule("everywhere", everywhere)).await, "a rule without names");
}

/// Issue 27: a user who may write CopyRules but not read the namespace's
/// Secrets could have the operator copy them out. A rule needs get and list
/// on its kind in its namespace.
#[tokio::test]
async fn nobody_copies_what_they_cannot_read() {
    let env = shared();
    let admin = env.client().await;
    apply_crds(&admin).await.unwrap();
    apply_chart_access(&admin).await;
    let ns = env.namespace("vap-read").await.unwrap();
    let user = format!("writer-{ns}");
    bind(&admin, &ns, &user, "ClusterRole", "flotilla-copyrule-edit").await;
    grant(
        &admin,
        &ns,
        &user,
        "reads",
        json!([
            {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list"]},
            {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}
        ]),
    )
    .await;
    let writer = env.impersonating(&user, &["system:authenticated"]).await.unwrap();
    let rules = copyrules(&writer, &ns);
    wait_for_policy(&rules).await;
    let spec = |kind: &str| json!({"kind": kind, "names": ["x"], "namespaces": {"include": ["team-b"]}});

    rules.create(&PostParams::default(), &rule("configmaps", spec("ConfigMap"))).await.unwrap();
    let msg = refused(rules.create(&PostParams::default(), &rule("secrets", spec("Secret"))).await, "get without list");
    assert!(msg.contains("get and list on secrets"), "{msg}");
    // An update turning a ConfigMap rule into a Secret rule too.
    let mut existing = rules.get("configmaps").await.unwrap();
    existing.data["spec"]["kind"] = json!("Secret");
    refused(rules.replace("configmaps", &PostParams::default(), &existing).await, "an update to Secret");

    grant(
        &admin,
        &ns,
        &user,
        "list-secrets",
        json!([{"apiGroups": [""], "resources": ["secrets"], "verbs": ["list"]}]),
    )
    .await;
    wait_for("list on secrets to apply", Duration::from_secs(30), || {
        let rules = rules.clone();
        async move {
            match rules.create(&PostParams::default(), &rule("secrets", spec("Secret"))).await {
                Ok(_) => Ok::<_, String>(Some(())),
                Err(kube::Error::Api(s)) if s.code == 403 || s.code == 422 => Ok(None),
                Err(e) => Err(e.to_string()),
            }
        }
    })
    .await
    .unwrap();
}

fn copyrequests(client: &Client, ns: &str) -> Api<DynamicObject> {
    let ar = ApiResource::from_gvk(&GroupVersionKind::gvk("flotilla.dev", "v1alpha1", "CopyRequest"));
    Api::namespaced_with(client.clone(), ns, &ar)
}

fn pull(name: &str, kind: &str) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": "flotilla.dev/v1alpha1", "kind": "CopyRequest", "metadata": {"name": name},
        "spec": {"source": {"kind": kind, "namespace": "team-a", "name": "shared"}}
    }))
    .unwrap()
}

/// Issue 31: a subject granted CopyRequests but not Secrets in its namespace
/// could have the operator make Secrets there (pulled from wherever an
/// owner offered them). A request needs create on its kind in its
/// namespace.
#[tokio::test]
async fn nobody_pulls_what_they_could_not_make() {
    let env = shared();
    let admin = env.client().await;
    apply_crds(&admin).await.unwrap();
    apply_chart_access(&admin).await;
    let ns = env.namespace("vap-pull").await.unwrap();
    let user = format!("puller-{ns}");
    bind(&admin, &ns, &user, "ClusterRole", "flotilla-copyrule-edit").await;
    let create = |resource: &str| json!([{"apiGroups": [""], "resources": [resource], "verbs": ["create"]}]);
    grant(&admin, &ns, &user, "configmaps", create("configmaps")).await;
    let puller = env.impersonating(&user, &["system:authenticated"]).await.unwrap();
    let requests = copyrequests(&puller, &ns);

    // Once the grants and the policy apply: a Secret pull refused, a ConfigMap pull made.
    let msg = create_settled(&requests, &pull("a-secret", "Secret"), Some("needs create on secrets in namespace"))
        .await
        .expect_err("a Secret pull without create on secrets");
    assert!(msg.contains(&ns), "{msg}");
    create_settled(&requests, &pull("a-configmap", "ConfigMap"), None).await.unwrap();

    grant(&admin, &ns, &user, "secrets", create("secrets")).await;
    create_settled(&requests, &pull("a-secret", "Secret"), None).await.unwrap();
}

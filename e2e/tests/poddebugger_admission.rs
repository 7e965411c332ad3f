//! The pod-debugger chart's ValidatingAdmissionPolicy and PodDebugger
//! ClusterRoles, on the real API server (RBAC, aggregation,
//! ValidatingAdmissionPolicy GA): a PodDebugger runs an image inside the
//! namespace's pods, so only a user who could add the ephemeral container
//! (`patch pods/ephemeralcontainers`) and exec into the pods (`create
//! pods/exec`) themselves may write one. A namespace `edit` user with the
//! chart's `-edit` role is refused (edit lacks ephemeralcontainers, on
//! purpose); with the ephemeralcontainers right but no exec, refused too;
//! with both, allowed. `view` carries read access. Mounting the pods'
//! Secret volumes (`volumeMounts.secrets`) also needs `get secrets`: a
//! debugger without it may mirror the other volumes, not those. A debugger
//! in mode copy (the operator creates pods) needs `create pods`. Requests
//! are made as those users by impersonation.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::time::Duration;

use flotilla_e2e::access::{bind, create_settled, role};
use flotilla_e2e::{apply_chart_template, apply_crds};
use flotilla_testenv::{shared, wait_for};
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::json;

const RELEASE: &str = "pdvap";

fn debuggers(client: &Client, ns: &str) -> Api<DynamicObject> {
    let ar = ApiResource::from_gvk(&GroupVersionKind::gvk("flotilla.dev", "v1alpha1", "PodDebugger"));
    Api::namespaced_with(client.clone(), ns, &ar)
}

fn debugger(name: &str) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": "flotilla.dev/v1alpha1", "kind": "PodDebugger", "metadata": {"name": name},
        "spec": {"selector": {"matchLabels": {"app": "payment"}}, "image": "busybox:1.37"}
    }))
    .unwrap()
}

/// Applies the chart's access objects (roles, policy, binding) as rendered.
async fn apply_chart_access(admin: &Client) {
    let kinds =
        apply_chart_template(admin, "pod-debugger", RELEASE, "templates/poddebugger-access.yaml").await.unwrap();
    assert_eq!(kinds, ["ClusterRole", "ClusterRole", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"]);
}

#[tokio::test]
async fn only_users_who_could_debug_the_pods_themselves_write_poddebuggers() {
    let env = shared();
    let admin = env.client().await;
    apply_crds(&admin).await.unwrap();
    apply_chart_access(&admin).await;
    let ns = env.namespace("pdvap").await.unwrap();
    let edit_role = format!("{RELEASE}-pod-debugger-edit");
    role(
        &admin,
        &ns,
        "debug",
        json!([{"apiGroups": [""], "resources": ["pods/ephemeralcontainers"], "verbs": ["patch"]}]),
    )
    .await;

    // alice: the namespace's `edit` (exec, no ephemeralcontainers) and the
    // chart's PodDebugger edit role.
    let alice = format!("alice-{ns}");
    bind(&admin, &ns, &alice, "ClusterRole", "edit").await;
    bind(&admin, &ns, &alice, "ClusterRole", &edit_role).await;
    let as_alice = debuggers(&env.impersonating(&alice, &["system:authenticated"]).await.unwrap(), &ns);
    let msg = create_settled(&as_alice, &debugger("a"), Some("pods/ephemeralcontainers")).await.unwrap_err();
    assert!(msg.contains("patch on pods/ephemeralcontainers"), "{msg}");

    // bob: PodDebuggers and ephemeral containers, but no exec.
    let bob = format!("bob-{ns}");
    bind(&admin, &ns, &bob, "ClusterRole", &edit_role).await;
    bind(&admin, &ns, &bob, "Role", "debug").await;
    let as_bob = debuggers(&env.impersonating(&bob, &["system:authenticated"]).await.unwrap(), &ns);
    let msg = create_settled(&as_bob, &debugger("b"), Some("pods/exec")).await.unwrap_err();
    assert!(msg.contains("create on pods/exec"), "{msg}");

    // alice, once she may add ephemeral containers herself, may write one;
    // so may an admin.
    bind(&admin, &ns, &alice, "Role", "debug").await;
    create_settled(&as_alice, &debugger("a"), None).await.unwrap();
    debuggers(&admin, &ns).create(&PostParams::default(), &debugger("by-admin")).await.unwrap();

    // A spec update is judged like a create; a label edit is not.
    let as_bob_admin_made = as_bob.clone();
    let mut obj = debuggers(&admin, &ns).get("by-admin").await.unwrap();
    obj.data["spec"]["image"] = json!("busybox:1.36");
    let refused = as_bob_admin_made.replace("by-admin", &PostParams::default(), &obj).await;
    assert!(matches!(&refused, Err(kube::Error::Api(s)) if s.message.contains("pods/exec")), "{refused:?}");
    let label = Patch::Merge(json!({"metadata": {"labels": {"team": "payments"}}}));
    as_bob.patch("by-admin", &PatchParams::default(), &label).await.unwrap();

    // dave may debug (ephemeral containers, exec) but not read Secrets:
    // he may mirror the pods' volumes, not ask for their Secret volumes;
    // alice (edit reads Secrets) may.
    let dave = format!("dave-{ns}");
    bind(&admin, &ns, &dave, "ClusterRole", &edit_role).await;
    bind(&admin, &ns, &dave, "Role", "debug").await;
    role(&admin, &ns, "exec", json!([{"apiGroups": [""], "resources": ["pods/exec"], "verbs": ["create"]}])).await;
    bind(&admin, &ns, &dave, "Role", "exec").await;
    let as_dave = debuggers(&env.impersonating(&dave, &["system:authenticated"]).await.unwrap(), &ns);
    let mounting = |name: &str, secrets: bool| {
        let mut d = debugger(name);
        d.data["spec"]["volumeMounts"] = json!({"mirror": true, "secrets": secrets});
        d
    };
    create_settled(&as_dave, &mounting("d-mirror", false), None).await.unwrap();
    let msg = create_settled(&as_dave, &mounting("d-secrets", true), Some("get on secrets")).await.unwrap_err();
    assert!(msg.contains("Secret volumes"), "{msg}");
    create_settled(&as_alice, &mounting("a-secrets", true), None).await.unwrap();
    // Turning secrets on by an update is judged the same.
    let mut obj = debuggers(&admin, &ns).get("d-mirror").await.unwrap();
    obj.data["spec"]["volumeMounts"]["secrets"] = json!(true);
    let refused = as_dave.replace("d-mirror", &PostParams::default(), &obj).await;
    assert!(matches!(&refused, Err(kube::Error::Api(s)) if s.message.contains("get on secrets")), "{refused:?}");
    for name in ["d-mirror", "a-secrets"] {
        debuggers(&admin, &ns).delete(name, &Default::default()).await.unwrap();
    }

    // A debug copy is a new pod, made by the operator: dave, who may debug
    // but not create pods, may not ask for copies (by create or update);
    // alice (edit creates pods) may.
    let copying = |name: &str| {
        let mut d = debugger(name);
        d.data["spec"]["mode"] = json!("copy");
        d
    };
    let msg = create_settled(&as_dave, &copying("d-copy"), Some("create pods")).await.unwrap_err();
    assert!(msg.contains("debug copies"), "{msg}");
    create_settled(&as_dave, &debugger("d-inject"), None).await.unwrap();
    let mut obj = debuggers(&admin, &ns).get("d-inject").await.unwrap();
    obj.data["spec"]["mode"] = json!("copy");
    let refused = as_dave.replace("d-inject", &PostParams::default(), &obj).await;
    assert!(matches!(&refused, Err(kube::Error::Api(s)) if s.message.contains("create pods")), "{refused:?}");
    create_settled(&as_alice, &copying("a-copy"), None).await.unwrap();
    for name in ["d-inject", "a-copy"] {
        debuggers(&admin, &ns).delete(name, &Default::default()).await.unwrap();
    }

    // `view` reads PodDebuggers (aggregated), and writes nothing.
    let carol = format!("carol-{ns}");
    bind(&admin, &ns, &carol, "ClusterRole", "view").await;
    let as_carol = debuggers(&env.impersonating(&carol, &["system:authenticated"]).await.unwrap(), &ns);
    let listed = wait_for("view to carry poddebuggers", Duration::from_secs(60), || {
        let api = as_carol.clone();
        async move { Ok::<_, String>(api.list(&ListParams::default()).await.ok().map(|l| l.items.len())) }
    })
    .await
    .unwrap();
    assert_eq!(listed, 2);
    let denied = as_carol.create(&PostParams::default(), &debugger("c")).await;
    assert!(matches!(&denied, Err(kube::Error::Api(s)) if s.code == 403), "{denied:?}");
}

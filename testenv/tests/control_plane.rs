//! The test control plane is a real Kubernetes: these tests prove the parts
//! the operators rely on (ClusterIPs, controllers, garbage collection,
//! namespace deletion, RBAC, TokenRequest) actually work.

use std::time::Duration;

use flotilla_testenv::{shared, wait_for};
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod, Service};
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::api::{DeleteParams, ListParams, PostParams};
use kube::{Api, Resource, ResourceExt};
use serde_json::json;

const T: Duration = Duration::from_secs(60);

fn from_json<K: serde::de::DeserializeOwned>(v: serde_json::Value) -> K {
    match serde_json::from_value(v) {
        Ok(k) => k,
        Err(e) => panic!("test object does not deserialize: {e}"),
    }
}

#[tokio::test]
async fn version_endpoint_reports_the_pinned_release() -> anyhow::Result<()> {
    let client = shared().client().await;
    let info = client.apiserver_version().await?;
    let expected = flotilla_testenv::build::versions::kubernetes_version();
    assert_eq!(info.git_version, format!("v{expected}"));
    Ok(())
}

#[tokio::test]
async fn service_gets_a_cluster_ip() -> anyhow::Result<()> {
    let env = shared();
    let ns = env.namespace("svc").await?;
    let api: Api<Service> = Api::namespaced(env.client().await, &ns);
    let svc: Service = from_json(json!({
        "metadata": {"name": "hello-world"},
        "spec": {"type": "NodePort", "selector": {"app": "hello-world"}, "ports": [{"name": "web", "port": 8000}]}
    }));
    let created = api.create(&PostParams::default(), &svc).await?;
    let ip = created.spec.and_then(|s| s.cluster_ip).unwrap_or_default();
    assert!(ip.parse::<std::net::Ipv4Addr>().is_ok(), "ClusterIP {ip:?} is not an IPv4 address");
    assert!(ip.starts_with("10.96."), "ClusterIP {ip} outside the service range");
    Ok(())
}

#[tokio::test]
async fn dual_stack_service_gets_an_ipv6_cluster_ip() -> anyhow::Result<()> {
    let env = shared();
    let ns = env.namespace("dual").await?;
    let api: Api<Service> = Api::namespaced(env.client().await, &ns);
    let svc: Service = from_json(json!({
        "metadata": {"name": "dual"},
        "spec": {"ipFamilyPolicy": "RequireDualStack", "ports": [{"port": 80}]}
    }));
    let created = api.create(&PostParams::default(), &svc).await?;
    let ips = created.spec.and_then(|s| s.cluster_ips).unwrap_or_default();
    assert_eq!(ips.len(), 2, "{ips:?}");
    assert!(ips.iter().any(|ip| ip.parse::<std::net::Ipv6Addr>().is_ok()), "{ips:?}");
    Ok(())
}

#[tokio::test]
async fn deployment_produces_a_replicaset_and_a_pod() -> anyhow::Result<()> {
    let env = shared();
    let ns = env.namespace("deploy").await?;
    let client = env.client().await;
    let deploy: Deployment = from_json(json!({
        "metadata": {"name": "web"},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "web", "image": "nginx"}]}
            }
        }
    }));
    Api::<Deployment>::namespaced(client.clone(), &ns).create(&PostParams::default(), &deploy).await?;
    let rs_api: Api<ReplicaSet> = Api::namespaced(client.clone(), &ns);
    let rs = wait_for("a ReplicaSet owned by the Deployment", T, || async {
        let list = rs_api.list(&ListParams::default()).await?;
        Ok::<_, kube::Error>(
            list.items
                .into_iter()
                .find(|rs| rs.owner_references().iter().any(|o| o.kind == "Deployment" && o.name == "web")),
        )
    })
    .await?;
    let pod_api: Api<Pod> = Api::namespaced(client, &ns);
    let rs_name = rs.name_any();
    wait_for("a Pod owned by the ReplicaSet", T, || async {
        let list = pod_api.list(&ListParams::default()).await?;
        Ok::<_, kube::Error>(list.items.into_iter().find(|p| p.owner_references().iter().any(|o| o.name == rs_name)))
    })
    .await?;
    Ok(())
}

#[tokio::test]
async fn deleting_an_owner_garbage_collects_its_child() -> anyhow::Result<()> {
    let env = shared();
    let ns = env.namespace("gc").await?;
    let api: Api<ConfigMap> = Api::namespaced(env.client().await, &ns);
    let owner = api.create(&PostParams::default(), &from_json(json!({"metadata": {"name": "owner"}}))).await?;
    let owner_ref = owner.controller_owner_ref(&()).ok_or_else(|| anyhow::anyhow!("no owner ref"))?;
    let mut child: ConfigMap = from_json(json!({"metadata": {"name": "child"}}));
    child.metadata.owner_references = Some(vec![owner_ref]);
    api.create(&PostParams::default(), &child).await?;
    api.delete("owner", &DeleteParams::background()).await?;
    wait_for("the child to be garbage-collected", T, || async {
        Ok::<_, kube::Error>(api.get_opt("child").await?.is_none().then_some(()))
    })
    .await?;
    Ok(())
}

#[tokio::test]
async fn a_deleted_namespace_really_disappears() -> anyhow::Result<()> {
    let env = shared();
    let ns = env.namespace("gone").await?;
    let client = env.client().await;
    Api::<ConfigMap>::namespaced(client.clone(), &ns)
        .create(&PostParams::default(), &from_json(json!({"metadata": {"name": "content"}})))
        .await?;
    let api: Api<Namespace> = Api::all(client);
    api.delete(&ns, &DeleteParams::default()).await?;
    wait_for("the namespace to be removed", T, || async {
        Ok::<_, kube::Error>(api.get_opt(&ns).await?.is_none().then_some(()))
    })
    .await?;
    Ok(())
}

#[tokio::test]
async fn rbac_is_enforced_for_service_accounts() -> anyhow::Result<()> {
    let env = shared();
    let ns = env.namespace("rbac").await?;
    let sa_client = env.service_account_client(&ns, "reader").await?;
    let sa_api: Api<ConfigMap> = Api::namespaced(sa_client, &ns);

    match sa_api.list(&ListParams::default()).await {
        Err(kube::Error::Api(status)) if status.code == 403 => {}
        other => panic!("expected 403 Forbidden without a Role, got {other:?}"),
    }

    let admin = env.client().await;
    let role: Role = from_json(json!({
        "metadata": {"name": "cm-reader"},
        "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["list"]}]
    }));
    Api::<Role>::namespaced(admin.clone(), &ns).create(&PostParams::default(), &role).await?;
    let binding: RoleBinding = from_json(json!({
        "metadata": {"name": "cm-reader"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "cm-reader"},
        "subjects": [{"kind": "ServiceAccount", "name": "reader", "namespace": ns}]
    }));
    Api::<RoleBinding>::namespaced(admin, &ns).create(&PostParams::default(), &binding).await?;

    wait_for("the RoleBinding to take effect", T, || async {
        Ok::<_, kube::Error>(sa_api.list(&ListParams::default()).await.ok().map(|_| ()))
    })
    .await?;
    // Still only what the Role grants.
    let denied = sa_api.create(&PostParams::default(), &from_json(json!({"metadata": {"name": "x"}}))).await;
    assert!(matches!(denied, Err(kube::Error::Api(ref s)) if s.code == 403), "{denied:?}");
    Ok(())
}

#[tokio::test]
async fn tests_get_fresh_labelled_namespaces() -> anyhow::Result<()> {
    let env = shared();
    let (a, b) = (env.namespace("same").await?, env.namespace("same").await?);
    assert_ne!(a, b);
    let ns = Api::<Namespace>::all(env.client().await).get(&a).await?;
    assert_eq!(ns.labels().get(flotilla_testenv::harness::TEST_NAMESPACE_LABEL).map(String::as_str), Some("true"));
    Ok(())
}

//! The pod watch's first list: streamed (one watch request, KEP-3157) where
//! the API server allows it, in pages where it refuses (Kubernetes 1.33's
//! default, here an API server started with `--feature-gates=WatchList=false`).
//! Counted by the API server's own `apiserver_request_total`.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::time::Duration;

use flotilla_shared::health::Readiness;
use flotilla_shared::pods::{LabelKeys, watch_pods};
use flotilla_shared::projection;
use flotilla_testenv::{Assets, ControlPlane, ExtraFlags, Lifetime, Options, TestEnv, wait_for};
use k8s_openapi::api::core::v1::Pod;
use kube::api::PostParams;
use kube::{Api, Client};
use serde_json::json;

const PODS: usize = 25;
const T: Duration = Duration::from_secs(60);

async fn control_plane(apiserver: &[&str]) -> ControlPlane {
    let assets = Assets::locate().expect("the control plane's binaries: run `cargo xtask setup`");
    let dir = std::env::temp_dir().join(format!("flotilla-streaming-{}-{}", std::process::id(), rand::random::<u32>()));
    let extra = ExtraFlags { apiserver: apiserver.iter().map(ToString::to_string).collect(), ..ExtraFlags::default() };
    ControlPlane::start_tuned(&assets, &Options { dir, lifetime: Lifetime::DieWithParent }, &extra)
        .await
        .expect("a control plane")
}

/// Namespace-scoped LISTs of `resource` the API server has answered.
async fn namespace_lists(client: &Client, resource: &str) -> u64 {
    let req = http::Request::get("/metrics").body(Vec::new()).unwrap();
    let text = client.request_text(req).await.unwrap();
    let resource = format!(r#"resource="{resource}""#);
    text.lines()
        .filter(|l| {
            l.starts_with("apiserver_request_total{")
                && l.contains(r#"verb="LIST""#)
                && l.contains(&resource)
                && l.contains(r#"scope="namespace""#)
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .map(|v| v as u64)
        .sum()
}

/// Creates `PODS` pods (Pending: no node), watches them with the pod watch
/// the operators use, and returns how many namespace LISTs it took.
async fn list_pods(env: &TestEnv) -> u64 {
    let client = env.client().await;
    let ns = env.namespace("streaming").await.unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    for i in 0..PODS {
        let p: Pod = serde_json::from_value(
            json!({"metadata": {"name": format!("p-{i}")}, "spec": {"containers": [{"name": "c", "image": "x"}]}}),
        )
        .unwrap();
        pods.create(&PostParams::default(), &p).await.unwrap();
    }
    let before = namespace_lists(&client, "pods").await;
    let (store, writer) = projection::store::<String>();
    let readiness = Readiness::default();
    let watch = tokio::spawn(watch_pods(
        pods,
        writer,
        |p: &Pod| p.metadata.name.clone().unwrap_or_default(),
        LabelKeys::new(),
        readiness.watch("pods"),
        |_| {},
    ));
    wait_for("every pod listed", T, || {
        let n = store.len();
        async move { Ok::<_, String>((n == PODS).then_some(())) }
    })
    .await
    .unwrap();
    assert!(store.is_ready());
    watch.abort();
    namespace_lists(&client, "pods").await - before
}

#[tokio::test]
async fn the_pod_watch_streams_its_list_where_the_server_allows_it() {
    let cp = control_plane(&[]).await;
    let lists = list_pods(&TestEnv::of(&cp)).await;
    assert_eq!(lists, 0, "streamed: no LIST of pods");
}

/// Without the fallback the watch retries the refused stream for ever and
/// its store is never ready.
#[tokio::test]
async fn where_the_server_refuses_streaming_the_pod_watch_lists_in_pages() {
    let cp = control_plane(&["--feature-gates=WatchList=false"]).await;
    let lists = list_pods(&TestEnv::of(&cp)).await;
    // Pages of ten pods (`flotilla_shared::pods::PAGE_SIZE`).
    assert!(lists >= (PODS / 10) as u64, "{lists} LISTs for {PODS} pods");
}

/// Every other watch (`flotilla_shared::streaming_list::watch`) where the
/// server refuses streaming: the list comes in consistent pages of at most
/// 50 (kube's default page is 500, and `resourceVersion=0` would be one
/// answer whatever the size), and the refusal is not passed on as a watch
/// error (it would mark the caches unready at every start).
#[tokio::test]
async fn where_the_server_refuses_streaming_every_watch_lists_in_small_pages_without_an_error() {
    use futures::StreamExt;
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::runtime::watcher::{self, Event};

    let cp = control_plane(&["--feature-gates=WatchList=false"]).await;
    let env = TestEnv::of(&cp);
    let client = env.client().await;
    let ns = env.namespace("fallback").await.unwrap();
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    for i in 0..120 {
        let cm: ConfigMap = serde_json::from_value(json!({"metadata": {"name": format!("c-{i:03}")}})).unwrap();
        api.create(&PostParams::default(), &cm).await.unwrap();
    }
    let before = namespace_lists(&client, "configmaps").await;
    let mut watch = std::pin::pin!(flotilla_shared::streaming_list::watch(api, watcher::Config::default()));
    let mut listed = 0;
    let done = tokio::time::timeout(T, async {
        while let Some(event) = watch.next().await {
            match event.expect("no watch error: the refusal is handled, not passed on") {
                // Not the namespace's own kube-root-ca.crt.
                Event::InitApply(cm) if cm.metadata.name.as_deref().is_some_and(|n| n.starts_with("c-")) => listed += 1,
                Event::InitDone => return,
                _ => {}
            }
        }
    })
    .await;
    assert!(done.is_ok(), "the list did not complete within {T:?} ({listed} objects)");
    assert_eq!(listed, 120);
    let pages = namespace_lists(&client, "configmaps").await - before;
    assert!(pages >= 3, "{pages} LISTs for 120 ConfigMaps: pages of at most 50");
}

//! The one-node cluster runs real pods: these tests prove what the operators
//! about pods rely on — Deployments become Ready, `kubectl logs`/`exec`
//! work, Services are reached by DNS name through kube-proxy, crashing and
//! OOM-killed containers and missing images look as on any cluster,
//! `kubectl debug --target` works, and pods cannot leave the machine.
//! Each test uses its own namespace on the shared node.

use std::time::Duration;

use flotilla_testenv::cluster::node::images::TOOLBOX_IMAGE;
use flotilla_testenv::cluster::node::network;
use flotilla_testenv::cluster::node::paths::NODE_IP;
use flotilla_testenv::{node, wait_for};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ContainerStatus, Pod, Service};
use kube::Api;
use kube::api::{ListParams, PostParams};
use serde_json::json;

const T: Duration = Duration::from_secs(90);

fn from_json<K: serde::de::DeserializeOwned>(v: serde_json::Value) -> K {
    match serde_json::from_value(v) {
        Ok(k) => k,
        Err(e) => panic!("test object does not deserialize: {e}"),
    }
}

/// A single-container toolbox pod running `script` under `sh -c`.
fn pod(name: &str, script: &str, extra_container: serde_json::Value) -> Pod {
    let mut container = json!({
        "name": "app",
        "image": TOOLBOX_IMAGE,
        "imagePullPolicy": "IfNotPresent",
        "command": ["sh", "-c", script],
    });
    if let (Some(c), Some(extra)) = (container.as_object_mut(), extra_container.as_object()) {
        c.extend(extra.clone());
    }
    from_json(json!({
        "metadata": {"name": name, "labels": {"app": name}},
        "spec": {"containers": [container], "terminationGracePeriodSeconds": 1},
    }))
}

async fn status_of(api: &Api<Pod>, name: &str) -> anyhow::Result<Option<ContainerStatus>> {
    let p = api.get(name).await?;
    Ok(p.status.and_then(|s| s.container_statuses).and_then(|c| c.into_iter().next()))
}

/// Waits until the pod's first container is running.
async fn wait_running(pods: &Api<Pod>, name: &str) -> anyhow::Result<()> {
    wait_for(&format!("{name} to run"), T, || async move {
        let s = status_of(pods, name).await?;
        Ok::<_, anyhow::Error>(s.filter(|s| s.state.as_ref().is_some_and(|st| st.running.is_some())).map(|_| ()))
    })
    .await?;
    Ok(())
}

#[tokio::test]
async fn deployment_runs_logs_exec_and_reaches_a_service_by_dns_name() -> anyhow::Result<()> {
    let env = node();
    let ns = env.namespace("node-web").await?;
    let client = env.client().await;
    // Three web servers that answer with their own name.
    let deployment: Deployment = from_json(json!({
        "metadata": {"name": "web"},
        "spec": {
            "replicas": 3,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {
                    "terminationGracePeriodSeconds": 1,
                    "containers": [{
                        "name": "httpd",
                        "image": TOOLBOX_IMAGE,
                        "command": ["sh", "-c", "mkdir -p /tmp/www && echo served-by-$(hostname) > /tmp/www/index.html && echo web-started && exec httpd -f -p 8080 -h /tmp/www"],
                        "ports": [{"containerPort": 8080}],
                        "readinessProbe": {"httpGet": {"path": "/", "port": 8080}, "periodSeconds": 1},
                    }],
                },
            },
        },
    }));
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns);
    deployments.create(&PostParams::default(), &deployment).await?;
    let svc: Service = from_json(json!({
        "metadata": {"name": "web"},
        "spec": {"selector": {"app": "web"}, "ports": [{"port": 80, "targetPort": 8080}]},
    }));
    Api::<Service>::namespaced(client.clone(), &ns).create(&PostParams::default(), &svc).await?;
    wait_for("3 ready replicas", T, || {
        let deployments = deployments.clone();
        async move {
            let d = deployments.get("web").await?;
            Ok::<_, kube::Error>((d.status.and_then(|s| s.ready_replicas) == Some(3)).then_some(()))
        }
    })
    .await?;

    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let list = pods.list(&ListParams::default().labels("app=web")).await?;
    let first = list.items.first().and_then(|p| p.metadata.name.clone()).unwrap_or_default();
    let logs = env.kubectl(&["-n", &ns, "logs", &first])?;
    assert!(logs.contains("web-started"), "kubectl logs: {logs}");
    let hostname = env.kubectl(&["-n", &ns, "exec", &first, "--", "hostname"])?;
    assert_eq!(hostname.trim(), first, "kubectl exec runs in the pod");

    // Through CoreDNS and kube-proxy, from one pod to the Service.
    let url = format!("http://web.{ns}.svc.cluster.local/");
    let body = env.kubectl(&["-n", &ns, "exec", &first, "--", "wget", "-q", "-T", "10", "-O", "-", &url])?;
    assert!(body.starts_with("served-by-web-"), "answer through the Service: {body}");

    // And to the host on the node's address, where test servers listen.
    // (A thread: kubectl below blocks this test's runtime.)
    let listener = std::net::TcpListener::bind((NODE_IP, 0))?;
    let port = listener.local_addr()?.port();
    std::thread::spawn(move || {
        use std::io::{Read, Write};
        if let Ok((mut s, _)) = listener.accept() {
            let mut buf = [0u8; 1024];
            let _ = s.read(&mut buf);
            let _ = s.write_all(b"HTTP/1.0 200 OK\r\nContent-Length: 7\r\n\r\nhost-ok");
        }
    });
    let from_host = env.kubectl(&[
        "-n",
        &ns,
        "exec",
        &first,
        "--",
        "wget",
        "-q",
        "-T",
        "10",
        "-O",
        "-",
        &format!("http://{NODE_IP}:{port}/"),
    ])?;
    assert_eq!(from_host, "host-ok");
    Ok(())
}

#[tokio::test]
async fn crashing_container_loops_with_previous_logs() -> anyhow::Result<()> {
    let env = node();
    let ns = env.namespace("node-crash").await?;
    let pods: Api<Pod> = Api::namespaced(env.client().await, &ns);
    // Each run counts itself in an emptyDir that survives restarts, lives
    // three seconds and fails.
    let script = "n=$(( $(cat /data/n 2>/dev/null || echo 0) + 1 )); echo $n > /data/n; echo run-$n; sleep 3; exit 1";
    let mut p = pod("crasher", script, json!({"volumeMounts": [{"name": "data", "mountPath": "/data"}]}));
    if let Some(spec) = p.spec.as_mut() {
        spec.volumes = Some(vec![from_json(json!({"name": "data", "emptyDir": {}}))]);
    }
    pods.create(&PostParams::default(), &p).await?;
    let backoff = wait_for("CrashLoopBackOff", Duration::from_secs(120), || {
        let pods = pods.clone();
        async move {
            let s = status_of(&pods, "crasher").await?;
            let waiting = s.as_ref().and_then(|s| s.state.as_ref()?.waiting.as_ref()?.reason.clone());
            Ok::<_, anyhow::Error>(s.filter(|_| waiting.as_deref() == Some("CrashLoopBackOff")))
        }
    })
    .await?;
    let last = backoff.last_state.and_then(|s| s.terminated).map(|t| t.exit_code);
    assert_eq!(last, Some(1), "the last run's exit code");
    // Restarted again (a rising restartCount) and running: `--previous` is
    // the run that just ended. (Asked while a run is alive: the kubelet keeps
    // only the newest dead container of a pod.)
    let first = backoff.restart_count;
    let restarts = wait_for("a further restart, running", Duration::from_secs(150), || {
        let pods = pods.clone();
        async move {
            let s = status_of(&pods, "crasher").await?;
            let running = s.as_ref().is_some_and(|s| s.state.as_ref().is_some_and(|st| st.running.is_some()));
            Ok::<_, anyhow::Error>(s.filter(|s| running && s.restart_count > first).map(|s| s.restart_count))
        }
    })
    .await?;
    let run_of = |text: &str| text.trim().strip_prefix("run-").and_then(|n| n.parse::<i32>().ok());
    let previous = run_of(&env.kubectl(&["-n", &ns, "logs", "--previous", "crasher"])?);
    assert_eq!(previous, Some(restarts), "after {restarts} restarts, --previous shows run {restarts}");
    Ok(())
}

/// The memory controller of these machines' cgroup v1 hierarchy enforces
/// limits, so the kernel's OOM killer ends the container and the kubelet
/// reports `OOMKilled`.
#[tokio::test]
async fn container_over_its_memory_limit_is_oom_killed() -> anyhow::Result<()> {
    let env = node();
    let ns = env.namespace("node-oom").await?;
    let pods: Api<Pod> = Api::namespaced(env.client().await, &ns);
    // A 64 MiB string in a shell variable, under a 24 MiB limit.
    let p = pod(
        "hog",
        "x=$(head -c 67108864 /dev/zero | tr '\\0' a); sleep 3600",
        json!({"resources": {"limits": {"memory": "24Mi"}}}),
    );
    let mut p = p;
    if let Some(spec) = p.spec.as_mut() {
        spec.restart_policy = Some("Never".into());
    }
    pods.create(&PostParams::default(), &p).await?;
    let reason = wait_for("the container to be terminated", T, || {
        let pods = pods.clone();
        async move {
            let s = status_of(&pods, "hog").await?;
            let t = s.and_then(|s| s.state).and_then(|st| st.terminated);
            Ok::<_, anyhow::Error>(t.map(|t| t.reason.unwrap_or_default()))
        }
    })
    .await?;
    assert_eq!(reason, "OOMKilled");
    Ok(())
}

/// The seeds' manifests say `image: busybox` (`:latest`, pulled `Always` by
/// default): with the toolbox tagged `busybox:latest` and the cluster's
/// offline pull policy they run without a registry.
#[tokio::test]
async fn seed_style_busybox_pod_runs_offline() -> anyhow::Result<()> {
    let env = node();
    let ns = env.namespace("node-busybox").await?;
    let pods: Api<Pod> = Api::namespaced(env.client().await, &ns);
    let p: Pod = from_json(json!({
        "metadata": {"name": "seed"},
        "spec": {"containers": [{"name": "c", "image": "busybox", "command": ["sh", "-c", "echo seed-ran; sleep 3600"]}]},
    }));
    pods.create(&PostParams::default(), &p).await?;
    wait_running(&pods, "seed").await?;
    let logs = env.kubectl(&["-n", &ns, "logs", "seed"])?;
    assert!(logs.contains("seed-ran"), "{logs}");
    Ok(())
}

#[tokio::test]
async fn missing_image_backs_off() -> anyhow::Result<()> {
    let env = node();
    let ns = env.namespace("node-pull").await?;
    let pods: Api<Pod> = Api::namespaced(env.client().await, &ns);
    // A registry on loopback where none listens: the pull fails at once,
    // and nothing leaves the machine.
    let mut p = pod("absent", "true", json!({}));
    if let Some(c) = p.spec.as_mut().and_then(|s| s.containers.first_mut()) {
        c.image = Some("localhost/flotilla/does-not-exist:1".into());
    }
    pods.create(&PostParams::default(), &p).await?;
    let reason = wait_for("ImagePullBackOff", T, || {
        let pods = pods.clone();
        async move {
            let s = status_of(&pods, "absent").await?;
            let r = s.and_then(|s| s.state).and_then(|st| st.waiting).and_then(|w| w.reason);
            Ok::<_, anyhow::Error>(r.filter(|r| r == "ImagePullBackOff"))
        }
    })
    .await?;
    assert_eq!(reason, "ImagePullBackOff");
    Ok(())
}

#[tokio::test]
async fn kubectl_debug_adds_an_ephemeral_container_that_sees_the_target() -> anyhow::Result<()> {
    let env = node();
    let ns = env.namespace("node-debug").await?;
    let pods: Api<Pod> = Api::namespaced(env.client().await, &ns);
    pods.create(&PostParams::default(), &pod("target", "exec sleep 31337", json!({}))).await?;
    wait_running(&pods, "target").await?;
    env.kubectl(&[
        "-n",
        &ns,
        "debug",
        "target",
        "--image",
        TOOLBOX_IMAGE,
        "--target=app",
        "--container=dbg",
        "--stdin",
        "--tty",
        "--attach=false",
        "--",
        "sh",
    ])?;
    wait_for("the ephemeral container to run", T, || {
        let pods = pods.clone();
        async move {
            let p = pods.get("target").await?;
            let running = p
                .status
                .and_then(|s| s.ephemeral_container_statuses)
                .unwrap_or_default()
                .iter()
                .any(|c| c.name == "dbg" && c.state.as_ref().is_some_and(|s| s.running.is_some()));
            Ok::<_, kube::Error>(running.then_some(()))
        }
    })
    .await?;
    let ps = env.kubectl(&["-n", &ns, "exec", "target", "-c", "dbg", "--", "ps"])?;
    assert!(ps.contains("sleep 31337"), "the debug container sees the target's processes:\n{ps}");
    let spec = pods.get("target").await?.spec.and_then(|s| s.ephemeral_containers).unwrap_or_default();
    let dbg = spec.iter().find(|c| c.name == "dbg");
    assert_eq!(dbg.and_then(|c| c.target_container_name.as_deref()), Some("app"));
    assert_eq!(dbg.and_then(|c| c.stdin), Some(true));
    assert_eq!(dbg.and_then(|c| c.tty), Some(true));
    Ok(())
}

/// Pods have no default route, and forwarded pod traffic that would leave
/// the bridge is dropped by the node's egress guard. The address tried is
/// in TEST-NET-2 (RFC 5737, documentation only), and the guard is checked
/// to be in place before a packet is sent: nothing leaves the machine.
#[tokio::test]
async fn pods_cannot_reach_outside_the_machine() -> anyhow::Result<()> {
    let env = node();
    assert!(network::egress_guard_installed(), "the node's egress guard (iptables mangle FLOTILLA-EGRESS) is missing");
    let ns = env.namespace("node-egress").await?;
    let pods: Api<Pod> = Api::namespaced(env.client().await, &ns);
    // One pod as every pod is; one that adds a default route through the
    // bridge itself (NET_ADMIN), to meet the guard.
    pods.create(&PostParams::default(), &pod("plain", "exec sleep 3600", json!({}))).await?;
    let routed = pod(
        "routed",
        &format!("ip route add default via {NODE_IP} && exec sleep 3600"),
        json!({"securityContext": {"capabilities": {"add": ["NET_ADMIN"]}}}),
    );
    pods.create(&PostParams::default(), &routed).await?;
    for name in ["plain", "routed"] {
        wait_running(&pods, name).await?;
    }
    let outside = "http://198.51.100.7/";
    let plain = env.kubectl_output(&["-n", &ns, "exec", "plain", "--", "wget", "-q", "-T", "3", "-O", "-", outside])?;
    assert!(!plain.status.success(), "a pod reached {outside}");
    let said = String::from_utf8_lossy(&plain.stderr);
    assert!(said.contains("unreachable"), "no route out of the pod: {said}");

    let before = network::egress_guard_drops();
    let routed =
        env.kubectl_output(&["-n", &ns, "exec", "routed", "--", "wget", "-q", "-T", "3", "-O", "-", outside])?;
    assert!(!routed.status.success(), "a pod with a default route reached {outside}");
    let after = network::egress_guard_drops();
    assert!(after > before, "the egress guard dropped the packets ({before} -> {after})");
    Ok(())
}

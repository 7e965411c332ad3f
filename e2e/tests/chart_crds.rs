//! The CRDs travel with the charts (`crds.enabled`, `crds.keep`): installed
//! and *upgraded* by `helm install/upgrade` (Helm's own `crds/` directory
//! never upgrades), kept on uninstall unless told otherwise, owned by one
//! release only, and adoptable when they were applied by hand (the README's
//! commands). A test binary of its own: its control plane starts without
//! any CRD, which every other test binary installs for itself.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::time::Duration;

use flotilla_e2e::{UMBRELLA, build_chart_dependencies, charts_dir, helm, helm_ok, root};
use flotilla_testenv::{TestEnv, shared, wait_for};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Api;
use serde_json::Value;

const CHART: &str = "load-tester";
const LOADTESTS: &str = "loadtests.flotilla.dev";

/// The generated CRDs (crds/), by file stem = CRD name.
fn generated() -> Vec<(String, Value)> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(root().join("crds")).unwrap().flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if let Some(stem) = name.strip_suffix(".yaml") {
            let v: Value = serde_saphyr::from_str(&std::fs::read_to_string(e.path()).unwrap()).unwrap();
            out.push((stem.to_string(), v));
        }
    }
    assert!(out.len() >= 5, "expected every operator's CRDs in crds/, found {}", out.len());
    out
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap().flatten() {
        let target = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &target);
        } else {
            std::fs::copy(e.path(), &target).unwrap();
        }
    }
}

/// A copy of the load-tester chart as an older release would have had it:
/// the LoadTest CRD without its short names (`lt`, `ld`).
fn older_chart() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("flotilla-older-chart-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    copy_dir(&charts_dir().join(CHART), &dir);
    let file = dir.join("files").join("crds").join(format!("{LOADTESTS}.yaml"));
    let text = std::fs::read_to_string(&file).unwrap();
    let short = "    shortNames:\n    - lt\n    - ld\n";
    assert!(text.contains(short), "the LoadTest CRD no longer has the short names this test removes");
    std::fs::write(&file, text.replace(short, "")).unwrap();
    dir
}

async fn crd(env: &TestEnv, name: &str) -> Option<CustomResourceDefinition> {
    Api::<CustomResourceDefinition>::all(env.client().await).get_opt(name).await.unwrap()
}

fn annotation(crd: &CustomResourceDefinition, key: &str) -> Option<String> {
    crd.metadata.annotations.as_ref().and_then(|a| a.get(key).cloned())
}

async fn wait_gone(env: &TestEnv, name: &str) {
    let api = Api::<CustomResourceDefinition>::all(env.client().await);
    wait_for(&format!("CRD {name} to be deleted"), Duration::from_secs(60), || {
        let api = api.clone();
        async move { Ok::<_, kube::Error>(api.get_opt(name).await?.is_none().then_some(())) }
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn crds_install_upgrade_stay_and_are_adopted_with_the_charts() {
    build_chart_dependencies().unwrap();
    let env = shared();
    let kc = Some(env.kubeconfig.as_path());
    let real = charts_dir().join(CHART).display().to_string();
    let older = older_chart();
    let older_s = older.display().to_string();
    let ns = env.namespace("crds").await.unwrap();
    let ns2 = env.namespace("crds-second").await.unwrap();

    // 1. Install: the chart creates its CRDs, labelled, kept, owned by it.
    helm_ok(kc, &["install", "lt", &older_s, "--namespace", &ns]).unwrap();
    let c = crd(&env, LOADTESTS).await.expect("the release created the LoadTest CRD");
    assert_eq!(c.spec.names.short_names, None, "installed from the older chart");
    assert_eq!(annotation(&c, "helm.sh/resource-policy").as_deref(), Some("keep"));
    assert_eq!(annotation(&c, "meta.helm.sh/release-name").as_deref(), Some("lt"));
    let labels = c.metadata.labels.clone().unwrap_or_default();
    assert_eq!(labels.get("app.kubernetes.io/managed-by").map(String::as_str), Some("Helm"));
    assert_eq!(labels.get("app.kubernetes.io/part-of").map(String::as_str), Some("flotilla"));
    assert!(crd(&env, "simpledeployments.flotilla.dev").await.is_some());

    // 2. Upgrade: the CRD changes with the chart (Helm's crds/ would not).
    helm_ok(kc, &["upgrade", "lt", &real, "--namespace", &ns]).unwrap();
    let c = crd(&env, LOADTESTS).await.unwrap();
    assert_eq!(
        c.spec.names.short_names,
        Some(vec!["lt".to_string(), "ld".to_string()]),
        "helm upgrade updated the CRD"
    );
    let want = generated().into_iter().find(|(n, _)| n == LOADTESTS).unwrap().1;
    assert_eq!(serde_json::to_value(&c.spec.versions).unwrap(), want["spec"]["versions"], "the live CRD is crds/'s");

    // 3. One owner: a second release that also wants the CRDs is refused by
    // Helm with its ownership message; with crds.enabled=false it installs.
    let out = helm(kc, &["install", "lt2", &real, "--namespace", &ns2]).unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("invalid ownership metadata"), "second owner: {err}");
    helm_ok(kc, &["install", "lt2", &real, "--namespace", &ns2, "--set", "crds.enabled=false"]).unwrap();

    // 4. Uninstall keeps them (and so every LoadTest in the cluster).
    helm_ok(kc, &["uninstall", "lt", "--namespace", &ns, "--wait"]).unwrap();
    helm_ok(kc, &["uninstall", "lt2", "--namespace", &ns2, "--wait"]).unwrap();
    assert!(crd(&env, LOADTESTS).await.is_some(), "crds.keep=true: the CRD stays after uninstall");

    // 5. crds.keep=false: the CRDs go with the release. (The kept ones still
    // name release lt; like any object, they are deleted to be re-owned.)
    env.kubectl(&["delete", "crd", LOADTESTS, "simpledeployments.flotilla.dev"]).unwrap();
    wait_gone(&env, LOADTESTS).await;
    helm_ok(kc, &["install", "lt3", &real, "--namespace", &ns, "--set", "crds.keep=false"]).unwrap();
    let c = crd(&env, LOADTESTS).await.unwrap();
    assert_eq!(annotation(&c, "helm.sh/resource-policy"), None);
    helm_ok(kc, &["uninstall", "lt3", "--namespace", &ns, "--wait"]).unwrap();
    wait_gone(&env, LOADTESTS).await;

    // 6. CRDs applied by hand (or by a chart version that had them in crds/)
    // are refused by the umbrella until adopted with the README's commands.
    let crds_dir = root().join("crds").display().to_string();
    env.kubectl(&["apply", "--server-side", "-f", &crds_dir]).unwrap();
    let umbrella = charts_dir().join(UMBRELLA).display().to_string();
    // Every operator (and so every CRD), not only those on by default.
    let every = ["--set", "config-copier.enabled=true", "--set", "pod-debugger.enabled=true"];
    let mut install = vec!["install", "flotilla", umbrella.as_str(), "--namespace", ns.as_str()];
    install.extend(every);
    let out = helm(kc, &install).unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("invalid ownership metadata"),
        "the umbrella must not silently take CRDs it does not own: {err}"
    );
    for (name, _) in generated() {
        let release = "meta.helm.sh/release-name=flotilla".to_string();
        let namespace = format!("meta.helm.sh/release-namespace={ns}");
        env.kubectl(&["annotate", "--overwrite", "crd", &name, &release, &namespace]).unwrap();
        env.kubectl(&["label", "--overwrite", "crd", &name, "app.kubernetes.io/managed-by=Helm"]).unwrap();
    }
    helm_ok(kc, &install).unwrap();
    for (name, want) in generated() {
        let c = crd(&env, &name).await.unwrap_or_else(|| panic!("CRD {name} missing"));
        assert_eq!(annotation(&c, "meta.helm.sh/release-name").as_deref(), Some("flotilla"), "{name}");
        assert_eq!(annotation(&c, "helm.sh/resource-policy").as_deref(), Some("keep"), "{name}");
        assert_eq!(serde_json::to_value(&c.spec.versions).unwrap(), want["spec"]["versions"], "{name}");
    }
    helm_ok(kc, &["uninstall", "flotilla", "--namespace", &ns, "--wait"]).unwrap();
    for (name, _) in generated() {
        assert!(crd(&env, &name).await.is_some(), "CRD {name} must survive the umbrella's uninstall");
    }
    let _ = std::fs::remove_dir_all(older);
}

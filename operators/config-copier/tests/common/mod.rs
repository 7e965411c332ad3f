//! Helpers for config-copier's tests against the real control plane: the
//! CRD, the operator binary (one per test binary, running as a
//! ServiceAccount with exactly the RBAC rules the README lists), objects.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use flotilla_testenv::under_test::UnderTest;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Duration;

use flotilla_testenv::cluster::process::{Lifetime, Process, run_until_exit};
use flotilla_testenv::rbac::{self, Scope, account_with};
use flotilla_testenv::{TestEnv, wait_for};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::api::rbac::v1::PolicyRule;
use kube::api::{ListParams, ObjectMeta, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::{Value, json};

pub use config_copier::crd::CopyRule;

pub const T: Duration = Duration::from_secs(40);

/// The RBAC rules config-copier needs (the README and chart list the same).
pub fn rbac_rules() -> Vec<PolicyRule> {
    vec![
        rbac::rule(&["flotilla.dev"], &["copyrules"], &["list", "watch", "patch"]),
        rbac::rule(&["flotilla.dev"], &["copyrules/status"], &["patch"]),
        rbac::rule(&["flotilla.dev"], &["copyrequests"], &["list", "watch", "patch"]),
        rbac::rule(&["flotilla.dev"], &["copyrequests/status"], &["patch"]),
        rbac::rule(&[""], &["namespaces"], &["get", "list", "watch"]),
        rbac::rule(&[""], &["configmaps", "secrets"], &["get", "list", "watch", "create", "patch", "delete"]),
        rbac::rule(&["events.k8s.io"], &["events"], &["create", "patch"]),
        rbac::rule(&["coordination.k8s.io"], &["leases"], &["get", "create", "update"]),
        // As the chart grants it with admissionPolicy.enabled (by name there).
        rbac::rule(
            &["admissionregistration.k8s.io"],
            &["validatingadmissionpolicies", "validatingadmissionpolicybindings"],
            &["get"],
        ),
    ]
}

/// Environment the shared operator of this test binary starts with, besides
/// its kubeconfig (set before its first use; a test binary of its own for
/// settings the other tests must not see).
pub static OPERATOR_ENV: std::sync::Mutex<Vec<(&'static str, String)>> = std::sync::Mutex::new(Vec::new());

/// RBAC rules the shared operator of this test binary gets besides
/// [`rbac_rules`] (set before its first use; e.g. what the chart grants
/// with `rollouts.enabled`).
pub static OPERATOR_EXTRA_RULES: std::sync::Mutex<Vec<PolicyRule>> = std::sync::Mutex::new(Vec::new());

/// The operator under test: this build's, or `CONFIG_COPIER_TEST_BINARY`
/// (another build, e.g. main's, to see an attack test fail before its fix).
pub const OPERATOR: UnderTest = UnderTest {
    name: "config-copier",
    other_build: "CONFIG_COPIER_TEST_BINARY",
    built: env!("CARGO_BIN_EXE_config-copier"),
    crds: config_copier::crds,
};

/// The namespace the shared operator runs in (its `POD_NAMESPACE`: protected).
pub const OPERATOR_NAMESPACE: &str = "config-copier-system";

pub fn free_port() -> u16 {
    flotilla_testenv::cluster::process::free_port().expect("a free port")
}

/// The shared operator process of this test binary.
pub struct Running {
    pub pid: u32,
    pub metrics: String,
    pub health: String,
    pub log: PathBuf,
}

static SHARED_OPERATOR: OnceLock<Running> = OnceLock::new();

/// Starts (once) the operator binary as ServiceAccount
/// `config-copier-system/config-copier` bound to [`rbac_rules`] only, and
/// waits until it is ready.
pub async fn operator(env: &TestEnv) -> &'static Running {
    OPERATOR.install_crds(env).await;
    if let Some(r) = SHARED_OPERATOR.get() {
        return r;
    }
    let client = env.client().await;
    let ns = OPERATOR_NAMESPACE;
    let _ = Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &Namespace { metadata: meta(ns, &[]), ..Default::default() })
        .await;
    let mut rules = rbac_rules();
    rules.extend(OPERATOR_EXTRA_RULES.lock().map(|r| r.clone()).unwrap_or_default());
    let kubeconfig = account_with(env, Scope::Cluster, "flotilla-config-copier", ns, "config-copier", rules).await;

    let running = SHARED_OPERATOR.get_or_init(|| {
        let (mp, hp) = (free_port(), free_port());
        let dir = std::env::temp_dir().join(format!("config-copier-{}-{mp}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("the operator's log directory");
        let args = vec![
            format!("--metrics-bind-address=127.0.0.1:{mp}"),
            format!("--health-probe-bind-address=127.0.0.1:{hp}"),
            "--log-format=json".to_string(),
        ];
        let mut vars: Vec<(&str, String)> = vec![
            ("KUBECONFIG", kubeconfig.display().to_string()),
            ("POD_NAMESPACE", OPERATOR_NAMESPACE.to_string()),
            ("RUST_LOG", "info,config_copier=debug".to_string()),
        ];
        vars.extend(OPERATOR_ENV.lock().map(|e| e.clone()).unwrap_or_default());
        // Started from a thread that lives as long as the test binary, so
        // the operator ends with the binary, not with the test that began it.
        run_until_exit("config-copier", dir, move |dir| {
            let vars: Vec<(&str, &str)> = vars.iter().map(|(k, v)| (*k, v.as_str())).collect();
            let p = Process::spawn_with_env(
                "config-copier",
                &OPERATOR.binary(),
                &args,
                dir,
                Lifetime::DieWithParent,
                &vars,
            )
            .map_err(|e| format!("spawning config-copier: {e}"))?;
            let pid = p.child.id();
            let running = Running {
                pid,
                metrics: format!("http://127.0.0.1:{mp}/metrics"),
                health: format!("http://127.0.0.1:{hp}"),
                log: p.log.clone(),
            };
            Ok((running, vec![pid], p))
        })
        .unwrap_or_else(|e| panic!("{e}"))
    });
    let url = format!("{}/readyz", running.health);
    wait_for("config-copier to be ready", T, || {
        let url = url.clone();
        async move { Ok::<_, String>(matches!(get(&url).await, Ok((200, _))).then_some(())) }
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\nlogs:\n{}", std::fs::read_to_string(&running.log).unwrap_or_default()));
    running
}

/// `(status, body)` of a GET.
pub async fn get(url: &str) -> Result<(u16, String), reqwest::Error> {
    let r = reqwest::Client::new().get(url).timeout(Duration::from_secs(5)).send().await?;
    let code = r.status().as_u16();
    Ok((code, r.text().await?))
}

pub fn meta(name: &str, labels: &[(&str, &str)]) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.to_string()),
        labels: (!labels.is_empty()).then(|| labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()),
        ..Default::default()
    }
}

pub fn rand_suffix() -> String {
    format!("{:06x}", rand_u32() & 0xff_ffff)
}

fn rand_u32() -> u32 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_nanos());
    h.finish() as u32
}

/// The shared operator running, an admin client and a fresh namespace that
/// accepts copies (a test's source namespace).
pub async fn setup(prefix: &str) -> (Client, String) {
    let env = flotilla_testenv::shared();
    operator(&env).await;
    let client = env.client().await;
    (client, target(prefix).await)
}

/// The namespace label by which a namespace accepts copies.
pub const ACCEPT: &str = "flotilla.dev/accept-copies";

/// A fresh namespace `<prefix>-<random>` that accepts copies from everyone.
pub async fn target(prefix: &str) -> String {
    let env = flotilla_testenv::shared();
    let ns = env.namespace(prefix).await.unwrap();
    label_namespace(&env.client().await, &ns, ACCEPT, Some("true")).await;
    ns
}

/// Creates a namespace with exactly this name and labels (plus the test
/// label and, unless the labels say otherwise, consent to copies).
pub async fn namespace(client: &Client, name: &str, labels: &[(&str, &str)]) -> String {
    let mut m = meta(name, labels);
    let l = m.labels.get_or_insert_with(BTreeMap::new);
    l.insert("flotilla.dev/test".into(), "true".into());
    l.entry(ACCEPT.into()).or_insert_with(|| "true".into());
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &Namespace { metadata: m, ..Default::default() })
        .await
        .unwrap();
    name.to_string()
}

pub async fn label_namespace(client: &Client, name: &str, key: &str, value: Option<&str>) {
    Api::<Namespace>::all(client.clone())
        .patch(name, &PatchParams::default(), &Patch::Merge(json!({"metadata": {"labels": {key: value}}})))
        .await
        .unwrap();
}

pub async fn configmap(client: &Client, ns: &str, name: &str, labels: &[(&str, &str)], data: &[(&str, &str)]) {
    let cm = ConfigMap {
        metadata: meta(name, labels),
        data: Some(data.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()),
        ..Default::default()
    };
    Api::<ConfigMap>::namespaced(client.clone(), ns).create(&PostParams::default(), &cm).await.unwrap();
}

/// Creates a CopyRule from a JSON spec.
pub async fn rule(client: &Client, ns: &str, name: &str, spec: Value) -> Result<CopyRule, kube::Error> {
    let r: CopyRule = serde_json::from_value(json!({
        "apiVersion": "flotilla.dev/v1alpha1", "kind": "CopyRule",
        "metadata": {"name": name, "namespace": ns},
        "spec": spec,
    }))
    .map_err(kube::Error::SerdeError)?;
    Api::<CopyRule>::namespaced(client.clone(), ns).create(&PostParams::default(), &r).await
}

/// A rule copying the `copy=yes` objects of `kind` into `targets`, with
/// `extra` spec fields.
pub async fn copy_rule(client: &Client, ns: &str, name: &str, kind: &str, targets: &[&str], extra: Value) {
    let mut spec =
        json!({"kind": kind, "selector": {"matchLabels": {"copy": "yes"}}, "namespaces": {"include": targets}});
    if let (Some(s), Some(e)) = (spec.as_object_mut(), extra.as_object()) {
        s.extend(e.clone());
    }
    rule(client, ns, name, spec).await.unwrap();
}

/// Creates a CopyRule from raw JSON (to test what admission rejects).
pub async fn raw_rule(client: &Client, ns: &str, name: &str, spec: Value) -> Result<Value, kube::Error> {
    let api: Api<kube::api::DynamicObject> =
        Api::namespaced_with(client.clone(), ns, &kube::api::ApiResource::erase::<CopyRule>(&()));
    let obj: kube::api::DynamicObject = serde_json::from_value(json!({
        "apiVersion": "flotilla.dev/v1alpha1", "kind": "CopyRule",
        "metadata": {"name": name, "namespace": ns},
        "spec": spec,
    }))
    .map_err(kube::Error::SerdeError)?;
    let pp = PatchParams::apply("config-copier-tests").validation_strict();
    let created = api.patch(name, &pp, &Patch::Apply(&obj)).await?;
    serde_json::to_value(created).map_err(kube::Error::SerdeError)
}

/// Waits until `ns/name` exists (as a ConfigMap) and `check` holds.
pub async fn wait_cm(client: &Client, ns: &str, name: &str, check: impl Fn(&ConfigMap) -> bool) -> ConfigMap {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    let check = &check;
    wait_for(&format!("ConfigMap {ns}/{name}"), T, || {
        let api = api.clone();
        async move { Ok::<_, kube::Error>(api.get_opt(name).await?.filter(|c| check(c))) }
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\noperator log tail:\n{}", log_tail()))
}

pub async fn wait_secret(client: &Client, ns: &str, name: &str, check: impl Fn(&Secret) -> bool) -> Secret {
    let api: Api<Secret> = Api::namespaced(client.clone(), ns);
    let check = &check;
    wait_for(&format!("Secret {ns}/{name}"), T, || {
        let api = api.clone();
        async move { Ok::<_, kube::Error>(api.get_opt(name).await?.filter(|c| check(c))) }
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\noperator log tail:\n{}", log_tail()))
}

/// Waits until ConfigMap `ns/name` does not exist.
pub async fn wait_cm_gone(client: &Client, ns: &str, name: &str) {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    wait_for(&format!("ConfigMap {ns}/{name} to be gone"), T, || {
        let api = api.clone();
        async move { Ok::<_, kube::Error>(api.get_opt(name).await?.is_none().then_some(())) }
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\noperator log tail:\n{}", log_tail()));
}

/// Asserts ConfigMap `ns/name` stays absent for a while (the operator has
/// had time to act: callers wait for a positive signal first).
pub async fn assert_cm_absent(client: &Client, ns: &str, name: &str) {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    for _ in 0..10 {
        assert!(api.get_opt(name).await.unwrap().is_none(), "ConfigMap {ns}/{name} should not exist");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Waits until the rule's status satisfies `check`.
pub async fn wait_rule(client: &Client, ns: &str, name: &str, check: impl Fn(&CopyRule) -> bool) -> CopyRule {
    let api: Api<CopyRule> = Api::namespaced(client.clone(), ns);
    let check = &check;
    wait_for(&format!("CopyRule {ns}/{name}"), T, || {
        let api = api.clone();
        async move { Ok::<_, kube::Error>(api.get_opt(name).await?.filter(|r| check(r))) }
    })
    .await
    .unwrap_or_else(|e| {
        panic!("{e}\noperator log tail:\n{}", log_tail());
    })
}

pub fn condition<'a>(
    r: &'a CopyRule,
    type_: &str,
) -> Option<&'a k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition> {
    r.status.as_ref()?.conditions.iter().find(|c| c.type_ == type_)
}

pub fn ready(r: &CopyRule) -> Option<&str> {
    condition(r, "Ready").map(|c| c.status.as_str())
}

/// Waits for an Event with `reason` about CopyRule `ns/name`.
pub async fn wait_event(client: &Client, ns: &str, rule: &str, reason: &str) -> Event {
    let api: Api<Event> = Api::namespaced(client.clone(), ns);
    wait_for(&format!("a {reason} event on {ns}/{rule}"), T, || {
        let api = api.clone();
        async move {
            let list = api.list(&ListParams::default()).await?;
            Ok::<_, kube::Error>(list.items.into_iter().find(|e| {
                e.reason.as_deref() == Some(reason)
                    && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(rule)
            }))
        }
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\noperator log tail:\n{}", log_tail()))
}

pub fn log_tail() -> String {
    let Some(r) = SHARED_OPERATOR.get() else { return String::new() };
    let text = std::fs::read_to_string(&r.log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(40)..].join("\n")
}

pub fn label<'a>(m: &'a ObjectMeta, key: &str) -> Option<&'a str> {
    m.labels.as_ref()?.get(key).map(String::as_str)
}

pub fn data<'a>(cm: &'a ConfigMap, key: &str) -> Option<&'a str> {
    cm.data.as_ref()?.get(key).map(String::as_str)
}

/// A ValidatingAdmissionPolicy (and its binding), named `name`, refusing
/// the `operation` on `resources` of API `group` in namespace `ns` — as a
/// cluster's own policy (Kyverno, Gatekeeper) refuses the operator's
/// writes. [`remove_deny_policy`] lifts it; the caller waits for it to be
/// enforced (the API server loads policies asynchronously).
pub async fn deny_in_namespace(client: &Client, name: &str, ns: &str, group: &str, resources: &str, operation: &str) {
    use kube::api::{ApiResource, DynamicObject};
    let policy: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": [{
                "apiGroups": [group], "apiVersions": ["*"], "operations": [operation], "resources": [resources]
            }]},
            "validations": [{"expression": "false", "message": format!("{operation} of {resources} is denied here (test)")}]
        }
    }))
    .unwrap();
    let binding: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": name},
        "spec": {
            "policyName": name, "validationActions": ["Deny"],
            "matchResources": {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns}}}
        }
    }))
    .unwrap();
    let pp = PatchParams::apply("tests").force();
    for (obj, kind, plural) in [
        (&policy, "ValidatingAdmissionPolicy", "validatingadmissionpolicies"),
        (&binding, "ValidatingAdmissionPolicyBinding", "validatingadmissionpolicybindings"),
    ] {
        let ar = ApiResource::from_gvk_with_plural(
            &kube::api::GroupVersionKind::gvk("admissionregistration.k8s.io", "v1", kind),
            plural,
        );
        Api::<DynamicObject>::all_with(client.clone(), &ar).patch(name, &pp, &Patch::Apply(obj)).await.unwrap();
    }
}

/// Lifts the policy [`deny_in_namespace`] installed.
pub async fn remove_deny_policy(client: &Client, name: &str) {
    flotilla_testenv::admission_policy::remove(client, name).await;
}

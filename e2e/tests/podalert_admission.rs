//! The pod-alert chart's ValidatingAdmissionPolicy, on the real API server:
//! a PodAlert sends its namespace's pod log tails to sinks whose URLs come
//! from Secrets its author names, so only a user who could read those logs
//! (`get pods/log`) and each named Secret themselves may write one. Requests
//! are made as those users by impersonation.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::time::Duration;

use flotilla_e2e::access::{create_settled, grant};
use flotilla_e2e::{apply_chart_template, apply_crds};
use flotilla_testenv::{shared, wait_for};
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams};
use kube::{Api, Client};
use serde_json::{Value, json};

const RELEASE: &str = "pavap";

fn alerts(client: &Client, ns: &str) -> Api<DynamicObject> {
    let ar = ApiResource::from_gvk(&GroupVersionKind::gvk("flotilla.dev", "v1alpha1", "PodAlert"));
    Api::namespaced_with(client.clone(), ns, &ar)
}

fn alert(name: &str, sinks: Value) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": "flotilla.dev/v1alpha1", "kind": "PodAlert", "metadata": {"name": name},
        "spec": {"alerts": {"checkRunningPods": true}, "sinks": sinks}
    }))
    .unwrap()
}

#[tokio::test]
async fn only_users_who_could_read_what_it_sends_write_podalerts() {
    let env = shared();
    let admin = env.client().await;
    apply_crds(&admin).await.unwrap();
    let kinds = apply_chart_template(&admin, "pod-alert", RELEASE, "templates/podalert-access.yaml").await.unwrap();
    assert_eq!(kinds, ["ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"]);
    let ns = env.namespace("pavap").await.unwrap();
    let writer = json!([{"apiGroups": ["flotilla.dev"], "resources": ["podalerts"],
                         "verbs": ["get", "list", "create", "update", "patch", "delete"]}]);

    // dave may write PodAlerts, and read no pod log: refused.
    let dave = format!("dave-{ns}");
    grant(&admin, &ns, &dave, "podalert-writer", writer.clone()).await;
    let as_dave = alerts(&env.impersonating(&dave, &["system:authenticated"]).await.unwrap(), &ns);
    let msg = create_settled(&as_dave, &alert("a", json!({})), Some("pods/log")).await.unwrap_err();
    assert!(msg.contains("get on pods/log"), "{msg}");

    // Once he may read the logs himself: allowed.
    grant(&admin, &ns, &dave, "logs", json!([{"apiGroups": [""], "resources": ["pods/log"], "verbs": ["get"]}])).await;
    create_settled(&as_dave, &alert("a", json!({})), None).await.unwrap();
    // allNamespaces needs every namespace's logs: his are this one's only.
    let mut everywhere = alert("everywhere", json!({}));
    everywhere.data["spec"]["allNamespaces"] = json!(true);
    let msg = create_settled(&as_dave, &everywhere, Some("allNamespaces")).await.unwrap_err();
    assert!(msg.contains("pods/log cluster-wide"), "{msg}");

    // A Slack sink whose Secret he may not read: refused; with get on that
    // Secret (by name): allowed. A webhook naming another Secret: refused.
    let slack = json!({"slack": {"webhookSecretRef": {"name": "team-slack", "key": "url"}}});
    let msg = create_settled(&as_dave, &alert("s", slack.clone()), Some("sinks.slack")).await.unwrap_err();
    assert!(msg.contains("get on that Secret"), "{msg}");
    let read_hook =
        json!([{"apiGroups": [""], "resources": ["secrets"], "resourceNames": ["team-slack"], "verbs": ["get"]}]);
    grant(&admin, &ns, &dave, "read-team-slack", read_hook).await;
    create_settled(&as_dave, &alert("s", slack), None).await.unwrap();
    let webhook = json!({"webhook": {"urlSecretRef": {"name": "other-team", "key": "url"}}});
    create_settled(&as_dave, &alert("w", webhook), Some("sinks.webhook")).await.unwrap_err();
    // Teams and PagerDuty likewise: another team's integration key would
    // let him page their on-call with a crash loop of his own.
    let teams = json!({"teams": {"webhookSecretRef": {"name": "other-team", "key": "teams"}}});
    create_settled(&as_dave, &alert("t", teams), Some("sinks.teams")).await.unwrap_err();
    let paging = |secret: &str| json!({"pagerduty": {"routingKeySecretRef": {"name": secret, "key": "key"}}});
    let msg = create_settled(&as_dave, &alert("p", paging("oncall-key")), Some("sinks.pagerduty")).await.unwrap_err();
    assert!(msg.contains("get on that Secret"), "{msg}");
    create_settled(&as_dave, &alert("p", paging("team-slack")), None).await.unwrap();
    // A Slack bot token posts as the bot in every channel it is in: another
    // team's is refused, one he may read is not.
    let bot = |secret: &str| json!({"slack": {"botTokenSecretRef": {"name": secret, "key": "token"}, "channel": "C0123456789"}});
    let msg = create_settled(&as_dave, &alert("b", bot("other-team")), Some("botTokenSecretRef")).await.unwrap_err();
    assert!(msg.contains("get on that Secret"), "{msg}");
    create_settled(&as_dave, &alert("b", bot("team-slack")), None).await.unwrap();

    // erin writes PodAlerts and reads no log: a label edit passes, a spec
    // update is judged like a create.
    let erin = format!("erin-{ns}");
    grant(&admin, &ns, &erin, "podalert-writer-erin", writer).await;
    let as_erin = alerts(&env.impersonating(&erin, &["system:authenticated"]).await.unwrap(), &ns);
    let label = Patch::Merge(json!({"metadata": {"labels": {"team": "payments"}}}));
    wait_for("erin's grant to apply", Duration::from_secs(60), || {
        let (api, label) = (as_erin.clone(), label.clone());
        async move { Ok::<_, String>(api.patch("a", &PatchParams::default(), &label).await.ok().map(|_| ())) }
    })
    .await
    .unwrap();
    let spec = Patch::Merge(json!({"spec": {"alerts": {"checkRunningPods": false}}}));
    let refused = as_erin.patch("a", &PatchParams::default(), &spec).await;
    assert!(matches!(&refused, Err(kube::Error::Api(s)) if s.message.contains("pods/log")), "{refused:?}");
}

//! `spec.target` against a real control plane (issue 31, "Copy names"):
//! two teams publishing the same name no longer collide under their own
//! prefixes; `target.name` renames a source's copy, and renaming it again
//! makes the new copy and prunes the old (never an object not ours); one
//! name for several sources is refused at run time with a condition and a
//! Warning, copying nothing under it. What admission refuses is in
//! `validation.rs`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams};
use serde_json::json;

const RULE_LABEL: &str = "flotilla.dev/copy-rule";
const SOURCE_ANNOTATION: &str = "flotilla.dev/source";

fn annotation<'a>(cm: &'a ConfigMap, key: &str) -> Option<&'a str> {
    cm.metadata.annotations.as_ref()?.get(key).map(String::as_str)
}

/// (a) Two teams both publish `ca-crt`, each from its own namespace, into
/// one namespace: with prefixes both copies exist, each with its team's
/// data and marks, and neither rule reports a conflict.
#[tokio::test]
async fn two_teams_publishing_one_name_do_not_collide_under_prefixes() {
    let (client, team_a) = setup("names-team-a").await;
    let team_b = target("names-team-b").await;
    let apps = target("names-apps").await;
    for (team, prefix) in [(&team_a, "team-a-"), (&team_b, "team-b-")] {
        configmap(&client, team, "ca-crt", &[("copy", "yes")], &[("ca.crt", &format!("pem of {team}"))]).await;
        copy_rule(&client, team, "ca", "ConfigMap", &[&apps], json!({"target": {"namePrefix": prefix}})).await;
    }
    for (team, copy) in [(&team_a, "team-a-ca-crt"), (&team_b, "team-b-ca-crt")] {
        let cm = wait_cm(&client, &apps, copy, |c| data(c, "ca.crt") == Some(format!("pem of {team}").as_str())).await;
        assert_eq!(label(&cm.metadata, RULE_LABEL), Some(format!("{team}.ca").as_str()));
        assert_eq!(annotation(&cm, SOURCE_ANNOTATION), Some(format!("{team}/ca-crt").as_str()));
        let r = wait_rule(&client, team, "ca", |r| ready(r) == Some("True")).await;
        let st = r.status.unwrap();
        assert_eq!((st.copies, st.conflicts), (1, 0), "{st:?}");
    }
    assert_cm_absent(&client, &apps, "ca-crt").await;
}

/// (b) `target.name` names the one source's copy; changing it makes the
/// copy under the new name and prunes the old one. Renamed onto an object
/// the rule does not own, that object is a conflict and left alone (and
/// the copy under the previous name is still pruned).
#[tokio::test]
async fn target_name_renames_the_copy_and_a_rename_prunes_the_old() {
    let (client, src) = setup("names-rename-src").await;
    let dst = target("names-rename-dst").await;
    configmap(&client, &src, "settings", &[("copy", "yes")], &[("mode", "fast")]).await;
    copy_rule(&client, &src, "r", "ConfigMap", &[&dst], json!({"target": {"name": "app-settings"}})).await;
    let first = wait_cm(&client, &dst, "app-settings", |c| data(c, "mode") == Some("fast")).await;
    assert_eq!(annotation(&first, SOURCE_ANNOTATION), Some(format!("{src}/settings").as_str()));
    assert_cm_absent(&client, &dst, "settings").await;

    let rules: Api<CopyRule> = Api::namespaced(client.clone(), &src);
    let rename = |name: &'static str| {
        let rules = rules.clone();
        async move {
            let patch = json!({"spec": {"target": {"name": name}}});
            rules.patch("r", &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
        }
    };
    rename("app-settings-v2").await;
    wait_cm(&client, &dst, "app-settings-v2", |c| data(c, "mode") == Some("fast")).await;
    wait_cm_gone(&client, &dst, "app-settings").await;
    wait_rule(&client, &src, "r", |r| {
        ready(r) == Some("True") && r.status.as_ref().is_some_and(|s| s.copies == 1 && s.desired == 1)
    })
    .await;
    // The renamed copy follows its source (an update, under the copy's name).
    Api::<ConfigMap>::namespaced(client.clone(), &src)
        .patch("settings", &PatchParams::default(), &Patch::Merge(json!({"data": {"mode": "slow"}})))
        .await
        .unwrap();
    wait_cm(&client, &dst, "app-settings-v2", |c| data(c, "mode") == Some("slow")).await;

    // A name someone else's object holds: the conflict path, nothing taken.
    configmap(&client, &dst, "taken", &[], &[("mode", "theirs")]).await;
    rename("taken").await;
    let r = wait_rule(&client, &src, "r", |r| r.status.as_ref().is_some_and(|s| s.conflicts == 1)).await;
    let st = r.status.unwrap();
    assert_eq!((st.conflicting[0].name.as_str(), st.conflicting[0].reason.as_str()), ("taken", "NotOwned"));
    wait_cm_gone(&client, &dst, "app-settings-v2").await;
    let theirs = Api::<ConfigMap>::namespaced(client.clone(), &dst).get("taken").await.unwrap();
    assert_eq!(data(&theirs, "mode"), Some("theirs"));
    assert_eq!(label(&theirs.metadata, RULE_LABEL), None);
}

/// (c) `target.name` with a selector that matches two sources: the rule
/// is Ready=False TargetNameAmbiguous with a Warning, and nothing is
/// copied (under that name or the sources'). With one source left it
/// copies it under the name.
#[tokio::test]
async fn one_name_for_two_sources_is_refused_with_a_condition_and_a_warning() {
    let (client, src) = setup("names-ambiguous-src").await;
    let dst = target("names-ambiguous-dst").await;
    configmap(&client, &src, "one", &[("copy", "yes")], &[("n", "1")]).await;
    configmap(&client, &src, "two", &[("copy", "yes")], &[("n", "2")]).await;
    copy_rule(&client, &src, "r", "ConfigMap", &[&dst], json!({"target": {"name": "merged"}})).await;
    let r = wait_rule(&client, &src, "r", |r| {
        condition(r, "Ready").is_some_and(|c| c.status == "False" && c.reason == "TargetNameAmbiguous")
    })
    .await;
    let message = &condition(&r, "Ready").unwrap().message;
    assert!(message.contains("merged") && message.contains("2 sources (one, two)"), "{message}");
    assert_eq!(r.status.as_ref().map(|s| s.sources), Some(2));
    let event = wait_event(&client, &src, "r", "TargetNameAmbiguous").await;
    assert_eq!(event.type_.as_deref(), Some("Warning"));
    for name in ["merged", "one", "two"] {
        assert_cm_absent(&client, &dst, name).await;
    }

    // One source left: copied under the name, Ready again.
    Api::<ConfigMap>::namespaced(client.clone(), &src).delete("two", &DeleteParams::default()).await.unwrap();
    wait_cm(&client, &dst, "merged", |c| data(c, "n") == Some("1")).await;
    wait_rule(&client, &src, "r", |r| ready(r) == Some("True")).await;
}

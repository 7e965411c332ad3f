//! The load-tester chart's ValidatingAdmissionPolicy and roles, on the real
//! API server: a LoadTest or SimpleDeployment makes the operator create
//! pods, so the policy judges every spec change (not only a change of
//! spec.image): a user who may not create pods in the namespace neither
//! sets an image nor changes anything else of an object that runs one (the
//! operator would run it again with their edit); a literal Authorization,
//! Proxy-Authorization or Cookie header is refused (whoever reads the
//! LoadTest or its pods would read it), for everyone; a header value from a
//! Secret needs the right to read that Secret. Label edits pass. Requests
//! are made as those users by impersonation.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use flotilla_e2e::access::{bind, create_settled, grant};
use flotilla_e2e::{apply_chart_template, apply_crds};
use flotilla_testenv::shared;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::{Value, json};

const RELEASE: &str = "ltvap";

fn objects(client: &Client, ns: &str, kind: &str) -> Api<DynamicObject> {
    let ar = ApiResource::from_gvk(&GroupVersionKind::gvk("flotilla.dev", "v1alpha1", kind));
    Api::namespaced_with(client.clone(), ns, &ar)
}

fn object(kind: &str, name: &str, spec: Value) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": "flotilla.dev/v1alpha1", "kind": kind, "metadata": {"name": name}, "spec": spec
    }))
    .unwrap()
}

fn load_test(name: &str, test: Value) -> DynamicObject {
    let mut t = json!({"serviceName": "web"});
    if let (Some(t), Some(extra)) = (t.as_object_mut(), test.as_object()) {
        t.extend(extra.clone());
    }
    object("LoadTest", name, json!({"replicas": 1, "test": t}))
}

fn refused_with(result: Result<DynamicObject, kube::Error>, needle: &str) -> String {
    match result {
        Err(kube::Error::Api(s)) if s.message.contains(needle) => s.message,
        other => panic!("not refused with {needle:?}: {other:?}"),
    }
}

/// The chart's access objects applied; a fresh namespace; user `frank`
/// there with the chart's LoadTest role only (no pods, no Secrets).
async fn setup(prefix: &str) -> (flotilla_testenv::TestEnv, Client, String, String, Client) {
    let env = shared();
    let admin = env.client().await;
    apply_crds(&admin).await.unwrap();
    let kinds = apply_chart_template(&admin, "load-tester", RELEASE, "templates/loadtest-access.yaml").await.unwrap();
    assert_eq!(kinds, ["ClusterRole", "ClusterRole", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"]);
    let ns = env.namespace(prefix).await.unwrap();
    let frank = format!("frank-{ns}");
    bind(&admin, &ns, &frank, "ClusterRole", &format!("{RELEASE}-load-tester-edit")).await;
    let as_frank = env.impersonating(&frank, &["system:authenticated"]).await.unwrap();
    // His grant applies within moments: a plain LoadTest passes then.
    create_settled(&objects(&as_frank, &ns, "LoadTest"), &load_test("plain", json!({})), None).await.unwrap();
    // So does the policy: until it refuses a literal credential even to an
    // admin, what the tests write is not judged yet (seen in CI: an admin's
    // literal Authorization accepted moments after the policy was applied).
    let probe = load_test("policy-probe", json!({"headers": {"Authorization": "probe"}}));
    create_settled(&objects(&admin, &ns, "LoadTest"), &probe, Some("valueFrom")).await.unwrap_err();
    (env, admin, ns, frank, as_frank)
}

/// An admin's LoadTest and SimpleDeployment with their own images: a user
/// who may not create pods changing anything of their spec would have the
/// operator run that image with his edit (more replicas, another target).
#[tokio::test]
async fn every_spec_change_of_an_object_with_an_image_needs_the_right_to_create_pods() {
    let (_env, admin, ns, _frank, as_frank) = setup("ltvap-image").await;
    let (frank_tests, frank_sds) = (objects(&as_frank, &ns, "LoadTest"), objects(&as_frank, &ns, "SimpleDeployment"));
    let mut own_image = load_test("own-image", json!({}));
    own_image.data["spec"]["image"] = json!("localhost/custom:1");
    create_settled(&frank_tests, &own_image, Some("spec.image")).await.unwrap_err();
    let (admin_tests, admin_sds) = (objects(&admin, &ns, "LoadTest"), objects(&admin, &ns, "SimpleDeployment"));
    admin_tests.create(&PostParams::default(), &own_image).await.unwrap();
    admin_sds
        .create(&PostParams::default(), &object("SimpleDeployment", "sd", json!({"image": "localhost/custom:1"})))
        .await
        .unwrap();
    let more = Patch::Merge(json!({"spec": {"replicas": 50}}));
    let msg = refused_with(frank_tests.patch("own-image", &PatchParams::default(), &more).await, "spec.image");
    assert!(msg.contains("create pods"), "{msg}");
    let sleepier = Patch::Merge(json!({"spec": {"sleepytime": "60"}}));
    refused_with(frank_sds.patch("sd", &PatchParams::default(), &sleepier).await, "spec.image");
    // Labels and annotations are not the spec.
    let label = Patch::Merge(json!({"metadata": {"labels": {"team": "perf"}}}));
    frank_tests.patch("own-image", &PatchParams::default(), &label).await.unwrap();
    frank_sds.patch("sd", &PatchParams::default(), &label).await.unwrap();
    // Without an image, his spec changes pass.
    let other = Patch::Merge(json!({"spec": {"replicas": 2}}));
    frank_tests.patch("plain", &PatchParams::default(), &other).await.unwrap();
}

/// A literal credential is refused whoever writes it (an admin here), in
/// either form and any case, at create and at update; other literal
/// headers pass.
#[tokio::test]
async fn a_literal_credential_header_is_refused() {
    let (_env, admin, ns, _frank, _as_frank) = setup("ltvap-literal").await;
    let admin_tests = objects(&admin, &ns, "LoadTest");
    for (i, test) in [
        json!({"headers": {"authorization": "Bearer t0ken"}}),
        json!({"headers": {"Cookie": "session=abc"}}),
        json!({"httpHeaders": [{"name": "Proxy-Authorization", "value": "Basic eDp5"}]}),
        json!({"httpHeaders": [{"name": "AUTHORIZATION", "value": "Bearer t0ken"}]}),
    ]
    .into_iter()
    .enumerate()
    {
        let msg = refused_with(
            admin_tests.create(&PostParams::default(), &load_test(&format!("literal-{i}"), test.clone())).await,
            "valueFrom",
        );
        assert!(msg.contains("literal"), "{test}: {msg}");
    }
    let literal = Patch::Merge(json!({"spec": {"test": {"headers": {"Authorization": "Bearer t0ken"}}}}));
    refused_with(admin_tests.patch("plain", &PatchParams::default(), &literal).await, "valueFrom");
    let fine = json!({"headers": {"X-Request-Source": "ci"}, "httpHeaders": [{"name": "X-Tenant", "value": "a"}]});
    admin_tests.create(&PostParams::default(), &load_test("fine", fine)).await.unwrap();
}

/// A header from a Secret: only a user who may get that Secret names it,
/// or changes the spec of a LoadTest that names it (the value would go
/// where he points it). The schema wants exactly one of value and
/// valueFrom.
#[tokio::test]
async fn a_header_from_a_secret_needs_the_right_to_read_that_secret() {
    let (_env, admin, ns, frank, as_frank) = setup("ltvap-secret").await;
    let (frank_tests, admin_tests) = (objects(&as_frank, &ns, "LoadTest"), objects(&admin, &ns, "LoadTest"));
    let token = |secret: &str| {
        json!({"httpHeaders": [{"name": "Authorization",
                                "valueFrom": {"secretKeyRef": {"name": secret, "key": "header"}}}]})
    };
    let msg = create_settled(&frank_tests, &load_test("secret", token("api-token")), Some("Secret")).await.unwrap_err();
    assert!(msg.contains("get on that Secret"), "{msg}");
    let read = json!([{"apiGroups": [""], "resources": ["secrets"], "resourceNames": ["api-token"], "verbs": ["get"]}]);
    grant(&admin, &ns, &frank, "read-api-token", read).await;
    create_settled(&frank_tests, &load_test("secret", token("api-token")), None).await.unwrap();
    create_settled(&frank_tests, &load_test("other", token("other-token")), Some("get on that Secret"))
        .await
        .unwrap_err();
    admin_tests.create(&PostParams::default(), &load_test("admins", token("other-token"))).await.unwrap();
    let elsewhere = Patch::Merge(json!({"spec": {"test": {"serviceName": "franks"}}}));
    refused_with(frank_tests.patch("admins", &PatchParams::default(), &elsewhere).await, "get on that Secret");

    let both = json!({"httpHeaders": [{"name": "X-A", "value": "1",
                                       "valueFrom": {"secretKeyRef": {"name": "api-token", "key": "k"}}}]});
    let neither = json!({"httpHeaders": [{"name": "X-A"}]});
    for (name, test) in [("both", both), ("neither", neither)] {
        let msg = refused_with(admin_tests.create(&PostParams::default(), &load_test(name, test)).await, "exactly one");
        assert!(msg.contains("valueFrom"), "{msg}");
    }
}

/// A body from a Secret (test.bodyFrom): as a header's, only a user who may
/// get that Secret names it or repoints a LoadTest that names it; the
/// schema refuses it beside a literal body.
#[tokio::test]
async fn a_body_from_a_secret_needs_the_right_to_read_that_secret() {
    let (_env, admin, ns, frank, as_frank) = setup("ltvap-body").await;
    let (frank_tests, admin_tests) = (objects(&as_frank, &ns, "LoadTest"), objects(&admin, &ns, "LoadTest"));
    let body =
        |secret: &str| json!({"method": "POST", "bodyFrom": {"secretKeyRef": {"name": secret, "key": "order.json"}}});
    let msg = create_settled(&frank_tests, &load_test("body", body("payload")), Some("Secret")).await.unwrap_err();
    assert!(msg.contains("bodyFrom") && msg.contains("get on that Secret"), "{msg}");
    let read = json!([{"apiGroups": [""], "resources": ["secrets"], "resourceNames": ["payload"], "verbs": ["get"]}]);
    grant(&admin, &ns, &frank, "read-payload", read).await;
    create_settled(&frank_tests, &load_test("body", body("payload")), None).await.unwrap();
    create_settled(&frank_tests, &load_test("other", body("card-data")), Some("get on that Secret")).await.unwrap_err();
    admin_tests.create(&PostParams::default(), &load_test("admins", body("card-data"))).await.unwrap();
    let elsewhere = Patch::Merge(json!({"spec": {"test": {"serviceName": "franks"}}}));
    refused_with(frank_tests.patch("admins", &PatchParams::default(), &elsewhere).await, "get on that Secret");

    let both = json!({"body": "{}", "bodyFrom": {"secretKeyRef": {"name": "payload", "key": "order.json"}}});
    refused_with(admin_tests.create(&PostParams::default(), &load_test("both", both)).await, "mutually exclusive");
}

/// A scenario's requests (test.requests[]) are judged as the test's own
/// request is: a literal credential in one of them is refused for
/// everyone, and a header value or a body from a Secret needs the right to
/// read that Secret — else a user who may not read a Secret would have
/// the runners send it, through a request of a scenario, where he points
/// them. The schema refuses duplicate names, more than 8 requests, a
/// weight out of 1-100, and a test.body beside requests.
#[tokio::test]
async fn a_scenarios_requests_are_judged_as_the_tests_own_request() {
    let (_env, admin, ns, frank, as_frank) = setup("ltvap-scenario").await;
    let (frank_tests, admin_tests) = (objects(&as_frank, &ns, "LoadTest"), objects(&admin, &ns, "LoadTest"));
    let scenario = |second: Value| json!({"requests": [{"name": "home"}, second]});
    for (i, literal) in [
        json!({"name": "api", "headers": {"Authorization": "Bearer t0ken"}}),
        json!({"name": "api", "httpHeaders": [{"name": "cookie", "value": "session=abc"}]}),
    ]
    .into_iter()
    .enumerate()
    {
        let test = load_test(&format!("literal-{i}"), scenario(literal));
        let msg = refused_with(admin_tests.create(&PostParams::default(), &test).await, "valueFrom");
        assert!(msg.contains("test.requests"), "{msg}");
    }
    let header = |secret: &str| {
        scenario(json!({"name": "api", "httpHeaders": [{"name": "Authorization",
            "valueFrom": {"secretKeyRef": {"name": secret, "key": "header"}}}]}))
    };
    let body = |secret: &str| {
        scenario(json!({"name": "api", "method": "POST",
            "bodyFrom": {"secretKeyRef": {"name": secret, "key": "order.json"}}}))
    };
    for (name, test) in [("header", header("api-token")), ("body", body("payload"))] {
        let msg = create_settled(&frank_tests, &load_test(name, test), Some("Secret")).await.unwrap_err();
        assert!(msg.contains("get on that Secret"), "{name}: {msg}");
    }
    let read = json!([{"apiGroups": [""], "resources": ["secrets"], "resourceNames": ["api-token", "payload"],
                       "verbs": ["get"]}]);
    grant(&admin, &ns, &frank, "read-scenario-secrets", read).await;
    create_settled(&frank_tests, &load_test("header", header("api-token")), None).await.unwrap();
    create_settled(&frank_tests, &load_test("body", body("payload")), None).await.unwrap();
    create_settled(&frank_tests, &load_test("other", body("card-data")), Some("get on that Secret")).await.unwrap_err();
    // An admin's scenario naming another Secret: frank may not repoint it.
    admin_tests.create(&PostParams::default(), &load_test("admins", header("other-token"))).await.unwrap();
    let elsewhere = Patch::Merge(json!({"spec": {"test": {"serviceName": "franks"}}}));
    refused_with(frank_tests.patch("admins", &PatchParams::default(), &elsewhere).await, "get on that Secret");

    let schema_cases = [
        ("duplicate", json!({"requests": [{"name": "a"}, {"name": "a"}]}), "Duplicate value"),
        ("weight", json!({"requests": [{"name": "a", "weight": 0}]}), "weight"),
        ("nine", json!({"requests": (0..9).map(|i| json!({"name": format!("r{i}")})).collect::<Vec<_>>()}), "9"),
        ("body", json!({"body": "{}", "requests": [{"name": "a"}]}), "each request has its own body"),
        (
            "head",
            json!({"checks": {"bodyContains": "ok"}, "requests": [{"name": "a"}, {"name": "h", "method": "HEAD"}]}),
            "give it checks of its own",
        ),
    ];
    for (name, test, says) in schema_cases {
        let msg = refused_with(admin_tests.create(&PostParams::default(), &load_test(name, test)).await, says);
        assert!(msg.contains("request"), "{name}: {msg}");
    }
}

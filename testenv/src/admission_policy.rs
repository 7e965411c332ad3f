//! A stand-in for a chart's admission policy, as the operators'
//! `--require-admission-policy` looks for it: a ValidatingAdmissionPolicy
//! with `failurePolicy: Fail` and a binding of the same name with the
//! `Deny` action. Its one validation always passes, so installing it
//! changes nothing for the other tests on the cluster; what the guard
//! tests (issue 27) need is only that it exists, and then that it is gone.

use k8s_openapi::api::admissionregistration::v1::{ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding};
use kube::api::{DeleteParams, PostParams};
use kube::{Api, Client};
use serde_json::json;

/// Creates policy `name` over `resources` of API group `group`, and its binding.
pub async fn install(client: &Client, name: &str, group: &str, resources: &[&str]) -> Result<(), kube::Error> {
    let policy: ValidatingAdmissionPolicy = serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": [{
                "apiGroups": [group], "apiVersions": ["*"],
                "operations": ["CREATE", "UPDATE"], "resources": resources
            }]},
            "validations": [{"expression": "true"}]
        }
    }))
    .map_err(kube::Error::SerdeError)?;
    let binding: ValidatingAdmissionPolicyBinding = serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"policyName": name, "validationActions": ["Deny"]}
    }))
    .map_err(kube::Error::SerdeError)?;
    Api::<ValidatingAdmissionPolicy>::all(client.clone()).create(&PostParams::default(), &policy).await?;
    Api::<ValidatingAdmissionPolicyBinding>::all(client.clone()).create(&PostParams::default(), &binding).await?;
    Ok(())
}

/// Deletes policy `name` and its binding (either may be gone already).
pub async fn remove(client: &Client, name: &str) {
    let dp = DeleteParams::default();
    let _ = Api::<ValidatingAdmissionPolicyBinding>::all(client.clone()).delete(name, &dp).await;
    let _ = Api::<ValidatingAdmissionPolicy>::all(client.clone()).delete(name, &dp).await;
}

//! Who may do what, for the admission-policy tests: Roles and bindings for
//! an impersonated user, and a create that waits until both RBAC and the
//! policy apply (each takes effect within moments, not at once). Setup
//! failures panic: these are test steps.

use std::time::Duration;

use flotilla_testenv::wait_for;
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::api::{DynamicObject, PostParams};
use kube::{Api, Client};
use serde_json::{Value, json};

/// Role `name` in `ns` with `rules`.
pub async fn role(admin: &Client, ns: &str, name: &str, rules: Value) {
    let r: Role = serde_json::from_value(json!({"metadata": {"name": name}, "rules": rules}))
        .unwrap_or_else(|e| panic!("role {name}: {e}"));
    if let Err(e) = Api::<Role>::namespaced(admin.clone(), ns).create(&PostParams::default(), &r).await {
        panic!("creating role {ns}/{name}: {e}");
    }
}

/// Binds `kind` (`Role` or `ClusterRole`) `role` to user `user` in `ns`
/// (binding `<user>-<role>`).
pub async fn bind(admin: &Client, ns: &str, user: &str, kind: &str, role: &str) {
    let rb: RoleBinding = serde_json::from_value(json!({
        "metadata": {"name": format!("{user}-{role}")},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": role},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}]
    }))
    .unwrap_or_else(|e| panic!("binding {role}: {e}"));
    if let Err(e) = Api::<RoleBinding>::namespaced(admin.clone(), ns).create(&PostParams::default(), &rb).await {
        panic!("binding {kind} {role} to {user} in {ns}: {e}");
    }
}

/// Role `name` in `ns` with `rules`, bound to `user`.
pub async fn grant(admin: &Client, ns: &str, user: &str, name: &str, rules: Value) {
    role(admin, ns, name, rules).await;
    bind(admin, ns, user, "Role", name).await;
}

/// Creates `obj` until the answer settles: created (`refusal` None), or
/// refused with a message containing `refusal` (returned as the error).
/// Anything else (a 403 before a grant applies, a create the policy does
/// not judge yet, which is deleted again) is tried again, for up to 60 s.
pub async fn create_settled(
    api: &Api<DynamicObject>,
    obj: &DynamicObject,
    refusal: Option<&str>,
) -> Result<(), String> {
    let name = obj.metadata.name.clone().unwrap_or_default();
    wait_for("the grants and the policy to apply", Duration::from_secs(60), || {
        let (api, obj, name) = (api.clone(), obj.clone(), name.clone());
        async move {
            match api.create(&PostParams::default(), &obj).await {
                Ok(_) if refusal.is_none() => Ok::<_, String>(Some(Ok(()))),
                Ok(_) => {
                    let _ = api.delete(&name, &Default::default()).await;
                    Ok(None)
                }
                Err(kube::Error::Api(s)) => match refusal {
                    Some(needle) if s.message.contains(needle) => Ok(Some(Err(s.message))),
                    _ => Ok(None),
                },
                Err(e) => Err(e.to_string()),
            }
        }
    })
    .await
    .unwrap_or_else(|e| panic!("{name}: {e}"))
}

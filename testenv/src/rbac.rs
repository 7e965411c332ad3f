//! RBAC for tests that run an operator as a ServiceAccount with exactly the
//! rights its chart grants (or fewer, to see what it does without one):
//! rules written as the chart's templates write them, applied as a Role or a
//! ClusterRole bound to the account, and the account's kubeconfig.

use std::path::PathBuf;

use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding, RoleRef, Subject};
use kube::Api;
use kube::api::{ObjectMeta, Patch, PatchParams};

use crate::TestEnv;

/// One rule: `verbs` on `resources` of the API `groups` (`""` is core).
pub fn rule(groups: &[&str], resources: &[&str], verbs: &[&str]) -> PolicyRule {
    rule_named(groups, resources, &[], verbs)
}

/// One rule narrowed to objects by name (`resourceNames`; none: every object).
pub fn rule_named(groups: &[&str], resources: &[&str], names: &[&str], verbs: &[&str]) -> PolicyRule {
    let strings = |s: &[&str]| s.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    PolicyRule {
        api_groups: Some(strings(groups)),
        resources: Some(strings(resources)),
        resource_names: (!names.is_empty()).then(|| strings(names)),
        verbs: strings(verbs),
        ..Default::default()
    }
}

/// Where a grant holds.
#[derive(Debug, Clone, Copy)]
pub enum Scope<'a> {
    /// A ClusterRole and ClusterRoleBinding: every namespace.
    Cluster,
    /// A Role and RoleBinding in this namespace.
    Namespace(&'a str),
}

/// Grants ServiceAccount `account_ns/account` `rules` as role `name`
/// (created or replaced by server-side apply, so calling it again with
/// other rules changes the account's rights in place).
pub async fn grant(
    env: &TestEnv,
    scope: Scope<'_>,
    name: &str,
    account_ns: &str,
    account: &str,
    rules: Vec<PolicyRule>,
) {
    let client = env.client().await;
    let pp = PatchParams::apply("flotilla-tests").force();
    let subjects = Some(vec![Subject {
        kind: "ServiceAccount".into(),
        name: account.into(),
        namespace: Some(account_ns.into()),
        ..Default::default()
    }]);
    let role_ref = |kind: &str| RoleRef {
        api_group: Some("rbac.authorization.k8s.io".into()),
        kind: kind.into(),
        name: name.into(),
    };
    match scope {
        Scope::Cluster => {
            let meta = ObjectMeta { name: Some(name.into()), ..Default::default() };
            let role = ClusterRole { metadata: meta.clone(), rules: Some(rules), ..Default::default() };
            let binding = ClusterRoleBinding { metadata: meta, role_ref: role_ref("ClusterRole"), subjects };
            let roles: Api<ClusterRole> = Api::all(client.clone());
            applied(roles.patch(name, &pp, &Patch::Apply(&role)).await, "ClusterRole", name);
            let bindings: Api<ClusterRoleBinding> = Api::all(client);
            applied(bindings.patch(name, &pp, &Patch::Apply(&binding)).await, "ClusterRoleBinding", name);
        }
        Scope::Namespace(ns) => {
            let meta = ObjectMeta { name: Some(name.into()), namespace: Some(ns.into()), ..Default::default() };
            let role = Role { metadata: meta.clone(), rules: Some(rules) };
            let binding = RoleBinding { metadata: meta, role_ref: role_ref("Role"), subjects };
            let roles: Api<Role> = Api::namespaced(client.clone(), ns);
            applied(roles.patch(name, &pp, &Patch::Apply(&role)).await, "Role", name);
            let bindings: Api<RoleBinding> = Api::namespaced(client, ns);
            applied(bindings.patch(name, &pp, &Patch::Apply(&binding)).await, "RoleBinding", name);
        }
    }
}

fn applied<T>(result: Result<T, kube::Error>, what: &str, name: &str) {
    if let Err(e) = result {
        panic!("applying {what} {name}: {e}");
    }
}

/// Removes a cluster-wide grant made by [`grant`] (a namespaced one goes
/// with its namespace).
pub async fn revoke_cluster(env: &TestEnv, name: &str) {
    let client = env.client().await;
    let _ = Api::<ClusterRoleBinding>::all(client.clone()).delete(name, &Default::default()).await;
    let _ = Api::<ClusterRole>::all(client).delete(name, &Default::default()).await;
}

/// [`grant`], then a kubeconfig of the account (made if missing).
pub async fn account_with(
    env: &TestEnv,
    scope: Scope<'_>,
    name: &str,
    account_ns: &str,
    account: &str,
    rules: Vec<PolicyRule>,
) -> PathBuf {
    grant(env, scope, name, account_ns, account, rules).await;
    env.service_account_kubeconfig(account_ns, account)
        .await
        .unwrap_or_else(|e| panic!("a token of ServiceAccount {account_ns}/{account}: {e}"))
}

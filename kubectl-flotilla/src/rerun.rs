//! `kubectl flotilla rerun`: a LoadTest started again.

use std::io::Write;

use anyhow::Context;
use kube::Client;
use kube::api::{Api, DynamicObject, Patch, PatchParams};

use crate::kinds;

/// The annotation the load-tester operator starts a new run on (its value
/// changed).
pub const RERUN_ANNOTATION: &str = "flotilla.dev/rerun";

/// Sets `name`'s rerun annotation to the current time.
pub async fn rerun(client: &Client, ns: &str, name: &str, out: &mut impl Write) -> anyhow::Result<()> {
    let kind = kinds::find("loadtest")?;
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &kind.resource);
    let at = k8s_openapi::jiff::Timestamp::now().to_string();
    let patch = serde_json::json!({"metadata": {"annotations": {RERUN_ANNOTATION: at}}});
    api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map_err(crate::client::readable)
        .with_context(|| format!("setting {RERUN_ANNOTATION} on loadtest {ns}/{name}"))?;
    writeln!(
        out,
        "loadtest {ns}/{name}: rerun requested ({RERUN_ANNOTATION}={at}); the operator starts it once its --min-rerun-interval since the last start has passed (`kubectl flotilla why loadtest/{name}` says when)"
    )?;
    Ok(())
}

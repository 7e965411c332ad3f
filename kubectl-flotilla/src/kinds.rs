//! Flotilla's kinds, read from the CRDs the charts install (embedded at
//! build time, so the names a user may type — kind, plural, singular, short
//! names — are the API server's own and cannot drift).

use anyhow::{Context, bail};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::ApiResource;

/// The CRDs of `crds/`, one per kind (`tests` checks none is missing).
pub const CRDS: [(&str, &str); 6] = [
    ("copyrules.flotilla.dev.yaml", include_str!("../../crds/copyrules.flotilla.dev.yaml")),
    ("copyrequests.flotilla.dev.yaml", include_str!("../../crds/copyrequests.flotilla.dev.yaml")),
    ("podalerts.flotilla.dev.yaml", include_str!("../../crds/podalerts.flotilla.dev.yaml")),
    ("poddebuggers.flotilla.dev.yaml", include_str!("../../crds/poddebuggers.flotilla.dev.yaml")),
    ("loadtests.flotilla.dev.yaml", include_str!("../../crds/loadtests.flotilla.dev.yaml")),
    ("simpledeployments.flotilla.dev.yaml", include_str!("../../crds/simpledeployments.flotilla.dev.yaml")),
];

/// One kind: how to reach it and the names that stand for it.
#[derive(Debug, Clone)]
pub struct Kind {
    pub resource: ApiResource,
    /// Lower case: kind, plural, singular, short names.
    pub names: Vec<String>,
}

/// Every Flotilla kind, in the order `status` lists them.
pub fn all() -> anyhow::Result<Vec<Kind>> {
    CRDS.iter().map(|(file, yaml)| parse(yaml).with_context(|| format!("embedded {file}"))).collect()
}

fn parse(yaml: &str) -> anyhow::Result<Kind> {
    let crd: CustomResourceDefinition = serde_saphyr::from_str(yaml)?;
    let spec = crd.spec;
    let Some(version) = spec.versions.iter().find(|v| v.storage).or_else(|| spec.versions.first()) else {
        bail!("no version")
    };
    let resource = ApiResource {
        group: spec.group.clone(),
        version: version.name.clone(),
        api_version: format!("{}/{}", spec.group, version.name),
        kind: spec.names.kind.clone(),
        plural: spec.names.plural.clone(),
    };
    let mut names = vec![spec.names.kind.to_lowercase(), spec.names.plural.clone()];
    names.extend(spec.names.singular.clone());
    names.extend(spec.names.short_names.clone().unwrap_or_default());
    Ok(Kind { resource, names })
}

/// The kind `name` stands for (kind, plural, singular or short name, any
/// case, optionally `.flotilla.dev`-qualified, as kubectl takes them).
pub fn find(name: &str) -> anyhow::Result<Kind> {
    let wanted = name.to_lowercase();
    let wanted = wanted.strip_suffix(".flotilla.dev").unwrap_or(&wanted);
    let kinds = all()?;
    match kinds.iter().find(|k| k.names.iter().any(|n| n == wanted)) {
        Some(k) => Ok(k.clone()),
        None => {
            let known: Vec<&str> = kinds.iter().map(|k| k.resource.kind.as_str()).collect();
            bail!("{name:?} is not a Flotilla kind ({})", known.join(", "))
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn every_crd_of_the_repository_is_embedded() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../crds");
        let mut files: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".yaml"))
            .collect();
        files.sort();
        let mut embedded: Vec<String> = CRDS.iter().map(|(f, _)| f.to_string()).collect();
        embedded.sort();
        assert_eq!(files, embedded, "add the new CRD to kinds::CRDS");
    }

    #[test]
    fn kinds_are_found_by_every_name_kubectl_takes() {
        for (name, kind) in [
            ("loadtest", "LoadTest"),
            ("LoadTests", "LoadTest"),
            ("lt", "LoadTest"),
            ("pa", "PodAlert"),
            ("podalerts.flotilla.dev", "PodAlert"),
            ("cq", "CopyRequest"),
            ("CopyRule", "CopyRule"),
            ("pd", "PodDebugger"),
            ("sd", "SimpleDeployment"),
        ] {
            assert_eq!(find(name).unwrap().resource.kind, kind, "{name}");
        }
        let e = find("pods").unwrap_err().to_string();
        assert!(e.contains("not a Flotilla kind") && e.contains("LoadTest"), "{e}");
    }
}

//! Which upstream versions the test control plane is built from, and where
//! the built binaries are cached.

use std::path::PathBuf;

/// The Kubernetes release the suite is tested against. Keep k8s-openapi's
/// `v1_XX` feature in the workspace `Cargo.toml` on the same minor.
pub const DEFAULT_KUBERNETES_VERSION: &str = "1.36.3";

/// Helm 3, built with `go install helm.sh/helm/v3/cmd/helm@…`.
pub const HELM_VERSION: &str = "3.22.0";

/// Environment variable overriding [`DEFAULT_KUBERNETES_VERSION`].
pub const ENV_KUBERNETES_VERSION: &str = "FLOTILLA_K8S_VERSION";

/// Environment variable naming a directory that already holds the binaries
/// (like envtest's `KUBEBUILDER_ASSETS`): nothing is built when it is set.
pub const ENV_TEST_ASSETS: &str = "FLOTILLA_TEST_ASSETS";

/// The Kubernetes version in use: `FLOTILLA_K8S_VERSION` or the default,
/// without a leading `v`.
pub fn kubernetes_version() -> String {
    std::env::var(ENV_KUBERNETES_VERSION)
        .ok()
        .map(|v| v.trim().trim_start_matches('v').to_string())
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| DEFAULT_KUBERNETES_VERSION.to_string())
}

/// `~/.cache/flotilla` (or `$XDG_CACHE_HOME/flotilla`).
pub fn cache_root() -> PathBuf {
    if let Some(dir) = std::env::var_os("XDG_CACHE_HOME").filter(|d| !d.is_empty()) {
        return PathBuf::from(dir).join("flotilla");
    }
    let home = std::env::var_os("HOME").map(PathBuf::from).unwrap_or_else(std::env::temp_dir);
    home.join(".cache").join("flotilla")
}

/// Where the control-plane binaries of one Kubernetes version live.
pub fn kubernetes_bin_dir(version: &str) -> PathBuf {
    cache_root().join(format!("kubernetes-v{version}")).join("bin")
}

/// Where helm lives.
pub fn helm_bin_dir() -> PathBuf {
    cache_root().join(format!("helm-v{HELM_VERSION}")).join("bin")
}

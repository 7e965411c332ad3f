//! The operator a test binary tests: which build runs, how the tests start
//! it, and its CRDs. Written once for the five operators' suites; what is
//! particular to one (service-dns's AWS endpoint, pod-alert's admitted
//! loopback sinks) stays in its `tests/common`.
//!
//! Each suite names its operator once, in `tests/common/mod.rs`:
//! `pub const OPERATOR: UnderTest = UnderTest { name: "pod-alert", other_build:
//! "POD_ALERT_TEST_BINARY", built: env!("CARGO_BIN_EXE_pod-alert"), crds:
//! pod_alert::crds };`

use std::path::{Path, PathBuf};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;

use crate::TestEnv;
use crate::cluster::process::OperatorProcess;

/// One operator under test.
pub struct UnderTest {
    /// The operator's name (for messages).
    pub name: &'static str,
    /// The environment variable that names another build to run the same
    /// tests against — e.g. the one before a fix, to see an attack test fail.
    pub other_build: &'static str,
    /// This build's binary: `env!("CARGO_BIN_EXE_<name>")`.
    pub built: &'static str,
    /// The operator's CRDs.
    pub crds: fn() -> Vec<CustomResourceDefinition>,
}

impl UnderTest {
    /// The binary the tests run: [`Self::other_build`]'s when it is set.
    pub fn binary(&self) -> PathBuf {
        std::env::var_os(self.other_build).map_or_else(|| PathBuf::from(self.built), PathBuf::from)
    }

    /// Starts the operator as `kubeconfig`'s identity with text logs,
    /// watching only `namespace` when one is given (tests share clusters),
    /// then `extra` flags, and `vars` in its environment (which every flag
    /// also reads, and an older build ignores).
    pub fn start(
        &self,
        kubeconfig: &Path,
        namespace: Option<&str>,
        extra: &[&str],
        vars: &[(&str, &str)],
    ) -> OperatorProcess {
        self.start_limited(kubeconfig, namespace, extra, vars, None)
    }

    /// [`UnderTest::start`] inside `limit`'s cgroup (a pod's memory limit).
    pub fn start_limited(
        &self,
        kubeconfig: &Path,
        namespace: Option<&str>,
        extra: &[&str],
        vars: &[(&str, &str)],
        limit: Option<&crate::memory_limit::MemoryLimit>,
    ) -> OperatorProcess {
        let mut args: Vec<String> = namespace.map(|ns| format!("--watch-namespace={ns}")).into_iter().collect();
        args.push("--log-format=text".to_string());
        args.extend(extra.iter().map(|s| s.to_string()));
        let binary = self.binary();
        match OperatorProcess::start_limited(&binary, kubeconfig, &args, vars, limit) {
            Ok(p) => p,
            Err(e) => panic!("starting {} ({}): {e}", self.name, binary.display()),
        }
    }

    /// Installs the operator's CRDs and waits until they are established.
    pub async fn install_crds(&self, env: &TestEnv) {
        if let Err(e) = crate::harness::install_crds(&env.client().await, &(self.crds)()).await {
            panic!("installing {}'s CRDs: {e:#}", self.name);
        }
    }
}

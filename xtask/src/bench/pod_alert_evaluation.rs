//! `cargo xtask bench pod-alert-evaluation`: what one pod change costs a
//! cluster-wide PodAlert at Kubernetes' limits (issue 28), measured in
//! process by pod-alert's example `evaluation` (its doc says how), built
//! with the release profile as the operator's image is. No cluster needed.

use crate::util::{cargo, run_cmd, say};

pub fn run() -> anyhow::Result<()> {
    say("running pod-alert's evaluation benchmark (release build)");
    run_cmd(cargo().args(["run", "--locked", "--release", "-p", "pod-alert", "--example", "evaluation"]))
}

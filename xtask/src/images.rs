//! `cargo xtask images`: OCI images without Docker. Each operator's image is
//! its release binary (built by `cargo xtask dist`, the Dockerfile's
//! command) on a distroless-equivalent base, named exactly as its chart
//! renders it by default; plus the node's own images (pause, CoreDNS, the
//! toolbox). Archives go to `~/.cache/flotilla/images/`; the one-node
//! cluster imports every one when it starts, and this command imports them
//! into a running one. Prints each reference, one per line, on stdout.
//!
//! `cargo xtask test` packs the same build in the dev profile instead
//! ([`Profile::Dev`]: the Dockerfile's command without `--release`), the
//! profile its process tests run, debug assertions and overflow checks on.
//! Its dependencies are the tests' own build, so it costs the workspace
//! crates only; the release build of the whole graph (5 minutes warm, 16
//! cold on two cores) was the longest step of the test command while
//! testing the same code. `images`, `demo`, `dist` and the benches build
//! release.

use anyhow::Context;
use flotilla_testenv::build::node_assets::NodeAssets;
use flotilla_testenv::cluster::node::images::{build, build_system_images, import, operator_spec};
use flotilla_testenv::cluster::node::{self, NodePaths};

use crate::dist::Profile;
use crate::util::say;

pub fn run(only: &[String]) -> anyhow::Result<()> {
    run_with(only, Profile::Release)
}

/// The images of `only` (all when empty), carrying the `profile` build.
pub fn run_with(only: &[String], profile: Profile) -> anyhow::Result<()> {
    let selected: Vec<String> =
        crate::dist::images()?.into_iter().filter(|i| only.is_empty() || only.contains(i)).collect();
    if let Some(unknown) = only.iter().find(|o| !selected.contains(o)) {
        anyhow::bail!("no image named {unknown:?}; known: {}", crate::dist::images()?.join(", "));
    }
    let dir = crate::dist::build(&selected, profile)?;
    let mut built = Vec::new();
    for op in selected {
        let reference = if op == crate::dist::LOADGEN {
            flotilla_e2e::loadgen_image_reference()?
        } else {
            flotilla_e2e::chart_image_reference(&op)?
        };
        let version = reference.rsplit(':').next().unwrap_or_default().to_string();
        let binary = dir.join(&op);
        let spec = operator_spec(&op, &binary, &reference, &version)?;
        built.push(build(&spec).with_context(|| format!("building the image of {op}"))?);
    }
    let node_assets = NodeAssets::locate()?;
    built.extend(build_system_images(&node_assets)?);
    for image in &built {
        say(&format!(
            "image {} ({:.1} MiB, {})",
            image.references.join(", "),
            image.size as f64 / 1_048_576.0,
            image.manifest_digest
        ));
    }
    let paths = NodePaths::default();
    if node::running(&paths).is_some() {
        let archives: Vec<_> = built.iter().map(|i| i.archive.clone()).collect();
        import(&node_assets.bin("ctr"), &paths.containerd_socket(), &archives)?;
        say("imported into the running one-node cluster's containerd (namespace k8s.io)");
    } else {
        say("no one-node cluster runs: `cargo xtask cluster up` imports these when it starts");
    }
    for image in &built {
        for r in &image.references {
            println!("{r}");
        }
    }
    Ok(())
}

//! The krew manifest template, filled as the release workflow fills it, is
//! a krew Plugin whose platforms are exactly the archives the workflow
//! builds.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::path::Path;

use serde_json::Value;

fn read(path: &str) -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(path)).unwrap()
}

#[test]
fn the_krew_manifest_names_every_archive_the_release_builds() {
    // The release job's matrix: the archives it attaches.
    let release: Value = serde_saphyr::from_str(&read("../.github/workflows/release.yml")).unwrap();
    let matrix = release["jobs"]["kubectl-plugin"]["strategy"]["matrix"]["include"].as_array().unwrap();
    let mut built: Vec<String> =
        matrix.iter().map(|m| format!("{}-{}", m["os"].as_str().unwrap(), m["arch"].as_str().unwrap())).collect();
    built.sort();

    let mut filled = read("krew.yaml").replace("{{TAG}}", "v1.2.3").replace("{{OWNER}}", "acme");
    for p in &built {
        filled = filled.replace(&format!("{{{{SHA256_{p}}}}}"), &"ab".repeat(32));
    }
    assert!(!filled.contains("{{"), "a placeholder the workflow does not fill:\n{filled}");
    let manifest: Value = serde_saphyr::from_str(&filled).unwrap();
    assert_eq!(manifest["kind"], "Plugin");
    assert_eq!(manifest["metadata"]["name"], "flotilla", "installed as `kubectl flotilla`");
    assert_eq!(manifest["spec"]["version"], "v1.2.3");
    let mut listed = Vec::new();
    for p in manifest["spec"]["platforms"].as_array().unwrap() {
        let labels = &p["selector"]["matchLabels"];
        let platform = format!("{}-{}", labels["os"].as_str().unwrap(), labels["arch"].as_str().unwrap());
        assert_eq!(
            p["uri"].as_str().unwrap(),
            format!("https://github.com/acme/flotilla/releases/download/v1.2.3/kubectl-flotilla-{platform}.tar.gz")
        );
        assert_eq!(p["bin"], "kubectl-flotilla", "the archive holds the binary at its root");
        assert_eq!(p["sha256"].as_str().unwrap().len(), 64);
        listed.push(platform);
    }
    listed.sort();
    assert_eq!(listed, built);
}

//! The release's chart packaging (what `release.yml` runs on a tag, through
//! `cargo xtask package-charts`) for a fake tag: every chart, the umbrella's
//! embedded subcharts and the library chart inside them carry the version,
//! and the images the charts render by default are the ones the release
//! pushes (`docker-bake.hcl` tags with `TAG` = that version).
#![allow(clippy::expect_used, clippy::unwrap_used)]

use flotilla_e2e::release::{package_charts, release_version, versioned_chart_yaml};
use flotilla_e2e::{UMBRELLA, helm_ok, operators, yaml_documents};
use flotilla_testenv::Assets;

#[test]
fn a_tag_must_name_the_workspace_version() {
    let cargo = std::fs::read_to_string(flotilla_e2e::root().join("Cargo.toml")).unwrap();
    let workspace = cargo
        .lines()
        .skip_while(|l| l.trim() != "[workspace.package]")
        .find_map(|l| l.strip_prefix("version = "))
        .unwrap()
        .trim_matches('"');
    assert_eq!(release_version(&format!("v{workspace}")).unwrap(), workspace);
    let e = release_version("v9.8.7").unwrap_err().to_string();
    assert!(e.contains("does not name the workspace version"), "{e}");
    assert!(release_version(workspace).is_err(), "a tag without v");
}

#[test]
fn every_version_line_of_a_chart_is_rewritten() {
    let chart = "apiVersion: v2\nname: x\nversion: 0.1.0\nappVersion: \"0.1.0\"\ndependencies:\n  - name: flotilla-common\n    version: 0.1.0\n    repository: file://../flotilla-common\n  - version: 0.1.0\n    name: y\n";
    let out = versioned_chart_yaml(chart, "9.8.7");
    assert_eq!(out.matches("9.8.7").count(), 4, "{out}");
    assert!(!out.contains("0.1.0"), "{out}");
    assert!(out.contains("appVersion: \"9.8.7\"") && out.contains("  - version: 9.8.7"), "{out}");

    // The Artifact Hub annotations: a CRD's version stays, the images follow.
    let annotated = format!(
        "{chart}annotations:\n  artifacthub.io/crds: |\n    - kind: X\n      version: v1alpha1\n  artifacthub.io/images: |\n    - image: ghcr.io/o/flotilla-x:0.1.0\n      name: flotilla-x\n"
    );
    let out = versioned_chart_yaml(&annotated, "9.8.7");
    assert!(out.contains("      version: v1alpha1\n"), "{out}");
    assert!(out.contains("    - image: ghcr.io/o/flotilla-x:9.8.7\n"), "{out}");
    assert!(!out.contains("0.1.0"), "{out}");
}

#[test]
fn packaged_charts_for_a_fake_tag_agree_on_one_version() {
    let version = "9.8.7";
    let out = std::env::temp_dir().join(format!("flotilla-release-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&out);
    let helm = Assets::helm().unwrap_or_else(|e| panic!("{e} (cargo xtask setup builds helm)"));
    let packages = package_charts(&helm, version, &out).unwrap();
    let mut expected: Vec<String> = operators().unwrap();
    expected.push(UMBRELLA.to_string());
    let names: Vec<String> = packages.iter().map(|p| p.file_name().unwrap().to_string_lossy().into_owned()).collect();
    assert_eq!(names, expected.iter().map(|c| format!("{c}-{version}.tgz")).collect::<Vec<_>>());

    // The umbrella as published: every operator enabled, default images.
    let umbrella = packages.last().unwrap().display().to_string();
    let mut args: Vec<String> = ["template", "rel", umbrella.as_str(), "--namespace", "ops"].map(String::from).to_vec();
    for op in operators().unwrap() {
        args.extend(["--set".to_string(), format!("{op}.enabled=true")]);
    }
    args.extend(["--set".to_string(), "service-dns.route53.domainName=example.com".to_string()]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let docs = yaml_documents(&helm_ok(None, &args).unwrap()).unwrap();
    let bake = std::fs::read_to_string(flotilla_e2e::root().join("docker-bake.hcl")).unwrap();
    for op in operators().unwrap() {
        let d = docs
            .iter()
            .find(|d| d["kind"] == "Deployment" && d["metadata"]["labels"]["app.kubernetes.io/name"] == op.as_str())
            .unwrap_or_else(|| panic!("no Deployment of {op}"));
        // The subchart embedded in the umbrella, and its library chart, are version X.Y.Z.
        assert_eq!(d["metadata"]["labels"]["helm.sh/chart"], format!("{op}-{version}").as_str(), "{op}");
        assert_eq!(d["metadata"]["labels"]["app.kubernetes.io/version"], version, "{op}");
        // The image the release pushes: bake's tag with TAG = X.Y.Z.
        let image = d["spec"]["template"]["spec"]["containers"][0]["image"].as_str().unwrap();
        let tag = format!("\"${{REGISTRY}}/flotilla-{op}:${{TAG}}\"");
        assert!(bake.contains(&tag), "docker-bake.hcl does not tag {tag}");
        assert_eq!(image, format!("ghcr.io/flotilla-dev/flotilla-{op}:{version}"), "{op}");
    }
    let lt = docs
        .iter()
        .find(|d| d["kind"] == "Deployment" && d["metadata"]["labels"]["app.kubernetes.io/name"] == "load-tester")
        .unwrap();
    let args = lt["spec"]["template"]["spec"]["containers"][0]["args"].to_string();
    assert!(args.contains(&format!("--loadgen-image=ghcr.io/flotilla-dev/flotilla-loadgen:{version}")), "{args}");
    assert!(bake.contains("\"${REGISTRY}/flotilla-loadgen:${TAG}\""));
    let _ = std::fs::remove_dir_all(&out);
}
